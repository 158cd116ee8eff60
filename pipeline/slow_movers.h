/*
 * slow_movers.h — a slow mover in the frames stored before it was found
 * (ALGORITHM.md §3, "object removal"): the fit that tells where it was.
 *
 * A mover of under a pixel or so per frame is still in the history frames
 * that were stored before anything was detected (warm-up included): their
 * prediction holds a smeared copy of it just behind where it is now, and
 * the residual shows a +/- dipole whose positive lobe is pushed forward
 * (measured: centroids 0.5–2.8 px off for a comet at 0.5 px per frame).
 *
 * The residual alone, a weighted sum of the copies, pins down little more
 * than flux × speed when the copies overlap (at 0.3 px per frame 3 of 10
 * fits fell in that valley). The fit therefore reads the frames one by
 * one (ss_slow_stack_fit): the current frame and every history frame that
 * still holds the mover, each cut around the detection, its static scene
 * projected out per pixel, the mover's track p - v·τ_k fitted to what
 * moves. Where that beats a new source that the history never saw (the
 * current frame alone) by a clear margin, the mover's track is known from
 * the first frame it is seen in, and the driver takes it out of those
 * frames (ss_history_subtract) and predicts the frame again.
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
#define SS_SLOW_FLUX_RATIO 3.0      /* a confirmed track's fitted flux is at most this times
                                     * the detection's: copies a PSF width behind leave the
                                     * positive lobe most of the mover (measured 1.2-2.2 for
                                     * movers of 0.5-0.6 px/frame) */
#define SS_SLOW_MAX_OFFSET 3.0      /* px: a fitted position stays this near the detection */
#define SS_SLOW_WIN_MAX 40          /* px: a fit's window radius at most */
#define SS_SLOW_STACK_MAX 33        /* frames in a stack fit: the current one and at most
                                     * 32 history frames */

/* The history frames as the fit sees them, k = 0 newest: a_k, τ_k
 * (frames ago, > 0), φ_k (fractional offset of y_k, px), u_k. */
typedef struct ss_slow_hist {
    int n;
    double a[SS_MAX_HISTORY], tau[SS_MAX_HISTORY], fx[SS_MAX_HISTORY], fy[SS_MAX_HISTORY];
    int ix[SS_MAX_HISTORY], iy[SS_MAX_HISTORY];    /* its integer offset (ss_hist_view_t) */
    int unscreened[SS_MAX_HISTORY];
} ss_slow_hist_t;

/* The frames around one detection as the stack fit reads them: frame 0
 * the current one (tau = fx = fy = 0), frames 1..k-1 history frames (tau,
 * fx, fy as in ss_slow_hist_t), each a side×side window whose pixel
 * (i, j) is the current frame's pixel (x0 + i, y0 + j): a history frame
 * is read at its integer offset (ss_slow_stack_cut). NaN = invalid. */
typedef struct ss_slow_stack {
    int k;                          /* frames, at most SS_SLOW_STACK_MAX */
    int x0, y0, side;
    double tau[SS_SLOW_STACK_MAX], fx[SS_SLOW_STACK_MAX], fy[SS_SLOW_STACK_MAX];
    const float *px;                /* k·side·side values, frame after frame; borrowed */
} ss_slow_stack_t;

/* What the stack fit found: the mover's track and flux, the drop of the
 * sum of squares it brings (gain) and that of a new source in the
 * current frame alone (gain_new), in ADU², the noise per frame pixel and
 * the degrees of freedom each pixel keeps after its static scene. */
typedef struct ss_slow_stack_fit {
    double x, y, vx, vy, sigma, flux;
    double gain, gain_new, noise;
    int dof;
} ss_slow_stack_fit_t;

typedef struct ss_slow_fit {
    int ok;                         /* 1: a slow mover, its track below */
    double x, y;                    /* now, px (processed region) */
    double vx, vy;                  /* px per frame */
    double sigma;                   /* its Gaussian sigma, px (fitted: comets are wider) */
    double flux;                    /* ADU */
    double rss, rss_new;            /* on the residual: the mover model's RSS, and a new
                                     * source's */
    int npix;                       /* residual pixels in the window */
} ss_slow_fit_t;

/* The window of a stack fit around a detection at (x0, y0): it holds
 * the copies of a frame tau_max frames old at SS_SLOW_VMAX, the source's
 * core and SS_SLOW_MAX_OFFSET, up to SS_SLOW_WIN_MAX px out. */
void ss_slow_stack_window(double x0, double y0, double psf_sigma, double tau_max, int *wx0,
                          int *wy0, int *side);

/* Cut the side×side window at (wx0, wy0) out of a w×h plane of type dt
 * read at integer offset (ix, iy) (window pixel (i, j) is plane pixel
 * (wx0 + i + ix, wy0 + j + iy)) into dst as floats: the sentinel and
 * pixels outside the plane become NaN. */
void ss_slow_stack_cut(const void *plane, ss_dtype_t dt, int w, int h, int ix, int iy, int wx0,
                       int wy0, int side, float *dst);

/* The stack fit (slow_stack.c) around a detection at (x0, y0), current-
 * frame px: the best mover (position, width within psf_sigma·e^±1.1,
 * speed up to SS_SLOW_VMAX) and the best new source. 0, or -1 when there
 * is too little to fit (fewer than 5 frames, fewer than 16 pixels valid
 * in all of them, no noise). */
int ss_slow_stack_fit(const ss_slow_stack_t *st, double x0, double y0, double psf_sigma,
                      ss_slow_stack_fit_t *out);

/* Whether the detection at (x0, y0) is a slow mover still in the history
 * frames of st: ok when the stack fit's mover beats its new source by
 * SS_SLOW_GAIN·noise² or more, its speed is at most SS_SLOW_VMAX and
 * carries the copies a PSF width behind on average (the prediction's
 * weights in hist), its flux is positive, its position within
 * SS_SLOW_MAX_OFFSET of (x0, y0), and on the residual r (w×h, NaN =
 * invalid; noise its σ) the mover with its weighted copies explains the
 * window around it better than the source alone at the same position
 * and width (out->rss < out->rss_new, flux and offset solved for each;
 * the driver's check of the take-out reads them). Returns out->ok. */
int ss_slow_mover_fit(const float *r, int w, int h, double x0, double y0, double psf_sigma,
                      double noise, const ss_slow_hist_t *hist, const ss_slow_stack_t *st,
                      ss_slow_fit_t *out);

/* The RSS per pixel of a source alone at fit's position and width (its
 * flux and an offset solved) on the window ss_slow_mover_fit used around
 * it (NaN when there is none): once the mover is out of the history, the
 * residual there should be that source alone, and this falls from the
 * fit's rss_new / npix to its rss / npix. */
double ss_slow_source_rss(const float *r, int w, int h, const ss_slow_fit_t *fit,
                          double psf_sigma, double noise, const ss_slow_hist_t *hist);

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
