/*
 * k_copy.cu — small transfers between the device and pinned host memory
 * done by a kernel (the host buffers are mapped: pinned memory under
 * unified addressing), not by the copy engines.
 *
 * Why: a residual download (tens of MB, read_begin) or a frame upload
 * (prefetch) keeps a copy engine busy for a millisecond or more, and the
 * engine serves copies in order: a 4-byte σ or the parameter block queued
 * behind it waited for all of it (measured on the H100: detection 0.40 ->
 * 0.94 ms at 4096² while the residual went down). A kernel's loads and
 * stores cross PCIe on their own, whatever the engines are doing.
 */
#include "cu_internal.h"

namespace {

__global__ void k_copy_words(const unsigned int *__restrict__ src, unsigned int *__restrict__ dst,
                             size_t n)
{
    cu_pdl_wait();
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] = src[i];
}

__global__ void k_copy_bytes(const unsigned char *__restrict__ src, unsigned char *__restrict__ dst,
                             size_t n)
{
    cu_pdl_wait();
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] = src[i];
}

/* n = min(*ca (+ *cb), cap) elements of `words` words each; the counts
 * to cdst. */
__global__ void k_copy_counted(const unsigned int *__restrict__ src, unsigned int *__restrict__ dst,
                               size_t words, int *cdst, const int *ca, const int *cb, int cap)
{
    cu_pdl_wait();
    if (blockIdx.x == 0 && threadIdx.x < (cb ? 2u : 1u))
        cdst[threadIdx.x] = threadIdx.x ? *cb : *ca;
    const int c = *ca + (cb ? *cb : 0);
    const size_t n = (size_t)(c < 0 ? 0 : c < cap ? c : cap) * words;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] = src[i];
}

} // namespace

extern "C" cudaError_t cu_copy_small(void *dst, const void *src, size_t bytes, cudaStream_t s)
{
    if (bytes == 0)
        return cudaSuccess;
    const bool words = ((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src) |
                         bytes) & 3u) == 0;
    const size_t n = words ? bytes / 4 : bytes;
    const size_t blocks = (n + 255) / 256;
    const unsigned g = (unsigned)(blocks < 64 ? blocks : 64);
    if (words)
        cu_launch(k_copy_words, g, 256, 0, s, static_cast<const unsigned int *>(src),
                  static_cast<unsigned int *>(dst), n);
    else
        cu_launch(k_copy_bytes, g, 256, 0, s, static_cast<const unsigned char *>(src),
                  static_cast<unsigned char *>(dst), n);
    return cudaGetLastError();
}

extern "C" cudaError_t cu_copy_counted(void *dst, const void *src, size_t elem_bytes,
                                       int *counts_dst, const int *count_a, const int *count_b,
                                       int cap, cudaStream_t s)
{
    if (cap <= 0)
        return cu_copy_small(counts_dst, count_a, (count_b ? 2 : 1) * sizeof(int), s);
    if (((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src) | elem_bytes) &
         3u) != 0)
        return cudaErrorInvalidValue;
    const size_t words = elem_bytes / 4, blocks = ((size_t)cap * words + 255) / 256;
    const unsigned g = (unsigned)(blocks < 64 ? blocks : 64);
    cu_launch(k_copy_counted, g, 256, 0, s, static_cast<const unsigned int *>(src),
              static_cast<unsigned int *>(dst), words, counts_dst, count_a, count_b, cap);
    return cudaGetLastError();
}
