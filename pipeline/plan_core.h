/*
 * plan_core.h — a frame's prediction plan (ALGORITHM.md §3) from its
 * registered shift: each history frame's integer offset and fraction, the
 * poly weights, the re-weighting block and the guided mask's guide
 * threshold. Header-only, so that the host (weights.c, guided.c and the
 * driver's weights) and the CUDA kernel that plans on the device
 * (cu_plan, cuda/k_plan.cu) run the very same arithmetic. The kernels are
 * built with --fmad=false and the C code is ISO C (no contraction), so
 * both round every operation alike.
 */
#ifndef SS_PLAN_CORE_H
#define SS_PLAN_CORE_H

#include "pipeline/dense_core.h"
#include "pipeline/reweight_core.h"

#if defined(__CUDACC__)
#define SS_PC_FN static __host__ __device__ __forceinline__
#else
#define SS_PC_FN static inline
#endif

/* What the host knows of a frame's prediction before its shift is known
 * (poly mode, no slow-mover protection: ss_pc_plan). */
typedef struct ss_wplan {
    int n;                      /* history frames, newest first */
    int degree;                 /* cfg poly_degree */
    int min_valid;              /* ss_cfg_min_valid */
    int masked;                 /* the guided filter's mask is on: gm's tl is planned */
    int lsq;                    /* Wiener weights from the moments (ss_weights_lsq), not the
                                 * poly ones: the plan is the offsets, then the moments */
    double gamma, lambda;       /* ss_cfg_gamma, cfg forget */
    double kappa_x, kappa_y;    /* the reference's resampling bias (ss_interp_bias) */
    double tau, sigma, g;       /* the guide threshold's factors (ss_pc_gmask_tl) */
    double hsx[SS_MAX_HISTORY], hsy[SS_MAX_HISTORY];   /* history frame k's shift */
} ss_wplan_t;

/* s + κ·φ(t), t = -s - floor(-s) (ss_interp_unbias, stages.h). */
SS_PC_FN double ss_pc_unbias(double s, double kappa)
{
    const double t = -s - floor(-s);
    return s + kappa * t * (1.0 - t) * (1.0 - 2.0 * t);
}

/* History frame k at offset (ix, iy) = round(s - s_k), fraction
 * (fx, fy) = s - s_k - (ix, iy) (ss_hist_view_t). */
SS_PC_FN void ss_pc_offset(double sx, double sy, double hsx, double hsy, int *ix, int *iy,
                           double *fx, double *fy)
{
    const double dx = sx - hsx, dy = sy - hsy;
    *ix = (int)lround(dx);
    *iy = (int)lround(dy);
    *fx = dx - *ix;
    *fy = dy - *iy;
}

SS_PC_FN void ss_pc_offsets(double sx, double sy, const double *hsx, const double *hsy, int n,
                            int *ix, int *iy, double *fx, double *fy)
{
    for (int k = 0; k < n; k++)
        ss_pc_offset(sx, sy, hsx[k], hsy[k], &ix[k], &iy[k], &fx[k], &fy[k]);
}

/* λ^k as the running product (k ascending). */
SS_PC_FN void ss_pc_powers(double lambda, int n, double *d)
{
    double dk = 1.0;
    for (int k = 0; k < n; k++) {
        d[k] = dk;
        dk *= lambda;
    }
}

/* Monomial q of (fx, fy) in the order of stages.h: 1, fx, fy, fx², fx·fy,
 * fy² (ss_rw_monomials' values, without an array to index). */
SS_PC_FN double ss_pc_mono(double fx, double fy, int q)
{
    return q == 0 ? 1.0 : q == 1 ? fx : q == 2 ? fy : q == 3 ? fx * fx : q == 4 ? fx * fy
                                                                           : fy * fy;
}

/* Frame k's term of G's entry (i, j): d_k·v_i·v_j, formed as (d_k·v_i)·v_j. */
SS_PC_FN double ss_pc_gram_term(double d, double fx, double fy, int i, int j)
{
    return d * ss_pc_mono(fx, fy, i) * ss_pc_mono(fx, fy, j);
}

/* Entry (i, j) of G from its sum over the frames: γ added on the
 * diagonal but for the constant term. */
SS_PC_FN double ss_pc_gram_close(double g, double gamma, int i, int j)
{
    return i == j && i > 0 ? g + gamma : g;
}

/* Entry (i, j) of G = VᵀDV + γE', summed over the frames k ascending.
 * The regulariser spares the constant term: (VᵀDV + γE')α = e0 with
 * E' = diag(0, 1, ..., 1) gives (Vᵀa)_0 = Σ a_k = 1 exactly, whatever γ
 * (the flux-preserving constraint must hold exactly: an error of 1 % in
 * Σ a_k leaves 1 % of every star in the residual). */
SS_PC_FN double ss_pc_gram_entry(const double *fx, const double *fy, const double *d, int n,
                                 double gamma, int i, int j)
{
    double g = 0.0;
    for (int k = 0; k < n; k++)
        g += ss_pc_gram_term(d[k], fx[k], fy[k], i, j);
    return ss_pc_gram_close(g, gamma, i, j);
}

/* The terms of a degree: 1, 3 or 6. */
SS_PC_FN int ss_pc_terms(int degree)
{
    return degree < 1 ? 1 : degree < 2 ? 3 : 6;
}

/* G (m×m, row-major, full), entry by entry. Returns m. */
SS_PC_FN int ss_pc_gram(const double *fx, const double *fy, const double *d, int n, int degree,
                        double gamma, double *G)
{
    const int m = ss_pc_terms(degree);
    for (int i = 0; i < m; i++)
        for (int j = 0; j < m; j++)
            G[i * m + j] = ss_pc_gram_entry(fx, fy, d, n, gamma, i, j);
    return m;
}

/* α = G⁻¹e0 (G m×m, left as it is). Returns 0, or -1 when G is
 * singular. */
SS_PC_FN int ss_pc_alpha(const double *G, int m, double *alpha)
{
    double M[SS_POLY_MAX_TERMS * SS_POLY_MAX_TERMS];
    for (int i = 0; i < m * m; i++)
        M[i] = G[i];
    for (int i = 0; i < m; i++)
        alpha[i] = i == 0 ? 1.0 : 0.0;          /* e0 = v(0) */
    return ss_dense_solve(M, alpha, m);
}

/* a_k = d_k · v(f_k)ᵀα (i ascending, then times d_k). */
SS_PC_FN double ss_pc_weight(const double *alpha, int m, double fx, double fy, double d)
{
    double s = 0.0;
    for (int i = 0; i < m; i++)
        s += ss_pc_mono(fx, fy, i) * alpha[i];
    return d * s;
}

/* The poly weights from G (m×m): a = DVα. Returns 0, or -1 when G is
 * singular or a weight is not finite. */
SS_PC_FN int ss_pc_poly_solve(const double *G, int m, const double *fx, const double *fy,
                              const double *d, int n, double *a)
{
    double alpha[SS_POLY_MAX_TERMS];
    if (ss_pc_alpha(G, m, alpha) != 0)
        return -1;
    int ok = 1;
    for (int k = 0; k < n; k++) {
        a[k] = ss_pc_weight(alpha, m, fx[k], fy[k], d[k]);
        ok &= isfinite(a[k]) != 0;
    }
    return ok ? 0 : -1;
}

/* The re-weighting block's pivot floor from the full G (m×m): relative
 * to the full system, not the subset's, because the downdate leaves
 * rounding of the full G's size behind, so a subset that has lost a
 * direction shows a pivot of that size, not zero. */
SS_PC_FN double ss_pc_tiny(const double *G, int m)
{
    double scale = 0.0;
    for (int i = 0; i < m; i++)
        scale = fmax(scale, fabs(G[i * m + i]));
    return SS_SOLVE_REL_TOL * (double)m * scale;
}

/* The re-weighting block's G and pivot floor from the full G. */
SS_PC_FN void ss_pc_reweight_system(ss_reweight_t *rw, const double *G, int m)
{
    rw->m = m;
    for (int i = 0; i < m * m; i++)
        rw->G[i] = G[i];
    rw->tiny = ss_pc_tiny(G, m);
}

/* The guided mask's guide threshold (ss_gmask_t.tl) for the weights'
 * squared norm a2 = Σ a_k² (k ascending): τ·σ_p·g with σ_p =
 * σ·sqrt(a2/(1 + a2)), the noise of the prediction. */
SS_PC_FN float ss_pc_gmask_tl(double tau, double sigma, double g, double a2)
{
    const double sp = sigma * sqrt(a2 / (1.0 + a2));
    return (float)(tau * sp * g);
}

/* The Wiener system of ss_weights_lsq: M = R + (γ·tr R/n)·E (R n×n full,
 * the trace summed k ascending) and b = p, into M and b. */
SS_PC_FN void ss_pc_lsq_system(const double *R, const double *p, int n, double gamma, double *M,
                               double *b)
{
    double tr = 0.0;
    for (int k = 0; k < n; k++)
        tr += R[k * n + k];
    const double reg = gamma * tr / n;
    for (int i = 0; i < n * n; i++)
        M[i] = R[i];
    for (int k = 0; k < n; k++) {
        M[k * n + k] += reg;
        b[k] = p[k];
    }
}

/* rw's scalars for wp (min_valid clamped to [1, n]). */
SS_PC_FN void ss_pc_reweight_head(const ss_wplan_t *wp, ss_reweight_t *rw)
{
    const int n = wp->n;
    rw->n = n;
    rw->degree = wp->degree;
    rw->gamma = wp->gamma;
    rw->min_valid = wp->min_valid < 1 ? 1 : wp->min_valid > n ? n : wp->min_valid;
}

/* The plan of a frame registered at the raw shift (sx, sy) (before
 * ss_interp_unbias): offsets ix, iy and weights a (wp->n each), the
 * re-weighting block rw (ss_reweight_init's) and, when wp->masked, the
 * mask's guide threshold *tl. Returns 0, or -1 when the weights are
 * singular or not finite (ss_weights_poly's failure). The device runs
 * the same steps element by element on a warp (k_plan). */
SS_PC_FN int ss_pc_plan(const ss_wplan_t *wp, double sx, double sy, int *ix, int *iy, double *a,
                        ss_reweight_t *rw, float *tl)
{
    const int n = wp->n;
    double G[SS_POLY_MAX_TERMS * SS_POLY_MAX_TERMS];
    ss_pc_reweight_head(wp, rw);
    ss_pc_offsets(ss_pc_unbias(sx, wp->kappa_x), ss_pc_unbias(sy, wp->kappa_y), wp->hsx,
                  wp->hsy, n, ix, iy, rw->fx, rw->fy);
    ss_pc_powers(wp->lambda, n, rw->d);
    const int m = ss_pc_gram(rw->fx, rw->fy, rw->d, n, wp->degree, wp->gamma, G);
    ss_pc_reweight_system(rw, G, m);
    if (ss_pc_poly_solve(G, m, rw->fx, rw->fy, rw->d, n, a) != 0)
        return -1;
    double a2 = 0.0;
    for (int k = 0; k < n; k++)
        a2 += a[k] * a[k];
    if (wp->masked)
        *tl = ss_pc_gmask_tl(wp->tau, wp->sigma, wp->g, a2);
    return 0;
}


#endif
