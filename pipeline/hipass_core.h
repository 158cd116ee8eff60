/*
 * hipass_core.h — the sums of ss_hipass's box mean (stages.h),
 * header-only so that the CPU reference (register_coarse.c) and the CUDA
 * kernels (cuda/k_register.cu) run the very same additions: a row sum per
 * output (2r + 1 taps), and a running sum down each column over segments
 * of SS_HP_SEG rows, one loop here and one GPU thread there: two additions
 * per output instead of 2r + 1 (docs/PERFORMANCE.md has the timings).
 */
#ifndef SS_HIPASS_CORE_H
#define SS_HIPASS_CORE_H

#include <math.h>

#if defined(__CUDACC__)
#define SS_HP_FN static __host__ __device__ __forceinline__
#else
#define SS_HP_FN static inline
#endif

/* The row pass at x of a row of n values: *hs = (float) the double sum of
 * the finite values within ±r (ascending), *hc = their count (stages.h,
 * ss_hipass). */
SS_HP_FN void ss_hp_row_at(const float *row, int n, int r, int x, float *hs, float *hc)
{
    double s = 0.0;
    int c = 0;
    for (int i = (x - r > 0 ? -r : -x); i <= r && x + i < n; i++) {
        const float v = row[x + i];
        if (isfinite(v)) {
            s += v;
            c++;
        }
    }
    *hs = (float)s;
    *hc = (float)c;
}

/* in minus its window's mean (sum s over count c), NaN where in is not
 * finite or the window holds no finite value. */
SS_HP_FN float ss_hp_out(float v, double s, long long c)
{
    return isfinite(v) && c > 0 ? (float)((double)v - s / (double)c) : NAN;
}

/* The column pass of column x over outputs y in [y0, y1) of a w × h
 * frame: the running sums of hs (double) and hc (integer) within ±r rows,
 * and out = ss_hp_out(in, ·, ·). */
SS_HP_FN void ss_hp_col_seg(const float *in, const float *hs, const float *hc, int w, int h,
                            int r, int x, int y0, int y1, float *out)
{
    double s = 0.0;
    long long c = 0;
    for (int j = (y0 - r > 0 ? -r : -y0); j <= r && y0 + j < h; j++) {
        const size_t i = (size_t)(y0 + j) * (size_t)w + (size_t)x;
        s += hs[i];
        c += (long long)hc[i];
    }
    size_t i0 = (size_t)y0 * (size_t)w + (size_t)x;
    out[i0] = ss_hp_out(in[i0], s, c);
    for (int y = y0 + 1; y < y1; y++) {
        if (y + r < h) {
            const size_t i = (size_t)(y + r) * (size_t)w + (size_t)x;
            s += hs[i];
            c += (long long)hc[i];
        }
        if (y - r - 1 >= 0) {
            const size_t i = (size_t)(y - r - 1) * (size_t)w + (size_t)x;
            s -= hs[i];
            c -= (long long)hc[i];
        }
        i0 = (size_t)y * (size_t)w + (size_t)x;
        out[i0] = ss_hp_out(in[i0], s, c);
    }
}

#endif
