/*
 * subguard.h — the publisher's guard against subscription floods.
 *
 * libzmq keeps every subscription a peer sends in the PUB socket's trie
 * (about 2 kB each; XPUB_MANUAL stores them too), and offers no cap. The
 * guard counts what the XPUB passes up — the first subscription to a
 * topic and the last unsubscription, with the sender's "Peer-Address" —
 * per peer address (a host over TCP, a process over IPC) and in total
 * (distinct topics held). A peer address past
 * publish.max_subscriptions_per_peer, or the one with the most (when more
 * than an equal share) when the total passes publish.max_subscriptions,
 * is banned: the ZAP handler
 * refuses it for publish.ban_s and its open connections are shut down
 * (the socket monitor gave their descriptors), which removes its
 * subscriptions. Subscriptions over a limit are counted as refused.
 *
 * Owned by the publisher thread, except ss_subguard_new (the main thread,
 * before the XPUB binds, so that no connection is missed).
 */
#ifndef SS_SUBGUARD_H
#define SS_SUBGUARD_H

#include <stdint.h>

#include "outsubs.h"
#include "zap.h"

typedef struct ss_subguard ss_subguard_t;

typedef struct ss_subguard_limits {
    int max_subs;                   /* distinct topics held */
    int max_subs_peer;              /* subscriptions one peer address adds */
    double ban_s;                   /* seconds a banned address is refused */
} ss_subguard_limits_t;

typedef struct ss_subguard_counts {
    int64_t held;                   /* distinct topics subscribed now */
    uint64_t refused;               /* subscriptions over a limit or from a banned peer */
    uint64_t banned;                /* bans so far */
    int peers;                      /* peer addresses connected now */
    uint64_t conns_refused;         /* connections shut for the open-files headroom */
} ss_subguard_counts_t;

/* Watch xpub (a ZMQ_XPUB of context zctx, not yet bound) through a socket
 * monitor; NULL when the monitor cannot be set up. */
ss_subguard_t *ss_subguard_new(void *zctx, void *xpub);

/* Read the monitor's events and the (un)subscriptions the XPUB passed up,
 * without blocking, and ban a peer that passes lim (through zap, which may
 * be NULL: then only its connections are shut). Each unsubscription and
 * each subscription it does not refuse also goes to subs (may be NULL).
 * Returns 1 when subs changed. */
int ss_subguard_poll(ss_subguard_t *g, void *xpub, ss_zap_t *zap,
                     const ss_subguard_limits_t *lim, ss_outsubs_t *subs);

void ss_subguard_counts(const ss_subguard_t *g, ss_subguard_counts_t *out);

/* Close the monitor socket (before the XPUB closes); accepts NULL. */
void ss_subguard_destroy(ss_subguard_t **g);

#endif
