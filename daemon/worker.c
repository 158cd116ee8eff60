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
#include "solver.h"

#include <string.h>
#include <time.h>

#define TAG "worker"

/* The worker's own state: its feed and daemon, the config snapshot it
 * reads reloadable keys from, its current result buffer. */
typedef struct worker {
    ss_daemon_t *d;
    ss_feed_t *f;
    ss_pipeline_t *pipe;            /* the feed's: this thread's alone */
    ss_solver_t *solver;            /* the feed's (NULL with wcs.solve off) */
    ss_feed_stats_t *stats;
    const char *name;
    int index;
    ss_cfg_snap_t *wsnap;           /* the worker's current snapshot */
    ss_out_t *work;                 /* the current result buffer */
} worker_t;

static uint64_t mono_us(void)
{
    return (uint64_t)(ss_now_mono() * 1e6);
}

/* A plate solution the solver left (wcs.solve) to the pipeline: the
 * frames from the next on get its WCS through their shift, and the zero
 * point fitted against its catalogue stars when there is one (below a
 * configured pipeline.photometry.zeropoint, above a header's). */
static void take_solution(worker_t *w)
{
    ss_wcs_key_t keys[SS_WCS_MAX];
    int n;
    uint64_t epoch;
    double ox, oy;
    ss_phot_zp_t zp;
    if (!w->solver || !ss_solver_take(w->solver, keys, &n, &epoch, &ox, &oy, &zp))
        return;
    if (ss_pipeline_set_sky(w->pipe, keys, n, epoch, ox, oy) != 0) {
        SS_LOG(SS_LOG_INFO, TAG, "feed %s: a plate solution of an earlier pointing (before a "
               "reset) dropped", w->name);
        return;
    }
    SS_LOG(SS_LOG_INFO, TAG, "feed %s: frames get sky coordinates from the plate solution",
           w->name);
    if (zp.source == SS_PHOT_FIT)
        ss_pipeline_set_zeropoint(w->pipe, &zp);
}

/* A frame that became the reference (start, reset, re-reference) and has
 * no WCS of its own goes to the solver (wcs.solve). */
static void maybe_solve(worker_t *w, const ss_frame_t *frame, const ss_result_t *res, ss_err_t e)
{
    if (w->solver && e == SS_OK && res->rereferenced && res->reg_known && frame->meta.n_wcs == 0)
        ss_solver_submit(w->solver, frame, res->sky_epoch, res->reg_x, res->reg_y);
}

/* The feed's keys in the worker's config snapshot. */
static const ss_feed_cfg_t *wcfg(const worker_t *w)
{
    return &ss_cfg_snap_config(w->wsnap)->feeds[w->index];
}

/* Take the newest config snapshot, if a reload published one, and
 * reconfigure the pipeline when its keys changed (worker thread, between
 * frames). */
static void take_config(worker_t *w)
{
    ss_cfg_snap_t *neu = ss_cfg_board_newer(w->d->board, w->wsnap);
    if (!neu)
        return;
    const ss_config_t *now = ss_cfg_snap_config(neu), *was = ss_cfg_snap_config(w->wsnap);
    const ss_pipeline_cfg_t cfg = ss_feed_pipeline_cfg(now, w->index);
    const int changed = memcmp(&now->feeds[w->index].pipeline, &was->feeds[w->index].pipeline,
                               sizeof cfg) != 0 ||
                        cfg.device_feeds != ss_feed_pipeline_cfg(was, w->index).device_feeds;
    ss_cfg_snap_release(&w->wsnap);
    w->wsnap = neu;
    if (!changed)
        return;
    char err[400];
    if (ss_pipeline_reconfigure(w->pipe, &cfg, err, sizeof err) != 0)
        SS_LOG(SS_LOG_ERR, TAG, "feed %s: new pipeline config not applied: %s", w->name, err);
    else
        SS_LOG(SS_LOG_INFO, TAG, "feed %s: pipeline config applied", w->name);
    ss_stats_set_backend(w->stats, ss_pipeline_backend_name(w->pipe));
}

/* What the result of frame carries (ss_pipeline_set_outputs): the float32
 * residual unless publish.residual_on_demand finds no taker for it, the
 * float16 and the stamps while subscribers ask for them (outsubs.h; the
 * _every topics on the frames whose seq is a multiple of publish.every). */
static void set_outputs(worker_t *w, const ss_frame_t *frame)
{
    const ss_config_t *c = ss_cfg_snap_config(w->wsnap);
    const unsigned want = atomic_load(&w->d->out_wanted[w->index]);
    const int every = c->publish_every > 0 && frame->meta.seq % (uint64_t)c->publish_every == 0;
    ss_outputs_t o = ss_outputs_default();
    o.f32 = !c->publish_on_demand || wcfg(w)->fits_dir[0] ||
            (c->publish_residuals && (want & SS_WANT_FORM(SS_FORM_F32))) ||
            (every && (want & SS_WANT_FORM(SS_FORM_F32_EVERY)));
    o.f16 = c->publish_f16 && ((want & SS_WANT_FORM(SS_FORM_F16)) ||
                               (every && (want & SS_WANT_FORM(SS_FORM_F16_EVERY))));
    o.stamps = c->stamps_enabled && (want & SS_WANT_STAMPS);
    o.stamp_size = c->stamps_size | 1;
    o.stamp_streak_max = SS_MAX(c->stamps_streak_max, o.stamp_size);
    o.stamp_max = c->stamps_max;
    ss_pipeline_set_outputs(w->pipe, &o);
}

/* Apply reset / reconfigure requests (worker thread, between frames). */
static void apply_requests(worker_t *w)
{
    take_config(w);
    if (ss_feed_take_reset(w->f))
        ss_pipeline_reset(w->pipe, "control request");
    take_solution(w);
}

/* A result buffer with room for max_dets detections (a reload may have
 * raised detect.max: the buffer grows once, here, not per frame). */
static void fit_detections(worker_t *w, ss_out_t *o)
{
    const int want = wcfg(w)->pipeline.max_detections;
    ss_result_t *res = ss_out_result(o);
    if (res->dets.capacity >= want)
        return;
    ss_detlist_t l;
    if (ss_detlist_init(&l, want) != 0) {
        SS_LOG(SS_LOG_WARNING, TAG, "feed %s: cannot grow the detection list to %d", w->name,
               want);
        return;
    }
    ss_detlist_free(&res->dets);
    res->dets = l;
}

/* Whether the sinks may make this worker wait for them: under
 * queue.policy block (the source waits for the worker too, so nothing is
 * dropped anywhere: the disk sets the pace of a batch) and while the
 * daemon drains (every accepted frame's results reach every sink before
 * exit), until the drain timeout. Otherwise (drop_oldest, live) a slow
 * disk costs file results, counted, never the pipeline's pace. */
static int sinks_may_wait(const worker_t *w)
{
    return !ss_feed_discarding(w->f) &&
           (wcfg(w)->queue_policy == SS_QUEUE_BLOCK || atomic_load(&w->d->draining));
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

static void publish(worker_t *w, ss_out_t *o)
{
    const int files = file_sinks_on(wcfg(w));
    while (files && ss_feed_files_held(w->f) >= SS_FILE_HELD_MAX && sinks_may_wait(w))
        nap_ms(2);
    const int to_files = files && ss_feed_files_held(w->f) < SS_FILE_HELD_MAX;
    if (files && !to_files)
        SS_SINK_ADD(w->stats, file_dropped, 1);
    ss_out_hold(o, to_files);
    if (ss_queue_try_push(w->d->pub_q, o) != SS_OK)
        ss_out_release(o);
    if (to_files && ss_queue_try_push(w->d->file_q, o) != SS_OK)
        ss_out_release_files(o);
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
static void hand_over(worker_t *w)
{
    ss_out_t *next = NULL;
    ss_err_t e;
    while ((e = ss_feed_out_take(w->f, &next, SS_SINK_WAIT_S)) == SS_ERR_TIMEOUT &&
           sinks_may_wait(w))
        ;
    if (e != SS_OK) {
        SS_SINK_ADD(w->stats, sink_dropped, 1);
        return;
    }
    publish(w, w->work);
    w->work = next;
    fit_detections(w, w->work);
}

/* Drop everything still queued (broken backend, drain timeout). */
static void discard_queue(worker_t *w)
{
    ss_frame_t *frame;
    while (ss_feed_frame_take(w->f, &frame, 0) == SS_OK)
        ss_feed_drop_frame(w->f, frame);
}

/* A backend gone broken (sticky GPU error): the feed ends, what is queued
 * is dropped (counted), the daemon stops non-zero so that systemd
 * restarts it. */
static void go_broken(worker_t *w, ss_frame_t **next)
{
    ss_stats_set_state(w->stats, "broken");
    ss_feed_close(w->f);
    if (*next) {
        ss_frame_pool_put(*next);
        ss_stats_dropped(w->stats, 1);
        *next = NULL;
    }
    discard_queue(w);
    ss_daemon_request_stop(w->d, 1, "a backend is broken (sticky device error)");
}

/* A frame's result is complete (its residual landed): counters. Returns
 * the frame's outcome, SS_ERR_BROKEN included. */
static ss_err_t complete(worker_t *w, ss_out_t *o, ss_err_t e, int *first)
{
    ss_result_t *res = ss_out_result(o);
    const ss_err_t fe = ss_pipeline_finish(w->pipe, res);
    if (fe == SS_ERR_BROKEN || (e == SS_OK && fe != SS_OK))
        e = fe;
    ss_source_frame_done(ss_feed_source(w->f), &res->meta);
    if (res->width > 0 && res->height > 0)     /* what a reload's calibration must hold */
        ss_feed_set_region(w->f,
                           (ss_roi_t){ res->origin_x, res->origin_y, res->width, res->height });
    ss_pipeline_stats_t ps;
    size_t used, total;
    ss_pipeline_get_stats(w->pipe, &ps);
    ss_pipeline_memory(w->pipe, &used, &total);
    ss_stats_processed(w->stats, res, &ps, used, total, ss_feed_queue_depth(w->f),
                       wcfg(w)->queue_depth);
    if (*first) {
        ss_stats_set_state(w->stats, "running");    /* "idle" until the first frame */
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
static int flush_pend(worker_t *w, ss_out_t **pend, ss_err_t pend_e, int *first)
{
    ss_out_t *o = *pend;
    *pend = NULL;
    const ss_err_t e = complete(w, o, pend_e, first);
    if (publishable(e))
        publish(w, o);
    else
        ss_feed_out_put(w->f, o);
    return e == SS_ERR_BROKEN;
}

void *ss_worker_main(void *arg)
{
    ss_worker_slot_t *slot = arg;
    ss_feed_t *f = slot->feed;
    worker_t wk = { .d = slot->d,
                    .f = f,
                    .pipe = ss_feed_pipeline(f),
                    .solver = ss_feed_solver(f),
                    .stats = ss_feed_stats(f),
                    .name = ss_feed_name(f),
                    .index = ss_feed_index(f) },
             *w = &wk;
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
    w->wsnap = ss_cfg_snap_ref(ss_feed_start_snap(f));    /* what the pipeline was built with */
    ss_feed_out_take(f, &w->work, 0);       /* every buffer is free before the first frame */
    fit_detections(w, w->work);
    while (!broken) {
        ss_frame_t *frame = NULL;
        ss_err_t e = SS_OK;
        if (pend && !next && flush_pend(w, &pend, pend_e, &first)) {
            /* (the next frame was dropped by a drain: nothing else comes soon) */
            go_broken(w, &next);
            broken = 1;
            continue;
        }
        if (next) {
            frame = next;
            next = NULL;
        } else {
            e = ss_feed_frame_take(f, &frame, SS_POLL_S);
            if (e == SS_ERR_STOPPED)
                break;
        }
        apply_requests(w);
        if (e != SS_OK)
            continue;
        if (ss_feed_discarding(f)) {
            ss_feed_drop_frame(f, frame);
            continue;
        }
        if (ss_feed_frame_take(f, &next, 0) == SS_OK)
            ss_pipeline_prefetch(w->pipe, next);
        ss_result_t *res = ss_out_result(w->work);
        ss_feed_set_busy(f, mono_us());
        set_outputs(w, frame);
        e = ss_pipeline_start(w->pipe, frame, res);
        ss_feed_set_busy(f, 0);
        maybe_solve(w, frame, res, e);
        ss_frame_pool_put(frame);

        /* the previous frame's residual has landed by now (this frame's
         * guided filter waited for it on the device) */
        if (pend && flush_pend(w, &pend, pend_e, &first))
            e = SS_ERR_BROKEN;
        if (e != SS_ERR_BROKEN && res->residual_pending && next) {
            ss_out_t *nb = NULL;
            if (ss_feed_out_take(f, &nb, 0) == SS_OK) {
                pend = w->work;
                pend_e = e;
                w->work = nb;
                fit_detections(w, w->work);
                continue;
            }
        }
        e = complete(w, w->work, e, &first);
        if (e == SS_ERR_BROKEN) {
            go_broken(w, &next);
            broken = 1;
            continue;
        }
        if (publishable(e))
            hand_over(w);
    }
    if (pend && flush_pend(w, &pend, pend_e, &first)) {   /* nothing accepted is lost */
        go_broken(w, &next);
        broken = 1;
    }
    if (!broken)
        ss_stats_set_state(w->stats, "stopped");
    ss_cfg_snap_release(&w->wsnap);
    atomic_store(&slot->done, 1);
    return NULL;
}
