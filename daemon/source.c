/*
 * source.c — the common part of the feed sources: open by type, one
 * thread each, stop and join.
 */
#include "daemon.h"

#include <stdlib.h>

#define TAG "source"

static void *source_thread(void *arg)
{
    ss_source_t *s = arg;
    s->run(s);
    atomic_store(&s->feed->source_done, 1);
    SS_LOG(SS_LOG_INFO, TAG, "feed %s: source ended", s->feed->name);
    return NULL;
}

ss_source_t *ss_source_open(ss_feed_t *f, char *err, size_t n)
{
    ss_source_t *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, n, "out of memory");
        return NULL;
    }
    s->feed = f;
    int rc = -1;
    switch (f->cfg->source) {
    case SS_SOURCE_SYNTH: rc = ss_source_synth_open(s, err, n); break;
    case SS_SOURCE_ZMQ: rc = ss_source_zmq_open(s, f->d->zctx, err, n); break;
    case SS_SOURCE_FITS: rc = ss_source_fits_open(s, err, n); break;
    default: snprintf(err, n, "feed %s: unknown source type", f->name); break;
    }
    if (rc != 0) {
        free(s);
        return NULL;
    }
    return s;
}

ss_err_t ss_source_start(ss_source_t *s)
{
    if (pthread_create(&s->thread, NULL, source_thread, s) != 0)
        return SS_ERR_NOMEM;
    s->started = 1;
    return SS_OK;
}

void ss_source_stop(ss_source_t *s)
{
    if (!s)
        return;
    atomic_store(&s->stop, 1);
    if (s->started) {
        pthread_join(s->thread, NULL);
        s->started = 0;
    }
}

void ss_source_destroy(ss_source_t **ps)
{
    if (!ps || !*ps)
        return;
    ss_source_t *s = *ps;
    ss_source_stop(s);
    if (s->close)
        s->close(s);
    free(s);
    *ps = NULL;
}
