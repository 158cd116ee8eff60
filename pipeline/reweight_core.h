/*
 * reweight_core.h — the per-pixel subset solve of ALGORITHM.md §3 (poly
 * re-weighting where some history pixels are invalid), header-only so
 * that the CPU reference (weights.c, whiten.c) and the CUDA kernel
 * (cuda/k_whiten.cu) compile the very same arithmetic. The kernels are
 * built with --fmad=false and the C code is ISO C (no contraction), so
 * both round every operation alike.
 *
 * The system is tiny (m ≤ 6) and symmetric positive definite when it is
 * solvable at all (a Gram matrix plus γ on the non-constant terms): LDLᵀ
 * without pivoting is stable there, has no data-dependent branches but
 * the singularity test, and needs no square root. Only the lower triangle
 * of G is read and written.
 */
#ifndef SS_REWEIGHT_CORE_H
#define SS_REWEIGHT_CORE_H

#include "pipeline/stages.h"

#if defined(__CUDACC__)
#define SS_RW_FN static __host__ __device__ __forceinline__
#else
#define SS_RW_FN static inline
#endif

/* The monomials of degree ≤ `degree` at (fx, fy) in the order of
 * stages.h: 1, fx, fy, fx², fx·fy, fy². Returns m. */
SS_RW_FN int ss_rw_monomials(double fx, double fy, int degree, double *v)
{
    v[0] = 1.0;
    if (degree < 1)
        return 1;
    v[1] = fx;
    v[2] = fy;
    if (degree < 2)
        return 3;
    v[3] = fx * fx;
    v[4] = fx * fy;
    v[5] = fy * fy;
    return 6;
}

/* G -= d_k v(f_k) v(f_k)ᵀ (lower triangle): frame k leaves the system of
 * the given degree (rw->degree; a constant lets a kernel keep G in
 * registers). The product is formed as (d·v_i)·v_j, as the accumulation
 * formed it. */
SS_RW_FN void ss_rw_downdate_deg(const ss_reweight_t *rw, int k, double *G, int degree)
{
    double v[SS_POLY_MAX_TERMS];
    const int m = ss_rw_monomials(rw->fx[k], rw->fy[k], degree, v);
    const double dk = rw->d[k];
    for (int i = 0; i < m; i++)
        for (int j = 0; j <= i; j++)
            G[i * m + j] -= dk * v[i] * v[j];
}

SS_RW_FN void ss_rw_downdate(const ss_reweight_t *rw, int k, double *G)
{
    ss_rw_downdate_deg(rw, k, G, rw->degree);
}

/* Solve G α = e0 by LDLᵀ in place (lower triangle of G, m×m row-major,
 * m = rw->m). Returns 0, or -1 when a pivot is not above rw->tiny
 * (singular, or a NaN) or α is not finite. */
SS_RW_FN int ss_rw_solve_m(const ss_reweight_t *rw, double *G, double *alpha, int m)
{
    double D[SS_POLY_MAX_TERMS];
    /* factor: L (unit lower, below the diagonal of G) and D */
    for (int j = 0; j < m; j++) {
        double dj = G[j * m + j];
        for (int k = 0; k < j; k++)
            dj -= G[j * m + k] * G[j * m + k] * D[k];
        if (!(dj > rw->tiny))
            return -1;
        D[j] = dj;
        for (int i = j + 1; i < m; i++) {
            double s = G[i * m + j];
            for (int k = 0; k < j; k++)
                s -= G[i * m + k] * G[j * m + k] * D[k];
            G[i * m + j] = s / dj;
        }
    }
    /* L z = e0, then D w = z, then Lᵀ α = w (α holds z, w, α in turn) */
    for (int i = 0; i < m; i++) {
        double s = i == 0 ? 1.0 : 0.0;
        for (int k = 0; k < i; k++)
            s -= G[i * m + k] * alpha[k];
        alpha[i] = s;
    }
    for (int i = 0; i < m; i++)
        alpha[i] /= D[i];
    for (int i = m - 1; i >= 0; i--) {
        double s = alpha[i];
        for (int k = i + 1; k < m; k++)
            s -= G[k * m + i] * alpha[k];
        alpha[i] = s;
    }
    for (int i = 0; i < m; i++)
        if (!(alpha[i] - alpha[i] == 0.0))     /* not finite (isfinite without libm) */
            return -1;
    return 0;
}

SS_RW_FN int ss_rw_solve(const ss_reweight_t *rw, double *G, double *alpha)
{
    return ss_rw_solve_m(rw, G, alpha, rw->m);
}

/* a_k = d_k · v(f_k)ᵀα (i ascending, then times d_k: ss_weights_poly's
 * order), degree as ss_rw_downdate_deg. */
SS_RW_FN double ss_rw_weight_deg(const ss_reweight_t *rw, const double *alpha, int k, int degree)
{
    double v[SS_POLY_MAX_TERMS];
    const int m = ss_rw_monomials(rw->fx[k], rw->fy[k], degree, v);
    double s = 0.0;
    for (int i = 0; i < m; i++)
        s += v[i] * alpha[i];
    return rw->d[k] * s;
}

SS_RW_FN double ss_rw_weight(const ss_reweight_t *rw, const double *alpha, int k)
{
    return ss_rw_weight_deg(rw, alpha, k, rw->degree);
}

#endif
