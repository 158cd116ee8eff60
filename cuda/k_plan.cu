/*
 * k_plan.cu — the frame's prediction plan on the device (ALGORITHM §3):
 * from the shift the registration left in the result block, the offsets,
 * the poly weights, the re-weighting block and the guided mask's guide
 * threshold, into the parameter block where the whitening and the guided
 * filter read them, and to the host's pinned mirror. The arithmetic is
 * plan_core.h's, which the host runs for its own plan: the same bits.
 *
 * One warp: the offsets and the weights frame by frame on the lanes, the
 * Gram matrix entry by entry, the 6×6 solve and the sums that fix an
 * order (λ^k, Σ a_k²) on lane 0: each element with plan_core.h's own
 * arithmetic, so the bits are ss_pc_plan's.
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

__global__ void __launch_bounds__(32) k_plan(cu_params_t *p, const cu_results_t *r,
                                             cu_plan_out_t *out)
{
    __shared__ double fx[SS_MAX_HISTORY], fy[SS_MAX_HISTORY], d[SS_MAX_HISTORY];
    __shared__ double a[SS_MAX_HISTORY], G[SS_POLY_MAX_TERMS * SS_POLY_MAX_TERMS];
    __shared__ double alpha[SS_POLY_MAX_TERMS];
    __shared__ int ix[SS_MAX_HISTORY], iy[SS_MAX_HISTORY], solved;
    const unsigned full = 0xffffffffu;
    const ss_wplan_t *wp = &p->wp;
    const int lane = threadIdx.x, n = wp->n, degree = wp->degree, m = ss_pc_terms(degree);
    const double sx = ss_pc_unbias(r->fine_st.sx, wp->kappa_x);
    const double sy = ss_pc_unbias(r->fine_st.sy, wp->kappa_y);
    for (int k = lane; k < n; k += 32)
        ss_pc_offset(sx, sy, wp->hsx[k], wp->hsy[k], &ix[k], &iy[k], &fx[k], &fy[k]);
    if (lane == 0)
        ss_pc_powers(wp->lambda, n, d);
    __syncwarp();
    for (int e = lane; e < m * m; e += 32)
        G[e] = ss_pc_gram_entry(fx, fy, d, n, degree, wp->gamma, e / m, e % m);
    __syncwarp();
    if (lane == 0)
        solved = registered(r) && ss_pc_alpha(G, m, alpha) == 0;
    __syncwarp();
    int finite = 1;
    for (int k = lane; k < n; k += 32) {
        a[k] = solved ? ss_pc_weight(alpha, m, fx[k], fy[k], d[k], degree) : 0.0;
        finite &= isfinite(a[k]) != 0;
    }
    const int ok = __all_sync(full, finite) && solved;
    __syncwarp();
    ss_reweight_t *rw = &p->rw;
    if (lane == 0) {
        ss_pc_reweight_head(wp, rw);
        rw->m = m;
        rw->tiny = ss_pc_tiny(G, m);
        if (!ok)    /* the safe plan: no re-weighted pixel either */
            rw->min_valid = n + 1;
        double a2 = 0.0;
        for (int k = 0; k < n; k++)
            a2 += a[k] * a[k];
        if (wp->masked) {
            p->gf_mask = p->gm_in;
            p->gf_mask.tl = ok ? ss_pc_gmask_tl(wp->tau, wp->sigma, wp->g, a2) : 0.0f;
        }
        out->ok = ok;
        out->n = n;
    }
    for (int e = lane; e < m * m; e += 32)
        rw->G[e] = G[e];
    /* the safe plan where the registration failed or the weights did:
     * nothing predicted from a shift that is not there (zero weights,
     * in-frame offsets) */
    for (int k = lane; k < n; k += 32) {
        const int kx = ok ? ix[k] : 0, ky = ok ? iy[k] : 0;
        const double ak = ok ? a[k] : 0.0;
        rw->fx[k] = fx[k];
        rw->fy[k] = fy[k];
        rw->d[k] = d[k];
        p->ix[k] = out->ix[k] = kx;
        p->iy[k] = out->iy[k] = ky;
        p->a[k] = out->a[k] = ak;
    }
}

} // namespace

extern "C" cudaError_t cu_plan(cu_params_t *p, const cu_results_t *res, cu_plan_out_t *out,
                               cudaStream_t s)
{
    k_plan<<<1, 32, 0, s>>>(p, res, out);
    return cudaGetLastError();
}
