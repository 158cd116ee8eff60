/*
 * daemon.h — the daemon: skysieved's shared state and its threads
 * (ARCHITECTURE.md "Threads"). A feed (its pool, queue, pipeline, result
 * buffers and hand-over points) is feed.h's, a source's interface
 * source.h's, a feed's plate solver solver.h's:
 *
 *   source thread (per feed) --frames queue--> worker (per feed)
 *   worker --pub queue--> publisher (one; owns the PUB socket)
 *   worker --file queue--> file sink (one; FITS residuals, JSON lines)
 *   main thread: signals (signalfd), control REP socket, sd_notify, timers,
 *                reloads, shutdown.
 *
 * Frames come from a per-feed pool (the backend's host allocator: pinned
 * memory for CUDA) sized at start from the feed's limits; results live in
 * a per-feed set of ss_out_t buffers that circulate worker -> sinks ->
 * free list. Nothing is allocated per frame.
 *
 * The running config is the main thread's; the other threads read
 * immutable snapshots of it, taken at their frame boundaries (cfgsnap.h).
 *
 * The library skysieve_daemon_lib holds all of it but main(): tests link
 * it for the unit-level checks and exec the skysieved binary for the rest.
 */
#ifndef SS_DAEMON_H
#define SS_DAEMON_H

#include <pthread.h>
#include <stdio.h>
#include <stdatomic.h>

#include "config/config.h"
#include "pipeline/pipeline.h"
#include "pipeline/solve.h"
#include "cfgsnap.h"
#include "feed.h"
#include "peers.h"
#include "queue.h"
#include "source.h"
#include "stats.h"
#include "subguard.h"
#include "zap.h"
#include "proto/curve.h"

#ifdef __cplusplus
extern "C" {
#endif

#ifndef SKYSIEVE_VERSION
#define SKYSIEVE_VERSION "0.0.0"
#endif

#define SS_EXIT_LOST 3              /* stopped, but some accepted frames' results were lost */
#define SS_SINK_WAIT_S 1.0          /* the longest a worker waits for the publisher to free a buffer */
#define SS_PUB_LINGER_MS 2000       /* what a closing PUB socket may still flush */

typedef struct ss_daemon ss_daemon_t;

/* With CURVE on (d->zap), sock becomes a CURVE server with the daemon's
 * key (before it binds); nothing otherwise. Returns 0, or -1 with err. */
int ss_daemon_secure(const ss_daemon_t *d, void *sock, const char *what, char *err, size_t n);

/* A feed's worker thread (worker.c), as the daemon runs it. */
typedef struct ss_worker_slot {
    ss_daemon_t *d;
    ss_feed_t *feed;
    pthread_t thread;
    int started;
    atomic_int done;                /* the worker returned */
} ss_worker_slot_t;

struct ss_daemon {
    ss_config_t cfg;                /* the running config: the main thread's alone */
    ss_cfg_board_t *board;          /* its snapshots, for the other threads (cfgsnap.h) */
    char config_path[SS_PATH_MAX];  /* "" = built-in default config */
    int log_level_override;         /* --log-level (kept across reloads); -1 = none */

    void *zctx;

    ss_zap_t *zap;                  /* the ZAP handler (CURVE on, or publishing), else NULL */

    ss_curve_key_t curve;           /* the daemon's key pair (CURVE on) */
    void *pub_sock;                 /* owned by the publisher thread once it runs */
    ss_subguard_t *pub_guard;       /* its subscription caps (the publisher thread's) */
    ss_subguard_counts_t pub_counts; /* the guard's counts, kept when the publisher ends */
    atomic_uint out_wanted[SS_MAX_FEEDS]; /* per feed: the residual forms subscribed
                                     * (SS_WANT_* of outsubs.h), set by the publisher */
    void *ctl_sock;                 /* main thread */
    int pub_hwm;

    int n_feeds;
    ss_feed_t *feeds[SS_MAX_FEEDS];   /* feed.h */
    ss_worker_slot_t workers[SS_MAX_FEEDS];     /* workers[i] runs feeds[i] */

    ss_queue_t *pub_q;              /* ss_out_t* to the publisher */
    ss_queue_t *file_q;             /* ss_out_t* to the file sink */
    pthread_t publisher, filesink;
    int publisher_started, filesink_started;

    int wake_fd;                    /* eventfd: other threads wake the main loop */
    atomic_int stop_req;            /* a thread asked the daemon to stop */
    atomic_int draining;            /* shutdown has begun: every result must reach the sinks */
    atomic_int exit_code;
    double start_mono, start_unix;
};

/* ---- daemon.c --------------------------------------------------------- */

/* Build everything a config describes (pools, queues, pipelines, sockets
 * bound, sources opened) without starting threads. config_path "" marks
 * the built-in default config (reload then has no file to read). Returns
 * NULL with a reason logged on failure. */
ss_daemon_t *ss_daemon_new(const ss_config_t *cfg, const char *config_path);
/* Start the threads, notify READY=1, serve until SIGTERM/SIGINT, a
 * source's exit_at_end or a broken backend; drain, flush, stop. Returns
 * the process exit status (0, or 1 after a broken backend). The calling
 * thread must have SIGTERM, SIGINT and SIGHUP blocked (ss_daemon_block_signals
 * before any thread, ZeroMQ's included, is created). */
int ss_daemon_run(ss_daemon_t *d);
void ss_daemon_destroy(ss_daemon_t **d);

/* Block the signals the main loop reads through a signalfd, and ignore
 * SIGPIPE. Call first thing in main(). */
void ss_daemon_block_signals(void);

/* Any thread: ask the main loop to stop (exit_code 0: drain and exit 0;
 * nonzero: a broken backend). */
void ss_daemon_request_stop(ss_daemon_t *d, int exit_code, const char *why);

/* ---- source.c, source_*.c: see source.h ------------------------------- */

/* ---- worker.c, publisher.c, sinks ------------------------------------- */

void *ss_worker_main(void *slot);           /* pthread body, one per feed (ss_worker_slot_t) */
void *ss_publisher_main(void *daemon);      /* pthread body */
void *ss_filesink_main(void *daemon);       /* pthread body */

/* Fill a status snapshot of every feed (main thread / publisher). */
void ss_daemon_status(ss_daemon_t *d, ss_proto_status_t *st);

/* sink_fits.c: write one residual; 0 or -1 (logged). */
int ss_sink_fits_write(const char *dir, int compress, const ss_result_t *res, const char *feed);
/* Link the finished file tmp into dir under res's name (ss_residual_file_name
 * with ext; the next "-k" when taken, never over a file) and remove tmp;
 * 0, or -1 (logged with tag). */
int ss_sink_place(const char *tmp, const char *dir, const char *feed, const ss_result_t *res,
                  const char *ext, const char *tag);
/* sink_ds9.c: res's detections and track reports as a DS9 region file
 * (version 4.1, image coordinates) on fp; 0, or -1 on a write error. */
int ss_ds9_regions(FILE *fp, const ss_result_t *res);
/* One region file for res in dir (<feed>-<seq>-<time>.reg); 0 or -1 (logged). */
int ss_sink_ds9_write(const char *dir, const ss_result_t *res, const char *feed);
/* sink_iod.c: one IOD line (80-column satellite observation format) for a
 * position at mjd (UTC) into out; snprintf's count. */
int ss_iod_line(char *out, size_t n, int station, double mjd, double ra, double dec,
                double pos_sigma_deg);
/* res's streaks and detections of tracks of at least min_rate arcsec/s as
 * IOD lines on fp (none without a WCS or time); the lines, or -1. */
int ss_iod_write(FILE *fp, const ss_result_t *res, int station, double min_rate);
/* The same appended to path; the lines, or -1 (logged). */
int ss_sink_iod_append(const char *path, const ss_result_t *res, int station, double min_rate);
/* sink_ades.c: the ADES PSV header and column row for station stn. */
void ss_ades_header(FILE *fp, const char *stn);
/* res's detections of tracks slower than max_rate arcsec/s as ADES PSV
 * rows (none without a WCS or time), with mag, rmsMag, band and photCat
 * (= astcat) where the detection has a magnitude; the rows, or -1. */
int ss_ades_rows(FILE *fp, const ss_result_t *res, const char *stn, const char *astcat,
                 const char *band, double max_rate);
/* The rows appended to path (the header first into an empty file); the
 * rows, or -1 (logged). */
int ss_sink_ades_append(const char *path, const ss_result_t *res, const char *stn,
                        const char *astcat, const char *band, double max_rate);
/* sink_jsonl.c: an appending writer of one JSON line per frame. */
typedef struct ss_jsonl ss_jsonl_t;
ss_jsonl_t *ss_jsonl_open(const char *path);
void ss_jsonl_close(ss_jsonl_t **j);
const char *ss_jsonl_path(const ss_jsonl_t *j);
/* Append one line per detection of res and, when tracks is set and res
 * has track reports, one line with its tracks message body; returns the
 * lines written, or -1 (logged). */
int ss_jsonl_write(ss_jsonl_t *j, const ss_result_t *res, int tracks);

/* control.c: answer one request (main thread). buf receives the response
 * JSON (n bytes); returns its length. */
int ss_control_handle(ss_daemon_t *d, const void *req, size_t len, char *buf, size_t n);

/* reload (daemon.c, main thread): read the config file again and apply
 * the reloadable keys, between RELOADING=1 and READY=1; `by` says who
 * asked ("SIGHUP", "control"). Returns 0, or -1 with the reason in err
 * (logged; the old config stays in force, whole: a file that changes a
 * key not marked reloadable is rejected, naming the key). */
int ss_daemon_reload(ss_daemon_t *d, const char *by, char *err, size_t n);

/* Whether log lines get "<N>" priority prefixes: ALWAYS, NEVER, or for
 * AUTO when stderr is the journal (JOURNAL_STREAM names stderr's
 * device:inode, as systemd sets it). */
int ss_log_prefix_wanted(ss_log_prefix_t p);

#ifdef __cplusplus
}
#endif
#endif
