/*
 * zap.h — the daemon's ZAP handler (ZeroMQ RFC 27): libzmq asks it about
 * every peer that completes a handshake with a socket that has a ZAP
 * domain. With CURVE on it admits only the public keys found in the
 * client key directory (security.client_keys; without a handler CURVE
 * would encrypt but admit anyone). With or without CURVE it refuses, for
 * a while, the addresses the publisher banned for a subscription flood.
 */
#ifndef SS_ZAP_H
#define SS_ZAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct ss_zap ss_zap_t;

/* A peer's address as libzmq gives it (ZAP's address field and the
 * messages' "Peer-Address"): the IP for TCP, "…:uid:gid:pid" for IPC. */
#define SS_ZAP_ADDRESS_MAX 80

/* With dir (CURVE on): read the public keys of every key file in dir
 * (ss_curve_read_key: *.pub and *.key files; other names ignored). With
 * dir NULL or "": no keys, every peer not banned is admitted. Then bind
 * the handler in zctx and start its thread. NULL with a message in err
 * when dir cannot be read or the handler cannot start. */
ss_zap_t *ss_zap_start(void *zctx, const char *dir, char *err, size_t n);

/* Refuse address (SS_ZAP_ADDRESS_MAX) for the next `seconds` (thread-safe;
 * the oldest of 64 bans makes room). Connections already made stay: the
 * caller closes them. */
void ss_zap_ban(ss_zap_t *z, const char *address, double seconds);

/* Stop the thread and close the handler (before the context terminates). */
void ss_zap_stop(ss_zap_t **z);

/* Peers refused (an unknown key, or not CURVE) and admitted so far. */
uint64_t ss_zap_refused(const ss_zap_t *z);
uint64_t ss_zap_admitted(const ss_zap_t *z);

/* Of the refused, those refused for a ban. */
uint64_t ss_zap_refused_banned(const ss_zap_t *z);

/* Keys loaded; whether CURVE is on. */
int ss_zap_keys(const ss_zap_t *z);
int ss_zap_curve(const ss_zap_t *z);

#endif
