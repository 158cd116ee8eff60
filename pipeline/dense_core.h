/*
 * dense_core.h — the small dense solver of the weights and the fine
 * registration (ss_solve_dense, stages.h), header-only so that the CPU
 * (weights.c, register_fine.c through fine_core.h) and the CUDA kernels
 * that decide on the device (cuda/k_register.cu) run the very same
 * arithmetic. The kernels are built with --fmad=false and the C code is
 * ISO C (no contraction), so both round every operation alike.
 */
#ifndef SS_DENSE_CORE_H
#define SS_DENSE_CORE_H

#include <float.h>
#include <math.h>

#if defined(__CUDACC__)
#define SS_DC_FN static __host__ __device__ __forceinline__
#else
#define SS_DC_FN static inline
#endif

/* Where a caller's n is a constant (the device's plan), the loops unroll
 * completely and M lives in registers instead of local memory. */
#if defined(__CUDA_ARCH__)
#define SS_DC_UNROLL _Pragma("unroll")
#else
#define SS_DC_UNROLL
#endif

/* A pivot this small relative to the largest entry of the matrix means
 * the system is singular to working precision. */
#define SS_SOLVE_REL_TOL (64.0 * DBL_EPSILON)

/* M·x = b for n×n row-major M by Gaussian elimination with partial
 * pivoting; x replaces b and M is destroyed. 0, or -1 when M holds a
 * non-finite entry, is singular to SS_SOLVE_REL_TOL·n·max|M|, or the
 * solution is not finite. */
SS_DC_FN int ss_dense_solve(double *M, double *b, int n)
{
    if (n < 1)
        return -1;
    double scale = 0.0;
    SS_DC_UNROLL
    for (int i = 0; i < n * n; i++) {
        if (!isfinite(M[i]))
            return -1;
        scale = fmax(scale, fabs(M[i]));
    }
    if (scale == 0.0)
        return -1;
    const double tiny = SS_SOLVE_REL_TOL * (double)n * scale;
    SS_DC_UNROLL
    for (int c = 0; c < n; c++) {
        int piv = c;
        double pmax = fabs(M[c * n + c]);
        SS_DC_UNROLL
        for (int r = c + 1; r < n; r++)
            if (fabs(M[r * n + c]) > pmax) {
                piv = r;
                pmax = fabs(M[r * n + c]);
            }
        if (!(pmax > tiny))
            return -1;
        /* the swap row by row, so that every index is fixed where n is
         * (the device keeps M in registers then) */
        SS_DC_UNROLL
        for (int r = c + 1; r < n; r++) {
            if (r != piv)
                continue;
            SS_DC_UNROLL
            for (int j = c; j < n; j++) {
                double t = M[c * n + j];
                M[c * n + j] = M[r * n + j];
                M[r * n + j] = t;
            }
            double t = b[c];
            b[c] = b[r];
            b[r] = t;
        }
        const double inv = 1.0 / M[c * n + c];
        SS_DC_UNROLL
        for (int r = c + 1; r < n; r++) {
            const double f = M[r * n + c] * inv;
            if (f == 0.0)
                continue;
            SS_DC_UNROLL
            for (int j = c + 1; j < n; j++)
                M[r * n + j] -= f * M[c * n + j];
            M[r * n + c] = 0.0;
            b[r] -= f * b[c];
        }
    }
    SS_DC_UNROLL
    for (int r = n - 1; r >= 0; r--) {
        double s = b[r];
        SS_DC_UNROLL
        for (int j = r + 1; j < n; j++)
            s -= M[r * n + j] * b[j];
        b[r] = s / M[r * n + r];
    }
    SS_DC_UNROLL
    for (int i = 0; i < n; i++)
        if (!isfinite(b[i]))
            return -1;
    return 0;
}

#endif
