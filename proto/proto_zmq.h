/*
 * proto_zmq.h — ZeroMQ multipart send/receive for the messages of
 * proto.h, with the size caps the protocol implies.
 *
 * Receiving a frame (ss_proto_recv_message, the one receive path of
 * frame messages): the header part is validated before anything else is
 * taken; only then is a pool frame taken and the pixel part received
 * straight into its buffer (and the mask into the frame's mask buffer).
 * A rejected message is always consumed whole (the remaining parts are
 * drained), so that the next receive starts at a message boundary.
 *
 * Sockets are used from one thread at a time (ZeroMQ's rule); these
 * helpers keep no state of their own.
 */
#ifndef SS_PROTO_ZMQ_H
#define SS_PROTO_ZMQ_H

#include <zmq.h>

#include "proto.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SS_PROTO_RX_MAX 8   /* parts kept by ss_proto_recv_parts; more are drained */

/* Set ZMQ_MAXMSGSIZE on a receiving socket from the limits: no single part
 * may exceed the largest pixel part the limits admit (nor the header cap,
 * when that is larger). ZeroMQ then drops the peer's connection on a
 * larger part, before it is buffered. Returns 0, or -1 (errno set). */
int ss_proto_set_maxmsgsize(void *sock, const ss_proto_limits_t *lim);

/* What one receive of an input message enforces, and where a frame goes. */
typedef struct ss_proto_recv_cfg {
    const ss_proto_limits_t *lim;   /* the header's limits */
    ss_proto_format_t format;       /* the header's format (0: this protocol's) */
    int max_parts;                  /* parts of a frame message (config limits.max_parts);
                                     * 0: the protocol's own count only */
    size_t max_bytes;               /* all parts of a frame message together; 0: no cap */
    /* A free frame of the receiver's pool for a frame message whose header
     * validated (given back with ss_frame_pool_put); NULL: none. */
    ss_frame_t *(*frame_get)(void *user);
    void *user;
} ss_proto_recv_cfg_t;

/* The one receive path of input messages (frame, series_start or
 * series_end; with cfg->format SS_PROTO_FMT_ADZMQ, NDPluginZMQ's
 * [header, array] read as a frame), for the daemon's ZeroMQ source, the
 * tools and the tests.
 * flags applies to the first part (0 blocks up to the socket's
 * ZMQ_RCVTIMEO; ZMQ_DONTWAIT does not block). The header is validated
 * first; only then is a frame taken (cfg->frame_get) and the pixel part
 * received straight into it (the one copy), the mask into its pool's
 * mask buffer; then the message's parts and bytes are held to cfg.
 *  - SS_OK: *in is the validated header; for a frame, *frame has its
 *    pixels (and mask: (*frame)->valid) filled, and is the caller's; for
 *    series messages *frame is NULL.
 *  - SS_ERR_TIMEOUT / SS_ERR_STOPPED / SS_ERR_IO with err->reason
 *    SS_PR_OK: nothing was received (EAGAIN or EINTR; the context was
 *    terminated; another socket error: err->text has zmq_strerror).
 *  - the same codes with SS_PR_MISSING_PART: a part after the header
 *    was lost; the message was consumed.
 *  - SS_ERR_FULL: frame_get had no frame (err->reason SS_PR_NO_BUFFER);
 *    the message was consumed.
 *  - SS_ERR_FORMAT / SS_ERR_SIZE / SS_ERR_UNSUPPORTED: rejected, with the
 *    reason and the documented text in err; the message was consumed.
 * Every part of a message is consumed, so that the next receive starts at
 * a message boundary. A source label for the frame is the caller's to set
 * (in frame_get: ss_proto_frame_prepare keeps meta.source and recv_mono). */
ss_err_t ss_proto_recv_message(void *sock, int flags, const ss_proto_recv_cfg_t *cfg,
                               ss_proto_input_t *in, ss_frame_t **frame, ss_proto_error_t *err);

/* ss_proto_recv_message with frames from pool (ss_frame_pool_get: no
 * waiting) and the header's limits alone. */
ss_err_t ss_proto_recv_input(void *sock, int flags, const ss_proto_limits_t *lim,
                             ss_frame_pool_t *pool, ss_proto_input_t *in, ss_frame_t **frame,
                             ss_proto_error_t *err);

/* A received multipart message: up to SS_PROTO_RX_MAX parts kept as
 * zmq messages (part[i] points into them, no copy), total = the number of
 * parts the message had. Close with ss_proto_rx_close. */
typedef struct ss_proto_rx {
    zmq_msg_t msg[SS_PROTO_RX_MAX];
    ss_proto_part_t part[SS_PROTO_RX_MAX];
    int n;                          /* parts kept */
    int total;                      /* parts in the message */
} ss_proto_rx_t;

/* Receive a whole message (for subscribers and control sockets): SS_OK,
 * or SS_ERR_TIMEOUT / SS_ERR_STOPPED / SS_ERR_IO as ss_proto_recv_message
 * says. */
ss_err_t ss_proto_recv_parts(void *sock, int flags, ss_proto_rx_t *rx);
void ss_proto_rx_close(ss_proto_rx_t *rx);

/* Send n parts as one message. flags: 0, or ZMQ_DONTWAIT so that a full
 * queue returns SS_ERR_FULL with nothing sent (ZeroMQ sends all parts of
 * a message or none). Note that a PUB socket never reports a full queue
 * unless ZMQ_XPUB_NODROP is set: without it, ZeroMQ drops silently.
 * SS_ERR_STOPPED when the context was terminated, SS_ERR_TIMEOUT when
 * ZMQ_SNDTIMEO expired, SS_ERR_IO otherwise. */
ss_err_t ss_proto_send_parts(void *sock, const ss_proto_part_t *parts, int n, int flags);

#ifdef __cplusplus
}
#endif
#endif
