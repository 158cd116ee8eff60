/*
 * queue.h — a bounded, thread-safe FIFO of pointers between two threads of
 * the daemon (source -> worker, worker -> publisher, worker -> file sinks).
 *
 * The capacity is fixed at creation: nothing is allocated per push. When
 * the queue is full, the policy decides (ARCHITECTURE.md "Threads"):
 *   SS_QUEUE_DROP_OLDEST  the oldest item is evicted and handed back to the
 *                         pusher (which returns it to its pool and counts it);
 *   SS_QUEUE_BLOCK        the pusher waits for room.
 * Every eviction is counted here as well (ss_queue_counters).
 *
 * Shutdown: ss_queue_close() makes further pushes fail with SS_ERR_STOPPED
 * and wakes every waiter; pops go on returning the queued items until the
 * queue is empty and only then report SS_ERR_STOPPED — that is how a
 * SIGTERM drains the queues without losing what was accepted.
 */
#ifndef SS_QUEUE_H
#define SS_QUEUE_H

#include "config/config.h"
#include "pipeline/ss_common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ss_queue_policy_t (SS_QUEUE_DROP_OLDEST, SS_QUEUE_BLOCK) and its names
 * come from the config module, whose "queue.policy" key selects it. */

typedef struct ss_queue ss_queue_t;

typedef struct ss_queue_counters {
    uint64_t pushed;        /* items accepted into the queue */
    uint64_t popped;        /* items taken out by the consumer */
    uint64_t dropped;       /* items evicted by DROP_OLDEST (or refused by try_push) */
    int depth;              /* items in the queue now */
    int max_depth;          /* highest depth seen since creation */
    int capacity;
} ss_queue_counters_t;

/* A queue of up to `capacity` (>= 1) items. NULL on failure. */
ss_queue_t *ss_queue_new(int capacity, ss_queue_policy_t policy);
/* Accepts NULL; nulls *q. The items still queued are not freed (the
 * owner drains the queue first). */
void ss_queue_destroy(ss_queue_t **q);

/* Change the policy (reload); waiters re-check on the next wake-up. */
void ss_queue_set_policy(ss_queue_t *q, ss_queue_policy_t policy);

/* Append item (non-NULL). Returns SS_OK; *evicted (may be NULL only for a
 * BLOCK queue) receives the item that DROP_OLDEST threw away to make room,
 * or NULL. Returns SS_ERR_STOPPED (item not queued, still the caller's)
 * once the queue is closed — also while blocked waiting for room. */
ss_err_t ss_queue_push(ss_queue_t *q, void *item, void **evicted);

/* Append without ever waiting or evicting: SS_ERR_FULL (counted as a drop,
 * item stays the caller's) when there is no room, SS_ERR_STOPPED when
 * closed. For producers that must never block (the pipeline -> sinks). */
ss_err_t ss_queue_try_push(ss_queue_t *q, void *item);

/* Take the oldest item, waiting up to timeout_s seconds (< 0: forever,
 * 0: do not wait). Returns SS_OK with *item set, SS_ERR_TIMEOUT, or
 * SS_ERR_STOPPED when the queue is closed AND empty. */
ss_err_t ss_queue_pop(ss_queue_t *q, void **item, double timeout_s);

/* Stop accepting items and wake everyone (idempotent). */
void ss_queue_close(ss_queue_t *q);
int ss_queue_closed(ss_queue_t *q);

int ss_queue_depth(ss_queue_t *q);
void ss_queue_counters(ss_queue_t *q, ss_queue_counters_t *out);

#ifdef __cplusplus
}
#endif
#endif
