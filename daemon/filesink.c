/*
 * filesink.c — the thread that writes results to files: residual FITS
 * files (sinks.fits.dir), detection and track JSON lines
 * (sinks.jsonl.path, sinks.jsonl.tracks), DS9 region files
 * (sinks.ds9.dir), IOD lines (sinks.iod.path) and ADES PSV rows
 * (sinks.ades.path), for
 * every feed. It runs apart from the publisher so that a slow disk never
 * delays the network, and apart from the workers so that it never delays
 * a pipeline (it may hold SS_FILE_HELD_MAX result buffers; beyond that
 * the worker skips the file sinks for a frame, counted as file_dropped).
 * The sink keys are reloadable: the thread takes a reload's config
 * snapshot (cfgsnap.h) between results; the JSON-lines file is reopened
 * at every reload (SIGHUP after logrotate moved it away starts a new
 * file) and when its path changes.
 */
#include "daemon.h"

#include <string.h>

#define TAG "file-sink"
#define REOPEN_INTERVAL_S 10.0      /* retry a JSON-lines file that would not open */

void *ss_filesink_main(void *arg)
{
    ss_daemon_t *d = arg;
    ss_jsonl_t *jl[SS_MAX_FEEDS] = { 0 };
    double open_failed[SS_MAX_FEEDS];  /* when the last open failed (monotonic s) */
    ss_cfg_snap_t *snap = ss_cfg_board_take(d->board);
    for (int i = 0; i < SS_MAX_FEEDS; i++)
        open_failed[i] = -REOPEN_INTERVAL_S - 1.0;
    for (;;) {
        void *item = NULL;
        ss_err_t e = ss_queue_pop(d->file_q, &item, -1);
        if (e == SS_ERR_STOPPED)
            break;
        if (e != SS_OK)
            continue;
        /* a reload's config, taken between results; every file reopens */
        if (ss_cfg_refresh(d->board, &snap))
            for (int i = 0; i < SS_MAX_FEEDS; i++)
                ss_jsonl_close(&jl[i]);
        ss_out_t *o = item;
        ss_feed_t *f = o->feed;
        const ss_feed_cfg_t *c = &ss_cfg_snap_config(snap)->feeds[f->index];

        if (c->fits_dir[0] && o->res.has_residual) {
            if (ss_sink_fits_write(c->fits_dir, c->fits_compress, &o->res, f->name) == 0)
                SS_SINK_ADD(f->stats, fits_written, 1);
            else
                SS_SINK_ADD(f->stats, fits_errors, 1);
        }
        if (c->ds9_dir[0] && (o->res.dets.count > 0 || o->res.tracks.count > 0)) {
            if (ss_sink_ds9_write(c->ds9_dir, &o->res, f->name) == 0)
                SS_SINK_ADD(f->stats, ds9_written, 1);
            else
                SS_SINK_ADD(f->stats, ds9_errors, 1);
        }
        if (c->iod_path[0] && o->res.dets.count > 0) {
            int lines = ss_sink_iod_append(c->iod_path, &o->res, c->iod_station, c->iod_min_rate);
            if (lines >= 0)
                SS_SINK_ADD(f->stats, iod_written, (uint64_t)lines);
            else
                SS_SINK_ADD(f->stats, iod_errors, 1);
        }
        if (c->ades_path[0] && o->res.tracks.count > 0) {
            int rows = ss_sink_ades_append(c->ades_path, &o->res, c->ades_stn, c->ades_astcat,
                                           c->pipeline.phot.band, c->iod_min_rate);
            if (rows >= 0)
                SS_SINK_ADD(f->stats, ades_written, (uint64_t)rows);
            else
                SS_SINK_ADD(f->stats, ades_errors, 1);
        }
        const char *jpath = c->jsonl_path;
        const int jtracks = c->jsonl_tracks;
        ss_jsonl_t **j = &jl[f->index];
        if (*j && strcmp(ss_jsonl_path(*j), jpath) != 0)
            ss_jsonl_close(j);
        if (jpath[0] && !*j && ss_now_mono() - open_failed[f->index] > REOPEN_INTERVAL_S &&
            !(*j = ss_jsonl_open(jpath)))
            open_failed[f->index] = ss_now_mono();
        if (jpath[0] && (o->res.dets.count > 0 || (jtracks && o->res.tracks.count > 0))) {
            int lines = *j ? ss_jsonl_write(*j, &o->res, jtracks) : -1;
            if (lines >= 0)
                SS_SINK_ADD(f->stats, jsonl_written, (uint64_t)lines);
            else
                SS_SINK_ADD(f->stats, jsonl_errors, 1);
        }
        atomic_fetch_sub(&f->file_held, 1);
        ss_out_release(o);
    }
    for (int i = 0; i < SS_MAX_FEEDS; i++)
        ss_jsonl_close(&jl[i]);
    ss_cfg_snap_release(&snap);
    return NULL;
}
