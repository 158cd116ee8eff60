/*
 * source.h — a feed's source of frames: one const ops table per source
 * type (source_synth.c, source_zmq.c, source_fits.c, source_indi.c), chosen from the
 * registry in source.c by the config's source type name, the way
 * pipeline/backend_select.c chooses a backend.
 *
 * source.c owns the common part: the ss_source_t (its body private
 * there), one thread per source, stop and join. A type's ops see only
 * their own state (what .open returned) and the accessors below. What
 * the daemon must know of a type before it opens (its frames' size, mask
 * buffers) it asks the ops (ss_source_frame_needs): no file but the type's
 * own reads its config section or includes its internals.
 */
#ifndef SS_SOURCE_H
#define SS_SOURCE_H

#include <stdatomic.h>
#include <stddef.h>

#include "config/config.h"
#include "pipeline/frame.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ss_feed ss_feed_t;
typedef struct ss_source ss_source_t;

#define SS_SOURCE_DESC_MAX (SS_PATH_MAX + 96)   /* "zmq pull bind ipc://...", ... */

/* What the daemon lends a source (ss_source_open copies it): besides its
 * feed's hand-over (feed.h), the only way a source reaches the daemon. */
typedef struct ss_source_env {
    void *zctx;                     /* the daemon's ZeroMQ context */
    double peer_timeout;            /* config "peer_timeout", s: the frame sockets' heartbeats */
    /* Make sock a CURVE server when the daemon has CURVE on (before it
     * binds; what names it in err): 0, or -1 with err set. */
    int (*secure)(void *user, void *sock, const char *what, char *err, size_t n);
    /* The input ended: the source's thread body returned (asked to stop,
     * input exhausted or failed). stop_why non-NULL: the source asks the
     * daemon to stop (drain, exit 0) for that reason. Called once, on the
     * source's thread. */
    void (*ended)(void *user, const char *stop_why);
    void *user;                     /* the callbacks' first argument */
} ss_source_env_t;

typedef struct ss_source_ops {
    const char *name;   /* the config's source type name (ss_source_type_name) */
    /* Open the source of s's feed in the calling thread (bind or connect
     * sockets, open directories, read lists): the type's state, or NULL
     * with err set. desc receives what status shows of the source. */
    void *(*open)(ss_source_t *s, char *desc, size_t desc_n, char *err, size_t n);
    /* The thread body: produce frames until the source is asked to stop
     * (ss_source_stop_flag) or its input ends. Returns NULL, or, when the
     * input ended and the config asks for it, why the daemon should stop
     * (a static string). */
    const char *(*run)(void *impl);
    /* Free what open made (the thread is already joined); NULL accepted;
     * *impl is nulled. */
    void (*close)(void **impl);
    /* Optional (NULL: none): a frame of this source was processed (any
     * status), on the worker's thread. Frames dropped before processing
     * never reach it (the FITS source moves or deletes files here). */
    void (*frame_done)(void *impl, const ss_frame_meta_t *m);
    /* Optional (NULL: the feed's limits, limits.max_width x max_height of
     * the widest type): the pixels of the largest frame this type delivers
     * under feed config c, and their bytes; what the feed's frame pool and
     * result buffers are sized for. */
    void (*frame_size)(const ss_feed_cfg_t *c, size_t *pixels, size_t *bytes);
    int masks;          /* frames may come with a mask: each pool frame gets a mask buffer */
} ss_source_ops_t;

extern const ss_source_ops_t ss_source_synth_ops;
extern const ss_source_ops_t ss_source_zmq_ops;
extern const ss_source_ops_t ss_source_fits_ops;
extern const ss_source_ops_t ss_source_indi_ops;

/* The registry: the ops of the source type called name, NULL if none. */
const ss_source_ops_t *ss_source_ops_find(const char *name);
/* What a feed of config c needs for its source type's frames, before the
 * source opens: the pixels and bytes of its largest frame (ops->frame_size,
 * else the limits) and whether they need mask buffers (ops->masks). */
void ss_source_frame_needs(const ss_feed_cfg_t *c, size_t *pixels, size_t *bytes, int *masks);

/* Open the feed's source (ops from its config's source type) in the
 * calling thread, with what the daemon lends it (env). NULL with err set
 * on failure. */
ss_source_t *ss_source_open(ss_feed_t *f, const ss_source_env_t *env, char *err, size_t n);
/* Start the source's thread. */
ss_err_t ss_source_start(ss_source_t *s);
/* Ask to stop and join the thread (NULL accepted). */
void ss_source_stop(ss_source_t *s);
/* Stop, close the type's state and free; NULL accepted; *s is nulled. */
void ss_source_destroy(ss_source_t **s);

/* Worker: the feed's frame m was processed (ops->frame_done, if any). */
void ss_source_frame_done(ss_source_t *s, const ss_frame_meta_t *m);

/* For the types' ops: the feed the source fills, what the daemon lends
 * it, the flag set when it is asked to stop (for ss_feed_frame_get and
 * the run loops), and its status description (each valid as long as s). */
ss_feed_t *ss_source_feed(const ss_source_t *s);
const ss_source_env_t *ss_source_env(const ss_source_t *s);
const atomic_int *ss_source_stop_flag(const ss_source_t *s);
const char *ss_source_desc(const ss_source_t *s);

struct ss_fits_image;
/* Read an opened FITS image (a file's, or a BLOB's in memory: what names it
 * in messages) into a frame of f's pool, held to the feed's limits; *im is
 * closed and nulled. Returns the frame, meta.feed set, meta.seq the
 * arrival number (*arrivals, counted up) when the image has no SEQ,
 * recv_mono now: the caller counts it accepted and submits it. Or NULL,
 * the rejection counted and logged, *code 1 when the image could not be
 * read, 2 when it is refused for good (limits, shutting down)
 * (source_fits.c). */
ss_frame_t *ss_source_fits_frame(ss_feed_t *f, struct ss_fits_image **im, const char *what,
                                 const atomic_int *stop, uint64_t *arrivals, int *code);

/* The order key of a FITS file: DATE-OBS (+TIME-OBS) as MJD, NAN if
 * absent or unreadable (source_fits.c). */
double ss_fits_date_obs_mjd(const char *path);

#ifdef __cplusplus
}
#endif
#endif
