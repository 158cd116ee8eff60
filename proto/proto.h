/*
 * proto.h — the skysieve wire protocol, version 1: encode and decode every
 * message of proto/PROTOCOL.md. This module is the only code that knows the
 * wire format; the daemon and the tools call it.
 *
 * Messages (PROTOCOL.md has the fields, the examples and every error text):
 *   in   frame         [header JSON, pixels, optional uint8 mask]
 *        series_start  [header JSON]
 *        series_end    [header JSON]
 *   out  residual      [topic "residual.<feed>", header JSON, float32 pixels,
 *                       optional uint8 mask]
 *        detections    [topic "detections.<feed>", body JSON]
 *        tracks        [topic "tracks.<feed>", body JSON]
 *        status        [topic "status", body JSON]
 *   control (REP)      request JSON -> response JSON
 *
 * Byte order little-endian, rows first, x = column, y = row, 0-based pixel
 * centres; times ISO-8601 UTC plus MJD (UTC).
 *
 * Decoding uses cJSON (cJSON_ParseWithLength) and validates strictly: every
 * rejection fills an ss_proto_error_t with a reason code (for counters) and
 * the documented error text. Encoding writes into caller buffers with a
 * small JSON writer: no allocation, so publishing costs nothing per frame
 * but the formatting. Encoders return the length written (without the
 * terminating NUL, which is always written) or -1 when the buffer is too
 * small; nothing else can make them fail.
 *
 * Every function is thread-safe (no global state; cJSON's global error
 * pointer is never read).
 */
#ifndef SS_PROTO_H
#define SS_PROTO_H

#include "pipeline/frame.h"
#include "pipeline/pipeline.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SS_PROTO_VERSION 1

#define SS_PROTO_ERR_MAX 256            /* error text, with the NUL */
#define SS_PROTO_FRAME_MAX_PARTS 3      /* header, pixels, mask */
#define SS_PROTO_RESIDUAL_MAX_PARTS 4   /* topic, header, pixels, mask */
#define SS_PROTO_TOPIC_MAX (24 + SS_NAME_MAX)
#define SS_PROTO_MAX_FEEDS 32           /* feeds in a status message */

/* Defaults of ss_proto_limits_t. */
#define SS_PROTO_DEFAULT_MAX_WIDTH 16384
#define SS_PROTO_DEFAULT_MAX_HEIGHT 16384
#define SS_PROTO_DEFAULT_MAX_HEADER 65536   /* bytes of a JSON header/body part */
#define SS_PROTO_CTL_REQUEST_MAX 4096       /* bytes of a control request (PROTOCOL.md §8) */
#define SS_PROTO_DEFAULT_MAX_META (SS_META_MAX - 1)

/* JSON integers travel as IEEE doubles in most JSON libraries (Python's
 * does better, JavaScript's does not): counters above 2^53 would silently
 * lose their last digits, so the protocol refuses them. */
#define SS_PROTO_MAX_INT 9007199254740992.0 /* 2^53 */

/* ---- message kinds, rejection reasons, limits ------------------------- */

typedef enum ss_msg_type {
    SS_MSG_NONE = 0,        /* not a skysieve message */
    SS_MSG_FRAME,
    SS_MSG_SERIES_START,
    SS_MSG_SERIES_END,
    SS_MSG_RESIDUAL,
    SS_MSG_DETECTIONS,
    SS_MSG_STATUS,
    SS_MSG_TRACKS,
    SS_MSG_STAMPS,
    SS_MSG__COUNT
} ss_msg_type_t;

/* Wire name of a message type ("frame", "series_start", ...; "none"). */
const char *ss_msg_type_name(ss_msg_type_t t);

/* Why a message was rejected: one code per class of PROTOCOL.md's error
 * texts, so that a receiver can count rejections by reason. */
typedef enum ss_proto_reason {
    SS_PR_OK = 0,
    SS_PR_NOT_JSON,         /* "header is not valid JSON ..." */
    SS_PR_NOT_OBJECT,       /* "header is not a JSON object ..." */
    SS_PR_TOO_LONG,         /* "header too long ..." */
    SS_PR_MISSING_FIELD,    /* "missing field ..." */
    SS_PR_WRONG_TYPE,       /* "field ... has the wrong type ..." */
    SS_PR_DUPLICATE_FIELD,  /* "duplicate field ..." */
    SS_PR_BAD_VALUE,        /* a value out of its range, or a string too long */
    SS_PR_VERSION,          /* "unsupported protocol version ..." */
    SS_PR_UNKNOWN_TYPE,     /* "unknown message type ..." */
    SS_PR_UNKNOWN_DTYPE,    /* "unknown dtype ..." */
    SS_PR_DIMENSIONS,       /* width/height 0 or above the maximum */
    SS_PR_BAD_TIME,         /* time not ISO-8601 UTC, or time and mjd disagree */
    SS_PR_BAD_WCS,          /* a "wcs" entry that is not a FITS keyword/value */
    SS_PR_META_TOO_LARGE,   /* "field \"meta\" is too large ..." */
    SS_PR_DATA_SIZE,        /* pixel part size disagrees with the header */
    SS_PR_MASK_SIZE,        /* mask part size disagrees with the header */
    SS_PR_MISSING_PART,     /* "missing pixel part ..." */
    SS_PR_TOO_MANY_PARTS,   /* "too many parts ..." */
    SS_PR_NO_BUFFER,        /* no free frame buffer, or the frame does not fit one */
    SS_PR_BAD_TOPIC,        /* topic part disagrees with the body */
    SS_PR__COUNT
} ss_proto_reason_t;

/* Counter name of a reason ("not_json", "missing_field", ...). */
const char *ss_proto_reason_name(ss_proto_reason_t r);
/* Parse a reason name; SS_PR__COUNT if unknown. */
ss_proto_reason_t ss_proto_reason_parse(const char *s);

typedef struct ss_proto_error {
    ss_proto_reason_t reason;
    char text[SS_PROTO_ERR_MAX];    /* the documented error text */
} ss_proto_error_t;

/* What a receiver accepts. */
typedef struct ss_proto_limits {
    int max_width, max_height;      /* pixels, each >= 1 */
    size_t max_header_bytes;        /* a JSON header or body part */
    size_t max_meta_bytes;          /* the "meta" object as compact JSON; <= SS_META_MAX - 1 */
} ss_proto_limits_t;

/* Fill with the SS_PROTO_DEFAULT_* values. */
void ss_proto_limits_default(ss_proto_limits_t *l);
/* Largest pixel part the limits admit (max_width·max_height·4 bytes): size
 * frame pools and ZMQ_MAXMSGSIZE from it. */
size_t ss_proto_max_data_bytes(const ss_proto_limits_t *l);

/* One part of a multipart message, as received (not NUL-terminated). */
typedef struct ss_proto_part {
    const void *data;
    size_t len;
} ss_proto_part_t;

/* ---- input: frame, series_start, series_end --------------------------- */

/* The header formats a frame receiver reads (PROTOCOL.md §3 and §11). */
typedef enum ss_proto_format {
    SS_PROTO_FMT_SKYSIEVE = 0,      /* this protocol: frame, series_start, series_end */
    SS_PROTO_FMT_ADZMQ              /* EPICS areaDetector's NDPluginZMQ: [header, array] */
} ss_proto_format_t;

/* The EPICS epoch (1990-01-01 00:00:00 UTC) as MJD: NDArray timeStamps
 * count seconds from it. */
#define SS_EPICS_EPOCH_MJD 47892.0

/* A validated input header. For frames, meta holds seq, series, feed,
 * mjd_obs, exposure, the WCS keywords and the "meta" object (source,
 * recv_mono and the trim box are left cleared for the receiver). */
typedef struct ss_proto_input {
    ss_proto_format_t format;       /* the header's format (its parts follow from it) */
    ss_msg_type_t type;             /* FRAME, SERIES_START or SERIES_END */
    int width, height;              /* frames only */
    ss_dtype_t dtype;               /* frames only */
    int64_t frames;                 /* series messages: the "frames" field, -1 when absent */
    ss_frame_meta_t meta;
} ss_proto_input_t;

/* Parse and validate the header part (part 1) of an input message against
 * the limits. Returns SS_OK, or SS_ERR_FORMAT / SS_ERR_SIZE /
 * SS_ERR_UNSUPPORTED with err filled. Allocates only inside cJSON (freed
 * before return). */
ss_err_t ss_proto_parse_input(const void *buf, size_t len, const ss_proto_limits_t *lim,
                              ss_proto_input_t *in, ss_proto_error_t *err);

/* Parse and validate an NDPluginZMQ (ADZMQ) header part (PROTOCOL.md §11)
 * against the limits, as a frame: htype "array-1.0" (ADZMQ >= 1.4.0:
 * shape in z,y,x order) or ["array-1.0"] (earlier: x,y,z order), type ->
 * dtype, a 2-dimensional shape -> width and height, frame -> seq,
 * timeStamp (s since the EPICS epoch) -> mjd_obs, ndattr -> the "meta"
 * object; a non-empty encoding (a compressed array) is refused. Returns
 * and fails as ss_proto_parse_input. */
ss_err_t ss_proto_parse_adzmq(const void *buf, size_t len, const ss_proto_limits_t *lim,
                              ss_proto_input_t *in, ss_proto_error_t *err);

/* The parser of format fmt (ss_proto_parse_input or ss_proto_parse_adzmq). */
ss_err_t ss_proto_parse_header(ss_proto_format_t fmt, const void *buf, size_t len,
                               const ss_proto_limits_t *lim, ss_proto_input_t *in,
                               ss_proto_error_t *err);

/* Format name ("skysieve", "adzmq"). */
const char *ss_proto_format_name(ss_proto_format_t fmt);

/* Bytes of the pixel part a frame header announces (width·height·size). */
size_t ss_proto_input_data_bytes(const ss_proto_input_t *in);

/* Check the shape of the whole message against a parsed header: n_parts
 * counts every part including the header; data_len and mask_len are the
 * sizes of parts 2 and 3 (ignored when absent; an ADZMQ message has no
 * mask part). SS_OK or SS_ERR_SIZE / SS_ERR_FORMAT with err filled. */
ss_err_t ss_proto_check_parts(const ss_proto_input_t *in, int n_parts, size_t data_len,
                              size_t mask_len, ss_proto_error_t *err);

/* Prepare a frame for a parsed frame header: sets f's size, dtype and
 * meta (f->meta.source and recv_mono are kept), f->valid = NULL. Fails
 * with SS_PR_NO_BUFFER when the pixels exceed f->capacity. No pixel copy:
 * the caller receives the pixel part into f->pixels next. */
ss_err_t ss_proto_frame_prepare(const ss_proto_input_t *in, ss_frame_t *f,
                                ss_proto_error_t *err);

/* Check a received mask part (w·h bytes): every byte must be 0 (invalid)
 * or 1 (valid). SS_OK, or SS_ERR_FORMAT with the first offending pixel. */
ss_err_t ss_proto_check_mask(const uint8_t *mask, int width, int height, ss_proto_error_t *err);

/* Decode a whole input message held in memory (parts[0] is the header).
 * For a frame, f (required) is prepared and receives copies of the pixels
 * and, when sent, of the mask, into the pool's mask buffer of f
 * (ss_frame_mask_buffer; f->valid then points at it; a frame not from a
 * pool cannot take a mask: SS_PR_NO_BUFFER). For series messages f is not
 * touched (may be NULL). */
ss_err_t ss_proto_decode_input(const ss_proto_part_t *parts, int n_parts,
                               const ss_proto_limits_t *lim, ss_proto_input_t *in,
                               ss_frame_t *f, ss_proto_error_t *err);

/* Encode the header of a frame (its size, dtype and metadata: seq, series,
 * feed, time, exposure, WCS keys, meta_json). Whether a mask part follows
 * is told by the number of parts, not by the header. mjd_obs NaN is an
 * encoding error (-1): a frame must carry its time. */
int ss_proto_encode_frame_header(const ss_frame_t *f, char *buf, size_t n);

/* Encode a series_start / series_end message. series must not be empty;
 * feed may be "" or NULL; mjd NaN leaves the time out; frames < 0 leaves
 * the count out; meta_json ("" or NULL for none) must be a JSON object. */
int ss_proto_encode_series(ss_msg_type_t type, const char *series, const char *feed, double mjd,
                           int64_t frames, const char *meta_json, char *buf, size_t n);

/* ---- output: topics, residual, detections, tracks ---------------------- */

/* Topic of an output message: "residual.<feed>", "detections.<feed>",
 * "tracks.<feed>", "status". Returns the length, or -1 if it does not fit /
 * type is not an output. */
int ss_proto_topic(ss_msg_type_t type, const char *feed, char *buf, size_t n);
/* Classify a received topic part; copies the feed name (SS_NAME_MAX
 * bytes, may be NULL). SS_MSG_NONE when it is no skysieve topic. */
ss_msg_type_t ss_proto_topic_parse(const void *topic, size_t len, char *feed);

/* The residual's forms, each on its own topic (PROTOCOL.md §5a): every
 * frame's float32 ("residual.<feed>"), its binary16
 * ("residual16.<feed>"), and the frames whose seq is a multiple of
 * publish.every in either ("residual_every.<feed>",
 * "residual16_every.<feed>"). Their messages are residual messages. */
typedef enum ss_residual_form {
    SS_FORM_F32 = 0,
    SS_FORM_F16,
    SS_FORM_F32_EVERY,
    SS_FORM_F16_EVERY,
    SS_FORM__COUNT
} ss_residual_form_t;

/* The topic type of a form ("residual", "residual16", ...). */
const char *ss_proto_form_name(ss_residual_form_t form);
/* Topic of form for feed: "<form name>.<feed>". Length, or -1 when it
 * does not fit. */
int ss_proto_form_topic(ss_residual_form_t form, const char *feed, char *buf, size_t n);
/* The form a received topic part names (feed copied as by
 * ss_proto_topic_parse), or -1. */
int ss_proto_form_topic_parse(const void *topic, size_t len, char *feed);

/* Residual header of a form: as ss_proto_encode_residual, with "dtype"
 * "f16" for the binary16 forms (res->has_residual16 must be set; the
 * float32 ones need has_residual) and, for the _every forms, "every": k. */
int ss_proto_encode_residual_form(const ss_result_t *res, ss_residual_form_t form, int every,
                                  char *buf, size_t n);

/* Stamps body (PROTOCOL.md §5b) from a result with has_stamps: the members
 * of the detections body up to history_reset, "dtype" "f32", "origin"
 * (with a region of interest), "count", "truncated" and one object per
 * stamp (det, kind, x, y, x0, y0, w, h; positions in input-frame pixels
 * as the detections'). The pixel part is res->stamps.pixels, npix floats. */
int ss_proto_encode_stamps(const ss_result_t *res, char *buf, size_t n);
/* A buffer size that always holds the stamps body of res. */
size_t ss_proto_stamps_bound(const ss_result_t *res);

/* Residual header from a result (res->has_residual must be set: only
 * frames with a residual are published as residual messages; -1 when it
 * is not). Whether a mask part follows is told by the number of parts. */
int ss_proto_encode_residual(const ss_result_t *res, char *buf, size_t n);
/* The mask part of a residual: 1 where the pixel is finite. Returns the
 * number of valid pixels. */
size_t ss_proto_residual_mask(const float *pixels, size_t n, uint8_t *mask);

/* Decode a residual message [topic, header, pixels, (mask)] into res:
 * meta (seq, series, feed, mjd_obs, exposure, wcs, meta_json), width,
 * height, status, reason, shift, sigma, weights, history_len,
 * rereferenced, history_reset, and a copy of the pixels in res->residual
 * (SS_PR_NO_BUFFER beyond res->residual_capacity); has_residual = 1. The
 * mask, when sent, is copied to mask (w·h bytes; may be NULL) and
 * *has_mask says whether it was (may be NULL). res->dets is not touched. */
ss_err_t ss_proto_decode_residual(const ss_proto_part_t *parts, int n_parts,
                                  const ss_proto_limits_t *lim, ss_result_t *res, uint8_t *mask,
                                  int *has_mask, ss_proto_error_t *err);

/* Detections body from a result (any status: a message goes out for every
 * processed frame; the list is empty unless the status is ok). */
int ss_proto_encode_detections(const ss_result_t *res, char *buf, size_t n);
/* A buffer size that always holds the detections body of res. */
size_t ss_proto_detections_bound(const ss_result_t *res);

/* Decode a detections message [topic, body] into res: the fields above
 * except pixels, plus res->dets (items up to its capacity; the remainder,
 * and the message's own "truncated", are added to dets.truncated). */
ss_err_t ss_proto_decode_detections(const ss_proto_part_t *parts, int n_parts,
                                    const ss_proto_limits_t *lim, ss_result_t *res,
                                    ss_proto_error_t *err);

/* Tracks body from a result (PROTOCOL.md §6a): the members of the
 * detections body up to history_reset, then count, truncated and one
 * object per entry of res->tracks. The publisher sends it for frames whose
 * res->tracks.count > 0; the encoder takes an empty list too. */
int ss_proto_encode_tracks(const ss_result_t *res, char *buf, size_t n);
/* A buffer size that always holds the tracks body of res. */
size_t ss_proto_tracks_bound(const ss_result_t *res);

/* Decode a tracks message [topic, body] into res: the fields the
 * detections decoder fills, except res->dets (not touched), plus
 * res->tracks (items up to its capacity; the remainder, and the message's
 * own "truncated", are added to tracks.truncated). A track's timed is 1
 * when its velocity's unit is "px/s". */
ss_err_t ss_proto_decode_tracks(const ss_proto_part_t *parts, int n_parts,
                                const ss_proto_limits_t *lim, ss_result_t *res,
                                ss_proto_error_t *err);

/* One detection as a self-contained JSON line (PROTOCOL.md, "JSON
 * lines"): the frame's feed, series, seq, time, mjd, time_mid, mjd_mid,
 * status and sigma, then the detection's members as in the detections
 * body. For JSON-lines files and skysieve-sub; no newline is written.
 * index < res->dets.count, else -1. */
int ss_proto_encode_detection_line(const ss_result_t *res, int index, char *buf, size_t n);

/* Append "topic_seq": seq as the last member of the JSON object text
 * json[0..len) (which ends in '}'), in place, buffer cap bytes: what the
 * publisher adds to every message it sends (PROTOCOL.md §2, "Gaps").
 * Returns the new length, or -1 when it does not fit or json is not an
 * object's text. */
int ss_proto_add_topic_seq(char *json, int len, size_t cap, uint64_t seq);

/* The "input" member of the results of a frame (PROTOCOL.md §5): its file's
 * base name (m->input), or for a frame not read from a file
 * "<series>#<seq>", written into buf (n bytes; SS_PROTO_INPUT_MAX always
 * fit). Returns the name (m->input or buf). */
#define SS_PROTO_INPUT_MAX SS_INPUT_MAX
const char *ss_proto_input(const ss_frame_meta_t *m, char *buf, size_t n);
/* The "<series>#<seq>" form of that name alone, into buf (n bytes). */
void ss_proto_series_seq(const ss_frame_meta_t *m, char *buf, size_t n);

/* Detection flags by name: "touches_invalid", "touches_edge". */
const char *ss_proto_flag_name(int flag_bit);

/* ---- status ----------------------------------------------------------- */

/* One feed's counters, as the daemon keeps them (all since start). */
typedef struct ss_proto_feed_stats {
    char name[SS_NAME_MAX];
    char state[16];                 /* "running", "idle", "stopped", "broken" */
    char backend[16];               /* "cpu", "cuda", "" before the first frame */
    char source[128];               /* e.g. "zmq pull bind tcp://0.0.0.0:5555", "fits /data", "synth" */
    uint64_t received;              /* messages read from the source */
    uint64_t accepted;              /* frames that passed validation */
    uint64_t rejected;              /* sum of rejected_by */
    uint64_t rejected_by[SS_PR__COUNT];
    uint64_t dropped_queue;         /* accepted frames dropped because the queue was full */
    uint64_t processed;             /* frames through the pipeline */
    uint64_t status_count[SS_STATUS__COUNT]; /* processed frames by result status */
    uint64_t detections;
    uint64_t detections_truncated;  /* components found but not reported (detect.max) */
    uint64_t reg_failures;
    uint64_t resets;
    uint64_t published;             /* messages handed to the PUB socket */
    uint64_t pub_dropped;           /* messages a full PUB queue refused */
    int queue_depth, queue_capacity;
    double fps;                     /* frames/s processed over the last status period */
    uint64_t last_seq;
    double last_mjd;                /* NaN before the first frame */
    double stage_ms[SS_STAGE__COUNT]; /* last frame, ms; -1 = not measured */
    double total_ms;                /* last frame, wall ms */
    uint64_t device_mem_used, device_mem_total; /* bytes; 0/0 on the CPU */
} ss_proto_feed_stats_t;

typedef struct ss_proto_status {
    char version[32];               /* skysieve version */
    uint64_t topic_seq;             /* the message's number on its topic (PROTOCOL.md §2);
                                     * valid when has_topic_seq */
    int has_topic_seq;
    double mjd;                     /* when the message was made */
    double uptime_s;
    int n_feeds;
    ss_proto_feed_stats_t feeds[SS_PROTO_MAX_FEEDS];
} ss_proto_status_t;

/* Clear to zeros, NaN times and -1 stage times. */
void ss_proto_status_clear(ss_proto_status_t *st);
void ss_proto_feed_stats_clear(ss_proto_feed_stats_t *fs);

/* The status message body (topic "status"). */
int ss_proto_encode_status(const ss_proto_status_t *st, char *buf, size_t n);
/* The members of a status for control responses, as a JSON object text:
 * full = 0 gives version, time, uptime and a per-feed summary (name,
 * state, backend, source, processed, fps, last_seq, queue_depth); full = 1
 * every counter (the shape of the status message, without protocol/type). */
int ss_proto_encode_status_body(const ss_proto_status_t *st, int full, char *buf, size_t n);
/* Decode a status message [topic, body]. Counters absent from a summary
 * are left 0. */
ss_err_t ss_proto_decode_status(const ss_proto_part_t *parts, int n_parts,
                                const ss_proto_limits_t *lim, ss_proto_status_t *st,
                                ss_proto_error_t *err);
/* Decode a status body object alone (the members of a status/stats
 * control response, or a status message body). */
ss_err_t ss_proto_decode_status_body(const void *buf, size_t len, ss_proto_status_t *st,
                                     ss_proto_error_t *err);

/* ---- control (REQ/REP) ------------------------------------------------ */

typedef enum ss_ctl_cmd {
    SS_CTL_STATUS = 0,
    SS_CTL_STATS,
    SS_CTL_RESET,
    SS_CTL_RELOAD,
    SS_CTL_CONFIG,
    SS_CTL__COUNT
} ss_ctl_cmd_t;

const char *ss_ctl_cmd_name(ss_ctl_cmd_t c);     /* "status" "stats" "reset" "reload" "config" */

typedef struct ss_ctl_request {
    ss_ctl_cmd_t cmd;
    char feed[SS_NAME_MAX];         /* "" = every feed (or not applicable) */
} ss_ctl_request_t;

int ss_proto_encode_request(const ss_ctl_request_t *r, char *buf, size_t n);
ss_err_t ss_proto_decode_request(const void *buf, size_t len, ss_ctl_request_t *r,
                                 ss_proto_error_t *err);

/* A response: {"ok": true, "cmd": <cmd>, <members of body>} or
 * {"ok": false, "cmd": <cmd>, "error": <error>}. cmd may be NULL (a
 * request too malformed to name one: the member is left out). body is a
 * JSON object text whose members are appended (NULL or "" for none); it
 * must not carry "ok", "cmd" or "error" (-1). Not for the per-frame path:
 * it parses body to check it. */
int ss_proto_encode_response(const char *cmd, const char *body, char *buf, size_t n);
int ss_proto_encode_error_response(const char *cmd, const char *error, char *buf, size_t n);

typedef struct ss_ctl_response {
    int ok;
    char cmd[16];                   /* "" when absent */
    char error[SS_PROTO_ERR_MAX];   /* when !ok */
    char *body;                     /* the other members as a compact JSON object text (malloc'ed) */
} ss_ctl_response_t;

/* Decode a response; r->body is malloc'ed: free with ss_ctl_response_free. */
ss_err_t ss_proto_decode_response(const void *buf, size_t len, ss_ctl_response_t *r,
                                  ss_proto_error_t *err);
void ss_ctl_response_free(ss_ctl_response_t *r);

#ifdef __cplusplus
}
#endif
#endif
