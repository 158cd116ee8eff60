/*
 * source.c — the common part of the feed sources: the registry of source
 * types (source.h), one thread each, stop and join.
 */
#include "source.h"

#include "feed.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define TAG "source"

struct ss_source {
    const ss_source_ops_t *ops;
    void *impl;                     /* what ops->open returned */
    ss_feed_t *feed;
    ss_source_env_t env;
    pthread_t thread;
    int started;
    atomic_int stop;
    char desc[SS_SOURCE_DESC_MAX];  /* for status: "zmq pull bind ipc://...", ... */
};

static const ss_source_ops_t *const registry[] = {
    &ss_source_synth_ops,
    &ss_source_zmq_ops,
    &ss_source_fits_ops,
    &ss_source_indi_ops,
};

const ss_source_ops_t *ss_source_ops_find(const char *name)
{
    for (size_t i = 0; i < sizeof registry / sizeof registry[0]; i++)
        if (strcmp(registry[i]->name, name) == 0)
            return registry[i];
    return NULL;
}

void ss_source_frame_needs(const ss_feed_cfg_t *c, size_t *pixels, size_t *bytes, int *masks)
{
    const ss_source_ops_t *ops = ss_source_ops_find(ss_source_type_name(c->source));
    *masks = ops && ops->masks;
    if (ops && ops->frame_size) {
        ops->frame_size(c, pixels, bytes);
        return;
    }
    *pixels = (size_t)c->max_width * (size_t)c->max_height;
    *bytes = ss_feed_max_pixel_bytes(c);
}

static void *source_thread(void *arg)
{
    ss_source_t *s = arg;
    const char *stop_why = s->ops->run(s->impl);
    if (s->env.ended)
        s->env.ended(s->env.user, stop_why);
    SS_LOG(SS_LOG_INFO, TAG, "feed %s: source ended", ss_feed_name(s->feed));
    return NULL;
}

ss_source_t *ss_source_open(ss_feed_t *f, const ss_source_env_t *env, char *err, size_t n)
{
    const ss_source_ops_t *ops = ss_source_ops_find(ss_source_type_name(ss_feed_cfg(f)->source));
    if (!ops) {
        snprintf(err, n, "feed %s: unknown source type", ss_feed_name(f));
        return NULL;
    }
    ss_source_t *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, n, "out of memory");
        return NULL;
    }
    s->ops = ops;
    s->feed = f;
    s->env = *env;
    if (!(s->impl = ops->open(s, s->desc, sizeof s->desc, err, n))) {
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
    s->ops->close(&s->impl);
    free(s);
    *ps = NULL;
}

void ss_source_frame_done(ss_source_t *s, const ss_frame_meta_t *m)
{
    if (s->ops->frame_done)
        s->ops->frame_done(s->impl, m);
}

ss_feed_t *ss_source_feed(const ss_source_t *s)
{
    return s->feed;
}

const ss_source_env_t *ss_source_env(const ss_source_t *s)
{
    return &s->env;
}

const atomic_int *ss_source_stop_flag(const ss_source_t *s)
{
    return &s->stop;
}

const char *ss_source_desc(const ss_source_t *s)
{
    return s->desc;
}
