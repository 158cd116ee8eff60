/*
 * weights.c — the prediction weights of ALGORITHM.md §3, solved on the
 * host (they depend on the shifts, or on N(N+1)/2 moments, never on
 * pixels; plan_core.h holds the part that CUDA can also run on the
 * device): shift-polynomial weights (`poly`), Wiener
 * weights (`lsq`), and the small dense solver they share; and the
 * per-frame block of the poly re-weighting at pixels with invalid history
 * (ss_reweight_t: the full Gram matrix, formed here once per frame) with
 * the subset weights it leads to (per pixel, reweight_core.h).
 *
 * Everything here is double and sequential: m ≤ 6 (poly) or n ≤ 256 (lsq)
 * unknowns, microseconds, and the same bits on every machine.
 */
#include "stages.h"
#include "dense_core.h"
#include "plan_core.h"
#include "reweight_core.h"

#include <float.h>
#include <math.h>
#include <string.h>

int ss_solve_dense(double *M, double *b, int n)
{
    return ss_dense_solve(M, b, n);
}

int ss_weights_poly_d(const double *fx, const double *fy, const double *d, int n, int degree,
                      double gamma, double *a)
{
    if (n < 1 || n > SS_MAX_HISTORY || degree < 0 || degree > 2 || !(gamma >= 0.0))
        return -1;
    for (int k = 0; k < n; k++)
        if (!(d[k] > 0.0))
            return -1;
    double G[SS_POLY_MAX_TERMS * SS_POLY_MAX_TERMS];
    const int m = ss_pc_gram(fx, fy, d, n, degree, gamma, G);
    return ss_pc_poly_solve(G, m, fx, fy, d, n, a);
}

/* q = D(ρ − Vβ), β = G⁻¹VᵀDρ: the part of Dρ that the constraints leave
 * free (Σ q_k = 0 exactly: the constant term is not regularised). */
static int protect_direction(const double *fx, const double *fy, const double *d,
                             const double *rho, int n, int degree, double gamma, double *q)
{
    double G[SS_POLY_MAX_TERMS * SS_POLY_MAX_TERMS], beta[SS_POLY_MAX_TERMS] = { 0 };
    double v[SS_POLY_MAX_TERMS];
    const int m = ss_pc_gram(fx, fy, d, n, degree, gamma, G);
    for (int k = 0; k < n; k++) {
        ss_rw_monomials(fx[k], fy[k], degree, v);
        for (int i = 0; i < m; i++)
            beta[i] += d[k] * v[i] * rho[k];
    }
    if (ss_solve_dense(G, beta, m) != 0)
        return -1;
    for (int k = 0; k < n; k++) {
        ss_rw_monomials(fx[k], fy[k], degree, v);
        double s = 0.0;
        for (int i = 0; i < m; i++)
            s += v[i] * beta[i];
        q[k] = d[k] * (rho[k] - s);
    }
    return 0;
}

double ss_star_significance(const double *a, int n)
{
    double l1 = 0.0, l2 = 0.0;
    for (int k = 0; k < n; k++) {
        l1 += fabs(a[k]);
        l2 += a[k] * a[k];
    }
    return l1 / sqrt(1.0 + l2);
}

/* The largest μ of μz·(1 − j/SS_PROTECT_STEPS), j = 0, 1, ..., whose
 * a0 − μq keeps ss_star_significance at most a0's (μ = 0 always does). */
static double star_bounded_mu(const double *a0, const double *q, int n, double mu_z)
{
    const double s0 = ss_star_significance(a0, n);
    for (int j = 0; j < SS_PROTECT_STEPS; j++) {
        const double mu = mu_z * (1.0 - (double)j / SS_PROTECT_STEPS);
        double a[SS_MAX_HISTORY];
        for (int k = 0; k < n; k++)
            a[k] = a0[k] - mu * q[k];
        if (ss_star_significance(a, n) <= s0)
            return mu;
    }
    return 0.0;
}

int ss_weights_protect(const double *fx, const double *fy, const double *d, const double *rho,
                       int n, int degree, double gamma, double *a)
{
    double q[SS_MAX_HISTORY];
    if (ss_weights_poly_d(fx, fy, d, n, degree, gamma, a) != 0 ||
        protect_direction(fx, fy, d, rho, n, degree, gamma, q) != 0)
        return -1;
    double c0 = 0.0, A = 0.0, Q = 0.0;
    for (int k = 0; k < n; k++) {
        c0 += rho[k] * a[k];
        A += a[k] * a[k] / d[k];
        Q += rho[k] * q[k];
    }
    if (!(Q > SS_PROTECT_MIN_Q) || !(c0 > 0.0) || !(c0 < 1.0))
        return 0;
    const double mu = star_bounded_mu(a, q, n, fmin((1.0 + A) / (1.0 - c0), c0 / Q));
    for (int k = 0; k < n; k++)
        a[k] -= mu * q[k];
    return 0;
}

int ss_weights_poly(const double *fx, const double *fy, int n, int degree, double gamma,
                    double lambda, double *a)
{
    if (n < 1 || n > SS_MAX_HISTORY || !(lambda > 0.0 && lambda <= 1.0))
        return -1;
    double d[SS_MAX_HISTORY];
    ss_pc_powers(lambda, n, d);
    return ss_weights_poly_d(fx, fy, d, n, degree, gamma, a);
}

int ss_reweight_init(ss_reweight_t *rw, const double *fx, const double *fy, int n, int degree,
                     double gamma, double lambda, int min_valid)
{
    if (n < 1 || n > SS_MAX_HISTORY || degree < 0 || degree > 2 || !(gamma >= 0.0) ||
        !(lambda > 0.0 && lambda <= 1.0))
        return -1;
    memset(rw, 0, sizeof *rw);
    rw->n = n;
    rw->degree = degree;
    rw->gamma = gamma;
    rw->min_valid = SS_CLAMP(min_valid, 1, n);
    for (int k = 0; k < n; k++) {
        rw->fx[k] = fx[k];
        rw->fy[k] = fy[k];
    }
    ss_pc_powers(lambda, n, rw->d);
    double G[SS_POLY_MAX_TERMS * SS_POLY_MAX_TERMS];
    ss_pc_reweight_system(rw, G, ss_pc_gram(fx, fy, rw->d, n, degree, gamma, G));
    return 0;
}

int ss_reweight_subset(const ss_reweight_t *rw, const uint8_t *invalid, double *a)
{
    const int n = rw->n, m = rw->m;
    double G[SS_POLY_MAX_TERMS * SS_POLY_MAX_TERMS], alpha[SS_POLY_MAX_TERMS];
    memcpy(G, rw->G, (size_t)m * (size_t)m * sizeof(double));
    int nvalid = n;
    for (int k = 0; k < n; k++) {
        a[k] = 0.0;
        if (invalid[k]) {
            ss_rw_downdate(rw, k, G);
            nvalid--;
        }
    }
    if (nvalid < rw->min_valid || ss_rw_solve(rw, G, alpha) != 0)
        return -1;
    for (int k = 0; k < n; k++)
        if (!invalid[k])
            a[k] = ss_rw_weight(rw, alpha, k);
    return 0;
}

int ss_weights_lsq(const double *R, const double *p, int n, double gamma, double *a)
{
    if (n < 1 || n > SS_MAX_HISTORY || !(gamma >= 0.0))
        return -1;
    /* a copy to eliminate in: n·n doubles on the stack (≤ 512 KiB at the
     * largest history, 3 KiB at the default N = 20) — no heap per frame */
    double M[n * n];
    ss_pc_lsq_system(R, p, n, gamma, M, a);
    return ss_solve_dense(M, a, n);
}
