/*
 * source_zmq.c — frames over ZeroMQ (proto/PROTOCOL.md "frame in"): a PULL
 * or SUB socket, bound or connected, read by this source's thread only.
 *
 * Limits, from the feed's "limits" section:
 *   ZMQ_MAXMSGSIZE  the largest pixel part (max_width·max_height·4 bytes,
 *                   or the header limit when larger): libzmq drops a peer
 *                   that sends a bigger part before it reaches us;
 *   parts           at most limits.max_parts (more: rejected, drained);
 *   total bytes     at most ss_feed_max_message_bytes (more: rejected);
 *   ZMQ_RCVHWM      source.zmq.rcvhwm messages;
 *   heartbeats      a peer silent for peer_timeout is dropped, and with it
 *                   a message it stopped sending half-way.
 * Messages, in the format source.zmq.format names (this protocol's, or
 * EPICS areaDetector's NDPluginZMQ: PROTOCOL.md §11), are received by
 * proto's one receive path
 * (ss_proto_recv_message): the header part is read as a zmq_msg_t (no
 * copy) and validated; the pixel part is received straight into a pooled
 * frame (the one copy, into pinned memory under CUDA), the mask part into
 * the pool's mask buffer; the parts and bytes are held to the limits
 * above. Every part of a rejected message is drained, so the next message
 * starts clean; the rejection is logged (rate-limited) and counted by
 * reason.
 *
 * A socket monitor reports the peers that connect and go: libzmq drops a
 * peer whose part exceeds ZMQ_MAXMSGSIZE (or that breaks the protocol)
 * without a word to the socket, so every disconnect is counted
 * (peer_disconnects) and logged with its address; and the connections
 * accepted into the open-files headroom (ss_fd_in_headroom) are shut
 * down at once (connections_refused).
 */
#include "feed.h"
#include "peers.h"
#include "source.h"

#include "proto/proto_zmq.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#define TAG "zmq-source"
#define REJECT_LOG_INTERVAL_S 5.0   /* log at most one rejection per interval (then a count) */

typedef struct zmq_src {
    ss_feed_t *feed;
    const atomic_int *stop;         /* the source's stop flag */
    const char *desc;               /* the source's description: frames' meta.source */
    void *sock;
    void *mon;                      /* PAIR: the socket monitor's events; NULL without one */
    uint64_t refused_logged;        /* connections shut for the open-files headroom */
    ss_proto_limits_t lim;
    ss_proto_format_t format;       /* source.zmq.format */
    size_t max_total;
    int max_parts;
    double last_log;
    uint64_t unlogged;
} zmq_src_t;

static void reject(zmq_src_t *z, const ss_proto_error_t *err)
{
    ss_stats_rejected(ss_feed_stats(z->feed), err->reason);
    double now = ss_now_mono();
    if (now - z->last_log >= REJECT_LOG_INTERVAL_S) {
        if (z->unlogged)
            SS_LOG(SS_LOG_WARNING, TAG, "feed %s: %llu more messages rejected",
                   ss_feed_name(z->feed), (unsigned long long)z->unlogged);
        SS_LOG(SS_LOG_WARNING, TAG, "feed %s: message rejected (%s): %s", ss_feed_name(z->feed),
               ss_proto_reason_name(err->reason), err->text);
        z->last_log = now;
        z->unlogged = 0;
    } else {
        z->unlogged++;
    }
}

/* The receive path's frame getter (proto_zmq.h): a frame of the feed's
 * pool, waiting for one while the source runs, labelled with where and
 * when it came. */
static ss_frame_t *take_frame(void *user)
{
    zmq_src_t *z = user;
    ss_frame_t *fr = ss_feed_frame_get(z->feed, z->stop);
    if (fr) {
        ss_strlcpy(fr->meta.source, z->desc, sizeof fr->meta.source);
        fr->meta.recv_mono = ss_now_mono();
    }
    return fr;
}

/* Receive one whole message (its first part is waiting) through proto's
 * receive path: a series message is counted and logged, a frame accepted
 * and queued, anything else rejected (counted by reason, logged). */
static void receive_one(zmq_src_t *z)
{
    ss_feed_t *f = z->feed;
    const ss_proto_recv_cfg_t cfg = {
        .lim = &z->lim,
        .format = z->format,
        .max_parts = z->max_parts,
        .max_bytes = z->max_total,
        .frame_get = take_frame,
        .user = z,
    };
    ss_proto_error_t err;
    ss_proto_input_t in;
    ss_frame_t *fr = NULL;
    ss_err_t e = ss_proto_recv_message(z->sock, ZMQ_DONTWAIT, &cfg, &in, &fr, &err);
    if (e != SS_OK && err.reason == SS_PR_OK)
        return;                     /* nothing received */
    if (e == SS_OK && in.type != SS_MSG_FRAME) {
        /* series_start / series_end: logged and counted, not a frame */
        SS_SINK_ADD(ss_feed_stats(f), series, 1);
        SS_LOG(SS_LOG_INFO, TAG, "feed %s: %s \"%s\"", ss_feed_name(f), ss_msg_type_name(in.type),
               in.meta.series);
        return;
    }
    ss_stats_received(ss_feed_stats(f));
    if (e != SS_OK) {
        if (e == SS_ERR_FULL)       /* the getter waits for a frame: none means stopping */
            snprintf(err.text, sizeof err.text, "shutting down");
        reject(z, &err);
        return;
    }
    ss_strlcpy(fr->meta.feed, ss_feed_name(f), sizeof fr->meta.feed);
    ss_stats_accepted(ss_feed_stats(f));
    ss_feed_submit(f, fr);
}

/* One socket-monitor event (two parts: 16-bit event, 32-bit value; then
 * the peer's address): a disconnect is counted and logged; a connection
 * accepted into the open-files headroom is shut down, counted, logged. */
static void monitor_event(zmq_src_t *z)
{
    uint16_t event;
    uint32_t value;
    char addr[256];
    if (!ss_zmq_monitor_next(z->mon, &event, &value, addr, sizeof addr))
        return;
    if (event == ZMQ_EVENT_ACCEPTED && ss_fd_refuse_in_headroom((int)value, SS_FD_SLICES_FRAMES)) {
        SS_SINK_ADD(ss_feed_stats(z->feed), connections_refused, 1);
        if (z->refused_logged++ % 100 == 0)
            SS_LOG(SS_LOG_WARNING, TAG, "feed %s: open files near the limit: connection from %s "
                   "closed (%llu so far; logged every 100th)", ss_feed_name(z->feed),
                   addr[0] ? addr : "?", (unsigned long long)z->refused_logged);
    } else if (event == ZMQ_EVENT_DISCONNECTED) {
        SS_SINK_ADD(ss_feed_stats(z->feed), peer_disconnects, 1);
        SS_LOG(SS_LOG_INFO, TAG, "feed %s: peer %s disconnected (a part over the size limit "
               "also ends a connection)", ss_feed_name(z->feed), addr[0] ? addr : "?");
    }
}

/* Stop the monitor, then close both sockets (each at most once). */
static void close_sockets(zmq_src_t *z)
{
    if (z->sock && z->mon)
        zmq_socket_monitor(z->sock, NULL, 0);
    if (z->mon)
        zmq_close(z->mon);
    if (z->sock)
        zmq_close(z->sock);
    z->mon = z->sock = NULL;
}

static const char *zmq_run(void *impl)
{
    zmq_src_t *z = impl;
    while (!atomic_load(z->stop)) {
        zmq_pollitem_t it[2] = { { .socket = z->sock, .events = ZMQ_POLLIN },
                                 { .socket = z->mon, .events = ZMQ_POLLIN } };
        int rc = zmq_poll(it, z->mon ? 2 : 1, (long)(SS_POLL_S * 1e3));
        if (rc < 0) {
            if (zmq_errno() == EINTR)
                continue;
            SS_LOG(SS_LOG_ERR, TAG, "feed %s: poll: %s", ss_feed_name(z->feed),
                   zmq_strerror(zmq_errno()));
            SS_SINK_ADD(ss_feed_stats(z->feed), source_errors, 1);
            break;
        }
        if (rc > 0 && (it[0].revents & ZMQ_POLLIN))
            receive_one(z);
        if (rc > 0 && z->mon && (it[1].revents & ZMQ_POLLIN))
            monitor_event(z);
    }
    /* stop intake at once: messages still in the socket are not accepted */
    close_sockets(z);
    return NULL;
}

static void zmq_src_close(void **impl)
{
    zmq_src_t *z = *impl;
    if (z)
        close_sockets(z);
    free(z);
    *impl = NULL;
}

/* Watch the frame socket's disconnects on an inproc PAIR (name unique per
 * source). Without it (an error) the source still runs, uncounted. */
static void monitor_open(zmq_src_t *z, void *zctx, const char *feed)
{
    char ep[96];
    snprintf(ep, sizeof ep, "inproc://skysieve-monitor-%s-%p", feed, (void *)z);
    if (zmq_socket_monitor(z->sock, ep, ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_ACCEPTED) != 0) {
        SS_LOG(SS_LOG_WARNING, TAG, "feed %s: no socket monitor (%s): disconnects are not counted",
               feed, zmq_strerror(zmq_errno()));
        return;
    }
    z->mon = zmq_socket(zctx, ZMQ_PAIR);
    int zero = 0;
    if (z->mon)
        zmq_setsockopt(z->mon, ZMQ_LINGER, &zero, sizeof zero);
    if (!z->mon || zmq_connect(z->mon, ep) != 0) {
        SS_LOG(SS_LOG_WARNING, TAG, "feed %s: no socket monitor (%s): disconnects are not counted",
               feed, zmq_strerror(zmq_errno()));
        if (z->mon)
            zmq_close(z->mon);
        z->mon = NULL;
        zmq_socket_monitor(z->sock, NULL, 0);
    }
}

static void *zmq_src_open(ss_source_t *s, char *desc, size_t desc_n, char *err, size_t n)
{
    ss_feed_t *f = ss_source_feed(s);
    const ss_source_env_t *env = ss_source_env(s);
    void *zctx = env->zctx;
    const ss_feed_cfg_t *c = ss_feed_cfg(f);
    const ss_zmq_source_cfg_t *zc = &c->zmq;
    zmq_src_t *z = calloc(1, sizeof *z);
    if (!z) {
        snprintf(err, n, "out of memory");
        return NULL;
    }
    z->feed = f;
    z->stop = ss_source_stop_flag(s);
    z->desc = ss_source_desc(s);
    ss_feed_limits(f, &z->lim);
    z->format = zc->format == SS_ZMQ_FORMAT_ADZMQ ? SS_PROTO_FMT_ADZMQ : SS_PROTO_FMT_SKYSIEVE;
    z->max_total = ss_feed_max_message_bytes(c);
    z->max_parts = c->max_parts;
    z->sock = zmq_socket(zctx, zc->socket == SS_ZMQ_SUB ? ZMQ_SUB : ZMQ_PULL);
    if (!z->sock) {
        snprintf(err, n, "feed %s: socket: %s", c->name, zmq_strerror(zmq_errno()));
        free(z);
        return NULL;
    }
    size_t biggest_part = SS_MAX(ss_feed_max_pixel_bytes(c), (size_t)c->max_header_bytes);
    int64_t maxmsg = (int64_t)biggest_part;
    int hwm = zc->rcvhwm, zero = 0;
    zmq_setsockopt(z->sock, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg);
    zmq_setsockopt(z->sock, ZMQ_RCVHWM, &hwm, sizeof hwm);
    zmq_setsockopt(z->sock, ZMQ_LINGER, &zero, sizeof zero);
    ss_zmq_heartbeats(z->sock, env->peer_timeout);
    if (zc->bind && env->secure(env->user, z->sock, c->name, err, n) != 0) {
        zmq_close(z->sock);
        free(z);
        return NULL;
    }
    if (zc->socket == SS_ZMQ_SUB)
        zmq_setsockopt(z->sock, ZMQ_SUBSCRIBE, zc->subscribe, strlen(zc->subscribe));
    int rc = zc->bind ? zmq_bind(z->sock, zc->endpoint) : zmq_connect(z->sock, zc->endpoint);
    if (rc != 0) {
        snprintf(err, n, "feed %s: cannot %s %s: %s", c->name, zc->bind ? "bind" : "connect",
                 zc->endpoint, zmq_strerror(zmq_errno()));
        zmq_close(z->sock);
        free(z);
        return NULL;
    }
    monitor_open(z, zctx, c->name);
    snprintf(desc, desc_n, "zmq %s %s %s%s", zc->socket == SS_ZMQ_SUB ? "sub" : "pull",
             zc->bind ? "bind" : "connect", zc->endpoint,
             z->format == SS_PROTO_FMT_ADZMQ ? " (adzmq)" : "");
    return z;
}

const ss_source_ops_t ss_source_zmq_ops = {
    .name = "zmq",
    .open = zmq_src_open,
    .run = zmq_run,
    .close = zmq_src_close,
    .masks = 1,         /* PROTOCOL.md §3's optional mask part */
};
