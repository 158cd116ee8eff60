/*
 * peers.c — heartbeats and the open-files headroom of the daemon's
 * ZeroMQ sockets (peers.h).
 */
#include "peers.h"

#include "pipeline/ss_common.h"

#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <zmq.h>

int ss_fd_in_headroom(int fd, int slices)
{
    struct rlimit rl;
    if (fd < 0 || getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
        return 0;
    const long long limit = (long long)rl.rlim_cur;
    return (long long)fd >= limit - slices * SS_MAX(64LL, limit / 16);
}

void ss_zmq_heartbeats(void *sock, double timeout_s)
{
    const int timeout = (int)(timeout_s * 1000.0), ivl = SS_MAX(timeout / 4, 1);
    zmq_setsockopt(sock, ZMQ_HANDSHAKE_IVL, &timeout, sizeof timeout);
    zmq_setsockopt(sock, ZMQ_HEARTBEAT_IVL, &ivl, sizeof ivl);
    zmq_setsockopt(sock, ZMQ_HEARTBEAT_TIMEOUT, &timeout, sizeof timeout);
    zmq_setsockopt(sock, ZMQ_HEARTBEAT_TTL, &timeout, sizeof timeout);
}

int ss_fd_refuse_in_headroom(int fd, int slices)
{
    if (!ss_fd_in_headroom(fd, slices))
        return 0;
    shutdown(fd, SHUT_RDWR);
    return 1;
}

/* Receive one part of mon into out (n bytes, NUL-terminated; NULL to
 * drop it); 1 when a part came, else 0. */
static int monitor_part(void *mon, int flags, char *out, size_t n)
{
    zmq_msg_t m;
    zmq_msg_init(&m);
    const int got = zmq_msg_recv(&m, mon, flags) >= 0;
    if (got && out && n > 0) {
        const size_t len = SS_MIN(zmq_msg_size(&m), n - 1);
        memcpy(out, zmq_msg_data(&m), len);
        out[len] = '\0';
    }
    zmq_msg_close(&m);
    return got;
}

static int more_parts(void *sock)
{
    int more = 0;
    size_t len = sizeof more;
    zmq_getsockopt(sock, ZMQ_RCVMORE, &more, &len);
    return more;
}

int ss_zmq_monitor_next(void *mon, uint16_t *event, uint32_t *value, char *addr, size_t n)
{
    zmq_msg_t m;
    zmq_msg_init(&m);
    if (zmq_msg_recv(&m, mon, ZMQ_DONTWAIT) < 0) {
        zmq_msg_close(&m);
        return 0;
    }
    *event = 0;
    *value = 0;
    if (zmq_msg_size(&m) >= sizeof *event + sizeof *value) {     /* u16 event, u32 value */
        memcpy(event, zmq_msg_data(&m), sizeof *event);
        memcpy(value, (const char *)zmq_msg_data(&m) + sizeof *event, sizeof *value);
    }
    zmq_msg_close(&m);
    if (addr && n > 0)
        addr[0] = '\0';
    if (more_parts(mon))
        monitor_part(mon, 0, addr, n);
    while (more_parts(mon) && monitor_part(mon, 0, NULL, 0))
        ;
    return 1;
}
