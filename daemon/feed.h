/*
 * feed.h — a feed's hand-over points, what its source and its sinks need
 * of it (ARCHITECTURE.md "Threads"):
 *
 *   source --ss_feed_frame_get / ss_feed_submit--> frames queue --> worker
 *   worker --> sinks --ss_out_release--> the feed's free result buffers
 *
 * A source sees a feed through these functions only: its name, config and
 * counters, a free frame of its pool, the queue to the worker, the proto
 * limits of its config. The daemon's threads (daemon.c, worker.c) build
 * and run the feed itself (daemon.h).
 */
#ifndef SS_FEED_H
#define SS_FEED_H

#include <stdatomic.h>

#include "config/config.h"
#include "pipeline/frame.h"
#include "proto/proto.h"
#include "stats.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SS_POLL_S 0.1               /* how often blocked threads look at their stop flags */

typedef struct ss_feed ss_feed_t;
typedef struct ss_out ss_out_t;

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

/* Hand a result buffer back (the last holder returns it to the free list). */
void ss_out_release(ss_out_t *o);

#ifdef __cplusplus
}
#endif
#endif
