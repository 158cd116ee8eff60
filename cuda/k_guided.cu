/*
 * k_guided.cu — ALGORITHM.md §4 on the GPU: the guided filter with
 * valid-aware box means from running sums (cost independent of the
 * radius), as guided.c defines it.
 *
 * Three kernels:
 *  1. c = mean of the guide over the pixels where guide and input are
 *     finite (block partials, the last block adds them in a fixed order);
 *  2. box of the four channels I' = I - c, p, I'p, I'I' (formed on the
 *     fly from I and p, the products in double), and at each output pixel
 *     the local linear model A, B in double from the window sums (written,
 *     NaN together where the pixel does not take part);
 *  3. box of A and B, and r' = p - (box(A)·I' + box(B)).
 * A box kernel owns a strip of 64 columns and a band of rows. Moving one
 * row down adds row y+r and removes row y-r-1 as one "difference row";
 * its horizontal window sums come from a shared-memory prefix scan of the
 * difference row (double), S(x) = D[x+r] - D[x-r-1], and are added to
 * per-column running sums (double, registers). That is the CPU's scheme
 * (guided.c) with the scan done in parallel: sums agree to double
 * rounding, so the float outputs agree to about 1e-7.
 */
#include "cu_internal.h"

#include <math.h>

namespace {

constexpr int BOX_TW = 64;          /* columns per strip = threads per block */
constexpr int RED_THREADS = 256;

__device__ __forceinline__ float qnan()
{
    return __int_as_float(0x7fc00000);
}

/* c = (float)(Σ I / n) over the pixels where I and p are finite; 0 if none. */
__global__ void k_gf_mean(const float *__restrict__ I, const float *__restrict__ p, size_t npix,
                          double *__restrict__ partials, unsigned int *counter,
                          float *__restrict__ c)
{
    __shared__ double rs[RED_THREADS / 32], rn[RED_THREADS / 32];
    __shared__ bool last;
    double s = 0.0, n = 0.0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < npix;
         i += (size_t)gridDim.x * blockDim.x) {
        const float a = I[i], b = p[i];
        if (isfinite(a) && isfinite(b)) {
            s += (double)a;
            n += 1.0;
        }
    }
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    for (int o = 16; o > 0; o >>= 1) {
        s += __shfl_down_sync(0xffffffffu, s, o);
        n += __shfl_down_sync(0xffffffffu, n, o);
    }
    if (lane == 0) {
        rs[wid] = s;
        rn[wid] = n;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        double ts = 0.0, tn = 0.0;
        for (int q = 0; q < (int)(blockDim.x >> 5); q++) {
            ts += rs[q];
            tn += rn[q];
        }
        partials[2 * blockIdx.x] = ts;
        partials[2 * blockIdx.x + 1] = tn;
        __threadfence();
        last = atomicAdd(counter, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (!last)
        return;
    __threadfence();
    if (wid == 0) {
        double ts = 0.0, tn = 0.0;
        for (unsigned q = lane; q < gridDim.x; q += 32) {
            ts += ((volatile double *)partials)[2 * q];
            tn += ((volatile double *)partials)[2 * q + 1];
        }
        for (int o = 16; o > 0; o >>= 1) {
            ts += __shfl_down_sync(0xffffffffu, ts, o);
            tn += __shfl_down_sync(0xffffffffu, tn, o);
        }
        if (lane == 0) {
            *c = tn > 0.0 ? (float)(ts / tn) : 0.0f;
            *counter = 0;
        }
    }
}

/* The channels of a box pass at one pixel (as guided.c's load_px);
 * returns whether it takes part. */
template <int MODE> struct planes;

template <> struct planes<1> {          /* I' = I - c (float), p, I'·p, I'·I' (double) */
    static constexpr int C = 4;
    static __device__ __forceinline__ bool load(const float *I, const float *p, float c, size_t i,
                                                double *f)
    {
        const float iv = I[i], pv = p[i];
        const float ic = iv - c;
        f[0] = (double)ic;
        f[1] = (double)pv;
        f[2] = (double)ic * (double)pv;
        f[3] = (double)ic * (double)ic;
        return isfinite(iv) && isfinite(pv);
    }
};

template <> struct planes<2> {          /* A, B (NaN together) */
    static constexpr int C = 2;
    static __device__ __forceinline__ bool load(const float *A, const float *B, float, size_t i,
                                                double *f)
    {
        const float a = A[i];
        f[0] = (double)a;
        f[1] = (double)B[i];
        return isfinite(a);
    }
};

/* One box pass over a strip of BOX_TW columns and the band [y0, y0+bh).
 * Shared memory: S = C+1 prefix rows of Lw = BOX_TW + 2r + 1 doubles.
 * MODE 1: in0 = I, in1 = p; writes A -> o0, B -> o1.
 * MODE 2: in0 = A, in1 = B; writes r' -> o0 (I and p in I, pin). */
template <int MODE>
__global__ void k_box(const float *__restrict__ in0, const float *__restrict__ in1,
                      const float *__restrict__ I, const float *__restrict__ pin,
                      const float *__restrict__ cptr, const cu_params_t *__restrict__ prm, int w,
                      int h, int r, int bh, float *__restrict__ o0, float *__restrict__ o1)
{
    constexpr int C = planes<MODE>::C, S = C + 1;
    extern __shared__ double pre[];     /* [S][Lw] */
    __shared__ double wtot[BOX_TW / 32][S];
    const int t = threadIdx.x, lane = t & 31, wid = t >> 5;
    const int x0 = blockIdx.x * BOX_TW, x = x0 + t;
    const int y0 = blockIdx.y * bh, y1 = min(h, y0 + bh);
    const int Lw = BOX_TW + 2 * r + 1;
    const int E = (Lw + BOX_TW - 1) / BOX_TW;
    const int xs0 = x0 - r - 1;         /* column of prefix element 0 */
    const float c = MODE == 1 ? *cptr : 0.0f;
    const double eps = MODE == 1 ? (double)prm->gf_eps : 0.0;
    double acc[S];
#pragma unroll
    for (int s = 0; s < S; s++)
        acc[s] = 0.0;

    /* add the difference row (+ya, -ys; -1 = none) to the running sums */
    auto add_row = [&](int ya, int ys) {
        double run[S];
#pragma unroll
        for (int s = 0; s < S; s++)
            run[s] = 0.0;
        const int j0 = t * E;
        for (int q = 0; q < E; q++) {
            const int j = j0 + q;
            if (j >= Lw)
                break;
            const int xc = xs0 + j;
            if (xc >= 0 && xc < w) {
                double f[C];
                if (ya >= 0 && planes<MODE>::load(in0, in1, c, (size_t)ya * w + xc, f)) {
                    run[0] += 1.0;
#pragma unroll
                    for (int k = 0; k < C; k++)
                        run[1 + k] += f[k];
                }
                if (ys >= 0 && planes<MODE>::load(in0, in1, c, (size_t)ys * w + xc, f)) {
                    run[0] -= 1.0;
#pragma unroll
                    for (int k = 0; k < C; k++)
                        run[1 + k] -= f[k];
                }
            }
#pragma unroll
            for (int s = 0; s < S; s++)
                pre[s * Lw + j] = run[s];
        }
        /* exclusive prefix of the thread totals across the block */
        double off[S];
#pragma unroll
        for (int s = 0; s < S; s++) {
            double v = run[s];
            for (int o = 1; o < 32; o <<= 1) {
                const double u = __shfl_up_sync(0xffffffffu, v, o);
                if (lane >= o)
                    v += u;
            }
            if (lane == 31)
                wtot[wid][s] = v;
            off[s] = v - run[s];
        }
        __syncthreads();
#pragma unroll
        for (int s = 0; s < S; s++)
            for (int q = 0; q < wid; q++)
                off[s] += wtot[q][s];
        for (int q = 0; q < E; q++) {
            const int j = j0 + q;
            if (j >= Lw)
                break;
#pragma unroll
            for (int s = 0; s < S; s++)
                pre[s * Lw + j] += off[s];
        }
        __syncthreads();
#pragma unroll
        for (int s = 0; s < S; s++)
            acc[s] += pre[s * Lw + t + 2 * r + 1] - pre[s * Lw + t];
        __syncthreads();
    };

    for (int y = y0; y < y1; y++) {
        if (y == y0) {
            for (int yy = max(0, y0 - r); yy <= min(h - 1, y0 + r); yy++)
                add_row(yy, -1);
        } else {
            const int ya = y + r < h ? y + r : -1, ys = y - r - 1;
            if (ya >= 0 || ys >= 0)
                add_row(ya, ys);
        }
        if (x >= w)
            continue;
        const size_t i = (size_t)y * (size_t)w + (size_t)x;
        if constexpr (MODE == 1) {
            /* the local linear model in double straight from the window
             * sums (guided.c's finish_px) */
            const float iv = I[i], pv = pin[i];
            const bool part = isfinite(iv) && isfinite(pv);
            const double n = acc[0], inv = 1.0 / n;
            const double mi = acc[1] * inv, mp = acc[2] * inv, cip = acc[3] * inv,
                         cii = acc[4] * inv;
            const double var = cii - mi * mi, cov = cip - mi * mp;
            const float A = (float)(cov / (var + eps));
            const float B = (float)(mp - (double)A * mi);
            const bool ok = part && n > 0.5 && isfinite(A) && isfinite(B);
            o0[i] = ok ? A : qnan();
            o1[i] = ok ? B : qnan();
        } else {
            const float m0 = acc[0] > 0.5 ? (float)(acc[1] / acc[0]) : qnan();
            const float m1 = acc[0] > 0.5 ? (float)(acc[2] / acc[0]) : qnan();
            const float iv = I[i], pv = pin[i];
            const float ic = iv - *cptr;
            const double q = (double)m0 * (double)ic + (double)m1;
            o0[i] = isfinite(iv) && isfinite(pv) ? (float)((double)pv - q) : qnan();
        }
    }
}

__global__ void k_copy(const float *__restrict__ in, float *__restrict__ out, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = in[i];
}

/* Band height: at least 2r+1 rows (the start-up sums 2r+1 rows), and
 * small enough that the frame gives the GPU a few waves of blocks. */
int band_height(int w, int h, int r)
{
    const int strips = (w + BOX_TW - 1) / BOX_TW;
    int bh = 64;
    while (bh > 16 && (long long)strips * ((h + bh - 1) / bh) < 1024)
        bh /= 2;
    return bh > 2 * r + 1 ? bh : 2 * r + 1;
}

} // namespace

extern "C" cudaError_t cu_guided(const cu_params_t *p, const float *I, const float *pin, int w,
                                 int h, int radius, float *A, float *B, float *out,
                                 double *partials, unsigned int *counter, float *c,
                                 cudaStream_t s)
{
    const size_t npix = (size_t)w * (size_t)h;
    size_t gb = (npix + RED_THREADS - 1) / RED_THREADS;
    if (gb > CU_RED_BLOCKS)
        gb = CU_RED_BLOCKS;
    if (gb < 1)
        gb = 1;
    k_gf_mean<<<(unsigned)gb, RED_THREADS, 0, s>>>(I, pin, npix, partials, counter, c);
    const int r = radius < 0 ? 0 : radius;
    const int bh = band_height(w, h, r);
    const dim3 grid((unsigned)((w + BOX_TW - 1) / BOX_TW), (unsigned)((h + bh - 1) / bh));
    const int Lw = BOX_TW + 2 * r + 1;
    const size_t sm1 = (size_t)5 * Lw * sizeof(double), sm2 = (size_t)3 * Lw * sizeof(double);
    cudaError_t e;
    if (sm1 > 48 * 1024 &&
        (e = cudaFuncSetAttribute(k_box<1>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  (int)sm1)) != cudaSuccess)
        return e;
    if (sm2 > 48 * 1024 &&
        (e = cudaFuncSetAttribute(k_box<2>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  (int)sm2)) != cudaSuccess)
        return e;
    k_box<1><<<grid, BOX_TW, sm1, s>>>(I, pin, I, pin, c, p, w, h, r, bh, A, B);
    k_box<2><<<grid, BOX_TW, sm2, s>>>(A, B, I, pin, c, p, w, h, r, bh, out, NULL);
    return cudaGetLastError();
}

extern "C" cudaError_t cu_copy_plane(const float *in, float *out, size_t n, cudaStream_t s)
{
    size_t g = (n + 255) / 256;
    k_copy<<<(unsigned)(g < 4096 ? (g ? g : 1) : 4096), 256, 0, s>>>(in, out, n);
    return cudaGetLastError();
}
