/*
 * guided.c — residual cleanup by the guided filter (ALGORITHM.md §4) and
 * the valid-aware box mean it is built from.
 *
 * Box sums. A (2r+1)² window clipped to the frame, over the valid pixels
 * only, at O(1) cost per pixel whatever r:
 *  - rows are cut into bands of fixed height (max(SS_BOX_BAND,
 *    4·(2r+1)) rows: the cut depends on r and h only, never on the number
 *    of threads, so neither does the rounding); bands run in parallel;
 *  - a band keeps, per column, the running sum (double) over the window's
 *    rows of each row's horizontal window sum, for every channel and the
 *    valid count;
 *  - one row down adds row y+r and removes row y-r-1, both at once as a
 *    "difference row" D = row(y+r) - row(y-r-1), whose horizontal window
 *    sums come from its prefix sums: pre[min(x+r, w-1)] - pre[x-r-1];
 *    the prefix chains of all channels are interleaved in one loop, so
 *    the additions are not serialised on their latency;
 *  - the channels are produced on the fly from the inputs: plain planes
 *    (ss_box_mean, and box(A), box(B)), or the guided filter's moments
 *    I', p, I'·p, I'·I' formed in double from I and p, whose window sums
 *    become A and B right there, in double — no float intermediate ever
 *    holds corr_II or mean_I², whose difference (the variance) would
 *    otherwise lose most of its digits to cancellation.
 * Per-thread state, 2·(C+1)·w doubles, is carved from the caller's double
 * scratch; threads are limited to what fits (results never depend on it).
 * Frames of under C+1 rows, too short for that, take a direct path.
 */
#include "stages.h"
#include "guided_core.h"
#include "plan_core.h"
#include "seeing_core.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* Least band height (rows). A band starts by summing its first 2r+1
 * rows, so bands of at least 4·(2r+1) rows keep that start-up below a
 * quarter of the work. */
#define SS_BOX_BAND 64
#define SS_BOX_MAX_CH 8             /* channels besides the count */

/* The inner routines take the mode and channel count as parameters that
 * are constants at their call sites; forcing them inline lets each use
 * compile to straight-line code for its case. */
#define BOX_INLINE static inline __attribute__((always_inline))
#define BOX_UNROLL _Pragma("GCC unroll 5")

/* What the channels are and what is written at the end. */
enum box_mode {
    BOX_PLAIN,                      /* C planes in, their C box means out */
    BOX_GUIDED_AB,                  /* I, p in; A, B of the guided filter out */
    BOX_GUIDED2_AB                  /* I, L, p in; A1, A2, B of the two-channel guide out */
};

typedef struct box_job {
    int mode, C;                    /* C: channels summed (4 for the guided moments) */
    int w, h, r;
    const float *in[SS_BOX_MAX_CH]; /* BOX_PLAIN: validity is that of in[0] */
    const float *I, *p;             /* BOX_GUIDED_AB, BOX_GUIDED2_AB */
    const float *L;                 /* BOX_GUIDED2_AB: the second guide channel */
    float c;                        /*   I' = I - c */
    double eps;
    float *out[SS_BOX_MAX_CH];      /* BOX_PLAIN: C planes; GUIDED: A, B; GUIDED2: A1, A2, B */
} box_job_t;

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

/* Channel values of pixel i: v[0] = 1 if valid, v[1..C] the values (0
 * when invalid). mode and C are constants at every call site, so this
 * and the loops around it specialise. */
BOX_INLINE void load_px(const box_job_t *j, int mode, int C, size_t i, double *v)
{
    if (mode == BOX_GUIDED2_AB) {
        const float I = j->I[i], L = j->L[i], p = j->p[i];
        const int ok = isfinite(I) && isfinite(L) && isfinite(p);
        const float ic = ok ? I - j->c : 0.0f, lv = ok ? L : 0.0f, pv = ok ? p : 0.0f;
        v[0] = ok;
        v[1] = ic;
        v[2] = lv;
        v[3] = pv;
        v[4] = (double)ic * (double)pv;
        v[5] = (double)lv * (double)pv;
        v[6] = (double)ic * (double)ic;
        v[7] = (double)ic * (double)lv;
        v[8] = (double)lv * (double)lv;
        return;
    }
    if (mode == BOX_GUIDED_AB) {
        const float I = j->I[i], p = j->p[i];
        const int ok = isfinite(I) && isfinite(p);
        const float ic = ok ? I - j->c : 0.0f, pv = ok ? p : 0.0f;
        v[0] = ok;
        v[1] = ic;
        v[2] = pv;
        v[3] = (double)ic * (double)pv;
        v[4] = (double)ic * (double)ic;
        return;
    }
    const int ok = isfinite(j->in[0][i]);
    v[0] = ok;
    BOX_UNROLL
    for (int c = 0; c < C; c++)
        v[1 + c] = ok ? (double)j->in[c][i] : 0.0;
}

/* The difference row at column x: row ya (if >= 0) minus row ys (if >= 0). */
BOX_INLINE void diff_px(const box_job_t *j, int mode, int C, int ya, int ys, int x, double *d)
{
    /* a missing row reads as zeros: a - 0 and 0 - s are exact */
    double a[SS_BOX_MAX_CH + 1] = { 0 }, s[SS_BOX_MAX_CH + 1] = { 0 };
    if (ya >= 0)
        load_px(j, mode, C, (size_t)ya * (size_t)j->w + (size_t)x, a);
    if (ys >= 0)
        load_px(j, mode, C, (size_t)ys * (size_t)j->w + (size_t)x, s);
    BOX_UNROLL
    for (int c = 0; c <= C; c++)
        d[c] = a[c] - s[c];
}

/* acc[x][.] += horizontal window sums of the difference row (ya, ys),
 * through its prefix sums (built in pre, S = C+1 interleaved chains, so
 * the additions overlap): window(x) = pre[min(x+r, w-1)] - pre[x-r-1]. */
BOX_INLINE void add_row(const box_job_t *j, int mode, int C, int ya, int ys, double *acc,
                           double *pre)
{
    const int S = C + 1, w = j->w, r = j->r;
    double run[SS_BOX_MAX_CH + 1] = { 0 }, d[SS_BOX_MAX_CH + 1];
    for (int x = 0; x < w; x++) {
        diff_px(j, mode, C, ya, ys, x, d);
        BOX_UNROLL
        for (int c = 0; c < S; c++) {
            run[c] += d[c];
            pre[(size_t)x * S + c] = run[c];
        }
    }
    const int xa = SS_MIN(w, r + 1);            /* x < xa: the window starts at 0 */
    const int xb = SS_MAX(xa, w - r);           /* x >= xb: it ends at w-1 */
    for (int x = 0; x < xa; x++) {
        const double *ph = pre + (size_t)SS_MIN(x + r, w - 1) * S;
        BOX_UNROLL
        for (int c = 0; c < S; c++)
            acc[(size_t)x * S + c] += ph[c];
    }
    for (int x = xa; x < xb; x++) {
        const double *ph = pre + (size_t)(x + r) * S, *pl = pre + (size_t)(x - r - 1) * S;
        BOX_UNROLL
        for (int c = 0; c < S; c++)
            acc[(size_t)x * S + c] += ph[c] - pl[c];
    }
    for (int x = xb; x < w; x++) {
        const double *ph = pre + (size_t)(w - 1) * S, *pl = pre + (size_t)(x - r - 1) * S;
        BOX_UNROLL
        for (int c = 0; c < S; c++)
            acc[(size_t)x * S + c] += ph[c] - pl[c];
    }
}

/* Turn the window sums of pixel i into the outputs. */
BOX_INLINE void finish_px(const box_job_t *j, int mode, int C, size_t i, const double *a)
{
    if (mode == BOX_GUIDED2_AB) {
        const int part = isfinite(j->I[i]) && isfinite(j->L[i]) && isfinite(j->p[i]);
        ss_gc_model2(a[0], a + 1, j->eps, part, &j->out[0][i], &j->out[1][i], &j->out[2][i]);
        return;
    }
    if (mode == BOX_GUIDED_AB) {
        const int part = isfinite(j->I[i]) && isfinite(j->p[i]);
        ss_gc_model1(a[0], a + 1, j->eps, part, &j->out[0][i], &j->out[1][i]);
        return;
    }
    BOX_UNROLL
    for (int c = 0; c < C; c++)
        j->out[c][i] = a[0] > 0.5 ? (float)(a[1 + c] / a[0]) : NAN;
}

/* One band [y0, y1); buf holds 2·(C+1)·w doubles (the running window
 * sums, then the prefix row). */
BOX_INLINE void box_band(const box_job_t *j, int mode, int C, int y0, int y1, double *buf)
{
    const int S = C + 1, w = j->w, h = j->h, r = j->r;
    double *acc = buf, *pre = buf + (size_t)S * (size_t)w;
    memset(acc, 0, (size_t)S * (size_t)w * sizeof(double));
    for (int y = y0; y < y1; y++) {
        if (y == y0) {
            for (int yy = SS_MAX(0, y0 - r); yy <= SS_MIN(h - 1, y0 + r); yy++)
                add_row(j, mode, C, yy, -1, acc, pre);
        } else {
            const int ya = y + r < h ? y + r : -1, ys = y - r - 1;
            if (ya >= 0 || ys >= 0)
                add_row(j, mode, C, ya, ys, acc, pre);
        }
        const size_t row = (size_t)y * (size_t)w;
        for (int x = 0; x < w; x++)
            finish_px(j, mode, C, row + (size_t)x, acc + (size_t)x * S);
    }
}

/* Frames too short for a band's state in the scratch (h <= 8 at most):
 * each output row sums the running horizontal sums of its window's rows
 * directly, in row order (O(h) per pixel, and h is tiny here). */
#define SS_BOX_FEW_ROWS 8
static void box_few_rows(const box_job_t *j, int mode, int C)
{
    const int S = C + 1, w = j->w, h = j->h, r = j->r;
    for (int y = 0; y < h; y++) {
        const int ya = SS_MAX(0, y - r), yb = SS_MIN(h - 1, y + r);
        double ws[SS_BOX_FEW_ROWS][SS_BOX_MAX_CH + 1] = { { 0 } }, d[SS_BOX_MAX_CH + 1] = { 0 };
        for (int yy = ya; yy <= yb; yy++)
            for (int x = 0; x <= SS_MIN(r, w - 1); x++) {
                diff_px(j, mode, C, yy, -1, x, d);
                BOX_UNROLL
                for (int c = 0; c < S; c++)
                    ws[yy - ya][c] += d[c];
            }
        for (int x = 0; x < w; x++) {
            double a[SS_BOX_MAX_CH + 1] = { 0 };
            for (int yy = ya; yy <= yb; yy++) {
                if (x > 0) {
                    if (x + r < w) {
                        diff_px(j, mode, C, yy, -1, x + r, d);
                        BOX_UNROLL
                        for (int c = 0; c < S; c++)
                            ws[yy - ya][c] += d[c];
                    }
                    if (x - r - 1 >= 0) {
                        diff_px(j, mode, C, yy, -1, x - r - 1, d);
                        BOX_UNROLL
                        for (int c = 0; c < S; c++)
                            ws[yy - ya][c] -= d[c];
                    }
                }
                BOX_UNROLL
                for (int c = 0; c < S; c++)
                    a[c] += ws[yy - ya][c];
            }
            finish_px(j, mode, C, (size_t)y * (size_t)w + (size_t)x, a);
        }
    }
}

/* Run a job with nds doubles of scratch at ds. */
static void box_run(const box_job_t *j, double *ds, size_t nds)
{
    const int C = j->C, w = j->w, h = j->h;
    if (w <= 0 || h <= 0)
        return;
    const size_t per = 2 * (size_t)(C + 1) * (size_t)w;
    if (per > nds) {                         /* h < C+1 <= 9 */
        if (j->mode == BOX_GUIDED2_AB)
            box_few_rows(j, BOX_GUIDED2_AB, 8);
        else if (j->mode == BOX_GUIDED_AB)
            box_few_rows(j, BOX_GUIDED_AB, 4);
        else if (C == 1)
            box_few_rows(j, BOX_PLAIN, 1);
        else if (C == 2)
            box_few_rows(j, BOX_PLAIN, 2);
        else
            box_few_rows(j, BOX_PLAIN, 3);
        return;
    }
    const int band = SS_MAX(SS_BOX_BAND, 4 * (2 * j->r + 1));
    const int nb = (h + band - 1) / band;
    int nt = max_threads();
    if ((size_t)nt > nds / per)
        nt = (int)(nds / per);
    nt = SS_MAX(1, SS_MIN(nt, nb));
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int b = 0; b < nb; b++) {
        double *buf = ds + (size_t)thread_id() * per;
        const int y0 = b * band, y1 = SS_MIN(h, y0 + band);
        if (j->mode == BOX_GUIDED2_AB)
            box_band(j, BOX_GUIDED2_AB, 8, y0, y1, buf);
        else if (j->mode == BOX_GUIDED_AB)
            box_band(j, BOX_GUIDED_AB, 4, y0, y1, buf);
        else if (C == 1)
            box_band(j, BOX_PLAIN, 1, y0, y1, buf);
        else if (C == 2)
            box_band(j, BOX_PLAIN, 2, y0, y1, buf);
        else
            box_band(j, BOX_PLAIN, 3, y0, y1, buf);
    }
}

void ss_box_mean(const float *in, int w, int h, int r, float *out, double *scratch)
{
    box_job_t j = { .mode = BOX_PLAIN, .C = 1, .w = w, .h = h, .r = SS_MAX(r, 0) };
    j.in[0] = in;
    j.out[0] = out;
    box_run(&j, scratch, 2 * (size_t)SS_MAX(w, 0) * (size_t)SS_MAX(h, 0));
}

/* c: mean of I over the pixels where every input is finite; row sums
 * first (in dscratch), added in row order, so threads do not change it. */
static float guide_mean(const float *I, const float *L, const float *p, int w, int h,
                        double *dscratch)
{
    double *rs = dscratch, *rn = dscratch + h;
#pragma omp parallel for schedule(static)
    for (int y = 0; y < h; y++) {
        double s = 0.0, n = 0.0;
        for (int x = 0; x < w; x++) {
            const size_t i = (size_t)y * (size_t)w + (size_t)x;
            if (isfinite(I[i]) && isfinite(p[i]) && (!L || isfinite(L[i]))) {
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
    return cnt > 0.0 ? (float)(sum / cnt) : 0.0f;
}

int ss_gmask_init(ss_gmask_t *m, double psf_sigma, double tau, double sigma, double a2,
                  int radius)
{
    if (!(psf_sigma > 0.0) || !isfinite(psf_sigma) || !(tau > 0.0) || !isfinite(tau) ||
        !(sigma > 0.0) || !isfinite(sigma) || !(a2 >= 0.0) || !isfinite(a2) || radius < 1)
        return -1;
    const int R = m->R = ss_psf_kernel(psf_sigma, m->k);
    /* ‖k⊗k − box‖₂, the box 1/N on (2rb+1)², over the wider support */
    const int rb = m->rb = SS_MIN(radius, SS_GMASK_MAX_RB);
    const double nb = (double)(2 * rb + 1) * (double)(2 * rb + 1);
    m->inv_n = (float)(1.0 / nb);
    const int Rc = SS_MAX(R, rb);
    double c2 = 0.0;
    for (int y = -Rc; y <= Rc; y++)
        for (int x = -Rc; x <= Rc; x++) {
            const double c = (abs(x) <= R && abs(y) <= R
                                  ? (double)m->k[x + R] * (double)m->k[y + R] : 0.0) -
                             (abs(x) <= rb && abs(y) <= rb ? (double)m->inv_n : 0.0);
            c2 += c * c;
        }
    m->t = (float)(tau * sigma * sqrt(c2));
    /* ‖g‖₂ of g = ss_laplacian5's stencil ∗ (k⊗k), on a (2R+3)² support */
    double g2 = 0.0;
    for (int y = -R - 1; y <= R + 1; y++)
        for (int x = -R - 1; x <= R + 1; x++) {
            double kk[5];
            const int ox[5] = { -1, 1, 0, 0, 0 }, oy[5] = { 0, 0, -1, 1, 0 };
            for (int q = 0; q < 5; q++) {
                const int xx = x + ox[q], yy = y + oy[q];
                kk[q] = abs(xx) <= R && abs(yy) <= R
                            ? (double)m->k[xx + R] * (double)m->k[yy + R] : 0.0;
            }
            const double g = kk[0] + kk[1] + kk[2] + kk[3] - 4.0 * kk[4];
            g2 += g * g;
        }
    m->tau = tau;
    m->sigma = sigma;
    m->g = sqrt(g2);
    m->tl = ss_pc_gmask_tl(tau, sigma, m->g, a2);
    m->d2 = (int)floor(2.0 * log(20.0) * (psf_sigma * psf_sigma + 1.0 / 12.0));
    return 0;
}

/* ss_laplacian5 of I at (x, y) (the same float sum), 0 where it is NaN
 * or on the outer ring. */
static inline float gm_lap(const float *I, int w, int h, int x, int y)
{
    if (x == 0 || y == 0 || x == w - 1 || y == h - 1)
        return 0.0f;
    const size_t i = (size_t)y * (size_t)w + (size_t)x;
    const float l = I[i - 1] + I[i + 1] + I[i - (size_t)w] + I[i + (size_t)w] - 4.0f * I[i];
    return isfinite(l) ? l : 0.0f;
}

/* Whether any pixel of plane v (1 or 0) at an offset dx² + dy² ≤ d2 from
 * (x, y), inside the frame, is 1. */
static inline int gm_disk_any(const float *v, int w, int h, int x, int y, int d2, int d)
{
    for (int dy = -d; dy <= d; dy++)
        for (int dx = -d; dx <= d; dx++) {
            const int xx = x + dx, yy = y + dy;
            if (dx * dx + dy * dy <= d2 && xx >= 0 && xx < w && yy >= 0 && yy < h &&
                v[(size_t)yy * (size_t)w + (size_t)xx] != 0.0f)
                return 1;
        }
    return 0;
}

void ss_gmask_apply(const float *I, const float *p, int w, int h, const ss_gmask_t *m,
                    float *pm, float *t0, float *t1, float *t2, float *t3, float *t4)
{
    const int R = m->R, rb = m->rb, d2 = m->d2, d = (int)floor(sqrt((double)m->d2));
    const float *k = m->k;
    /* rows: t0 = Σ_j k[j]·p(x + j - R), t4 = Σ_{|j| ≤ rb} p(x + j),
     * t1 = Σ_j k[j]·L(x + j - R); invalid and outside as 0 */
#pragma omp parallel for schedule(static)
    for (int y = 0; y < h; y++) {
        const float *row = p + (size_t)y * (size_t)w;
        for (int x = 0; x < w; x++) {
            float s = 0.0f, sb = 0.0f, sl = 0.0f;
            for (int j = 0; j <= 2 * R; j++) {
                const int xx = x + j - R;
                const float v = xx >= 0 && xx < w && isfinite(row[xx]) ? row[xx] : 0.0f;
                const float l = xx >= 0 && xx < w ? gm_lap(I, w, h, xx, y) : 0.0f;
                s = s + k[j] * v;
                sl = sl + k[j] * l;
            }
            for (int j = -rb; j <= rb; j++) {
                const int xx = x + j;
                sb = sb + (xx >= 0 && xx < w && isfinite(row[xx]) ? row[xx] : 0.0f);
            }
            t0[(size_t)y * (size_t)w + (size_t)x] = s;
            t4[(size_t)y * (size_t)w + (size_t)x] = sb;
            t1[(size_t)y * (size_t)w + (size_t)x] = sl;
        }
    }
    /* columns: t2 = busy (the guide's structure is significant), pm =
     * the residual's response is (1 or 0; pm is overwritten below) */
#pragma omp parallel for schedule(static)
    for (int y = 0; y < h; y++) {
        for (int x = 0; x < w; x++) {
            float s = 0.0f, sb = 0.0f, sl = 0.0f;
            for (int j = 0; j <= 2 * R; j++) {
                const int yy = y + j - R;
                const int in = yy >= 0 && yy < h;
                const size_t q = (size_t)(in ? yy : 0) * (size_t)w + (size_t)x;
                s = s + k[j] * (in ? t0[q] : 0.0f);
                sl = sl + k[j] * (in ? t1[q] : 0.0f);
            }
            for (int j = -rb; j <= rb; j++) {
                const int yy = y + j;
                sb = sb + (yy >= 0 && yy < h ? t4[(size_t)yy * (size_t)w + (size_t)x] : 0.0f);
            }
            const size_t i = (size_t)y * (size_t)w + (size_t)x;
            const float r = s - sb * m->inv_n;
            t2[i] = fabsf(sl) >= m->tl ? 1.0f : 0.0f;
            pm[i] = isfinite(p[i]) && fabsf(r) >= m->t ? 1.0f : 0.0f;
        }
    }
    /* seeds: a response with no busy pixel in its disk */
#pragma omp parallel for schedule(static)
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            const size_t i = (size_t)y * (size_t)w + (size_t)x;
            t3[i] = pm[i] != 0.0f && !gm_disk_any(t2, w, h, x, y, d2, d) ? 1.0f : 0.0f;
        }
    /* the seeds' disks, where no busy pixel lies in the disk */
#pragma omp parallel for schedule(static)
    for (int y = 0; y < h; y++) {
        for (int x = 0; x < w; x++) {
            const size_t i = (size_t)y * (size_t)w + (size_t)x;
            const int hit = isfinite(p[i]) && gm_disk_any(t3, w, h, x, y, d2, d) &&
                            !gm_disk_any(t2, w, h, x, y, d2, d);
            pm[i] = hit ? NAN : p[i];
        }
    }
}

void ss_guided_filter(const float *I, const float *p, int w, int h, int r, float eps,
                      const ss_gmask_t *mask, float *out, float *scratch, double *dscratch)
{
    if (w <= 0 || h <= 0)
        return;
    const size_t npix = (size_t)w * (size_t)h, nds = 2 * npix;
    float *A = scratch, *B = scratch + npix, *bA = scratch + 2 * npix, *bB = scratch + 3 * npix;
    if (r < 0)
        r = 0;
    const float c = guide_mean(I, NULL, p, w, h, dscratch);
    const float *pmom = p;
    if (mask) {
        ss_gmask_apply(I, p, w, h, mask, scratch + 7 * npix, A, B, bA, bB, scratch + 4 * npix);
        pmom = scratch + 7 * npix;
    }

    /* A, B from the window moments of I' = I - c and p (pm) */
    box_job_t jm = { .mode = BOX_GUIDED_AB, .C = 4, .w = w, .h = h, .r = r, .I = I, .p = pmom,
                     .c = c, .eps = (double)eps };
    jm.out[0] = A;
    jm.out[1] = B;
    box_run(&jm, dscratch, nds);

    /* box(A), box(B) */
    box_job_t jb = { .mode = BOX_PLAIN, .C = 2, .w = w, .h = h, .r = r };
    jb.in[0] = A;
    jb.in[1] = B;
    jb.out[0] = bA;
    jb.out[1] = bB;
    box_run(&jb, dscratch, nds);

    /* r' = p - (box(A)·I' + box(B)) */
#pragma omp parallel for schedule(static)
    for (int y = 0; y < h; y++) {
        for (int x = 0; x < w; x++) {
            const size_t i = (size_t)y * (size_t)w + (size_t)x;
            const float ic = I[i] - c;
            const double q = (double)bA[i] * (double)ic + (double)bB[i];
            out[i] = isfinite(I[i]) && isfinite(p[i]) ? (float)((double)p[i] - q) : NAN;
        }
    }
}

void ss_laplacian5(const float *in, int w, int h, float *out)
{
#pragma omp parallel for schedule(static)
    for (int y = 0; y < h; y++) {
        for (int x = 0; x < w; x++) {
            const size_t i = (size_t)y * (size_t)w + (size_t)x;
            if (x == 0 || y == 0 || x == w - 1 || y == h - 1) {
                out[i] = NAN;
                continue;
            }
            /* NaN in any of the five propagates */
            out[i] = in[i - 1] + in[i + 1] + in[i - (size_t)w] + in[i + (size_t)w] - 4.0f * in[i];
        }
    }
}

/* The two-channel fit: window moments over the pixels where I, L and pm
 * (p, or p with the mask's pixels NaN: scratch plane 7, planes 0 to 4
 * its temporaries) are finite, then out = p - q where I, L, p are. */
static void guided2_pass(const float *I, const float *L, const float *p, const ss_gmask_t *mask,
                         int w, int h, int r, float eps, float c, float *out, float *scratch,
                         double *dscratch)
{
    const size_t npix = (size_t)w * (size_t)h, nds = 2 * npix;
    float *A1 = scratch, *A2 = scratch + npix, *B = scratch + 2 * npix;
    float *bA1 = scratch + 3 * npix, *bA2 = scratch + 4 * npix, *bB = scratch + 5 * npix;
    const float *pmom = p;
    if (mask) {
        ss_gmask_apply(I, p, w, h, mask, scratch + 7 * npix, A1, A2, B, bA1, bA2);
        pmom = scratch + 7 * npix;
    }
    box_job_t jm = { .mode = BOX_GUIDED2_AB, .C = 8, .w = w, .h = h, .r = r, .I = I, .L = L,
                     .p = pmom, .c = c, .eps = (double)eps };
    jm.out[0] = A1;
    jm.out[1] = A2;
    jm.out[2] = B;
    box_run(&jm, dscratch, nds);

    box_job_t jb = { .mode = BOX_PLAIN, .C = 3, .w = w, .h = h, .r = r };
    jb.in[0] = A1;
    jb.in[1] = A2;
    jb.in[2] = B;
    jb.out[0] = bA1;
    jb.out[1] = bA2;
    jb.out[2] = bB;
    box_run(&jb, dscratch, nds);

    /* r' = p - (box(A1)·I' + box(A2)·L + box(B)) */
#pragma omp parallel for schedule(static)
    for (int y = 0; y < h; y++) {
        for (int x = 0; x < w; x++) {
            const size_t i = (size_t)y * (size_t)w + (size_t)x;
            const float ic = I[i] - c;
            const double q = (double)bA1[i] * (double)ic + (double)bA2[i] * (double)L[i] +
                             (double)bB[i];
            out[i] = isfinite(I[i]) && isfinite(L[i]) && isfinite(p[i])
                         ? (float)((double)p[i] - q) : NAN;
        }
    }
}

float ss_seeing_term(const float *I, const float *L, const float *p, int w, int h, float c,
                     float *Q, double *dscratch)
{
    ss_laplacian5(L, w, h, Q);
    if ((size_t)SS_SEEING_NSUMS * (size_t)h > 2 * (size_t)w * (size_t)h)
        return 0.0f;
    double *rows = dscratch;
#pragma omp parallel for schedule(static)
    for (int y = 0; y < h; y++) {
        double *m = rows + (size_t)y * SS_SEEING_NSUMS;
        memset(m, 0, SS_SEEING_NSUMS * sizeof *m);
        for (int x = 0; x < w; x++) {
            const size_t i = (size_t)y * (size_t)w + (size_t)x;
            if (ss_seeing_takes(I[i], L[i], Q[i], p[i]))
                ss_seeing_add(m, (double)(I[i] - c), (double)L[i], (double)Q[i], (double)p[i]);
        }
    }
    double m[SS_SEEING_NSUMS] = { 0 };
    for (int y = 0; y < h; y++)
        for (int k = 0; k < SS_SEEING_NSUMS; k++)
            m[k] += rows[(size_t)y * SS_SEEING_NSUMS + k];
    return ss_seeing_solve(m);
}

void ss_guided_filter2(const float *I, const float *p, int w, int h, int r, float eps,
                       int biharmonic, const ss_gmask_t *mask, float *out, float *scratch,
                       double *dscratch)
{
    if (w <= 0 || h <= 0)
        return;
    const size_t npix = (size_t)w * (size_t)h;
    float *L = scratch + 6 * npix;
    if (r < 0)
        r = 0;
    ss_laplacian5(I, w, h, L);
    const float c = guide_mean(I, L, p, w, h, dscratch);
    if (biharmonic) {
        /* p' = p − c2·∇⁴I into out, then the local fit of p' in place */
        float *Q = scratch + 7 * npix;
        const float c2 = ss_seeing_term(I, L, p, w, h, c, Q, dscratch);
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < npix; i++)
            out[i] = ss_seeing_apply(p[i], Q[i], c2);
        p = out;
    }
    guided2_pass(I, L, p, mask, w, h, r, eps, c, out, scratch, dscratch);
}
