/*
 * proto_zmq.c — multipart receive/send over ZeroMQ for the protocol
 * messages (proto_zmq.h). Validation stays in proto.c; this file only
 * moves parts, caps their sizes and keeps message boundaries.
 */
#include "proto_zmq.h"

#include <errno.h>
#include <string.h>

static ss_err_t map_errno(int e)
{
    switch (e) {
    case EAGAIN:
    case EINTR: return SS_ERR_TIMEOUT;
    case ETERM: return SS_ERR_STOPPED;
    default: return SS_ERR_IO;
    }
}

static ss_err_t io_error(ss_proto_error_t *err, int e)
{
    ss_err_t code = map_errno(e);
    if (err) {
        err->reason = SS_PR_OK;
        snprintf(err->text, sizeof err->text, "zmq: %s", zmq_strerror(e));
    }
    return code;
}

static int more_parts(void *sock)
{
    int more = 0;
    size_t sz = sizeof more;
    if (zmq_getsockopt(sock, ZMQ_RCVMORE, &more, &sz) != 0)
        return 0;
    return more;
}

/* Receive and discard the rest of the current message; returns how many
 * parts were discarded. Once the first part of a message has arrived,
 * ZeroMQ has all of it, so this never waits. */
static int drain(void *sock)
{
    int n = 0;
    while (more_parts(sock)) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        int rc = zmq_msg_recv(&m, sock, 0);
        zmq_msg_close(&m);
        if (rc < 0)
            break;
        n++;
    }
    return n;
}

int ss_proto_set_maxmsgsize(void *sock, const ss_proto_limits_t *lim)
{
    size_t cap = ss_proto_max_data_bytes(lim);
    if (lim->max_header_bytes > cap)
        cap = lim->max_header_bytes;
    int64_t v = (int64_t)cap;
    return zmq_setsockopt(sock, ZMQ_MAXMSGSIZE, &v, sizeof v);
}

/* Receive the next part into buf (at most cap bytes kept); returns the
 * part's full size (which may exceed cap: the excess is cut off) or -1. */
static long recv_into(void *sock, void *buf, size_t cap)
{
    zmq_msg_t m;
    zmq_msg_init(&m);
    int rc = zmq_msg_recv(&m, sock, 0);
    if (rc < 0) {
        zmq_msg_close(&m);
        return -1;
    }
    size_t n = zmq_msg_size(&m);
    memcpy(buf, zmq_msg_data(&m), n < cap ? n : cap);
    zmq_msg_close(&m);
    return (long)n;
}

ss_err_t ss_proto_recv_input(void *sock, int flags, const ss_proto_limits_t *lim,
                             ss_frame_pool_t *pool, ss_proto_input_t *in, ss_frame_t **frame,
                             ss_proto_error_t *err)
{
    *frame = NULL;
    zmq_msg_t hdr;
    zmq_msg_init(&hdr);
    if (zmq_msg_recv(&hdr, sock, flags) < 0) {
        int e = zmq_errno();
        zmq_msg_close(&hdr);
        return io_error(err, e);
    }
    int more = zmq_msg_more(&hdr);
    ss_err_t rc = ss_proto_parse_input(zmq_msg_data(&hdr), zmq_msg_size(&hdr), lim, in, err);
    zmq_msg_close(&hdr);
    if (rc != SS_OK) {
        drain(sock);
        return rc;
    }
    if (in->type != SS_MSG_FRAME) {
        int extra = more ? drain(sock) : 0;
        return ss_proto_check_parts(in, 1 + extra, 0, 0, err);
    }
    if (!more)
        return ss_proto_check_parts(in, 1, 0, 0, err);

    ss_frame_t *f = ss_frame_pool_get(pool);
    if (!f) {
        drain(sock);
        err->reason = SS_PR_NO_BUFFER;
        snprintf(err->text, sizeof err->text, "no free frame buffer (every pool frame is in use)");
        return SS_ERR_FULL;
    }
    rc = ss_proto_frame_prepare(in, f, err);
    if (rc != SS_OK) {
        ss_frame_pool_put(f);
        drain(sock);
        return rc;
    }
    /* the pixel part, straight into the pooled buffer */
    size_t want = ss_proto_input_data_bytes(in);
    long data_len = recv_into(sock, f->pixels, want);
    if (data_len < 0) {
        int e = zmq_errno();
        ss_frame_pool_put(f);
        return io_error(err, e);
    }
    int n_parts = 2;
    long mask_len = 0;
    uint8_t *mask = ss_frame_mask_buffer(f);
    size_t npix = (size_t)in->width * (size_t)in->height;
    if (more_parts(sock)) {
        mask_len = recv_into(sock, mask, npix);
        if (mask_len < 0) {
            int e = zmq_errno();
            ss_frame_pool_put(f);
            return io_error(err, e);
        }
        n_parts = 3 + drain(sock);
    }
    rc = ss_proto_check_parts(in, n_parts, (size_t)data_len, (size_t)mask_len, err);
    if (rc == SS_OK && n_parts == 3)
        rc = ss_proto_check_mask(mask, in->width, in->height, err);
    if (rc != SS_OK) {
        ss_frame_pool_put(f);
        return rc;
    }
    if (n_parts == 3)
        f->valid = mask;
    *frame = f;
    return SS_OK;
}

ss_err_t ss_proto_recv_parts(void *sock, int flags, ss_proto_rx_t *rx)
{
    rx->n = rx->total = 0;
    for (;;) {
        zmq_msg_t *m = &rx->msg[rx->n];
        zmq_msg_init(m);
        if (zmq_msg_recv(m, sock, rx->total == 0 ? flags : 0) < 0) {
            int e = zmq_errno();
            zmq_msg_close(m);
            /* a failure after the first part cannot be EAGAIN: the whole
             * message had arrived; report it, keep nothing */
            ss_proto_rx_close(rx);
            return map_errno(e);
        }
        rx->part[rx->n].data = zmq_msg_data(m);
        rx->part[rx->n].len = zmq_msg_size(m);
        rx->n++;
        rx->total++;
        int more = zmq_msg_more(m);
        if (!more)
            return SS_OK;
        if (rx->n == SS_PROTO_RX_MAX) {
            rx->total += drain(sock);
            return SS_OK;
        }
    }
}

void ss_proto_rx_close(ss_proto_rx_t *rx)
{
    for (int i = 0; i < rx->n; i++)
        zmq_msg_close(&rx->msg[i]);
    rx->n = 0;
}

ss_err_t ss_proto_send_parts(void *sock, const ss_proto_part_t *parts, int n, int flags)
{
    for (int i = 0; i < n; i++) {
        int f = flags | (i + 1 < n ? ZMQ_SNDMORE : 0);
        /* only the first part can find the queue full; after it ZeroMQ
         * takes the rest of the message */
        if (zmq_send(sock, parts[i].data, parts[i].len, i == 0 ? f : f & ~ZMQ_DONTWAIT) < 0) {
            int e = zmq_errno();
            if (e == EAGAIN)
                return (flags & ZMQ_DONTWAIT) ? SS_ERR_FULL : SS_ERR_TIMEOUT;
            return map_errno(e);
        }
    }
    return SS_OK;
}
