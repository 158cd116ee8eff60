/*
 * check_registration.c — tests of ALGORITHM.md §2 (pipeline/register_coarse.c,
 * pipeline/register_fine.c).
 *
 * Definitions: ss_bin2, ss_reference_prep, ss_hipass and the star peaks
 * against their contracts written out again here (NaN rules included);
 * the vote on planted peak lists (shift, range, random fields, too few
 * stars, ambiguity); ss_fine_sums against a brute-force recomputation in
 * long double; the iteration of ss_register_fine on an exactly linear
 * model (step, gain and offset, jackknife errors and the response map,
 * each failure path); the interpolation-bias correction on rendered
 * shifts.
 *
 * End to end, on synthetic star fields from tools/synth (run as the CPU
 * backend runs the stages): shift error RMS and the reported-error ratio
 * over jittered 1024² frames with hot pixels and cosmic rays; 5 % sky and
 * transparency changes with seeing wobble and stray light; a sparse static
 * camera with integer noise and an undersampled PSF; drifts beyond ±20 px
 * and a 64 px jump; failure on blank frames; thread independence.
 */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "pipeline/stages.h"
#include "pipeline/fine_core.h"
#include "tools/synth.h"
#include "ss_test.h"

#ifdef _OPENMP
#include <omp.h>
#endif


static int same(float a, float b)
{
    return (isnan(a) && isnan(b)) || a == b;
}

/* The registration parameters: the config defaults. */
static void reg_cfg(ss_pipeline_cfg_t *c)
{
    ss_pipeline_cfg_defaults(c);
    c->reg_levels = 2;
    c->reg_search = 16;
    c->reg_max_iter = 4;
    c->reg_tol = 0.002;
    c->reg_ambiguity = 0.9;
    c->reg_min_det = 1e-6;
    c->max_failures = 5;
    c->reref_px = 16.0;
    c->hotpix_learn = 1;
    c->hotpix_k = 5.0;
    c->hotpix_frames = 8;
    c->hotpix_fraction = 0.75;
}

/* ======================================================================
 * ss_bin2
 * ==================================================================== */

START_TEST(test_bin2_definition)
{
    static const int sizes[][2] = { { 2, 2 }, { 3, 3 }, { 37, 23 }, { 64, 64 }, { 101, 6 } };
    rng_state = 31;
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        const int w = sizes[s][0], h = sizes[s][1], bw = w / 2, bh = h / 2;
        float *in = malloc((size_t)w * h * sizeof *in);
        float *out = malloc((size_t)(bw * bh + 1) * sizeof *out);
        for (int i = 0; i < w * h; i++) {
            const double u = rng_unif();
            /* 35 % NaN makes all-NaN quads common; some ±Inf */
            in[i] = u < 0.35 ? NAN : u < 0.38 ? (u < 0.365 ? INFINITY : -INFINITY)
                                              : (float)(1000.0 + 100.0 * rng_gauss());
        }
        ss_bin2(in, w, h, out);
        int n_nan = 0, n_partial = 0;
        for (int y = 0; y < bh; y++)
            for (int x = 0; x < bw; x++) {
                const float q[4] = { in[(2 * y) * w + 2 * x], in[(2 * y) * w + 2 * x + 1],
                                     in[(2 * y + 1) * w + 2 * x], in[(2 * y + 1) * w + 2 * x + 1] };
                float sum = 0.0f;
                int n = 0;
                for (int k = 0; k < 4; k++)
                    if (isfinite(q[k])) {
                        sum += q[k];
                        n++;
                    }
                const float e = n ? sum / (float)n : NAN;
                ck_assert_msg(same(out[y * bw + x], e), "%dx%d bin (%d,%d): got %g want %g", w, h,
                              x, y, (double)out[y * bw + x], (double)e);
                n_nan += n == 0;
                n_partial += n > 0 && n < 4;
            }
        if (bw * bh >= 100) {               /* the data exercised both rules */
            ck_assert_int_gt(n_nan, 0);
            ck_assert_int_gt(n_partial, 0);
        }
        free(in);
        free(out);
    }
    /* a hand-checked quad: (1 + 2 + 4) / 3, NaN skipped */
    const float q[4] = { 1.0f, 2.0f, NAN, 4.0f };
    float o;
    ss_bin2(q, 2, 2, &o);
    ck_assert_float_eq(o, 7.0f / 3.0f);
}
END_TEST

/* ======================================================================
 * ss_reference_prep
 * ==================================================================== */

START_TEST(test_reference_prep_definition)
{
    enum { W = 41, H = 29 };
    static float ref[W * H], S[W * H], gx[W * H], gy[W * H];
    rng_state = 77;
    for (int i = 0; i < W * H; i++)
        ref[i] = rng_unif() < 0.03 ? NAN : (float)(500.0 + 50.0 * rng_gauss());
    ss_reference_prep(ref, W, H, S, gx, gy);
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) {
            const int i = y * W + x;
            float es = NAN, ex = NAN, ey = NAN;
            if (x > 0 && y > 0 && x < W - 1 && y < H - 1) {
                const float c = ref[i], l = ref[i - 1], r = ref[i + 1], u = ref[i - W],
                            d = ref[i + W];
                if (!isnan(c) && !isnan(l) && !isnan(r) && !isnan(u) && !isnan(d)) {
                    es = (c + l + r + u + d) / 5.0f;
                    ex = (r - l) * 0.5f;
                    ey = (d - u) * 0.5f;
                }
            }
            ck_assert_msg(same(S[i], es) && same(gx[i], ex) && same(gy[i], ey),
                          "(%d,%d): S %g/%g gx %g/%g gy %g/%g", x, y, (double)S[i], (double)es,
                          (double)gx[i], (double)ex, (double)gy[i], (double)ey);
        }
}
END_TEST

/* ======================================================================
 * ss_hipass
 * ==================================================================== */

/* One running sum of stages.h's ss_hipass at position p of a line of n
 * values v(q) = a[q·stride] with counts cnt(q) = cnt[q·stride] (or 1 per
 * finite value when cnt is NULL): the direct sum (ascending) at the start
 * of p's segment, then the adds and subtracts up to p. */
static void run_sum(const float *a, const float *cnt, int stride, int n, int r, int p,
                    double *s, long long *c)
{
    const int p0 = p / SS_HP_SEG * SS_HP_SEG;
    *s = 0.0;
    *c = 0;
    for (int q = SS_MAX(p0 - r, 0); q <= SS_MIN(p0 + r, n - 1); q++)
        if (isfinite(a[q * stride])) {
            *s += a[q * stride];
            *c += cnt ? (long long)cnt[q * stride] : 1;
        }
    for (int t = p0 + 1; t <= p; t++) {
        if (t + r < n && isfinite(a[(t + r) * stride])) {
            *s += a[(t + r) * stride];
            *c += cnt ? (long long)cnt[(t + r) * stride] : 1;
        }
        if (t - r - 1 >= 0 && isfinite(a[(t - r - 1) * stride])) {
            *s -= a[(t - r - 1) * stride];
            *c -= cnt ? (long long)cnt[(t - r - 1) * stride] : 1;
        }
    }
}

/* The contract, pixel by pixel: a finite pixel minus the mean of the
 * finite values of its (2r+1)² window clipped to the frame, as stages.h
 * adds them (row sums direct and rounded to float, the column's a running
 * sum, recomputed here from its segment's start). */
static float hipass_at(const float *in, int w, int h, int r, int x, int y)
{
    static float hs[4096], hc[4096];    /* column x of the row sums */
    ck_assert_int_le(h, 4096);
    for (int yy = 0; yy < h; yy++) {
        double s = 0.0;
        int c = 0;
        for (int xx = SS_MAX(x - r, 0); xx <= SS_MIN(x + r, w - 1); xx++)
            if (isfinite(in[yy * w + xx])) {
                s += in[yy * w + xx];
                c++;
            }
        hs[yy] = (float)s;
        hc[yy] = (float)c;
    }
    double s;
    long long c;
    run_sum(hs, hc, 1, h, r, y, &s, &c);
    const float v = in[y * w + x];
    return isfinite(v) && c > 0 ? (float)((double)v - s / (double)c) : NAN;
}

START_TEST(test_hipass_definition)
{
    enum { W = 61, H = 137, R = 4 };        /* segments of SS_HP_SEG down the columns */
    static float in[W * H], out[W * H], shifted[W * H], out2[W * H], scratch[2 * W * H];
    ck_assert_int_lt(2 * SS_HP_SEG, H);
    rng_state = 31;
    for (int i = 0; i < W * H; i++)
        in[i] = rng_unif() < 0.05 ? NAN : (float)(100.0 + 20.0 * rng_gauss());
    ss_hipass(in, W, H, R, out, scratch);
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++)
            ck_assert_msg(same(out[y * W + x], hipass_at(in, W, H, R, x, y)), "(%d,%d)", x, y);
    /* an offset and a linear gradient (stray light, twilight) leave no
     * trace where the window is whole and the frame has no hole */
    for (int i = 0; i < W * H; i++)
        in[i] = (float)(100.0 + 20.0 * rng_gauss());
    ss_hipass(in, W, H, R, out, scratch);
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++)
            shifted[y * W + x] = in[y * W + x] + 5000.0f + 3.5f * x - 2.25f * y;
    ss_hipass(shifted, W, H, R, out2, scratch);
    for (int y = R; y < H - R; y++)
        for (int x = R; x < W - R; x++)
            ck_assert_msg(fabsf(out[y * W + x] - out2[y * W + x]) < 2e-3f, "(%d,%d): %g vs %g", x,
                          y, out[y * W + x], out2[y * W + x]);
}
END_TEST

/* The definition at radii from 0 to wider than a column segment
 * (SS_HP_SEG) and than the frame, and at frames shorter than a segment:
 * every step of the column pass's window, entering and leaving rows
 * clipped at both edges, is checked bit for bit. */
START_TEST(test_hipass_radii)
{
    static const struct { int w, h, r; } cases[] = {
        { 61, 137, 0 }, { 23, 40, 17 }, { 17, 5, 2 }, { 30, 70, 40 }, { 9, 33, 16 },
    };
    static float in[61 * 137], out[61 * 137], scratch[2 * 61 * 137];
    rng_state = 37;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int w = cases[c].w, h = cases[c].h, r = cases[c].r;
        for (int i = 0; i < w * h; i++)
            in[i] = rng_unif() < 0.05 ? NAN : (float)(100.0 + 20.0 * rng_gauss());
        ss_hipass(in, w, h, r, out, scratch);
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++)
                ck_assert_msg(same(out[y * w + x], hipass_at(in, w, h, r, x, y)),
                              "%dx%d r %d: (%d,%d)", w, h, r, x, y);
    }
}
END_TEST

/* ======================================================================
 * star peaks and the vote
 * ==================================================================== */

START_TEST(test_peak_definition)
{
    enum { W = 9, H = 7 };
    float a[W * H];
    for (int i = 0; i < W * H; i++)
        a[i] = 0.0f;
    a[2 * W + 2] = 10.0f;                       /* a lone peak */
    a[2 * W + 6] = a[2 * W + 7] = 8.0f;         /* a plateau: its first pixel only */
    a[4 * W + 4] = 9.0f;
    a[4 * W + 5] = NAN;                         /* a NaN neighbour does not block */
    a[5 * W + 1] = 3.0f;                        /* below the level */
    a[0 * W + 4] = 50.0f;                       /* on the outer row: never */
    ck_assert(ss_is_peak(a, W, H, 2, 2, 5.0f));
    ck_assert(ss_is_peak(a, W, H, 6, 2, 5.0f));
    ck_assert(!ss_is_peak(a, W, H, 7, 2, 5.0f));
    ck_assert(ss_is_peak(a, W, H, 4, 4, 5.0f));
    ck_assert(!ss_is_peak(a, W, H, 1, 5, 5.0f));
    ck_assert(!ss_is_peak(a, W, H, 4, 0, 5.0f));
    ck_assert(!ss_is_peak(a, W, H, 3, 3, 5.0f));
    ss_peak_t p[8];
    /* noise 1: level SS_COARSE_PEAK = 5 */
    ck_assert_int_eq(ss_find_peaks(a, W, H, 1.0, p, 8), 3);
    ck_assert_int_eq(ss_find_peaks(a, W, H, 1.0, p, 2), 3);     /* counts beyond cap */
    ck_assert_int_eq(ss_find_peaks(a, W, H, NAN, p, 8), 0);
    ck_assert_int_eq(ss_find_peaks(a, W, H, 1.0, p, 8), 3);
    ck_assert_int_eq(ss_peaks_order(p, 3, 2), 2);
    ck_assert(p[0].v == 10.0f && p[1].v == 9.0f && p[2].v == 8.0f);
    /* equal values: raster order */
    ss_peak_t q[3] = { { 1.0f, 5, 2 }, { 1.0f, 3, 2 }, { 1.0f, 9, 1 } };
    ss_peaks_order(q, 3, 3);
    ck_assert(q[0].y == 1 && q[1].x == 3 && q[2].x == 5);
}
END_TEST

/* A field of n random peaks and the same seen through shift (dx, dy),
 * with `extra` unmatched peaks on each side. */
static void peak_field(ss_peak_t *ref, ss_peak_t *cur, int n, int extra, int dx, int dy, int *nr,
                       int *nc)
{
    *nr = *nc = 0;
    for (int i = 0; i < n; i++) {
        const int x = 40 + (int)(rng_unif() * 400), y = 40 + (int)(rng_unif() * 300);
        ref[(*nr)++] = (ss_peak_t){ (float)(100 - i), x, y };
        /* a star at p in the reference is at p - s in the frame; jitter
         * of one binned pixel in the peak positions */
        cur[(*nc)++] = (ss_peak_t){ (float)(100 - i), x - dx + (int)(rng_unif() * 2),
                                    y - dy + (int)(rng_unif() * 2) };
    }
    for (int i = 0; i < extra; i++) {
        ref[(*nr)++] = (ss_peak_t){ 1.0f, (int)(rng_unif() * 480), (int)(rng_unif() * 380) };
        cur[(*nc)++] = (ss_peak_t){ 1.0f, (int)(rng_unif() * 480), (int)(rng_unif() * 380) };
    }
}

START_TEST(test_vote)
{
    static int hist[(2 * 32 + 1) * (2 * 32 + 1)];
    ss_peak_t ref[64], cur[64];
    int nr, nc;
    rng_state = 5;
    /* ten stars and as many strays: the shift, within the peaks' 1 px */
    peak_field(ref, cur, 10, 10, -17, 23, &nr, &nc);
    ss_coarse_t co = { 0 };
    ss_coarse_vote(ref, nr, cur, nc, 32, 0.9, hist, &co);
    ck_assert_msg(co.ok, "%s", co.why);
    ck_assert_msg(abs(co.dx + 17) <= 1 && abs(co.dy - 23) <= 1, "(%d,%d)", co.dx, co.dy);
    ck_assert_int_ge(co.n_votes, 10);
    /* beyond the search range: no match */
    memset(&co, 0, sizeof co);
    ss_coarse_vote(ref, nr, cur, nc, 8, 0.9, hist, &co);
    ck_assert(!co.ok);
    ck_assert_ptr_nonnull(strstr(co.why, "no match"));
    /* unrelated fields: no match */
    peak_field(ref, cur, 0, 40, 0, 0, &nr, &nc);
    memset(&co, 0, sizeof co);
    ss_coarse_vote(ref, nr, cur, nc, 32, 0.9, hist, &co);
    ck_assert_msg(!co.ok, "random pairs matched at (%d,%d) with %d votes", co.dx, co.dy,
                  co.n_votes);
    /* too few stars */
    memset(&co, 0, sizeof co);
    ss_coarse_vote(ref, 2, cur, nc, 32, 0.9, hist, &co);
    ck_assert(!co.ok);
    ck_assert_ptr_nonnull(strstr(co.why, "too few stars"));
    /* two equally good answers: a field of pairs 10 px apart along x */
    nr = nc = 0;
    for (int i = 0; i < 12; i++) {
        const int x = 40 + 37 * (i % 6), y = 40 + 61 * (i / 6);
        ref[nr++] = (ss_peak_t){ 10.0f, x, y };
        ref[nr++] = (ss_peak_t){ 10.0f, x + 10, y };
        cur[nc++] = (ss_peak_t){ 10.0f, x, y };
    }
    memset(&co, 0, sizeof co);
    ss_coarse_vote(ref, nr, cur, nc, 32, 0.9, hist, &co);
    ck_assert(!co.ok);
    ck_assert_ptr_nonnull(strstr(co.why, "ambiguous"));
}
END_TEST

/* ======================================================================
 * ss_fine_sums against brute force
 * ==================================================================== */

/* The contract of ss_fine_sums, pixel by pixel, summed in long double
 * (row band of its row, column band of its column). */
static void brute_sums(const float *cur, const float *ref, const float *S, const float *gx,
                       const float *gy, int w, int h, double sx, double sy,
                       long double out[2][SS_FINE_BANDS][SS_FINE_NSUMS],
                       long double mag[SS_FINE_NSUMS])
{
    memset(out, 0, 2 * sizeof out[0]);
    for (int k = 0; k < SS_FINE_NSUMS; k++)
        mag[k] = 0.0L;
    const double ix = floor(-sx), iy = floor(-sy);
    const double fx = -sx - ix, fy = -sy - iy;
    const int ya = SS_MAX(1, -(int)iy), yb = SS_MIN(h - 1, h - 1 - (int)iy);
    const int xa = SS_MAX(1, -(int)ix), xb = SS_MIN(w - 1, w - 1 - (int)ix);
    for (int y = 1; y < h - 1; y++)
        for (int x = 1; x < w - 1; x++) {
            const int i = y * w + x;
            if (!isfinite(S[i]) || !isfinite(gx[i]) || !isfinite(gy[i]))
                continue;
            const double x0 = x + ix, y0 = y + iy;
            if (x0 < 0 || y0 < 0 || x0 + 1 > w - 1 || y0 + 1 > h - 1)
                continue;
            const int a = (int)y0 * w + (int)x0;
            const float ta = cur[a], tb = cur[a + 1], tc = cur[a + w], td = cur[a + w + 1];
            if (isnan(ta) || isnan(tb) || isnan(tc) || isnan(td))
                continue;
            const double v = (1 - fy) * ((1 - fx) * ta + fx * tb) + fy * ((1 - fx) * tc + fx * td);
            const long double e = v - S[i], p = gx[i], q = gy[i], t = S[i];
            const long double l = 5.0L * ((long double)S[i] - ref[i]);
            const long double dx = (1 - fy) * ((long double)tb - ta) + fy * ((long double)td - tc);
            const long double dy = (1 - fx) * ((long double)tc - ta) + fx * ((long double)td - tb);
            const long double term[SS_FINE_NSUMS] = {
                [SS_FS_XX] = p * p, [SS_FS_XY] = p * q, [SS_FS_XS] = p * t, [SS_FS_X] = p,
                [SS_FS_XL] = p * l, [SS_FS_YY] = q * q, [SS_FS_YS] = q * t, [SS_FS_Y] = q,
                [SS_FS_YL] = q * l, [SS_FS_SS] = t * t, [SS_FS_S] = t,      [SS_FS_SL] = t * l,
                [SS_FS_N] = 1.0L,   [SS_FS_L] = l,      [SS_FS_LL] = l * l, [SS_FS_XE] = p * e,
                [SS_FS_YE] = q * e, [SS_FS_SE] = t * e, [SS_FS_E] = e,      [SS_FS_LE] = l * e,
                [SS_FS_EE] = e * e, [SS_FS_XDX] = p * dx, [SS_FS_XDY] = p * dy,
                [SS_FS_YDX] = q * dx, [SS_FS_YDY] = q * dy,
            };
            const int rb = (int)(((long)(y - ya) * SS_FINE_BANDS) / (yb - ya));
            const int cb = (int)(((long)(x - xa) * SS_FINE_BANDS) / (xb - xa));
            for (int k = 0; k < SS_FINE_NSUMS; k++) {
                out[0][rb][k] += term[k];
                out[1][cb][k] += term[k];
                mag[k] += fabsl(term[k]);
            }
        }
}

START_TEST(test_fine_sums_bruteforce)
{
    /* sizes that are not multiples of the bands */
    enum { W = 203, H = 131 };
    static float ref[W * H], cur[W * H], S[W * H], gx[W * H], gy[W * H];
    rng_state = 2024;
    /* a smooth field with a few blobs, and NaN holes in both frames */
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) {
            double v = 1000.0 + 3.0 * x - 2.0 * y + 40.0 * sin(x * 0.31) * cos(y * 0.17);
            ref[y * W + x] = rng_unif() < 0.02 ? NAN : (float)(v + 5.0 * rng_gauss());
            cur[y * W + x] = rng_unif() < 0.02 ? NAN : (float)(v + 5.0 * rng_gauss());
        }
    ss_reference_prep(ref, W, H, S, gx, gy);
    static const double shifts[][2] = { { 0.0, 0.0 },     { 0.3, -0.7 },  { -2.25, 1.5 },
                                        { 5.999999, -3.000001 }, { -17.4, 9.8 }, { 1.0, 1.0 },
                                        { 0.5, 0.5 } };
    for (size_t k = 0; k < sizeof shifts / sizeof shifts[0]; k++) {
        static ss_fine_bands_t got;
        static long double want[2][SS_FINE_BANDS][SS_FINE_NSUMS];
        long double mag[SS_FINE_NSUMS];
        ss_fine_sums(cur, ref, S, gx, gy, W, H, shifts[k][0], shifts[k][1], got);
        brute_sums(cur, ref, S, gx, gy, W, H, shifts[k][0], shifts[k][1], want, mag);
        long double n = 0.0L;
        for (int i = 0; i < 2 * SS_FINE_BANDS; i++) {
            const int d = i / SS_FINE_BANDS, b = i % SS_FINE_BANDS;
            n += d == 0 ? want[d][b][SS_FS_N] : 0.0L;
            /* every band holds its share of the rows (columns) */
            ck_assert_msg(want[d][b][SS_FS_N] > 0.0L, "shift %zu band %d/%d empty", k, d, b);
            for (int s = 0; s < SS_FINE_NSUMS; s++) {
                /* double accumulation of ~2e4 terms: relative error ~1e-12
                 * of the sum of magnitudes; 1e-9 leaves a wide margin and
                 * still catches any wrong term (each is ≳1e-5 of the total). */
                const long double tol = 1e-9L * mag[s] + 1e-12L;
                ck_assert_msg(fabsl((long double)got[d][b][s] - want[d][b][s]) <= tol,
                              "shift (%g,%g) band %d/%d sum %d: got %.17g want %.17Lg",
                              shifts[k][0], shifts[k][1], d, b, s, got[d][b][s], want[d][b][s]);
            }
            /* the valid count is exact */
            ck_assert_double_eq(got[d][b][SS_FS_N], (double)want[d][b][SS_FS_N]);
        }
        ck_assert_msg(n > 0.8L * (W - 2) * (H - 2) * 0.5L, "too few pixels in test");
    }
    /* a shift that leaves no overlap: all sums zero */
    static ss_fine_bands_t z;
    ss_fine_sums(cur, ref, S, gx, gy, W, H, W + 5.0, 0.0, z);
    for (int b = 0; b < SS_FINE_BANDS; b++)
        for (int s = 0; s < SS_FINE_NSUMS; s++)
            ck_assert(z[0][b][s] == 0.0 && z[1][b][s] == 0.0);
    ss_fine_sums(cur, ref, S, gx, gy, W, H, NAN, 0.0, z);
    ck_assert_double_eq(z[0][0][SS_FS_N], 0.0);
}
END_TEST

/* ======================================================================
 * ss_register_fine on an exactly linear model
 * ==================================================================== */

/* Sums of a frame that is the reference shifted by t, seen through the
 * linearised model e(s) = gx·(tx - sx) + gy·(ty - sy) + (g - 1)·S + b +
 * noise: per band, the gradient block M (u, v, w), S with Σ S = 0 and
 * Σ S² = ss, no cross sums, n pixels, noise variance var; the response
 * block J equals M·resp. Band k's noise contributes noise_k to q, p (so the
 * jackknife sees a spread). */
typedef struct lin_model {
    double u, v, w, n, ss, ll, var, tx, ty, gain, off, resp;
    double qn[SS_FINE_BANDS], pn[SS_FINE_BANDS];
    int calls;
} lin_model_t;

static void lin_sums(void *ctx, double sx, double sy, ss_fine_bands_t sums)
{
    lin_model_t *m = ctx;
    const double ax = m->tx - sx, ay = m->ty - sy, B = SS_FINE_BANDS;
    m->calls++;
    memset(sums, 0, sizeof(ss_fine_bands_t));
    for (int i = 0; i < 2 * SS_FINE_BANDS; i++) {
        const int b = i % SS_FINE_BANDS;
        double *t = sums[i / SS_FINE_BANDS][b];
        t[SS_FS_XX] = m->u / B;
        t[SS_FS_XY] = m->v / B;
        t[SS_FS_YY] = m->w / B;
        t[SS_FS_SS] = m->ss / B;
        t[SS_FS_LL] = m->ll / B;
        t[SS_FS_N] = m->n / B;
        t[SS_FS_XE] = (m->u * ax + m->v * ay) / B + m->qn[b];
        t[SS_FS_YE] = (m->v * ax + m->w * ay) / B + m->pn[b];
        t[SS_FS_SE] = (m->gain - 1.0) * m->ss / B;
        t[SS_FS_E] = m->off * m->n / B;
        t[SS_FS_EE] = (m->n * m->var + m->u * ax * ax + 2 * m->v * ax * ay + m->w * ay * ay +
                       (m->gain - 1.0) * (m->gain - 1.0) * m->ss + m->off * m->off * m->n) / B;
        t[SS_FS_XDX] = m->resp * m->u / B;
        t[SS_FS_XDY] = m->resp * m->v / B;
        t[SS_FS_YDX] = m->resp * m->v / B;
        t[SS_FS_YDY] = m->resp * m->w / B;
    }
}

START_TEST(test_register_fine_linear_model)
{
    ss_pipeline_cfg_t c;
    reg_cfg(&c);
    lin_model_t m = { .u = 4000.0, .v = 300.0, .w = 2500.0, .n = 10000.0, .ss = 5e5, .ll = 2e4,
                      .var = 4.0,
                      .tx = 3.37, .ty = -1.82, .gain = 1.04, .off = 12.0, .resp = 1.0 };
    ss_shift_t r;
    ss_register_fine(lin_sums, &m, 3.0, -2.0, &c, &r);
    ck_assert_msg(r.ok, "%s", r.why);
    /* step 1 lands exactly; step 2 measures δ = 0 and stops; the gain and
     * the offset are fitted, not absorbed into the shift */
    ck_assert_double_eq_tol(r.sx, 3.37, 1e-12);
    ck_assert_double_eq_tol(r.sy, -1.82, 1e-12);
    ck_assert_double_eq_tol(r.gain, 1.04, 1e-12);
    ck_assert_double_eq_tol(r.offset, 12.0, 1e-9);
    ck_assert_int_eq(r.iterations, 2);
    ck_assert_int_eq(m.calls, 3);           /* two steps and the probe */
    /* no band-to-band spread: jackknife errors 0; the formal error from
     * σe² = n·var/(n - 5) */
    ck_assert_double_eq_tol(r.err_x, 0.0, 1e-12);
    const double det = m.u * m.w - m.v * m.v, se2 = m.n * m.var / (m.n - 5);
    ck_assert_double_eq_tol(r.err_formal, sqrt(se2 * (m.w + m.u) / det / 2.0), 1e-12);
    ck_assert_double_eq_tol(r.det_ratio, det / (m.u * m.w), 1e-12);

    /* the jackknife: band b's noise moves the step by M⁻¹(qn_b, pn_b);
     * with the response twice the gradient block the result moves half as
     * much (a Newton step), and so do the errors */
    for (int b = 0; b < SS_FINE_BANDS; b++) {
        m.qn[b] = (b % 2 ? 1.0 : -1.0) * 0.8;
        m.pn[b] = 0.0;
    }
    ss_register_fine(lin_sums, &m, 3.0, -2.0, &c, &r);
    ck_assert(r.ok);
    const double B = SS_FINE_BANDS, dq = 0.8;
    /* deleting band b moves the total q by -qn_b: the step by -M⁻¹ qn_b,
     * with M the (B-1)/B part; x component w/det' */
    const double f = (B - 1.0) / B, detb = f * f * det;
    const double step_x = dq * f * m.w / detb;
    const double want = sqrt((B - 1.0) / B * B * step_x * step_x);
    ck_assert_msg(fabs(r.err_x - want) < 1e-9, "err_x %.12g want %.12g", r.err_x, want);
    m.resp = 2.0;
    ss_register_fine(lin_sums, &m, 3.0, -2.0, &c, &r);
    ck_assert(r.ok);
    ck_assert_msg(fabs(r.err_x - want / 2.0) < 1e-9, "err_x %.12g want %.12g", r.err_x,
                  want / 2.0);
    m.resp = 1.0;
    for (int b = 0; b < SS_FINE_BANDS; b++)
        m.qn[b] = 0.0;

    /* max_iter bounds the steps */
    c.reg_max_iter = 1;
    m.calls = 0;
    ss_register_fine(lin_sums, &m, 0.0, 0.0, &c, &r);
    ck_assert(r.ok);
    ck_assert_int_eq(r.iterations, 1);
    ck_assert_int_eq(m.calls, 2);
    reg_cfg(&c);

    /* a noiseless perfect fit: no residual left, the probe must still pass */
    lin_model_t exact = m;
    exact.var = 0.0;
    ss_register_fine(lin_sums, &exact, 3.0, -2.0, &c, &r);
    ck_assert_msg(r.ok, "%s", r.why);
    ck_assert(isinf(r.contrast) && r.contrast > 0.0);

    /* featureless: gradients all along one direction (v² = u·w) */
    lin_model_t flat = m;
    flat.v = sqrt(flat.u * flat.w);
    ss_register_fine(lin_sums, &flat, 0.0, 0.0, &c, &r);
    ck_assert(!r.ok);
    ck_assert_ptr_nonnull(strstr(r.why, "featureless"));

    /* too few pixels */
    lin_model_t few = m;
    few.n = 10.0;
    ss_register_fine(lin_sums, &few, 0.0, 0.0, &c, &r);
    ck_assert(!r.ok);
    ck_assert_ptr_nonnull(strstr(r.why, "few"));

    /* the frame does not show the reference's sky: gain near 0 */
    lin_model_t dark = m;
    dark.gain = 0.02;
    ss_register_fine(lin_sums, &dark, 3.0, -2.0, &c, &r);
    ck_assert(!r.ok);
    ck_assert_ptr_nonnull(strstr(r.why, "gain"));

    /* no match: structure far below the noise, the probe changes nothing */
    lin_model_t weak = m;
    weak.u = 4.0;
    weak.v = 0.3;
    weak.w = 2.5;
    weak.var = 1000.0;
    ss_register_fine(lin_sums, &weak, 0.0, 0.0, &c, &r);
    ck_assert(!r.ok);
    ck_assert_ptr_nonnull(strstr(r.why, "no match"));
    ck_assert(r.contrast >= 0.0 && r.contrast < SS_FINE_MIN_CONTRAST);
}
END_TEST

/* The jackknife's variance over the deletions that took part: bands
 * whose deletion failed (ok 0: no pixels, or a singular rest) are
 * skipped, whatever their slots hold, and the rest weigh as a jackknife
 * of that many; fewer than two is no estimate. */
START_TEST(test_fine_jk_var_flags)
{
    const double g = NAN, big = 1e300;
    const double dx[6] = { 1.0, g, 3.0, big, 5.0, g }, dy[6] = { 2.0, big, 2.0, g, 5.0, 1.0 };
    const int ok[6] = { 1, 0, 1, 0, 1, 0 };
    double v[3];
    ck_assert_int_eq(ss_fine_jk_var(dx, dy, ok, 6, v), 0);
    /* x: 1, 3, 5 around 3; y: 2, 2, 5 around 3; times (3 - 1)/3 */
    ck_assert_double_eq_tol(v[0], 8.0 * 2.0 / 3.0, 1e-12);
    ck_assert_double_eq_tol(v[1], 6.0 * 2.0 / 3.0, 1e-12);
    ck_assert_double_eq_tol(v[2], 6.0 * 2.0 / 3.0, 1e-12);
    const int one[6] = { 0, 0, 1, 0, 0, 0 };
    ck_assert_int_eq(ss_fine_jk_var(dx, dy, one, 6, v), -1);
    /* the formal error's two parts add to what ss_fine_formal gives */
    ss_fine_bands_t b;
    memset(b, 0, sizeof b);
    for (int k = 0; k < SS_FINE_BANDS; k++) {
        double *t = b[0][k];
        t[SS_FS_XX] = 400.0 + k;
        t[SS_FS_XY] = 30.0;
        t[SS_FS_YY] = 250.0 + 2 * k;
        t[SS_FS_SS] = 5e4;
        t[SS_FS_LL] = 2e3;
        t[SS_FS_N] = 1000.0;
        t[SS_FS_EE] = 4000.0 + k;
    }
    double s[SS_FINE_NSUMS], th[SS_FC_NPAR] = { 0 };
    ss_fine_total(b[0][0], s);
    const double px = ss_fine_formal_part(s, th, 0), py = ss_fine_formal_part(s, th, 1);
    ck_assert(px > 0.0 && py > 0.0 && px != py);
    ck_assert(ss_fine_formal(s, th) == ss_fine_formal_of(px, py));
    ck_assert(ss_fine_formal_of(px, py) == sqrt((px + py) / 2.0));
}
END_TEST

/* ======================================================================
 * the interpolation bias
 * ==================================================================== */

/* Pixel-integrated Gaussian stars (σ px) at sky positions p, seen with
 * shift (sx, 0): drawn at p - s. */
static void render_stars(float *im, int w, int h, int n, const double *px, const double *py,
                         const double *fl, double sigma, double sx)
{
    const double k = 1.0 / (sqrt(2.0) * sigma);
    for (int i = 0; i < w * h; i++)
        im[i] = 0.0f;
    for (int s = 0; s < n; s++) {
        const double x0 = px[s] - sx, y0 = py[s];
        for (int y = (int)y0 - 10; y <= (int)y0 + 10; y++)
            for (int x = (int)x0 - 10; x <= (int)x0 + 10; x++) {
                if (x < 0 || y < 0 || x >= w || y >= h)
                    continue;
                const double ax = 0.5 * (erf((x + 0.5 - x0) * k) - erf((x - 0.5 - x0) * k));
                const double ay = 0.5 * (erf((y + 0.5 - y0) * k) - erf((y - 0.5 - y0) * k));
                im[y * w + x] += (float)(fl[s] * ax * ay);
            }
    }
}

typedef struct two {
    const float *cur, *ref, *S, *gx, *gy;
    int w, h;
} two_t;

static void two_sums(void *ctx, double sx, double sy, ss_fine_bands_t s)
{
    const two_t *t = ctx;
    ss_fine_sums(t->cur, t->ref, t->S, t->gx, t->gy, t->w, t->h, sx, sy, s);
}

/* On noiseless rendered stars the fine step alone errs by up to 0.011 px
 * (σ = 1.4) in a pattern of the fraction; ss_interp_bias's κ predicts it
 * and ss_interp_unbias takes most of it out. */
START_TEST(test_interp_bias)
{
    enum { W = 256, H = 256, NS = 40 };
    static float R[W * H], F[W * H], S[W * H], gx[W * H], gy[W * H];
    double px[NS], py[NS], fl[NS];
    rng_state = 1;
    for (int i = 0; i < NS; i++) {
        px[i] = 20.0 + 216.0 * rng_unif();
        py[i] = 20.0 + 216.0 * rng_unif();
        fl[i] = 1000.0 + 10000.0 * rng_unif();
    }
    ss_pipeline_cfg_t c;
    reg_cfg(&c);
    c.reg_tol = 1e-7;
    c.reg_max_iter = 20;
    static const double sigmas[] = { 1.0, 1.4, 2.0 };
    for (size_t k = 0; k < sizeof sigmas / sizeof sigmas[0]; k++) {
        render_stars(R, W, H, NS, px, py, fl, sigmas[k], 0.0);
        ss_reference_prep(R, W, H, S, gx, gy);
        double kx, ky;
        ss_interp_bias(R, W, H, &kx, &ky);
        double raw2 = 0.0, fixed2 = 0.0;
        for (int j = 1; j < 10; j++) {
            const double f = 0.1 * j;
            render_stars(F, W, H, NS, px, py, fl, sigmas[k], f);
            two_t t = { F, R, S, gx, gy, W, H };
            ss_shift_t r;
            ss_register_fine(two_sums, &t, round(f), 0.0, &c, &r);
            ck_assert_msg(r.ok, "σ %.1f shift %.1f: %s (at %.4f after %d)", sigmas[k], f, r.why,
                          r.sx, r.iterations);
            const double fixed = ss_interp_unbias(r.sx, kx);
            raw2 += (r.sx - f) * (r.sx - f);
            fixed2 += (fixed - f) * (fixed - f);
        }
        const double raw = sqrt(raw2 / 9.0), fixed = sqrt(fixed2 / 9.0);
        printf("interpolation bias, σ %.1f: κ %.4f/%.4f, error RMS %.5f px raw, %.5f px corrected\n",
               sigmas[k], kx, ky, raw, fixed);
        ck_assert(fabs(kx - ky) < 0.2 * kx);
        ck_assert_msg(fixed < 0.25 * raw, "σ %.1f: %.5f of %.5f left", sigmas[k], fixed, raw);
    }
}
END_TEST

/* ======================================================================
 * end to end on synthetic star fields
 * ==================================================================== */

/* One feed, run the way the CPU backend runs the stages: calibrate -> 3×3
 * median -> hot-pixel learning (learned mask applied to both planes) ->
 * the registration input (sharp outliers cleaned, local mean removed) ->
 * reference (the first frame's input) -> coarse -> fine -> the driver's
 * interpolation-bias correction. */
typedef struct feed {
    ss_pipeline_cfg_t cfg;
    ss_synth_t *syn;
    ss_frame_t raw;
    int w, h;
    float *frame, *filt, *hp, *ref, *S, *gx, *gy, *scratch;
    float *ref_lvl[SS_MAX_LEVELS + 1], *cur_lvl[SS_MAX_LEVELS + 1];
    ss_pyramid_t ref_pyr, cur_pyr;
    ss_hotpix_t hot;
    ss_peak_t *peaks;
    int *hist;
    double kx, ky;
} feed_t;

static void feed_open(feed_t *f, const ss_synth_cfg_t *sc)
{
    memset(f, 0, sizeof *f);
    reg_cfg(&f->cfg);
    f->w = sc->width;
    f->h = sc->height;
    const size_t n = (size_t)f->w * (size_t)f->h;
    f->syn = ss_synth_new(sc);
    ck_assert_ptr_nonnull(f->syn);
    f->raw.capacity = n * 4;
    f->raw.pixels = malloc(f->raw.capacity);
    f->frame = malloc(n * sizeof(float));
    f->filt = malloc(n * sizeof(float));
    f->hp = malloc(n * sizeof(float));
    f->ref = malloc(n * sizeof(float));
    f->S = malloc(n * sizeof(float));
    f->gx = malloc(n * sizeof(float));
    f->gy = malloc(n * sizeof(float));
    f->scratch = malloc(5 * n * sizeof(float));
    f->peaks = malloc(2 * (size_t)SS_COARSE_PEAK_CAP * sizeof(ss_peak_t));
    f->hist = malloc((size_t)(2 * SS_COARSE_MAX_R + 1) * (2 * SS_COARSE_MAX_R + 1) * sizeof(int));
    ck_assert(f->raw.pixels && f->frame && f->filt && f->hp && f->ref && f->S && f->gx && f->gy &&
              f->scratch && f->peaks && f->hist);
    ck_assert_int_eq(ss_hotpix_init(&f->hot, f->w, f->h), 0);
    const int L = f->cfg.reg_levels;
    f->ref_pyr.levels = f->cur_pyr.levels = L;
    f->ref_pyr.w[0] = f->cur_pyr.w[0] = f->w;
    f->ref_pyr.h[0] = f->cur_pyr.h[0] = f->h;
    f->ref_pyr.lvl[0] = f->ref;
    f->cur_pyr.lvl[0] = f->hp;
    for (int l = 1; l <= L; l++) {
        f->ref_pyr.w[l] = f->cur_pyr.w[l] = f->ref_pyr.w[l - 1] / 2;
        f->ref_pyr.h[l] = f->cur_pyr.h[l] = f->ref_pyr.h[l - 1] / 2;
        const size_t nl = (size_t)f->ref_pyr.w[l] * (size_t)f->ref_pyr.h[l];
        f->ref_lvl[l] = malloc(nl * sizeof(float));
        f->cur_lvl[l] = malloc(nl * sizeof(float));
        ck_assert(f->ref_lvl[l] && f->cur_lvl[l]);
        f->ref_pyr.lvl[l] = f->ref_lvl[l];
        f->cur_pyr.lvl[l] = f->cur_lvl[l];
    }
}

static void feed_close(feed_t *f)
{
    ss_synth_destroy(&f->syn);
    free(f->raw.pixels);
    free(f->frame);
    free(f->filt);
    free(f->hp);
    free(f->ref);
    free(f->S);
    free(f->gx);
    free(f->gy);
    free(f->scratch);
    free(f->peaks);
    free(f->hist);
    for (int l = 1; l <= SS_MAX_LEVELS; l++) {
        free(f->ref_lvl[l]);
        free(f->cur_lvl[l]);
    }
    ss_hotpix_free(&f->hot);
}

/* FRAME, FILTERED and the registration input of a raw frame. */
static void feed_process(feed_t *f)
{
    const ss_roi_t roi = { 0, 0, f->w, f->h };
    ss_calibrate(f->raw.pixels, f->raw.dtype, f->raw.width, f->raw.valid, roi, NULL, NULL, 0.0,
                 NULL, f->frame);
    ss_median3x3(f->frame, f->w, f->h, f->filt);
    if (f->cfg.hotpix_learn) {
        ss_hotpix_update(&f->hot, f->frame, f->filt, f->cfg.hotpix_k, f->cfg.hotpix_frames,
                         f->cfg.hotpix_fraction, f->scratch);
        ss_hotpix_apply(&f->hot, f->frame, f->filt);
    }
    const size_t n = (size_t)f->w * (size_t)f->h;
    ss_clean_sharp(f->frame, f->filt, f->w, f->h, f->cfg.clean_k, f->cfg.clean_ratio, f->scratch,
                   f->scratch + n);
    ss_hipass(f->scratch, f->w, f->h, ss_cfg_hipass_radius(&f->cfg), f->hp, f->scratch + 3 * n);
}

/* Next synthetic frame (ingest). */
static void feed_ingest(feed_t *f, ss_synth_truth_t *truth)
{
    ck_assert_int_eq(ss_synth_next(f->syn, &f->raw, truth), SS_OK);
    feed_process(f);
}

static void build_pyramid(ss_pyramid_t *p)
{
    for (int l = 1; l <= p->levels; l++)
        ss_bin2(p->lvl[l - 1], p->w[l - 1], p->h[l - 1], (float *)p->lvl[l]);
}

/* The registration input becomes the reference. */
static void feed_set_reference(feed_t *f)
{
    memcpy(f->ref, f->hp, (size_t)f->w * (size_t)f->h * sizeof(float));
    build_pyramid(&f->ref_pyr);
    ss_reference_prep(f->ref, f->w, f->h, f->S, f->gx, f->gy);
    ss_interp_bias(f->ref, f->w, f->h, &f->kx, &f->ky);
}

static void feed_fine_sums(void *ctx, double sx, double sy, ss_fine_bands_t sums)
{
    feed_t *f = ctx;
    ss_fine_sums(f->hp, f->ref, f->S, f->gx, f->gy, f->w, f->h, sx, sy, sums);
}

/* Coarse, then fine from the coarse integer shift (from 0 when coarse
 * failed, so that the fine stage's own failure test is exercised too). */
static void feed_register(feed_t *f, ss_coarse_t *co, ss_shift_t *sh)
{
    build_pyramid(&f->cur_pyr);
    ss_register_coarse(&f->ref_pyr, &f->cur_pyr, &f->cfg, f->peaks, SS_COARSE_PEAK_CAP, f->hist,
                       co);
    ss_register_fine(feed_fine_sums, f, co->ok ? co->dx : 0, co->ok ? co->dy : 0, &f->cfg, sh);
    sh->sx = ss_interp_unbias(sh->sx, f->kx);
    sh->sy = ss_interp_unbias(sh->sy, f->ky);
}

/* The detector pixels that carry a hot pixel: the same field rendered with
 * and without hot pixels differs there only (the synth draws stars before
 * hot pixels, noise and cosmic rays from their own streams). */
static int hot_pixel_map(const ss_synth_cfg_t *sc, uint8_t *is_hot)
{
    ss_synth_cfg_t a = *sc, b = *sc;
    b.n_hot = 0;
    const size_t n = (size_t)sc->width * (size_t)sc->height;
    ss_synth_t *sa = ss_synth_new(&a), *sb = ss_synth_new(&b);
    ss_frame_t fa = { 0 }, fb = { 0 };
    fa.capacity = fb.capacity = n * ss_dtype_size(sc->dtype);
    fa.pixels = malloc(fa.capacity);
    fb.pixels = malloc(fb.capacity);
    ck_assert(sa && sb && fa.pixels && fb.pixels);
    ck_assert_int_eq(ss_synth_next(sa, &fa, NULL), SS_OK);
    ck_assert_int_eq(ss_synth_next(sb, &fb, NULL), SS_OK);
    int count = 0;
    for (size_t i = 0; i < n; i++) {
        is_hot[i] = ss_dtype_get(fa.pixels, sc->dtype, i) != ss_dtype_get(fb.pixels, sc->dtype, i);
        count += is_hot[i];
    }
    free(fa.pixels);
    free(fb.pixels);
    ss_synth_destroy(&sa);
    ss_synth_destroy(&sb);
    return count;
}

/* The synthetic field of these tests: the synth defaults (1024², u16,
 * 2000 Gaussian stars σ 1.4 px, 300..2e5 ADU, sky 1000, gain 1, read
 * noise 5, jitter 1 px rms per axis) with 50 hot pixels and cosmic rays. */
static void field_cfg(ss_synth_cfg_t *sc, uint64_t seed)
{
    ss_synth_defaults(sc);
    sc->seed = seed;
    sc->n_hot = 50;
    sc->cosmic_rate = 50.0;         /* hits per Mpix per frame */
}

/* Register n frames of a field against its first one; every frame must
 * register, within 1 px at the coarse step. Returns the shift error RMS
 * per axis (px) and, in *ratio, that over the RMS of the reported
 * standard errors; *worst gets the largest error. */
static double run_field(const ss_synth_cfg_t *sc, int n, const char *what, double *ratio,
                        double *worst)
{
    feed_t f;
    feed_open(&f, sc);
    ss_synth_truth_t tr;
    feed_ingest(&f, &tr);
    const double sx0 = tr.sx, sy0 = tr.sy;
    feed_set_reference(&f);
    double e2 = 0.0, r2 = 0.0;
    *worst = 0.0;
    for (int t = 1; t <= n; t++) {
        feed_ingest(&f, &tr);
        const double tx = tr.sx - sx0, ty = tr.sy - sy0;
        ss_coarse_t co;
        ss_shift_t sh;
        feed_register(&f, &co, &sh);
        ck_assert_msg(co.ok, "%s frame %d: coarse failed: %s", what, t, co.why);
        ck_assert_msg(fabs(co.dx - tx) < 1.0 && fabs(co.dy - ty) < 1.0,
                      "%s frame %d: coarse (%d,%d), true (%.3f,%.3f)", what, t, co.dx, co.dy, tx,
                      ty);
        ck_assert_msg(sh.ok, "%s frame %d: fine failed: %s", what, t, sh.why);
        const double ex = sh.sx - tx, ey = sh.sy - ty;
        e2 += ex * ex + ey * ey;
        r2 += sh.err_x * sh.err_x + sh.err_y * sh.err_y;
        *worst = SS_MAX(*worst, hypot(ex, ey));
        if (getenv("SKYSIEVE_TEST_VERBOSE"))
            printf("  %d: err (%.4f,%.4f) reported (%.4f,%.4f) formal %.4f gain %.3f psf %.3f\n", t, ex, ey,
                   sh.err_x, sh.err_y, sh.err_formal, sh.gain, tr.psf_sigma);
    }
    feed_close(&f);
    *ratio = sqrt(e2 / r2);
    const double rms = sqrt(e2 / (2.0 * n));
    printf("%s: shift error RMS %.4f px per axis, worst %.4f px, RMS/reported %.2f\n", what, rms,
           *worst, *ratio);
    return rms;
}

#define N_JITTERED 30               /* registered frames after the reference */
#define RMS_TARGET 0.01             /* px per axis, the shift error's RMS */
#define RATIO_MAX 1.5               /* reported errors within this factor of the real ones */

START_TEST(test_jittered_field_accuracy)
{
    ss_synth_cfg_t sc;
    field_cfg(&sc, 7);
    const size_t n = (size_t)sc.width * (size_t)sc.height;
    uint8_t *is_hot = malloc(n);
    ck_assert_ptr_nonnull(is_hot);
    ck_assert_int_eq(hot_pixel_map(&sc, is_hot), 50);
    double ratio, worst;
    const double rms = run_field(&sc, N_JITTERED, "jittered field", &ratio, &worst);
    ck_assert_msg(rms <= RMS_TARGET, "shift error RMS %.4f px > %.3f px", rms, RMS_TARGET);
    ck_assert_msg(ratio <= RATIO_MAX && ratio >= 1.0 / RATIO_MAX, "error ratio %.2f", ratio);

    /* The hot pixels were learned (hotpix_frames = 8), and nothing else */
    feed_t f;
    feed_open(&f, &sc);
    ss_synth_truth_t tr;
    for (int t = 0; t < 12; t++)
        feed_ingest(&f, &tr);
    int learned = 0, learned_hot = 0;
    for (size_t i = 0; i < n; i++) {
        learned += f.hot.learned[i];
        learned_hot += f.hot.learned[i] && is_hot[i];
    }
    printf("hot pixels: %d of 50 learned, %d other pixels learned\n", learned_hot,
           learned - learned_hot);
    ck_assert_int_ge(learned_hot, 45);
    ck_assert_int_le(learned - learned_hot, 2);
    feed_close(&f);
    free(is_hot);
}
END_TEST

/* The sky of real stations: the sky level changes by 5 % rms from frame to
 * frame, the transparency by 5 %, the seeing by 10 %, and stray light
 * fixed on the detector comes and goes. Raw block matching turned every
 * block ambiguous at 5 % (no frame registered); the high-passed input,
 * the star vote and the fine step's gain and offset do not care. */
START_TEST(test_sky_and_transparency)
{
    ss_synth_cfg_t sc;
    field_cfg(&sc, 21);
    sc.sky_var = 0.05;
    sc.transparency = 0.05;
    sc.seeing_wobble = 0.10;
    sc.stray = 800.0;
    sc.sky_grad_x = 0.3;
    double ratio, worst;
    const double rms = run_field(&sc, 20, "sky, transparency, seeing, stray light", &ratio, &worst);
    ck_assert_msg(rms <= 0.02, "shift error RMS %.4f px", rms);
    ck_assert_msg(ratio <= RATIO_MAX && ratio >= 1.0 / RATIO_MAX, "error ratio %.2f", ratio);
}
END_TEST

/* What the INDI CCD simulator writes: a static camera, thirty stars on
 * 1280×1024, centred on whole pixels, an undersampled PSF, uniform integer
 * noise 0..9 and hardly any sky; then the same with whole-pixel pointing
 * changes. It failed "0 of 0 structured blocks" with blocks on a grid. */
START_TEST(test_sparse_static_integer)
{
    ss_synth_cfg_t sc;
    ss_synth_defaults(&sc);
    sc.seed = 3;
    sc.width = 1280;
    sc.height = 1024;
    sc.n_stars = 30;
    sc.flux_min = 1500.0;
    sc.flux_max = 60000.0;
    sc.psf_sigma = 0.9;
    sc.star_snap = 1;
    sc.jitter = 0.0;
    sc.sky = 0.0;
    sc.gain = 0.0;
    sc.read_noise = 0.0;
    sc.bias = 0.0;
    sc.noise_model = SS_SYNTH_NOISE_UNIFORM;
    sc.uniform_max = 9;
    double ratio, worst;
    run_field(&sc, 8, "sparse static field", &ratio, &worst);
    ck_assert_msg(worst <= 0.05, "static camera: error %.4f px", worst);
    /* whole-pixel pointing changes of up to ±6 px */
    sc.jitter = 3.0;
    sc.seed = 4;
    run_field(&sc, 8, "sparse field, whole-pixel jitter", &ratio, &worst);
}
END_TEST

/* Re-pointing jumps of ±64 px (the search range at the default binning)
 * and shifts ramping beyond ±20 px, found without a history reset. */
START_TEST(test_large_shifts)
{
    static const double drift[2][2] = { { 2.1, -2.1 }, { -2.1, 2.1 } };
    for (int run = 0; run < 2; run++) {
        ss_synth_cfg_t sc;
        field_cfg(&sc, 11 + (uint64_t)run);
        sc.jitter = 0.3;
        sc.drift_x = drift[run][0];
        sc.drift_y = drift[run][1];
        double ratio, worst;
        run_field(&sc, 10, run ? "drift -+" : "drift +-", &ratio, &worst);
        ck_assert_msg(worst <= 0.05, "drift run %d: error %.4f px", run, worst);
    }
    ss_synth_cfg_t sc;
    field_cfg(&sc, 13);
    sc.jump_at = 3;
    sc.jump_px = 64.0;
    double ratio, worst;
    run_field(&sc, 6, "a 64 px jump", &ratio, &worst);
    ck_assert_msg(worst <= 0.05, "jump: error %.4f px", worst);
}
END_TEST

/* A blank frame (sky and noise, no stars) against a star-field reference,
 * and a star field against a blank reference: both stages fail, saying
 * why. */
START_TEST(test_blank_frame_fails)
{
    ss_synth_cfg_t sc, bc;
    field_cfg(&sc, 5);
    bc = sc;
    bc.n_stars = 0;
    bc.seed = 99;
    feed_t stars, blank;
    feed_open(&stars, &sc);
    feed_open(&blank, &bc);
    ss_synth_truth_t tr;
    const size_t n = (size_t)stars.w * (size_t)stars.h;

    /* star reference, blank frames */
    feed_ingest(&stars, &tr);
    feed_set_reference(&stars);
    for (int t = 0; t < 4; t++) {
        feed_ingest(&blank, &tr);
        memcpy(stars.hp, blank.hp, n * sizeof(float));
        ss_coarse_t co;
        ss_shift_t sh;
        feed_register(&stars, &co, &sh);
        ck_assert_msg(!co.ok, "blank frame %d: coarse succeeded with (%d,%d)", t, co.dx, co.dy);
        ck_assert_int_gt((int)strlen(co.why), 0);
        ck_assert_msg(!sh.ok, "blank frame %d: fine succeeded with (%.3f,%.3f)", t, sh.sx, sh.sy);
        ck_assert_int_gt((int)strlen(sh.why), 0);
        /* and from the right integer shift too: the fine stage's own test */
        ss_register_fine(feed_fine_sums, &stars, 0.0, 0.0, &stars.cfg, &sh);
        ck_assert(!sh.ok);
    }

    /* blank reference, star frames */
    feed_set_reference(&blank);
    for (int t = 0; t < 2; t++) {
        feed_ingest(&stars, &tr);
        memcpy(blank.hp, stars.hp, n * sizeof(float));
        ss_coarse_t co;
        ss_shift_t sh;
        feed_register(&blank, &co, &sh);
        ck_assert_msg(!co.ok, "blank reference %d: coarse succeeded", t);
        ck_assert_int_lt(co.n_ref, 3);          /* no star to match */
        ck_assert_msg(!sh.ok, "blank reference %d: fine succeeded", t);
        ck_assert_int_gt((int)strlen(sh.why), 0);
    }
    feed_close(&stars);
    feed_close(&blank);
}
END_TEST

/* Results must not depend on the number of threads (stages.h): the same
 * registration with 1 and with 3 OpenMP threads, compared bit for bit. */
START_TEST(test_thread_count_independent)
{
#ifdef _OPENMP
    ss_synth_cfg_t sc;
    field_cfg(&sc, 3);
    sc.width = 512;
    sc.height = 384;
    feed_t f;
    feed_open(&f, &sc);
    ss_synth_truth_t tr;
    feed_ingest(&f, &tr);
    feed_set_reference(&f);
    feed_ingest(&f, &tr);
    ss_coarse_t co[2];
    ss_shift_t sh[2];
    static ss_fine_bands_t sums[2];
    double kx[2], ky[2];
    const int threads[2] = { 1, 3 };
    const int saved = omp_get_max_threads();
    for (int k = 0; k < 2; k++) {
        omp_set_num_threads(threads[k]);
        feed_process(&f);
        feed_register(&f, &co[k], &sh[k]);
        ss_fine_sums(f.hp, f.ref, f.S, f.gx, f.gy, f.w, f.h, 0.37, -1.61, sums[k]);
        ss_interp_bias(f.ref, f.w, f.h, &kx[k], &ky[k]);
    }
    omp_set_num_threads(saved);
    ck_assert_msg(co[0].ok && sh[0].ok, "%s %s", co[0].why, sh[0].why);
    ck_assert(co[0].dx == co[1].dx && co[0].dy == co[1].dy && co[0].n_votes == co[1].n_votes);
    ck_assert(sh[0].sx == sh[1].sx && sh[0].sy == sh[1].sy && sh[0].err_x == sh[1].err_x &&
              sh[0].contrast == sh[1].contrast);
    ck_assert(memcmp(sums[0], sums[1], sizeof sums[0]) == 0);
    ck_assert(kx[0] == kx[1] && ky[0] == ky[1]);
    feed_close(&f);
#else
    printf("built without OpenMP: nothing to compare\n");
#endif
}
END_TEST

static Suite *registration_suite(void)
{
    Suite *s = suite_create("registration");
    TCase *tc = tcase_create("definitions");
    tcase_add_test(tc, test_bin2_definition);
    tcase_add_test(tc, test_reference_prep_definition);
    tcase_add_test(tc, test_hipass_definition);
    tcase_add_test(tc, test_hipass_radii);
    tcase_add_test(tc, test_peak_definition);
    tcase_add_test(tc, test_vote);
    tcase_add_test(tc, test_fine_sums_bruteforce);
    tcase_add_test(tc, test_register_fine_linear_model);
    tcase_add_test(tc, test_fine_jk_var_flags);
    tcase_add_test(tc, test_interp_bias);
    suite_add_tcase(s, tc);
    tc = tcase_create("synthetic_fields");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_jittered_field_accuracy);
    tcase_add_test(tc, test_sky_and_transparency);
    tcase_add_test(tc, test_sparse_static_integer);
    tcase_add_test(tc, test_large_shifts);
    tcase_add_test(tc, test_blank_frame_fails);
    tcase_add_test(tc, test_thread_count_independent);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return ss_run_suite(registration_suite());
}
