/*
 * k_detect.cu — ALGORITHM.md §7 on the GPU: hysteresis threshold,
 * 8-connected labelling, canonical numbering and per-component
 * accumulation (label.c and measure.c are the reference).
 *
 * Labelling (seed 003's idea, with atomics):
 *  1. tile-local: each 32×32 tile labels its pixels in shared memory by
 *     min-label propagation with pointer jumping (double-buffered, so no
 *     shared-memory races), each pixel ending with the smallest raster
 *     index of its component within the tile;
 *  2. merge: only the pixels on a tile's top row and left column look at
 *     their neighbours in other tiles (O(perimeter)), and union the two
 *     trees in global memory with atomicMin on the parent (the larger
 *     root is hung under the smaller index);
 *  3. flatten: every pixel points at its root, and a seed pixel (|z| >= hi)
 *     flags its root.
 * The masks come from zg and the seeds from z (ss_label_seeded): the two
 * are one plane unless the model-error term divided z (zg is then z
 * before the division), and measurement reads z.
 * Because union always keeps the smaller index, a component's root is its
 * smallest raster index, i.e. its first pixel: numbering the kept roots
 * (those flagged by a seed) in index order — per 1024-pixel chunk a count,
 * one scan over the chunks, then a block scan inside each chunk — gives
 * exactly ss_label's numbering (positives and negatives counted apart), so
 * the label planes are identical, not just equal up to renumbering.
 * The relabelling pass also accumulates each component's sums, minima and
 * maxima with atomics (ss_comp_acc_t encoded as cu_acc_t); the host turns
 * them into detections with ss_measure_finish.
 */
#include "cu_internal.h"
#include "cu_grid.cuh"
#include "pipeline/peak_core.h"

#include <math.h>

namespace {

constexpr int T = CU_CCL_TILE;      /* 32 */
constexpr int TY = 8;
constexpr int CH = CU_CHUNK;        /* 1024 pixels per numbering chunk */
constexpr int CH_THREADS = 256;     /* 4 consecutive pixels per thread */
constexpr int SCAN_THREADS = 1024;

__device__ __forceinline__ int pclass(float v, float lo, int negative)
{
    if (v >= lo)
        return 1;
    if (negative && -v >= lo)
        return 2;
    return 0;
}

__device__ __forceinline__ bool is_seed(float v, int cls, float hi)
{
    return cls == 1 ? v >= hi : -v >= hi;
}

__device__ __forceinline__ unsigned int float_key(float f)
{
    const unsigned int u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/* ss_sig_key: the significance of a pixel of SNR v (already times the
 * component's sign) at index i — larger peak first, then smaller index. */
__device__ __forceinline__ unsigned long long sig_key(float v, size_t i)
{
    return ((unsigned long long)float_key(v) << 32) | (unsigned int)~(unsigned int)i;
}

__device__ __forceinline__ int find_root(const int *parent, int i)
{
    const volatile int *vp = parent;
    for (;;) {
        const int p = vp[i];
        if (p == i)
            return i;
        i = p;
    }
}

/* Union of the trees of a and b: the larger root goes under the smaller. */
__device__ void merge(int *parent, int a, int b)
{
    for (;;) {
        a = find_root(parent, a);
        b = find_root(parent, b);
        if (a == b)
            return;
        if (a < b) {
            const int t = a;
            a = b;
            b = t;
        }
        const int old = atomicMin(&parent[a], b);
        if (old == a)
            return;
        a = old;
    }
}

__global__ void k_ccl_local(const cu_params_t *__restrict__ p, const float *__restrict__ z, int w,
                            int h, int *__restrict__ parent, uint8_t *__restrict__ seed)
{
    cu_pdl_wait();
    __shared__ int L[2][T * T];
    __shared__ signed char C[T * T];
    const float lo = p->thresh_low;
    const int negative = p->negative;
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int x0 = blockIdx.x * T, y0 = blockIdx.y * T;
    for (int k = 0; k < T / TY; k++) {
        const int ly = ty + k * TY, idx = ly * T + tx;
        const int x = x0 + tx, y = y0 + ly;
        int c = 0;
        if (x < w && y < h) {
            const size_t i = (size_t)y * (size_t)w + (size_t)x;
            c = pclass(z[i], lo, negative);
            seed[i] = 0;
        }
        C[idx] = (signed char)c;
        L[0][idx] = idx;
    }
    __syncthreads();
    int cur = 0;
    for (;;) {
        int changed = 0;
        for (int k = 0; k < T / TY; k++) {
            const int ly = ty + k * TY, idx = ly * T + tx;
            const int c = C[idx];
            if (!c)
                continue;
            int m = L[cur][idx];
            for (int dy = -1; dy <= 1; dy++) {
                const int yy = ly + dy;
                if (yy < 0 || yy >= T)
                    continue;
                for (int dx = -1; dx <= 1; dx++) {
                    const int xx = tx + dx;
                    if (xx < 0 || xx >= T || (dx == 0 && dy == 0))
                        continue;
                    const int q = yy * T + xx;
                    if (C[q] == c)
                        m = min(m, L[cur][q]);
                }
            }
            m = min(m, L[cur][m]);          /* pointer jump */
            changed |= m != L[cur][idx];
            L[1 - cur][idx] = m;
        }
        changed = __syncthreads_or(changed);
        cur = 1 - cur;
        if (!changed)
            break;
    }
    for (int k = 0; k < T / TY; k++) {
        const int ly = ty + k * TY, idx = ly * T + tx;
        const int x = x0 + tx, y = y0 + ly;
        if (x >= w || y >= h)
            continue;
        const int l = L[cur][idx];
        parent[(size_t)y * (size_t)w + (size_t)x] =
            C[idx] ? (y0 + l / T) * w + (x0 + l % T) : -1;
    }
}

/* Tile borders: top row with N, NW, NE; left column with W, NW, SW. */
__global__ void k_ccl_merge(const cu_params_t *__restrict__ p, const float *__restrict__ z, int w,
                            int h, int *parent)
{
    cu_pdl_wait();
    const float lo = p->thresh_low;
    const int negative = p->negative;
    const int x0 = blockIdx.x * T, y0 = blockIdx.y * T;
    const int t = threadIdx.x;
    int x, y;
    int nb[3][2];
    if (t < T) {
        x = x0 + t;
        y = y0;
        if (y0 == 0 || x >= w)
            return;
        nb[0][0] = x - 1; nb[0][1] = y - 1;
        nb[1][0] = x;     nb[1][1] = y - 1;
        nb[2][0] = x + 1; nb[2][1] = y - 1;
    } else {
        x = x0;
        y = y0 + t - T;
        if (x0 == 0 || y >= h)
            return;
        nb[0][0] = x - 1; nb[0][1] = y - 1;
        nb[1][0] = x - 1; nb[1][1] = y;
        nb[2][0] = x - 1; nb[2][1] = y + 1;
    }
    const int i = y * w + x;
    const int c = pclass(z[i], lo, negative);
    if (!c)
        return;
    for (int k = 0; k < 3; k++) {
        const int xx = nb[k][0], yy = nb[k][1];
        if (xx < 0 || xx >= w || yy < 0 || yy >= h)
            continue;
        const int j = yy * w + xx;
        if (pclass(z[j], lo, negative) == c)
            merge(parent, i, j);
    }
}

__global__ void k_ccl_flatten(const cu_params_t *__restrict__ p, const float *__restrict__ zg,
                              const float *__restrict__ z, size_t npix, int *parent,
                              uint8_t *__restrict__ seed)
{
    cu_pdl_wait();
    const float lo = p->thresh_low, hi = p->thresh;
    const int negative = p->negative;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < npix;
         i += (size_t)gridDim.x * blockDim.x) {
        if (parent[i] < 0)
            continue;
        const int r = find_root(parent, (int)i);
        parent[i] = r;
        if (is_seed(z[i], pclass(zg[i], lo, negative), hi))
            seed[r] = 1;
    }
}

/* Per chunk: kept roots of each sign. */
__global__ void k_ccl_count(const cu_params_t *__restrict__ p, const float *__restrict__ z,
                            size_t npix, const int *__restrict__ parent,
                            const uint8_t *__restrict__ seed, int *__restrict__ cnt)
{
    cu_pdl_wait();
    __shared__ int sp[CH_THREADS / 32], sn[CH_THREADS / 32];
    const float lo = p->thresh_low;
    const int negative = p->negative;
    int np = 0, nn = 0;
    const size_t base = (size_t)blockIdx.x * CH + (size_t)threadIdx.x * 4;
    for (int q = 0; q < 4; q++) {
        const size_t i = base + q;
        if (i < npix && parent[i] == (int)i && seed[i]) {
            if (pclass(z[i], lo, negative) == 1)
                np++;
            else
                nn++;
        }
    }
    for (int o = 16; o > 0; o >>= 1) {
        np += __shfl_down_sync(0xffffffffu, np, o);
        nn += __shfl_down_sync(0xffffffffu, nn, o);
    }
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    if (lane == 0) {
        sp[wid] = np;
        sn[wid] = nn;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        int tp = 0, tn = 0;
        for (int k = 0; k < CH_THREADS / 32; k++) {
            tp += sp[k];
            tn += sn[k];
        }
        cnt[2 * blockIdx.x] = tp;
        cnt[2 * blockIdx.x + 1] = tn;
    }
}

/* The pair (p, n) of kept roots as one 64-bit word, n in the high half
 * (both below 2^31: sums of them stay exact). */
__device__ __forceinline__ unsigned long long pair_pack(int2 q)
{
    return ((unsigned long long)(unsigned int)q.y << 32) | (unsigned int)q.x;
}
__device__ __forceinline__ int2 pair_unpack(unsigned long long v)
{
    return make_int2((int)(v & 0xffffffffull), (int)(v >> 32));
}

/* Exclusive scan of the chunk counts cnt[c] = (kept positive roots,
 * negative ones), c < nchunks, in place; the totals into res->np, nn.
 * One block of SCAN_THREADS over tiles of SCAN_THREADS·SCAN_K chunks:
 * each warp loads its SCAN_K runs of 32 consecutive chunks together
 * (coalesced), scans them by shuffles, and the warps' totals are scanned
 * through shared memory; a tile's total carries into the next. Integer
 * sums: the same counts in any order. (The loop of dependent loads per
 * thread and the 20-barrier scan this replaced took 67 µs at 4096².) */
constexpr int SCAN_K = 4;
__global__ void __launch_bounds__(SCAN_THREADS) k_ccl_scan(int nchunks, int2 *cnt,
                                                           cu_results_t *res)
{
    cu_pdl_wait();
    constexpr int NW = SCAN_THREADS / 32;
    static_assert(NW == 32, "a lane of warp 0 per warp");
    __shared__ unsigned long long wsum[NW];
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    unsigned long long carry = 0;
    for (int t0 = 0; t0 < nchunks; t0 += SCAN_THREADS * SCAN_K) {
        const int c0 = t0 + wid * 32 * SCAN_K + lane;
        unsigned long long own[SCAN_K], inc[SCAN_K], run = 0;
#pragma unroll
        for (int k = 0; k < SCAN_K; k++) {
            const int c = c0 + 32 * k;
            own[k] = c < nchunks ? pair_pack(cnt[c]) : 0ull;
        }
#pragma unroll
        for (int k = 0; k < SCAN_K; k++) {
            const unsigned long long x = cu_warp_incl(own[k]);
            inc[k] = run + x;
            run += __shfl_sync(0xffffffffu, x, 31);
        }
        if (lane == 31)
            wsum[wid] = run;
        __syncthreads();
        if (wid == 0)
            wsum[lane] = cu_warp_incl(wsum[lane]);
        __syncthreads();
        const unsigned long long before = carry + (wid > 0 ? wsum[wid - 1] : 0ull);
#pragma unroll
        for (int k = 0; k < SCAN_K; k++) {
            const int c = c0 + 32 * k;
            if (c < nchunks)
                cnt[c] = pair_unpack(before + inc[k] - own[k]);
        }
        carry += wsum[NW - 1];
        __syncthreads();                /* wsum is reused by the next tile */
    }
    if (threadIdx.x == 0) {
        const int2 tot = pair_unpack(carry);
        res->np = tot.x;
        res->nn = tot.y;
    }
}

__device__ __forceinline__ void acc_init(cu_acc_t *a, int sign, int label, int w, int h)
{
    a->sw = a->swx = a->swy = a->swxx = a->swxy = a->swyy = 0.0;
    a->sx = a->sy = a->flux = a->rpos = 0.0;
    a->zkey = 0ull;
    a->rkey = 0ull;
    a->rwgt = 0.0;
    a->area = 0;
    a->x0 = a->kx0 = w;
    a->y0 = a->ky0 = h;
    a->x1 = a->kx1 = -1;
    a->y1 = a->ky1 = -1;
    a->invalid_nb = 0;
    a->edge = 0;
    a->sign = sign;
    a->label = label;
}

/* Number the kept roots of each chunk in raster order; label 0 for
 * seedless roots; initialise the kept components' accumulators. */
__global__ void k_ccl_number(const cu_params_t *__restrict__ p, const float *__restrict__ z,
                             int w, int h, const int *__restrict__ parent,
                             const uint8_t *__restrict__ seed, const int *__restrict__ off,
                             const cu_results_t *__restrict__ res, int32_t *__restrict__ labels,
                             cu_acc_t *__restrict__ acc)
{
    cu_pdl_wait();
    __shared__ int wp[CH_THREADS / 32], wn[CH_THREADS / 32];
    const float lo = p->thresh_low;
    const int negative = p->negative;
    const size_t npix = (size_t)w * (size_t)h;
    const size_t base = (size_t)blockIdx.x * CH + (size_t)threadIdx.x * 4;
    int cls[4];
    int tp = 0, tn = 0;
    for (int q = 0; q < 4; q++) {
        const size_t i = base + q;
        cls[q] = 0;
        if (i < npix && parent[i] == (int)i) {
            cls[q] = seed[i] ? pclass(z[i], lo, negative) : -1;
            tp += cls[q] == 1;
            tn += cls[q] == 2;
        }
    }
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    const int ip = cu_warp_incl(tp), in = cu_warp_incl(tn);
    if (lane == 31) {
        wp[wid] = ip;
        wn[wid] = in;
    }
    __syncthreads();
    int ep = ip - tp + off[2 * blockIdx.x], en = in - tn + off[2 * blockIdx.x + 1];
    for (int k = 0; k < wid; k++) {
        ep += wp[k];
        en += wn[k];
    }
    const int np = res->np, nn = res->nn, maxc = p->max_comp;
    const int keep_p = min(np, maxc), keep_n = min(nn, maxc - keep_p);
    for (int q = 0; q < 4; q++) {
        const size_t i = base + q;
        if (cls[q] == 0)
            continue;
        if (cls[q] < 0) {
            labels[i] = 0;
        } else if (cls[q] == 1) {
            labels[i] = ep + 1;
            if (ep < keep_p)
                acc_init(&acc[ep], +1, ep + 1, w, h);
            ep++;
        } else {
            labels[i] = -(en + 1);
            if (en < keep_n)
                acc_init(&acc[keep_p + en], -1, -(en + 1), w, h);
            en++;
        }
    }
}

/* One labelled pixel i of sign s into its accumulator (ss_measure_acc's
 * acc_add, with atomics). */
__device__ void acc_add(cu_acc_t *a, double s, size_t i, const float *__restrict__ z,
                        const float *__restrict__ rc, const float *__restrict__ r, int w, int h,
                        float hi)
{
    const int x = (int)(i % (size_t)w), y = (int)(i / (size_t)w);
    const double xd = x, yd = y;
    atomicAdd(&a->area, 1);
    const double vc = s * (double)rc[i];
    if (isfinite(vc)) {
        atomicAdd(&a->flux, vc);
        if (vc > 0.0) {
            atomicAdd(&a->sw, vc);
            atomicAdd(&a->swx, vc * xd);
            atomicAdd(&a->swy, vc * yd);
            atomicAdd(&a->swxx, vc * xd * xd);
            atomicAdd(&a->swxy, vc * xd * yd);
            atomicAdd(&a->swyy, vc * yd * yd);
        }
    }
    atomicAdd(&a->sx, xd);
    atomicAdd(&a->sy, yd);
    const float vr = (float)s * r[i] + 0.0f;     /* -0 -> +0, as the CPU */
    if (isfinite(vr)) {
        if (vr > 0.0f)
            atomicAdd(&a->rpos, (double)vr);
        atomicMax(&a->rkey, sig_key(vr, i));
    }
    const float vz = (float)s * z[i];
    atomicMax(&a->zkey, sig_key(vz, i));
    atomicMin(&a->x0, x);
    atomicMax(&a->x1, x);
    atomicMin(&a->y0, y);
    atomicMax(&a->y1, y);
    if (vz >= hi) {
        atomicMin(&a->kx0, x);
        atomicMax(&a->kx1, x);
        atomicMin(&a->ky0, y);
        atomicMax(&a->ky1, y);
    }
    if (x == 0 || y == 0 || x == w - 1 || y == h - 1)
        atomicOr(&a->edge, 1);
    bool inv = false;
    for (int dy = -1; dy <= 1 && !inv; dy++) {
        const int yy = y + dy;
        if (yy < 0 || yy >= h)
            continue;
        for (int dx = -1; dx <= 1; dx++) {
            const int xx = x + dx;
            if ((dx == 0 && dy == 0) || xx < 0 || xx >= w)
                continue;
            if (isnan(z[(size_t)yy * (size_t)w + (size_t)xx])) {
                inv = true;
                break;
            }
        }
    }
    if (inv)
        atomicOr(&a->invalid_nb, 1);
}

/* Every pixel takes its root's label; kept components accumulate. */
__global__ void k_ccl_relabel(const float *__restrict__ z, const float *__restrict__ rc,
                              const float *__restrict__ r, int w, int h,
                              const int *__restrict__ parent, const cu_params_t *__restrict__ p,
                              const cu_results_t *__restrict__ res, int32_t *labels,
                              cu_acc_t *acc)
{
    cu_pdl_wait();
    const size_t npix = (size_t)w * (size_t)h;
    const int np = res->np, nn = res->nn, maxc = p->max_comp;
    const int keep_p = min(np, maxc), keep_n = min(nn, maxc - keep_p);
    const float hi = p->thresh;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < npix;
         i += (size_t)gridDim.x * blockDim.x) {
        const int pr = parent[i];
        int L;
        if (pr < 0) {
            labels[i] = 0;
            continue;
        }
        if (pr == (int)i) {
            L = labels[i];
        } else {
            L = labels[pr];
            labels[i] = L;
        }
        int k;
        if (L > 0 && L <= keep_p)
            k = L - 1;
        else if (L < 0 && -L <= keep_n)
            k = keep_p + (-L) - 1;
        else
            continue;
        acc_add(&acc[k], L > 0 ? 1.0 : -1.0, i, z, rc, r, w, h, hi);
    }
}

/* ---- more components than accumulators (cu_detect_overflow) ---------- */

/* The component index of label L (positives first), as ss_measure_acc. */
__device__ __forceinline__ int comp_of(int L, int np)
{
    return L > 0 ? L - 1 : np + (-L) - 1;
}

__global__ void k_ovf_clear(const cu_params_t *__restrict__ p,
                            const cu_results_t *__restrict__ res, unsigned long long *pkey,
                            int *parea, cu_topk_t *tk)
{
    cu_pdl_wait();
    const int nc = res->np + res->nn;
    for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < nc; c += gridDim.x * blockDim.x) {
        pkey[c] = 0ull;             /* below every pixel's key */
        parea[c] = 0;
    }
    if (blockIdx.x == 0) {
        for (int b = threadIdx.x; b < 256; b += blockDim.x)
            tk->hist[b] = 0u;
        if (threadIdx.x == 0) {
            tk->prefix = tk->mask = 0ull;
            tk->want = p->max_comp;
            tk->all = 0;
            tk->n_elig = 0;
            tk->counter = 0u;
        }
    }
}

/* Every labelled pixel: its component's key and area. */
__global__ void k_ovf_peak(const float *__restrict__ z, size_t npix,
                           const int32_t *__restrict__ labels,
                           const cu_results_t *__restrict__ res, unsigned long long *pkey,
                           int *parea)
{
    cu_pdl_wait();
    const int np = res->np;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < npix;
         i += (size_t)gridDim.x * blockDim.x) {
        const int L = labels[i];
        if (!L)
            continue;
        const int c = comp_of(L, np);
        atomicMax(&pkey[c], sig_key(L > 0 ? z[i] : -z[i], i));
        atomicAdd(&parea[c], 1);
    }
}

/* One radix pass: the eligible keys that match the prefix, counted by
 * the byte at `shift`. */
__global__ void k_ovf_hist(const cu_params_t *__restrict__ p, const cu_results_t *__restrict__ res,
                           const unsigned long long *__restrict__ pkey,
                           const int *__restrict__ parea, cu_topk_t *tk, int shift)
{
    cu_pdl_wait();
    __shared__ unsigned int sh[256];
    if (tk->all)
        return;
    for (int b = threadIdx.x; b < 256; b += blockDim.x)
        sh[b] = 0u;
    __syncthreads();
    const int nc = res->np + res->nn, min_area = max(p->min_area, 1);
    const unsigned long long prefix = tk->prefix, mask = tk->mask;
    for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < nc; c += gridDim.x * blockDim.x) {
        const unsigned long long k = pkey[c];
        if (parea[c] >= min_area && (k & mask) == prefix)
            atomicAdd(&sh[(k >> shift) & 255ull], 1u);
    }
    __syncthreads();
    for (int b = threadIdx.x; b < 256; b += blockDim.x)
        if (sh[b])
            atomicAdd(&tk->hist[b], sh[b]);
}

/* One thread: descend into the bin where the count from the top reaches
 * want (ss_rank_top's kth_largest). The first pass also counts the
 * eligible and stops the selection when they all fit. */
__global__ void k_ovf_pick(const cu_params_t *__restrict__ p, cu_topk_t *tk, int shift)
{
    cu_pdl_wait();
    if (tk->all)
        return;
    if (shift == 56) {
        int n = 0;
        for (int b = 0; b < 256; b++)
            n += (int)tk->hist[b];
        tk->n_elig = n;
        if (n <= p->max_comp) {
            tk->all = 1;
            return;
        }
    }
    int want = tk->want, bin = 255;
    while ((int)tk->hist[bin] < want) {
        want -= (int)tk->hist[bin];
        bin--;
    }
    tk->want = want;
    tk->prefix |= (unsigned long long)bin << shift;
    tk->mask |= 255ull << shift;
    for (int b = 0; b < 256; b++)
        tk->hist[b] = 0u;
}

/* The selected components (eligible, key >= the selected threshold, or
 * every eligible one) get a slot and an initialised accumulator; parea
 * becomes the slot (-1: not measured). */
__global__ void k_ovf_slots(const cu_params_t *__restrict__ p, cu_results_t *res,
                            const unsigned long long *__restrict__ pkey, int *parea,
                            cu_topk_t *tk, cu_acc_t *acc, int w, int h)
{
    cu_pdl_wait();
    const int np = res->np, nc = np + res->nn, min_area = max(p->min_area, 1);
    const int all = tk->all;
    const unsigned long long t = tk->prefix;
    for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < nc; c += gridDim.x * blockDim.x) {
        int slot = -1;
        if (parea[c] >= min_area && (all || pkey[c] >= t)) {
            slot = (int)atomicAdd(&tk->counter, 1u);
            acc_init(&acc[slot], c < np ? +1 : -1, c < np ? c + 1 : -(c - np + 1), w, h);
        }
        parea[c] = slot;
    }
    if (blockIdx.x == 0 && threadIdx.x == 0)
        res->n_elig = tk->n_elig;
}

/* The selected components accumulate (the labels are final). */
__global__ void k_ovf_acc(const float *__restrict__ z, const float *__restrict__ rc,
                          const float *__restrict__ r, int w, int h,
                          const int32_t *__restrict__ labels, const int *__restrict__ slot,
                          const cu_params_t *__restrict__ p,
                          const cu_results_t *__restrict__ res, cu_acc_t *acc)
{
    cu_pdl_wait();
    const size_t npix = (size_t)w * (size_t)h;
    const int np = res->np;
    const float hi = p->thresh;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < npix;
         i += (size_t)gridDim.x * blockDim.x) {
        const int L = labels[i];
        if (!L)
            continue;
        const int k = slot[comp_of(L, np)];
        if (k >= 0)
            acc_add(&acc[k], L > 0 ? 1.0 : -1.0, i, z, rc, r, w, h, hi);
    }
}

/* After the accumulation: each measured accumulator's weight of its
 * brightest unfiltered pixel in the moments and its SNR peak's neighbours
 * (ss_measure_acc's last loop). Measured: min(np + nn, max_comp)
 * (overflow = 0) or min(n_elig, max_comp) (overflow = 1, after
 * k_ovf_slots). */
__global__ void k_acc_finish(const cu_params_t *__restrict__ p,
                             const cu_results_t *__restrict__ res, const float *__restrict__ rc,
                             const float *__restrict__ z, int w, int h, cu_acc_t *acc,
                             int overflow)
{
    cu_pdl_wait();
    const int n = min(overflow ? res->n_elig : res->np + res->nn, p->max_comp);
    for (int k = blockIdx.x * blockDim.x + threadIdx.x; k < n; k += gridDim.x * blockDim.x) {
        cu_acc_t *a = &acc[k];
        if (a->rkey) {
            const size_t i = (size_t)(unsigned int)~(unsigned int)(a->rkey & 0xffffffffull);
            const double v = (double)a->sign * (double)rc[i];
            a->rwgt = isfinite(v) && v > 0.0 ? v : 0.0;
        }
        const int zidx = a->zkey ? (int)~(unsigned int)(a->zkey & 0xffffffffull) : -1;
        ss_peak_neighbours(z, w, h, zidx, a->sign, a->zn);
    }
}

inline unsigned grid1(size_t n, int threads)
{
    size_t g = (n + (size_t)threads - 1) / (size_t)threads;
    return (unsigned)(g < 8192 ? (g ? g : 1) : 8192);
}

} // namespace

extern "C" cudaError_t cu_detect(const cu_params_t *p, const float *zg, const float *z,
                                 const float *rc, const float *r, int w, int h, int32_t *labels,
                                 int32_t *parent, uint8_t *seed, int *chunk_cnt, cu_acc_t *acc,
                                 int max_comp, cu_results_t *res, cudaStream_t s)
{
    const size_t npix = (size_t)w * (size_t)h;
    const dim3 tiles((unsigned)((w + T - 1) / T), (unsigned)((h + T - 1) / T));
    const int nchunks = (int)((npix + CH - 1) / CH);
    cu_launch(k_ccl_local, tiles, dim3(T, TY), 0, s, p, zg, w, h, parent, seed);
    cu_launch(k_ccl_merge, tiles, 2 * T, 0, s, p, zg, w, h, parent);
    cu_launch(k_ccl_flatten, grid1(npix, 256), 256, 0, s, p, zg, z, npix, parent, seed);
    cu_launch(k_ccl_count, nchunks, CH_THREADS, 0, s, p, zg, npix, parent, seed, chunk_cnt);
    int2 *pairs = reinterpret_cast<int2 *>(chunk_cnt);     /* cudaMalloc'd: 8-byte aligned */
    cu_launch(k_ccl_scan, 1, SCAN_THREADS, 0, s, nchunks, pairs, res);
    cu_launch(k_ccl_number, nchunks, CH_THREADS, 0, s, p, zg, w, h, parent, seed, chunk_cnt, res,
              labels, acc);
    cu_launch(k_ccl_relabel, grid1(npix, 256), 256, 0, s, z, rc, r, w, h, parent, p, res, labels,
              acc);
    cu_launch(k_acc_finish, grid1((size_t)max_comp, 256), 256, 0, s, p, res, rc, z, w, h, acc, 0);
    return cudaGetLastError();
}

extern "C" cudaError_t cu_detect_overflow(const cu_params_t *p, const float *z, const float *rc,
                                          const float *r, int w, int h, const int32_t *labels,
                                          unsigned long long *pkey, int *parea, int ncomp_max,
                                          cu_topk_t *tk, cu_acc_t *acc, int max_comp,
                                          cu_results_t *res, cudaStream_t s)
{
    const size_t npix = (size_t)w * (size_t)h;
    const unsigned gc = grid1((size_t)ncomp_max, 256), gp = grid1(npix, 256);
    cu_launch(k_ovf_clear, gc, 256, 0, s, p, res, pkey, parea, tk);
    cu_launch(k_ovf_peak, gp, 256, 0, s, z, npix, labels, res, pkey, parea);
    for (int shift = 56; shift >= 0; shift -= 8) {
        cu_launch(k_ovf_hist, gc, 256, 0, s, p, res, pkey, parea, tk, shift);
        cu_launch(k_ovf_pick, 1, 1, 0, s, p, tk, shift);
    }
    cu_launch(k_ovf_slots, gc, 256, 0, s, p, res, pkey, parea, tk, acc, w, h);
    cu_launch(k_ovf_acc, gp, 256, 0, s, z, rc, r, w, h, labels, parea, p, res, acc);
    cu_launch(k_acc_finish, grid1((size_t)max_comp, 256), 256, 0, s, p, res, rc, z, w, h, acc, 1);
    return cudaGetLastError();
}
