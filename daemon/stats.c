/*
 * stats.c — per-feed counters under one mutex each.
 */
#include "stats.h"

#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

struct ss_feed_stats {
    pthread_mutex_t lock;
    ss_proto_feed_stats_t s;
    ss_sink_counters_t sinks;
    double tick_mono;               /* time of the last tick (0 = none yet) */
    uint64_t tick_processed;        /* processed at the last tick */
};

ss_feed_stats_t *ss_feed_stats_new(const char *name, const char *source)
{
    ss_feed_stats_t *st = calloc(1, sizeof *st);
    if (!st)
        return NULL;
    pthread_mutex_init(&st->lock, NULL);
    ss_proto_feed_stats_clear(&st->s);
    ss_strlcpy(st->s.name, name, sizeof st->s.name);
    ss_strlcpy(st->s.source, source ? source : "", sizeof st->s.source);
    ss_strlcpy(st->s.state, "idle", sizeof st->s.state);
    return st;
}

void ss_feed_stats_destroy(ss_feed_stats_t **pst)
{
    if (!pst || !*pst)
        return;
    pthread_mutex_destroy(&(*pst)->lock);
    free(*pst);
    *pst = NULL;
}

#define LOCKED(st, body)                   \
    do {                                   \
        pthread_mutex_lock(&(st)->lock);   \
        body;                              \
        pthread_mutex_unlock(&(st)->lock); \
    } while (0)

void ss_stats_received(ss_feed_stats_t *st)
{
    LOCKED(st, st->s.received++);
}

void ss_stats_accepted(ss_feed_stats_t *st)
{
    LOCKED(st, st->s.accepted++);
}

void ss_stats_rejected(ss_feed_stats_t *st, ss_proto_reason_t why)
{
    if ((unsigned)why >= SS_PR__COUNT)
        why = SS_PR_BAD_VALUE;
    LOCKED(st, {
        st->s.rejected++;
        st->s.rejected_by[why]++;
    });
}

void ss_stats_dropped(ss_feed_stats_t *st, uint64_t n)
{
    LOCKED(st, st->s.dropped_queue += n);
}

void ss_stats_processed(ss_feed_stats_t *st, const ss_result_t *res,
                        const ss_pipeline_stats_t *ps, size_t mem_used, size_t mem_total,
                        int queue_depth, int queue_capacity)
{
    LOCKED(st, {
        st->s.processed++;
        if ((unsigned)res->status < SS_STATUS__COUNT)
            st->s.status_count[res->status]++;
        st->s.detections = ps->detections;
        st->s.detections_truncated = ps->detections_truncated;
        st->s.reg_failures = ps->status[SS_STATUS_REG_FAILED];
        st->s.resets = ps->resets;
        st->s.last_seq = res->meta.seq;
        st->s.last_mjd = res->meta.mjd_obs;
        memcpy(st->s.stage_ms, res->stage_ms, sizeof st->s.stage_ms);
        st->s.total_ms = res->total_ms;
        st->s.device_mem_used = mem_used;
        st->s.device_mem_total = mem_total;
        st->s.queue_depth = queue_depth;
        st->s.queue_capacity = queue_capacity;
    });
}

void ss_stats_set_queue(ss_feed_stats_t *st, int depth, int capacity)
{
    LOCKED(st, {
        st->s.queue_depth = depth;
        st->s.queue_capacity = capacity;
    });
}

void ss_stats_set_state(ss_feed_stats_t *st, const char *state)
{
    LOCKED(st, ss_strlcpy(st->s.state, state, sizeof st->s.state));
}

void ss_stats_set_backend(ss_feed_stats_t *st, const char *backend)
{
    LOCKED(st, ss_strlcpy(st->s.backend, backend ? backend : "", sizeof st->s.backend));
}

void ss_stats_published(ss_feed_stats_t *st, uint64_t messages)
{
    LOCKED(st, st->s.published += messages);
}

void ss_stats_pub_dropped(ss_feed_stats_t *st, uint64_t messages)
{
    LOCKED(st, st->s.pub_dropped += messages);
}

void ss_stats_sink_add(ss_feed_stats_t *st, size_t field_offset, uint64_t n)
{
    if (field_offset + sizeof(uint64_t) > sizeof(ss_sink_counters_t))
        return;
    LOCKED(st, *(uint64_t *)((char *)&st->sinks + field_offset) += n);
}

void ss_stats_tick(ss_feed_stats_t *st, double now_mono)
{
    LOCKED(st, {
        if (st->tick_mono > 0 && now_mono > st->tick_mono)
            st->s.fps = (double)(st->s.processed - st->tick_processed) /
                        (now_mono - st->tick_mono);
        st->tick_mono = now_mono;
        st->tick_processed = st->s.processed;
    });
}

void ss_stats_snapshot(ss_feed_stats_t *st, ss_proto_feed_stats_t *out,
                       ss_sink_counters_t *sinks)
{
    LOCKED(st, {
        if (out)
            *out = st->s;
        if (sinks)
            *sinks = st->sinks;
    });
}
