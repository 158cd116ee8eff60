/*
 * guided.c — residual cleanup by the guided filter (ALGORITHM.md §4) and
 * the valid-aware box mean it is built from.
 *
 * Box means. A (2r+1)² window clipped to the frame, over the finite
 * pixels only, at O(1) cost per pixel whatever r:
 *  - rows are cut into bands of fixed height (max(SS_BOX_BAND, 2r+1)
 *    rows: the cut depends on r and h only, never on the number of
 *    threads, so neither do the rounding errors); bands run in parallel;
 *  - each band keeps, per column, the running sum over the rows of the
 *    window of each row's horizontal window sum (double) and count;
 *  - moving one row down adds row y+r and removes row y-r-1; both at once
 *    as one "difference row", whose horizontal window sums come from its
 *    prefix sums: S(x) = D[min(x+r, w-1)] - D[x-r-1];
 *  - several planes that share one validity pattern go through together
 *    (the guided filter boxes four planes, then two): one count, and the
 *    prefix chains of all planes interleaved in one loop, so that the
 *    additions are not serialised on their latency.
 * Per-thread state, 2·(C+1)·w doubles, is carved from the caller's double
 * scratch; threads are limited to what fits (results never depend on it).
 */
#include "stages.h"

#include <math.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* Least band height (rows). A band starts by summing its first 2r+1
 * rows, so bands of at least 2r+1 rows keep that start-up below one
 * extra row per row. */
#define SS_BOX_BAND 64
#define SS_BOX_MAX_PLANES 4

static int max_threads(void)
{
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

static int thread_id(void)
{
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

/* Prefix sums of one "difference row" into pre (AoS: [x][0] = count,
 * [x][1 + c] = plane c): the values of row ya (added, if ya >= 0) minus
 * those of row ys (removed, if ys >= 0). A pixel counts when plane 0 is
 * finite there (the planes share their validity). */
static inline void diff_prefix(const float *const *in, int C, int w, int ya, int ys, double *pre)
{
    const int S = C + 1;
    double run[SS_BOX_MAX_PLANES + 1] = { 0 };
    const size_t oa = (size_t)(ya >= 0 ? ya : 0) * (size_t)w;
    const size_t os = (size_t)(ys >= 0 ? ys : 0) * (size_t)w;
    for (int x = 0; x < w; x++) {
        int va = 0, vs = 0;
        if (ya >= 0)
            va = isfinite(in[0][oa + x]);
        if (ys >= 0)
            vs = isfinite(in[0][os + x]);
        run[0] += (double)(va - vs);
        for (int c = 0; c < C; c++) {
            const double a = va ? (double)in[c][oa + x] : 0.0;
            const double s = vs ? (double)in[c][os + x] : 0.0;
            run[1 + c] += a - s;
        }
        for (int c = 0; c < S; c++)
            pre[(size_t)x * S + c] = run[c];
    }
}

/* acc += horizontal window sums of the prefix row pre. */
static inline void add_window(const double *pre, int C, int w, int r, double *acc)
{
    const int S = C + 1;
    for (int x = 0; x < w; x++) {
        const int hi = SS_MIN(x + r, w - 1), lo = x - r - 1;
        const double *ph = pre + (size_t)hi * S;
        double *a = acc + (size_t)x * S;
        if (lo >= 0) {
            const double *pl = pre + (size_t)lo * S;
            for (int c = 0; c < S; c++)
                a[c] += ph[c] - pl[c];
        } else {
            for (int c = 0; c < S; c++)
                a[c] += ph[c];
        }
    }
}

/* One band [y0, y1) of the box means of C planes; buf holds 2·(C+1)·w
 * doubles (running window sums, then the prefix row). */
static inline void box_band(const float *const *in, float *const *out, int C, int w, int h, int r,
                            int y0, int y1, double *buf)
{
    const int S = C + 1;
    double *acc = buf, *pre = buf + (size_t)S * (size_t)w;
    memset(acc, 0, (size_t)S * (size_t)w * sizeof(double));
    for (int y = y0; y < y1; y++) {
        if (y == y0) {
            for (int yy = SS_MAX(0, y0 - r); yy <= SS_MIN(h - 1, y0 + r); yy++) {
                diff_prefix(in, C, w, yy, -1, pre);
                add_window(pre, C, w, r, acc);
            }
        } else {
            const int ya = y + r < h ? y + r : -1, ys = y - r - 1;
            if (ya >= 0 || ys >= 0) {
                diff_prefix(in, C, w, ya, ys, pre);
                add_window(pre, C, w, r, acc);
            }
        }
        const size_t row = (size_t)y * (size_t)w;
        for (int x = 0; x < w; x++) {
            const double *a = acc + (size_t)x * S;
            for (int c = 0; c < C; c++)
                out[c][row + x] = a[0] > 0.5 ? (float)(a[1 + c] / a[0]) : NAN;
        }
    }
}

/* Single-row frames: the window is the row's own horizontal window (the
 * same arithmetic as a band's first row, with acc = 0 + sums). */
static void box_one_row(const float *const *in, float *const *out, int C, int w, int r,
                        double *pre)
{
    const int S = C + 1;
    diff_prefix(in, C, w, 0, -1, pre);
    for (int x = 0; x < w; x++) {
        const int hi = SS_MIN(x + r, w - 1), lo = x - r - 1;
        double a[SS_BOX_MAX_PLANES + 1];
        for (int c = 0; c < S; c++)
            a[c] = lo >= 0 ? 0.0 + (pre[(size_t)hi * S + c] - pre[(size_t)lo * S + c])
                           : 0.0 + pre[(size_t)hi * S + c];
        for (int c = 0; c < C; c++)
            out[c][x] = a[0] > 0.5 ? (float)(a[1 + c] / a[0]) : NAN;
    }
}

/* Box means of C (<= SS_BOX_MAX_PLANES) planes sharing one validity
 * pattern (that of in[0]); ds holds nds doubles of scratch (nds >= 2·w·h
 * is always enough). */
static void box_multi(const float *const *in, float *const *out, int C, int w, int h, int r,
                      double *ds, size_t nds)
{
    if (w <= 0 || h <= 0)
        return;
    if (r < 0)
        r = 0;
    const size_t per = 2 * (size_t)(C + 1) * (size_t)w;
    if (h == 1 && (size_t)(C + 1) * (size_t)w <= nds) {
        box_one_row(in, out, C, w, r, ds);
        return;
    }
    if (per > nds) {
        /* too little scratch for all planes at once (tiny frames): a plane
         * at a time gives the same numbers, as planes never mix */
        for (int c = 0; c < C; c++)
            box_multi(in + c, out + c, 1, w, h, r, ds, nds);
        return;
    }
    const int band = SS_MAX(SS_BOX_BAND, 2 * r + 1);
    const int nb = (h + band - 1) / band;
    int nt = max_threads();
    if ((size_t)nt > nds / per)
        nt = (int)(nds / per);
    nt = SS_MAX(1, SS_MIN(nt, nb));
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int b = 0; b < nb; b++) {
        double *buf = ds + (size_t)thread_id() * per;
        const int y0 = b * band, y1 = SS_MIN(h, y0 + band);
        switch (C) {      /* constant C: the per-plane loops unroll */
        case 1: box_band(in, out, 1, w, h, r, y0, y1, buf); break;
        case 2: box_band(in, out, 2, w, h, r, y0, y1, buf); break;
        default: box_band(in, out, C, w, h, r, y0, y1, buf); break;
        }
    }
}

void ss_box_mean(const float *in, int w, int h, int r, float *out, double *scratch)
{
    const float *ins[1] = { in };
    float *outs[1] = { out };
    box_multi(ins, outs, 1, w, h, r, scratch, 2 * (size_t)w * (size_t)h);
}

void ss_guided_filter(const float *I, const float *p, int w, int h, int r, float eps, float *out,
                      float *scratch, double *dscratch)
{
    if (w <= 0 || h <= 0)
        return;
    const size_t npix = (size_t)w * (size_t)h;
    float *f[8];
    for (int i = 0; i < 8; i++)
        f[i] = scratch + (size_t)i * npix;

    /* c: mean of I over the pixels that take part; row sums first (in
     * dscratch), added in row order, so threads do not change it */
    double *rs = dscratch, *rn = dscratch + h;
#pragma omp parallel for schedule(static)
    for (int y = 0; y < h; y++) {
        double s = 0.0, n = 0.0;
        for (int x = 0; x < w; x++) {
            const size_t i = (size_t)y * (size_t)w + (size_t)x;
            if (isfinite(I[i]) && isfinite(p[i])) {
                s += (double)I[i];
                n += 1.0;
            }
        }
        rs[y] = s;
        rn[y] = n;
    }
    double sum = 0.0, cnt = 0.0;
    for (int y = 0; y < h; y++) {
        sum += rs[y];
        cnt += rn[y];
    }
    const float c = cnt > 0.0 ? (float)(sum / cnt) : 0.0f;

    /* the four planes to box: I', p, I'·p, I'·I' (all NaN where any is) */
#pragma omp parallel for schedule(static)
    for (int y = 0; y < h; y++) {
        for (int x = 0; x < w; x++) {
            const size_t i = (size_t)y * (size_t)w + (size_t)x;
            const float ic = I[i] - c, pv = p[i];
            const float ip = ic * pv, ii = ic * ic;
            const int ok = isfinite(I[i]) && isfinite(pv) && isfinite(ip) && isfinite(ii);
            f[0][i] = ok ? ic : NAN;
            f[1][i] = ok ? pv : NAN;
            f[2][i] = ok ? ip : NAN;
            f[3][i] = ok ? ii : NAN;
        }
    }
    {
        const float *in4[4] = { f[0], f[1], f[2], f[3] };
        float *out4[4] = { f[4], f[5], f[6], f[7] };
        box_multi(in4, out4, 4, w, h, r, dscratch, 2 * npix);
    }

    /* the local linear model, in double from the float means. A and B are
     * kept at the pixels that take part (box(A), box(B) average over those,
     * like every mean here), and are NaN together, so that they share one
     * validity pattern for the next box */
#pragma omp parallel for schedule(static)
    for (int y = 0; y < h; y++) {
        for (int x = 0; x < w; x++) {
            const size_t i = (size_t)y * (size_t)w + (size_t)x;
            const int part = isfinite(f[0][i]);    /* I and p finite here */
            const double mi = f[4][i], mp = f[5][i], cip = f[6][i], cii = f[7][i];
            const double var = cii - mi * mi, cov = cip - mi * mp;
            const float A = (float)(cov / (var + (double)eps));
            const float B = (float)(mp - (double)A * mi);
            const int ok = part && isfinite(A) && isfinite(B);
            f[0][i] = ok ? A : NAN;
            f[1][i] = ok ? B : NAN;
        }
    }
    {
        const float *in2[2] = { f[0], f[1] };
        float *out2[2] = { f[2], f[3] };
        box_multi(in2, out2, 2, w, h, r, dscratch, 2 * npix);
    }

    /* r' = p - (box(A)·I' + box(B)) */
#pragma omp parallel for schedule(static)
    for (int y = 0; y < h; y++) {
        for (int x = 0; x < w; x++) {
            const size_t i = (size_t)y * (size_t)w + (size_t)x;
            const float ic = I[i] - c;
            const double q = (double)f[2][i] * (double)ic + (double)f[3][i];
            out[i] = isfinite(I[i]) && isfinite(p[i]) ? (float)((double)p[i] - q) : NAN;
        }
    }
}
