/*
 * cu_backend.h — the CUDA backend's instance (struct ss_backend) and the
 * interfaces between its parts, private to cuda/:
 *  - the executor (cu_exec.c): checked calls and the sticky broken state,
 *    segments of steps, the graph cache, events, timers;
 *  - the memory plan (cu_memplan.c): every device and pinned buffer of an
 *    instance as a table entry (size, start, when), allocated and freed
 *    by one loop each;
 *  - the steps and the ops of pipeline/backend.h (backend_cuda.c), whose
 *    head comment tells how the three work together.
 */
#ifndef SS_CU_BACKEND_H
#define SS_CU_BACKEND_H

#include "cuda/backend_cuda.h"
#include "cuda/cu_internal.h"

#include <cuda_runtime_api.h>

#define MAX_STEPS 64            /* steps in one segment (a frame is one segment) */
#define MAX_GRAPHS 32           /* cached graph shapes per instance */
#define MAX_TIMERS 256          /* event pairs per frame */
#define HOST_ACC 4096           /* accumulators in the pinned read-back buffer */
#define RD_RING 4               /* events of the asynchronous residual reads */
/* Up to this many samples (and what fits in the cluster's shared memory)
 * a selection runs as one cluster (k_sel_cluster): eight SMs stream their
 * share six times in less time than the grid-wide launches take up to
 * about this many; at 262,144 the grid-wide passes win (PERFORMANCE.md,
 * 2026-11-25 17:53Z). β's median (cu_select_median_buf) counts samples on
 * the device, mostly far fewer than its buffer holds: it takes the
 * cluster whenever the buffer fits. */
#define SEL_SMALL_MAX 131072

typedef cudaError_t (*step_fn)(ss_backend_t *b, cudaStream_t s, int variant);

typedef struct step {
    step_fn fn;
    int variant;
    int stage;                  /* ss_stage_id_t for the timed mode */
    unsigned lane;              /* STEP_SIDE, STEP_BESIDE or 0 */
} step_t;

/* What a step asks of the segment it runs in (cx_enqueue_with): cx_flush acts
 * on the union over the pending steps (b->seg_needs). */
enum {
    STEP_WRITES_CLEAN = 1,      /* an earlier frame's residual download must have left CLEAN */
    STEP_REWEIGHT = 2,          /* the parameter block's whole plan goes up too */
    STEP_PLAN = 4,              /* ... its plan without the re-weighting block */
    STEP_PLAN_IN = 8,           /* ... the inputs of the device's plan (k_plan) */
    /* where the step runs (run_steps): by default on cs, after the side
     * lane's work (joined). STEP_SIDE: on the side lane ps, after what cs
     * has so far, beside the steps after it; it may write only the star
     * map's scratch (d_gs[0..4]). STEP_BESIDE: on cs without the join:
     * the step neither reads nor writes d_gs, PREDICTION or what a side
     * step writes. */
    STEP_SIDE = 16,
    STEP_BESIDE = 32,
};
#define STEP_LANES (STEP_SIDE | STEP_BESIDE)

typedef struct graph_entry {
    int nsteps;
    step_fn fn[MAX_STEPS];
    int variant[MAX_STEPS];
    unsigned lane[MAX_STEPS];
    cudaGraphExec_t exec;
    unsigned long last_used;
} graph_entry_t;

typedef struct timer {
    cudaEvent_t a, b;
    int stage;                  /* -1: a whole segment (graph mode) */
    int copy;                   /* 1: a host<->device copy (not compute) */
} timer_t_;

struct ss_backend {
    const ss_pipeline_cfg_t *cfg;
    ss_geometry_t geo;
    int w, h;
    size_t npix;
    int device, sms;
    int gshare;                     /* the feeds on the device (cfg->device_feeds at create):
                                     * the guided filter's grid fills 1/gshare of it, the
                                     * fine sums take fewer warps a tile (cu_fine) */
    int broken;
    long errors;
    int capturing;

    cudaStream_t cs, xs;            /* compute, copy (uploads) */
    cudaStream_t ds;                /* downloads of read_begin (the other copy engine) */
    /* the output lane: a step's small results to the host's mapped mirror
     * (cx_copy_out) beside the steps after it, joined back into cs at the
     * end of the segment (out_open: a copy since the last join) */
    cudaStream_t os;
    cudaEvent_t ev_fork, ev_join;
    int out_open;
    cudaStream_t ps;                /* the side lane (STEP_SIDE) */
    int lanes;                      /* the lanes are used (a feed alone on its device:
                                     * gshare 1); else every step runs in order on cs */
    int mv_hp_r;                    /* the star map's high-passes of radius mv_hp_r are
                                     * enqueued on the side lane for this PREDICTION
                                     * (st_mv_hipass; 0: none) */
    cudaEvent_t ev_done, ev_param;
    cudaEvent_t ev_up[2], ev_free[2];
    cudaEvent_t ev_ready;           /* CLEAN computed: a download may start */
    cudaEvent_t ev_rd[RD_RING];     /* download k done (ticket k, slot k % RD_RING) */
    uint64_t rd_issued;             /* tickets handed out */
    /* the residual's optional forms (read_forms): made on cs into d_half and
     * d_stamps (boxes from h_boxes through d_boxes), copied down on ds */
    uint16_t *d_half;               /* npix */
    float *d_stamps;                /* SS_STAMP_PIXELS_MAX */
    cu_box_t *d_boxes, *h_boxes;    /* SS_STAMPS_MAX; h_boxes pinned */
    cudaEvent_t ev_boxes;           /* the last upload of h_boxes done */
    uint64_t forms_ticket;          /* the last forms download (0: none), which may still
                                     * read d_half / d_stamps */
    int rd_guard;                   /* a download of CLEAN may still be running: work
                                     * that writes CLEAN waits for the last one first */
    /* a download that waits on a point inside the pending segment: the
     * segment records ev_mark there (cx_mark_step, an external event node
     * when captured), cx_flush issues the copy on ds after the launch */
    cudaEvent_t ev_mark;
    struct {
        int pending;
        void *dst;
        const void *src;
        size_t bytes;
        uint64_t ticket;
    } dl;
    uint64_t dl_dropped;            /* a deferred download's ticket whose segment was
                                     * dropped (its bytes never come) */
    /* the history cleaning's noise (a selection over frame - median) is
     * selected at ingest, for the registration input; the store reuses it
     * unless a written plane made it stale */
    int clean_sigma_stale;

    /* device memory */
    size_t dev_bytes;
    size_t raw_bytes;               /* each raw buffer: geo.raw_w×raw_h pixels (raw_reserve) */
    void *d_raw[2];
    uint8_t *d_rawvalid[2];
    float *d_dark, *d_flat, *d_bias;
    /* the overscan of each processed row: the host writes the pinned
     * mirror at ingest, flush() copies it up with the parameter block */
    double *d_row_bias, *h_row_bias, *m_row_bias;
    int row_bias_dirty;
    uint8_t *d_bad;
    uint16_t *d_hits;
    uint8_t *d_learned;
    float *d_plane[SS_PLANE__COUNT];
    unsigned seg_needs;             /* STEP_* of the pending steps (cx_enqueue_with) */
    int sigma_dev;                  /* the last noise op kept σ on the device (d_res) */
    int stats_pending;              /* σ (sigma_dev), β and count not yet read back */
    int grow_raw;                   /* SNR_RAW holds this frame's z before the model-error
                                     * division (modelvar): detection grows on it */
    int32_t *d_labels;
    uint8_t *d_hist;
    size_t hist_slot_bytes;
    int L;
    float *d_ref_lvl[SS_MAX_LEVELS + 1], *d_cur_lvl[SS_MAX_LEVELS + 1];
    int lw[SS_MAX_LEVELS + 1], lh[SS_MAX_LEVELS + 1];
    float *d_gs[6];                 /* guided scratch: A/A1, B/A2, B, L, p − c2·Q, mask box rows */
    float *d_misc;                  /* misc: c */
    int32_t *d_parent;
    uint8_t *d_u8;
    int *d_chunk;
    cu_acc_t *d_acc;
    int max_comp;                   /* accumulators: min(CU_MAX_COMPONENTS, ss_comp_bound) */
    /* a frame with more components than accumulators (cu_detect_overflow):
     * per component its key and area, for every component the frame can
     * hold; allocated only when ss_comp_bound(w, h) > max_comp */
    unsigned long long *d_pkey;
    int *d_parea;
    cu_topk_t *d_topk;
    int ncomp_max;
    ss_rank_t *h_rank;              /* max_comp: the host's ranking of the accumulators */
    double *d_partials, *d_lsq;
    double *d_lsq_m;                /* the lsq solve's scratch (k_lsq_solve) */
    unsigned int *d_counter;
    uint32_t *d_rwlist;             /* whitening: pixels to re-weight (npix) */
    unsigned int *d_rwcount;        /* and how many */
    cu_sel_ws_t *d_sel;
    float *d_selbuf;                /* npix: compacted samples of a selection */
    cu_params_t *d_params, *h_params;
    cu_results_t *d_res, *h_res;
    cu_acc_t *h_acc;                /* pinned, HOST_ACC */
    /* the pinned mirrors as the device addresses them (mapped): the small
     * transfers are kernel copies (cu_copy_small), off the copy engines */
    cu_params_t *m_params;
    cu_results_t *m_res;
    cu_plan_out_t *h_plan, *m_plan; /* the device's plan (predict_planned) */
    cu_acc_t *m_acc;
    double *m_lsq;
    cu_acc_t *h_acc_big;            /* pageable, the rest (rare) */
    double *h_lsq;                  /* pinned */
    /* the coarse step's star peaks ([0, cap) the frame's, [cap, 2·cap) the
     * reference's), their counts, and the vote's histogram, all on the
     * device (k_vote.cu) */
    ss_peak_t *d_peaks;
    unsigned int *d_npeaks;                 /* [0] cur, [1] ref */
    int *d_vote_hist;                       /* (2·SS_COARSE_MAX_R + 1)², zero between votes */
    int ref_peaks_valid;                    /* the reference's top peaks are in d_res */
    long plan_waits;                        /* waits when predict_planned was enqueued */
    long long sel_small_max;        /* selections of up to this many samples: one cluster */
    long long sel_buf_max;          /* β's median, with a buffer of up to this many */
    long long sel_cluster_max;      /* either, as far as the cluster's shared memory holds them */

    /* host state */
    int hp_frames;
    step_t pending[MAX_STEPS];
    int npending;
    graph_entry_t graphs[MAX_GRAPHS];
    int ngraphs;
    unsigned long clock;
    long launches;
    long waits;                     /* host waits for the compute stream (cx_wait_done) */
    int timed, use_graphs;

    int raw_cur;                    /* raw buffer of the last ingested frame */
    int seg_raw_buf;                /* raw buffer the pending segment reads (-1: none) */
    int upload_pending;
    struct {                        /* a prefetched frame waiting in raw buffer k */
        int pending;
        const void *pixels, *valid;
        uint64_t seq;
    } pref[2];

    timer_t_ timers[MAX_TIMERS];
    int ntimers;
    double host_ms[SS_STAGE__COUNT];    /* wall time inside the ops since the last ingest */
};

/* ---- the executor (cu_exec.c) ------------------------------------------ */

/* Errors after which the context is unusable: the instance is broken for
 * good. */
int cx_is_sticky(cudaError_t e);
/* Forget the pending segment (and end a capture in progress). */
void cx_drop_pending(ss_backend_t *b);
/* A failed CUDA call: counted, logged with its text, file and line, the
 * pending segment dropped; SS_ERR_BROKEN for a sticky error (the instance
 * refuses every later op), else SS_ERR_BACKEND. */
ss_err_t cx_fail(ss_backend_t *b, cudaError_t e, const char *what, const char *file, int line);

/* Around the calls that may synchronise the whole device (cudaMalloc,
 * cudaFree, cudaHostAlloc, cudaFreeHost, cudaDeviceSynchronize): such a
 * call invalidates a graph capture running on another instance's stream
 * (8 feeds starting together on one H100: two failed their first frames),
 * so those calls and every capture hold this process-wide lock (it nests
 * within a thread). */
void cx_unsafe_begin(void);
void cx_unsafe_end(void);

/* A CUDA call inside an op: on failure, cx_fail and return its code. */
#define CK(b, call)                                                         \
    do {                                                                    \
        const cudaError_t e_ = (call);                                      \
        if (e_ != cudaSuccess)                                              \
            return cx_fail((b), e_, #call, __FILE__, __LINE__);             \
    } while (0)

/* The same inside step functions, which return cudaError_t. */
#define SK(call)                                                            \
    do {                                                                    \
        const cudaError_t e_ = (call);                                      \
        if (e_ != cudaSuccess)                                              \
            return e_;                                                      \
    } while (0)

/* Every op starts here: broken instances refuse, the device is made
 * current for this thread, and a raw upload from the previous ingest is
 * completed (the caller's frame buffer is free once this returns). */
ss_err_t cx_op_begin(ss_backend_t *b);
/* In the timed mode ops run at once, so each is timed inside its frame. */
ss_err_t cx_op_end(ss_backend_t *b);
/* An event pair around work on s, for stage (-1: a whole segment); NULL
 * when the frame's timers are used up. */
timer_t_ *cx_timer_start(ss_backend_t *b, cudaStream_t s, int stage, int copy);
void cx_timer_stop(ss_backend_t *b, timer_t_ *t, cudaStream_t s);
/* Before the host writes the parameter mirror for a new segment, the
 * previous segment's copy of it must have left. */
ss_err_t cx_params_begin(ss_backend_t *b);
/* Append a step to the pending segment, with what it needs of the
 * segment (STEP_*); a full segment is flushed first. */
ss_err_t cx_enqueue_with(ss_backend_t *b, step_fn fn, int variant, int stage, unsigned needs);
ss_err_t cx_enqueue(ss_backend_t *b, step_fn fn, int variant, int stage);
/* Run the pending segment: parameters up, then the steps (timed one by
 * one, replayed from a cached graph, or launched directly), then ev_done. */
ss_err_t cx_flush(ss_backend_t *b);
/* The download of bytes from src to the pinned dst, after what the
 * pending segment has enqueued so far, under ticket (its event ev_rd):
 * a mark step joins the segment, and cx_flush issues the copy on ds once
 * the segment is launched. One at a time (an earlier one is flushed out
 * first). A step that writes CLEAN flushes a pending one out first. */
ss_err_t cx_defer_download(ss_backend_t *b, void *dst, const void *src, size_t bytes,
                           uint64_t ticket);
/* Inside a step running on s: the copy of bytes from device src to the
 * host's mapped mirror dst (cu_copy_small) on the output lane, after
 * what s has so far, so that the steps after it do not wait for it. The
 * segment's end waits for it (ev_done, and so the host). Only for values
 * the rest of the segment leaves alone or rewrites and copies again.
 * Without b->lanes, or timed, it is a copy on s. */
cudaError_t cx_copy_out(ss_backend_t *b, cudaStream_t s, void *dst, const void *src,
                        size_t bytes);
/* Flush and wait for this segment only (its last copy to the host). */
ss_err_t cx_flush_wait(ss_backend_t *b);
ss_err_t cx_wait_done(ss_backend_t *b);

/* ---- the memory plan (cu_memplan.c) ------------------------------------ */

/* Allocate and start every buffer of the plan for b's geometry (b->npix,
 * geo, L and the level sizes, max_comp and ncomp_max set): the device
 * buffers (zero, NaN, ones, or the calibration masters of calib copied
 * in), the pyramid levels, the pinned mirrors (zeroed; mapped ones with
 * their device addresses). b->dev_bytes counts the device bytes. On
 * failure *what names the call that failed; what was allocated stays for
 * cm_plan_free. */
cudaError_t cm_plan_alloc(ss_backend_t *b, const ss_calib_data_t *calib, const char **what);
/* Free every buffer of the plan that was allocated (and NULL it). */
void cm_plan_free(ss_backend_t *b);

#endif
