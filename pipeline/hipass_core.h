/*
 * hipass_core.h — the sums of ss_hipass's box mean (stages.h),
 * header-only so that the CPU reference (register_coarse.c) and the CUDA
 * kernels (cuda/k_register.cu) run the very same additions: a row sum per
 * output (2r + 1 taps; on the GPU in ss_hp_term's form), and a running
 * sum down each column over segments of SS_HP_SEG rows, one loop here
 * and one GPU thread there: two additions per output instead of 2r + 1
 * (docs/PERFORMANCE.md has the timings).
 */
#ifndef SS_HIPASS_CORE_H
#define SS_HIPASS_CORE_H

#include <math.h>

#include "pipeline/stages.h"     /* SS_HP_SEG */

#if defined(__CUDACC__)
#define SS_HP_FN static __host__ __device__ __forceinline__
#else
#define SS_HP_FN static inline
#endif
#if defined(__CUDA_ARCH__)          /* the device pass only: the host compiler has no such pragma */
#define SS_HP_LD(p) __ldg(p)        /* read-only path; loads the compiler keeps in place */
#define SS_HP_UNROLL _Pragma("unroll")
#else
#define SS_HP_LD(p) (*(p))
#define SS_HP_UNROLL
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

/* One tap of the row sum as a term that is always added: the value in
 * double where it is finite, else +0.0; returns whether it counts. The sum
 * starts at +0.0 and so never holds -0.0, and adding +0.0 leaves it as it
 * is: adding every term of a window in ascending order gives
 * ss_hp_row_at's sum, which skips the term (the GPU's row pass loads a
 * thread's values once and sums the terms; cuda/k_register.cu). */
SS_HP_FN int ss_hp_term(float v, double *d)
{
    const int ok = isfinite(v);
    *d = ok ? (double)v : 0.0;
    return ok;
}

/* in minus its window's mean (sum s over count c), NaN where in is not
 * finite or the window holds no finite value. */
SS_HP_FN float ss_hp_out(float v, double s, long long c)
{
    return isfinite(v) && c > 0 ? (float)((double)v - s / (double)c) : NAN;
}

/* What the column pass writes with output i, of input value v and
 * high-pass value o: SS_HPE_PLAIN out[i] = o; SS_HPE_CLIP out[i] = o and
 * out2[i] = ss_mv_clip's v − fmaxf(o, 0); SS_HPE_RESTORE out2[i] =
 * ss_mv_restore's o + fmaxf(aux[i], 0) alone (out unused). The GPU fuses
 * the star map's clip and restore into its high-passes this way
 * (ss_star_template; cuda/backend_cuda.c, st_mv_template); the CPU keeps
 * them apart. */
enum { SS_HPE_PLAIN = 0, SS_HPE_CLIP = 1, SS_HPE_RESTORE = 2 };
typedef struct ss_hp_epi {
    int mode;
    const float *aux;               /* RESTORE: A, the first high-pass */
    float *out2;                    /* CLIP, RESTORE: the plane they write */
} ss_hp_epi_t;

SS_HP_FN void ss_hp_store(ss_hp_epi_t e, float *out, size_t i, float v, float o)
{
    if (e.mode == SS_HPE_RESTORE) {
        e.out2[i] = o + fmaxf(e.aux[i], 0.0f);
        return;
    }
    out[i] = o;
    if (e.mode == SS_HPE_CLIP)
        e.out2[i] = v - fmaxf(o, 0.0f);
}

/* The column pass of column x over outputs y in [y0, y1) of a w × h
 * frame (y1 - y0 ≤ SS_HP_SEG): the running sums of hs (double) and hc
 * (integer) within ±r rows, and out = ss_hp_out(in, ·, ·). The steps
 * after the first load first, all of them (each from a row inside the
 * frame), then add, with a zero where a row is out of the window: a GPU
 * thread then waits for its loads once instead of once per row (the sums
 * start from +0, so they never hold -0 and adding a zero leaves them as
 * they are; PERFORMANCE.md has the timings). The steps go SS_HP_CHUNK at a
 * time, which bounds a GPU thread's registers; the additions are the
 * same. e: what is written with each output (ss_hp_store). */
#define SS_HP_CHUNK 5
SS_HP_FN void ss_hp_col_seg_to(const float *in, const float *hs, const float *hc, int w, int h,
                               int r, int x, int y0, int y1, float *out, ss_hp_epi_t e)
{
    double s = 0.0;
    long long c = 0;
    for (int j = (y0 - r > 0 ? -r : -y0); j <= r && y0 + j < h; j++) {
        const size_t i = (size_t)(y0 + j) * (size_t)w + (size_t)x;
        s += hs[i];
        c += (long long)hc[i];
    }
    const size_t i0 = (size_t)y0 * (size_t)w + (size_t)x;
    ss_hp_store(e, out, i0, in[i0], ss_hp_out(in[i0], s, c));
    SS_HP_UNROLL
    for (int k0 = 1; k0 < SS_HP_SEG; k0 += SS_HP_CHUNK) {
        float as[SS_HP_CHUNK], ac[SS_HP_CHUNK], ss[SS_HP_CHUNK], sc[SS_HP_CHUNK], v[SS_HP_CHUNK];
        SS_HP_UNROLL
        for (int q = 0; q < SS_HP_CHUNK; q++) {
            const int y = y0 + k0 + q, live = k0 + q < SS_HP_SEG && y < y1;
            const size_t ia = (size_t)(live && y + r < h ? y + r : y0) * (size_t)w + (size_t)x;
            const size_t is =
                (size_t)(live && y - r - 1 >= 0 ? y - r - 1 : y0) * (size_t)w + (size_t)x;
            const size_t io = (size_t)(live ? y : y0) * (size_t)w + (size_t)x;
            as[q] = SS_HP_LD(hs + ia);
            ac[q] = SS_HP_LD(hc + ia);
            ss[q] = SS_HP_LD(hs + is);
            sc[q] = SS_HP_LD(hc + is);
            v[q] = SS_HP_LD(in + io);
        }
        SS_HP_UNROLL
        for (int q = 0; q < SS_HP_CHUNK; q++) {
            const int y = y0 + k0 + q, live = k0 + q < SS_HP_SEG && y < y1;
            const int add = live && y + r < h, sub = live && y - r - 1 >= 0;
            s += add ? (double)as[q] : 0.0;
            c += add ? (long long)ac[q] : 0;
            s -= sub ? (double)ss[q] : 0.0;
            c -= sub ? (long long)sc[q] : 0;
            if (live)
                ss_hp_store(e, out, (size_t)y * (size_t)w + (size_t)x, v[q], ss_hp_out(v[q], s, c));
        }
    }
}

/* The column pass that writes the high-pass alone. */
SS_HP_FN void ss_hp_col_seg(const float *in, const float *hs, const float *hc, int w, int h,
                            int r, int x, int y0, int y1, float *out)
{
    const ss_hp_epi_t plain = { SS_HPE_PLAIN, 0, 0 };
    ss_hp_col_seg_to(in, hs, hc, w, h, r, x, y0, y1, out, plain);
}

#endif
