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
        if (wp->masked) {
            p->gf_mask = p->gm_in;
            p->gf_mask.tl = ok ? ss_pc_gmask_tl(wp->tau, wp->sigma, wp->g, a2) : 0.0f;
        }
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

__global__ void __launch_bounds__(32) k_plan(cu_params_t *p, const cu_results_t *r,
                                             cu_plan_out_t *out)
{
    __shared__ plan_smem_t sm;
    switch (ss_pc_terms(p->wp.degree)) {
    case 1: plan_warp<1>(&sm, p, r, out); break;
    case 3: plan_warp<3>(&sm, p, r, out); break;
    default: plan_warp<6>(&sm, p, r, out); break;
    }
}

} // namespace

extern "C" cudaError_t cu_plan(cu_params_t *p, const cu_results_t *res, cu_plan_out_t *out,
                               cudaStream_t s)
{
    k_plan<<<1, 32, 0, s>>>(p, res, out);
    return cudaGetLastError();
}
