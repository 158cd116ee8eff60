/*
 * k_select.cu — exact order statistics on the GPU (ALGORITHM.md §5: "a
 * histogram or selection on the GPU, never a host copy of the frame").
 *
 * Radix selection: finite floats map to uint32 keys with the same order;
 * three histogram passes over the samples (key bits 31..21, 20..10, 9..0),
 * each counting only the samples whose key matches the prefix found so
 * far, pin down the key of rank k exactly. The lower median (rank
 * floor((n-1)/2)) and then the lower median of |x - median| (computed in
 * float, as noise.c does) are therefore the very floats the CPU's
 * quickselect returns, and sigma is bit-identical.
 *
 * Each pass is one histogram kernel (shared-memory histogram per block,
 * flushed with one global atomic per non-empty bin) and one single-block
 * kernel that finds the bin holding the rank, narrows the prefix and
 * clears the histogram for the next pass. Everything stays on the device
 * (no host round trip), so a whole noise estimate is one graph segment.
 */
#include "cu_internal.h"

#include <math.h>

namespace {

constexpr int SEL_THREADS = 256;
constexpr int SCAN_THREADS = 1024;      /* 2 bins per thread */

__device__ __forceinline__ unsigned int float_key(float f)
{
    const unsigned int u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ float key_float(unsigned int k)
{
    const unsigned int u = (k & 0x80000000u) ? (k & 0x7fffffffu) : ~k;
    return __uint_as_float(u);
}

__device__ __forceinline__ int pass_shift(int pass)
{
    return pass == 0 ? 21 : pass == 1 ? 10 : 0;
}

__device__ __forceinline__ unsigned int pass_mask(int pass)
{
    return pass == 2 ? 0x3ffu : 0x7ffu;
}

/* Number of samples of a sampler and the j-th one (finite or not). */
__device__ __forceinline__ long long samp_count(const cu_sampler_t &s)
{
    if (s.kind == CU_SAMP_HDIFF)
        return s.w < 2 ? 0 : (long long)((s.h + 1) / 2) * (long long)(s.w - 1);
    const int st = s.stride < 1 ? 1 : s.stride;
    return (long long)((s.w + st - 1) / st) * (long long)((s.h + st - 1) / st);
}

__device__ __forceinline__ bool samp_get(const cu_sampler_t &s, long long j, float *v)
{
    if (s.kind == CU_SAMP_HDIFF) {
        const int nx = s.w - 1;
        const int y = (int)(j / nx) * 2, x = (int)(j % nx);
        const float *row = s.a + (size_t)y * (size_t)s.w;
        const float a = row[x], b = row[x + 1];
        if (!isfinite(a) || !isfinite(b))
            return false;
        *v = b - a;
        return true;
    }
    const int st = s.stride < 1 ? 1 : s.stride;
    const int nx = (s.w + st - 1) / st;
    const int y = (int)(j / nx) * st, x = (int)(j % nx) * st;
    const size_t i = (size_t)y * (size_t)s.w + (size_t)x;
    const float v0 = s.kind == CU_SAMP_DIFF ? s.a[i] - s.b[i] : s.a[i];
    if (!isfinite(v0))
        return false;
    *v = v0;
    return true;
}

/* Histogram of the keys of pass `pass` among samples matching the prefix;
 * which = 0 (median) or 1 (|x - median|). */
__global__ void k_sel_hist(const cu_sampler_t *__restrict__ sp, cu_sel_ws_t *ws, int which,
                           int pass)
{
    __shared__ unsigned int sh[CU_SEL_BINS];
    for (int b = threadIdx.x; b < CU_SEL_BINS; b += blockDim.x)
        sh[b] = 0;
    __syncthreads();
    const cu_sel_state_t st = ws->st[which];
    const cu_sampler_t s = *sp;
    const bool live = pass == 0 || st.n > 0;
    if (live) {
        const float centre = which ? ws->st[0].result : 0.0f;
        const int shift = pass_shift(pass);
        const unsigned int bmask = pass_mask(pass);
        const long long n = samp_count(s);
        for (long long j = blockIdx.x * (long long)blockDim.x + threadIdx.x; j < n;
             j += (long long)gridDim.x * blockDim.x) {
            float v;
            if (!samp_get(s, j, &v))
                continue;
            if (which)
                v = fabsf(v - centre);
            const unsigned int k = float_key(v);
            if ((k & st.mask) == st.prefix)
                atomicAdd(&sh[(k >> shift) & bmask], 1u);
        }
    }
    __syncthreads();
    for (int b = threadIdx.x; b < CU_SEL_BINS; b += blockDim.x)
        if (sh[b])
            atomicAdd(&ws->hist[b], sh[b]);
}

/* Find the bin holding the rank; narrow the state; clear the histogram.
 * After the last MAD pass, write the final estimate. */
__global__ void k_sel_scan(cu_sel_ws_t *ws, int which, int pass, int mode, float *out_f,
                           double *out_d)
{
    __shared__ long long part[SCAN_THREADS];
    __shared__ long long total_s;
    cu_sel_state_t *st = &ws->st[which];
    const int t = threadIdx.x;
    const long long h0 = ws->hist[2 * t], h1 = ws->hist[2 * t + 1];
    part[t] = h0 + h1;
    __syncthreads();
    /* inclusive scan (Hillis–Steele) of the per-thread pairs */
    for (int off = 1; off < SCAN_THREADS; off <<= 1) {
        const long long v = t >= off ? part[t - off] : 0;
        __syncthreads();
        part[t] += v;
        __syncthreads();
    }
    if (t == SCAN_THREADS - 1)
        total_s = part[t];
    __syncthreads();
    const long long total = total_s;
    long long n = st->n, rank = st->rank;
    if (pass == 0) {
        n = total;
        rank = n > 0 ? (n - 1) / 2 : 0;
    }
    const bool live = n > 0;
    const long long before = part[t] - (h0 + h1);
    if (live) {
        const int shift = pass_shift(pass);
        int bin = -1;
        long long below = 0;
        if (rank >= before && rank < before + h0) {
            bin = 2 * t;
            below = before;
        } else if (rank >= before + h0 && rank < before + h0 + h1) {
            bin = 2 * t + 1;
            below = before + h0;
        }
        if (bin >= 0) {     /* exactly one thread */
            st->prefix |= (unsigned int)bin << shift;
            st->mask |= pass_mask(pass) << shift;
            st->rank = rank - below;
            st->n = n;
            if (pass == 2)
                st->result = key_float(st->prefix);
        }
    } else if (t == 0) {
        st->n = 0;
        st->result = __int_as_float(0x7fc00000);
    }
    ws->hist[2 * t] = 0;
    ws->hist[2 * t + 1] = 0;
    if (which == 1 && pass == 2) {
        __syncthreads();
        if (t == 0) {
            const float mad = st->n > 0 ? st->result : __int_as_float(0x7fc00000);
            if (mode == 0 && out_f)
                *out_f = st->n > 0 ? (float)(1.4826 * (double)mad) : __int_as_float(0x7fc00000);
            if (mode == 1 && out_d)
                *out_d = st->n > 0 ? 1.4826 * (double)mad / sqrt(2.0) : (double)NAN;
        }
    }
}

} // namespace

extern "C" cudaError_t cu_select_mad(const cu_sampler_t *samp, cu_sel_ws_t *ws, int mode,
                                     float *out_f, double *out_d, int grid, cudaStream_t s)
{
    cudaError_t e = cudaMemsetAsync(ws, 0, sizeof *ws, s);
    if (e != cudaSuccess)
        return e;
    for (int which = 0; which < 2; which++)
        for (int pass = 0; pass < 3; pass++) {
            k_sel_hist<<<grid, SEL_THREADS, 0, s>>>(samp, ws, which, pass);
            k_sel_scan<<<1, SCAN_THREADS, 0, s>>>(ws, which, pass, mode, out_f, out_d);
        }
    return cudaGetLastError();
}
