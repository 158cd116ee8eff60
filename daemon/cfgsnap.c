/*
 * cfgsnap.c — config snapshots and the board the main thread publishes
 * them on (cfgsnap.h).
 */
#include "cfgsnap.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

struct ss_cfg_snap {
    atomic_int refs;
    uint64_t generation;
    ss_config_t cfg;                /* never written once published */
};

struct ss_cfg_board {
    pthread_mutex_t lock;           /* guards current's swap against takers' ref++ */
    ss_cfg_snap_t *current;         /* the board's own reference */
    _Atomic uint64_t generation;    /* current's: read without the lock */
};

/* A snapshot of cfg with one reference; NULL when out of memory. */
static ss_cfg_snap_t *snap_new(const ss_config_t *cfg, uint64_t generation)
{
    ss_cfg_snap_t *s = malloc(sizeof *s);
    if (!s)
        return NULL;
    atomic_init(&s->refs, 1);
    s->generation = generation;
    s->cfg = *cfg;
    return s;
}

ss_cfg_board_t *ss_cfg_board_new(const ss_config_t *cfg)
{
    ss_cfg_board_t *b = calloc(1, sizeof *b);
    if (!b || !(b->current = snap_new(cfg, 1))) {
        free(b);
        return NULL;
    }
    pthread_mutex_init(&b->lock, NULL);
    atomic_init(&b->generation, 1);
    return b;
}

void ss_cfg_board_destroy(ss_cfg_board_t **pb)
{
    if (!pb || !*pb)
        return;
    ss_cfg_board_t *b = *pb;
    ss_cfg_snap_release(&b->current);
    pthread_mutex_destroy(&b->lock);
    free(b);
    *pb = NULL;
}

int ss_cfg_board_publish(ss_cfg_board_t *b, const ss_config_t *cfg)
{
    ss_cfg_snap_t *s = snap_new(cfg, atomic_load(&b->generation) + 1);
    if (!s)
        return -1;
    pthread_mutex_lock(&b->lock);
    ss_cfg_snap_t *old = b->current;
    b->current = s;
    atomic_store(&b->generation, s->generation);
    pthread_mutex_unlock(&b->lock);
    ss_cfg_snap_release(&old);
    return 0;
}

ss_cfg_snap_t *ss_cfg_board_take(ss_cfg_board_t *b)
{
    pthread_mutex_lock(&b->lock);
    ss_cfg_snap_t *s = ss_cfg_snap_ref(b->current);
    pthread_mutex_unlock(&b->lock);
    return s;
}

ss_cfg_snap_t *ss_cfg_board_newer(ss_cfg_board_t *b, const ss_cfg_snap_t *held)
{
    if (held && held->generation == atomic_load(&b->generation))
        return NULL;
    return ss_cfg_board_take(b);
}

int ss_cfg_refresh(ss_cfg_board_t *b, ss_cfg_snap_t **held)
{
    ss_cfg_snap_t *s = ss_cfg_board_newer(b, *held);
    if (!s)
        return 0;
    ss_cfg_snap_release(held);
    *held = s;
    return 1;
}

ss_cfg_snap_t *ss_cfg_snap_ref(ss_cfg_snap_t *s)
{
    atomic_fetch_add(&s->refs, 1);
    return s;
}

void ss_cfg_snap_release(ss_cfg_snap_t **ps)
{
    if (!ps || !*ps)
        return;
    if (atomic_fetch_sub(&(*ps)->refs, 1) == 1)
        free(*ps);
    *ps = NULL;
}

const ss_config_t *ss_cfg_snap_config(const ss_cfg_snap_t *s)
{
    return &s->cfg;
}

uint64_t ss_cfg_snap_generation(const ss_cfg_snap_t *s)
{
    return s->generation;
}
