/*
 * k_matched.cu — ALGORITHM.md §6 on the GPU: the valid-aware separable
 * matched filter and SNR map (matched.c is the reference).
 *
 * One kernel, tiled in shared memory: a 32×32 output tile loads its input
 * with an apron of R on every side, runs the row pass over the tile's
 * rows plus the vertical apron (h1 = Σ k·v·in, hv1 = Σ k·v, hv2 = Σ k²·v,
 * float, taps ascending), keeps them in shared memory, and runs the
 * column pass (num = Σ k·h1, den = Σ k·hv1, den2 = Σ k²·hv2; z = num /
 * (σ·sqrtf(den2))). With a sub-pixel phase bank (p->mf_phases = n > 1)
 * the row pass runs once per x phase into the same shared buffers, the
 * column pass once per y phase after it, and each thread folds its
 * pixels' phase values in registers in matched.c's order (x phase outer,
 * y phase inner; larger |z| wins, NaN gives way), so the bank costs n
 * row passes and n² column passes over the tile, one load of it. The row pass of the apron rows is
 * recomputed by the neighbouring tiles instead of going through device
 * memory. Out-of-frame taps are loaded as NaN, i.e. as invalid taps: they
 * add +0 where the CPU skips them, which is the same float. A whole tile
 * (every input of it and its apron finite: most tiles of a frame) takes
 * matched_whole, where hv1, hv2, den and den2 are the same at every pixel:
 * a third of the sums, and independent ones side by side.
 */
#include "cu_internal.h"

#include <math.h>

namespace {

constexpr int MT = 32;              /* output tile (square) */
constexpr int MTY = 8;              /* block is MT × MTY threads */

/* The bank's fold of one phase value v into zo (matched.c's order): the
 * first phase, then a larger |z| or a NaN replaced. */
__device__ __forceinline__ void mf_fold(float &zo, float v, bool first)
{
    if (first || isnan(zo) || fabsf(v) > fabsf(zo))
        zo = v;
}

/* x phase px of a whole tile: k_matched's general path with every tap
 * valid, so the same floats. The row pass forms h1 alone (this thread's
 * column, four rows at a time: independent sums, each in tap order); hv1
 * and hv2 are then the sums of the taps, den and den2 the sums of the taps
 * times them. The column pass forms num for this thread's four output
 * rows together and folds each y phase into zo. tv and h1 point at this
 * thread's column. */
__device__ __forceinline__ void matched_whole(int R, const float *kx, const float *kx2,
                                              const float (*k)[CU_KTAPS],
                                              const float (*k2)[CU_KTAPS], int n, int px,
                                              float sigma, const float *tv, int TWI, float *h1,
                                              float *zo)
{
    constexpr int Q = MT / MTY;                 /* rows per thread and pass */
    const int ty = threadIdx.y;
    for (int ry0 = ty; ry0 < TWI; ry0 += Q * MTY) {
        float hs[Q];
        const float *rv[Q];
#pragma unroll
        for (int q = 0; q < Q; q++) {
            hs[q] = 0.0f;
            rv[q] = tv + min(ry0 + q * MTY, TWI - 1) * TWI;
        }
        for (int i = 0; i <= 2 * R; i++)
#pragma unroll
            for (int q = 0; q < Q; q++)
                hs[q] += kx[i] * rv[q][i];
#pragma unroll
        for (int q = 0; q < Q; q++)
            if (ry0 + q * MTY < TWI)
                h1[(ry0 + q * MTY) * MT] = hs[q];
    }
    __syncthreads();
    float hv1 = 0.0f, hv2 = 0.0f;
    for (int i = 0; i <= 2 * R; i++) {
        hv1 += kx[i] * 1.0f;
        hv2 += kx2[i] * 1.0f;
    }
    for (int py = 0; py < n; py++) {
        const float *ky = k[py], *ky2 = k2[py];
        float den = 0.0f, den2 = 0.0f, num[Q];
#pragma unroll
        for (int q = 0; q < Q; q++)
            num[q] = 0.0f;
        for (int j = 0; j <= 2 * R; j++) {
            den += ky[j] * hv1;
            den2 += ky2[j] * hv2;
#pragma unroll
            for (int q = 0; q < Q; q++)
                num[q] += ky[j] * h1[(ty + q * MTY + j) * MT];
        }
        const float d = sigma * sqrtf(den2);
#pragma unroll
        for (int q = 0; q < Q; q++) {
            mf_fold(zo[q], den >= 0.5f ? num[q] / d : __int_as_float(0x7fc00000),
                    px == 0 && py == 0);
        }
    }
}

__global__ void k_matched(const cu_params_t *__restrict__ p, int R, int star,
                          const float *__restrict__ dev_sigma, const float *__restrict__ in, int w,
                          int h, float *__restrict__ z)
{
    cu_pdl_wait();
    extern __shared__ float sm[];
    __shared__ float k[SS_MF_MAX_PHASES][CU_KTAPS], k2[SS_MF_MAX_PHASES][CU_KTAPS];
    const int n = star ? 1 : p->mf_phases;
    const int TWI = MT + 2 * R;                 /* input tile width and height */
    float *tv = sm;                             /* TWI × TWI: the value, 0 where invalid */
    float *tf = tv + TWI * TWI;                 /* TWI × TWI: 1 where valid, else 0 */
    float *h1 = tf + TWI * TWI;                 /* TWI rows × MT */
    float *hv1 = h1 + TWI * MT;
    float *hv2 = hv1 + TWI * MT;
    const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * MT + tx;
    const int x0 = blockIdx.x * MT, y0 = blockIdx.y * MT;
    for (int i = tid; i < n * (2 * R + 1); i += MT * MTY) {
        const int ph = i / (2 * R + 1), t = i - ph * (2 * R + 1);
        const float kv = star ? p->mv_k[t] : p->mf_k[ph][t];
        k[ph][t] = kv;
        k2[ph][t] = kv * kv;
    }
    /* validity resolved once per input pixel, not once per tap: k·0 and
     * k·1 are the +0 and k the reference adds for an invalid / valid tap */
    bool mine = true;
    for (int ry = ty; ry < TWI; ry += MTY) {
        const int yy = y0 - R + ry;
        const bool row_in = yy >= 0 && yy < h;
        const float *src = in + (size_t)(row_in ? yy : 0) * (size_t)w;
        for (int cx = tx; cx < TWI; cx += MT) {
            const int xx = x0 - R + cx;
            const float v = row_in && xx >= 0 && xx < w ? src[xx] : __int_as_float(0x7fc00000);
            const bool ok = isfinite(v);
            tv[ry * TWI + cx] = ok ? v : 0.0f;
            tf[ry * TWI + cx] = ok ? 1.0f : 0.0f;
            mine = mine && ok;
        }
    }
    /* A whole tile (every input finite, so inside the frame with its
     * apron) has the same hv1, hv2, den and den2 at every pixel: the
     * sums of the taps, formed once (matched_whole) in the same order. */
    const bool whole = __syncthreads_and(mine);
    const float sigma = dev_sigma ? *dev_sigma : star ? p->mv_sigma : p->mf_sigma;
    const int x = x0 + tx;
    float zo[MT / MTY];                         /* the fold of the rows oy = ty + MTY·r */
    for (int r = 0; r < MT / MTY; r++)
        zo[r] = __int_as_float(0x7fc00000);
    for (int px = 0; px < n; px++) {
        if (px > 0)
            __syncthreads();                    /* the last x phase read */
        /* rows: h1 = Σ k·v·in, hv1 = Σ k·v (taps ascending), the tile's rows
         * plus the vertical apron, thread tx owns column tx */
        const float *kx = k[px], *kx2 = k2[px];
        if (whole) {
            matched_whole(R, kx, kx2, k, k2, n, px, sigma, tv + tx, TWI, h1 + tx, zo);
            continue;
        }
        for (int ry = ty; ry < TWI; ry += MTY) {
            const float *rv = tv + ry * TWI + tx, *rf = tf + ry * TWI + tx;
            float hs = 0.0f, vs = 0.0f, v2 = 0.0f;
            for (int i = 0; i <= 2 * R; i++) {
                hs += kx[i] * rv[i];
                vs += kx[i] * rf[i];
                v2 += kx2[i] * rf[i];
            }
            h1[ry * MT + tx] = hs;
            hv1[ry * MT + tx] = vs;
            hv2[ry * MT + tx] = v2;
        }
        __syncthreads();
        /* columns, each y phase, folded as matched.c does (px outer, py
         * inner; the first phase, then larger |z| or a NaN replaced) */
        if (x >= w)
            continue;
        for (int r = 0, oy = ty; oy < MT; r++, oy += MTY) {
            const int y = y0 + oy;
            if (y >= h)
                break;
            const int j0 = max(0, R - y), j1 = min(2 * R, h - 1 - y + R);
            const bool c_ok = tf[(oy + R) * TWI + tx + R] != 0.0f;
            for (int py = 0; py < n; py++) {
                const float *ky = k[py], *ky2 = k2[py];
                float num = 0.0f, den = 0.0f, den2 = 0.0f;
                for (int j = j0; j <= j1; j++) {
                    const int e = (oy + j) * MT + tx;
                    num += ky[j] * h1[e];
                    den += ky[j] * hv1[e];
                    den2 += ky2[j] * hv2[e];
                }
                const float v =
                    c_ok && den >= 0.5f ? num / (sigma * sqrtf(den2)) : __int_as_float(0x7fc00000);
                mf_fold(zo[r], v, px == 0 && py == 0);
            }
        }
    }
    if (x >= w)
        return;
    for (int r = 0, oy = ty; oy < MT; r++, oy += MTY) {
        const int y = y0 + oy;
        if (y >= h)
            break;
        z[(size_t)y * (size_t)w + (size_t)x] = zo[r];
    }
}

} // namespace

extern "C" cudaError_t cu_matched(const cu_params_t *p, int R, int star, const float *dev_sigma,
                                  const float *in, int w, int h, float *z, cudaStream_t s)
{
    const int TWI = MT + 2 * R;
    const size_t sm = (2 * (size_t)TWI * TWI + 3 * (size_t)TWI * MT) * sizeof(float);
    if (sm > 48 * 1024) {
        cudaError_t e =
            cudaFuncSetAttribute(k_matched, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm);
        if (e != cudaSuccess)
            return e;
    }
    const dim3 grid((unsigned)((w + MT - 1) / MT), (unsigned)((h + MT - 1) / MT));
    cu_launch(k_matched, grid, dim3(MT, MTY), sm, s, p, R, star, dev_sigma, in, w, h, z);
    return cudaGetLastError();
}
