/*
 * register_fine.c — ALGORITHM.md §2b on the CPU: the reference's smoothing
 * and gradients, the sums of one gradient least-squares pass (shift, gain
 * and offset together, per band of rows), and the iteration over a
 * callback of such passes. Its decisions (step, convergence, errors, match
 * test) are fine_core.h's, which the CUDA backend takes on the device.
 *
 * Reductions are deterministic and independent of the thread count: each
 * band of rows is summed row by row (within a row in the vectoriser's
 * order, fixed at compile time), bands in parallel.
 */
#include "stages.h"
#include "fine_core.h"
#include "plan_core.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>


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
            ss_ref_stencil(ref, i, (size_t)w, &S[i], &gx[i], &gy[i]);
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

void ss_fine_report(const ss_fine_state_t *st, ss_shift_t *out)
{
    memset(out, 0, sizeof *out);
    out->sx = st->sx;
    out->sy = st->sy;
    out->err_x = st->err_x;
    out->err_y = st->err_y;
    out->cov_xy = st->cov_xy;
    out->err_formal = st->err_formal;
    out->gain = st->gain;
    out->offset = st->offset;
    out->iterations = st->iterations;
    out->det_ratio = st->det_ratio;
    out->contrast = st->contrast;
    const double v = st->why_val;
    switch (st->phase != SS_FINE_DONE ? -1 : st->why) {
    case SS_FW_NONE:
        out->ok = 1;
        break;
    case SS_FW_PIXELS:
        snprintf(out->why, sizeof out->why, "too few valid pixels (%.0f)", v);
        break;
    case SS_FW_FEATURELESS:
        snprintf(out->why, sizeof out->why, "featureless: det/(u·w) = %.3g", v);
        break;
    case SS_FW_SINGULAR:
        ss_strlcpy(out->why, "singular normal equations", sizeof out->why);
        break;
    case SS_FW_GAIN:
        snprintf(out->why, sizeof out->why,
                 "no match: the frame's gain against the reference is %.3g", v);
        break;
    case SS_FW_STEP:
        ss_strlcpy(out->why, "non-finite step", sizeof out->why);
        break;
    case SS_FW_CONTRAST:
        snprintf(out->why, sizeof out->why,
                 "no match: misaligning by %g px raises the residual variance by %.3g only",
                 (double)SS_FINE_PROBE_PX, v);
        break;
    default:
        ss_strlcpy(out->why, "registration did not finish", sizeof out->why);
        break;
    }
}

void ss_register_fine(ss_fine_sums_fn fn, void *ctx, double sx0, double sy0,
                      const ss_pipeline_cfg_t *c, ss_shift_t *out)
{
    ss_fine_state_t st;
    ss_fine_bands_t last, probe;
    ss_fine_begin(&st, sx0, sy0, c->reg_max_iter, c->reg_tol, c->reg_min_det);
    while (st.phase == SS_FINE_PASS) {
        fn(ctx, st.sx, st.sy, last);
        ss_fine_iterate(&st, &last[0][0][0]);
    }
    if (st.phase == SS_FINE_PROBE) {
        fn(ctx, st.sx + SS_FINE_PROBE_PX, st.sy + SS_FINE_PROBE_PX, probe);
        ss_fine_conclude(&st, &last[0][0][0], &probe[0][0][0]);
    }
    ss_fine_report(&st, out);
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
    return ss_pc_unbias(s, kappa);
}
