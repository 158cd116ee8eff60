/*
 * solve.h — plate solving of a frame without a WCS by astrometry.net's
 * solve-field (README "Plate solving"), run as a child process with a
 * time limit, and its result: the WCS and the stars it matched.
 *
 * ss_solve_field is synchronous and slow (seconds): the daemon calls it
 * from its own solver thread (daemon/solver.c), never on the frame path.
 * It finds the stars of the image itself (ss_solve_find_stars), writes
 * them as an x,y list (FITS table X, Y, FLUX, FITS 1-based pixels) into a
 * private temporary directory, runs solve-field on that list (its own
 * process group, killed at the limit), reads the solution's .wcs header
 * (WCSLIB, pipeline/wcs.h) and .corr table, refits the WCS to the matched
 * stars (TAN, with SIP order 2 from 20 stars; outliers such as blends
 * rejected) and removes the directory.
 *
 * Pixel convention: 0-based pixels of the image handed in (wcs.h).
 */
#ifndef SS_SOLVE_H
#define SS_SOLVE_H

#include <stdatomic.h>

#include "frame.h"
#include "photometry.h"
#include "wcs.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How to run solve-field. */
typedef struct ss_solve_opts {
    char program[SS_PATH_MAX];      /* "solve-field" (found on PATH) or a path */
    char index_dir[SS_PATH_MAX];    /* index files' directory; "" = solve-field's own config */
    double timeout_s;               /* wall-clock limit; the child is killed after it */
    double scale_low, scale_high;   /* pixel scale bounds, arcsec/px; 0 = no hint */
    int has_pos;                    /* 1: search only within radius of ra, dec */
    double ra, dec, radius;         /* degrees */
    int max_stars;                  /* brightest stars handed over (0: 200) */
    const atomic_int *cancel;       /* may be NULL; non-zero ends the solve (killed) */
} ss_solve_opts_t;

/* A star found in an image: 0-based centroid, background-subtracted flux. */
typedef struct ss_solve_xy {
    double x, y, flux;
} ss_solve_xy_t;

/* A star solve-field matched to its index: the field position (0-based
 * pixels of the solved image), the index star's RA/Dec (degrees, ICRS as
 * the index is), and its catalogue magnitude when the index carries one
 * (Tycho-2 indexes: MAG_VT, through --tag-all). */
typedef struct ss_solve_star {
    double x, y;
    double ra, dec;
    double mag;                     /* NAN when has_mag is 0 */
    int has_mag;
} ss_solve_star_t;

typedef struct ss_solution ss_solution_t;

/* Whether the solve-field of opts can be run: a path must be executable,
 * a bare name must be found on PATH. Returns 1 or 0. */
int ss_solve_available(const char *program);

/* The stars of a w×h image (NaN pixels ignored): local maxima of at
 * least 5σ above a block-median background (σ from the MAD), with the
 * four neighbours at least a fifth of the peak (a hot pixel or a cosmic
 * ray hit is not a star), centroided by a Gaussian-windowed first moment
 * (psf sigma 1.5 px), brightest first. Writes at most max into out;
 * returns how many were found and written (0 on allocation failure). */
int ss_solve_find_stars(const float *img, int w, int h, ss_solve_xy_t *out, int max);

/* Solve a w×h image. SS_OK with *out set (free with ss_solution_destroy);
 * SS_ERR_TIMEOUT when the limit passed (the child killed);
 * SS_ERR_STOPPED when opts->cancel was set; SS_ERR_REGISTRATION when
 * solve-field found no solution (or too few stars for one);
 * SS_ERR_IO / SS_ERR_NOMEM / SS_ERR_FORMAT when it could not be run or
 * its output not read. why (may be NULL) gets a one-line reason. */
ss_err_t ss_solve_field(const ss_solve_opts_t *opts, const float *img, int w, int h,
                        ss_solution_t **out, char *why, size_t why_len);

/* The solution's WCS keys (FITS keywords, CRPIX 1-based for the solved
 * image), *n of them; they feed ss_wcs_from_meta like a frame's own. */
const ss_wcs_key_t *ss_solution_keys(const ss_solution_t *s, int *n);
/* The solution's WCS, evaluated by WCSLIB (0-based pixels). */
const ss_wcs_t *ss_solution_wcs(const ss_solution_t *s);
/* The matched stars (solve-field's .corr), *n of them. */
const ss_solve_star_t *ss_solution_stars(const ss_solution_t *s, int *n);
/* The residual rms of the matched stars about the refitted WCS, arcsec
 * (NAN when solve-field's own WCS was kept: too few stars). */
double ss_solution_rms(const ss_solution_t *s);
/* Seconds the solve took (wall clock, child process included). */
double ss_solution_seconds(const ss_solution_t *s);
void ss_solution_destroy(ss_solution_t **s);

/* The zero point of the solved image img (w×h, the pixels that were
 * solved) against the catalogue: each matched star with a catalogue
 * magnitude measured by aperture photometry (ss_phot_aperture: the
 * annulus takes the sky, so raw pixels do) and the fluxes fitted to the
 * magnitudes (ss_phot_fit_zeropoint; exposure and per_second as there).
 * The zero point is in the catalogue's band (Tycho-2: V_T). Returns 0
 * with *out (source SS_PHOT_FIT), or -1 when fewer than 5 stars measure. */
int ss_solution_zeropoint(const ss_solution_t *s, const float *img, int w, int h,
                          double psf_sigma, double gain, double exposure, int per_second,
                          ss_phot_zp_t *out);

#ifdef __cplusplus
}
#endif
#endif
