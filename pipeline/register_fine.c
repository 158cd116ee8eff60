/*
 * register_fine.c — ALGORITHM.md §2b on the CPU: the reference's smoothing
 * and gradients, the five-sum pass of the gradient least-squares step
 * (plus the counts and residual moments the error estimate needs), and the
 * iteration itself, which both backends share through a callback.
 *
 * Reductions are made deterministic and independent of the thread count by
 * cutting the rows into a fixed number of chunks: each chunk is summed row
 * by row (within a row in the vectoriser's order, fixed at compile time),
 * and the chunk partials are added in chunk order.
 */
#include "stages.h"

#include <float.h>
#include <math.h>
#include <string.h>

/* Rows are cut into at most this many chunks for the reductions; a
 * constant, so that the summation order never depends on the threads. */
#define FINE_CHUNKS 64
/* Fewer valid pixels than this: the 2×2 system is not worth solving. */
#define FINE_MIN_PIXELS 16

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

void ss_fine_sums(const float *cur, const float *S, const float *gx, const float *gy,
                  int w, int h, double sx, double sy, double sums[SS_FINE_NSUMS])
{
    double part[FINE_CHUNKS][SS_FINE_NSUMS];

    memset(part, 0, sizeof part);
    memset(sums, 0, SS_FINE_NSUMS * sizeof sums[0]);
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
    const int per = (yb - ya + FINE_CHUNKS - 1) / FINE_CHUNKS;

#pragma omp parallel for schedule(dynamic, 1)
    for (int ch = 0; ch < FINE_CHUNKS; ch++) {
        double u = 0, v = 0, ww = 0, q = 0, p = 0, n = 0, E = 0, E2 = 0;
        const int y_begin = ya + ch * per, y_end = SS_MIN(ya + (ch + 1) * per, yb);
        for (int y = y_begin; y < y_end; y++) {
            const float *c0 = cur + (size_t)(y + iy) * (size_t)w + ix, *c1 = c0 + w;
            const size_t row = (size_t)y * (size_t)w;
            const float *Sr = S + row, *gxr = gx + row, *gyr = gy + row;
            /* Branch-free: a pixel that does not count adds zeros. A NaN
             * tap (even at weight 0) or a NaN S makes e non-finite;
             * |v| <= max is "finite". */
#pragma omp simd reduction(+ : u, v, ww, q, p, n, E, E2)
            for (int x = xa; x < xb; x++) {
                const double val = (1.0 - fy) * ((1.0 - fx) * c0[x] + fx * c0[x + 1]) +
                                   fy * ((1.0 - fx) * c1[x] + fx * c1[x + 1]);
                const double e0 = val - (double)Sr[x];
                const int ok = fabs(e0) <= DBL_MAX && fabsf(gxr[x]) <= FLT_MAX &&
                               fabsf(gyr[x]) <= FLT_MAX;
                const double e = ok ? e0 : 0.0;
                const double a = ok ? (double)gxr[x] : 0.0, b = ok ? (double)gyr[x] : 0.0;
                u += a * a;
                v += a * b;
                ww += b * b;
                q += a * e;
                p += b * e;
                n += ok ? 1.0 : 0.0;
                E += e;
                E2 += e * e;
            }
        }
        part[ch][SS_FS_U] = u;
        part[ch][SS_FS_V] = v;
        part[ch][SS_FS_W] = ww;
        part[ch][SS_FS_Q] = q;
        part[ch][SS_FS_P] = p;
        part[ch][SS_FS_N] = n;
        part[ch][SS_FS_E] = E;
        part[ch][SS_FS_E2] = E2;
    }
    for (int ch = 0; ch < FINE_CHUNKS; ch++)
        for (int k = 0; k < SS_FINE_NSUMS; k++)
            sums[k] += part[ch][k];
}

/* ---- the iteration ---------------------------------------------------------- */

static void fine_fail(ss_shift_t *out, const char *why)
{
    out->ok = 0;
    ss_strlcpy(out->why, why, sizeof out->why);
}

void ss_register_fine(ss_fine_sums_fn fn, void *ctx, double sx0, double sy0,
                      const ss_pipeline_cfg_t *c, ss_shift_t *out)
{
    memset(out, 0, sizeof *out);
    out->sx = sx0;
    out->sy = sy0;
    const int max_iter = SS_MAX(c->reg_max_iter, 1);
    double s[SS_FINE_NSUMS];
    double dx = 0.0, dy = 0.0;

    for (int it = 0; it < max_iter; it++) {
        fn(ctx, out->sx, out->sy, s);
        if (!(s[SS_FS_N] >= FINE_MIN_PIXELS)) {
            snprintf(out->why, sizeof out->why, "too few valid pixels (%.0f)", s[SS_FS_N]);
            return;
        }
        const double uw = s[SS_FS_U] * s[SS_FS_W];
        const double det = uw - s[SS_FS_V] * s[SS_FS_V];
        out->det_ratio = uw > 0.0 ? det / uw : 0.0;
        if (!(uw > 0.0) || !(det >= c->reg_min_det * uw)) {
            snprintf(out->why, sizeof out->why, "featureless: det/(u·w) = %.3g",
                     out->det_ratio);
            return;
        }
        dx = (s[SS_FS_Q] * s[SS_FS_W] - s[SS_FS_P] * s[SS_FS_V]) / det;
        dy = (s[SS_FS_P] * s[SS_FS_U] - s[SS_FS_Q] * s[SS_FS_V]) / det;
        if (!isfinite(dx) || !isfinite(dy)) {
            fine_fail(out, "non-finite step");
            return;
        }
        out->sx += dx;
        out->sy += dy;
        out->iterations = it + 1;
        if (hypot(dx, dy) < c->reg_tol)
            break;
    }

    /* Standard errors from the last pass: the residual variance after the
     * step, times the inverse normal matrix. */
    const double n = s[SS_FS_N];
    const double rss = s[SS_FS_E2] - dx * s[SS_FS_Q] - dy * s[SS_FS_P];
    const double var_e = n > 2.0 ? SS_MAX(rss, 0.0) / (n - 2.0) : 0.0;
    const double det = s[SS_FS_U] * s[SS_FS_W] - s[SS_FS_V] * s[SS_FS_V];
    out->err_x = sqrt(var_e * s[SS_FS_W] / det);
    out->err_y = sqrt(var_e * s[SS_FS_U] / det);
    out->cov_xy = -var_e * s[SS_FS_V] / det;

    /* Does the frame match the reference at all? Misalign it on purpose by
     * SS_FINE_PROBE_PX on both axes: if the residual variance barely grows,
     * the frame carries none of the reference's structure (blank frame,
     * clouds, closed dome, another field) and the shift means nothing.
     * det/(u·w) cannot tell: it only sees the reference's gradients. */
    const double mean_e = s[SS_FS_E] / n;
    const double var_fit = SS_MAX(rss, 0.0) / n - mean_e * mean_e;
    double pr[SS_FINE_NSUMS];
    fn(ctx, out->sx + SS_FINE_PROBE_PX, out->sy + SS_FINE_PROBE_PX, pr);
    double contrast = -1.0;                         /* no probe: cannot tell, fail */
    if (pr[SS_FS_N] >= FINE_MIN_PIXELS) {
        const double pm = pr[SS_FS_E] / pr[SS_FS_N];
        const double var_probe = pr[SS_FS_E2] / pr[SS_FS_N] - pm * pm;
        if (var_fit > 0.0)
            contrast = var_probe / var_fit - 1.0;
        else                                        /* a noiseless perfect fit */
            contrast = var_probe > 0.0 ? INFINITY : 0.0;
    }
    out->contrast = contrast;
    if (!(contrast >= SS_FINE_MIN_CONTRAST)) {
        snprintf(out->why, sizeof out->why,
                 "no match: misaligning by %g px raises the residual variance by %.3g only",
                 (double)SS_FINE_PROBE_PX, contrast);
        return;
    }
    out->ok = 1;
}
