/*
 * backend.h — the one interface both backends fill: an ops table over
 * backend-owned planes.
 *
 * The backend-neutral driver (pipeline.c) owns policy: the reference, the
 * history bookkeeping (which slot holds which frame and its shift), the
 * weights (solved by the driver, or planned by the backend from its own
 * shift with the same code, plan_core.h: predict_planned; CUDA does it on
 * the device), failure counting. A backend owns pixel
 * storage (host memory for "cpu", device memory for "cuda") and runs the
 * per-pixel work of each stage on it. Every plane can be read back and
 * written (write_plane), so that tests can feed both backends identical
 * inputs at any stage and compare outputs stage by stage.
 *
 * Plane contents (w×h of the processed frame, float32 with NaN = invalid
 * unless noted):
 *   FRAME       the calibrated current frame (after ingest; learned bad
 *               pixels applied)
 *   FILTERED    its 3×3 median
 *   HIPASS      the registration input: FRAME with sharp outliers replaced
 *               (ss_clean_sharp with FILTERED as the median) minus its
 *               local mean (ss_hipass): blind to sky level, stray light and
 *               gradients
 *   REFERENCE   the high-passed reference frame
 *   REF_S, REF_GX, REF_GY   the reference's smoothing and gradients (§2b;
 *               ss_ref_stencil: the CUDA backend computes them when read)
 *   PREDICTION  P, RESIDUAL r, CLEAN r' (after the guided filter; equals r
 *               when the stage is off), SNR z
 *   SNR_RAW     z before the model-error division: modelvar copies SNR
 *               here before it divides SNR (β = 0: divides nothing); the
 *               hysteresis grows components on it, seeds on SNR
 *   STAR        D, the model-error template of the prediction's stars
 *               (ss_star_template; written by modelvar)
 *   LABELS      int32 labels (ss_label's convention)
 *   HISTORY     one history slot (slot argument), of the history dtype
 *   BADMASK     uint8, 1 = bad (static | learned)
 *
 * Calls on one backend instance come from one thread. Errors: SS_ERR_BACKEND
 * fails the frame; SS_ERR_BROKEN means the instance (and on CUDA the
 * device context) is unusable and the daemon should exit so that systemd
 * restarts it.
 */
#ifndef SS_BACKEND_H
#define SS_BACKEND_H

#include "outputs.h"
#include "plan_core.h"
#include "stages.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ss_plane {
    SS_PLANE_FRAME = 0,
    SS_PLANE_FILTERED,
    SS_PLANE_HIPASS,
    SS_PLANE_REFERENCE,
    SS_PLANE_REF_S,
    SS_PLANE_REF_GX,
    SS_PLANE_REF_GY,
    SS_PLANE_PREDICTION,
    SS_PLANE_RESIDUAL,
    SS_PLANE_CLEAN,
    SS_PLANE_SNR,
    SS_PLANE_SNR_RAW,
    SS_PLANE_STAR,
    SS_PLANE_LABELS,
    SS_PLANE_HISTORY,
    SS_PLANE_BADMASK,
    SS_PLANE__COUNT
} ss_plane_t;

const char *ss_plane_name(ss_plane_t p);

/* Geometry and storage of one feed's processing, fixed for the life of a
 * backend instance (a change of the processed region's size makes a new
 * instance; raw frames may vary in size around it). */
typedef struct ss_geometry {
    int raw_w, raw_h;           /* the largest raw frame the instance takes (raw_reserve
                                 * grows it); frames may be smaller, down to what holds
                                 * the part of the roi they carry */
    ss_dtype_t raw_dtype;
    ss_roi_t roi;               /* processed region within the raw frame */
    ss_dtype_t hist_dtype;      /* ss_history_dtype(raw_dtype, calibrated) */
    int history;                /* N slots */
} ss_geometry_t;

typedef struct ss_backend ss_backend_t;     /* private to each backend */

/* Per-stage GPU/CPU time of the last frame, ms (filled by backends that
 * measure it; -1 = not measured). */
typedef enum ss_stage_id {
    SS_STAGE_UPLOAD = 0, SS_STAGE_CALIBRATE, SS_STAGE_REG_COARSE, SS_STAGE_REG_FINE,
    SS_STAGE_WHITEN, SS_STAGE_GUIDED, SS_STAGE_NOISE, SS_STAGE_MATCHED, SS_STAGE_DETECT,
    SS_STAGE_HISTORY, SS_STAGE_DOWNLOAD, SS_STAGE__COUNT
} ss_stage_id_t;
const char *ss_stage_name(ss_stage_id_t s);

/* The sigma argument of matched, modelvar and detect that stands for the
 * frame's σ as the last noise op left it (backend.h, noise). */
#define SS_SIGMA_FRAME (-1.0f)

typedef struct ss_backend_ops {
    const char *name;           /* "cpu", "cuda" */

    /* 1 when usable here (e.g. a GPU is present); otherwise 0 and a reason
     * in why. Must not leave state behind that breaks fork(). */
    int (*probe)(int device, char *why, size_t why_len);

    ss_err_t (*create)(const ss_pipeline_cfg_t *cfg, const ss_geometry_t *geo,
                       const ss_calib_data_t *calib, ss_backend_t **out);
    void (*destroy)(ss_backend_t **b);

    /* Host memory for frame pools (pinned for cuda); may be used before
     * any create. */
    ss_host_allocator_t host_alloc;

    /* §1: raw frame (of geo->raw_dtype, at most geo->raw_w×raw_h, holding
     * the roi's first cf->valid_w columns and valid_h rows) -> FRAME and
     * FILTERED by ss_calibrate_frame with cf (NULL: the whole roi, no row
     * bias, dark scale 1), including hot-pixel learning and masking, and
     * HIPASS (the registration input).
     * cf->row_bias (roi.h doubles) is read before ingest returns. A frame
     * that does not fit: SS_ERR_SIZE. */
    ss_err_t (*ingest)(ss_backend_t *b, const ss_frame_t *raw, const ss_calib_frame_t *cf);
    /* Optional (NULL: the backend reads raw frames of any size where they
     * are, as the CPU does): make room for raw frames of up to
     * max_w×max_h (geo raw_w/raw_h grow to that; never shrink). Keeps the
     * history, the reference and every plane. May allocate: the driver
     * calls it only when a raw frame larger than any before arrives. */
    ss_err_t (*raw_reserve)(ss_backend_t *b, int max_w, int max_h);

    /* §2: HIPASS becomes the reference (REFERENCE, its pyramid, REF_S,
     * REF_GX, REF_GY). */
    ss_err_t (*set_reference)(ss_backend_t *b);
    /* §2a: HIPASS against the reference. */
    ss_err_t (*register_coarse)(ss_backend_t *b, ss_coarse_t *out);
    /* §2b: from (sx0, sy0), as ss_register_fine: the CPU through it with
     * its own pass of sums, CUDA on the device with the same decisions
     * (fine_core.h). */
    ss_err_t (*register_fine)(ss_backend_t *b, double sx0, double sy0, ss_shift_t *out);
    /* Optional (NULL: the driver calls register_coarse, then, when its
     * result is ok, register_fine from its (dx, dy)): both as one op, with
     * the same results, so that the backend may keep the coarse result
     * where it is (CUDA: the peaks, the vote, the refinement and every
     * fine pass run as one segment on the device, with one host wait at
     * its end). *out is zeroed when the coarse step fails. */
    ss_err_t (*register_frame)(ss_backend_t *b, ss_coarse_t *coarse, ss_shift_t *out);
    /* Optional (NULL: the driver registers, solves the weights on the
     * host and predicts op by op; the CPU runs these steps itself, CUDA
     * on the device): register_frame, then the prediction from the shift
     * it finds, with no host round trip between them: the
     * plan (ss_pc_plan of wp: offsets, poly weights, the re-weighting
     * block, the mask's guide threshold), whiten of history slots
     * slots[0..wp->n-1] with it, guided (radius, eps; the mask gm, its tl
     * planned, when wp->masked; NULL otherwise) and noise of CLEAN kept
     * as the frame's σ. Enqueues and returns. When the coarse step cannot
     * run at all, nothing is enqueued and coarse->why says why (empty
     * otherwise). After a failed registration the planes hold what a safe
     * plan (zero weights) made: the driver discards them. */
    ss_err_t (*predict_planned)(ss_backend_t *b, const ss_wplan_t *wp, const int *slots,
                                int radius, float eps, const ss_gmask_t *gm,
                                ss_coarse_t *coarse);
    /* After the detect that follows predict_planned (called before it, it
     * waits): the registration's results as register_frame gives them,
     * and, when it found a shift, the plan's offsets ix, iy and weights a
     * (wp->n each) with *planned 1, or *planned 0 where the weights are
     * singular (the frame fails, as on the host). */
    ss_err_t (*predict_take)(ss_backend_t *b, ss_coarse_t *coarse, ss_shift_t *out, int *ix,
                             int *iy, double *a, int *planned);

    /* §3: lsq moments and whitening of FRAME against n history frames:
     * frame k is history slot slots[k], read at integer offset (ix[k],
     * iy[k]) as in ss_hist_view_t. whiten writes PREDICTION and RESIDUAL
     * (ss_whiten): rw (poly mode, rw->n == n; the driver fills it once per
     * frame, the backend copies what it needs before returning) re-weights
     * pixels with invalid history, NULL keeps the strict rule (lsq). */
    ss_err_t (*lsq_moments)(ss_backend_t *b, const int *slots, const int *ix, const int *iy,
                            int n, double *R, double *p);
    ss_err_t (*whiten)(ss_backend_t *b, const int *slots, const int *ix, const int *iy,
                       const double *a, int n, const ss_reweight_t *rw);
    /* §4: RESIDUAL, PREDICTION -> CLEAN (radius 0: CLEAN = RESIDUAL).
     * cfg->guided_laplacian picks the two-channel ss_guided_filter2 (the
     * default) or the one-channel ss_guided_filter; mask (NULL: none)
     * as in those (the backend copies it before returning). */
    ss_err_t (*guided)(ss_backend_t *b, int radius, float eps, const ss_gmask_t *mask);
    /* §5: σ of a plane (RESIDUAL or CLEAN): ss_noise_clipped, into
     * *sigma; with sigma NULL it is not read back: it stays with the
     * backend as the frame's σ (on CUDA on the device), which matched,
     * modelvar and detect use when given SS_SIGMA_FRAME and frame_stats
     * returns. */
    ss_err_t (*noise)(ss_backend_t *b, ss_plane_t which, int stride, float *sigma);
    /* §6: CLEAN -> SNR (ss_matched_filter; phases as configured, <= 0 =
     * auto; sigma > 0, or SS_SIGMA_FRAME). */
    ss_err_t (*matched)(ss_backend_t *b, double psf_sigma, int phases, float sigma);
    /* §6b, after matched: PREDICTION -> STAR (the template D,
     * ss_star_template with radius r, psf_sigma and sigma), the fit's
     * samples (ss_mv_gather of SNR and STAR with stride and tmin), β =
     * ss_mv_beta of them, SNR to SNR_RAW and ss_mv_apply(SNR, STAR, β).
     * sigma as in matched. Nothing comes back to the host here
     * (frame_stats). */
    ss_err_t (*modelvar)(ss_backend_t *b, int r, double psf_sigma, float sigma, int stride,
                         float tmin);
    /* The frame's σ (*sigma: the last noise op's), the last modelvar's β
     * (*beta) and its number of samples (*n). Call after the detect that
     * follows them, which brings them back on CUDA; called before, it
     * waits for them. */
    ss_err_t (*frame_stats)(ss_backend_t *b, float *sigma, float *beta, int *n);
    /* §7: SNR -> LABELS (every component; ss_label_seeded with growth on
     * SNR_RAW and seeds on SNR when the last of matched, write_plane of
     * SNR (both: no), modelvar and write_plane of SNR_RAW (both: yes) left
     * SNR_RAW as this z before its division; else growth and seeds on
     * SNR), then
     * measurement of SNR, CLEAN and RESIDUAL into out: the
     * ss_detect_keep most significant eligible components, most
     * significant first, truncated exact (ss_measure_rank), whatever the
     * backend's accumulator capacity (sigma as in matched: the flux
     * errors). */
    ss_err_t (*detect)(ss_backend_t *b, float sigma, ss_detlist_t *out);
    /* Object removal and storage of FRAME into history slot `slot`
     * (removal uses LABELS and PREDICTION when remove != 0). */
    ss_err_t (*history_store)(ss_backend_t *b, int slot, int remove, int radius);

    /* Copy a plane out of / into the backend (slot for HISTORY). dst/src
     * are host buffers of w·h elements of the plane's type. */
    ss_err_t (*read_plane)(ss_backend_t *b, ss_plane_t p, int slot, void *dst);
    ss_err_t (*write_plane)(ss_backend_t *b, ss_plane_t p, int slot, const void *src);

    /* Timings of the last frame's stages (ms, -1 = not measured). */
    void (*stage_times)(ss_backend_t *b, double ms[SS_STAGE__COUNT]);
    /* Device memory in use / total (bytes); 0/0 on the CPU. */
    void (*memory)(ss_backend_t *b, size_t *used, size_t *total);

    /* Optional (NULL when the backend gains nothing from it): start moving
     * the raw frame that will be ingested next to the backend, so that the
     * copy overlaps the current frame's work; `next` stays untouched
     * until its own processing has returned. */
    ss_err_t (*prefetch)(ss_backend_t *b, const ss_frame_t *next);

    /* Optional (NULL: the work runs as it is enqueued): start the work
     * enqueued so far and return at once, so that it runs while the
     * driver does host work (the last frame's tracking) before its next
     * op. */
    ss_err_t (*launch)(ss_backend_t *b);

    /* Optional (NULL: the driver reads the residual with read_plane):
     * start copying CLEAN into dst — host memory from host_alloc, w·h
     * floats — after the work enqueued so far, and return at once, with a
     * ticket for read_wait. Later work runs on concurrently (matched
     * filter, detection, the next frame's first stages); the backend keeps
     * it from overwriting CLEAN until the copy is through. Other planes:
     * SS_ERR_INVALID. */
    ss_err_t (*read_begin)(ss_backend_t *b, ss_plane_t p, void *dst, uint64_t *ticket);
    /* Wait until the copy of that ticket (and every earlier one) has
     * landed; an error of the copy fails it. */
    ss_err_t (*read_wait)(ss_backend_t *b, uint64_t ticket);

    /* The residual's optional forms (outputs.h), made from CLEAN where it
     * lives, so that only their bytes travel: its binary16 (ss_f16_bits)
     * into half (w·h values; NULL: none) and the boxes of st into
     * st->pixels (st NULL or st->count 0: none), both host memory from
     * host_alloc or malloc. Starts after the work enqueued so far and may
     * return before the copies landed, with a ticket for read_wait (the
     * CPU completes them at once); later work does not disturb them. */
    ss_err_t (*read_forms)(ss_backend_t *b, uint16_t *half, ss_stamps_t *st, uint64_t *ticket);
} ss_backend_ops_t;

extern const ss_backend_ops_t ss_backend_cpu;
/* The CUDA backend; NULL when built without CUDA. */
const ss_backend_ops_t *ss_backend_cuda_ops(void);

/* Pick a backend by kind: AUTO takes cuda when built and probe() succeeds,
 * else cpu (logging one line why). Returns NULL (and a reason) when CUDA
 * was asked for explicitly and is unavailable. */
const ss_backend_ops_t *ss_backend_select(ss_backend_kind_t kind, int device, char *why,
                                          size_t why_len);

#ifdef __cplusplus
}
#endif
#endif
