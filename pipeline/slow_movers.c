/*
 * slow_movers.c — the residual side of slow_movers.h: a variable-projection
 * least-squares fit (the flux solved in closed form for every trial
 * position, the rest by damped Gauss-Newton steps with numeric
 * derivatives) of the residual around one detection, with a new source
 * alone or with a mover and its copies on a known track; and the verdict
 * on a stack fit's mover (slow_stack.c has the fit).
 *
 * Host code, run only on frames whose history still holds frames stored
 * without object removal (the N frames after warm-up or a reset), for the
 * few bright point detections; a fit costs a few milliseconds.
 */
#include "slow_movers.h"

#include <math.h>
#include <string.h>

#define WIN_MAX SS_SLOW_WIN_MAX
#define NPAR 5                      /* x, y, ln(s/psf_sigma), vx, vy (flux, offset solved) */
#define LN_SIGMA_MAX 1.1            /* the source's sigma within psf_sigma·e^(±this) */
#define MAX_ITER 40
#define FD_STEP 1e-3                /* numeric derivative step, px (px per frame) */
#define MAX_OFFSET SS_SLOW_MAX_OFFSET
#define CLIP 5.0                    /* window pixels brighter than this·noise outside the core go */
#define MIN_TRAVEL 1.0              /* v·(weighted age) at least this·psf_sigma: copies apart */

/* The residual pixels of the window: valid, and not bright (> CLIP·noise)
 * outside the source's core (other objects, cosmic rays, hot pixels). */
typedef struct win {
    int x0, y0, side;               /* window origin and side */
    int n;
    int ix[(2 * WIN_MAX + 1) * (2 * WIN_MAX + 1)], iy[(2 * WIN_MAX + 1) * (2 * WIN_MAX + 1)];
    double r[(2 * WIN_MAX + 1) * (2 * WIN_MAX + 1)];
} win_t;

typedef struct model {
    const ss_slow_hist_t *h;
    double psf_sigma;
    int mover;                      /* 1: with the history's copies; 0: a new source */
} model_t;

/* The source's sigma for θ. */
static double model_sigma(const model_t *m, const double th[NPAR])
{
    return m->psf_sigma * exp(SS_CLAMP(th[2], -LN_SIGMA_MAX, LN_SIGMA_MAX));
}

/* A pixel-integrated Gaussian source at (cx, cy) of weight wgt, added into
 * g over the part of the window's side×side box within 6 sigma of it
 * (k = 1/(√2·sigma); beyond, a pixel holds less than 1e-9 of the flux):
 * a copy touches ~150 pixels, not the whole box. */
static void add_source(const win_t *W, double k, double cx, double cy, double wgt, double *g)
{
    const double reach = 6.0 / (sqrt(2.0) * k);
    const int i0 = SS_MAX((int)floor(cx - reach) - W->x0, 0);
    const int i1 = SS_MIN((int)ceil(cx + reach) - W->x0, W->side - 1);
    const int j0 = SS_MAX((int)floor(cy - reach) - W->y0, 0);
    const int j1 = SS_MIN((int)ceil(cy + reach) - W->y0, W->side - 1);
    double gx[2 * WIN_MAX + 1], gy[2 * WIN_MAX + 1];
    for (int i = i0; i <= i1; i++) {
        const double X = W->x0 + i;
        gx[i] = 0.5 * (erf((X + 0.5 - cx) * k) - erf((X - 0.5 - cx) * k));
    }
    for (int j = j0; j <= j1; j++) {
        const double Y = W->y0 + j;
        gy[j] = wgt * 0.5 * (erf((Y + 0.5 - cy) * k) - erf((Y - 0.5 - cy) * k));
    }
    for (int j = j0; j <= j1; j++)
        for (int i = i0; i <= i1; i++)
            g[j * W->side + i] += gy[j] * gx[i];
}

/* The model of unit flux for θ on the window's box. */
static void model_box(const model_t *m, const win_t *W, const double th[NPAR], double *g)
{
    const double k = 1.0 / (sqrt(2.0) * model_sigma(m, th));
    memset(g, 0, (size_t)W->side * (size_t)W->side * sizeof g[0]);
    add_source(W, k, th[0], th[1], 1.0, g);
    if (!m->mover)
        return;
    for (int q = 0; q < m->h->n; q++)
        if (m->h->unscreened[q] && m->h->a[q] != 0.0)
            add_source(W, k, th[0] - th[3] * m->h->tau[q] + m->h->fx[q],
                       th[1] - th[4] * m->h->tau[q] + m->h->fy[q], -m->h->a[q], g);
}

/* The residual vector e = r - f·g - c at the window's pixels with the
 * best flux f and offset c (the background the prediction left), and its
 * sum of squares (returned); *flux gets f. */
static double residuals(const model_t *m, const win_t *W, const double th[NPAR], double *box,
                        double *e, double *flux)
{
    model_box(m, W, th, box);
    double rg = 0.0, gg = 0.0, g1 = 0.0, r1 = 0.0;
    for (int p = 0; p < W->n; p++) {
        const double g = box[W->iy[p] * W->side + W->ix[p]];
        rg += W->r[p] * g;
        gg += g * g;
        g1 += g;
        r1 += W->r[p];
    }
    const double det = gg * W->n - g1 * g1;
    const double f = det > 0.0 ? (rg * W->n - g1 * r1) / det : 0.0;
    const double c = (r1 - f * g1) / W->n;
    double rss = 0.0;
    for (int p = 0; p < W->n; p++) {
        e[p] = W->r[p] - f * box[W->iy[p] * W->side + W->ix[p]] - c;
        rss += e[p] * e[p];
    }
    *flux = f;
    return rss;
}

/* Damped Gauss-Newton (Levenberg-Marquardt) from th; the first npar
 * parameters move. Returns the final RSS; th and *flux updated. */
static double fit(const model_t *m, const win_t *W, int npar, double th[NPAR], double *flux)
{
    static _Thread_local double box[(2 * WIN_MAX + 1) * (2 * WIN_MAX + 1)];
    static _Thread_local double e[(2 * WIN_MAX + 1) * (2 * WIN_MAX + 1)];
    static _Thread_local double e2[(2 * WIN_MAX + 1) * (2 * WIN_MAX + 1)];
    static _Thread_local double J[NPAR][(2 * WIN_MAX + 1) * (2 * WIN_MAX + 1)];
    double f, rss = residuals(m, W, th, box, e, &f), lambda = 1e-3;
    for (int it = 0; it < MAX_ITER; it++) {
        for (int a = 0; a < npar; a++) {
            double t2[NPAR];
            memcpy(t2, th, sizeof t2);
            t2[a] += FD_STEP;
            double f2;
            (void)residuals(m, W, t2, box, e2, &f2);
            for (int p = 0; p < W->n; p++)
                J[a][p] = (e2[p] - e[p]) / FD_STEP;
        }
        double A[NPAR * NPAR] = { 0 }, g[NPAR] = { 0 };
        for (int a = 0; a < npar; a++) {
            for (int b = a; b < npar; b++) {
                double s = 0.0;
                for (int p = 0; p < W->n; p++)
                    s += J[a][p] * J[b][p];
                A[a * npar + b] = A[b * npar + a] = s;
            }
            for (int p = 0; p < W->n; p++)
                g[a] -= J[a][p] * e[p];
        }
        int improved = 0;
        for (int tries = 0; tries < 8 && !improved; tries++) {
            double M[NPAR * NPAR], d[NPAR];
            memcpy(M, A, sizeof M);
            memcpy(d, g, sizeof d);
            for (int a = 0; a < npar; a++)
                M[a * npar + a] *= 1.0 + lambda;
            if (ss_solve_dense(M, d, npar) != 0) {
                lambda *= 10.0;
                continue;
            }
            double t2[NPAR], f2;
            memcpy(t2, th, sizeof t2);
            for (int a = 0; a < npar; a++)
                t2[a] += d[a];
            const double r2 = residuals(m, W, t2, box, e2, &f2);
            if (r2 < rss) {
                const double gain = rss - r2;
                memcpy(th, t2, sizeof t2);
                memcpy(e, e2, (size_t)W->n * sizeof e[0]);
                rss = r2;
                f = f2;
                lambda = fmax(lambda * 0.3, 1e-7);
                improved = 1;
                if (gain < 1e-6 * rss)
                    it = MAX_ITER;
            } else {
                lambda *= 10.0;
            }
        }
        if (!improved)
            break;
    }
    *flux = f;
    return rss;
}

/* The window around (x0, y0) and its valid residual pixels. */
static void window(const float *r, int w, int h, double x0, double y0, int R, double core,
                   double clip, win_t *W)
{
    W->side = 2 * R + 1;
    W->x0 = (int)lround(x0) - R;
    W->y0 = (int)lround(y0) - R;
    W->n = 0;
    for (int j = 0; j < W->side; j++)
        for (int i = 0; i < W->side; i++) {
            const int X = W->x0 + i, Y = W->y0 + j;
            if (X < 0 || Y < 0 || X >= w || Y >= h)
                continue;
            const float v = r[(size_t)Y * (size_t)w + (size_t)X];
            if (!isfinite(v) || (v > clip && hypot(X - x0, Y - y0) > core))
                continue;
            W->ix[W->n] = i;
            W->iy[W->n] = j;
            W->r[W->n] = v;
            W->n++;
        }
}

/* τ̄: the age of the unscreened frames, weighted by a_k (0 when none). */
static double mean_age(const ss_slow_hist_t *h)
{
    double at = 0.0, a = 0.0;
    for (int q = 0; q < h->n; q++)
        if (h->unscreened[q]) {
            at += h->a[q] * h->tau[q];
            a += h->a[q];
        }
    return a != 0.0 ? at / a : 0.0;
}

/* The window of a fit around (x0, y0): its radius covers the copies of
 * the oldest unscreened frame at SS_SLOW_VMAX; pixels above clip outside
 * the core left out. 0, or -1 when there is
 * nothing to fit (no unscreened frame, no noise, too few pixels). */
static int fit_window(const float *r, int w, int h, double x0, double y0, double psf_sigma,
                      double noise, double clip, const ss_slow_hist_t *hist, win_t *W)
{
    double tau_max = 0.0;
    for (int q = 0; q < hist->n; q++)
        if (hist->unscreened[q])
            tau_max = fmax(tau_max, hist->tau[q]);
    if (!(tau_max > 0.0) || !(psf_sigma > 0.0) || !(noise > 0.0))
        return -1;
    const int R = SS_MIN((int)ceil(3.0 * psf_sigma + SS_SLOW_VMAX * tau_max), WIN_MAX);
    window(r, w, h, x0, y0, R, 3.0 * psf_sigma + MAX_OFFSET, clip, W);
    return W->n < 16 ? -1 : 0;
}

double ss_slow_source_rss(const float *r, int w, int h, const ss_slow_fit_t *fit,
                          double psf_sigma, double noise, const ss_slow_hist_t *hist)
{
    static _Thread_local double box[(2 * WIN_MAX + 1) * (2 * WIN_MAX + 1)];
    static _Thread_local double e[(2 * WIN_MAX + 1) * (2 * WIN_MAX + 1)];
    static _Thread_local win_t W;
    if (fit_window(r, w, h, fit->x, fit->y, psf_sigma, noise, CLIP * noise, hist, &W) != 0)
        return NAN;
    const model_t fresh = { hist, psf_sigma, 0 };
    const double th[NPAR] = { fit->x, fit->y, log(fit->sigma / psf_sigma), 0.0, 0.0 };
    double f;
    return residuals(&fresh, &W, th, box, e, &f) / W.n;
}

int ss_slow_mover_fit(const float *r, int w, int h, double x0, double y0, double psf_sigma,
                      double noise, const ss_slow_hist_t *hist, const ss_slow_stack_t *st,
                      ss_slow_fit_t *out)
{
    static _Thread_local double box[(2 * WIN_MAX + 1) * (2 * WIN_MAX + 1)];
    static _Thread_local double e[(2 * WIN_MAX + 1) * (2 * WIN_MAX + 1)];
    static _Thread_local win_t W;
    memset(out, 0, sizeof *out);
    ss_slow_stack_fit_t sf;
    if (ss_slow_stack_fit(st, x0, y0, psf_sigma, &sf) != 0 ||
        fit_window(r, w, h, sf.x, sf.y, psf_sigma, noise, CLIP * noise, hist, &W) != 0)
        return 0;
    const model_t mover = { hist, psf_sigma, 1 };
    const model_t fresh = { hist, psf_sigma, 0 };
    const double th[NPAR] = { sf.x, sf.y, log(sf.sigma / psf_sigma), sf.vx, sf.vy };
    double f;
    out->rss_new = residuals(&fresh, &W, th, box, e, &f);
    out->rss = residuals(&mover, &W, th, box, e, &f);
    out->npix = W.n;
    out->x = sf.x;
    out->y = sf.y;
    out->vx = sf.vx;
    out->vy = sf.vy;
    out->sigma = sf.sigma;
    out->flux = sf.flux;
    const double speed = hypot(sf.vx, sf.vy);
    out->ok = sf.gain - sf.gain_new >= SS_SLOW_GAIN * sf.noise * sf.noise &&
              speed <= SS_SLOW_VMAX && speed * mean_age(hist) >= MIN_TRAVEL * psf_sigma &&
              sf.flux > 0.0 && hypot(sf.x - x0, sf.y - y0) <= MAX_OFFSET &&
              out->rss < out->rss_new;
    return out->ok;
}

/* The window of a track fit: the source's core and its copies at the
 * fixed offsets of hist (a copy's 3 sigma beyond the farthest). */
static int track_window(const float *r, int w, int h, double x0, double y0, double psf_sigma,
                        double noise, const ss_slow_hist_t *hist, win_t *W)
{
    double reach = 0.0;
    for (int q = 0; q < hist->n; q++)
        if (hist->unscreened[q])
            reach = fmax(reach, hypot(hist->fx[q], hist->fy[q]));
    if (!(psf_sigma > 0.0) || !(noise > 0.0))
        return -1;
    const int R = SS_MIN((int)ceil(3.0 * psf_sigma + MAX_OFFSET + reach), WIN_MAX);
    window(r, w, h, x0, y0, R, 3.0 * psf_sigma + MAX_OFFSET, CLIP * noise, W);
    return W->n < 16 ? -1 : 0;
}

int ss_slow_track_fit(const float *r, int w, int h, double x0, double y0, double lobe_flux,
                      double psf_sigma, double noise, const ss_slow_hist_t *hist,
                      ss_slow_fit_t *out)
{
    memset(out, 0, sizeof *out);
    static _Thread_local win_t W;
    if (track_window(r, w, h, x0, y0, psf_sigma, noise, hist, &W) != 0)
        return 0;
    double rss0 = 0.0, mean = 0.0;          /* no source: the offset alone */
    for (int p = 0; p < W.n; p++)
        mean += W.r[p] / W.n;
    for (int p = 0; p < W.n; p++)
        rss0 += (W.r[p] - mean) * (W.r[p] - mean);
    const model_t mover = { hist, psf_sigma, 1 };
    double th[NPAR] = { x0, y0, 0.0, 0.0, 0.0 }, f;
    out->rss = fit(&mover, &W, 3, th, &f);
    out->rss_new = rss0;
    out->npix = W.n;
    out->x = th[0];
    out->y = th[1];
    out->sigma = model_sigma(&mover, th);
    out->flux = f;
    out->ok = out->rss < rss0 && f > 0.0 && f <= SS_SLOW_FLUX_RATIO * lobe_flux &&
              hypot(th[0] - x0, th[1] - y0) <= MAX_OFFSET;
    return out->ok;
}
