/*
 * slow_stack.c — the stack fit of slow_movers.h: where a slow mover is,
 * and how fast it goes, from the current frame and the history frames
 * that still hold it, one by one.
 *
 * Every window pixel x has K values d_q(x), one per frame. The static
 * scene is the same in all of them up to the frame's offset (subtracted),
 * its gain b_q and its fractional offset φ_q (the scene sampled at x - φ_q):
 *   d_q(x) = α(x) + β(x)·b_q + γ(x)·φ_q + (second order in φ_q) + mover
 * with α, β, γ free per pixel. Projecting every pixel's K-vector on the
 * complement of the nuisance columns U (K×r, orthonormal: 1, b, φx, φy,
 * φx², φxφy, φy², those that are not degenerate) removes the static scene
 * whatever it is; what remains, e(x) = (I - UUᵀ)d(x), is the moving part.
 * A mover of flux f, track p - v·τ_q, width s puts m_q(x) =
 * f·G_s(x - p + v·τ_q - φ_q) into frame q; its least-squares flux and the
 * drop of the sum of squares it brings are
 *   f = Σ_x eᵀm / Σ_x mᵀ(I - UUᵀ)m,   gain = (Σ_x eᵀm)² / Σ_x mᵀ(I - UUᵀ)m,
 * which cost one pass over the pixels each copy touches. The gain is
 * maximised over (p, s, v): a grid of speeds, then a Nelder-Mead simplex;
 * pixels whose K values the model leaves far off (stars whose width
 * changed, cosmic rays) are dropped once and the simplex run again.
 * The same with the current frame alone (a source the history never
 * saw) is the alternative the mover has to beat.
 */
#include "slow_movers.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define NCOL 7                      /* nuisance columns tried */
#define MIN_DOF 4                   /* K - r at least this */
#define COL_TOL 1e-3                /* a column whose unexplained norm is below this share
                                     * of its own is degenerate (e.g. φ on a static camera) */
#define REACH 4.0                   /* a copy is drawn this many sigma out */
#define LN_SIGMA_MAX 1.1            /* the width within psf_sigma·e^(±this) */
#define V_GRID 0.15                 /* px per frame: the speed grid's step (at most 0.11 px
                                     * per frame off, copies 10 frames old about a PSF
                                     * width: within the simplex's reach) */
#define CHI_CLIP 8.0                /* a pixel goes when its χ² exceeds dof + this·√(2 dof) */
#define NM_EVALS 400                /* Nelder-Mead evaluations at most */

typedef struct stk {
    const ss_slow_stack_t *st;
    int K, P, r;
    double psf_sigma;
    double *e;                      /* K×P: the moving part of the data */
    double *U;                      /* K×r: the nuisance columns, U[q·r + j] */
    uint8_t *ok;                    /* P: valid in every frame, not clipped */
    double *acc;                    /* P×(1 + r): Σ m², Uᵀm per pixel */
} stk_t;

/* 0.5·(erf((i + 0.5 - c)·k) - erf((i - 0.5 - c)·k)) for i in [i0, i1]:
 * the pixel-integrated profile of a unit Gaussian at c (k = 1/(√2·s)). */
static void profile(double c, double k, int i0, int i1, double *g)
{
    double lo = erf((i0 - 0.5 - c) * k);
    for (int i = i0; i <= i1; i++) {
        const double hi = erf((i + 0.5 - c) * k);
        g[i] = 0.5 * (hi - lo);
        lo = hi;
    }
}

/* Σ_x eᵀm into *num and Σ_x mᵀ(I - UUᵀ)m into *den for the mover of θ =
 * (px, py, ln(s/psf_sigma), vx, vy) in window pixels, drawn in the first
 * nk frames (K: the mover; 1: a new source). */
static void eval(stk_t *S, const double th[5], int nk, double *num, double *den)
{
    const ss_slow_stack_t *st = S->st;
    const int side = st->side, r = S->r, stride = 1 + r;
    const double s = S->psf_sigma * exp(SS_CLAMP(th[2], -LN_SIGMA_MAX, LN_SIGMA_MAX));
    const double k = 1.0 / (sqrt(2.0) * s), reach = REACH * s;
    double cx[SS_SLOW_STACK_MAX], cy[SS_SLOW_STACK_MAX];
    int bi0 = side, bi1 = -1, bj0 = side, bj1 = -1;
    for (int q = 0; q < nk; q++) {
        cx[q] = th[0] - th[3] * st->tau[q] + st->fx[q] - st->x0;
        cy[q] = th[1] - th[4] * st->tau[q] + st->fy[q] - st->y0;
        bi0 = SS_MIN(bi0, SS_MAX((int)floor(cx[q] - reach), 0));
        bi1 = SS_MAX(bi1, SS_MIN((int)ceil(cx[q] + reach), side - 1));
        bj0 = SS_MIN(bj0, SS_MAX((int)floor(cy[q] - reach), 0));
        bj1 = SS_MAX(bj1, SS_MIN((int)ceil(cy[q] + reach), side - 1));
    }
    *num = *den = 0.0;
    if (bi1 < bi0 || bj1 < bj0)
        return;
    for (int j = bj0; j <= bj1; j++)
        memset(S->acc + ((size_t)j * side + bi0) * stride, 0,
               (size_t)(bi1 - bi0 + 1) * stride * sizeof S->acc[0]);
    double gx[2 * SS_SLOW_WIN_MAX + 1], gy[2 * SS_SLOW_WIN_MAX + 1];
    for (int q = 0; q < nk; q++) {
        const int i0 = SS_MAX((int)floor(cx[q] - reach), 0), i1 = SS_MIN((int)ceil(cx[q] + reach), side - 1);
        const int j0 = SS_MAX((int)floor(cy[q] - reach), 0), j1 = SS_MIN((int)ceil(cy[q] + reach), side - 1);
        if (i1 < i0 || j1 < j0)
            continue;
        profile(cx[q], k, i0, i1, gx);
        profile(cy[q], k, j0, j1, gy);
        const double *eq = S->e + (size_t)q * S->P, *uq = S->U + (size_t)q * r;
        for (int j = j0; j <= j1; j++)
            for (int i = i0; i <= i1; i++) {
                const int x = j * side + i;
                if (!S->ok[x])
                    continue;
                const double m = gy[j] * gx[i];
                double *a = S->acc + (size_t)x * stride;
                *num += eq[x] * m;
                a[0] += m * m;
                for (int t = 0; t < r; t++)
                    a[1 + t] += uq[t] * m;
            }
    }
    for (int j = bj0; j <= bj1; j++)
        for (int i = bi0; i <= bi1; i++) {
            const int x = j * side + i;
            if (!S->ok[x])
                continue;
            const double *a = S->acc + (size_t)x * stride;
            double d = a[0];
            for (int t = 0; t < r; t++)
                d -= a[1 + t] * a[1 + t];
            *den += d;
        }
}

/* The gain of θ (0 unless its flux is positive). */
static double gain(stk_t *S, const double th[5], int nk)
{
    double num, den;
    eval(S, th, nk, &num, &den);
    return num > 0.0 && den > 0.0 ? num * num / den : 0.0;
}

/* Nelder-Mead on -gain over the first np parameters of th, from steps
 * step[]; th takes the best vertex. Returns its gain. */
static double simplex(stk_t *S, double th[5], const double *step, int np, int nk)
{
    double v[6][5], fv[6];
    for (int a = 0; a <= np; a++) {
        memcpy(v[a], th, sizeof v[a]);
        if (a > 0)
            v[a][a - 1] += step[a - 1];
        fv[a] = -gain(S, v[a], nk);
    }
    for (int evals = np + 1; evals < NM_EVALS;) {
        int hi = 0, lo = 0;
        for (int a = 1; a <= np; a++) {
            if (fv[a] > fv[hi])
                hi = a;
            if (fv[a] < fv[lo])
                lo = a;
        }
        int nh = lo;                                /* the second highest */
        for (int a = 0; a <= np; a++)
            if (a != hi && fv[a] > fv[nh])
                nh = a;
        double spread = 0.0;
        for (int a = 0; a <= np; a++)
            for (int t = 0; t < np; t++)
                spread = fmax(spread, fabs(v[a][t] - v[lo][t]));
        if (spread < 1e-3)
            break;
        double c[5], xr[5], xt[5];
        memcpy(c, th, sizeof c);
        for (int t = 0; t < np; t++) {
            c[t] = 0.0;
            for (int a = 0; a <= np; a++)
                if (a != hi)
                    c[t] += v[a][t] / np;
        }
        memcpy(xr, c, sizeof xr);
        for (int t = 0; t < np; t++)
            xr[t] = 2.0 * c[t] - v[hi][t];
        const double fr = -gain(S, xr, nk);
        evals++;
        if (fr < fv[lo]) {                          /* expand */
            memcpy(xt, c, sizeof xt);
            for (int t = 0; t < np; t++)
                xt[t] = 3.0 * c[t] - 2.0 * v[hi][t];
            const double fe = -gain(S, xt, nk);
            evals++;
            if (fe < fr) {
                memcpy(v[hi], xt, sizeof xt);
                fv[hi] = fe;
            } else {
                memcpy(v[hi], xr, sizeof xr);
                fv[hi] = fr;
            }
        } else if (fr < fv[nh]) {                   /* reflect */
            memcpy(v[hi], xr, sizeof xr);
            fv[hi] = fr;
        } else {                                    /* contract */
            memcpy(xt, c, sizeof xt);
            for (int t = 0; t < np; t++)
                xt[t] = 0.5 * (c[t] + v[hi][t]);
            const double fc = -gain(S, xt, nk);
            evals++;
            if (fc < fv[hi]) {
                memcpy(v[hi], xt, sizeof xt);
                fv[hi] = fc;
            } else {                                /* shrink towards the best */
                for (int a = 0; a <= np; a++)
                    if (a != lo) {
                        for (int t = 0; t < np; t++)
                            v[a][t] = 0.5 * (v[a][t] + v[lo][t]);
                        fv[a] = -gain(S, v[a], nk);
                        evals++;
                    }
            }
        }
    }
    int lo = 0;
    for (int a = 1; a <= np; a++)
        if (fv[a] < fv[lo])
            lo = a;
    memcpy(th, v[lo], sizeof v[lo]);
    return -fv[lo];
}

/* The offset a_q and gain b_q of frame q against the median image med:
 * least squares over the valid pixels, once more without those beyond
 * 5 rms (stars that changed, the mover). */
static void offset_gain(const float *d, const double *med, const uint8_t *ok, int P, double *a,
                        double *b)
{
    double cut = INFINITY;
    *a = 0.0;
    *b = 1.0;
    for (int pass = 0; pass < 2; pass++) {
        double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
        for (int x = 0; x < P; x++)
            if (ok[x] && fabs(d[x] - *a - *b * med[x]) <= cut) {
                n++;
                sx += med[x];
                sy += d[x];
                sxx += med[x] * med[x];
                sxy += med[x] * d[x];
            }
        const double det = n * sxx - sx * sx;
        if (n < 3 || !(det > 1e-9 * n * sxx)) {     /* a flat window: the offset alone */
            *b = 1.0;
            *a = n > 0 ? (sy - sx) / n : 0.0;
        } else {
            *b = (n * sxy - sx * sy) / det;
            *a = (sy - *b * sx) / n;
        }
        double ss = 0.0;
        for (int x = 0; x < P; x++)
            if (ok[x]) {
                const double t = d[x] - *a - *b * med[x];
                ss += t * t;
            }
        cut = 5.0 * sqrt(ss / fmax(n, 1.0));
    }
}

/* The nuisance columns U (orthonormalised by Gram-Schmidt, degenerate
 * ones dropped, at most K - MIN_DOF). Returns r. */
static int nuisance(const ss_slow_stack_t *st, const double *b, double *U)
{
    const int K = st->k;
    double col[NCOL][SS_SLOW_STACK_MAX], out[NCOL][SS_SLOW_STACK_MAX];
    for (int q = 0; q < K; q++) {
        const double fx = st->fx[q], fy = st->fy[q];
        const double c[NCOL] = { 1.0, b[q], fx, fy, fx * fx, fx * fy, fy * fy };
        for (int j = 0; j < NCOL; j++)
            col[j][q] = c[j];
    }
    int r = 0;
    for (int j = 0; j < NCOL && r < K - MIN_DOF; j++) {
        double n0 = 0.0, n1 = 0.0;
        for (int q = 0; q < K; q++)
            n0 += col[j][q] * col[j][q];
        for (int t = 0; t < r; t++) {
            double dot = 0.0;
            for (int q = 0; q < K; q++)
                dot += col[j][q] * out[t][q];
            for (int q = 0; q < K; q++)
                col[j][q] -= dot * out[t][q];
        }
        for (int q = 0; q < K; q++)
            n1 += col[j][q] * col[j][q];
        if (!(n1 > COL_TOL * COL_TOL * n0) || !(n1 > 0.0))
            continue;
        for (int q = 0; q < K; q++)
            out[r][q] = col[j][q] / sqrt(n1);
        r++;
    }
    for (int q = 0; q < K; q++)
        for (int t = 0; t < r; t++)
            U[q * r + t] = out[t][q];
    return r;
}

/* v (K values of one pixel) minus its part in the nuisance columns:
 * v - U·(Uᵀv). */
static void project_out(const stk_t *S, double *v)
{
    double u[NCOL] = { 0 };
    for (int q = 0; q < S->K; q++)
        for (int t = 0; t < S->r; t++)
            u[t] += S->U[q * S->r + t] * v[q];
    for (int q = 0; q < S->K; q++)
        for (int t = 0; t < S->r; t++)
            v[q] -= S->U[q * S->r + t] * u[t];
}

/* The moving part e of the data, and the noise per frame pixel from its
 * median absolute value (rescaled: each pixel keeps K - r of K degrees
 * of freedom). Returns the noise. */
static double project(stk_t *S, const double *off, double *tmp)
{
    const int K = S->K, P = S->P, r = S->r;
    int n = 0;
    for (int x = 0; x < P; x++) {
        if (!S->ok[x])
            continue;
        double d[SS_SLOW_STACK_MAX];
        for (int q = 0; q < K; q++)
            d[q] = S->st->px[(size_t)q * P + x] - off[q];
        project_out(S, d);
        for (int q = 0; q < K; q++) {
            S->e[(size_t)q * P + x] = d[q];
            tmp[n++] = fabs(d[q]);
        }
    }
    if (n == 0)
        return NAN;
    return 1.4826 * ss_select_kth_d(tmp, (size_t)n, (size_t)n / 2) * sqrt((double)K / (K - r));
}

/* Set up the projection: valid pixels, the median image, each frame's
 * offset and gain, the nuisance columns, the moving part. Returns the
 * noise per frame pixel (NaN: too little to fit). */
static double prepare(stk_t *S, double *tmp)
{
    const ss_slow_stack_t *st = S->st;
    const int K = S->K, P = S->P;
    int nok = 0;
    double *med = tmp;
    for (int x = 0; x < P; x++) {
        double v[SS_SLOW_STACK_MAX];
        int good = 1;
        for (int q = 0; q < K && good; q++) {
            v[q] = st->px[(size_t)q * P + x];
            good = isfinite(v[q]);
        }
        S->ok[x] = (uint8_t)good;
        nok += good;
        if (good)
            med[x] = ss_median_d(v, (size_t)K);
    }
    if (nok < 16)
        return NAN;
    double off[SS_SLOW_STACK_MAX], b[SS_SLOW_STACK_MAX];
    for (int q = 0; q < K; q++)
        offset_gain(st->px + (size_t)q * P, med, S->ok, P, &off[q], &b[q]);
    S->r = nuisance(st, b, S->U);
    return project(S, off, tmp);
}

/* Drop the pixels whose K values the mover of θ (flux f) leaves far off:
 * χ² above dof + CHI_CLIP·√(2 dof). Returns how many went. */
static int clip(stk_t *S, const double th[5], double noise)
{
    const ss_slow_stack_t *st = S->st;
    const int K = S->K, P = S->P, r = S->r, side = st->side;
    double num, den;
    eval(S, th, K, &num, &den);
    const double f = den > 0.0 ? num / den : 0.0;
    const double s = S->psf_sigma * exp(SS_CLAMP(th[2], -LN_SIGMA_MAX, LN_SIGMA_MAX));
    const double k = 1.0 / (sqrt(2.0) * s), dof = K - r;
    const double lim = (dof + CHI_CLIP * sqrt(2.0 * dof)) * noise * noise;
    double gx[2 * SS_SLOW_WIN_MAX + 1], gy[2 * SS_SLOW_WIN_MAX + 1];
    int gone = 0;
    for (int j = 0; j < side; j++)
        for (int i = 0; i < side; i++) {
            const int x = j * side + i;
            if (!S->ok[x])
                continue;
            double m[SS_SLOW_STACK_MAX], chi = 0.0;
            for (int q = 0; q < K; q++) {
                const double cx = th[0] - th[3] * st->tau[q] + st->fx[q] - st->x0;
                const double cy = th[1] - th[4] * st->tau[q] + st->fy[q] - st->y0;
                m[q] = 0.0;
                if (fabs(i - cx) <= REACH * s + 1.0 && fabs(j - cy) <= REACH * s + 1.0) {
                    profile(cx, k, i, i, gx);
                    profile(cy, k, j, j, gy);
                    m[q] = f * gx[i] * gy[j];
                }
            }
            project_out(S, m);
            for (int q = 0; q < K; q++) {
                const double d = S->e[(size_t)q * P + x] - m[q];
                chi += d * d;
            }
            if (chi > lim) {
                S->ok[x] = 0;
                gone++;
            }
        }
    return gone;
}

/* The best new source (current frame only) and the best mover from the
 * speed grid, both refined by the simplex; th_m and th_n take them. */
static void search(stk_t *S, double x0, double y0, double th_m[5], double *g_m, double th_n[5],
                   double *g_n)
{
    static const double step[5] = { 0.5, 0.5, 0.2, 0.05, 0.05 };
    const double seed[5] = { x0, y0, 0.0, 0.0, 0.0 };
    memcpy(th_n, seed, 5 * sizeof th_n[0]);
    *g_n = simplex(S, th_n, step, 3, 1);
    const int nv = (int)floor(SS_SLOW_VMAX / V_GRID);
    double best = -1.0;
    for (int a = -nv; a <= nv; a++)
        for (int c = -nv; c <= nv; c++) {
            const double th[5] = { th_n[0], th_n[1], th_n[2], a * V_GRID, c * V_GRID };
            if (hypot(th[3], th[4]) > SS_SLOW_VMAX + 1e-9)
                continue;
            const double g = gain(S, th, S->K);
            if (g > best) {
                best = g;
                memcpy(th_m, th, sizeof th);
            }
        }
    *g_m = simplex(S, th_m, step, 5, S->K);
}

int ss_slow_stack_fit(const ss_slow_stack_t *st, double x0, double y0, double psf_sigma,
                      ss_slow_stack_fit_t *out)
{
    memset(out, 0, sizeof *out);
    const int P = st->side * st->side;
    if (st->k < 1 + MIN_DOF || st->k > SS_SLOW_STACK_MAX || st->side > 2 * SS_SLOW_WIN_MAX + 1 ||
        !(psf_sigma > 0.0))
        return -1;
    stk_t S = { .st = st, .K = st->k, .P = P, .psf_sigma = psf_sigma };
    S.e = malloc((size_t)st->k * (size_t)P * sizeof S.e[0]);
    S.U = malloc((size_t)st->k * NCOL * sizeof S.U[0]);
    S.ok = malloc((size_t)P);
    S.acc = malloc((size_t)P * (1 + NCOL) * sizeof S.acc[0]);
    double *tmp = malloc((size_t)st->k * (size_t)P * sizeof tmp[0]);
    int rc = -1;
    if (S.e && S.U && S.ok && S.acc && tmp) {
        const double noise = prepare(&S, tmp);
        if (isfinite(noise) && noise > 0.0) {
            double th_m[5], th_n[5], g_m, g_n;
            search(&S, x0, y0, th_m, &g_m, th_n, &g_n);
            if (clip(&S, th_m, noise) > 0) {
                static const double step[5] = { 0.2, 0.2, 0.1, 0.02, 0.02 };
                g_m = simplex(&S, th_m, step, 5, S.K);
                g_n = simplex(&S, th_n, step, 3, 1);
            }
            double num, den;
            eval(&S, th_m, S.K, &num, &den);
            out->x = th_m[0];
            out->y = th_m[1];
            out->vx = th_m[3];
            out->vy = th_m[4];
            out->sigma = psf_sigma * exp(SS_CLAMP(th_m[2], -LN_SIGMA_MAX, LN_SIGMA_MAX));
            out->flux = den > 0.0 ? num / den : 0.0;
            out->gain = g_m;
            out->gain_new = g_n;
            out->noise = noise;
            out->dof = S.K - S.r;
            rc = 0;
        }
    }
    free(S.e);
    free(S.U);
    free(S.ok);
    free(S.acc);
    free(tmp);
    return rc;
}

void ss_slow_stack_window(double x0, double y0, double psf_sigma, double tau_max, int *wx0,
                          int *wy0, int *side)
{
    const int R = SS_MIN((int)ceil(3.0 * psf_sigma + SS_SLOW_MAX_OFFSET + SS_SLOW_VMAX * tau_max),
                         SS_SLOW_WIN_MAX);
    *side = 2 * R + 1;
    *wx0 = (int)lround(x0) - R;
    *wy0 = (int)lround(y0) - R;
}

void ss_slow_stack_cut(const void *plane, ss_dtype_t dt, int w, int h, int ix, int iy, int wx0,
                       int wy0, int side, float *dst)
{
    for (int j = 0; j < side; j++)
        for (int i = 0; i < side; i++) {
            const int X = wx0 + i + ix, Y = wy0 + j + iy;
            dst[j * side + i] = X < 0 || Y < 0 || X >= w || Y >= h
                                    ? NAN
                                    : ss_hist_value(plane, dt, (size_t)Y * (size_t)w + (size_t)X);
        }
}
