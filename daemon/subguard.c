/*
 * subguard.c — per-peer and total subscription caps for the XPUB
 * (subguard.h).
 */
#include "subguard.h"

#include <netdb.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zmq.h>

#include "peers.h"
#include "pipeline/ss_common.h"

#define TAG "publisher"
#define MONITOR_EP "inproc://skysieve-publish-monitor"
#define PEERS_MAX 4096              /* addresses tracked at once */
#define SUB_BUF 512

typedef struct peer {
    char key[SS_ZAP_ADDRESS_MAX];   /* from the descriptor: the IP, or ":uid:gid:pid" */
    char zaddr[SS_ZAP_ADDRESS_MAX]; /* libzmq's Peer-Address (what ZAP sees), once known */
    int conns;                      /* connections open */
    int64_t subs;                   /* subscriptions it added (first to their topic) */
    double banned_until;            /* ss_now_mono() */
} peer_t;

typedef struct conn {
    int fd;
    int peer;                       /* index in peers, or -1 */
} conn_t;

struct ss_subguard {
    void *mon;                      /* PAIR on the XPUB's monitor */
    peer_t *peers;
    int n_peers;
    conn_t *conns;
    int n_conns, cap_conns;
    int64_t held;                   /* distinct topics subscribed */
    int64_t doomed;                 /* of those, a banned peer's: going with its connections */
    uint64_t refused, banned;
    uint64_t conns_refused;         /* connections shut for the open-files headroom */
};

ss_subguard_t *ss_subguard_new(void *zctx, void *xpub)
{
    ss_subguard_t *g = calloc(1, sizeof *g);
    if (!g || !(g->peers = calloc(PEERS_MAX, sizeof *g->peers)))
        goto fail;
    if (zmq_socket_monitor(xpub, MONITOR_EP, ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED) != 0)
        goto fail;
    g->mon = zmq_socket(zctx, ZMQ_PAIR);
    const int zero = 0;
    if (!g->mon || zmq_setsockopt(g->mon, ZMQ_LINGER, &zero, sizeof zero) != 0 ||
        zmq_connect(g->mon, MONITOR_EP) != 0)
        goto fail;
    return g;
fail:
    SS_LOG(SS_LOG_ERR, TAG, "subscription guard: %s", zmq_strerror(zmq_errno()));
    ss_subguard_destroy(&g);
    return NULL;
}

void ss_subguard_destroy(ss_subguard_t **pg)
{
    if (!pg || !*pg)
        return;
    ss_subguard_t *g = *pg;
    if (g->mon)
        zmq_close(g->mon);
    free(g->peers);
    free(g->conns);
    free(g);
    *pg = NULL;
}

/* The peer key of a connected descriptor: its numeric IP, or for a unix
 * socket ":uid:gid:pid" (the end of libzmq's IPC Peer-Address); "" when
 * the descriptor says nothing. */
static void fd_key(int fd, char *out, size_t n)
{
    struct sockaddr_storage sa;
    socklen_t len = sizeof sa;
    out[0] = '\0';
    if (getpeername(fd, (struct sockaddr *)&sa, &len) != 0)
        return;
    if (sa.ss_family == AF_UNIX) {
        struct ucred cr;
        socklen_t cl = sizeof cr;
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) == 0)
            snprintf(out, n, ":%u:%u:%d", (unsigned)cr.uid, (unsigned)cr.gid, (int)cr.pid);
        return;
    }
    if (getnameinfo((struct sockaddr *)&sa, len, out, (socklen_t)n, NULL, 0, NI_NUMERICHOST) != 0)
        out[0] = '\0';
}

/* Whether libzmq's Peer-Address addr names the peer of key. */
static int same_peer(const char *key, const char *addr)
{
    if (key[0] != ':')
        return strcmp(key, addr) == 0;
    const size_t kl = strlen(key), al = strlen(addr);
    return al >= kl && strcmp(addr + al - kl, key) == 0;
}

/* The peer of key (made when missing); -1 when the table is full. */
static int peer_of_key(ss_subguard_t *g, const char *key)
{
    int free_slot = -1;
    for (int i = 0; i < g->n_peers; i++) {
        if (strcmp(g->peers[i].key, key) == 0)
            return i;
        if (free_slot < 0 && g->peers[i].conns == 0 && g->peers[i].subs == 0 &&
            g->peers[i].banned_until < ss_now_mono())
            free_slot = i;
    }
    if (free_slot < 0 && g->n_peers < PEERS_MAX)
        free_slot = g->n_peers++;
    if (free_slot >= 0) {
        memset(&g->peers[free_slot], 0, sizeof g->peers[free_slot]);
        ss_strlcpy(g->peers[free_slot].key, key, sizeof g->peers[free_slot].key);
    }
    return free_slot;
}

/* The peer that libzmq's Peer-Address names (a connected one first: its
 * messages may still arrive after its connections closed), or -1. */
static int peer_of_address(ss_subguard_t *g, const char *addr)
{
    int closed = -1;
    for (int i = 0; i < g->n_peers; i++)
        if (same_peer(g->peers[i].key, addr)) {
            if (g->peers[i].conns > 0)
                return i;
            closed = closed < 0 ? i : closed;
        }
    return closed;
}

static void conn_opened(ss_subguard_t *g, int fd)
{
    if (ss_fd_refuse_in_headroom(fd, SS_FD_SLICES_PUBLISH)) {
        if (g->conns_refused++ % 100 == 0)
            SS_LOG(SS_LOG_WARNING, TAG, "open files near the limit: a subscriber's connection "
                   "closed (%llu so far; logged every 100th)",
                   (unsigned long long)g->conns_refused);
        return;
    }
    if (g->n_conns == g->cap_conns) {
        const int cap = g->cap_conns ? 2 * g->cap_conns : 64;
        conn_t *c = realloc(g->conns, (size_t)cap * sizeof *c);
        if (!c)
            return;
        g->conns = c;
        g->cap_conns = cap;
    }
    char key[SS_ZAP_ADDRESS_MAX];
    fd_key(fd, key, sizeof key);
    const int p = key[0] ? peer_of_key(g, key) : -1;
    if (p >= 0)
        g->peers[p].conns++;
    g->conns[g->n_conns++] = (conn_t){ .fd = fd, .peer = p };
}

/* A connection closed: when it was its peer's last, the peer's
 * subscriptions went with it. */
static void conn_closed(ss_subguard_t *g, int fd)
{
    for (int i = 0; i < g->n_conns; i++) {
        if (g->conns[i].fd != fd)
            continue;
        const int p = g->conns[i].peer;
        if (p >= 0 && --g->peers[p].conns <= 0) {
            g->peers[p].conns = 0;
            g->peers[p].subs = 0;
        }
        g->conns[i] = g->conns[--g->n_conns];
        return;
    }
}

static void read_monitor(ss_subguard_t *g)
{
    uint16_t event;
    uint32_t value;
    while (ss_zmq_monitor_next(g->mon, &event, &value, NULL, 0)) {
        if (event == ZMQ_EVENT_ACCEPTED)
            conn_opened(g, (int)value);
        else if (event == ZMQ_EVENT_DISCONNECTED)
            conn_closed(g, (int)value);
    }
}

/* Ban peer p: ZAP refuses its address, its connections are shut down. */
static void ban(ss_subguard_t *g, int p, ss_zap_t *zap, const ss_subguard_limits_t *lim,
                const char *why)
{
    peer_t *pe = &g->peers[p];
    ss_zap_ban(zap, pe->zaddr[0] ? pe->zaddr : pe->key, lim->ban_s);
    int shut = 0;
    for (int i = 0; i < g->n_conns; i++)
        if (g->conns[i].peer == p && shutdown(g->conns[i].fd, SHUT_RDWR) == 0)
            shut++;
    pe->banned_until = ss_now_mono() + lim->ban_s;
    g->banned++;
    g->doomed += pe->subs;
    SS_LOG(SS_LOG_WARNING, TAG,
           "peer %s banned for %.0f s: %s (%lld subscriptions from it, %lld topics held); %d "
           "connection%s closed",
           pe->zaddr[0] ? pe->zaddr : pe->key, lim->ban_s, why, (long long)pe->subs,
           (long long)g->held, shut, shut == 1 ? "" : "s");
    pe->subs = 0;
}

/* The connected peer with the most subscriptions when it holds more than
 * an equal share of max_subs (else the excess is nobody's in particular:
 * messages of a peer whose connection was not seen yet), or -1. */
static int top_peer(const ss_subguard_t *g, int max_subs)
{
    int best = -1, connected = 0;
    for (int i = 0; i < g->n_peers; i++) {
        connected += g->peers[i].conns > 0;
        if (g->peers[i].conns > 0 && g->peers[i].subs > 0 &&
            (best < 0 || g->peers[i].subs > g->peers[best].subs))
            best = i;
    }
    return best >= 0 && g->peers[best].subs * SS_MAX(connected, 1) > max_subs ? best : -1;
}

/* One (un)subscription the XPUB passed up, from the peer libzmq names
 * (NULL for the unsubscriptions of a closed connection): whether it
 * counts for the residual forms asked for (ss_outsubs_note). A refused
 * subscription does not: a banned peer's, queued before its connections
 * closed, or one past publish.max_subscriptions. (Noting a flood's 20,000
 * refused topics cost a linear search each and stalled the publisher
 * past 10 s under ThreadSanitizer.) */
static int account(ss_subguard_t *g, int subscribe, const char *addr, ss_zap_t *zap,
                   const ss_subguard_limits_t *lim)
{
    const int p = addr ? peer_of_address(g, addr) : -1;
    if (p >= 0 && !g->peers[p].zaddr[0])
        ss_strlcpy(g->peers[p].zaddr, addr, sizeof g->peers[p].zaddr);
    if (!subscribe) {
        g->held -= g->held > 0;
        if (!addr)              /* a closed connection's: perhaps a banned peer's */
            g->doomed -= g->doomed > 0;
        else if (p >= 0)
            g->peers[p].subs -= g->peers[p].subs > 0;
        return 1;
    }
    g->held++;
    if (p >= 0 && g->peers[p].banned_until > ss_now_mono()) {
        g->refused++;           /* queued before its connections closed */
        g->doomed++;
        return 0;
    }
    if (p >= 0 && ++g->peers[p].subs > lim->max_subs_peer) {
        g->refused++;
        ban(g, p, zap, lim, "over publish.max_subscriptions_per_peer");
        return 0;
    }
    if (g->held - g->doomed > lim->max_subs) {
        g->refused++;
        const int top = top_peer(g, lim->max_subs);
        if (top >= 0)
            ban(g, top, zap, lim, "publish.max_subscriptions reached");
        return 0;
    }
    return 1;
}

int ss_subguard_poll(ss_subguard_t *g, void *xpub, ss_zap_t *zap,
                     const ss_subguard_limits_t *lim, ss_outsubs_t *subs)
{
    int changed = 0;
    if (!g)
        return 0;
    read_monitor(g);
    for (;;) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, xpub, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&m);
            break;
        }
        const unsigned char *b = zmq_msg_data(&m);
        const size_t len = zmq_msg_size(&m);
        if (len > 0 && (b[0] == 0 || b[0] == 1)) {
            /* a connection's first subscription may come before its
             * ACCEPTED event is read */
            read_monitor(g);
            const char *addr = zmq_msg_gets(&m, "Peer-Address");
            if (account(g, b[0] == 1, addr, zap, lim))
                changed |= ss_outsubs_note(subs, b[0] == 1, b + 1, len - 1);
            SS_LOG(SS_LOG_DEBUG, TAG, "%s \"%.*s\" from %s", b[0] ? "subscribe" : "unsubscribe",
                   (int)SS_MIN(len - 1, (size_t)SUB_BUF), (const char *)b + 1,
                   addr ? addr : "(closed)");
        }
        zmq_msg_close(&m);
    }
    return changed;
}

void ss_subguard_counts(const ss_subguard_t *g, ss_subguard_counts_t *out)
{
    *out = (ss_subguard_counts_t){ 0 };
    if (!g)
        return;
    out->held = g->held;
    out->refused = g->refused;
    out->banned = g->banned;
    out->conns_refused = g->conns_refused;
    for (int i = 0; i < g->n_peers; i++)
        out->peers += g->peers[i].conns > 0;
}
