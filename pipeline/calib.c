/*
 * calib.c — ALGORITHM.md §1 on the CPU: calibration of a raw frame (crop to
 * the roi, bias, overscan, exposure-scaled dark, flat, saturation,
 * validity), the overscan bias from BIASSEC, the 3×3 median pre-filter,
 * and learning of hot pixels that stay put in detector coordinates.
 *
 * This is the reference the CUDA backend is checked against: every
 * function follows its contract in stages.h to the letter (rounding,
 * NaN rules, tie-breaks). Rows are independent, so the loops parallelise
 * over rows with OpenMP and the results never depend on the thread count.
 */
#include "stages.h"
#include "calib_core.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Raw pixels are widened to double in pieces of this many, so that the
 * per-type conversion and the (type-independent) calibration are two
 * simple loops without a switch per pixel and without any heap scratch. */
#define CALIB_PIECE 256

/* Widen n raw pixels starting at element i0 to double. */
static void widen(const void *raw, ss_dtype_t dt, size_t i0, int n, double *v)
{
    switch (dt) {
    case SS_DT_U8: { const uint8_t *p = (const uint8_t *)raw + i0; for (int i = 0; i < n; i++) v[i] = p[i]; break; }
    case SS_DT_U16: { const uint16_t *p = (const uint16_t *)raw + i0; for (int i = 0; i < n; i++) v[i] = p[i]; break; }
    case SS_DT_I16: { const int16_t *p = (const int16_t *)raw + i0; for (int i = 0; i < n; i++) v[i] = p[i]; break; }
    case SS_DT_I32: { const int32_t *p = (const int32_t *)raw + i0; for (int i = 0; i < n; i++) v[i] = p[i]; break; }
    case SS_DT_F32: { const float *p = (const float *)raw + i0; for (int i = 0; i < n; i++) v[i] = p[i]; break; }
    default: for (int i = 0; i < n; i++) v[i] = NAN; break;
    }
}

void ss_calibrate_frame(const void *raw, ss_dtype_t dt, int raw_w, const uint8_t *raw_valid,
                        ss_roi_t roi, const ss_calib_data_t *cal, const ss_calib_frame_t *cf,
                        double saturation, float *out)
{
    const double sat = saturation > 0.0 ? saturation : ss_dtype_max(dt);
    const float *dark = cal ? cal->dark : NULL, *flat = cal ? cal->flat : NULL;
    const float *bias = cal ? cal->bias : NULL;
    const uint8_t *bad = cal ? cal->bad : NULL;
    const double s = cf ? cf->dark_scale : 1.0;
    const double *row_bias = cf ? cf->row_bias : NULL;
    const int vw = cf ? SS_CLAMP(cf->valid_w, 0, roi.w) : roi.w;
    const int vh = cf ? SS_CLAMP(cf->valid_h, 0, roi.h) : roi.h;

#pragma omp parallel for schedule(static)
    for (int y = 0; y < roi.h; y++) {
        double v[CALIB_PIECE];
        const size_t row_raw = (size_t)(roi.y + y) * (size_t)raw_w + (size_t)roi.x;
        const size_t row_out = (size_t)y * (size_t)roi.w;
        /* the part of the roi beyond the frame's own region (a frame a few
         * rows shorter than the geometry) is invalid, and never read */
        const int n_in = y < vh ? vw : 0;
        for (int x = n_in; x < roi.w; x++)
            out[row_out + (size_t)x] = NAN;
        const double rb = row_bias ? row_bias[y] : 0.0;
        for (int x0 = 0; x0 < n_in; x0 += CALIB_PIECE) {
            const int n = SS_MIN(CALIB_PIECE, n_in - x0);
            widen(raw, dt, row_raw + (size_t)x0, n, v);
            for (int i = 0; i < n; i++) {
                const size_t j = row_out + (size_t)(x0 + i);
                const int ok = (!raw_valid || raw_valid[row_raw + (size_t)(x0 + i)]) &&
                               !(bad && bad[j]);
                out[j] = ss_calib_px(v[i], rb, bias ? bias[j] : 0.0, dark ? dark[j] : 0.0, s,
                                     flat ? flat[j] : 1.0, flat != NULL, ok, sat);
            }
        }
    }
}

void ss_calibrate(const void *raw, ss_dtype_t dt, int raw_w, const uint8_t *raw_valid,
                  ss_roi_t roi, const float *dark, const float *flat, double saturation,
                  const uint8_t *bad, float *out)
{
    const ss_calib_data_t cal = { .dark = dark, .flat = flat, .bad = bad };
    ss_calibrate_frame(raw, dt, raw_w, raw_valid, roi, &cal, NULL, saturation, out);
}

/* ---- overscan ------------------------------------------------------------ */

/* The finite (and valid) BIASSEC samples of raw row ry into v; their count. */
static size_t overscan_row(const void *raw, ss_dtype_t dt, int raw_w, const uint8_t *raw_valid,
                           ss_roi_t bsec, int ry, double *v)
{
    const size_t i0 = (size_t)ry * (size_t)raw_w + (size_t)bsec.x;
    size_t n = 0;
    for (int x = 0; x < bsec.w; x++) {
        const double a = ss_dtype_get(raw, dt, i0 + (size_t)x);
        if (isfinite(a) && (!raw_valid || raw_valid[i0 + (size_t)x]))
            v[n++] = a;
    }
    return n;
}

double ss_overscan(const void *raw, ss_dtype_t dt, int raw_w, int raw_h, const uint8_t *raw_valid,
                   ss_roi_t bsec, int y0, int nrows, double *row_bias, double *scratch)
{
    /* the box as the frame holds it (the reader clips, a caller may not) */
    const int bx1 = SS_MIN(bsec.x + bsec.w, raw_w), by1 = SS_MIN(bsec.y + bsec.h, raw_h);
    bsec.x = SS_MAX(bsec.x, 0);
    bsec.y = SS_MAX(bsec.y, 0);
    bsec.w = SS_MAX(bx1 - bsec.x, 0);
    bsec.h = SS_MAX(by1 - bsec.y, 0);
    size_t n = 0;
    for (int ry = bsec.y; ry < bsec.y + bsec.h; ry++)
        n += overscan_row(raw, dt, raw_w, raw_valid, bsec, ry, scratch + n);
    const double scalar = n > 0 ? ss_median_d(scratch, n) : NAN;
    if (!row_bias)
        return scalar;
    for (int y = 0; y < nrows; y++) {
        const int ry = y0 + y;
        size_t m = 0;
        if (ry >= bsec.y && ry < bsec.y + bsec.h)
            m = overscan_row(raw, dt, raw_w, raw_valid, bsec, ry, scratch);
        row_bias[y] = m > 0 ? ss_median_d(scratch, m) : scalar;
    }
    return scalar;
}

/* ---- 3×3 median ---------------------------------------------------------- */

/* Compare-exchange: after it, a <= b. Finite inputs only. */
#define CX(a, b)                                  \
    do {                                          \
        const float lo_ = (a) < (b) ? (a) : (b);  \
        const float hi_ = (a) < (b) ? (b) : (a);  \
        (a) = lo_;                                \
        (b) = hi_;                                \
    } while (0)

/* Median of 9 finite values: the classic 19-exchange network (Paeth,
 * Graphics Gems; as in Devillard's opt_med9). Exact, branch-free. */
static inline float median9(float p0, float p1, float p2, float p3, float p4, float p5,
                            float p6, float p7, float p8)
{
    CX(p1, p2); CX(p4, p5); CX(p7, p8); CX(p0, p1); CX(p3, p4); CX(p6, p7);
    CX(p1, p2); CX(p4, p5); CX(p7, p8); CX(p0, p3); CX(p5, p8); CX(p4, p7);
    CX(p3, p6); CX(p1, p4); CX(p2, p5); CX(p4, p7); CX(p4, p2); CX(p6, p4);
    CX(p4, p2);
    return p4;
}

/* The general case: the window clipped to the frame and/or holding
 * non-finite values. Insertion sort of the (at most 9) finite values. */
static float median_general(const float *in, int w, int h, int x, int y)
{
    float v[9];
    int n = 0;
    for (int yy = SS_MAX(y - 1, 0); yy <= SS_MIN(y + 1, h - 1); yy++)
        for (int xx = SS_MAX(x - 1, 0); xx <= SS_MIN(x + 1, w - 1); xx++) {
            const float a = in[(size_t)yy * (size_t)w + (size_t)xx];
            if (!isfinite(a))
                continue;
            int k = n++;
            while (k > 0 && v[k - 1] > a) {
                v[k] = v[k - 1];
                k--;
            }
            v[k] = a;
        }
    if (n == 0)             /* unreachable when the centre is finite */
        return NAN;
    if (n & 1)
        return v[n / 2];
    return 0.5f * (v[n / 2 - 1] + v[n / 2]);
}

/* Columns per piece of an interior row: the column sums of a piece live
 * on the stack. */
#define MEDIAN_PIECE 512

/* One row y of the output (y > 0, y < h - 1, w >= 3): the network runs
 * unconditionally over the interior (a loop the compiler vectorises: NaN
 * or Inf in a window only makes that lane's value meaningless), then the
 * few pixels whose window is not all finite are redone by the general
 * path. A window is all finite exactly when the sum of its three column
 * sums is finite (an overflow near FLT_MAX just sends a pixel to the
 * general path, which is still correct). */
static void median_row_interior(const float *in, int w, int h, int y, float *o)
{
    const float *r0 = in + (size_t)(y - 1) * (size_t)w;
    const float *r1 = r0 + w, *r2 = r1 + w;
    for (int x0 = 1; x0 < w - 1; x0 += MEDIAN_PIECE) {
        const int x1 = SS_MIN(x0 + MEDIAN_PIECE, w - 1);
        float cs[MEDIAN_PIECE + 2];
        for (int x = x0 - 1; x <= x1; x++)
            cs[x - x0 + 1] = r0[x] + r1[x] + r2[x];
#pragma omp simd
        for (int x = x0; x < x1; x++)
            o[x] = median9(r0[x - 1], r0[x], r0[x + 1], r1[x - 1], r1[x], r1[x + 1], r2[x - 1],
                           r2[x], r2[x + 1]);
        for (int x = x0; x < x1; x++)
            if (!isfinite(cs[x - x0] + cs[x - x0 + 1] + cs[x - x0 + 2]))
                o[x] = isnan(r1[x]) ? NAN : median_general(in, w, h, x, y);
    }
}

void ss_median3x3(const float *in, int w, int h, float *out)
{
#pragma omp parallel for schedule(static)
    for (int y = 0; y < h; y++) {
        float *o = out + (size_t)y * (size_t)w;
        const float *r1 = in + (size_t)y * (size_t)w;
        if (y > 0 && y < h - 1 && w >= 3) {
            median_row_interior(in, w, h, y, o);
            for (int x = 0; x < w; x += w - 1)      /* the first and last column */
                o[x] = isnan(r1[x]) ? NAN : median_general(in, w, h, x, y);
        } else {
            for (int x = 0; x < w; x++)
                o[x] = isnan(r1[x]) ? NAN : median_general(in, w, h, x, y);
        }
    }
}

/* ---- learned hot pixels ------------------------------------------------- */

int ss_hotpix_init(ss_hotpix_t *hp, int w, int h)
{
    memset(hp, 0, sizeof *hp);
    if (w <= 0 || h <= 0)
        return -1;
    const size_t n = (size_t)w * (size_t)h;
    hp->hits = calloc(n, sizeof *hp->hits);
    hp->learned = calloc(n, sizeof *hp->learned);
    if (!hp->hits || !hp->learned) {
        ss_hotpix_free(hp);
        return -1;
    }
    hp->w = w;
    hp->h = h;
    hp->min_frames = SS_HOTPIX_MIN_FRAMES;
    return 0;
}

void ss_hotpix_free(ss_hotpix_t *hp)
{
    if (!hp)
        return;
    free(hp->hits);
    free(hp->learned);
    memset(hp, 0, sizeof *hp);
}

void ss_hotpix_reset(ss_hotpix_t *hp)
{
    const size_t n = (size_t)hp->w * (size_t)hp->h;
    if (hp->hits)
        memset(hp->hits, 0, n * sizeof *hp->hits);
    if (hp->learned)
        memset(hp->learned, 0, n * sizeof *hp->learned);
    hp->frames = 0;
}

/* 1 when frame(x, y) is above every finite 8-neighbour inside the frame.
 * Why: on the flanks of a bright star the profile is convex, so a pixel
 * stands well above its 3×3 median over a whole ring around the star; with
 * a jitter of a pixel or two the same detector pixels stay on that ring in
 * most frames and would be learned as "hot". A flank pixel always has a
 * brighter neighbour (towards the core); a hot pixel never has. The core
 * itself is a local maximum only while the star's centre lies inside that
 * pixel, which the sky's jitter makes a minority of frames. */
/* Is the pixel hot-shaped: above each finite in-frame 8-neighbour (a
 * strict local maximum), and sharper than any PSF — its excess over the
 * median d at least SS_HOTPIX_SHARP of its rise over the lowest finite
 * neighbour (the median when none)? On a static camera a star's core is a
 * local maximum far above its median in every frame, and was learned as
 * hot (its shift then moved by 0.06 px, its detections vanished); a star
 * of FWHM 2 px centred on a pixel rises 0.63 of the way, a hot pixel all
 * of it. */
static int hot_shaped(const float *frame, int w, int h, int x, int y, float d)
{
    const float v = frame[(size_t)y * (size_t)w + (size_t)x];
    float lo = INFINITY;
    for (int yy = SS_MAX(y - 1, 0); yy <= SS_MIN(y + 1, h - 1); yy++)
        for (int xx = SS_MAX(x - 1, 0); xx <= SS_MIN(x + 1, w - 1); xx++) {
            const float n = frame[(size_t)yy * (size_t)w + (size_t)xx];
            if ((xx == x && yy == y) || !isfinite(n))
                continue;
            if (n >= v)
                return 0;
            lo = fminf(lo, n);
        }
    if (isinf(lo))
        lo = v - d;
    return d >= SS_HOTPIX_SHARP * (v - lo);
}

/* hits is 16-bit: a window cannot be longer than this. */
#define HOTPIX_MAX_WINDOW 65535

/* The hits that learn a pixel mid-window, after the n-th frame of it:
 * hot in at least min_frames frames and in at least `fraction` of the n
 * counted so far. Why not wait for the window's end: the first ok frame
 * comes after min_history frames of warm-up (14 with the defaults), and a
 * 20-frame window showed every hot pixel as a detection in the first ~6
 * ok frames. min_frames guards the stars: a star's core is a local
 * maximum only while the star's centre lies in that pixel, which jitter
 * rarely repeats — measured on 1024² synthetic fields of 2000 stars (k 8,
 * fraction 0.75): with 0.5-1.5 px rms jitter no star pixel is learned
 * early even with min_frames 2 (8000 stars at 0.7 px: 1 with min_frames
 * 2 or 3, 0 with 5); at 0.3 px, 11-22 star cores are learned early with
 * min_frames 3, 8-18 with 5, 0-15 with 8 (the end-of-window rule alone:
 * 0-5). A pixel can only reach the need on a frame it is hot in (the
 * need never falls as n grows), so the test lives in the counting loop. */
static int hotpix_need_early(const ss_hotpix_t *hp, int n, double fraction)
{
    return SS_MAX(SS_MAX(hp->min_frames, 1), (int)ceil(fraction * n - 1e-9));
}

int ss_hotpix_update(ss_hotpix_t *hp, const float *frame, const float *med, double k,
                     int window, double fraction, float *scratch)
{
    const int w = hp->w, h = hp->h;
    const size_t n = (size_t)w * (size_t)h;
    float *d = scratch;

    window = SS_CLAMP(window, 1, HOTPIX_MAX_WINDOW);
#pragma omp parallel for schedule(static)
    for (int y = 0; y < h; y++)
        for (size_t i = (size_t)y * (size_t)w; i < (size_t)(y + 1) * (size_t)w; i++)
            d[i] = frame[i] - med[i];

    /* The spread of d is the pixel-to-pixel noise (the median follows the
     * sky and the stars' cores to first order); its MAD is immune to the
     * few hot pixels themselves. NaN sigma (no valid pixel): no hits. */
    const float sigma = ss_noise_mad(d, w, h, SS_HOTPIX_STRIDE, scratch + n);
    const float thresh = (float)(k * (double)sigma);
    const int n_now = hp->frames + 1, early = n_now < window;
    const int need_early = hotpix_need_early(hp, n_now, fraction);
    int changed = 0;
#pragma omp parallel for schedule(static) reduction(| : changed)
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            const size_t i = (size_t)y * (size_t)w + (size_t)x;
            /* d > thresh is rare: the local-maximum test costs nothing */
            if (d[i] > thresh && hot_shaped(frame, w, h, x, y, d[i])) {
                hp->hits[i]++;
                if (early && !hp->learned[i] && hp->hits[i] >= need_early) {
                    hp->learned[i] = 1;
                    changed = 1;
                }
            }
        }

    if (++hp->frames < window)
        return changed;

    /* ceil with a hair of slack, so that e.g. 0.7·10 (= 7.000000000000001
     * in binary) asks for 7 frames, not 8. */
    const int need = SS_MAX(1, (int)ceil(fraction * window - 1e-9));
    changed = 0;
#pragma omp parallel for schedule(static) reduction(| : changed)
    for (int y = 0; y < h; y++)
        for (size_t i = (size_t)y * (size_t)w; i < (size_t)(y + 1) * (size_t)w; i++) {
            const uint8_t l = hp->hits[i] >= need;
            changed |= l != hp->learned[i];
            hp->learned[i] = l;
            hp->hits[i] = 0;
        }
    hp->frames = 0;
    return changed;
}

void ss_hotpix_apply(const ss_hotpix_t *hp, float *frame, float *med)
{
    const size_t n = (size_t)hp->w * (size_t)hp->h;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++)
        if (hp->learned[i]) {
            frame[i] = NAN;
            if (med)
                med[i] = NAN;
        }
}
