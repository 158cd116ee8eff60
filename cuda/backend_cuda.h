/*
 * backend_cuda.h — what the CUDA backend offers beyond the ops table of
 * pipeline/backend.h: prefetching the next raw frame (its upload then
 * overlaps the compute of the current one), the timing modes the
 * benchmark uses, and fault injection for the error-path tests.
 *
 * Every function here takes an instance created by ss_backend_cuda_ops()
 * ->create; passing a CPU instance is a bug. Declared only when the build
 * has CUDA (SKYSIEVE_HAVE_CUDA).
 */
#ifndef SS_BACKEND_CUDA_H
#define SS_BACKEND_CUDA_H

#include "pipeline/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Start moving `next` (a raw frame of the instance's pixel type that fits
 * its raw buffers — geo raw_w×raw_h, grown by raw_reserve —, ideally in
 * pinned memory from host_alloc) to the device on the copy stream, into
 * one of the two device raw buffers (not one whose frame is still to be
 * ingested). The ingest of the same frame (same pixels and valid pointers
 * and seq) then only waits for that copy. May be called before the
 * current frame is processed: its upload then overlaps that frame's
 * compute. `next` must stay untouched until the processing of that frame
 * (the ops after its ingest) has returned. */
ss_err_t ss_cuda_prefetch(ss_backend_t *b, const ss_frame_t *next);

/* timed = 1: every op runs at once, each step between CUDA events, and
 * stage_times() reports per-stage GPU ms (no graphs). timed = 0 (the
 * default): post-registration work is deferred to the next op that needs
 * a result and replayed from cached CUDA graphs when graphs = 1. */
void ss_cuda_set_mode(ss_backend_t *b, int timed, int graphs);
/* Tests: how many of the 2^32 floats the device's ss_div5 (fine_core.h)
 * rounds otherwise than IEEE division by 5; -1 on a CUDA error. */
long long ss_cuda_div5_mismatches(void);

/* Selections (median + MAD) of up to max_samples samples, and β's median
 * from a buffer of up to max_samples, run as one cluster of blocks (as
 * far as its shared memory holds them); larger ones as grid-wide passes
 * (tests set 0 or a huge value to run one path everywhere; set it before
 * the first frame: graphs keep the path they were captured with). */
void ss_cuda_set_select_small(ss_backend_t *b, long long max_samples);
/* The most samples one cluster's selection takes on b's device (0: its
 * cluster does not fit there, and every selection runs grid-wide). */
long long ss_cuda_select_cluster_max(const ss_backend_t *b);

/* GPU compute time (ms, CUDA events) of the work enqueued since the last
 * ingest began, including the previous frame's deferred history store;
 * copies excluded. Waits for that work. -1 on error. */
double ss_cuda_frame_ms(ss_backend_t *b);

/* Host wall time (ms) spent inside the ops since the last ingest began,
 * by stage (ingest = calibrate, set_reference = reg_coarse, read_plane =
 * download, write_plane = upload): the host's share of a frame, waits on
 * the GPU included. */
void ss_cuda_host_ms(ss_backend_t *b, double ms[SS_STAGE__COUNT]);

/* Graphs instantiated so far, graph launches (replays included) and the
 * host's waits for the compute stream (round trips) since create; NULL
 * pointers are skipped. */
void ss_cuda_graph_stats(ss_backend_t *b, int *graphs, long *launches, long *waits);

/* CUDA errors met (frames failed) since create. */
long ss_cuda_error_count(ss_backend_t *b);

/* Tests only: launch a faulty kernel. kind 0: an illegal address (a
 * sticky error: the instance becomes broken); kind 1: an invalid launch
 * configuration (the op fails, the instance keeps working). Returns the
 * error the op reports. */
ss_err_t ss_cuda_inject_fault(ss_backend_t *b, int kind);

#ifdef __cplusplus
}
#endif
#endif
