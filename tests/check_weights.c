/*
 * check_weights.c — tests of the prediction weights of ALGORITHM.md §3
 * (pipeline/weights.c):
 *  - ss_solve_dense: random systems (residual), pivoting, singular cases;
 *  - ss_weights_poly: the moment constraints Σ a_k m_j(f_k) = m_j(0) to
 *    1e-6 for degrees 0, 1, 2, with and without forgetting factor, random
 *    fractional shifts (γ = 0); minimum noise against an independent
 *    solve of the constrained problem (its KKT system); with γ > 0, the
 *    penalised problem the formula solves (Σ a_k = 1 still exact); the
 *    closed form of degree 0;
 *    singular and invalid input;
 *  - the subset weights of the re-weighting (ss_reweight_init/subset):
 *    equal to ss_weights_poly(_d) run on the valid frames alone with their
 *    own λ factors, the moment constraints on the subset, KKT; min_valid,
 *    singular subsets;
 *  - ss_weights_protect: constraints, no copy left, z against a0 and
 *    against feasible perturbations, the cases that return a0;
 *  - ss_weights_lsq against a direct solve, and recovery of known mixing
 *    coefficients.
 * The references here use their own Gauss-Jordan elimination, not
 * ss_solve_dense.
 */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/plan_core.h"
#include "pipeline/stages.h"
#include "ss_test.h"


/* Independent reference solver: Gauss-Jordan with full pivoting on an
 * n×n system (M destroyed, x = M⁻¹b into b). Returns 0 or -1. */
static int gj_solve(double *M, double *b, int n)
{
    int *perm = malloc((size_t)n * sizeof(int));
    for (int i = 0; i < n; i++)
        perm[i] = i;
    for (int c = 0; c < n; c++) {
        int pr = c, pc = c;
        for (int r = c; r < n; r++)
            for (int k = c; k < n; k++)
                if (fabs(M[r * n + k]) > fabs(M[pr * n + pc])) {
                    pr = r;
                    pc = k;
                }
        if (M[pr * n + pc] == 0.0) {
            free(perm);
            return -1;
        }
        for (int k = 0; k < n; k++) {      /* rows */
            double t = M[c * n + k];
            M[c * n + k] = M[pr * n + k];
            M[pr * n + k] = t;
        }
        double t = b[c];
        b[c] = b[pr];
        b[pr] = t;
        for (int r = 0; r < n; r++) {      /* columns */
            t = M[r * n + c];
            M[r * n + c] = M[r * n + pc];
            M[r * n + pc] = t;
        }
        int ti = perm[c];
        perm[c] = perm[pc];
        perm[pc] = ti;
        const double inv = 1.0 / M[c * n + c];
        for (int k = 0; k < n; k++)
            M[c * n + k] *= inv;
        b[c] *= inv;
        for (int r = 0; r < n; r++) {
            if (r == c || M[r * n + c] == 0.0)
                continue;
            const double f = M[r * n + c];
            for (int k = 0; k < n; k++)
                M[r * n + k] -= f * M[c * n + k];
            b[r] -= f * b[c];
        }
    }
    double *x = malloc((size_t)n * sizeof(double));
    for (int i = 0; i < n; i++)
        x[perm[i]] = b[i];
    memcpy(b, x, (size_t)n * sizeof(double));
    free(x);
    free(perm);
    return 0;
}

static int terms(int degree) { return degree == 0 ? 1 : degree == 1 ? 3 : 6; }

static void monos(double fx, double fy, double v[6])
{
    v[0] = 1.0;
    v[1] = fx;
    v[2] = fy;
    v[3] = fx * fx;
    v[4] = fx * fy;
    v[5] = fy * fy;
}

/* ======================================================================
 * ss_solve_dense
 * ==================================================================== */

START_TEST(test_solve_dense_random)
{
    rng_state = 1;
    for (int n = 1; n <= 16; n++)
        for (int t = 0; t < 20; t++) {
            double M[256], M0[256], b[16], b0[16];
            for (int i = 0; i < n * n; i++)
                M[i] = M0[i] = rng_gauss();
            for (int i = 0; i < n; i++) {
                M[i * n + i] += 0.5 * n;     /* keep it well conditioned */
                M0[i * n + i] = M[i * n + i];
                b[i] = b0[i] = rng_gauss();
            }
            ck_assert_int_eq(ss_solve_dense(M, b, n), 0);
            for (int i = 0; i < n; i++) {
                double s = 0.0;
                for (int j = 0; j < n; j++)
                    s += M0[i * n + j] * b[j];
                ck_assert_msg(fabs(s - b0[i]) < 1e-11, "n %d row %d: residual %g", n, i, s - b0[i]);
            }
        }
}
END_TEST

START_TEST(test_solve_dense_pivoting_and_singular)
{
    /* a zero on the diagonal needs a row exchange */
    double M[9] = { 0, 2, 0, 1, 0, 0, 0, 0, 3 }, b[3] = { 4, 5, 6 };
    ck_assert_int_eq(ss_solve_dense(M, b, 3), 0);
    ck_assert(fabs(b[0] - 5) < 1e-15 && fabs(b[1] - 2) < 1e-15 && fabs(b[2] - 2) < 1e-15);
    /* rank deficient (row 3 = row 1 + row 2) */
    double S[9] = { 1, 2, 3, 4, 5, 6, 5, 7, 9 }, c[3] = { 1, 1, 1 };
    ck_assert_int_eq(ss_solve_dense(S, c, 3), -1);
    /* zero matrix, NaN entry, n = 0 */
    double Z[4] = { 0 }, z[2] = { 1, 1 };
    ck_assert_int_eq(ss_solve_dense(Z, z, 2), -1);
    double Nn[4] = { 1, 0, NAN, 1 }, nb[2] = { 1, 1 };
    ck_assert_int_eq(ss_solve_dense(Nn, nb, 2), -1);
    ck_assert_int_eq(ss_solve_dense(Z, z, 0), -1);
}
END_TEST

/* ======================================================================
 * ss_weights_poly
 * ==================================================================== */

/* Max over j of |Σ a_k m_j(f_k) - m_j(0)|. */
static double constraint_error(const double *fx, const double *fy, const double *a, int n, int m)
{
    double mom[6] = { 0 };
    for (int k = 0; k < n; k++) {
        double v[6];
        monos(fx[k], fy[k], v);
        for (int j = 0; j < m; j++)
            mom[j] += a[k] * v[j];
    }
    mom[0] -= 1.0;
    double worst = 0.0;
    for (int j = 0; j < m; j++)
        worst = fmax(worst, fabs(mom[j]));
    return worst;
}

/* The constrained problem solved independently: minimise Σ λ^-k a_k²
 * subject to Vᵀa = e0, through its KKT system
 *   [ diag(λ^-k)  V ] [a]   [0 ]
 *   [ Vᵀ          0 ] [μ] = [e0]  (the multiplier's sign is immaterial). */
static int kkt_weights(const double *fx, const double *fy, int n, int m, double lambda, double *a)
{
    const int N = n + m;
    double *M = calloc((size_t)N * N, sizeof(double)), *b = calloc((size_t)N, sizeof(double));
    for (int k = 0; k < n; k++) {
        double v[6];
        monos(fx[k], fy[k], v);
        M[k * N + k] = pow(lambda, -k);
        for (int j = 0; j < m; j++) {
            M[k * N + n + j] = v[j];
            M[(n + j) * N + k] = v[j];
        }
    }
    b[n] = 1.0;
    const int rc = gj_solve(M, b, N);
    memcpy(a, b, (size_t)n * sizeof(double));
    free(M);
    free(b);
    return rc;
}

START_TEST(test_poly_moment_constraints)
{
    static const int ns[] = { 6, 7, 10, 20, 64, SS_MAX_HISTORY };
    static const double lambdas[] = { 1.0, 0.9, 0.7 };
    rng_state = 42;
    double worst_c = 0.0, worst_kkt = 0.0;
    for (int degree = 0; degree <= 2; degree++)
        for (size_t li = 0; li < 3; li++)
            for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++)
                for (int t = 0; t < 10; t++) {
                    const int n = ns[ni], m = terms(degree);
                    double fx[SS_MAX_HISTORY], fy[SS_MAX_HISTORY], a[SS_MAX_HISTORY],
                        ref[SS_MAX_HISTORY];
                    for (int k = 0; k < n; k++) {
                        fx[k] = rng_unif() - 0.5;
                        fy[k] = rng_unif() - 0.5;
                    }
                    ck_assert_int_eq(ss_weights_poly(fx, fy, n, degree, 0.0, lambdas[li], a), 0);
                    const double ce = constraint_error(fx, fy, a, n, m);
                    worst_c = fmax(worst_c, ce);
                    ck_assert_msg(ce < 1e-6, "degree %d lambda %g n %d: constraint error %g",
                                  degree, lambdas[li], n, ce);
                    if (n > 64)
                        continue;                /* the KKT reference is O(n³) */
                    ck_assert_int_eq(kkt_weights(fx, fy, n, m, lambdas[li], ref), 0);
                    double amax = 0.0;
                    for (int k = 0; k < n; k++)
                        amax = fmax(amax, fabs(ref[k]));
                    for (int k = 0; k < n; k++) {
                        worst_kkt = fmax(worst_kkt, fabs(a[k] - ref[k]) / amax);
                        ck_assert_msg(fabs(a[k] - ref[k]) < 1e-8 * amax,
                                      "degree %d lambda %g n %d: a[%d] %g, KKT %g", degree,
                                      lambdas[li], n, k, a[k], ref[k]);
                    }
                }
    fprintf(stderr, "poly weights: worst constraint error %.2e, worst deviation from KKT %.2e\n",
            worst_c, worst_kkt);
}
END_TEST

/* Weights in use are the least-noise ones: no other feasible weights
 * have a smaller Σ λ^-k a_k² (perturb along the constraints' null space). */
START_TEST(test_poly_least_noise)
{
    rng_state = 43;
    const int n = 12;
    for (int degree = 1; degree <= 2; degree++) {
        const int m = terms(degree);
        double fx[12], fy[12], a[12];
        for (int k = 0; k < n; k++) {
            fx[k] = rng_unif() - 0.5;
            fy[k] = rng_unif() - 0.5;
        }
        ck_assert_int_eq(ss_weights_poly(fx, fy, n, degree, 0.0, 0.8, a), 0);
        double cost0 = 0.0;
        for (int k = 0; k < n; k++)
            cost0 += pow(0.8, -k) * a[k] * a[k];
        for (int t = 0; t < 50; t++) {
            /* random δ, projected onto {Vᵀδ = 0} by Gram-Schmidt against V's columns */
            double d[12], V[6][12];
            for (int k = 0; k < n; k++) {
                double v[6];
                monos(fx[k], fy[k], v);
                for (int j = 0; j < m; j++)
                    V[j][k] = v[j];
                d[k] = rng_gauss();
            }
            for (int j = 0; j < m; j++) {            /* orthonormalise V's columns */
                for (int i = 0; i < j; i++) {
                    double s = 0;
                    for (int k = 0; k < n; k++)
                        s += V[i][k] * V[j][k];
                    for (int k = 0; k < n; k++)
                        V[j][k] -= s * V[i][k];
                }
                double s = 0;
                for (int k = 0; k < n; k++)
                    s += V[j][k] * V[j][k];
                for (int k = 0; k < n; k++)
                    V[j][k] /= sqrt(s);
            }
            for (int j = 0; j < m; j++) {
                double s = 0;
                for (int k = 0; k < n; k++)
                    s += V[j][k] * d[k];
                for (int k = 0; k < n; k++)
                    d[k] -= s * V[j][k];
            }
            double b[12], cost = 0.0;
            for (int k = 0; k < n; k++) {
                b[k] = a[k] + 0.01 * d[k];
                cost += pow(0.8, -k) * b[k] * b[k];
            }
            ck_assert(constraint_error(fx, fy, b, n, m) < 1e-9);
            ck_assert_msg(cost > cost0, "degree %d: a perturbed feasible point is cheaper", degree);
        }
    }
}
END_TEST

/* γ > 0: the formula α = (VᵀDV + γE')⁻¹e0, E' = diag(0, 1, ..., 1),
 * a = DVα, is the minimiser of Σ λ^-k a_k² + ‖V₁ᵀa‖²/γ subject to
 * Σ a_k = 1 exactly (V₁: the monomials of degree >= 1). Independently:
 * with M = diag(λ^-k) + V₁V₁ᵀ/γ, a = M⁻¹1 / (1ᵀM⁻¹1). */
START_TEST(test_poly_regularised)
{
    rng_state = 44;
    static const double gammas[] = { 1e-6, 1e-3, 0.02, 1.0 };
    for (int degree = 0; degree <= 2; degree++)
        for (int gi = 0; gi < 4; gi++) {
            const int n = 15, m = terms(degree);
            const double lambda = gi & 1 ? 0.85 : 1.0, g = gammas[gi];
            double fx[15], fy[15], a[15], M[225], b[15];
            for (int k = 0; k < n; k++) {
                fx[k] = rng_unif() - 0.5;
                fy[k] = rng_unif() - 0.5;
            }
            ck_assert_int_eq(ss_weights_poly(fx, fy, n, degree, g, lambda, a), 0);
            for (int k = 0; k < n; k++) {
                double vk[6];
                monos(fx[k], fy[k], vk);
                b[k] = 1.0;
                for (int l = 0; l < n; l++) {
                    double vl[6], s = 0.0;
                    monos(fx[l], fy[l], vl);
                    for (int j = 1; j < m; j++)
                        s += vk[j] * vl[j];
                    M[k * n + l] = s / g + (k == l ? pow(lambda, -k) : 0.0);
                }
            }
            ck_assert_int_eq(gj_solve(M, b, n), 0);
            double sb = 0.0, sa = 0.0;
            for (int k = 0; k < n; k++) {
                sb += b[k];
                sa += a[k];
            }
            for (int k = 0; k < n; k++)
                ck_assert_msg(fabs(a[k] - b[k] / sb) < 1e-9 * (1.0 + fabs(b[k] / sb)),
                              "degree %d gamma %g: a[%d] %.12g vs %.12g", degree, g, k, a[k],
                              b[k] / sb);
            /* the flux constraint holds exactly, whatever γ */
            ck_assert_msg(fabs(sa - 1.0) < 1e-12, "degree %d gamma %g: sum a = %.15g", degree, g, sa);
        }
}
END_TEST

/* Degree 0 in closed form: a_k = λ^k / Σ_l λ^l (γ spares the constant
 * term, so it has no effect here). */
START_TEST(test_poly_degree0_closed_form)
{
    double fx[20] = { 0 }, fy[20] = { 0 }, a[20];
    for (int k = 0; k < 20; k++) {
        fx[k] = 0.3 - 0.02 * k;
        fy[k] = -0.1 + 0.03 * k;
    }
    static const double lambdas[] = { 1.0, 0.5, 0.95 }, gammas[] = { 0.0, 0.02, 0.3 };
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(ss_weights_poly(fx, fy, 20, 0, gammas[i], lambdas[i], a), 0);
        double s = 0.0;
        for (int k = 0; k < 20; k++)
            s += pow(lambdas[i], k);
        for (int k = 0; k < 20; k++)
            ck_assert(fabs(a[k] - pow(lambdas[i], k) / s) < 1e-14);
    }
}
END_TEST

START_TEST(test_poly_singular_and_invalid)
{
    double fx[10], fy[10], a[10];
    for (int k = 0; k < 10; k++) {
        fx[k] = 0.1 * k - 0.45;
        fy[k] = 0.25;                           /* no spread in y */
    }
    /* fewer frames than terms, or no spread in y, with γ = 0: singular */
    ck_assert_int_eq(ss_weights_poly(fx, fy, 2, 1, 0.0, 1.0, a), -1);
    ck_assert_int_eq(ss_weights_poly(fx, fy, 10, 1, 0.0, 1.0, a), -1);
    /* the regulariser makes it solvable */
    ck_assert_int_eq(ss_weights_poly(fx, fy, 10, 1, 1e-3, 1.0, a), 0);
    ck_assert_int_eq(ss_weights_poly(fx, fy, 2, 2, 1e-3, 1.0, a), 0);
    /* invalid arguments */
    ck_assert_int_eq(ss_weights_poly(fx, fy, 0, 0, 0.0, 1.0, a), -1);
    ck_assert_int_eq(ss_weights_poly(fx, fy, 10, 3, 0.0, 1.0, a), -1);
    ck_assert_int_eq(ss_weights_poly(fx, fy, 10, -1, 0.0, 1.0, a), -1);
    ck_assert_int_eq(ss_weights_poly(fx, fy, 10, 1, -1.0, 1.0, a), -1);
    ck_assert_int_eq(ss_weights_poly(fx, fy, 10, 1, 0.0, 0.0, a), -1);
    ck_assert_int_eq(ss_weights_poly(fx, fy, 10, 1, 0.0, 1.5, a), -1);
    ck_assert_int_eq(ss_weights_poly(fx, fy, SS_MAX_HISTORY + 1, 1, 0.0, 1.0, a), -1);
}
END_TEST

/* ======================================================================
 * subset weights (re-weighting at pixels with invalid history)
 * ==================================================================== */

/* The KKT reference of kkt_weights with the diagonal given: minimise
 * Σ a_k²/d_k subject to Vᵀa = e0. */
static int kkt_weights_d(const double *fx, const double *fy, const double *d, int n, int m,
                         double *a)
{
    const int N = n + m;
    double *M = calloc((size_t)N * N, sizeof(double)), *b = calloc((size_t)N, sizeof(double));
    for (int k = 0; k < n; k++) {
        double v[6];
        monos(fx[k], fy[k], v);
        M[k * N + k] = 1.0 / d[k];
        for (int j = 0; j < m; j++) {
            M[k * N + n + j] = v[j];
            M[(n + j) * N + k] = v[j];
        }
    }
    b[n] = 1.0;
    const int rc = gj_solve(M, b, N);
    memcpy(a, b, (size_t)n * sizeof(double));
    free(M);
    free(b);
    return rc;
}

/* ss_weights_poly_d with d = λ^k (the running product) is ss_weights_poly,
 * bit for bit: the driver's full-history weights did not change. */
START_TEST(test_poly_d_is_poly)
{
    rng_state = 47;
    for (int degree = 0; degree <= 2; degree++)
        for (int t = 0; t < 20; t++) {
            const int n = 8 + (int)(rng_u64() % 40);
            const double lambda = t % 2 ? 1.0 : 0.8 + 0.2 * rng_unif(), g = t % 3 ? 1e-3 * n : 0.0;
            double fx[64], fy[64], d[64], a[64], b[64], dk = 1.0;
            for (int k = 0; k < n; k++) {
                fx[k] = rng_unif() - 0.5;
                fy[k] = rng_unif() - 0.5;
                d[k] = dk;
                dk *= lambda;
            }
            ck_assert_int_eq(ss_weights_poly(fx, fy, n, degree, g, lambda, a), 0);
            ck_assert_int_eq(ss_weights_poly_d(fx, fy, d, n, degree, g, b), 0);
            ck_assert(memcmp(a, b, (size_t)n * sizeof(double)) == 0);
        }
}
END_TEST

/* The device's plan (plan_core.h's ss_pc_plan, which cu_plan runs) is the
 * host's plan to the bit: the shift unbiased (ss_interp_unbias), the
 * offsets rounded as ss_hist_view_t takes them, ss_weights_poly,
 * ss_reweight_init and the guided mask's threshold from ss_gmask_init at
 * the weights' a2; and both refuse the same singular systems. */
START_TEST(test_plan_is_host_plan)
{
    rng_state = 53;
    for (int degree = 0; degree <= 2; degree++)
        for (int t = 0; t < 30; t++) {
            ss_wplan_t wp;
            memset(&wp, 0, sizeof wp);
            wp.n = 4 + (int)(rng_u64() % 30);
            wp.degree = degree;
            wp.min_valid = 1 + (int)(rng_u64() % 8);
            wp.gamma = t % 3 ? 1e-3 * wp.n : 0.0;
            wp.lambda = t % 2 ? 1.0 : 0.8 + 0.2 * rng_unif();
            wp.kappa_x = 0.3 * (rng_unif() - 0.5);
            wp.kappa_y = 0.3 * (rng_unif() - 0.5);
            const int n = wp.n, singular = t == 29 && degree > 0;
            for (int k = 0; k < n; k++) {
                /* singular: every frame at the same fraction, γ = 0 */
                wp.hsx[k] = singular ? 3.25 * k : 60.0 * (rng_unif() - 0.5);
                wp.hsy[k] = singular ? -2.0 * k : 60.0 * (rng_unif() - 0.5);
            }
            if (singular)
                wp.gamma = 0.0;
            ss_gmask_t gm;
            const double psf = 1.0 + rng_unif(), tau = 2.5, sigma = 3.0 + rng_unif();
            wp.masked = t % 4 != 0;
            ck_assert_int_eq(ss_gmask_init(&gm, psf, tau, sigma, 0.0, 6), 0);
            wp.tau = gm.tau;
            wp.sigma = gm.sigma;
            wp.g = gm.g;
            const double sx = 40.0 * (rng_unif() - 0.5), sy = 40.0 * (rng_unif() - 0.5);

            int ix[64], iy[64], hx[64], hy[64];
            double a[64], ha[64], fx[64], fy[64];
            ss_reweight_t rw, hrw;
            float tl = -1.0f;
            const int rc = ss_pc_plan(&wp, sx, sy, ix, iy, a, &rw, &tl);
            /* the host's plan, step by step */
            const double ux = ss_interp_unbias(sx, wp.kappa_x), uy = ss_interp_unbias(sy, wp.kappa_y);
            for (int k = 0; k < n; k++) {
                const double dx = ux - wp.hsx[k], dy = uy - wp.hsy[k];
                hx[k] = (int)lround(dx);
                hy[k] = (int)lround(dy);
                fx[k] = dx - hx[k];
                fy[k] = dy - hy[k];
            }
            const int hrc = ss_weights_poly(fx, fy, n, degree, wp.gamma, wp.lambda, ha);
            ck_assert_int_eq(rc, hrc);
            ck_assert_int_eq(rc, singular ? -1 : 0);
            ck_assert(memcmp(ix, hx, (size_t)n * sizeof(int)) == 0);
            ck_assert(memcmp(iy, hy, (size_t)n * sizeof(int)) == 0);
            if (rc != 0)
                continue;
            ck_assert(memcmp(a, ha, (size_t)n * sizeof(double)) == 0);
            ck_assert_int_eq(ss_reweight_init(&hrw, fx, fy, n, degree, wp.gamma, wp.lambda,
                                              wp.min_valid), 0);
            ck_assert_int_eq(rw.n, hrw.n);
            ck_assert_int_eq(rw.m, hrw.m);
            ck_assert_int_eq(rw.degree, hrw.degree);
            ck_assert_int_eq(rw.min_valid, hrw.min_valid);
            ck_assert(rw.gamma == hrw.gamma && rw.tiny == hrw.tiny);
            ck_assert(memcmp(rw.G, hrw.G, (size_t)rw.m * rw.m * sizeof(double)) == 0);
            ck_assert(memcmp(rw.fx, hrw.fx, (size_t)n * sizeof(double)) == 0);
            ck_assert(memcmp(rw.fy, hrw.fy, (size_t)n * sizeof(double)) == 0);
            ck_assert(memcmp(rw.d, hrw.d, (size_t)n * sizeof(double)) == 0);
            if (wp.masked) {
                double a2 = 0.0;
                for (int k = 0; k < n; k++)
                    a2 += ha[k] * ha[k];
                ss_gmask_t hm;
                ck_assert_int_eq(ss_gmask_init(&hm, psf, tau, sigma, a2, 6), 0);
                ck_assert(tl == hm.tl && tl > 0.0f);
            } else {
                ck_assert(tl == -1.0f);     /* untouched */
            }
        }
}
END_TEST

/* Subset weights: for random invalid sets I, ss_reweight_subset gives 0
 * on I and, on S, the weights of the same problem over S alone with the
 * frames' own λ^k (their original ages):
 *  - equal to ss_weights_poly_d on S's fx, fy and λ^k;
 *  - λ = 1: equal to ss_weights_poly on S's fx, fy; λ < 1 and S the
 *    newest |S| frames (ages unchanged): equal to ss_weights_poly on them;
 *  - γ = 0: the moment constraints hold on S, and a equals the KKT
 *    solution over S (independent Gauss-Jordan);
 *  - γ > 0: Σ_S a_k = 1 (to rounding);
 *  - no invalid frame: ss_weights_poly itself.
 * Tolerances relative to max|a|: 1e-8 (a downdated Gram matrix and LDLᵀ
 * against a fresh one and pivoted elimination). */
START_TEST(test_reweight_subset)
{
    rng_state = 48;
    static const double lambdas[] = { 1.0, 0.9 };
    double worst = 0.0, worst_c = 0.0;
    int cases = 0;
    for (int degree = 0; degree <= 2; degree++)
        for (int li = 0; li < 2; li++)
            for (int gi = 0; gi < 3; gi++)
                for (int t = 0; t < 40; t++) {
                    const int m = terms(degree);
                    const int n = m + 4 + (int)(rng_u64() % 30);
                    const double lambda = lambdas[li];
                    const double g = gi == 0 ? 0.0 : gi == 1 ? 1e-3 * n : 0.05;
                    double fx[64], fy[64], a[64], full[64];
                    for (int k = 0; k < n; k++) {
                        fx[k] = rng_unif() - 0.5;
                        fy[k] = rng_unif() - 0.5;
                    }
                    ss_reweight_t rw;
                    ck_assert_int_eq(ss_reweight_init(&rw, fx, fy, n, degree, g, lambda, 1), 0);
                    ck_assert_int_eq(rw.m, m);
                    /* the invalid set: none, one frame, a random set with
                     * |S| >= m + 2, or (every 4th) the oldest frames */
                    uint8_t inv[64] = { 0 };
                    const int kind = t % 4;
                    int ns = n;
                    if (kind == 1) {
                        inv[rng_u64() % n] = 1;
                    } else if (kind == 2) {
                        const double frac = 0.6 * rng_unif();
                        for (int k = 0; k < n; k++)
                            inv[k] = rng_unif() < frac;
                    } else if (kind == 3) {
                        const int keep = m + 2 + (int)(rng_u64() % (n - m - 1));
                        for (int k = keep; k < n; k++)
                            inv[k] = 1;
                    }
                    ns = 0;
                    for (int k = 0; k < n; k++)
                        ns += !inv[k];
                    if (ns < m + 2)
                        continue;
                    ck_assert_int_eq(ss_reweight_subset(&rw, inv, a), 0);
                    /* the subset's own arrays, ages kept */
                    double sfx[64], sfy[64], sd[64], sa[64], ref[64];
                    int idx[64], j = 0;
                    for (int k = 0; k < n; k++) {
                        if (inv[k]) {
                            ck_assert(a[k] == 0.0);
                            continue;
                        }
                        sfx[j] = fx[k];
                        sfy[j] = fy[k];
                        sd[j] = pow(lambda, k);
                        idx[j++] = k;
                    }
                    ck_assert_int_eq(ss_weights_poly_d(sfx, sfy, sd, ns, degree, g, ref), 0);
                    if (lambda == 1.0 || kind == 3 || kind == 0)
                        ck_assert_int_eq(ss_weights_poly(sfx, sfy, ns, degree, g, lambda, sa), 0);
                    double amax = 0.0, sum = 0.0;
                    for (int i = 0; i < ns; i++)
                        amax = fmax(amax, fabs(ref[i]));
                    for (int i = 0; i < ns; i++) {
                        const double got = a[idx[i]];
                        sum += got;
                        worst = fmax(worst, fabs(got - ref[i]) / amax);
                        ck_assert_msg(fabs(got - ref[i]) <= 1e-8 * amax,
                                      "degree %d lambda %g gamma %g n %d |S| %d: a[%d] %.15g, "
                                      "ss_weights_poly_d %.15g", degree, lambda, g, n, ns, idx[i],
                                      got, ref[i]);
                        if (lambda == 1.0 || kind == 3 || kind == 0)
                            ck_assert_msg(fabs(got - sa[i]) <= 1e-8 * amax,
                                          "degree %d lambda %g: a[%d] %.15g, ss_weights_poly %.15g",
                                          degree, lambda, idx[i], got, sa[i]);
                    }
                    ck_assert_msg(fabs(sum - 1.0) < 1e-12, "sum a over S %.17g", sum);
                    if (kind == 0) {
                        ck_assert_int_eq(ss_weights_poly(fx, fy, n, degree, g, lambda, full), 0);
                        for (int k = 0; k < n; k++)
                            ck_assert(fabs(a[k] - full[k]) <= 1e-8 * amax);
                    }
                    if (g == 0.0) {
                        double sub[64];
                        for (int i = 0; i < ns; i++)
                            sub[i] = a[idx[i]];
                        const double ce = constraint_error(sfx, sfy, sub, ns, m);
                        worst_c = fmax(worst_c, ce);
                        ck_assert_msg(ce < 1e-9, "degree %d |S| %d: constraint error %g", degree,
                                      ns, ce);
                        ck_assert_int_eq(kkt_weights_d(sfx, sfy, sd, ns, m, ref), 0);
                        for (int i = 0; i < ns; i++)
                            ck_assert_msg(fabs(sub[i] - ref[i]) <= 1e-8 * amax,
                                          "degree %d |S| %d: a %.15g, KKT %.15g", degree, ns,
                                          sub[i], ref[i]);
                    }
                    cases++;
                }
    ck_assert_int_ge(cases, 500);
    fprintf(stderr,
            "subset weights: %d cases, worst deviation from ss_weights_poly_d %.2e (of max|a|), "
            "worst constraint error (gamma 0) %.2e\n", cases, worst, worst_c);
}
END_TEST

/* Where no prediction is possible: fewer valid frames than min_valid
 * (min_valid clamped to [1, n] by init), a singular subset (γ = 0: fewer
 * frames than terms, or no spread in y); invalid arguments. */
START_TEST(test_reweight_limits)
{
    double fx[12], fy[12], a[12];
    uint8_t inv[12] = { 0 };
    rng_state = 49;
    for (int k = 0; k < 12; k++) {
        fx[k] = rng_unif() - 0.5;
        fy[k] = rng_unif() - 0.5;
    }
    ss_reweight_t rw;
    ck_assert_int_eq(ss_reweight_init(&rw, fx, fy, 12, 1, 0.012, 1.0, 7), 0);
    ck_assert_int_eq(rw.min_valid, 7);
    for (int k = 0; k < 5; k++)
        inv[k] = 1;                                 /* |S| = 7: enough */
    ck_assert_int_eq(ss_reweight_subset(&rw, inv, a), 0);
    inv[5] = 1;                                     /* |S| = 6 < 7 */
    a[6] = 123.0;
    ck_assert_int_eq(ss_reweight_subset(&rw, inv, a), -1);
    for (int k = 0; k < 12; k++)
        ck_assert(a[k] == 0.0);
    /* min_valid clamped: 0 -> 1, above n -> n (the strict rule) */
    ck_assert_int_eq(ss_reweight_init(&rw, fx, fy, 12, 1, 0.012, 1.0, 0), 0);
    ck_assert_int_eq(rw.min_valid, 1);
    ck_assert_int_eq(ss_reweight_init(&rw, fx, fy, 12, 1, 0.012, 1.0, 99), 0);
    ck_assert_int_eq(rw.min_valid, 12);
    memset(inv, 0, sizeof inv);
    ck_assert_int_eq(ss_reweight_subset(&rw, inv, a), 0);
    inv[3] = 1;
    ck_assert_int_eq(ss_reweight_subset(&rw, inv, a), -1);
    /* γ = 0: degree 2 needs 6 frames of spread; 5 are singular */
    ck_assert_int_eq(ss_reweight_init(&rw, fx, fy, 12, 2, 0.0, 1.0, 1), 0);
    for (int k = 0; k < 12; k++)
        inv[k] = k >= 5;
    ck_assert_int_eq(ss_reweight_subset(&rw, inv, a), -1);
    inv[5] = 0;
    ck_assert_int_eq(ss_reweight_subset(&rw, inv, a), 0);
    /* γ = 0, degree 1, the valid frames share fy: singular; with γ > 0 not */
    for (int k = 0; k < 12; k++)
        if (k % 2 == 0)
            fy[k] = 0.25;
    for (int k = 0; k < 12; k++)
        inv[k] = k % 2;
    ck_assert_int_eq(ss_reweight_init(&rw, fx, fy, 12, 1, 0.0, 1.0, 1), 0);
    ck_assert_int_eq(ss_reweight_subset(&rw, inv, a), -1);
    ck_assert_int_eq(ss_reweight_init(&rw, fx, fy, 12, 1, 1e-3, 1.0, 1), 0);
    ck_assert_int_eq(ss_reweight_subset(&rw, inv, a), 0);
    /* every frame invalid */
    memset(inv, 1, sizeof inv);
    ck_assert_int_eq(ss_reweight_subset(&rw, inv, a), -1);
    /* invalid arguments */
    ck_assert_int_eq(ss_reweight_init(&rw, fx, fy, 0, 1, 0.0, 1.0, 1), -1);
    ck_assert_int_eq(ss_reweight_init(&rw, fx, fy, SS_MAX_HISTORY + 1, 1, 0.0, 1.0, 1), -1);
    ck_assert_int_eq(ss_reweight_init(&rw, fx, fy, 12, 3, 0.0, 1.0, 1), -1);
    ck_assert_int_eq(ss_reweight_init(&rw, fx, fy, 12, 1, -1.0, 1.0, 1), -1);
    ck_assert_int_eq(ss_reweight_init(&rw, fx, fy, 12, 1, 0.0, 0.0, 1), -1);
    const double dbad[2] = { 1.0, 0.0 };
    ck_assert_int_eq(ss_weights_poly_d(fx, fy, dbad, 2, 0, 0.0, a), -1);
}
END_TEST

/* ======================================================================
 * ss_weights_lsq
 * ==================================================================== */

/* Moments of random "frames": R = YᵀY, p = Yᵀc. */
static void make_moments(int n, int npix, const double *mix, double noise, double *R, double *p)
{
    double *Y = malloc((size_t)n * npix * sizeof(double)), *c = malloc((size_t)npix * sizeof(double));
    for (int i = 0; i < npix; i++) {
        const double base = 1000.0 + 200.0 * sin(0.05 * i);
        c[i] = 0.0;
        for (int k = 0; k < n; k++) {
            Y[k * npix + i] = base + 30.0 * rng_gauss();
            c[i] += mix[k] * Y[k * npix + i];
        }
        c[i] += noise * rng_gauss();
    }
    for (int k = 0; k < n; k++) {
        p[k] = 0.0;
        for (int i = 0; i < npix; i++)
            p[k] += Y[k * npix + i] * c[i];
        for (int l = 0; l < n; l++) {
            double s = 0.0;
            for (int i = 0; i < npix; i++)
                s += Y[k * npix + i] * Y[l * npix + i];
            R[k * n + l] = s;
        }
    }
    free(Y);
    free(c);
}

START_TEST(test_lsq_against_direct_solve)
{
    rng_state = 45;
    static const int ns[] = { 1, 2, 5, 20, 40 };
    static const double gammas[] = { 0.0, 1e-3, 0.02 };
    for (int ni = 0; ni < 5; ni++)
        for (int gi = 0; gi < 3; gi++) {
            const int n = ns[ni];
            double mix[40], R[1600], p[40], a[40], M[1600], b[40];
            for (int k = 0; k < n; k++)
                mix[k] = 1.0 / n + 0.05 * rng_gauss();
            make_moments(n, 3000, mix, 10.0, R, p);
            ck_assert_int_eq(ss_weights_lsq(R, p, n, gammas[gi], a), 0);
            double tr = 0.0;
            for (int k = 0; k < n; k++)
                tr += R[k * n + k];
            memcpy(M, R, (size_t)n * n * sizeof(double));
            for (int k = 0; k < n; k++) {
                M[k * n + k] += gammas[gi] * tr / n;
                b[k] = p[k];
            }
            ck_assert_int_eq(gj_solve(M, b, n), 0);
            for (int k = 0; k < n; k++)
                ck_assert_msg(fabs(a[k] - b[k]) < 1e-7 * (1.0 + fabs(b[k])),
                              "n %d gamma %g: a[%d] %.12g direct %.12g", n, gammas[gi], k, a[k], b[k]);
        }
}
END_TEST

/* With γ = 0 and no noise, the current frame being an exact mix of the
 * history, the weights are the mixing coefficients. R is not modified. */
START_TEST(test_lsq_recovers_mix)
{
    rng_state = 46;
    const int n = 8;
    double mix[8], R[64], R0[64], p[8], a[8];
    for (int k = 0; k < n; k++)
        mix[k] = 0.3 * rng_gauss();
    make_moments(n, 5000, mix, 0.0, R, p);
    memcpy(R0, R, sizeof R);
    ck_assert_int_eq(ss_weights_lsq(R, p, n, 0.0, a), 0);
    ck_assert(memcmp(R, R0, sizeof R) == 0);
    for (int k = 0; k < n; k++)
        ck_assert_msg(fabs(a[k] - mix[k]) < 1e-8, "a[%d] %.12g, mix %.12g", k, a[k], mix[k]);
    /* singular: two identical frames and γ = 0 */
    double S[4] = { 4, 4, 4, 4 }, sp[2] = { 1, 1 };
    ck_assert_int_eq(ss_weights_lsq(S, sp, 2, 0.0, a), -1);
    ck_assert_int_eq(ss_weights_lsq(S, sp, 2, 1e-3, a), 0);
}
END_TEST

/* z of a protected mover, ALGORITHM §3: (1 − ρ·a) / sqrt(1 + Σ a_k²). */
static double protect_z(const double *rho, const double *a, int n)
{
    double c = 0.0, s = 0.0;
    for (int k = 0; k < n; k++) {
        c += rho[k] * a[k];
        s += a[k] * a[k];
    }
    return (1.0 - c) / sqrt(1.0 + s);
}

/* ss_weights_protect on a warm-up history (frames 1..n ago, none screened,
 * a mover of 0.5 px/frame under a PSF of sigma 1.4: ρ_k = exp(−(0.5k)²/
 * 7.84)): the moment constraints hold; no copy is added (ρ·a >= 0); z
 * beats a0's; a star's residual is no more significant than with a0 (the
 * unbounded z-optimum of n = 14 raised it from 1.535 to 1.605, measured);
 * where that bound is not reached, no feasible perturbation with ρ·b >= 0
 * has a larger z (local optimum); ρ = 0 gives a0 bit for bit, and a ρ
 * inside the constraints' span (constant) gives a0 too. */
START_TEST(test_protect)
{
    rng_state = 50;
    for (int n = 8; n <= 20; n += 6) {
        const int degree = 2, m = terms(degree);
        double fx[20], fy[20], d[20], rho[20], zero[20] = { 0 }, a[20], a0[20], b[20];
        for (int k = 0; k < n; k++) {
            fx[k] = rng_unif() - 0.5;
            fy[k] = rng_unif() - 0.5;
            d[k] = 1.0;
            rho[k] = exp(-pow(0.5 * (k + 1), 2) / 7.84);
        }
        ck_assert_int_eq(ss_weights_poly_d(fx, fy, d, n, degree, 0.0, a0), 0);
        ck_assert_int_eq(ss_weights_protect(fx, fy, d, zero, n, degree, 0.0, a), 0);
        ck_assert(memcmp(a, a0, (size_t)n * sizeof *a) == 0);
        ck_assert_int_eq(ss_weights_protect(fx, fy, d, rho, n, degree, 0.0, a), 0);
        ck_assert_msg(constraint_error(fx, fy, a, n, m) < 1e-9, "n %d: constraints", n);
        double c = 0.0, c0 = 0.0;
        for (int k = 0; k < n; k++) {
            c += rho[k] * a[k];
            c0 += rho[k] * a0[k];
        }
        ck_assert_msg(c > -1e-9, "n %d: rho.a %g adds copies", n, c);
        const double z = protect_z(rho, a, n), z0 = protect_z(rho, a0, n);
        const double st = ss_star_significance(a, n), st0 = ss_star_significance(a0, n);
        fprintf(stderr, "protect n %d: rho.a %.4f (a0 %.4f), z %.3f (a0 %.3f), star %.3f (a0 %.3f)\n",
                n, c, c0, z, z0, st, st0);
        ck_assert_msg(z > z0 + 0.05, "n %d: z %g, a0's %g", n, z, z0);
        ck_assert_msg(st <= st0, "n %d: a star's residual %g, a0's %g", n, st, st0);
        /* below the bound, the z-optimum on the segment: no better weights */
        for (int t = 0; t < 200 && st < st0 - 0.01; t++) {
            /* a random direction in the constraints' null space (Gram-Schmidt) */
            double V[6][20], dlt[20];
            for (int k = 0; k < n; k++) {
                double v[6];
                monos(fx[k], fy[k], v);
                for (int j = 0; j < m; j++)
                    V[j][k] = v[j];
                dlt[k] = rng_gauss();
            }
            for (int j = 0; j < m; j++) {
                for (int i = 0; i < j; i++) {
                    double s = 0;
                    for (int k = 0; k < n; k++)
                        s += V[i][k] * V[j][k];
                    for (int k = 0; k < n; k++)
                        V[j][k] -= s * V[i][k];
                }
                double s = 0;
                for (int k = 0; k < n; k++)
                    s += V[j][k] * V[j][k];
                for (int k = 0; k < n; k++)
                    V[j][k] /= sqrt(s);
                s = 0;
                for (int k = 0; k < n; k++)
                    s += V[j][k] * dlt[k];
                for (int k = 0; k < n; k++)
                    dlt[k] -= s * V[j][k];
            }
            double cb = 0.0;
            for (int k = 0; k < n; k++) {
                b[k] = a[k] + 0.01 * dlt[k];
                cb += rho[k] * b[k];
            }
            if (cb < 0.0)
                continue;
            ck_assert_msg(protect_z(rho, b, n) <= z + 1e-12, "n %d: a better feasible point", n);
        }
        for (int k = 0; k < n; k++)
            rho[k] = 0.3;
        ck_assert_int_eq(ss_weights_protect(fx, fy, d, rho, n, degree, 0.0, a), 0);
        for (int k = 0; k < n; k++)
            ck_assert_msg(fabs(a[k] - a0[k]) < 1e-9, "n %d: constant rho moved a[%d]", n, k);
    }
}
END_TEST

static Suite *weights_suite(void)
{
    Suite *s = suite_create("weights");
    TCase *tc = tcase_create("solve");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_solve_dense_random);
    tcase_add_test(tc, test_solve_dense_pivoting_and_singular);
    suite_add_tcase(s, tc);
    tc = tcase_create("poly");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_poly_moment_constraints);
    tcase_add_test(tc, test_poly_least_noise);
    tcase_add_test(tc, test_poly_regularised);
    tcase_add_test(tc, test_poly_degree0_closed_form);
    tcase_add_test(tc, test_poly_singular_and_invalid);
    tcase_add_test(tc, test_poly_d_is_poly);
    tcase_add_test(tc, test_plan_is_host_plan);
    tcase_add_test(tc, test_reweight_subset);
    tcase_add_test(tc, test_reweight_limits);
    tcase_add_test(tc, test_protect);
    suite_add_tcase(s, tc);
    tc = tcase_create("lsq");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_lsq_against_direct_solve);
    tcase_add_test(tc, test_lsq_recovers_mix);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return ss_run_suite(weights_suite());
}
