/*
 * register_coarse.c — ALGORITHM.md §2a on the CPU: the registration input
 * (the filtered frame minus its local mean), 2×2 binning, block placement
 * on the reference, the block-matching search by normalised correlation,
 * the vote with its failure tests, and the refinement down the pyramid.
 *
 * Definitions (high-pass, block grid and placement, noise estimate, the
 * correlation cost, tie-breaks, refinement) are those of stages.h; a GPU
 * version reproduces them up to the rounding of parallel double sums (the
 * per-candidate sums, the argmin and its ties included). Nothing is
 * allocated: the pyramids come from the caller, and the only scratch is a
 * few kilobytes on the stack.
 */
#include "stages.h"
#include "hipass_core.h"
#include "vote_core.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Robust sigma from a MAD: 1.4826 = 1 / Φ⁻¹(3/4). */
#define MAD_TO_SIGMA 1.4826
/* The refinement correlates whole levels on every pixel: sampling every
 * 2nd row and column (as once) drops the undersampled stars that sit on
 * odd pixels, and on a sparse field the rest picked a neighbour of the
 * true shift (measured: a static field of 30 stars, σ 0.9 px, refined to 1
 * px off at the first binned level). */
#define REFINE_STEP 1

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

/* ---- the registration input: filtered frame minus its local mean -------- */

void ss_hipass(const float *in, int w, int h, int r, float *out, float *scratch)
{
    float *hs = scratch, *hc = scratch + (size_t)w * (size_t)h;
    if (r < 0)
        r = 0;
    const int nys = (h + SS_HP_SEG - 1) / SS_HP_SEG;
#pragma omp parallel for schedule(static)
    for (int y = 0; y < h; y++) {
        const float *row = in + (size_t)y * (size_t)w;
        for (int x = 0; x < w; x++)
            ss_hp_row_at(row, w, r, x, hs + (size_t)y * (size_t)w + x,
                         hc + (size_t)y * (size_t)w + x);
    }
#pragma omp parallel for schedule(static)
    for (int k = 0; k < nys; k++) {
        const int y0 = k * SS_HP_SEG, y1 = SS_MIN(y0 + SS_HP_SEG, h);
        for (int x = 0; x < w; x++)
            ss_hp_col_seg(in, hs, hc, w, h, r, x, y0, y1, out);
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

double ss_diff_noise(const float *a, int w, int h)
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

/* ---- star peaks ------------------------------------------------------------ */

int ss_is_peak(const float *a, int w, int h, int x, int y, float level)
{
    if (x < 1 || y < 1 || x > w - 2 || y > h - 2)
        return 0;
    const size_t i = (size_t)y * (size_t)w + (size_t)x;
    const float v = a[i];
    if (!(v > level))               /* false for NaN */
        return 0;
    for (int dy = -1; dy <= 1; dy++)
        for (int dx = -1; dx <= 1; dx++) {
            if (dx == 0 && dy == 0)
                continue;
            const float q = a[i + (size_t)((long)dy * w + dx)];
            const int later = dy > 0 || (dy == 0 && dx > 0);
            if (q > v || (q == v && !later))    /* a NaN neighbour compares false */
                return 0;
        }
    return 1;
}

int ss_find_peaks(const float *a, int w, int h, double noise, ss_peak_t *out, int cap)
{
    if (!isfinite(noise))
        return 0;
    const float level = (float)(SS_COARSE_PEAK * noise);
    int m = 0;
    for (int y = 1; y < h - 1; y++)
        for (int x = 1; x < w - 1; x++)
            if (ss_is_peak(a, w, h, x, y, level)) {
                if (m < cap)
                    out[m] = (ss_peak_t){ a[(size_t)y * (size_t)w + (size_t)x], x, y };
                m++;
            }
    return m;
}

/* Value descending, then raster order (y, then x, ascending). */
static int peak_cmp(const void *pa, const void *pb)
{
    const ss_peak_t *a = pa, *b = pb;
    if (a->v != b->v)
        return a->v > b->v ? -1 : 1;
    if (a->y != b->y)
        return a->y < b->y ? -1 : 1;
    return (a->x > b->x) - (a->x < b->x);
}

static void peak_swap(ss_peak_t *a, ss_peak_t *b)
{
    const ss_peak_t t = *a;
    *a = *b;
    *b = t;
}

/* Partition p[lo..hi] around the median of three (the order of peak_cmp);
 * returns the pivot's final index. */
static int peak_partition(ss_peak_t *p, int lo, int hi)
{
    const int mid = lo + (hi - lo) / 2;
    if (peak_cmp(&p[mid], &p[lo]) < 0)
        peak_swap(&p[mid], &p[lo]);
    if (peak_cmp(&p[hi], &p[lo]) < 0)
        peak_swap(&p[hi], &p[lo]);
    if (peak_cmp(&p[hi], &p[mid]) < 0)
        peak_swap(&p[hi], &p[mid]);
    peak_swap(&p[mid], &p[hi]);             /* the median of three as the pivot */
    int store = lo;
    for (int i = lo; i < hi; i++)
        if (peak_cmp(&p[i], &p[hi]) < 0)
            peak_swap(&p[i], &p[store++]);
    peak_swap(&p[store], &p[hi]);
    return store;
}

int ss_peaks_order(ss_peak_t *p, int m, int n)
{
    m = SS_MAX(m, 0);
    const int keep = SS_MAX(SS_MIN(m, n), 0);
    /* the keep best to the front (quickselect: a busy frame has tens of
     * thousands of peaks, and only the brightest few vote), then in order */
    int lo = 0, hi = m - 1;
    while (keep < m && lo < hi) {
        const int q = peak_partition(p, lo, hi);
        if (q == keep - 1 || q == keep)
            break;
        if (q < keep)
            lo = q + 1;
        else
            hi = q - 1;
    }
    qsort(p, (size_t)keep, sizeof p[0], peak_cmp);
    return keep;
}

/* ---- the vote -------------------------------------------------------------- */

void ss_vote_why(int code, ss_coarse_t *out)
{
    switch (code) {
    case SS_VW_FEW_STARS:
        snprintf(out->why, sizeof out->why, "too few stars: %d in the reference, %d in the frame",
                 out->n_ref, out->n_cur);
        break;
    case SS_VW_NO_MATCH:
        snprintf(out->why, sizeof out->why,
                 "no match: %d star pairs agree, random pairs give %.1f (%d and %d stars)",
                 out->n_votes, out->expected, out->n_ref, out->n_cur);
        break;
    case SS_VW_AMBIGUOUS:
        snprintf(out->why, sizeof out->why, "ambiguous: %d star pairs agree, %d elsewhere",
                 out->n_votes, out->n_second);
        break;
    default:
        out->why[0] = '\0';
        break;
    }
}

void ss_coarse_vote(const ss_peak_t *ref, int nr, const ss_peak_t *cur, int nc, int R,
                    double ambiguity, int *hist, ss_coarse_t *out)
{
    out->n_ref = nr;
    out->n_cur = nc;
    if (nr < 3 || nc < 3)
        return ss_vote_why(SS_VW_FEW_STARS, out);
    const int side = 2 * R + 1;
    memset(hist, 0, (size_t)side * (size_t)side * sizeof hist[0]);
    long votes = 0;
    for (int i = 0; i < nr; i++)
        for (int j = 0; j < nc; j++) {
            const int dx = ref[i].x - cur[j].x, dy = ref[i].y - cur[j].y;
            if (abs(dx) <= R && abs(dy) <= R) {
                hist[ss_vote_bin(R, dx, dy)]++;
                votes++;
            }
        }
    int bx = 0, by = 0, best = -1;
    for (int dy = -R; dy <= R; dy++)            /* dy outer, dx inner: ties go to the */
        for (int dx = -R; dx <= R; dx++) {      /* smallest dy, then dx */
            if (!hist[ss_vote_bin(R, dx, dy)])
                continue;
            const int sc = ss_vote_window(hist, R, dx, dy);
            if (sc > best) {
                best = sc;
                bx = dx;
                by = dy;
            }
        }
    int second = 0;
    for (int dy = -R; dy <= R; dy++)
        for (int dx = -R; dx <= R; dx++)
            if (hist[ss_vote_bin(R, dx, dy)] && SS_MAX(abs(dx - bx), abs(dy - by)) >= 3)
                second = SS_MAX(second, ss_vote_window(hist, R, dx, dy));
    out->n_votes = SS_MAX(best, 0);
    out->n_second = second;
    const int code = ss_vote_test(out->n_votes, second, votes, R, ambiguity, &out->expected);
    if (code != SS_VW_OK)
        return ss_vote_why(code, out);
    ss_vote_place(hist, R, bx, by, out->n_votes, &out->dx, &out->dy);
    out->ok = 1;
}

/* ---- refinement -------------------------------------------------------------- */

/* Mean product over the whole level at displacement (dx, dy), every
 * `step`-th row and column (from 0); -inf when no pixel pair is valid.
 * Summed in raster order, so the result is deterministic. */
static double frame_corr(const float *ref, const float *cur, int w, int h, int step, int dx,
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
            srow += ok ? (double)c[x] * (double)r[x] : 0.0;
            nrow += ok;
        }
        s += srow;
        n += nrow;
    }
    return n ? s / (double)n : -INFINITY;
}

void ss_coarse_refine(const ss_pyramid_t *ref, const ss_pyramid_t *cur, int *dx, int *dy)
{
    for (int l = ref->levels - 1; l >= 0; l--) {
        double m[9];
        *dx *= 2;
        *dy *= 2;
        const int bx = *dx, by = *dy;
#pragma omp parallel for schedule(dynamic, 1)
        for (int k = 0; k < 9; k++)
            m[k] = frame_corr(ref->lvl[l], cur->lvl[l], ref->w[l], ref->h[l], REFINE_STEP,
                              bx + k % 3 - 1, by + k / 3 - 1);
        int bk = 0;
        for (int k = 1; k < 9; k++)     /* k runs dy-major: the first maximum wins ties */
            if (m[k] > m[bk])
                bk = k;
        *dx += bk % 3 - 1;
        *dy += bk / 3 - 1;
    }
}

static void fail(ss_coarse_t *out, const char *why)
{
    out->ok = 0;
    ss_strlcpy(out->why, why, sizeof out->why);
}

void ss_register_coarse(const ss_pyramid_t *ref, const ss_pyramid_t *cur,
                        const ss_pipeline_cfg_t *c, ss_peak_t *peaks, int cap, int *hist,
                        ss_coarse_t *out)
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
    const int R = c->reg_search;
    if (R < 1 || R > SS_COARSE_MAX_R) {
        fail(out, "bad search range");
        return;
    }
    const int w = ref->w[L], h = ref->h[L];
    ss_peak_t *pr = peaks, *pc = peaks + cap;
    int nr = SS_MIN(ss_find_peaks(ref->lvl[L], w, h, ss_diff_noise(ref->lvl[L], w, h), pr, cap), cap);
    int nc = SS_MIN(ss_find_peaks(cur->lvl[L], w, h, ss_diff_noise(cur->lvl[L], w, h), pc, cap), cap);
    nr = ss_peaks_order(pr, nr, SS_COARSE_STARS);
    nc = ss_peaks_order(pc, nc, SS_COARSE_STARS);
    ss_coarse_vote(pr, nr, pc, nc, R, c->reg_ambiguity, hist, out);
    if (!out->ok)
        return;
    ss_coarse_refine(ref, cur, &out->dx, &out->dy);
}
