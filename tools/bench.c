/*
 * bench.c — skysieve-bench: speed of the processing chain per backend
 * (issue 2 "Speed", issue 3 item 7). A program, never a test: it prints
 * figures, it asserts nothing.
 *
 *   skysieve-bench [--backend cpu|cuda|both] [--size 512,2048] [--history 20,64]
 *                  [--frames N] [--warmup N] [--phases N] [--model-error 0|1]
 *                  [--guided-mask 0|1] [--output f32|f16|stamps] [--device D] [--csv FILE]
 *                  [--feeds K] [--share S] [--verbose] [--help]
 *
 * Input: synthetic u16 star fields (tools/synth.h: stars, jitter, hot
 * pixels, cosmic rays, movers, a streak now and then), N + 4 frames
 * rendered before any timing and rotated (fewer where they would take
 * more than 1 GiB, which the output says), so the generator costs
 * nothing, the caches see new data every frame and the history never
 * holds a copy of the frame processed (rotating 4, the movers' jumps back
 * made tracks and detections grow run by run: docs/PERFORMANCE.md).
 *
 * Each configuration runs the daemon's own path, ss_pipeline_process, after
 * 2N + 4 frames of warm-up (the history full, every graph captured, and
 * every frame stored before the first ok one out of the history again:
 * while such frames weigh in, the slow-mover fits run on the host for the
 * bright detections, milliseconds each — docs/PERFORMANCE.md measures that
 * start-up phase separately, with --warmup):
 *  - per stage: CPU wall clock through the ops (stage_times); GPU: CUDA
 *    events around every step in the backend's timed mode (which runs
 *    each op at once, without graphs);
 *  - per frame (GPU, graph mode): GPU compute ms (the sum of the segments'
 *    event times, copies excluded) and wall ms per frame;
 *  - end to end (GPU): frames/s of the whole loop as the daemon's worker
 *    runs it under load: raw frames in pinned memory, the next frame
 *    prefetched (its upload overlaps the current frame's compute), the
 *    residual read back every frame into a pinned result buffer, frame t
 *    started (ss_pipeline_start) before frame t-1's residual is waited for
 *    (ss_pipeline_finish);
 *  - bytes moved per frame (a model: the least traffic of each stage,
 *    every input read once, every output written once) over the
 *    device-to-device copy bandwidth measured in the same run = the floor;
 *    and the PCIe-bound frame rate from the measured pinned H2D/D2H rates.
 * Without arguments: CPU at 1024² and 2048² (N = 20); CUDA at 512², 2048²,
 * 4096² (N = 20) and 2048² (N = 64).
 *
 * --feeds K (K > 1): after each CUDA case, K pipelines of that case on the
 * same GPU, each in its own thread with its own frames, run the end-to-end
 * loop at once, as K feeds of one daemon do (each feed its own backend
 * instance and streams; nothing is batched across feeds): frames/s in
 * all, from the moment every feed has warmed up to the last one's end.
 * Each feed's pipeline.device_feeds is K (as the daemon sets it for K
 * feeds on one device), or S with --share S; --share S also sets it for
 * the single-pipeline cases (default 1), so that a profile of one
 * pipeline shows the kernels as S feeds run them.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "pipeline/pipeline.h"
#include "tools/synth.h"
#ifdef SKYSIEVE_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "cuda/backend_cuda.h"
#endif

#define MAX_CASES 16
#define ROT_MIN 4                   /* frames rotated through, at least */
#define ROT_BYTES ((size_t)1 << 30) /* ... and at most this much host memory a pipeline */

typedef struct bench_case {
    int cuda;                       /* 0 cpu, 1 cuda */
    int size, history;
} bench_case_t;

typedef struct bench_out {
    double stage_ms[SS_STAGE__COUNT];
    double total_ms;                /* CPU: wall per frame; GPU: compute ms (graph mode) */
    double wall_ms;                 /* GPU graph mode, wall per frame (no prefetch) */
    double e2e_fps;                 /* GPU: with prefetch, pinned frames */
    double timed_sum_ms;            /* GPU timed mode: sum of the stage times */
    double bytes_model;             /* least device traffic per frame (bytes) */
    double host_ms[SS_STAGE__COUNT];    /* GPU graph mode: wall time inside each op */
    double merge_ms;                /* ss_merge_streaks on the frame's detections (host) */
    double track_ms;                /* the pipeline's tracking (ss_result_t.track_ms) */
    double waits, launches;         /* GPU graph mode, per frame: host waits, graph launches */
    double launches_e2e;            /* ... graph launches in the pipelined pass (prefetched) */
    int ok_frames, dets;
} bench_out_t;

typedef struct bw {
    double d2d, h2d, d2h, d2h_pageable;     /* GB/s (d2d counts read + write) */
} bw_t;

static void usage(FILE *out)
{
    fprintf(out,
            "usage: skysieve-bench [--backend cpu|cuda|both] [--size LIST] [--history LIST]\n"
            "                      [--frames N] [--warmup N] [--phases N]\n"
            "                      [--model-error 0|1] [--guided-mask 0|1]\n"
            "                      [--output f32|f16|stamps] [--device D] [--csv FILE]\n"
            "                      [--feeds K] [--share S] [--verbose] [--help]\n"
            "LIST is comma-separated, e.g. --size 512,2048. Without --size/--history: the\n"
            "issue's matrix (cpu 1024² and 2048² at N=20; cuda 512², 2048², 4096² at N=20 and\n"
            "2048² at N=64). --warmup: untimed frames first, default 2N+4 (the history\n"
            "full and the frames stored before the first ok one replaced: the steady state).\n"
            "--phases: pipeline.matched.phases (1 one kernel, 2 the 2x2 bank; default auto,\n"
            "one kernel at the bench's PSF sigma of 1.4 px).\n"
            "--model-error, --guided-mask: pipeline.noise.model_error and\n"
            "pipeline.guided.mask off (0) or on (1); default: the keys' defaults.\n"
            "--output: what each result carries, as a subscriber asks for it (PROTOCOL.md\n"
            "§5a/§5b): the float32 residual (default), its float16 alone, or stamps alone;\n"
            "e2e_fps then reads back that form (pcie%% stays against the float32 copy).\n"
            "--frames N: timed frames per case (default 3 on the CPU, 60 on CUDA).\n"
            "--feeds K (2-64; 1: none): after each CUDA case, K feeds of it on the GPU at once, each its\n"
            "own pipeline and thread (nothing batched across feeds): frames/s in all.\n"
            "--share S (1-64): every pipeline sizes the guided filter's grid to 1/S of the GPU and\n"
            "the fine registration's blocks for S feeds (pipeline.device_feeds, which the daemon\n"
            "sets to its feeds on the device); default 1, and K for the K feeds, as the daemon would.\n"
            "Input: N + 4 synthetic frames rendered before any timing and rotated (fewer where they\n"
            "would take over 1 GiB, which the output says), so the history never holds a copy of\n"
            "the frame processed. The CUDA cases' host line gives the time outside the ops and,\n"
            "of it, the tracking's (the tracker's step and the stored frames' cleaning).\n"
            "--verbose: each frame's status and reason on stderr.\n"
            "Exit status: 0 done, 1 a case or the GPU failed, 2 a bad command line.\n");
}

static int parse_list(const char *s, int *v, int max)
{
    int n = 0;
    while (s && *s && n < max) {
        char *end;
        const long x = strtol(s, &end, 10);
        if (end == s || x <= 0)
            return -1;
        v[n++] = (int)x;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',')
            return -1;
    }
    return n;
}

/* The least bytes each stage moves through device memory per pixel
 * (inputs read once, outputs written once), as ALGORITHM.md's budget:
 * ingest raw -> frame, median; one fine-registration pass (frame + S, gx,
 * gy); whitening N history frames + frame -> P, r; guided I, p -> r';
 * matched r' -> z; detection z -> labels; history store frame ->
 * slot (+ labels). Noise estimates sample a quarter of the pixels. */
static double bytes_model(int size, int history, int hist_bytes)
{
    const double px = (double)size * size;
    const double per_px = (2 + 4) + (4 + 4) + 16 + (history * hist_bytes + 4 + 8) + (8 + 4) +
                          1 + (4 + 4) + (4 + 4) + (4 + 4 + hist_bytes) + 1;
    return per_px * px;
}

static int share_override = 0;      /* --share: pipeline.device_feeds (0: 1, K with --feeds K) */

static ss_pipeline_cfg_t bench_cfg(int cuda, int history, int device)
{
    ss_pipeline_cfg_t c;
    ss_pipeline_cfg_defaults(&c);
    c.backend = cuda ? SS_BACKEND_CUDA : SS_BACKEND_CPU;
    c.device = device;
    c.history = history;
    c.device_feeds = share_override;    /* --share S; the feeds' runs set their own */
    return c;
}

static ss_synth_t *bench_synth(int size, uint64_t seed)
{
    ss_synth_cfg_t sc;
    ss_synth_defaults(&sc);
    sc.width = sc.height = size;
    sc.seed = seed;
    sc.n_stars = (int)(2000.0 * (double)size * size / (1024.0 * 1024.0));
    if (sc.n_stars < 50)
        sc.n_stars = 50;
    sc.jitter = 1.0;
    sc.n_hot = 50;
    sc.cosmic_rate = 20.0;
    sc.n_movers = 5;
    sc.mover_snr = 10.0;
    sc.streak_prob = 0.1;
    return ss_synth_new(&sc);
}

/* The frames a pass rotates through (rendered before any timing). */
typedef struct rotation {
    ss_frame_t *fr;                 /* n frames; owned */
    int n;
} rotation_t;

/* Frame t of the rotation. */
static ss_frame_t *rot_frame(const rotation_t *rot, int t)
{
    return &rot->fr[t % rot->n];
}

/* How many frames of `bytes` a pipeline of `history` frames rotates
 * through: history + 4, so that the history never holds a copy of the
 * frame processed (with 4, the tracker links the movers' jumps back to
 * their start and the detections grow with the run: docs/PERFORMANCE.md,
 * 2026-11-26), unless that takes more than ROT_BYTES. */
static int rotation_len(size_t bytes, int history)
{
    const long long most = (long long)(ROT_BYTES / (bytes ? bytes : 1));
    long long n = (long long)history + ROT_MIN;
    if (n > most)
        n = most;
    return n < ROT_MIN ? ROT_MIN : (int)n;
}

/* The rotation's host memory, and the rotation emptied. */
static void free_frames(const ss_backend_ops_t *ops, rotation_t *rot)
{
    for (int k = 0; rot->fr && k < rot->n; k++)
        if (rot->fr[k].pixels)
            ops->host_alloc.free(rot->fr[k].pixels, ops->host_alloc.user);
    free(rot->fr);
    *rot = (rotation_t){ 0 };
}

/* rotation_len frames of a size² field (bench_synth, seed) into rot, in
 * the backend's host memory (pinned on CUDA). 0, or -1 (what was
 * allocated is freed). */
static int prerender(const ss_backend_ops_t *ops, int size, int history, uint64_t seed,
                     rotation_t *rot)
{
    const size_t bytes = (size_t)size * size * sizeof(uint16_t);
    rot->n = rotation_len(bytes, history);
    rot->fr = calloc((size_t)rot->n, sizeof rot->fr[0]);
    ss_synth_t *syn = rot->fr ? bench_synth(size, seed) : NULL;
    int ok = syn != NULL;
    for (int k = 0; k < rot->n && ok; k++) {
        rot->fr[k].pixels = ops->host_alloc.alloc(bytes, ops->host_alloc.user);
        rot->fr[k].capacity = bytes;
        ok = rot->fr[k].pixels && ss_synth_next(syn, &rot->fr[k], NULL) == SS_OK;
    }
    ss_synth_destroy(&syn);
    if (!ok)
        free_frames(ops, rot);
    else if (rot->n < history + ROT_MIN)
        printf("# %d² N=%d: %d frames rotated (fewer than N + %d: the history holds copies of "
               "the frame processed)\n",
               size, history, rot->n, ROT_MIN);
    return ok ? 0 : -1;
}

static int warmup_override = -1;    /* --warmup: untimed frames first (-1: 2N + 4) */
static int phases_override = -1;    /* --phases: pipeline.matched.phases */
static int model_error_override = -1; /* --model-error: pipeline.noise.model_error */
static int guided_mask_override = -1; /* --guided-mask: pipeline.guided.mask */
static const char *output_form = "f32"; /* --output: f32, f16 or stamps */
static int verbose = 0;             /* --verbose: each frame's status on stderr */

/* The untimed frames before case bc's timed ones: --warmup, else 2N + 4. */
static int case_warmup(const bench_case_t *bc)
{
    return warmup_override >= 0 ? warmup_override : 2 * bc->history + 4;
}

/* The outputs --output names (ss_pipeline_set_outputs). */
static ss_outputs_t bench_outputs(void)
{
    ss_outputs_t o = ss_outputs_default();
    if (strcmp(output_form, "f32") != 0) {
        o.f32 = 0;
        o.f16 = !strcmp(output_form, "f16");
        o.stamps = !strcmp(output_form, "stamps");
    }
    return o;
}

/* A case's resources, shared by its passes: the backend, its frames, the
 * configuration, two result buffers whose residuals sit in the backend's
 * host memory (pinned on CUDA) as a daemon's result pool has them (the
 * end-to-end pass starts frame t before it finishes frame t-1), and the
 * detections the streak merging is timed on. */
typedef struct case_res {
    const ss_backend_ops_t *ops;
    rotation_t rot;
    ss_pipeline_cfg_t cfg;
    ss_result_t rbuf[2];
    ss_detlist_t scratch;
} case_res_t;

/* What a pass adds up over its timed frames. */
typedef struct pass_acc {
    double stage_sum[SS_STAGE__COUNT];
    int stage_n[SS_STAGE__COUNT];
    double gpu_ms, wall;
    int timed;
} pass_acc_t;

enum { PASS_TIMED, PASS_GRAPH, PASS_E2E };  /* per-stage times; graph mode; end to end */

/* Case bc's resources into r (r zeroed first, so case_close may follow a
 * failure). 0, or -1 after a message. */
static int case_open(const bench_case_t *bc, int device, case_res_t *r)
{
    memset(r, 0, sizeof *r);
    r->ops = bc->cuda ? ss_backend_cuda_ops() : &ss_backend_cpu;
    if (!r->ops) {
        fprintf(stderr, "bench: built without CUDA\n");
        return -1;
    }
    const int S = bc->size;
    if (prerender(r->ops, S, bc->history, 12345, &r->rot) != 0) {
        fprintf(stderr, "bench: cannot render %dx%d frames\n", S, S);
        return -1;
    }
    r->cfg = bench_cfg(bc->cuda, bc->history, device);
    if (phases_override >= 0)
        r->cfg.mf_phases = phases_override;
    if (model_error_override >= 0)
        r->cfg.model_error = model_error_override != 0;
    if (guided_mask_override >= 0)
        r->cfg.guided_mask = guided_mask_override != 0;
    if (ss_result_init_with(&r->rbuf[0], (size_t)S * S, 4096, &r->ops->host_alloc) != 0 ||
        ss_result_init_with(&r->rbuf[1], (size_t)S * S, 4096, &r->ops->host_alloc) != 0 ||
        ss_detlist_init(&r->scratch, 4096) != 0) {
        fprintf(stderr, "bench: out of memory for %dx%d results\n", S, S);
        return -1;
    }
    return 0;
}

static void case_close(case_res_t *r)
{
    ss_result_free(&r->rbuf[0]);
    ss_result_free(&r->rbuf[1]);
    ss_detlist_free(&r->scratch);
    if (r->ops)
        free_frames(r->ops, &r->rot);
}

#ifdef SKYSIEVE_HAVE_CUDA
/* Before frame t of a CUDA pass: the backend's mode (timed in
 * PASS_TIMED, graphs otherwise) and, end to end, the next frame
 * prefetched. 0, or -1. */
static int cuda_before_frame(ss_pipeline_t *pl, case_res_t *r, int pass, int t, uint64_t seq)
{
    const ss_backend_ops_t *bops = NULL;
    ss_backend_t *be = ss_pipeline_backend(pl, &bops);
    if (!be)
        return 0;
    ss_cuda_set_mode(be, pass == PASS_TIMED, 1);
    if (pass != PASS_E2E)
        return 0;
    ss_frame_t *next = rot_frame(&r->rot, t + 1);
    next->meta.seq = seq + 1;
    return ss_cuda_prefetch(be, next) == SS_OK ? 0 : -1;
}

/* The host waits and graph launches so far, added to o's per-frame
 * figures with sign (-1 before the timed frames, +1 after them). */
static void cuda_count_launches(ss_pipeline_t *pl, int pass, double sign, int frames,
                                bench_out_t *o)
{
    const ss_backend_ops_t *bops = NULL;
    long wt = 0, ln = 0;
    ss_cuda_graph_stats(ss_pipeline_backend(pl, &bops), NULL, &ln, &wt);
    if (pass == PASS_GRAPH) {
        o->waits += sign * (double)wt / frames;
        o->launches += sign * (double)ln / frames;
    } else {
        o->launches_e2e += sign * (double)ln / frames;
    }
}

/* A timed graph-mode frame's figures: the host time inside each op, the
 * host's streak merging (timed on a copy of res's detections), the GPU
 * compute time. */
static void cuda_graph_frame(ss_pipeline_t *pl, case_res_t *r, const ss_result_t *res, int frames,
                             pass_acc_t *acc, bench_out_t *o)
{
    const ss_backend_ops_t *bops = NULL;
    ss_backend_t *be = ss_pipeline_backend(pl, &bops);
    double hm[SS_STAGE__COUNT];
    ss_cuda_host_ms(be, hm);
    memcpy(r->scratch.items, res->dets.items, (size_t)res->dets.count * sizeof(ss_detection_t));
    r->scratch.count = res->dets.count;
    const double m0 = ss_now_mono();
    ss_merge_streaks(&r->scratch, r->cfg.streak_gap, fmax(3.0, 2.0 * r->cfg.psf_sigma));
    o->merge_ms += (ss_now_mono() - m0) * 1e3 / frames;
    o->track_ms += res->track_ms / frames;
    for (int s = 0; s < SS_STAGE__COUNT; s++)
        o->host_ms[s] += hm[s] / frames;
    acc->gpu_ms += ss_cuda_frame_ms(be);
}
#endif

/* Frame t of a pass into rp: processed whole, or end to end started,
 * then frame t-1's result (in the other buffer) finished. Its wall time
 * into *ms. */
static ss_err_t pass_frame(ss_pipeline_t *pl, case_res_t *r, int pass, int t, ss_frame_t *cur,
                           ss_result_t *rp, double *ms)
{
    const double f0 = ss_now_mono();
    ss_err_t e = pass == PASS_E2E ? ss_pipeline_start(pl, cur, rp)
                                  : ss_pipeline_process(pl, cur, rp);
    if (e == SS_OK && pass == PASS_E2E && t > 0)
        e = ss_pipeline_finish(pl, &r->rbuf[(t + 1) % 2]);
    *ms = (ss_now_mono() - f0) * 1e3;
    return e;
}

/* A timed frame's result res, its wall time ms, added up. */
static void pass_count(int pass, const ss_result_t *res, double ms, pass_acc_t *acc,
                       bench_out_t *o)
{
    if (res->status == SS_STATUS_OK) {
        o->ok_frames++;
        o->dets += res->dets.count;
    }
    if (pass == PASS_TIMED)
        for (int s = 0; s < SS_STAGE__COUNT; s++)
            if (res->stage_ms[s] >= 0.0) {
                acc->stage_sum[s] += res->stage_ms[s];
                acc->stage_n[s]++;
            }
    if (pass != PASS_E2E) {
        acc->wall += ms;
        acc->timed++;
    }
}

/* A pass's figures into o, from acc and its timed frames' span t0..t1. */
static void pass_figures(const bench_case_t *bc, int pass, int frames, const pass_acc_t *acc,
                         double t0, double t1, bench_out_t *o)
{
    if (pass == PASS_TIMED) {
        double sum = 0.0;
        for (int s = 0; s < SS_STAGE__COUNT; s++)
            if (acc->stage_n[s] > 0) {
                o->stage_ms[s] = acc->stage_sum[s] / frames;
                if (s != SS_STAGE_UPLOAD && s != SS_STAGE_DOWNLOAD)
                    sum += o->stage_ms[s];
            }
        o->timed_sum_ms = sum;
        if (!bc->cuda)
            o->total_ms = acc->wall / acc->timed;
    } else if (pass == PASS_GRAPH) {
        o->total_ms = acc->gpu_ms / acc->timed;
        o->wall_ms = acc->wall / acc->timed;
    } else {
        o->e2e_fps = frames / (t1 - t0);
    }
}

/* One pass of case bc on a pipeline of its own: the warm-up, then
 * `frames` timed frames, its figures into o; *seq numbers the frames
 * across passes. 0, or -1 after a message. */
static int run_pass(const bench_case_t *bc, case_res_t *r, int pass, int frames, uint64_t *seq,
                    bench_out_t *o)
{
    char err[256];
    ss_pipeline_t *pl = ss_pipeline_new(&r->cfg, "bench", err, sizeof err);
    if (!pl) {
        fprintf(stderr, "bench: %s\n", err);
        return -1;
    }
    const ss_outputs_t outs = bench_outputs();
    ss_pipeline_set_outputs(pl, &outs);
    const int warm = case_warmup(bc);
    pass_acc_t acc = { 0 };
    double t0 = 0.0;
    int rc = 0;
    for (int t = 0; t < warm + frames; t++) {
        ss_frame_t *cur = rot_frame(&r->rot, t);
        cur->meta.seq = ++*seq;
        if (t == warm)
            t0 = ss_now_mono();
#ifdef SKYSIEVE_HAVE_CUDA
        if (bc->cuda && cuda_before_frame(pl, r, pass, t, *seq) != 0) {
            fprintf(stderr, "bench: frame %d: the prefetch failed\n", t);
            rc = -1;
            break;
        }
#endif
        ss_result_t *rp = &r->rbuf[pass == PASS_E2E ? t % 2 : 0];
        double ms;
        const ss_err_t e = pass_frame(pl, r, pass, t, cur, rp, &ms);
        if (e != SS_OK) {
            fprintf(stderr, "bench: frame %d: %s (%s)\n", t, ss_strerror(e), rp->reason);
            rc = -1;
            break;
        }
        if (verbose)
            fprintf(stderr, "frame %d: %s %s\n", t, ss_status_name(rp->status), rp->reason);
#ifdef SKYSIEVE_HAVE_CUDA
        if (bc->cuda && pass != PASS_TIMED && (t == warm - 1 || t == warm + frames - 1))
            cuda_count_launches(pl, pass, t == warm - 1 ? -1.0 : 1.0, frames, o);
#endif
        if (t < warm)
            continue;
        pass_count(pass, rp, ms, &acc, o);
#ifdef SKYSIEVE_HAVE_CUDA
        if (bc->cuda && pass == PASS_GRAPH)
            cuda_graph_frame(pl, r, rp, frames, &acc, o);
#endif
    }
    if (rc == 0 && pass == PASS_E2E &&
        ss_pipeline_finish(pl, &r->rbuf[(warm + frames - 1) % 2]) != SS_OK) {
        fprintf(stderr, "bench: the last frame's result failed\n");
        rc = -1;
    }
    if (rc == 0)
        pass_figures(bc, pass, frames, &acc, t0, ss_now_mono(), o);
    ss_pipeline_destroy(&pl);
    return rc;
}

/* Run one configuration: its passes (timed, graph mode, end to end on
 * CUDA; the timed one on the CPU) over `frames` frames after the warm-up,
 * into o. 0, or -1 after a message. */
static int run_case(const bench_case_t *bc, int frames, int device, bench_out_t *o)
{
    memset(o, 0, sizeof *o);
    for (int s = 0; s < SS_STAGE__COUNT; s++)
        o->stage_ms[s] = -1.0;
    o->bytes_model = bytes_model(bc->size, bc->history, 2);
    case_res_t r;
    int rc = case_open(bc, device, &r);
    const int passes = bc->cuda ? 3 : 1;
    uint64_t seq = 0;
    for (int pass = 0; pass < passes && rc == 0; pass++)
        rc = run_pass(bc, &r, pass, frames, &seq, o);
    o->ok_frames /= passes;
    o->dets /= passes;
    case_close(&r);
    return rc;
}

#ifdef SKYSIEVE_HAVE_CUDA
/* Copy bandwidths of this GPU, measured now: a large device-to-device
 * copy (bytes read + written), pinned host->device and device->host, and
 * device->host into pageable memory. Median of several runs. */
static double time_copy(void *dst, const void *src, size_t n, enum cudaMemcpyKind k, int reps)
{
    cudaEvent_t a, b;
    double best[16];
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    cudaMemcpy(dst, src, n, k);     /* warm-up */
    for (int r = 0; r < reps; r++) {
        cudaEventRecord(a, 0);
        cudaMemcpyAsync(dst, src, n, k, 0);
        cudaEventRecord(b, 0);
        cudaEventSynchronize(b);
        float ms = 0.0f;
        cudaEventElapsedTime(&ms, a, b);
        best[r] = ms;
    }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    for (int i = 1; i < reps; i++)      /* median */
        for (int j = i; j > 0 && best[j - 1] > best[j]; j--) {
            const double t = best[j];
            best[j] = best[j - 1];
            best[j - 1] = t;
        }
    return best[reps / 2] * 1e-3;
}

static int measure_bw(int device, bw_t *bw, char *dev_name, size_t n_name, int *driver)
{
    memset(bw, 0, sizeof *bw);
    if (cudaSetDevice(device) != cudaSuccess)
        return -1;
    struct cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, device);
    snprintf(dev_name, n_name, "%s", prop.name);
    cudaDriverGetVersion(driver);
    const size_t big = (size_t)1 << 30, mid = (size_t)256 << 20;
    void *d0 = NULL, *d1 = NULL, *h = NULL, *hp = malloc(mid);
    if (cudaMalloc(&d0, big) != cudaSuccess || cudaMalloc(&d1, big) != cudaSuccess ||
        cudaHostAlloc(&h, mid, cudaHostAllocDefault) != cudaSuccess || !hp) {
        cudaGetLastError();
        return -1;
    }
    cudaMemset(d0, 1, big);
    memset(h, 1, mid);
    memset(hp, 1, mid);
    bw->d2d = 2.0 * (double)big / time_copy(d1, d0, big, cudaMemcpyDeviceToDevice, 9) * 1e-9;
    bw->h2d = (double)mid / time_copy(d0, h, mid, cudaMemcpyHostToDevice, 7) * 1e-9;
    bw->d2h = (double)mid / time_copy(h, d0, mid, cudaMemcpyDeviceToHost, 7) * 1e-9;
    bw->d2h_pageable = (double)mid / time_copy(hp, d0, mid, cudaMemcpyDeviceToHost, 5) * 1e-9;
    cudaFree(d0);
    cudaFree(d1);
    cudaFreeHost(h);
    free(hp);
    return 0;
}
#endif

#ifdef SKYSIEVE_HAVE_CUDA
/* One feed of --feeds: its own pipeline and frames, warmed up, then
 * `frames` frames of the end-to-end loop between two barriers. */
typedef struct feed_run {
    const bench_case_t *bc;
    int frames, device, id, share;
    pthread_barrier_t *start, *end;
    int rc, ok_frames;
} feed_run_t;

/* Frame t of the end-to-end loop as the daemon's worker runs it: the next
 * frame's upload started, frame t started into rbuf[t % 2], then frame
 * t-1's result finished (a frame whose result fails counts as an error). */
static ss_err_t e2e_step(ss_pipeline_t *pl, const rotation_t *rot, int t, uint64_t *seq,
                         ss_result_t *rbuf)
{
    ss_frame_t *cur = rot_frame(rot, t), *next = rot_frame(rot, t + 1);
    cur->meta.seq = ++*seq;
    next->meta.seq = *seq + 1;
    const ss_backend_ops_t *ops = NULL;
    ss_backend_t *be = ss_pipeline_backend(pl, &ops);
    ss_err_t e = be ? ss_cuda_prefetch(be, next) : SS_OK;
    if (e == SS_OK)
        e = ss_pipeline_start(pl, cur, &rbuf[t % 2]);
    if (e == SS_OK && t > 0)
        e = ss_pipeline_finish(pl, &rbuf[(t + 1) % 2]);
    return e;
}

static void *feed_thread(void *arg)
{
    feed_run_t *fr_ = arg;
    const ss_backend_ops_t *ops = ss_backend_cuda_ops();
    const int S = fr_->bc->size, warm = 2 * fr_->bc->history + 4;
    const size_t npix = (size_t)S * S;
    rotation_t rot = { 0 };
    ss_result_t rbuf[2] = { 0 };
    ss_pipeline_t *pl = NULL;
    fr_->rc = -1;
    const int rendered = prerender(ops, S, fr_->bc->history, 12345 + (uint64_t)fr_->id, &rot) == 0;
    ss_pipeline_cfg_t cfg = bench_cfg(1, fr_->bc->history, fr_->device);
    cfg.device_feeds = fr_->share;
    char err[256];
    if (rendered && ss_result_init_with(&rbuf[0], npix, 4096, &ops->host_alloc) == 0 &&
        ss_result_init_with(&rbuf[1], npix, 4096, &ops->host_alloc) == 0)
        pl = ss_pipeline_new(&cfg, "bench", err, sizeof err);
    uint64_t seq = 0;
    ss_err_t e = pl ? SS_OK : SS_ERR_NOMEM;
    for (int t = 0; t < warm && e == SS_OK; t++)
        e = e2e_step(pl, &rot, t, &seq, rbuf);
    pthread_barrier_wait(fr_->start);
    for (int t = warm; t < warm + fr_->frames && e == SS_OK; t++) {
        e = e2e_step(pl, &rot, t, &seq, rbuf);
        fr_->ok_frames += e == SS_OK && t > warm && rbuf[(t + 1) % 2].status == SS_STATUS_OK;
    }
    if (e == SS_OK)
        e = ss_pipeline_finish(pl, &rbuf[(warm + fr_->frames - 1) % 2]);
    pthread_barrier_wait(fr_->end);
    fr_->rc = e == SS_OK ? 0 : -1;
    if (e != SS_OK)
        fprintf(stderr, "bench: feed %d: %s\n", fr_->id, ss_strerror(e));
    ss_pipeline_destroy(&pl);
    ss_result_free(&rbuf[0]);
    ss_result_free(&rbuf[1]);
    free_frames(ops, &rot);
    return NULL;
}

/* The pipeline.device_feeds each of K feeds is told: --share S, else K. */
static int feeds_share(int K)
{
    return share_override > 0 ? share_override : K;
}

/* K feeds of case bc on one GPU at once: frames/s in all (0 on failure). */
static double run_feeds(const bench_case_t *bc, int frames, int device, int K, int *ok_frames)
{
    pthread_barrier_t start, end;
    pthread_t th[64];
    feed_run_t fr[64];
    pthread_barrier_init(&start, NULL, (unsigned)K + 1);
    pthread_barrier_init(&end, NULL, (unsigned)K + 1);
    int started = 0;
    for (int k = 0; k < K; k++) {
        fr[k] = (feed_run_t){ bc, frames, device, k, feeds_share(K), &start, &end, -1, 0 };
        if (pthread_create(&th[k], NULL, feed_thread, &fr[k]) != 0)
            break;
        started++;
    }
    if (started < K) {          /* the barriers would wait for ever: give up */
        fprintf(stderr, "bench: cannot start %d feed threads\n", K);
        exit(1);
    }
    pthread_barrier_wait(&start);
    const double t0 = ss_now_mono();
    pthread_barrier_wait(&end);
    const double t1 = ss_now_mono();
    int rc = 0;
    *ok_frames = 0;
    for (int k = 0; k < K; k++) {
        pthread_join(th[k], NULL);
        rc |= fr[k].rc;
        *ok_frames += fr[k].ok_frames;
    }
    pthread_barrier_destroy(&start);
    pthread_barrier_destroy(&end);
    return rc ? 0.0 : (double)K * frames / (t1 - t0);
}
#endif

/* What the command line asks for (parse_args). */
typedef struct bench_opts {
    int want_cpu, want_cuda;
    int frames;                     /* timed frames per case; 0: 3 on the CPU, 60 on CUDA */
    int device, feeds;
    int sizes[8], nsizes, hists[8], nhists;
    const char *csv;                /* or NULL */
} bench_opts_t;

/* Option opt's value v as an integer in [lo, hi] into *out: 0, or -1 after
 * a message naming the option and what it got. */
static int int_arg(const char *opt, const char *v, int lo, int hi, int *out)
{
    char *end = NULL;
    errno = 0;
    const long x = v ? strtol(v, &end, 10) : 0;
    if (!v || end == v || *end || errno || x < lo || x > hi) {
        fprintf(stderr, "skysieve-bench: %s: expected an integer from %d to %d, got '%s'\n", opt,
                lo, hi, v ? v : "(nothing)");
        return -1;
    }
    *out = (int)x;
    return 0;
}

/* Option a's value v (NULL: none; a comma list for --size and --history)
 * into o or the overrides: 0; 1 when a is no option of the bench; -1
 * after a message. */
static int set_option(bench_opts_t *o, const char *a, const char *v)
{
    const struct { const char *name; int lo, hi; int *dst; } ints[] = {
        { "--frames", 1, 1000000, &o->frames },
        { "--device", 0, 1023, &o->device },
        { "--feeds", 1, 64, &o->feeds },
        { "--warmup", 0, 1000000, &warmup_override },
        { "--phases", 0, SS_MF_MAX_PHASES, &phases_override },
        { "--model-error", 0, 1, &model_error_override },
        { "--guided-mask", 0, 1, &guided_mask_override },
        { "--share", 1, 64, &share_override },
    };
    static const char *const strs[] = { "--backend", "--output", "--size", "--history", "--csv" };
    int k = 0, known = 0;
    while (k < (int)(sizeof ints / sizeof ints[0]) && strcmp(a, ints[k].name))
        k++;
    for (size_t j = 0; j < sizeof strs / sizeof strs[0]; j++)
        known |= !strcmp(a, strs[j]);
    if (k == (int)(sizeof ints / sizeof ints[0]) && !known)
        return 1;
    if (!v) {
        fprintf(stderr, "skysieve-bench: %s needs a value\n", a);
        return -1;
    }
    if (!known)
        return int_arg(a, v, ints[k].lo, ints[k].hi, ints[k].dst);
    if (!strcmp(a, "--csv")) {
        o->csv = v;
        return 0;
    }
    if (!strcmp(a, "--backend") && (!strcmp(v, "cpu") || !strcmp(v, "cuda") || !strcmp(v, "both"))) {
        o->want_cpu = strcmp(v, "cuda") != 0;
        o->want_cuda = strcmp(v, "cpu") != 0;
        return 0;
    }
    if (!strcmp(a, "--output") && (!strcmp(v, "f32") || !strcmp(v, "f16") || !strcmp(v, "stamps"))) {
        output_form = v;
        return 0;
    }
    if (!strcmp(a, "--size") && (o->nsizes = parse_list(v, o->sizes, 8)) > 0)
        return 0;
    if (!strcmp(a, "--history") && (o->nhists = parse_list(v, o->hists, 8)) > 0)
        return 0;
    fprintf(stderr, "skysieve-bench: %s: '%s' is not a value it takes (--help)\n", a, v);
    return -1;
}

/* The command line into o: 0 to run, 1 after --help (printed), 2 after a
 * message on stderr. */
static int parse_args(int argc, char **argv, bench_opts_t *o)
{
    *o = (bench_opts_t){ .want_cpu = 1, .want_cuda = 1, .feeds = 1 };
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 1;
        }
        if (!strcmp(a, "--verbose")) {
            verbose = 1;
            continue;
        }
        const int r = set_option(o, a, i + 1 < argc ? argv[i + 1] : NULL);
        if (r == 1) {
            fprintf(stderr, "skysieve-bench: unknown option '%s'\n", a);
            usage(stderr);
        }
        if (r != 0)
            return 2;
        i++;
    }
    return 0;
}

/* The cases o asks for into cases (at most MAX_CASES): given sizes and
 * histories crossed, each backend's defaults for what is not given, or
 * without either the matrix. Returns their count. */
static int build_cases(const bench_opts_t *o, bench_case_t *cases)
{
    static const int cpu_default[] = { 1024, 2048 }, gsz[] = { 512, 2048, 4096 };
    static const int gpu_default[][2] = { { 512, 20 }, { 2048, 20 }, { 4096, 20 }, { 2048, 64 } };
    int nc = 0;
    for (int b = 0; b < 2; b++) {
        if ((b == 0 && !o->want_cpu) || (b == 1 && !o->want_cuda))
            continue;
        if (o->nsizes == 0 && o->nhists == 0) {
            if (b == 0)
                for (int k = 0; k < 2; k++)
                    cases[nc++] = (bench_case_t){ 0, cpu_default[k], 20 };
            else
                for (int k = 0; k < 4; k++)
                    cases[nc++] = (bench_case_t){ 1, gpu_default[k][0], gpu_default[k][1] };
            continue;
        }
        const int *sz = o->nsizes ? o->sizes : b == 0 ? cpu_default : gsz;
        const int nsz = o->nsizes ? o->nsizes : b == 0 ? 2 : 3;
        const int nh = o->nhists ? o->nhists : 1;
        for (int s = 0; s < nsz; s++)
            for (int h = 0; h < nh && nc < MAX_CASES; h++)
                cases[nc++] = (bench_case_t){ b, sz[s], o->nhists ? o->hists[h] : 20 };
    }
    return nc;
}

/* The GPU of a CUDA run: probed, its copy rates into bw and a line of it
 * printed; without CUDA, o->want_cuda cleared (an error when only CUDA is
 * asked for). 0, or -1 after a message. */
static int device_setup(bench_opts_t *o, bw_t *bw)
{
    memset(bw, 0, sizeof *bw);
#ifdef SKYSIEVE_HAVE_CUDA
    if (!o->want_cuda)
        return 0;
    char why[256], dev_name[256] = "-";
    int driver = 0;
    if (!ss_backend_cuda_ops()->probe(o->device, why, sizeof why)) {
        fprintf(stderr, "bench: no usable GPU: %s\n", why);
        return -1;
    }
    if (measure_bw(o->device, bw, dev_name, sizeof dev_name, &driver) != 0) {
        fprintf(stderr, "bench: bandwidth measurement failed\n");
        return -1;
    }
    printf("# device %s, CUDA driver %d.%d\n", dev_name, driver / 1000, (driver % 1000) / 10);
    printf("# measured: device copy %.0f GB/s (read+write), H2D pinned %.1f GB/s, "
           "D2H pinned %.1f GB/s, D2H pageable %.1f GB/s\n",
           bw->d2d, bw->h2d, bw->d2h, bw->d2h_pageable);
    return 0;
#else
    if (o->want_cuda && !o->want_cpu) {
        fprintf(stderr, "bench: built without CUDA\n");
        return -1;
    }
    o->want_cuda = 0;
    return 0;
#endif
}

/* Case bc's floor (ms: its bytes model over the device copy rate) and its
 * PCIe-bound frames/s (u16 in, float32 out, overlapped); 0 without a
 * GPU's rates. */
static void case_bounds(const bench_case_t *bc, const bench_out_t *o, const bw_t *bw,
                        double *floor_ms, double *pcie_fps)
{
    const double in_b = (double)bc->size * bc->size * 2, out_b = (double)bc->size * bc->size * 4;
    *floor_ms = bw->d2d > 0 ? o->bytes_model / (bw->d2d * 1e9) * 1e3 : 0.0;
    *pcie_fps = bw->h2d > 0 ? 1.0 / fmax(in_b / (bw->h2d * 1e9), out_b / (bw->d2h * 1e9)) : 0.0;
}

/* The CSV file's header line. */
static void csv_header(FILE *cf)
{
    fprintf(cf, "backend,size,history,frames");
    for (int s = 0; s < SS_STAGE__COUNT; s++)
        fprintf(cf, ",%s_ms", ss_stage_name((ss_stage_id_t)s));
    fprintf(cf, ",stage_sum_ms,total_ms,wall_ms,e2e_fps,bytes_model,floor_ms,pcie_fps,"
                "ok_frames,detections\n");
}

/* Case bc's CSV line (nf timed frames). */
static void csv_row(FILE *cf, const bench_case_t *bc, int nf, const bench_out_t *o, const bw_t *bw)
{
    double floor_ms, pcie_fps;
    case_bounds(bc, o, bw, &floor_ms, &pcie_fps);
    fprintf(cf, "%s,%d,%d,%d", bc->cuda ? "cuda" : "cpu", bc->size, bc->history, nf);
    for (int s = 0; s < SS_STAGE__COUNT; s++)
        fprintf(cf, ",%.4f", o->stage_ms[s]);
    fprintf(cf, ",%.4f,%.4f,%.4f,%.2f,%.0f,%.4f,%.2f,%d,%d\n", o->timed_sum_ms, o->total_ms,
            o->wall_ms, o->e2e_fps, o->bytes_model, floor_ms, pcie_fps, o->ok_frames, o->dets);
    fflush(cf);
}

/* Case bc run (run_case), its CSV line written when cf, and with --feeds K
 * its K feeds at once. 0, or -1 after a message. */
static int bench_one(const bench_opts_t *opt, const bench_case_t *bc, const bw_t *bw, FILE *cf,
                     bench_out_t *o)
{
    const int nf = opt->frames > 0 ? opt->frames : bc->cuda ? 60 : 3;
    fprintf(stderr, "bench: %s %d² N=%d, %d frames after %d of warm-up ...\n",
            bc->cuda ? "cuda" : "cpu", bc->size, bc->history, nf, case_warmup(bc));
    if (run_case(bc, nf, opt->device, o) != 0) {
        fprintf(stderr, "bench: %s %d² failed\n", bc->cuda ? "cuda" : "cpu", bc->size);
        return -1;
    }
    if (cf)
        csv_row(cf, bc, nf, o, bw);
#ifdef SKYSIEVE_HAVE_CUDA
    if (bc->cuda && opt->feeds > 1) {
        int ok = 0;
        const double fps = run_feeds(bc, nf, opt->device, opt->feeds, &ok);
        if (fps <= 0.0)
            return -1;
        printf("# feeds: %d x cuda %d² N=%d at once (device_feeds %d): %.1f frames/s in all "
               "(%.1f per feed; one feed alone %.1f), %d of %d timed results ok\n",
               opt->feeds, bc->size, bc->history, feeds_share(opt->feeds), fps,
               fps / opt->feeds, o->e2e_fps, ok, opt->feeds * (nf - 1));
    }
#endif
    return 0;
}

static const ss_stage_id_t shown[] = { SS_STAGE_CALIBRATE, SS_STAGE_REG_COARSE, SS_STAGE_REG_FINE,
                                       SS_STAGE_WHITEN,    SS_STAGE_GUIDED,     SS_STAGE_NOISE,
                                       SS_STAGE_MATCHED,   SS_STAGE_DETECT,     SS_STAGE_HISTORY };
#define N_SHOWN ((int)(sizeof shown / sizeof shown[0]))

/* The short table: a line per case, its shown stages and totals. */
static void print_table(const bench_case_t *cases, const bench_out_t *outs, int nc,
                        const bw_t *bw)
{
    printf("\n%-5s %5s %3s |", "back", "size", "N");
    for (int s = 0; s < N_SHOWN; s++)
        printf(" %8.8s", ss_stage_name(shown[s]));
    printf(" | %9s %9s %8s %8s %7s %8s %7s\n", "total_ms", "wall_ms", "e2e_fps", "MB/frame",
           "floor", "floor/t", "pcie%");
    for (int k = 0; k < nc; k++) {
        const bench_case_t *bc = &cases[k];
        const bench_out_t *o = &outs[k];
        double floor_ms, pcie_fps;
        case_bounds(bc, o, bw, &floor_ms, &pcie_fps);
        printf("%-5s %5d %3d |", bc->cuda ? "cuda" : "cpu", bc->size, bc->history);
        for (int s = 0; s < N_SHOWN; s++)
            printf(" %8.3f", o->stage_ms[shown[s]]);
        printf(" | %9.3f %9.3f %8.1f %8.1f %7.3f %8.2f %7.1f\n", o->total_ms,
               bc->cuda ? o->wall_ms : o->total_ms, bc->cuda ? o->e2e_fps : 1e3 / o->total_ms,
               o->bytes_model / 1e6, bc->cuda ? floor_ms : 0.0,
               bc->cuda && o->total_ms > 0 ? floor_ms / o->total_ms : 0.0,
               bc->cuda && pcie_fps > 0 ? 100.0 * o->e2e_fps / pcie_fps : 0.0);
    }
}

/* The CUDA cases' host side: the wall time inside each op, outside them,
 * the host waits and the graph launches per frame. */
static void print_host(const bench_case_t *cases, const bench_out_t *outs, int nc)
{
    for (int k = 0; k < nc; k++) {
        const bench_case_t *bc = &cases[k];
        const bench_out_t *o = &outs[k];
        if (!bc->cuda)
            continue;
        printf("%-5s %5d %3d | host ms in ops:", "cuda", bc->size, bc->history);
        for (int s = 0; s < N_SHOWN; s++)
            printf(" %8.3f", o->host_ms[shown[s]]);
        double in_ops = 0.0;
        for (int s = 0; s < SS_STAGE__COUNT; s++)
            in_ops += o->host_ms[s];
        printf(" | download %.3f, outside the ops %.3f (of which tracking %.3f, merge_streaks "
               "%.3f) | per frame: %.2f host waits, %.2f graph launches (%.2f pipelined)\n",
               o->host_ms[SS_STAGE_DOWNLOAD], o->wall_ms - in_ops, o->track_ms, o->merge_ms, o->waits,
               o->launches, o->launches_e2e);
    }
}

/* CUDA against the CPU where both ran a size at N = 20. */
static void print_speedups(const bench_case_t *cases, const bench_out_t *outs, int nc)
{
    for (int k = 0; k < nc; k++)
        for (int c = 0; c < nc; c++) {
            const bench_case_t *g = &cases[k], *h = &cases[c];
            if (!g->cuda || h->cuda || g->size != h->size || g->history != 20 ||
                h->history != 20 || outs[k].total_ms <= 0 || outs[c].total_ms <= 0)
                continue;
            printf("# speed-up cuda/cpu at %d², N=20: %.0fx (GPU compute) / %.0fx (wall per frame)\n",
                   g->size, outs[c].total_ms / outs[k].total_ms, outs[c].total_ms / outs[k].wall_ms);
            break;
        }
}

int main(int argc, char **argv)
{
    bench_opts_t opt;
    const int pr = parse_args(argc, argv, &opt);
    if (pr != 0)
        return pr == 1 ? 0 : 2;
    ss_log_setup(SS_LOG_WARNING, 0);
    bw_t bw;
    if (device_setup(&opt, &bw) != 0)
        return 1;
    bench_case_t cases[MAX_CASES];
    bench_out_t outs[MAX_CASES];
    const int nc = build_cases(&opt, cases);
    FILE *cf = NULL;
    if (opt.csv && !(cf = fopen(opt.csv, "w"))) {
        fprintf(stderr, "skysieve-bench: --csv %s: %s\n", opt.csv, strerror(errno));
        return 1;
    }
    if (cf)
        csv_header(cf);
    int rc = 0;
    for (int k = 0; k < nc && rc == 0; k++)
        rc = bench_one(&opt, &cases[k], &bw, cf, &outs[k]);
    if (cf && fclose(cf) != 0 && rc == 0) {
        fprintf(stderr, "skysieve-bench: --csv %s: %s\n", opt.csv, strerror(errno));
        rc = -1;
    }
    if (rc != 0)
        return 1;
    print_table(cases, outs, nc, &bw);
    print_host(cases, outs, nc);
    print_speedups(cases, outs, nc);
    printf("# total_ms: CPU wall per frame; CUDA GPU compute per frame (CUDA events, graph mode).\n"
           "# stage columns: CPU wall clock / CUDA events in the timed mode (ms per frame).\n"
           "# floor = bytes moved (model) / measured device copy bandwidth; floor/t = fraction of it achieved.\n"
           "# pcie%%: end-to-end frames/s over the PCIe-bound rate (u16 in, f32 residual out, overlapped).\n");
    return 0;
}
