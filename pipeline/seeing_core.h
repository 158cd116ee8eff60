/*
 * seeing_core.h — the global second-order seeing term of the guided
 * filter (stages.h, ss_seeing_term), header-only so that the CPU reference
 * (guided.c) and the CUDA kernels (cuda/k_guided.cu) share the per-pixel
 * products, the 4×4 solve and the subtraction. The sums themselves are
 * added in different orders on the two backends; the coefficient is
 * rounded to 12 significant bits, so that a difference in the last bits of
 * a double changes it only when it lies on a rounding boundary.
 */
#ifndef SS_SEEING_CORE_H
#define SS_SEEING_CORE_H

#include <math.h>

#if defined(__CUDACC__)
#define SS_SC_FN static __host__ __device__ __forceinline__
#else
#define SS_SC_FN static inline
#endif

/* The sums over the pixels that take part (ss_seeing_takes), with
 * i = I − c: the Gram matrix of the basis (1, i, L, Q) and its products
 * with p. */
enum {
    SS_SM_N, SS_SM_I, SS_SM_L, SS_SM_Q, SS_SM_II, SS_SM_IL, SS_SM_IQ, SS_SM_LL, SS_SM_LQ,
    SS_SM_QQ, SS_SM_P, SS_SM_IP, SS_SM_LP, SS_SM_QP, SS_SEEING_NSUMS
};

/* Whether a pixel takes part in the fit: all four finite. (On the sky,
 * Q = ∇⁴P is the prediction's noise amplified 26 times, and r holds the
 * same noise with the opposite sign, which pulls c2 towards −20/676 =
 * −0.03 on a field without stars; docs/QUALITY.md has what that and the
 * interpolation's anisotropic second order do to other scenarios.) */
SS_SC_FN int ss_seeing_takes(float i, float l, float q, float p)
{
    return isfinite(i) && isfinite(l) && isfinite(q) && isfinite(p);
}

/* Adds one pixel's products to m (doubles, in the enum's order). */
SS_SC_FN void ss_seeing_add(double *m, double i, double l, double q, double p)
{
    m[SS_SM_N] += 1.0;
    m[SS_SM_I] += i;
    m[SS_SM_L] += l;
    m[SS_SM_Q] += q;
    m[SS_SM_II] += i * i;
    m[SS_SM_IL] += i * l;
    m[SS_SM_IQ] += i * q;
    m[SS_SM_LL] += l * l;
    m[SS_SM_LQ] += l * q;
    m[SS_SM_QQ] += q * q;
    m[SS_SM_P] += p;
    m[SS_SM_IP] += i * p;
    m[SS_SM_LP] += l * p;
    m[SS_SM_QP] += q * p;
}

/* The coefficient of Q in the least-squares fit p ≈ a + b·i + c·L + d·Q
 * over the summed pixels, rounded to 12 significant bits; 0 when fewer
 * than 64 pixels were summed or the system is singular. The basis is
 * scaled to a unit diagonal first, then eliminated without pivoting (the
 * Gram matrix is positive definite when it is solvable). */
SS_SC_FN float ss_seeing_solve(const double *m)
{
    if (!(m[SS_SM_N] >= 64.0))
        return 0.0f;
    double g[4][5] = {
        { m[SS_SM_N], m[SS_SM_I], m[SS_SM_L], m[SS_SM_Q], m[SS_SM_P] },
        { m[SS_SM_I], m[SS_SM_II], m[SS_SM_IL], m[SS_SM_IQ], m[SS_SM_IP] },
        { m[SS_SM_L], m[SS_SM_IL], m[SS_SM_LL], m[SS_SM_LQ], m[SS_SM_LP] },
        { m[SS_SM_Q], m[SS_SM_IQ], m[SS_SM_LQ], m[SS_SM_QQ], m[SS_SM_QP] },
    };
    double d[4];
    for (int a = 0; a < 4; a++) {
        if (!(g[a][a] > 0.0))
            return 0.0f;
        d[a] = sqrt(g[a][a]);
    }
    for (int a = 0; a < 4; a++) {
        for (int b = 0; b < 4; b++)
            g[a][b] = g[a][b] / (d[a] * d[b]);
        g[a][4] = g[a][4] / d[a];
    }
    for (int k = 0; k < 4; k++) {
        if (!(g[k][k] > 1e-9))
            return 0.0f;
        for (int a = k + 1; a < 4; a++) {
            const double f = g[a][k] / g[k][k];
            for (int b = k; b < 5; b++)
                g[a][b] = g[a][b] - f * g[k][b];
        }
    }
    double x[4];
    for (int a = 3; a >= 0; a--) {
        double s = g[a][4];
        for (int b = a + 1; b < 4; b++)
            s = s - g[a][b] * x[b];
        x[a] = s / g[a][a];
    }
    const double c = x[3] / d[3];
    if (!isfinite(c) || c == 0.0)
        return 0.0f;
    int e;
    const double fr = frexp(c, &e);
    return (float)ldexp(nearbyint(ldexp(fr, 12)), e - 12);
}

/* p − c·Q where Q is finite, p elsewhere. */
SS_SC_FN float ss_seeing_apply(float p, float q, float c)
{
    return isfinite(q) ? (float)((double)p - (double)c * (double)q) : p;
}

#endif
