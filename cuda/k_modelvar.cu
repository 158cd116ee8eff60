/*
 * k_modelvar.cu — the model-error term of the noise model (stages.h §6b)
 * on the GPU; modelvar.c is the reference. The star map itself is the
 * high-pass with the star cut of its background (cu_hipass_to) and the
 * matched filter (cu_matched, star = 1); here: the template D, the fit's
 * samples, and the division of the SNR map. Every expression is
 * modelvar.c's, in the same float order (built with --fmad=false), so the
 * planes agree to the bit.
 */
#include "cu_internal.h"
#include "cu_grid.cuh"

#include <math.h>

namespace {

constexpr int TX = 32, TY = 8;

inline dim3 grid2(int w, int h)
{
    return dim3((unsigned)((w + TX - 1) / TX), (unsigned)((h + TY - 1) / TY));
}

/* ss_mv_template; the first thread zeroes the gather's count (no memset
 * node between the two launches) */
__global__ void k_mv_template(const float *__restrict__ t, int w, int h, float *__restrict__ D,
                              unsigned int *count)
{
    cu_pdl_wait();
    const int x = blockIdx.x * TX + threadIdx.x, y = blockIdx.y * TY + threadIdx.y;
    if (x == 0 && y == 0)
        *count = 0u;
    if (x >= w || y >= h)
        return;
    const size_t i = (size_t)y * (size_t)w + (size_t)x;
    if (x == 0 || y == 0 || x == w - 1 || y == h - 1) {
        D[i] = __int_as_float(0x7fc00000);
        return;
    }
    const float gx = 0.5f * (t[i + 1] - t[i - 1]);
    const float gy = 0.5f * (t[i + (size_t)w] - t[i - (size_t)w]);
    const float g2 = gx * gx + gy * gy;
    const float v = g2 / fmaxf(fmaxf(t[i], sqrtf(g2)), 1.0f);
    D[i] = isnan(t[i]) ? __int_as_float(0x7fc00000) : v;
}

/* ss_mv_gather, compacted through a warp-aggregated counter (the median
 * that uses the samples does not depend on their order); samples past
 * cap are counted, not stored. */
__global__ void k_mv_gather(const cu_params_t *__restrict__ p, const float *__restrict__ z,
                            const float *__restrict__ D, int w, int h, float *__restrict__ q,
                            unsigned int cap, unsigned int *count)
{
    cu_pdl_wait();
    const int st = p->mv_stride;
    const int gx = blockIdx.x * TX + threadIdx.x, gy = blockIdx.y * TY + threadIdx.y;
    const long long x = (long long)gx * st, y = (long long)gy * st;
    bool ok = x < w && y < h;
    float zv = 0.0f, tv = 0.0f;
    if (ok) {
        const size_t i = (size_t)y * (size_t)w + (size_t)x;
        zv = z[i];
        tv = D[i];
        ok = isfinite(zv) && isfinite(tv) && tv >= p->mv_tmin;
    }
    const unsigned int bal = __ballot_sync(0xffffffffu, ok);
    const unsigned int k = cu_warp_reserve((unsigned int)__popc(bal), count) +
                           (unsigned int)__popc(bal & ((1u << cu_lane()) - 1u));
    if (ok && k < cap)
        q[k] = (zv * zv / SS_MV_CHI2_MED - 1.0f) / (tv * tv);     /* ss_mv_q */
}

/* ss_mv_apply, with raw, of β = ss_mv_beta from the median of the samples
 * (cu_select_median_buf's ws), which every thread takes and the first
 * writes to res->mv_beta */
__global__ void k_mv_apply(const cu_sel_ws_t *__restrict__ ws, cu_results_t *res,
                           float *__restrict__ z, const float *__restrict__ D,
                           float *__restrict__ raw, size_t n)
{
    cu_pdl_wait();
    const float m = ws->st[0].result;
    const float beta = ws->ncomp >= SS_MV_MIN_SAMPLES && m > 0.0f ? m : 0.0f;
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i == 0)
        res->mv_beta = beta;
    if (i >= n)
        return;
    const float zv = z[i], tv = D[i];
    raw[i] = zv;
    if (beta > 0.0f && isfinite(zv) && isfinite(tv))
        z[i] = zv / sqrtf(1.0f + beta * tv * tv);
}

} // namespace

extern "C" cudaError_t cu_mv_template(const float *t, int w, int h, float *D, unsigned int *count,
                                      cudaStream_t s)
{
    cu_launch(k_mv_template, grid2(w, h), dim3(TX, TY), 0, s, t, w, h, D, count);
    return cudaGetLastError();
}

/* The grid covers the sampled rows and columns: stride is read on the
 * host side from the same parameter block (ss_mv_gather's stride < 1 is
 * 1), so the launch is sized for stride 1 and threads beyond the frame
 * return. */
extern "C" cudaError_t cu_mv_gather(const cu_params_t *p, const float *z, const float *D, int w,
                                    int h, float *q, unsigned int cap, unsigned int *count,
                                    cudaStream_t s)
{
    cu_launch(k_mv_gather, grid2(w, h), dim3(TX, TY), 0, s, p, z, D, w, h, q, cap, count);
    return cudaGetLastError();
}

extern "C" cudaError_t cu_mv_apply(const cu_sel_ws_t *ws, cu_results_t *res, float *z,
                                   const float *D, float *raw, size_t n, cudaStream_t s)
{
    const size_t blocks = (n + 255) / 256;
    cu_launch(k_mv_apply, (unsigned)(blocks > 0 ? blocks : 1), 256, 0, s, ws, res, z, D, raw, n);
    return cudaGetLastError();
}
