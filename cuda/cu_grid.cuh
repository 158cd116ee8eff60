/*
 * cu_grid.cuh — the grid-wide hand-over of the deterministic reductions:
 * each block writes its partials, and the block that finishes last adds
 * them in a fixed order (k_fine_sums, k_sel_pass, k_sel_clip, the guide's
 * mean and the seeing sums of k_guided.cu).
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

#endif
