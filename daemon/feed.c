/*
 * feed.c — a feed's hand-over points (feed.h): frames from the pool to its
 * source, from the source to the worker's queue, result buffers back from
 * the sinks. The feed's state is the daemon's (daemon.h); this file only
 * reads the parts these hand-overs touch.
 */
#include "daemon.h"

#include <time.h>

const char *ss_feed_name(const ss_feed_t *f)
{
    return f->name;
}

const ss_feed_cfg_t *ss_feed_cfg(const ss_feed_t *f)
{
    return f->cfg;
}

ss_feed_stats_t *ss_feed_stats(const ss_feed_t *f)
{
    return f->stats;
}

ss_frame_t *ss_feed_frame_get(ss_feed_t *f, const atomic_int *stop)
{
    /* The pool holds queue depth + 2 frames (queue, worker, this source),
     * so waiting here only happens transiently; poll rather than add a
     * condition variable to the pool. */
    for (;;) {
        ss_frame_t *fr = ss_frame_pool_get(f->pool);
        if (fr)
            return fr;
        if (atomic_load(stop))
            return NULL;
        struct timespec ts = { 0, 1000000L };
        nanosleep(&ts, NULL);
    }
}

void ss_feed_submit(ss_feed_t *f, ss_frame_t *frame)
{
    void *evicted = NULL;
    ss_err_t e = ss_queue_push(f->frames, frame, &evicted);
    if (evicted) {
        ss_frame_pool_put(evicted);
        ss_stats_dropped(f->stats, 1);
    }
    if (e != SS_OK) {
        /* queue closed (shutdown after a broken backend): accepted, not processed */
        ss_frame_pool_put(frame);
        ss_stats_dropped(f->stats, 1);
    }
    ss_stats_set_queue(f->stats, ss_queue_depth(f->frames), f->cfg->queue_depth);
}

void ss_feed_limits(const ss_feed_t *f, ss_proto_limits_t *lim)
{
    ss_proto_limits_default(lim);
    lim->max_width = f->cfg->max_width;
    lim->max_height = f->cfg->max_height;
    lim->max_header_bytes = (size_t)f->cfg->max_header_bytes;
}

void ss_out_release(ss_out_t *o)
{
    if (o && atomic_fetch_sub(&o->refs, 1) == 1)
        ss_queue_try_push(o->feed->free_outs, o);
}
