/*
 * zap.c — the ZAP handler (zap.h): one thread, a REP socket bound at
 * inproc://zeromq.zap.01 in the daemon's context, a fixed set of admitted
 * public keys read at start.
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

struct ss_zap {
    void *sock;
    pthread_t thread;
    atomic_int stop;
    int n_keys;
    uint8_t keys[ZAP_MAX_KEYS][32];     /* admitted public keys, binary */
    _Atomic uint64_t refused, admitted;
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

/* Answer one request: 200 for a CURVE peer whose key is admitted, else
 * 400 (counted, logged). */
static void answer(ss_zap_t *z)
{
    zmq_msg_t p[ZAP_PARTS];
    const int n = recv_request(z->sock, p);
    if (n < 0)
        return;
    /* version, request id, domain, address, identity, mechanism, credentials */
    int ok = 0;
    char addr[64] = "?";
    if (n >= 7) {
        const size_t al = SS_MIN(zmq_msg_size(&p[3]), sizeof addr - 1);
        memcpy(addr, zmq_msg_data(&p[3]), al);
        addr[al] = '\0';
        ok = zmq_msg_size(&p[5]) == 5 && memcmp(zmq_msg_data(&p[5]), "CURVE", 5) == 0 &&
             zmq_msg_size(&p[6]) == 32 && admitted(z, zmq_msg_data(&p[6]));
    }
    const char *status = ok ? "200" : "400";
    const char *text = ok ? "OK" : "unknown CURVE key";
    const uint64_t k = ok ? ++z->admitted : ++z->refused;
    if (!ok && (k <= ZAP_LOG_FIRST || k % 100 == 0))
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
    if (load_keys(z, dir, err, n) != 0) {
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
    free(z);
    *pz = NULL;
}

uint64_t ss_zap_refused(const ss_zap_t *z) { return z ? atomic_load(&z->refused) : 0; }
uint64_t ss_zap_admitted(const ss_zap_t *z) { return z ? atomic_load(&z->admitted) : 0; }
int ss_zap_keys(const ss_zap_t *z) { return z ? z->n_keys : 0; }
