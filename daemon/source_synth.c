/*
 * source_synth.c — the built-in synthetic star field (tools/synth.h) as a
 * feed source, at source.synth.rate frames per second (0: as fast as the
 * queue takes them), for source.synth.count frames (0: endless). It is the
 * default config's one feed: what `skysieved` runs out of the box.
 *
 * Frames are scheduled on an absolute monotonic timeline, so the rate does
 * not drift with the rendering time; a source that falls behind does not
 * try to catch up with a burst.
 */
#include "feed.h"
#include "source.h"

#include "tools/synth.h"

#include <stdlib.h>
#include <time.h>

#define TAG "synth"

typedef struct synth_src {
    ss_feed_t *feed;
    const atomic_int *stop;         /* the source's stop flag */
    ss_synth_t *gen;
    double rate;
    uint64_t count;
} synth_src_t;

/* Sleep until the monotonic time t, waking every SS_POLL_S to look at stop. */
static void sleep_until(double t, const atomic_int *stop)
{
    for (;;) {
        double left = t - ss_now_mono();
        if (left <= 0 || atomic_load(stop))
            return;
        if (left > SS_POLL_S)
            left = SS_POLL_S;
        struct timespec ts = { (time_t)left, (long)((left - (double)(time_t)left) * 1e9) };
        nanosleep(&ts, NULL);
    }
}

static const char *synth_run(void *impl)
{
    synth_src_t *ss = impl;
    ss_feed_t *f = ss->feed;
    double next = ss_now_mono();
    for (uint64_t k = 0; (ss->count == 0 || k < ss->count) && !atomic_load(ss->stop); k++) {
        if (ss->rate > 0) {
            sleep_until(next, ss->stop);
            if (atomic_load(ss->stop))
                break;
            double now = ss_now_mono();
            next = (next + 1.0 / ss->rate < now) ? now : next + 1.0 / ss->rate;
        }
        ss_frame_t *fr = ss_feed_frame_get(f, ss->stop);
        if (!fr)
            break;
        ss_err_t e = ss_synth_next(ss->gen, fr, NULL);
        ss_stats_received(ss_feed_stats(f));
        if (e != SS_OK) {
            /* cannot happen with a pool sized from the synth config */
            SS_LOG(SS_LOG_ERR, TAG, "feed %s: synth: %s", ss_feed_name(f), ss_strerror(e));
            ss_stats_rejected(ss_feed_stats(f), SS_PR_NO_BUFFER);
            ss_frame_pool_put(fr);
            continue;
        }
        ss_strlcpy(fr->meta.feed, ss_feed_name(f), sizeof fr->meta.feed);
        fr->meta.recv_mono = ss_now_mono();
        ss_stats_accepted(ss_feed_stats(f));
        ss_feed_submit(f, fr);
    }
    return NULL;
}

static void synth_close(void **impl)
{
    synth_src_t *ss = *impl;
    if (ss)
        ss_synth_destroy(&ss->gen);
    free(ss);
    *impl = NULL;
}

static void *synth_open(ss_source_t *s, char *desc, size_t desc_n, char *err, size_t n)
{
    const ss_feed_cfg_t *c = ss_feed_cfg(ss_source_feed(s));
    synth_src_t *ss = calloc(1, sizeof *ss);
    if (!ss) {
        snprintf(err, n, "out of memory");
        return NULL;
    }
    ss->feed = ss_source_feed(s);
    ss->stop = ss_source_stop_flag(s);
    ss_synth_cfg_t g;
    ss_feed_synth_cfg(c, &g);
    ss->gen = ss_synth_new(&g);
    if (!ss->gen) {
        snprintf(err, n, "feed %s: cannot create the synthetic source", c->name);
        free(ss);
        return NULL;
    }
    ss->rate = c->synth.rate;
    ss->count = c->synth.count;
    snprintf(desc, desc_n, "synth %dx%d %s at %g/s", g.width, g.height, ss_dtype_name(g.dtype),
             ss->rate);
    return ss;
}

/* A synthetic feed knows its frames' exact size (source.synth.width,
 * height, dtype). */
static void synth_frame_size(const ss_feed_cfg_t *c, size_t *pixels, size_t *bytes)
{
    const ss_synth_cfg_t *g = &c->synth.gen;
    *pixels = (size_t)g->width * (size_t)g->height;
    *bytes = *pixels * ss_dtype_size(g->dtype);
}

const ss_source_ops_t ss_source_synth_ops = {
    .name = "synth",
    .open = synth_open,
    .run = synth_run,
    .close = synth_close,
    .frame_size = synth_frame_size,
};
