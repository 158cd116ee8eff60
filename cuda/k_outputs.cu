/*
 * k_outputs.cu — the residual's optional forms on the device
 * (pipeline/outputs.h): CLEAN as binary16 (ss_f16_bits, the same inline
 * function the CPU backend runs, so the bytes are identical) and the
 * stamps cut out of CLEAN (ss_stamps_cut), so that only those bytes cross
 * to the host.
 */
#include "cu_internal.h"
#include "pipeline/half_core.h"

namespace {

__global__ void k_to_f16(const float *__restrict__ in, uint16_t *__restrict__ out, size_t n)
{
    cu_pdl_wait();
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = ss_f16_bits(in[i]);
}

/* blockIdx.y: the stamp; the blocks of x stride over its pixels. */
__global__ void k_cut_stamps(const float *__restrict__ plane, int w,
                             const cu_box_t *__restrict__ boxes, float *__restrict__ out)
{
    cu_pdl_wait();
    const cu_box_t bx = boxes[blockIdx.y];
    const size_t n = (size_t)bx.w * (size_t)bx.h;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const int y = (int)(i / (size_t)bx.w), x = (int)(i % (size_t)bx.w);
        out[bx.off + i] = plane[(size_t)(bx.y0 + y) * (size_t)w + (size_t)(bx.x0 + x)];
    }
}

constexpr int THREADS = 256;
constexpr unsigned MAX_BLOCKS = 1024;

} // namespace

extern "C" cudaError_t cu_to_f16(const float *in, size_t n, uint16_t *out, cudaStream_t s)
{
    if (n == 0)
        return cudaSuccess;
    const size_t blocks = (n + THREADS - 1) / THREADS;
    cu_launch(k_to_f16, (unsigned)(blocks < MAX_BLOCKS ? blocks : MAX_BLOCKS), THREADS, 0, s, in,
              out, n);
    return cudaGetLastError();
}

extern "C" cudaError_t cu_cut_stamps(const float *plane, int w, const cu_box_t *boxes, int n,
                                     size_t max_box_pixels, float *out, cudaStream_t s)
{
    if (n <= 0 || max_box_pixels == 0)
        return cudaSuccess;
    const size_t bx = (max_box_pixels + THREADS - 1) / THREADS;
    const dim3 grid((unsigned)(bx < 64 ? bx : 64), (unsigned)n);
    cu_launch(k_cut_stamps, grid, THREADS, 0, s, plane, w, boxes, out);
    return cudaGetLastError();
}
