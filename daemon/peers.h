/*
 * peers.h — what every ZeroMQ socket of the daemon does about its peers
 * (the frame sockets of the sources, the publish and control sockets):
 * heartbeats, and the open-files headroom that new connections must not
 * eat into.
 */
#ifndef SS_PEERS_H
#define SS_PEERS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ZeroMQ heartbeats on sock: a PING every timeout_s / 4, the connection
 * dropped after timeout_s without traffic (config "peer_timeout"), and a
 * handshake not finished within timeout_s dropped too. */
void ss_zmq_heartbeats(void *sock, double timeout_s);

/* Whether a connection just accepted on descriptor fd eats into the
 * open-files headroom: the last `slices` × max(64, limit / 16)
 * descriptors below the soft limit. Descriptors are handed out lowest
 * first, so every one below fd is in use. Such a connection is shut down
 * at once by the socket monitors: the frame sockets keep two slices free
 * (SS_FD_SLICES_FRAMES), the publish socket one (SS_FD_SLICES_PUBLISH),
 * so that peers that hog frame connections leave room for new
 * subscribers, and hogs of either leave the last slice to the control
 * socket and the files (libzmq aborts the process when an IPC accept
 * fails for want of a descriptor). */
int ss_fd_in_headroom(int fd, int slices);
#define SS_FD_SLICES_FRAMES 2
#define SS_FD_SLICES_PUBLISH 1

/* A connection just accepted on descriptor fd: shut down at once when it
 * eats into the headroom of `slices` (ss_fd_in_headroom; libzmq then
 * closes it). Returns 1 when it was shut down, else 0. */
int ss_fd_refuse_in_headroom(int fd, int slices);

/* The next socket-monitor event queued on mon (the PAIR connected to a
 * zmq_socket_monitor endpoint), without waiting: 1 with the event, its
 * value (the descriptor, for ACCEPTED and DISCONNECTED) and the peer's
 * endpoint in addr (n bytes, "" when none; addr may be NULL); 0 when none
 * is queued. Parts beyond the two are read and dropped. */
int ss_zmq_monitor_next(void *mon, uint16_t *event, uint32_t *value, char *addr, size_t n);

#ifdef __cplusplus
}
#endif
#endif
