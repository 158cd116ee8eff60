/*
 * worker.c — one thread per feed: take frames from the feed's queue, run
 * them through the pipeline (pipeline/pipeline.h), hand the result to the
 * sinks, give the frame back to its pool.
 *
 * The worker does not wait on the network or the disk (see hand_over):
 * only, briefly, on the publisher's own encoding. Between frames it applies what the main thread asked for: a
 * history reset (control "reset") and a reload's config: it takes the
 * newest config snapshot (cfgsnap.h; reconfiguring the pipeline when its
 * keys changed) and reads the reloadable keys from that snapshot alone.
 *
 * Under load (a next frame already queued) a result whose residual is
 * still on its way from the GPU is held back while the next frame starts,
 * and handed over right after (ss_pipeline_start / ss_pipeline_finish):
 * the download then overlaps that frame's work. An idle feed hands each
 * result over as soon as it is complete.
 *
 * SS_ERR_BROKEN from the pipeline (a sticky GPU error) ends the feed: the
 * rest of its queue is dropped (counted) and the daemon is asked to stop
 * with a non-zero exit, so that systemd restarts it.
 */
#include "daemon.h"

#include <string.h>
#include <time.h>

#define TAG "worker"

static uint64_t mono_us(void)
{
    return (uint64_t)(ss_now_mono() * 1e6);
}

/* A plate solution the solver left (wcs.solve) to the pipeline: the
 * frames from the next on get its WCS through their shift, and the zero
 * point fitted against its catalogue stars when there is one (below a
 * configured pipeline.photometry.zeropoint, above a header's). */
static void take_solution(ss_feed_t *f)
{
    ss_wcs_key_t keys[SS_WCS_MAX];
    int n;
    uint64_t epoch;
    double ox, oy;
    ss_phot_zp_t zp;
    if (!f->solver || !ss_solver_take(f->solver, keys, &n, &epoch, &ox, &oy, &zp))
        return;
    if (ss_pipeline_set_sky(f->pipe, keys, n, epoch, ox, oy) != 0) {
        SS_LOG(SS_LOG_INFO, TAG, "feed %s: a plate solution of an earlier pointing (before a "
               "reset) dropped", f->name);
        return;
    }
    SS_LOG(SS_LOG_INFO, TAG, "feed %s: frames get sky coordinates from the plate solution",
           f->name);
    if (zp.source == SS_PHOT_FIT)
        ss_pipeline_set_zeropoint(f->pipe, &zp);
}

/* A frame that became the reference (start, reset, re-reference) and has
 * no WCS of its own goes to the solver (wcs.solve). */
static void maybe_solve(ss_feed_t *f, const ss_frame_t *frame, const ss_result_t *res, ss_err_t e)
{
    if (f->solver && e == SS_OK && res->rereferenced && res->reg_known && frame->meta.n_wcs == 0)
        ss_solver_submit(f->solver, frame, res->sky_epoch, res->reg_x, res->reg_y);
}

/* The feed's keys in the worker's config snapshot. */
static const ss_feed_cfg_t *wcfg(const ss_feed_t *f)
{
    return &ss_cfg_snap_config(f->wsnap)->feeds[f->index];
}

/* Take the newest config snapshot, if a reload published one, and
 * reconfigure the pipeline when its keys changed (worker thread, between
 * frames). */
static void take_config(ss_feed_t *f)
{
    ss_cfg_snap_t *neu = ss_cfg_board_newer(f->d->board, f->wsnap);
    if (!neu)
        return;
    const ss_pipeline_cfg_t *cfg = &ss_cfg_snap_config(neu)->feeds[f->index].pipeline;
    const int changed = memcmp(cfg, &wcfg(f)->pipeline, sizeof *cfg) != 0;
    ss_cfg_snap_release(&f->wsnap);
    f->wsnap = neu;
    if (!changed)
        return;
    char err[400];
    if (ss_pipeline_reconfigure(f->pipe, cfg, err, sizeof err) != 0)
        SS_LOG(SS_LOG_ERR, TAG, "feed %s: new pipeline config not applied: %s", f->name, err);
    else
        SS_LOG(SS_LOG_INFO, TAG, "feed %s: pipeline config applied", f->name);
    ss_stats_set_backend(f->stats, ss_pipeline_backend_name(f->pipe));
}

/* Apply reset / reconfigure requests (worker thread, between frames). */
static void apply_requests(ss_feed_t *f)
{
    take_config(f);
    if (atomic_exchange(&f->reset_req, 0))
        ss_pipeline_reset(f->pipe, "control request");
    take_solution(f);
}

/* A result buffer with room for max_dets detections (a reload may have
 * raised detect.max: the buffer grows once, here, not per frame). */
static void fit_detections(ss_feed_t *f, ss_out_t *o)
{
    const int want = wcfg(f)->pipeline.max_detections;
    if (o->res.dets.capacity >= want)
        return;
    ss_detlist_t l;
    if (ss_detlist_init(&l, want) != 0) {
        SS_LOG(SS_LOG_WARNING, TAG, "feed %s: cannot grow the detection list to %d", f->name,
               want);
        return;
    }
    ss_detlist_free(&o->res.dets);
    o->res.dets = l;
}

/* Whether the sinks may make this worker wait for them: under
 * queue.policy block (the source waits for the worker too, so nothing is
 * dropped anywhere: the disk sets the pace of a batch) and while the
 * daemon drains (every accepted frame's results reach every sink before
 * exit), until the drain timeout. Otherwise (drop_oldest, live) a slow
 * disk costs file results, counted, never the pipeline's pace. */
static int sinks_may_wait(const ss_feed_t *f)
{
    return !atomic_load(&f->discard) &&
           (wcfg(f)->queue_policy == SS_QUEUE_BLOCK || atomic_load(&f->d->draining));
}

static void nap_ms(int ms)
{
    struct timespec ts = { 0, ms * 1000000L };
    nanosleep(&ts, NULL);
}

/* Give a finished result to the sinks. The publisher's queue has room for
 * every buffer of every feed; the file sink may hold SS_FILE_HELD_MAX, and
 * beyond that the worker waits where sinks_may_wait says so. */
/* Whether any file sink of feed config c is on. */
static int file_sinks_on(const ss_feed_cfg_t *c)
{
    return c->fits_dir[0] || c->jsonl_path[0] || c->ds9_dir[0] || c->iod_path[0] ||
           c->ades_path[0];
}

static void publish(ss_feed_t *f, ss_out_t *o)
{
    const int files = file_sinks_on(wcfg(f));
    while (files && atomic_load(&f->file_held) >= SS_FILE_HELD_MAX && sinks_may_wait(f))
        nap_ms(2);
    o->to_files = files && atomic_load(&f->file_held) < SS_FILE_HELD_MAX;
    if (files && !o->to_files)
        SS_SINK_ADD(f->stats, file_dropped, 1);
    if (o->to_files)
        atomic_fetch_add(&f->file_held, 1);
    atomic_store(&o->refs, 1 + o->to_files);
    if (ss_queue_try_push(f->d->pub_q, o) != SS_OK)
        ss_out_release(o);
    if (o->to_files && ss_queue_try_push(f->d->file_q, o) != SS_OK) {
        atomic_fetch_sub(&f->file_held, 1);
        ss_out_release(o);
    }
}

/* Give the worker's current result to the sinks and take a free buffer
 * for the next frame.
 *
 * The publisher never waits on the network (non-blocking sends), so the
 * buffers it holds come back within its own encoding time: the worker
 * waits for one (at most SS_SINK_WAIT_S, unless sinks_may_wait; then the
 * sinks miss this frame, counted as sink_dropped, and the worker reuses
 * its buffer). The file sink may wait on a disk, so it may hold only
 * SS_FILE_HELD_MAX buffers: beyond that, publish waits or the file sinks
 * skip the frame (file_dropped). */
static void hand_over(ss_feed_t *f)
{
    void *next = NULL;
    ss_err_t e;
    while ((e = ss_queue_pop(f->free_outs, &next, SS_SINK_WAIT_S)) == SS_ERR_TIMEOUT &&
           sinks_may_wait(f))
        ;
    if (e != SS_OK) {
        SS_SINK_ADD(f->stats, sink_dropped, 1);
        return;
    }
    publish(f, f->work);
    f->work = next;
    fit_detections(f, f->work);
}

/* Drop everything still queued (broken backend, drain timeout). */
static void discard_queue(ss_feed_t *f)
{
    void *item;
    while (ss_queue_pop(f->frames, &item, 0) == SS_OK) {
        ss_frame_pool_put(item);
        ss_stats_dropped(f->stats, 1);
        atomic_fetch_add(&f->drain_dropped, 1);
    }
}

/* A backend gone broken (sticky GPU error): the feed ends, what is queued
 * is dropped (counted), the daemon stops non-zero so that systemd
 * restarts it. */
static void go_broken(ss_feed_t *f, ss_frame_t **next)
{
    ss_stats_set_state(f->stats, "broken");
    ss_queue_close(f->frames);
    if (*next) {
        ss_frame_pool_put(*next);
        ss_stats_dropped(f->stats, 1);
        *next = NULL;
    }
    discard_queue(f);
    ss_daemon_request_stop(f->d, 1, "a backend is broken (sticky device error)");
}

/* A frame's result is complete (its residual landed): counters. Returns
 * the frame's outcome, SS_ERR_BROKEN included. */
static ss_err_t complete(ss_feed_t *f, ss_out_t *o, ss_err_t e, int *first)
{
    const ss_err_t fe = ss_pipeline_finish(f->pipe, &o->res);
    if (fe == SS_ERR_BROKEN || (e == SS_OK && fe != SS_OK))
        e = fe;
    ss_source_frame_done(f->source, &o->res.meta);
    if (o->res.width > 0 && o->res.height > 0) {   /* what a reload's calibration must hold */
        pthread_mutex_lock(&f->d->region_lock);
        f->region = (ss_roi_t){ o->res.origin_x, o->res.origin_y, o->res.width, o->res.height };
        pthread_mutex_unlock(&f->d->region_lock);
    }
    ss_pipeline_stats_t ps;
    size_t used, total;
    ss_pipeline_get_stats(f->pipe, &ps);
    ss_pipeline_memory(f->pipe, &used, &total);
    ss_stats_processed(f->stats, &o->res, &ps, used, total, ss_queue_depth(f->frames),
                       wcfg(f)->queue_depth);
    if (*first) {
        ss_stats_set_state(f->stats, "running");    /* "idle" until the first frame */
        *first = 0;
    }
    return e;
}

static int publishable(ss_err_t e)
{
    return e == SS_OK || e == SS_ERR_BACKEND || e == SS_ERR_SIZE;
}

/* Complete the held-back result and give it to the sinks (the worker has
 * its next buffer already). Returns 1 when the backend turned out broken. */
static int flush_pend(ss_feed_t *f, ss_out_t **pend, ss_err_t pend_e, int *first)
{
    ss_out_t *o = *pend;
    *pend = NULL;
    const ss_err_t e = complete(f, o, pend_e, first);
    if (publishable(e))
        publish(f, o);
    else
        ss_queue_try_push(f->free_outs, o);     /* room for every buffer: never fails */
    return e == SS_ERR_BROKEN;
}

void *ss_worker_main(void *arg)
{
    ss_feed_t *f = arg;
    int broken = 0, first = 1;
    /* the frame after the current one, taken from the queue early so that
     * its upload overlaps the current frame's work (ss_pipeline_prefetch);
     * it is this worker's from then on, processed next */
    ss_frame_t *next = NULL;
    /* the previous frame's result while its residual is still coming back
     * from the device (ss_pipeline_start): handed over once the next frame
     * has started, so that the download overlaps that frame's work. Only
     * when a next frame was already waiting: an idle feed hands each result
     * over as soon as it is complete. */
    ss_out_t *pend = NULL;
    ss_err_t pend_e = SS_OK;
    f->wsnap = ss_cfg_snap_ref(f->start);    /* what the pipeline was built with */
    fit_detections(f, f->work);
    while (!broken) {
        void *item = NULL;
        ss_err_t e = SS_OK;
        if (pend && !next && flush_pend(f, &pend, pend_e, &first)) {
            /* (the next frame was dropped by a drain: nothing else comes soon) */
            go_broken(f, &next);
            broken = 1;
            continue;
        }
        if (next) {
            item = next;
            next = NULL;
        } else {
            e = ss_queue_pop(f->frames, &item, SS_POLL_S);
            if (e == SS_ERR_STOPPED)
                break;
        }
        apply_requests(f);
        if (e != SS_OK)
            continue;
        ss_frame_t *frame = item;
        if (atomic_load(&f->discard)) {
            ss_frame_pool_put(frame);
            ss_stats_dropped(f->stats, 1);
            atomic_fetch_add(&f->drain_dropped, 1);
            continue;
        }
        if (ss_queue_pop(f->frames, &item, 0) == SS_OK) {
            next = item;
            ss_pipeline_prefetch(f->pipe, next);
        }
        ss_result_t *res = &f->work->res;
        atomic_store(&f->busy_since_us, mono_us());
        e = ss_pipeline_start(f->pipe, frame, res);
        atomic_store(&f->busy_since_us, 0);
        maybe_solve(f, frame, res, e);
        ss_frame_pool_put(frame);

        /* the previous frame's residual has landed by now (this frame's
         * guided filter waited for it on the device) */
        if (pend && flush_pend(f, &pend, pend_e, &first))
            e = SS_ERR_BROKEN;
        if (e != SS_ERR_BROKEN && res->residual_pending && next) {
            void *nb = NULL;
            if (ss_queue_pop(f->free_outs, &nb, 0) == SS_OK) {
                pend = f->work;
                pend_e = e;
                f->work = nb;
                fit_detections(f, f->work);
                continue;
            }
        }
        e = complete(f, f->work, e, &first);
        if (e == SS_ERR_BROKEN) {
            go_broken(f, &next);
            broken = 1;
            continue;
        }
        if (publishable(e))
            hand_over(f);
    }
    if (pend && flush_pend(f, &pend, pend_e, &first)) {   /* nothing accepted is lost */
        go_broken(f, &next);
        broken = 1;
    }
    if (!broken)
        ss_stats_set_state(f->stats, "stopped");
    ss_cfg_snap_release(&f->wsnap);
    atomic_store(&f->worker_done, 1);
    return NULL;
}
