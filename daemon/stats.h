/*
 * stats.h — every counter the daemon keeps, per feed.
 *
 * The counters are those of the status message (proto.h's
 * ss_proto_feed_stats_t, documented in README.md, "Counters") plus the sink
 * counters below, which only the log and the exit summary report. Each
 * feed's block is written by its source thread (received, accepted,
 * rejected), its worker (processed, statuses, timings, queue) and the
 * publisher/sink threads (published, drops), and read by the main thread
 * (status, control, STATUS=): one mutex per feed, held for a few
 * assignments only.
 *
 * Accounting (what a test checks after SIGTERM):
 *   received = accepted + rejected
 *   accepted = processed + dropped_queue + queued/in flight (0 after drain)
 * Series messages (series_start/_end) are control messages of the
 * source and are not counted as received frames.
 */
#ifndef SS_STATS_H
#define SS_STATS_H

#include "pipeline/pipeline.h"
#include "proto/proto.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Counters of the result sinks (not in the status message). */
typedef struct ss_sink_counters {
    uint64_t sink_dropped;      /* processed frames whose results no sink saw (no result buffer came free within SS_SINK_WAIT_S) */
    uint64_t file_dropped;      /* processed frames the file sinks skipped (the disk was behind) */
    uint64_t fits_written;      /* residual FITS files written */
    uint64_t fits_errors;       /* residual FITS files that failed */
    uint64_t jsonl_written;     /* detection lines appended */
    uint64_t jsonl_errors;      /* frames whose lines failed (or the file would not open) */
    uint64_t ds9_written;       /* DS9 region files written */
    uint64_t ds9_errors;        /* DS9 region files that failed */
    uint64_t iod_written;       /* IOD lines appended */
    uint64_t iod_errors;        /* frames whose IOD lines failed */
    uint64_t ades_written;      /* ADES PSV rows appended */
    uint64_t ades_errors;       /* frames whose ADES rows failed */
    uint64_t solve_started;     /* plate solves run (wcs.solve) */
    uint64_t solve_ok;          /* ... that gave a solution */
    uint64_t solve_failed;      /* ... that found none, or could not run */
    uint64_t solve_timeouts;    /* ... killed at wcs.solve_timeout */
    uint64_t source_errors;     /* FITS source: files that could not be moved/deleted, socket errors */
    uint64_t series;            /* series_start/series_end messages received */
    uint64_t peer_disconnects;  /* ZeroMQ source: peers that went (a part over the size limit
                                 * ends a connection this way too) */
    uint64_t connections_refused; /* ZeroMQ source: connections closed at once, the open
                                   * files being near their limit */
    uint64_t indi_connects;     /* INDI source: connections made to indiserver (the first and
                                 * each reconnection) */
    uint64_t indi_connect_failures; /* INDI source: connection attempts that failed */
    uint64_t indi_disconnects;  /* INDI source: connections lost (closed by the server, an
                                 * error, a malformed stream) */
    uint64_t indi_malformed;    /* INDI source: connections closed for a malformed stream */
} ss_sink_counters_t;

typedef struct ss_feed_stats ss_feed_stats_t;

/* A zeroed block for feed `name`; source describes the source for status
 * ("zmq pull bind tcp://...", "fits /data", "synth"). NULL on failure. */
ss_feed_stats_t *ss_feed_stats_new(const char *name, const char *source);
void ss_feed_stats_destroy(ss_feed_stats_t **st);

/* ---- source thread ---- */
void ss_stats_received(ss_feed_stats_t *st);
void ss_stats_accepted(ss_feed_stats_t *st);
void ss_stats_rejected(ss_feed_stats_t *st, ss_proto_reason_t why);
/* Accepted frames the queue dropped (drop_oldest, or left at shutdown). */
void ss_stats_dropped(ss_feed_stats_t *st, uint64_t n);

/* ---- worker thread ---- */
/* One frame through ss_pipeline_process: its result (status, timings,
 * seq, time), the pipeline's own counters (detections, registration
 * failures, resets), the device memory, the queue depth after the pop. */
void ss_stats_processed(ss_feed_stats_t *st, const ss_result_t *res,
                        const ss_pipeline_stats_t *ps, size_t mem_used, size_t mem_total,
                        int queue_depth, int queue_capacity);
void ss_stats_set_queue(ss_feed_stats_t *st, int depth, int capacity);
void ss_stats_set_state(ss_feed_stats_t *st, const char *state);
void ss_stats_set_backend(ss_feed_stats_t *st, const char *backend);

/* ---- publisher / sinks ---- */
void ss_stats_published(ss_feed_stats_t *st, uint64_t messages);
void ss_stats_pub_dropped(ss_feed_stats_t *st, uint64_t messages);
/* Add to one of the ss_sink_counters_t fields, named by its offset
 * (offsetof(ss_sink_counters_t, fits_written)). */
void ss_stats_sink_add(ss_feed_stats_t *st, size_t field_offset, uint64_t n);
#define SS_SINK_ADD(st, field, n) ss_stats_sink_add((st), offsetof(ss_sink_counters_t, field), (n))

/* ---- readers ---- */
/* Recompute frames/s over the time since the previous tick (main thread,
 * every status interval). */
void ss_stats_tick(ss_feed_stats_t *st, double now_mono);
/* Copy out a consistent snapshot (either pointer may be NULL). */
void ss_stats_snapshot(ss_feed_stats_t *st, ss_proto_feed_stats_t *out,
                       ss_sink_counters_t *sinks);

#ifdef __cplusplus
}
#endif
#endif
