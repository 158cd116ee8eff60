/*
 * peers.c — heartbeats and the open-files headroom of the daemon's
 * ZeroMQ sockets (peers.h).
 */
#include "peers.h"

#include "pipeline/ss_common.h"

#include <sys/resource.h>
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
