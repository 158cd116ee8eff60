/*
 * k_register.cu — ALGORITHM.md §2 on the GPU: the registration input (the
 * frame cleaned of sharp outliers, minus its separable local mean), 2×2
 * binning, the star peaks of the coarse level (k_vote.cu orders them and
 * votes), the 3×3 refinement of the coarse shift down the pyramid by mean
 * products (all levels chained on the device: no host round trip between
 * levels), the reference's smoothing and gradients, and the fine
 * registration: each pass one fused reduction kernel per band of rows
 * (block partials, then the last block to finish adds them in a fixed
 * order, so the sums are deterministic run to run) and a warp that takes
 * fine_core.h's decision, all passes chained on the device.
 *
 * register_coarse.c / register_fine.c are the reference. The cleaning, the
 * high-pass (per-pixel sums in the reference's order), the binning and the
 * peak test are exact; the refinement's and the fine pass's frame-wide
 * sums round differently (parallel sums, in double).
 */
#include "cu_clean.cuh"
#include "cu_grid.cuh"
#include "cu_internal.h"
#include "pipeline/fine_core.h"
#include "pipeline/hipass_core.h"

#include <float.h>
#include <math.h>

namespace {

constexpr int TX = 32, TY = 8;
constexpr int RED_THREADS = 256;

__device__ __forceinline__ float qnan()
{
    return __int_as_float(0x7fc00000);
}

bool aligned16(const void *p)
{
    return ((uintptr_t)p & 15u) == 0;
}

/* ss_clean_sharp's replacement, with its σ from the device. */
__global__ void k_clean(const cu_params_t *__restrict__ p, const float *__restrict__ frame,
                        const float *__restrict__ med, const float *__restrict__ sigma, int w,
                        int h, float *__restrict__ out)
{
    cu_pdl_wait();
    const int x = blockIdx.x * TX + threadIdx.x, y = blockIdx.y * TY + threadIdx.y;
    if (x >= w || y >= h)
        return;
    const size_t i = (size_t)y * (size_t)w + (size_t)x;
    out[i] = cu_clean_value(frame, med[i], *sigma, p->clean_k, p->clean_ratio, w, h, x, y);
}

/* ss_hipass, row pass (hipass_core.h): a thread per output. The radii
 * that k_hp_rows4 has no instance for. */
__global__ void k_hp_rows(const float *__restrict__ in, int w, int h, int r,
                          float *__restrict__ hs, float *__restrict__ hc)
{
    cu_pdl_wait();
    const int x = blockIdx.x * TX + threadIdx.x, y = blockIdx.y * TY + threadIdx.y;
    if (x >= w || y >= h)
        return;
    const size_t o = (size_t)y * (size_t)w;
    ss_hp_row_at(in + o, w, r, x, hs + o + x, hc + o + x);
}

/* The row pass at radius R: a thread per 4 neighbouring outputs of a row.
 * It loads the values they read once (as float4 where vec: rows of a
 * width that 4 divides, 16-byte aligned planes), turns each into its term
 * (ss_hp_term) and adds each output's 2R + 1 terms in ascending order, so
 * each sum is ss_hp_row_at's; the counts from the terms' bit mask. */
template <int R>
__global__ void __launch_bounds__(TX * TY)
k_hp_rows4(const float *__restrict__ in, int w, int h, int vec, float *__restrict__ hs,
           float *__restrict__ hc)
{
    cu_pdl_wait();
    constexpr int Q = (R + 3) / 4, NF = 8 * Q + 4;   /* loaded: x0 - 4Q .. x0 + 4Q + 3 */
    constexpr int NT = 2 * R + 1, OFF = 4 * Q - R;   /* the taps: f[OFF .. OFF + NT + 2] */
    const int x0 = 4 * (int)(blockIdx.x * TX + threadIdx.x), y = blockIdx.y * TY + threadIdx.y;
    if (x0 >= w || y >= h)
        return;
    const float *row = in + (size_t)y * (size_t)w;
    float f[NF];
    if (vec) {
#pragma unroll
        for (int q = 0; q < 2 * Q + 1; q++) {
            const int x = x0 + 4 * (q - Q);
            const float4 t = x >= 0 && x < w ? __ldg(reinterpret_cast<const float4 *>(row + x))
                                             : make_float4(qnan(), qnan(), qnan(), qnan());
            f[4 * q] = t.x;
            f[4 * q + 1] = t.y;
            f[4 * q + 2] = t.z;
            f[4 * q + 3] = t.w;
        }
    } else {
#pragma unroll
        for (int j = 0; j < NF; j++) {
            const int x = x0 - 4 * Q + j;
            f[j] = x >= 0 && x < w ? __ldg(row + x) : qnan();
        }
    }
    double d[NT + 3];
    unsigned long long m = 0;
#pragma unroll
    for (int j = 0; j < NT + 3; j++)
        m |= (unsigned long long)ss_hp_term(f[OFF + j], &d[j]) << j;
    float os[4], oc[4];
#pragma unroll
    for (int k = 0; k < 4; k++) {
        double s = 0.0;
#pragma unroll
        for (int i = 0; i < NT; i++)
            s += d[k + i];
        os[k] = (float)s;
        oc[k] = (float)__popcll((m >> k) & ((1ull << NT) - 1));
    }
    const size_t o = (size_t)y * (size_t)w + (size_t)x0;
    if (vec) {
        *reinterpret_cast<float4 *>(hs + o) = make_float4(os[0], os[1], os[2], os[3]);
        *reinterpret_cast<float4 *>(hc + o) = make_float4(oc[0], oc[1], oc[2], oc[3]);
        return;
    }
#pragma unroll
    for (int k = 0; k < 4; k++)
        if (x0 + k < w) {
            hs[o + k] = os[k];
            hc[o + k] = oc[k];
        }
}

using hp_rows_fn = void (*)(const float *, int, int, int, float *, float *);
/* k_hp_rows4's instances, radii 0 to 16: the registration input's
 * (ceil(3·psf_sigma)) up to psf_sigma 5.33 px, the star map's
 * (ss_mv_radius) up to 2 px */
constexpr hp_rows_fn HP_ROWS4[] = {
    k_hp_rows4<0>,  k_hp_rows4<1>,  k_hp_rows4<2>,  k_hp_rows4<3>,  k_hp_rows4<4>,
    k_hp_rows4<5>,  k_hp_rows4<6>,  k_hp_rows4<7>,  k_hp_rows4<8>,  k_hp_rows4<9>,
    k_hp_rows4<10>, k_hp_rows4<11>, k_hp_rows4<12>, k_hp_rows4<13>, k_hp_rows4<14>,
    k_hp_rows4<15>, k_hp_rows4<16>,
};

/* Column pass: a thread per column and segment of SS_HP_SEG rows
 * (ss_hp_col_seg_to, writing what MODE says: ss_hp_store),
 * neighbouring threads on neighbouring columns. */
template <int MODE>
__global__ void k_hp_cols(const float *__restrict__ in, const float *__restrict__ hs,
                          const float *__restrict__ hc, int w, int h, int r, float *out,
                          const float *aux, float *out2)
{
    cu_pdl_wait();
    const int x = blockIdx.x * blockDim.x + threadIdx.x, y0 = blockIdx.y * SS_HP_SEG;
    if (x >= w)
        return;
    const ss_hp_epi_t e = { MODE, aux, out2 };
    ss_hp_col_seg_to(in, hs, hc, w, h, r, x, y0, min(y0 + SS_HP_SEG, h), out, e);
}

__global__ void k_bin2(const float *__restrict__ in, int w, int h, float *__restrict__ out)
{
    cu_pdl_wait();
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
    cu_pdl_wait();
    const int x = blockIdx.x * TX + threadIdx.x, y = blockIdx.y * TY + threadIdx.y;
    if (x >= w || y >= h)
        return;
    const size_t i = (size_t)y * (size_t)w + (size_t)x;
    if (x == 0 || y == 0 || x == w - 1 || y == h - 1) {
        S[i] = gx[i] = gy[i] = qnan();
        return;
    }
    ss_ref_stencil(ref, i, (size_t)w, &S[i], &gx[i], &gy[i]);
}

/* ss_is_peak over the level's interior; the peaks go to out (device
 * memory) through an atomic counter, in no particular order (the host
 * sorts them). */
__global__ void k_peaks(const float *__restrict__ a, int w, int h, const double *__restrict__ noise,
                        ss_peak_t *out, unsigned int *count, int cap)
{
    cu_pdl_wait();
    const int x = blockIdx.x * TX + threadIdx.x, y = blockIdx.y * TY + threadIdx.y;
    if (x < 1 || y < 1 || x > w - 2 || y > h - 2)
        return;
    const double n = *noise;
    if (!isfinite(n))
        return;
    const float level = (float)(SS_COARSE_PEAK * n);
    const size_t i = (size_t)y * (size_t)w + (size_t)x;
    const float v = a[i];
    if (!(v > level))
        return;
    for (int dy = -1; dy <= 1; dy++)
        for (int dx = -1; dx <= 1; dx++) {
            if (dx == 0 && dy == 0)
                continue;
            const float q = a[i + (size_t)((long long)dy * w + dx)];
            const bool later = dy > 0 || (dy == 0 && dx > 0);
            if (q > v || (q == v && !later))
                return;
        }
    const unsigned int k = atomicAdd(count, 1u);
    if (k < (unsigned int)cap)
        out[k] = ss_peak_t{ v, x, y };
}

/* Pixels a thread of k_corr9 loads before it adds their products. */
constexpr int CORR_UNROLL = 2;

/* Refinement, one level: the 9 mean products around (2·dx, 2·dy), as
 * (sum, count) pairs added into res->corr. A thread takes the pixels j,
 * j + G, j + 2G, ... (G: the grid's threads), CORR_UNROLL at a time:
 * every load of them first (a reference pixel outside the level read at
 * the pixel itself and not counted), then their products in that order,
 * so that its sums are those of one pixel at a time. */
__global__ void __launch_bounds__(RED_THREADS, 2)
k_corr9(const float *__restrict__ ref, const float *__restrict__ cur, int w, int h, int step,
        cu_results_t *res)
{
    cu_pdl_wait();
    __shared__ double red[RED_THREADS / 32][18];
    if (!res->coarse.ok)
        return;
    const int bdx = 2 * res->coarse.rdx, bdy = 2 * res->coarse.rdy;
    double s[9];
    int c[9];                           /* counts: exact as ints, fewer registers */
#pragma unroll
    for (int k = 0; k < 9; k++) {
        s[k] = 0.0;
        c[k] = 0;
    }
    const int nx = (w + step - 1) / step, ny = (h + step - 1) / step;
    const long long total = (long long)nx * ny, G = (long long)gridDim.x * blockDim.x;
    for (long long j0 = blockIdx.x * (long long)blockDim.x + threadIdx.x; j0 < total;
         j0 += CORR_UNROLL * G) {
        float cv[CORR_UNROLL], rv[CORR_UNROLL][9];
        unsigned int in[CORR_UNROLL];   /* bit k: the reference pixel k is inside the level */
#pragma unroll
        for (int u = 0; u < CORR_UNROLL; u++) {
            const long long j = j0 + u * G;
            const unsigned int jj = j < total ? (unsigned int)j : 0u;  /* < 2^31 */
            const int y = (int)(jj / (unsigned int)nx) * step;
            const int x = (int)(jj % (unsigned int)nx) * step;
            cv[u] = j < total ? cur[(size_t)y * (size_t)w + (size_t)x] : qnan();
            in[u] = 0;
#pragma unroll
            for (int k = 0; k < 9; k++) {
                const int ry = y + bdy + k / 3 - 1, rx = x + bdx + k % 3 - 1;
                const bool inside = ry >= 0 && ry < h && rx >= 0 && rx < w;
                rv[u][k] = ref[(size_t)(inside ? ry : y) * (size_t)w + (size_t)(inside ? rx : x)];
                in[u] |= (unsigned int)inside << k;
            }
        }
#pragma unroll
        for (int u = 0; u < CORR_UNROLL; u++) {
            if (!isfinite(cv[u]))
                continue;
#pragma unroll
            for (int k = 0; k < 9; k++)
                if ((in[u] >> k & 1u) && isfinite(rv[u][k])) {
                    s[k] += (double)cv[u] * (double)rv[u][k];
                    c[k]++;
                }
        }
    }
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    double sc[18];                      /* red's order: sum, count */
#pragma unroll
    for (int k = 0; k < 9; k++) {
        sc[2 * k] = s[k];
        sc[2 * k + 1] = (double)c[k];
    }
    const double tot = cu_warp_totals<18>(sc);
    if (lane < 18)
        red[wid][lane] = tot;
    __syncthreads();
    if (threadIdx.x < 18) {
        double v = 0.0;
        for (int q = 0; q < (int)(blockDim.x >> 5); q++)
            v += red[q][threadIdx.x];
        if (v != 0.0)
            atomicAdd(&res->corr[threadIdx.x], v);
    }
}

/* The best of the 9 (the largest mean product; ties: smallest dy, then
 * dx), the new level's shift, and the sums cleared for the next level. */
__global__ void k_argmax9(cu_results_t *res)
{
    cu_pdl_wait();
    if (threadIdx.x != 0 || !res->coarse.ok)
        return;
    double m[9];
    for (int k = 0; k < 9; k++)
        m[k] = res->corr[2 * k + 1] > 0.0 ? res->corr[2 * k] / res->corr[2 * k + 1] : -INFINITY;
    int bk = 0;
    for (int k = 1; k < 9; k++)
        if (m[k] > m[bk])
            bk = k;
    res->coarse.rdx = 2 * res->coarse.rdx + bk % 3 - 1;
    res->coarse.rdy = 2 * res->coarse.rdy + bk / 3 - 1;
    for (int k = 0; k < 18; k++)
        res->corr[k] = 0.0;
}

/* The decisions of the fine registration (fine_core.h): the start (from
 * the parameter block, or from_coarse: from the coarse step's result), a
 * pass's step and the conclusion (errors and match test), each by one
 * warp after the pass that feeds it: the warp adds the band sums (a
 * thread per sum, bands in order, as ss_fine_total) and, for the
 * conclusion, takes the 32 jackknife deletions (a thread per band of
 * either direction); one thread decides. */
__global__ void k_fine_begin(const cu_params_t *__restrict__ p, cu_results_t *res, int from_coarse)
{
    cu_pdl_wait();
    if (threadIdx.x != 0)
        return;
    const double sx0 = from_coarse ? (double)res->coarse.rdx : p->fine_sx0;
    const double sy0 = from_coarse ? (double)res->coarse.rdy : p->fine_sy0;
    ss_fine_begin(&res->fine_st, sx0, sy0, p->fine_max_iter, p->fine_tol, p->fine_min_det);
    if (from_coarse && !res->coarse.ok)
        res->fine_st.phase = SS_FINE_DONE;      /* no start: no pass */
}

/* ss_fine_total of bands by the block's first SS_FINE_NSUMS threads. */
__device__ void fine_total_par(const double *bands, double *total)
{
    const int k = threadIdx.x;
    if (k < SS_FINE_NSUMS) {
        double v = 0.0;
        for (int b = 0; b < SS_FINE_BANDS; b++)
            v += bands[b * SS_FINE_NSUMS + k];
        total[k] = v;
    }
}

/* A pass's decision (every thread of the warp calls it). */
__device__ void fine_decide(cu_results_t *res)
{
    __shared__ double s[SS_FINE_NSUMS];
    fine_total_par(res->fine, s);
    __syncthreads();
    if (threadIdx.x == 0)
        ss_fine_iterate_total(&res->fine_st, s);
}

/* The conclusion (every thread of the warp calls it): the 32 jackknife
 * deletions a lane each, then lanes 0 and 1 each reduce one direction's
 * while lanes 2-5 take the formal error's two parts, var_fit and the
 * probe's variance; lane 0 concludes. */
__device__ void fine_conclude(cu_results_t *res)
{
    constexpr int B = SS_FINE_BANDS, NS = SS_FINE_NSUMS;
    static_assert(2 * B == 32, "a thread per band of either direction");
    __shared__ double s[NS], pr[NS], dx[2 * B], dy[2 * B], v[2][3], num[4];
    __shared__ int ok[2 * B], okd[2];
    fine_total_par(res->fine, s);
    fine_total_par(res->fine_probe, pr);
    __syncthreads();
    const int t = threadIdx.x, dir = t / B;
    ss_fine_state_t *st = &res->fine_st;
    if (t < 2 * B) {
        double M[4];
        ss_fine_response(s, M);
        dx[t] = dy[t] = 0.0;
        ok[t] = ss_fine_jk_one(res->fine + dir * B * NS, t % B, s, M, &dx[t], &dy[t]);
    }
    __syncthreads();
    if (t < 2)
        okd[t] = ss_fine_jk_var(dx + t * B, dy + t * B, ok + t * B, B, v[t]) == 0;
    else if (t < 4)
        num[t - 2] = ss_fine_formal_part(s, st->th, t - 2);
    else if (t == 4)
        num[2] = ss_fine_var_fit(s, st->th);
    else if (t == 5)
        num[3] = ss_fine_gain_offset_var(pr);
    __syncthreads();
    if (t == 0)
        ss_fine_conclude_with(st, ss_fine_formal_of(num[0], num[1]), num[2], num[3], okd[0], v[0],
                              okd[1], v[1]);
}

/* Pixels a thread of k_fine_sums loads before it adds their terms. */
constexpr int FINE_UNROLL = 4;
constexpr int FINE_WARPS = RED_THREADS / 32;        /* warps a block */

/* The fine-registration pass (ss_fine_sums): the frame cut into 16×16
 * tiles (row band r, column band c), wpt warps a tile (1, 2, 4 or 8),
 * FINE_WARPS / wpt tiles a block; per-thread double sums, each warp's
 * totals (cu_warp_totals), the tile's warps added in order into its
 * partials, and the last block of the grid adds each row band's and each
 * column band's partials in a fixed order and writes them to out
 * ([rows|columns][band][sum]). A frame alone on the GPU takes 8 warps a
 * tile, the most blocks; feeds that share it fewer (cu_fine): a block's
 * reductions and hand-over cost SM-time that small tiles do not pay for
 * (docs/PERFORMANCE.md, 2026-11-26). The shift is the iteration's
 * estimate in st (probe: plus SS_FINE_PROBE_PX on both axes); a pass the
 * iteration does not want returns at once. The reference's S and
 * gradients come from its five-point cross (ss_ref_cross, the neighbours
 * from cache): two planes read from memory instead of five. A thread
 * takes its pixels FINE_UNROLL at a time, their loads first, then their
 * terms in the order of one pixel at a time (the same sums). */
__global__ void __launch_bounds__(RED_THREADS)
k_fine_sums(const float *__restrict__ cur, const float *__restrict__ ref, int w, int h, int probe,
            int wpt, double *__restrict__ partials, unsigned int *counter,
            const ss_fine_state_t *st, double *__restrict__ out)
{
    cu_pdl_wait();
    constexpr int B = SS_FINE_BANDS, NS = SS_FINE_NSUMS;
    /* a pass only where the iteration wants one (the same answer for
     * every block: st does not change during the kernel) */
    if (st->phase != (probe ? SS_FINE_PROBE : SS_FINE_PASS))
        return;
    const double off = probe ? SS_FINE_PROBE_PX : 0.0;
    const double sx = st->sx + off, sy = st->sy + off;
    __shared__ double red[FINE_WARPS][NS];
    double a[NS];
#pragma unroll
    for (int k = 0; k < NS; k++)
        a[k] = 0.0;
    /* one integer offset and one set of bilinear weights for the whole
     * frame, as ss_fine_sums defines them */
    const bool sane = fabs(sx) < 1e9 && fabs(sy) < 1e9;
    const double ixf = sane ? floor(-sx) : 0.0, iyf = sane ? floor(-sy) : 0.0;
    const double fx = -sx - ixf, fy = -sy - iyf;
    const int ix = (int)ixf, iy = (int)iyf;
    const int xa = max(1, -ix), xb = min(w - 1, w - 1 - ix);
    const int ya = max(1, -iy), yb = min(h - 1, h - 1 - iy);
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    const int tpb = FINE_WARPS / wpt, tile = blockIdx.x * tpb + wid / wpt;
    const int r = tile / B, c = tile % B;
    const int G = 32 * wpt, tt = (wid % wpt) * 32 + lane;   /* the tile's threads, this one */
    const long long rows = yb - ya, cols = xb - xa;
    const int y0 = ya + (int)(((long long)r * rows + B - 1) / B);
    const int y1 = ya + (int)(((long long)(r + 1) * rows + B - 1) / B);
    const int x0 = xa + (int)(((long long)c * cols + B - 1) / B);
    const int x1 = xa + (int)(((long long)(c + 1) * cols + B - 1) / B);
    const int iw = x1 - x0, ih = y1 - y0;
    const long long total = sane && rows > 0 && cols > 0 && iw > 0 && ih > 0 ? (long long)iw * ih : 0;
    for (long long j0 = tt; j0 < total; j0 += FINE_UNROLL * (long long)G) {
        /* the pixels' loads first: the frame's 2×2 (c0[0], c0[1], c1[0],
         * c1[1]), then the reference's cross (centre, left, right, up, down) */
        float v[FINE_UNROLL][9];
#pragma unroll
        for (int u = 0; u < FINE_UNROLL; u++) {
            const long long j = j0 + u * (long long)G;
            const unsigned int jj = (unsigned int)(j < total ? j : j0);  /* < 2^31 */
            const int y = y0 + (int)(jj / (unsigned int)iw);
            const int x = x0 + (int)(jj % (unsigned int)iw);
            const float *c0 = cur + (size_t)(y + iy) * (size_t)w + (size_t)(x + ix), *c1 = c0 + w;
            const float *rc = ref + (size_t)y * (size_t)w + (size_t)x;
            v[u][0] = c0[0];
            v[u][1] = c0[1];
            v[u][2] = c1[0];
            v[u][3] = c1[1];
            v[u][4] = rc[0];
            v[u][5] = rc[-1];
            v[u][6] = rc[1];
            v[u][7] = rc[-(long long)w];
            v[u][8] = rc[w];
        }
#pragma unroll
        for (int u = 0; u < FINE_UNROLL; u++) {
            if (j0 + u * (long long)G >= total)
                break;
            const float *q4 = v[u];
            const double val = (1.0 - fy) * ((1.0 - fx) * q4[0] + fx * q4[1]) +
                               fy * ((1.0 - fx) * q4[2] + fx * q4[3]);
            float Si, gxi, gyi;
            ss_ref_cross(q4[4], q4[5], q4[6], q4[7], q4[8], &Si, &gxi, &gyi);
            const double e = val - (double)Si;
            if (!(fabs(e) <= DBL_MAX) || !isfinite(gxi) || !isfinite(gyi))
                continue;
            const double p = gxi, q = gyi, t = Si, l = 5.0 * ((double)Si - (double)q4[4]);
            const double ddx = (1.0 - fy) * ((double)q4[1] - q4[0]) + fy * ((double)q4[3] - q4[2]);
            const double ddy = (1.0 - fx) * ((double)q4[2] - q4[0]) + fx * ((double)q4[3] - q4[1]);
            a[SS_FS_XX] += p * p;
            a[SS_FS_XY] += p * q;
            a[SS_FS_XS] += p * t;
            a[SS_FS_X] += p;
            a[SS_FS_XL] += p * l;
            a[SS_FS_YY] += q * q;
            a[SS_FS_YS] += q * t;
            a[SS_FS_Y] += q;
            a[SS_FS_YL] += q * l;
            a[SS_FS_SS] += t * t;
            a[SS_FS_S] += t;
            a[SS_FS_SL] += t * l;
            a[SS_FS_N] += 1.0;
            a[SS_FS_L] += l;
            a[SS_FS_LL] += l * l;
            a[SS_FS_XE] += p * e;
            a[SS_FS_YE] += q * e;
            a[SS_FS_SE] += t * e;
            a[SS_FS_E] += e;
            a[SS_FS_LE] += l * e;
            a[SS_FS_EE] += e * e;
            a[SS_FS_XDX] += p * ddx;
            a[SS_FS_XDY] += p * ddy;
            a[SS_FS_YDX] += q * ddx;
            a[SS_FS_YDY] += q * ddy;
        }
    }
    const double tot = cu_warp_totals<NS>(a);
    if (lane < NS)
        red[wid][lane] = tot;
    __syncthreads();
    /* partials in tile order (r·B + c): each of the block's tiles adds its
     * warps' totals in order */
    if ((int)threadIdx.x < tpb * NS) {
        const int tl = threadIdx.x / NS, k = threadIdx.x % NS;
        double v = 0.0;
        for (int q = 0; q < wpt; q++)
            v += red[tl * wpt + q][k];
        partials[(size_t)(blockIdx.x * tpb + tl) * NS + k] = v;
    }
    if (!cu_last_block(counter))
        return;
    /* the last block: [rows|columns][band][sum], each the B tiles of its
     * band in order; the B loads are issued before the adds (one at a
     * time, the block's tail was a chain of L2 round trips) */
    const volatile double *pv = partials;
    for (int k = threadIdx.x; k < 2 * B * NS; k += blockDim.x) {
        const int dir = k / (B * NS), band = (k / NS) % B, m = k % NS;
        double t[B];
#pragma unroll
        for (int o = 0; o < B; o++)
            t[o] = pv[((size_t)(dir ? o : band) * B + (dir ? band : o)) * NS + m];
        double v = 0.0;
#pragma unroll
        for (int o = 0; o < B; o++)
            v += t[o];
        out[k] = v;
    }
    if (threadIdx.x == 0)
        *counter = 0;
}

/* The decisions as kernels of one warp each (fused into the last block
 * of the passes, they cost every block of k_fine_sums registers: 4096²
 * frames ran 0.3 ms slower). */
__global__ void k_fine_iterate(cu_results_t *res)
{
    cu_pdl_wait();
    if (res->fine_st.phase == SS_FINE_PASS)
        fine_decide(res);
}

__global__ void k_fine_conclude(cu_results_t *res)
{
    cu_pdl_wait();
    if (res->fine_st.phase == SS_FINE_PROBE)
        fine_conclude(res);
}

inline dim3 grid2(int w, int h)
{
    return dim3((unsigned)((w + TX - 1) / TX), (unsigned)((h + TY - 1) / TY));
}

/* Every float's ss_div5 against the device's IEEE division: the count of
 * those that differ (NaN matches NaN) into *bad. Test-only, launched with
 * <<<>>> (no cu_pdl_wait). */
__global__ void k_div5_check(unsigned long long *bad)
{
    unsigned long long n = 0;
    const unsigned long long step = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long u = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
         u <= 0xffffffffull; u += step) {
        const float a = __uint_as_float((unsigned int)u), x = ss_div5(a), y = __fdiv_rn(a, 5.0f);
        n += __float_as_uint(x) != __float_as_uint(y) && !(isnan(x) && isnan(y));
    }
    if (n)
        atomicAdd(bad, n);
}

} // namespace

extern "C" cudaError_t cu_regin(const cu_params_t *p, const float *frame, const float *med,
                                const float *clean_sigma, int w, int h, int r, float *const *sc,
                                float *out, cudaStream_t s)
{
    cu_launch(k_clean, grid2(w, h), dim3(TX, TY), 0, s, p, frame, med, clean_sigma, w, h, sc[2]);
    return cu_hipass(sc[2], w, h, r, sc, out, s);
}

extern "C" cudaError_t cu_hipass_to(const float *in, int w, int h, int r, float *const *sc,
                                    float *out, int mode, const float *aux, float *out2,
                                    cudaStream_t s)
{
    if (r < 0)
        r = 0;
    if (r < (int)(sizeof HP_ROWS4 / sizeof HP_ROWS4[0])) {
        const int vec = w % 4 == 0 && aligned16(in) && aligned16(sc[0]) && aligned16(sc[1]);
        const dim3 g((unsigned)((w + 4 * TX - 1) / (4 * TX)), (unsigned)((h + TY - 1) / TY));
        cu_launch(HP_ROWS4[r], g, dim3(TX, TY), 0, s, in, w, h, vec, sc[0], sc[1]);
    } else {
        cu_launch(k_hp_rows, grid2(w, h), dim3(TX, TY), 0, s, in, w, h, r, sc[0], sc[1]);
    }
    const dim3 gc((unsigned)((w + 127) / 128), (unsigned)((h + SS_HP_SEG - 1) / SS_HP_SEG));
    if (mode == SS_HPE_CLIP)
        cu_launch(k_hp_cols<SS_HPE_CLIP>, gc, 128, 0, s, in, sc[0], sc[1], w, h, r, out, aux, out2);
    else if (mode == SS_HPE_RESTORE)
        cu_launch(k_hp_cols<SS_HPE_RESTORE>, gc, 128, 0, s, in, sc[0], sc[1], w, h, r, out, aux,
                  out2);
    else
        cu_launch(k_hp_cols<SS_HPE_PLAIN>, gc, 128, 0, s, in, sc[0], sc[1], w, h, r, out, aux,
                  out2);
    return cudaGetLastError();
}

extern "C" cudaError_t cu_hipass(const float *in, int w, int h, int r, float *const *sc,
                                 float *out, cudaStream_t s)
{
    return cu_hipass_to(in, w, h, r, sc, out, SS_HPE_PLAIN, NULL, NULL, s);
}

extern "C" cudaError_t cu_bin2(const float *in, int w, int h, float *out, cudaStream_t s)
{
    if (w / 2 > 0 && h / 2 > 0)
        cu_launch(k_bin2, grid2(w / 2, h / 2), dim3(TX, TY), 0, s, in, w, h, out);
    return cudaGetLastError();
}

extern "C" cudaError_t cu_reference_prep(const float *ref, int w, int h, float *S, float *gx,
                                         float *gy, cudaStream_t s)
{
    cu_launch(k_reference_prep, grid2(w, h), dim3(TX, TY), 0, s, ref, w, h, S, gx, gy);
    return cudaGetLastError();
}

extern "C" cudaError_t cu_peaks(const float *level, int w, int h, const double *noise,
                                ss_peak_t *dev, unsigned int *dev_count, int cap, cudaStream_t s)
{
    if (w > 2 && h > 2)
        cu_launch(k_peaks, grid2(w, h), dim3(TX, TY), 0, s, level, w, h, noise, dev, dev_count,
                  cap);
    return cudaGetLastError();
}
/* Pixels a thread of k_corr9 sums at least, before the block's reduction
 * of its 18 sums and its atomics into res->corr: 4 held eight feeds' SM
 * time down and one frame's latency level, 8 made one 512² frame slower
 * (docs/PERFORMANCE.md, 2026-11-25, 20:46–20:50Z). */
constexpr int CORR_PER_THREAD = 4;
extern "C" cudaError_t cu_refine(float *const *ref_lvl, float *const *cur_lvl, const int *lw,
                                 const int *lh, int L, cu_results_t *res, cudaStream_t s)
{
    for (int l = L - 1; l >= 0; l--) {
        const int step = 1;         /* every pixel (register_coarse.c says why) */
        const long long n = (long long)((lw[l] + step - 1) / step) * ((lh[l] + step - 1) / step);
        long long gb = (n + (long long)RED_THREADS * CORR_PER_THREAD - 1) /
                       ((long long)RED_THREADS * CORR_PER_THREAD);
        if (gb > CU_RED_BLOCKS)
            gb = CU_RED_BLOCKS;
        if (gb < 1)
            gb = 1;
        cu_launch(k_corr9, (unsigned)gb, RED_THREADS, 0, s, ref_lvl[l], cur_lvl[l], lw[l], lh[l],
                  step, res);
        cu_launch(k_argmax9, 1, 32, 0, s, res);
    }
    return cudaGetLastError();
}

/* Warps a tile of k_fine_sums: 8 for a frame alone on the GPU; with
 * `share` feeds on it, as few (down to 1) as leave each thread about
 * FINE_UNROLL·share of the tile's pixels. */
static int fine_warps(int w, int h, int share)
{
    if (share <= 1)
        return FINE_WARPS;
    const long long px = (long long)(w / SS_FINE_BANDS) * (h / SS_FINE_BANDS);
    int wpt = FINE_WARPS;
    while (wpt > 1 && px < (long long)wpt * 32 * FINE_UNROLL * share)
        wpt /= 2;
    return wpt;
}

extern "C" cudaError_t cu_fine(const cu_params_t *p, const float *cur, const float *ref, int w,
                               int h, int passes, int from_coarse, int share, double *partials,
                               unsigned int *counter, cu_results_t *res, cudaStream_t s)
{
    constexpr int T = SS_FINE_BANDS * SS_FINE_BANDS;
    static_assert(T <= CU_RED_BLOCKS, "partials hold the tiles");
    static_assert(T % FINE_WARPS == 0, "whole blocks of tiles at one warp a tile");
    const int wpt = fine_warps(w, h, share);
    const unsigned grid = (unsigned)(T * wpt / FINE_WARPS);
    cu_launch(k_fine_begin, 1, 32, 0, s, p, res, from_coarse);
    for (int it = 0; it < passes; it++) {
        cu_launch(k_fine_sums, grid, RED_THREADS, 0, s, cur, ref, w, h, 0, wpt, partials, counter,
                  &res->fine_st, res->fine);
        cu_launch(k_fine_iterate, 1, 32, 0, s, res);
    }
    cu_launch(k_fine_sums, grid, RED_THREADS, 0, s, cur, ref, w, h, 1, wpt, partials, counter,
              &res->fine_st, res->fine_probe);
    cu_launch(k_fine_conclude, 1, 2 * SS_FINE_BANDS, 0, s, res);
    return cudaGetLastError();
}

extern "C" long long ss_cuda_div5_mismatches(void)
{
    unsigned long long *d = NULL, h = 0;
    if (cudaMalloc(&d, sizeof *d) != cudaSuccess)
        return -1;
    bool ok = cudaMemset(d, 0, sizeof *d) == cudaSuccess;
    if (ok) {
        k_div5_check<<<1024, 256>>>(d);
        ok = cudaGetLastError() == cudaSuccess &&
             cudaMemcpy(&h, d, sizeof h, cudaMemcpyDeviceToHost) == cudaSuccess;
    }
    cudaFree(d);
    return ok ? (long long)h : -1;
}
