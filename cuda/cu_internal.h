/*
 * cu_internal.h — what the CUDA backend's host code (backend_cuda.c, plain
 * C) and its kernels (k_*.cu) share: the device-side parameter and result
 * blocks, the launchers each .cu file exports (extern "C", each takes a
 * cudaStream_t and returns the cudaGetLastError() of its launches), and
 * sizes.
 *
 * Why parameters live in device memory: every launch that follows
 * registration reads its per-frame values (history pointers, offsets,
 * weights, radius, eps, sigma, ...) from one device block (cu_params_t)
 * that the host fills through one pinned mirror and one copy per segment.
 * Kernel arguments are then fixed pointers, so a captured CUDA graph stays
 * valid from frame to frame and is only re-captured when the shape of the
 * work changes (not when the numbers do).
 *
 * Exactness: the kernels are compiled with --fmad=false, so that every
 * float/double operation rounds exactly as the C reference does; where the
 * reference fixes an order (taps ascending, history k ascending, raster
 * order of a block's SAD) the kernels keep it, and only reductions over
 * many pixels (sums of the fine registration, guided-filter windows,
 * measurement accumulators) round differently (in double).
 */
#ifndef SS_CU_INTERNAL_H
#define SS_CU_INTERNAL_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "pipeline/fine_core.h"
#include "pipeline/plan_core.h"
#include "pipeline/stages.h"

#ifdef __CUDACC__
#include <utility>

/* Programmatic dependent launch (Hopper). Every kernel of the chain is
 * launched through cu_launch, which lets it be scheduled before the work
 * before it in its stream has finished, and calls cu_pdl_wait first,
 * which waits until that work has completed and its writes are visible,
 * so the order is the stream's as before. What it saves is the launch gap
 * between dependent kernels (docs/PERFORMANCE.md, 2026-11-26). The two
 * test-only kernels (k_fault_write, k_div5_check) keep <<<>>> and no
 * wait. */
__device__ __forceinline__ void cu_pdl_wait(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

template <typename... ExpTypes, typename... ActTypes>
static inline cudaError_t cu_launch(void (*kernel)(ExpTypes...), dim3 grid, dim3 block,
                                    size_t smem, cudaStream_t s, ActTypes &&...args)
{
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cfg.attrs = at;
    cfg.numAttrs = 1;
    return cudaLaunchKernelEx(&cfg, kernel, std::forward<ActTypes>(args)...);
}
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- sizes ------------------------------------------------------------- */

#define CU_SEL_BINS 2048            /* radix-selection histogram (11 bits) */
#define CU_MAX_COMPONENTS (1 << 18) /* measured components per frame (as the CPU) */
#define CU_RED_BLOCKS 1024          /* fixed grid of the deterministic reductions */
#define CU_KTAPS (2 * SS_KERNEL_MAX_RADIUS + 1)
#define CU_CCL_TILE 32              /* CCL tiles are 32×32 pixels */
#define CU_CHUNK 1024               /* pixels per block in the label numbering */

/* Samplers of the exact radix selection (ALGORITHM §5 and the noise
 * estimates of §1 and §2a). */
enum {
    CU_SAMP_PLANE = 0,      /* a(x) at rows/columns that are multiples of stride */
    CU_SAMP_DIFF,           /* a(x) - b(x) at the same grid (hot-pixel d) */
    CU_SAMP_HDIFF           /* a(x+1,y) - a(x,y), even rows, every x (coarse level noise) */
};

typedef struct cu_sampler {
    const float *a, *b;
    int w, h, kind, stride;
} cu_sampler_t;

/* One radix selection in progress (device). */
typedef struct cu_sel_state {
    unsigned int prefix, mask;
    long long rank, n;
    float result;
    int pad;
} cu_sel_state_t;

/* Workspace of a median + MAD selection pair. */
typedef struct cu_sel_ws {
    cu_sel_state_t st[2];           /* 0: median, 1: MAD around it */
    unsigned int counter;           /* blocks done in the current pass */
    unsigned int ncomp;             /* samples compacted into the scratch buffer */
    unsigned long long clip[3];     /* mode 2: Σq, Σq², n (two's complement) */
    unsigned int hist[CU_SEL_BINS];
} cu_sel_ws_t;

/* Per-component accumulator on the device (ss_comp_acc_t encoded for
 * atomics: float maxima as order-preserving keys, zmax with its index). */
typedef struct cu_acc {
    double sw, swx, swy, swxx, swxy, swyy, sx, sy, flux, rpos;
    unsigned long long zkey;        /* key(zmax) << 32 | ~zidx: max = largest z, smallest index */
    unsigned long long rkey;        /* key(rmax) << 32 | ~ridx, the same way (0: no finite r) */
    double rwgt;                    /* max(s·r'(ridx), 0), after the pass (k_acc_finish) */
    float zn[4];                    /* s·z at zidx's neighbours, after the pass (k_acc_finish;
                                     * ss_peak_neighbours) */
    int area, x0, y0, x1, y1, invalid_nb, edge, sign;
    int kx0, ky0, kx1, ky1;         /* bbox of the seed pixels (s·z >= thresh) */
    int label;                      /* ±(index+1), set when initialised */
} cu_acc_t;

/* Workspace of the top-k selection of a frame with more components than
 * accumulators (cu_detect_overflow): an 8-bit radix selection of the
 * max_comp-th largest significance key among the eligible components. */
typedef struct cu_topk {
    unsigned long long prefix, mask;    /* the key bits found so far */
    int want;                       /* rank still sought among keys matching prefix */
    int all;                        /* every eligible component fits: no selection */
    int n_elig;                     /* components with area >= min_area */
    unsigned int counter;           /* slots handed out */
    unsigned int hist[256];
} cu_topk_t;

/* ---- the parameter block (device; host fills a pinned mirror) -------- */

typedef struct cu_params {
    /* ingest (ss_calibrate_frame's per-frame values) */
    const void *raw;                /* raw frame on the device */
    const uint8_t *raw_valid;       /* NULL: none */
    double sat;                     /* saturation (resolved) */
    int raw_w;                      /* this frame's width (raw frames vary in size) */
    int valid_w, valid_h;           /* the part of the roi it holds */
    double dark_scale;              /* t / t_dark */
    const double *row_bias;         /* roi.h overscan values on the device; NULL: none */
    double hot_k;
    int hot_learn_now;              /* window complete: learn and clear hits */
    int hot_need;                   /* hits that make a pixel learned at the window's end */
    int hot_need_early;             /* ... before it (ss_hotpix_update's incremental rule) */
    cu_sampler_t hot_samp;          /* d = frame - med, stride SS_HOTPIX_STRIDE */

    /* coarse registration */
    cu_sampler_t lvl_samp_ref, lvl_samp_cur;
    int vote_R;                     /* the vote's search range (c->reg_search) */
    double vote_ambiguity;          /* c->reg_ambiguity */

    /* fine registration (ss_fine_begin's arguments; the start when it
     * does not come from the refinement) */
    double fine_sx0, fine_sy0, fine_tol, fine_min_det;
    int fine_max_iter;

    /* whitening (the offsets and weights: the plan, below) */
    int n;
    const void *hist[SS_MAX_HISTORY];

    /* guided filter (the mask: the plan, below) */
    int gf_radius;
    float gf_eps;

    /* noise */
    cu_sampler_t noise_samp;

    /* matched filter */
    int mf_R;
    int mf_phases;                  /* sub-pixel phases per axis (ss_mf_phases_used) */
    float mf_sigma;                 /* the residual's σ */
    float mf_k[SS_MF_MAX_PHASES][CU_KTAPS];   /* ss_psf_kernel_phase of each phase */

    /* model-error term (§6b): the star map's matched filter (one kernel,
     * phase 0, at the residual's σ) and the fit's sampling (β: cu_results_t) */
    float mv_k[CU_KTAPS];           /* ss_psf_kernel */
    float mv_sigma;
    int mv_stride;
    float mv_tmin;

    /* detection */
    float thresh, thresh_low;
    int negative;
    int max_comp;                   /* accumulators kept */
    int min_area;                   /* components eligible for a detection */

    /* history store (and the sharp-outlier cleaning before it) */
    void *store_dst;
    int store_remove, store_radius;
    double clean_k, clean_ratio;
    cu_sampler_t clean_samp;        /* d = frame - med for its noise */

    /* ---- the plan: what the whitening and the guided filter read of
     * the frame's weights. The host fills it (whiten, guided: STEP_PLAN,
     * STEP_REWEIGHT), or k_plan from the device's shift (predict_planned:
     * the host fills only the inputs, STEP_PLAN_IN, and no segment copies
     * the rest over what k_plan wrote). The parts travel only with the
     * steps that ask for them (cx_flush): */
    /* inputs of the device's plan (plan_core.h; gm_in: the mask without
     * its guide threshold) */
    ss_wplan_t wp;
    ss_gmask_t gm_in;
    /* offsets, weights and the source mask (mode bit 2) */
    int ix[SS_MAX_HISTORY], iy[SS_MAX_HISTORY];
    double a[SS_MAX_HISTORY];
    ss_gmask_t gf_mask;
    /* the re-weighting at pixels with invalid history (poly): 6 KiB that
     * only the whitening reads */
    ss_reweight_t rw;
} cu_params_t;

#define CU_PARAMS_BASE_BYTES offsetof(cu_params_t, wp)      /* every segment */
#define CU_PARAMS_PLAN_IN_BYTES offsetof(cu_params_t, ix)   /* ... with k_plan */
#define CU_PARAMS_PLAN_BYTES offsetof(cu_params_t, rw)      /* ... with the host's plan */

/* ---- the result block (device; copied to a pinned mirror) ------------- */

/* The coarse step's result: the vote (ss_coarse_t's numbers; why:
 * SS_VW_*) and the shift refined from it (rdx, rdy: the vote's (dx, dy)
 * until the refinement has run). */
typedef struct cu_coarse {
    int ok, dx, dy, rdx, rdy, n_ref, n_cur, n_votes, n_second, why;
    double expected;
} cu_coarse_t;

typedef struct cu_results {
    float sigma;                    /* noise op (the frame's σ: written on the device, copied
                                     * with the detection's results) */
    float hot_sigma;                /* hot-pixel d noise (kept for inspection) */
    float clean_sigma;              /* noise of frame - med for the history cleaning */
    double noise_ref, noise_cur;    /* coarse level noise */
    cu_coarse_t coarse;             /* the coarse vote and refinement */
    int ntop[2];                    /* top peaks: [0] the frame's, [1] the reference's */
    ss_peak_t top[2][SS_COARSE_STARS];
    int np, nn;                     /* components, both signs, before truncation */
    int n_elig;                     /* eligible components (cu_detect_overflow) */
    unsigned int mv_count;          /* model-error fit samples (cu_mv_gather) */
    float mv_beta;                  /* their β (cu_mv_apply; ss_mv_beta) */
    double fine[2 * SS_FINE_BANDS * SS_FINE_NSUMS]; /* a pass's sums: [rows|columns][band][sum] */
    double fine_probe[2 * SS_FINE_BANDS * SS_FINE_NSUMS];   /* the match test's pass */
    ss_fine_state_t fine_st;        /* the fine registration's state (fine_core.h) */
    double corr[9 * 2];             /* refinement scratch: (sum, count) per candidate */
} cu_results_t;

/* The device's plan as the host gets it (k_plan writes it to the pinned
 * mirror): ok 0 when the registration failed or the weights are singular
 * (the parameter block then holds the safe plan: zero weights). */
typedef struct cu_plan_out {
    int ok, n;
    int ix[SS_MAX_HISTORY], iy[SS_MAX_HISTORY];
    double a[SS_MAX_HISTORY];
} cu_plan_out_t;

/* ---- launchers (each returns cudaGetLastError() after its launches) ---
 * Each names its CPU reference, the "gold" function whose result it must
 * give (to the bit where tests/check_cuda_parity.c says so). */

/* k_calib.cu */
/* gold: ss_calibrate_frame */
cudaError_t cu_calibrate(const cu_params_t *p, ss_dtype_t dt, ss_roi_t roi, const float *bias,
                         const float *dark, const float *flat, const uint8_t *bad, float *out,
                         cudaStream_t s);
/* gold: ss_median3x3 */
cudaError_t cu_median3x3(const float *in, int w, int h, float *out, cudaStream_t s);
/* gold: ss_hotpix_update (the hits and the learning) */
cudaError_t cu_hot_hits(const cu_params_t *p, const float *frame, const float *med,
                        const float *sigma, int w, int h, uint16_t *hits, uint8_t *learned,
                        cudaStream_t s);
/* gold: ss_hotpix_apply */
cudaError_t cu_hot_apply(const uint8_t *learned, float *frame, float *med, size_t n,
                         cudaStream_t s);
/* gold: backend_cpu.c's read_plane of BADMASK (static | learned) */
cudaError_t cu_badmask(const uint8_t *bad, const uint8_t *learned, size_t n, uint8_t *out,
                       cudaStream_t s);

/* k_select.cu: exact lower median and MAD of the sampler's finite samples.
 * mode 0: *out_f = (float)(1.4826·MAD); mode 1: *out_d = 1.4826·MAD/√2;
 * mode 2: *out_f = the clipped σ of ss_noise_clipped (gold), its window
 * sums in integers (noise_core.h). buf (or NULL): room for every sample,
 * where the first pass compacts the finite ones for the later passes. */
/* gold: ss_noise_mad, ss_noise_clipped */
cudaError_t cu_select_mad(const cu_sampler_t *samp, cu_sel_ws_t *ws, int mode, float *out_f,
                          double *out_d, int grid, float *buf, cudaStream_t s);
/* The same in one launch of one cluster (k_sel_cluster), for up to
 * nmax ≤ cu_select_cluster_max() samples: the sampler's (buf NULL), or
 * buf's as cu_select_median_buf takes them (mode -1: the median alone,
 * into ws as that writes it; ws is not read otherwise). */
/* gold: ss_noise_mad, ss_noise_clipped, ss_mv_beta's selection */
cudaError_t cu_select_cluster(const cu_sampler_t *samp, const float *buf,
                              const unsigned int *count, unsigned int bufcap, cu_sel_ws_t *ws,
                              int mode, float *out_f, double *out_d, long long nmax,
                              cudaStream_t s);
/* The most samples cu_select_cluster takes on the current device (0: none:
 * its cluster does not fit). */
long long cu_select_cluster_max(void);
/* The lower median of buf[0 .. min(*count, cap)) (all finite; *count on
 * the device): ws->st[0].result (NaN when there are none), the number in
 * ws->ncomp. No host round trip. */
/* gold: ss_mv_beta's selection (modelvar.c) */
cudaError_t cu_select_median_buf(const float *buf, const unsigned int *count, unsigned int cap,
                                 cu_sel_ws_t *ws, int grid, cudaStream_t s);

/* k_register.cu */
/* The registration input: FRAME cleaned of sharp outliers (σ from the
 * device, k and ratio from p) into sc[2], then its local mean of radius r
 * removed (sc[0], sc[1]: the row sums and counts) into out (HIPASS). */
/* gold: ss_clean_sharp, then ss_hipass */
cudaError_t cu_regin(const cu_params_t *p, const float *frame, const float *med,
                     const float *clean_sigma, int w, int h, int r, float *const *sc, float *out,
                     cudaStream_t s);
/* gold: ss_bin2 */
cudaError_t cu_bin2(const float *in, int w, int h, float *out, cudaStream_t s);
/* gold: ss_reference_prep */
cudaError_t cu_reference_prep(const float *ref, int w, int h, float *S, float *gx, float *gy,
                              cudaStream_t s);
/* The star peaks of a level (ss_is_peak above SS_COARSE_PEAK·*noise), in
 * no particular order, into dev (room for cap; device memory) with their
 * number added to *dev_count (may exceed cap; zero before: cu_top_peaks
 * clears it after use, and it starts zeroed). */
/* gold: ss_find_peaks (ss_is_peak; cu_top_peaks orders them) */
cudaError_t cu_peaks(const float *level, int w, int h, const double *noise, ss_peak_t *dev,
                     unsigned int *dev_count, int cap, cudaStream_t s);
/* From the vote's shift (res->coarse.rdx/rdy, level L) down the pyramid,
 * into the same; with no vote that holds (res->coarse.ok 0) nothing runs.
 * res->corr is zero before (cu_vote clears it) and after. */
/* gold: ss_coarse_refine */
cudaError_t cu_refine(float *const *ref_lvl, float *const *cur_lvl, const int *lw, const int *lh,
                      int L, cu_results_t *res, cudaStream_t s);
/* The whole fine registration on the device, no host round trip: up to
 * `passes` passes of the sums (ss_fine_sums into res->fine) each followed
 * by fine_core.h's decision, the probe pass (res->fine_probe), the errors
 * and the match test, into res->fine_st (ss_fine_report words it). The
 * start is p->fine_sx0/sy0, or with from_coarse the coarse step's result
 * on the device (res->coarse.rdx/rdy), and then nothing runs when its vote did
 * not hold. Passes the state no longer wants return at once. share:
 * the feeds on the GPU (pipeline.device_feeds), which sets the warps a
 * tile. partials: CU_RED_BLOCKS × SS_FINE_NSUMS. */
/* gold: ss_register_fine (each pass: ss_fine_sums) */
cudaError_t cu_fine(const cu_params_t *p, const float *cur, const float *ref, int w, int h,
                    int passes, int from_coarse, int share, double *partials,
                    unsigned int *counter, cu_results_t *res, cudaStream_t s);

/* k_vote.cu */
/* The first min(*count, SS_COARSE_PEAK_CAP, SS_COARSE_STARS) of the found
 * peaks (any order, level width w) in ss_peaks_order's order into top,
 * their number into *ntop; *count is cleared for the next cu_peaks. */
/* gold: ss_peaks_order */
cudaError_t cu_top_peaks(const ss_peak_t *peaks, unsigned int *count, int w, ss_peak_t *top,
                         int *ntop, cudaStream_t s);
/* The vote of the frame's top peaks against the reference's into
 * res->coarse (its shift also into rdx/rdy, the refinement's start);
 * res->corr cleared for the refinement. hist: (2·SS_COARSE_MAX_R + 1)²
 * ints, zero before and after. */
/* gold: ss_coarse_vote */
cudaError_t cu_vote(const cu_params_t *p, const ss_peak_t *ref, const int *nr, const ss_peak_t *cur,
                    const int *nc, int *hist, cu_results_t *res, cudaStream_t s);


/* k_plan.cu: the plan (offsets, weights, re-weighting block, mask) from
 * the registration's result in res and the inputs p->wp, p->gm_in, into
 * p and out (the host's mapped mirror); the safe plan (zero weights) and
 * out->ok 0 when the registration failed or the weights are singular. */
/* gold: ss_pc_plan (p->wp.lsq: ss_pc_offsets only; cu_lsq_solve does the rest) */
cudaError_t cu_plan(cu_params_t *p, const cu_results_t *res, cu_plan_out_t *out, cudaStream_t s);
/* The lsq weights of the n frames from the moments Rp (cu_lsq_moments'
 * layout) into p->a and out, with the mask's guide threshold; zero
 * weights and out->ok 0 where the registration (res) or the solve failed.
 * scratch: n·n + n doubles (used when they do not fit in shared memory). */
/* gold: ss_weights_lsq */
cudaError_t cu_lsq_solve(cu_params_t *p, const cu_results_t *res, int n, const double *Rp,
                         double *scratch, cu_plan_out_t *out, cudaStream_t s);

/* k_whiten.cu. reweight = 0: the strict rule. reweight = 1: pixels the
 * plain sum cannot predict (an invalid or outside y_k) while the current
 * pixel is valid are listed in list (room for w·h; *count, reset here)
 * and re-weighted by a second kernel of fix_blocks blocks (p->rw). */
/* gold: ss_whiten (re-weighting: ss_reweight_subset) */
cudaError_t cu_whiten(const cu_params_t *p, ss_dtype_t hdt, const float *cur, int w, int h,
                      float *P, float *r, int reweight, uint32_t *list, unsigned int *count,
                      int fix_blocks, cudaStream_t s);
/* gold: ss_lsq_moments */
cudaError_t cu_lsq_moments(const cu_params_t *p, ss_dtype_t hdt, int n, const float *cur,
                           int w, int h, double *Rp, cudaStream_t s);
/* clean_sigma != NULL: clean sharp outliers (ss_clean_sharp, med = the
 * 3×3 median plane) from the frame before storing it. tile: one pass
 * (k_store_tile), for a removal radius (p->store_radius) up to
 * CU_STORE_RMAX or no removal; else the footprint's row dilation goes
 * through scratch first (k_dilate_rows, k_store). */
/* gold: ss_history_store (with ss_clean_sharp) */
#define CU_STORE_RMAX 16
cudaError_t cu_history_store(const cu_params_t *p, ss_dtype_t hdt, const float *frame,
                             const float *P, const int32_t *labels, const float *med,
                             const float *clean_sigma, int w, int h, uint8_t *scratch, int tile,
                             cudaStream_t s);

/* k_guided.cu: the one-channel (mode 0, ss_guided_filter) or the
 * two-channel (mode bit 0, ss_guided_filter2; bit 1: with its biharmonic
 * term, ss_seeing_term in k_seeing_moments and k_seeing_apply) guided
 * filter of I (guide) and pin into out; mode bit 2: with the source mask
 * p->gf_mask (ss_gmask_apply: its pm in out until the r' pass, its
 * temporaries in sc[0..2] and sc[5]). sc: 6 scratch planes (A/A1, B/A2,
 * B, L, which only radii above 62 use: smaller ones compute the Laplacian
 * on the fly, pin − c2·Q, and the mask's box rows). c[0] = the guide's mean, c[1] = c2.
 * share (≥ 1): the feeds on this GPU; the band kernel's grid fills
 * 1/share of it (taller bands, less SM-time; the sums in another order,
 * within the same tolerance of the CPU's). */
/* gold: ss_guided_filter, ss_guided_filter2, ss_seeing_term, ss_gmask_apply */
cudaError_t cu_guided(const cu_params_t *p, const float *I, const float *pin, int w, int h,
                      int radius, int mode, int share, float *const *sc, float *out,
                      double *partials, unsigned int *counter, float *c, cudaStream_t s);
cudaError_t cu_copy_plane(const float *in, float *out, size_t n, cudaStream_t s);

/* k_outputs.cu: the residual's optional forms (pipeline/outputs.h). A
 * stamp's box: residual pixels [x0, x0 + w) × [y0, y0 + h), its first
 * pixel at off in the stamps buffer. */
typedef struct cu_box {
    int x0, y0, w, h;
    unsigned long long off;
} cu_box_t;
/* out[i] = ss_f16_bits(in[i]), n values */
/* gold: ss_f16_bits (half_core.h) */
cudaError_t cu_to_f16(const float *in, size_t n, uint16_t *out, cudaStream_t s);
/* the n boxes of plane (w floats per row) into out, box after box, row-major
 * (ss_stamps_cut); max_box_pixels: the largest box's w·h */
/* gold: ss_stamps_cut */
cudaError_t cu_cut_stamps(const float *plane, int w, const cu_box_t *boxes, int n,
                          size_t max_box_pixels, float *out, cudaStream_t s);

/* k_copy.cu: a small copy by a kernel, between device memory and mapped
 * pinned host memory (either direction), off the copy engines. */
cudaError_t cu_copy_small(void *dst, const void *src, size_t bytes, cudaStream_t s);
/* The first min(*count_a + *count_b, cap) elements of elem_bytes each
 * (a multiple of 4; count_b NULL: 0), the count read on the device: a
 * read-back sized by what the frame found, without a host round trip.
 * The counts themselves go to counts_dst[0] (and [1] with count_b) in
 * the same launch. */
cudaError_t cu_copy_counted(void *dst, const void *src, size_t elem_bytes, int *counts_dst,
                            const int *count_a, const int *count_b, int cap, cudaStream_t s);

/* k_modelvar.cu (§6b, modelvar.c): D = ss_mv_template(t), and *count
 * zeroed for the gather that follows; the fit's samples ss_mv_gather(z, D)
 * compacted into q (room for cap) in no particular order, their number
 * added to *count (may exceed cap); res->mv_beta = ss_mv_beta of them
 * from their median (ws, after cu_select_median_buf) and z =
 * ss_mv_apply(z, D, res->mv_beta, raw), one launch. */
/* gold: ss_mv_template */
cudaError_t cu_mv_template(const float *t, int w, int h, float *D, unsigned int *count,
                           cudaStream_t s);
/* gold: ss_mv_gather */
cudaError_t cu_mv_gather(const cu_params_t *p, const float *z, const float *D, int w, int h,
                         float *q, unsigned int cap, unsigned int *count, cudaStream_t s);
/* gold: ss_mv_beta, then ss_mv_apply */
cudaError_t cu_mv_apply(const cu_sel_ws_t *ws, cu_results_t *res, float *z, const float *D,
                        float *raw, size_t n, cudaStream_t s);
/* k_register.cu: ss_hipass of in (radius r) into out; sc: 2 planes */
/* gold: ss_hipass (hipass_core.h) */
cudaError_t cu_hipass(const float *in, int w, int h, int r, float *const *sc, float *out,
                      cudaStream_t s);
/* The same with ss_hp_store's mode (SS_HPE_*, hipass_core.h): CLIP also
 * writes ss_mv_clip(in, out) into out2; RESTORE writes ss_mv_restore(the
 * high-pass, aux) into out2 alone (out unused). */
/* gold: ss_hipass then ss_mv_clip / ss_mv_restore (ss_star_template) */
cudaError_t cu_hipass_to(const float *in, int w, int h, int r, float *const *sc, float *out,
                         int mode, const float *aux, float *out2, cudaStream_t s);

/* k_matched.cu; star = 1: the model-error star map's single kernel
 * (p->mv_k, p->mv_sigma) instead of the residual's bank; σ from
 * *dev_sigma (device memory: the frame's σ, cuda_noise) unless NULL */
/* gold: ss_matched_filter */
cudaError_t cu_matched(const cu_params_t *p, int R, int star, const float *dev_sigma,
                       const float *in, int w, int h, float *z, cudaStream_t s);

/* k_detect.cu: hysteresis + CCL + numbering + accumulation
 * (ss_label_seeded: masks from zg, seeds from z; then measurement of z). */
/* gold: ss_label_seeded, then ss_measure_acc */
cudaError_t cu_detect(const cu_params_t *p, const float *zg, const float *z, const float *rc,
                      const float *r, int w, int h, int32_t *labels, int32_t *parent,
                      uint8_t *seed, int *chunk_cnt, cu_acc_t *acc, int max_comp,
                      cu_results_t *res, cudaStream_t s);

/* A frame with more components (res->np + nn) than accumulators
 * (p->max_comp), after cu_detect: measure instead the max_comp most
 * significant components with area >= p->min_area, exactly (ss_comp_preselect):
 * per component its key (atomicMax of the packed peak) and area into
 * pkey, parea (room for every component); the max_comp-th largest key by
 * an 8-pass radix selection in tk; the selected get accumulator slots
 * (atomic counter: any order, the host ranks by key) with their labels;
 * one more pass accumulates them. res->n_elig: the eligible count. */
/* gold: ss_comp_preselect, then ss_measure_acc */
cudaError_t cu_detect_overflow(const cu_params_t *p, const float *z, const float *rc,
                               const float *r, int w, int h, const int32_t *labels,
                               unsigned long long *pkey, int *parea, int ncomp_max,
                               cu_topk_t *tk, cu_acc_t *acc, int max_comp, cu_results_t *res,
                               cudaStream_t s);

/* Fault injection for the error-path tests: kind 0 = an illegal address
 * (sticky), kind 1 = an invalid launch configuration (not sticky). */
cudaError_t cu_fault(int kind, cudaStream_t s);
/* cudaSuccess when this build has a kernel image the current device runs. */
cudaError_t cu_check_image(void);

#ifdef __cplusplus
}
#endif
#endif
