/*
 * pipeline_cfg.h — the typed parameters of one feed's processing chain.
 *
 * The values come from config/ (its key table holds defaults, ranges, docs
 * and which keys are reloadable; JSON section "pipeline" of a feed). The
 * pipeline reads this struct and never sees JSON. Units are pixels of the
 * processed (trimmed) frame unless a comment says otherwise. A value of -1
 * (or 0 where noted) on a "derived" key means "derive from psf_sigma / N".
 */
#ifndef SS_PIPELINE_CFG_H
#define SS_PIPELINE_CFG_H

#include "frame.h"
#include "photometry.h"
#include "track.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ss_backend_kind {
    SS_BACKEND_AUTO = 0,        /* cuda when built and a GPU is present, else cpu */
    SS_BACKEND_CPU,
    SS_BACKEND_CUDA
} ss_backend_kind_t;

typedef enum ss_whiten_mode {
    SS_WHITEN_POLY = 0,         /* shift-polynomial weights (ALGORITHM §3) */
    SS_WHITEN_LSQ               /* data-driven Wiener weights */
} ss_whiten_mode_t;

typedef enum ss_overscan_mode {
    SS_OVERSCAN_NONE = 0,       /* no overscan subtraction */
    SS_OVERSCAN_SCALAR,         /* one value per frame: the median of the BIASSEC pixels */
    SS_OVERSCAN_ROW             /* per processed row: the median of that row's BIASSEC pixels */
} ss_overscan_mode_t;

typedef struct ss_pipeline_cfg {
    /* backend */
    ss_backend_kind_t backend;  /* "backend": auto|cpu|cuda */
    int device;                 /* "device": CUDA device ordinal */
    int threads;                /* "threads": CPU worker threads, 0 = all cores */
    int device_feeds;           /* not a key: the feeds of the config on this device
                                 * (ss_config_load_string; the bench's --feeds); the
                                 * CUDA guided filter sizes its grid to 1/device_feeds
                                 * of the GPU, and the fine registration's sums take
                                 * fewer warps a tile. 0 = 1 */

    /* §1 calibration, region of interest, bad pixels */
    char dark[SS_PATH_MAX];     /* "dark": FITS dark frame ("" = none) */
    char flat[SS_PATH_MAX];     /* "flat": FITS flat field ("" = none) */
    char bad_pixels[SS_PATH_MAX]; /* "bad_pixels": FITS mask, nonzero = bad ("" = none) */
    char bias[SS_PATH_MAX];     /* "bias": FITS master bias ("" = none) */
    ss_overscan_mode_t overscan; /* "overscan": none|scalar|row, from the frame's BIASSEC */
    int geometry_slack;         /* "geometry_slack": px per axis by which a frame's region
                                 * (same origin) may differ and keep the history; 0 = off */
    double saturation;          /* "saturation": raw ADU at/above which a pixel is invalid; 0 = type max */
    int roi_x, roi_y, roi_w, roi_h; /* "roi": [x, y, w, h] in raw pixels; w = 0: whole frame (or TRIMSEC) */
    int use_trimsec;            /* "use_trimsec": honour FITS TRIMSEC/DATASEC when no roi is set */
    int hotpix_learn;           /* "hotpix.learn": learn hot pixels */
    double hotpix_k;            /* "hotpix.k": k·σ above the 3×3 median */
    int hotpix_frames;          /* "hotpix.frames": frames per learning window */
    double hotpix_fraction;     /* "hotpix.fraction": fraction of a window a pixel must be hot (0.75) */
    int hotpix_min_frames;      /* "hotpix.min_frames": hits that learn a pixel mid-window (5) */

    /* §2 registration */
    int reg_levels;             /* "registration.levels": L, binning by 2^L for the coarse search */
    int reg_search;             /* "registration.search": R, ±R binned pixels */
    int reg_hipass;             /* "registration.highpass": local-mean radius px; 0 = derived */
    int reg_max_iter;           /* "registration.max_iter": gradient iterations (4) */
    double reg_tol;             /* "registration.tol": stop when |δ| < tol px (0.002) */
    double reg_ambiguity;       /* "registration.ambiguity": best/runner-up cost ratio that fails (0.9) */
    double reg_min_det;         /* "registration.min_det": det/(u·w) below this fails (featureless) */
    int max_failures;           /* "registration.max_failures": failures in a row treated as a slew */
    double reref_px;            /* "registration.reref_px": re-reference when |s| exceeds this */
    int ref_frames;             /* "registration.reference_frames": M; the reference is the mean
                                 * of the first M aligned good frames (1 = the first alone) */

    /* §3 whitening */
    int history;                /* "history": N frames kept */
    int min_history;            /* "min_history": frames needed before residuals are produced; 0 = derived */
    ss_whiten_mode_t mode;      /* "whiten.mode": poly|lsq */
    int poly_degree;            /* "whiten.degree": 0, 1 or 2 */
    double gamma;               /* "whiten.gamma": regulariser; < 0 = 1e-3·N */
    double forget;              /* "whiten.forget": λ in (0,1]; 1 = none */
    double protect_speed;       /* "object_removal.protect_speed": px/frame; 0 = off */
    int min_valid;              /* "whiten.min_valid": valid history frames a poly prediction
                                 * needs at a pixel; 0 = auto (ss_cfg_min_valid) */
    int clean_sharp;            /* "history_clean.enabled": clean sharp outliers (cosmics) from stored frames */
    double clean_k;             /* "history_clean.k": k·σ above the 3×3 median */
    double clean_ratio;         /* "history_clean.ratio": share of the rise over the ring minimum */
    int remove_objects;         /* "object_removal.enabled" */
    double mask_radius;         /* "object_removal.radius": px; < 0 = 2·psf_sigma + 1 */

    /* §4 guided filter */
    int guided;                 /* "guided.enabled" */
    int guided_radius;          /* "guided.radius": ρ px; 0 = round(8·psf_sigma) */
    double guided_eps;          /* "guided.eps": ε in units of the noise variance */
    int guided_laplacian;       /* "guided.laplacian": second guide channel ∇²P (seeing changes) */
    int guided_biharmonic;      /* "guided.biharmonic": a global ∇⁴P term per frame (with laplacian; off) */
    int guided_mask;            /* "guided.mask": unexplained sources left out of the moments */

    /* §5 noise */
    int noise_stride;           /* "noise.stride": sample every s-th row and column */
    int model_error;            /* "noise.model_error": the model-error term near stars (§6b) */
    double model_error_snr;     /* "noise.model_error_snr": star SNR t from which pixels enter
                                 * its fit */

    /* §6 matched filter */
    double psf_sigma;           /* "psf_sigma": Gaussian PSF sigma in px */
    int mf_phases;              /* "matched.phases": sub-pixel kernel phases per axis
                                 * (1..3); 0 = auto (ss_mf_phases_used) */

    /* §7 detection */
    double thresh;              /* "detect.thresh": τ, seed threshold in σ */
    double thresh_low;          /* "detect.thresh_low": hysteresis growth threshold */
    int negative;               /* "detect.negative": also report z <= -τ components */
    int min_area;               /* "detect.min_area": smallest component reported, px */
    double streak_ratio;        /* "detect.streak_ratio": a/b for a streak (3) */
    double streak_min_len;      /* "detect.streak_min_a": a ≥ this × psf_sigma (3) */
    double streak_min_b;        /* "detect.streak_min_b": b ≥ this × psf_sigma, else a sharp track (cosmic) */
    double cosmic_fraction;     /* "detect.cosmic_fraction": peak pixel share of flux that marks a cosmic */
    int max_detections;         /* "detect.max": detections kept per frame */
    double streak_gap;          /* "detect.streak_gap": px; collinear streak pieces this close merge (0 = off) */

    /* §8 tracking */
    ss_track_cfg_t track;       /* "track.*" */

    /* §9 photometry */
    ss_phot_cfg_t phot;         /* "photometry.*" */
} ss_pipeline_cfg_t;

/* Derived values, computed once from a config (shared by both backends so
 * that they agree exactly). */
double ss_cfg_gamma(const ss_pipeline_cfg_t *c);        /* gamma, or 1e-3·N */
double ss_cfg_mask_radius(const ss_pipeline_cfg_t *c);  /* object-removal radius */
int ss_cfg_guided_radius(const ss_pipeline_cfg_t *c);   /* ρ */
int ss_cfg_min_history(const ss_pipeline_cfg_t *c);     /* frames before residuals */
int ss_cfg_hipass_radius(const ss_pipeline_cfg_t *c);   /* registration high-pass radius */
/* Valid history frames a re-weighted pixel needs, with n frames in use:
 * min_valid (at most n), or for 0 (auto) max(m + 2, ceil(n/2)), at most n
 * (README, "Background prediction": the prediction noise it bounds). */
int ss_cfg_min_valid(const ss_pipeline_cfg_t *c, int n);
int ss_poly_terms(int degree);                          /* m: 1, 3 or 6 */

#ifdef __cplusplus
}
#endif
#endif
