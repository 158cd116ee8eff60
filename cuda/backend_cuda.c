/*
 * backend_cuda.c — the CUDA backend behind pipeline/backend.h: the frame
 * history ring and every plane in device memory, every stage as kernels
 * (cuda/k_*.cu), four streams per instance, CUDA graphs for the repeated
 * launch sequences, checked errors with a sticky "broken" state.
 *
 * Streams and ordering. Each instance (one per feed; several may share a
 * GPU) owns three streams:
 *   cs  compute: every stage, as segments of steps (below);
 *   xs  uploads: raw frames go up into one of two device raw buffers
 *       (ss_cuda_prefetch starts the next frame's upload while the current
 *       one computes); cs waits on the upload's event;
 *   ds  downloads (read_begin): r' goes down as soon as it is final, into
 *       the caller's pinned result buffer, while cs runs the matched filter,
 *       detection and the next frame's first stages; read_begin does not
 *       end the segment: it adds a mark step (an external event node in
 *       the graph) and the copy, issued after the launch, waits on it
 *       (cx_defer_download); the next segment that writes CLEAN (the
 *       guided filter) waits on the download's event.
 * Ops that need no host value (ingest, set_reference, whiten, guided,
 * matched, history_store) only append "steps" to a pending segment; an op
 * that needs a value from the device (registration, noise, detect,
 * read_plane, ...) flushes the segment and waits on one event recorded
 * after it — never on the whole device. Decisions that used to need the
 * host between stages run on the device instead: the coarse vote
 * (k_vote.cu), the fine iteration with its convergence, errors and match
 * test (fine_core.h), the weights (plan_core.h, k_plan.cu), σ and the
 * model-error β. The values the host still
 * needs (the registration's result, σ, accumulators) and the parameter
 * block travel by kernel copies through mapped pinned memory
 * (cu_copy_small, cu_copy_counted), not on the copy engines, where they
 * would queue behind a frame's upload or a residual's download; those of
 * the middle of a segment on the output lane (cx_copy_out), beside the
 * steps after them. With the
 * prediction planned on the device (predict_planned: the weights from the
 * device's shift, k_plan) a frame through the driver runs as one wait and,
 * when the frame was prefetched, one graph launch: [previous history
 * store + ingest + the whole registration + plan + whiten + guided + noise
 * + matched + detect], with the residual download beside the last steps
 * (a frame uploaded only at its ingest flushes the pending store first, so
 * that the store runs during the upload); where the host plans, the
 * registration is a wait of its own.
 *
 * Graphs. A flushed segment is looked up by its shape (the list of step
 * functions and their variants: radius, psf radius, n, ...) in a small
 * cache of instantiated CUDA graphs and replayed; a new shape is captured
 * once. Per-frame numbers (history slot pointers, offsets, weights, eps,
 * sigma, ...) are never kernel arguments: they live in one device
 * parameter block (cu_params_t) that the host fills through a pinned
 * mirror, copied by one small kernel before each segment, so the graphs
 * stay valid.
 *
 * Errors. Every CUDA call and every launcher (which returns
 * cudaGetLastError() after its launches) goes through CK(): the failing
 * call's text, file and line are logged, the pending segment is dropped,
 * and the op fails with SS_ERR_BACKEND. Errors that poison the context
 * (illegal address, launch failure, device lost, ...) mark the instance
 * broken: every later call returns SS_ERR_BROKEN, so the daemon can exit
 * and systemd restarts it.
 *
 * No allocation on the per-frame path: device buffers, pinned mirrors,
 * events and the graph cache are all sized at create. Raw frames may vary
 * in size: the two raw buffers hold the largest the driver announced
 * (geo raw_w×raw_h at create, raw_reserve when a larger one arrives —
 * an allocation then, not per frame); a frame's width and the part of
 * the roi it holds are per-frame parameters.
 */
#include "cuda/cu_backend.h"
#include "pipeline/hipass_core.h"    /* SS_HPE_* */
#include "pipeline/vote_core.h"

#include <cuda_runtime_api.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define TAG "cuda"

/* Set once CUDA has been initialised in this process (create or
 * host_alloc); from then on probe() may ask CUDA directly. */
static volatile int cuda_touched;


/* ---------------------------------------------------------------------- */
/* steps (each runs on stream s; captured into graphs as they are)         */
/* ---------------------------------------------------------------------- */

static int sel_grid(const ss_backend_t *b, long long samples)
{
    long long g = (samples + 255) / 256;
    const long long cap = 2LL * b->sms;
    if (g > cap)
        g = cap;
    return g < 1 ? 1 : (int)g;
}

/* Whether a selection of up to ns samples runs as one cluster
 * (cu_select_cluster) rather than as the grid-wide passes, below limit. */
static int sel_cluster(const ss_backend_t *b, long long ns, long long limit)
{
    return ns <= limit && ns <= b->sel_cluster_max;
}

/* An exact median + MAD selection of ns samples: one launch of one cluster
 * for small samples, else the grid-wide passes (buf: their compaction
 * buffer, room for ns floats). */
static cudaError_t select_mad(ss_backend_t *b, const cu_sampler_t *samp, cu_sel_ws_t *ws, int mode,
                              float *out_f, double *out_d, long long ns, float *buf,
                              cudaStream_t s)
{
    if (sel_cluster(b, ns, b->sel_small_max))
        return cu_select_cluster(samp, NULL, NULL, 0, ws, mode, out_f, out_d, ns, s);
    return cu_select_mad(samp, ws, mode, out_f, out_d, sel_grid(b, ns), buf, s);
}

/* The lower median of the cap-bounded buffer buf (*count samples on the
 * device) into ws, as cu_select_median_buf defines it. */
static cudaError_t select_median_buf(ss_backend_t *b, const float *buf, const unsigned int *count,
                                     long long cap, cudaStream_t s)
{
    if (sel_cluster(b, cap, b->sel_buf_max))
        return cu_select_cluster(NULL, buf, count, (unsigned int)cap, b->d_sel, -1, NULL, NULL,
                                 cap, s);
    return cu_select_median_buf(buf, count, (unsigned int)cap, b->d_sel, sel_grid(b, cap), s);
}

static cudaError_t st_calibrate(ss_backend_t *b, cudaStream_t s, int v)
{
    (void)v;
    return cu_calibrate(b->d_params, b->geo.raw_dtype, b->geo.roi, b->d_bias, b->d_dark,
                        b->d_flat, b->d_bad, b->d_plane[SS_PLANE_FRAME], s);
}

static cudaError_t st_median(ss_backend_t *b, cudaStream_t s, int v)
{
    (void)v;
    return cu_median3x3(b->d_plane[SS_PLANE_FRAME], b->w, b->h, b->d_plane[SS_PLANE_FILTERED], s);
}

static cudaError_t st_hotpix(ss_backend_t *b, cudaStream_t s, int v)
{
    (void)v;
    const long long ns = (long long)((b->w + SS_HOTPIX_STRIDE - 1) / SS_HOTPIX_STRIDE) *
                         ((b->h + SS_HOTPIX_STRIDE - 1) / SS_HOTPIX_STRIDE);
    SK(select_mad(b, &b->d_params->hot_samp, b->d_sel, 0, &b->d_res->hot_sigma, NULL, ns,
                  b->d_selbuf, s));
    SK(cu_hot_hits(b->d_params, b->d_plane[SS_PLANE_FRAME], b->d_plane[SS_PLANE_FILTERED],
                   &b->d_res->hot_sigma, b->w, b->h, b->d_hits, b->d_learned, s));
    return cu_hot_apply(b->d_learned, b->d_plane[SS_PLANE_FRAME], b->d_plane[SS_PLANE_FILTERED],
                        b->npix, s);
}

/* The pyramid of REFERENCE (v = 1) or FILTERED (v = 0). */
static cudaError_t st_pyramid(ss_backend_t *b, cudaStream_t s, int ref)
{
    float *const *lv = ref ? b->d_ref_lvl : b->d_cur_lvl;
    for (int l = 1; l <= b->L; l++)
        SK(cu_bin2(lv[l - 1], b->lw[l - 1], b->lh[l - 1], lv[l], s));
    return cudaSuccess;
}

static cudaError_t st_level_noise(ss_backend_t *b, cudaStream_t s, int ref)
{
    const long long ns = (long long)((b->lh[b->L] + 1) / 2) * (b->lw[b->L] > 1 ? b->lw[b->L] - 1 : 0);
    return select_mad(b, ref ? &b->d_params->lvl_samp_ref : &b->d_params->lvl_samp_cur,
                      b->d_sel, 1, NULL, ref ? &b->d_res->noise_ref : &b->d_res->noise_cur, ns,
                      b->d_selbuf, s);
}

static cudaError_t st_ref_copy(ss_backend_t *b, cudaStream_t s, int v)
{
    (void)v;
    return cudaMemcpyAsync(b->d_plane[SS_PLANE_REFERENCE], b->d_plane[SS_PLANE_HIPASS],
                           b->npix * sizeof(float), cudaMemcpyDeviceToDevice, s);
}

/* The star peaks of level L of the frame (v = 0) or the reference (v =
 * 1), and the brightest of them in order (d_res->top[v]). */
static cudaError_t st_peaks(ss_backend_t *b, cudaStream_t s, int ref)
{
    const int L = b->L;
    const size_t off = ref ? SS_COARSE_PEAK_CAP : 0;
    SK(cu_peaks(ref ? b->d_ref_lvl[L] : b->d_cur_lvl[L], b->lw[L], b->lh[L],
                ref ? &b->d_res->noise_ref : &b->d_res->noise_cur, b->d_peaks + off,
                b->d_npeaks + ref, SS_COARSE_PEAK_CAP, s));
    return cu_top_peaks(b->d_peaks + off, b->d_npeaks + ref, b->lw[L], b->d_res->top[ref],
                        &b->d_res->ntop[ref], s);
}

/* The vote, the refinement from it (a pyramid of L > 0 levels), and the
 * result back to the host (h_res->coarse). */
static cudaError_t st_coarse(ss_backend_t *b, cudaStream_t s, int v)
{
    (void)v;
    cu_results_t *r = b->d_res;
    SK(cu_vote(b->d_params, r->top[1], &r->ntop[1], r->top[0], &r->ntop[0], b->d_vote_hist, r, s));
    if (b->L > 0)
        SK(cu_refine(b->d_ref_lvl, b->d_cur_lvl, b->lw, b->lh, b->L, r, s));
    return cx_copy_out(b, s, &b->m_res->coarse, &r->coarse, sizeof(cu_coarse_t));
}

/* v = passes | FINE_FROM_COARSE: the whole fine registration, its state
 * back to the host. */
#define FINE_FROM_COARSE (1 << 16)
static cudaError_t st_fine(ss_backend_t *b, cudaStream_t s, int v)
{
    SK(cu_fine(b->d_params, b->d_plane[SS_PLANE_HIPASS], b->d_plane[SS_PLANE_REFERENCE], b->w,
               b->h, v & 0xffff, (v & FINE_FROM_COARSE) != 0, b->gshare, b->d_partials,
               b->d_counter, b->d_res, s));
    return cx_copy_out(b, s, &b->m_res->fine_st, &b->d_res->fine_st, sizeof(ss_fine_state_t));
}

/* The device's plan from the registration's result (k_plan). */
static cudaError_t st_plan(ss_backend_t *b, cudaStream_t s, int v)
{
    (void)v;
    return cu_plan(b->d_params, b->d_res, b->m_plan, s);
}

/* v = n | LSQ_ON_DEVICE: the moments stay on the device (the plan's lsq
 * solve reads them); else they go to the host. */
#define LSQ_ON_DEVICE (1 << 16)
static cudaError_t st_lsq(ss_backend_t *b, cudaStream_t s, int v)
{
    const int n = v & 0xffff;
    SK(cu_lsq_moments(b->d_params, b->geo.hist_dtype, n, b->d_plane[SS_PLANE_FRAME], b->w, b->h,
                      b->d_lsq, s));
    if (v & LSQ_ON_DEVICE)
        return cu_lsq_solve(b->d_params, b->d_res, n, b->d_lsq, b->d_lsq_m, b->m_plan, s);
    return cu_copy_small(b->m_lsq, b->d_lsq, ((size_t)n * n + n) * sizeof(double), s);
}

/* v = 1: re-weight pixels with invalid history (the parameter block's rw). */
static cudaError_t st_whiten(ss_backend_t *b, cudaStream_t s, int v)
{
    return cu_whiten(b->d_params, b->geo.hist_dtype, b->d_plane[SS_PLANE_FRAME], b->w, b->h,
                     b->d_plane[SS_PLANE_PREDICTION], b->d_plane[SS_PLANE_RESIDUAL], v,
                     b->d_rwlist, b->d_rwcount, 2 * b->sms, s);
}

/* v = radius·4 + biharmonic·2 + laplacian (radius 0: CLEAN = RESIDUAL). */
static cudaError_t st_guided(ss_backend_t *b, cudaStream_t s, int v)
{
    const int radius = v >> 3;
    if (radius <= 0)
        return cu_copy_plane(b->d_plane[SS_PLANE_RESIDUAL], b->d_plane[SS_PLANE_CLEAN], b->npix, s);
    return cu_guided(b->d_params, b->d_plane[SS_PLANE_PREDICTION], b->d_plane[SS_PLANE_RESIDUAL],
                     b->w, b->h, radius, v & 7, b->gshare, b->d_gs,
                     b->d_plane[SS_PLANE_CLEAN], b->d_partials, b->d_counter, b->d_misc, s);
}

/* v = stride | DEV_SIGMA: σ (clipped, ss_noise_clipped) into device memory,
 * the frame's σ for the later steps (the host gets it with the
 * detection's results); without DEV_SIGMA it is for the host only, written
 * straight into the mapped mirror. */
#define DEV_SIGMA (1 << 24)
static cudaError_t st_noise(ss_backend_t *b, cudaStream_t s, int v)
{
    const int st = v & (DEV_SIGMA - 1);
    const long long ns = (long long)((b->w + st - 1) / st) * ((b->h + st - 1) / st);
    float *out = v & DEV_SIGMA ? &b->d_res->sigma : &b->m_res->sigma;
    return select_mad(b, &b->d_params->noise_samp, b->d_sel, 2, out, NULL, ns, b->d_selbuf, s);
}

/* The frame's σ on the device for variant v (DEV_SIGMA set), else NULL. */
static const float *dev_sigma(const ss_backend_t *b, int v)
{
    return v & DEV_SIGMA ? &b->d_res->sigma : NULL;
}

static cudaError_t st_matched(ss_backend_t *b, cudaStream_t s, int v)
{
    return cu_matched(b->d_params, v & (DEV_SIGMA - 1), 0, dev_sigma(b, v),
                      b->d_plane[SS_PLANE_CLEAN], b->w, b->h, b->d_plane[SS_PLANE_SNR], s);
}

/* §6b, the star map's two high-passes of radius r (ss_star_template's
 * first half) from PREDICTION: A into d_gs[2], the clip B into d_gs[3],
 * the restore S into d_gs[4] (d_gs[0], d_gs[1] their scratch). They read
 * nothing the detection's steps write: noise_enqueue puts them on the side
 * lane, beside the noise and the matched filter. */
static cudaError_t st_mv_hipass(ss_backend_t *b, cudaStream_t s, int r)
{
    float *A = b->d_gs[2], *B = b->d_gs[3], *S = b->d_gs[4];
    SK(cu_hipass_to(b->d_plane[SS_PLANE_PREDICTION], b->w, b->h, r, b->d_gs, A, SS_HPE_CLIP,
                    NULL, B, s));
    return cu_hipass_to(B, b->w, b->h, r, b->d_gs, NULL, SS_HPE_RESTORE, A, S, s);
}

/* §6b, v = r·64 + R: the star map as ss_star_template (radius r; d_gs[0],
 * d_gs[1] the high-pass's scratch; A in d_gs[2] and the clip B in d_gs[3]
 * from the first high-pass's column pass, the restore S from the second's
 * into d_gs[4]: hipass_core.h's ss_hp_store), its matched filter of
 * radius R into d_gs[3], the template D into STAR, the fit's samples
 * compacted into d_selbuf (free once the noise is selected) and their
 * median into d_sel (st_mv_apply, next, takes β from it). v | DEV_SIGMA:
 * the star map's σ from the device; v | MV_HP_DONE: the high-passes ran
 * already (st_mv_hipass on the side lane). */
#define MV_HP_DONE (1 << 25)
static cudaError_t st_mv_template(ss_backend_t *b, cudaStream_t s, int v)
{
    const float *sg = dev_sigma(b, v);
    const int r = (v & (DEV_SIGMA - 1)) >> 6;
    if (!(v & MV_HP_DONE))
        SK(st_mv_hipass(b, s, r));
    v &= DEV_SIGMA - 1;
    float *B = b->d_gs[3], *S = b->d_gs[4];
    SK(cu_matched(b->d_params, v & 63, 1, sg, S, b->w, b->h, B, s));
    SK(cu_mv_template(B, b->w, b->h, b->d_plane[SS_PLANE_STAR], &b->d_res->mv_count, s));
    SK(cu_mv_gather(b->d_params, b->d_plane[SS_PLANE_SNR], b->d_plane[SS_PLANE_STAR], b->w, b->h,
                    b->d_selbuf, (unsigned int)b->npix, &b->d_res->mv_count, s));
    return select_median_buf(b, b->d_selbuf, &b->d_res->mv_count, (long long)b->npix, s);
}

/* β from the median st_mv_template left in d_sel, and SNR divided by the
 * model error (SNR_RAW: SNR before), in one launch. */
static cudaError_t st_mv_apply(ss_backend_t *b, cudaStream_t s, int v)
{
    (void)v;
    SK(cu_mv_apply(b->d_sel, b->d_res, b->d_plane[SS_PLANE_SNR], b->d_plane[SS_PLANE_STAR],
                   b->d_plane[SS_PLANE_SNR_RAW], b->npix, s));
    /* count and β reach the host with the detection's wait (cuda_frame_stats) */
    return cx_copy_out(b, s, &b->m_res->mv_count, &b->d_res->mv_count,
                       sizeof b->d_res->mv_count + sizeof b->d_res->mv_beta);
}

/* How many accumulators come back with the detection's segment: as many
 * as the frame measured, up to the pinned buffer. */
static int acc_inline(const ss_backend_t *b)
{
    return SS_MIN(b->max_comp, HOST_ACC);
}

/* v & 1: grow on SNR_RAW, seeds on SNR (b->grow_raw); else both on SNR.
 * v & 2: the frame's σ (device) to the host with the results. */
static cudaError_t st_detect(ss_backend_t *b, cudaStream_t s, int v)
{
    if (v & 2)
        SK(cx_copy_out(b, s, &b->m_res->sigma, &b->d_res->sigma, sizeof(float)));
    const float *zg = b->d_plane[v & 1 ? SS_PLANE_SNR_RAW : SS_PLANE_SNR];
    SK(cu_detect(b->d_params, zg, b->d_plane[SS_PLANE_SNR], b->d_plane[SS_PLANE_CLEAN],
                 b->d_plane[SS_PLANE_RESIDUAL], b->w, b->h, b->d_labels, b->d_parent, b->d_u8,
                 b->d_chunk, b->d_acc, b->max_comp, b->d_res, s));
    return cu_copy_counted(b->m_acc, b->d_acc, sizeof(cu_acc_t), &b->m_res->np, &b->d_res->np,
                           &b->d_res->nn, acc_inline(b), s);
}

/* More components than accumulators: measure the most significant
 * eligible ones instead (cu_detect_overflow); n_elig and, as st_detect
 * does, the first accumulators (now the selected ones) back to the host. */
static cudaError_t st_detect_overflow(ss_backend_t *b, cudaStream_t s, int v)
{
    (void)v;
    SK(cu_detect_overflow(b->d_params, b->d_plane[SS_PLANE_SNR], b->d_plane[SS_PLANE_CLEAN],
                          b->d_plane[SS_PLANE_RESIDUAL], b->w, b->h, b->d_labels, b->d_pkey,
                          b->d_parea, b->ncomp_max, b->d_topk, b->d_acc, b->max_comp,
                          b->d_res, s));
    return cu_copy_counted(b->m_acc, b->d_acc, sizeof(cu_acc_t), &b->m_res->n_elig,
                           &b->d_res->n_elig, NULL, acc_inline(b), s);
}

/* The noise of frame - median for the sharp-outlier cleaning
 * (ss_clean_sharp's σ: every SS_CLEAN_STRIDE-th row and column). */
static cudaError_t select_clean_sigma(ss_backend_t *b, cudaStream_t s)
{
    const long long ns = (long long)((b->w + SS_CLEAN_STRIDE - 1) / SS_CLEAN_STRIDE) *
                         ((b->h + SS_CLEAN_STRIDE - 1) / SS_CLEAN_STRIDE);
    return select_mad(b, &b->d_params->clean_samp, b->d_sel, 0, &b->d_res->clean_sigma, NULL, ns,
                      b->d_selbuf, s);
}

/* The registration input, at ingest (v = the high-pass radius): the
 * cleaning's noise, then HIPASS (the guided filter's scratch is free). */
static cudaError_t st_regin(ss_backend_t *b, cudaStream_t s, int r)
{
    SK(select_clean_sigma(b, s));
    return cu_regin(b->d_params, b->d_plane[SS_PLANE_FRAME], b->d_plane[SS_PLANE_FILTERED],
                    &b->d_res->clean_sigma, b->w, b->h, r, b->d_gs, b->d_plane[SS_PLANE_HIPASS],
                    s);
}

/* The history store, v = clean | STORE_TILE. clean = 1: clean sharp
 * outliers before storing, with the noise selected at ingest; 2: the same
 * with the noise selected again here (a plane it reads was written
 * since). STORE_TILE: in one pass (cu_history_store's tile). */
#define STORE_TILE 4
static cudaError_t st_store(ss_backend_t *b, cudaStream_t s, int v)
{
    const int clean = v & 3;
    if (clean == 2)
        SK(select_clean_sigma(b, s));
    return cu_history_store(b->d_params, b->geo.hist_dtype, b->d_plane[SS_PLANE_FRAME],
                            b->d_plane[SS_PLANE_PREDICTION], b->d_labels,
                            b->d_plane[SS_PLANE_FILTERED], clean ? &b->d_res->clean_sigma : NULL,
                            b->w, b->h, b->d_u8, (v & STORE_TILE) != 0, s);
}

/* ---------------------------------------------------------------------- */
/* probe, host memory                                                      */
/* ---------------------------------------------------------------------- */

/* Asks CUDA directly (initialises it in this process). */
static int probe_here(int device, char *why, size_t n)
{
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        snprintf(why, n, "no CUDA device (%s)", e != cudaSuccess ? cudaGetErrorString(e) : "count 0");
        return 0;
    }
    if (device < 0 || device >= count) {
        snprintf(why, n, "device %d not present (%d CUDA devices)", device, count);
        return 0;
    }
    struct cudaDeviceProp prop;
    if ((e = cudaGetDeviceProperties(&prop, device)) != cudaSuccess) {
        snprintf(why, n, "device %d: %s", device, cudaGetErrorString(e));
        return 0;
    }
    if ((e = cudaSetDevice(device)) != cudaSuccess || (e = cu_check_image()) != cudaSuccess) {
        snprintf(why, n, "device %d (%s, sm_%d%d): %s", device, prop.name, prop.major,
                 prop.minor, cudaGetErrorString(e));
        (void)cudaGetLastError();
        return 0;
    }
    snprintf(why, n, "%s (sm_%d%d, %d SMs)", prop.name, prop.major, prop.minor,
             prop.multiProcessorCount);
    return 1;
}

/* Must not leave CUDA initialised in a process that may fork later (Check
 * forks each test; a daemon may fork): unless this process already uses
 * CUDA, the question is asked in a short-lived child. */
static int cuda_probe(int device, char *why, size_t n)
{
    if (cuda_touched)
        return probe_here(device, why, n);
    int fd[2];
    if (pipe(fd) != 0) {
        snprintf(why, n, "probe: pipe: %s", strerror(errno));
        return 0;
    }
    const pid_t pid = fork();
    if (pid < 0) {
        close(fd[0]);
        close(fd[1]);
        snprintf(why, n, "probe: fork: %s", strerror(errno));
        return 0;
    }
    if (pid == 0) {
        struct {
            int ok;
            char msg[200];
        } r;
        memset(&r, 0, sizeof r);
        close(fd[0]);
        r.ok = probe_here(device, r.msg, sizeof r.msg);
        ssize_t wr = write(fd[1], &r, sizeof r);
        _exit(wr == (ssize_t)sizeof r ? 0 : 1);
    }
    close(fd[1]);
    struct {
        int ok;
        char msg[200];
    } r;
    memset(&r, 0, sizeof r);
    size_t got = 0;
    while (got < sizeof r) {
        const ssize_t k = read(fd[0], (char *)&r + got, sizeof r - got);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;
        got += (size_t)k;
    }
    close(fd[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (got != sizeof r) {
        snprintf(why, n, "probe process failed (status %d)", status);
        return 0;
    }
    r.msg[sizeof r.msg - 1] = '\0';
    ss_strlcpy(why, r.msg, n);
    return r.ok;
}

static void *cuda_host_alloc(size_t bytes, void *user)
{
    (void)user;
    void *p = NULL;
    cuda_touched = 1;
    cx_unsafe_begin();
    if (cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocPortable) != cudaSuccess) {
        (void)cudaGetLastError();
        p = NULL;
    }
    cx_unsafe_end();
    return p;
}

static void cuda_host_free(void *p, void *user)
{
    (void)user;
    if (!p)
        return;
    cx_unsafe_begin();
    cudaFreeHost(p);
    cx_unsafe_end();
}

/* ---------------------------------------------------------------------- */
/* create / destroy                                                        */
/* ---------------------------------------------------------------------- */

static void destroy_locked(ss_backend_t **pb);

/* Everything an instance holds, freed (under the unsafe-calls lock). */
static void cuda_destroy(ss_backend_t **pb)
{
    if (!pb || !*pb)
        return;
    cx_unsafe_begin();
    destroy_locked(pb);
    cx_unsafe_end();
}

static void destroy_locked(ss_backend_t **pb)
{
    ss_backend_t *b = *pb;
    cudaSetDevice(b->device);
    if (b->cs)
        cudaStreamSynchronize(b->cs);
    if (b->xs)
        cudaStreamSynchronize(b->xs);
    if (b->ds)      /* a residual still on its way lands before its buffer may go */
        cudaStreamSynchronize(b->ds);
    if (b->os)
        cudaStreamSynchronize(b->os);
    if (b->ps)
        cudaStreamSynchronize(b->ps);
    (void)cudaGetLastError();
    for (int g = 0; g < b->ngraphs; g++)
        if (b->graphs[g].exec)
            cudaGraphExecDestroy(b->graphs[g].exec);
    cm_plan_free(b);
    free(b->h_acc_big);
    free(b->h_rank);
    for (int i = 0; i < MAX_TIMERS; i++) {
        if (b->timers[i].a)
            cudaEventDestroy(b->timers[i].a);
        if (b->timers[i].b)
            cudaEventDestroy(b->timers[i].b);
    }
    cudaEvent_t evs[] = { b->ev_done, b->ev_param, b->ev_up[0], b->ev_up[1], b->ev_free[0],
                          b->ev_free[1], b->ev_ready, b->ev_rd[0], b->ev_rd[1], b->ev_rd[2],
                          b->ev_rd[3], b->ev_boxes, b->ev_mark, b->ev_fork, b->ev_join };
    for (size_t i = 0; i < sizeof evs / sizeof evs[0]; i++)
        if (evs[i])
            cudaEventDestroy(evs[i]);
    if (b->cs)
        cudaStreamDestroy(b->cs);
    if (b->xs)
        cudaStreamDestroy(b->xs);
    if (b->ds)
        cudaStreamDestroy(b->ds);
    if (b->os)
        cudaStreamDestroy(b->os);
    if (b->ps)
        cudaStreamDestroy(b->ps);
    (void)cudaGetLastError();
    free(b);
    *pb = NULL;
}

static ss_err_t create_fail(ss_backend_t **pb, cudaError_t e, const char *what)
{
    SS_LOG(SS_LOG_ERR, TAG, "create: %s: %s (%s)", what, cudaGetErrorName(e), cudaGetErrorString(e));
    (void)cudaGetLastError();
    cuda_destroy(pb);
    return e == cudaErrorMemoryAllocation ? SS_ERR_NOMEM : SS_ERR_BACKEND;
}

#define CC(call)                                                            \
    do {                                                                    \
        const cudaError_t e_ = (call);                                      \
        if (e_ != cudaSuccess)                                              \
            return create_fail(&b, e_, #call);                              \
    } while (0)

static ss_err_t create_locked(const ss_pipeline_cfg_t *cfg, const ss_geometry_t *geo,
                              const ss_calib_data_t *calib, ss_backend_t **out);

/* An instance, made under the unsafe-calls lock (its allocations and its
 * final device synchronisation must not meet another instance's capture). */
static ss_err_t cuda_create(const ss_pipeline_cfg_t *cfg, const ss_geometry_t *geo,
                            const ss_calib_data_t *calib, ss_backend_t **out)
{
    cx_unsafe_begin();
    const ss_err_t e = create_locked(cfg, geo, calib, out);
    cx_unsafe_end();
    return e;
}

static ss_err_t create_locked(const ss_pipeline_cfg_t *cfg, const ss_geometry_t *geo,
                              const ss_calib_data_t *calib, ss_backend_t **out)
{
    *out = NULL;
    if (geo->roi.w <= 0 || geo->roi.h <= 0 || geo->history <= 0 ||
        geo->history > SS_MAX_HISTORY || cfg->reg_levels < 0 || cfg->reg_levels > SS_MAX_LEVELS ||
        geo->roi.x < 0 || geo->roi.y < 0 || geo->roi.x + geo->roi.w > geo->raw_w ||
        geo->roi.y + geo->roi.h > geo->raw_h || ss_dtype_size(geo->raw_dtype) == 0 ||
        (geo->hist_dtype != SS_DT_F32 && geo->hist_dtype != SS_DT_U8 &&
         geo->hist_dtype != SS_DT_U16 && geo->hist_dtype != SS_DT_I16))
        return SS_ERR_INVALID;
    if ((size_t)geo->roi.w * (size_t)geo->roi.h >= (size_t)INT32_MAX)
        return SS_ERR_SIZE;
    ss_backend_t *b = calloc(1, sizeof *b);
    if (!b)
        return SS_ERR_NOMEM;
    cuda_touched = 1;
    b->cfg = cfg;
    b->geo = *geo;
    b->w = geo->roi.w;
    b->h = geo->roi.h;
    b->npix = (size_t)b->w * (size_t)b->h;
    b->device = cfg->device;
    b->use_graphs = 1;
    b->seg_raw_buf = -1;
    b->sel_small_max = SEL_SMALL_MAX;
    b->sel_buf_max = LLONG_MAX;
    const size_t npix = b->npix;

    CC(cudaSetDevice(b->device));
    struct cudaDeviceProp prop;
    CC(cudaGetDeviceProperties(&prop, b->device));
    b->sms = prop.multiProcessorCount;
    b->gshare = cfg->device_feeds > 1 ? cfg->device_feeds : 1;
    /* the lanes fill an idle GPU beside one feed's chain; where feeds
     * share it, the others fill it (8 feeds of 512² were 9 % slower with
     * the lanes: docs/PERFORMANCE.md, 2026-11-26 14:43Z) */
    b->lanes = b->gshare == 1;
    b->sel_cluster_max = cu_select_cluster_max();  /* its set-up, outside any capture */
    CC(cudaStreamCreateWithFlags(&b->cs, cudaStreamNonBlocking));
    CC(cudaStreamCreateWithFlags(&b->xs, cudaStreamNonBlocking));
    CC(cudaStreamCreateWithFlags(&b->ds, cudaStreamNonBlocking));
    CC(cudaEventCreateWithFlags(&b->ev_done, cudaEventDisableTiming));
    CC(cudaEventCreateWithFlags(&b->ev_ready, cudaEventDisableTiming));
    CC(cudaEventCreateWithFlags(&b->ev_mark, cudaEventDisableTiming));
    CC(cudaStreamCreateWithFlags(&b->os, cudaStreamNonBlocking));
    CC(cudaStreamCreateWithFlags(&b->ps, cudaStreamNonBlocking));
    CC(cudaEventCreateWithFlags(&b->ev_fork, cudaEventDisableTiming));
    CC(cudaEventCreateWithFlags(&b->ev_join, cudaEventDisableTiming));
    for (int i = 0; i < RD_RING; i++)
        CC(cudaEventCreateWithFlags(&b->ev_rd[i], cudaEventDisableTiming));
    CC(cudaEventCreateWithFlags(&b->ev_param, cudaEventDisableTiming));
    CC(cudaEventCreateWithFlags(&b->ev_boxes, cudaEventDisableTiming));
    for (int i = 0; i < 2; i++) {
        CC(cudaEventCreateWithFlags(&b->ev_up[i], cudaEventDisableTiming));
        CC(cudaEventCreateWithFlags(&b->ev_free[i], cudaEventDisableTiming));
    }
    for (int i = 0; i < MAX_TIMERS; i++) {
        CC(cudaEventCreate(&b->timers[i].a));
        CC(cudaEventCreate(&b->timers[i].b));
    }

    b->raw_bytes = (size_t)geo->raw_w * (size_t)geo->raw_h * ss_dtype_size(geo->raw_dtype);
    b->hist_slot_bytes = npix * ss_dtype_size(geo->hist_dtype);
    b->L = cfg->reg_levels;
    b->lw[0] = b->w;
    b->lh[0] = b->h;
    for (int l = 1; l <= b->L; l++) {
        b->lw[l] = b->lw[l - 1] / 2;
        b->lh[l] = b->lh[l - 1] / 2;
    }
    b->ncomp_max = ss_comp_bound(b->w, b->h);
    b->max_comp = SS_MIN(CU_MAX_COMPONENTS, b->ncomp_max);
    const char *what = "";
    const cudaError_t pe = cm_plan_alloc(b, calib, &what);
    if (pe != cudaSuccess)
        return create_fail(&b, pe, what);
    b->d_ref_lvl[0] = b->d_plane[SS_PLANE_REFERENCE];
    b->d_cur_lvl[0] = b->d_plane[SS_PLANE_HIPASS];
    if (b->max_comp > HOST_ACC) {
        b->h_acc_big = malloc((size_t)b->max_comp * sizeof(cu_acc_t));
        if (!b->h_acc_big)
            return create_fail(&b, cudaErrorMemoryAllocation, "host accumulators");
    }
    b->h_rank = malloc((size_t)b->max_comp * sizeof(ss_rank_t));
    if (!b->h_rank)
        return create_fail(&b, cudaErrorMemoryAllocation, "host ranking");

    /* parameters that never change for this instance */
    cu_params_t *hp = b->h_params;
    hp->hot_samp = (cu_sampler_t){ b->d_plane[SS_PLANE_FRAME], b->d_plane[SS_PLANE_FILTERED],
                                   b->w, b->h, CU_SAMP_DIFF, SS_HOTPIX_STRIDE };
    hp->lvl_samp_ref = (cu_sampler_t){ b->d_ref_lvl[b->L], NULL, b->lw[b->L], b->lh[b->L],
                                       CU_SAMP_HDIFF, 1 };
    hp->lvl_samp_cur = (cu_sampler_t){ b->d_cur_lvl[b->L], NULL, b->lw[b->L], b->lh[b->L],
                                       CU_SAMP_HDIFF, 1 };
    hp->clean_samp = (cu_sampler_t){ b->d_plane[SS_PLANE_FRAME], b->d_plane[SS_PLANE_FILTERED],
                                     b->w, b->h, CU_SAMP_DIFF, SS_CLEAN_STRIDE };
    hp->max_comp = b->max_comp;
    hp->sat = cfg->saturation > 0.0 ? cfg->saturation : ss_dtype_max(geo->raw_dtype);

    /* the raw buffers start free; the parameter event starts completed */
    CC(cudaEventRecord(b->ev_free[0], b->cs));
    CC(cudaEventRecord(b->ev_free[1], b->cs));
    CC(cudaEventRecord(b->ev_param, b->cs));
    CC(cudaEventRecord(b->ev_up[0], b->xs));
    CC(cudaEventRecord(b->ev_up[1], b->xs));
    CC(cudaDeviceSynchronize());
    SS_LOG(SS_LOG_INFO, TAG, "device %d (%s): %dx%d, history %d × %s, %.1f MiB on the device",
           b->device, prop.name, b->w, b->h, geo->history, ss_dtype_name(geo->hist_dtype),
           (double)b->dev_bytes / (1024.0 * 1024.0));
    *out = b;
    return SS_OK;
}

/* ---------------------------------------------------------------------- */
/* ops                                                                     */
/* ---------------------------------------------------------------------- */

/* Raw frame up on the copy stream into buffer buf, once the compute
 * stream has finished reading that buffer: the frame's own bytes (raw
 * frames vary in size; the buffers hold the largest, geo.raw_w×raw_h). */
static ss_err_t upload(ss_backend_t *b, const ss_frame_t *raw, int buf)
{
    const size_t pix = (size_t)raw->width * (size_t)raw->height;
    CK(b, cudaStreamWaitEvent(b->xs, b->ev_free[buf], 0));
    timer_t_ *t = cx_timer_start(b, b->xs, SS_STAGE_UPLOAD, 1);
    CK(b, cudaMemcpyAsync(b->d_raw[buf], raw->pixels, pix * ss_dtype_size(b->geo.raw_dtype),
                          cudaMemcpyHostToDevice, b->xs));
    if (raw->valid)
        CK(b, cudaMemcpyAsync(b->d_rawvalid[buf], raw->valid, pix, cudaMemcpyHostToDevice, b->xs));
    cx_timer_stop(b, t, b->xs);
    CK(b, cudaEventRecord(b->ev_up[buf], b->xs));
    return SS_OK;
}

/* The frame fits the raw buffers (any size up to geo.raw_w×raw_h). */
static int frame_fits(const ss_backend_t *b, const ss_frame_t *f)
{
    return f && f->pixels && f->width > 0 && f->height > 0 && f->width <= b->geo.raw_w &&
           f->height <= b->geo.raw_h && f->dtype == b->geo.raw_dtype;
}

/* ... and holds the part of the roi that cf says it carries. */
static int frame_holds(const ss_backend_t *b, const ss_frame_t *f, int vw, int vh)
{
    const ss_roi_t r = b->geo.roi;
    return frame_fits(b, f) && vw >= 1 && vw <= r.w && vh >= 1 && vh <= r.h &&
           r.x + vw <= f->width && r.y + vh <= f->height;
}

/* A raw buffer for a new upload: the other one than the last ingested
 * frame's, unless that one holds a prefetched frame still to come. */
static int free_raw_buffer(const ss_backend_t *b)
{
    const int other = 1 - b->raw_cur;
    if (!b->pref[other].pending)
        return other;
    if (!b->pref[b->raw_cur].pending)
        return b->raw_cur;
    return other;
}

ss_err_t ss_cuda_prefetch(ss_backend_t *b, const ss_frame_t *next)
{
    ss_err_t e = cx_op_begin(b);
    if (e)
        return e;
    if (!frame_fits(b, next))
        return SS_ERR_SIZE;
    for (int k = 0; k < 2; k++)
        if (b->pref[k].pending && b->pref[k].pixels == next->pixels &&
            b->pref[k].valid == next->valid && b->pref[k].seq == next->meta.seq)
            return SS_OK;                       /* already on its way */
    /* a pending segment that calibrates a raw buffer holds its "consumed"
     * event: record it (other pending work, such as the last frame's
     * history store, joins the next frame's segment) */
    if (b->seg_raw_buf >= 0 && (e = cx_flush(b)) != SS_OK)
        return e;
    const int buf = free_raw_buffer(b);
    b->pref[buf].pending = 0;
    if ((e = upload(b, next, buf)) != SS_OK)
        return e;
    b->pref[buf].pending = 1;
    b->pref[buf].pixels = next->pixels;
    b->pref[buf].valid = next->valid;
    b->pref[buf].seq = next->meta.seq;
    return SS_OK;
}

static ss_err_t cuda_ingest(ss_backend_t *b, const ss_frame_t *raw, const ss_calib_frame_t *cf)
{
    ss_err_t e = cx_op_begin(b);
    if (e)
        return e;
    const int vw = cf ? cf->valid_w : b->w, vh = cf ? cf->valid_h : b->h;
    if (!frame_holds(b, raw, vw, vh))
        return SS_ERR_SIZE;
    /* a new frame: its timers start here, with the previous frame's
     * deferred work (its history store) counted in */
    b->ntimers = 0;
    int buf = -1;
    for (int k = 0; k < 2; k++)
        if (b->pref[k].pending && b->pref[k].pixels == raw->pixels &&
            b->pref[k].valid == raw->valid && b->pref[k].seq == raw->meta.seq)
            buf = k;
    /* the pending work (the last frame's history store) joins this
     * frame's segment, unless the frame is uploaded only now: then it runs
     * while the upload does; and a pending segment that calibrates a raw
     * buffer goes first (its "consumed" event) */
    if ((buf < 0 || b->seg_raw_buf >= 0) && (e = cx_flush(b)) != SS_OK)
        return e;
    if (buf < 0) {
        buf = free_raw_buffer(b);
        b->pref[buf].pending = 0;
        if ((e = upload(b, raw, buf)) != SS_OK)
            return e;
    }
    b->pref[buf].pending = 0;
    b->raw_cur = buf;
    b->upload_pending = 1;
    CK(b, cudaStreamWaitEvent(b->cs, b->ev_up[buf], 0));

    if ((e = cx_params_begin(b)) != SS_OK)
        return e;
    const ss_pipeline_cfg_t *c = b->cfg;
    cu_params_t *hp = b->h_params;
    hp->raw = b->d_raw[buf];
    hp->raw_valid = raw->valid ? b->d_rawvalid[buf] : NULL;
    hp->sat = c->saturation > 0.0 ? c->saturation : ss_dtype_max(b->geo.raw_dtype);
    hp->raw_w = raw->width;
    hp->valid_w = vw;
    hp->valid_h = vh;
    hp->dark_scale = cf ? cf->dark_scale : 1.0;
    hp->row_bias = NULL;
    if (cf && cf->row_bias) {
        /* the previous segment's copy has left (cx_params_begin): the mirror is free */
        memcpy(b->h_row_bias, cf->row_bias, (size_t)b->h * sizeof(double));
        hp->row_bias = b->d_row_bias;
        b->row_bias_dirty = 1;
    }
    if ((e = cx_enqueue(b, st_calibrate, 0, SS_STAGE_CALIBRATE)) ||
        (e = cx_enqueue(b, st_median, 0, SS_STAGE_CALIBRATE)))
        return e;
    b->seg_raw_buf = buf;           /* cx_flush() marks the buffer consumed after it */
    if (c->hotpix_learn) {
        const int window = SS_CLAMP(c->hotpix_frames, 1, 65535);
        hp->hot_k = c->hotpix_k;
        hp->hot_need = SS_MAX(1, (int)ceil(c->hotpix_fraction * window - 1e-9));
        hp->hot_learn_now = ++b->hp_frames >= window;
        /* ss_hotpix_update's mid-window rule after the hp_frames-th frame */
        hp->hot_need_early = SS_MAX(SS_MAX(c->hotpix_min_frames, 1),
                                    (int)ceil(c->hotpix_fraction * b->hp_frames - 1e-9));
        if (hp->hot_learn_now)
            b->hp_frames = 0;
        if ((e = cx_enqueue(b, st_hotpix, 0, SS_STAGE_CALIBRATE)))
            return e;
    }
    /* the registration input; its σ serves the history store too */
    hp->clean_k = c->clean_k;
    hp->clean_ratio = c->clean_ratio;
    if ((e = cx_enqueue(b, st_regin, ss_cfg_hipass_radius(c), SS_STAGE_CALIBRATE)))
        return e;
    b->clean_sigma_stale = 0;
    return cx_op_end(b);
}

/* Grow the two raw buffers (and their masks) to max_w×max_h pixels. The
 * new ones are allocated before the old ones go, so a failure leaves the
 * instance as it was; a prefetched frame in an old buffer is dropped (its
 * ingest uploads it again). The raw pointers are per-frame parameters,
 * never kernel arguments: the cached graphs stay valid. */
static ss_err_t cuda_raw_reserve(ss_backend_t *b, int max_w, int max_h)
{
    ss_err_t e = cx_op_begin(b);
    if (e)
        return e;
    if (max_w <= b->geo.raw_w && max_h <= b->geo.raw_h)
        return SS_OK;
    max_w = SS_MAX(max_w, b->geo.raw_w);
    max_h = SS_MAX(max_h, b->geo.raw_h);
    if ((e = cx_flush(b)) != SS_OK)
        return e;
    CK(b, cudaStreamSynchronize(b->xs));
    CK(b, cudaStreamSynchronize(b->cs));
    const size_t pix = (size_t)max_w * (size_t)max_h;
    const size_t bytes = pix * ss_dtype_size(b->geo.raw_dtype);
    void *raw[2] = { NULL, NULL };
    uint8_t *valid[2] = { NULL, NULL };
    cudaError_t ce = cudaSuccess;
    cx_unsafe_begin();
    for (int i = 0; i < 2 && ce == cudaSuccess; i++) {
        ce = cudaMalloc(&raw[i], bytes);
        if (ce == cudaSuccess)
            ce = cudaMalloc((void **)&valid[i], pix);
        if (ce == cudaSuccess)          /* on cs: before any later step reads it */
            ce = cudaMemsetAsync(valid[i], 1, pix, b->cs);
    }
    if (ce != cudaSuccess) {
        for (int i = 0; i < 2; i++) {
            cudaFree(raw[i]);
            cudaFree(valid[i]);
        }
        cx_unsafe_end();
        SS_LOG(SS_LOG_ERR, TAG, "raw buffers for %dx%d frames: %s", max_w, max_h,
               cudaGetErrorString(ce));
        (void)cudaGetLastError();
        return ce == cudaErrorMemoryAllocation ? SS_ERR_NOMEM : SS_ERR_BACKEND;
    }
    for (int i = 0; i < 2; i++) {
        cudaFree(b->d_raw[i]);
        cudaFree(b->d_rawvalid[i]);
        b->d_raw[i] = raw[i];
        b->d_rawvalid[i] = valid[i];
        b->pref[i].pending = 0;
    }
    cx_unsafe_end();
    const size_t old_pix = (size_t)b->geo.raw_w * (size_t)b->geo.raw_h;
    b->dev_bytes = b->dev_bytes - 2 * (b->raw_bytes + old_pix) + 2 * (bytes + pix);
    b->raw_bytes = bytes;
    b->geo.raw_w = max_w;
    b->geo.raw_h = max_h;
    return SS_OK;
}

static ss_err_t ref_steps(ss_backend_t *b)
{
    ss_err_t e;
    if ((e = cx_enqueue(b, st_pyramid, 1, SS_STAGE_REG_COARSE)) ||
        (e = cx_enqueue(b, st_level_noise, 1, SS_STAGE_REG_COARSE)))
        return e;
    return SS_OK;
}

static ss_err_t cuda_set_reference(ss_backend_t *b)
{
    ss_err_t e = cx_op_begin(b);
    if (e || (e = cx_params_begin(b)))
        return e;
    if ((e = cx_enqueue(b, st_ref_copy, 0, SS_STAGE_REG_COARSE)) || (e = ref_steps(b)))
        return e;
    b->ref_peaks_valid = 0;         /* found at the next coarse step */
    return cx_op_end(b);
}

/* The coarse step, enqueued: the pyramid, the level noise, the peaks of
 * the frame (and of the reference when it is new), the vote and the
 * refinement. SS_OK with *go 0 and out->why set when it cannot run. */
static ss_err_t coarse_enqueue(ss_backend_t *b, ss_coarse_t *out, int *go)
{
    memset(out, 0, sizeof *out);
    *go = 0;
    const ss_pipeline_cfg_t *c = b->cfg;
    const int R = c->reg_search;
    if (c->reg_levels != b->L) {
        ss_strlcpy(out->why, "pyramids disagree in depth", sizeof out->why);
        return SS_OK;
    }
    if (R < 1 || R > SS_COARSE_MAX_R) {
        ss_strlcpy(out->why, "bad search range", sizeof out->why);
        return SS_OK;
    }
    ss_err_t e = cx_params_begin(b);
    if (e)
        return e;
    b->h_params->vote_R = R;
    b->h_params->vote_ambiguity = c->reg_ambiguity;
    if ((e = cx_enqueue(b, st_pyramid, 0, SS_STAGE_REG_COARSE)) ||
        (e = cx_enqueue(b, st_level_noise, 0, SS_STAGE_REG_COARSE)) ||
        (!b->ref_peaks_valid && (e = cx_enqueue(b, st_peaks, 1, SS_STAGE_REG_COARSE))) ||
        (e = cx_enqueue(b, st_peaks, 0, SS_STAGE_REG_COARSE)) ||
        (e = cx_enqueue(b, st_coarse, 0, SS_STAGE_REG_COARSE)))
        return e;
    *go = 1;
    return SS_OK;
}

/* The coarse result as the host reports it, once the segment is through
 * (and only then are the reference's top peaks known to be in d_res: a
 * segment that failed leaves them to the next coarse step). */
static void coarse_take(ss_backend_t *b, ss_coarse_t *out)
{
    const cu_coarse_t *c = &b->h_res->coarse;
    b->ref_peaks_valid = 1;
    out->n_ref = c->n_ref;
    out->n_cur = c->n_cur;
    out->n_votes = c->n_votes;
    out->n_second = c->n_second;
    out->expected = c->expected;
    if (!c->ok) {
        ss_vote_why(c->why, out);
        return;
    }
    out->dx = c->rdx;
    out->dy = c->rdy;
    out->ok = 1;
}

static ss_err_t cuda_register_coarse(ss_backend_t *b, ss_coarse_t *out)
{
    int go;
    ss_err_t e = cx_op_begin(b);
    if (e || (e = coarse_enqueue(b, out, &go)) || !go || (e = cx_flush_wait(b)))
        return e;
    coarse_take(b, out);
    return SS_OK;
}

/* The fine registration (cu_fine), enqueued: from (sx0, sy0), or with
 * from_coarse from the coarse step enqueued before it in this segment. */
static ss_err_t fine_enqueue(ss_backend_t *b, double sx0, double sy0, int from_coarse)
{
    const ss_pipeline_cfg_t *c = b->cfg;
    cu_params_t *hp = b->h_params;
    hp->fine_sx0 = sx0;
    hp->fine_sy0 = sy0;
    hp->fine_max_iter = SS_MAX(c->reg_max_iter, 1);
    hp->fine_tol = c->reg_tol;
    hp->fine_min_det = c->reg_min_det;
    return cx_enqueue(b, st_fine, hp->fine_max_iter | (from_coarse ? FINE_FROM_COARSE : 0),
                      SS_STAGE_REG_FINE);
}

static ss_err_t cuda_register_fine(ss_backend_t *b, double sx0, double sy0, ss_shift_t *out)
{
    ss_err_t e = cx_op_begin(b);
    if (e || (e = cx_params_begin(b)) || (e = fine_enqueue(b, sx0, sy0, 0)) ||
        (e = cx_flush_wait(b)))
        return e;
    ss_fine_report(&b->h_res->fine_st, out);
    return SS_OK;
}

/* Both steps as one segment and one wait: the vote, the refinement and
 * every fine pass on the device, the fine start read there. */
static ss_err_t cuda_register_frame(ss_backend_t *b, ss_coarse_t *c, ss_shift_t *out)
{
    int go;
    memset(out, 0, sizeof *out);
    ss_err_t e = cx_op_begin(b);
    if (e || (e = coarse_enqueue(b, c, &go)) || !go || (e = fine_enqueue(b, 0.0, 0.0, 1)) ||
        (e = cx_flush_wait(b)))
        return e;
    coarse_take(b, c);
    if (c->ok)
        ss_fine_report(&b->h_res->fine_st, out);
    return SS_OK;
}

/* Whether slots[0..n-1] name n history slots of the instance. */
static int slots_ok(const ss_backend_t *b, const int *slots, int n)
{
    if (n < 1 || n > b->geo.history)
        return 0;
    for (int k = 0; k < n; k++)
        if (slots[k] < 0 || slots[k] >= b->geo.history)
            return 0;
    return 1;
}

/* The history frames slots[0..n-1] (slots_ok) into the parameter block,
 * whose mirror is free (cx_params_begin). */
static void put_slots(ss_backend_t *b, const int *slots, int n)
{
    cu_params_t *hp = b->h_params;
    hp->n = n;
    for (int k = 0; k < n; k++)
        hp->hist[k] = b->d_hist + (size_t)slots[k] * b->hist_slot_bytes;
}

/* Slots, offsets (and weights) into the parameter block. */
static ss_err_t set_history(ss_backend_t *b, const int *slots, const int *ix, const int *iy,
                            const double *a, int n)
{
    if (!slots_ok(b, slots, n))
        return SS_ERR_INVALID;
    ss_err_t e = cx_params_begin(b);
    if (e)
        return e;
    put_slots(b, slots, n);
    cu_params_t *hp = b->h_params;
    for (int k = 0; k < n; k++) {
        hp->ix[k] = ix[k];
        hp->iy[k] = iy[k];
        hp->a[k] = a ? a[k] : 0.0;
    }
    return SS_OK;
}

static ss_err_t cuda_lsq_moments(ss_backend_t *b, const int *slots, const int *ix, const int *iy,
                                 int n, double *R, double *p)
{
    ss_err_t e = cx_op_begin(b);
    if (e || (e = set_history(b, slots, ix, iy, NULL, n)))
        return e;
    if ((e = cx_enqueue_with(b, st_lsq, n, SS_STAGE_WHITEN, STEP_PLAN)) || (e = cx_flush_wait(b)))
        return e;
    const double *Rp = b->h_lsq;
    for (int k = 0; k < n; k++) {
        for (int l = k; l < n; l++)
            R[k * n + l] = R[l * n + k] = Rp[(size_t)k * n + l];
        p[k] = Rp[(size_t)n * n + k];
    }
    return SS_OK;
}

static ss_err_t cuda_whiten(ss_backend_t *b, const int *slots, const int *ix, const int *iy,
                            const double *a, int n, const ss_reweight_t *rw)
{
    if (rw && rw->n != n)
        return SS_ERR_INVALID;
    ss_err_t e = cx_op_begin(b);
    if (e || (e = set_history(b, slots, ix, iy, a, n)))
        return e;
    if (rw)
        b->h_params->rw = *rw;
    b->mv_hp_r = 0;                 /* PREDICTION is rewritten */
    if ((e = cx_enqueue_with(b, st_whiten, rw != NULL, SS_STAGE_WHITEN,
                             rw ? STEP_REWEIGHT : STEP_PLAN)))
        return e;
    return cx_op_end(b);
}

/* The guided filter, enqueued (the mask, when masked, already in the
 * plan: needs says whether the host's goes up with it). */
static ss_err_t guided_enqueue(ss_backend_t *b, int radius, float eps, int masked, unsigned needs)
{
    b->h_params->gf_radius = radius;
    b->h_params->gf_eps = eps;
    /* the shape of the work: radius, which filter, with the mask or not */
    const int lap = b->cfg->guided_laplacian != 0;
    const int v = radius > 0 ? radius * 8 + (masked != 0) * 4 +
                                   (lap && b->cfg->guided_biharmonic) * 2 + lap
                             : 0;
    return cx_enqueue_with(b, st_guided, v, SS_STAGE_GUIDED, STEP_WRITES_CLEAN | needs);
}

static ss_err_t cuda_guided(ss_backend_t *b, int radius, float eps, const ss_gmask_t *mask)
{
    ss_err_t e = cx_op_begin(b);
    if (e || (e = cx_params_begin(b)))
        return e;
    if (mask)
        b->h_params->gf_mask = *mask;
    if ((e = guided_enqueue(b, radius, eps, mask != NULL, mask ? STEP_PLAN : 0)))
        return e;
    return cx_op_end(b);
}

/* The noise of a plane (stride ≥ 1), enqueued; dev: its σ stays on the
 * device as the frame's. */
static ss_err_t noise_enqueue(ss_backend_t *b, ss_plane_t which, int stride, int dev)
{
    b->h_params->noise_samp =
        (cu_sampler_t){ b->d_plane[which], NULL, b->w, b->h, CU_SAMP_PLANE, stride };
    b->sigma_dev = dev;
    b->stats_pending |= dev;
    if (dev && which == SS_PLANE_CLEAN && b->cfg->model_error) {
        /* the star map's high-passes beside this σ and the matched filter
         * (the modelvar op that follows takes them: mv_hp_r) */
        const int r = ss_mv_radius(b->cfg->psf_sigma);
        const ss_err_t e = cx_enqueue_with(b, st_mv_hipass, r, SS_STAGE_MATCHED, STEP_SIDE);
        if (e)
            return e;
        b->mv_hp_r = r;
    }
    return cx_enqueue_with(b, st_noise, stride | (dev ? DEV_SIGMA : 0), SS_STAGE_NOISE,
                           STEP_BESIDE);
}

static ss_err_t cuda_noise(ss_backend_t *b, ss_plane_t which, int stride, float *sigma)
{
    ss_err_t e = cx_op_begin(b);
    if (e)
        return e;
    if (which < SS_PLANE_FRAME || which > SS_PLANE_STAR)
        return SS_ERR_INVALID;
    if ((e = cx_params_begin(b)) || (e = noise_enqueue(b, which, stride < 1 ? 1 : stride, !sigma)))
        return e;
    if (!sigma)                     /* the frame's σ stays on the device */
        return cx_op_end(b);
    if ((e = cx_flush_wait(b)))
        return e;
    *sigma = b->h_res->sigma;
    return SS_OK;
}

/* register_frame's segment, then the plan (k_plan; lsq: the offsets, the
 * moments and k_lsq_solve) and the prediction from it, all enqueued: the
 * host waits first at the detection. */
static ss_err_t cuda_predict_planned(ss_backend_t *b, const ss_wplan_t *wp, const int *slots,
                                     int radius, float eps, const ss_gmask_t *gm, ss_coarse_t *c)
{
    const int n = wp->n;
    if (!slots_ok(b, slots, n) || (wp->masked != 0) != (gm != NULL))
        return SS_ERR_INVALID;
    int go;
    ss_err_t e = cx_op_begin(b);
    if (e || (e = coarse_enqueue(b, c, &go)) || !go)
        return e;
    cu_params_t *hp = b->h_params;
    hp->wp = *wp;
    if (gm)
        hp->gm_in = *gm;
    put_slots(b, slots, n);
    const int stride = SS_MAX(b->cfg->noise_stride, 1);
    b->mv_hp_r = 0;                 /* PREDICTION is rewritten */
    if ((e = fine_enqueue(b, 0.0, 0.0, 1)) ||
        (e = cx_enqueue_with(b, st_plan, 0, SS_STAGE_WHITEN, STEP_PLAN_IN)) ||
        (wp->lsq && (e = cx_enqueue(b, st_lsq, n | LSQ_ON_DEVICE, SS_STAGE_WHITEN))) ||
        (e = cx_enqueue(b, st_whiten, !wp->lsq, SS_STAGE_WHITEN)) ||
        (e = guided_enqueue(b, radius, eps, gm != NULL, 0)) ||
        (e = noise_enqueue(b, SS_PLANE_CLEAN, stride, 1)))
        return e;
    b->plan_waits = b->waits;
    return cx_op_end(b);
}

/* The registration's and the plan's results, once a wait has followed
 * predict_planned (else waited for here). */
static ss_err_t cuda_predict_take(ss_backend_t *b, ss_coarse_t *c, ss_shift_t *out, int *ix,
                                  int *iy, double *a, int *planned)
{
    memset(out, 0, sizeof *out);
    *planned = 0;
    ss_err_t e = cx_op_begin(b);
    if (e || ((b->npending > 0 || b->waits == b->plan_waits) && (e = cx_flush_wait(b))))
        return e;
    coarse_take(b, c);
    if (!c->ok)
        return SS_OK;
    ss_fine_report(&b->h_res->fine_st, out);
    const cu_plan_out_t *pl = b->h_plan;
    if (!out->ok || !pl->ok)
        return SS_OK;
    for (int k = 0; k < pl->n; k++) {
        ix[k] = pl->ix[k];
        iy[k] = pl->iy[k];
        a[k] = pl->a[k];
    }
    *planned = 1;
    return SS_OK;
}

/* The variant bit of a step that takes σ: from the device when the
 * caller passes SS_SIGMA_FRAME after a noise op that kept it there. */
static int sigma_variant(const ss_backend_t *b, float sigma)
{
    return sigma == SS_SIGMA_FRAME && b->sigma_dev ? DEV_SIGMA : 0;
}

/* σ for the parameter block: SS_SIGMA_FRAME after a noise op that
 * returned it is that σ (the step reads it from the device otherwise). */
static float host_sigma(const ss_backend_t *b, float sigma)
{
    return sigma == SS_SIGMA_FRAME ? b->h_res->sigma : sigma;
}

static ss_err_t cuda_matched(ss_backend_t *b, double psf_sigma, int phases, float sigma)
{
    ss_err_t e = cx_op_begin(b);
    if (e || (e = cx_params_begin(b)))
        return e;
    cu_params_t *hp = b->h_params;
    const int n = ss_mf_phases_used(psf_sigma, phases);
    int R = 0;
    for (int ph = 0; ph < n; ph++)
        R = ss_psf_kernel_phase(psf_sigma, ss_mf_phase(n, ph), hp->mf_k[ph]);
    hp->mf_phases = n;
    hp->mf_R = R;
    hp->mf_sigma = host_sigma(b, sigma);
    if ((e = cx_enqueue_with(b, st_matched, R | sigma_variant(b, sigma), SS_STAGE_MATCHED,
                             STEP_BESIDE)))
        return e;
    b->grow_raw = 0;
    return cx_op_end(b);
}

/* §6b, all on the device (no host round trip): the template, the
 * samples, their median (β, ss_mv_beta) and the division. β and the
 * samples' number come back with the detection's wait (cuda_frame_stats). */
static ss_err_t cuda_modelvar(ss_backend_t *b, int r, double psf_sigma, float sigma, int stride,
                              float tmin)
{
    ss_err_t e = cx_op_begin(b);
    if (e || (e = cx_params_begin(b)))
        return e;
    cu_params_t *hp = b->h_params;
    const int R = ss_psf_kernel(psf_sigma, hp->mv_k);
    hp->mv_sigma = host_sigma(b, sigma);
    hp->mv_stride = stride < 1 ? 1 : stride;
    hp->mv_tmin = tmin;
    const int hp_done = b->mv_hp_r == r ? MV_HP_DONE : 0;
    b->mv_hp_r = 0;
    if ((e = cx_enqueue(b, st_mv_template, (r * 64 + R) | sigma_variant(b, sigma) | hp_done,
                        SS_STAGE_MATCHED)) ||
        (e = cx_enqueue(b, st_mv_apply, 0, SS_STAGE_MATCHED)))
        return e;
    b->grow_raw = 1;                /* SNR_RAW is this z before its division (β = 0: z itself) */
    b->stats_pending = 1;
    return cx_op_end(b);
}

/* The frame's σ to the host (a segment of its own: frame_stats without a
 * detection since the noise op). */
static cudaError_t st_stats(ss_backend_t *b, cudaStream_t s, int v)
{
    (void)v;
    return cu_copy_small(&b->m_res->sigma, &b->d_res->sigma, sizeof(float), s);
}

/* The frame's σ, β and the number of samples of the last noise and
 * modelvar ops: as the detection's wait brought them back, or waited for
 * here when no detection ran since. */
static ss_err_t cuda_frame_stats(ss_backend_t *b, float *sigma, float *beta, int *n)
{
    ss_err_t e = cx_op_begin(b);
    if (e)
        return e;
    if (b->stats_pending) {
        if ((b->sigma_dev && (e = cx_enqueue(b, st_stats, 0, SS_STAGE_DETECT))) ||
            (e = cx_flush_wait(b)))
            return e;
        b->stats_pending = 0;
    }
    *sigma = b->h_res->sigma;
    *n = (int)SS_MIN(b->h_res->mv_count, (unsigned int)b->npix);
    *beta = b->h_res->mv_beta;
    return SS_OK;
}

/* A device accumulator as ss_comp_acc_t. */
static float key_to_float(unsigned int k)
{
    const uint32_t u = (k & 0x80000000u) ? (k & 0x7fffffffu) : ~k;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static void acc_decode(const cu_acc_t *d, ss_comp_acc_t *a)
{
    memset(a, 0, sizeof *a);
    a->sign = d->sign;
    a->area = d->area;
    a->sw = d->sw;
    a->swx = d->swx;
    a->swy = d->swy;
    a->swxx = d->swxx;
    a->swxy = d->swxy;
    a->swyy = d->swyy;
    a->sx = d->sx;
    a->sy = d->sy;
    a->flux = d->flux;
    a->rpos = d->rpos;
    if (d->rkey) {
        a->rmax = key_to_float((unsigned int)(d->rkey >> 32));
        a->ridx = (int)~(unsigned int)(d->rkey & 0xffffffffu);
    } else {
        a->rmax = -INFINITY;
        a->ridx = -1;
    }
    a->rwgt = d->rwgt;
    memcpy(a->zn, d->zn, sizeof a->zn);
    if (d->zkey) {
        a->zmax = key_to_float((unsigned int)(d->zkey >> 32));
        a->zidx = (int)~(unsigned int)(d->zkey & 0xffffffffu);
    } else {
        a->zmax = -INFINITY;
        a->zidx = -1;
    }
    a->x0 = d->x0;
    a->y0 = d->y0;
    a->x1 = d->x1;
    a->y1 = d->y1;
    a->kx0 = d->kx0;
    a->ky0 = d->ky0;
    a->kx1 = d->kx1;
    a->ky1 = d->ky1;
    a->invalid_nb = d->invalid_nb;
    a->edge = d->edge;
    a->label = d->label;
}

/* The first n accumulators to the host (up to acc_inline of them came
 * with the last detect segment, st_detect or st_detect_overflow; more go
 * to pageable memory through the copy engine, one wait); returns where
 * they are. */
static const cu_acc_t *acc_fetch(ss_backend_t *b, int n, ss_err_t *err)
{
    *err = SS_OK;
    if (n <= acc_inline(b))
        return b->h_acc;
    cu_acc_t *dst = b->h_acc_big;
    cudaError_t e = cudaMemcpyAsync(dst, b->d_acc, (size_t)n * sizeof(cu_acc_t),
                                    cudaMemcpyDeviceToHost, b->cs);
    if (e == cudaSuccess)
        e = cudaEventRecord(b->ev_done, b->cs);
    if (e == cudaSuccess)
        e = cudaEventSynchronize(b->ev_done);
    b->waits++;
    if (e != cudaSuccess) {
        *err = cx_fail(b, e, "accumulator read-back", __FILE__, __LINE__);
        return NULL;
    }
    return dst;
}

/* §7 on the device, ranked on the host as ss_measure_rank: labelling and
 * accumulation of up to max_comp components (k_detect.cu); a frame with
 * more runs cu_detect_overflow, which measures the max_comp most
 * significant eligible ones (exact: the same as measuring all). The
 * accumulators' zkey is ss_sig_key, so the host ranks the eligible ones
 * by it and finishes the kept in descending significance. */
static ss_err_t cuda_detect(ss_backend_t *b, float sigma, ss_detlist_t *out)
{
    ss_err_t e = cx_op_begin(b);
    if (e || (e = cx_params_begin(b)))
        return e;
    const ss_pipeline_cfg_t *c = b->cfg;
    cu_params_t *hp = b->h_params;
    hp->thresh = (float)c->thresh;
    hp->thresh_low = (float)c->thresh_low;
    hp->negative = c->negative;
    hp->max_comp = b->max_comp;
    hp->min_area = c->min_area;
    const int with_sigma = b->stats_pending && b->sigma_dev;
    if ((e = cx_enqueue(b, st_detect, b->grow_raw | (with_sigma ? 2 : 0), SS_STAGE_DETECT)) ||
        (e = cx_flush_wait(b)))
        return e;
    b->stats_pending = 0;
    if (sigma == SS_SIGMA_FRAME)
        sigma = b->h_res->sigma;
    const int nc = b->h_res->np + b->h_res->nn;
    int nacc = nc, unmeasured = 0;
    if (nc > b->max_comp) {
        if (!b->d_pkey) {           /* cannot happen: max_comp = ss_comp_bound then */
            SS_LOG(SS_LOG_ERR, TAG, "%d components in a frame bounded by %d", nc, b->max_comp);
            return SS_ERR_BACKEND;
        }
        if ((e = cx_params_begin(b)) || (e = cx_enqueue(b, st_detect_overflow, 0, SS_STAGE_DETECT)) ||
            (e = cx_flush_wait(b)))
            return e;
        nacc = SS_MIN(b->h_res->n_elig, b->max_comp);
        unmeasured = b->h_res->n_elig - nacc;
    }
    timer_t_ *t = b->timed ? cx_timer_start(b, b->cs, SS_STAGE_DETECT, 1) : NULL;
    const cu_acc_t *acc = acc_fetch(b, nacc, &e);
    if (!acc)
        return e;
    cx_timer_stop(b, t, b->cs);

    const int min_area = SS_MAX(c->min_area, 1);
    int m = 0;
    for (int k = 0; k < nacc; k++)
        if (acc[k].area >= min_area)
            b->h_rank[m++] = (ss_rank_t){ acc[k].zkey, k, 0 };
    const int kept = ss_rank_top(b->h_rank, m, ss_detect_keep(c, out));
    ss_detlist_clear(out);
    for (int j = 0; j < kept; j++) {
        ss_comp_acc_t a;
        acc_decode(&acc[b->h_rank[j].idx], &a);
        ss_measure_finish(&a, a.label, sigma, b->w, c, ss_detlist_push(out));
    }
    out->truncated = unmeasured + (m - kept);
    return SS_OK;
}

static ss_err_t cuda_history_store(ss_backend_t *b, int slot, int remove, int radius)
{
    ss_err_t e = cx_op_begin(b);
    if (e)
        return e;
    if (slot < 0 || slot >= b->geo.history)
        return SS_ERR_INVALID;
    if ((e = cx_params_begin(b)))
        return e;
    cu_params_t *hp = b->h_params;
    hp->store_dst = b->d_hist + (size_t)slot * b->hist_slot_bytes;
    hp->store_remove = remove != 0;
    hp->store_radius = radius < 0 ? 0 : radius;
    const int clean = b->cfg->clean_sharp == 0 ? 0 : b->clean_sigma_stale ? 2 : 1;
    hp->clean_k = b->cfg->clean_k;
    hp->clean_ratio = b->cfg->clean_ratio;
    b->clean_sigma_stale = 0;
    const int tile = !hp->store_remove || hp->store_radius <= CU_STORE_RMAX ? STORE_TILE : 0;
    if ((e = cx_enqueue(b, st_store, clean | tile, SS_STAGE_HISTORY)))
        return e;
    return cx_op_end(b);
}

static void *plane_ptr(ss_backend_t *b, ss_plane_t p, int slot, size_t *bytes)
{
    if (p >= SS_PLANE_FRAME && p <= SS_PLANE_STAR) {
        *bytes = b->npix * sizeof(float);
        return b->d_plane[p];
    }
    if (p == SS_PLANE_LABELS) {
        *bytes = b->npix * sizeof(int32_t);
        return b->d_labels;
    }
    if (p == SS_PLANE_HISTORY && slot >= 0 && slot < b->geo.history) {
        *bytes = b->hist_slot_bytes;
        return b->d_hist + (size_t)slot * b->hist_slot_bytes;
    }
    return NULL;
}

static ss_err_t cuda_read_plane(ss_backend_t *b, ss_plane_t p, int slot, void *dst)
{
    ss_err_t e = cx_op_begin(b);
    if (e || (e = cx_flush(b)))
        return e;
    size_t bytes;
    const void *src;
    if (p == SS_PLANE_BADMASK) {
        CK(b, cu_badmask(b->d_bad, b->d_learned, b->npix, b->d_u8, b->cs));
        src = b->d_u8;
        bytes = b->npix;
    } else if (p == SS_PLANE_REF_S || p == SS_PLANE_REF_GX || p == SS_PLANE_REF_GY) {
        /* not kept: the fine passes compute them from the reference */
        CK(b, cu_reference_prep(b->d_plane[SS_PLANE_REFERENCE], b->w, b->h, b->d_gs[0],
                                b->d_gs[1], b->d_gs[2], b->cs));
        src = b->d_gs[p - SS_PLANE_REF_S];
        bytes = b->npix * sizeof(float);
    } else if (!(src = plane_ptr(b, p, slot, &bytes))) {
        return SS_ERR_INVALID;
    }
    timer_t_ *t = cx_timer_start(b, b->cs, SS_STAGE_DOWNLOAD, 1);
    CK(b, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, b->cs));
    cx_timer_stop(b, t, b->cs);
    return cx_wait_done(b);
}

static ss_err_t cuda_write_plane(ss_backend_t *b, ss_plane_t p, int slot, const void *src)
{
    ss_err_t e = cx_op_begin(b);
    if (e || (e = cx_flush(b)))
        return e;
    size_t bytes;
    void *dst = plane_ptr(b, p, slot, &bytes);
    if (!dst)
        return SS_ERR_INVALID;
    if (p == SS_PLANE_CLEAN && b->rd_guard) {
        CK(b, cudaStreamWaitEvent(b->cs, b->ev_rd[b->rd_issued % RD_RING], 0));
        b->rd_guard = 0;
    }
    if (p == SS_PLANE_FRAME || p == SS_PLANE_FILTERED)
        b->clean_sigma_stale = 1;   /* the store selects its noise again */
    if (p == SS_PLANE_PREDICTION)
        b->mv_hp_r = 0;             /* the star map's high-passes ahead read the old one */
    if (p == SS_PLANE_REFERENCE)
        b->ref_peaks_valid = 0;
    if (p == SS_PLANE_SNR || p == SS_PLANE_SNR_RAW)
        b->grow_raw = p == SS_PLANE_SNR_RAW;    /* backend.h: which map detection grows on */
    CK(b, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, b->cs));
    if (p == SS_PLANE_REFERENCE) {
        /* a written reference is followed by its pyramid and gradients */
        if ((e = cx_params_begin(b)) || (e = ref_steps(b)))
            return e;
        if ((e = cx_flush(b)))
            return e;
    }
    return cx_wait_done(b);
}

/* The residual download on its own stream (the second copy engine), so
 * that it overlaps the matched filter, detection and the next frame's
 * first stages (and the next frame's upload on xs). */
static ss_err_t cuda_read_begin(ss_backend_t *b, ss_plane_t p, void *dst, uint64_t *ticket)
{
    ss_err_t e = cx_op_begin(b);
    if (e)
        return e;
    if (p != SS_PLANE_CLEAN || !dst || !ticket)
        return SS_ERR_INVALID;
    /* no flush: the copy leaves from a mark inside the frame's segment */
    const uint64_t k = b->rd_issued + 1;
    if ((e = cx_defer_download(b, dst, b->d_plane[SS_PLANE_CLEAN], b->npix * sizeof(float), k)))
        return e;
    b->rd_issued = k;
    *ticket = k;
    return cx_op_end(b);
}

/* The forms of CLEAN made on cs (its order keeps the next frame's guided
 * filter from overwriting CLEAN first) and copied down on ds, so that only
 * their bytes cross; the next call's kernels wait for this call's copies
 * to have left d_half and d_stamps (on that ticket's event, or a later
 * one's that reused its slot: ds is in order), not for a residual
 * download issued since. */
static ss_err_t cuda_read_forms(ss_backend_t *b, uint16_t *half, ss_stamps_t *st, uint64_t *ticket)
{
    ss_err_t e = cx_op_begin(b);
    if (e || (e = cx_flush(b)))
        return e;
    if (!ticket)
        return SS_ERR_INVALID;
    const int n = st ? st->count : 0;
    if (b->forms_ticket)
        CK(b, cudaStreamWaitEvent(b->cs, b->ev_rd[b->forms_ticket % RD_RING], 0));
    if (half)
        CK(b, cu_to_f16(b->d_plane[SS_PLANE_CLEAN], b->npix, b->d_half, b->cs));
    if (n > 0) {
        size_t largest = 0;
        CK(b, cudaEventSynchronize(b->ev_boxes));     /* h_boxes free again */
        for (int k = 0; k < n; k++) {
            const ss_stamp_t *s = &st->items[k];
            b->h_boxes[k] = (cu_box_t){ .x0 = s->x0, .y0 = s->y0, .w = s->w, .h = s->h,
                                        .off = (unsigned long long)s->offset };
            largest = SS_MAX(largest, (size_t)s->w * (size_t)s->h);
        }
        CK(b, cudaMemcpyAsync(b->d_boxes, b->h_boxes, (size_t)n * sizeof(cu_box_t),
                              cudaMemcpyHostToDevice, b->cs));
        CK(b, cudaEventRecord(b->ev_boxes, b->cs));
        CK(b, cu_cut_stamps(b->d_plane[SS_PLANE_CLEAN], b->w, b->d_boxes, n, largest,
                            b->d_stamps, b->cs));
    }
    CK(b, cudaEventRecord(b->ev_ready, b->cs));
    CK(b, cudaStreamWaitEvent(b->ds, b->ev_ready, 0));
    if (half)
        CK(b, cudaMemcpyAsync(half, b->d_half, b->npix * sizeof(uint16_t),
                              cudaMemcpyDeviceToHost, b->ds));
    if (n > 0 && st->npix > 0)
        CK(b, cudaMemcpyAsync(st->pixels, b->d_stamps, st->npix * sizeof(float),
                              cudaMemcpyDeviceToHost, b->ds));
    const uint64_t k = ++b->rd_issued;
    CK(b, cudaEventRecord(b->ev_rd[k % RD_RING], b->ds));
    b->forms_ticket = k;
    *ticket = k;
    return SS_OK;
}

/* ds is in order: the event of ticket k, or of a later ticket that reused
 * its slot, completes only when download k has. */
static ss_err_t cuda_read_wait(ss_backend_t *b, uint64_t ticket)
{
    if (b->broken)
        return SS_ERR_BROKEN;
    if (ticket == 0 || ticket > b->rd_issued)
        return SS_ERR_INVALID;
    if (ticket == b->dl_dropped)
        return SS_ERR_BACKEND;                  /* its segment failed: the bytes never come */
    CK(b, cudaSetDevice(b->device));
    if (b->dl.pending && b->dl.ticket == ticket) {
        const ss_err_t e = cx_flush(b);         /* its segment is still being built */
        if (e)
            return e;
    }
    CK(b, cudaEventSynchronize(b->ev_rd[ticket % RD_RING]));
    return SS_OK;
}

static void cuda_stage_times(ss_backend_t *b, double ms[SS_STAGE__COUNT])
{
    for (int s = 0; s < SS_STAGE__COUNT; s++)
        ms[s] = -1.0;
    if (b->broken || b->ntimers == 0)
        return;
    for (int i = 0; i < b->ntimers; i++) {
        timer_t_ *t = &b->timers[i];
        if (t->stage < 0)
            continue;
        float f = 0.0f;
        if (cudaEventSynchronize(t->b) != cudaSuccess ||
            cudaEventElapsedTime(&f, t->a, t->b) != cudaSuccess) {
            (void)cudaGetLastError();
            continue;
        }
        ms[t->stage] = (ms[t->stage] < 0.0 ? 0.0 : ms[t->stage]) + (double)f;
    }
}

double ss_cuda_frame_ms(ss_backend_t *b)
{
    if (b->broken)
        return -1.0;
    if (cx_flush(b) != SS_OK)
        return -1.0;
    double total = 0.0;
    for (int i = 0; i < b->ntimers; i++) {
        timer_t_ *t = &b->timers[i];
        if (t->copy)
            continue;
        float f = 0.0f;
        if (cudaEventSynchronize(t->b) != cudaSuccess ||
            cudaEventElapsedTime(&f, t->a, t->b) != cudaSuccess) {
            (void)cudaGetLastError();
            return -1.0;
        }
        total += (double)f;
    }
    return total;
}

void ss_cuda_set_select_small(ss_backend_t *b, long long max_samples)
{
    b->sel_small_max = max_samples;
    b->sel_buf_max = max_samples;
}

long long ss_cuda_select_cluster_max(const ss_backend_t *b)
{
    return b->sel_cluster_max;
}

void ss_cuda_set_mode(ss_backend_t *b, int timed, int graphs)
{
    b->timed = timed != 0;
    b->use_graphs = graphs != 0;
}

void ss_cuda_graph_stats(ss_backend_t *b, int *graphs, long *launches, long *waits)
{
    if (graphs)
        *graphs = b->ngraphs;
    if (launches)
        *launches = b->launches;
    if (waits)
        *waits = b->waits;
}

long ss_cuda_error_count(ss_backend_t *b)
{
    return b->errors;
}

ss_err_t ss_cuda_inject_fault(ss_backend_t *b, int kind)
{
    ss_err_t e = cx_op_begin(b);
    if (e || (e = cx_flush(b)))
        return e;
    CK(b, cu_fault(kind, b->cs));
    return cx_wait_done(b);
}

static void cuda_memory(ss_backend_t *b, size_t *used, size_t *total)
{
    size_t fr = 0, tot = 0;
    *used = b->dev_bytes;
    *total = 0;
    if (!b->broken && cudaSetDevice(b->device) == cudaSuccess &&
        cudaMemGetInfo(&fr, &tot) == cudaSuccess)
        *total = tot;
    (void)cudaGetLastError();
}

/* The ops as the table exposes them: each timed on the host clock (wall
 * time spent inside the op, since the last ingest began), which is where
 * the benchmark sees the host's share of a frame. */
#define HOST_TIMED(name, stage, params, args)                               \
    static ss_err_t name##_timed params                                     \
    {                                                                       \
        const double t0_ = ss_now_mono();                                   \
        const ss_err_t e_ = name args;                                      \
        b->host_ms[stage] += (ss_now_mono() - t0_) * 1e3;                   \
        return e_;                                                          \
    }

static ss_err_t cuda_ingest_timed(ss_backend_t *b, const ss_frame_t *raw,
                                  const ss_calib_frame_t *cf)
{
    memset(b->host_ms, 0, sizeof b->host_ms);
    const double t0 = ss_now_mono();
    const ss_err_t e = cuda_ingest(b, raw, cf);
    b->host_ms[SS_STAGE_CALIBRATE] += (ss_now_mono() - t0) * 1e3;
    return e;
}
HOST_TIMED(cuda_set_reference, SS_STAGE_REG_COARSE, (ss_backend_t *b), (b))
HOST_TIMED(cuda_register_coarse, SS_STAGE_REG_COARSE, (ss_backend_t *b, ss_coarse_t *out),
           (b, out))
HOST_TIMED(cuda_register_fine, SS_STAGE_REG_FINE,
           (ss_backend_t *b, double sx0, double sy0, ss_shift_t *out), (b, sx0, sy0, out))
HOST_TIMED(cuda_register_frame, SS_STAGE_REG_FINE,
           (ss_backend_t *b, ss_coarse_t *c, ss_shift_t *out), (b, c, out))
HOST_TIMED(cuda_predict_planned, SS_STAGE_REG_FINE,
           (ss_backend_t *b, const ss_wplan_t *wp, const int *slots, int radius, float eps,
            const ss_gmask_t *gm, ss_coarse_t *c),
           (b, wp, slots, radius, eps, gm, c))
HOST_TIMED(cuda_predict_take, SS_STAGE_DETECT,
           (ss_backend_t *b, ss_coarse_t *c, ss_shift_t *out, int *ix, int *iy, double *a,
            int *planned),
           (b, c, out, ix, iy, a, planned))
HOST_TIMED(cuda_lsq_moments, SS_STAGE_WHITEN,
           (ss_backend_t *b, const int *slots, const int *ix, const int *iy, int n, double *R,
            double *p),
           (b, slots, ix, iy, n, R, p))
HOST_TIMED(cuda_whiten, SS_STAGE_WHITEN,
           (ss_backend_t *b, const int *slots, const int *ix, const int *iy, const double *a,
            int n, const ss_reweight_t *rw),
           (b, slots, ix, iy, a, n, rw))
HOST_TIMED(cuda_guided, SS_STAGE_GUIDED,
           (ss_backend_t *b, int radius, float eps, const ss_gmask_t *mask),
           (b, radius, eps, mask))
HOST_TIMED(cuda_noise, SS_STAGE_NOISE, (ss_backend_t *b, ss_plane_t which, int stride, float *sigma),
           (b, which, stride, sigma))
HOST_TIMED(cuda_matched, SS_STAGE_MATCHED,
           (ss_backend_t *b, double psf_sigma, int phases, float sigma),
           (b, psf_sigma, phases, sigma))
HOST_TIMED(cuda_modelvar, SS_STAGE_MATCHED,
           (ss_backend_t *b, int r, double psf_sigma, float sigma, int stride, float tmin),
           (b, r, psf_sigma, sigma, stride, tmin))
HOST_TIMED(cuda_frame_stats, SS_STAGE_DETECT, (ss_backend_t *b, float *sigma, float *beta, int *n),
           (b, sigma, beta, n))
HOST_TIMED(cuda_detect, SS_STAGE_DETECT, (ss_backend_t *b, float sigma, ss_detlist_t *out),
           (b, sigma, out))
HOST_TIMED(cuda_history_store, SS_STAGE_HISTORY, (ss_backend_t *b, int slot, int remove, int radius),
           (b, slot, remove, radius))
HOST_TIMED(cuda_read_plane, SS_STAGE_DOWNLOAD, (ss_backend_t *b, ss_plane_t p, int slot, void *dst),
           (b, p, slot, dst))
HOST_TIMED(cuda_read_begin, SS_STAGE_DOWNLOAD,
           (ss_backend_t *b, ss_plane_t p, void *dst, uint64_t *ticket), (b, p, dst, ticket))
HOST_TIMED(cuda_read_wait, SS_STAGE_DOWNLOAD, (ss_backend_t *b, uint64_t ticket), (b, ticket))
HOST_TIMED(cuda_read_forms, SS_STAGE_DOWNLOAD,
           (ss_backend_t *b, uint16_t *half, ss_stamps_t *st, uint64_t *ticket),
           (b, half, st, ticket))
HOST_TIMED(cuda_write_plane, SS_STAGE_UPLOAD,
           (ss_backend_t *b, ss_plane_t p, int slot, const void *src), (b, p, slot, src))

void ss_cuda_host_ms(ss_backend_t *b, double ms[SS_STAGE__COUNT])
{
    memcpy(ms, b->host_ms, sizeof b->host_ms);
}

/* The pending segment, launched (a graph) without a wait. */
static ss_err_t cuda_launch(ss_backend_t *b)
{
    const ss_err_t e = cx_op_begin(b);
    return e ? e : cx_flush(b);
}

static const ss_backend_ops_t cuda_ops = {
    .name = "cuda",
    .probe = cuda_probe,
    .create = cuda_create,
    .destroy = cuda_destroy,
    .host_alloc = { cuda_host_alloc, cuda_host_free, NULL },
    .ingest = cuda_ingest_timed,
    .raw_reserve = cuda_raw_reserve,
    .set_reference = cuda_set_reference_timed,
    .register_coarse = cuda_register_coarse_timed,
    .register_fine = cuda_register_fine_timed,
    .register_frame = cuda_register_frame_timed,
    .predict_planned = cuda_predict_planned_timed,
    .predict_take = cuda_predict_take_timed,
    .lsq_moments = cuda_lsq_moments_timed,
    .whiten = cuda_whiten_timed,
    .guided = cuda_guided_timed,
    .noise = cuda_noise_timed,
    .matched = cuda_matched_timed,
    .modelvar = cuda_modelvar_timed,
    .frame_stats = cuda_frame_stats_timed,
    .detect = cuda_detect_timed,
    .history_store = cuda_history_store_timed,
    .read_plane = cuda_read_plane_timed,
    .write_plane = cuda_write_plane_timed,
    .stage_times = cuda_stage_times,
    .memory = cuda_memory,
    .prefetch = ss_cuda_prefetch,
    .launch = cuda_launch,
    .read_begin = cuda_read_begin_timed,
    .read_wait = cuda_read_wait_timed,
    .read_forms = cuda_read_forms_timed,
};

const ss_backend_ops_t *ss_backend_cuda_ops(void)
{
    return &cuda_ops;
}
