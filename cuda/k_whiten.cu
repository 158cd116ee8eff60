/*
 * k_whiten.cu — ALGORITHM.md §3 on the GPU: prediction and residual from
 * the shifted history (one pass over the history ring, in its own storage
 * type), the lsq moments (one pass, all N(N+1)/2 + N products from one
 * read of each history pixel), and object removal + storage of the frame
 * into a history slot.
 *
 * whiten.c / history.c are the reference. The prediction accumulates
 * a_k·y_k in double over k ascending, exactly as the CPU does, so P and r
 * are bit-identical; the lsq sums are reduced in parallel (double).
 * Everything per frame (slot pointers, offsets, weights, n) is read from
 * the parameter block, so the launches can be replayed from a graph.
 *
 * Re-weighting (poly mode) at pixels with an invalid or outside y_k runs
 * in two steps: the whitening kernel lists those pixels (block-wise: a
 * shared counter, one global atomic per block), and a second kernel gives
 * each listed pixel a thread that solves its subset system in double
 * (reweight_core.h, the CPU's code). Solving in place would make nearly
 * every warp run the slow path — with a few per cent of such pixels,
 * almost every 32 holds one — while the list keeps the fast path as it
 * was and the slow work dense.
 */
#include "cu_clean.cuh"
#include "cu_internal.h"
#include "pipeline/reweight_core.h"

#include <limits.h>
#include <math.h>

namespace {

constexpr int TX = 32, TY = 8;
constexpr int LSQ_THREADS = 256;
constexpr int LSQ_PPT = 8;          /* (k, l) pairs per thread */
constexpr int LSQ_TP = 64;          /* pixels per tile */

__device__ __forceinline__ float qnan()
{
    return __int_as_float(0x7fc00000);
}

/* A history pixel as double, NaN for the sentinel (ss_hist_value). */
template <typename T> struct hv;
template <> struct hv<uint8_t> {
    static __device__ __forceinline__ double get(const void *p, size_t i)
    {
        const uint8_t v = __ldg(static_cast<const uint8_t *>(p) + i);
        return v == UINT8_MAX ? (double)NAN : (double)v;
    }
};
template <> struct hv<uint16_t> {
    static __device__ __forceinline__ double get(const void *p, size_t i)
    {
        const uint16_t v = __ldg(static_cast<const uint16_t *>(p) + i);
        return v == UINT16_MAX ? (double)NAN : (double)v;
    }
};
template <> struct hv<int16_t> {
    static __device__ __forceinline__ double get(const void *p, size_t i)
    {
        const int16_t v = __ldg(static_cast<const int16_t *>(p) + i);
        return v == INT16_MAX ? (double)NAN : (double)v;
    }
};
template <> struct hv<float> {
    static __device__ __forceinline__ double get(const void *p, size_t i)
    {
        return (double)__ldg(static_cast<const float *>(p) + i);
    }
};

/* Each thread predicts WX pixels of a row, TX apart (the warp's loads stay
 * coalesced): per history frame it computes the row address once and has
 * WX independent loads in flight instead of one. Each pixel's sum is the
 * same k-ascending double sum as whiten.c's. */
constexpr int WX = 4;
constexpr int FIX_THREADS = 128;    /* threads per block of the re-weighting kernel */

/* y_k(x, y) as double: NaN for the sentinel or outside the frame. */
template <typename T>
__device__ __forceinline__ double y_at(const void *hist, int ix, int iy, int w, int h, int x, int y)
{
    const int xx = x + ix, yy = y + iy;
    if (xx < 0 || xx >= w || yy < 0 || yy >= h)
        return (double)NAN;
    return hv<T>::get(hist, (size_t)yy * (size_t)w + (size_t)xx);
}

/* The re-weighted prediction at (x, y), stages.h (ss_whiten with rw):
 * the subset system of the invalid frames (downdated k ascending, LDLᵀ),
 * a_k = d_k·v(f_k)ᵀα on the valid ones, P = Σ a_k·y_k in double over k
 * ascending, the invalid terms adding exact zeros as whiten.c's do; NaN
 * when fewer than min_valid frames are valid or the system is singular.
 * DEG = rw->degree, a constant: the m×m system then lives in registers
 * (with m at run time it sat in local memory, and every step of the
 * solve waited on it: PERFORMANCE.md). */
template <typename T, int DEG>
__device__ __forceinline__ float reweighted_deg(const ss_reweight_t *__restrict__ rw,
                                                const void *const *hs, const int *ixs,
                                                const int *iys, int n, int w, int h, int x, int y)
{
    constexpr int M = DEG < 1 ? 1 : DEG < 2 ? 3 : 6;
    double G[M * M], alpha[M];
#pragma unroll
    for (int q = 0; q < M * M; q++)
        G[q] = rw->G[q];
    int nbad = 0;
    for (int k = 0; k < n; k++)
        if (isnan(y_at<T>(hs[k], ixs[k], iys[k], w, h, x, y))) {
            ss_rw_downdate_deg(rw, k, G, DEG);
            nbad++;
        }
    if (n - nbad < rw->min_valid || ss_rw_solve_m(rw, G, alpha, M) != 0)
        return qnan();
    double acc = 0.0;
    for (int k = 0; k < n; k++) {
        const double v = y_at<T>(hs[k], ixs[k], iys[k], w, h, x, y);
        const bool ok = !isnan(v);
        const double ak = ok ? ss_rw_weight_deg(rw, alpha, k, DEG) : 0.0;
        acc += ak * (ok ? v : 0.0);
    }
    return (float)acc;
}

template <typename T>
__device__ float reweighted(const ss_reweight_t *__restrict__ rw, const void *const *hs,
                            const int *ixs, const int *iys, int n, int w, int h, int x, int y)
{
    switch (rw->degree) {
    case 0:
        return reweighted_deg<T, 0>(rw, hs, ixs, iys, n, w, h, x, y);
    case 1:
        return reweighted_deg<T, 1>(rw, hs, ixs, iys, n, w, h, x, y);
    default:
        return reweighted_deg<T, 2>(rw, hs, ixs, iys, n, w, h, x, y);
    }
}

/* The plain sums of the WX pixels of thread (x0, y): in[j] when every
 * y_k of pixel j lies inside the frame (then acc[j] = Σ a_k·y_k, k
 * ascending, NaN when one is invalid). live = 0: a thread beyond the
 * frame, nothing read. */
template <typename T>
__device__ __forceinline__ void predict(const void *const *hs, const int *ixs, const int *iys,
                                        const double *as, int n, int w, int h, int x0, int y,
                                        bool live, bool *in, double *acc)
{
    /* the offsets' extremes decide which pixels see every history frame */
    bool rows_ok = live && n >= 1;
    int dxmin = INT_MAX, dxmax = INT_MIN;
    for (int k = 0; k < n; k++) {
        const int yy = y + iys[k];
        rows_ok = rows_ok && yy >= 0 && yy < h;
        dxmin = min(dxmin, ixs[k]);
        dxmax = max(dxmax, ixs[k]);
    }
#pragma unroll
    for (int j = 0; j < WX; j++) {
        const int x = x0 + j * TX;
        in[j] = rows_ok && x < w && x + dxmin >= 0 && x + dxmax < w;
        acc[j] = 0.0;
    }
#pragma unroll 4
    for (int k = 0; k < n; k++) {
        const T *row = static_cast<const T *>(hs[k]) + (size_t)(y + iys[k]) * (size_t)w +
                       (ptrdiff_t)(x0 + ixs[k]);
        const double a = as[k];
#pragma unroll
        for (int j = 0; j < WX; j++)
            if (in[j])
                acc[j] += a * hv<T>::get(row, (size_t)j * TX);
    }
}

/* The parameter block's per-frame history into shared memory. */
__device__ __forceinline__ void load_history(const cu_params_t *__restrict__ p, int n, int tid,
                                             int nthreads, const void **hs, int *ixs, int *iys,
                                             double *as)
{
    for (int k = tid; k < n; k += nthreads) {
        hs[k] = p->hist[k];
        ixs[k] = p->ix[k];
        iys[k] = p->iy[k];
        if (as)
            as[k] = p->a[k];
    }
}

/* The strict rule: P and r NaN where any y_k is invalid or outside. */
template <typename T>
__global__ void k_whiten(const cu_params_t *__restrict__ p, const float *__restrict__ cur, int w,
                         int h, float *__restrict__ P, float *__restrict__ r)
{
    cu_pdl_wait();
    __shared__ const void *hs[SS_MAX_HISTORY];
    __shared__ int ixs[SS_MAX_HISTORY], iys[SS_MAX_HISTORY];
    __shared__ double as[SS_MAX_HISTORY];
    const int n = p->n;
    load_history(p, n, threadIdx.y * TX + threadIdx.x, TX * TY, hs, ixs, iys, as);
    __syncthreads();
    const int x0 = blockIdx.x * (TX * WX) + threadIdx.x, y = blockIdx.y * TY + threadIdx.y;
    if (x0 >= w || y >= h)
        return;
    bool in[WX];
    double acc[WX];
    predict<T>(hs, ixs, iys, as, n, w, h, x0, y, true, in, acc);
    const size_t i0 = (size_t)y * (size_t)w + (size_t)x0;
#pragma unroll
    for (int j = 0; j < WX; j++) {
        if (x0 + j * TX >= w)
            break;
        const size_t i = i0 + (size_t)j * TX;
        if (!in[j]) {
            P[i] = r[i] = qnan();
            continue;
        }
        const float pv = (float)acc[j], c = cur[i];
        const bool bad = isnan(c) || isnan(pv);
        P[i] = bad ? qnan() : pv;
        r[i] = bad ? qnan() : c - pv;
    }
}

/* The same plain sums, and the pixels they cannot predict while the
 * current pixel is valid go on the list (NaN for now; k_whiten_fix
 * finishes them). At most 64 registers, room for predict's four history
 * frames of loads in flight (at 32 they spilled); the list costs a mask
 * and one offset per thread. Every thread of a block stays to its
 * barriers. */
template <typename T>
__global__ void __launch_bounds__(TX * TY, 4)
    k_whiten_list(const cu_params_t *__restrict__ p, const float *__restrict__ cur, int w, int h,
                  float *__restrict__ P, float *__restrict__ r, uint32_t *__restrict__ list,
                  unsigned int *__restrict__ count)
{
    cu_pdl_wait();
    __shared__ const void *hs[SS_MAX_HISTORY];
    __shared__ int ixs[SS_MAX_HISTORY], iys[SS_MAX_HISTORY];
    __shared__ double as[SS_MAX_HISTORY];
    __shared__ unsigned s_cnt, s_base;
    const int n = p->n;
    const int tid = threadIdx.y * TX + threadIdx.x;
    load_history(p, n, tid, TX * TY, hs, ixs, iys, as);
    if (tid == 0)
        s_cnt = 0;
    __syncthreads();
    const int x0 = blockIdx.x * (TX * WX) + threadIdx.x, y = blockIdx.y * TY + threadIdx.y;
    const bool live = x0 < w && y < h;
    bool in[WX];
    double acc[WX];
    predict<T>(hs, ixs, iys, as, n, w, h, x0, y, live, in, acc);
    const size_t i0 = (size_t)y * (size_t)w + (size_t)x0;
    unsigned need = 0;                  /* bit j: pixel j goes on the list */
#pragma unroll
    for (int j = 0; j < WX; j++) {
        if (!live || x0 + j * TX >= w)
            continue;
        const size_t i = i0 + (size_t)j * TX;
        const float c = cur[i];
        const float pv = in[j] ? (float)acc[j] : qnan();
        const bool bad = isnan(c) || isnan(pv);
        P[i] = bad ? qnan() : pv;
        r[i] = bad ? qnan() : c - pv;
        if (bad && !isnan(c))
            need |= 1u << j;
    }
    /* block-wise: shared atomics for the slots, one global atomic */
    const unsigned slot = need ? atomicAdd(&s_cnt, (unsigned)__popc(need)) : 0u;
    __syncthreads();
    if (tid == 0)
        s_base = s_cnt ? atomicAdd(count, s_cnt) : 0u;
    __syncthreads();
    unsigned e = s_base + slot;
    for (int j = 0; j < WX; j++)
        if ((need >> j) & 1u)
            list[e++] = (uint32_t)((size_t)y * (size_t)w + (size_t)(x0 + j * TX));
}

/* The listed pixels, one thread each (grid-stride over *count). */
template <typename T>
__global__ void k_whiten_fix(const cu_params_t *__restrict__ p, const float *__restrict__ cur,
                             int w, int h, float *__restrict__ P, float *__restrict__ r,
                             const uint32_t *__restrict__ list,
                             const unsigned int *__restrict__ count)
{
    cu_pdl_wait();
    __shared__ const void *hs[SS_MAX_HISTORY];
    __shared__ int ixs[SS_MAX_HISTORY], iys[SS_MAX_HISTORY];
    const int n = p->n;
    load_history(p, n, threadIdx.x, blockDim.x, hs, ixs, iys, NULL);
    __syncthreads();
    const unsigned total = *count;
    for (unsigned e = blockIdx.x * blockDim.x + threadIdx.x; e < total;
         e += gridDim.x * blockDim.x) {
        const uint32_t i = list[e];
        const int x = (int)(i % (uint32_t)w), y = (int)(i / (uint32_t)w);
        const float pv = reweighted<T>(&p->rw, hs, ixs, iys, n, w, h, x, y);
        const bool bad = isnan(pv);
        P[i] = bad ? qnan() : pv;
        r[i] = bad ? qnan() : cur[i] - pv;
    }
}

/* lsq moments. Each block walks pixel tiles (grid-stride), gathers the
 * n history values and cur of LSQ_TP pixels into shared memory, and each
 * thread accumulates LSQ_PPT of the (k, l) products over the valid pixels
 * (cur and every y_k valid and inside). blockIdx.y picks the group of
 * pairs. Pairs q < n(n+1)/2 are R[k][l], l >= k (row-major upper
 * triangle); the next n are p[k] = Σ cur·y_k. */
template <typename T>
__global__ void k_lsq(const cu_params_t *__restrict__ p, int n, const float *__restrict__ cur,
                      int w, int h, double *__restrict__ Rp)
{
    cu_pdl_wait();
    extern __shared__ float Y[];                    /* (n+1) rows of LSQ_TP+1 */
    __shared__ const void *hs[SS_MAX_HISTORY];
    __shared__ int ixs[SS_MAX_HISTORY], iys[SS_MAX_HISTORY];
    __shared__ int valid[LSQ_TP];
    const int stride = LSQ_TP + 1;
    for (int k = threadIdx.x; k < n; k += blockDim.x) {
        hs[k] = p->hist[k];
        ixs[k] = p->ix[k];
        iys[k] = p->iy[k];
    }
    const int ntri = n * (n + 1) / 2, npairs = ntri + n;
    int pk[LSQ_PPT], pl[LSQ_PPT];
    double acc[LSQ_PPT];
#pragma unroll
    for (int j = 0; j < LSQ_PPT; j++) {
        int q = blockIdx.y * (blockDim.x * LSQ_PPT) + j * blockDim.x + threadIdx.x;
        acc[j] = 0.0;
        pk[j] = -1;
        pl[j] = -1;
        if (q >= npairs)
            continue;
        if (q >= ntri) {
            pk[j] = q - ntri;
            pl[j] = n;              /* the current frame */
        } else {
            int k = 0;
            while (q >= n - k) {
                q -= n - k;
                k++;
            }
            pk[j] = k;
            pl[j] = k + q;
        }
    }
    __syncthreads();
    const long long npix = (long long)w * h;
    const long long ntiles = (npix + LSQ_TP - 1) / LSQ_TP;
    for (long long tile = blockIdx.x; tile < ntiles; tile += gridDim.x) {
        const long long base = tile * LSQ_TP;
        /* gather: element e = k·LSQ_TP + px, k = 0..n (n = cur) */
        for (int e = threadIdx.x; e < (n + 1) * LSQ_TP; e += blockDim.x) {
            const int k = e / LSQ_TP, px = e % LSQ_TP;
            const long long li = base + px;
            float v = qnan();
            if (li < npix) {
                const int y = (int)(li / w), x = (int)(li % w);
                if (k == n) {
                    v = cur[li];
                } else {
                    const int xx = x + ixs[k], yy = y + iys[k];
                    if (xx >= 0 && xx < w && yy >= 0 && yy < h)
                        v = (float)hv<T>::get(hs[k], (size_t)yy * (size_t)w + (size_t)xx);
                }
            }
            Y[k * stride + px] = v;
        }
        __syncthreads();
        for (int px = threadIdx.x; px < LSQ_TP; px += blockDim.x) {
            int ok = 1;
            for (int k = 0; k <= n && ok; k++)
                ok = !isnan(Y[k * stride + px]);
            valid[px] = ok;
        }
        __syncthreads();
#pragma unroll
        for (int j = 0; j < LSQ_PPT; j++) {
            if (pk[j] < 0)
                continue;
            const float *yk = Y + pk[j] * stride, *yl = Y + pl[j] * stride;
            double a = acc[j];
            for (int px = 0; px < LSQ_TP; px++)
                if (valid[px])
                    a += (double)yk[px] * (double)yl[px];
            acc[j] = a;
        }
        __syncthreads();
    }
#pragma unroll
    for (int j = 0; j < LSQ_PPT; j++) {
        if (pk[j] < 0 || acc[j] == 0.0)
            continue;
        double *dst = pl[j] == n ? &Rp[(size_t)n * n + pk[j]] : &Rp[(size_t)pk[j] * n + pl[j]];
        atomicAdd(dst, acc[j]);
    }
}

/* Object removal, first half: bit 1 where a positive label lies within
 * r columns in the same row. */
__global__ void k_dilate_rows(const cu_params_t *__restrict__ p, const int32_t *__restrict__ labels,
                              int w, int h, uint8_t *__restrict__ m)
{
    cu_pdl_wait();
    const int x = blockIdx.x * TX + threadIdx.x, y = blockIdx.y * TY + threadIdx.y;
    if (x >= w || y >= h)
        return;
    bool v = false;
    if (p->store_remove) {     /* no early exit: the loads go out together */
        const int r = max(p->store_radius, 0);
        const int32_t *row = labels + (size_t)y * (size_t)w;
        for (int xx = max(x - r, 0); xx <= min(x + r, w - 1); xx++)
            v |= row[xx] > 0;
    }
    m[(size_t)y * (size_t)w + (size_t)x] = v;
}

__device__ __forceinline__ float round_clamp(float v, float lo, float hi)
{
    v = roundf(v);
    return v < lo ? lo : v > hi ? hi : v;
}

template <typename T> __device__ __forceinline__ T store_conv(float v);
template <> __device__ __forceinline__ uint8_t store_conv<uint8_t>(float v)
{
    return isnan(v) ? UINT8_MAX : (uint8_t)round_clamp(v, 0.0f, UINT8_MAX - 1);
}
template <> __device__ __forceinline__ uint16_t store_conv<uint16_t>(float v)
{
    return isnan(v) ? UINT16_MAX : (uint16_t)round_clamp(v, 0.0f, UINT16_MAX - 1);
}
template <> __device__ __forceinline__ int16_t store_conv<int16_t>(float v)
{
    return isnan(v) ? INT16_MAX : (int16_t)round_clamp(v, INT16_MIN, INT16_MAX - 1);
}
template <> __device__ __forceinline__ float store_conv<float>(float v)
{
    return v;
}

/* Second half and the store: the footprint is the column dilation of
 * bit 1; footprint pixels take P, the others the frame — cleaned of sharp
 * outliers first when csig is given (ss_clean_sharp: replaced by the
 * median where v - med > (float)k·σ and v - med >= ratio·(v - ring min)). */
template <typename T>
__global__ void k_store(const cu_params_t *__restrict__ p, const float *__restrict__ frame,
                        const float *__restrict__ P, const uint8_t *__restrict__ m,
                        const float *__restrict__ med, const float *__restrict__ csig, int w,
                        int h)
{
    cu_pdl_wait();
    const int x = blockIdx.x * TX + threadIdx.x, y = blockIdx.y * TY + threadIdx.y;
    if (x >= w || y >= h)
        return;
    const size_t i = (size_t)y * (size_t)w + (size_t)x;
    /* every load first: the pixel, its median, the mask's column (no
     * early exit: the loads go out together) */
    const float fv = frame[i], md = csig ? med[i] : 0.0f;
    unsigned int fp = 0;
    if (p->store_remove) {
        const int r = max(p->store_radius, 0);
        for (int yy = max(y - r, 0); yy <= min(y + r, h - 1); yy++)
            fp |= m[(size_t)yy * (size_t)w + (size_t)x];
    }
    float v;
    if (fp) {
        v = P[i];
    } else {
        v = csig ? cu_clean_v(frame, fv, md, *csig, p->clean_k, p->clean_ratio, w, h, x, y) : fv;
    }
    static_cast<T *>(p->store_dst)[i] = store_conv<T>(v);
}

constexpr int ST_ROWS = 4;              /* k_store_tile: output rows a thread */
constexpr int ST_TH = TY * ST_ROWS;     /* a tile's rows (its columns: TX) */
static_assert(TX == 32 && TX + 2 * CU_STORE_RMAX <= 64, "a row's mask is one 64-bit word");

/* k_store_tile's footprint of output row q of the tile: bit c for column
 * x0 + c (k_dilate_rows then k_store's column loop, as bit masks). Warp
 * wid builds the masks of the tile's rows and their apron of r rows:
 * the positive labels of the row's TX + 2r columns from x0 - r (two
 * ballots), dilated along the row by shifts; then the first TX threads
 * dilate them along the columns into fp[]. Outside the frame nothing is
 * a label. Every thread of the block calls it; fp[] is complete after
 * the caller's next barrier. */
__device__ __forceinline__ void store_footprint(const int32_t *__restrict__ labels, int w, int h,
                                                int x0, int y0, int r, unsigned *rows,
                                                unsigned *fp)
{
    const int lane = threadIdx.x, wid = threadIdx.y;
    for (int rr = wid; rr < ST_TH + 2 * r; rr += TY) {
        const int y = y0 - r + rr, xa = x0 - r + lane, xb = xa + TX;
        const int32_t *row = labels + (size_t)min(max(y, 0), h - 1) * (size_t)w;
        const bool yin = y >= 0 && y < h;
        const bool a = yin && xa >= 0 && xa < w && row[xa] > 0;
        const bool b = yin && lane < 2 * r && xb < w && row[xb] > 0;
        const unsigned long long m = (unsigned long long)__ballot_sync(0xffffffffu, a) |
                                     (unsigned long long)__ballot_sync(0xffffffffu, b) << 32;
        unsigned long long d = 0;
        for (int k = 0; k <= 2 * r; k++)
            d |= m >> k;
        if (lane == 0)
            rows[rr] = (unsigned)d;
    }
    __syncthreads();
    const int q = wid * TX + lane;
    if (q < ST_TH) {
        unsigned f = 0;
        for (int k = 0; k <= 2 * r; k++)
            f |= rows[q + k];
        fp[q] = f;
    }
}

/* The history store with its object removal in one pass (radius up to
 * CU_STORE_RMAX): a block stores a tile of TX columns and ST_TH rows,
 * k_store's choice at each pixel with store_footprint's footprint; the
 * pixels and their medians are loaded before the labels. */
template <typename T>
__global__ void __launch_bounds__(TX * TY)
    k_store_tile(const cu_params_t *__restrict__ p, const float *__restrict__ frame,
                 const float *__restrict__ P, const int32_t *__restrict__ labels,
                 const float *__restrict__ med, const float *__restrict__ csig, int w, int h)
{
    cu_pdl_wait();
    __shared__ unsigned rows[ST_TH + 2 * CU_STORE_RMAX], fp[ST_TH];
    const int x0 = blockIdx.x * TX, y0 = blockIdx.y * ST_TH, x = x0 + threadIdx.x;
    float fv[ST_ROWS], md[ST_ROWS];
#pragma unroll
    for (int k = 0; k < ST_ROWS; k++) {
        const int y = y0 + threadIdx.y + k * TY;
        const bool in = x < w && y < h;
        const size_t i = (size_t)y * (size_t)w + (size_t)x;
        fv[k] = in ? frame[i] : 0.0f;
        md[k] = in && csig ? med[i] : 0.0f;
    }
    const int r = p->store_remove ? min(max(p->store_radius, 0), CU_STORE_RMAX) : -1;
    if (r >= 0) {
        store_footprint(labels, w, h, x0, y0, r, rows, fp);
    } else if (threadIdx.y * TX + threadIdx.x < ST_TH) {
        fp[threadIdx.y * TX + threadIdx.x] = 0u;
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < ST_ROWS; k++) {
        const int q = threadIdx.y + k * TY, y = y0 + q;
        if (x >= w || y >= h)
            continue;
        const size_t i = (size_t)y * (size_t)w + (size_t)x;
        float v;
        if ((fp[q] >> threadIdx.x) & 1u)
            v = P[i];
        else
            v = csig ? cu_clean_v(frame, fv[k], md[k], *csig, p->clean_k, p->clean_ratio, w, h,
                                  x, y)
                     : fv[k];
        static_cast<T *>(p->store_dst)[i] = store_conv<T>(v);
    }
}

inline dim3 grid2(int w, int h)
{
    return dim3((unsigned)((w + TX - 1) / TX), (unsigned)((h + TY - 1) / TY));
}

} // namespace

/* f(T()) for the history's element type T that hdt names; bad for any
 * other type. */
template <class R, class F>
static R by_hist_type(ss_dtype_t hdt, R bad, F f)
{
    switch (hdt) {
    case SS_DT_U8: return f(uint8_t());
    case SS_DT_U16: return f(uint16_t());
    case SS_DT_I16: return f(int16_t());
    case SS_DT_F32: return f(float());
    default: return bad;
    }
}

template <typename T>
static cudaError_t whiten_t(const cu_params_t *p, const float *cur, int w, int h, float *P,
                            float *r, int reweight, uint32_t *list, unsigned int *count,
                            int fix_blocks, cudaStream_t s)
{
    const dim3 g((unsigned)((w + TX * WX - 1) / (TX * WX)), (unsigned)((h + TY - 1) / TY)),
        b(TX, TY);
    if (reweight) {
        const cudaError_t e = cudaMemsetAsync(count, 0, sizeof *count, s);
        if (e != cudaSuccess)
            return e;
    }
    if (reweight)
        cu_launch(k_whiten_list<T>, g, b, 0, s, p, cur, w, h, P, r, list, count);
    else
        cu_launch(k_whiten<T>, g, b, 0, s, p, cur, w, h, P, r);
    if (reweight)
        cu_launch(k_whiten_fix<T>, (unsigned)(fix_blocks > 0 ? fix_blocks : 1), FIX_THREADS, 0, s,
                  p, cur, w, h, P, r, list, count);
    return cudaGetLastError();
}

extern "C" cudaError_t cu_whiten(const cu_params_t *p, ss_dtype_t hdt, const float *cur, int w,
                                 int h, float *P, float *r, int reweight, uint32_t *list,
                                 unsigned int *count, int fix_blocks, cudaStream_t s)
{
    return by_hist_type(hdt, cudaErrorInvalidValue, [&](auto t) {
        return whiten_t<decltype(t)>(p, cur, w, h, P, r, reweight, list, count, fix_blocks, s);
    });
}

static size_t lsq_smem(int n)
{
    return (size_t)(n + 1) * (LSQ_TP + 1) * sizeof(float);
}

extern "C" cudaError_t cu_lsq_moments(const cu_params_t *p, ss_dtype_t hdt, int n,
                                      const float *cur, int w, int h, double *Rp, cudaStream_t s)
{
    cudaError_t e = cudaMemsetAsync(Rp, 0, ((size_t)n * n + n) * sizeof(double), s);
    if (e != cudaSuccess)
        return e;
    const int npairs = n * (n + 1) / 2 + n;
    const unsigned gy = (unsigned)((npairs + LSQ_THREADS * LSQ_PPT - 1) / (LSQ_THREADS * LSQ_PPT));
    const long long ntiles = ((long long)w * h + LSQ_TP - 1) / LSQ_TP;
    const unsigned gx = (unsigned)(ntiles < 528 ? ntiles : 528);
    const dim3 g(gx, gy);
    const size_t sm = lsq_smem(n);
    using lsq_fn = decltype(&k_lsq<float>);
    const lsq_fn k = by_hist_type(hdt, lsq_fn(), [](auto t) { return lsq_fn(k_lsq<decltype(t)>); });
    if (!k)
        return cudaErrorInvalidValue;
    cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm);
    cu_launch(k, g, LSQ_THREADS, sm, s, p, n, cur, w, h, Rp);
    return cudaGetLastError();
}

extern "C" cudaError_t cu_history_store(const cu_params_t *p, ss_dtype_t hdt, const float *frame,
                                        const float *P, const int32_t *labels, const float *med,
                                        const float *clean_sigma, int w, int h, uint8_t *scratch,
                                        int tile, cudaStream_t s)
{
    const dim3 b(TX, TY);
    if (tile) {
        using tile_fn = decltype(&k_store_tile<float>);
        const tile_fn k = by_hist_type(hdt, tile_fn(),
                                       [](auto t) { return tile_fn(k_store_tile<decltype(t)>); });
        if (!k)
            return cudaErrorInvalidValue;
        const dim3 g((unsigned)((w + TX - 1) / TX), (unsigned)((h + ST_TH - 1) / ST_TH));
        cu_launch(k, g, b, 0, s, p, frame, P, labels, med, clean_sigma, w, h);
        return cudaGetLastError();
    }
    using store_fn = decltype(&k_store<float>);
    const store_fn k = by_hist_type(hdt, store_fn(),
                                    [](auto t) { return store_fn(k_store<decltype(t)>); });
    if (!k)
        return cudaErrorInvalidValue;
    const dim3 g = grid2(w, h);
    cu_launch(k_dilate_rows, g, b, 0, s, p, labels, w, h, scratch);
    cu_launch(k, g, b, 0, s, p, frame, P, scratch, med, clean_sigma, w, h);
    return cudaGetLastError();
}
