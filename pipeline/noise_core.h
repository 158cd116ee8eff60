/*
 * noise_core.h — the per-sample arithmetic of the clipped noise estimate
 * (stages.h, ss_noise_clipped), header-only so that the CPU reference
 * (noise.c) and the CUDA kernel (cuda/k_select.cu) compute the very same
 * integers: each sample becomes a fixed-point integer, and integer sums do
 * not depend on their order, so both backends give the same σ bit for bit.
 */
#ifndef SS_NOISE_CORE_H
#define SS_NOISE_CORE_H

#include <math.h>
#include <stdint.h>

#if defined(__CUDACC__)
#define SS_NC_FN static __host__ __device__ __forceinline__
#else
#define SS_NC_FN static inline
#endif

/* The clip window, in units of the MAD's σ, and the fixed-point scale. */
#define SS_NOISE_CLIP_K 3.0
#define SS_NOISE_CLIP_SCALE 65536.0
/* std of a unit normal cut at ±3: √(1 − 6φ(3)/(2Φ(3) − 1)) */
#define SS_NOISE_CLIP_NORMAL 0.986582

/* Whether sample v (finite, |v − m| ≤ K·s) takes part, and its integer
 * q = round((v − m)/s · SCALE) (|q| ≤ 3·2^16, so q² sums of up to 2^38
 * samples fit in int64). Double arithmetic, correctly rounded on both. */
SS_NC_FN int ss_noise_clip_q(float v, float m, float s, int64_t *q)
{
    if (!isfinite(v))
        return 0;
    const double d = (double)v - (double)m;
    if (fabs(d) > SS_NOISE_CLIP_K * (double)s)
        return 0;
    *q = llrint(d / (double)s * SS_NOISE_CLIP_SCALE);
    return 1;
}

/* Sample v's part of the window sums (nothing when it is outside). */
SS_NC_FN void ss_noise_clip_add(float v, float m, float s, int64_t *s1, int64_t *s2, int64_t *n)
{
    int64_t q;
    if (ss_noise_clip_q(v, m, s, &q)) {
        *s1 += q;
        *s2 += q * q;
        ++*n;
    }
}

/* σ from the MAD's s and the window's Σq, Σq², n: s times the clipped
 * std in units of s, over the normal's clipped std; s itself if n < 2. */
SS_NC_FN float ss_noise_clip_sigma(float s, int64_t s1, int64_t s2, int64_t n)
{
    if (n < 2)
        return s;
    const double mean = (double)s1 / (double)n;
    const double var = (double)s2 / (double)n - mean * mean;
    const double sd = sqrt(var > 0.0 ? var : 0.0) / SS_NOISE_CLIP_SCALE;
    return (float)((double)s * sd / SS_NOISE_CLIP_NORMAL);
}

#endif
