/*
 * register_fine.c — ALGORITHM.md §2b on the CPU: the reference's smoothing
 * and gradients, the sums of one gradient least-squares pass (shift, gain
 * and offset together, per band of rows), and the iteration itself with
 * its error estimate and match test, which both backends share through a
 * callback.
 *
 * Reductions are deterministic and independent of the thread count: each
 * band of rows is summed row by row (within a row in the vectoriser's
 * order, fixed at compile time), bands in parallel.
 */
#include "stages.h"

#include <float.h>
#include <math.h>
#include <string.h>

/* Fewer valid pixels than this: the system is not worth solving. */
#define FINE_MIN_PIXELS 16
/* Unknowns of the linear model: δx, δy, g - 1, b, seeing. */
#define FINE_NPAR 5
/* A step beyond this (px, per axis) leaves the linear regime the model
 * holds in: it is cut back (the coarse step starts within a pixel). */
#define FINE_MAX_STEP 1.0
/* The response map M of a step stays within [M_MIN_GAIN, 1/M_MIN_GAIN]
 * (mean of its diagonal): beyond, J is noise and the plain step is used. */
#define M_MIN_GAIN 0.05

/* ---- reference preparation ------------------------------------------------ */

void ss_reference_prep(const float *ref, int w, int h, float *S, float *gx, float *gy)
{
#pragma omp parallel for schedule(static)
    for (int y = 0; y < h; y++) {
        const size_t row = (size_t)y * (size_t)w;
        for (int x = 0; x < w; x++) {
            const size_t i = row + (size_t)x;
            if (x == 0 || y == 0 || x == w - 1 || y == h - 1) {
                S[i] = gx[i] = gy[i] = NAN;     /* a neighbour is outside */
                continue;
            }
            const float c = ref[i], l = ref[i - 1], r = ref[i + 1];
            const float u = ref[i - (size_t)w], d = ref[i + (size_t)w];
            /* NaN in any of the five propagates through the sum, so S is
             * NaN exactly when it must be; the gradients need the same
             * five-point validity, not just their own two taps. */
            const float s = (c + l + r + u + d) / 5.0f;
            const int ok = !isnan(s);
            S[i] = s;
            gx[i] = ok ? (r - l) * 0.5f : NAN;
            gy[i] = ok ? (d - u) * 0.5f : NAN;
        }
    }
}

/* ---- one pass of the sums --------------------------------------------------- */

/* Shifts beyond this (px) leave no pixel of the frame to sample, and keep
 * the integer parts far inside int range. */
#define FINE_MAX_SHIFT 1e9

/* The sums of the tile rows [y0, y1) × columns [xa, xb) into out. */
static void tile_sums(const float *cur, const float *ref, const float *S, const float *gx,
                      const float *gy, int w, int ix, int iy, double fx, double fy, int xa, int xb,
                      int y0, int y1, double out[SS_FINE_NSUMS])
{
    double a[SS_FINE_NSUMS] = { 0 };
    for (int y = y0; y < y1; y++) {
        const float *c0 = cur + (size_t)(y + iy) * (size_t)w + ix, *c1 = c0 + w;
        const size_t row = (size_t)y * (size_t)w;
        const float *Sr = S + row, *Rr = ref + row, *gxr = gx + row, *gyr = gy + row;
        double xx = 0, xy = 0, xs = 0, x1 = 0, xl = 0, yy = 0, ys = 0, y1s = 0, yl = 0, ss = 0;
        double s1 = 0, sl = 0, n = 0, l1 = 0, ll = 0, xe = 0, ye = 0, se = 0, e1 = 0, le = 0;
        double ee = 0, xdx = 0, xdy = 0, ydx = 0, ydy = 0;
        /* Branch-free: a pixel that does not count adds zeros. A NaN tap
         * (even at weight 0) or a NaN S makes e non-finite; |v| <= max is
         * "finite". */
#pragma omp simd reduction(+ : xx, xy, xs, x1, xl, yy, ys, y1s, yl, ss, s1, sl, n, l1, ll, xe, \
                               ye, se, e1, le, ee, xdx, xdy, ydx, ydy)
        for (int x = xa; x < xb; x++) {
            const double val = (1.0 - fy) * ((1.0 - fx) * c0[x] + fx * c0[x + 1]) +
                               fy * ((1.0 - fx) * c1[x] + fx * c1[x + 1]);
            const double e0 = val - (double)Sr[x];
            const int ok = fabs(e0) <= DBL_MAX && fabsf(gxr[x]) <= FLT_MAX &&
                           fabsf(gyr[x]) <= FLT_MAX;
            const double e = ok ? e0 : 0.0, o = ok ? 1.0 : 0.0;
            const double p = ok ? (double)gxr[x] : 0.0, q = ok ? (double)gyr[x] : 0.0;
            const double t = ok ? (double)Sr[x] : 0.0;
            const double l = ok ? 5.0 * ((double)Sr[x] - (double)Rr[x]) : 0.0;
            /* ∂/∂sx of the sample: fx = -sx - ix moves the other way */
            const double ddx = ok ? (1.0 - fy) * ((double)c0[x + 1] - c0[x]) +
                                        fy * ((double)c1[x + 1] - c1[x]) : 0.0;
            const double ddy = ok ? (1.0 - fx) * ((double)c1[x] - c0[x]) +
                                        fx * ((double)c1[x + 1] - c0[x + 1]) : 0.0;
            xx += p * p;
            xy += p * q;
            xs += p * t;
            x1 += p;
            xl += p * l;
            yy += q * q;
            ys += q * t;
            y1s += q;
            yl += q * l;
            ss += t * t;
            s1 += t;
            sl += t * l;
            n += o;
            l1 += l;
            ll += l * l;
            xe += p * e;
            ye += q * e;
            se += t * e;
            e1 += e;
            le += l * e;
            ee += e * e;
            xdx += p * ddx;
            xdy += p * ddy;
            ydx += q * ddx;
            ydy += q * ddy;
        }
        const double r[SS_FINE_NSUMS] = {
            [SS_FS_XX] = xx, [SS_FS_XY] = xy, [SS_FS_XS] = xs,   [SS_FS_X] = x1,
            [SS_FS_XL] = xl, [SS_FS_YY] = yy, [SS_FS_YS] = ys,   [SS_FS_Y] = y1s,
            [SS_FS_YL] = yl, [SS_FS_SS] = ss, [SS_FS_S] = s1,    [SS_FS_SL] = sl,
            [SS_FS_N] = n,   [SS_FS_L] = l1,  [SS_FS_LL] = ll,   [SS_FS_XE] = xe,
            [SS_FS_YE] = ye, [SS_FS_SE] = se, [SS_FS_E] = e1,    [SS_FS_LE] = le,
            [SS_FS_EE] = ee, [SS_FS_XDX] = xdx, [SS_FS_XDY] = xdy, [SS_FS_YDX] = ydx,
            [SS_FS_YDY] = ydy,
        };
        for (int k = 0; k < SS_FINE_NSUMS; k++)
            a[k] += r[k];
    }
    memcpy(out, a, sizeof a);
}

/* The first of the rows (or columns) [lo, hi) that fall into band b. */
static int band_start(int lo, int hi, int b)
{
    return lo + (int)(((long)b * (hi - lo) + SS_FINE_BANDS - 1) / SS_FINE_BANDS);
}

void ss_fine_sums(const float *cur, const float *ref, const float *S, const float *gx,
                  const float *gy, int w, int h, double sx, double sy, ss_fine_bands_t sums)
{
    memset(sums, 0, sizeof(ss_fine_bands_t));
    if (!(fabs(sx) < FINE_MAX_SHIFT && fabs(sy) < FINE_MAX_SHIFT))
        return;                                     /* nothing to sample */

    /* Pixel x samples cur at x - s = (x + ix + fx, y + iy + fy): the same
     * integer offset and the same bilinear weights for every pixel, so the
     * inner loop is a plain stencil that vectorises. */
    const double ixf = floor(-sx), iyf = floor(-sy);
    const double fx = -sx - ixf, fy = -sy - iyf;
    const int ix = (int)ixf, iy = (int)iyf;
    /* Rows and columns whose four taps lie inside the frame, within the
     * 1-px margin: 0 <= x + ix and x + ix + 1 <= w - 1. */
    const int xa = SS_MAX(1, -ix), xb = SS_MIN(w - 1, w - 1 - ix);
    const int ya = SS_MAX(1, -iy), yb = SS_MIN(h - 1, h - 1 - iy);
    if (xa >= xb || ya >= yb)
        return;

    /* tile (row band r, column band c), then the bands in a fixed order */
    double tile[SS_FINE_BANDS][SS_FINE_BANDS][SS_FINE_NSUMS];   /* 51 KB */
#pragma omp parallel for schedule(dynamic, 1)
    for (int t = 0; t < SS_FINE_BANDS * SS_FINE_BANDS; t++) {
        const int r = t / SS_FINE_BANDS, c = t % SS_FINE_BANDS;
        tile_sums(cur, ref, S, gx, gy, w, ix, iy, fx, fy, band_start(xa, xb, c),
                  band_start(xa, xb, c + 1), band_start(ya, yb, r), band_start(ya, yb, r + 1),
                  tile[r][c]);
    }
    for (int r = 0; r < SS_FINE_BANDS; r++)
        for (int c = 0; c < SS_FINE_BANDS; c++)
            for (int k = 0; k < SS_FINE_NSUMS; k++) {
                sums[0][r][k] += tile[r][c][k];
                sums[1][c][k] += tile[r][c][k];
            }
}

/* ---- the iteration ---------------------------------------------------------- */

/* The normal matrix and right-hand side of a set of sums: the columns
 * (gx, gy, S, 1, L), the matrix from its upper triangle. */
static void normal_eq(const double *s, double M[FINE_NPAR * FINE_NPAR], double rhs[FINE_NPAR])
{
    static const int upper[FINE_NPAR][FINE_NPAR] = {
        { SS_FS_XX, SS_FS_XY, SS_FS_XS, SS_FS_X, SS_FS_XL },
        { -1, SS_FS_YY, SS_FS_YS, SS_FS_Y, SS_FS_YL },
        { -1, -1, SS_FS_SS, SS_FS_S, SS_FS_SL },
        { -1, -1, -1, SS_FS_N, SS_FS_L },
        { -1, -1, -1, -1, SS_FS_LL },
    };
    static const int right[FINE_NPAR] = { SS_FS_XE, SS_FS_YE, SS_FS_SE, SS_FS_E, SS_FS_LE };
    for (int i = 0; i < FINE_NPAR; i++) {
        for (int j = i; j < FINE_NPAR; j++)
            M[i * FINE_NPAR + j] = M[j * FINE_NPAR + i] = s[upper[i][j]];
        rhs[i] = s[right[i]];
    }
}

/* θ of a set of sums; 0, or -1 when the system is singular. */
static int solve_theta(const double *s, double theta[FINE_NPAR])
{
    double M[FINE_NPAR * FINE_NPAR];
    normal_eq(s, M, theta);
    return ss_solve_dense(M, theta, FINE_NPAR);
}

/* The residual sum of squares after the fit θ of the sums s. */
static double fit_rss(const double *s, const double theta[FINE_NPAR])
{
    double M[FINE_NPAR * FINE_NPAR], rhs[FINE_NPAR];
    normal_eq(s, M, rhs);
    double r = s[SS_FS_EE];
    for (int k = 0; k < FINE_NPAR; k++)
        r -= theta[k] * rhs[k];
    return r;
}

/* The step δ of θ: its shift part. Not divided by the gain: the gain
 * absorbs the reference's own noise (regression dilution: g = 0.7 on a
 * faint σ = 3 px field), and a step scaled by 1/g overshoots and never
 * settles; a true gain of 1 ± 5 % only slows the convergence by as much. */
static void theta_step(const double theta[FINE_NPAR], double *dx, double *dy)
{
    *dx = theta[0];
    *dy = theta[1];
}

/* The map from a least-squares step to the step the sums ask for, M =
 * J⁻¹·A: A the gradient block of the normal matrix, J the true response
 * of the sums to the shift (Σ g·D, D the derivative of the bilinear sample
 * of the frame). The iteration stops where the sums vanish, so noise that
 * moves one step by ε moves the result by M·ε. For well-sampled, bright
 * stars M ≈ 1; the central differences of undersampled stars understate
 * the slope (M < 1), and the reference's own noise inflates A (M > 1: on a
 * faint σ = 3 px field the plain steps fell short and four iterations
 * left 0.2 px). Identity when J is singular or M is not a sane map. */
static void step_to_result(const double *s, double M[4])
{
    const double a00 = s[SS_FS_XX], a01 = s[SS_FS_XY], a11 = s[SS_FS_YY];
    const double j00 = s[SS_FS_XDX], j01 = s[SS_FS_XDY], j10 = s[SS_FS_YDX], j11 = s[SS_FS_YDY];
    const double det = j00 * j11 - j01 * j10;
    if (!(fabs(det) > 0.0) || !isfinite(det)) {
        M[0] = M[3] = 1.0;
        M[1] = M[2] = 0.0;
        return;
    }
    /* J⁻¹ = [[j11, -j01], [-j10, j00]] / det */
    M[0] = (j11 * a00 - j01 * a01) / det;
    M[1] = (j11 * a01 - j01 * a11) / det;
    M[2] = (-j10 * a00 + j00 * a01) / det;
    M[3] = (-j10 * a01 + j00 * a11) / det;
    const double tr = M[0] + M[3];
    if (!(tr > 2.0 * M_MIN_GAIN && tr < 2.0 / M_MIN_GAIN)) {
        M[0] = M[3] = 1.0;
        M[1] = M[2] = 0.0;
    }
}

/* Delete-a-band jackknife of the step from one set of band sums, mapped to
 * the result by M: the variance of each axis and the covariance. Bands
 * without pixels take no part. Returns 0, or -1 with fewer than 2 bands. */
static int jackknife(const double bands[SS_FINE_BANDS][SS_FINE_NSUMS],
                     const double total[SS_FINE_NSUMS], const double M[4], double var[3])
{
    double dx[SS_FINE_BANDS], dy[SS_FINE_BANDS], mx = 0.0, my = 0.0;
    int nb = 0;
    for (int b = 0; b < SS_FINE_BANDS; b++) {
        if (!(bands[b][SS_FS_N] > 0.0))
            continue;
        double s[SS_FINE_NSUMS], th[FINE_NPAR], ex, ey;
        for (int k = 0; k < SS_FINE_NSUMS; k++)
            s[k] = total[k] - bands[b][k];
        if (solve_theta(s, th) != 0)
            continue;
        theta_step(th, &ex, &ey);
        dx[nb] = M[0] * ex + M[1] * ey;
        dy[nb] = M[2] * ex + M[3] * ey;
        mx += dx[nb];
        my += dy[nb];
        nb++;
    }
    if (nb < 2)
        return -1;
    mx /= nb;
    my /= nb;
    var[0] = var[1] = var[2] = 0.0;
    for (int b = 0; b < nb; b++) {
        var[0] += (dx[b] - mx) * (dx[b] - mx);
        var[1] += (dy[b] - my) * (dy[b] - my);
        var[2] += (dx[b] - mx) * (dy[b] - my);
    }
    for (int k = 0; k < 3; k++)
        var[k] *= (double)(nb - 1) / nb;
    return 0;
}

/* The reported errors: x from the row bands, y from the column bands. */
static void jackknife_errors(const ss_fine_bands_t bands, const double total[SS_FINE_NSUMS],
                             const double M[4], ss_shift_t *out)
{
    double vr[3], vc[3];
    const int okr = jackknife(bands[0], total, M, vr) == 0;
    const int okc = jackknife(bands[1], total, M, vc) == 0;
    out->err_x = okr ? sqrt(vr[0]) : NAN;
    out->err_y = okc ? sqrt(vc[1]) : NAN;
    out->cov_xy = okr && okc ? 0.5 * (vr[2] + vc[2]) : NAN;
}

/* The formal error: σe²·(N⁻¹) of the shift parameters, over g². */
static double formal_error(const double *s, const double theta[FINE_NPAR])
{
    const double n = s[SS_FS_N];
    const double var_e = n > FINE_NPAR ? SS_MAX(fit_rss(s, theta), 0.0) / (n - FINE_NPAR) : 0.0;
    double var = 0.0;
    for (int k = 0; k < 2; k++) {
        double M[FINE_NPAR * FINE_NPAR], col[FINE_NPAR] = { 0 }, unused[FINE_NPAR];
        normal_eq(s, M, unused);
        col[k] = 1.0;
        if (ss_solve_dense(M, col, FINE_NPAR) != 0)
            return NAN;
        var += var_e * col[k];
    }
    return sqrt(var / 2.0);
}

/* The residual variance of a pass after fitting only a gain, an offset
 * and a seeing change (columns S, 1, L); -1 when it has too few pixels. */
static double gain_offset_var(const double *s)
{
    const double n = s[SS_FS_N];
    if (!(n >= FINE_MIN_PIXELS))
        return -1.0;
    double M[9] = { s[SS_FS_SS], s[SS_FS_S], s[SS_FS_SL], s[SS_FS_S], n, s[SS_FS_L],
                    s[SS_FS_SL], s[SS_FS_L], s[SS_FS_LL] };
    double t[3] = { s[SS_FS_SE], s[SS_FS_E], s[SS_FS_LE] };
    double rss = s[SS_FS_EE];
    if (ss_solve_dense(M, t, 3) == 0)
        rss -= t[0] * s[SS_FS_SE] + t[1] * s[SS_FS_E] + t[2] * s[SS_FS_LE];
    else                                            /* degenerate: the offset alone */
        rss -= s[SS_FS_E] * s[SS_FS_E] / n;
    return SS_MAX(rss, 0.0) / n;
}

static void add_bands(const ss_fine_bands_t bands, double *total)
{
    memset(total, 0, SS_FINE_NSUMS * sizeof total[0]);
    for (int b = 0; b < SS_FINE_BANDS; b++)
        for (int k = 0; k < SS_FINE_NSUMS; k++)
            total[k] += bands[0][b][k];
}

/* Does the frame match the reference at all? Misalign it on purpose by
 * SS_FINE_PROBE_PX on both axes: if the residual variance (after the best
 * gain and offset) barely grows, the frame carries none of the reference's
 * structure (blank frame, clouds, closed dome, another field) and the
 * shift means nothing. det/(u·w) cannot tell: it only sees the reference's
 * gradients. Returns the contrast. */
static double match_contrast(ss_fine_sums_fn fn, void *ctx, const ss_shift_t *sh, double var_fit)
{
    ss_fine_bands_t bands;
    double pr[SS_FINE_NSUMS];
    fn(ctx, sh->sx + SS_FINE_PROBE_PX, sh->sy + SS_FINE_PROBE_PX, bands);
    add_bands(bands, pr);
    const double var_probe = gain_offset_var(pr);
    if (var_probe < 0.0)
        return -1.0;                                /* no probe: cannot tell, fail */
    if (var_fit > 0.0)
        return var_probe / var_fit - 1.0;
    return var_probe > 0.0 ? INFINITY : 0.0;        /* a noiseless perfect fit */
}

void ss_register_fine(ss_fine_sums_fn fn, void *ctx, double sx0, double sy0,
                      const ss_pipeline_cfg_t *c, ss_shift_t *out)
{
    memset(out, 0, sizeof *out);
    out->sx = sx0;
    out->sy = sy0;
    const int max_iter = SS_MAX(c->reg_max_iter, 1);
    ss_fine_bands_t bands;
    double s[SS_FINE_NSUMS], th[FINE_NPAR] = { 0 };

    for (int it = 0; it < max_iter; it++) {
        fn(ctx, out->sx, out->sy, bands);
        add_bands(bands, s);
        if (!(s[SS_FS_N] >= FINE_MIN_PIXELS)) {
            snprintf(out->why, sizeof out->why, "too few valid pixels (%.0f)", s[SS_FS_N]);
            return;
        }
        const double uw = s[SS_FS_XX] * s[SS_FS_YY];
        const double det = uw - s[SS_FS_XY] * s[SS_FS_XY];
        out->det_ratio = uw > 0.0 ? det / uw : 0.0;
        if (!(uw > 0.0) || !(det >= c->reg_min_det * uw)) {
            snprintf(out->why, sizeof out->why, "featureless: det/(u·w) = %.3g", out->det_ratio);
            return;
        }
        if (solve_theta(s, th) != 0) {
            ss_strlcpy(out->why, "singular normal equations", sizeof out->why);
            return;
        }
        out->gain = 1.0 + th[2];
        out->offset = th[3];
        if (!(out->gain >= SS_FINE_MIN_GAIN)) {
            snprintf(out->why, sizeof out->why,
                     "no match: the frame's gain against the reference is %.3g", out->gain);
            return;
        }
        /* a Newton step: the measured response M maps the least-squares
         * step to the one the sums ask for (the reference's noise dilutes
         * the gradient block: without M a faint field's steps fall short) */
        double ex, ey, M[4];
        theta_step(th, &ex, &ey);
        step_to_result(s, M);
        const double dx = SS_CLAMP(M[0] * ex + M[1] * ey, -FINE_MAX_STEP, FINE_MAX_STEP);
        const double dy = SS_CLAMP(M[2] * ex + M[3] * ey, -FINE_MAX_STEP, FINE_MAX_STEP);
        if (!isfinite(dx) || !isfinite(dy)) {
            ss_strlcpy(out->why, "non-finite step", sizeof out->why);
            return;
        }
        out->sx += dx;
        out->sy += dy;
        out->iterations = it + 1;
        if (hypot(dx, dy) < c->reg_tol)
            break;
    }

    /* Errors from the last pass: the jackknife over bands is what is
     * reported; the formal error is kept for comparison. */
    double M[4];
    step_to_result(s, M);
    jackknife_errors(bands, s, M, out);
    out->err_formal = formal_error(s, th);
    const double var_fit = SS_MAX(fit_rss(s, th), 0.0) / s[SS_FS_N];
    out->contrast = match_contrast(fn, ctx, out, var_fit);
    if (!(out->contrast >= SS_FINE_MIN_CONTRAST)) {
        snprintf(out->why, sizeof out->why,
                 "no match: misaligning by %g px raises the residual variance by %.3g only",
                 (double)SS_FINE_PROBE_PX, out->contrast);
        return;
    }
    out->ok = 1;
}

/* ---- the interpolation bias ------------------------------------------------- */

/* One axis: the sums of f2², f1² over the masked pixels, along the stride
 * (1: x, w: y), and their count. Rows in BIAS_CHUNKS fixed chunks added in
 * order: the result does not depend on the thread count. */
#define BIAS_CHUNKS 64
static void bias_sums(const float *a, int w, int h, size_t stride, float level, double out[3])
{
    double part[BIAS_CHUNKS][3];
    const int x0 = stride == 1 ? 1 : 0, x1 = stride == 1 ? w - 1 : w;
    const int y0 = stride == 1 ? 0 : 1, y1 = stride == 1 ? h : h - 1;
    const int per = (y1 - y0 + BIAS_CHUNKS - 1) / BIAS_CHUNKS;
#pragma omp parallel for schedule(dynamic, 1)
    for (int ch = 0; ch < BIAS_CHUNKS; ch++) {
        double s2 = 0.0, s1 = 0.0, n = 0.0;
        for (int y = y0 + ch * per; y < SS_MIN(y0 + (ch + 1) * per, y1); y++)
            for (int x = x0; x < x1; x++) {
                const size_t i = (size_t)y * (size_t)w + (size_t)x;
                const float l = a[i - stride], c = a[i], r = a[i + stride];
                if (!isfinite(l) || !isfinite(c) || !isfinite(r) ||
                    !(l > level || c > level || r > level))
                    continue;
                const double d2 = (double)l - 2.0 * c + r, d1 = 0.5 * ((double)r - l);
                s2 += d2 * d2;
                s1 += d1 * d1;
                n += 1.0;
            }
        part[ch][0] = s2;
        part[ch][1] = s1;
        part[ch][2] = n;
    }
    out[0] = out[1] = out[2] = 0.0;
    for (int ch = 0; ch < BIAS_CHUNKS; ch++)
        for (int k = 0; k < 3; k++)
            out[k] += part[ch][k];
}

static double bias_kappa(const double s[3], double sigma)
{
    const double noise2 = isfinite(sigma) ? sigma * sigma : 0.0;
    const double d2 = s[0] - 6.0 * noise2 * s[2], d1 = s[1] - 0.5 * noise2 * s[2];
    return d2 > 0.0 && d1 > 0.0 ? SS_MIN(d2 / (6.0 * d1), SS_BIAS_KAPPA_MAX) : 0.0;
}

void ss_interp_bias(const float *ref, int w, int h, double *kx, double *ky)
{
    const double sigma = ss_diff_noise(ref, w, h);
    const float level = isfinite(sigma) ? (float)(SS_BIAS_SIGNAL * sigma) : INFINITY;
    double sx[3], sy[3];
    bias_sums(ref, w, h, 1, level, sx);
    bias_sums(ref, w, h, (size_t)w, level, sy);
    *kx = bias_kappa(sx, sigma);
    *ky = bias_kappa(sy, sigma);
}

double ss_interp_unbias(double s, double kappa)
{
    const double t = -s - floor(-s);
    return s + kappa * t * (1.0 - t) * (1.0 - 2.0 * t);
}
