/*
 * source_indi.c — frames from an INDI camera: the BLOBs (FITS images)
 * that indiserver sends its clients (source.type "indi").
 *
 * A client connection to indiserver: the local socket (source.indi.local,
 * an abstract unix socket) when the host is this machine and the socket
 * answers, else TCP (source.indi.host, source.indi.port). On connecting
 * it sends only
 *   <getProperties version="1.7"/>
 *   <enableBLOB device="DEV">Only</enableBLOB>
 * and so receives every frame another client (Ekos, a scheduler) has the
 * camera take, without ever commanding it (passive, the default). With
 * source.indi.active it also sets CCD_EXPOSURE to source.indi.exposure,
 * again after each frame (and after exposure + ACTIVE_GRACE_S without
 * one), for a station with no other client.
 *
 * The stream is parsed by indi_stream.h (expat): over TCP a BLOB's base64
 * text is decoded as it arrives into the source's BLOB buffer (grown to
 * the largest BLOB, at most the feed's limits allow: two bytes per pixel
 * byte of the widest frame, plus headers); over the local socket a BLOB
 * comes attached="true", its bytes in a memfd passed with SCM_RIGHTS:
 * mapped, read, unmapped, no copy. Either way the FITS (.fits, or
 * tile-compressed .fits.fz, truncated to len) is opened from memory by
 * pipeline/frame_fits.h and read into a pooled frame (ss_source_fits_frame:
 * the same limits and rejections as a FITS file).
 *
 * A connection that fails or ends is retried after a back-off that
 * doubles from RETRY_MIN_S to source.indi.retry_max (back to RETRY_MIN_S
 * after a connection that lasted STABLE_S). A malformed stream (XML,
 * base64, a BLOB without its memfd) closes the connection, which is then
 * retried. Counted (the feed's final log line, "indi"): indi_connects,
 * indi_connect_failures, indi_disconnects, indi_malformed; frames that
 * cannot be read are rejected (bad_value), frames over the limits too
 * (too_long, dimensions), and a BLOB the connection's end (or a malformed
 * stream) cut short is received and rejected (data_size): never handed
 * to the FITS reader.
 */
#include "feed.h"
#include "source.h"

#include "indi_stream.h"
#include "pipeline/frame_fits.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define TAG "indi-source"
#define RETRY_MIN_S 0.1
#define STABLE_S 5.0                /* a connection this old resets the back-off */
#define CONNECT_TIMEOUT_S 3.0
#define ACTIVE_GRACE_S 30.0         /* active: a frame this late past the exposure: ask again */
#define RX_BYTES 65536
#define MAX_FDS 16                  /* memfds received and not yet taken */
#define HEADER_BYTES ((size_t)64 * 2880)

typedef struct indi_src {
    ss_feed_t *feed;
    const atomic_int *stop;         /* the source's stop flag */
    const char *desc;               /* the source's description: frames' meta.source */
    ss_indi_source_cfg_t cfg;
    ss_indi_stream_t *xml;
    int fd;                         /* the connection, -1: none */
    int local;                      /* it is the local socket */
    double connected_at, next_try, backoff;
    uint8_t *blob;                  /* TCP: the BLOB being decoded */
    size_t blob_cap, blob_max;
    int fds[MAX_FDS];               /* memfds received, in order */
    int n_fds;
    char fault[3 * SS_INDI_NAME_MAX + 64];                /* the stream's fault seen by a callback ("" none) */
    double asked_at;                /* active: when the last exposure was asked; 0 = ask now */
    uint64_t arrivals;
    char rx[RX_BYTES];
} indi_src_t;

/* ---- frames -------------------------------------------------------------- */

static void reject(indi_src_t *s, ss_proto_reason_t why, const char *text)
{
    ss_stats_rejected(ss_feed_stats(s->feed), why);
    SS_LOG(SS_LOG_WARNING, TAG, "feed %s: frame rejected (%s): %s", ss_feed_name(s->feed),
           ss_proto_reason_name(why), text);
}

/* One BLOB's n bytes at data: a FITS read into a frame and queued, or
 * rejected (counted, logged). */
static void take_blob(indi_src_t *s, const ss_indi_blob_t *b, const uint8_t *data, size_t n)
{
    char what[3 * SS_INDI_NAME_MAX + 16], err[600];
    snprintf(what, sizeof what, "%s.%s (%s)", b->device, b->vector, b->format);
    ss_stats_received(ss_feed_stats(s->feed));
    s->asked_at = 0.0;              /* active: the next exposure */
    if (strcmp(b->format, ".fits") != 0 && strcmp(b->format, ".fits.fz") != 0) {
        reject(s, SS_PR_BAD_VALUE, "format is not .fits or .fits.fz (set the camera's "
               "CCD_TRANSFER_FORMAT to FITS)");
        return;
    }
    ss_fits_image_t *im;
    if (ss_fits_image_open_mem(data, n, what, &im, err, sizeof err) != SS_OK) {
        reject(s, SS_PR_BAD_VALUE, err);
        return;
    }
    int code;
    ss_frame_t *fr = ss_source_fits_frame(s->feed, &im, what, s->stop, &s->arrivals, &code);
    if (!fr)
        return;
    ss_strlcpy(fr->meta.source, s->desc, sizeof fr->meta.source);
    fr->meta.input[0] = '\0';       /* not a file */
    ss_stats_accepted(ss_feed_stats(s->feed));
    SS_LOG(SS_LOG_DEBUG, TAG, "feed %s: %s %zu bytes%s (%dx%d %s)", ss_feed_name(s->feed), what,
           n, b->attached ? " attached" : "", fr->width, fr->height, ss_dtype_name(fr->dtype));
    ss_feed_submit(s->feed, fr);
}

/* The stream's blob_buffer: the BLOB buffer, grown to len (never past the
 * limit: then the BLOB is refused, its text skipped). */
static uint8_t *blob_buffer(void *user, const ss_indi_blob_t *b)
{
    indi_src_t *s = user;
    char text[3 * SS_INDI_NAME_MAX + 200];
    if (b->len > s->blob_max || b->len == 0) {
        ss_stats_received(ss_feed_stats(s->feed));
        snprintf(text, sizeof text, "%s.%s: BLOB of %zu bytes (the limits allow 1 to %zu)",
                 b->device, b->vector, b->len, s->blob_max);
        reject(s, SS_PR_TOO_LONG, text);
        return NULL;
    }
    if (b->len > s->blob_cap) {
        uint8_t *nb = realloc(s->blob, b->len);
        if (!nb) {
            ss_stats_received(ss_feed_stats(s->feed));
            reject(s, SS_PR_NO_BUFFER, "out of memory for the BLOB");
            return NULL;
        }
        s->blob = nb;
        s->blob_cap = b->len;
    }
    return s->blob;
}

/* An attached BLOB: its memfd, the oldest received, mapped and read. */
static void take_attached(indi_src_t *s, const ss_indi_blob_t *b)
{
    char text[3 * SS_INDI_NAME_MAX + 200];
    if (s->n_fds == 0) {
        snprintf(s->fault, sizeof s->fault, "attached BLOB %s.%s came without its memfd",
                 b->device, b->vector);
        return;
    }
    const int fd = s->fds[0];
    memmove(s->fds, s->fds + 1, (size_t)--s->n_fds * sizeof *s->fds);
    struct stat st;
    if (!b->wanted) {
        close(fd);
        return;
    }
    if (b->len == 0 || b->len > s->blob_max || fstat(fd, &st) != 0 ||
        (uint64_t)st.st_size < (uint64_t)b->len) {
        ss_stats_received(ss_feed_stats(s->feed));
        snprintf(text, sizeof text, "%s.%s: attached BLOB of len %zu (memfd of %lld bytes, the "
                 "limits allow 1 to %zu)", b->device, b->vector, b->len,
                 fstat(fd, &st) == 0 ? (long long)st.st_size : -1LL, s->blob_max);
        reject(s, SS_PR_DATA_SIZE, text);
        close(fd);
        return;
    }
    void *p = mmap(NULL, b->len, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
        ss_stats_received(ss_feed_stats(s->feed));
        snprintf(text, sizeof text, "cannot map the attached BLOB: %s", strerror(errno));
        reject(s, SS_PR_NO_BUFFER, text);
        return;
    }
    take_blob(s, b, p, b->len);
    munmap(p, b->len);
}

static void blob_done(void *user, const ss_indi_blob_t *b, const uint8_t *data, size_t n)
{
    indi_src_t *s = user;
    if (b->attached)
        take_attached(s, b);
    else
        take_blob(s, b, data, n);
}

/* ---- the connection ------------------------------------------------------ */

static int is_local_host(const char *h)
{
    return !h[0] || strcmp(h, "localhost") == 0 || strcmp(h, "127.0.0.1") == 0 ||
           strcmp(h, "::1") == 0;
}

/* Connect to the abstract unix socket name: the fd, or -1. */
static int connect_local(const char *name)
{
    struct sockaddr_un a = { .sun_family = AF_UNIX };
    const size_t n = strlen(name);
    if (n + 1 > sizeof a.sun_path)
        return -1;
    memcpy(a.sun_path + 1, name, n);     /* sun_path[0] = 0: abstract */
    const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a,
                           (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n)) == 0)
        return fd;
    if (fd >= 0)
        close(fd);
    return -1;
}

/* Connect fd to ai within CONNECT_TIMEOUT_S: 0, or -1 with errno set. */
static int connect_within(int fd, const struct addrinfo *ai)
{
    const int fl = fcntl(fd, F_GETFL);
    fcntl(fd, F_SETFL, fl | O_NONBLOCK);
    int rc = connect(fd, ai->ai_addr, ai->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
        struct pollfd p = { .fd = fd, .events = POLLOUT };
        int e = 0;
        socklen_t el = sizeof e;
        rc = poll(&p, 1, (int)(CONNECT_TIMEOUT_S * 1e3));
        if (rc == 0)
            errno = ETIMEDOUT;
        rc = rc == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el) == 0 && e == 0 ? 0 : -1;
        if (e)
            errno = e;
    }
    fcntl(fd, F_SETFL, fl);
    return rc;
}

/* Connect over TCP: the fd, or -1 with the reason in why. */
static int connect_tcp(const char *host, int port, char *why, size_t n)
{
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *res;
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    int rc = getaddrinfo(host[0] ? host : "localhost", ps, &hints, &res);
    if (rc != 0) {
        snprintf(why, n, "%s: %s", host, gai_strerror(rc));
        return -1;
    }
    int fd = -1;
    snprintf(why, n, "%s:%d: no address", host, port);
    for (const struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd >= 0 && connect_within(fd, ai) != 0) {
            snprintf(why, n, "%s:%d: %s", host, port, strerror(errno));
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    return fd;
}

static int send_text(indi_src_t *s, const char *text)
{
    size_t n = strlen(text), off = 0;
    while (off < n) {
        ssize_t k = send(s->fd, text + off, n - off, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        off += (size_t)k;
    }
    return 0;
}

/* What the source asks of indiserver on connecting: the properties (so
 * that it knows us as a client) and the device's BLOBs, only them. */
static int send_hello(indi_src_t *s)
{
    char msg[256 + SS_INDI_CFG_NAME_MAX];
    if (s->cfg.device[0])
        snprintf(msg, sizeof msg, "<getProperties version=\"1.7\"/>\n"
                 "<enableBLOB device=\"%s\">Only</enableBLOB>\n", s->cfg.device);
    else
        snprintf(msg, sizeof msg, "<getProperties version=\"1.7\"/>\n<enableBLOB>Only</enableBLOB>\n");
    return send_text(s, msg);
}

/* Active mode: ask for the next exposure when one is due. */
static int ask_exposure(indi_src_t *s)
{
    const double now = ss_now_mono();
    if (!s->cfg.active || (s->asked_at > 0.0 && now - s->asked_at < s->cfg.exposure + ACTIVE_GRACE_S))
        return 0;
    char msg[256 + SS_INDI_CFG_NAME_MAX];
    snprintf(msg, sizeof msg, "<newNumberVector device=\"%s\" name=\"CCD_EXPOSURE\">"
             "<oneNumber name=\"CCD_EXPOSURE_VALUE\">%.6g</oneNumber></newNumberVector>\n",
             s->cfg.device, s->cfg.exposure);
    s->asked_at = now;
    return send_text(s, msg);
}

static void close_fds(indi_src_t *s)
{
    for (int i = 0; i < s->n_fds; i++)
        close(s->fds[i]);
    s->n_fds = 0;
}

/* A wanted BLOB the connection's end (or a malformed stream) cut short:
 * a frame received and lost, so counted as received and rejected
 * (data_size: its bytes fell short of len). Its partial bytes stay in the
 * BLOB buffer, never read: the next BLOB overwrites them. */
static void count_lost_blob(indi_src_t *s)
{
    ss_indi_blob_t b;
    size_t got;
    char text[3 * SS_INDI_NAME_MAX + 160];
    if (!ss_indi_stream_blob_pending(s->xml, &b, &got))
        return;
    ss_stats_received(ss_feed_stats(s->feed));
    snprintf(text, sizeof text, "%s.%s: BLOB cut short, %zu of %zu bytes before the connection "
             "closed", b.device, b.vector, got, b.len);
    reject(s, SS_PR_DATA_SIZE, text);
}

/* Close the connection (why: logged), counted, and schedule the next try.
 * A BLOB half received is counted lost (count_lost_blob); the stream is
 * reset on the next connection. */
static void drop(indi_src_t *s, const char *why, int malformed)
{
    ss_feed_stats_t *st = ss_feed_stats(s->feed);
    const double now = ss_now_mono();
    count_lost_blob(s);
    SS_SINK_ADD(st, indi_disconnects, 1);
    if (malformed)
        SS_SINK_ADD(st, indi_malformed, 1);
    if (now - s->connected_at >= STABLE_S)
        s->backoff = RETRY_MIN_S;
    SS_LOG(SS_LOG_WARNING, TAG, "feed %s: %s connection closed: %s%s; retrying in %.1f s",
           ss_feed_name(s->feed), s->local ? "local" : "TCP", why,
           s->xml && ss_indi_stream_mid_message(s->xml) ? " (mid-message)" : "", s->backoff);
    close(s->fd);
    s->fd = -1;
    close_fds(s);
    s->next_try = now + s->backoff;
}

/* One connection attempt (the local socket first, when it applies). */
static void try_connect(indi_src_t *s)
{
    char why[300] = "";
    const double now = ss_now_mono();
    s->local = 0;
    s->fd = -1;
    if (s->cfg.local[0] && is_local_host(s->cfg.host)) {
        s->fd = connect_local(s->cfg.local);
        s->local = s->fd >= 0;
    }
    if (s->fd < 0)
        s->fd = connect_tcp(s->cfg.host, s->cfg.port, why, sizeof why);
    if (s->fd >= 0 && (ss_indi_stream_reset(s->xml) != SS_OK || send_hello(s) != 0)) {
        snprintf(why, sizeof why, "cannot greet the server: %s", strerror(errno));
        close(s->fd);
        s->fd = -1;
    }
    if (s->fd < 0) {
        SS_SINK_ADD(ss_feed_stats(s->feed), indi_connect_failures, 1);
        SS_LOG(SS_LOG_WARNING, TAG, "feed %s: cannot connect to indiserver (%s); retrying in "
               "%.1f s", ss_feed_name(s->feed), why, s->backoff);
        s->next_try = now + s->backoff;
        s->backoff = SS_MIN(2.0 * s->backoff, s->cfg.retry_max);
        return;
    }
    SS_SINK_ADD(ss_feed_stats(s->feed), indi_connects, 1);
    SS_LOG(SS_LOG_NOTICE, TAG, "feed %s: connected to indiserver (%s), listening for %s.%s",
           ss_feed_name(s->feed), s->local ? "local socket" : "TCP",
           s->cfg.device[0] ? s->cfg.device : "*", s->cfg.blob);
    s->connected_at = now;
    s->asked_at = 0.0;
    s->fault[0] = '\0';
    s->backoff = SS_MIN(2.0 * s->backoff, s->cfg.retry_max);
}

/* Keep the memfds of a received message's SCM_RIGHTS; 0, or -1 when they
 * overflow the queue (a stream that does not take them). */
static int keep_fds(indi_src_t *s, struct msghdr *mh)
{
    int rc = 0;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(mh); c; c = CMSG_NXTHDR(mh, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
            continue;
        const size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < k; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
            if (s->n_fds < MAX_FDS) {
                s->fds[s->n_fds++] = fd;
            } else {
                close(fd);
                rc = -1;
            }
        }
    }
    return rc;
}

/* Read what is waiting on the connection and parse it. */
static void receive(indi_src_t *s)
{
    union {
        char buf[CMSG_SPACE(MAX_FDS * sizeof(int))];
        struct cmsghdr align;
    } ctl;
    struct iovec io = { .iov_base = s->rx, .iov_len = sizeof s->rx };
    struct msghdr mh = { .msg_iov = &io, .msg_iovlen = 1, .msg_control = ctl.buf,
                         .msg_controllen = sizeof ctl.buf };
    const ssize_t k = recvmsg(s->fd, &mh, MSG_CMSG_CLOEXEC);
    char why[300];
    if (k < 0 && (errno == EINTR || errno == EAGAIN))
        return;
    if (k <= 0) {
        drop(s, k == 0 ? "closed by the server" : strerror(errno), 0);
        return;
    }
    if (keep_fds(s, &mh) != 0 || (mh.msg_flags & MSG_CTRUNC)) {
        drop(s, "malformed stream: more passed file descriptors than BLOBs", 1);
        return;
    }
    const ss_err_t e = ss_indi_stream_feed(s->xml, s->rx, (size_t)k, why, sizeof why);
    if (e == SS_OK && !s->fault[0])
        return;
    char text[sizeof s->fault + sizeof why + 32];
    snprintf(text, sizeof text, "malformed stream: %s", s->fault[0] ? s->fault : why);
    drop(s, text, 1);
}

static const char *indi_run(void *impl)
{
    indi_src_t *s = impl;
    while (!atomic_load(s->stop)) {
        if (s->fd < 0) {
            const double wait = s->next_try - ss_now_mono();
            if (wait > 0.0) {
                const double nap = SS_MIN(wait, SS_POLL_S);
                struct timespec ts = { 0, (long)(nap * 1e9) };
                nanosleep(&ts, NULL);
                continue;
            }
            try_connect(s);
            continue;
        }
        if (ask_exposure(s) != 0) {
            drop(s, "cannot send the exposure request", 0);
            continue;
        }
        struct pollfd p = { .fd = s->fd, .events = POLLIN };
        const int rc = poll(&p, 1, (int)(SS_POLL_S * 1e3));
        if (rc > 0)
            receive(s);
        else if (rc < 0 && errno != EINTR)
            drop(s, strerror(errno), 0);
    }
    if (s->fd >= 0)
        close(s->fd);
    s->fd = -1;
    close_fds(s);
    return NULL;
}

static void indi_close(void **impl)
{
    indi_src_t *s = *impl;
    if (s) {
        if (s->fd >= 0)
            close(s->fd);
        close_fds(s);
        ss_indi_stream_destroy(&s->xml);
        free(s->blob);
        free(s);
    }
    *impl = NULL;
}

static void *indi_open(ss_source_t *src, char *desc, size_t desc_n, char *err, size_t n)
{
    ss_feed_t *f = ss_source_feed(src);
    const ss_feed_cfg_t *c = ss_feed_cfg(f);
    indi_src_t *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, n, "out of memory");
        return NULL;
    }
    s->feed = f;
    s->stop = ss_source_stop_flag(src);
    s->desc = ss_source_desc(src);
    s->cfg = c->indi;
    s->fd = -1;
    s->backoff = RETRY_MIN_S;
    /* a FITS of the largest frame, BITPIX -64 (8 bytes a pixel), and headers */
    s->blob_max = 2 * ss_feed_max_pixel_bytes(c) + HEADER_BYTES;
    const ss_indi_stream_ops_t ops = { .blob_buffer = blob_buffer, .blob_done = blob_done,
                                       .user = s };
    s->xml = ss_indi_stream_new(s->cfg.device, s->cfg.blob, &ops);
    if (!s->xml) {
        snprintf(err, n, "feed %s: out of memory", c->name);
        free(s);
        return NULL;
    }
    int k = snprintf(desc, desc_n, "indi %s.%s at %s:%d", s->cfg.device[0] ? s->cfg.device : "*",
                     s->cfg.blob, s->cfg.host, s->cfg.port);
    if (k > 0 && (size_t)k < desc_n && s->cfg.local[0] && is_local_host(s->cfg.host))
        snprintf(desc + k, desc_n - (size_t)k, " (local @%s first)", s->cfg.local);
    if (s->cfg.active && (size_t)strlen(desc) + 24 < desc_n)
        snprintf(desc + strlen(desc), desc_n - strlen(desc), ", active %gs", s->cfg.exposure);
    return s;
}

const ss_source_ops_t ss_source_indi_ops = {
    .name = "indi",
    .open = indi_open,
    .run = indi_run,
    .close = indi_close,
};
