/*
 * pipeline.h — one feed's processing chain, backend-neutral: the driver
 * that owns the policy of ALGORITHM.md (reference, re-reference, history
 * ring and shifts, weights, failures, slews) and calls a backend for the
 * pixel work. It sees frames and config; nothing about sockets or files
 * (except loading the calibration frames named in the config, at start).
 */
#ifndef SS_PIPELINE_H
#define SS_PIPELINE_H

#include "backend.h"
#include "track.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ss_frame_status {
    SS_STATUS_OK = 0,           /* residual and detections produced */
    SS_STATUS_REFERENCE,        /* became the reference (start, reset, slew); stored */
    SS_STATUS_WARMUP,           /* registered and stored; too little history for a residual */
    SS_STATUS_REG_FAILED,       /* registration failed: no detection, not stored */
    SS_STATUS_ERROR,            /* the backend failed this frame */
    SS_STATUS__COUNT
} ss_frame_status_t;

const char *ss_status_name(ss_frame_status_t s);   /* "ok" "reference" "warmup" "regfail" "error" */

/* What one frame produced. Buffers are allocated once by ss_result_init. */
typedef struct ss_result {
    ss_frame_meta_t meta;           /* copied from the input frame */
    int width, height;              /* processed (roi) size */
    int origin_x, origin_y;         /* the processed region's first pixel in the input frame;
                                     * detections are in input-frame pixel coordinates */
    ss_frame_status_t status;
    char reason[160];               /* why, for REG_FAILED / ERROR / REFERENCE */
    ss_coarse_t coarse;
    ss_shift_t shift;               /* against the current reference */
    int rereferenced;               /* 1: this frame became the new reference */
    /* registered frames (reference, warm-up, ok): the offset o of this
     * frame in the registered frame (pixel x is at x + o: the shift against
     * the reference plus the re-references since the last reset), and the
     * plate-solve epoch it belongs to (ss_pipeline_set_sky) */
    int reg_known;
    double reg_x, reg_y;
    uint64_t sky_epoch;
    int sky_solved;                 /* 1: meta's WCS is the plate solution's, carried
                                     * over through reg_x/y (the frame had none) */
    int history_reset;              /* 1: the history was reset at this frame */
    int history_len;                /* frames used for the prediction */
    float sigma;                    /* noise of the cleaned residual (NaN if none) */
    float model_beta;               /* β of the model-error term (noise.model_error; 0: none
                                     * or off): z was divided by sqrt(1 + β·t²) */
    int model_samples;              /* star pixels its fit had */
    int n_weights;
    double weights[SS_MAX_HISTORY];
    int has_residual;               /* residual holds width×height floats (every frame
                                     * handled, i.e. any status but ERROR) */
    float *residual;                /* the cleaned residual r', NaN = invalid; all NaN
                                     * for frames without a prediction */
    size_t residual_capacity;       /* floats */
    ss_host_allocator_t residual_alloc; /* how residual was allocated (alloc NULL: malloc) */
    int residual_pending;           /* 1: the residual or its forms are still arriving
                                     * (ss_pipeline_start): read them only after
                                     * ss_pipeline_finish */
    uint64_t residual_ticket;       /* the backend's read_begin / read_forms ticket */
    /* the optional forms (ss_pipeline_set_outputs; final, like residual,
     * after ss_pipeline_finish) */
    int has_residual16;             /* residual16 holds width×height binary16 values:
                                     * ss_f16_bits of the float32 residual (NaN: 0x7E00) */
    uint16_t *residual16;           /* residual_capacity values, from residual_alloc */
    int has_stamps;                 /* stamps holds the cut-outs around dets (ok frames) */
    ss_stamps_t stamps;             /* boxes in residual pixels; pixels from residual_alloc */
    ss_detlist_t dets;
    ss_tracklist_t tracks;          /* confirmed tracks linked, coasting or ended at this
                                     * frame (pipeline.track; empty when off) */
    int tracks_pending;             /* 1: the tracks, the detections' track ids and
                                     * the stored frames' cleaning are still to come
                                     * (ss_pipeline_start): final after
                                     * ss_pipeline_finish */
    ss_phot_zp_t zp;                /* the zero point the detections' magnitudes used
                                     * (photometry.h; source NONE: no magnitudes) */
    double stage_ms[SS_STAGE__COUNT];
    double total_ms;                /* wall time of ss_pipeline_process: of its start,
                                     * plus its tracking wherever that ran (final after
                                     * ss_pipeline_finish) */
    double track_ms;                /* of which the tracking: the tracker's step and the
                                     * stored frames' cleaning (final after finish) */
    /* a decoded message's number on its topic (PROTOCOL.md §2, "Gaps"),
     * valid when has_topic_seq; not set by the pipeline */
    uint64_t topic_seq;
    int has_topic_seq;
} ss_result_t;

/* Room for frames of up to max_pixels and up to max_dets detections.
 * Returns 0, or -1 on allocation failure. */
int ss_result_init(ss_result_t *r, size_t max_pixels, int max_dets);
/* The same with the residual in memory from alloc (NULL: malloc). */
int ss_result_init_with(ss_result_t *r, size_t max_pixels, int max_dets,
                        const ss_host_allocator_t *alloc);
void ss_result_free(ss_result_t *r);

typedef struct ss_pipeline ss_pipeline_t;

/* Counters since creation (monotonic). */
typedef struct ss_pipeline_stats {
    uint64_t processed;             /* frames through ss_pipeline_process */
    uint64_t status[SS_STATUS__COUNT];
    uint64_t detections;
    uint64_t detections_truncated;  /* components found but not reported (dets.truncated) */
    uint64_t resets;                /* history resets (slew, size change, request) */
    uint64_t rereferences;
    uint64_t slack_frames;          /* frames processed at the current geometry although their
                                     * own region's size differed, or they held only part of
                                     * the roi (pipeline.geometry_slack) */
    uint64_t backend_planned;       /* frames whose prediction the backend planned from its
                                     * own shift (ss_pipeline_set_backend_plan) */
} ss_pipeline_stats_t;

/* Create a pipeline for one feed. cfg is copied. The backend is chosen
 * now (ss_backend_select) and instantiated on the first frame (its
 * processed region fixes the geometry; raw frames may vary in size around
 * it, and regions within cfg->geometry_slack of it are processed at it).
 * Calibration files named in cfg are read now.
 * Returns NULL with a message in err (err_len bytes) on failure. */
ss_pipeline_t *ss_pipeline_new(const ss_pipeline_cfg_t *cfg, const char *feed, char *err,
                               size_t err_len);
void ss_pipeline_destroy(ss_pipeline_t **p);

/* Whether the calibration files that cfg names (pipeline.bias, .dark,
 * .flat, .bad_pixels) can be read as masters and hold the processed
 * region: cfg's roi when set, else `region` (w = 0: not known yet, then
 * only readability). What start-up, --check-config and a reload check
 * before a frame would fail on them. Returns 0, or -1 with a message that
 * names the key in err. Reads each master whole (once). */
int ss_pipeline_check_calibration(const ss_pipeline_cfg_t *cfg, ss_roi_t region, char *err,
                                  size_t err_len);

/* Process one raw frame into res (res->residual and res->dets are reused).
 * Returns SS_OK when the frame was handled (see res->status, which may say
 * it failed registration); SS_ERR_BACKEND when the backend failed this
 * frame (res->status = ERROR, reason set); SS_ERR_BROKEN when the backend
 * is unusable for good; SS_ERR_SIZE when the frame is larger than the
 * result can hold. */
ss_err_t ss_pipeline_process(ss_pipeline_t *p, const ss_frame_t *frame, ss_result_t *res);

/* A zero point fitted against a catalogue (ss_phot_fit_zeropoint) for
 * the following frames of this feed, e.g. by plate solving on a reference
 * frame; NULL or source NONE forgets it. It counts below a configured
 * pipeline.photometry.zeropoint and above a header one (photometry.h).
 * Call from the thread that processes the feed's frames. */
void ss_pipeline_set_zeropoint(ss_pipeline_t *p, const ss_phot_zp_t *fitted);

/* A result buffer whose residual lives in the pipeline's backend's host
 * memory (pinned on CUDA): with it, the residual's download overlaps the
 * matched filter and detection of its frame (ss_pipeline_process) and,
 * through ss_pipeline_start, the next frame's work too. */
int ss_pipeline_result_init(ss_pipeline_t *p, ss_result_t *r, size_t max_pixels, int max_dets);

/* ss_pipeline_process split in two, so that frame t+1 can start while the
 * residual of frame t is still on its way from the device, and frame t's
 * tracking runs on the host while frame t+1's first stages run on the
 * device:
 *   ss_pipeline_start(p, f1, r1); ss_pipeline_finish(p, r0); ... use r0
 * start returns what ss_pipeline_process returns, with everything of res
 * final except, when res->residual_pending is set, the residual pixels,
 * and, when res->tracks_pending is set, the tracking: res->tracks, the
 * detections' track ids, and the cleaning of the stored frames along slow
 * tracks. The tracking of a frame runs in the next frame's start, once
 * that frame's first stages are on their way (or earlier, before anything
 * that changes what it reads: a reset, a new geometry, a reconfigure, a
 * failed frame, the pipeline's end), else in its finish, so that frames
 * are tracked in order and before the next prediction, as
 * ss_pipeline_process tracks them. finish waits for the residual (a no-op
 * when nothing is pending), completes the tracking, and returns SS_OK, or
 * SS_ERR_BACKEND / SS_ERR_BROKEN when the copy or the cleaning failed
 * (the result then says ERROR, the counters are corrected). Up to
 * SS_PIPELINE_INFLIGHT results may be pending; a result buffer must not
 * be reused or freed before its finish. Rebuilds, reconfigures and
 * ss_pipeline_destroy complete pending results first (their finish then
 * returns how that went). Without a backend read_begin, or with a
 * residual not from ss_pipeline_result_init, start reads synchronously. */
#define SS_PIPELINE_INFLIGHT 4
/* The detections from which a frame's tracking is worth overlapping with
 * the next frame's first stages: start then launches those stages
 * (backend launch) before it tracks, a second launch for that frame.
 * The host's work after a frame's wait, mostly the tracking, grows with
 * the detections: 0.66–0.77 ms for the bench's 4096² frames of 392 on the
 * GPU host, 0.012 ms for its 512² frames of 6 (docs/PERFORMANCE.md,
 * 2026-11-26); below this count, a frame stays one launch. */
#define SS_PIPELINE_OVERLAP_DETS 32
ss_err_t ss_pipeline_start(ss_pipeline_t *p, const ss_frame_t *frame, ss_result_t *res);
ss_err_t ss_pipeline_finish(ss_pipeline_t *p, ss_result_t *res);

/* Tell the backend which frame comes next (after the one about to be
 * processed), so that its upload overlaps the current frame's work
 * (CUDA). A no-op when the backend does not prefetch, before the first
 * frame, or when `next` is of another pixel type or larger than any raw
 * frame so far. `next` must stay
 * untouched until ss_pipeline_process(p, next, ...) has returned. */
void ss_pipeline_prefetch(ss_pipeline_t *p, const ss_frame_t *next);

/* What the results of the frames started from now on carry (outputs.h;
 * ss_outputs_default until called): the float32 residual (o->f32 = 0
 * leaves res->residual untouched and has_residual 0: nothing of it is
 * read from the backend), its binary16 (residual16) and the stamps of ok
 * frames. Frames without a prediction get all-NaN forms, and no stamps.
 * o is copied. */
void ss_pipeline_set_outputs(ss_pipeline_t *p, const ss_outputs_t *o);

/* Whether the backend may plan a frame's prediction from its own shift
 * (backend.h, predict_planned; on by default): the same results as the
 * driver's op-by-op path; on CUDA one host wait fewer per frame (the
 * plan runs on the device). Off is for the tests that compare the two. */
void ss_pipeline_set_backend_plan(ss_pipeline_t *p, int on);

/* Forget the history and reference; the next good frame becomes the
 * reference. */
void ss_pipeline_reset(ss_pipeline_t *p, const char *why);

/* A plate solution (pipeline/solve.h) for the frames without a WCS of
 * their own: keys (n of them, n = 0 forgets the solution) are the WCS of
 * a frame whose result said reg_x/reg_y = off_x/off_y and sky_epoch =
 * epoch. From the next frame on, every registered frame of that epoch
 * gets it in its result's meta (CRPIX moved by its offset against off),
 * and its detections RA/Dec. Returns 0, or -1 when epoch is over (a reset
 * or rebuild came since: the solution is dropped). Worker thread only. */
int ss_pipeline_set_sky(ss_pipeline_t *p, const ss_wcs_key_t *keys, int n, uint64_t epoch,
                        double off_x, double off_y);
/* The current plate-solve epoch (grows at each reset and rebuild). */
uint64_t ss_pipeline_sky_epoch(const ss_pipeline_t *p);

/* Apply a new config. Keys that the backend or geometry depend on
 * (backend, device, history, roi, calibration files) take effect through
 * a rebuild with a history reset; others at the next frame. Returns 0, or
 * -1 with err set (and the old config kept). */
int ss_pipeline_reconfigure(ss_pipeline_t *p, const ss_pipeline_cfg_t *cfg, char *err,
                            size_t err_len);

void ss_pipeline_get_stats(const ss_pipeline_t *p, ss_pipeline_stats_t *out);
const char *ss_pipeline_backend_name(const ss_pipeline_t *p);
/* Device memory used/total of the backend (0/0 on the CPU). */
void ss_pipeline_memory(ss_pipeline_t *p, size_t *used, size_t *total);
/* The backend instance (tests, bench); NULL before the first frame. */
ss_backend_t *ss_pipeline_backend(ss_pipeline_t *p, const ss_backend_ops_t **ops);
/* The k-th newest stored history frame (tests): its backend slot (read
 * with ops->read_plane(SS_PLANE_HISTORY, slot)), its shift against the
 * current reference (its px + shift = reference px) and seq, the
 * pipeline's count of processed frames when it was stored (1: the first).
 * 0, or -1 when fewer than k + 1 frames are stored. */
int ss_pipeline_history_entry(const ss_pipeline_t *p, int k, int *slot, double *sx, double *sy,
                              uint64_t *seq);

#ifdef __cplusplus
}
#endif
#endif
