/*
 * k_vote.cu — the coarse vote of ALGORITHM.md §2a on the device, so that
 * registration needs no host round trip between the star peaks and the
 * refinement: the brightest SS_COARSE_STARS peaks of a level in the order
 * of ss_peaks_order (k_top_peaks), and ss_coarse_vote over the frame's and
 * the reference's (k_vote), its decisions taken by vote_core.h's code.
 *
 * Both are single blocks: a level holds at most SS_COARSE_PEAK_CAP peaks,
 * and the vote at most SS_COARSE_STARS² pairs.
 */
#include "cu_internal.h"
#include "cu_grid.cuh"
#include "pipeline/vote_core.h"

namespace {

constexpr int VOTE_THREADS = 1024;
constexpr int VOTE_SHARED_BINS = 107 * 107; /* (2R + 1)² bins for R <= 53, with the peaks
                                             * within 48 KiB of shared memory */

/* A peak's place in the order of ss_peaks_order as one 64-bit key, the
 * larger the earlier: value descending (order-preserving float bits),
 * then raster index (y·w + x) ascending. Keys of distinct peaks differ. */
__device__ unsigned long long peak_key(const ss_peak_t &p, int w)
{
    const unsigned int u = __float_as_uint(p.v);
    const unsigned int ord = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    const unsigned int idx = (unsigned int)p.y * (unsigned int)w + (unsigned int)p.x;
    return ((unsigned long long)ord << 32) | (0xFFFFFFFFu - idx);
}

/* The warp's largest v, then one shared atomic per warp (64-bit shared
 * atomics are compare-and-swap loops: one per thread serialised 4096
 * pairs). Every lane of the warp must call it. */
__device__ void warp_max_into(unsigned long long *dst, unsigned long long v)
{
    for (int o = 16; o > 0; o >>= 1) {
        const unsigned long long u = __shfl_down_sync(0xffffffffu, v, o);
        v = u > v ? u : v;
    }
    if ((threadIdx.x & 31) == 0 && v)
        atomicMax(dst, v);
}

/* The warp's sum of v, then one shared atomic per warp. */
__device__ void warp_sum_into(unsigned long long *dst, unsigned long long v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_down_sync(0xffffffffu, v, o);
    if ((threadIdx.x & 31) == 0 && v)
        atomicAdd(dst, v);
}

/* One warp: the bin of the need-th largest key among hist's 256 (bin 255
 * the largest), added to *prefix at shift, and *need less the keys in
 * the bins above it. Lane l holds bins 255 - 8l down to 248 - 8l; the
 * lanes' counts are summed from lane 0 up, and the lane where the sum
 * reaches need looks through its eight. */
__device__ void pick_bin(const unsigned int *hist, int *need, unsigned long long *prefix, int shift)
{
    const int lane = threadIdx.x & 31, top = 255 - 8 * lane;
    int mine = 0;
    for (int j = 0; j < 8; j++)
        mine += (int)hist[top - j];
    const int incl = cu_warp_incl(mine);
    const int n = *need;
    __syncwarp();                   /* every lane has read *need before it changes */
    const unsigned int hit = __ballot_sync(0xffffffffu, incl >= n);
    const int src = hit ? __ffs(hit) - 1 : 31;
    if (lane == src) {
        int left = n - (incl - mine), bin = top;
        for (int j = 0; j < 7 && (int)hist[bin] < left; j++, bin--)
            left -= (int)hist[bin];
        *need = left;
        *prefix |= (unsigned long long)bin << shift;
    }
}

/* The k = min(count, cap, SS_COARSE_STARS) first peaks of in (the
 * found ones, in any order) by ss_peaks_order's order, into top[0..k), k
 * into *ntop. Up to a block's worth of peaks each ranks itself among all;
 * more go through an exact MSB-first radix selection of the k-th largest
 * key (8 passes of 8 bits), then the keys at or above it are ranked. */
__global__ void k_top_peaks(const ss_peak_t *__restrict__ in, unsigned int *count, int cap,
                            int w, ss_peak_t *top, int *ntop)
{
    cu_pdl_wait();
    __shared__ unsigned int hist[256];
    __shared__ unsigned long long prefix, sel[SS_COARSE_STARS];
    __shared__ int need, nsel;
    __shared__ unsigned long long keys[VOTE_THREADS];
    const int m = (int)min(*count, (unsigned int)cap);
    __syncthreads();                    /* every thread has the count: */
    if (threadIdx.x == 0)
        *count = 0;                     /* cleared for the next k_peaks */
    const int k = min(m, SS_COARSE_STARS);
    if (m <= (int)blockDim.x) {
        /* few peaks (the usual case): each ranks itself among all */
        const int t = threadIdx.x;
        if (t < m)
            keys[t] = peak_key(in[t], w);
        __syncthreads();
        if (t < m) {
            int rank = 0;
            for (int j = 0; j < m; j++)
                rank += keys[j] > keys[t];
            if (rank < k)
                top[rank] = in[t];
        }
        if (t == 0)
            *ntop = k;
        return;
    }
    if (threadIdx.x == 0) {
        prefix = 0ull;
        need = k;
        nsel = 0;
    }
    __syncthreads();
    if (k > 0 && k < m) {
        for (int shift = 56; shift >= 0; shift -= 8) {
            for (int i = threadIdx.x; i < 256; i += blockDim.x)
                hist[i] = 0u;
            __syncthreads();
            const unsigned long long hi_mask = shift == 56 ? 0ull : ~0ull << (shift + 8);
            for (int i = threadIdx.x; i < m; i += blockDim.x) {
                const unsigned long long key = peak_key(in[i], w);
                if ((key & hi_mask) == prefix)
                    atomicAdd(&hist[(key >> shift) & 255u], 1u);
            }
            __syncthreads();
            if (threadIdx.x < 32)
                pick_bin(hist, &need, &prefix, shift);
            __syncthreads();
        }
    }
    /* the threshold: the k-th largest key (every key when k == m) */
    const unsigned long long thr = k < m ? prefix : 0ull;
    for (int i = threadIdx.x; i < m; i += blockDim.x) {
        const unsigned long long key = peak_key(in[i], w);
        if (key >= thr && k > 0) {
            const int slot = atomicAdd(&nsel, 1);
            if (slot < SS_COARSE_STARS)
                sel[slot] = key;
        }
    }
    __syncthreads();
    /* each selected peak's rank among the k selected keys is its place */
    for (int i = threadIdx.x; i < m; i += blockDim.x) {
        const unsigned long long key = peak_key(in[i], w);
        if (key < thr || k == 0)
            continue;
        int rank = 0;
        for (int j = 0; j < k; j++)
            rank += sel[j] > key;
        if (rank < k)
            top[rank] = in[i];
    }
    if (threadIdx.x == 0)
        *ntop = k;
}

/* Pair q of the vote (reference peak q / nc, frame peak q % nc): its
 * displacement into *dx, *dy; true when the pair exists and falls within
 * ±R. */
__device__ __forceinline__ bool vote_pair(const ss_peak_t *ref, const ss_peak_t *cur, int nc,
                                          int npair, int R, int q, int *dx, int *dy)
{
    if (q >= npair)
        return false;
    *dx = ref[q / nc].x - cur[q % nc].x;
    *dy = ref[q / nc].y - cur[q % nc].y;
    return abs(*dx) <= R && abs(*dy) <= R;
}

/* ss_coarse_vote of the frame's top peaks (cur, *nc) against the
 * reference's (ref, *nr) with R = p's search range; the result into
 * res->coarse (its shift also into rdx/rdy: the refinement's start), and
 * res->corr cleared for the refinement.
 * hist ((2·SS_COARSE_MAX_R + 1)² ints, all zeros before and after) holds
 * the histogram when it does not fit in shared memory. */
__global__ void k_vote(const cu_params_t *__restrict__ p, const ss_peak_t *__restrict__ ref_g,
                       const int *nrp, const ss_peak_t *__restrict__ cur_g, const int *ncp, int *hist,
                       cu_results_t *res)
{
    cu_pdl_wait();
    __shared__ ss_peak_t ref[SS_COARSE_STARS], cur[SS_COARSE_STARS];
    __shared__ unsigned long long best_key;
    __shared__ unsigned long long second_s, votes_s;
    __shared__ int hist_sh[VOTE_SHARED_BINS];
    const int R = p->vote_R, nr = *nrp, nc = *ncp, npair = nr * nc;
    const int side2 = (2 * R + 1) * (2 * R + 1);
    /* the histogram in shared memory when it fits (R <= 53), zeroed here;
     * else the global one, zeroed again at the end */
    const bool small = side2 <= VOTE_SHARED_BINS;
    int *H = small ? hist_sh : hist;
    if (small)
        for (int i = threadIdx.x; i < side2; i += blockDim.x)
            hist_sh[i] = 0;
    for (int i = threadIdx.x; i < nr; i += blockDim.x)
        ref[i] = ref_g[i];
    for (int i = threadIdx.x; i < nc; i += blockDim.x)
        cur[i] = cur_g[i];
    cu_coarse_t *v = &res->coarse;
    constexpr int NCORR = (int)(sizeof res->corr / sizeof res->corr[0]);
    if (threadIdx.x < NCORR)
        res->corr[threadIdx.x] = 0.0;   /* cu_refine's sums start from zero */
    if (threadIdx.x == 0) {
        best_key = 0ull;
        second_s = 0ull;
        votes_s = 0ull;
        *v = cu_coarse_t{};
        v->n_ref = nr;
        v->n_cur = nc;
    }
    __syncthreads();
    if (nr < 3 || nc < 3) {
        if (threadIdx.x == 0)
            v->why = SS_VW_FEW_STARS;
        return;
    }
    const unsigned int side = 2u * (unsigned int)R + 1u;
    /* the histogram of the displacements within ±R (every lane runs
     * every round: the warp reductions below need all 32) */
    const int rounds = (npair + (int)blockDim.x - 1) / (int)blockDim.x;
    unsigned long long mine = 0ull;
    for (int r = 0, q = threadIdx.x; r < rounds; r++, q += blockDim.x) {
        int dx, dy;
        if (vote_pair(ref, cur, nc, npair, R, q, &dx, &dy)) {
            atomicAdd(&H[ss_vote_bin(R, dx, dy)], 1);
            mine++;
        }
    }
    warp_sum_into(&votes_s, mine);
    __syncthreads();
    /* the best window among the occupied bins: the highest score, ties to
     * the smallest bin (dy, then dx) */
    for (int r = 0, q = threadIdx.x; r < rounds; r++, q += blockDim.x) {
        int dx, dy;
        unsigned long long key = 0ull;
        if (vote_pair(ref, cur, nc, npair, R, q, &dx, &dy)) {
            const unsigned int bin = (unsigned int)ss_vote_bin(R, dx, dy);
            key = ((unsigned long long)ss_vote_window(H, R, dx, dy) << 32) | (0xFFFFFFFFu - bin);
        }
        warp_max_into(&best_key, key);
    }
    __syncthreads();
    const int best = best_key ? (int)(best_key >> 32) : 0;
    const unsigned int bbin = 0xFFFFFFFFu - (unsigned int)(best_key & 0xFFFFFFFFu);
    const int bx = best_key ? (int)(bbin % side) - R : 0, by = best_key ? (int)(bbin / side) - R : 0;
    for (int r = 0, q = threadIdx.x; r < rounds; r++, q += blockDim.x) {
        int dx, dy;
        unsigned long long sc = 0ull;
        if (vote_pair(ref, cur, nc, npair, R, q, &dx, &dy) &&
            max(abs(dx - bx), abs(dy - by)) >= 3)
            sc = (unsigned long long)ss_vote_window(H, R, dx, dy);
        warp_max_into(&second_s, sc);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        v->n_votes = best;
        v->n_second = (int)second_s;
        v->why = ss_vote_test(best, (int)second_s, (long)votes_s, R, p->vote_ambiguity,
                              &v->expected);
        if (v->why == SS_VW_OK) {
            ss_vote_place(H, R, bx, by, best, &v->dx, &v->dy);
            v->ok = 1;
            v->rdx = v->dx;
            v->rdy = v->dy;
        }
    }
    if (small)
        return;
    __syncthreads();
    /* leave the global histogram as it was found: all zeros */
    for (int q = threadIdx.x; q < npair; q += blockDim.x) {
        int dx, dy;
        if (vote_pair(ref, cur, nc, npair, R, q, &dx, &dy))
            hist[ss_vote_bin(R, dx, dy)] = 0;
    }
}

} // namespace

extern "C" cudaError_t cu_top_peaks(const ss_peak_t *peaks, unsigned int *count, int w,
                                    ss_peak_t *top, int *ntop, cudaStream_t s)
{
    cu_launch(k_top_peaks, 1, VOTE_THREADS, 0, s, peaks, count, SS_COARSE_PEAK_CAP, w, top, ntop);
    return cudaGetLastError();
}

extern "C" cudaError_t cu_vote(const cu_params_t *p, const ss_peak_t *ref, const int *nr,
                               const ss_peak_t *cur, const int *nc, int *hist, cu_results_t *res,
                               cudaStream_t s)
{
    cu_launch(k_vote, 1, VOTE_THREADS, 0, s, p, ref, nr, cur, nc, hist, res);
    return cudaGetLastError();
}
