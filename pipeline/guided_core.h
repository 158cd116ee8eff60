/*
 * guided_core.h — the local linear model of one guided-filter window
 * (ALGORITHM.md §4; stages.h, ss_guided_filter and ss_guided_filter2) from
 * the window's sums, header-only so that the CPU reference (guided.c) and
 * the CUDA moments pass (cuda/k_guided.cu, k_gbox) solve it with the same
 * arithmetic: the same sums give the same floats. The sums themselves
 * differ between the backends by double rounding (their order).
 */
#ifndef SS_GUIDED_CORE_H
#define SS_GUIDED_CORE_H

#include <math.h>

#if defined(__CUDACC__)
#define SS_GC_FN static __host__ __device__ __forceinline__
#else
#define SS_GC_FN static inline
#endif

/* One channel, from the window's n pixels and its sums s = {ΣI', Σp,
 * ΣI'p, ΣI'I'}: A = cov / (var + eps), B = mean p − A·mean I'. Both NaN
 * unless the pixel itself takes part (part), n > 0.5 and both are finite
 * (box(A) and box(B) then average over the same pixels). */
SS_GC_FN void ss_gc_model1(double n, const double *s, double eps, int part, float *A, float *B)
{
    const double inv = 1.0 / n;
    const double mi = s[0] * inv, mp = s[1] * inv, cip = s[2] * inv, cii = s[3] * inv;
    const double var = cii - mi * mi, cov = cip - mi * mp;
    const float a = (float)(cov / (var + eps));
    const float b = (float)(mp - (double)a * mi);
    const int ok = part && n > 0.5 && isfinite(a) && isfinite(b);
    *A = ok ? a : NAN;
    *B = ok ? b : NAN;
}

/* Two channels (guides I' and L), from n and the sums s = {ΣI', ΣL, Σp,
 * ΣI'p, ΣLp, ΣI'I', ΣI'L, ΣLL}: the 2×2 system of the window's
 * (co)variances [S11+ε S12; S12 S22+ε]·[A1; A2] = [C1p; C2p] by Cramer's
 * rule (one reciprocal of the determinant), B = mean p − A1·m1 − A2·m2.
 * All three NaN under the rule of ss_gc_model1. */
SS_GC_FN void ss_gc_model2(double n, const double *s, double eps, int part, float *A1, float *A2,
                           float *B)
{
    const double inv = 1.0 / n;
    const double m1 = s[0] * inv, m2 = s[1] * inv, mp = s[2] * inv;
    const double c1p = s[3] * inv - m1 * mp, c2p = s[4] * inv - m2 * mp;
    const double s11 = s[5] * inv - m1 * m1 + eps, s12 = s[6] * inv - m1 * m2;
    const double s22 = s[7] * inv - m2 * m2 + eps;
    const double rdet = 1.0 / (s11 * s22 - s12 * s12);
    const float a1 = (float)((c1p * s22 - c2p * s12) * rdet);
    const float a2 = (float)((c2p * s11 - c1p * s12) * rdet);
    const float b = (float)(mp - (double)a1 * m1 - (double)a2 * m2);
    const int ok = part && n > 0.5 && isfinite(a1) && isfinite(a2) && isfinite(b);
    *A1 = ok ? a1 : NAN;
    *A2 = ok ? a2 : NAN;
    *B = ok ? b : NAN;
}

#endif
