/*
 * feed.c — a feed (feed.h): built from its config snapshot, the hand-over
 * points of its frames (pool -> source -> worker's queue) and of its
 * result buffers (worker -> sinks -> free list), and the few requests its
 * worker and the main thread pass each other.
 */
#include "feed.h"

#include "queue.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TAG "daemon"

/* One result buffer travelling from a worker to the sinks. refs counts the
 * sinks that still hold it; the last one returns it to the free list. */
struct ss_out {
    ss_result_t res;
    ss_feed_t *feed;
    atomic_int refs;
    int to_files;                   /* the file sink also gets it */
};

struct ss_feed {
    int index;
    char name[SS_NAME_MAX];
    const ss_feed_cfg_t *cfg;       /* the feed's config in start: as built (fixed keys hold;
                                     * reloadable ones reach threads through snapshots) */
    ss_cfg_snap_t *start;           /* the config snapshot the feed was built with (held) */
    ss_feed_stats_t *stats;

    ss_frame_pool_t *pool;
    size_t frame_bytes;             /* pixel bytes per pooled frame */
    size_t max_pixels;              /* pixels a frame / residual may have */
    ss_queue_t *frames;             /* source -> worker */

    ss_pipeline_t *pipe;            /* used by the worker thread only */
    pthread_mutex_t region_lock;    /* guards region */
    ss_roi_t region;                /* the last frame's processed region (w = 0: none yet) */
    ss_out_t *outs;
    int n_outs;
    ss_queue_t *free_outs;          /* result buffers not in use */
    atomic_int file_held;           /* result buffers queued for / held by the file sink */
    ss_source_t *source;
    ss_solver_t *solver;            /* wcs.solve: the plate-solving thread; NULL when off */

    atomic_int reset_req;           /* control "reset": forget the history before the next frame */
    atomic_int discard;             /* drain time is up: drop what is still queued (counted) */
    atomic_int drain_dropped;       /* accepted frames dropped at the drain timeout */
    _Atomic uint64_t busy_since_us; /* monotonic µs the current frame started; 0 = idle */
};

/* ---- building ----------------------------------------------------------- */

/* The pool, the queues and the result buffers of f (its config and
 * pipeline set); 0, or -1 with err. */
static int alloc_buffers(ss_feed_t *f, int masks, char *err, size_t n)
{
    /* the backend chosen for the feed gives the frame pool its host memory
     * (pinned under CUDA, for asynchronous uploads) */
    const ss_backend_ops_t *ops = NULL;
    ss_pipeline_backend(f->pipe, &ops);

    /* queue depth + 3: the queue's frames, the worker's two (the current
     * one and the next, prefetched), the source's */
    int pool_n = f->cfg->queue_depth + 3;
    /* mask buffers only where the source type can deliver a mask */
    size_t mask_bytes = masks ? f->max_pixels : 0;
    f->pool = ss_frame_pool_new(pool_n, f->frame_bytes, mask_bytes, &ops->host_alloc);
    f->frames = ss_queue_new(f->cfg->queue_depth, f->cfg->queue_policy);
    f->n_outs = SS_OUTS_PER_FEED;
    f->outs = calloc((size_t)f->n_outs, sizeof *f->outs);
    f->free_outs = ss_queue_new(f->n_outs, SS_QUEUE_BLOCK);
    if (!f->pool || !f->frames || !f->outs || !f->free_outs) {
        snprintf(err, n, "feed %s: cannot allocate %d frames of %zu bytes", f->name, pool_n,
                 f->frame_bytes);
        return -1;
    }
    for (int k = 0; k < f->n_outs; k++) {
        ss_out_t *o = &f->outs[k];
        o->feed = f;
        if (ss_pipeline_result_init(f->pipe, &o->res, f->max_pixels,
                                    f->cfg->pipeline.max_detections) != 0) {
            snprintf(err, n, "feed %s: cannot allocate result buffers", f->name);
            return -1;
        }
        ss_queue_try_push(f->free_outs, o);
    }
    return 0;
}

ss_feed_t *ss_feed_new(const ss_feed_env_t *env, char *err, size_t n)
{
    ss_feed_t *f = calloc(1, sizeof *f);
    if (!f) {
        snprintf(err, n, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&f->region_lock, NULL);
    f->index = env->index;
    if (!(f->start = ss_cfg_board_take(env->board))) {
        snprintf(err, n, "out of memory");
        goto fail;
    }
    f->cfg = &ss_cfg_snap_config(f->start)->feeds[f->index];
    ss_strlcpy(f->name, f->cfg->name, sizeof f->name);
    int masks = 0;
    ss_source_frame_needs(f->cfg, &f->max_pixels, &f->frame_bytes, &masks);

    const ss_pipeline_cfg_t pc = ss_feed_pipeline_cfg(ss_cfg_snap_config(f->start), f->index);
    if (!(f->pipe = ss_pipeline_new(&pc, f->name, err, n)))
        goto fail;
    if (alloc_buffers(f, masks, err, n) != 0)
        goto fail;
    if (!(f->source = ss_source_open(f, &env->source, err, n)))
        goto fail;
    if (!(f->stats = ss_feed_stats_new(f->name, ss_source_desc(f->source)))) {
        snprintf(err, n, "out of memory");
        goto fail;
    }
    if (f->cfg->wcs_solve && !(f->solver = ss_solver_new(f->name, f->cfg, f->stats))) {
        snprintf(err, n, "feed %s: cannot start the plate solver", f->name);
        goto fail;
    }
    ss_stats_set_queue(f->stats, 0, f->cfg->queue_depth);
    ss_stats_set_backend(f->stats, ss_pipeline_backend_name(f->pipe));
    SS_LOG(SS_LOG_INFO, TAG, "feed %s: %s; queue %d (%s); frames up to %zu bytes; backend %s",
           f->name, ss_source_desc(f->source), f->cfg->queue_depth,
           ss_queue_policy_name(f->cfg->queue_policy), f->frame_bytes,
           ss_pipeline_backend_name(f->pipe));
    return f;
fail:
    ss_feed_destroy(&f);
    return NULL;
}

void ss_feed_destroy(ss_feed_t **p)
{
    if (!p || !*p)
        return;
    ss_feed_t *f = *p;
    ss_solver_destroy(&f->solver);
    ss_source_destroy(&f->source);
    ss_pipeline_destroy(&f->pipe);
    if (f->outs)
        for (int k = 0; k < f->n_outs; k++)
            ss_result_free(&f->outs[k].res);
    free(f->outs);
    ss_queue_destroy(&f->free_outs);
    ss_queue_destroy(&f->frames);
    ss_frame_pool_destroy(&f->pool);
    ss_feed_stats_destroy(&f->stats);
    ss_cfg_snap_release(&f->start);
    pthread_mutex_destroy(&f->region_lock);
    free(f);
    *p = NULL;
}

/* ---- what a source sees ------------------------------------------------- */

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

/* ---- the feed's parts --------------------------------------------------- */

int ss_feed_index(const ss_feed_t *f)
{
    return f->index;
}

ss_cfg_snap_t *ss_feed_start_snap(const ss_feed_t *f)
{
    return f->start;
}

size_t ss_feed_max_pixels(const ss_feed_t *f)
{
    return f->max_pixels;
}

ss_source_t *ss_feed_source(const ss_feed_t *f)
{
    return f->source;
}

ss_pipeline_t *ss_feed_pipeline(const ss_feed_t *f)
{
    return f->pipe;
}

ss_solver_t *ss_feed_solver(const ss_feed_t *f)
{
    return f->solver;
}

/* ---- the frames queue --------------------------------------------------- */

ss_err_t ss_feed_frame_take(ss_feed_t *f, ss_frame_t **frame, double timeout_s)
{
    void *item = NULL;
    ss_err_t e = ss_queue_pop(f->frames, &item, timeout_s);
    *frame = e == SS_OK ? item : NULL;
    return e;
}

int ss_feed_queue_depth(const ss_feed_t *f)
{
    return ss_queue_depth(f->frames);
}

void ss_feed_close(ss_feed_t *f)
{
    ss_queue_close(f->frames);
}

void ss_feed_drop_frame(ss_feed_t *f, ss_frame_t *frame)
{
    ss_frame_pool_put(frame);
    ss_stats_dropped(f->stats, 1);
    atomic_fetch_add(&f->drain_dropped, 1);
}

uint64_t ss_feed_drain_dropped(const ss_feed_t *f)
{
    return (uint64_t)atomic_load(&f->drain_dropped);
}

/* ---- requests between the main thread and the worker ------------------- */

void ss_feed_request_reset(ss_feed_t *f)
{
    atomic_store(&f->reset_req, 1);
}

int ss_feed_take_reset(ss_feed_t *f)
{
    return atomic_exchange(&f->reset_req, 0);
}

void ss_feed_set_discard(ss_feed_t *f)
{
    atomic_store(&f->discard, 1);
}

int ss_feed_discarding(const ss_feed_t *f)
{
    return atomic_load(&f->discard);
}

void ss_feed_set_busy(ss_feed_t *f, uint64_t since_us)
{
    atomic_store(&f->busy_since_us, since_us);
}

uint64_t ss_feed_busy_since(const ss_feed_t *f)
{
    return atomic_load(&f->busy_since_us);
}

void ss_feed_set_region(ss_feed_t *f, ss_roi_t r)
{
    pthread_mutex_lock(&f->region_lock);
    f->region = r;
    pthread_mutex_unlock(&f->region_lock);
}

ss_roi_t ss_feed_region(ss_feed_t *f)
{
    pthread_mutex_lock(&f->region_lock);
    const ss_roi_t r = f->region;
    pthread_mutex_unlock(&f->region_lock);
    return r;
}

/* ---- result buffers ----------------------------------------------------- */

ss_err_t ss_feed_out_take(ss_feed_t *f, ss_out_t **o, double timeout_s)
{
    void *item = NULL;
    ss_err_t e = ss_queue_pop(f->free_outs, &item, timeout_s);
    if (e == SS_OK)
        *o = item;
    return e;
}

void ss_feed_out_put(ss_feed_t *f, ss_out_t *o)
{
    ss_queue_try_push(f->free_outs, o);     /* room for every buffer: never fails */
}

int ss_feed_files_held(const ss_feed_t *f)
{
    return atomic_load(&f->file_held);
}

ss_result_t *ss_out_result(ss_out_t *o)
{
    return &o->res;
}

ss_feed_t *ss_out_feed(const ss_out_t *o)
{
    return o->feed;
}

void ss_out_hold(ss_out_t *o, int to_files)
{
    o->to_files = to_files != 0;
    if (o->to_files)
        atomic_fetch_add(&o->feed->file_held, 1);
    atomic_store(&o->refs, 1 + o->to_files);
}

int ss_out_to_files(const ss_out_t *o)
{
    return o->to_files;
}

void ss_out_release(ss_out_t *o)
{
    if (o && atomic_fetch_sub(&o->refs, 1) == 1)
        ss_queue_try_push(o->feed->free_outs, o);
}

void ss_out_release_files(ss_out_t *o)
{
    atomic_fetch_sub(&o->feed->file_held, 1);
    ss_out_release(o);
}
