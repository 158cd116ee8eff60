/*
 * weights.c — the prediction weights of ALGORITHM.md §3, solved on the
 * host for both backends (they depend on the shifts, or on N(N+1)/2
 * moments, never on pixels): shift-polynomial weights (`poly`), Wiener
 * weights (`lsq`), and the small dense solver they share.
 *
 * Everything here is double and sequential: m ≤ 6 (poly) or n ≤ 256 (lsq)
 * unknowns, microseconds, and the same bits on every machine.
 */
#include "stages.h"

#include <float.h>
#include <math.h>
#include <string.h>

#define SS_POLY_MAX_TERMS 6

/* A pivot this small relative to the largest entry of the matrix means
 * the system is singular to working precision. */
#define SS_SOLVE_REL_TOL (64.0 * DBL_EPSILON)

int ss_solve_dense(double *M, double *b, int n)
{
    if (n < 1)
        return -1;
    double scale = 0.0;
    for (int i = 0; i < n * n; i++) {
        if (!isfinite(M[i]))
            return -1;
        scale = fmax(scale, fabs(M[i]));
    }
    if (scale == 0.0)
        return -1;
    const double tiny = SS_SOLVE_REL_TOL * (double)n * scale;
    for (int c = 0; c < n; c++) {
        int piv = c;
        for (int r = c + 1; r < n; r++)
            if (fabs(M[r * n + c]) > fabs(M[piv * n + c]))
                piv = r;
        if (!(fabs(M[piv * n + c]) > tiny))
            return -1;
        if (piv != c) {
            for (int j = c; j < n; j++) {
                double t = M[c * n + j];
                M[c * n + j] = M[piv * n + j];
                M[piv * n + j] = t;
            }
            double t = b[c];
            b[c] = b[piv];
            b[piv] = t;
        }
        const double inv = 1.0 / M[c * n + c];
        for (int r = c + 1; r < n; r++) {
            const double f = M[r * n + c] * inv;
            if (f == 0.0)
                continue;
            for (int j = c + 1; j < n; j++)
                M[r * n + j] -= f * M[c * n + j];
            M[r * n + c] = 0.0;
            b[r] -= f * b[c];
        }
    }
    for (int r = n - 1; r >= 0; r--) {
        double s = b[r];
        for (int j = r + 1; j < n; j++)
            s -= M[r * n + j] * b[j];
        b[r] = s / M[r * n + r];
    }
    for (int i = 0; i < n; i++)
        if (!isfinite(b[i]))
            return -1;
    return 0;
}

/* The monomials of degree ≤ `degree` at (fx, fy), in the order of
 * stages.h: 1, fx, fy, fx², fx·fy, fy². Returns m. */
static int monomials(double fx, double fy, int degree, double v[SS_POLY_MAX_TERMS])
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

int ss_weights_poly(const double *fx, const double *fy, int n, int degree, double gamma,
                    double lambda, double *a)
{
    if (n < 1 || n > SS_MAX_HISTORY || degree < 0 || degree > 2 || !(gamma >= 0.0) ||
        !(lambda > 0.0 && lambda <= 1.0))
        return -1;
    const int m = ss_poly_terms(degree);
    double G[SS_POLY_MAX_TERMS * SS_POLY_MAX_TERMS] = { 0 };
    double alpha[SS_POLY_MAX_TERMS] = { 0 };
    double v[SS_POLY_MAX_TERMS];
    /* G = VᵀDV + γE, accumulated frame by frame (k ascending) */
    double dk = 1.0;
    for (int k = 0; k < n; k++) {
        monomials(fx[k], fy[k], degree, v);
        for (int i = 0; i < m; i++)
            for (int j = 0; j < m; j++)
                G[i * m + j] += dk * v[i] * v[j];
        dk *= lambda;
    }
    /* The regulariser spares the constant term: (VᵀDV + γE')α = e0 with
     * E' = diag(0, 1, ..., 1) gives (Vᵀa)_0 = Σ a_k = 1 exactly, whatever γ.
     * The flux-preserving constraint must hold exactly: an error of 1 % in
     * Σ a_k leaves 1 % of every star in the residual. Only the higher
     * moments (which are nearly degenerate when the fractions cluster) are
     * relaxed by γ. */
    for (int i = 1; i < m; i++)
        G[i * m + i] += gamma;
    alpha[0] = 1.0;                              /* e0 = v(0) */
    if (ss_solve_dense(G, alpha, m) != 0)
        return -1;
    /* a = D V α */
    dk = 1.0;
    for (int k = 0; k < n; k++) {
        monomials(fx[k], fy[k], degree, v);
        double s = 0.0;
        for (int i = 0; i < m; i++)
            s += v[i] * alpha[i];
        a[k] = dk * s;
        dk *= lambda;
    }
    return 0;
}

int ss_weights_lsq(const double *R, const double *p, int n, double gamma, double *a)
{
    if (n < 1 || n > SS_MAX_HISTORY || !(gamma >= 0.0))
        return -1;
    double tr = 0.0;
    for (int k = 0; k < n; k++)
        tr += R[k * n + k];
    /* a copy to eliminate in: n·n doubles on the stack (≤ 512 KiB at the
     * largest history, 3 KiB at the default N = 20) — no heap per frame */
    double M[n * n];
    memcpy(M, R, (size_t)n * (size_t)n * sizeof(double));
    const double reg = gamma * tr / n;
    for (int k = 0; k < n; k++) {
        M[k * n + k] += reg;
        a[k] = p[k];
    }
    return ss_solve_dense(M, a, n);
}
