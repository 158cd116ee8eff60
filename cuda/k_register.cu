/*
 * k_register.cu — ALGORITHM.md §2 on the GPU: 2×2 binning, block matching
 * (block window and candidate window in shared memory, one thread per
 * candidate, parallel min-reduction over the candidates), the 3×3
 * refinement (every 2nd row and column) of the coarse shift down the pyramid (all levels chained on
 * the device: no host round trip between levels), the reference's
 * smoothing and gradients, and the fine-registration pass: one fused
 * reduction kernel (block partials, then the last block to finish adds
 * them in a fixed order, so the sums are deterministic run to run).
 *
 * register_coarse.c / register_fine.c are the reference. Each candidate's
 * SAD is summed by one thread in raster order, so it is the very double
 * the CPU computes; block variances and frame-wide sums round differently
 * (parallel sums, in double).
 */
#include "cu_internal.h"

#include <float.h>
#include <math.h>

namespace {

constexpr int TX = 32, TY = 8;
constexpr int SEARCH_THREADS = 512;     /* at most; a warp per 32 candidates */
constexpr size_t SURF_SMEM = 48 * 1024; /* the SAD surface is kept when all fits here */

/* Whether a search of block B and range R keeps its SAD surface. */
__host__ __device__ inline bool search_surface(int B, int R)
{
    const size_t cw = (size_t)B + 2 * (size_t)R, nc = (2 * (size_t)R + 1) * (2 * (size_t)R + 1);
    return nc * sizeof(double) + ((size_t)B * B + cw * cw) * sizeof(float) <= SURF_SMEM;
}
constexpr int RED_THREADS = 256;

__device__ __forceinline__ float qnan()
{
    return __int_as_float(0x7fc00000);
}

__global__ void k_bin2(const float *__restrict__ in, int w, int h, float *__restrict__ out)
{
    const int bw = w / 2, bh = h / 2;
    const int x = blockIdx.x * TX + threadIdx.x, y = blockIdx.y * TY + threadIdx.y;
    if (x >= bw || y >= bh)
        return;
    const float *r0 = in + (size_t)(2 * y) * (size_t)w, *r1 = r0 + w;
    const float t[4] = { r0[2 * x], r0[2 * x + 1], r1[2 * x], r1[2 * x + 1] };
    float s = 0.0f;
    int n = 0;
#pragma unroll
    for (int i = 0; i < 4; i++)
        if (isfinite(t[i])) {
            s += t[i];
            n++;
        }
    out[(size_t)y * (size_t)bw + (size_t)x] = n ? s / (float)n : qnan();
}

__global__ void k_reference_prep(const float *__restrict__ ref, int w, int h,
                                 float *__restrict__ S, float *__restrict__ gx,
                                 float *__restrict__ gy)
{
    const int x = blockIdx.x * TX + threadIdx.x, y = blockIdx.y * TY + threadIdx.y;
    if (x >= w || y >= h)
        return;
    const size_t i = (size_t)y * (size_t)w + (size_t)x;
    if (x == 0 || y == 0 || x == w - 1 || y == h - 1) {
        S[i] = gx[i] = gy[i] = qnan();
        return;
    }
    const float c = ref[i], l = ref[i - 1], r = ref[i + 1];
    const float u = ref[i - (size_t)w], d = ref[i + (size_t)w];
    const float s = (c + l + r + u + d) / 5.0f;
    const bool ok = !isnan(s);
    S[i] = s;
    gx[i] = ok ? (r - l) * 0.5f : qnan();
    gy[i] = ok ? (d - u) * 0.5f : qnan();
}

/* (value, index) minimum with ties to the smaller index. */
__device__ __forceinline__ void min_pair(double &v, int &i, double v2, int i2)
{
    if (v2 < v || (v2 == v && i2 < i)) {
        v = v2;
        i = i2;
    }
}

/* SAD of candidate c (dy = c / side - R, dx = c % side - R) over the block,
 * one thread, raster order; +inf when fewer than half the pixels pair. */
__device__ __forceinline__ double cand_sad(const float *rs, const float *cs, int B, int R, int CW,
                                           int side, int c)
{
    const int dy = c / side - R, dx = c % side - R;
    double acc = 0.0;
    long long cnt = 0;
    for (int y = 0; y < B; y++) {
        const float *rr = rs + y * B;
        const float *cr = cs + (y - dy + R) * CW + (R - dx);
        for (int x = 0; x < B; x++) {
            const float r = rr[x], cv = cr[x];
            if (isfinite(cv) && isfinite(r)) {
                acc += fabs((double)r - (double)cv);
                cnt++;
            }
        }
    }
    return 2 * cnt < (long long)B * B ? INFINITY : acc / (double)cnt;
}

/* One coarse block per CUDA block. Shared memory: the ref block (B²
 * floats) and the frame's window (B+2R)² floats (NaN outside the level),
 * and, when it fits (search_surface), the (2R+1)² SADs. One thread per
 * candidate (the launch has a warp per 32 candidates, up to
 * SEARCH_THREADS); the best is a (value, index) min-reduction (ties to the
 * smaller index = smallest dy, then dx), and the runner-up (Chebyshev
 * distance >= 2 from the best) a second pass over the kept surface, or,
 * for a large R, over recomputed SADs. */
__global__ void __launch_bounds__(SEARCH_THREADS)
k_block_search(const cu_params_t *__restrict__ p, const float *__restrict__ ref,
               const float *__restrict__ cur, const double *__restrict__ noise_ref,
               cu_block_res_t *__restrict__ out)
{
    extern __shared__ double smem_d[];
    __shared__ double red_v[SEARCH_THREADS / 32];
    __shared__ int red_i[SEARCH_THREADS / 32];
    __shared__ double red_s[SEARCH_THREADS / 32], red_s2[SEARCH_THREADS / 32];
    __shared__ long long red_n[SEARCH_THREADS / 32];
    __shared__ int used_s;

    const int g = p->g, B = p->B, R = p->R, w = p->lw, h = p->lh;
    const int b = blockIdx.x;
    const int bx = b % g, by = b / g;
    const int cx = p->lox + ((2 * bx + 1) * (p->hix - p->lox)) / (2 * g);
    const int cy = p->loy + ((2 * by + 1) * (p->hiy - p->loy)) / (2 * g);
    const int x0 = cx - B / 2, y0 = cy - B / 2;
    const int side = 2 * R + 1, ncand = side * side;
    const int CW = B + 2 * R;
    double *surf = search_surface(B, R) ? smem_d : nullptr;       /* ncand */
    float *rs = reinterpret_cast<float *>(smem_d + (surf ? ncand : 0));   /* B*B */
    float *cs = rs + B * B;                             /* CW*CW */
    const int t = threadIdx.x, lane = t & 31, wid = t >> 5;
    const int nw = (int)(blockDim.x >> 5);

    /* the reference block, and its variance over the finite pixels */
    double s = 0.0, s2 = 0.0;
    long long n = 0;
    for (int i = t; i < B * B; i += blockDim.x) {
        const float v = ref[(size_t)(y0 + i / B) * (size_t)w + (size_t)(x0 + i % B)];
        rs[i] = v;
        if (isfinite(v)) {
            s += v;
            s2 += (double)v * v;
            n++;
        }
    }
    for (int o = 16; o > 0; o >>= 1) {
        s += __shfl_down_sync(0xffffffffu, s, o);
        s2 += __shfl_down_sync(0xffffffffu, s2, o);
        n += __shfl_down_sync(0xffffffffu, n, o);
    }
    if (lane == 0) {
        red_s[wid] = s;
        red_s2[wid] = s2;
        red_n[wid] = n;
    }
    __syncthreads();
    if (t == 0) {
        double ts = 0.0, ts2 = 0.0;
        long long tn = 0;
        for (int k = 0; k < nw; k++) {
            ts += red_s[k];
            ts2 += red_s2[k];
            tn += red_n[k];
        }
        double var = -1.0;
        if (tn > 0) {
            const double mean = ts / (double)tn;
            var = ts2 / (double)tn - mean * mean;
        }
        const double nr = *noise_ref;
        const int used = var > 4.0 * nr * nr;
        used_s = used;
        out[b].var = var;
        out[b].used = used;
        out[b].dx = out[b].dy = 0;
        out[b].best = out[b].second = INFINITY;
    }
    __syncthreads();
    if (!used_s)
        return;

    /* the frame's window: cur(x - d) for x in the block, d in [-R, R]² */
    for (int i = t; i < CW * CW; i += blockDim.x) {
        const int gy = y0 - R + i / CW, gxx = x0 - R + i % CW;
        cs[i] = gy >= 0 && gy < h && gxx >= 0 && gxx < w ? cur[(size_t)gy * (size_t)w + (size_t)gxx]
                                                          : qnan();
    }
    __syncthreads();

    double bv = INFINITY;
    int bi = 0x7fffffff;
    for (int c = t; c < ncand; c += blockDim.x) {
        const double v = cand_sad(rs, cs, B, R, CW, side, c);
        if (surf)
            surf[c] = v;
        min_pair(bv, bi, v, c);
    }
    for (int o = 16; o > 0; o >>= 1) {
        const double v2 = __shfl_down_sync(0xffffffffu, bv, o);
        const int i2 = __shfl_down_sync(0xffffffffu, bi, o);
        min_pair(bv, bi, v2, i2);
    }
    if (lane == 0) {
        red_v[wid] = bv;
        red_i[wid] = bi;
    }
    __syncthreads();
    if (t == 0)
        for (int k = 1; k < nw; k++)
            min_pair(red_v[0], red_i[0], red_v[k], red_i[k]);
    __syncthreads();
    const double best = red_v[0];
    const int besti = red_i[0];
    const int bdx = besti % side - R, bdy = besti / side - R;

    double sv = INFINITY;
    for (int c = t; c < ncand; c += blockDim.x) {
        const int dy = c / side - R, dx = c % side - R;
        if (max(abs(dx - bdx), abs(dy - bdy)) >= 2)
            sv = fmin(sv, surf ? surf[c] : cand_sad(rs, cs, B, R, CW, side, c));
    }
    for (int o = 16; o > 0; o >>= 1)
        sv = fmin(sv, __shfl_down_sync(0xffffffffu, sv, o));
    if (lane == 0)
        red_s[wid] = sv;
    __syncthreads();
    if (t == 0) {
        double sec = INFINITY;
        for (int k = 0; k < nw; k++)
            sec = fmin(sec, red_s[k]);
        out[b].best = best;
        out[b].second = sec;
        out[b].dx = bdx;
        out[b].dy = bdy;
    }
}

/* Refinement, one level: the 9 mean absolute differences around
 * (2·dx, 2·dy), as (sum, count) pairs added into res->mad. */
__global__ void k_mad9(const float *__restrict__ ref, const float *__restrict__ cur, int w, int h,
                       int step, cu_results_t *res)
{
    __shared__ double red[RED_THREADS / 32][18];
    const int bdx = 2 * res->ref_dx, bdy = 2 * res->ref_dy;
    double s[9], c[9];
#pragma unroll
    for (int k = 0; k < 9; k++)
        s[k] = c[k] = 0.0;
    const int nx = (w + step - 1) / step, ny = (h + step - 1) / step;
    const long long total = (long long)nx * ny;
    for (long long j = blockIdx.x * (long long)blockDim.x + threadIdx.x; j < total;
         j += (long long)gridDim.x * blockDim.x) {
        const unsigned int jj = (unsigned int)j;       /* < 2^31: 32-bit division */
        const int y = (int)(jj / (unsigned int)nx) * step, x = (int)(jj % (unsigned int)nx) * step;
        const float cv = cur[(size_t)y * (size_t)w + (size_t)x];
        if (!isfinite(cv))
            continue;
#pragma unroll
        for (int k = 0; k < 9; k++) {
            const int ry = y + bdy + k / 3 - 1, rx = x + bdx + k % 3 - 1;
            if (ry < 0 || ry >= h || rx < 0 || rx >= w)
                continue;
            const float rv = ref[(size_t)ry * (size_t)w + (size_t)rx];
            if (!isfinite(rv))
                continue;
            s[k] += fabs((double)cv - (double)rv);
            c[k] += 1.0;
        }
    }
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
#pragma unroll
    for (int k = 0; k < 9; k++)
        for (int o = 16; o > 0; o >>= 1) {
            s[k] += __shfl_down_sync(0xffffffffu, s[k], o);
            c[k] += __shfl_down_sync(0xffffffffu, c[k], o);
        }
    if (lane == 0)
#pragma unroll
        for (int k = 0; k < 9; k++) {
            red[wid][2 * k] = s[k];
            red[wid][2 * k + 1] = c[k];
        }
    __syncthreads();
    if (threadIdx.x < 18) {
        double v = 0.0;
        for (int q = 0; q < (int)(blockDim.x >> 5); q++)
            v += red[q][threadIdx.x];
        if (v != 0.0)
            atomicAdd(&res->mad[threadIdx.x], v);
    }
}

/* The best of the 9 (ties: smallest dy, then dx), the new level's shift,
 * and the sums cleared for the next level. */
__global__ void k_argmin9(cu_results_t *res)
{
    if (threadIdx.x != 0)
        return;
    double m[9];
    for (int k = 0; k < 9; k++)
        m[k] = res->mad[2 * k + 1] > 0.0 ? res->mad[2 * k] / res->mad[2 * k + 1] : INFINITY;
    int bk = 0;
    for (int k = 1; k < 9; k++)
        if (m[k] < m[bk])
            bk = k;
    res->ref_dx = 2 * res->ref_dx + bk % 3 - 1;
    res->ref_dy = 2 * res->ref_dy + bk / 3 - 1;
    for (int k = 0; k < 18; k++)
        res->mad[k] = 0.0;
}

__global__ void k_refine_start(const cu_params_t *__restrict__ p, cu_results_t *res)
{
    if (threadIdx.x != 0)
        return;
    res->ref_dx = p->ref_dx;
    res->ref_dy = p->ref_dy;
    for (int k = 0; k < 18; k++)
        res->mad[k] = 0.0;
}

/* The fine-registration pass (ss_fine_sums): per-thread double sums, a
 * block reduction, block partials, and the last block adds the partials
 * in block order. */
__global__ void k_fine_sums(const float *__restrict__ cur, const float *__restrict__ S,
                            const float *__restrict__ gxp, const float *__restrict__ gyp, int w,
                            int h, double sx, double sy, double *__restrict__ partials,
                            unsigned int *counter, double *__restrict__ out)
{
    __shared__ double red[RED_THREADS / 32][SS_FINE_NSUMS];
    __shared__ bool last;
    double a[SS_FINE_NSUMS];
#pragma unroll
    for (int k = 0; k < SS_FINE_NSUMS; k++)
        a[k] = 0.0;
    /* one integer offset and one set of bilinear weights for the whole
     * frame, as ss_fine_sums defines them */
    const bool sane = fabs(sx) < 1e9 && fabs(sy) < 1e9;
    const double ixf = sane ? floor(-sx) : 0.0, iyf = sane ? floor(-sy) : 0.0;
    const double fx = -sx - ixf, fy = -sy - iyf;
    const int ix = (int)ixf, iy = (int)iyf;
    const int xa = max(1, -ix), xb = min(w - 1, w - 1 - ix);
    const int ya = max(1, -iy), yb = min(h - 1, h - 1 - iy);
    const int iw = xb - xa, ih = yb - ya;
    const long long total = sane && iw > 0 && ih > 0 ? (long long)iw * ih : 0;
    for (long long j = blockIdx.x * (long long)blockDim.x + threadIdx.x; j < total;
         j += (long long)gridDim.x * blockDim.x) {
        const unsigned int jj = (unsigned int)j;       /* < 2^31: 32-bit division */
        const int y = ya + (int)(jj / (unsigned int)iw), x = xa + (int)(jj % (unsigned int)iw);
        const float *c0 = cur + (size_t)(y + iy) * (size_t)w + (size_t)(x + ix), *c1 = c0 + w;
        const size_t i = (size_t)y * (size_t)w + (size_t)x;
        const double val = (1.0 - fy) * ((1.0 - fx) * c0[0] + fx * c0[1]) +
                           fy * ((1.0 - fx) * c1[0] + fx * c1[1]);
        const double e = val - (double)S[i];
        const float gxi = gxp[i], gyi = gyp[i];
        if (!(fabs(e) <= DBL_MAX) || !isfinite(gxi) || !isfinite(gyi))
            continue;
        const double gxd = gxi, gyd = gyi;
        a[SS_FS_U] += gxd * gxd;
        a[SS_FS_V] += gxd * gyd;
        a[SS_FS_W] += gyd * gyd;
        a[SS_FS_Q] += gxd * e;
        a[SS_FS_P] += gyd * e;
        a[SS_FS_N] += 1.0;
        a[SS_FS_E] += e;
        a[SS_FS_E2] += e * e;
    }
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
#pragma unroll
    for (int k = 0; k < SS_FINE_NSUMS; k++)
        for (int o = 16; o > 0; o >>= 1)
            a[k] += __shfl_down_sync(0xffffffffu, a[k], o);
    if (lane == 0)
#pragma unroll
        for (int k = 0; k < SS_FINE_NSUMS; k++)
            red[wid][k] = a[k];
    __syncthreads();
    if (threadIdx.x < SS_FINE_NSUMS) {
        double v = 0.0;
        for (int q = 0; q < (int)(blockDim.x >> 5); q++)
            v += red[q][threadIdx.x];
        partials[(size_t)blockIdx.x * SS_FINE_NSUMS + threadIdx.x] = v;
    }
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0)
        last = atomicAdd(counter, 1u) == gridDim.x - 1;
    __syncthreads();
    if (!last)
        return;
    __threadfence();
    /* the last block: partials in block order, 8 sums by 8 warps */
    if (wid < SS_FINE_NSUMS) {
        double v = 0.0;
        for (unsigned q = lane; q < gridDim.x; q += 32)
            v += ((volatile double *)partials)[(size_t)q * SS_FINE_NSUMS + wid];
        for (int o = 16; o > 0; o >>= 1)
            v += __shfl_down_sync(0xffffffffu, v, o);
        if (lane == 0)
            out[wid] = v;
    }
    if (threadIdx.x == 0)
        *counter = 0;
}

inline dim3 grid2(int w, int h)
{
    return dim3((unsigned)((w + TX - 1) / TX), (unsigned)((h + TY - 1) / TY));
}

} // namespace

extern "C" cudaError_t cu_bin2(const float *in, int w, int h, float *out, cudaStream_t s)
{
    if (w / 2 > 0 && h / 2 > 0)
        k_bin2<<<grid2(w / 2, h / 2), dim3(TX, TY), 0, s>>>(in, w, h, out);
    return cudaGetLastError();
}

extern "C" cudaError_t cu_reference_prep(const float *ref, int w, int h, float *S, float *gx,
                                         float *gy, cudaStream_t s)
{
    k_reference_prep<<<grid2(w, h), dim3(TX, TY), 0, s>>>(ref, w, h, S, gx, gy);
    return cudaGetLastError();
}

extern "C" size_t cu_search_smem(int B, int R)
{
    const size_t cw = (size_t)B + 2 * (size_t)R, nc = (2 * (size_t)R + 1) * (2 * (size_t)R + 1);
    return ((size_t)B * B + cw * cw) * sizeof(float) + (search_surface(B, R) ? nc * sizeof(double) : 0);
}

extern "C" cudaError_t cu_search_max_smem(int *bytes)
{
    /* the opt-in limit covers static and dynamic shared memory together */
    cudaFuncAttributes a;
    cudaError_t e = cudaFuncGetAttributes(&a, k_block_search);
    if (e != cudaSuccess)
        return e;
    *bytes -= (int)a.sharedSizeBytes;
    return cudaFuncSetAttribute(k_block_search, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                *bytes);
}

extern "C" cudaError_t cu_block_search(const cu_params_t *p, const float *ref, const float *cur,
                                       const double *noise_ref, int g, int B, int R,
                                       cu_block_res_t *out, cudaStream_t s)
{
    const int ncand = (2 * R + 1) * (2 * R + 1);
    const int threads = ncand >= SEARCH_THREADS ? SEARCH_THREADS : (ncand + 31) / 32 * 32;
    k_block_search<<<g * g, threads, cu_search_smem(B, R), s>>>(p, ref, cur, noise_ref, out);
    return cudaGetLastError();
}

extern "C" cudaError_t cu_refine(const cu_params_t *p, float *const *ref_lvl,
                                 float *const *cur_lvl, const int *lw, const int *lh, int L,
                                 cu_results_t *res, cudaStream_t s)
{
    k_refine_start<<<1, 32, 0, s>>>(p, res);
    for (int l = L - 1; l >= 0; l--) {
        const int step = 2;         /* every 2nd row and column, at every level */
        const long long n = (long long)((lw[l] + step - 1) / step) * ((lh[l] + step - 1) / step);
        long long gb = (n + RED_THREADS - 1) / RED_THREADS;
        if (gb > CU_RED_BLOCKS)
            gb = CU_RED_BLOCKS;
        if (gb < 1)
            gb = 1;
        k_mad9<<<(unsigned)gb, RED_THREADS, 0, s>>>(ref_lvl[l], cur_lvl[l], lw[l], lh[l], step,
                                                    res);
        k_argmin9<<<1, 32, 0, s>>>(res);
    }
    return cudaGetLastError();
}

constexpr int FS_PER_THREAD = 4;

extern "C" cudaError_t cu_fine_sums(const float *cur, const float *S, const float *gx,
                                    const float *gy, int w, int h, double sx, double sy,
                                    double *partials, unsigned int *counter, double *out,
                                    cudaStream_t s)
{
    const long long n = (long long)(w > 2 ? w - 2 : 0) * (h > 2 ? h - 2 : 0);
    /* at least FS_PER_THREAD pixels per thread: on a small frame a block
     * per 256 pixels left a long tail (the last block adds every block's
     * partials) for little work each */
    long long gb = (n + (long long)RED_THREADS * FS_PER_THREAD - 1) / ((long long)RED_THREADS * FS_PER_THREAD);
    if (gb > CU_RED_BLOCKS)
        gb = CU_RED_BLOCKS;
    if (gb < 1)
        gb = 1;
    k_fine_sums<<<(unsigned)gb, RED_THREADS, 0, s>>>(cur, S, gx, gy, w, h, sx, sy, partials,
                                                     counter, out);
    return cudaGetLastError();
}
