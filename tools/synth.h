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

typedef enum ss_synth_psf { SS_SYNTH_GAUSS = 0, SS_SYNTH_MOFFAT } ss_synth_psf_t;

typedef struct ss_synth_cfg {
    int width, height;
    ss_dtype_t dtype;               /* u8/u16/i16/i32/f32 output */
    uint64_t seed;
    double frame_interval;          /* s between frames (timestamps) */
    double start_mjd;               /* time of frame 0 (MJD); 0 = now */
    double exposure;                /* s, written to the metadata */

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
    double mover_snr;               /* peak matched-filter SNR: F = snr·σ_pix·sqrt(4π)·psf_sigma */
    double mover_speed;             /* px per frame, random direction */
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
    double x0, y0, x1, y1;          /* streak end points (frame coordinates) */
    double flux;                    /* ADU */
    double snr;                     /* as defined in the config above */
} ss_synth_obj_t;

typedef struct ss_synth_truth {
    uint64_t seq;
    double sx, sy;                  /* true shift s_t against frame 0's pointing */
    double psf_sigma;               /* this frame's seeing */
    double transparency;            /* multiplier applied to stars and objects */
    double sigma_pix;               /* pixel noise at the sky level (ADU) */
    int n_obj;
    ss_synth_obj_t obj[SS_SYNTH_MAX_OBJ];
} ss_synth_truth_t;

typedef struct ss_synth ss_synth_t;

/* Defaults: 1024², u16, 2000 stars, Gaussian σ 1.4, sky 1000, gain 1,
 * read noise 5, jitter 1 px, no defects, no transients. */
void ss_synth_defaults(ss_synth_cfg_t *c);

ss_synth_t *ss_synth_new(const ss_synth_cfg_t *c);
void ss_synth_destroy(ss_synth_t **s);

/* Render the next frame into f (f->pixels must hold width·height pixels
 * of cfg->dtype; f->capacity is checked). Sets f's size, dtype and meta
 * (seq, time, exposure, source "synth"). truth may be NULL. */
ss_err_t ss_synth_next(ss_synth_t *s, ss_frame_t *f, ss_synth_truth_t *truth);

/* The truth of one frame as one JSON line (no newline). Returns the
 * length, or -1 if buf is too small. */
int ss_synth_truth_json(const ss_synth_truth_t *t, char *buf, size_t n);

#ifdef __cplusplus
}
#endif
#endif
