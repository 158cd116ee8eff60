/*
 * k_guided.cu — ALGORITHM.md §4 on the GPU: the guided filter with
 * valid-aware box means from running sums (cost independent of the
 * radius), as guided.c defines it: the one-channel filter (guide I' = I -
 * c) and the two-channel one (guides I' and L = ∇²I, which also models the
 * residual a change of seeing leaves).
 *
 * Three launches per frame (radius up to GMAXR = 62):
 *  - c = mean of the guide over the pixels that take part (block partials,
 *    the last block adds them in a fixed order); the Laplacian is computed
 *    on the fly wherever it is needed, never stored;
 *  - the moments pass of the band kernel k_gbox: the channels (I', p, I'p,
 *    I'I' — or I', L, p and their five products, products formed in
 *    double) are made on the fly from the inputs, and at each output pixel
 *    the local linear model (A, B — or A1, A2, B) is solved in double from
 *    the window sums;
 *  - the r' pass of k_gbox: box means of A, B (or A1, A2, B) and
 *    r' = p - (box(A)·I' + box(B))  (+ box(A2)·L).
 * k_gbox (below) keeps vertical running sums per column in registers and
 * takes the horizontal window sums from prefix sums along the strip
 * (per output row: gbox_prefix, then gbox_outputs),
 * S(x) = P[x+r] - P[x-r-1] — the CPU's scheme (guided.c) with the scans
 * done in parallel. Larger radii take the generic k_box (the difference
 * row scanned by the whole block) and a stored Laplacian plane. Sums agree
 * with the CPU's to double rounding, so the float outputs to about 1e-7.
 */
#include "cu_internal.h"
#include "cu_grid.cuh"
#include "pipeline/guided_core.h"
#include "pipeline/seeing_core.h"

#include <math.h>
#include <stdint.h>

namespace {

constexpr int BOX_TW = 64;          /* columns per strip = threads per block */
constexpr int RED_THREADS = 256;

__device__ __forceinline__ float qnan()
{
    return __int_as_float(0x7fc00000);
}

/* What a box pass reads and writes. */
struct box_args {
    const float *I, *L, *p;         /* guide, its Laplacian (or NULL), input */
    const float *c;                 /* device: mean of the guide */
    const cu_params_t *prm;         /* eps */
    const float *in[3];             /* plain passes: the planes to box */
    float *out[3];                  /* moments: A, B / A1, A2, B; plain: out[0] = r' */
};

enum { M_AB = 1, M_R1 = 2, M_AB2 = 3, M_R2 = 4 };

/* Channel count of each mode. */
template <int MODE> struct chans;
template <> struct chans<M_AB> { static constexpr int C = 4; };
template <> struct chans<M_R1> { static constexpr int C = 2; };
template <> struct chans<M_AB2> { static constexpr int C = 8; };
template <> struct chans<M_R2> { static constexpr int C = 3; };

/* The channels of pixel i (guided.c's load_px); returns whether it takes
 * part. */
template <int MODE>
__device__ __forceinline__ bool load(const box_args &a, float c, size_t i, double *f)
{
    if constexpr (MODE == M_AB) {
        const float iv = a.I[i], pv = a.p[i];
        const float ic = iv - c;
        f[0] = (double)ic;
        f[1] = (double)pv;
        f[2] = (double)ic * (double)pv;
        f[3] = (double)ic * (double)ic;
        return isfinite(iv) && isfinite(pv);
    } else if constexpr (MODE == M_AB2) {
        const float iv = a.I[i], lv = a.L[i], pv = a.p[i];
        const float ic = iv - c;
        f[0] = (double)ic;
        f[1] = (double)lv;
        f[2] = (double)pv;
        f[3] = (double)ic * (double)pv;
        f[4] = (double)lv * (double)pv;
        f[5] = (double)ic * (double)ic;
        f[6] = (double)ic * (double)lv;
        f[7] = (double)lv * (double)lv;
        return isfinite(iv) && isfinite(lv) && isfinite(pv);
    } else {
        constexpr int C = chans<MODE>::C;
        const float v0 = a.in[0][i];
        f[0] = (double)v0;
#pragma unroll
        for (int k = 1; k < C; k++)
            f[k] = (double)a.in[k][i];
        return isfinite(v0);
    }
}

/* What a pass writes at pixel i from its window sums acc (count first). */
template <int MODE>
__device__ __forceinline__ void finish(const box_args &a, float c, double eps, size_t i,
                                       const double *acc)
{
    if constexpr (MODE == M_AB) {
        const float iv = a.I[i], pv = a.p[i];
        const bool part = isfinite(iv) && isfinite(pv);
        const double n = acc[0], inv = 1.0 / n;
        const double mi = acc[1] * inv, mp = acc[2] * inv, cip = acc[3] * inv, cii = acc[4] * inv;
        const double var = cii - mi * mi, cov = cip - mi * mp;
        const float A = (float)(cov / (var + eps));
        const float B = (float)(mp - (double)A * mi);
        const bool ok = part && n > 0.5 && isfinite(A) && isfinite(B);
        a.out[0][i] = ok ? A : qnan();
        a.out[1][i] = ok ? B : qnan();
    } else if constexpr (MODE == M_AB2) {
        /* [S11+ε S12; S12 S22+ε]·[A1; A2] = [C1p; C2p] by Cramer's rule */
        const bool part = isfinite(a.I[i]) && isfinite(a.L[i]) && isfinite(a.p[i]);
        const double n = acc[0], inv = 1.0 / n;
        const double m1 = acc[1] * inv, m2 = acc[2] * inv, mp = acc[3] * inv;
        const double c1p = acc[4] * inv - m1 * mp, c2p = acc[5] * inv - m2 * mp;
        const double s11 = acc[6] * inv - m1 * m1 + eps, s12 = acc[7] * inv - m1 * m2;
        const double s22 = acc[8] * inv - m2 * m2 + eps;
        const double det = s11 * s22 - s12 * s12;
        const float A1 = (float)((c1p * s22 - c2p * s12) / det);
        const float A2 = (float)((c2p * s11 - c1p * s12) / det);
        const float B = (float)(mp - (double)A1 * m1 - (double)A2 * m2);
        const bool ok = part && n > 0.5 && isfinite(A1) && isfinite(A2) && isfinite(B);
        a.out[0][i] = ok ? A1 : qnan();
        a.out[1][i] = ok ? A2 : qnan();
        a.out[2][i] = ok ? B : qnan();
    } else {
        constexpr int C = chans<MODE>::C;
        float m[C];
#pragma unroll
        for (int k = 0; k < C; k++)
            m[k] = acc[0] > 0.5 ? (float)(acc[1 + k] / acc[0]) : qnan();
        const float iv = a.I[i], pv = a.p[i];
        const float ic = iv - c;
        if constexpr (MODE == M_R1) {
            const double q = (double)m[0] * (double)ic + (double)m[1];
            a.out[0][i] = isfinite(iv) && isfinite(pv) ? (float)((double)pv - q) : qnan();
        } else {
            const float lv = a.L[i];
            const double q = (double)m[0] * (double)ic + (double)m[1] * (double)lv + (double)m[2];
            a.out[0][i] = isfinite(iv) && isfinite(lv) && isfinite(pv) ? (float)((double)pv - q)
                                                                      : qnan();
        }
    }
}

/* ss_laplacian5 at (x, y), ii = y·w + x, v = in[ii]: l + r + u + d - 4·c
 * in float in that order; NaN on the outer rows/columns (and wherever a
 * tap is NaN, by propagation). */
__device__ __forceinline__ float lap_at(const float *__restrict__ in, int w, int h, int x, int y,
                                        size_t ii, float v)
{
    if (x == 0 || y == 0 || x == w - 1 || y == h - 1)
        return qnan();
    return in[ii - 1] + in[ii + 1] + in[ii - (size_t)w] + in[ii + (size_t)w] - 4.0f * v;
}

/* c = (float)(Σ I / n) over the pixels where I, p (and, LAP, the
 * Laplacian of I) are finite; 0 if none. Block b takes rows b, b + grid,
 * ...; the block partials are added in a fixed order by the last block.
 * LAP computes the Laplacian on the fly (the band kernels do the same, so
 * no plane of it is needed); Lout != NULL also stores it (the generic
 * k_box path reads it as a plane). */
template <bool LAP>
__global__ void k_gf_mean(const float *__restrict__ I, const float *__restrict__ p, int w, int h,
                          float *__restrict__ Lout, double *__restrict__ partials,
                          unsigned int *counter, float *__restrict__ c)
{
    cu_pdl_wait();
    __shared__ double rs[RED_THREADS / 32], rn[RED_THREADS / 32];
    double s = 0.0, n = 0.0;
    for (int y = blockIdx.x; y < h; y += gridDim.x) {
        for (int x = threadIdx.x; x < w; x += blockDim.x) {
            const size_t i = (size_t)y * (size_t)w + (size_t)x;
            const float a = I[i], b = p[i];
            bool ok = isfinite(a) && isfinite(b);
            if constexpr (LAP) {
                const float l = lap_at(I, w, h, x, y, i, a);
                if (Lout)
                    Lout[i] = l;
                ok = ok && isfinite(l);
            }
            if (ok) {
                s += (double)a;
                n += 1.0;
            }
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
    }
    if (!cu_last_block(counter))
        return;
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

/* One box pass over a strip of BOX_TW columns and the band [y0, y0+bh).
 * Shared memory: S = C+1 prefix rows of Lw = BOX_TW + 2r + 1 doubles. */
template <int MODE>
__global__ void k_box(box_args a, int w, int h, int r, int bh)
{
    cu_pdl_wait();
    constexpr int C = chans<MODE>::C, S = C + 1;
    extern __shared__ double pre[];     /* [S][Lw] */
    __shared__ double wtot[BOX_TW / 32][S];
    const int t = threadIdx.x, lane = t & 31, wid = t >> 5;
    const int x0 = blockIdx.x * BOX_TW, x = x0 + t;
    const int y0 = blockIdx.y * bh, y1 = min(h, y0 + bh);
    const int Lw = BOX_TW + 2 * r + 1;
    const int E = (Lw + BOX_TW - 1) / BOX_TW;
    const int xs0 = x0 - r - 1;         /* column of prefix element 0 */
    const float c = *a.c;
    const double eps = (double)a.prm->gf_eps;
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
                if (ya >= 0 && load<MODE>(a, c, (size_t)ya * w + xc, f)) {
                    run[0] += 1.0;
#pragma unroll
                    for (int k = 0; k < C; k++)
                        run[1 + k] += f[k];
                }
                if (ys >= 0 && load<MODE>(a, c, (size_t)ys * w + xc, f)) {
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
            const double v = cu_warp_incl(run[s]);
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
        if (x < w)
            finish<MODE>(a, c, eps, (size_t)y * (size_t)w + (size_t)x, acc);
    }
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

/* The generic pass (any radius): k_box. */
template <int MODE>
cudaError_t kbox(const box_args &a, int w, int h, int r, cudaStream_t s)
{
    constexpr int S = chans<MODE>::C + 1;
    const int bh = band_height(w, h, r);
    const dim3 grid((unsigned)((w + BOX_TW - 1) / BOX_TW), (unsigned)((h + bh - 1) / bh));
    const size_t sm = (size_t)S * (BOX_TW + 2 * r + 1) * sizeof(double);
    if (sm > 48 * 1024) {
        const cudaError_t e =
            cudaFuncSetAttribute(k_box<MODE>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm);
        if (e != cudaSuccess)
            return e;
    }
    cu_launch(k_box<MODE>, grid, BOX_TW, sm, s, a, w, h, r, bh);
    return cudaGetLastError();
}

/* ---- the band kernel (radius up to GMAXR) --------------------------------
 *
 * One block: a strip of TW output columns and the band of rows [y0, y1).
 * Its threads (up to GT) own GK = 4 adjacent columns each, up to GL =
 * GT·GK columns in all: the strip and r (rounded up to 4) columns on
 * either side. A thread keeps, in registers, the vertical running window sums of its columns
 * for every channel (the count as an integer): one row down adds the
 * channels of row y+r and removes those of row y-r-1 (coalesced loads, 16
 * bytes per thread where the frame allows; the channels are made on the
 * fly, the Laplacian too). Per output row, the horizontal window sums come
 * from the prefix sums of the vertical sums along the strip:
 *   1. each thread adds its four columns, a warp-level scan gives the
 *      sums of the lanes before it, lane 31 publishes the warp's total;
 *   2. (barrier) each thread adds the totals of the warps before its own
 *      and stores the inclusive prefix P of its four columns;
 *   3. (barrier) window(x) = P[x+r] - P[x-r-1]; the thread finishes its
 *      own four columns (A1, A2, B or r') and stores them.
 * Two block barriers per row; nothing but P and the warp totals goes
 * through shared memory, and the stores of step 2 and loads of step 3 are
 * free of bank conflicts (the element index is swizzled). Step 3 of the
 * moments needs the validity of its own pixels: each thread keeps that of
 * the last 128 rows it added in shared memory (4 bits a row), hence
 * GMAXR. The next row's new lines are prefetched into L2 while a row is
 * finished. The sums are those of guided.c in another order (double); the
 * count is exact. Measured on the H100 (4096², radius 11, the whole
 * filter): 0.79 ms, against 1.75 ms for the previous column-strip kernels
 * (docs/PERFORMANCE.md). */
constexpr int GT = 128;                 /* threads per block */
constexpr int GK = 4;                   /* columns per thread */
constexpr int GL = GT * GK;             /* columns per strip, halo included */
constexpr int GNW = GT / 32;            /* warps per block */
constexpr int GMAXR = 62;               /* validity ring of 128 rows: 2r+2 of them in use */

/* What each mode sums: CD double channels (besides the count) made of NF
 * raw planes; P1: the moments pass (A, B out), else the r' pass. */
template <int MODE> struct gmode;
template <> struct gmode<M_AB> { static constexpr int CD = 4, NF = 2; static constexpr bool P1 = true; };
template <> struct gmode<M_AB2> { static constexpr int CD = 8, NF = 3; static constexpr bool P1 = true; };
template <> struct gmode<M_R1> { static constexpr int CD = 2, NF = 2; static constexpr bool P1 = false; };
template <> struct gmode<M_R2> { static constexpr int CD = 3, NF = 3; static constexpr bool P1 = false; };

struct gargs {
    const float *I, *p;             /* guide, input */
    const float *in[3];             /* r' pass: A, B / A1, A2, B */
    float *out[3];                  /* moments: A, B / A1, A2, B; r' pass: out[0] = r' */
    const float *c;                 /* device: mean of the guide */
    const cu_params_t *prm;         /* eps */
};

/* Element j of a row of P, for 8-byte and 4-byte words: threads reading
 * or writing j = 4·t + m (any fixed m) hit distinct banks. */
__device__ __forceinline__ int swz64(int j)
{
    return j ^ ((j >> 4) & 3);
}
__device__ __forceinline__ int swz32(int j)
{
    return j ^ ((j >> 5) & 3);
}

/* Columns c0..c0+3 of a row (c0 a multiple of 4); NaN outside [0, w).
 * VEC: w is a multiple of 4 and the row 16-byte aligned, so the four are
 * all inside or all outside. */
template <bool VEC>
__device__ __forceinline__ void ld4(const float *__restrict__ row, int c0, int w, float *v)
{
    if constexpr (VEC) {
        if (c0 >= 0 && c0 < w) {
            const float4 q = __ldg(reinterpret_cast<const float4 *>(row + c0));
            v[0] = q.x;
            v[1] = q.y;
            v[2] = q.z;
            v[3] = q.w;
        } else {
#pragma unroll
            for (int k = 0; k < GK; k++)
                v[k] = qnan();
        }
    } else {
#pragma unroll
        for (int k = 0; k < GK; k++) {
            const int x = c0 + k;
            v[k] = x >= 0 && x < w ? __ldg(row + x) : qnan();
        }
    }
}

/* The guide I and its Laplacian (lap_at's arithmetic) at columns
 * c0..c0+3 of row yy. */
template <bool VEC>
__device__ __forceinline__ void guide4(const float *__restrict__ I, int w, int h, int yy, int c0,
                                       float *iv, float *lv)
{
    const float *row = I + (size_t)yy * (size_t)w;
    ld4<VEC>(row, c0, w, iv);
    const bool inner = yy > 0 && yy < h - 1;
    float up[GK], dn[GK];
    if (inner) {
        ld4<VEC>(row - w, c0, w, up);
        ld4<VEC>(row + w, c0, w, dn);
    } else {
#pragma unroll
        for (int k = 0; k < GK; k++)
            up[k] = dn[k] = 0.0f;
    }
    const float lft = c0 - 1 >= 0 && c0 - 1 < w ? __ldg(row + c0 - 1) : qnan();
    const float rgt = c0 + GK >= 0 && c0 + GK < w ? __ldg(row + c0 + GK) : qnan();
#pragma unroll
    for (int k = 0; k < GK; k++) {
        const int x = c0 + k;
        const float l = k == 0 ? lft : iv[k - 1], r = k == GK - 1 ? rgt : iv[k + 1];
        lv[k] = inner && x > 0 && x < w - 1 ? l + r + up[k] + dn[k] - 4.0f * iv[k] : qnan();
    }
}

/* The raw planes of row yy at the thread's columns. */
template <int MODE, bool VEC>
__device__ __forceinline__ void gfetch(const gargs &a, int w, int h, int yy, int c0,
                                       float (*v)[GK])
{
    const size_t row = (size_t)yy * (size_t)w;
    if constexpr (MODE == M_AB2) {
        guide4<VEC>(a.I, w, h, yy, c0, v[0], v[1]);
        ld4<VEC>(a.p + row, c0, w, v[2]);
    } else if constexpr (MODE == M_AB) {
        ld4<VEC>(a.I + row, c0, w, v[0]);
        ld4<VEC>(a.p + row, c0, w, v[1]);
    } else {
#pragma unroll
        for (int f = 0; f < gmode<MODE>::NF; f++)
            ld4<VEC>(a.in[f] + row, c0, w, v[f]);
    }
}

/* The channels of column k (guided.c's load_px: zeros where the pixel
 * does not take part); returns whether it does. */
template <int MODE>
__device__ __forceinline__ int gchan(const float (*v)[GK], int k, float c, double *f)
{
    if constexpr (MODE == M_AB2) {
        const float I = v[0][k], L = v[1][k], p = v[2][k];
        const bool ok = isfinite(I) && isfinite(L) && isfinite(p);
        const float ic = ok ? I - c : 0.0f, lv = ok ? L : 0.0f, pv = ok ? p : 0.0f;
        f[0] = (double)ic;
        f[1] = (double)lv;
        f[2] = (double)pv;
        f[3] = (double)ic * (double)pv;
        f[4] = (double)lv * (double)pv;
        f[5] = (double)ic * (double)ic;
        f[6] = (double)ic * (double)lv;
        f[7] = (double)lv * (double)lv;
        return ok;
    } else if constexpr (MODE == M_AB) {
        const float I = v[0][k], p = v[1][k];
        const bool ok = isfinite(I) && isfinite(p);
        const float ic = ok ? I - c : 0.0f, pv = ok ? p : 0.0f;
        f[0] = (double)ic;
        f[1] = (double)pv;
        f[2] = (double)ic * (double)pv;
        f[3] = (double)ic * (double)ic;
        return ok;
    } else {
        const bool ok = isfinite(v[0][k]);
#pragma unroll
        for (int q = 0; q < gmode<MODE>::CD; q++)
            f[q] = ok ? (double)v[q][k] : 0.0;
        return ok;
    }
}

/* v + the value of lane - o (v alone in lanes < o): one step of a warp's
 * inclusive scan; the shuffle's own in-range predicate guards the add. */
__device__ __forceinline__ double scan_step(double v, int o)
{
#ifdef __CUDA_ARCH__
    double r;
    asm("{\n\t.reg .pred p;\n\t.reg .b32 lo, hi, ulo, uhi;\n\t.reg .f64 u;\n\t"
        "mov.b64 {lo, hi}, %1;\n\t"
        "shfl.sync.up.b32 ulo|p, lo, %2, 0, -1;\n\t"
        "shfl.sync.up.b32 uhi|p, hi, %2, 0, -1;\n\t"
        "mov.b64 u, {ulo, uhi};\n\t"
        "mov.f64 %0, %1;\n\t"
        "@p add.f64 %0, %1, u;\n\t}"
        : "=d"(r)
        : "d"(v), "r"(o));
    return r;
#else
    const double u = __shfl_up_sync(0xffffffffu, v, o);
    return (int)(threadIdx.x & 31) >= o ? v + u : v;
#endif
}
__device__ __forceinline__ int scan_step(int v, int o)
{
#ifdef __CUDA_ARCH__
    int r;
    asm("{\n\t.reg .pred p;\n\t.reg .b32 u;\n\t"
        "shfl.sync.up.b32 u|p, %1, %2, 0, -1;\n\t"
        "mov.b32 %0, %1;\n\t"
        "@p add.s32 %0, %1, u;\n\t}"
        : "=r"(r)
        : "r"(v), "r"(o));
    return r;
#else
    const int u = __shfl_up_sync(0xffffffffu, v, o);
    return (int)(threadIdx.x & 31) >= o ? v + u : v;
#endif
}

/* Prefetch into L2 the 16 bytes of columns c0..c0+3 of row yy of a plane,
 * if they are in the frame. */
__device__ __forceinline__ void pf4(const float *plane, int w, int h, int yy, int c0)
{
    if (yy < 0 || yy >= h || c0 < 0 || c0 >= w)
        return;
    const float *q = plane + (size_t)yy * (size_t)w + (size_t)c0;
    asm volatile("prefetch.global.L2 [%0];" ::"l"(q));
}

/* gbox_prefix's scan of one series (T: the double sums or the int
 * counts): the thread's total tot of its GK columns, scanned over the
 * warp; lane 31 leaves the warp's total in w[warp]; returns the sum of
 * the lanes before this one. */
template <typename T>
__device__ __forceinline__ T warp_exclusive(T tot, T *w, int lane, int wid)
{
    T v = tot;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1)
        v = scan_step(v, o);
    if (lane == 31)
        w[wid] = v;
    return v - tot;
}

/* x plus the totals w[] of the warps before this thread's (after the
 * barrier that follows warp_exclusive). */
template <typename T>
__device__ __forceinline__ T plus_warps_before(T x, const T *w, int wid)
{
#pragma unroll
    for (int i = 0; i < GNW - 1; i++)
        if (i < wid)
            x += w[i];
    return x;
}

/* k_gbox, phases 1 and 2 of an output row: the inclusive prefix sums
 * along the strip of the columns' vertical window sums V and counts N
 * (the thread's GK columns from jb), into sP and sN (swizzled): each
 * thread's total and a warp scan, then the warps' totals through sW and
 * sWN. Every thread calls it; the prefixes are complete on return. */
template <int CD>
__device__ __forceinline__ void gbox_prefix(const double (&V)[GK][CD], const int (&N)[GK], int jb,
                                            double (*sP)[GL], int *sN, double (*sW)[GNW],
                                            int *sWN)
{
    /* 1. the thread's totals, the lanes before it, the warps' totals */
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    double ex[CD];
#pragma unroll
    for (int q = 0; q < CD; q++) {
        double tot = V[0][q];
#pragma unroll
        for (int k = 1; k < GK; k++)
            tot += V[k][q];
        ex[q] = warp_exclusive(tot, sW[q], lane, wid);
    }
    int totn = N[0];
#pragma unroll
    for (int k = 1; k < GK; k++)
        totn += N[k];
    const int exn = warp_exclusive(totn, sWN, lane, wid);
    __syncthreads();

    /* 2. inclusive prefix of the row at the thread's columns */
#pragma unroll
    for (int q = 0; q < CD; q++) {
        double P = plus_warps_before(ex[q], sW[q], wid);
#pragma unroll
        for (int k = 0; k < GK; k++) {
            P += V[k][q];
            sP[q][swz64(jb + k)] = P;
        }
    }
    int P = plus_warps_before(exn, sWN, wid);
#pragma unroll
    for (int k = 0; k < GK; k++) {
        P += N[k];
        sN[swz32(jb + k)] = P;
    }
    __syncthreads();
}

/* k_gbox, phase 3 of output row y: the window sums of the thread's GK
 * columns (from jb, frame column c0) from the row prefixes sP and sN,
 * then per pixel the local model (moments pass: guided_core.h; vb the
 * pixels' own validity bits) or r' (r' pass: gi, gl, gp the row's guide,
 * Laplacian and input), written to a.out. */
template <int MODE, bool VEC>
__device__ __forceinline__ void gbox_outputs(const gargs &a, int w, int y, int r, int jb, int c0,
                                             float c, double eps, unsigned vb,
                                             const double (*sP)[GL], const int *sN,
                                             const float *gi, const float *gl, const float *gp)
{
    constexpr int CD = gmode<MODE>::CD;
    float o0[GK], o1[GK], o2[GK];
#pragma unroll
    for (int k = 0; k < GK; k++) {
        const int j = jb + k, ja = swz64(j + r), js = swz64(j - r - 1);
        double H[CD];
#pragma unroll
        for (int q = 0; q < CD; q++)
            H[q] = sP[q][ja] - sP[q][js];
        const int cnt = sN[swz32(j + r)] - sN[swz32(j - r - 1)];
        const double n = (double)cnt;
        o1[k] = o2[k] = 0.0f;
        if constexpr (MODE == M_AB2) {
            ss_gc_model2(n, H, eps, (vb >> k) & 1u, &o0[k], &o1[k], &o2[k]);
        } else if constexpr (MODE == M_AB) {
            ss_gc_model1(n, H, eps, (vb >> k) & 1u, &o0[k], &o1[k]);
        } else {
            /* H/n as H·(1/n): guided.c divides; the doubles differ by
             * an ulp at most, the floats not */
            const double inv = 1.0 / n;
            float m[CD];
#pragma unroll
            for (int q = 0; q < CD; q++)
                m[q] = n > 0.5 ? (float)(H[q] * inv) : qnan();
            const float ic = gi[k] - c;
            if constexpr (MODE == M_R1) {
                const double qv = (double)m[0] * (double)ic + (double)m[1];
                o0[k] = isfinite(gi[k]) && isfinite(gp[k]) ? (float)((double)gp[k] - qv)
                                                           : qnan();
            } else {
                const double qv = (double)m[0] * (double)ic + (double)m[1] * (double)gl[k] +
                                  (double)m[2];
                o0[k] = isfinite(gi[k]) && isfinite(gl[k]) && isfinite(gp[k])
                            ? (float)((double)gp[k] - qv) : qnan();
            }
        }
    }
    constexpr int NO = MODE == M_AB2 ? 3 : MODE == M_AB ? 2 : 1;
    const size_t i0 = (size_t)y * (size_t)w + (size_t)c0;
    if constexpr (VEC) {
        *reinterpret_cast<float4 *>(a.out[0] + i0) = make_float4(o0[0], o0[1], o0[2], o0[3]);
        if constexpr (NO > 1)
            *reinterpret_cast<float4 *>(a.out[1] + i0) =
                make_float4(o1[0], o1[1], o1[2], o1[3]);
        if constexpr (NO > 2)
            *reinterpret_cast<float4 *>(a.out[2] + i0) =
                make_float4(o2[0], o2[1], o2[2], o2[3]);
    } else {
#pragma unroll
        for (int k = 0; k < GK; k++) {
            if (c0 + k >= w)
                break;
            a.out[0][i0 + k] = o0[k];
            if constexpr (NO > 1)
                a.out[1][i0 + k] = o1[k];
            if constexpr (NO > 2)
                a.out[2][i0 + k] = o2[k];
        }
    }
}

/* 4 blocks of 128 threads per SM: at most 128 registers (the two-channel
 * moments pass then spills nothing: measured faster than 3 blocks at 168). */
template <int MODE, bool VEC>
__global__ void __launch_bounds__(GT, 4)
    k_gbox(gargs a, int w, int h, int r, int R4, int TW, int bh)
{
    cu_pdl_wait();
    constexpr int CD = gmode<MODE>::CD, NF = gmode<MODE>::NF;
    constexpr bool P1 = gmode<MODE>::P1;
    __shared__ double sP[CD][GL];       /* prefix sums of the row (swz64) */
    __shared__ int sN[GL];              /* ... of the count (swz32) */
    __shared__ double sW[CD][GNW];      /* warp totals */
    __shared__ int sWN[GNW];
    /* P1: validity of the thread's 4 columns (4 bits) in the last 128 rows
     * added, 8 rows per word; only the owning thread touches its column */
    __shared__ unsigned sV[P1 ? 16 : 1][GT];
    const int t = threadIdx.x;
    const int x0 = blockIdx.x * TW, xs = x0 - R4, jb = GK * t, c0 = xs + jb;
    const int y0 = blockIdx.y * bh, y1 = min(h, y0 + bh);
    const float c = *a.c;
    const double eps = (double)a.prm->gf_eps;
    double V[GK][CD];                   /* vertical window sums of the columns */
    int N[GK];
#pragma unroll
    for (int k = 0; k < GK; k++) {
#pragma unroll
        for (int q = 0; q < CD; q++)
            V[k][q] = 0.0;
        N[k] = 0;
    }
    if constexpr (P1) {
#pragma unroll
        for (int i = 0; i < 16; i++)
            sV[i][t] = 0u;
    }

    /* the raw planes of row yy; a row outside the frame reads as NaN, so
     * that it takes no part */
    auto fetch = [&](int yy, float (*v)[GK]) {
        if (yy >= 0 && yy < h) {
            gfetch<MODE, VEC>(a, w, h, yy, c0, v);
        } else {
#pragma unroll
            for (int f = 0; f < NF; f++)
#pragma unroll
                for (int k = 0; k < GK; k++)
                    v[f][k] = qnan();
        }
    };
    /* P1: record the validity bits of the row added */
    auto record = [&](int ya, unsigned bits) {
        if constexpr (P1) {
            unsigned &wd = sV[(ya >> 3) & 15][t];
            const int sh = (ya & 7) * 4;
            wd = (wd & ~(15u << sh)) | (bits << sh);
        }
    };
    /* V += row ya (the start of a band) */
    auto add = [&](int ya) {
        float va[NF][GK];
        fetch(ya, va);
        unsigned bits = 0;
#pragma unroll
        for (int k = 0; k < GK; k++) {
            double fa[CD];
            const int oa = gchan<MODE>(va, k, c, fa);
#pragma unroll
            for (int q = 0; q < CD; q++)
                V[k][q] += fa[q];
            N[k] += oa;
            bits |= (unsigned)oa << k;
        }
        record(ya, bits);
    };
    /* V += row ya, V -= row ys; both rows' loads are issued before either
     * is used */
    auto step = [&](int ya, int ys) {
        float va[NF][GK], vs[NF][GK];
        fetch(ya, va);
        fetch(ys, vs);
        unsigned bits = 0;
#pragma unroll
        for (int k = 0; k < GK; k++) {
            double fa[CD], fs[CD];
            const int oa = gchan<MODE>(va, k, c, fa);
            const int os = gchan<MODE>(vs, k, c, fs);
#pragma unroll
            for (int q = 0; q < CD; q++)
                V[k][q] += fa[q] - fs[q];
            N[k] += oa - os;
            bits |= (unsigned)oa << k;
        }
        record(ya, bits);
    };

#pragma unroll 1
    for (int yy = y0 - r; yy <= y0 + r; yy++)
        add(yy);
    const bool mine = jb >= R4 && jb < R4 + TW && c0 < w;   /* output columns (whole chunks) */
    for (int y = y0; y < y1; y++) {
        if (y > y0)
            step(y + r, y - r - 1);
        if (y + 1 < y1) {
            /* the lines the next row's step reads that are not yet cached
             * (4096²: 0.87 -> 0.79 ms for the whole filter) */
            const int na = y + 1 + r, ns = y - r;
            if constexpr (MODE == M_AB2 || MODE == M_AB) {
                pf4(a.I, w, h, MODE == M_AB2 ? na + 1 : na, c0);
                pf4(a.p, w, h, na, c0);
                pf4(a.I, w, h, MODE == M_AB2 ? ns + 1 : ns, c0);
                pf4(a.p, w, h, ns, c0);
            } else {
#pragma unroll
                for (int f = 0; f < NF; f++) {
                    pf4(a.in[f], w, h, na, c0);
                    pf4(a.in[f], w, h, ns, c0);
                }
                pf4(a.I, w, h, MODE == M_R2 ? y + 2 : y + 1, c0);
                pf4(a.p, w, h, y + 1, c0);
            }
        }
        /* the r' pass: this row's guide and input, loaded early */
        float gi[GK], gl[GK], gp[GK];
        if constexpr (!P1) {
            if constexpr (MODE == M_R2)
                guide4<VEC>(a.I, w, h, y, c0, gi, gl);
            else
                ld4<VEC>(a.I + (size_t)y * (size_t)w, c0, w, gi);
            ld4<VEC>(a.p + (size_t)y * (size_t)w, c0, w, gp);
        }

        gbox_prefix<CD>(V, N, jb, sP, sN, sW, sWN);
        if (mine) {
            unsigned vb = 0;
            if constexpr (P1)
                vb = sV[(y >> 3) & 15][t] >> ((y & 7) * 4);
            gbox_outputs<MODE, VEC>(a, w, y, r, jb, c0, c, eps, vb, sP, sN, gi, gl, gp);
        }
    }
}

/* The current device's SM count and the resident blocks of nt threads
 * of k_gbox<MODE, VEC> an SM holds (its shared-memory carveout set to the
 * most), asked once per device and block size: per launch they were
 * three driver calls (two threads may both ask: the answers are the
 * same). */
template <int MODE, bool VEC>
cudaError_t gbox_slots(int nt, int *sms, int *per)
{
    static volatile int sms_of[64], per_of[64][GT / 32 + 1];     /* 0: not asked yet */
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess)
        return e;
    volatile int *sp = &sms_of[dev & 63], *pp = &per_of[dev & 63][nt / 32];
    if (*sp == 0 || *pp == 0) {
        int s = 0, p = 0;
        if ((e = cudaDeviceGetAttribute(&s, cudaDevAttrMultiProcessorCount, dev)) !=
                cudaSuccess ||
            (e = cudaFuncSetAttribute(k_gbox<MODE, VEC>,
                                      cudaFuncAttributePreferredSharedMemoryCarveout,
                                      cudaSharedmemCarveoutMaxShared)) != cudaSuccess ||
            (e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&p, k_gbox<MODE, VEC>, nt, 0)) !=
                cudaSuccess)
            return e;
        *sp = s > 0 ? s : 1;
        *pp = p > 0 ? p : 1;
    }
    *sms = *sp;
    *per = *pp;
    return cudaSuccess;
}

/* One band-kernel pass. Strips: as few as GL columns allow, of equal
 * width (a multiple of 4), each block only the warps whose columns a
 * window reads. Bands: as many as fill 1/share of the GPU's resident
 * blocks once. Each band first sums its 2r+1 start rows, so shorter
 * bands cost more SM-time: a frame that has the GPU to itself takes the
 * shortest (its latency), one of `share` feeds on the GPU taller ones
 * (docs/PERFORMANCE.md, 2026-11-25, 20:10–20:28Z). */
template <int MODE, bool VEC>
cudaError_t gbox(const gargs &a, int w, int h, int r, int share, cudaStream_t s)
{
    const int R4 = GK * ((r + GK) / GK);            /* ≥ r+1, a multiple of 4 */
    const int twmax = (GL - R4 - r) / GK * GK;
    const int strips = (w + twmax - 1) / twmax;
    const int TW = ((w + strips - 1) / strips + GK - 1) / GK * GK;
    /* columns 0 .. R4+TW+r-1 of the strip: the outputs' windows */
    const int nt = min(GT, ((R4 + TW + r + GK - 1) / GK + 31) / 32 * 32);
    int sms = 0, per = 0;
    const cudaError_t e = gbox_slots<MODE, VEC>(nt, &sms, &per);
    if (e != cudaSuccess)
        return e;
    const long long slots = (long long)sms * per / (share > 1 ? share : 1);   /* both >= 1 */
    const int nb0 = (int)(slots / strips > 0 ? slots / strips : 1);
    const int bh = (h + nb0 - 1) / nb0;
    const int nb = (h + bh - 1) / bh;
    cu_launch(k_gbox<MODE, VEC>, dim3((unsigned)strips, (unsigned)nb), nt, 0, s, a, w, h, r, R4, TW,
              bh);
    return cudaGetLastError();
}

template <int MODE>
cudaError_t gbox_any(const gargs &a, bool vec, int w, int h, int r, int share, cudaStream_t s)
{
    return vec ? gbox<MODE, true>(a, w, h, r, share, s) : gbox<MODE, false>(a, w, h, r, share, s);
}

/* ss_laplacian5 of the Laplacian at (x, y): Q = L(x−1) + L(x+1) +
 * L(y−1) + L(y+1) − 4·L in float in that order, each L by lap_at; NaN on
 * the outer ring and wherever a tap is (as ss_laplacian5 of the L plane). */
__device__ __forceinline__ float biharm_at(const float *__restrict__ I, int w, int h, int x, int y,
                                           size_t ii, float *lc)
{
    *lc = lap_at(I, w, h, x, y, ii, I[ii]);
    if (x == 0 || y == 0 || x == w - 1 || y == h - 1)
        return qnan();
    const size_t sw = (size_t)w;
    const float ll = lap_at(I, w, h, x - 1, y, ii - 1, I[ii - 1]);
    const float lr = lap_at(I, w, h, x + 1, y, ii + 1, I[ii + 1]);
    const float lu = lap_at(I, w, h, x, y - 1, ii - sw, I[ii - sw]);
    const float ld = lap_at(I, w, h, x, y + 1, ii + sw, I[ii + sw]);
    return ll + lr + lu + ld - 4.0f * *lc;
}

/* ss_seeing_term's sums (seeing_core.h) over the pixels where I, L, Q, p
 * are finite, i = I − c[0]; blocks take rows b, b + grid, ... as
 * k_gf_mean does, the last block adds the block partials and writes
 * c[1] = ss_seeing_solve. 14 doubles per thread, reduced warp by warp. */
__global__ void k_seeing_moments(const float *__restrict__ I, const float *__restrict__ p, int w,
                                 int h, float *c, double *__restrict__ partials,
                                 unsigned int *counter)
{
    cu_pdl_wait();
    constexpr int NS = SS_SEEING_NSUMS;
    __shared__ double ws[RED_THREADS / 32][NS];
    double m[NS];
#pragma unroll
    for (int k = 0; k < NS; k++)
        m[k] = 0.0;
    const float cm = c[0];
    for (int y = blockIdx.x; y < h; y += gridDim.x)
        for (int x = threadIdx.x; x < w; x += blockDim.x) {
            const size_t i = (size_t)y * (size_t)w + (size_t)x;
            float l;
            const float q = biharm_at(I, w, h, x, y, i, &l);
            const float a = I[i], pv = p[i];
            if (ss_seeing_takes(a, l, q, pv))
                ss_seeing_add(m, (double)(a - cm), (double)l, (double)q, (double)pv);
        }
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
#pragma unroll
    for (int k = 0; k < NS; k++) {
        double v = m[k];
        for (int o = 16; o > 0; o >>= 1)
            v += __shfl_down_sync(0xffffffffu, v, o);
        if (lane == 0)
            ws[wid][k] = v;
    }
    __syncthreads();
    if (threadIdx.x < NS) {
        double t = 0.0;
        for (int q = 0; q < (int)(blockDim.x >> 5); q++)
            t += ws[q][threadIdx.x];
        partials[(size_t)blockIdx.x * NS + threadIdx.x] = t;
    }
    if (!cu_last_block(counter))
        return;
    __shared__ double tot[NS];
    if (threadIdx.x < NS) {
        double t = 0.0;
        for (unsigned q = 0; q < gridDim.x; q++)
            t += ((volatile double *)partials)[(size_t)q * NS + threadIdx.x];
        tot[threadIdx.x] = t;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        c[1] = ss_seeing_solve(tot);
        *counter = 0;
    }
}

/* out = ss_seeing_apply(p, Q, c2) at every pixel. */
__global__ void k_seeing_apply(const float *__restrict__ I, const float *__restrict__ p, int w,
                               int h, const float *__restrict__ c2, float *__restrict__ out)
{
    cu_pdl_wait();
    const float cc = *c2;
    const size_t n = (size_t)w * (size_t)h;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const int y = (int)(i / (size_t)w), x = (int)(i - (size_t)y * (size_t)w);
        float l;
        out[i] = ss_seeing_apply(p[i], biharm_at(I, w, h, x, y, i, &l), cc);
    }
}

/* ss_gmask_apply (guided.c), one pass each, the same operations in the
 * same order (float sums in tap order without contraction: __fmul_rn,
 * __fadd_rn): rows of the two matched filters (residual, guide's
 * Laplacian); columns, busy and the residual's response; the seeds; the
 * seeds' disks into pm (p, NaN where masked). */
__device__ __forceinline__ float gm_lap(const float *__restrict__ I, int w, int h, int x, int y)
{
    if (x == 0 || y == 0 || x == w - 1 || y == h - 1)
        return 0.0f;
    const size_t i = (size_t)y * (size_t)w + (size_t)x;
    const float l = __fsub_rn(__fadd_rn(__fadd_rn(__fadd_rn(I[i - 1], I[i + 1]), I[i - (size_t)w]),
                                        I[i + (size_t)w]),
                              __fmul_rn(4.0f, I[i]));
    return isfinite(l) ? l : 0.0f;
}

__device__ __forceinline__ bool gm_disk_any(const float *__restrict__ v, int w, int h, int x, int y,
                                            int d2, int d)
{
    for (int dy = -d; dy <= d; dy++)
        for (int dx = -d; dx <= d; dx++) {
            const int xx = x + dx, yy = y + dy;
            if (dx * dx + dy * dy <= d2 && xx >= 0 && xx < w && yy >= 0 && yy < h &&
                v[(size_t)yy * (size_t)w + (size_t)xx] != 0.0f)
                return true;
        }
    return false;
}

__global__ void k_gm_rows(const cu_params_t *__restrict__ prm, const float *__restrict__ I,
                          const float *__restrict__ p, int w, int h, float *__restrict__ t0,
                          float *__restrict__ t1, float *__restrict__ t4)
{
    cu_pdl_wait();
    const ss_gmask_t *m = &prm->gf_mask;
    const int R = m->R, rb = m->rb;
    const size_t n = (size_t)w * (size_t)h;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const int x = (int)(i % (size_t)w), y = (int)(i / (size_t)w);
        const float *row = p + (i - (size_t)x);
        float s = 0.0f, sb = 0.0f, sl = 0.0f;
        for (int j = 0; j <= 2 * R; j++) {
            const int xx = x + j - R;
            const float v = xx >= 0 && xx < w && isfinite(row[xx]) ? row[xx] : 0.0f;
            const float l = xx >= 0 && xx < w ? gm_lap(I, w, h, xx, y) : 0.0f;
            s = __fadd_rn(s, __fmul_rn(m->k[j], v));
            sl = __fadd_rn(sl, __fmul_rn(m->k[j], l));
        }
        for (int j = -rb; j <= rb; j++) {
            const int xx = x + j;
            sb = __fadd_rn(sb, xx >= 0 && xx < w && isfinite(row[xx]) ? row[xx] : 0.0f);
        }
        t0[i] = s;
        t4[i] = sb;
        t1[i] = sl;
    }
}

__global__ void k_gm_cols(const cu_params_t *__restrict__ prm, const float *__restrict__ p, int w,
                          int h, const float *__restrict__ t0, const float *__restrict__ t1,
                          const float *__restrict__ t4, float *__restrict__ busy,
                          float *__restrict__ resp)
{
    cu_pdl_wait();
    const ss_gmask_t *m = &prm->gf_mask;
    const int R = m->R, rb = m->rb;
    const size_t n = (size_t)w * (size_t)h;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const int x = (int)(i % (size_t)w), y = (int)(i / (size_t)w);
        float s = 0.0f, sb = 0.0f, sl = 0.0f;
        for (int j = 0; j <= 2 * R; j++) {
            const int yy = y + j - R;
            const bool in = yy >= 0 && yy < h;
            const size_t q = (size_t)(in ? yy : 0) * (size_t)w + (size_t)x;
            s = __fadd_rn(s, __fmul_rn(m->k[j], in ? t0[q] : 0.0f));
            sl = __fadd_rn(sl, __fmul_rn(m->k[j], in ? t1[q] : 0.0f));
        }
        for (int j = -rb; j <= rb; j++) {
            const int yy = y + j;
            sb = __fadd_rn(sb, yy >= 0 && yy < h ? t4[(size_t)yy * (size_t)w + (size_t)x] : 0.0f);
        }
        const float r = __fsub_rn(s, __fmul_rn(sb, m->inv_n));
        busy[i] = fabsf(sl) >= m->tl ? 1.0f : 0.0f;
        resp[i] = isfinite(p[i]) && fabsf(r) >= m->t ? 1.0f : 0.0f;
    }
}

__global__ void k_gm_seed(const cu_params_t *__restrict__ prm, int w, int h,
                          const float *__restrict__ resp, const float *__restrict__ busy,
                          float *__restrict__ seed)
{
    cu_pdl_wait();
    const int d2 = prm->gf_mask.d2, d = (int)floor(sqrt((double)d2));
    const size_t n = (size_t)w * (size_t)h;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const int x = (int)(i % (size_t)w), y = (int)(i / (size_t)w);
        seed[i] = resp[i] != 0.0f && !gm_disk_any(busy, w, h, x, y, d2, d) ? 1.0f : 0.0f;
    }
}

__global__ void k_gm_dilate(const cu_params_t *__restrict__ prm, const float *__restrict__ p,
                            int w, int h, const float *__restrict__ seed,
                            const float *__restrict__ busy, float *__restrict__ pm)
{
    cu_pdl_wait();
    const int d2 = prm->gf_mask.d2, d = (int)floor(sqrt((double)d2));
    const size_t n = (size_t)w * (size_t)h;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const int x = (int)(i % (size_t)w), y = (int)(i / (size_t)w);
        const float pv = p[i];
        const bool hit = isfinite(pv) && gm_disk_any(seed, w, h, x, y, d2, d) &&
                         !gm_disk_any(busy, w, h, x, y, d2, d);
        pm[i] = hit ? qnan() : pv;
    }
}

/* pm = ss_gmask_apply(I, p), with sc[0..2] and sc[5] as its temporaries
 * (the residual's response in pm until the last pass). */
cudaError_t gmask(const cu_params_t *prm, const float *I, const float *p, int w, int h,
                  float *pm, float *const *sc, cudaStream_t s)
{
    const size_t n = (size_t)w * (size_t)h, g = (n + 255) / 256;
    const unsigned nb = (unsigned)(g < 8192 ? g : 8192);
    cu_launch(k_gm_rows, nb, 256, 0, s, prm, I, p, w, h, sc[0], sc[1], sc[5]);
    cu_launch(k_gm_cols, nb, 256, 0, s, prm, p, w, h, sc[0], sc[1], sc[5], sc[2], pm);
    cu_launch(k_gm_seed, nb, 256, 0, s, prm, w, h, pm, sc[2], sc[0]);
    cu_launch(k_gm_dilate, nb, 256, 0, s, prm, p, w, h, sc[0], sc[2], pm);
    return cudaGetLastError();
}

bool al16(const void *q)
{
    return ((uintptr_t)q & 15u) == 0;
}

__global__ void k_copy(const float *__restrict__ in, float *__restrict__ out, size_t n)
{
    cu_pdl_wait();
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = in[i];
}

} // namespace

extern "C" cudaError_t cu_guided(const cu_params_t *p, const float *I, const float *pin, int w,
                                 int h, int radius, int mode, int share, float *const *sc,
                                 float *out, double *partials, unsigned int *counter, float *c,
                                 cudaStream_t s)
{
    const int r = radius < 0 ? 0 : radius;
    const int laplacian = mode & 1, masked = (mode & 4) != 0;
    if (w <= 0 || h <= 0)
        return cudaSuccess;
    const unsigned mb = (unsigned)(h < CU_RED_BLOCKS ? (h > 0 ? h : 1) : CU_RED_BLOCKS);
    cudaError_t e;
    if (laplacian && (mode & 2)) {
        /* the guide's mean first (it reads pin: p' is finite where p is),
         * then c2 and p' = pin − c2·Q into sc[4], the input from here on */
        cu_launch(k_gf_mean<true>, mb, RED_THREADS, 0, s, I, pin, w, h, nullptr, partials, counter,
                  c);
        cu_launch(k_seeing_moments, mb, RED_THREADS, 0, s, I, pin, w, h, c, partials, counter);
        const size_t n = (size_t)w * (size_t)h, g = (n + 255) / 256;
        cu_launch(k_seeing_apply, (unsigned)(g < 4096 ? g : 4096), 256, 0, s, I, pin, w, h, c + 1,
                  sc[4]);
        if ((e = cudaGetLastError()) != cudaSuccess)
            return e;
        pin = sc[4];
    }
    if (r > GMAXR) {
        /* the generic box kernel, with the Laplacian as a plane */
        float *L = laplacian ? sc[3] : NULL;
        if (L)
            cu_launch(k_gf_mean<true>, mb, RED_THREADS, 0, s, I, pin, w, h, L, partials, counter,
                      c);
        else
            cu_launch(k_gf_mean<false>, mb, RED_THREADS, 0, s, I, pin, w, h, nullptr, partials,
                      counter, c);
        if (masked && (e = gmask(p, I, pin, w, h, out, sc, s)) != cudaSuccess)
            return e;
        box_args a = {};
        a.I = I;
        a.L = L;
        a.p = masked ? out : pin;       /* the moments of pm */
        a.c = c;
        a.prm = p;
        a.out[0] = sc[0];
        a.out[1] = sc[1];
        a.out[2] = laplacian ? sc[2] : NULL;
        if ((e = laplacian ? kbox<M_AB2>(a, w, h, r, s) : kbox<M_AB>(a, w, h, r, s)) != cudaSuccess)
            return e;
        a.p = pin;
        a.in[0] = sc[0];
        a.in[1] = sc[1];
        a.in[2] = laplacian ? sc[2] : NULL;
        a.out[0] = out;
        a.out[1] = a.out[2] = NULL;
        return laplacian ? kbox<M_R2>(a, w, h, r, s) : kbox<M_R1>(a, w, h, r, s);
    }
    if (laplacian)
        cu_launch(k_gf_mean<true>, mb, RED_THREADS, 0, s, I, pin, w, h, nullptr, partials, counter,
                  c);
    else
        cu_launch(k_gf_mean<false>, mb, RED_THREADS, 0, s, I, pin, w, h, nullptr, partials, counter,
                  c);
    if (masked && (e = gmask(p, I, pin, w, h, out, sc, s)) != cudaSuccess)
        return e;
    const bool vec = w % 4 == 0 && al16(I) && al16(pin) && al16(sc[0]) && al16(sc[1]) &&
                     al16(sc[2]) && al16(out);
    gargs a = {};
    a.I = I;
    a.p = masked ? out : pin;           /* the moments of pm */
    a.c = c;
    a.prm = p;
    a.out[0] = sc[0];
    a.out[1] = sc[1];
    a.out[2] = laplacian ? sc[2] : NULL;
    e = laplacian ? gbox_any<M_AB2>(a, vec, w, h, r, share, s)
                  : gbox_any<M_AB>(a, vec, w, h, r, share, s);
    if (e != cudaSuccess)
        return e;
    a.p = pin;
    a.in[0] = sc[0];
    a.in[1] = sc[1];
    a.in[2] = laplacian ? sc[2] : NULL;
    a.out[0] = out;
    a.out[1] = a.out[2] = NULL;
    return laplacian ? gbox_any<M_R2>(a, vec, w, h, r, share, s)
                     : gbox_any<M_R1>(a, vec, w, h, r, share, s);
}

extern "C" cudaError_t cu_copy_plane(const float *in, float *out, size_t n, cudaStream_t s)
{
    size_t g = (n + 255) / 256;
    cu_launch(k_copy, (unsigned)(g < 4096 ? (g ? g : 1) : 4096), 256, 0, s, in, out, n);
    return cudaGetLastError();
}
