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
 * Each pass is one kernel: a shared-memory histogram per block, flushed
 * with one global atomic per non-empty bin, and the last block to finish
 * finds the bin holding the rank, narrows the prefix and clears the
 * histogram for the next pass. Everything stays on the device (no host
 * round trip): a whole noise estimate is six launches of one graph. With a
 * scratch buffer, the first pass also compacts the finite samples into
 * it, and the five later passes read 4 contiguous bytes per sample instead
 * of a strided walk over the plane(s). Samples of up to a 512² frame take
 * one launch of one cluster instead (k_sel_cluster, below).
 */
#include "cu_internal.h"
#include "cu_grid.cuh"
#include "pipeline/noise_core.h"

#include <cooperative_groups.h>
#include <math.h>

namespace cg = cooperative_groups;

namespace {

constexpr int SEL_THREADS = 256;

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
        /* 32-bit division (a frame has < 2^31 pixels: cuda_create) is a
         * fraction of the 64-bit one's instructions */
        const unsigned int nx = (unsigned int)(s.w - 1), jj = (unsigned int)j;
        const int y = (int)(jj / nx) * 2, x = (int)(jj % nx);
        const float *row = s.a + (size_t)y * (size_t)s.w;
        const float a = row[x], b = row[x + 1];
        if (!isfinite(a) || !isfinite(b))
            return false;
        *v = b - a;
        return true;
    }
    const int st = s.stride < 1 ? 1 : s.stride;
    const unsigned int nx = (unsigned int)((s.w + st - 1) / st), jj = (unsigned int)j;
    const int y = (int)(jj / nx) * st, x = (int)(jj % nx) * st;
    const size_t i = (size_t)y * (size_t)s.w + (size_t)x;
    const float v0 = s.kind == CU_SAMP_DIFF ? s.a[i] - s.b[i] : s.a[i];
    if (!isfinite(v0))
        return false;
    *v = v0;
    return true;
}

/* A grid-stride walk over samples 0..n-1 (thread t of block b takes
 * b·blockDim + t + k·step) in rounds: WALK_U loads in flight per thread
 * while WALK_U steps remain, then one at a time (a small sample walks as
 * before). get(j, &v) loads sample j (false: none there); round(ok, v, nu)
 * takes the round's nu samples. Every lane of a warp takes part in every
 * round (the warp-aggregated appends rely on it); the order of the rounds
 * across threads is any, so what they build must not depend on it. One
 * load at a time, the passes waited out a load's latency per sample
 * (PERFORMANCE.md has the timings). */
constexpr int WALK_U = 8;
template <class Get, class Round>
__device__ __forceinline__ void walk_rounds(long long n, Get get, Round round)
{
    const long long step = (long long)gridDim.x * blockDim.x;
    long long base = (long long)blockIdx.x * blockDim.x;
    for (; base + (WALK_U - 1) * step < n; base += WALK_U * step) {
        float v[WALK_U];
        bool ok[WALK_U];
#pragma unroll
        for (int u = 0; u < WALK_U; u++) {
            const long long j = base + u * step + threadIdx.x;
            v[u] = 0.0f;
            ok[u] = j < n && get(j, &v[u]);
        }
        round(ok, v, WALK_U);
    }
    for (; base < n; base += step) {                /* the rest, one at a time */
        const long long j = base + threadIdx.x;
        float v = 0.0f;
        const bool ok = j < n && get(j, &v);
        round(&ok, &v, 1);
    }
}

/* walk_rounds with use(ok, v) called on each sample in turn. */
template <class Get, class Use>
__device__ __forceinline__ void walk_samples(long long n, Get get, Use use)
{
    walk_rounds(n, get, [&](const bool *ok, const float *v, int nu) {
        for (int u = 0; u < nu; u++)
            use(ok[u], v[u]);
    });
}

/* walk_samples that also appends each sample taken (ok) to buf at a
 * position from *cnt: one atomic per warp and round, the warp's samples
 * of a round contiguous in buf (their order there is any). */
template <class Get, class Use>
__device__ __forceinline__ void walk_append(long long n, Get get, Use use, float *buf,
                                            unsigned int *cnt)
{
    const unsigned int below = (1u << cu_lane()) - 1u;
    walk_rounds(n, get, [&](const bool *ok, const float *v, int nu) {
        unsigned int bal[WALK_U], tot = 0;
        for (int u = 0; u < nu; u++) {
            bal[u] = __ballot_sync(0xffffffffu, ok[u]);
            tot += (unsigned int)__popc(bal[u]);
        }
        unsigned int pos = cu_warp_reserve(tot, cnt);
        for (int u = 0; u < nu; u++) {
            if (ok[u])
                buf[pos + (unsigned int)__popc(bal[u] & below)] = v[u];
            pos += (unsigned int)__popc(bal[u]);
            use(ok[u], v[u]);
        }
    });
}

/* The window sums of mode 2 (noise_core.h) of this thread's samples,
 * added warp by warp into acc[0..2] (shared or global memory). */
__device__ __forceinline__ void clip_add(long long s1, long long s2, long long n,
                                         unsigned long long *acc)
{
    for (int off = 16; off > 0; off >>= 1) {
        s1 += __shfl_down_sync(0xffffffffu, s1, off);
        s2 += __shfl_down_sync(0xffffffffu, s2, off);
        n += __shfl_down_sync(0xffffffffu, n, off);
    }
    if ((threadIdx.x & 31) == 0 && n) {
        atomicAdd(&acc[0], (unsigned long long)s1);
        atomicAdd(&acc[1], (unsigned long long)s2);
        atomicAdd(&acc[2], (unsigned long long)n);
    }
}

__device__ __forceinline__ float clip_sigma(float s, const unsigned long long *acc)
{
    return ss_noise_clip_sigma(s, (long long)acc[0], (long long)acc[1], (long long)acc[2]);
}

/* part[t] = the inclusive prefix sum of mine over threads 0..t of a
 * block of N threads (a multiple of 32, at most 1024): a shuffle scan in
 * each warp, then of the warps' totals; two barriers where the
 * Hillis-Steele scan over part took 2·log2(N). Every thread calls it;
 * part is complete on return. */
template <int N>
__device__ __forceinline__ void block_scan(long long mine, long long *part)
{
    static_assert(N % 32 == 0 && N <= 1024, "whole warps, at most 32");
    __shared__ long long wsum[N / 32];
    const int t = threadIdx.x, lane = t & 31, wid = t >> 5;
    const long long x = cu_warp_incl(mine);
    if (lane == 31)
        wsum[wid] = x;
    __syncthreads();
    if (wid == 0) {
        const long long w = cu_warp_incl(lane < N / 32 ? wsum[lane] : 0ll);
        if (lane < N / 32)
            wsum[lane] = w;
    }
    __syncthreads();
    part[t] = x + (wid > 0 ? wsum[wid - 1] : 0);
    __syncthreads();
}

/* This thread's PER bins [t·PER, t·PER + PER) of the global histogram
 * into hv, loaded together (volatile: other blocks' atomics wrote them);
 * returns their count. */
template <int PER>
__device__ __forceinline__ long long sel_my_bins(volatile const unsigned int *hist,
                                                 unsigned int (&hv)[PER])
{
#pragma unroll
    for (int q = 0; q < PER; q++)
        hv[q] = hist[threadIdx.x * PER + q];
    long long mine = 0;
#pragma unroll
    for (int q = 0; q < PER; q++)
        mine += hv[q];
    return mine;
}

/* The bin that holds rank, given this thread's bins hv (their count
 * mine) and the inclusive scan incl of the counts (block_scan): true on
 * exactly the thread whose bins hold it, with the bin in *bin and the
 * rank within it in *sub. From registers: re-reading the bins one at a
 * time cost the last block a chain of L2 round trips. */
template <int PER>
__device__ __forceinline__ bool sel_find_bin(const unsigned int (&hv)[PER], long long mine,
                                             long long incl, long long rank, int *bin,
                                             long long *sub)
{
    long long before = incl - mine;
    if (!(rank >= before && rank < before + mine))
        return false;
    int q = 0;
#pragma unroll
    for (int k = 0; k < PER - 1; k++)
        if (q == k && rank >= before + (long long)hv[k]) {
            before += hv[k];
            q = k + 1;
        }
    *bin = (int)threadIdx.x * PER + q;
    *sub = rank - before;
    return true;
}

/* The estimate of modes 0 and 1 from the MAD (any: there were samples). */
__device__ __forceinline__ void sel_write_estimate(bool any, float mad, int mode, float *out_f,
                                                   double *out_d)
{
    if (mode == 0 && out_f)
        *out_f = any ? (float)(1.4826 * (double)mad) : __int_as_float(0x7fc00000);
    if (mode == 1 && out_d)
        *out_d = any ? 1.4826 * (double)mad / sqrt(2.0) : (double)NAN;
}

/* k_sel_pass, phase 1: this block's histogram in sh (zeroed) of the keys
 * of the pass (bits shift.., bmask) among the samples matching st's
 * prefix (which = 1: of |x - centre|). The samples are buf's ws->ncomp
 * compacted ones where the first pass has made them (or without a
 * sampler); else the sampler's, which the first pass with a buffer also
 * appends to it (warp-aggregated). */
__device__ __forceinline__ void sel_pass_hist(const cu_sampler_t *__restrict__ sp,
                                              cu_sel_ws_t *ws, int which, int pass,
                                              const cu_sel_state_t &st, int shift,
                                              unsigned int bmask, float centre, float *buf,
                                              unsigned int *sh)
{
    auto count = [&](bool ok, float v) {
        if (!ok)
            return;
        if (which)
            v = fabsf(v - centre);
        const unsigned int k = float_key(v);
        if ((k & st.mask) == st.prefix)
            atomicAdd(&sh[(k >> shift) & bmask], 1u);
    };
    if (buf && (which || pass > 0 || !sp)) {
        if (which || pass == 0 || st.n > 0)
            walk_samples((long long)ws->ncomp, [&](long long j, float *v) {
                *v = buf[j];
                return true;
            }, count);
        return;
    }
    const cu_sampler_t s = *sp;
    auto get = [&](long long j, float *v) { return samp_get(s, j, v); };
    if (buf)
        walk_append(samp_count(s), get, count, buf, &ws->ncomp);
    else
        walk_samples(samp_count(s), get, count);
}

/* Phase 2: the block's histogram added into ws->hist (one atomic per
 * non-empty bin); true, on every thread, in the block that finished last. */
__device__ __forceinline__ bool sel_pass_publish(cu_sel_ws_t *ws, const unsigned int *sh)
{
    __syncthreads();
    for (int b = threadIdx.x; b < CU_SEL_BINS; b += blockDim.x)
        if (sh[b])
            atomicAdd(&ws->hist[b], sh[b]);
    return cu_last_block(&ws->counter);
}

/* Phase 3, the last block: the bin holding the rank (pass 0: the lower
 * median's, of all the samples counted) narrows the state *stp (pass 2:
 * its result too; no sample: n 0 and NaN); the histogram and the block
 * counter are cleared for the next pass. */
__device__ __forceinline__ void sel_pass_narrow(cu_sel_ws_t *ws, cu_sel_state_t *stp,
                                                const cu_sel_state_t &st, int pass, int shift,
                                                unsigned int bmask, long long *part)
{
    constexpr int PER = CU_SEL_BINS / SEL_THREADS;     /* bins per thread in the scan */
    const int t = threadIdx.x;
    volatile unsigned int *hist = ws->hist;
    unsigned int hv[PER];
    const long long mine = sel_my_bins<PER>(hist, hv);
    block_scan<SEL_THREADS>(mine, part);
    long long n = st.n, rank = st.rank;
    if (pass == 0) {
        n = part[SEL_THREADS - 1];
        rank = n > 0 ? (n - 1) / 2 : 0;
    }
    int bin;
    long long sub;
    if (n > 0) {
        if (sel_find_bin<PER>(hv, mine, part[t], rank, &bin, &sub)) {
            stp->prefix = st.prefix | (unsigned int)bin << shift;
            stp->mask = st.mask | bmask << shift;
            stp->rank = sub;
            stp->n = n;
            if (pass == 2)
                stp->result = key_float(stp->prefix);
        }
    } else if (t == 0) {
        stp->n = 0;
        stp->result = __int_as_float(0x7fc00000);
    }
    __syncthreads();
    for (int q = 0; q < PER; q++)
        hist[t * PER + q] = 0;
    if (t == 0)
        ws->counter = 0;
}

/* One pass: histogram of the keys of pass `pass` among the samples that
 * match the prefix (which = 0: the median; 1: |x - median|), then the
 * last block to finish finds the bin holding the rank, narrows the state,
 * clears the histogram for the next pass and, after the last MAD pass,
 * writes the estimate. One kernel per pass, no host round trip. */
__global__ void k_sel_pass(const cu_sampler_t *__restrict__ sp, cu_sel_ws_t *ws, int which,
                           int pass, int mode, float *out_f, double *out_d, float *buf)
{
    cu_pdl_wait();
    __shared__ unsigned int sh[CU_SEL_BINS];
    __shared__ long long part[SEL_THREADS];
    for (int b = threadIdx.x; b < CU_SEL_BINS; b += blockDim.x)
        sh[b] = 0;
    __syncthreads();
    cu_sel_state_t *stp = &ws->st[which];
    const cu_sel_state_t st = *stp;
    const int shift = pass_shift(pass);
    const unsigned int bmask = pass_mask(pass);
    sel_pass_hist(sp, ws, which, pass, st, shift, bmask, which ? ws->st[0].result : 0.0f, buf,
                  sh);
    if (!sel_pass_publish(ws, sh))
        return;
    sel_pass_narrow(ws, stp, st, pass, shift, bmask, part);
    if (which == 1 && pass == 2) {
        __threadfence_block();
        __syncthreads();
        if (threadIdx.x == 0)
            sel_write_estimate(stp->n > 0, stp->result, mode, out_f, out_d);
    }
}

/* Mode 2 after the six passes: the window sums over the samples (the
 * compacted ones in buf, or through the sampler), and the last block to
 * finish writes σ and clears the sums. */
__global__ void k_sel_clip(const cu_sampler_t *__restrict__ sp, cu_sel_ws_t *ws, float *out_f,
                           const float *buf)
{
    cu_pdl_wait();
    const float m = ws->st[0].result;
    const float s = (float)(1.4826 * (double)ws->st[1].result);
    const bool any = ws->st[0].n > 0;
    long long s1 = 0, s2 = 0, n = 0;
    const cu_sampler_t smp = *sp;
    const long long total = !(s > 0.0f) ? 0 : buf ? (long long)ws->ncomp : samp_count(smp);
    walk_samples(total, [&](long long j, float *v) {
        if (!buf)
            return samp_get(smp, j, v);
        *v = buf[j];
        return true;
    }, [&](bool ok, float v) {
        int64_t q;
        if (ok && ss_noise_clip_q(v, m, s, &q)) {
            s1 += q;
            s2 += q * q;
            n++;
        }
    });
    clip_add(s1, s2, n, ws->clip);
    if (!cu_last_block(&ws->counter) || threadIdx.x != 0)
        return;
    volatile unsigned long long *acc = ws->clip;
    const unsigned long long a[3] = { acc[0], acc[1], acc[2] };
    *out_f = !any ? __int_as_float(0x7fc00000) : !(s > 0.0f) ? s : clip_sigma(s, a);
    ws->clip[0] = ws->clip[1] = ws->clip[2] = 0;
    ws->counter = 0;
}

/* The same selection for a sample of up to a few hundred thousand (the
 * frame sizes of 512² or so) in one launch: one cluster of SEL_CL blocks
 * of CL_THREADS. Each block gathers its share of the finite samples into
 * its shared memory once; every pass, each block counts its own into its
 * histogram and its 64 group sums, one cluster barrier makes them
 * visible, and every block narrows the same prefix itself from the
 * others' through distributed shared memory (cl_narrow; no hand-over
 * through global memory). Where the grid-wide passes pay seven launches
 * and seven hand-overs (and the one-block kernel this replaced paid one
 * SM's issue rate for every sample), this pays one launch and spreads the
 * samples over SEL_CL SMs. Same passes, same counts (integers, in any
 * order), same ranks: the same float. */
constexpr int SEL_CL = 8;
constexpr int CL_THREADS = 512;
constexpr int CL_GROUP = 32;                        /* bins a group sum covers */
constexpr int CL_GROUPS = CU_SEL_BINS / CL_GROUP;   /* 64: two a lane of one warp */
static_assert(CL_THREADS * 4 == CU_SEL_BINS, "a thread per 16-byte word of the histogram");
static_assert(CL_GROUPS == 64, "cl_narrow's lanes take groups l and l + 32");

/* A pass's counts in one block: the histogram and its group sums. Two of
 * them alternate by pass, so that a block counts into one while the
 * others may still read the other (the one cluster barrier a pass). */
struct cl_hist {
    unsigned int bin[CU_SEL_BINS];
    unsigned int group[CL_GROUPS];
};

/* The group sums of this block's histogram h (its counts complete: after
 * a block barrier): thread t's 4 bins, added over the 8 threads of a
 * group. Every thread calls it. */
__device__ __forceinline__ void cl_group_sums(cl_hist *h)
{
    const uint4 q = reinterpret_cast<const uint4 *>(h->bin)[threadIdx.x];
    unsigned int g = q.x + q.y + q.z + q.w;
#pragma unroll
    for (int o = 1; o < CL_GROUP / 4; o <<= 1)
        g += __shfl_xor_sync(0xffffffffu, g, o);
    if ((threadIdx.x & (CL_GROUP / 4 - 1)) == 0)
        h->group[threadIdx.x / (CL_GROUP / 4)] = g;
}

/* What a pass decides (s_* in shared memory, for the whole block). */
struct cl_state {
    unsigned int prefix, mask;
    long long rank, n;
};

/* The pass's decision, by warp 0 of each block after the cluster barrier
 * that completes every block's counts h (the same cl_hist slot in each):
 * the cluster's group sums (each rank's, 8 remote loads a lane), the
 * group that holds the rank, then that group's 32 bins over the ranks,
 * and the bin; st narrowed as sel_pass_narrow narrows it (pass 0: n, the
 * lower median's rank; no sample: n 0). Every block decides the same from
 * the same counts. */
__device__ __forceinline__ void cl_narrow(const cg::cluster_group &cl, const cl_hist *h,
                                          int pass, int shift, unsigned int bmask,
                                          cl_state *st)
{
    const unsigned int lane = cu_lane();
    unsigned int g0 = 0, g1 = 0;
#pragma unroll
    for (int r = 0; r < SEL_CL; r++) {
        const cl_hist *hr = cl.map_shared_rank(h, r);
        g0 += hr->group[lane];
        g1 += hr->group[lane + 32];
    }
    const unsigned int i0 = cu_warp_incl(g0), t0 = __shfl_sync(0xffffffffu, i0, 31);
    const unsigned int i1 = cu_warp_incl(g1) + t0, tot = __shfl_sync(0xffffffffu, i1, 31);
    long long n = st->n, rank = st->rank;
    if (pass == 0) {
        n = tot;
        rank = n > 0 ? (n - 1) / 2 : 0;
    }
    if (n == 0) {
        if (lane == 0)
            st->n = 0;
        return;
    }
    const unsigned int m0 = __ballot_sync(0xffffffffu, (unsigned long long)rank < i0);
    const unsigned int m1 = __ballot_sync(0xffffffffu, (unsigned long long)rank < i1);
    const int gl = m0 ? __ffs(m0) - 1 : __ffs(m1) - 1, grp = m0 ? gl : gl + 32;
    const unsigned int gi = __shfl_sync(0xffffffffu, m0 ? i0 : i1, gl);
    const unsigned int gc = __shfl_sync(0xffffffffu, m0 ? g0 : g1, gl);
    const long long sub0 = rank - (long long)(gi - gc);     /* the rank within the group */
    unsigned int f = 0;
#pragma unroll
    for (int r = 0; r < SEL_CL; r++)
        f += cl.map_shared_rank(h, r)->bin[grp * CL_GROUP + lane];
    const unsigned int fi = cu_warp_incl(f);
    const int bl = __ffs(__ballot_sync(0xffffffffu, (unsigned long long)sub0 < fi)) - 1;
    const unsigned int before = __shfl_sync(0xffffffffu, fi - f, bl);
    if (lane == 0) {
        st->prefix |= (unsigned int)(grp * CL_GROUP + bl) << shift;
        st->mask |= bmask << shift;
        st->rank = sub0 - (long long)before;
        st->n = n;
    }
}

/* Mode 2, once the median m and the MAD are known: the window sums over
 * this block's n samples sv, added into acc (rank 0's shared memory);
 * every thread of the cluster calls it, and the caller's cluster barrier
 * completes the sums. */
__device__ void cl_clip(const float *sv, int n, bool any, float m, float mad,
                        unsigned long long *acc)
{
    const float s = (float)(1.4826 * (double)mad);
    long long s1 = 0, s2 = 0, k = 0;
    for (int j = threadIdx.x; any && s > 0.0f && j < n; j += CL_THREADS) {
        int64_t q;
        if (ss_noise_clip_q(sv[j], m, s, &q)) {
            s1 += q;
            s2 += q * q;
            k++;
        }
    }
    clip_add(s1, s2, k, acc);
}

/* Source: the sampler's finite samples, or (buf) buf[0 .. min(*count,
 * bufcap)) as they are (all finite). mode 0-2 as cu_select_mad; -1: the
 * median alone into ws (st[0].result, st[0].n, ncomp: the number of
 * samples), as cu_select_median_buf. cap: floats of dynamic shared memory
 * per block, at least this block's share (cu_select_cluster sizes it). */
__global__ void __cluster_dims__(SEL_CL, 1, 1) __launch_bounds__(CL_THREADS)
k_sel_cluster(const cu_sampler_t *__restrict__ sp, const float *__restrict__ buf,
              const unsigned int *__restrict__ count, unsigned int bufcap, cu_sel_ws_t *ws,
              int mode, float *out_f, double *out_d)
{
    cu_pdl_wait();
    extern __shared__ float sv[];                   /* this block's finite samples */
    __shared__ __align__(16) cl_hist hist[2];       /* by pass parity */
    __shared__ cl_state s_st;
    __shared__ unsigned int s_cnt;
    __shared__ unsigned long long s_clip[3];        /* rank 0's: the cluster's window sums */
    const cg::cluster_group cl = cg::this_cluster();
    const bool lead = cl.block_rank() == 0;
    const int t = threadIdx.x;
    if (t == 0)
        s_cnt = 0;
    if (t < 3)
        s_clip[t] = 0;                              /* before the first cluster barrier */
    for (int b = t; b < CU_SEL_BINS; b += CL_THREADS)
        hist[0].bin[b] = hist[1].bin[b] = 0;
    __syncthreads();
    long long n_src;
    if (buf) {
        n_src = (long long)min(*count, bufcap);
        walk_append(n_src, [&](long long j, float *v) {
            *v = buf[j];
            return true;
        }, [](bool, float) {}, sv, &s_cnt);
    } else {
        const cu_sampler_t s = *sp;
        n_src = samp_count(s);
        walk_append(n_src, [&](long long j, float *v) { return samp_get(s, j, v); },
                    [](bool, float) {}, sv, &s_cnt);
    }
    __syncthreads();
    const int n_loc = (int)s_cnt;
    float centre = 0.0f, result = __int_as_float(0x7fc00000);
    bool any = false;
    long long n_all = 0;                            /* the cluster's finite samples */
    int slot = 0;                                   /* hist[slot]: this pass's counts */
    for (int which = 0; which < (mode < 0 ? 1 : 2); which++) {
        cl_state st = { 0u, 0u, 0, 0 };
        for (int pass = 0; pass < 3; pass++, slot ^= 1) {
            const int shift = pass_shift(pass);
            const unsigned int bmask = pass_mask(pass);
            cl_hist *h = &hist[slot];
            for (int j = t; j < n_loc; j += CL_THREADS) {
                float v = sv[j];
                if (which)
                    v = fabsf(v - centre);
                const unsigned int k = float_key(v);
                if ((k & st.mask) == st.prefix)
                    atomicAdd(&h->bin[(k >> shift) & bmask], 1u);
            }
            __syncthreads();
            cl_group_sums(h);
            /* every block's counts visible; every block done reading the
             * other slot (the last pass's), which is cleared for the next */
            cl.sync();
            for (int b = t; b < CU_SEL_BINS; b += CL_THREADS)
                hist[slot ^ 1].bin[b] = 0;
            if (t < 32) {
                cl_state w = st;
                cl_narrow(cl, h, pass, shift, bmask, &w);
                if (t == 0)
                    s_st = w;
            }
            __syncthreads();
            st = s_st;
            if (pass == 0 && which == 0)
                n_all = st.n;
            if (st.n == 0)
                break;                              /* no finite sample (every block) */
        }
        any = st.n > 0;
        if (!any)
            break;
        result = key_float(st.prefix);
        if (which == 0)
            centre = result;                        /* the median, for the MAD */
    }
    if (mode == 2)
        cl_clip(sv, n_loc, any, centre, result, cl.map_shared_rank(s_clip, 0));
    cl.sync();      /* the sums complete; no block leaves while others read its histograms */
    if (!lead || t != 0)
        return;
    if (mode < 0) {
        ws->st[0].result = any ? result : __int_as_float(0x7fc00000);
        ws->st[0].n = n_all;
        ws->ncomp = (unsigned int)n_src;
        return;
    }
    sel_write_estimate(any, result, mode, out_f, out_d);
    if (mode == 2) {
        const float s = (float)(1.4826 * (double)result);
        *out_f = !any ? __int_as_float(0x7fc00000) : !(s > 0.0f) ? s : clip_sigma(s, s_clip);
    }
}

} // namespace

/* Dynamic shared memory a cluster block may take on the current device
 * (0: no cluster of SEL_CL such blocks fits there): -1 or the bytes; the
 * kernel's limit is raised to it. */
static int cluster_room_query(void)
{
    int dev = 0, optin = 0, nclusters = 0;
    cudaFuncAttributes fa;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) !=
            cudaSuccess ||
        cudaFuncGetAttributes(&fa, k_sel_cluster) != cudaSuccess)
        return -1;
    const int r = (optin - (int)fa.sharedSizeBytes) / 4 / CL_THREADS * CL_THREADS * 4;
    if (r <= 0 || cudaFuncSetAttribute(k_sel_cluster, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       r) != cudaSuccess)
        return -1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(SEL_CL);
    cfg.blockDim = dim3(CL_THREADS);
    cfg.dynamicSmemBytes = (size_t)r;
    if (cudaOccupancyMaxActiveClusters(&nclusters, k_sel_cluster, &cfg) != cudaSuccess ||
        nclusters < 1) {
        (void)cudaGetLastError();
        return -1;
    }
    return r;
}

/* The same, asked once per device (two threads may both ask: the answer
 * and the limit they set are the same). */
static int cluster_room(void)
{
    static volatile int room_of[64];        /* per device; 0 not asked yet */
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess)
        return 0;
    if (room_of[dev & 63] == 0)
        room_of[dev & 63] = cluster_room_query();
    return room_of[dev & 63] < 0 ? 0 : room_of[dev & 63];
}

extern "C" long long cu_select_cluster_max(void)
{
    return (long long)cluster_room() / 4 * SEL_CL;
}

extern "C" cudaError_t cu_select_cluster(const cu_sampler_t *samp, const float *buf,
                                         const unsigned int *count, unsigned int bufcap,
                                         cu_sel_ws_t *ws, int mode, float *out_f, double *out_d,
                                         long long nmax, cudaStream_t s)
{
    /* each block's share of nmax samples, in whole rounds of the cluster */
    const long long per_round = (long long)SEL_CL * CL_THREADS;
    const long long cap = (nmax + per_round - 1) / per_round * CL_THREADS;
    if (nmax > cu_select_cluster_max())
        return cudaErrorInvalidValue;
    cu_launch(k_sel_cluster, SEL_CL, CL_THREADS, (size_t)cap * sizeof(float), s, samp, buf, count,
              bufcap, ws, mode, out_f, out_d);
    return cudaGetLastError();
}

/* The number of samples in buf for cu_select_median_buf: *count, at most
 * cap. */
static __global__ void k_sel_count(const unsigned int *count, unsigned int cap, cu_sel_ws_t *ws)
{
    cu_pdl_wait();
    ws->ncomp = min(*count, cap);
}

extern "C" cudaError_t cu_select_median_buf(const float *buf, const unsigned int *count,
                                            unsigned int cap, cu_sel_ws_t *ws, int grid,
                                            cudaStream_t s)
{
    cudaError_t e = cudaMemsetAsync(ws, 0, sizeof *ws, s);
    if (e != cudaSuccess)
        return e;
    cu_launch(k_sel_count, 1, 1, 0, s, count, cap, ws);
    for (int pass = 0; pass < 3; pass++)
        cu_launch(k_sel_pass, grid, SEL_THREADS, 0, s, nullptr, ws, 0, pass, -1, nullptr, nullptr,
                  const_cast<float *>(buf));
    return cudaGetLastError();
}

extern "C" cudaError_t cu_select_mad(const cu_sampler_t *samp, cu_sel_ws_t *ws, int mode,
                                     float *out_f, double *out_d, int grid, float *buf,
                                     cudaStream_t s)
{
    cudaError_t e = cudaMemsetAsync(ws, 0, sizeof *ws, s);
    if (e != cudaSuccess)
        return e;
    for (int which = 0; which < 2; which++)
        for (int pass = 0; pass < 3; pass++)
            cu_launch(k_sel_pass, grid, SEL_THREADS, 0, s, samp, ws, which, pass, mode, out_f,
                      out_d, buf);
    if (mode == 2)
        cu_launch(k_sel_clip, grid, SEL_THREADS, 0, s, samp, ws, out_f, buf);
    return cudaGetLastError();
}
