/*
 * whiten.c — prediction of the current frame from the shifted history and
 * the residual (ALGORITHM.md §3), and the moments of the `lsq` mode.
 *
 * Both are one pass over the history. Rows run in parallel; within a row
 * the pixels go in chunks of SS_WHITEN_CHUNK, and for each chunk the
 * history frames are visited in order (k ascending), each contributing a
 * contiguous run of pixels. Every pixel still sees its k in ascending
 * order — the order stages.h fixes — while the memory access is a few
 * sequential streams and the inner loop over x vectorises. Nothing is
 * allocated: the chunk accumulators live on the stack.
 *
 * Pixels where some history frame is invalid (or outside the frame) are
 * re-weighted in poly mode (ss_reweight_t): a second, per-pixel path that
 * reads the n values again, solves the subset system (reweight_core.h)
 * or takes its weights from a per-thread cache of invalid patterns, and
 * sums over the valid frames. It runs only where the fast path left NaN
 * at a valid current pixel.
 */
#include "stages.h"

#include <math.h>
#include <string.h>

/* Pixels per chunk: the double accumulator (4 KiB) stays in L1. */
#define SS_WHITEN_CHUNK 512

/* Pixels per lsq chunk: n rows of this many doubles are gathered. */
#define SS_LSQ_CHUNK 128

/* Rows of one band of the lsq moments: the unit whose partial sums are
 * combined in a fixed order, so the result does not depend on threads. */
#define SS_LSQ_BAND 16

/* The columns x for which every x + ix_k lies in [0, w): [*x0, *x1).
 * Returns 0 when row y + iy_k leaves [0, h) for some k (the whole row is
 * invalid) or no column survives. */
static int valid_span(const ss_hist_view_t *hv, int n, int w, int h, int y, int *x0, int *x1)
{
    int lo = 0, hi = w;
    for (int k = 0; k < n; k++) {
        const int yy = y + hv[k].iy;
        if (yy < 0 || yy >= h)
            return 0;
        lo = SS_MAX(lo, -hv[k].ix);
        hi = SS_MIN(hi, w - hv[k].ix);
    }
    *x0 = lo;
    *x1 = hi;
    return lo < hi;
}

/* acc[j] += a·y_k(x0 + j), j < len, for history frame k read at its
 * offset. An integer sentinel sets bad[j] instead of adding a NaN (the
 * pixel is NaN in the end either way: NaN times any weight, 0 included,
 * poisons a sum, as the contract asks), which keeps the loops free of
 * branches so that they vectorise. Float history carries its NaN in the
 * sum itself. Specialised per type: no switch in the inner loop. */
static void acc_row(const ss_hist_view_t *v, double a, int w, int y, int x0, int len, double *acc,
                    uint8_t *bad)
{
    const size_t off = (size_t)(y + v->iy) * (size_t)w + (size_t)(x0 + v->ix);
    switch (v->dtype) {
    case SS_DT_U8: {
        const uint8_t *s = (const uint8_t *)v->pixels + off;
#pragma omp simd
        for (int j = 0; j < len; j++) {
            acc[j] += a * (double)s[j];
            bad[j] |= s[j] == UINT8_MAX;
        }
        break;
    }
    case SS_DT_U16: {
        const uint16_t *s = (const uint16_t *)v->pixels + off;
#pragma omp simd
        for (int j = 0; j < len; j++) {
            acc[j] += a * (double)s[j];
            bad[j] |= s[j] == UINT16_MAX;
        }
        break;
    }
    case SS_DT_I16: {
        const int16_t *s = (const int16_t *)v->pixels + off;
#pragma omp simd
        for (int j = 0; j < len; j++) {
            acc[j] += a * (double)s[j];
            bad[j] |= s[j] == INT16_MAX;
        }
        break;
    }
    default: {
        const float *s = (const float *)v->pixels + off;
#pragma omp simd
        for (int j = 0; j < len; j++)
            acc[j] += a * (double)s[j];
        break;
    }
    }
}

/* ---- re-weighting at pixels with invalid history (poly mode) ---------- */

/* Per-thread cache of subset weights, keyed by the pattern of invalid
 * frames (a bitset over k). Why it pays: the patterns repeat. A static bad
 * pixel invalidates, at the output pixels b - i_k, exactly the frames
 * that share an integer offset i_k — the same few sets at every bad
 * pixel; a cosmic-ray hit or a pixel flagged in one frame gives the
 * single-frame patterns (n of them); along the frame's border band the
 * set of frames pushed out is the same down a column or along a row.
 * Sets of RW_WAYS slots, the set chosen by a hash, round-robin within it;
 * as many sets (a power of two, up to RW_MAX_SETS) as RW_CACHE_BYTES of
 * weights allow: 64 sets at n = 20 (measured on a 1024² field with 0.5 %
 * bad pixels and a few px of jitter: 3 % of the lookups miss, against 13 %
 * with 8 sets), 8 at n = 256. The weights live on each thread's stack. */
#define RW_WAYS 4
#define RW_MAX_SETS 64
#define RW_CACHE_BYTES 65536
#define RW_KEYW ((SS_MAX_HISTORY + 63) / 64)

typedef struct rw_slot {
    uint64_t key[RW_KEYW];
    int state;                  /* 0 empty, 1 weights in wts, -1 no prediction */
} rw_slot_t;

typedef struct rw_cache {
    const ss_reweight_t *rw;
    int n;
    unsigned sets;              /* a power of two */
    rw_slot_t slot[RW_MAX_SETS * RW_WAYS];
    unsigned next[RW_MAX_SETS]; /* round-robin victim of each set */
    double *wts;                /* sets × RW_WAYS × n weights */
} rw_cache_t;

/* Sets for n frames (see above). */
static unsigned rw_sets(int n)
{
    const size_t slots = RW_CACHE_BYTES / (sizeof(double) * (size_t)SS_MAX(n, 1));
    unsigned sets = 1;
    while (sets < RW_MAX_SETS && (size_t)sets * 2 * RW_WAYS <= slots)
        sets *= 2;
    return sets;
}

static unsigned rw_hash(const uint64_t *key, unsigned sets)
{
    uint64_t h = 0;
    for (int i = 0; i < RW_KEYW; i++)
        h = (h ^ key[i]) * 0x9e3779b97f4a7c15ull;
    return (unsigned)(h >> 32) & (sets - 1);
}

/* The subset weights for the invalid pattern key, or NULL when the pixel
 * cannot be predicted (ss_reweight_subset failed). */
static const double *rw_weights(rw_cache_t *c, const uint64_t *key)
{
    const unsigned set = rw_hash(key, c->sets);
    rw_slot_t *s = &c->slot[set * RW_WAYS];
    for (int wy = 0; wy < RW_WAYS; wy++)
        if (s[wy].state != 0 && memcmp(s[wy].key, key, sizeof s[wy].key) == 0)
            return s[wy].state > 0 ? c->wts + (size_t)(set * RW_WAYS + wy) * c->n : NULL;
    const unsigned wy = c->next[set]++ % RW_WAYS;
    double *a = c->wts + (size_t)(set * RW_WAYS + wy) * c->n;
    uint8_t invalid[SS_MAX_HISTORY];
    for (int k = 0; k < c->n; k++)
        invalid[k] = (uint8_t)((key[k >> 6] >> (k & 63)) & 1u);
    memcpy(s[wy].key, key, sizeof s[wy].key);
    s[wy].state = ss_reweight_subset(c->rw, invalid, a) == 0 ? 1 : -1;
    return s[wy].state > 0 ? a : NULL;
}

/* P at x of the row whose history rows are rows[k] (y_k(x) = rows[k][x +
 * ix_k], NULL when that row is outside the frame) from the valid frames
 * alone (stages.h, ss_whiten); NaN when too few are valid or the subset
 * system is singular. */
static float reweighted(const ss_hist_view_t *hv, const void *const *rows, int n, int w, int x,
                        rw_cache_t *c)
{
    double yv[SS_MAX_HISTORY];
    uint64_t key[RW_KEYW] = { 0 };
    int nbad = 0;
    for (int k = 0; k < n; k++) {
        const int xx = x + hv[k].ix;
        float v = NAN;
        if (rows[k] && xx >= 0 && xx < w)
            v = ss_hist_value(rows[k], hv[k].dtype, (size_t)xx);
        const int bad = isnan(v);
        yv[k] = bad ? 0.0 : v;      /* a_k = 0 there: the term adds an exact zero */
        key[k >> 6] |= (uint64_t)bad << (k & 63);
        nbad += bad;
    }
    if (n - nbad < c->rw->min_valid)
        return NAN;
    const double *a = rw_weights(c, key);
    if (!a)
        return NAN;
    double acc = 0.0;
    for (int k = 0; k < n; k++)
        acc += a[k] * yv[k];
    return (float)acc;
}

/* One pixel the plain sum could not predict: re-weighted when that is on
 * and the current pixel is valid, else invalid. */
static void finish_pixel(const float *cur, const ss_hist_view_t *hv, const void *const *rows, int n,
                         int w, int x, int y, rw_cache_t *c, float *P, float *r)
{
    const size_t i = (size_t)y * (size_t)w + (size_t)x;
    float p = NAN;
    if (c && !isnan(cur[i]))
        p = reweighted(hv, rows, n, w, x, c);
    P[i] = p;
    r[i] = isnan(p) ? NAN : cur[i] - p;
}

/* Rows in parallel; each thread keeps its own cache. The fast path (every
 * y_k valid) is the plain chunked sum; the pixels it leaves NaN while the
 * current pixel is valid are finished one by one afterwards. */
void ss_whiten(const float *cur, const ss_hist_view_t *hv, const double *a, int n, int w, int h,
               const ss_reweight_t *rw, float *P, float *r)
{
    const int rew = rw != NULL && n >= 1 && rw->n == n;
    const unsigned sets = rw_sets(n);
    const size_t nwts = rew ? (size_t)sets * RW_WAYS * (size_t)n : 1;
#pragma omp parallel
    {
        double wts[nwts];
        rw_cache_t cache;
        memset(&cache, 0, sizeof cache);
        cache.rw = rw;
        cache.n = n;
        cache.sets = sets;
        cache.wts = wts;
        rw_cache_t *c = rew ? &cache : NULL;
#pragma omp for schedule(static)
        for (int y = 0; y < h; y++) {
            const size_t row = (size_t)y * (size_t)w;
            int x0 = 0, x1 = 0;
            if (n < 1 || !valid_span(hv, n, w, h, y, &x0, &x1))
                x0 = x1 = w;                /* no column sees every frame */
            const void *rows[SS_MAX_HISTORY];
            for (int k = 0; c && k < n; k++) {
                const int yy = y + hv[k].iy;
                rows[k] = yy < 0 || yy >= h ? NULL
                          : (const char *)hv[k].pixels +
                                (size_t)yy * (size_t)w * ss_dtype_size(hv[k].dtype);
            }
            for (int x = 0; x < x0; x++)
                finish_pixel(cur, hv, rows, n, w, x, y, c, P, r);
            for (int x = x1; x < w; x++)
                finish_pixel(cur, hv, rows, n, w, x, y, c, P, r);
            double acc[SS_WHITEN_CHUNK];
            uint8_t bad[SS_WHITEN_CHUNK];
            for (int c0 = x0; c0 < x1; c0 += SS_WHITEN_CHUNK) {
                const int len = SS_MIN(SS_WHITEN_CHUNK, x1 - c0);
                for (int j = 0; j < len; j++) {
                    acc[j] = 0.0;
                    bad[j] = 0;
                }
                for (int k = 0; k < n; k++)
                    acc_row(&hv[k], a[k], w, y, c0, len, acc, bad);
                const float *cr = cur + row + c0;
                float *pr = P + row + c0, *rr = r + row + c0;
                for (int j = 0; j < len; j++) {
                    const float p = (float)acc[j];
                    const int invalid = bad[j] || isnan(cr[j]) || isnan(p);
                    pr[j] = invalid ? NAN : p;
                    rr[j] = invalid ? NAN : cr[j] - p;
                }
                if (c)
                    for (int j = 0; j < len; j++)
                        if (isnan(rr[j]) && !isnan(cr[j]))
                            finish_pixel(cur, hv, rows, n, w, c0 + j, y, c, P, r);
            }
        }
    }
}

/* One history row chunk as double, NaN for invalid pixels. */
static void load_row(const ss_hist_view_t *v, int w, int y, int x0, int len, double *dst)
{
    uint8_t bad[SS_LSQ_CHUNK];
    for (int j = 0; j < len; j++) {
        dst[j] = 0.0;
        bad[j] = 0;
    }
    acc_row(v, 1.0, w, y, x0, len, dst, bad);
    for (int j = 0; j < len; j++)
        if (bad[j])
            dst[j] = NAN;
}


/* Σ_j u[j]·v[j] with four interleaved partial sums (fixed order, so the
 * compiler may vectorise it and the result is still reproducible). */
static double dot4(const double *u, const double *v, int len)
{
    double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
    int j = 0;
    for (; j + 4 <= len; j += 4) {
        s0 += u[j] * v[j];
        s1 += u[j + 1] * v[j + 1];
        s2 += u[j + 2] * v[j + 2];
        s3 += u[j + 3] * v[j + 3];
    }
    for (; j < len; j++)
        s0 += u[j] * v[j];
    return (s0 + s1) + (s2 + s3);
}

/* The partial moments of rows [y0, y1) into acc: R (n·n, upper triangle
 * filled) then p (n). Y is scratch for (n+1)·SS_LSQ_CHUNK doubles. */
static void lsq_band(const float *cur, const ss_hist_view_t *hv, int n, int w, int h, int y0,
                     int y1, double *acc, double *Y)
{
    double *cy = Y + (size_t)n * SS_LSQ_CHUNK;
    for (int y = y0; y < y1; y++) {
        int x0, x1;
        if (!valid_span(hv, n, w, h, y, &x0, &x1))
            continue;
        for (int c0 = x0; c0 < x1; c0 += SS_LSQ_CHUNK) {
            const int len = SS_MIN(SS_LSQ_CHUNK, x1 - c0);
            const float *cr = cur + (size_t)y * (size_t)w + c0;
            for (int j = 0; j < len; j++)
                cy[j] = (double)cr[j];
            for (int k = 0; k < n; k++)
                load_row(&hv[k], w, y, c0, len, Y + (size_t)k * SS_LSQ_CHUNK);
            /* a pixel takes part only when cur and every y_k are valid:
             * zero the whole column otherwise (it then adds exact zeros) */
            for (int j = 0; j < len; j++) {
                int bad = isnan(cy[j]);
                for (int k = 0; k < n && !bad; k++)
                    bad = isnan(Y[(size_t)k * SS_LSQ_CHUNK + j]);
                if (bad) {
                    cy[j] = 0.0;
                    for (int k = 0; k < n; k++)
                        Y[(size_t)k * SS_LSQ_CHUNK + j] = 0.0;
                }
            }
            for (int k = 0; k < n; k++) {
                const double *yk = Y + (size_t)k * SS_LSQ_CHUNK;
                for (int l = k; l < n; l++)
                    acc[k * n + l] += dot4(yk, Y + (size_t)l * SS_LSQ_CHUNK, len);
                acc[(size_t)n * n + k] += dot4(cy, yk, len);
            }
        }
    }
}

void ss_lsq_moments(const float *cur, const ss_hist_view_t *hv, int n, int w, int h, double *R,
                    double *p)
{
    if (n < 1)
        return;
    const size_t nacc = (size_t)n * (size_t)n + (size_t)n;
    memset(R, 0, (size_t)n * (size_t)n * sizeof(double));
    memset(p, 0, (size_t)n * sizeof(double));
    const int nbands = (h + SS_LSQ_BAND - 1) / SS_LSQ_BAND;
    /* Bands are fixed in size; each thread sums one band at a time and the
     * band partials are added to R, p in band order (ordered), so the sums
     * come out the same for any number of threads. */
#pragma omp parallel
    {
        double acc[nacc];
        double Y[(size_t)(n + 1) * SS_LSQ_CHUNK];
#pragma omp for schedule(static, 1) ordered
        for (int b = 0; b < nbands; b++) {
            memset(acc, 0, sizeof acc);
            lsq_band(cur, hv, n, w, h, b * SS_LSQ_BAND, SS_MIN(h, (b + 1) * SS_LSQ_BAND), acc, Y);
#pragma omp ordered
            {
                for (int k = 0; k < n; k++) {
                    for (int l = k; l < n; l++)
                        R[k * n + l] += acc[k * n + l];
                    p[k] += acc[(size_t)n * n + k];
                }
            }
        }
    }
    for (int k = 0; k < n; k++)
        for (int l = 0; l < k; l++)
            R[k * n + l] = R[l * n + k];
}
