/*
 * queue.c — bounded pointer FIFO (a ring under one mutex, two condition
 * variables). Waits use CLOCK_MONOTONIC so that wall-clock steps (NTP)
 * never stretch or cut a timeout.
 */
#include "queue.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

struct ss_queue {
    pthread_mutex_t lock;
    pthread_cond_t not_empty;
    pthread_cond_t not_full;
    void **ring;
    int capacity;
    int head;                   /* index of the oldest item */
    int count;
    int closed;
    ss_queue_policy_t policy;
    ss_queue_counters_t ctr;
};

ss_queue_t *ss_queue_new(int capacity, ss_queue_policy_t policy)
{
    if (capacity < 1)
        return NULL;
    ss_queue_t *q = calloc(1, sizeof *q);
    if (!q)
        return NULL;
    q->ring = calloc((size_t)capacity, sizeof *q->ring);
    if (!q->ring) {
        free(q);
        return NULL;
    }
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&q->lock, NULL);
    pthread_cond_init(&q->not_empty, &ca);
    pthread_cond_init(&q->not_full, &ca);
    pthread_condattr_destroy(&ca);
    q->capacity = capacity;
    q->policy = policy;
    q->ctr.capacity = capacity;
    return q;
}

void ss_queue_destroy(ss_queue_t **pq)
{
    if (!pq || !*pq)
        return;
    ss_queue_t *q = *pq;
    pthread_mutex_destroy(&q->lock);
    pthread_cond_destroy(&q->not_empty);
    pthread_cond_destroy(&q->not_full);
    free(q->ring);
    free(q);
    *pq = NULL;
}

void ss_queue_set_policy(ss_queue_t *q, ss_queue_policy_t policy)
{
    pthread_mutex_lock(&q->lock);
    q->policy = policy;
    pthread_cond_broadcast(&q->not_full);
    pthread_mutex_unlock(&q->lock);
}

/* Append under the lock; room is guaranteed by the caller. */
static void put_locked(ss_queue_t *q, void *item)
{
    q->ring[(q->head + q->count) % q->capacity] = item;
    q->count++;
    q->ctr.pushed++;
    if (q->count > q->ctr.max_depth)
        q->ctr.max_depth = q->count;
    pthread_cond_signal(&q->not_empty);
}

static void *take_locked(ss_queue_t *q)
{
    void *item = q->ring[q->head];
    q->ring[q->head] = NULL;
    q->head = (q->head + 1) % q->capacity;
    q->count--;
    return item;
}

ss_err_t ss_queue_push(ss_queue_t *q, void *item, void **evicted)
{
    if (evicted)
        *evicted = NULL;
    pthread_mutex_lock(&q->lock);
    for (;;) {
        if (q->closed) {
            pthread_mutex_unlock(&q->lock);
            return SS_ERR_STOPPED;
        }
        if (q->count < q->capacity)
            break;
        if (q->policy == SS_QUEUE_DROP_OLDEST && evicted) {
            *evicted = take_locked(q);
            q->ctr.dropped++;
            break;
        }
        pthread_cond_wait(&q->not_full, &q->lock);
    }
    put_locked(q, item);
    pthread_mutex_unlock(&q->lock);
    return SS_OK;
}

ss_err_t ss_queue_try_push(ss_queue_t *q, void *item)
{
    ss_err_t e = SS_OK;
    pthread_mutex_lock(&q->lock);
    if (q->closed) {
        e = SS_ERR_STOPPED;
    } else if (q->count >= q->capacity) {
        q->ctr.dropped++;
        e = SS_ERR_FULL;
    } else {
        put_locked(q, item);
    }
    pthread_mutex_unlock(&q->lock);
    return e;
}

ss_err_t ss_queue_pop(ss_queue_t *q, void **item, double timeout_s)
{
    struct timespec deadline;
    if (timeout_s > 0) {
        clock_gettime(CLOCK_MONOTONIC, &deadline);
        double whole = floor(timeout_s);
        deadline.tv_sec += (time_t)whole;
        deadline.tv_nsec += (long)((timeout_s - whole) * 1e9);
        if (deadline.tv_nsec >= 1000000000L) {
            deadline.tv_sec++;
            deadline.tv_nsec -= 1000000000L;
        }
    }
    ss_err_t e = SS_OK;
    pthread_mutex_lock(&q->lock);
    while (q->count == 0) {
        if (q->closed) {
            e = SS_ERR_STOPPED;
            goto out;
        }
        if (timeout_s == 0) {
            e = SS_ERR_TIMEOUT;
            goto out;
        }
        if (timeout_s < 0) {
            pthread_cond_wait(&q->not_empty, &q->lock);
        } else if (pthread_cond_timedwait(&q->not_empty, &q->lock, &deadline) == ETIMEDOUT &&
                   q->count == 0) {
            e = q->closed ? SS_ERR_STOPPED : SS_ERR_TIMEOUT;
            goto out;
        }
    }
    *item = take_locked(q);
    q->ctr.popped++;
    pthread_cond_signal(&q->not_full);
out:
    pthread_mutex_unlock(&q->lock);
    return e;
}

void ss_queue_close(ss_queue_t *q)
{
    pthread_mutex_lock(&q->lock);
    q->closed = 1;
    pthread_cond_broadcast(&q->not_empty);
    pthread_cond_broadcast(&q->not_full);
    pthread_mutex_unlock(&q->lock);
}

int ss_queue_closed(ss_queue_t *q)
{
    pthread_mutex_lock(&q->lock);
    int c = q->closed;
    pthread_mutex_unlock(&q->lock);
    return c;
}

int ss_queue_depth(ss_queue_t *q)
{
    pthread_mutex_lock(&q->lock);
    int n = q->count;
    pthread_mutex_unlock(&q->lock);
    return n;
}

void ss_queue_counters(ss_queue_t *q, ss_queue_counters_t *out)
{
    pthread_mutex_lock(&q->lock);
    *out = q->ctr;
    out->depth = q->count;
    pthread_mutex_unlock(&q->lock);
}
