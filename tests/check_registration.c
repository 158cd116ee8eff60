/*
 * check_registration.c — tests of ALGORITHM.md §2 (pipeline/register_coarse.c,
 * pipeline/register_fine.c).
 *
 * Definitions: ss_bin2 and ss_reference_prep against their contracts
 * written out again here (NaN rules included); ss_fine_sums against a
 * brute-force recomputation in long double; the iteration of
 * ss_register_fine on an exactly linear model (step, convergence, standard
 * errors, each failure path).
 *
 * End to end, on synthetic star fields from tools/synth (run as the driver
 * runs the stages: calibrate -> 3×3 median -> hot-pixel learning ->
 * reference from the first frame's filtered image -> coarse -> fine):
 * shift error RMS over 31 jittered 1024² frames with 50 hot pixels and
 * cosmic rays; shifts up to ±20 px; failure on blank frames.
 */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/stages.h"
#include "tools/synth.h"
#include "ss_test.h"

#ifdef _OPENMP
#include <omp.h>
#endif


static int same(float a, float b)
{
    return (isnan(a) && isnan(b)) || a == b;
}

/* The registration parameters, filled by hand (the config module's keys).
 * As the config defaults (levels 2, search 8, max_iter 4, tol 0.002,
 * ambiguity 0.9, min_det 1e-6) except block 24 and blocks 36: with 16 and
 * 16 the coarse search has too few structured blocks on fields of <= 1000
 * stars/Mpix (a 1024² synth field of 500 stars failed 30 of 40 frames with
 * block 24 / blocks 16, none with 24 / 36; see the report). */
static void reg_cfg(ss_pipeline_cfg_t *c)
{
    memset(c, 0, sizeof *c);
    c->reg_levels = 2;
    c->reg_block = 24;
    c->reg_blocks = 36;
    c->reg_search = 8;
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
 * ss_fine_sums against brute force
 * ==================================================================== */

/* The contract of ss_fine_sums, pixel by pixel, summed in long double. */
static void brute_sums(const float *cur, const float *S, const float *gx, const float *gy, int w,
                       int h, double sx, double sy, long double out[SS_FINE_NSUMS],
                       long double mag[SS_FINE_NSUMS])
{
    for (int k = 0; k < SS_FINE_NSUMS; k++)
        out[k] = mag[k] = 0.0L;
    for (int y = 1; y < h - 1; y++)
        for (int x = 1; x < w - 1; x++) {
            const int i = y * w + x;
            if (!isfinite(S[i]) || !isfinite(gx[i]) || !isfinite(gy[i]))
                continue;
            const double ix = floor(-sx), iy = floor(-sy);
            const double fx = -sx - ix, fy = -sy - iy;
            const double x0 = x + ix, y0 = y + iy;
            if (x0 < 0 || y0 < 0 || x0 + 1 > w - 1 || y0 + 1 > h - 1)
                continue;
            const int a = (int)y0 * w + (int)x0;
            const float ta = cur[a], tb = cur[a + 1], tc = cur[a + w], td = cur[a + w + 1];
            if (isnan(ta) || isnan(tb) || isnan(tc) || isnan(td))
                continue;
            const double v = (1 - fy) * ((1 - fx) * ta + fx * tb) + fy * ((1 - fx) * tc + fx * td);
            const double e = v - S[i];
            const long double t[SS_FINE_NSUMS] = {
                [SS_FS_U] = (long double)gx[i] * gx[i], [SS_FS_V] = (long double)gx[i] * gy[i],
                [SS_FS_W] = (long double)gy[i] * gy[i], [SS_FS_Q] = (long double)gx[i] * e,
                [SS_FS_P] = (long double)gy[i] * e,     [SS_FS_N] = 1.0L,
                [SS_FS_E] = e,                          [SS_FS_E2] = (long double)e * e,
            };
            for (int k = 0; k < SS_FINE_NSUMS; k++) {
                out[k] += t[k];
                mag[k] += fabsl(t[k]);
            }
        }
}

START_TEST(test_fine_sums_bruteforce)
{
    /* sizes that are not multiples of the 64 row chunks */
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
        double got[SS_FINE_NSUMS];
        long double want[SS_FINE_NSUMS], mag[SS_FINE_NSUMS];
        ss_fine_sums(cur, S, gx, gy, W, H, shifts[k][0], shifts[k][1], got);
        brute_sums(cur, S, gx, gy, W, H, shifts[k][0], shifts[k][1], want, mag);
        ck_assert_msg(want[SS_FS_N] > 0.8L * (W - 2) * (H - 2) * 0.5L, "too few pixels in test");
        for (int s = 0; s < SS_FINE_NSUMS; s++) {
            /* double accumulation of ~2e4 terms: relative error ~1e-12 of
             * the sum of magnitudes; 1e-9 leaves a wide margin and still
             * catches any wrong term (each is ≳1e-5 of the total). */
            const long double tol = 1e-9L * mag[s] + 1e-12L;
            ck_assert_msg(fabsl((long double)got[s] - want[s]) <= tol,
                          "shift (%g,%g) sum %d: got %.17g want %.17Lg", shifts[k][0],
                          shifts[k][1], s, got[s], want[s]);
        }
        /* the valid count is exact */
        ck_assert_double_eq(got[SS_FS_N], (double)want[SS_FS_N]);
    }
    /* a shift that leaves no overlap: all sums zero */
    double z[SS_FINE_NSUMS];
    ss_fine_sums(cur, S, gx, gy, W, H, W + 5.0, 0.0, z);
    for (int s = 0; s < SS_FINE_NSUMS; s++)
        ck_assert_double_eq(z[s], 0.0);
    ss_fine_sums(cur, S, gx, gy, W, H, NAN, 0.0, z);
    ck_assert_double_eq(z[SS_FS_N], 0.0);
}
END_TEST

/* ======================================================================
 * ss_register_fine on an exactly linear model
 * ==================================================================== */

/* Sums of a frame that is the reference shifted by t, seen through the
 * linearised model: e(s) = g·(t - s) + noise of variance var per pixel.
 * Then q, p = M (t - s), E2 = n·var + (t-s)ᵀ M (t-s), E = 0. */
typedef struct lin_model {
    double u, v, w, n, var, tx, ty;
    int calls;
} lin_model_t;

static void lin_sums(void *ctx, double sx, double sy, double s[SS_FINE_NSUMS])
{
    lin_model_t *m = ctx;
    const double ax = m->tx - sx, ay = m->ty - sy;
    m->calls++;
    s[SS_FS_U] = m->u;
    s[SS_FS_V] = m->v;
    s[SS_FS_W] = m->w;
    s[SS_FS_Q] = m->u * ax + m->v * ay;
    s[SS_FS_P] = m->v * ax + m->w * ay;
    s[SS_FS_N] = m->n;
    s[SS_FS_E] = 0.0;
    s[SS_FS_E2] = m->n * m->var + m->u * ax * ax + 2 * m->v * ax * ay + m->w * ay * ay;
}

START_TEST(test_register_fine_linear_model)
{
    ss_pipeline_cfg_t c;
    reg_cfg(&c);
    lin_model_t m = { .u = 4000.0, .v = 300.0, .w = 2500.0, .n = 10000.0, .var = 4.0,
                      .tx = 3.37, .ty = -1.82 };
    ss_shift_t r;
    ss_register_fine(lin_sums, &m, 3.0, -2.0, &c, &r);
    ck_assert_msg(r.ok, "%s", r.why);
    /* step 1 lands exactly; step 2 measures δ = 0 and stops */
    ck_assert_double_eq_tol(r.sx, 3.37, 1e-12);
    ck_assert_double_eq_tol(r.sy, -1.82, 1e-12);
    ck_assert_int_eq(r.iterations, 2);
    ck_assert_int_eq(m.calls, 3);           /* two steps and the probe */
    /* standard errors: σe² [[u,v],[v,w]]⁻¹ with σe² = n·var / (n-2) */
    const double det = m.u * m.w - m.v * m.v, se2 = m.n * m.var / (m.n - 2);
    ck_assert_double_eq_tol(r.err_x, sqrt(se2 * m.w / det), 1e-12);
    ck_assert_double_eq_tol(r.err_y, sqrt(se2 * m.u / det), 1e-12);
    ck_assert_double_eq_tol(r.cov_xy, -se2 * m.v / det, 1e-15);
    ck_assert_double_eq_tol(r.det_ratio, det / (m.u * m.w), 1e-12);
    /* contrast: the probe at +2 px adds [2 2] M [2 2]ᵀ to E2 */
    const double want_c = 4.0 * (m.u + 2 * m.v + m.w) / (m.n * m.var);
    ck_assert_double_eq_tol(r.contrast, want_c, 1e-9);

    /* max_iter bounds the steps; tol = 0 never converges early */
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
    ck_assert_double_eq(r.err_x, 0.0);

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

/* ======================================================================
 * end to end on synthetic star fields
 * ==================================================================== */

/* One feed, run the way the driver runs the stages: calibrate -> 3×3
 * median -> hot-pixel learning (learned mask applied to both planes) ->
 * reference (the first frame's filtered image) -> coarse -> fine. */
typedef struct feed {
    ss_pipeline_cfg_t cfg;
    ss_synth_t *syn;
    ss_frame_t raw;
    int w, h;
    float *frame, *filt, *ref, *S, *gx, *gy, *scratch;
    float *ref_lvl[SS_MAX_LEVELS + 1], *cur_lvl[SS_MAX_LEVELS + 1];
    ss_pyramid_t ref_pyr, cur_pyr;
    ss_hotpix_t hot;
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
    f->raw.capacity = n * ss_dtype_size(sc->dtype);
    f->raw.pixels = malloc(f->raw.capacity);
    f->frame = malloc(n * sizeof(float));
    f->filt = malloc(n * sizeof(float));
    f->ref = malloc(n * sizeof(float));
    f->S = malloc(n * sizeof(float));
    f->gx = malloc(n * sizeof(float));
    f->gy = malloc(n * sizeof(float));
    f->scratch = malloc(2 * n * sizeof(float));
    ck_assert(f->raw.pixels && f->frame && f->filt && f->ref && f->S && f->gx && f->gy &&
              f->scratch);
    ck_assert_int_eq(ss_hotpix_init(&f->hot, f->w, f->h), 0);
    const int L = f->cfg.reg_levels;
    f->ref_pyr.levels = f->cur_pyr.levels = L;
    f->ref_pyr.w[0] = f->cur_pyr.w[0] = f->w;
    f->ref_pyr.h[0] = f->cur_pyr.h[0] = f->h;
    f->ref_pyr.lvl[0] = f->ref;
    f->cur_pyr.lvl[0] = f->filt;
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
    free(f->ref);
    free(f->S);
    free(f->gx);
    free(f->gy);
    free(f->scratch);
    for (int l = 1; l <= SS_MAX_LEVELS; l++) {
        free(f->ref_lvl[l]);
        free(f->cur_lvl[l]);
    }
    ss_hotpix_free(&f->hot);
}

/* Next synthetic frame -> FRAME and FILTERED (ingest). */
static void feed_ingest(feed_t *f, ss_synth_truth_t *truth)
{
    ck_assert_int_eq(ss_synth_next(f->syn, &f->raw, truth), SS_OK);
    const ss_roi_t roi = { 0, 0, f->w, f->h };
    ss_calibrate(f->raw.pixels, f->raw.dtype, f->raw.width, f->raw.valid, roi, NULL, NULL, 0.0,
                 NULL, f->frame);
    ss_median3x3(f->frame, f->w, f->h, f->filt);
    if (f->cfg.hotpix_learn) {
        ss_hotpix_update(&f->hot, f->frame, f->filt, f->cfg.hotpix_k, f->cfg.hotpix_frames,
                         f->cfg.hotpix_fraction, f->scratch);
        ss_hotpix_apply(&f->hot, f->frame, f->filt);
    }
}

static void build_pyramid(ss_pyramid_t *p)
{
    for (int l = 1; l <= p->levels; l++)
        ss_bin2(p->lvl[l - 1], p->w[l - 1], p->h[l - 1], (float *)p->lvl[l]);
}

/* FILTERED becomes the reference. */
static void feed_set_reference(feed_t *f)
{
    memcpy(f->ref, f->filt, (size_t)f->w * (size_t)f->h * sizeof(float));
    build_pyramid(&f->ref_pyr);
    ss_reference_prep(f->ref, f->w, f->h, f->S, f->gx, f->gy);
}

static void feed_fine_sums(void *ctx, double sx, double sy, double sums[SS_FINE_NSUMS])
{
    feed_t *f = ctx;
    ss_fine_sums(f->filt, f->S, f->gx, f->gy, f->w, f->h, sx, sy, sums);
}

/* Coarse, then fine from the coarse integer shift (from 0 when coarse
 * failed, so that the fine stage's own failure test is exercised too). */
static void feed_register(feed_t *f, ss_coarse_t *co, ss_shift_t *sh)
{
    build_pyramid(&f->cur_pyr);
    ss_register_coarse(&f->ref_pyr, &f->cur_pyr, &f->cfg, co);
    ss_register_fine(feed_fine_sums, f, co->ok ? co->dx : 0, co->ok ? co->dy : 0, &f->cfg, sh);
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

#define N_JITTERED 30               /* registered frames after the reference */
#define RMS_TARGET 0.02             /* px, the shift error's RMS (|error|) */

START_TEST(test_jittered_field_accuracy)
{
    ss_synth_cfg_t sc;
    field_cfg(&sc, 7);
    const size_t n = (size_t)sc.width * (size_t)sc.height;
    uint8_t *is_hot = malloc(n);
    ck_assert_ptr_nonnull(is_hot);
    ck_assert_int_eq(hot_pixel_map(&sc, is_hot), 50);

    feed_t f;
    feed_open(&f, &sc);
    ss_synth_truth_t tr;
    feed_ingest(&f, &tr);
    ck_assert_double_eq(tr.sx, 0.0);    /* frame 0 is the pointing reference */
    feed_set_reference(&f);

    double sum2 = 0.0, worst = 0.0, sum_err = 0.0;
    int n_cosmic = 0;
    for (int t = 1; t <= N_JITTERED; t++) {
        feed_ingest(&f, &tr);
        for (int k = 0; k < tr.n_obj; k++)
            n_cosmic += tr.obj[k].kind == SS_SYNTH_COSMIC;
        ss_coarse_t co;
        ss_shift_t sh;
        feed_register(&f, &co, &sh);
        ck_assert_msg(co.ok, "frame %d: coarse failed: %s", t, co.why);
        ck_assert_msg(fabs(co.dx - tr.sx) < 1.0 && fabs(co.dy - tr.sy) < 1.0,
                      "frame %d: coarse (%d,%d), true (%.3f,%.3f)", t, co.dx, co.dy, tr.sx, tr.sy);
        ck_assert_msg(sh.ok, "frame %d: fine failed: %s", t, sh.why);
        const double e = hypot(sh.sx - tr.sx, sh.sy - tr.sy);
        sum2 += e * e;
        worst = SS_MAX(worst, e);
        /* the reported standard error is a noise-only figure (the
         * interpolation bias, ~0.01 px, comes on top): positive and small */
        sum_err += hypot(sh.err_x, sh.err_y);
    }
    const double rms = sqrt(sum2 / N_JITTERED);
    printf("jittered field: shift error RMS %.4f px, worst %.4f px, mean reported error %.4f px, "
           "%d cosmic-ray hits\n", rms, worst, sum_err / N_JITTERED, n_cosmic);
    ck_assert_msg(rms <= RMS_TARGET, "shift error RMS %.4f px > %.3f px", rms, RMS_TARGET);
    ck_assert_int_gt(n_cosmic, 200);     /* the field really carried cosmic rays */
    ck_assert(sum_err / N_JITTERED > 0.0 && sum_err / N_JITTERED < 0.01);

    /* The hot pixels were learned (hotpix_frames = 8: from frame 8 on they
     * are masked in both planes), and nothing else was. */
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

/* Shifts ramping to beyond ±20 px on both axes, each sign on each axis. */
START_TEST(test_large_shifts)
{
    static const double drift[2][2] = { { 2.1, -2.1 }, { -2.1, 2.1 } };
    for (int run = 0; run < 2; run++) {
        ss_synth_cfg_t sc;
        field_cfg(&sc, 11 + (uint64_t)run);
        sc.jitter = 0.3;
        sc.drift_x = drift[run][0];
        sc.drift_y = drift[run][1];
        feed_t f;
        feed_open(&f, &sc);
        ss_synth_truth_t tr;
        feed_ingest(&f, &tr);
        feed_set_reference(&f);
        double max_x = 0.0, max_y = 0.0;
        for (int t = 1; t <= 10; t++) {
            feed_ingest(&f, &tr);
            ss_coarse_t co;
            ss_shift_t sh;
            feed_register(&f, &co, &sh);
            ck_assert_msg(co.ok, "run %d frame %d (%.2f,%.2f): coarse failed: %s", run, t, tr.sx,
                          tr.sy, co.why);
            /* the integer part: the nearest integer, or the other neighbour
             * when the shift is within 0.1 px of a half */
            ck_assert_msg(fabs(co.dx - tr.sx) < 0.6 && fabs(co.dy - tr.sy) < 0.6,
                          "run %d frame %d: coarse (%d,%d), true (%.3f,%.3f)", run, t, co.dx,
                          co.dy, tr.sx, tr.sy);
            ck_assert_msg(sh.ok, "run %d frame %d: fine failed: %s", run, t, sh.why);
            ck_assert_msg(fabs(sh.sx - tr.sx) <= 0.05 && fabs(sh.sy - tr.sy) <= 0.05,
                          "run %d frame %d: fine (%.4f,%.4f), true (%.4f,%.4f)", run, t, sh.sx,
                          sh.sy, tr.sx, tr.sy);
            max_x = SS_MAX(max_x, fabs(tr.sx));
            max_y = SS_MAX(max_y, fabs(tr.sy));
        }
        ck_assert_msg(max_x >= 20.0 && max_y >= 20.0, "run %d reached only (%.1f, %.1f) px", run,
                      max_x, max_y);
        feed_close(&f);
    }
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

    /* star reference, blank frames */
    feed_ingest(&stars, &tr);
    feed_set_reference(&stars);
    for (int t = 0; t < 4; t++) {
        feed_ingest(&blank, &tr);
        memcpy(stars.filt, blank.filt, (size_t)stars.w * (size_t)stars.h * sizeof(float));
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
        ck_assert(sh.contrast < SS_FINE_MIN_CONTRAST);
    }

    /* blank reference, star frames */
    feed_set_reference(&blank);
    for (int t = 0; t < 2; t++) {
        feed_ingest(&stars, &tr);
        memcpy(blank.filt, stars.filt, (size_t)stars.w * (size_t)stars.h * sizeof(float));
        ss_coarse_t co;
        ss_shift_t sh;
        feed_register(&blank, &co, &sh);
        ck_assert_msg(!co.ok, "blank reference %d: coarse succeeded", t);
        ck_assert_int_eq(co.n_blocks, 0);       /* nothing structured to match */
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
    double sums[2][SS_FINE_NSUMS];
    const int threads[2] = { 1, 3 };
    const int saved = omp_get_max_threads();
    for (int k = 0; k < 2; k++) {
        omp_set_num_threads(threads[k]);
        feed_register(&f, &co[k], &sh[k]);
        ss_fine_sums(f.filt, f.S, f.gx, f.gy, f.w, f.h, 0.37, -1.61, sums[k]);
    }
    omp_set_num_threads(saved);
    ck_assert_msg(co[0].ok && sh[0].ok, "%s %s", co[0].why, sh[0].why);
    ck_assert(co[0].dx == co[1].dx && co[0].dy == co[1].dy && co[0].n_blocks == co[1].n_blocks &&
              co[0].n_agree == co[1].n_agree);
    ck_assert(sh[0].sx == sh[1].sx && sh[0].sy == sh[1].sy && sh[0].err_x == sh[1].err_x &&
              sh[0].contrast == sh[1].contrast);
    ck_assert(memcmp(sums[0], sums[1], sizeof sums[0]) == 0);
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
    tcase_add_test(tc, test_fine_sums_bruteforce);
    tcase_add_test(tc, test_register_fine_linear_model);
    suite_add_tcase(s, tc);
    tc = tcase_create("synthetic_fields");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_jittered_field_accuracy);
    tcase_add_test(tc, test_large_shifts);
    tcase_add_test(tc, test_blank_frame_fails);
    tcase_add_test(tc, test_thread_count_independent);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(registration_suite());
    srunner_run_all(sr, CK_NORMAL);
    const int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
