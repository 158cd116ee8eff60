/*
 * photometry.h — magnitudes for detections and tracks (issue 12, item 6).
 *
 * Convention. A zero point zp is the magnitude of one ADU of flux on the
 * calibrated frame (per_second = 0), or of one ADU per second of exposure
 * (per_second = 1):
 *
 *     mag = zp − 2.5·log10(flux / t)        t = exposure (s) when per_second,
 *                                             else t = 1
 *     mag_err = 1.0857·flux_err/flux  (⊕ zp_err, in quadrature)
 *
 * where 1.0857 = 2.5/ln 10. A detection's flux is Σ residual over its
 * component (detection.h): the part of the PSF inside the detection
 * threshold, so a mover's magnitude is fainter than its total one by the
 * light outside the component (README "Photometry" gives the figures).
 * No magnitude (NAN) for non-positive flux, for vanished (negative)
 * detections, without a zero point, or with per_second and no exposure.
 *
 * Where the zero point comes from, first found wins (ss_phot_zp_choose):
 *   1. pipeline.photometry.zeropoint, when set (the operator's value);
 *   2. a zero point fitted against a catalogue on a plate-solved frame
 *      (ss_phot_fit_zeropoint, from measured stars: ss_phot_aperture);
 *   3. the frame's FITS header: MAGZERO, else MAGZPT (error MAGZRR), else
 *      PHOTZP (error PHOTZPER), read with the same per_second convention
 *      as a configured one (set pipeline.photometry.per_second to match
 *      the headers' convention).
 * Host code; nothing allocated.
 */
#ifndef SS_PHOTOMETRY_H
#define SS_PHOTOMETRY_H

#include "detection.h"
#include "frame.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SS_PHOT_K 1.0857362047581294    /* 2.5 / ln 10: mag error per relative flux error */
#define SS_PHOT_MIN_STARS 5             /* a fit refuses fewer stars */
#define SS_PHOT_FIT_MAX 1024            /* stars a fit uses at most (the first ones given:
                                         * pass the best-measured first) */
#define SS_PHOT_CLIP 3.0                /* sigma clip of the fit, in robust standard deviations */
#define SS_PHOT_BAND_MAX 8              /* a band name, with the NUL */

typedef enum ss_phot_source {
    SS_PHOT_NONE = 0,                   /* no zero point known: no magnitudes */
    SS_PHOT_CONFIG,                     /* pipeline.photometry.zeropoint */
    SS_PHOT_FIT,                        /* fitted against a catalogue */
    SS_PHOT_HEADER                      /* MAGZERO / MAGZPT / PHOTZP */
} ss_phot_source_t;

const char *ss_phot_source_name(ss_phot_source_t s);   /* "none" "config" "fit" "header" */

typedef struct ss_phot_zp {
    ss_phot_source_t source;            /* SS_PHOT_NONE: the rest is meaningless */
    double zp;                          /* mag of 1 ADU (or 1 ADU/s, per_second) */
    double zp_err;                      /* its standard error, mag (0 when configured) */
    int per_second;                     /* 1: flux is divided by the exposure first */
    int n_used;                         /* fitted: stars kept by the clip; else 0 */
} ss_phot_zp_t;

/* "pipeline.photometry.*" */
typedef struct ss_phot_cfg {
    double zeropoint;                   /* "zeropoint": NAN = none configured (null) */
    int per_second;                     /* "per_second" */
    char band[SS_PHOT_BAND_MAX];        /* "band": the filter, as ADES names it */
} ss_phot_cfg_t;

/* The magnitude of a flux measured with an exposure of `exposure` s.
 * Sets *mag and *mag_err (NAN when unknown); returns 1 when known, else 0. */
int ss_phot_mag(const ss_phot_zp_t *zp, double exposure, double flux, double flux_err,
                double *mag, double *mag_err);

/* Every detection's mag and mag_err (NAN for vanished ones, non-positive
 * flux, or no zero point). Returns how many got a magnitude. */
int ss_phot_apply(const ss_phot_zp_t *zp, double exposure, ss_detlist_t *dets);

/* The zero point a frame uses, by the precedence above: cfg's zeropoint,
 * else *fitted (may be NULL) when its source is SS_PHOT_FIT, else the
 * header zero point in m (m->zp_header finite), else none. */
void ss_phot_zp_choose(ss_phot_zp_t *out, const ss_phot_cfg_t *cfg, const ss_frame_meta_t *m,
                       const ss_phot_zp_t *fitted);

/* A matched star: its instrumental flux on the frame (ADU, e.g. from
 * ss_phot_aperture) and its catalogue magnitude in the band. */
typedef struct ss_phot_star {
    double flux;
    double flux_err;                    /* ADU; 0 if unknown */
    double cat_mag;
} ss_phot_star_t;

/* Fit a zero point: each star with positive finite flux and a finite
 * catalogue magnitude gives zp_i = cat_mag + 2.5·log10(flux/t) (t as in
 * ss_phot_mag); the zero point is the mean of the zp_i within SS_PHOT_CLIP
 * robust standard deviations (1.4826·MAD) of their median, then of the
 * kept ones' mean, until the number kept is stable; zp_err = their standard deviation / sqrt(kept)
 * (at least the stars' own errors combined). At most SS_PHOT_FIT_MAX stars
 * are looked at. Returns 0 with *out filled (source SS_PHOT_FIT), or -1
 * when fewer than SS_PHOT_MIN_STARS usable stars (before or after the
 * clip), or per_second without an exposure; *out is then source NONE. */
int ss_phot_fit_zeropoint(const ss_phot_star_t *stars, int n, double exposure, int per_second,
                          ss_phot_zp_t *out);

/* Aperture photometry of one star on a calibrated frame (w×h floats,
 * row-major, NAN = invalid) at pixel centre coordinates x, y (0-based). */
typedef struct ss_phot_ap {
    double flux, flux_err;              /* sky-subtracted ADU in the aperture, and its error */
    double sky, sky_sd;                 /* per pixel: clipped mean and deviation in the annulus */
    double area;                        /* aperture pixels (fractional at the edge) */
    int n_sky;                          /* annulus pixels kept */
    double r_ap, r_in, r_out;           /* radii used, px */
} ss_phot_ap_t;

/* Radii from the PSF's Gaussian sigma: aperture 3σ (at least 2 px; it
 * holds 98.9% of a Gaussian's light), sky annulus 5σ to 8σ (at least
 * r_ap + 2 and r_in + 3 px). The sky is the mean of the annulus pixels,
 * 3-sigma clipped until stable (stars in the annulus dropped); flux_err
 * = sqrt(area·sky_sd² + area²·sky_sd²/n_sky + flux/gain) (gain e-/ADU;
 * 0 leaves out the star's own shot noise). Returns 0, or -1 when the
 * annulus leaves the frame, an aperture pixel is invalid, or fewer than
 * half of the annulus pixels are usable. */
int ss_phot_aperture(const float *img, int w, int h, double x, double y, double psf_sigma,
                     double gain, ss_phot_ap_t *out);

#ifdef __cplusplus
}
#endif
#endif
