/*
 * zap.h — the daemon's ZAP handler (ZeroMQ RFC 27): with CURVE on, libzmq
 * asks it about every peer that completes a CURVE handshake with one of
 * the daemon's sockets, and it admits only the public keys found in the
 * client key directory (security.client_keys). Without a handler CURVE
 * would encrypt but admit anyone.
 */
#ifndef SS_ZAP_H
#define SS_ZAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct ss_zap ss_zap_t;

/* Read the public keys of every key file in dir (ss_curve_read_key: *.pub
 * and *.key files; other names ignored), bind the handler in zctx and
 * start its thread. NULL with a message in err when dir holds no key or
 * the handler cannot start. */
ss_zap_t *ss_zap_start(void *zctx, const char *dir, char *err, size_t n);

/* Stop the thread and close the handler (before the context terminates). */
void ss_zap_stop(ss_zap_t **z);

/* Peers refused (an unknown key, or not CURVE) and admitted so far. */
uint64_t ss_zap_refused(const ss_zap_t *z);
uint64_t ss_zap_admitted(const ss_zap_t *z);

/* Keys loaded. */
int ss_zap_keys(const ss_zap_t *z);

#endif
