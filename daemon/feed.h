/*
 * feed.h — a feed: its pool of frames, the queue from its source to its
 * worker, its pipeline, solver and source, its result buffers and its
 * counters (ARCHITECTURE.md "Threads"):
 *
 *   source --ss_feed_frame_get / ss_feed_submit--> frames queue --> worker
 *   worker --ss_out_hold--> sinks --ss_out_release--> the feed's free result buffers
 *
 * The daemon builds one per configured feed (ss_feed_new) and runs its
 * worker thread (worker.c); the struct bodies are feed.c's. A source sees
 * a feed through the first group of functions only: its name, config and
 * counters, a free frame of its pool, the queue to the worker, the proto
 * limits of its config. The worker, the sinks and the daemon's main
 * thread use the later groups, each function saying which thread may call
 * it.
 */
#ifndef SS_FEED_H
#define SS_FEED_H

#include <stdatomic.h>
#include <stdint.h>

#include "config/config.h"
#include "pipeline/frame.h"
#include "pipeline/pipeline.h"
#include "proto/proto.h"
#include "cfgsnap.h"
#include "solver.h"
#include "source.h"
#include "stats.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SS_POLL_S 0.1               /* how often blocked threads look at their stop flags */
#define SS_OUTS_PER_FEED 5          /* result buffers: up to two at the worker (the current
                                     * frame, the previous one while its residual lands), the
                                     * rest with the sinks */
#define SS_FILE_HELD_MAX 2          /* of those, at most this many waiting for the file sink */

typedef struct ss_feed ss_feed_t;
typedef struct ss_out ss_out_t;

/* ---- building (the daemon's main thread) -------------------------------- */

/* What a feed is built from: its place in the config, the board it takes
 * its config snapshot from, and what its source is lent (source.h; copied). */
typedef struct ss_feed_env {
    int index;                      /* feeds[index] of the board's config */
    ss_cfg_board_t *board;
    ss_source_env_t source;
} ss_feed_env_t;

/* Build feed feeds[env->index] of the board's current config: its frame
 * pool and queue, pipeline, result buffers, source (opened, not started),
 * counters and, with wcs.solve, its solver thread. Logs what it built.
 * NULL on failure with the reason in err (n bytes). */
ss_feed_t *ss_feed_new(const ss_feed_env_t *env, char *err, size_t n);
/* Stop and close the source and the solver, free everything (the worker
 * must have ended). NULL and *p == NULL are accepted; *p is nulled. */
void ss_feed_destroy(ss_feed_t **p);

/* ---- what a source sees (any thread) ------------------------------------ */

/* The feed's name, its config and its counters; each valid as long as the
 * feed. The config is the snapshot the feed was built with (cfgsnap.h):
 * immutable, its fixed keys (source.*, limits.*, queue.*) are the running
 * ones; a reload's reloadable keys reach the worker and the sinks through
 * their own snapshots, never through this one. */
const char *ss_feed_name(const ss_feed_t *f);
const ss_feed_cfg_t *ss_feed_cfg(const ss_feed_t *f);
ss_feed_stats_t *ss_feed_stats(const ss_feed_t *f);

/* A free frame of the feed's pool, waiting (briefly, polling stop) if none
 * is free; NULL when *stop became set. The caller owns it until it hands
 * it to ss_feed_submit or gives it back (ss_frame_pool_put). */
ss_frame_t *ss_feed_frame_get(ss_feed_t *f, const atomic_int *stop);
/* Queue an accepted frame for the worker (the frame becomes the queue's):
 * a drop_oldest eviction and a refusal after close are counted as
 * dropped. */
void ss_feed_submit(ss_feed_t *f, ss_frame_t *frame);
/* Proto limits of a feed (from its config). */
void ss_feed_limits(const ss_feed_t *f, ss_proto_limits_t *lim);

/* ---- the feed's parts (valid as long as the feed) ----------------------- */

/* Its place in the config (feeds[index] of every snapshot). */
int ss_feed_index(const ss_feed_t *f);
/* The config snapshot it was built with (not a reference: ss_cfg_snap_ref
 * to keep one beyond the feed). */
ss_cfg_snap_t *ss_feed_start_snap(const ss_feed_t *f);
/* Pixels a frame or a residual of the feed may have (limits.*). */
size_t ss_feed_max_pixels(const ss_feed_t *f);
/* Its source (ss_source_start / ss_source_stop: main thread; frame_done:
 * worker). */
ss_source_t *ss_feed_source(const ss_feed_t *f);
/* Its pipeline and its solver (NULL with wcs.solve off): the worker
 * thread's alone. */
ss_pipeline_t *ss_feed_pipeline(const ss_feed_t *f);
ss_solver_t *ss_feed_solver(const ss_feed_t *f);

/* ---- the frames queue: its source pushes (above), its worker takes ------- */

/* Worker: the next queued frame, waiting up to timeout_s: SS_OK (the frame
 * is the caller's), SS_ERR_TIMEOUT, or SS_ERR_STOPPED once closed and empty. */
ss_err_t ss_feed_frame_take(ss_feed_t *f, ss_frame_t **frame, double timeout_s);
/* Frames queued now. */
int ss_feed_queue_depth(const ss_feed_t *f);
/* Close the queue (main thread at shutdown, worker when broken): pushes are
 * refused (counted by ss_feed_submit), takes drain what is queued. */
void ss_feed_close(ss_feed_t *f);
/* Worker: drop a frame it took, at the drain timeout or after a broken
 * backend: back to the pool, counted as dropped and as drain_dropped. */
void ss_feed_drop_frame(ss_feed_t *f, ss_frame_t *frame);
/* Frames dropped through ss_feed_drop_frame (any thread). */
uint64_t ss_feed_drain_dropped(const ss_feed_t *f);

/* ---- requests between the main thread and the worker ------------------- */

/* Control "reset": forget the history before the next frame. The main
 * thread requests; the worker takes it (1 once per request, else 0). */
void ss_feed_request_reset(ss_feed_t *f);
int ss_feed_take_reset(ss_feed_t *f);
/* Drain time is up: the worker drops what is still queued (counted). Set
 * by the main thread; read by the worker. */
void ss_feed_set_discard(ss_feed_t *f);
int ss_feed_discarding(const ss_feed_t *f);
/* Worker: the current frame started at monotonic µs since_us (0: idle);
 * the main thread reads it for the watchdog. */
void ss_feed_set_busy(ss_feed_t *f, uint64_t since_us);
uint64_t ss_feed_busy_since(const ss_feed_t *f);
/* The last frame's processed region (w = 0: none yet): set by the worker,
 * read by the main thread (a reload's calibration must fit it). */
void ss_feed_set_region(ss_feed_t *f, ss_roi_t r);
ss_roi_t ss_feed_region(ss_feed_t *f);

/* ---- result buffers: worker -> sinks -> the feed's free list ----------- */

/* Worker: a free result buffer, waiting up to timeout_s: SS_OK with *o,
 * or SS_ERR_TIMEOUT. */
ss_err_t ss_feed_out_take(ss_feed_t *f, ss_out_t **o, double timeout_s);
/* Worker: give back a buffer no sink saw (the free list has room for every
 * buffer: never fails). */
void ss_feed_out_put(ss_feed_t *f, ss_out_t *o);
/* Buffers held by or queued for the file sink now (at most
 * SS_FILE_HELD_MAX by the worker's choice, see ss_out_hold). */
int ss_feed_files_held(const ss_feed_t *f);

/* The result a buffer carries (written by the worker before ss_out_hold,
 * read-only for the sinks after) and the feed it belongs to. */
ss_result_t *ss_out_result(ss_out_t *o);
ss_feed_t *ss_out_feed(const ss_out_t *o);
/* Worker, before queuing o for the sinks: the publisher holds it, and the
 * file sink too when to_files (counted in ss_feed_files_held until
 * ss_out_release_files). */
void ss_out_hold(ss_out_t *o, int to_files);
/* Whether the file sink holds o too (set by ss_out_hold). */
int ss_out_to_files(const ss_out_t *o);
/* Hand a result buffer back (the last holder returns it to the free list). */
void ss_out_release(ss_out_t *o);
/* The file sink's (or a failed queuing's) hand-back of a buffer held with
 * to_files: no longer counted as held for files, then ss_out_release. */
void ss_out_release_files(ss_out_t *o);

#ifdef __cplusplus
}
#endif
#endif
