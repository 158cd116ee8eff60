/*
 * slow_movers.h — a slow mover in the frames stored before it was found
 * (ALGORITHM.md §3, "object removal"): the fit that tells where it was.
 *
 * A mover of under a pixel or so per frame is still in the history frames
 * that were stored before anything was detected (warm-up included): their
 * prediction holds a smeared copy of it just behind where it is now, and
 * the residual shows a +/- dipole whose positive lobe is pushed forward
 * (measured: centroids 0.5–2.8 px off for a comet at 0.5 px per frame).
 * The residual around a detection is fitted with that very picture,
 *   r(x) ≈ f·[G(x - p) - Σ_k u_k·a_k·G(x - p + v·τ_k - φ_k)],
 * G a pixel-integrated Gaussian of sigma s (fitted within psf_sigma·e^±1.1:
 * a comet is wider than a star), a_k the prediction's
 * weights, τ_k how many frames ago frame k was taken, φ_k its fractional
 * offset in the prediction, u_k = 1 for the frames not screened by object
 * removal. Where it beats a new source that the history never saw (r ≈
 * f·G(x - p), its s fitted too) by a clear margin, the mover's track (p - v·τ_k) is known,
 * and the driver takes it out of those frames (ss_history_subtract) and
 * predicts the frame again.
 */
#ifndef SS_SLOW_MOVERS_H
#define SS_SLOW_MOVERS_H

#include "stages.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SS_SLOW_VMAX 1.5            /* px per frame: faster movers leave their copies behind */
#define SS_SLOW_MIN_SNR 8.0         /* detections fitted: peak SNR at least this */
#define SS_SLOW_GAIN 25.0           /* the mover model must lower the RSS by this many σ² */
#define SS_SLOW_MAX_FITS 16         /* detections fitted per frame at most (the most significant) */
#define SS_SLOW_FLUX_RATIO 3.0      /* the fitted flux is at most this times the detection's:
                                     * copies a PSF width behind leave the positive lobe
                                     * most of the mover (measured 1.2-2.2 for movers of
                                     * 0.5-0.6 px/frame; a fit of flux against speed that
                                     * drifts off gives 4.8) */

/* The history frames as the fit sees them, k = 0 newest: a_k, τ_k
 * (frames ago, > 0), φ_k (fractional offset of y_k, px), u_k. */
typedef struct ss_slow_hist {
    int n;
    double a[SS_MAX_HISTORY], tau[SS_MAX_HISTORY], fx[SS_MAX_HISTORY], fy[SS_MAX_HISTORY];
    int unscreened[SS_MAX_HISTORY];
} ss_slow_hist_t;

typedef struct ss_slow_fit {
    int ok;                         /* 1: a slow mover, its track below */
    double x, y;                    /* now, px (processed region) */
    double vx, vy;                  /* px per frame */
    double sigma;                   /* its Gaussian sigma, px (fitted: comets are wider) */
    double flux;                    /* ADU */
    double rss, rss_new;            /* the mover model's RSS, and a new source's */
    int npix;                       /* pixels in the window */
} ss_slow_fit_t;

/* Fit the residual r (w×h, NaN = invalid) around a detection at (x0, y0)
 * with the slow-mover model (the best of several starting speeds, then
 * of 2 and 3 times the best: a faster mover matches every m-th copy of a
 * slower one) and with a new source; ok when the mover
 * model lowers the RSS by SS_SLOW_GAIN·noise² or more, its speed is at
 * most SS_SLOW_VMAX and carries the copies a PSF width behind on
 * average, its flux is positive and at most SS_SLOW_FLUX_RATIO·lobe_flux
 * (the detection's flux) and its position within 3 px of (x0, y0).
 * Returns out->ok. */
int ss_slow_mover_fit(const float *r, int w, int h, double x0, double y0, double lobe_flux,
                      double psf_sigma, double noise, const ss_slow_hist_t *hist,
                      ss_slow_fit_t *out);

/* The RSS per pixel of the new-source model on the window that
 * ss_slow_mover_fit would use around (x0, y0), no pixel left out (NaN
 * when it would not fit): after a mover was taken out of the history,
 * the residual there should be a source alone, without holes. */
double ss_slow_source_rss(const float *r, int w, int h, double x0, double y0, double psf_sigma,
                          double noise, const ss_slow_hist_t *hist);

/* The flux and width of a mover whose track is known (a confirmed slow
 * track, pipeline.c): the residual r around (x0, y0) fitted with
 * f·[G(x - p) - Σ_k u_k·a_k·G(x - p - (fx_k, fy_k))] + c, the copies at
 * the fixed offsets (fx_k, fy_k) from p that the track gives (hist's tau
 * unused), p and the sigma free (p within 3 px of (x0, y0), the sigma
 * within psf_sigma·e^±1.1), f and c solved. ok when the fit lowers the
 * RSS of the window against no source at all, its flux is positive and
 * at most SS_SLOW_FLUX_RATIO·lobe_flux (the detection's flux, which the
 * copies eat into) and p stayed within 3 px. Returns out->ok (out->vx,
 * vy = 0). */
int ss_slow_track_fit(const float *r, int w, int h, double x0, double y0, double lobe_flux,
                      double psf_sigma, double noise, const ss_slow_hist_t *hist,
                      ss_slow_fit_t *out);

#ifdef __cplusplus
}
#endif
#endif
