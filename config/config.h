/*
 * config.h — the daemon's configuration: typed structs, one declarative key
 * table, the JSON loader/validator and the printer.
 *
 * config/ is the only code that sees the cJSON tree of a config file: it
 * parses once, copies each value into the typed structs below and frees the
 * tree. Everything about a key — its JSON path, type, range, default,
 * whether a SIGHUP reload may change it, its one-line doc and where it lives
 * in the struct — is written once, in the key table (config_keys.c). That
 * table drives the defaults, the validation, the loading, the printed
 * default config (`--print-default-config`, which loads back to an
 * identical struct) and the Markdown key reference.
 *
 * JSON layout: daemon-wide keys at the top level ("log_level",
 * "publish.endpoint" = {"publish": {"endpoint": ...}}), and an array
 * "feeds" whose every element is one feed (source, limits, queue, pipeline,
 * sinks). A key that is absent keeps its default; a feed element starts
 * from the feed defaults. An absent "feeds" keeps the default feed list
 * (the one synthetic feed "synth0"); an empty one is an error.
 */
#ifndef SS_CONFIG_H
#define SS_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "pipeline/pipeline_cfg.h"
#include "pipeline/ss_common.h"
#include "tools/synth.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SS_MAX_FEEDS 8              /* feeds one daemon runs */
#define SS_ENDPOINT_MAX 256         /* ZeroMQ endpoint text, with the NUL */
#define SS_MAX_FRAME_PIXELS (1ull << 30) /* limits.max_width x max_height at most (tools/synth.c agrees) */
#define SS_CONFIG_FILE_MAX (1u << 20) /* largest config file accepted (bytes) */
#define SS_CONFIG_DEFAULT_PATH "/etc/skysieve/skysieved.json"

/* ---- enums of the feed and daemon sections ----------------------------- */

typedef enum ss_source_type {
    SS_SOURCE_SYNTH = 0,        /* built-in synthetic star field (tools/synth.h) */
    SS_SOURCE_ZMQ,              /* multipart frames over ZeroMQ (proto/PROTOCOL.md) */
    SS_SOURCE_FITS,             /* FITS files: directory, list or glob */
    SS_SOURCE_INDI              /* an INDI camera's BLOBs, from indiserver (daemon/source_indi.c) */
} ss_source_type_t;

typedef enum ss_zmq_socket { SS_ZMQ_PULL = 0, SS_ZMQ_SUB } ss_zmq_socket_t;

typedef enum ss_zmq_format {
    SS_ZMQ_FORMAT_SKYSIEVE = 0, /* proto/PROTOCOL.md's frame messages */
    SS_ZMQ_FORMAT_ADZMQ         /* EPICS areaDetector's NDPluginZMQ arrays (PROTOCOL.md §11) */
} ss_zmq_format_t;

typedef enum ss_fits_mode {
    SS_FITS_DIRECTORY = 0,      /* watch a directory, take new files once complete */
    SS_FITS_LIST,               /* a text file naming the FITS files, one per line */
    SS_FITS_GLOB                /* the files a glob(3) pattern matches */
} ss_fits_mode_t;

typedef enum ss_fits_after { SS_FITS_KEEP = 0, SS_FITS_MOVE, SS_FITS_DELETE } ss_fits_after_t;

typedef enum ss_queue_policy {
    SS_QUEUE_DROP_OLDEST = 0,   /* a full queue drops its oldest frame (counted) */
    SS_QUEUE_BLOCK              /* a full queue makes the source wait */
} ss_queue_policy_t;

typedef enum ss_log_prefix {
    SS_LOG_PREFIX_AUTO = 0,     /* "<N>" prefixes when stderr goes to journald (JOURNAL_STREAM) */
    SS_LOG_PREFIX_ALWAYS,
    SS_LOG_PREFIX_NEVER
} ss_log_prefix_t;

/* ---- one feed ------------------------------------------------------------ */

typedef struct ss_synth_source_cfg {
    ss_synth_cfg_t gen;             /* "source.synth.*": the generator's settings */
    double rate;                    /* "source.synth.rate": frames/s; 0 = as fast as possible */
    uint64_t count;                 /* "source.synth.count": frames, then the source ends; 0 = endless */
} ss_synth_source_cfg_t;

typedef struct ss_zmq_source_cfg {
    char endpoint[SS_ENDPOINT_MAX]; /* "source.zmq.endpoint" */
    ss_zmq_socket_t socket;         /* "source.zmq.socket": pull|sub */
    int bind;                       /* "source.zmq.bind": 1 bind, 0 connect */
    int rcvhwm;                     /* "source.zmq.rcvhwm": ZMQ_RCVHWM, messages */
    char subscribe[SS_NAME_MAX];    /* "source.zmq.subscribe": SUB prefix ("" = everything) */
    ss_zmq_format_t format;         /* "source.zmq.format": skysieve|adzmq */
} ss_zmq_source_cfg_t;

typedef struct ss_fits_source_cfg {
    ss_fits_mode_t mode;            /* "source.fits.mode" */
    char path[SS_PATH_MAX];         /* "source.fits.path": the watched directory (directory mode) */
    char list[SS_PATH_MAX];         /* "source.fits.list": list file (list mode) */
    char pattern[SS_PATH_MAX];      /* "source.fits.pattern": glob (glob mode) / name filter (directory) */
    double settle;                  /* "source.fits.settle": s of unchanged size = complete */
    int existing;                   /* "source.fits.existing": directory mode also takes files present at start */
    ss_fits_after_t after;          /* "source.fits.after": keep|move|delete */
    char move_dir[SS_PATH_MAX];     /* "source.fits.move_dir" */
    int exit_at_end;                /* "source.fits.exit_at_end" */
} ss_fits_source_cfg_t;

#define SS_INDI_CFG_NAME_MAX 128    /* device and BLOB names, with the NUL (INDI's own limit) */

typedef struct ss_indi_source_cfg {
    char host[SS_ENDPOINT_MAX];     /* "source.indi.host": indiserver's host */
    int port;                       /* "source.indi.port": its TCP port */
    char local[SS_PATH_MAX];        /* "source.indi.local": its local (abstract unix) socket,
                                     * preferred for a local host; "" = TCP only */
    char device[SS_INDI_CFG_NAME_MAX]; /* "source.indi.device": "" = any device */
    char blob[SS_INDI_CFG_NAME_MAX];   /* "source.indi.blob": the BLOB vector, "CCD1" */
    int active;                     /* "source.indi.active": take exposures ourselves */
    double exposure;                /* "source.indi.exposure": s, active mode */
    double retry_max;               /* "source.indi.retry_max": longest reconnect back-off, s */
} ss_indi_source_cfg_t;

typedef struct ss_feed_cfg {
    char name[SS_NAME_MAX];         /* "name": [A-Za-z0-9_-]+, unique; used in topics */
    ss_source_type_t source;        /* "source.type" */
    ss_synth_source_cfg_t synth;
    ss_zmq_source_cfg_t zmq;
    ss_fits_source_cfg_t fits;
    ss_indi_source_cfg_t indi;

    int max_width, max_height;      /* "limits.max_width|max_height": px */
    int max_parts;                  /* "limits.max_parts": parts of a frame message */
    int max_header_bytes;           /* "limits.max_header_bytes": JSON header part */

    int queue_depth;                /* "queue.depth": frames between source and pipeline */
    ss_queue_policy_t queue_policy; /* "queue.policy" */

    ss_pipeline_cfg_t pipeline;     /* "pipeline.*" */

    char fits_dir[SS_PATH_MAX];     /* "sinks.fits.dir": residual FITS files ("" = off) */
    int fits_compress;              /* "sinks.fits.compress": lossless tile compression */
    char jsonl_path[SS_PATH_MAX];   /* "sinks.jsonl.path": detections, one JSON line per frame ("" = off) */
    int jsonl_tracks;               /* "sinks.jsonl.tracks": also a line per frame with track reports */
    char ds9_dir[SS_PATH_MAX];      /* "sinks.ds9.dir": DS9 region files ("" = off) */
    char iod_path[SS_PATH_MAX];     /* "sinks.iod.path": IOD lines appended ("" = off) */
    int iod_station;                /* "sinks.iod.station": the station's 4-digit number */
    double iod_min_rate;            /* "sinks.iod.min_rate": arcsec/s of a reported track */
    char ades_path[SS_PATH_MAX];    /* "sinks.ades.path": ADES PSV rows appended ("" = off) */
    char ades_stn[8];               /* "sinks.ades.stn": MPC observatory code */
    char ades_astcat[16];           /* "sinks.ades.astcat": the WCS's reference catalogue */

    int wcs_solve;                  /* "wcs.solve": plate-solve frames without a WCS */
    double wcs_solve_timeout;       /* "wcs.solve_timeout": s one solve-field run may take */
    double wcs_scale_low;           /* "wcs.solve_scale_low": arcsec/px, 0 = no hint */
    double wcs_scale_high;          /* "wcs.solve_scale_high": arcsec/px, 0 = no hint */
    char wcs_index_dir[SS_PATH_MAX];/* "wcs.solve_index_dir": index files ("" = solve-field's config) */
    char wcs_solver[SS_PATH_MAX];   /* "wcs.solve_program": solve-field's name or path */
} ss_feed_cfg_t;

/* ---- the daemon ---------------------------------------------------------- */

typedef struct ss_config {
    int log_level;                  /* "log_level": an ss_log_level_t value */
    ss_log_prefix_t log_prefix;     /* "log_prefix" */
    char control_endpoint[SS_ENDPOINT_MAX]; /* "control.endpoint": REP socket ("" = none) */
    char publish_endpoint[SS_ENDPOINT_MAX]; /* "publish.endpoint": PUB socket ("" = none) */
    uint64_t publish_budget;        /* "publish.byte_budget": bytes queued per subscriber */
    int publish_max_subs;           /* "publish.max_subscriptions": distinct topics held */
    int publish_max_subs_peer;      /* "publish.max_subscriptions_per_peer" */
    double publish_ban_s;           /* "publish.ban_s": s a flooding peer stays refused */
    int publish_residuals;          /* "publish.residuals" */
    int publish_mask;               /* "publish.residual_mask" */
    int publish_on_demand;          /* "publish.residual_on_demand" */
    int publish_f16;                /* "publish.residual16" */
    int publish_every;              /* "publish.every": k of the _every topics (0 = off) */
    int stamps_enabled;             /* "publish.stamps.enabled" */
    int stamps_size;                /* "publish.stamps.size", px */
    int stamps_streak_max;          /* "publish.stamps.streak_max", px */
    int stamps_max;                 /* "publish.stamps.max" per frame */
    double status_interval;         /* "status_interval": s between STATUS= / status messages */
    double peer_timeout;            /* "peer_timeout": s of heartbeat silence that drops a peer */
    char curve_key[SS_PATH_MAX];    /* "security.curve_key": the daemon's secret key file ("" = off) */
    char client_keys[SS_PATH_MAX];  /* "security.client_keys": admitted public keys (a directory) */
    double watchdog_stall;          /* "watchdog.stall_timeout": s one frame may take */
    double drain_timeout;           /* "shutdown.drain_timeout": s to drain at SIGTERM */
    int n_feeds;                    /* elements of "feeds" */
    ss_feed_cfg_t feeds[SS_MAX_FEEDS];
} ss_config_t;

/* ---- the key table (read-only introspection) ------------------------------ */

typedef enum ss_key_scope {
    SS_SCOPE_DAEMON = 0,            /* offset into ss_config_t, path from the top level */
    SS_SCOPE_FEED                   /* offset into ss_feed_cfg_t, path within a "feeds" element */
} ss_key_scope_t;

typedef enum ss_key_type {
    SS_KEY_BOOL = 0,                /* JSON true/false -> int 0/1 */
    SS_KEY_INT,                     /* JSON integer -> int */
    SS_KEY_U64,                     /* JSON integer (< 2^53) -> uint64_t */
    SS_KEY_DOUBLE,                  /* JSON number -> double */
    SS_KEY_STRING,                  /* JSON string -> char[size] */
    SS_KEY_ENUM,                    /* JSON string, one of names -> int-sized enum */
    SS_KEY_INT4                     /* JSON array of 4 integers -> 4 consecutive ints (roi) */
} ss_key_type_t;

typedef struct ss_enum_name {
    const char *name;
    int value;
} ss_enum_name_t;

typedef struct ss_config_key {
    const char *path;               /* "pipeline.registration.levels" */
    ss_key_scope_t scope;
    ss_key_type_t type;
    size_t offset;                  /* into ss_config_t or ss_feed_cfg_t */
    size_t size;                    /* SS_KEY_STRING: capacity with the NUL */
    double min, max;                /* numbers: inclusive range (INT4: of each element) */
    double def;                     /* BOOL/INT/U64/DOUBLE/INT4 (every element) default */
    const char *def_str;            /* STRING/ENUM default */
    const ss_enum_name_t *names;    /* ENUM: terminated by a NULL name */
    int reloadable;                 /* 1: a SIGHUP reload may change it */
    const char *doc;                /* one line */
    int nullable;                   /* DOUBLE: JSON null is accepted and stored as NAN
                                     * ("not set"); the default may be NAN */
} ss_config_key_t;

/* The table of one scope, in printing order; *n receives its length. */
const ss_config_key_t *ss_config_keys(ss_key_scope_t scope, size_t *n);

/* ---- defaults --------------------------------------------------------------- */

/* Every key at its default, one feed ("synth0", the built-in synthetic
 * field), unused feed slots and all padding zeroed (so that two configs
 * with equal values compare equal byte for byte). */
void ss_config_defaults(ss_config_t *c);
/* One feed at the feed defaults (name "synth0"). */
void ss_feed_defaults(ss_feed_cfg_t *f);
/* The pipeline section at its defaults (used by the tests of other
 * modules and the tools). */
void ss_pipeline_cfg_defaults(ss_pipeline_cfg_t *p);

/* ---- loading and validation --------------------------------------------------- */

/* Load a config file: defaults, then the file's keys, then ss_config_validate.
 * On failure returns SS_ERR_IO (missing/unreadable/too large) or
 * SS_ERR_CONFIG (invalid JSON, unknown key, wrong type, out of range, a
 * failed cross-key check), writes one line to err (n bytes) that starts
 * with the file name and names the full key path, e.g.
 *   "/etc/skysieve/skysieved.json: feeds[0].pipeline.registration.levels: 9 is out of range [0, 5]"
 * and leaves *c in an unspecified state (load into a scratch struct when
 * the old config must survive, as a reload does). err may be NULL. */
ss_err_t ss_config_load_file(const char *path, ss_config_t *c, char *err, size_t n);

/* The same from a buffer of len bytes (need not be NUL-terminated);
 * messages start with the key path (or "invalid JSON at line L, column C"). */
ss_err_t ss_config_load_string(const char *json, size_t len, ss_config_t *c, char *err,
                               size_t n);

/* Range/enum/length checks of every key plus the cross-key checks (at least
 * one feed, unique valid names, thresh_low <= thresh, roi, history, source
 * settings complete, distinct bound endpoints, ...). For configs built in
 * code; the loaders call it. Returns SS_OK or SS_ERR_CONFIG with err set. */
ss_err_t ss_config_validate(const ss_config_t *c, char *err, size_t n);

/* The paths the config names, checked on this machine (what validation
 * cannot know): sinks.fits.dir and source.fits.move_dir (when moving) an
 * existing, writable directory; the directory of sinks.jsonl.path existing
 * and writable, and the file writable if it exists; source.fits.path (a
 * directory source) an existing, readable directory; source.fits.list (a
 * list source) a readable file. The first failure goes to err, naming the
 * key and the reason ("feeds[0].sinks.fits.dir: /x: No such file or
 * directory"). --check-config, start-up and every reload call it. */
ss_err_t ss_config_check_paths(const ss_config_t *c, char *err, size_t n);

/* ss_config_load_file, then ss_config_check_paths (its message prefixed
 * with the file's path): what start-up, --check-config and a reload do. */
ss_err_t ss_config_load_checked(const char *path, ss_config_t *c, char *err, size_t n);

/* The control endpoint the daemon binds for the configured one: the same,
 * except an ipc:// endpoint whose directory is missing or not writable
 * (/run/skysieve outside systemd), which moves to
 * ipc://$XDG_RUNTIME_DIR/skysieve-control (or /tmp). Returns 1 when it
 * moved (the reason in why, may be NULL), 0 when not; out gets the
 * endpoint. skysieved binds it, skysieve-ctl connects to it. */
int ss_config_control_endpoint(const char *configured, char *out, size_t n, char *why,
                               size_t why_n);

/* ---- printing, comparing, reloading ------------------------------------------- */

/* The config as JSON text: every key, 2-space indent, a trailing newline;
 * ss_config_load_string of it gives back an identical struct. Malloc'ed,
 * the caller frees; NULL on allocation failure. */
char *ss_config_to_json(const ss_config_t *c);

/* 1 when every key has the same value in a and b (padding ignored). */
int ss_config_equal(const ss_config_t *a, const ss_config_t *b);

/* Number of keys not marked reloadable whose values differ between old and
 * neu (feeds are compared by index; a different number of feeds counts as
 * one change named "feeds", a renamed feed as "feeds[i].name"). The full
 * path of the first ("publish.endpoint", "feeds[1].source.zmq.endpoint")
 * goes to which (n bytes; may be NULL; "" when none). 0: the change may be
 * reloaded. */
int ss_config_diff_nonreloadable(const ss_config_t *old, const ss_config_t *neu, char *which,
                                 size_t n);

/* Copy every reloadable key from neu into cur, leaving the others as they
 * are (a reload that also changed a non-reloadable key keeps the running
 * value of that key). Feeds are matched by index; feeds beyond
 * cur->n_feeds are ignored. */
void ss_config_apply_reloadable(ss_config_t *cur, const ss_config_t *neu);

/* The key reference as Markdown (a section for the daemon keys and one for
 * the feed keys: key, type, default, range or values, reloadable, doc).
 * Malloc'ed, the caller frees; NULL on allocation failure. */
char *ss_config_doc_markdown(void);

/* ---- derived values ------------------------------------------------------- */

/* Largest pixel part of a frame message: max_width·max_height·4 bytes
 * (the widest dtype). ZMQ_MAXMSGSIZE (a per-part limit) is the larger of
 * this and max_header_bytes. */
size_t ss_feed_max_pixel_bytes(const ss_feed_cfg_t *f);
/* Cap on the total bytes of one frame message: header + pixels + a one
 * byte per pixel valid mask (the parts besides these are small). */
size_t ss_feed_max_message_bytes(const ss_feed_cfg_t *f);
/* The pipeline config feed i of c runs with: its keys, and device_feeds,
 * the feeds of c that may run on its CUDA device (backend cuda or auto,
 * the same device), itself included. */
ss_pipeline_cfg_t ss_feed_pipeline_cfg(const ss_config_t *c, int i);
/* The synthetic generator settings with derived values resolved:
 * frame_interval 0 becomes 1/rate (1 s when rate is 0). */
void ss_feed_synth_cfg(const ss_feed_cfg_t *f, ss_synth_cfg_t *out);

/* The generator settings of the built-in default config's synthetic feed
 * (ss_config_defaults, then ss_feed_synth_cfg): skysieve-synth's defaults.
 * Returns 0, or -1 when out of memory. */
int ss_feed_synth_defaults(ss_synth_cfg_t *out);
/* SNDHWM for the PUB socket from a byte budget and the size of the largest
 * message (typically a residual: header + w·h·4 + w·h mask bytes):
 * budget / msg_bytes, at least SS_PUBLISH_MIN_HWM, at most INT_MAX. */
#define SS_PUBLISH_MIN_HWM 4
int ss_publish_sndhwm(uint64_t byte_budget, size_t msg_bytes);

/* Enum names for logs and status ("synth", "drop_oldest", ...); "?" if unknown. */
const char *ss_source_type_name(ss_source_type_t t);
const char *ss_queue_policy_name(ss_queue_policy_t p);

#ifdef __cplusplus
}
#endif
#endif
