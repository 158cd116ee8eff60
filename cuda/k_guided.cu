/*
 * k_guided.cu — ALGORITHM.md §4 on the GPU: the guided filter with
 * valid-aware box means from running sums (cost independent of the
 * radius), as guided.c defines it: the one-channel filter (guide I' = I -
 * c) and the two-channel one (guides I' and L = ∇²I, which also models the
 * residual a change of seeing leaves).
 *
 * Kernels:
 *  - c = mean of the guide over the pixels that take part (block partials,
 *    the last block adds them in a fixed order);
 *  - L = 5-point Laplacian of the guide (two-channel filter);
 *  - a "moments" box pass: the channels (I', p, I'p, I'I' — or I', L, p
 *    and their five products, products formed in double) are made on the
 *    fly from the inputs, and at each output pixel the local linear model
 *    (A, B — or A1, A2, B) is solved in double from the window sums;
 *  - a plain box pass of A, B (or A1, A2, B) that also writes
 *    r' = p - (box(A)·I' + box(B))  (+ box(A2)·L).
 * A box kernel owns a strip of columns and a band of rows and keeps running
 * sums in double: moving one row down adds row y+r and removes row y-r-1;
 * the horizontal window sums come from prefix scans in shared memory,
 * S(x) = P[x+r] - P[x-r-1] — the CPU's scheme (guided.c) with the scans
 * done in parallel. Two versions: k_boxv (vertical sums per column thread,
 * rows four at a time, warp-level scans; radius up to 63) and k_box (the
 * difference row scanned by the whole block, any radius). Sums agree with
 * the CPU's to double rounding, so the float outputs to about 1e-7.
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

/* load<MODE> split in two, so that a group's loads can all be in flight
 * before any is used: the raw floats of pixel i (NF of them) ... */
template <int MODE> struct nraw { static constexpr int NF = MODE == M_AB2 ? 3 : MODE == M_AB ? 2 : chans<MODE>::C; };

template <int MODE>
__device__ __forceinline__ void fetch(const box_args &a, size_t i, float *v)
{
    if constexpr (MODE == M_AB) {
        v[0] = a.I[i];
        v[1] = a.p[i];
    } else if constexpr (MODE == M_AB2) {
        v[0] = a.I[i];
        v[1] = a.L[i];
        v[2] = a.p[i];
    } else {
#pragma unroll
        for (int k = 0; k < chans<MODE>::C; k++)
            v[k] = a.in[k][i];
    }
}

/* ... and the channels made of them (the same arithmetic as load<MODE>). */
template <int MODE>
__device__ __forceinline__ bool chan(const float *v, float c, double *f)
{
    if constexpr (MODE == M_AB) {
        const float ic = v[0] - c;
        f[0] = (double)ic;
        f[1] = (double)v[1];
        f[2] = (double)ic * (double)v[1];
        f[3] = (double)ic * (double)ic;
        return isfinite(v[0]) && isfinite(v[1]);
    } else if constexpr (MODE == M_AB2) {
        const float ic = v[0] - c, lv = v[1], pv = v[2];
        f[0] = (double)ic;
        f[1] = (double)lv;
        f[2] = (double)pv;
        f[3] = (double)ic * (double)pv;
        f[4] = (double)lv * (double)pv;
        f[5] = (double)ic * (double)ic;
        f[6] = (double)ic * (double)lv;
        f[7] = (double)lv * (double)lv;
        return isfinite(v[0]) && isfinite(lv) && isfinite(pv);
    } else {
#pragma unroll
        for (int k = 0; k < chans<MODE>::C; k++)
            f[k] = (double)v[k];
        return isfinite(v[0]);
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

/* c = (float)(Σ I / n) over the pixels where I, p (and L) are finite; 0 if
 * none. */
__global__ void k_gf_mean(const float *__restrict__ I, const float *__restrict__ L,
                          const float *__restrict__ p, size_t npix, double *__restrict__ partials,
                          unsigned int *counter, float *__restrict__ c)
{
    __shared__ double rs[RED_THREADS / 32], rn[RED_THREADS / 32];
    __shared__ bool last;
    double s = 0.0, n = 0.0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < npix;
         i += (size_t)gridDim.x * blockDim.x) {
        const float a = I[i], b = p[i];
        if (isfinite(a) && isfinite(b) && (!L || isfinite(L[i]))) {
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

/* ss_laplacian5: l + r + u + d - 4·c in float in that order; NaN on the
 * outer rows/columns (and wherever a tap is NaN, by propagation). */
__global__ void k_laplacian(const float *__restrict__ in, int w, int h, float *__restrict__ out)
{
    const int x = blockIdx.x * 32 + threadIdx.x, y = blockIdx.y * 8 + threadIdx.y;
    if (x >= w || y >= h)
        return;
    const size_t i = (size_t)y * (size_t)w + (size_t)x;
    if (x == 0 || y == 0 || x == w - 1 || y == h - 1) {
        out[i] = qnan();
        return;
    }
    out[i] = in[i - 1] + in[i + 1] + in[i - (size_t)w] + in[i + (size_t)w] - 4.0f * in[i];
}

/* One box pass over a strip of BOX_TW columns and the band [y0, y0+bh).
 * Shared memory: S = C+1 prefix rows of Lw = BOX_TW + 2r + 1 doubles. */
template <int MODE>
__global__ void k_box(box_args a, int w, int h, int r, int bh)
{
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
        if (x < w)
            finish<MODE>(a, c, eps, (size_t)y * (size_t)w + (size_t)x, acc);
    }
}

/* The faster box pass (r small enough that a strip's columns fit two per
 * thread): BW warps, a strip of VT output columns. Each thread owns up to
 * two of the strip's VT + 2r + 1 columns and keeps their vertical running
 * window sums in registers (adding row y+r, removing row y-r-1: coalesced
 * loads, no barrier). Rows go BW at a time: the owners write the BW rows'
 * column sums to shared memory, then warp w scans row w's sums (a
 * warp-level prefix scan, no block barrier) and writes its outputs from
 * S(x) = P[x+r] - P[x-r-1]. Two block barriers per BW rows. */
constexpr int BW = 4;                   /* warps = rows per group */
constexpr int VT = 128;                 /* output columns per strip */
constexpr int VE = 2;                   /* columns per thread, at most */
constexpr int KMAX = (VE * BW * 32 + 31) / 32;  /* scan elements per lane, at most */

template <int MODE>
__global__ void __launch_bounds__(BW * 32) k_boxv(box_args a, int w, int h, int r, int bh)
{
    constexpr int C = chans<MODE>::C, S = C + 1, NT = BW * 32;
    extern __shared__ double vs[];      /* [BW][S][Lc] */
    const int t = threadIdx.x, lane = t & 31, wid = t >> 5;
    const int x0 = blockIdx.x * VT;
    const int y0 = blockIdx.y * bh, y1 = min(h, y0 + bh);
    const int Lc = VT + 2 * r + 1;
    const int xs0 = x0 - r - 1;         /* column of element 0 */
    const float c = *a.c;
    const double eps = (double)a.prm->gf_eps;
    double V[VE][S];
#pragma unroll
    for (int q = 0; q < VE; q++)
#pragma unroll
        for (int s = 0; s < S; s++)
            V[q][s] = 0.0;

    /* column owners: V += row ya, V -= row ys (-1 = none); both rows'
     * loads are issued before either is used */
    auto vstep = [&](int ya, int ys) {
        constexpr int NF = nraw<MODE>::NF;
#pragma unroll
        for (int q = 0; q < VE; q++) {
            const int j = t + q * NT, xc = xs0 + j;
            const bool col = j < Lc && xc >= 0 && xc < w;
            const bool ua = col && ya >= 0, us = col && ys >= 0;
            float va[NF], vb[NF];
            fetch<MODE>(a, ua ? (size_t)ya * w + xc : 0, va);
            fetch<MODE>(a, us ? (size_t)ys * w + xc : 0, vb);
            double f[C];
            if (ua && chan<MODE>(va, c, f)) {
                V[q][0] += 1.0;
#pragma unroll
                for (int k = 0; k < C; k++)
                    V[q][1 + k] += f[k];
            }
            if (us && chan<MODE>(vb, c, f)) {
                V[q][0] -= 1.0;
#pragma unroll
                for (int k = 0; k < C; k++)
                    V[q][1 + k] -= f[k];
            }
        }
    };

#pragma unroll 4
    for (int yy = max(0, y0 - r); yy <= min(h - 1, y0 + r); yy++)
        vstep(yy, -1);
    const int K = (Lc + 31) / 32;       /* scan elements per lane */
    for (int yb = y0; yb < y1; yb += BW) {
        /* the group's rows, column sums into shared memory */
#pragma unroll
        for (int g = 0; g < BW; g++) {
            const int y = yb + g;
            if (y >= y1)
                continue;
            if (y > y0) {
                const int ya = y + r < h ? y + r : -1, ys = y - r - 1;
                vstep(ya, ys);
            }
#pragma unroll
            for (int q = 0; q < VE; q++) {
                const int j = t + q * NT;
                if (j < Lc)
#pragma unroll
                    for (int s = 0; s < S; s++)
                        vs[(g * S + s) * Lc + j] = V[q][s];
            }
        }
        __syncthreads();
        /* warp wid: row yb + wid */
        const int y = yb + wid;
        if (y < y1) {
            double *row = vs + (size_t)wid * S * Lc;
            const int j0 = lane * K, j1 = min(Lc, j0 + K);
            /* each lane's chunk goes through registers: its loads are
             * independent, and the running sum needs no shared-memory
             * round trip per element */
#pragma unroll
            for (int s = 0; s < S; s++) {
                double vals[KMAX];
#pragma unroll
                for (int e = 0; e < KMAX; e++)
                    vals[e] = j0 + e < j1 ? row[s * Lc + j0 + e] : 0.0;
                double run = 0.0;
#pragma unroll
                for (int e = 0; e < KMAX; e++) {
                    run += vals[e];
                    vals[e] = run;
                }
                double v = run;
                for (int o = 1; o < 32; o <<= 1) {
                    const double u = __shfl_up_sync(0xffffffffu, v, o);
                    if (lane >= o)
                        v += u;
                }
                const double off = v - run;
#pragma unroll
                for (int e = 0; e < KMAX; e++)
                    if (j0 + e < j1)
                        row[s * Lc + j0 + e] = vals[e] + off;
            }
            __syncwarp();
            for (int k = 0; k < VT / 32; k++) {
                const int tx = lane + 32 * k, x = x0 + tx;
                if (x >= w)
                    break;
                double acc[S];
#pragma unroll
                for (int s = 0; s < S; s++)
                    acc[s] = row[s * Lc + tx + 2 * r + 1] - row[s * Lc + tx];
                finish<MODE>(a, c, eps, (size_t)y * (size_t)w + (size_t)x, acc);
            }
        }
        __syncthreads();
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

template <int MODE>
cudaError_t box(const box_args &a, int w, int h, int r, cudaStream_t s)
{
    constexpr int S = chans<MODE>::C + 1;
    const int Lc = VT + 2 * r + 1;
    const size_t smv = (size_t)BW * S * Lc * sizeof(double);
    if (Lc <= VE * BW * 32 && smv <= 200 * 1024) {
        /* the fast path: bands of rows giving a few blocks per SM */
        const int strips = (w + VT - 1) / VT;
        int bh = 64;
        while (bh > 8 && (long long)strips * ((h + bh - 1) / bh) < 512)
            bh /= 2;
        const dim3 grid((unsigned)strips, (unsigned)((h + bh - 1) / bh));
        if (smv > 48 * 1024) {
            const cudaError_t e = cudaFuncSetAttribute(
                k_boxv<MODE>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smv);
            if (e != cudaSuccess)
                return e;
        }
        k_boxv<MODE><<<grid, BW * 32, smv, s>>>(a, w, h, r, bh);
        return cudaGetLastError();
    }
    const int bh = band_height(w, h, r);
    const dim3 grid((unsigned)((w + BOX_TW - 1) / BOX_TW), (unsigned)((h + bh - 1) / bh));
    const size_t sm = (size_t)S * (BOX_TW + 2 * r + 1) * sizeof(double);
    if (sm > 48 * 1024) {
        const cudaError_t e =
            cudaFuncSetAttribute(k_box<MODE>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm);
        if (e != cudaSuccess)
            return e;
    }
    k_box<MODE><<<grid, BOX_TW, sm, s>>>(a, w, h, r, bh);
    return cudaGetLastError();
}

__global__ void k_copy(const float *__restrict__ in, float *__restrict__ out, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = in[i];
}

} // namespace

extern "C" cudaError_t cu_guided(const cu_params_t *p, const float *I, const float *pin, int w,
                                 int h, int radius, int laplacian, float *const *sc,
                                 float *out, double *partials, unsigned int *counter, float *c,
                                 cudaStream_t s)
{
    const size_t npix = (size_t)w * (size_t)h;
    const int r = radius < 0 ? 0 : radius;
    size_t gb = (npix + RED_THREADS - 1) / RED_THREADS;
    if (gb > CU_RED_BLOCKS)
        gb = CU_RED_BLOCKS;
    if (gb < 1)
        gb = 1;
    float *L = laplacian ? sc[3] : NULL;
    if (L) {
        k_laplacian<<<dim3((unsigned)((w + 31) / 32), (unsigned)((h + 7) / 8)), dim3(32, 8), 0, s>>>(
            I, w, h, L);
    }
    k_gf_mean<<<(unsigned)gb, RED_THREADS, 0, s>>>(I, L, pin, npix, partials, counter, c);
    cudaError_t e;
    box_args a = {};
    a.I = I;
    a.L = L;
    a.p = pin;
    a.c = c;
    a.prm = p;
    if (!laplacian) {
        a.out[0] = sc[0];
        a.out[1] = sc[1];
        if ((e = box<M_AB>(a, w, h, r, s)) != cudaSuccess)
            return e;
        a.in[0] = sc[0];
        a.in[1] = sc[1];
        a.out[0] = out;
        a.out[1] = NULL;
        return box<M_R1>(a, w, h, r, s);
    }
    a.out[0] = sc[0];
    a.out[1] = sc[1];
    a.out[2] = sc[2];
    if ((e = box<M_AB2>(a, w, h, r, s)) != cudaSuccess)
        return e;
    a.in[0] = sc[0];
    a.in[1] = sc[1];
    a.in[2] = sc[2];
    a.out[0] = out;
    a.out[1] = a.out[2] = NULL;
    return box<M_R2>(a, w, h, r, s);
}

extern "C" cudaError_t cu_copy_plane(const float *in, float *out, size_t n, cudaStream_t s)
{
    size_t g = (n + 255) / 256;
    k_copy<<<(unsigned)(g < 4096 ? (g ? g : 1) : 4096), 256, 0, s>>>(in, out, n);
    return cudaGetLastError();
}
