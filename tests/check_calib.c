/*
 * check_calib.c — tests of ALGORITHM.md §1 (pipeline/calib.c):
 * ss_calibrate for every raw type, dark/flat, saturation, non-finite input,
 * source validity mask, bad-pixel mask and roi crop; ss_calibrate_frame's
 * master bias, exposure-scaled dark, overscan rows and partial frames;
 * ss_overscan (scalar and per-row medians of BIASSEC); ss_median3x3 against a
 * brute-force sort of each clipped window (NaN and Inf rules included);
 * learned hot pixels on a jittered star field rendered here (a planted hot
 * pixel that stays put is learned, the stars, which move, are not).
 */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "pipeline/backend.h"
#include "pipeline/pipeline.h"
#include "pipeline/stages.h"
#include "ss_test.h"
#include "tools/synth.h"


/* float equality that treats NaN == NaN */
static int same(float a, float b)
{
    return (isnan(a) && isnan(b)) || a == b;
}

/* ======================================================================
 * ss_calibrate
 * ==================================================================== */

/* The contract written out once more, independently, per pixel. */
static float expect_calib(double v, int src_ok, int is_bad, double sat, double dark, double flat)
{
    if (!src_ok || is_bad || !isfinite(v) || v >= sat || !isfinite(flat) || flat <= 0.0)
        return NAN;
    float o = (float)((v - dark) / flat);
    return isfinite(o) ? o : NAN;
}

/* Raw values per type, chosen to hit zero, negatives, the type maximum
 * (saturated by default) and the value just below it. */
START_TEST(test_calibrate_dtypes_full_frame)
{
    enum { W = 4, H = 3, N = W * H };
    const uint8_t u8[N] = { 0, 1, 17, 100, 128, 200, 253, 254, 255, 255, 3, 9 };
    const uint16_t u16[N] = { 0, 1, 1000, 32768, 40000, 60000, 65533, 65534, 65535, 65535, 7, 12 };
    const int16_t i16[N] = { -32768, -1, 0, 1, 1000, -1000, 32765, 32766, 32767, 32767, 5, -5 };
    const int32_t i32[N] = { INT32_MIN, -70000, 0, 70000, 1 << 24, (1 << 24) + 1,
                             2147483645, 2147483646, 2147483647, 2147483647, 3, -3 };
    const float f32[N] = { 0.0f, -1.5f, 2.25f, 1e6f, NAN, INFINITY, -INFINITY, 3.0e38f,
                           1e-30f, 65535.0f, 7.5f, -7.5f };
    const void *raw[SS_DT__COUNT] = { u8, u16, i16, i32, f32 };
    const double tmax[SS_DT__COUNT] = { 255.0, 65535.0, 32767.0, 2147483647.0, INFINITY };

    float out[N];
    ss_roi_t roi = { 0, 0, W, H };
    for (int t = 0; t < SS_DT__COUNT; t++) {
        /* no calibration data, default saturation (the type's maximum) */
        ss_calibrate(raw[t], (ss_dtype_t)t, W, NULL, roi, NULL, NULL, 0.0, NULL, out);
        int n_nan = 0;
        for (int i = 0; i < N; i++) {
            const double v = ss_dtype_get(raw[t], (ss_dtype_t)t, (size_t)i);
            const float e = expect_calib(v, 1, 0, tmax[t], 0.0, 1.0);
            ck_assert_msg(same(out[i], e), "%s pixel %d: got %g want %g", ss_dtype_name((ss_dtype_t)t),
                          i, (double)out[i], (double)e);
            n_nan += isnan(out[i]);
        }
        /* integers: exactly the two maxima are saturated; f32: NaN, ±Inf */
        ck_assert_int_eq(n_nan, t == SS_DT_F32 ? 3 : 2);
        if (t != SS_DT_F32)
            ck_assert(!isnan(out[7]));          /* max - 1 survives */
    }

    /* i32 values above 2^24 are rounded to float only at the end */
    ss_calibrate(i32, SS_DT_I32, W, NULL, roi, NULL, NULL, 0.0, NULL, out);
    ck_assert_float_eq(out[5], (float)16777217.0);
    ck_assert_float_eq(out[7], (float)2147483646.0);
    ck_assert_float_eq(out[0], (float)-2147483648.0);
}
END_TEST

START_TEST(test_calibrate_saturation_dark_flat)
{
    enum { W = 5, H = 2, N = W * H };
    const uint16_t raw[N] = { 100, 999, 1000, 1001, 500, 2000, 0, 750, 999, 1 };
    const float dark[N] = { 10.0f, 0.5f, 0.0f, 0.0f, 100.0f, 0.0f, 5.0f, -20.0f, NAN, 0.0f };
    const float flat[N] = { 1.0f, 2.0f, 1.0f, 1.0f, 0.0f, 1.0f, -1.0f, 0.5f, 1.0f, NAN };
    float out[N];
    ss_roi_t roi = { 0, 0, W, H };
    ss_calibrate(raw, SS_DT_U16, W, NULL, roi, dark, flat, 1000.0, NULL, out);
    const float want[N] = {
        90.0f,                      /* (100-10)/1 */
        (float)((999.0 - 0.5) / 2.0),
        NAN, NAN,                   /* at and above saturation 1000 */
        NAN,                        /* flat 0 */
        NAN,                        /* 2000 saturated */
        NAN,                        /* flat < 0 */
        1540.0f,                    /* (750+20)/0.5 */
        NAN,                        /* dark NaN */
        NAN,                        /* flat NaN */
    };
    for (int i = 0; i < N; i++)
        ck_assert_msg(same(out[i], want[i]), "pixel %d: got %g want %g", i, (double)out[i],
                      (double)want[i]);

    /* f32 with an explicit saturation: 999.5 is below it, 1000 is not */
    const float fr[4] = { 999.5f, 1000.0f, -3.0f, 1e9f };
    ss_roi_t r4 = { 0, 0, 4, 1 };
    ss_calibrate(fr, SS_DT_F32, 4, NULL, r4, NULL, NULL, 1000.0, NULL, out);
    ck_assert_float_eq(out[0], 999.5f);
    ck_assert(isnan(out[1]) && isnan(out[3]));
    ck_assert_float_eq(out[2], -3.0f);

    /* a result too large for float is invalid, never Inf */
    const float tiny_flat[4] = { 1e-38f, 1.0f, 1.0f, 1.0f };
    const float big[4] = { 1e30f, 1.0f, 2.0f, 3.0f };
    ss_calibrate(big, SS_DT_F32, 4, NULL, r4, NULL, tiny_flat, 0.0, NULL, out);
    ck_assert(isnan(out[0]));
    ck_assert_float_eq(out[3], 3.0f);
}
END_TEST

/* roi crop with every kind of mask at once, on a larger random frame:
 * raw_valid is indexed in raw pixels, dark/flat/bad in roi pixels. */
START_TEST(test_calibrate_roi_masks)
{
    enum { RW = 37, RH = 29 };
    const ss_roi_t roi = { 5, 3, 23, 17 };
    static uint16_t raw[RW * RH];
    static uint8_t valid[RW * RH];
    static float dark[23 * 17], flat[23 * 17], out[23 * 17];
    static uint8_t bad[23 * 17];
    rng_state = 12345;
    for (int i = 0; i < RW * RH; i++) {
        raw[i] = (uint16_t)(rng_u64() % 70000u > 65535u ? 65535u : rng_u64() % 4000u);
        valid[i] = rng_unif() > 0.1;
    }
    for (int j = 0; j < roi.w * roi.h; j++) {
        dark[j] = (float)(100.0 + 10.0 * rng_gauss());
        flat[j] = (float)(0.8 + 0.4 * rng_unif());
        bad[j] = rng_unif() < 0.05;
    }
    ss_calibrate(raw, SS_DT_U16, RW, valid, roi, dark, flat, 3500.0, bad, out);
    int n_valid = 0, n_bad_checked = 0, n_src_checked = 0;
    for (int y = 0; y < roi.h; y++)
        for (int x = 0; x < roi.w; x++) {
            const int j = y * roi.w + x, i = (roi.y + y) * RW + roi.x + x;
            const float e = expect_calib(raw[i], valid[i], bad[j], 3500.0, dark[j], flat[j]);
            ck_assert_msg(same(out[j], e), "roi (%d,%d): got %g want %g", x, y, (double)out[j],
                          (double)e);
            n_valid += !isnan(out[j]);
            n_bad_checked += bad[j] && valid[i] && raw[i] < 3500;
            n_src_checked += !valid[i] && !bad[j] && raw[i] < 3500;
        }
    /* the random frame really exercised each path */
    ck_assert_int_gt(n_valid, 200);
    ck_assert_int_gt(n_bad_checked, 3);
    ck_assert_int_gt(n_src_checked, 10);

    /* a crop reads the right raw pixels: a marker in the raw frame shows up
     * at its roi coordinates and nowhere else */
    static float plain[23 * 17];
    memset(raw, 0, sizeof raw);
    raw[(roi.y + 4) * RW + roi.x + 7] = 1234;
    ss_calibrate(raw, SS_DT_U16, RW, NULL, roi, NULL, NULL, 0.0, NULL, plain);
    for (int j = 0; j < roi.w * roi.h; j++)
        ck_assert_float_eq(plain[j], j == 4 * roi.w + 7 ? 1234.0f : 0.0f);
}
END_TEST

/* x = (raw - bias - dark·t/t_dark) / flat with planted values whose
 * results are exact in float: the master bias, the exposure-scaled dark,
 * their order, and that bias NULL with scale 1 is ss_calibrate bit for
 * bit. */
START_TEST(test_calibrate_bias_dark_scale)
{
    enum { W = 4, H = 2, N = W * H };
    const uint16_t raw[N] = { 1000, 2000, 1500, 900, 65535, 1200, 1100, 300 };
    const float bias[N] = { 100.0f, 101.0f, 99.5f, 100.0f, 100.0f, 98.0f, 100.0f, 100.0f };
    const float dark[N] = { 10.0f, 20.0f, 2.0f, 0.0f, 1.0f, 4.0f, 8.0f, 100.0f };
    const float flat[N] = { 2.0f, 1.0f, 0.5f, 1.0f, 1.0f, 2.0f, 4.0f, 1.0f };
    float out[N];
    const ss_roi_t roi = { 0, 0, W, H };
    const ss_calib_data_t cal = { .dark = dark, .flat = flat, .bias = bias };
    /* t = 25 s against a 10 s dark */
    const ss_calib_frame_t cf = { .dark_scale = 25.0 / 10.0, .valid_w = W, .valid_h = H };
    ss_calibrate_frame(raw, SS_DT_U16, W, NULL, roi, &cal, &cf, 0.0, out);
    const float want[N] = {
        437.5f,                     /* (1000 - 100 - 25) / 2 */
        1849.0f,                    /* 2000 - 101 - 50 */
        2791.0f,                    /* (1500 - 99.5 - 5) / 0.5 */
        800.0f,                     /* 900 - 100 - 0 */
        NAN,                        /* saturated (the type's maximum) */
        546.0f,                     /* (1200 - 98 - 10) / 2 */
        245.0f,                     /* (1100 - 100 - 20) / 4 */
        -50.0f,                     /* 300 - 100 - 250: negative is honest */
    };
    for (int i = 0; i < N; i++)
        ck_assert_msg(same(out[i], want[i]), "pixel %d: got %.9g want %.9g", i, (double)out[i],
                      (double)want[i]);

    /* unscaled (the exposure is unknown, or equal) */
    const ss_calib_frame_t one = { .dark_scale = 1.0, .valid_w = W, .valid_h = H };
    ss_calibrate_frame(raw, SS_DT_U16, W, NULL, roi, &cal, &one, 0.0, out);
    ck_assert_float_eq(out[0], 445.0f);     /* (1000 - 100 - 10) / 2 */
    ck_assert_float_eq(out[7], 100.0f);     /* 300 - 100 - 100 */

    /* no bias and scale 1: the plain (raw - dark) / flat, bit for bit, on
     * random values where the rounding order would show */
    enum { RW = 31, RH = 17, RN = RW * RH };
    static float fr[RN], rd[RN], rf[RN], a[RN], b[RN];
    rng_state = 777;
    for (int i = 0; i < RN; i++) {
        fr[i] = (float)(1000.0 * rng_unif() - 100.0);
        rd[i] = (float)(37.0 * rng_gauss());
        rf[i] = (float)(0.3 + rng_unif());
    }
    const ss_roi_t rr = { 0, 0, RW, RH };
    const ss_calib_data_t rc = { .dark = rd, .flat = rf };
    const ss_calib_frame_t rcf = { .dark_scale = 1.0, .valid_w = RW, .valid_h = RH };
    ss_calibrate(fr, SS_DT_F32, RW, NULL, rr, rd, rf, 0.0, NULL, a);
    ss_calibrate_frame(fr, SS_DT_F32, RW, NULL, rr, &rc, &rcf, 0.0, b);
    ck_assert_int_eq(memcmp(a, b, sizeof a), 0);
    for (int i = 0; i < RN; i++)
        ck_assert(a[i] == (float)(((double)fr[i] - rd[i]) / rf[i]));
}
END_TEST

/* Overscan from BIASSEC: scalar = the median of every valid BIASSEC
 * pixel, row = the median of that row's (mean of the two middle ones for
 * an even count), the scalar for rows without samples; then subtracted
 * per processed row. */
START_TEST(test_overscan_scalar_row)
{
    enum { RW = 12, RH = 6 };
    static uint16_t raw[RW * RH];
    static uint8_t valid[RW * RH];
    memset(valid, 1, sizeof valid);
    for (int y = 0; y < RH; y++)
        for (int x = 0; x < RW; x++)
            raw[y * RW + x] = (uint16_t)(1000 + 10 * y + x);
    /* BIASSEC [11:12,1:5]: columns 10 and 11, rows 0..4 */
    const ss_roi_t bsec = { 10, 0, 2, 5 };
    for (int r = 0; r < 5; r++) {
        raw[r * RW + 10] = (uint16_t)(100 + 10 * r);
        raw[r * RW + 11] = (uint16_t)(103 + 10 * r);
    }
    double scratch[2 * 5], rb[4];
    /* all ten samples: 100 103 110 113 120 123 130 133 140 143 */
    ck_assert(ss_overscan(raw, SS_DT_U16, RW, RH, NULL, bsec, 0, 0, NULL, scratch) == 121.5);
    /* pixel (11, 3) invalid: nine samples, median the fifth, 120 */
    valid[3 * RW + 11] = 0;
    const double sc = ss_overscan(raw, SS_DT_U16, RW, RH, valid, bsec, 2, 4, rb, scratch);
    ck_assert(sc == 120.0);
    ck_assert_msg(rb[0] == 121.5 && rb[1] == 130.0 && rb[2] == 141.5 && rb[3] == 120.0,
                  "rows %g %g %g %g", rb[0], rb[1], rb[2], rb[3]);

    /* subtracted per processed row (roi rows 2..5, columns 1..8) */
    const ss_roi_t roi = { 1, 2, 8, 4 };
    const ss_calib_frame_t cf = { .dark_scale = 1.0, .row_bias = rb, .valid_w = 8, .valid_h = 4 };
    float out[8 * 4];
    ss_calibrate_frame(raw, SS_DT_U16, RW, NULL, roi, NULL, &cf, 0.0, out);
    for (int y = 0; y < 4; y++)
        for (int x = 0; x < 8; x++) {
            const double v = 1000 + 10 * (y + 2) + (x + 1);
            ck_assert_msg(out[y * 8 + x] == (float)(v - rb[y]), "(%d,%d): %g want %g", x, y,
                          (double)out[y * 8 + x], v - rb[y]);
        }
    /* the scalar mode is a row vector of one value */
    for (int y = 0; y < 4; y++)
        rb[y] = sc;
    ss_calibrate_frame(raw, SS_DT_U16, RW, NULL, roi, NULL, &cf, 0.0, out);
    ck_assert_float_eq(out[0], (float)(1021.0 - 120.0));
    ck_assert_float_eq(out[31], (float)(1058.0 - 120.0));

    /* f32: non-finite overscan pixels are no samples; none at all: NaN */
    static float fraw[RW * RH];
    for (int i = 0; i < RW * RH; i++)
        fraw[i] = (float)i;
    fraw[0 * RW + 10] = NAN;
    fraw[1 * RW + 11] = INFINITY;
    /* rows 0, 1: one sample each (11 and 22); rows 2..4: 34 35, 46 47, 58 59;
     * eight in all, the middle two 35 and 46 */
    ck_assert(ss_overscan(fraw, SS_DT_F32, RW, RH, NULL, bsec, 0, 2, rb, scratch) == 40.5);
    ck_assert(rb[0] == 11.0 && rb[1] == 22.0);
    const ss_roi_t nothing = { 10, 0, 1, 1 };
    ck_assert(isnan(ss_overscan(fraw, SS_DT_F32, RW, RH, NULL, nothing, 0, 1, rb, scratch)));
    ck_assert(isnan(rb[0]));
}
END_TEST

/* A frame that holds only part of the roi (its own region a few rows or
 * columns smaller than the geometry's, or a raw frame that ends before the
 * roi does): the rest is NaN and never read (the raw buffer here is just
 * large enough; ASan builds would catch a read beyond it). */
START_TEST(test_calibrate_partial_frame)
{
    enum { RW = 9, RH = 5 };
    uint16_t *raw = malloc(RW * RH * sizeof *raw);
    ck_assert_ptr_nonnull(raw);
    for (int i = 0; i < RW * RH; i++)
        raw[i] = (uint16_t)(500 + i);
    const ss_roi_t roi = { 2, 1, 8, 6 };        /* reaches 1 column and 2 rows past */
    const ss_calib_frame_t cf = { .dark_scale = 1.0, .valid_w = 7, .valid_h = 4 };
    float out[8 * 6];
    ss_calibrate_frame(raw, SS_DT_U16, RW, NULL, roi, NULL, &cf, 0.0, out);
    for (int y = 0; y < 6; y++)
        for (int x = 0; x < 8; x++) {
            const float got = out[y * 8 + x];
            if (x >= 7 || y >= 4)
                ck_assert_msg(isnan(got), "(%d,%d) beyond the frame: %g", x, y, (double)got);
            else
                ck_assert_float_eq(got, (float)(500 + (y + 1) * RW + x + 2));
        }
    free(raw);
}
END_TEST

/* ======================================================================
 * ss_median3x3
 * ==================================================================== */

static int cmp_float(const void *a, const void *b)
{
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static float brute_median(const float *in, int w, int h, int x, int y)
{
    if (isnan(in[y * w + x]))
        return NAN;
    float v[9];
    int n = 0;
    for (int dy = -1; dy <= 1; dy++)
        for (int dx = -1; dx <= 1; dx++) {
            const int xx = x + dx, yy = y + dy;
            if (xx < 0 || yy < 0 || xx >= w || yy >= h)
                continue;
            if (isfinite(in[yy * w + xx]))
                v[n++] = in[yy * w + xx];
        }
    if (n == 0)
        return NAN;
    qsort(v, (size_t)n, sizeof v[0], cmp_float);
    return n % 2 ? v[n / 2] : 0.5f * (v[n / 2 - 1] + v[n / 2]);
}

START_TEST(test_median_small_cases)
{
    /* 3×3 of 1..9, shuffled: centre gets 5 */
    const float a[9] = { 9, 2, 7, 4, 1, 6, 3, 8, 5 };
    float o[9];
    ss_median3x3(a, 3, 3, o);
    ck_assert_float_eq(o[4], 5.0f);
    /* corner (0,0): window {9,2,4,1} -> (2+4)/2 */
    ck_assert_float_eq(o[0], 3.0f);

    /* 2×2 with a NaN: the NaN stays NaN, the others use 3 finite values */
    const float b[4] = { 1.0f, 2.0f, 3.0f, NAN };
    ss_median3x3(b, 2, 2, o);
    ck_assert_float_eq(o[0], 2.0f);
    ck_assert_float_eq(o[1], 2.0f);
    ck_assert_float_eq(o[2], 2.0f);
    ck_assert(isnan(o[3]));

    /* even count computed as 0.5f*(a+b) in float */
    const float c[4] = { 1.0f, 2.0f, 3.0f, 4.0f };
    ss_median3x3(c, 2, 2, o);
    for (int i = 0; i < 4; i++)
        ck_assert_float_eq(o[i], 2.5f);

    /* an Inf centre is not NaN: it gets the median of its finite
     * neighbours; Inf neighbours are ignored */
    const float d[9] = { 1, 2, 3, 4, INFINITY, 6, 7, -INFINITY, 9 };
    ss_median3x3(d, 3, 3, o);
    ck_assert_float_eq(o[4], 4.0f);     /* the median of {1,2,3,4,6,7,9} */
    /* 1×1 frames and single rows */
    const float e[1] = { 42.0f };
    ss_median3x3(e, 1, 1, o);
    ck_assert_float_eq(o[0], 42.0f);
}
END_TEST

START_TEST(test_median_random_vs_brute)
{
    static const int sizes[][2] = { { 1, 1 }, { 1, 17 }, { 19, 1 }, { 2, 2 }, { 37, 23 },
                                    { 64, 65 }, { 131, 7 }, { 1100, 4 }, { 3, 3 } };
    rng_state = 777;
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        const int w = sizes[s][0], h = sizes[s][1];
        float *in = malloc((size_t)w * h * sizeof *in);
        float *out = malloc((size_t)w * h * sizeof *out);
        for (int i = 0; i < w * h; i++) {
            const double u = rng_unif();
            /* few distinct values make ties common; 8 % NaN, 1 % ±Inf */
            in[i] = u < 0.08 ? NAN
                  : u < 0.09 ? (rng_unif() < 0.5 ? INFINITY : -INFINITY)
                  : u < 0.5 ? (float)(rng_u64() % 7)
                            : (float)(100.0 * rng_gauss());
        }
        ss_median3x3(in, w, h, out);
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++) {
                const float e = brute_median(in, w, h, x, y);
                ck_assert_msg(same(out[y * w + x], e), "%dx%d at (%d,%d): got %g want %g", w, h,
                              x, y, (double)out[y * w + x], (double)e);
            }
        free(in);
        free(out);
    }
}
END_TEST

/* ======================================================================
 * learned hot pixels
 * ==================================================================== */

enum { HW = 256, HH = 256, HN = HW * HH, NSTAR = 150, NHOT = 6 };

typedef struct field {
    double sx[NSTAR], sy[NSTAR], flux[NSTAR];
    int hx[NHOT], hy[NHOT];
} field_t;

/* Render one frame: sky 1000 ADU, Gaussian noise 10 ADU, NSTAR Gaussian
 * stars (σ 1.4 px, 300..300000 ADU) shifted by (jx, jy) (a star at p
 * lands at p - j), and the detector's hot pixels (+400 ADU, fixed). Pixel
 * values are sampled at pixel centres (no oversampling needed here). */
static void render(const field_t *f, double jx, double jy, const uint8_t *hot_on, float *img)
{
    const double sig = 1.4, norm = 1.0 / (2.0 * M_PI * sig * sig);
    for (int i = 0; i < HN; i++)
        img[i] = (float)(1000.0 + 10.0 * rng_gauss());
    for (int s = 0; s < NSTAR; s++) {
        const double cx = f->sx[s] - jx, cy = f->sy[s] - jy;
        for (int y = (int)cy - 6; y <= (int)cy + 6; y++)
            for (int x = (int)cx - 6; x <= (int)cx + 6; x++) {
                if (x < 0 || y < 0 || x >= HW || y >= HH)
                    continue;
                const double r2 = (x - cx) * (x - cx) + (y - cy) * (y - cy);
                img[y * HW + x] += (float)(f->flux[s] * norm * exp(-r2 / (2 * sig * sig)));
            }
    }
    for (int k = 0; k < NHOT; k++)
        if (!hot_on || hot_on[k])
            img[f->hy[k] * HW + f->hx[k]] += 400.0f;
}

static void make_field(field_t *f)
{
    for (int k = 0; k < NHOT; k++) {
        f->hx[k] = 20 + 40 * k;
        f->hy[k] = 30 + 37 * k;
    }
    /* Stars keep 8 px away from the hot pixels: a hot pixel on the flank of
     * a bright star is not a local maximum while the star is near, and is
     * (knowingly) not learned then; that case is not what this test is
     * about. The brightest stars (up to 300000 ADU, peak ~24000) still sit
     * all over the rest of the frame. */
    for (int s = 0; s < NSTAR; s++) {
        int near;
        do {
            f->sx[s] = 8 + (HW - 16) * rng_unif();
            f->sy[s] = 8 + (HH - 16) * rng_unif();
            near = 0;
            for (int k = 0; k < NHOT; k++)
                near |= fabs(f->sx[s] - f->hx[k]) < 8 && fabs(f->sy[s] - f->hy[k]) < 8;
        } while (near);
        f->flux[s] = 300.0 * pow(1000.0, rng_unif());     /* 300 .. 300000 ADU */
    }
    f->flux[0] = 300000.0;
}

START_TEST(test_hotpix_learns_fixed_not_stars)
{
    static float img[HN], med[HN], scratch[2 * HN];
    static field_t f;
    rng_state = 4242;
    make_field(&f);
    ss_hotpix_t hp;
    ck_assert_int_eq(ss_hotpix_init(&hp, HW, HH), 0);
    const double k = 5.0, fraction = 0.75;
    const int window = 12;

    /* Window 1: hot pixels 0..NHOT-2 always on; the last one only in every
     * second frame (50 % < 75 %: must not be learned). The sky jitters by
     * 1.2 px rms per axis, the stars with it. The always-on pixels are
     * learned as soon as they have been hot in min_frames frames (the
     * mask changes then, and not again at the window's end); no star
     * pixel is learned at any time. */
    uint8_t on[NHOT];
    ck_assert_int_eq(hp.min_frames, SS_HOTPIX_MIN_FRAMES);
    ck_assert_int_lt(SS_HOTPIX_MIN_FRAMES, window);
    int n_learned = 0;
    for (int t = 0; t < window; t++) {
        for (int kk = 0; kk < NHOT; kk++)
            on[kk] = kk < NHOT - 1 || t % 2 == 0;
        render(&f, 1.2 * rng_gauss(), 1.2 * rng_gauss(), on, img);
        ss_median3x3(img, HW, HH, med);
        const int changed = ss_hotpix_update(&hp, img, med, k, window, fraction, scratch);
        ck_assert_int_eq(changed, t == SS_HOTPIX_MIN_FRAMES - 1);
        if (t < window - 1)
            ck_assert_int_eq(hp.frames, t + 1);
        n_learned = 0;
        for (int i = 0; i < HN; i++)
            n_learned += hp.learned[i];
        ck_assert_int_eq(n_learned, t < SS_HOTPIX_MIN_FRAMES - 1 ? 0 : NHOT - 1);
    }
    ck_assert_int_eq(hp.frames, 0);
    for (int kk = 0; kk < NHOT - 1; kk++)
        ck_assert_msg(hp.learned[f.hy[kk] * HW + f.hx[kk]], "hot pixel %d not learned", kk);
    ck_assert_msg(!hp.learned[f.hy[NHOT - 1] * HW + f.hx[NHOT - 1]],
                  "intermittent pixel learned");
    /* nothing else: no star pixel (the bright ones stand far above their
     * median in every frame, but never on the same detector pixel) */
    ck_assert_int_eq(n_learned, NHOT - 1);

    /* ss_hotpix_apply: NaN exactly at the learned pixels, in both planes */
    render(&f, 0.0, 0.0, NULL, img);
    ss_median3x3(img, HW, HH, med);
    static float img0[HN], med0[HN];
    memcpy(img0, img, sizeof img);
    memcpy(med0, med, sizeof med);
    ss_hotpix_apply(&hp, img, med);
    for (int i = 0; i < HN; i++) {
        ck_assert(hp.learned[i] ? isnan(img[i]) : img[i] == img0[i]);
        ck_assert(hp.learned[i] ? isnan(med[i]) : med[i] == med0[i]);
    }

    /* Window 2: hot pixel 0 is cured. The mask is rebuilt from this window
     * alone: pixel 0 is dropped, the change is reported. */
    for (int t = 0; t < window; t++) {
        for (int kk = 0; kk < NHOT; kk++)
            on[kk] = kk > 0 && kk < NHOT - 1;
        render(&f, 1.2 * rng_gauss(), 1.2 * rng_gauss(), on, img);
        ss_median3x3(img, HW, HH, med);
        ck_assert_int_eq(ss_hotpix_update(&hp, img, med, k, window, fraction, scratch),
                         t == window - 1);
    }
    ck_assert(!hp.learned[f.hy[0] * HW + f.hx[0]]);
    for (int kk = 1; kk < NHOT - 1; kk++)
        ck_assert(hp.learned[f.hy[kk] * HW + f.hx[kk]]);

    /* Window 3: same state again: no change reported */
    for (int t = 0; t < window; t++) {
        render(&f, 1.2 * rng_gauss(), 1.2 * rng_gauss(), on, img);
        ss_median3x3(img, HW, HH, med);
        ck_assert_int_eq(ss_hotpix_update(&hp, img, med, k, window, fraction, scratch), 0);
    }

    ss_hotpix_reset(&hp);
    ck_assert_int_eq(hp.frames, 0);
    for (int i = 0; i < HN; i++)
        ck_assert(!hp.learned[i] && !hp.hits[i]);
    ss_hotpix_free(&hp);
    ck_assert_ptr_null(hp.learned);
    ss_hotpix_free(&hp);                /* twice is harmless */
}
END_TEST

/* Incremental learning (min_frames 3, fraction 0.75, window 10): a pixel
 * is learned after the n-th frame when it has been hot in max(3,
 * ceil(0.75·n)) of them — A (frames 1-3) after frame 3, B (1, 3, 4) and
 * C (1, 2, 4, 5) after frame 4, D (every second frame) never; E, hot in
 * frames 1-3 only, stays learned to the window's end and is unlearned
 * there, while A (hot throughout) stays. */
START_TEST(test_hotpix_incremental)
{
    enum { W = 24, H = 24, N = W * H };
    static float img[N], med[N], scratch[2 * N];
    ss_hotpix_t hp;
    ck_assert_int_eq(ss_hotpix_init(&hp, W, H), 0);
    hp.min_frames = 3;
    rng_state = 4711;
    const int px[5] = { 3 * W + 3, 3 * W + 10, 3 * W + 17, 12 * W + 5, 12 * W + 15 };
    /* frames (1-based) each pixel is hot in, as bit masks */
    const unsigned hot[5] = { 0x3ffu << 1, (1u << 1) | (1u << 3) | (1u << 4),
                              (1u << 1) | (1u << 2) | (1u << 4) | (1u << 5),
                              0x2aau, 0x7u << 1 };
    const int learned_after[5] = { 3, 4, 4, 99, 3 };
    for (int n = 1; n <= 10; n++) {
        for (int i = 0; i < N; i++)
            img[i] = (float)(100.0 + rng_gauss());
        for (int p = 0; p < 5; p++)
            if (hot[p] >> n & 1u)
                img[px[p]] += 50.0f;
        ss_median3x3(img, W, H, med);
        const int changed = ss_hotpix_update(&hp, img, med, 5.0, 10, 0.75, scratch);
        int any_new = 0;
        for (int p = 0; p < 5; p++) {
            const int want = n < 10 ? n >= learned_after[p] : p == 0;
            ck_assert_msg(hp.learned[px[p]] == want, "frame %d: pixel %c learned %d", n, 'A' + p,
                          hp.learned[px[p]]);
            any_new |= n < 10 && n == learned_after[p];
        }
        ck_assert_int_eq(changed, n == 10 ? 1 : any_new);
        int others = 0;
        for (int i = 0; i < N; i++)
            others += hp.learned[i];
        for (int p = 0; p < 5; p++)
            others -= hp.learned[px[p]];
        ck_assert_int_eq(others, 0);
    }
    ss_hotpix_free(&hp);
}
END_TEST

/* The window threshold: ceil(fraction·window); 0.7·10 asks for 7 frames. */
START_TEST(test_hotpix_threshold_count)
{
    enum { W = 16, H = 16, N = W * H };
    static float img[N], med[N], scratch[2 * N];
    ss_hotpix_t hp;
    ck_assert_int_eq(ss_hotpix_init(&hp, W, H), 0);
    rng_state = 99;
    /* pixel A hot in exactly 7 of 10 frames, pixel B in exactly 6 */
    for (int t = 0; t < 10; t++) {
        for (int i = 0; i < N; i++)
            img[i] = (float)(100.0 + rng_gauss());
        if (t < 7)
            img[5 * W + 5] += 50.0f;
        if (t < 6)
            img[10 * W + 10] += 50.0f;
        ss_median3x3(img, W, H, med);
        ss_hotpix_update(&hp, img, med, 5.0, 10, 0.7, scratch);
    }
    ck_assert(hp.learned[5 * W + 5]);
    ck_assert(!hp.learned[10 * W + 10]);
    ss_hotpix_free(&hp);
}
END_TEST

/* Hot pixels through the whole CPU pipeline, from the first frames: a
 * jittered synthetic field (512², 500 stars, jitter 1 px rms per axis)
 * with 50 hot pixels, run with the default config (window 20, fraction
 * 0.75, min_frames 5; min_history 14, so the first ok frame is the 15th).
 * In every ok frame after the third, no detection (either sign) lies
 * within 1.5 px of a hot pixel's detector position; with learning only at
 * the window's end, each hot pixel was a detection in the ok frames
 * before the 20th frame. The learned mask (read from the backend after
 * every frame) holds the hot pixels and never a star pixel. */
#define HP_W 512
#define HP_N_HOT 50

/* The detector pixels that carry a hot pixel: the same field rendered
 * with and without them differs there only. */
static int synth_hot_map(const ss_synth_cfg_t *sc, uint8_t *is_hot)
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

START_TEST(test_hotpix_pipeline_first_frames)
{
    const size_t n = (size_t)HP_W * HP_W;
    ss_synth_cfg_t sc;
    ss_synth_defaults(&sc);
    sc.width = sc.height = HP_W;
    sc.seed = 0x407;
    sc.n_stars = 500;
    sc.jitter = 1.0;
    sc.n_hot = HP_N_HOT;
    uint8_t *is_hot = malloc(n), *mask = malloc(n);
    ck_assert(is_hot && mask);
    ck_assert_int_eq(synth_hot_map(&sc, is_hot), HP_N_HOT);
    int hx[HP_N_HOT], hy[HP_N_HOT], nh = 0;
    for (size_t i = 0; i < n; i++)
        if (is_hot[i]) {
            hx[nh] = (int)(i % HP_W);
            hy[nh++] = (int)(i / HP_W);
        }

    ss_pipeline_cfg_t pc;
    ss_pipeline_cfg_defaults(&pc);
    pc.backend = SS_BACKEND_CPU;
    pc.negative = 1;
    char err[256] = "";
    ss_pipeline_t *pipe = ss_pipeline_new(&pc, "hot", err, sizeof err);
    ck_assert_msg(pipe != NULL, "%s", err);
    ss_synth_t *syn = ss_synth_new(&sc);
    ss_frame_t f = { .capacity = n * ss_dtype_size(sc.dtype) };
    f.pixels = malloc(f.capacity);
    ss_result_t res;
    ck_assert(syn && f.pixels && ss_result_init(&res, n, 2000) == 0);
    int ok = 0, late_near = 0, learned_at = -1;
    for (int t = 0; t < 24; t++) {
        ck_assert_int_eq(ss_synth_next(syn, &f, NULL), SS_OK);
        ck_assert_int_eq(ss_pipeline_process(pipe, &f, &res), SS_OK);
        const ss_backend_ops_t *ops;
        ss_backend_t *be = ss_pipeline_backend(pipe, &ops);
        ck_assert_ptr_nonnull(be);
        ck_assert_int_eq(ops->read_plane(be, SS_PLANE_BADMASK, 0, mask), SS_OK);
        int lh = 0, lo = 0;
        for (size_t i = 0; i < n; i++) {
            lh += mask[i] && is_hot[i];
            lo += mask[i] && !is_hot[i];
        }
        ck_assert_msg(lo == 0, "frame %d: %d pixels learned that are not hot", t + 1, lo);
        if (learned_at < 0 && lh >= HP_N_HOT - 2)
            learned_at = t + 1;
        if (res.status != SS_STATUS_OK)
            continue;
        ok++;
        int near = 0;
        for (int j = 0; j < res.dets.count; j++)
            for (int k = 0; k < nh; k++)
                near += hypot(res.dets.items[j].x - hx[k], res.dets.items[j].y - hy[k]) <= 1.5;
        printf("hot pixels: frame %d (ok frame %d): %d of %d learned, %d detections within "
               "1.5 px of one\n", t + 1, ok, lh, HP_N_HOT, near);
        if (ok > 3)
            late_near += near;
    }
    ck_assert_int_ge(ok, 8);
    ck_assert_int_eq(late_near, 0);
    /* learned from the min_frames-th frame on, long before the first ok frame */
    ck_assert_int_eq(learned_at, pc.hotpix_min_frames);
    ss_result_free(&res);
    free(f.pixels);
    ss_synth_destroy(&syn);
    ss_pipeline_destroy(&pipe);
    free(is_hot);
    free(mask);
}
END_TEST

static Suite *calib_suite(void)
{
    Suite *s = suite_create("calib");
    TCase *tc = tcase_create("calibrate");
    tcase_add_test(tc, test_calibrate_dtypes_full_frame);
    tcase_add_test(tc, test_calibrate_saturation_dark_flat);
    tcase_add_test(tc, test_calibrate_roi_masks);
    tcase_add_test(tc, test_calibrate_bias_dark_scale);
    tcase_add_test(tc, test_overscan_scalar_row);
    tcase_add_test(tc, test_calibrate_partial_frame);
    suite_add_tcase(s, tc);
    tc = tcase_create("median");
    tcase_add_test(tc, test_median_small_cases);
    tcase_add_test(tc, test_median_random_vs_brute);
    suite_add_tcase(s, tc);
    tc = tcase_create("hotpix");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_hotpix_learns_fixed_not_stars);
    tcase_add_test(tc, test_hotpix_threshold_count);
    tcase_add_test(tc, test_hotpix_incremental);
    tcase_add_test(tc, test_hotpix_pipeline_first_frames);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return ss_run_suite(calib_suite());
}
