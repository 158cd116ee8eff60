/*
 * zap.c — the ZAP handler (zap.h): one thread, a REP socket bound at
 * inproc://zeromq.zap.01 in the daemon's context, a fixed set of admitted
 * public keys read at start (none without CURVE), and a short list of
 * banned peer addresses that the publisher adds to.
 */
#include "zap.h"

#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "pipeline/ss_common.h"
#include "proto/curve.h"

#define TAG "zap"
#define ZAP_ENDPOINT "inproc://zeromq.zap.01"
#define ZAP_MAX_KEYS 1024
#define ZAP_POLL_MS 200
#define ZAP_LOG_FIRST 20                /* refusals logged one by one, then every 100th */
#define ZAP_BANS 64                     /* addresses banned at once (the oldest ban makes room) */

typedef struct ban {
    char address[SS_ZAP_ADDRESS_MAX];
    double until;                       /* ss_now_mono() */
} ban_t;

struct ss_zap {
    void *sock;
    pthread_t thread;
    atomic_int stop;
    int curve;                          /* CURVE on: admit only the keys below */
    int n_keys;
    uint8_t keys[ZAP_MAX_KEYS][32];     /* admitted public keys, binary */
    pthread_mutex_t ban_lock;
    ban_t bans[ZAP_BANS];
    _Atomic uint64_t refused, admitted, refused_banned;
};

/* Whether name ends in suffix. */
static int ends_with(const char *name, const char *suffix)
{
    const size_t a = strlen(name), b = strlen(suffix);
    return a >= b && strcmp(name + a - b, suffix) == 0;
}

/* The public keys of dir's *.pub and *.key files into z; -1 with err. */
static int load_keys(ss_zap_t *z, const char *dir, char *err, size_t n)
{
    DIR *d = opendir(dir);
    if (!d) {
        snprintf(err, n, "security.client_keys: %s: cannot read the directory", dir);
        return -1;
    }
    for (struct dirent *e; (e = readdir(d)) && z->n_keys < ZAP_MAX_KEYS;) {
        if (e->d_name[0] == '.' || !(ends_with(e->d_name, ".pub") || ends_with(e->d_name, ".key")))
            continue;
        char path[4096], why[512];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        ss_curve_key_t k;
        if (ss_curve_read_key(path, 0, &k, why, sizeof why) != 0) {
            SS_LOG(SS_LOG_WARNING, TAG, "security.client_keys: %s: skipped", why);
            continue;
        }
        zmq_z85_decode(z->keys[z->n_keys++], k.pub);
    }
    closedir(d);
    if (z->n_keys == 0) {
        snprintf(err, n, "security.client_keys: %s holds no key file (NAME.pub): no client "
                 "could connect", dir);
        return -1;
    }
    return 0;
}

static int admitted(const ss_zap_t *z, const uint8_t *key)
{
    for (int i = 0; i < z->n_keys; i++)
        if (memcmp(z->keys[i], key, 32) == 0)
            return 1;
    return 0;
}

/* Receive one request (up to 8 parts kept) into parts/lens; the number of
 * parts, or -1. */
#define ZAP_PARTS 8
static int recv_request(void *sock, zmq_msg_t *parts)
{
    int n = 0, more = 1;
    while (more) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, sock, 0) < 0) {
            zmq_msg_close(&m);
            for (int i = 0; i < n; i++)
                zmq_msg_close(&parts[i]);
            return -1;
        }
        more = zmq_msg_more(&m);
        if (n < ZAP_PARTS)
            parts[n++] = m;
        else
            zmq_msg_close(&m);
    }
    return n;
}

/* Whether address is banned now. */
static int banned(ss_zap_t *z, const char *address)
{
    const double now = ss_now_mono();
    int hit = 0;
    pthread_mutex_lock(&z->ban_lock);
    for (int i = 0; i < ZAP_BANS && !hit; i++)
        hit = z->bans[i].until > now && strcmp(z->bans[i].address, address) == 0;
    pthread_mutex_unlock(&z->ban_lock);
    return hit;
}

void ss_zap_ban(ss_zap_t *z, const char *address, double seconds)
{
    if (!z || !address || !*address)
        return;
    pthread_mutex_lock(&z->ban_lock);
    int slot = -1;
    for (int i = 0; i < ZAP_BANS && slot < 0; i++)
        if (strcmp(z->bans[i].address, address) == 0)
            slot = i;
    if (slot < 0) {
        slot = 0;
        for (int i = 1; i < ZAP_BANS; i++)
            if (z->bans[i].until < z->bans[slot].until)
                slot = i;
    }
    ss_strlcpy(z->bans[slot].address, address, sizeof z->bans[slot].address);
    z->bans[slot].until = ss_now_mono() + seconds;
    pthread_mutex_unlock(&z->ban_lock);
}

/* The verdict on one request's address, mechanism and credentials: NULL
 * to admit, else the reason. */
static const char *verdict(ss_zap_t *z, const char *addr, zmq_msg_t *mech,
                           zmq_msg_t *cred)
{
    if (banned(z, addr)) {
        z->refused_banned++;
        return "banned for a while (subscription flood)";
    }
    const int is_curve = zmq_msg_size(mech) == 5 && memcmp(zmq_msg_data(mech), "CURVE", 5) == 0;
    if (!z->curve)
        return NULL;
    return is_curve && cred && zmq_msg_size(cred) == 32 && admitted(z, zmq_msg_data(cred))
               ? NULL
               : "unknown CURVE key";
}

/* Answer one request: 200 for an admitted peer (a known CURVE key with
 * CURVE on, anyone not banned without), else 400 (counted, logged). */
static void answer(ss_zap_t *z)
{
    zmq_msg_t p[ZAP_PARTS];
    const int n = recv_request(z->sock, p);
    if (n < 0)
        return;
    /* version, request id, domain, address, identity, mechanism, credentials */
    char addr[SS_ZAP_ADDRESS_MAX] = "?";
    const char *why = "malformed request";
    if (n >= 6) {
        const size_t al = SS_MIN(zmq_msg_size(&p[3]), sizeof addr - 1);
        memcpy(addr, zmq_msg_data(&p[3]), al);
        addr[al] = '\0';
        why = verdict(z, addr, &p[5], n >= 7 ? &p[6] : NULL);
    }
    const char *status = why ? "400" : "200";
    const char *text = why ? why : "OK";
    const uint64_t k = why ? ++z->refused : ++z->admitted;
    if (why && (k <= ZAP_LOG_FIRST || k % 100 == 0))
        SS_LOG(SS_LOG_WARNING, TAG, "peer %s refused: %s (%llu refused so far)", addr, text,
               (unsigned long long)k);
    const void *req_id = n >= 2 ? zmq_msg_data(&p[1]) : "";
    const size_t req_len = n >= 2 ? zmq_msg_size(&p[1]) : 0;
    zmq_send(z->sock, "1.0", 3, ZMQ_SNDMORE);
    zmq_send(z->sock, req_id, req_len, ZMQ_SNDMORE);
    zmq_send(z->sock, status, 3, ZMQ_SNDMORE);
    zmq_send(z->sock, text, strlen(text), ZMQ_SNDMORE);
    zmq_send(z->sock, "", 0, ZMQ_SNDMORE);     /* user id */
    zmq_send(z->sock, "", 0, 0);               /* metadata */
    for (int i = 0; i < n; i++)
        zmq_msg_close(&p[i]);
}

static void *zap_main(void *arg)
{
    ss_zap_t *z = arg;
    while (!atomic_load(&z->stop)) {
        zmq_pollitem_t it = { .socket = z->sock, .events = ZMQ_POLLIN };
        if (zmq_poll(&it, 1, ZAP_POLL_MS) > 0 && (it.revents & ZMQ_POLLIN))
            answer(z);
    }
    return NULL;
}

ss_zap_t *ss_zap_start(void *zctx, const char *dir, char *err, size_t n)
{
    ss_zap_t *z = calloc(1, sizeof *z);
    if (!z) {
        snprintf(err, n, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&z->ban_lock, NULL);
    z->curve = dir && *dir;
    if (z->curve && load_keys(z, dir, err, n) != 0) {
        free(z);
        return NULL;
    }
    const int zero = 0;
    z->sock = zmq_socket(zctx, ZMQ_REP);
    if (!z->sock || zmq_setsockopt(z->sock, ZMQ_LINGER, &zero, sizeof zero) != 0 ||
        zmq_bind(z->sock, ZAP_ENDPOINT) != 0 || pthread_create(&z->thread, NULL, zap_main, z) != 0) {
        snprintf(err, n, "the ZAP handler cannot start: %s", zmq_strerror(zmq_errno()));
        if (z->sock)
            zmq_close(z->sock);
        free(z);
        return NULL;
    }
    if (z->curve)
        SS_LOG(SS_LOG_INFO, TAG, "CURVE on: %d client key%s admitted from %s", z->n_keys,
               z->n_keys == 1 ? "" : "s", dir);
    return z;
}

void ss_zap_stop(ss_zap_t **pz)
{
    if (!pz || !*pz)
        return;
    ss_zap_t *z = *pz;
    atomic_store(&z->stop, 1);
    pthread_join(z->thread, NULL);
    zmq_close(z->sock);
    pthread_mutex_destroy(&z->ban_lock);
    free(z);
    *pz = NULL;
}

uint64_t ss_zap_refused(const ss_zap_t *z) { return z ? atomic_load(&z->refused) : 0; }
uint64_t ss_zap_admitted(const ss_zap_t *z) { return z ? atomic_load(&z->admitted) : 0; }
uint64_t ss_zap_refused_banned(const ss_zap_t *z) { return z ? atomic_load(&z->refused_banned) : 0; }
int ss_zap_keys(const ss_zap_t *z) { return z ? z->n_keys : 0; }
int ss_zap_curve(const ss_zap_t *z) { return z ? z->curve : 0; }
