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
 * parts were discarded and adds their sizes to *bytes (NULL: not
 * counted). Once the first part of a message has arrived, ZeroMQ has all
 * of it, so this never waits. */
static int drain(void *sock, size_t *bytes)
{
    int n = 0;
    while (more_parts(sock)) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        int rc = zmq_msg_recv(&m, sock, 0);
        if (bytes && rc >= 0)
            *bytes += zmq_msg_size(&m);
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

/* A part after the header failed to arrive (what: "pixel", "mask"): the
 * frame goes back, the rest of the message is drained. */
static ss_err_t part_lost(void *sock, ss_frame_t *f, const char *what, ss_proto_error_t *err)
{
    const int e = zmq_errno();
    ss_frame_pool_put(f);
    drain(sock, NULL);
    err->reason = SS_PR_MISSING_PART;
    snprintf(err->text, sizeof err->text, "%s part lost: %s", what, zmq_strerror(e));
    return map_errno(e);
}

/* The parts and bytes of a whole frame message against cfg's caps. */
static ss_err_t check_caps(const ss_proto_recv_cfg_t *cfg, int parts, size_t bytes,
                           ss_proto_error_t *err)
{
    if (cfg->max_parts > 0 && parts > cfg->max_parts) {
        err->reason = SS_PR_TOO_MANY_PARTS;
        snprintf(err->text, sizeof err->text, "too many parts: %d (limits.max_parts is %d)", parts,
                 cfg->max_parts);
        return SS_ERR_SIZE;
    }
    if (cfg->max_bytes > 0 && bytes > cfg->max_bytes) {
        err->reason = SS_PR_TOO_LONG;
        snprintf(err->text, sizeof err->text, "message too large: %zu bytes (maximum %zu)", bytes,
                 cfg->max_bytes);
        return SS_ERR_SIZE;
    }
    return SS_OK;
}

/* The parts after a frame's validated header, into f (prepared): the
 * pixels, the optional mask, the rest drained; then the whole message
 * checked. *bytes holds the header's size and gets the rest's. SS_OK
 * (f is then the caller's), or an error with f given back. */
static ss_err_t recv_frame_parts(void *sock, const ss_proto_recv_cfg_t *cfg,
                                 const ss_proto_input_t *in, ss_frame_t *f, size_t *bytes,
                                 ss_proto_error_t *err)
{
    /* the pixel part, straight into the pooled buffer (its real size even
     * when it did not fit) */
    int n = zmq_recv(sock, f->pixels, f->capacity, 0);
    if (n < 0)
        return part_lost(sock, f, "pixel", err);
    int parts = 2;
    const size_t data_len = (size_t)n;
    size_t mask_len = 0;
    *bytes += data_len;
    uint8_t *mask = NULL;
    if (in->format == SS_PROTO_FMT_SKYSIEVE && more_parts(sock)) {
        mask = ss_frame_mask_buffer(f);
        n = zmq_recv(sock, mask, mask ? (size_t)in->width * (size_t)in->height : 0, 0);
        if (n < 0)
            return part_lost(sock, f, "mask", err);
        parts++;
        mask_len = (size_t)n;
        *bytes += mask_len;
    }
    parts += drain(sock, bytes);
    ss_err_t rc = check_caps(cfg, parts, *bytes, err);
    if (rc == SS_OK)
        rc = ss_proto_check_parts(in, parts, data_len, mask_len, err);
    if (rc == SS_OK && parts == 3 && mask)
        rc = ss_proto_check_mask(mask, in->width, in->height, err);
    if (rc != SS_OK) {
        ss_frame_pool_put(f);
        return rc;
    }
    if (parts == 3)
        f->valid = mask;
    return SS_OK;
}

ss_err_t ss_proto_recv_message(void *sock, int flags, const ss_proto_recv_cfg_t *cfg,
                               ss_proto_input_t *in, ss_frame_t **frame, ss_proto_error_t *err)
{
    *frame = NULL;
    err->reason = SS_PR_OK;
    err->text[0] = '\0';
    zmq_msg_t hdr;
    zmq_msg_init(&hdr);
    if (zmq_msg_recv(&hdr, sock, flags) < 0) {
        int e = zmq_errno();
        zmq_msg_close(&hdr);
        return io_error(err, e);
    }
    const int more = zmq_msg_more(&hdr);
    size_t bytes = zmq_msg_size(&hdr);
    ss_err_t rc = ss_proto_parse_header(cfg->format, zmq_msg_data(&hdr), bytes, cfg->lim, in, err);
    zmq_msg_close(&hdr);
    if (rc != SS_OK) {
        drain(sock, NULL);
        return rc;
    }
    if (in->type != SS_MSG_FRAME || !more) {
        const int extra = more ? drain(sock, NULL) : 0;
        return ss_proto_check_parts(in, 1 + extra, 0, 0, err);
    }
    ss_frame_t *f = cfg->frame_get(cfg->user);
    if (!f) {
        drain(sock, NULL);
        err->reason = SS_PR_NO_BUFFER;
        snprintf(err->text, sizeof err->text, "no free frame buffer (every pool frame is in use)");
        return SS_ERR_FULL;
    }
    rc = ss_proto_frame_prepare(in, f, err);
    if (rc != SS_OK) {
        ss_frame_pool_put(f);
        drain(sock, NULL);
        return rc;
    }
    rc = recv_frame_parts(sock, cfg, in, f, &bytes, err);
    if (rc == SS_OK)
        *frame = f;
    return rc;
}

static ss_frame_t *pool_get(void *pool)
{
    return ss_frame_pool_get(pool);
}

ss_err_t ss_proto_recv_input(void *sock, int flags, const ss_proto_limits_t *lim,
                             ss_frame_pool_t *pool, ss_proto_input_t *in, ss_frame_t **frame,
                             ss_proto_error_t *err)
{
    const ss_proto_recv_cfg_t cfg = { .lim = lim, .frame_get = pool_get, .user = pool };
    return ss_proto_recv_message(sock, flags, &cfg, in, frame, err);
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
            rx->total += drain(sock, NULL);
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
