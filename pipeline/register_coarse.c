/*
 * register_coarse.c — ALGORITHM.md §2a on the CPU: 2×2 binning and the
 * block-matching search for the integer shift of a frame against the
 * reference, with its failure tests (ambiguous SAD minima, too few blocks
 * agreeing).
 *
 * Definitions (block grid, noise estimate, SAD, tie-breaks, refinement)
 * are those of stages.h; a GPU version reproduces them up to the rounding
 * of double sums (the argmin and its ties included). Nothing is
 * allocated: the pyramids come from the caller, and the only scratch is a
 * few kilobytes on the stack.
 */
#include "stages.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Robust sigma from a MAD: 1.4826 = 1 / Φ⁻¹(3/4). */
#define MAD_TO_SIGMA 1.4826
/* A block is used when its variance exceeds this many noise variances. */
#define BLOCK_VAR_NOISE 4.0
/* E|X| = sqrt(2/π)·σ for a normal X: the SAD that noise alone leaves. */
#define SQRT_2_OVER_PI 0.7978845608028654
/* Blocks of the grid are bounded by this many (g ≤ 32 → 1024 blocks). */
#define MAX_GRID 32
#define MAX_BLOCKS (MAX_GRID * MAX_GRID)
/* The refinement compares whole levels on every REFINE_STEP-th row and
 * column: tens of thousands of pixels pick one of 9 candidates reliably,
 * and the full levels would cost more than the block search itself. */
#define REFINE_STEP 2
/* Fewer voting blocks than this: the vote means nothing. */
#define MIN_VOTES 3

/* ---- 2×2 binning -------------------------------------------------------- */

void ss_bin2(const float *in, int w, int h, float *out)
{
    const int bw = w / 2, bh = h / 2;
#pragma omp parallel for schedule(static)
    for (int y = 0; y < bh; y++) {
        const float *r0 = in + (size_t)(2 * y) * (size_t)w;
        const float *r1 = r0 + w;
        float *o = out + (size_t)y * (size_t)bw;
        for (int x = 0; x < bw; x++) {
            const float t[4] = { r0[2 * x], r0[2 * x + 1], r1[2 * x], r1[2 * x + 1] };
            float s = 0.0f;
            int n = 0;
            for (int i = 0; i < 4; i++)         /* raster order, as the contract says */
                if (isfinite(t[i])) {
                    s += t[i];
                    n++;
                }
            o[x] = n ? s / (float)n : NAN;
        }
    }
}

/* ---- exact rank selection without a copy --------------------------------- */

/* Finite floats mapped to uint32 keys with the same order (sign flip for
 * positives, bit inversion for negatives). */
static inline uint32_t float_key(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

static inline float key_float(uint32_t k)
{
    const uint32_t u = (k & 0x80000000u) ? (k & 0x7fffffffu) : ~k;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* The samples of the level-L noise estimate: horizontal neighbour
 * differences d = a(x+1,y) - a(x,y) on even rows, both finite. With
 * centred != 0 the sample is fabsf(d - centre) instead. Visits each sample
 * in raster order; returns it through *v and 1, or 0 for a skipped pair. */
static inline int diff_sample(const float *row, int x, int centred, float centre, float *v)
{
    const float a = row[x], b = row[x + 1];
    if (!isfinite(a) || !isfinite(b))
        return 0;
    const float d = b - a;
    *v = centred ? fabsf(d - centre) : d;
    return 1;
}

/* Radix selection in three passes (11 + 11 + 10 key bits): the sample of
 * rank `rank` (0-based, ascending) without copying the samples anywhere.
 * Exact, hence identical to sorting and indexing. */
#define RADIX_BINS 2048
static float select_diff(const float *a, int w, int h, int centred, float centre, long rank)
{
    static const int shift[3] = { 21, 10, 0 };
    static const uint32_t mask[3] = { 0x7ffu, 0x7ffu, 0x3ffu };
    uint32_t prefix = 0, prefix_mask = 0;
    for (int pass = 0; pass < 3; pass++) {
        long hist[RADIX_BINS];
        memset(hist, 0, sizeof hist);
        for (int y = 0; y < h; y += 2) {
            const float *row = a + (size_t)y * (size_t)w;
            for (int x = 0; x + 1 < w; x++) {
                float v;
                if (!diff_sample(row, x, centred, centre, &v))
                    continue;
                const uint32_t k = float_key(v);
                if ((k & prefix_mask) == prefix)
                    hist[(k >> shift[pass]) & mask[pass]]++;
            }
        }
        uint32_t bin = 0;
        while (rank >= hist[bin]) {
            rank -= hist[bin];
            bin++;
        }
        prefix |= bin << shift[pass];
        prefix_mask |= mask[pass] << shift[pass];
    }
    return key_float(prefix);
}

/* Robust noise of a level: 1.4826·MAD(d)/√2 over the samples above, with
 * lower medians (rank floor((n-1)/2)) and |d - m| in float. NaN when
 * there is no sample. */
static double level_noise(const float *a, int w, int h)
{
    long n = 0;
    for (int y = 0; y < h; y += 2) {
        const float *row = a + (size_t)y * (size_t)w;
        for (int x = 0; x + 1 < w; x++)
            n += isfinite(row[x]) && isfinite(row[x + 1]);
    }
    if (n == 0)
        return NAN;
    const float m = select_diff(a, w, h, 0, 0.0f, (n - 1) / 2);
    const float mad = select_diff(a, w, h, 1, m, (n - 1) / 2);
    return MAD_TO_SIGMA * (double)mad / sqrt(2.0);
}

/* ---- block matching ------------------------------------------------------ */

/* Population variance (÷ count) of the finite pixels of a B×B block with
 * origin (x0, y0), in double; -1 when it has no finite pixel. */
static double block_variance(const float *a, int w, int x0, int y0, int B)
{
    double s = 0.0, s2 = 0.0;
    long n = 0;
    for (int y = y0; y < y0 + B; y++)
        for (int x = x0; x < x0 + B; x++) {
            const float v = a[(size_t)y * (size_t)w + (size_t)x];
            if (isfinite(v)) {
                s += v;
                s2 += (double)v * v;
                n++;
            }
        }
    if (n == 0)
        return -1.0;
    const double mean = s / (double)n;
    return s2 / (double)n - mean * mean;
}

/* SAD of one block (origin x0, y0, size B) of the reference at
 * displacement (dx, dy): mean |ref(x) - cur(x - d)| over the block pixels
 * where both are finite and x - d lies inside the frame; +inf when fewer
 * than half are. The block is fixed in the reference and the frame's window
 * slides, so that the reference's structure (which is what made the block
 * "used") takes part in every candidate: with the roles the other way round
 * a window that slides off a lone star matches empty sky to empty sky. */
static double block_sad(const float *ref, const float *cur, int w, int h, int x0, int y0,
                        int B, int dx, int dy)
{
    /* The pixels that pair up: x - d inside the level. (The block grid
     * keeps the whole window inside; the clipping is for safety only.) */
    const int xa = SS_MAX(x0, dx), xb = SS_MIN(x0 + B, w + dx);
    const int ya = SS_MAX(y0, dy), yb = SS_MIN(y0 + B, h + dy);
    double s = 0.0;
    long n = 0;
    for (int y = ya; y < yb; y++) {
        const float *r = ref + (size_t)y * (size_t)w;
        const float *c = cur + (size_t)(y - dy) * (size_t)w - dx;
        double srow = 0.0;
        int nrow = 0;
        /* Branch-free so that it vectorises; |v| <= FLT_MAX is "finite". */
#pragma omp simd reduction(+ : srow, nrow)
        for (int x = xa; x < xb; x++) {
            const int ok = fabsf(r[x]) <= FLT_MAX && fabsf(c[x]) <= FLT_MAX;
            srow += ok ? fabs((double)r[x] - (double)c[x]) : 0.0;
            nrow += ok;
        }
        s += srow;
        n += nrow;
    }
    return 2 * n < (long)B * B ? INFINITY : s / (double)n;
}

/* Mean absolute difference over the whole level at displacement (dx, dy),
 * every `step`-th row and column (from 0); +inf when no pixel pair is
 * valid. Summed in raster order, so the result is deterministic. */
static double frame_mad(const float *ref, const float *cur, int w, int h, int step, int dx,
                        int dy)
{
    /* x + d inside the level; the first x on the sampling grid (a
     * multiple of step) at or after xa. */
    const int xa0 = SS_MAX(0, -dx), xb = SS_MIN(w, w - dx);
    const int xa = (xa0 + step - 1) / step * step;
    double s = 0.0;
    long n = 0;
    for (int y = 0; y < h; y += step) {
        const int ry = y + dy;
        if (ry < 0 || ry >= h)
            continue;
        const float *c = cur + (size_t)y * (size_t)w;
        const float *r = ref + (size_t)ry * (size_t)w + dx;
        double srow = 0.0;
        long nrow = 0;
#pragma omp simd reduction(+ : srow, nrow)
        for (int x = xa; x < xb; x += step) {
            const int ok = fabsf(c[x]) <= FLT_MAX && fabsf(r[x]) <= FLT_MAX;
            srow += ok ? fabs((double)c[x] - (double)r[x]) : 0.0;
            nrow += ok;
        }
        s += srow;
        n += nrow;
    }
    return n ? s / (double)n : INFINITY;
}

/* The candidates kept while searching a block: the smallest SADs in
 * ascending order (equal values in visiting order). At most 8 candidates
 * lie within Chebyshev distance 1 of the best, so the 10 smallest always
 * hold the best and its runner-up at distance >= 2 (when one exists), and
 * the search needs no (2R+1)² surface in memory. */
#define KEEP_BEST 10
typedef struct cand {
    double sad;
    int dx, dy;
} cand_t;

/* The full search for one block. */
static void search_block(const float *ref, const float *cur, int w, int h, int x0, int y0,
                         int B, int R, ss_block_match_t *res)
{
    cand_t keep[KEEP_BEST] = { { 0.0, 0, 0 } };
    int nk = 0;
    for (int dy = -R; dy <= R; dy++)            /* dy outer, dx inner: the visiting */
        for (int dx = -R; dx <= R; dx++) {      /* order settles ties (smallest dy, dx) */
            const double v = block_sad(ref, cur, w, h, x0, y0, B, dx, dy);
            if (nk == KEEP_BEST && !(v < keep[nk - 1].sad))
                continue;
            int k = nk < KEEP_BEST ? nk++ : nk - 1;
            while (k > 0 && v < keep[k - 1].sad) {  /* strict: equal values stay behind */
                keep[k] = keep[k - 1];
                k--;
            }
            keep[k] = (cand_t){ v, dx, dy };
        }
    const double best = keep[0].sad;
    double second = INFINITY;
    for (int k = 1; k < nk; k++)
        if (SS_MAX(abs(keep[k].dx - keep[0].dx), abs(keep[k].dy - keep[0].dy)) >= 2) {
            second = keep[k].sad;
            break;
        }
    res->dx = keep[0].dx;
    res->dy = keep[0].dy;
    res->best = best;
    res->second = second;
}

/* Lower median of n ints (n ≤ MAX_BLOCKS), by insertion sort of a copy. */
static int lower_median(const int *v, int n)
{
    int s[MAX_BLOCKS];
    for (int i = 0; i < n; i++) {
        int k = i;
        while (k > 0 && s[k - 1] > v[i]) {
            s[k] = s[k - 1];
            k--;
        }
        s[k] = v[i];
    }
    return s[(n - 1) / 2];
}

void ss_coarse_vote(const ss_block_match_t *blocks, int n, double noise_ref, double noise_cur,
                    double ambiguity, ss_coarse_t *out)
{
    /* The SAD of a perfect match: the difference of two noises. */
    double floor_sad = SQRT_2_OVER_PI * sqrt(noise_ref * noise_ref + noise_cur * noise_cur);
    if (!isfinite(floor_sad))
        floor_sad = 0.0;
    int vx[MAX_BLOCKS], vy[MAX_BLOCKS], nv = 0;
    n = SS_MIN(n, MAX_BLOCKS);
    for (int b = 0; b < n; b++) {
        if (!blocks[b].used)
            continue;
        out->n_blocks++;
        /* Distinct when the best match's excess over the noise floor is
         * below `ambiguity` times the runner-up's: a plain best/second
         * ratio would call every sparse or faint field ambiguous, because
         * the noise floor dominates both SADs there. No excess at the
         * runner-up: nothing to match, ambiguous. A +inf best (nothing
         * overlapped) is ambiguous. */
        const double ex_best = SS_MAX(blocks[b].best - floor_sad, 0.0);
        const double ex_second = blocks[b].second - floor_sad;
        if (!(ex_second > 0.0 && ex_best < ambiguity * ex_second)) {
            out->n_ambiguous++;
            continue;
        }
        vx[nv] = blocks[b].dx;
        vy[nv] = blocks[b].dy;
        nv++;
    }
    if (nv < MIN_VOTES) {
        snprintf(out->why, sizeof out->why,
                 "no distinct match: %d of %d structured blocks vote (%d ambiguous)", nv,
                 out->n_blocks, out->n_ambiguous);
        return;
    }
    const int dx = lower_median(vx, nv), dy = lower_median(vy, nv);
    for (int i = 0; i < nv; i++)
        out->n_agree += abs(vx[i] - dx) <= 1 && abs(vy[i] - dy) <= 1;
    /* At least MIN_VOTES and half of the voters must agree: blocks that
     * vote at random (against a blank frame a SAD surface still has a
     * minimum, where the frame's noise happens to fit best) rarely land
     * within a pixel of each other. */
    if (out->n_agree < MIN_VOTES || 2 * out->n_agree < nv) {
        snprintf(out->why, sizeof out->why, "blocks disagree: %d of %d within 1 px of (%d,%d)",
                 out->n_agree, nv, dx, dy);
        return;
    }
    out->dx = dx;
    out->dy = dy;
    out->ok = 1;
}

static void fail(ss_coarse_t *out, const char *why)
{
    out->ok = 0;
    ss_strlcpy(out->why, why, sizeof out->why);
}

void ss_register_coarse(const ss_pyramid_t *ref, const ss_pyramid_t *cur,
                        const ss_pipeline_cfg_t *c, ss_coarse_t *out)
{
    memset(out, 0, sizeof *out);
    const int L = ref->levels;
    if (L != cur->levels || L < 0 || L > SS_MAX_LEVELS) {
        fail(out, "pyramids disagree in depth");
        return;
    }
    for (int l = 0; l <= L; l++)
        if (ref->w[l] != cur->w[l] || ref->h[l] != cur->h[l]) {
            fail(out, "pyramids disagree in size");
            return;
        }
    const int B = c->reg_block, R = c->reg_search;
    int g = (int)floor(sqrt((double)c->reg_blocks));
    g = SS_CLAMP(g, 1, MAX_GRID);
    if (B < 1 || R < 1) {
        fail(out, "bad block size or search range");
        return;
    }
    const int w = ref->w[L], h = ref->h[L];
    const float *rl = ref->lvl[L], *cl = cur->lvl[L];

    /* Block centres: the middles of g equal cells of [lo, hi) on each axis,
     * c_i = lo + ((2i+1)·(hi-lo)) / (2g) (integer division); the block
     * covers [c - B/2, c - B/2 + B). */
    const int lox = R + B / 2, hix = w - R - B / 2;
    const int loy = R + B / 2, hiy = h - R - B / 2;
    if (hix <= lox || hiy <= loy) {
        fail(out, "frame too small for the block search");
        return;
    }
    const double noise = level_noise(rl, w, h);
    const double var_min = BLOCK_VAR_NOISE * noise * noise;
    const double noise_cur = level_noise(cl, w, h);

    ss_block_match_t res[MAX_BLOCKS];
    const int nb = g * g;
#pragma omp parallel for schedule(dynamic, 1)
    for (int b = 0; b < nb; b++) {
        const int bx = b % g, by = b / g;
        const int cx = lox + ((2 * bx + 1) * (hix - lox)) / (2 * g);
        const int cy = loy + ((2 * by + 1) * (hiy - loy)) / (2 * g);
        const int x0 = cx - B / 2, y0 = cy - B / 2;
        memset(&res[b], 0, sizeof res[b]);
        /* var > 4n² is false for a NaN noise: no block is used then. */
        res[b].used = block_variance(rl, w, x0, y0, B) > var_min;
        if (res[b].used)
            search_block(rl, cl, w, h, x0, y0, B, R, &res[b]);
    }
    ss_coarse_vote(res, nb, noise, noise_cur, c->reg_ambiguity, out);
    if (!out->ok)
        return;
    int dx = out->dx, dy = out->dy;
    out->ok = 0;

    /* Refinement: at each finer level the shift doubles and the best of the
     * 3×3 candidates around it wins by the whole-frame mean absolute
     * difference (ties: smallest dy, then dx). */
    for (int l = L - 1; l >= 0; l--) {
        const int step = REFINE_STEP;
        double m[9];
        dx *= 2;
        dy *= 2;
#pragma omp parallel for schedule(dynamic, 1)
        for (int k = 0; k < 9; k++)
            m[k] = frame_mad(ref->lvl[l], cur->lvl[l], ref->w[l], ref->h[l], step,
                             dx + k % 3 - 1, dy + k / 3 - 1);
        int bk = 0;
        for (int k = 1; k < 9; k++)     /* k runs dy-major: the first minimum wins ties */
            if (m[k] < m[bk])
                bk = k;
        dx += bk % 3 - 1;
        dy += bk / 3 - 1;
    }
    out->ok = 1;
    out->dx = dx;
    out->dy = dy;
}
