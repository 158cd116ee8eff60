/*
 * synth.h — synthetic star fields: the built-in frame source (daemon feed
 * type "synth"), the test fixture of every stage, and the bench input.
 *
 * Every random draw comes from the generator's own seeded PRNG, so a
 * (config, seed) pair always produces the same sequence, bit for bit.
 *
 * Shift convention (ALGORITHM.md): frame t sees the sky of reference pixel
 * x + s_t at its pixel x; a star at p in sky (reference) coordinates is
 * drawn at p - s_t. Truth carries s_t.
 */
#ifndef SS_SYNTH_H
#define SS_SYNTH_H

#include "pipeline/frame.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SS_SYNTH_MAX_OBJ 256        /* truth objects per frame */
#define SS_SYNTH_MAX_SNR_LIST 32    /* entries of mover_snr_list (and mover_speed_list) */
#define SS_SYNTH_MAX_SPEED 1e6      /* px per frame: the largest mover_speed_list entry */
#define SS_SYNTH_STRAY_WOBBLE 0.2   /* stray-light amplitude: fractional rms per frame */
#define SS_SYNTH_STRAY_TURN 0.01    /* stray-light direction drift, rad per frame */

typedef enum ss_synth_psf { SS_SYNTH_GAUSS = 0, SS_SYNTH_MOFFAT } ss_synth_psf_t;

/* Pixel noise: gauss = Poisson (gain) + Gaussian read noise; uniform =
 * integer noise U{0..uniform_max} added to each pixel, nothing else (the
 * INDI CCD simulator's noise; gain and read_noise are then ignored). */
typedef enum ss_synth_noise { SS_SYNTH_NOISE_GAUSS = 0, SS_SYNTH_NOISE_UNIFORM } ss_synth_noise_t;

typedef struct ss_synth_cfg {
    int width, height;
    ss_dtype_t dtype;               /* u8/u16/i16/i32/f32 output */
    uint64_t seed;
    double frame_interval;          /* s between frames (timestamps) */
    double start_mjd;               /* time of frame 0 (MJD); 0 = now */
    double exposure;                /* s, written to the metadata; a mover moves
                                     * speed·exposure/frame_interval px during it (trail) */

    /* stars: N with dN/dF ∝ F^-alpha between flux_min and flux_max (ADU) */
    int n_stars;
    double flux_min, flux_max, star_alpha;
    ss_synth_psf_t psf;
    double psf_sigma;               /* px (Moffat: the same FWHM) */
    double moffat_beta;
    double seeing_wobble;           /* fractional sigma change per frame (e.g. 0.05) */

    /* sky and noise */
    double sky;                     /* ADU at the centre */
    double sky_grad_x, sky_grad_y;  /* ADU per px */
    double gain;                    /* e-/ADU for Poisson noise; 0 = no Poisson noise */
    double read_noise;              /* ADU rms */
    double bias;                    /* ADU offset added to every pixel */
    double saturation;              /* clip at this level (0 = type max) */
    /* Every knob below defaults to 0 = off, and leaves the sequence bit for
     * bit as it was when off (its random draws come from streams of its own). */
    double sky_var;                 /* fractional rms of the sky per frame: the sky (gradient
                                     * included) times 1 + N(0, sky_var), independent per
                                     * frame, clamped at 0; [0, 1] */
    double sky_trend;               /* fractional sky change per frame (twilight): the sky
                                     * times (1 + sky_trend)^t; [-0.5, 1] */
    double stray;                   /* stray light, ADU at the glow's centre (0 = none); fixed
                                     * in DETECTOR coordinates (it does not move with the
                                     * pointing), not dimmed by transparency:
                                     *   G_t(x, y) = A_t · exp(-|p - q_t|² / (2 L²)),
                                     *   A_t = stray · max(0, 1 + SS_SYNTH_STRAY_WOBBLE·N(0,1)),
                                     *   q_t = c + R·(cos φ_t, sin φ_t), φ_t = φ_0 +
                                     *         SS_SYNTH_STRAY_TURN·t,
                                     * p = (x, y), c = the frame centre, R = L = max(W, H)/2
                                     * (the glow's centre lies on the circle through the
                                     * frame's edge midpoints, so the frame sees a broad
                                     * gradient from ~A_t on that side to ~0.14·A_t on the
                                     * other), φ_0 random per seed; [0, 1e9] */
    int star_snap;                  /* 1: star sky positions rounded to whole pixels (with zero
                                     * jitter and drift the stars sit centred on pixels, as
                                     * the INDI simulator draws them) */
    ss_synth_noise_t noise_model;   /* gauss (default) or uniform */
    int uniform_max;                /* uniform noise: k of U{0..k}, integer ADU; [0, 65535] */
    int overscan;                   /* overscan columns appended at the right of the image:
                                     * bias + read noise (uniform noise with that model),
                                     * no sky, no sources; [0, 4096] */
    int height_jitter;              /* k: each frame keeps height - U{0..k} rows (its last
                                     * rows, the bottom of the sky, are cut; the remaining
                                     * rows keep their sky coordinates); [0, height/2] */
    int jump_at;                    /* frame at which the pointing jumps by jump_px (random
                                     * direction), whatever jump_prob; 0 = none */

    /* telescope motion */
    double jitter;                  /* px rms, per axis, random per frame */
    double drift_x, drift_y;        /* px per frame */
    double jump_prob;               /* probability per frame of a large jump */
    double jump_px;                 /* size of a jump */
    double transparency;            /* fractional rms of transparency changes */

    /* detector defects */
    int n_hot;                      /* hot pixels (fixed in detector coordinates) */
    double hot_level;               /* ADU above sky */
    double cosmic_rate;             /* cosmic-ray hits per Mpix per frame */

    /* transients */
    int n_movers;                   /* moving point objects, alive in every frame */
    double mover_snr;               /* peak matched-filter SNR at the nominal seeing:
                                     * F = snr·σ_pix·sqrt(π)·(2k² + 1/12)/k, k = psf_sigma
                                     * (the truth's snr: the frame's peak, with its seeing) */
    int n_mover_snr;                /* > 0: mover i gets mover_snr_list[i % n_mover_snr]
                                     * instead of mover_snr; 0 = off */
    double mover_snr_list[SS_SYNTH_MAX_SNR_LIST];
    double mover_speed;             /* px per frame, random direction */
    int n_mover_speed;              /* > 0: mover i moves at mover_speed_list[k % n_mover_speed]
                                     * instead of mover_speed, k = i + i / n_mover_snr with an
                                     * SNR list (each round of the SNR list starts one speed
                                     * further on, so speeds and SNRs mix), else k = i; a
                                     * random direction as always; 0 = off */
    double mover_speed_list[SS_SYNTH_MAX_SNR_LIST];   /* px per frame, [0, SS_SYNTH_MAX_SPEED] */
    int n_crossing;                 /* pairs of movers whose paths cross at frame crossing_at,
                                     * appended after the n_movers (ids n_movers + 2k and
                                     * n_movers + 2k + 1 for pair k); each gets the speed and
                                     * SNR of its index as above; pair k's directions differ
                                     * by π·(k + 0.5)/n_crossing; they meet at a sky point
                                     * drawn in the central half of frame 0's free area;
                                     * 0 = none; n_movers + 2·n_crossing <= SS_SYNTH_MAX_OBJ */
    int crossing_at;                /* the frame of the crossings; >= 0 */
    int wrap_scatter;               /* 1: a mover that wraps re-appears at a random place (drawn
                                     * per mover and wrap cell) instead of the periodic one:
                                     * a mover that wraps every k frames otherwise sits, every
                                     * k frames, on a line of its own (aliasing: a slower
                                     * mover that a tracker may follow); a mover keeps its
                                     * place until its first wrap, a crossing pair in the
                                     * stretch where it meets (they still meet) */
    int trail;                      /* 1 (default): a mover whose path during the exposure,
                                     * L = speed·exposure/frame_interval px, is longer than
                                     * sqrt(12)·σ (σ = psf_sigma, or mover_sigma) is drawn
                                     * as that path ⊗ its Gaussian, centred on its position
                                     * (the mid-exposure one), with the SNR keeping its
                                     * meaning (the peak of the §6 SNR map, at the trail's
                                     * centre): λ = snr·σ_pix·s / (sqrt(2)·psf_sigma·
                                     * erf(L / (2·sqrt(2)·s))) per px of length, s² =
                                     * σ² + psf_sigma², F = λ·L; shorter ones stay points
                                     * (synth.c: why sqrt(12)·σ); 0: all points */
    int truth_motion;               /* 1: the truth JSON gives each mover its velocity and
                                     * segment (vx, vy, vx_s, vy_s, segment; ss_synth_obj_t);
                                     * on by itself with a speed list or crossings */
    double mover_sigma;             /* > 0: movers are extended Gaussians of this sigma (px;
                                     * comets), not the star PSF; the SNR keeps its meaning
                                     * (the peak of the §6 SNR map with the kernel psf_sigma):
                                     * F = snr·σ_pix·sqrt(π)·(mover_sigma² + psf_sigma²) /
                                     * psf_sigma; 0 = the star PSF; [0.3, 10] when on */
    double streak_prob;             /* probability per frame of a streak */
    double streak_snr;              /* matched-filter SNR along the streak: the §6 SNR map
                                     * (point-source kernel) on the streak's axis away from its
                                     * ends, = λ/σ_pix with λ the flux per px of length;
                                     * F = streak_snr·σ_pix·length */
    double streak_len_min, streak_len_max; /* px */

    /* optional celestial WCS in the metadata (exercises WCS handling) */
    int wcs;                        /* 1: attach a TAN WCS that follows the shift */
    double wcs_ra, wcs_dec;         /* deg: sky at frame 0's centre pixel */
    double wcs_scale;               /* arcsec per px (north up, east left) */
} ss_synth_cfg_t;

typedef enum ss_synth_obj_kind {
    SS_SYNTH_MOVER = 0,
    SS_SYNTH_STREAK,
    SS_SYNTH_COSMIC
} ss_synth_obj_kind_t;

typedef struct ss_synth_obj {
    int id;                         /* stable across frames for movers */
    ss_synth_obj_kind_t kind;
    double x, y;                    /* in frame pixel coordinates (0-based) */
    double x0, y0, x1, y1;          /* streak end points (frame coordinates); a trailed
                                     * mover's trail: (x0, y0) at the exposure's start,
                                     * (x1, y1) at its end (= x, y for a point mover) */
    double flux;                    /* ADU */
    double snr;                     /* as defined in the config above */
    double sigma;                   /* movers: the Gaussian sigma they are drawn with, px (this
                                     * frame's seeing, or mover_sigma; Moffat: the Gaussian of
                                     * the same FWHM); 0 for other kinds */
    /* movers only (0 for other kinds): */
    double vx, vy;                  /* velocity on the sky-fixed (registered) frame, px/frame */
    double vx_s, vy_s;              /* the same in px/s (frame_interval > 0), else NAN */
    int segment;                    /* the branch of its path: 0 at frame 0, a new number at
                                     * every frame where its frame position wrapped (either
                                     * axis; with wrap_scatter also where it re-appeared
                                     * elsewhere) onto a branch it was not on lately — a jump,
                                     * so a new track for any tracker —; back on one of its
                                     * last 16 branches (the jitter took a mover at an edge
                                     * across and back) that branch's number: its positions
                                     * on one branch lie on one line of the sky */
    int pair;                       /* crossing pair k (n_crossing), -1 for the other movers */
} ss_synth_obj_t;

typedef struct ss_synth_truth {
    uint64_t seq;
    double sx, sy;                  /* true shift s_t against frame 0's pointing */
    double psf_sigma;               /* this frame's seeing */
    double transparency;            /* multiplier applied to stars and objects */
    double sigma_pix;               /* pixel noise at the configured sky level (ADU): the σ_ref
                                     * of the SNR definitions */
    double sky;                     /* this frame's sky at the frame centre, ADU (sky_var and
                                     * sky_trend applied; no bias, no stray light) */
    double stray;                   /* this frame's stray-light amplitude A_t, ADU (0: none) */
    double stray_angle;             /* its direction φ_t, rad */
    int width, height;              /* the frame as written (NAXIS1 = width + overscan,
                                     * NAXIS2 = height minus this frame's cut) */
    int overscan;                   /* overscan columns at the right (the image is columns
                                     * 0 .. width - overscan - 1) */
    /* Hot pixels (detector coordinates of the image area), listed in frame
     * 0's truth only (n_hot = 0 in the others): the arrays belong to the
     * generator and live as long as it does. */
    int n_hot;
    const int *hot_x, *hot_y;
    int motion;                     /* 1: the JSON carries the movers' vx, vy, vx_s, vy_s,
                                     * segment and pair (truth_motion, a speed list or
                                     * crossings) */
    int n_obj;
    ss_synth_obj_t obj[SS_SYNTH_MAX_OBJ];
} ss_synth_truth_t;

typedef struct ss_synth ss_synth_t;

/* Defaults: 1024², u16, 2000 stars, Gaussian σ 1.4, sky 1000, gain 1,
 * read noise 5, jitter 1 px, no defects, no transients. */
void ss_synth_defaults(ss_synth_cfg_t *c);

ss_synth_t *ss_synth_new(const ss_synth_cfg_t *c);
void ss_synth_destroy(ss_synth_t **s);

/* Bytes a frame of this configuration needs at most:
 * (width + overscan) · height · the pixel size. */
size_t ss_synth_frame_bytes(const ss_synth_cfg_t *c);

/* Render the next frame into f (f->pixels must hold ss_synth_frame_bytes;
 * f->capacity is checked). Sets f's size (width + overscan, height minus
 * this frame's cut), dtype and meta (seq, time, exposure, source
 * "synth"; with overscan or height_jitter, the trim section = the image
 * columns and the full configured height, which reaches past the frame's
 * last row on a cut frame, as real cameras write it). truth may be NULL. */
ss_err_t ss_synth_next(ss_synth_t *s, ss_frame_t *f, ss_synth_truth_t *truth);

/* The truth of one frame as one JSON line (no newline): seq, sx, sy,
 * psf_sigma, transparency, sigma_pix, sky, width, height (written frame),
 * overscan and stray/stray_angle when on, "objects" (each with id, kind,
 * x, y, streak end points (and a trailed mover's x0, y0, x1, y1), flux,
 * snr, and sigma for movers; with
 * t->motion also vx, vy (px/frame), vx_s, vy_s (px/s, when the frames
 * have an interval), segment, and pair for crossing movers), and in frame
 * 0's line "hot": [[x, y], ...]. Returns the length, or -1 if buf is too
 * small (ss_synth_truth_json_max bytes always suffice). */
int ss_synth_truth_json(const ss_synth_truth_t *t, char *buf, size_t n);
size_t ss_synth_truth_json_max(const ss_synth_cfg_t *c);

#ifdef __cplusplus
}
#endif
#endif
