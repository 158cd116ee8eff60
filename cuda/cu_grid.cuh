/*
 * cu_grid.cuh — the grid-wide hand-over of the deterministic reductions:
 * each block writes its partials, and the block that finishes last adds
 * them in a fixed order (k_fine_sums, k_sel_pass, k_sel_clip, the guide's
 * mean and the seeing sums of k_guided.cu); a warp's appends to a
 * compacted array; a warp's inclusive scan; a warp's totals of many series.
 */
#ifndef SS_CU_GRID_CUH
#define SS_CU_GRID_CUH

#include <cuda_runtime.h>

/* Called by every thread of the block (one-dimensional blocks, grids of
 * one or two dimensions) once its partials are written: true, on every
 * thread, in the block that finished last of the grid (counter counts the
 * blocks; that block resets it), which then sees every other block's
 * writes. */
__device__ __forceinline__ bool cu_last_block(unsigned int *counter)
{
    __shared__ bool last;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0)
        last = atomicAdd(counter, 1u) == gridDim.x * gridDim.y - 1;
    __syncthreads();
    if (last)
        __threadfence();
    return last;
}

/* This thread's lane in its warp. */
__device__ __forceinline__ unsigned int cu_lane(void)
{
    unsigned int l;
    asm("mov.u32 %0, %%laneid;" : "=r"(l));
    return l;
}

/* Inclusive scan of v over the lanes of a warp: lane l gets the sum over
 * lanes 0..l, added in the same order on every call (Kogge-Stone: lane l
 * adds lane l - o's partial for o = 1, 2, 4, 8, 16). Every lane of the
 * warp calls it; T is any type __shfl_up_sync takes. */
template <typename T>
__device__ __forceinline__ T cu_warp_incl(T v)
{
    const unsigned int lane = cu_lane();
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const T u = __shfl_up_sync(0xffffffffu, v, o);
        if (lane >= (unsigned int)o)
            v += u;
    }
    return v;
}

/* One step of cu_warp_totals: lanes with bit H set keep the upper half
 * of v[0 .. 2H) and send the lower, the others the reverse; each adds
 * the half it receives from lane l ^ H into the half it keeps, now v[0 .. H). */
template <int H>
__device__ __forceinline__ void cu_warp_halve(double (&v)[32], unsigned int lane)
{
    const bool hi = (lane & (unsigned int)H) != 0u;
#pragma unroll
    for (int k = 0; k < H; k++) {
        const double keep = hi ? v[H + k] : v[k], send = hi ? v[k] : v[H + k];
        v[k] = keep + __shfl_xor_sync(0xffffffffu, send, H);
    }
}

/* The warp's totals of N ≤ 32 series a[0 .. N) (each lane its own
 * values): lane k < N returns series k's total, the other lanes zero.
 * Five halving exchanges, 31 shuffles of a double, where a tree for each
 * series takes 5·N; the same additions in the same order on every call.
 * Every lane of the warp calls it. */
template <int N>
__device__ __forceinline__ double cu_warp_totals(const double (&a)[N])
{
    static_assert(N >= 1 && N <= 32, "one series a lane");
    const unsigned int lane = cu_lane();
    double v[32];
#pragma unroll
    for (int k = 0; k < 32; k++)
        v[k] = k < N ? a[k] : 0.0;
    cu_warp_halve<16>(v, lane);
    cu_warp_halve<8>(v, lane);
    cu_warp_halve<4>(v, lane);
    cu_warp_halve<2>(v, lane);
    cu_warp_halve<1>(v, lane);
    return v[0];
}

/* The first of tot slots (tot the same on every lane: the warp's appends)
 * of an array whose fill *cnt counts: one atomic for the warp. Every lane
 * of the warp calls it. (A thread's own atomic per append serialised a
 * whole frame's samples on one address: PERFORMANCE.md, 2026-11-26.) */
__device__ __forceinline__ unsigned int cu_warp_reserve(unsigned int tot, unsigned int *cnt)
{
    unsigned int pos = 0;
    if (cu_lane() == 0 && tot)
        pos = atomicAdd(cnt, tot);
    return __shfl_sync(0xffffffffu, pos, 0);
}

#endif
