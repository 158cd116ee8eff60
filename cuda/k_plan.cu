/*
 * k_plan.cu — the frame's prediction plan on the device (ALGORITHM §3):
 * from the shift the registration left in the result block, the offsets,
 * the poly weights, the re-weighting block and the guided mask's guide
 * threshold, into the parameter block where the whitening and the guided
 * filter read them, and to the host's pinned mirror. The arithmetic is
 * plan_core.h's, which the host runs for its own plan: the same bits.
 *
 * One warp: the offsets, the Gram terms and the weights frame by frame on
 * the lanes, the Gram sums entry by entry, the M×M solve (in registers:
 * M is a template constant) and the sums whose order is fixed (λ^k,
 * Σ a_k²) on lane 0: each element with plan_core.h's own arithmetic, so
 * the bits are ss_pc_plan's.
 */
#include "cu_internal.h"
#include "pipeline/plan_core.h"

namespace {

/* The registration found a shift: the coarse vote and the fine step both
 * succeeded (ss_fine_report's ok). */
__device__ bool registered(const cu_results_t *r)
{
    return r->coarse.ok && r->fine_st.phase == SS_FINE_DONE && r->fine_st.why == SS_FW_NONE;
}

/* The guided filter's source mask, when wp->masked: the host's (gm_in)
 * with the guide threshold of the weights' a2 (0 where they failed). */
__device__ void plan_mask(cu_params_t *p, int ok, double a2)
{
    const ss_wplan_t *wp = &p->wp;
    if (!wp->masked)
        return;
    p->gf_mask = p->gm_in;
    p->gf_mask.tl = ok ? ss_pc_gmask_tl(wp->tau, wp->sigma, wp->g, a2) : 0.0f;
}

/* The warp's scratch: the frames' fractions, λ^k, offsets and weights,
 * one chunk of 32 frames' Gram terms, G and α. */
typedef struct plan_smem {
    double fx[SS_MAX_HISTORY], fy[SS_MAX_HISTORY], d[SS_MAX_HISTORY], a[SS_MAX_HISTORY];
    double term[32][SS_POLY_MAX_TERMS * SS_POLY_MAX_TERMS];
    double G[SS_POLY_MAX_TERMS * SS_POLY_MAX_TERMS], alpha[SS_POLY_MAX_TERMS];
    int ix[SS_MAX_HISTORY], iy[SS_MAX_HISTORY];
    int solved;
} plan_smem_t;

/* G (M×M) on the warp, each entry's frames summed in order as
 * ss_pc_gram_entry sums them: per chunk of 32 frames, lane k forms frame
 * k's M² terms (no divergence: M is a constant), then lane e adds entry
 * e's terms of the chunk. */
template <int M>
__device__ void gram_warp(plan_smem_t *sm, int n, double gamma, int lane)
{
    constexpr int E = M * M, Q = (E + 31) / 32;
    double g[Q];
#pragma unroll
    for (int q = 0; q < Q; q++)
        g[q] = 0.0;
    for (int k0 = 0; k0 < n; k0 += 32) {
        const int k = k0 + lane, kn = n - k0 < 32 ? n - k0 : 32;
        if (k < n) {
#pragma unroll
            for (int e = 0; e < E; e++)
                sm->term[lane][e] = ss_pc_gram_term(sm->d[k], sm->fx[k], sm->fy[k], e / M, e % M);
        }
        __syncwarp();
#pragma unroll
        for (int q = 0; q < Q; q++) {
            const int e = lane + 32 * q;
            if (e < E)
                for (int j = 0; j < kn; j++)
                    g[q] += sm->term[j][e];
        }
        __syncwarp();
    }
#pragma unroll
    for (int q = 0; q < Q; q++) {
        const int e = lane + 32 * q;
        if (e < E)
            sm->G[e] = ss_pc_gram_close(g[q], gamma, e / M, e % M);
    }
    __syncwarp();
}

/* The plan of M terms (1, 3, 6: a constant, so that the terms and the
 * M×M solve stay in registers). */
template <int M>
__device__ void plan_warp(plan_smem_t *sm, cu_params_t *p, const cu_results_t *r,
                          cu_plan_out_t *out)
{
    const unsigned full = 0xffffffffu;
    const ss_wplan_t *wp = &p->wp;
    const int lane = threadIdx.x, n = wp->n;
    const double sx = ss_pc_unbias(r->fine_st.sx, wp->kappa_x);
    const double sy = ss_pc_unbias(r->fine_st.sy, wp->kappa_y);
    const int reg = registered(r);
    for (int k = lane; k < n; k += 32)
        ss_pc_offset(sx, sy, wp->hsx[k], wp->hsy[k], &sm->ix[k], &sm->iy[k], &sm->fx[k],
                     &sm->fy[k]);
    if (lane == 0)
        ss_pc_powers(wp->lambda, n, sm->d);
    __syncwarp();
    gram_warp<M>(sm, n, wp->gamma, lane);
    if (lane == 0) {
        double al[M];
        sm->solved = reg && ss_pc_alpha(sm->G, M, al) == 0;
#pragma unroll
        for (int i = 0; i < M; i++)
            sm->alpha[i] = al[i];
    }
    __syncwarp();
    int finite = 1;
    for (int k = lane; k < n; k += 32) {
        sm->a[k] = sm->solved ? ss_pc_weight(sm->alpha, M, sm->fx[k], sm->fy[k], sm->d[k]) : 0.0;
        finite &= isfinite(sm->a[k]) != 0;
    }
    const int ok = __all_sync(full, finite) && sm->solved;
    __syncwarp();
    ss_reweight_t *rw = &p->rw;
    if (lane == 0) {
        ss_pc_reweight_head(wp, rw);
        rw->m = M;
        rw->tiny = ss_pc_tiny(sm->G, M);
        if (!ok)    /* the safe plan: no re-weighted pixel either */
            rw->min_valid = n + 1;
        double a2 = 0.0;
        for (int k = 0; k < n; k++)
            a2 += sm->a[k] * sm->a[k];
        plan_mask(p, ok, a2);
        out->ok = ok;
        out->n = n;
    }
    for (int e = lane; e < M * M; e += 32)
        rw->G[e] = sm->G[e];
    /* the safe plan where the registration failed or the weights did:
     * nothing predicted from a shift that is not there (zero weights,
     * in-frame offsets) */
    for (int k = lane; k < n; k += 32) {
        const int kx = ok ? sm->ix[k] : 0, ky = ok ? sm->iy[k] : 0;
        const double ak = ok ? sm->a[k] : 0.0;
        rw->fx[k] = sm->fx[k];
        rw->fy[k] = sm->fy[k];
        rw->d[k] = sm->d[k];
        p->ix[k] = out->ix[k] = kx;
        p->iy[k] = out->iy[k] = ky;
        p->a[k] = out->a[k] = ak;
    }
}

/* The lsq plan's first part: the offsets of the registered shift (zero
 * where it failed), for the moments; k_lsq_solve does the rest. */
__device__ void plan_offsets(cu_params_t *p, const cu_results_t *r, cu_plan_out_t *out)
{
    const ss_wplan_t *wp = &p->wp;
    const int reg = registered(r);
    const double sx = ss_pc_unbias(r->fine_st.sx, wp->kappa_x);
    const double sy = ss_pc_unbias(r->fine_st.sy, wp->kappa_y);
    for (int k = threadIdx.x; k < wp->n; k += 32) {
        int ix = 0, iy = 0;
        double fx, fy;
        if (reg)
            ss_pc_offset(sx, sy, wp->hsx[k], wp->hsy[k], &ix, &iy, &fx, &fy);
        p->ix[k] = out->ix[k] = ix;
        p->iy[k] = out->iy[k] = iy;
    }
}

__global__ void __launch_bounds__(32) k_plan(cu_params_t *p, const cu_results_t *r,
                                             cu_plan_out_t *out)
{
    cu_pdl_wait();
    __shared__ plan_smem_t sm;
    if (p->wp.lsq) {
        plan_offsets(p, r, out);
        return;
    }
    switch (ss_pc_terms(p->wp.degree)) {
    case 1: plan_warp<1>(&sm, p, r, out); break;
    case 3: plan_warp<3>(&sm, p, r, out); break;
    default: plan_warp<6>(&sm, p, r, out); break;
    }
}

/* ---- the lsq weights (ss_weights_lsq) on one block ------------------- */

constexpr int LS_THREADS = 256;

/* The largest |M_i| over the block, and whether every M_i is finite
 * (ss_dense_solve's scale and its first test). */
__device__ void lsq_scale(const double *M, int nn, double *scale, int *finite)
{
    __shared__ double wmax[LS_THREADS / 32];
    __shared__ int wfin[LS_THREADS / 32];
    const int t = threadIdx.x;
    double mx = 0.0;
    int fin = 1;
    for (int i = t; i < nn; i += LS_THREADS) {
        const double v = M[i];
        if (!isfinite(v))
            fin = 0;
        else
            mx = fmax(mx, fabs(v));
    }
    for (int o = 16; o > 0; o >>= 1) {
        mx = fmax(mx, __shfl_down_sync(0xffffffffu, mx, o));
        fin &= __shfl_down_sync(0xffffffffu, fin, o);
    }
    if ((t & 31) == 0) {
        wmax[t >> 5] = mx;
        wfin[t >> 5] = fin;
    }
    __syncthreads();
    if (t == 0) {
        double m = 0.0;
        int f = 1;
        for (int w = 0; w < LS_THREADS / 32; w++) {
            m = fmax(m, wmax[w]);
            f &= wfin[w];
        }
        *scale = m;
        *finite = f;
    }
    __syncthreads();
}

/* Column c's pivot as ss_dense_solve picks it (the first row whose |M_rc|
 * beats the diagonal's and every earlier one; a NaN never wins, and a
 * NaN diagonal keeps row c), on warp 0; lane 0 gets (row, |M|). */
__device__ void lsq_pivot(const double *M, int n, int c, int *piv, double *pmax)
{
    const int lane = threadIdx.x & 31;
    double v = -1.0;
    int row = n;
    for (int r = c + 1 + lane; r < n; r += 32) {
        const double a = fabs(M[r * n + c]);
        if (a > v) {
            v = a;
            row = r;
        }
    }
    for (int o = 16; o > 0; o >>= 1) {
        const double ov = __shfl_down_sync(0xffffffffu, v, o);
        const int orow = __shfl_down_sync(0xffffffffu, row, o);
        if (ov > v || (ov == v && orow < row)) {
            v = ov;
            row = orow;
        }
    }
    if (lane == 0) {
        const double d = fabs(M[c * n + c]);
        *piv = c;
        *pmax = d;
        if (d == d && v > d) {
            *piv = row;
            *pmax = v;
        }
    }
}

/* M x = b by ss_dense_solve's steps, element by element on the block
 * (each element's operations those of the host's loop); x into b.
 * Returns whether it succeeded, on every thread. */
__device__ int lsq_solve(double *M, double *b, int n, double *f)
{
    __shared__ double s_scale, s_pmax;
    __shared__ int s_fin, s_piv, s_ok;
    const int t = threadIdx.x;
    lsq_scale(M, n * n, &s_scale, &s_fin);
    if (!s_fin || s_scale == 0.0)
        return 0;
    const double tiny = SS_SOLVE_REL_TOL * (double)n * s_scale;
    for (int c = 0; c < n; c++) {
        if (t < 32)
            lsq_pivot(M, n, c, &s_piv, &s_pmax);
        __syncthreads();
        if (!(s_pmax > tiny))
            return 0;
        const int piv = s_piv;
        if (piv != c) {
            for (int j = c + t; j < n; j += LS_THREADS) {
                const double x = M[c * n + j];
                M[c * n + j] = M[piv * n + j];
                M[piv * n + j] = x;
            }
            if (t == 0) {
                const double x = b[c];
                b[c] = b[piv];
                b[piv] = x;
            }
        }
        __syncthreads();
        const double inv = 1.0 / M[c * n + c];
        for (int r = c + 1 + t; r < n; r += LS_THREADS)
            f[r] = M[r * n + c] * inv;
        __syncthreads();
        const int rows = n - c - 1;
        for (int e = t; e < rows * rows; e += LS_THREADS) {
            const int r = c + 1 + e / rows, j = c + 1 + e % rows;
            if (f[r] != 0.0)
                M[r * n + j] -= f[r] * M[c * n + j];
        }
        for (int r = c + 1 + t; r < n; r += LS_THREADS)
            if (f[r] != 0.0) {
                M[r * n + c] = 0.0;
                b[r] -= f[r] * b[c];
            }
        __syncthreads();
    }
    if (t == 0) {
        int ok = 1;
        for (int r = n - 1; r >= 0; r--) {
            double s = b[r];
            for (int j = r + 1; j < n; j++)
                s -= M[r * n + j] * b[j];
            b[r] = s / M[r * n + r];
        }
        for (int i = 0; i < n; i++)
            ok &= isfinite(b[i]) != 0;
        s_ok = ok;
    }
    __syncthreads();
    return s_ok;
}

/* The lsq weights from the moments Rp (k_lsq's layout: R's upper
 * triangle row by row, then p) as ss_weights_lsq solves them from the
 * full R (cuda_lsq_moments mirrors it the same way), the mask's guide
 * threshold, and the plan out; zero weights where the registration or the
 * solve failed. M: (n + 1)·n doubles of scratch. */
__global__ void __launch_bounds__(LS_THREADS)
k_lsq_solve(cu_params_t *p, const cu_results_t *r, const double *__restrict__ Rp, double *Mg,
            int smem, cu_plan_out_t *out)
{
    cu_pdl_wait();
    extern __shared__ double dsm[];
    __shared__ double s_reg, f[SS_MAX_HISTORY];
    __shared__ int s_reg_ok;
    const ss_wplan_t *wp = &p->wp;
    const int n = wp->n, t = threadIdx.x;
    double *M = smem ? dsm : Mg, *b = M + (size_t)n * n;
    if (t == 0) {
        double tr = 0.0;
        for (int k = 0; k < n; k++)
            tr += Rp[k * n + k];
        s_reg = wp->gamma * tr / n;
        s_reg_ok = registered(r);
    }
    __syncthreads();
    for (int i = t; i < n * n; i += LS_THREADS) {
        const int k = i / n, l = i % n;
        const double v = k <= l ? Rp[k * n + l] : Rp[l * n + k];
        M[i] = k == l ? v + s_reg : v;
    }
    for (int k = t; k < n; k += LS_THREADS)
        b[k] = Rp[(size_t)n * n + k];
    __syncthreads();
    const int ok = s_reg_ok && n >= 1 && lsq_solve(M, b, n, f);
    for (int k = t; k < n; k += LS_THREADS)
        p->a[k] = out->a[k] = ok ? b[k] : 0.0;
    if (t == 0) {
        double a2 = 0.0;
        for (int k = 0; k < n; k++)
            a2 += ok ? b[k] * b[k] : 0.0;
        plan_mask(p, ok, a2);
        out->ok = ok;
        out->n = n;
    }
}

} // namespace

extern "C" cudaError_t cu_plan(cu_params_t *p, const cu_results_t *res, cu_plan_out_t *out,
                               cudaStream_t s)
{
    cu_launch(k_plan, 1, 32, 0, s, p, res, out);
    return cudaGetLastError();
}

extern "C" cudaError_t cu_lsq_solve(cu_params_t *p, const cu_results_t *res, int n,
                                    const double *Rp, double *scratch, cu_plan_out_t *out,
                                    cudaStream_t s)
{
    const size_t bytes = ((size_t)n * n + n) * sizeof(double);
    const int smem = bytes <= 40 * 1024;
    cu_launch(k_lsq_solve, 1, LS_THREADS, smem ? bytes : 0, s, p, res, Rp, scratch, smem, out);
    return cudaGetLastError();
}
