/*
 * config_keys.c — THE key table of the skysieved configuration.
 *
 * One row per key: JSON path, type, where it lives in the struct, range,
 * default, whether a SIGHUP reload may change it, and its one-line doc.
 * Defaults, validation, loading, the printed default config and the
 * Markdown key reference (config.c) are all driven from these rows, so a
 * key is added, re-ranged or re-documented here and nowhere else.
 *
 * Rules the code relies on (checked by tests/check_config.c):
 *   - rows that share a path prefix ("pipeline.registration.") are
 *     contiguous: the printer emits one JSON object per prefix, in row order;
 *   - no path is both a key and the prefix of another key;
 *   - every default lies in its range.
 *
 * Reload rules: pipeline keys are all reloadable (ss_pipeline_reconfigure
 * rebuilds the backend, with a history reset, where geometry or device
 * depend on them); sinks are reopened on reload (so a SIGHUP after log
 * rotation reopens the JSON-lines file); sockets, sources, limits and queue
 * sizes are fixed at start.
 */
#include <math.h>
#include <stddef.h>

#include "config.h"
#include "pipeline/stages.h"

/* Integers beyond this are not exact in a JSON (double) number. */
#define U64_JSON_MAX 9007199254740992.0     /* 2^53 */
#define MIB 1048576.0
#define MAX_SIDE 65536.0                    /* px, the largest frame side accepted */

_Static_assert(sizeof(ss_backend_kind_t) == sizeof(int), "enum keys are stored as int");
_Static_assert(sizeof(ss_whiten_mode_t) == sizeof(int), "enum keys are stored as int");
_Static_assert(sizeof(ss_overscan_mode_t) == sizeof(int), "enum keys are stored as int");
_Static_assert(sizeof(ss_dtype_t) == sizeof(int), "enum keys are stored as int");
_Static_assert(sizeof(ss_synth_psf_t) == sizeof(int), "enum keys are stored as int");
_Static_assert(sizeof(ss_source_type_t) == sizeof(int), "enum keys are stored as int");
_Static_assert(sizeof(ss_queue_policy_t) == sizeof(int), "enum keys are stored as int");
_Static_assert(offsetof(ss_pipeline_cfg_t, roi_h) == offsetof(ss_pipeline_cfg_t, roi_x) + 3 * sizeof(int),
               "roi is read and written as 4 consecutive ints");

/* ---- enum names ---------------------------------------------------------- */

static const ss_enum_name_t log_level_names[] = {
    { "err", SS_LOG_ERR }, { "warning", SS_LOG_WARNING }, { "notice", SS_LOG_NOTICE },
    { "info", SS_LOG_INFO }, { "debug", SS_LOG_DEBUG }, { NULL, 0 }
};
static const ss_enum_name_t log_prefix_names[] = {
    { "auto", SS_LOG_PREFIX_AUTO }, { "always", SS_LOG_PREFIX_ALWAYS },
    { "never", SS_LOG_PREFIX_NEVER }, { NULL, 0 }
};
static const ss_enum_name_t source_names[] = {
    { "synth", SS_SOURCE_SYNTH }, { "zmq", SS_SOURCE_ZMQ }, { "fits", SS_SOURCE_FITS },
    { "indi", SS_SOURCE_INDI }, { NULL, 0 }
};
static const ss_enum_name_t dtype_names[] = {
    { "u8", SS_DT_U8 }, { "u16", SS_DT_U16 }, { "i16", SS_DT_I16 },
    { "i32", SS_DT_I32 }, { "f32", SS_DT_F32 }, { NULL, 0 }
};
static const ss_enum_name_t psf_names[] = {
    { "gauss", SS_SYNTH_GAUSS }, { "moffat", SS_SYNTH_MOFFAT }, { NULL, 0 }
};
static const ss_enum_name_t zmq_socket_names[] = {
    { "pull", SS_ZMQ_PULL }, { "sub", SS_ZMQ_SUB }, { NULL, 0 }
};
static const ss_enum_name_t zmq_format_names[] = {
    { "skysieve", SS_ZMQ_FORMAT_SKYSIEVE }, { "adzmq", SS_ZMQ_FORMAT_ADZMQ }, { NULL, 0 }
};
static const ss_enum_name_t fits_mode_names[] = {
    { "directory", SS_FITS_DIRECTORY }, { "list", SS_FITS_LIST }, { "glob", SS_FITS_GLOB }, { NULL, 0 }
};
static const ss_enum_name_t fits_after_names[] = {
    { "keep", SS_FITS_KEEP }, { "move", SS_FITS_MOVE }, { "delete", SS_FITS_DELETE }, { NULL, 0 }
};
static const ss_enum_name_t queue_policy_names[] = {
    { "drop_oldest", SS_QUEUE_DROP_OLDEST }, { "block", SS_QUEUE_BLOCK }, { NULL, 0 }
};
static const ss_enum_name_t backend_names[] = {
    { "auto", SS_BACKEND_AUTO }, { "cpu", SS_BACKEND_CPU }, { "cuda", SS_BACKEND_CUDA }, { NULL, 0 }
};
static const ss_enum_name_t overscan_names[] = {
    { "none", SS_OVERSCAN_NONE }, { "scalar", SS_OVERSCAN_SCALAR }, { "row", SS_OVERSCAN_ROW },
    { NULL, 0 }
};
static const ss_enum_name_t whiten_mode_names[] = {
    { "poly", SS_WHITEN_POLY }, { "lsq", SS_WHITEN_LSQ }, { NULL, 0 }
};

/* ---- row builders ---------------------------------------------------------- */

/* S: scope, T: struct type of the scope, F: member designator. */
#define ROW_NUM(S, T, path, type, F, lo, hi, dflt, rl, doc) \
    { path, S, type, offsetof(T, F), 0, lo, hi, dflt, NULL, NULL, rl, doc, 0 }
#define ROW_STR(S, T, path, F, dflt, rl, doc) \
    { path, S, SS_KEY_STRING, offsetof(T, F), sizeof(((T *)0)->F), 0, 0, 0, dflt, NULL, rl, doc, 0 }
#define ROW_ENUM(S, T, path, F, names, dflt, rl, doc) \
    { path, S, SS_KEY_ENUM, offsetof(T, F), 0, 0, 0, 0, dflt, names, rl, doc, 0 }

#define D_BOOL(path, F, dflt, rl, doc) \
    ROW_NUM(SS_SCOPE_DAEMON, ss_config_t, path, SS_KEY_BOOL, F, 0, 1, dflt, rl, doc)
#define D_INT(path, F, lo, hi, dflt, rl, doc) \
    ROW_NUM(SS_SCOPE_DAEMON, ss_config_t, path, SS_KEY_INT, F, lo, hi, dflt, rl, doc)
#define D_U64(path, F, lo, hi, dflt, rl, doc) \
    ROW_NUM(SS_SCOPE_DAEMON, ss_config_t, path, SS_KEY_U64, F, lo, hi, dflt, rl, doc)
#define D_DBL(path, F, lo, hi, dflt, rl, doc) \
    ROW_NUM(SS_SCOPE_DAEMON, ss_config_t, path, SS_KEY_DOUBLE, F, lo, hi, dflt, rl, doc)
#define D_STR(path, F, dflt, rl, doc) ROW_STR(SS_SCOPE_DAEMON, ss_config_t, path, F, dflt, rl, doc)
#define D_ENUM(path, F, names, dflt, rl, doc) \
    ROW_ENUM(SS_SCOPE_DAEMON, ss_config_t, path, F, names, dflt, rl, doc)

#define F_BOOL(path, F, dflt, rl, doc) \
    ROW_NUM(SS_SCOPE_FEED, ss_feed_cfg_t, path, SS_KEY_BOOL, F, 0, 1, dflt, rl, doc)
#define F_INT(path, F, lo, hi, dflt, rl, doc) \
    ROW_NUM(SS_SCOPE_FEED, ss_feed_cfg_t, path, SS_KEY_INT, F, lo, hi, dflt, rl, doc)
#define F_U64(path, F, lo, hi, dflt, rl, doc) \
    ROW_NUM(SS_SCOPE_FEED, ss_feed_cfg_t, path, SS_KEY_U64, F, lo, hi, dflt, rl, doc)
#define F_DBL(path, F, lo, hi, dflt, rl, doc) \
    ROW_NUM(SS_SCOPE_FEED, ss_feed_cfg_t, path, SS_KEY_DOUBLE, F, lo, hi, dflt, rl, doc)
/* a number that may be null (NAN: not set), null by default */
#define F_DBLN(path, F, lo, hi, rl, doc) \
    { path, SS_SCOPE_FEED, SS_KEY_DOUBLE, offsetof(ss_feed_cfg_t, F), 0, lo, hi, NAN, NULL, NULL, \
      rl, doc, 1 }
#define F_INT4(path, F, lo, hi, dflt, rl, doc) \
    ROW_NUM(SS_SCOPE_FEED, ss_feed_cfg_t, path, SS_KEY_INT4, F, lo, hi, dflt, rl, doc)
#define F_STR(path, F, dflt, rl, doc) ROW_STR(SS_SCOPE_FEED, ss_feed_cfg_t, path, F, dflt, rl, doc)
#define F_ENUM(path, F, names, dflt, rl, doc) \
    ROW_ENUM(SS_SCOPE_FEED, ss_feed_cfg_t, path, F, names, dflt, rl, doc)

enum { FIXED = 0, RELOAD = 1 };

/* ---- daemon-wide keys (top level) -------------------------------------------- */

static const ss_config_key_t daemon_keys[] = {
    D_ENUM("log_level", log_level, log_level_names, "info", RELOAD,
           "Messages of lower priority than this are dropped."),
    D_ENUM("log_prefix", log_prefix, log_prefix_names, "auto", RELOAD,
           "Prefix log lines with <N> syslog priorities: auto = when stderr is the journal."),
    D_STR("control.endpoint", control_endpoint, "ipc:///run/skysieve/control", FIXED,
          "ZeroMQ REP endpoint answering JSON control requests (bound; \"\" = no control socket)."),
    D_STR("publish.endpoint", publish_endpoint, "tcp://127.0.0.1:5560", FIXED,
          "ZeroMQ PUB endpoint for residual.<feed>, detections.<feed> and status (bound; \"\" = none)."),
    D_U64("publish.byte_budget", publish_budget, MIB, 1099511627776.0, 256.0 * MIB, FIXED,
          "Bytes a slow subscriber may have queued; SNDHWM = budget / largest message (then that subscriber loses messages, seen in topic_seq; the others do not)."),
    D_INT("publish.max_subscriptions", publish_max_subs, 16, 1000000, 4096, RELOAD,
          "Distinct topics subscribed that the publisher holds at most: past it, the peer address with the most subscriptions is banned (publish.ban_s) and its connections closed; counted in subscriptions_refused and peers_banned."),
    D_INT("publish.max_subscriptions_per_peer", publish_max_subs_peer, 4, 1000000, 256, RELOAD,
          "Subscriptions one peer address (a host over TCP, a process over IPC) may add: past it the address is banned (publish.ban_s) and its connections closed."),
    D_DBL("publish.ban_s", publish_ban_s, 1.0, 86400.0, 600.0, RELOAD,
          "Seconds a peer banned for a subscription flood is refused (by the ZAP handler) on every socket."),
    D_BOOL("publish.residuals", publish_residuals, 1, RELOAD,
           "Publish the residual frames (detections and status are always published)."),
    D_BOOL("publish.residual_mask", publish_mask, 1, RELOAD,
           "Add the valid-mask part to each residual message (every form: float32 and float16)."),
    D_BOOL("publish.residual_on_demand", publish_on_demand, 0, RELOAD,
           "Read the float32 residual off the backend only while a subscription matches residual.<feed> (any prefix of it, \"\" included) or residual_every.<feed>, or the FITS sink is on: a station that takes only float16 or stamps then moves only those bytes (PCIe on CUDA). false = every frame's, as always."),
    D_BOOL("publish.residual16", publish_f16, 1, RELOAD,
           "Allow the float16 residual topics residual16.<feed> and residual16_every.<feed>: made (on the GPU with CUDA) only while a subscription names them (PROTOCOL.md 5a)."),
    D_INT("publish.every", publish_every, 0, 1000000, 10, RELOAD,
          "k of the decimated topics residual_every.<feed> and residual16_every.<feed>: the residuals of the frames whose seq is a multiple of k; 0 = those topics off."),
    D_BOOL("publish.stamps.enabled", stamps_enabled, 1, RELOAD,
           "Allow the stamps.<feed> topic: cut-outs of the residual around each detection of ok frames, made (on the GPU with CUDA) only while a subscription names it (PROTOCOL.md 5b)."),
    D_INT("publish.stamps.size", stamps_size, 3, 255, 31, RELOAD,
          "Side of a point detection's stamp, px, centred on its peak pixel (an even value is taken + 1)."),
    D_INT("publish.stamps.streak_max", stamps_streak_max, 3, 255, 127, RELOAD,
          "A streak's stamp is its bounding box grown by (size - 1)/2 on each side, each side at most this many px around the box's centre."),
    D_INT("publish.stamps.max", stamps_max, 1, 256, 64, RELOAD,
          "Stamps per frame at most, the most significant detections first (also at most 2^18 pixels in all); the rest are counted in the message's truncated."),
    D_STR("security.curve_key", curve_key, "", FIXED,
          "CURVE: the daemon's secret key file (skysieve-keygen); with it every bound ZeroMQ socket (frames in, results out, control) is a CURVE server and admits only the keys of security.client_keys (\"\" = no authentication)."),
    D_STR("security.client_keys", client_keys, "", FIXED,
          "CURVE: the directory of the admitted clients' public key files (NAME.pub); required with security.curve_key."),
    D_DBL("peer_timeout", peer_timeout, 1.0, 3600.0, 60.0, FIXED,
          "Seconds a ZeroMQ peer (sender, subscriber, control client) may stay silent to the heartbeat PINGs sent every quarter of this, or take over its handshake, before its connection is dropped: dead peers and stalled partial messages free their memory."),
    D_DBL("status_interval", status_interval, 0.1, 3600.0, 5.0, RELOAD,
          "Seconds between systemd STATUS= updates and status messages."),
    D_DBL("watchdog.stall_timeout", watchdog_stall, 1.0, 86400.0, 30.0, RELOAD,
          "Seconds one frame may stay in a pipeline before it counts as hung and WATCHDOG=1 stops (idle feeds are fine)."),
    D_DBL("shutdown.drain_timeout", drain_timeout, 0.0, 3600.0, 30.0, RELOAD,
          "Seconds SIGTERM waits for the queues to drain and the sinks to flush."),
};

/* ---- per-feed keys (each element of "feeds") ------------------------------------ */

#define P(f) pipeline.f
#define SY(f) synth.gen.f

static const ss_config_key_t feed_keys[] = {
    F_STR("name", name, "synth0", FIXED,
          "Feed name: letters, digits, '_', '-' and '.' (PROTOCOL.md); unique; used in topics and file names."),
    F_ENUM("source.type", source, source_names, "synth", FIXED,
           "Where frames come from: synth (built-in synthetic field), zmq, fits or indi."),

    /* synthetic source (tools/synth.h) */
    F_DBL("source.synth.rate", synth.rate, 0.0, 10000.0, 2.0, FIXED,
          "Frames per second; 0 = as fast as the pipeline takes them."),
    F_U64("source.synth.count", synth.count, 0.0, U64_JSON_MAX, 0.0, FIXED,
          "Frames to generate before the source ends; 0 = endless."),
    F_INT("source.synth.width", SY(width), 16.0, MAX_SIDE, 1024.0, FIXED, "Frame width, px."),
    F_INT("source.synth.height", SY(height), 16.0, MAX_SIDE, 1024.0, FIXED, "Frame height, px."),
    F_ENUM("source.synth.dtype", SY(dtype), dtype_names, "u16", FIXED, "Pixel type of the frames."),
    F_U64("source.synth.seed", SY(seed), 0.0, U64_JSON_MAX, 1.0, FIXED,
          "PRNG seed; a (config, seed) pair always gives the same sequence."),
    F_DBL("source.synth.frame_interval", SY(frame_interval), 0.0, 86400.0, 0.0, FIXED,
          "Seconds between frame timestamps; 0 = 1/rate (1 s when rate is 0)."),
    F_DBL("source.synth.start_mjd", SY(start_mjd), 0.0, 1e6, 0.0, FIXED,
          "Time of frame 0 (MJD UTC); 0 = now."),
    F_DBL("source.synth.exposure", SY(exposure), 0.0, 86400.0, 0.5, FIXED,
          "Exposure time written to the metadata, s."),
    F_INT("source.synth.n_stars", SY(n_stars), 0.0, 1e6, 2000.0, FIXED, "Number of stars."),
    F_DBL("source.synth.flux_min", SY(flux_min), 1e-3, 1e9, 200.0, FIXED,
          "Faintest star flux, ADU."),
    F_DBL("source.synth.flux_max", SY(flux_max), 1e-3, 1e9, 200000.0, FIXED,
          "Brightest star flux, ADU."),
    F_DBL("source.synth.star_alpha", SY(star_alpha), 1.1, 5.0, 2.0, FIXED,
          "Power-law index of the flux distribution, dN/dF ~ F^-alpha."),
    F_ENUM("source.synth.psf", SY(psf), psf_names, "gauss", FIXED, "PSF shape: gauss or moffat."),
    F_DBL("source.synth.psf_sigma", SY(psf_sigma), 0.3, 10.0, 1.4, FIXED,
          "PSF sigma, px (Moffat: the same FWHM)."),
    F_DBL("source.synth.moffat_beta", SY(moffat_beta), 1.1, 20.0, 3.0, FIXED, "Moffat beta."),
    F_DBL("source.synth.seeing_wobble", SY(seeing_wobble), 0.0, 0.5, 0.03, FIXED,
          "Fractional rms change of the PSF sigma from frame to frame."),
    F_DBL("source.synth.sky", SY(sky), 0.0, 1e7, 1000.0, FIXED, "Sky level at the centre, ADU."),
    F_DBL("source.synth.sky_grad_x", SY(sky_grad_x), -1000.0, 1000.0, 0.05, FIXED,
          "Sky gradient along x, ADU/px."),
    F_DBL("source.synth.sky_grad_y", SY(sky_grad_y), -1000.0, 1000.0, 0.0, FIXED,
          "Sky gradient along y, ADU/px."),
    F_DBL("source.synth.gain", SY(gain), 0.0, 1000.0, 1.0, FIXED,
          "e-/ADU for the Poisson noise; 0 = no Poisson noise."),
    F_DBL("source.synth.read_noise", SY(read_noise), 0.0, 1e5, 5.0, FIXED, "Read noise, ADU rms."),
    F_DBL("source.synth.bias", SY(bias), -1e6, 1e6, 100.0, FIXED, "Offset added to every pixel, ADU."),
    F_DBL("source.synth.saturation", SY(saturation), 0.0, 1e30, 0.0, FIXED,
          "Clip at this level, ADU; 0 = the pixel type's maximum."),
    F_DBL("source.synth.jitter", SY(jitter), 0.0, 1000.0, 1.0, FIXED,
          "Random pointing jitter per frame, px rms per axis."),
    F_DBL("source.synth.drift_x", SY(drift_x), -100.0, 100.0, 0.0, FIXED, "Pointing drift along x, px/frame."),
    F_DBL("source.synth.drift_y", SY(drift_y), -100.0, 100.0, 0.0, FIXED, "Pointing drift along y, px/frame."),
    F_DBL("source.synth.jump_prob", SY(jump_prob), 0.0, 1.0, 0.0, FIXED,
          "Probability per frame of a large pointing jump."),
    F_DBL("source.synth.jump_px", SY(jump_px), 0.0, 10000.0, 30.0, FIXED, "Size of a jump, px."),
    F_DBL("source.synth.transparency", SY(transparency), 0.0, 0.9, 0.02, FIXED,
          "Fractional rms of transparency changes."),
    F_INT("source.synth.n_hot", SY(n_hot), 0.0, 1e6, 50.0, FIXED,
          "Hot pixels (fixed in detector coordinates)."),
    F_DBL("source.synth.hot_level", SY(hot_level), 0.0, 1e9, 5000.0, FIXED,
          "Hot pixel level above the sky, ADU."),
    F_DBL("source.synth.cosmic_rate", SY(cosmic_rate), 0.0, 1e5, 5.0, FIXED,
          "Cosmic-ray hits per Mpix per frame."),
    F_INT("source.synth.n_movers", SY(n_movers), 0.0, 128.0, 5.0, FIXED,
          "Moving point objects, present in every frame."),
    F_DBL("source.synth.mover_snr", SY(mover_snr), 0.0, 1e6, 10.0, FIXED,
          "Peak matched-filter SNR of a mover."),
    F_DBL("source.synth.mover_speed", SY(mover_speed), 0.0, 1000.0, 1.5, FIXED,
          "Mover speed, px/frame, random direction."),
    F_DBL("source.synth.streak_prob", SY(streak_prob), 0.0, 1.0, 0.05, FIXED,
          "Probability per frame of a streak."),
    F_DBL("source.synth.streak_snr", SY(streak_snr), 0.0, 1e6, 10.0, FIXED,
          "Matched-filter SNR along a streak."),
    F_DBL("source.synth.streak_len_min", SY(streak_len_min), 1.0, 1e5, 40.0, FIXED,
          "Shortest streak, px."),
    F_DBL("source.synth.streak_len_max", SY(streak_len_max), 1.0, 1e5, 200.0, FIXED,
          "Longest streak, px."),
    F_BOOL("source.synth.wcs", SY(wcs), 0, FIXED,
           "Attach a TAN WCS (following the pointing) to each frame's metadata."),
    F_DBL("source.synth.wcs_ra", SY(wcs_ra), 0.0, 360.0, 180.0, FIXED,
          "WCS: right ascension at frame 0's centre pixel, deg."),
    F_DBL("source.synth.wcs_dec", SY(wcs_dec), -90.0, 90.0, 30.0, FIXED,
          "WCS: declination at frame 0's centre pixel, deg."),
    F_DBL("source.synth.wcs_scale", SY(wcs_scale), 0.001, 3600.0, 1.0, FIXED,
          "WCS: pixel scale, arcsec/px (north up, east left)."),

    /* ZeroMQ source */
    F_STR("source.zmq.endpoint", zmq.endpoint, "tcp://127.0.0.1:5559", FIXED,
          "ZeroMQ endpoint frames arrive on."),
    F_ENUM("source.zmq.socket", zmq.socket, zmq_socket_names, "pull", FIXED, "Socket type: pull or sub."),
    F_BOOL("source.zmq.bind", zmq.bind, 1, FIXED, "Bind the endpoint (true) or connect to it (false)."),
    F_INT("source.zmq.rcvhwm", zmq.rcvhwm, 1.0, 1e6, 16.0, FIXED,
          "ZMQ_RCVHWM: frame messages buffered in the socket."),
    F_STR("source.zmq.subscribe", zmq.subscribe, "", FIXED,
          "SUB only: subscription prefix (\"\" = every message)."),
    F_ENUM("source.zmq.format", zmq.format, zmq_format_names, "skysieve", FIXED,
           "Message format: skysieve (PROTOCOL.md frames) or adzmq (EPICS areaDetector NDPluginZMQ arrays)."),

    /* FITS source */
    F_ENUM("source.fits.mode", fits.mode, fits_mode_names, "directory", FIXED,
           "directory: watch path for new files; list: the files named in list; glob: the files pattern matches."),
    F_STR("source.fits.path", fits.path, "", FIXED, "Directory mode: the directory watched (inotify)."),
    F_STR("source.fits.list", fits.list, "", FIXED,
          "List mode: a text file naming one FITS file per line (# comments; relative to the list's directory)."),
    F_STR("source.fits.pattern", fits.pattern, "", FIXED,
          "Glob mode: the glob(3) pattern; directory mode: a file-name filter (\"\" = *.fits *.fit *.fts *.fz, optionally .gz)."),
    F_DBL("source.fits.settle", fits.settle, 0.0, 3600.0, 1.0, FIXED,
          "Directory mode: a file not renamed into place is complete once its size is unchanged this long, s."),
    F_BOOL("source.fits.existing", fits.existing, 0, FIXED,
           "Directory mode: also take the files already present at start (in order)."),
    F_ENUM("source.fits.after", fits.after, fits_after_names, "keep", FIXED,
           "What happens to a processed file: keep, move (to move_dir) or delete."),
    F_STR("source.fits.move_dir", fits.move_dir, "", FIXED, "Where processed files go when after is move."),
    F_BOOL("source.fits.exit_at_end", fits.exit_at_end, 0, FIXED,
           "List and glob modes: stop the daemon (exit 0, after draining) once every file is processed."),

    /* INDI source */
    F_STR("source.indi.host", indi.host, "localhost", FIXED,
          "indiserver's host name or address (TCP)."),
    F_INT("source.indi.port", indi.port, 1.0, 65535.0, 7624.0, FIXED, "indiserver's TCP port."),
    F_STR("source.indi.local", indi.local, "/tmp/indiserver", FIXED,
          "indiserver's local socket (abstract unix socket, its -u): preferred over TCP when host is this machine (localhost, 127.0.0.1, ::1) and the socket answers; frames then come as shared memory, not base64 (\"\" = TCP only)."),
    F_STR("source.indi.device", indi.device, "", FIXED,
          "The camera's INDI device name (\"CCD Simulator\"); \"\" = the BLOBs of any device."),
    F_STR("source.indi.blob", indi.blob, "CCD1", FIXED, "The BLOB vector that carries the frames."),
    F_BOOL("source.indi.active", indi.active, 0, FIXED,
           "Take exposures: set CCD_EXPOSURE (source.indi.exposure) and again after each frame, for a station with no other INDI client. Default: passive, never set a property of the camera."),
    F_DBL("source.indi.exposure", indi.exposure, 0.001, 3600.0, 1.0, FIXED,
          "Active mode: exposure time, s."),
    F_DBL("source.indi.retry_max", indi.retry_max, 0.1, 3600.0, 30.0, FIXED,
          "Longest wait between reconnection attempts, s (the back-off doubles from 0.1 s up to this)."),

    /* limits and queue */
    F_INT("limits.max_width", max_width, 16.0, MAX_SIDE, 4096.0, FIXED,
          "Largest frame width accepted, px (sizes the frame pool and ZMQ_MAXMSGSIZE)."),
    F_INT("limits.max_height", max_height, 16.0, MAX_SIDE, 4096.0, FIXED, "Largest frame height accepted, px."),
    F_INT("limits.max_parts", max_parts, 2.0, 3.0, 3.0, FIXED,
          "Most parts a frame message may have (protocol v1: header, pixels, optional mask); more is rejected."),
    F_INT("limits.max_header_bytes", max_header_bytes, 1024.0, 16.0 * MIB, 65536.0, FIXED,
          "Largest JSON header part of a frame message, bytes."),
    F_INT("queue.depth", queue_depth, 1.0, 1024.0, 4.0, FIXED,
          "Frames queued between the source and the pipeline."),
    F_ENUM("queue.policy", queue_policy, queue_policy_names, "drop_oldest", FIXED,
           "When the queue is full: drop_oldest (counted) or block the source (use for FITS batches)."),

    /* pipeline (pipeline/pipeline_cfg.h; ALGORITHM.md sections in brackets) */
    F_ENUM("pipeline.backend", P(backend), backend_names, "auto", RELOAD,
           "auto (CUDA when built and a GPU is present, else CPU), cpu or cuda."),
    F_INT("pipeline.device", P(device), 0.0, 64.0, 0.0, RELOAD, "CUDA device ordinal."),
    F_INT("pipeline.threads", P(threads), 0.0, 1024.0, 0.0, RELOAD, "CPU worker threads; 0 = all cores."),
    F_STR("pipeline.bias", P(bias), "", RELOAD,
          "[1] FITS master bias subtracted from each raw frame (\"\" = none); raw-sized, or trimmed to the processed region (README: Calibration)."),
    F_ENUM("pipeline.overscan", P(overscan), overscan_names, "none", RELOAD,
           "[1] Overscan bias from the frame's BIASSEC: none, scalar (the median of its pixels) or row (the median of each row's, the scalar for rows without)."),
    F_STR("pipeline.dark", P(dark), "", RELOAD,
          "[1] FITS dark frame subtracted from each raw frame (\"\" = none); scaled by EXPTIME when a bias is removed (master or overscan)."),
    F_STR("pipeline.flat", P(flat), "", RELOAD, "[1] FITS flat field divided into each frame (\"\" = none)."),
    F_STR("pipeline.bad_pixels", P(bad_pixels), "", RELOAD,
          "[1] FITS bad-pixel mask, nonzero = bad (\"\" = none)."),
    F_DBL("pipeline.saturation", P(saturation), 0.0, 1e30, 0.0, RELOAD,
          "[1] Raw ADU at or above which a pixel is invalid; 0 = the type's maximum."),
    F_INT4("pipeline.roi", P(roi_x), 0.0, MAX_SIDE, 0.0, RELOAD,
           "[1] Region of interest [x, y, w, h] in raw pixels; w = h = 0: the whole frame (or TRIMSEC)."),
    F_BOOL("pipeline.use_trimsec", P(use_trimsec), 1, RELOAD,
           "[1] Honour FITS TRIMSEC/DATASEC when no roi is set."),
    F_INT("pipeline.geometry_slack", P(geometry_slack), 0.0, 1024.0, 16.0, RELOAD,
          "[1] A frame whose processed region has the current origin and a size within this many px per axis keeps the history (processed at the current size, missing pixels invalid); 0 = any size change resets."),
    F_BOOL("pipeline.hotpix.learn", P(hotpix_learn), 1, RELOAD, "[1] Learn hot pixels."),
    F_DBL("pipeline.hotpix.k", P(hotpix_k), 1.0, 1000.0, 8.0, RELOAD,
          "[1] A pixel is hot in a frame when k sigma above its 3x3 median."),
    F_INT("pipeline.hotpix.frames", P(hotpix_frames), 1.0, 65535.0, 20.0, RELOAD,
          "[1] Frames per learning window."),
    F_DBL("pipeline.hotpix.fraction", P(hotpix_fraction), 0.01, 1.0, 0.75, RELOAD,
          "[1] Fraction of a window a pixel must be hot to be learned."),
    F_INT("pipeline.hotpix.min_frames", P(hotpix_min_frames), 1.0, 65535.0, 5.0, RELOAD,
          "[1] Learned before the window ends once hot in this many frames and in at least fraction of the window's frames so far."),
    F_INT("pipeline.registration.levels", P(reg_levels), 0.0, SS_MAX_LEVELS, 2.0, RELOAD,
          "[2a] Binning by 2^levels for the coarse search (fewer, logged, when the coarsest level would be under 32 px)."),
    F_INT("pipeline.registration.search", P(reg_search), 1.0, 256.0, 16.0, RELOAD,
          "[2a] Search range +-R, binned px (16 at the default binning by 4: jumps of +-64 px)."),
    F_INT("pipeline.registration.highpass", P(reg_hipass), 0.0, 256.0, 0.0, RELOAD,
          "[2] Radius of the local mean removed before registration, px (offsets, stray light and gradients go); 0 = max(2, ceil(3 psf_sigma))."),
    F_INT("pipeline.registration.max_iter", P(reg_max_iter), 1.0, 100.0, 4.0, RELOAD,
          "[2b] Gradient iterations."),
    F_DBL("pipeline.registration.tol", P(reg_tol), 1e-6, 1.0, 0.002, RELOAD,
          "[2b] Stop iterating when the update is below this, px."),
    F_DBL("pipeline.registration.ambiguity", P(reg_ambiguity), 0.01, 1.0, 0.9, RELOAD,
          "[2a] The vote is ambiguous (registration fails) when a window 3 binned px or more from the best one has this fraction of its votes."),
    F_DBL("pipeline.registration.min_det", P(reg_min_det), 0.0, 1.0, 1e-6, RELOAD,
          "[2b] Fail (featureless frame) when det/(u w) of the normal matrix is below this."),
    F_INT("pipeline.registration.max_failures", P(max_failures), 1.0, 100000.0, 5.0, RELOAD,
          "[2] Failures in a row taken as a slew (history reset)."),
    F_DBL("pipeline.registration.reref_px", P(reref_px), 0.5, 1e5, 16.0, RELOAD,
          "[2] Re-reference when the shift exceeds this, px."),
    F_INT("pipeline.registration.reference_frames", P(ref_frames), 1.0, 64.0, 1.0, RELOAD,
          "[2] M: the reference is the mean of the first M good frames after a start, reset or re-reference, aligned by their integer shifts (lower noise); 1 = the first frame alone."),
    F_INT("pipeline.history", P(history), 2.0, SS_MAX_HISTORY, 20.0, RELOAD,
          "[3] Frames N kept in the history."),
    F_INT("pipeline.min_history", P(min_history), 0.0, SS_MAX_HISTORY, 0.0, RELOAD,
          "[3] Frames needed before residuals are produced; 0 = 2m+2 for m weight terms (at most N)."),
    F_ENUM("pipeline.whiten.mode", P(mode), whiten_mode_names, "poly", RELOAD,
           "[3] Weights: poly (shift polynomial) or lsq (data-driven)."),
    F_INT("pipeline.whiten.degree", P(poly_degree), 0.0, 2.0, 2.0, RELOAD,
          "[3] Degree of the shift polynomial (poly mode)."),
    F_DBL("pipeline.whiten.gamma", P(gamma), -1.0, 1e6, -1.0, RELOAD,
          "[3] Regulariser; negative = 1e-3 N."),
    F_DBL("pipeline.whiten.forget", P(forget), 0.5, 1.0, 1.0, RELOAD,
          "[3] Forgetting factor lambda per frame of age; 1 = none."),
    F_INT("pipeline.whiten.min_valid", P(min_valid), 0.0, SS_MAX_HISTORY, 0.0, RELOAD,
          "[3] poly mode: where some history pixels are invalid, the prediction is re-weighted over the valid frames; fewer valid frames than this leave the pixel invalid. 0 = max(m+2, ceil(n/2)) for m weight terms and n frames; at most n (n = strict: any invalid history pixel invalidates)."),
    F_BOOL("pipeline.history_clean.enabled", P(clean_sharp), 1, RELOAD,
           "[3] Replace features sharper than any PSF (cosmic rays, unlearned hot pixels) by the 3x3 median before a frame enters the history."),
    F_DBL("pipeline.history_clean.k", P(clean_k), 1.0, 1000.0, 5.0, RELOAD,
          "[3] Cleaning threshold: k sigma above the 3x3 median."),
    F_DBL("pipeline.history_clean.ratio", P(clean_ratio), 0.5, 1.0, 0.9, RELOAD,
          "[3] Cleaning sharpness: (v - median) / (v - ring minimum) at or above this (cosmic-ray hits reach ~1, a star of FWHM 1.6 px centred on a pixel 0.71 and more with noise: lower values cleaned the stars of undersampled fields out of the history)."),
    F_BOOL("pipeline.object_removal.enabled", P(remove_objects), 1, RELOAD,
           "[3] Remove detected objects from a frame before it enters the history."),
    F_DBL("pipeline.object_removal.radius", P(mask_radius), -1.0, 1000.0, -1.0, RELOAD,
          "[3] Removal radius, px; negative = 2 psf_sigma + 1."),
    F_DBL("pipeline.object_removal.protect_speed", P(protect_speed), 0.0, 100.0, 0.5, RELOAD,
          "[3] poly mode: while the history holds frames stored without object removal (the warm-up, after a reset), their weights keep a point mover of this speed, px per frame, out of the prediction (no copy of it left where the constraints allow; README, \"Slow movers in the warm-up\"); 0 = off."),
    F_BOOL("pipeline.guided.enabled", P(guided), 1, RELOAD, "[4] Guided-filter cleanup of the residual."),
    F_INT("pipeline.guided.radius", P(guided_radius), 0.0, 1000.0, 0.0, RELOAD,
          "[4] Window radius rho, px; 0 = round(8 psf_sigma)."),
    F_DBL("pipeline.guided.eps", P(guided_eps), 1e-6, 1e6, 0.1, RELOAD,
          "[4] Regulariser epsilon in units of the noise variance. 0.1: at 1 a window whose guide holds only faint stars shrank their seeing-change fit towards 0 and left it as false alarms at their cores (docs/QUALITY.md, the model-error section)."),
    F_BOOL("pipeline.guided.laplacian", P(guided_laplacian), 1, RELOAD,
           "[4] Second guide channel, the Laplacian of the prediction: also removes seeing-change residuals."),
    F_BOOL("pipeline.guided.biharmonic", P(guided_biharmonic), 0, RELOAD,
           "[4] With laplacian: one global term of the prediction's biharmonic per frame, fitted first: the second order of a seeing change (README: when it helps)."),
    F_BOOL("pipeline.guided.mask", P(guided_mask), 0, RELOAD,
           "[4] Leave out of the window fit the pixels of a source the prediction does not explain (a mover): the residual's matched filter at detect.thresh_low, over the PSF's 95 % disk, where the prediction's matched-filtered Laplacian stays within detect.thresh_low times its noise over the disk. Without it the fit takes a share of a faint mover. Off by default: at equal false alarms it gained 0.013 at SNR 7 on the sky scenario, for 1.9 ms more GPU time per 4096² frame (README, The source mask)."),
    F_INT("pipeline.noise.stride", P(noise_stride), 1.0, 64.0, 2.0, RELOAD,
          "[5] Sample every stride-th row and column for the noise σ."),
    F_BOOL("pipeline.noise.model_error", P(model_error), 1, RELOAD,
           "[6b] Near stars, divide z by sqrt(1 + β·D²), D the scale derivative of the prediction's star map and β fitted per frame from the star pixels (a median): the share of a star the prediction gets wrong counted as noise. Seeds come from the divided z, growth (detect.thresh_low) from z before the division (README, Model error)."),
    F_DBL("pipeline.noise.model_error_snr", P(model_error_snr), 3.0, 1000.0, 20.0, RELOAD,
          "[6b] Pixels whose template D is at least this enter the fit of β."),
    F_DBL("pipeline.psf_sigma", P(psf_sigma), 0.3, 8.0, 1.4, RELOAD,
          "[6] Gaussian PSF sigma of the matched filter, px."),
    F_INT("pipeline.matched.phases", P(mf_phases), 0.0, SS_MF_MAX_PHASES, 0.0, RELOAD,
          "[6] Sub-pixel phases of the PSF kernel per axis: z is the phase value of largest |z| over a bank of n x n kernels at offsets spaced 1/n px (1 = one kernel at the pixel centre). 0 = auto: 2 when psf_sigma < 1 px (there a mover half a pixel off loses up to a quarter of its z at whole-pixel phases), else 1. The bank raises the false-alarm rate of detect.thresh on noise (README, Matched filter)."),
    F_DBL("pipeline.detect.thresh", P(thresh), 0.5, 1000.0, 5.0, RELOAD,
          "[7] Seed threshold tau, in sigma of the SNR map."),
    F_DBL("pipeline.detect.thresh_low", P(thresh_low), 0.1, 1000.0, 2.5, RELOAD,
          "[7] Hysteresis growth threshold, sigma (at most thresh)."),
    F_BOOL("pipeline.detect.negative", P(negative), 0, RELOAD,
           "[7] Also report negative components (something vanished)."),
    F_INT("pipeline.detect.min_area", P(min_area), 1.0, 1e6, 3.0, RELOAD,
          "[7] Smallest component reported, px."),
    F_DBL("pipeline.detect.streak_ratio", P(streak_ratio), 1.0, 1000.0, 3.0, RELOAD,
          "[7] Axis ratio a/b at or above which a component is a streak."),
    F_DBL("pipeline.detect.streak_min_a", P(streak_min_len), 0.0, 1000.0, 3.0, RELOAD,
          "[7] A streak also needs a >= this many psf_sigma."),
    F_DBL("pipeline.detect.streak_min_b", P(streak_min_b), 0.0, 1000.0, 0.75, RELOAD,
          "[7] A streak's cross-section b (its brightest pixel left out) must be at least this many psf_sigma; narrower elongated components are cosmic-ray tracks."),
    F_DBL("pipeline.detect.cosmic_fraction", P(cosmic_fraction), 0.0, 1.0, 0.25, RELOAD,
          "[7] Share of the flux in the brightest pixel that marks a cosmic ray."),
    F_DBL("pipeline.detect.streak_gap", P(streak_gap), 0.0, 1000.0, 15.0, RELOAD,
          "[7] Collinear streak pieces with a gap of at most this many px are merged into one detection; 0 = never."),
    F_INT("pipeline.detect.max", P(max_detections), 1.0, 1e6, 1000.0, RELOAD,
          "[7] Detections kept per frame."),
    F_BOOL("pipeline.track.enabled", P(track.enabled), 1, RELOAD,
           "[8] Link detections across frames into tracks (published on tracks.<feed>)."),
    F_DBL("pipeline.track.max_speed", P(track.max_speed), 0.1, 1e5, 500.0, RELOAD,
          "[8] Fastest motion a new track may have, px per frame."),
    F_DBL("pipeline.track.gate", P(track.gate), 0.5, 1000.0, 3.0, RELOAD,
          "[8] Radius around a track's predicted position within which a detection is linked, px (plus three times the prediction's own spread)."),
    F_INT("pipeline.track.max_missed", P(track.max_missed), 0.0, 1000.0, 3.0, RELOAD,
          "[8] Frames in a row a track may miss before it ends (gaps up to this are bridged)."),
    F_INT("pipeline.track.min_points", P(track.min_points), 3.0, 1000.0, 3.0, RELOAD,
          "[8] Detections that confirm a track (it must also have moved by more than its scatter)."),
    F_DBLN("pipeline.photometry.zeropoint", P(phot.zeropoint), -100.0, 100.0, RELOAD,
           "[9] Magnitude of 1 ADU of detection flux (of 1 ADU/s with per_second); null = none: then a zero point fitted on a plate-solved frame, else the FITS header's MAGZERO, MAGZPT or PHOTZP, else no magnitudes (README 'Photometry')."),
    F_BOOL("pipeline.photometry.per_second", P(phot.per_second), 0, RELOAD,
           "[9] The zero point (configured or from the header) is for flux per second of exposure: mag = zp - 2.5 log10(flux / EXPTIME); false: of the frame's total flux."),
    F_STR("pipeline.photometry.band", P(phot.band), "G", RELOAD,
          "[9] The filter the magnitudes are in, as ADES names it (the ADES sink's band column; e.g. G, R, V, C for unfiltered)."),

    /* sinks (reopened on reload) */
    F_STR("sinks.fits.dir", fits_dir, "", RELOAD,
          "Directory for residual FITS files, one per processed frame (float32, CHECKSUM; \"\" = off)."),
    F_BOOL("sinks.fits.compress", fits_compress, 1, RELOAD,
           "Write residuals tile-compressed (lossless)."),
    F_STR("sinks.jsonl.path", jsonl_path, "", RELOAD,
          "File the detections are appended to, one JSON line per detection as skysieve-sub --json prints them (\"\" = off)."),
    F_BOOL("sinks.jsonl.tracks", jsonl_tracks, 1, RELOAD,
           "Also append, for each frame with track reports, its tracks message body as one line (\"type\": \"tracks\"; detection lines have no \"type\")."),
    F_STR("sinks.ds9.dir", ds9_dir, "", RELOAD,
          "Directory for DS9 region files, one per frame with detections or track reports (\"\" = off): points as circles, streaks as lines, tracks as segments, colour by kind."),
    F_STR("sinks.iod.path", iod_path, "", RELOAD,
          "File satellite observations are appended to as IOD lines (80 columns, as SeeSat-L and stvid use them): every streak, and the detections of tracks of at least min_rate, of frames with a celestial WCS and a time (\"\" = off)."),
    F_INT("sinks.iod.station", iod_station, 0.0, 9999.0, 9999.0, RELOAD,
          "The station's four-digit IOD number (columns 17-20)."),
    F_DBL("sinks.iod.min_rate", iod_min_rate, 0.0, 1e6, 30.0, RELOAD,
          "Angular rate from which a point track counts as a satellite, arcsec/s."),
    F_STR("sinks.ades.path", ades_path, "", RELOAD,
          "File slow movers are appended to as ADES PSV rows (version 2022): every detection of a track slower than sinks.iod.min_rate, of frames with a celestial WCS and a time (\"\" = off)."),
    F_STR("sinks.ades.stn", ades_stn, "XXX", RELOAD,
          "The station's MPC observatory code (XXX: none assigned)."),
    F_STR("sinks.ades.astcat", ades_astcat, "UNK", RELOAD,
          "The ADES astCat value: the star catalogue the frames' WCS was fitted to; also photCat, of rows with a magnitude (pipeline.photometry)."),

    /* plate solving (fixed at start: the solver thread is made then) */
    F_BOOL("wcs.solve", wcs_solve, 0, FIXED,
           "Plate-solve the reference frame with astrometry.net's solve-field when frames carry no WCS (off the frame path; again after a reset or re-reference); its WCS then gives every registered frame RA/Dec through its shift."),
    F_DBL("wcs.solve_timeout", wcs_solve_timeout, 1.0, 3600.0, 60.0, FIXED,
          "Wall-clock limit of one solve-field run, s: killed after it (counted as solve_timeouts)."),
    F_DBL("wcs.solve_scale_low", wcs_scale_low, 0.0, 3600.0, 0.0, FIXED,
          "Lower bound of the pixel scale handed to solve-field, arcsec/px (0 = no hint: slower)."),
    F_DBL("wcs.solve_scale_high", wcs_scale_high, 0.0, 3600.0, 0.0, FIXED,
          "Upper bound of the pixel scale handed to solve-field, arcsec/px (0 = no hint)."),
    F_STR("wcs.solve_index_dir", wcs_index_dir, "", FIXED,
          "Directory of the astrometry.net index files (\"\" = solve-field's own config, /etc/astrometry.cfg: /usr/share/astrometry on Debian)."),
    F_STR("wcs.solve_program", wcs_solver, "solve-field", FIXED,
          "The solve-field program: a name looked up on PATH, or a path."),
};

const ss_config_key_t *ss_config_keys(ss_key_scope_t scope, size_t *n)
{
    if (scope == SS_SCOPE_DAEMON) {
        if (n)
            *n = sizeof daemon_keys / sizeof daemon_keys[0];
        return daemon_keys;
    }
    if (n)
        *n = sizeof feed_keys / sizeof feed_keys[0];
    return feed_keys;
}
