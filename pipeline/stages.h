/*
 * stages.h — the CPU reference of every stage of ALGORITHM.md §1–7, as
 * plain functions over host arrays. This is the contract the CUDA backend
 * is tested against: each function's comment defines exactly what is
 * computed (rounding rules, tie-breaks, invalid handling), so that a
 * second implementation can agree to float rounding.
 *
 * Common rules:
 *  - planes are row-major w×h float32; NaN marks an invalid pixel, in
 *    inputs and outputs; no other value means "invalid" in float data;
 *  - "finite" means !isnan && !isinf;
 *  - sums are accumulated in double unless stated otherwise;
 *  - scratch buffers are supplied by the caller (sizes in the comment) so
 *    that nothing is allocated per frame;
 *  - functions use OpenMP where it pays; results never depend on the
 *    number of threads.
 *
 * Files: calib.c (§1), register_coarse.c (§2a), register_fine.c (§2b),
 * weights.c + whiten.c + history.c (§3), guided.c (§4), noise.c (§5),
 * matched.c (§6), label.c + measure.c (§7).
 */
#ifndef SS_STAGES_H
#define SS_STAGES_H

#include "detection.h"
#include "frame.h"
#include "pipeline_cfg.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ss_roi {
    int x, y, w, h;             /* 0-based origin and size, in raw pixels */
} ss_roi_t;

/* ======================================================================
 * §1 calibration (calib.c)
 * ==================================================================== */

/* Static calibration data (master frames), roi-sized; NULL pointers mean
 * "none". A backend copies what it needs at create time. */
typedef struct ss_calib_data {
    const float *dark;          /* bias-free when a bias is removed (master or overscan) */
    const float *flat;
    const uint8_t *bad;         /* 1 = bad */
    const float *bias;          /* master bias */
} ss_calib_data_t;

/* Per-frame calibration parameters, computed on the host by the driver
 * from the frame (its exposure, its overscan, its size). */
typedef struct ss_calib_frame {
    double dark_scale;          /* t / t_dark: the dark is multiplied by it (1: as it is) */
    const double *row_bias;     /* roi.h values, the overscan bias of each processed row
                                 * (ss_overscan); NULL: none */
    int valid_w, valid_h;       /* the part of the roi, from its origin, that this frame
                                 * holds (1..roi.w, 1..roi.h); the rest of out is NaN */
} ss_calib_frame_t;

/* Crop the roi out of a raw frame and calibrate it into out (roi.w×roi.h),
 * ALGORITHM §1, x = (raw - bias - dark·t/t_dark) / flat:
 *   out(x, y) = NaN when x >= valid_w or y >= valid_h (raw is not read
 *   there); else v = raw value (double), invalid (NaN) if raw_valid &&
 *   !raw_valid[i], if !finite(v), if v >= saturation, or if bad && bad[j];
 *   otherwise out = (float)((((v - rb[y]) - bias[j]) - dark[j]·s) / flat[j])
 *   in double, in that order, with rb = row_bias (0 when NULL), bias and
 *   dark 0 and flat 1 when NULL, s = dark_scale; a flat value <= 0 or
 *   non-finite makes it invalid, and so does a non-finite result (a NaN
 *   dark, or overflow of float). With no bias, no row bias and s = 1 this
 *   is (v - dark) / flat bit for bit.
 * cal's planes are roi-sized (j indexes the roi); raw_valid is raw-sized
 * (raw_w wide). cal NULL: no masters; cf NULL: s = 1, no row bias, the
 * whole roi. saturation <= 0 means ss_dtype_max(dt) (f32: +inf). */
void ss_calibrate_frame(const void *raw, ss_dtype_t dt, int raw_w, const uint8_t *raw_valid,
                        ss_roi_t roi, const ss_calib_data_t *cal, const ss_calib_frame_t *cf,
                        double saturation, float *out);

/* The same without a bias or per-frame parameters (the older entry point,
 * kept for the tests that calibrate by hand). */
void ss_calibrate(const void *raw, ss_dtype_t dt, int raw_w, const uint8_t *raw_valid,
                  ss_roi_t roi, const float *dark, const float *flat, double saturation,
                  const uint8_t *bad, float *out);

/* Overscan bias of a raw frame (ALGORITHM §1) from its BIASSEC box bsec
 * (inside the raw_w×raw_h frame): the samples are the finite BIASSEC
 * pixels (raw_valid, when given, also 1), widened to double. Returns the
 * scalar bias, their median (for an even count the mean of the two middle
 * values, 0.5·(a + b)); NaN when there is no sample. With row_bias != NULL
 * also the per-row bias of the nrows processed rows from raw row y0:
 * row_bias[y] = the median of the samples in raw row y0 + y, or the
 * scalar for a row that holds none (outside BIASSEC, or all invalid).
 * scratch: bsec.w·bsec.h doubles. */
double ss_overscan(const void *raw, ss_dtype_t dt, int raw_w, int raw_h, const uint8_t *raw_valid,
                   ss_roi_t bsec, int y0, int nrows, double *row_bias, double *scratch);

/* 3×3 median: out(x) = NaN if in(x) is NaN; otherwise the median of the
 * finite values of the 3×3 window clipped to the frame (for an even count,
 * the mean of the two middle values, computed as 0.5f*(a+b) in float). */
void ss_median3x3(const float *in, int w, int h, float *out);

/* Learned hot pixels (ALGORITHM §1). State per pixel, in detector
 * coordinates of the processed (roi) frame. */
typedef struct ss_hotpix {
    int w, h;
    int frames;                 /* frames counted in the current window */
    int min_frames;             /* mid-window learning needs this many hits (ss_hotpix_update) */
    uint16_t *hits;             /* per pixel: frames in this window it was hot */
    uint8_t *learned;           /* 1 = learned bad */
} ss_hotpix_t;

/* The default of min_frames (config hotpix.min_frames). */
#define SS_HOTPIX_MIN_FRAMES 5

/* 0 ok, -1 no memory; min_frames = SS_HOTPIX_MIN_FRAMES (the caller may
 * change it between updates). */
int ss_hotpix_init(ss_hotpix_t *hp, int w, int h);
void ss_hotpix_free(ss_hotpix_t *hp);
void ss_hotpix_reset(ss_hotpix_t *hp);                 /* forget everything */
/* Count one frame: frame is calibrated (static mask applied, learned mask
 * NOT applied), med = ss_median3x3(frame). d = frame - med; sigma =
 * ss_noise_mad(d, SS_HOTPIX_STRIDE); a pixel is hot when d > (float)(k·sigma)
 * AND frame(x) is above each of its finite 8-neighbours (a strict local
 * maximum: on the convex flanks of a bright star whole rings of pixels
 * stand > k·sigma above their median, and with a px or two of jitter they
 * would be learned; a flank pixel always has a brighter neighbour) AND
 * sharper than a PSF: d >= SS_HOTPIX_SHARP·(frame(x) - the minimum of its
 * finite 8-neighbours, or med when none) (on a static camera a star's core
 * is a local maximum in every frame; one of FWHM 1.6 px centred on a pixel
 * rises 0.71 of the way over its lowest neighbour, more with noise, a hot
 * pixel all of it).
 * Learning is incremental, so that a hot pixel is masked from its first
 * few frames on instead of after a whole window: after the n-th frame of
 * a window (n < window) a pixel becomes learned when hits >=
 * max(min_frames, ceil(fraction·n - 1e-9)) — hot in at least min_frames
 * frames and in at least `fraction` of the frames counted so far; nothing
 * is unlearned mid-window. After `window` frames (clamped to 1..65535)
 * the whole mask is re-evaluated from this window alone: learned = hits
 * >= max(1, ceil(fraction·window - 1e-9)) (0.7·10 asks for 7), so a pixel
 * that stopped being hot is unlearned; hits = 0. scratch: 2·w·h floats.
 * Returns 1 when the learned mask changed. */
#define SS_HOTPIX_SHARP 0.9f       /* d >= this · (frame - lowest neighbour): hot-shaped */
#define SS_HOTPIX_STRIDE 4
int ss_hotpix_update(ss_hotpix_t *hp, const float *frame, const float *med, double k,
                     int window, double fraction, float *scratch);
/* Set frame and med to NaN where learned. */
void ss_hotpix_apply(const ss_hotpix_t *hp, float *frame, float *med);

/* ======================================================================
 * §2 registration input: the high-passed filtered frame (register_coarse.c)
 * ==================================================================== */

/* Registration must not care about the sky level, stray light, twilight
 * gradients or the transparency (ALGORITHM §2): both steps work on the
 * frame with its sharp outliers replaced (ss_clean_sharp: cosmic-ray hits,
 * hot pixels not learned yet) minus its local mean; the coarse step
 * matches star peaks, the fine step fits a gain and an offset. Not on the
 * 3×3 median: it is not equivariant under sub-pixel shifts (it pulls
 * stars towards pixel centres), which left a 0.007 px pattern in the
 * fraction of the shift that no error estimate sees.
 *
 * Local mean: a valid-aware box mean of radius r, separable (the sums of
 * hipass_core.h, shared with the GPU):
 *   h(x, y) = (float) Σ_{i=-r..r, 0<=x+i<w, in finite} in(x+i, y) (double,
 *             i ascending), c(x, y) = the count of those terms;
 *   m(x, y) = C(y) / N(y), running sums down column x over segments of
 *             SS_HP_SEG rows: at a segment's first y (y % SS_HP_SEG == 0)
 *             C = Σ_{j=-r..r, 0<=y+j<h} h(x, y+j) (double, j ascending),
 *             N the same of c (integer); then C(y) = C(y-1) + h(x, y+r) -
 *             h(x, y-r-1), each term only inside the frame, in that order
 *             (N likewise);
 *   out = (float)((double)in - m) where in is finite and N > 0, NaN
 *         elsewhere.
 * Offsets and linear gradients leave no trace; scales much wider than r
 * (stray light, twilight, vignetting — fixed on the detector, so they
 * would pull the shift towards zero) are suppressed; a star of sigma
 * <= r/3 keeps most of its core. scratch: 2·w·h floats. */
#define SS_HP_SEG 16
void ss_hipass(const float *in, int w, int h, int r, float *out, float *scratch);

/* The radius comes from ss_cfg_hipass_radius (pipeline_cfg.h). */

/* ======================================================================
 * §2a coarse registration: star-pattern vote (register_coarse.c)
 * ==================================================================== */

#define SS_MAX_LEVELS 5
#define SS_COARSE_PEAK 4.0          /* a star peak stands this many noise sigmas above 0
                                     * (5: a 150×120 field kept 8 stars, too few to vote) */
#define SS_COARSE_STARS 64          /* brightest peaks matched per frame */
#define SS_COARSE_MIN_VOTES 4       /* fewer matched pairs: no match (3 random pairs in one
                                     * window happen about once in 3 blank frames) */
#define SS_COARSE_VOTE_SIGMA 5.0    /* votes above the random expectation, in its sigmas */
#define SS_COARSE_MAX_R 256         /* search range limit, binned px */
#define SS_COARSE_MIN_LEVEL 32      /* the coarsest level keeps at least this many px a side */
#define SS_COARSE_PEAK_CAP 65536    /* peaks considered per frame (the brightest are kept
                                     * among the first this many in raster order) */

/* 2×2 binning: out is (w/2)×(h/2) (integer division), each the mean of the
 * finite values among its 4 inputs (sum in float, in raster order, then
 * divided by the count), NaN if none. */
void ss_bin2(const float *in, int w, int h, float *out);

/* A pyramid: level 0 is the high-passed frame itself (not copied), level l
 * is ss_bin2 of level l-1. */
typedef struct ss_pyramid {
    int levels;                     /* L: number of binned levels (0..SS_MAX_LEVELS) */
    int w[SS_MAX_LEVELS + 1], h[SS_MAX_LEVELS + 1];
    const float *lvl[SS_MAX_LEVELS + 1];
} ss_pyramid_t;

typedef struct ss_coarse {
    int ok;                     /* 1 = success */
    int dx, dy;                 /* integer shift at full resolution (s ≈ (dx,dy)) */
    int n_ref, n_cur;           /* star peaks matched: reference, frame */
    int n_votes;                /* star pairs that agree on the shift (3×3 binned px window) */
    int n_second;               /* the best other window, 3 binned px or more away */
    double expected;            /* votes a window gets from random pairs */
    char why[96];               /* reason when !ok */
} ss_coarse_t;

/* Robust pixel noise of a plane: 1.4826·MAD/sqrt 2 of the horizontal
 * neighbour differences d = a(x+1,y) - a(x,y) (float) on even rows y, both
 * finite (lower medians, rank floor((m-1)/2); |d - med| in float); NaN
 * when there is no such pair. Exact (radix selection, no copy). */
double ss_diff_noise(const float *a, int w, int h);

/* A star peak of a level: position and value. */
typedef struct ss_peak {
    float v;
    int x, y;
} ss_peak_t;

/* Is (x, y) a star peak of the level a (w×h)? Not on the level's outer
 * row or column, finite, above `level`, and above each finite
 * 8-neighbour — equal to a neighbour only when that neighbour comes later
 * in raster order (one peak per plateau). */
int ss_is_peak(const float *a, int w, int h, int x, int y, float level);

/* The n brightest of m peaks, in order, to the front of p: value
 * descending, ties in raster order (y, then x, ascending); returns
 * min(n, m). The rest of p is left in no particular order. Shared by both
 * backends (the GPU finds the peaks, the host orders them). */
int ss_peaks_order(ss_peak_t *p, int m, int n);

/* All star peaks of a level above SS_COARSE_PEAK·noise into out (room for
 * cap), in raster order; returns how many there are (may exceed cap: the
 * rest are not stored). */
int ss_find_peaks(const float *a, int w, int h, double noise, ss_peak_t *out, int cap);

/* The vote (§2a), shared by both backends: every pair of a reference peak
 * p and a frame peak q with |p - q| <= R (Chebyshev, binned px) votes for
 * the displacement d = p - q (a star at p in the reference is at p - s in
 * the frame); V = the votes cast. The score of d is the sum of the votes
 * in the 3×3 window around it; the best d has the highest score (over the
 * d that got votes; ties: smallest dy, then dx); n_votes = its score;
 * n_second = the highest score at Chebyshev distance >= 3 from it;
 * expected = 9·V/(2R+1)² (random pairs spread evenly). The shift at level
 * L is the vote-weighted mean displacement of the best window, rounded
 * half away from zero. Fails (ok = 0, why set) with fewer than 3 peaks on
 * either side, fewer than SS_COARSE_MIN_VOTES votes, a score below
 * expected + SS_COARSE_VOTE_SIGMA·sqrt(expected), or n_second >=
 * ambiguity·n_votes. Star peaks are blind to the sky level and stray light
 * (the levels are high-passed) and, ranked and not weighted, to the
 * transparency; a field of ten stars still votes, where blocks compared
 * pixel by pixel lose a lone star in their noise. hist: (2R+1)² ints of
 * scratch. On success dx, dy are at level L (before refinement). */
void ss_coarse_vote(const ss_peak_t *ref, int nr, const ss_peak_t *cur, int nc, int R,
                    double ambiguity, int *hist, ss_coarse_t *out);

/* The coarse registration of cur against ref (both high-passed pyramids of
 * the same sizes), ALGORITHM §2a: at level L, the SS_COARSE_STARS brightest
 * peaks of each (noise by ss_diff_noise of each level), ss_coarse_vote
 * with R = c->reg_search; then at each finer level the shift doubles and
 * the best of the 3×3 candidates d around it is the one with the largest
 * mean product of the two levels, Σ ref(x + d)·cur(x) / n over pairs both
 * finite and inside (double, every pixel; ties: smallest dy, then dx) —
 * the correlation of high-passed
 * levels, blind to offset and gain like the peaks. Sums here may be added
 * in any order (double rounding is all that can differ). peaks: room for
 * 2·cap peaks, hist: (2R+1)² ints (scratch). */
void ss_register_coarse(const ss_pyramid_t *ref, const ss_pyramid_t *cur,
                        const ss_pipeline_cfg_t *c, ss_peak_t *peaks, int cap, int *hist,
                        ss_coarse_t *out);

/* The refinement of ss_register_coarse alone: from (dx, dy) at level L
 * down to level 0. */
void ss_coarse_refine(const ss_pyramid_t *ref, const ss_pyramid_t *cur, int *dx, int *dy);

/* ======================================================================
 * §2b fine registration: gradient least squares (register_fine.c)
 * ==================================================================== */

/* The sums of one pass, over the pixels that count (see ss_fine_sums),
 * with the columns gx, gy, S, 1, L (L = 5·(S - R) = the reference's
 * five-point Laplacian) of the linear model
 *   e = F(x - s_i) - S(x) ≈ θ0·gx + θ1·gy + θ2·S + θ3 + θ4·L
 * (θ0,1 ≈ δ, θ2 = g - 1, θ3 = b for F(x - s) ≈ g·R(x + δ) + b, and θ4 a
 * change of seeing, which blurs by ∝ ∇²R — the heat equation — and,
 * unmodelled, left residuals that the error estimate read as noise: 2.6×
 * too large with 10 % seeing wobble): the normal matrix (upper triangle,
 * row by row), the right-hand side, Σe², and the response sums. */
enum {
    SS_FS_XX, SS_FS_XY, SS_FS_XS, SS_FS_X, SS_FS_XL,
    SS_FS_YY, SS_FS_YS, SS_FS_Y, SS_FS_YL,
    SS_FS_SS, SS_FS_S, SS_FS_SL,
    SS_FS_N, SS_FS_L,
    SS_FS_LL,
    SS_FS_XE, SS_FS_YE, SS_FS_SE, SS_FS_E, SS_FS_LE, SS_FS_EE,
    /* the true response of the sample to the shift, D = ∂F(x - s)/∂s of
     * the bilinear sample, against the gradients: Σ gx·Dx, Σ gx·Dy,
     * Σ gy·Dx, Σ gy·Dy (the Newton step and the errors of
     * ss_register_fine) */
    SS_FS_XDX, SS_FS_XDY, SS_FS_YDX, SS_FS_YDY, SS_FINE_NSUMS
};
/* Each pass sums SS_FINE_BANDS bands of rows and, separately, as many
 * bands of columns (the jackknife of ss_register_fine needs them: the x
 * error from deleting row bands, the y error from deleting column bands,
 * so that no deletion cuts a star across the axis it measures — a half
 * star's gradient sums do not cancel, and cut stars overstated the error
 * 3× under seeing changes); the whole-frame sums are the sum of either. */
#define SS_FINE_BANDS 16
typedef double ss_fine_bands_t[2][SS_FINE_BANDS][SS_FINE_NSUMS];    /* [rows|columns][band][sum] */
/* The match test of ss_register_fine: probe offset (px, both axes) and the
 * least relative growth of the residual variance it must cause. */
#define SS_FINE_PROBE_PX 2.0
#define SS_FINE_MIN_CONTRAST 0.05
/* A gain against the reference below this: the frame does not show the
 * reference's sky (clouds, closed dome). */
#define SS_FINE_MIN_GAIN 0.1

typedef struct ss_shift {
    int ok;
    double sx, sy;              /* s_t: F_t(x) ≈ g·R(x + s) + b */
    double err_x, err_y;        /* standard errors (px), delete-a-band jackknife */
    double cov_xy;              /* covariance (px²), jackknife */
    double err_formal;          /* sqrt of the mean formal variance of sx, sy (px), for
                                 * comparison: σe²·(normal matrix)⁻¹ */
    double gain, offset;        /* g and b of the last pass */
    int iterations;
    double det_ratio;           /* det / (u·w) of the gradient block of the last step */
    double contrast;            /* residual variance growth when misaligned (ss_register_fine) */
    char why[96];
} ss_shift_t;

/* From the high-passed reference: S = five-point mean, gx, gy = central
 * differences (ALGORITHM §2b), NaN where any of the five points is NaN or
 * outside the frame. All in float: S = (c + l + r + u + d) / 5.0f summed in
 * that order (u = row y-1, d = row y+1); gx = (r - l) * 0.5f, gy =
 * (d - u) * 0.5f. */
void ss_reference_prep(const float *ref, int w, int h, float *S, float *gx, float *gy);

/* One pass of the sums for the current estimate (sx, sy): for every pixel x
 * (a 1-px margin excluded) with S, gx, gy finite, sample cur at (x - sx,
 * y - sy) bilinearly (NaN if any of the 4 taps is NaN or outside, even at
 * weight 0); if finite, e = sample - S and accumulate (double) the
 * SS_FINE_NSUMS products of the columns (gx, gy, S, 1, L = 5·((double)S -
 * ref)) with each other and with e, e², and the response sums, into
 * sums[0][band][k], band = ((y - ya)·SS_FINE_BANDS) / (yb - ya) for the
 * rows [ya, yb) that can have valid pixels, and into sums[1][band][k],
 * band = ((x - xa)·SS_FINE_BANDS) / (xb - xa) for the columns [xa, xb)
 * likewise (each pixel adds to one of each). Bilinear, with one integer offset
 * and one set of weights for the whole frame (so the pass is a plain
 * stencil): ix = floor(-sx), fx = -sx - ix (double; likewise iy, fy),
 * taps a, b = cur(x+ix, y+iy), cur(x+ix+1, y+iy), c, d = the same at
 * y+iy+1, value = (1-fy)·((1-fx)·a + fx·b) + fy·((1-fx)·c + fx·d) in
 * double; Dx = (1-fy)·(b - a) + fy·(d - c), Dy = (1-fx)·(c - a) +
 * fx·(d - b). Summation order within a band is unspecified (double
 * rounding only); results do not depend on the thread count. |sx| or |sy|
 * >= 1e9 (or NaN): all sums 0. */
void ss_fine_sums(const float *cur, const float *ref, const float *S, const float *gx,
                  const float *gy, int w, int h, double sx, double sy, ss_fine_bands_t sums);

/* The band sums of one pass for the shift (sx, sy), however a backend gets
 * them. */
typedef void (*ss_fine_sums_fn)(void *ctx, double sx, double sy, ss_fine_bands_t sums);

/* The iteration of §2b (its decisions are fine_core.h's, which the CUDA
 * backend takes on the device): from (sx0, sy0), up to
 * c->reg_max_iter passes; each solves the 5×5 normal equations of the
 * whole-frame sums for θ, steps by δ = M·(θ0, θ1) (M = J⁻¹A, the gradient
 * block A against the measured response J: a Newton step; each axis cut
 * to ±1 px) and stops when
 * |δ| (Euclidean) < c->reg_tol. Fails (ok = 0, why set) when n < 16, when
 * det/(u·w) of the gradient block (u = Σgx², w = Σgy²) is below
 * c->reg_min_det (no structure), when the 5×5 system is singular, or when
 * the gain 1 + θ2 is below SS_FINE_MIN_GAIN. From the last pass:
 * gain = 1 + θ2, offset = θ3; the formal errors σe²·(N⁻¹)_00,11 with
 * σe² = (Σe² - θ·rhs)/(n - 5); and the reported errors by the
 * delete-a-band jackknife: M·δ_(b) from the sums without band b, var =
 * (B-1)/B·Σ_b (M·δ_(b) - mean)², x over the row bands, y over the column
 * bands (the covariance: the mean of both), which also
 * holds the correlations that the cleaning, the smoothing and the
 * reference's own noise put between neighbouring pixels (the formal error
 * ignores them and was measured 9-22× too small). Then the match test,
 * because det/(u·w) sees only the reference: one more pass at (sx + P,
 * sy + P), P = SS_FINE_PROBE_PX; with var_fit = (Σe² - θ·rhs)/n of the
 * last pass and var_probe = the probe's Σe² less its best fit of the
 * columns S, 1 and L only, over its n', contrast = var_probe / var_fit
 * - 1 (var_fit <= 0, a noiseless fit: +inf if var_probe > 0, else 0);
 * fails when it is below SS_FINE_MIN_CONTRAST, or when the probe has
 * n' < 16 (contrast -1). */
void ss_register_fine(ss_fine_sums_fn fn, void *ctx, double sx0, double sy0,
                      const ss_pipeline_cfg_t *c, ss_shift_t *out);

/* Bilinear resampling biases the fine step: the sample at fraction t of a
 * pixel differs from the truth by t(1-t)/2·f2 + t(1-t)(1-2t)/6·f3 + ...
 * (fk the k-th derivative), and the odd term correlates with the
 * gradient, so the shift comes out wrong by -κ·φ(t), φ(t) =
 * t(1-t)(1-2t), κ = Σ f3·f1 / (6·Σ f1²) = Σ f2² / (6·Σ f1²) (by parts):
 * up to 0.011 px at σ = 1.4 px, a pattern in the fraction that the
 * jackknife cannot see. ss_interp_bias estimates κ per axis from the
 * high-passed reference with discrete derivatives (f2 = a(x-1) - 2a(x) +
 * a(x+1), f1 = (a(x+1) - a(x-1))/2, all three taps finite), over the
 * pixels with a tap above SS_BIAS_SIGNAL noise sigmas (stars, not sky),
 * less the noise's own share (6σ² and σ²/2 per pixel, σ =
 * ss_diff_noise); 0 when nothing is left; at most SS_BIAS_KAPPA_MAX (a
 * Gaussian of σ = 0.85 px: below, the Taylor estimate no longer holds —
 * undersampled stars, or sharp features that dominate the sums, as on the
 * deep field of tests/check_real.c, whose κ came out 0.9 and whose shifts
 * it made worse). Measured against rendered shifts: within 10 % of the
 * true κ for σ >= 1 px, 25 % high at 0.8 px.
 * ss_interp_unbias applies it: s + κ·φ(t), t = -s - floor(-s) (the
 * fraction ss_fine_sums interpolates at). */
#define SS_BIAS_SIGNAL 5.0
#define SS_BIAS_KAPPA_MAX 0.35
void ss_interp_bias(const float *ref, int w, int h, double *kx, double *ky);
double ss_interp_unbias(double s, double kappa);

/* ======================================================================
 * §3 weights, whitening, history (weights.c, whiten.c, history.c)
 * ==================================================================== */

#define SS_MAX_HISTORY 256

/* Shift-polynomial weights. fx, fy: the fractional displacements f_k of the
 * n history frames (k = 0 newest), degree 0..2, gamma >= 0, lambda in (0,1].
 * Solves min Σ λ^-k a_k² + (regularised) subject to Σ a_k m_j(f_k) = m_j(0):
 *   D = diag(λ^k), α = (VᵀDV + γE')⁻¹ e0, a = D V α,
 * with E' = diag(0, 1, ..., 1): the constant term is not regularised, so
 * Σ a_k = 1 holds exactly (to rounding) for any γ.
 * Monomial order: 1, fx, fy, fx², fx·fy, fy². Returns 0, or -1 if the
 * system is singular (ss_solve_dense) or an argument is out of range.
 * With γ > 0 the higher-moment constraints hold only to O(γ·α); Σ a_k = 1
 * and, with γ = 0, all of them hold exactly. */
int ss_weights_poly(const double *fx, const double *fy, int n, int degree, double gamma,
                    double lambda, double *a);

/* ss_weights_poly with the diagonal given: d[k] > 0 in place of λ^k (the
 * subset weights of ss_reweight_subset keep the λ factors of the frames'
 * own ages). ss_weights_poly is this with d[k] = λ^k (computed as the
 * running product, k ascending). Same returns. */
int ss_weights_poly_d(const double *fx, const double *fy, const double *d, int n, int degree,
                      double gamma, double *a);

/* ss_weights_poly_d that protects a slow mover's copies (ALGORITHM §3,
 * "object removal"): rho[k] in [0, 1] is the share of a mover's matched
 * filter peak that its copy in frame k would take (0 for frames stored
 * with object removal). Among the weights that satisfy the same
 * constraints, those of a = a0 − μq (a0 the ss_weights_poly_d weights, q
 * the part of Dρ the constraints leave free) maximise the mover's
 * z ∝ (1 − ρ·a) / sqrt(1 + Σ a_k²/d_k), at μ = (1 + Σa0²/d) / (1 − ρ·a0)
 * (docs/QUALITY.md derives it), clamped at no copy left (ρ·a = 0) and then
 * lowered until a star's residual is no more significant than with a0
 * (ss_star_significance). a0 is returned where ρ is nearly in the
 * constraints' span or ρ·a0 is nearly 1. Same returns. */
#define SS_PROTECT_MIN_Q 1e-9
#define SS_PROTECT_STEPS 64
int ss_weights_protect(const double *fx, const double *fy, const double *d, const double *rho,
                       int n, int degree, double gamma, double *a);

/* Σ|a_k| / sqrt(1 + Σ a_k²): the interpolation residual a star leaves
 * with weights a (each frame's error at most adds up with its weight's
 * sign) over the residual's noise. Negative weights that cancel a
 * mover's copies raise it: the warm-up protection may not. */
double ss_star_significance(const double *a, int n);

/* Re-weighting where some history pixels are invalid (poly mode,
 * ALGORITHM §3 "Prediction and residual"). At a pixel where the frames of
 * a set I have no valid y_k (the sentinel, or outside the frame), the
 * prediction uses the weights of the same constrained problem over the
 * valid frames S alone (a_k = 0 for k in I):
 *   G_S = G - Σ_{k∈I} d_k v(f_k) v(f_k)ᵀ,   G = VᵀDV + γE' over all n,
 *   G_S α = e0 (LDLᵀ, pipeline/reweight_core.h),   a_k = d_k v(f_k)ᵀα,
 * which is ss_weights_poly_d over S to rounding (same γ, same d_k). The
 * pixel is invalid when |S| < min_valid or G_S is singular (a pivot at or
 * below `tiny`). Everything a backend needs per frame is in this block
 * (plain data, copied to the GPU as is); G and tiny are formed once per
 * frame by ss_reweight_init on the host. */
#define SS_POLY_MAX_TERMS 6
typedef struct ss_reweight {
    int n;                      /* history frames (the whitening's n) */
    int degree;                 /* 0..2 */
    int m;                      /* terms: 1, 3, 6 */
    int min_valid;              /* fewest valid frames that still predict, 1..n */
    double gamma;               /* as ss_weights_poly */
    double tiny;                /* pivot floor: SS_SOLVE_REL_TOL·m·max_i G_ii */
    double G[SS_POLY_MAX_TERMS * SS_POLY_MAX_TERMS];   /* VᵀDV + γE', row-major m×m */
    double fx[SS_MAX_HISTORY], fy[SS_MAX_HISTORY];     /* f_k */
    double d[SS_MAX_HISTORY];                          /* λ^k */
} ss_reweight_t;

/* Fill rw for the n frames (arguments as ss_weights_poly; G accumulated
 * in the same order, so a subset that is the whole set reproduces its
 * system bit for bit). min_valid is clamped to [1, n]. Returns 0, or -1
 * when an argument is out of range. */
int ss_reweight_init(ss_reweight_t *rw, const double *fx, const double *fy, int n, int degree,
                     double gamma, double lambda, int min_valid);

/* The subset weights for the invalid frames flagged in invalid[0..n-1]
 * (nonzero = invalid): a[k] (n values, 0 for invalid k). Returns 0, or -1
 * when fewer than rw->min_valid frames are valid or G_S is singular (a is
 * then all 0). The arithmetic is that of reweight_core.h, which the CUDA
 * kernel runs too: downdates k ascending, LDLᵀ, a_k = d_k·Σ_i v_i α_i. */
int ss_reweight_subset(const ss_reweight_t *rw, const uint8_t *invalid, double *a);

/* Wiener weights: a = (R + γ·tr(R)/n·E)⁻¹ p. R is n×n row-major. Returns 0
 * or -1 if singular. */
int ss_weights_lsq(const double *R, const double *p, int n, double gamma, double *a);

/* Solve the n×n system M x = b in place (Gaussian elimination with partial
 * pivoting, double; x is left in b). Returns 0, or -1 if singular (a pivot
 * at or below 64·DBL_EPSILON·n·max|M|) or M holds a non-finite value.
 * Shared helper. */
int ss_solve_dense(double *M, double *b, int n);

/* The type a history frame is stored in: the raw type for u8/u16/i16 when
 * there is no calibration (no dark and no flat), else f32. */
ss_dtype_t ss_history_dtype(ss_dtype_t raw, int calibrated);

/* One history frame as whitening reads it: y_k(x) = F_k(x + (ix, iy)).
 * Invalid history pixels hold the sentinel: NaN for f32, the type's
 * maximum for integer types. */
typedef struct ss_hist_view {
    const void *pixels;
    ss_dtype_t dtype;
    int ix, iy;
} ss_hist_view_t;

/* Read a history pixel as float (NaN for the sentinel). */
static inline float ss_hist_value(const void *px, ss_dtype_t t, size_t i)
{
    switch (t) {
    case SS_DT_U8: { uint8_t v = ((const uint8_t *)px)[i]; return v == UINT8_MAX ? __builtin_nanf("") : (float)v; }
    case SS_DT_U16: { uint16_t v = ((const uint16_t *)px)[i]; return v == UINT16_MAX ? __builtin_nanf("") : (float)v; }
    case SS_DT_I16: { int16_t v = ((const int16_t *)px)[i]; return v == INT16_MAX ? __builtin_nanf("") : (float)v; }
    default: return ((const float *)px)[i];
    }
}

/* Prediction and residual:
 *   P(x) = Σ_k a_k·y_k(x) (double accumulation over k ascending, stored as
 *   float), r(x) = cur(x) - P(x) (in float), where every y_k(x) is valid
 *   (inside the frame and not invalid; for k with a_k != 0 or not).
 * P and r are NaN where cur is NaN. Where some y_k(x) is invalid:
 *  - rw == NULL (strict; the lsq mode): P and r are NaN;
 *  - rw != NULL (poly mode; rw->n == n): with I the invalid frames there,
 *    a' = ss_reweight_subset(rw, I) and P(x) = Σ_{k∉I} a'_k·y_k(x)
 *    (double, k ascending, as float); NaN when that returns -1 (fewer
 *    than rw->min_valid valid frames, or a singular subset).
 * With rw->min_valid = n this is the strict rule. The CPU caches subset
 * weights per invalid pattern (per thread); results never depend on it. */
void ss_whiten(const float *cur, const ss_hist_view_t *hv, const double *a, int n,
               int w, int h, const ss_reweight_t *rw, float *P, float *r);

/* lsq moments over the pixels where cur and every y_k are valid:
 * R[k·n+l] = Σ y_k·y_l, p[k] = Σ cur·y_k (double). */
void ss_lsq_moments(const float *cur, const ss_hist_view_t *hv, int n, int w, int h,
                    double *R, double *p);

/* Object removal and storage into a history slot (history.c): footprint =
 * pixels with labels > 0 dilated by `radius` (square structuring element,
 * radius = floor(mask_radius)); value = P where in the footprint, frame
 * elsewhere; stored into dst of type dt: NaN -> sentinel; integers rounded
 * half away from zero and clamped to [type min, type max - 1]. labels and P
 * may be NULL (no removal); a negative radius counts as 0. dt is one that
 * ss_history_dtype returns (u8, u16, i16 or f32). scratch: w·h bytes. */
void ss_history_store(const float *frame, const float *P, const int32_t *labels, int radius,
                      int w, int h, void *dst, ss_dtype_t dt, uint8_t *scratch);

/* A Gaussian source to take out of a history frame: its position in the
 * frame's own pixels (0-based), flux (ADU) and sigma (px). */
typedef struct ss_point_source {
    double x, y, flux, sigma;
} ss_point_source_t;
#define SS_SUB_RADIUS 4.0           /* their extent, in sigmas */

/* Take Gaussian sources out of a stored history frame (history.c): for
 * each source in list order (skipped unless x, y, flux are finite and
 * sigma > 0), every pixel within R = ceil(SS_SUB_RADIUS·sigma) px of
 * (round(x), round(y)) that is not the sentinel becomes (double)v -
 * flux·gx·gy, with gx = (erf((X + ½ - x)/(√2σ)) - erf((X - ½ - x)/(√2σ)))/2
 * (a pixel-integrated Gaussian; gy likewise), stored as ss_history_store
 * stores (float; integers rounded half away from zero and clamped). Used
 * on the frames stored before a slow mover was found (pipeline.c). */
void ss_history_subtract(void *hist, ss_dtype_t dt, int w, int h, const ss_point_source_t *src,
                         int n);

/* Sharp-outlier cleaning of a frame before storage in the history
 * (clean.c): d = frame - med (med = ss_median3x3(frame)); σ =
 * ss_noise_mad(d, SS_CLEAN_STRIDE); a finite pixel v with finite med is
 * replaced by med when v - med > k·σ and v - med >= ratio·(v - lo), lo being
 * the minimum of its finite 8 neighbours (med when none): brighter than its
 * surroundings in a way no PSF wider than ~0.8 px can be (a Gaussian of
 * σ = 1.4 px gives a ratio of 0.56, a cosmic-ray hit ~1). Comparisons in
 * float, as written. Returns the number of pixels replaced. scratch: 2·w·h
 * floats. out may not alias frame. */
#define SS_CLEAN_STRIDE 4
int ss_clean_sharp(const float *frame, const float *med, int w, int h, double k, double ratio,
                   float *out, float *scratch);

/* ======================================================================
 * §4 guided filter (guided.c)
 * ==================================================================== */

/* Valid-aware box mean over the (2r+1)² window clipped to the frame:
 * out = Σ finite in / count(finite), NaN if count is 0. Running sums in
 * double, O(1) per pixel whatever r. scratch: 2·w·h doubles. */
void ss_box_mean(const float *in, int w, int h, int r, float *out, double *scratch);

/* The guided filter's source mask (guided.mask, ALGORITHM.md §4; the
 * derivation is in docs/QUALITY.md, "the guided filter's source mask").
 * A faint mover inside a window is part of the window's moments, so B =
 * mean_p − A·mean_I takes a share of it and r' loses it; the mask leaves
 * out of the moments (never out of r') the pixels of a source that the
 * guide does not explain:
 *   resp(x) = |Σ (k⊗k)·p − Σ_box p / N|(x) ≥ t: the matched filter of
 *     the unfiltered residual (PSF taps k) less the mean over the
 *     window's box, (2ρ'+1)² = N pixels, ρ' = min(ρ, SS_GMASK_MAX_RB):
 *     a level or a gradient, which B is there to fit, gives no response;
 *     invalid and out-of-frame pixels as 0, no renormalisation; the
 *     value formed as s − sb·inv_n in float; t = τ·σ·‖k⊗k − 1/N‖₂ (a
 *     z-threshold τ in the units of its own noise, as §6's SNR map);
 *   busy(x) = |Σ (k⊗k)·L|(x) ≥ tl, L = ss_laplacian5(I) (NaN and the
 *     outer ring as 0): the guide's structure at the same scale, tl =
 *     τ·σ_P·‖g‖₂, g = the Laplacian stencil ∗ (k⊗k), σ_P = σ·√(‖a‖² /
 *     (1+‖a‖²)) the guide's noise (the same z-threshold in its units);
 *   the disk D(x) = offsets dx² + dy² ≤ d2, d2 = ⌊2·ln 20·(σ_psf² + 1/12)⌋
 *     (it holds 95 % of a pixel-integrated Gaussian's flux);
 *   seed(x) = resp(x) and no busy pixel in D(x);
 *   masked(x) = p(x) finite, a seed in D(x) and no busy pixel in D(x)
 *     (over the disk, not at x alone: a star's Laplacian crosses zero
 *     on a ring).
 * Sums in float in tap order (rows, then columns), no contraction: the
 * CUDA kernels do the same operations in the same order. */
#define SS_KERNEL_MAX_RADIUS 24     /* §6's PSF taps (ss_psf_kernel) at most */
#define SS_GMASK_MAX_RB 64          /* the compensating box's radius at most */
typedef struct ss_gmask {
    int R;                                  /* taps radius */
    float k[2 * SS_KERNEL_MAX_RADIUS + 1];  /* ss_psf_kernel */
    int rb;                                 /* the box's radius ρ' */
    float inv_n;                            /* 1/(2ρ'+1)² */
    float t;                                /* response threshold */
    float tl;                               /* busy guide: |Σ (k⊗k)·∇²I| ≥ tl */
    int d2;                                 /* dilation: dx² + dy² ≤ d2 */
    double tau, sigma, g;                   /* tl = ss_pc_gmask_tl(tau, sigma, g, a2)
                                             * (plan_core.h), g = ‖∇²(k⊗k)‖₂ */
} ss_gmask_t;

/* Fill m for PSF sigma psf_sigma, z-threshold tau, residual noise sigma,
 * the squared norm a2 = Σ a_k² of the prediction's weights and the
 * guided filter's radius. Returns 0, or -1 (m unusable: no mask) where
 * sigma, tau or psf_sigma is not positive and finite or radius < 1. */
int ss_gmask_init(ss_gmask_t *m, double psf_sigma, double tau, double sigma, double a2,
                  int radius);

/* pm = p with the masked pixels NaN (m's contract above). t0..t4: w·h
 * floats of scratch each (row sums, busy, seeds). pm and t0..t4 may not
 * alias I, p or each other. */
void ss_gmask_apply(const float *I, const float *p, int w, int h, const ss_gmask_t *m,
                    float *pm, float *t0, float *t1, float *t2, float *t3, float *t4);

/* Guided filter cleanup with guide I (the prediction) and input p (the
 * residual), ALGORITHM §4. A pixel takes part when both I and p are
 * finite. Means are valid-aware box means over those pixels; I is taken
 * relative to c = mean of I over those pixels (double) for conditioning,
 * I' = I - (float)c in float:
 *   mean_I, mean_p, corr_Ip, corr_II (box means of I', p, I'p, I'I', all
 *   in double, products of the float I' and p formed in double),
 *   var = corr_II - mean_I², cov = corr_Ip - mean_I·mean_p (double),
 *   A = (float)(cov / (var + eps)), B = (float)(mean_p - A·mean_I), both
 *   kept only where the pixel takes part and both are finite (else NaN);
 *   box(A), box(B): valid-aware box means (float) of those;
 *   out = (float)(p - (box(A)·I' + box(B))) in double (NaN where I or p
 *   is NaN). Double up to A and B because var is a small difference of
 *   large numbers near stars: float means there lose most of its digits.
 * eps in ADU² (the caller scales by the noise variance).
 * scratch: 8·w·h floats + 2·w·h doubles.
 * mask (NULL: none): the window moments (A, B) are those of pm =
 * ss_gmask_apply(I, p): a masked pixel takes no part in them (nor has its
 * own A, B), and out is formed from p at every pixel as without it.
 */
void ss_guided_filter(const float *I, const float *p, int w, int h, int r, float eps,
                      const ss_gmask_t *mask, float *out, float *scratch, double *dscratch);

/* 5-point Laplacian: out = l + r + u + d - 4·c summed in float in that
 * order; NaN on the frame's outer row/column and where any tap is NaN. */
void ss_laplacian5(const float *in, int w, int h, float *out);

/* The two-channel guided filter (the default, guided.laplacian = true):
 * guide channels I' = I - c and L = ss_laplacian5(I), fitting
 *   p ≈ A1·I' + A2·L + B   in every window.
 * Why: a change of seeing between the history and the current frame
 * leaves a residual ∝ ∇²I (the heat equation: ∂I/∂σ² = ½∇²I), which no
 * A·I + B can model; a transparency change leaves ∝ I, a sky change B.
 * A pixel takes part when I, L and p are finite; c is the mean of I over
 * those. Per window (double): m1, m2, mp the means of I', L, p;
 * S11 = <I'I'> - m1² + eps, S12 = <I'L> - m1·m2, S22 = <LL> - m2² + eps,
 * C1p = <I'p> - m1·mp, C2p = <Lp> - m2·mp, det = S11·S22 - S12²,
 * A1 = (C1p·S22 - C2p·S12)/det, A2 = (C2p·S11 - C1p·S12)/det,
 * B = mp - A1·m1 - A2·m2 (each stored as float, B from the float A1, A2);
 * A1, A2, B NaN where the pixel does not take part. Then box means of A1,
 * A2, B (valid-aware) and out = p - (box(A1)·I' + box(A2)·L + box(B)),
 * computed in double, NaN where I, L or p is NaN.
 * biharmonic: first p' = p − c2·Q (ss_seeing_term, ss_seeing_apply), and
 * the local fit is of p'.
 * mask: as in ss_guided_filter (the moments of the fit of p or p').
 * scratch: 8·w·h floats + 2·w·h doubles. */
void ss_guided_filter2(const float *I, const float *p, int w, int h, int r, float eps,
                       int biharmonic, const ss_gmask_t *mask, float *out, float *scratch,
                       double *dscratch);

/* The second-order seeing term (guided.biharmonic): Q = ss_laplacian5(L)
 * into Q (w·h floats), and c2 = the coefficient of Q in the global
 * least-squares fit p ≈ a + b·(I − c) + d·L + c2·Q over the pixels where
 * I, L, Q and p are finite (seeing_core.h: the sums, the 4×4 solve, the
 * rounding of c2 to 12 significant bits). Why: blurring by a Gaussian of
 * variance δ adds (δ/2)∇²I + (δ²/8)∇⁴I + …; the local fit takes out the
 * first term, and at 10 % seeing wobble the second is still 0.04 of a
 * star's peak (hundreds of ADU on bright stars, the sky scenario's false
 * alarms). The seeing changes over the whole frame at once, so one
 * coefficient per frame. Row sums in dscratch (14·h doubles), added in
 * row order. Returns 0 (no term) when 14·h > 2·w·h. */
float ss_seeing_term(const float *I, const float *L, const float *p, int w, int h, float c,
                     float *Q, double *dscratch);

/* ======================================================================
 * §5 noise (noise.c)
 * ==================================================================== */

/* σ = 1.4826 · MAD of the finite x at rows and columns that are multiples
 * of stride (stride < 1 counts as 1): m = lower median (rank
 * floor((n-1)/2) of the sorted samples), MAD = lower median of
 * fabsf(x - m) computed in float, σ = (float)(1.4826·(double)MAD). NaN if
 * no sample. Exact order statistics (selection, not a sort). scratch: w·h
 * floats. */
float ss_noise_mad(const float *x, int w, int h, int stride, float *scratch);

/* The residual's noise σ: the standard deviation of the samples of
 * ss_noise_mad (same grid) within m ± 3s, where m is their lower median
 * and s = 1.4826·MAD, divided by 0.986582 (a normal's std cut at ±3σ):
 * the SExtractor background rule with one clipping step. Unlike s alone it
 * is right for noise that is not Gaussian — the uniform integer noise of
 * low-level cameras, where 1.4826·MAD is 1.29 times the std — and it
 * equals s for Gaussian noise. Each sample's (x − m)/s becomes an integer
 * in units of 2^-16 (noise_core.h), so the sums, and σ, do not depend on
 * their order. s when s is 0, NaN or fewer than 2 samples are in the
 * window; NaN if no sample. */
float ss_noise_clipped(const float *x, int w, int h, int stride);

/* ======================================================================
 * §6 matched filter (matched.c)
 * ==================================================================== */


/* 1-D Gaussian kernel of psf_sigma: radius R = min(ceil(3σ), 24), taps
 * k[0..2R] = exp(-(i-R)²/(2σ²)) normalised to sum 1 (in double, stored as
 * float). Returns R. The 2-D kernel is k⊗k (Σ = 1, ‖k2‖₂ = Σk²).
 * psf_sigma <= 0 or not finite: R = 0, k[0] = 1 (no smoothing). */
int ss_psf_kernel(double psf_sigma, float *k);

/* The same kernel centred at sub-pixel offset `phase` (px, |phase| <= ½):
 * taps exp(-(i-R-phase)²/(2σ²)) over the same i = 0..2R, normalised to
 * sum 1; phase 0 is ss_psf_kernel to the bit. Returns R. */
int ss_psf_kernel_phase(double psf_sigma, double phase, float *k);

/* The sub-pixel phase bank of the matched filter (docs/QUALITY.md, the
 * static scenario): n phases per axis, n² kernels k_px ⊗ k_py. */
#define SS_MF_MAX_PHASES 3
/* psf_sigma below which phases = 0 (auto) takes the 2×2 bank */
#define SS_MF_AUTO_SIGMA 1.0

/* Phase p (0..n-1) of an n-phase axis: (2p + 1 - n)/(2n) px — 0; ±¼;
 * -⅓, 0, ⅓: a grid of spacing 1/n, symmetric about the pixel centre, so
 * a source is at most 1/(2n) px from a phase in each axis. */
double ss_mf_phase(int phases, int p);

/* Phases per axis that ss_matched_filter uses for a configured value:
 * 1..SS_MF_MAX_PHASES as given (more: SS_MF_MAX_PHASES); <= 0 (auto): 2
 * when psf_sigma < SS_MF_AUTO_SIGMA, else 1; 1 whenever there is no PSF
 * (psf_sigma <= 0 or not finite: a delta has no phase). */
int ss_mf_phases_used(double psf_sigma, int phases);

/* Valid-aware separable matched filter and SNR map, for each kernel phase
 * (px, py) of n = ss_mf_phases_used(psf_sigma, phases) per axis (taps k =
 * ss_psf_kernel_phase of ss_mf_phase(n, px) along rows, of py along
 * columns, k2[i] = k[i]·k[i] in float):
 *   h1 = rows: Σ_i k[i]·v·in(x+i-R, y), hv1 = Σ_i k[i]·v, hv2 = Σ_i k2[i]·v
 *   (v = 1 if finite);
 *   num, den, den2 = the same along columns on h1, hv1 (taps k) and hv2
 *   (taps k2) (float, taps ascending);
 *   z_p = num / (sigma · sqrtf(den2)) (float) where the centre is finite
 *   and den >= 0.5; NaN elsewhere. Out-of-frame taps count as invalid.
 * z = the z_p of largest |z_p| over the finite ones, the phases taken in
 * the order px outer, py inner and the first of equal |z_p| kept (signed,
 * so that negative sources see the same bank); NaN when none is finite.
 * n = 1 is the single kernel of phase 0.
 * The noise of num is sigma·sqrt(den2) wherever taps are missing (the
 * frame's edge, masked pixels, saturated stars): each z_p has unit
 * variance everywhere. Dividing by the kept kernel weight instead
 * (num/den) made the noise √2 larger along an edge and doubled the false
 * alarms there; in the interior, den2 = (Σk²)² = ‖k⊗k‖² and z_p is the SNR
 * of ALGORITHM §6 at that phase. The largest of n² correlated unit
 * normals has a heavier upper tail than one: the false-alarm rate of a
 * threshold on z rises (docs/QUALITY.md measures by how much).
 * scratch: 3·w·h floats. */
void ss_matched_filter(const float *in, int w, int h, double psf_sigma, int phases, float sigma,
                       float *z, float *scratch);

/* ======================================================================
 * §6b model-error variance (modelvar.c)
 * ==================================================================== */

/* Near a bright star the residual is not sky noise alone: what the
 * prediction gets wrong there scales with the star. Measured on the sky
 * scenario (docs/QUALITY.md, 2026-11-24, "model error"): after the guided
 * filter the residual's matched-filter z around bright stars is a ring
 * peaking 2–4 px from the centre, about 0 at the core, and it follows the
 * star's scale derivative — a seeing change dilates the PSF, r·∂t/∂r —
 * at a constant share (0.041–0.048 of it at 1–4 px, the same frames),
 * while the star's own profile t, ∇²P and ∇⁴P do not (their ratio to the
 * residual varies 5–30-fold over that range). So the SNR map is divided by
 * sqrt(1 + β·D²), D the scale derivative of the star's SNR map in a form
 * that needs no star centre: for a Gaussian t of width s, r·|∂t/∂r| =
 * s²·|∇t|²/t, so D = |∇t|²/max(t, 1) (the s² goes into β). β is fitted
 * per frame from the pixels where D is large (README, "Model error").
 *
 * The star map is the prediction less its local background, matched-
 * filtered. The background is a box mean (radius r = SS_MV_RADIUS_PSF·
 * psf_sigma rounded up: it holds a star and its wings) of the prediction
 * with its stars cut at a first box mean. A plain box mean sits under a
 * bright star F/(2r+1)² too high, which turned its wings negative and put
 * a ring of large D 7 px around it (measured on a synthetic star; the
 * clipped one does not). With A = ss_hipass(P, r) = P − box(P):
 *   B = ss_mv_clip(P, A) = P − max(A, 0) = min(P, box(P));
 *   S = ss_mv_restore(ss_hipass(B, r), A) = (B − box(B)) + max(A, 0)
 *     = P − box(B) (float, elementwise as written);
 *   t = ss_matched_filter(S, psf_sigma, 1 phase, sigma); D =
 *   ss_mv_template(t).
 * scratch: 5·w·h floats. */
#define SS_MV_RADIUS_PSF 8.0
int ss_mv_radius(double psf_sigma);     /* ceil(SS_MV_RADIUS_PSF·psf_sigma), at least 2 */
void ss_mv_clip(const float *P, const float *A, float *out, size_t n);     /* P − fmaxf(A, 0) */
void ss_mv_restore(const float *S, const float *A, float *out, size_t n);  /* S + fmaxf(A, 0) */
void ss_star_template(const float *P, int w, int h, int r, double psf_sigma, float sigma,
                      float *D, float *scratch);

/* D = (gx·gx + gy·gy) / fmaxf(t, 1.0f) (float, in that order), gx =
 * 0.5f·(t(x+1, y) − t(x−1, y)), gy = 0.5f·(t(x, y+1) − t(x, y−1)); NaN on
 * the frame's outer row and column and where any of the five is NaN. */
void ss_mv_template(const float *t, int w, int h, float *D);

/* The median of χ²₁: for z ~ N(0, 1 + β·t²) the median of z²/SS_MV_CHI2_MED
 * is 1 + β·t². */
#define SS_MV_CHI2_MED 0.45493642f
/* Star pixels fewer than this give β = 0 (no fit). */
#define SS_MV_MIN_SAMPLES 64

/* One pixel's estimate of β: q = (z·z / SS_MV_CHI2_MED − 1) / (t·t), in
 * float as written (the CUDA kernel computes the same expression), t the
 * template D. Its median over pixels is β for Gaussian z whatever each
 * pixel's t. */
static inline float ss_mv_q(float z, float t)
{
    return (z * z / SS_MV_CHI2_MED - 1.0f) / (t * t);
}

/* The samples of the fit: q = ss_mv_q(z, t) (t: the template D) at the
 * pixels on rows and columns that are multiples of stride (< 1: 1) where z
 * and t are finite and t >= tmin, written to q in raster order. Returns
 * their number. */
int ss_mv_gather(const float *z, const float *t, int w, int h, int stride, float tmin, float *q);

/* β = max(0, the lower median of q[0..n-1]) (rank floor((n−1)/2), an exact
 * order statistic: the same for any order of q); 0 when n <
 * SS_MV_MIN_SAMPLES. q is reordered. A median, because a mover or a cosmic
 * hit on a star must not raise it: up to half the samples may be such. */
float ss_mv_beta(float *q, int n);

/* z = z / sqrtf(1.0f + beta·t·t) (float, as written) where z and t are
 * finite; z unchanged elsewhere and everywhere when beta <= 0. When raw
 * is not NULL, raw gets z as it was (every pixel, NaN included, whatever
 * beta): the map that detection grows components on. */
void ss_mv_apply(float *z, const float *t, int w, int h, float beta, float *raw);

/* ======================================================================
 * §7 labelling and measurement (label.c, measure.c)
 * ==================================================================== */

/* Hysteresis + 8-connected labelling. Positive mask: z >= lo; a component
 * is kept when it holds a seed z >= hi. When negative: the same on -z, as
 * separate components. labels: 0 background, +i for positive component i
 * (1-based), -i for negative component i. Numbering is by raster order of
 * each component's first pixel (smallest y·w + x), positives and negatives
 * counted separately. scratch: w·h int32. */
void ss_label(const float *z, int w, int h, float hi, float lo, int negative,
              int32_t *labels, int32_t *scratch, int *n_pos, int *n_neg);

/* ss_label with the seeds from a second map: a pixel belongs to the
 * positive (negative) mask when z >= lo (−z >= lo), and is a seed when, in
 * addition, zs >= hi (−zs >= hi). ss_label is zs = z. The model-error term
 * (§6b) passes z before its division as z and the divided map as zs: the
 * term decides whether a component is there, not how far it reaches
 * (README, "Model error"). zs is read where z is in a mask only. */
void ss_label_seeded(const float *z, const float *zs, int w, int h, float hi, float lo,
                     int negative, int32_t *labels, int32_t *scratch, int *n_pos, int *n_neg);

/* The most components (both signs together) a w×h frame can hold: the
 * pixels of a 2×2 block are all 8-adjacent, so each block (the frame's
 * last row and column may be cut) holds pixels of at most one component
 * per sign. Alternating +/- columns with empty ones between reach it on
 * narrow frames (a 1-px column of alternating signs: h components). */
static inline int ss_comp_bound(int w, int h)
{
    return 2 * ((w + 1) / 2) * ((h + 1) / 2);
}

/* Per-component accumulator: everything measure needs, each a sum, a min
 * or a max over the component's pixels (s = the component's sign, x, y the
 * pixel's coordinates, wgt = max(s·r'(x), 0)):
 *   area = count; sw = Σ wgt; swx = Σ wgt·x; swy = Σ wgt·y;
 *   swxx = Σ wgt·x²; swxy = Σ wgt·x·y; swyy = Σ wgt·y²;
 *   sx = Σ x; sy = Σ y (unweighted, the fallback when sw == 0);
 *   flux = Σ s·r'; rpos = Σ max(s·r, 0); rmax = max s·r (r unfiltered;
 *   -0 counts as +0) with ridx its pixel index (ties: smallest index; -1
 *   when no finite r);
 *   zmax = max s·z with zidx its pixel index y·w+x (ties: smallest index);
 *   bbox = min/max x, y; invalid_nb = 1 if any 8-neighbour of a pixel is
 *   NaN in z; edge = 1 if a pixel lies on the frame's outer row/column;
 *   kbox = min/max x, y over the component's seed pixels (s·z >= (float)
 *   c->thresh; hysteresis guarantees at least one): the streak end points
 *   come from it, because a noise blob that hangs on at τ_low moves the
 *   full bbox by pixels, and the moments' along-axis centroid is too noisy
 *   on long streaks (measure.c).
 * label is the component's label in the label plane (±(index+1)), set
 * when the accumulator is initialised. rwgt = max(s·r'(ridx), 0) (0 when
 * ridx < 0 or r' is not finite there) is read once per component after
 * the pass: the weight the brightest unfiltered pixel has in the moments,
 * so that the shape test can leave that pixel out (ss_measure_finish). */
typedef struct ss_comp_acc {
    int sign;
    int label;
    int area;
    double sw, swx, swy, swxx, swxy, swyy, sx, sy;
    double flux, rpos;
    float rmax, zmax;
    int ridx, zidx;
    double rwgt;
    float zn[4];                    /* s·z at the peak's neighbours x-1, x+1, y-1, y+1
                                     * (NaN outside the frame), after the pass */
    int x0, y0, x1, y1;
    int kx0, ky0, kx1, ky1;
    int invalid_nb, edge;
} ss_comp_acc_t;

/* Turn one accumulator into a detection (shared by both backends): centroid,
 * flux, flux_err = σ·sqrt(area), ellipse a, b, θ from the central second
 * moments, kind, streak end points, flags. The kind is decided on the
 * SHAPE first, from the moments with the brightest unfiltered pixel's
 * weight (rwgt at ridx) taken out — a', b', so that one sharp pixel (a
 * cosmic-ray hit on a streak) neither hides nor fakes an elongation:
 *   elongated: a'/b' >= streak_ratio (b' = 0: infinitely) and
 *              a' >= streak_min_len·psf_sigma;
 *   streak:    elongated and b' >= streak_min_b·psf_sigma (as wide as a
 *              PSF across: a narrower elongated component is a sharp
 *              cosmic-ray track, kind cosmic);
 *   cosmic:    elongated and narrower, or not elongated and rmax/rpos >=
 *              cosmic_fraction (1-3 px hits);
 *   point:     otherwise.
 * The reported a, b, θ are those of all the pixels. w is the frame width
 * (to decode zidx and ridx). */
void ss_measure_finish(const ss_comp_acc_t *acc, int label, float sigma, int w,
                       const ss_pipeline_cfg_t *c, ss_detection_t *d);

/* ---- ranking (ALGORITHM §7: the most significant first) ----------------
 * The significance of a component is its peak SNR zmax = max s·z (so
 * negatives compete by |z|); equal peaks go to the smaller peak pixel
 * index zidx (raster order), so that the order is total and the same on
 * every backend. As one integer, larger = more significant:
 *   key = fkey(zmax) << 32 | ~(uint32)zidx,
 * fkey the order-preserving map of a float's bits to uint32 (negative:
 * all bits flipped; else the sign bit set) — exactly the CUDA
 * accumulator's packed zkey. Keys of distinct components differ (their
 * peak pixels do). */
uint64_t ss_sig_key(float zmax, int zidx);

typedef struct ss_rank {
    uint64_t key;
    int32_t idx;                /* the caller's index (a component or an accumulator) */
    int32_t pad_;
} ss_rank_t;

/* Put the min(n, keep) largest keys of r[0..n) first, in descending key
 * order (the rest follow, unordered). Exact selection: the keep-th
 * largest key by an 8-bit radix selection (8 counting passes, O(n)), a
 * partition around it, then a sort of the kept (O(keep·log keep)); no
 * allocation. Returns min(n, keep) (0 when keep <= 0). */
int ss_rank_top(ss_rank_t *r, int n, int keep);

/* Detections a frame may report: min(out->capacity, c->max_detections)
 * (max_detections <= 0: the capacity alone). */
int ss_detect_keep(const ss_pipeline_cfg_t *c, const ss_detlist_t *out);

/* Accumulate the labelled components of a frame (one raster pass):
 * components are numbered positives 1..np as 0..np-1, then negatives
 * 1..nn as np..np+nn-1; labels beyond np / nn are ignored. slot == NULL:
 * component k goes to acc[k] (room for np + nn); else slot[k] is its
 * accumulator (0..nslot-1, each used once) or -1 (not measured). Every
 * measured accumulator is initialised here (sign, label). rc = cleaned
 * residual r', r = unfiltered residual, z = SNR. */
void ss_measure_acc(const int32_t *labels, int np, int nn, const int32_t *slot, int nslot,
                    const float *rc, const float *r, const float *z, int w, int h,
                    const ss_pipeline_cfg_t *c, ss_comp_acc_t *acc);

/* Rank and finish (ALGORITHM §7): of acc[0..n) the components with area
 * >= max(c->min_area, 1) are eligible; the ss_detect_keep(c, out) most
 * significant of them (ss_sig_key) are finished into out (cleared first)
 * in DESCENDING significance. out->truncated = unmeasured + the eligible
 * ones not kept: exactly the eligible components found but not reported
 * (unmeasured: eligible components the caller could not accumulate;
 * components below min_area are rejects, not truncation). rank: scratch
 * for n entries. */
void ss_measure_rank(const ss_comp_acc_t *acc, int n, int unmeasured, float sigma, int w,
                     const ss_pipeline_cfg_t *c, ss_rank_t *rank, ss_detlist_t *out);

/* ss_measure_acc over every component, then ss_measure_rank. acc and
 * rank: room for np + nn entries (at most ss_comp_bound(w, h)). */
void ss_measure(const int32_t *labels, int np, int nn, const float *rc, const float *r,
                const float *z, int w, int h, float sigma, const ss_pipeline_cfg_t *c,
                ss_comp_acc_t *acc, ss_rank_t *rank, ss_detlist_t *out);

/* When a frame has more components than a backend has accumulators (cap):
 * which ones to measure, exactly as if all were measured and ranked. One
 * pass over labels and z gives every component's area and significance
 * key; of those with area >= max(min_area, 1) the cap most significant
 * get slot numbers 0.. in component order, all others slot -1. Returns
 * the number of eligible components (the measured ones are min(it,
 * cap)). Scratch, np + nn entries each: rank, area. */
int ss_comp_preselect(const int32_t *labels, int np, int nn, const float *z, int w, int h,
                      int min_area, int cap, ss_rank_t *rank, int32_t *area, int32_t *slot);

/* One streak, one detection (streak_merge.c, host code after ss_measure /
 * the CUDA equivalent): two streak detections of the same sign merge when
 * their axes differ by at most SS_STREAK_MERGE_ANGLE, both ends of the
 * shorter lie within max_off px of the longer one's line, and the gap
 * between them along that line is at most max_gap px. The merged detection
 * keeps the earlier list slot: ends = the outermost end points, centroid =
 * area-weighted, flux and area summed, flux_err in quadrature, peak = the
 * higher, bbox = union, a = max(a, L/√12), θ along the new ends. Repeats
 * until nothing merges; returns the number of merges. max_gap <= 0: off.
 * Cost: one pass over the list plus a pairwise scan of its streaks only. */
#define SS_STREAK_MERGE_ANGLE (10.0 * 3.14159265358979323846 / 180.0)
#define SS_STREAK_MERGE_MAX 1024    /* streaks per frame considered for merging */
int ss_merge_streaks(ss_detlist_t *l, double max_gap, double max_off);

#ifdef __cplusplus
}
#endif
#endif
