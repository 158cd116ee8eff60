/*
 * cfgsnap.h — how the config reaches the daemon's threads: one way, as an
 * immutable snapshot handed over at a frame boundary (ARCHITECTURE.md
 * "Threads").
 *
 * The main thread owns the running config (ss_daemon's cfg: it alone
 * reads and writes it). At start and after every successful reload it
 * publishes a copy on the board (ss_cfg_board_publish). Every other thread
 * holds a reference to one snapshot and reads its keys without a lock; at
 * its frame boundary (the worker between frames, the sinks between
 * results) it calls ss_cfg_refresh, which takes the newest snapshot when
 * the board has a newer one. That check is one atomic load: no lock and no
 * allocation unless a reload happened. A snapshot is freed by whoever
 * drops its last reference.
 */
#ifndef SS_CFGSNAP_H
#define SS_CFGSNAP_H

#include <stdint.h>

#include "config/config.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ss_cfg_snap ss_cfg_snap_t;
typedef struct ss_cfg_board ss_cfg_board_t;

/* A board whose first snapshot (generation 1) is a copy of cfg; NULL when
 * out of memory. */
ss_cfg_board_t *ss_cfg_board_new(const ss_config_t *cfg);
/* Drop the board and its reference to the current snapshot (holders keep
 * theirs); NULL accepted; *b is nulled. */
void ss_cfg_board_destroy(ss_cfg_board_t **b);

/* Main thread: publish a copy of cfg as the next generation. 0, or -1 when
 * out of memory (the board keeps the snapshot it had). */
int ss_cfg_board_publish(ss_cfg_board_t *b, const ss_config_t *cfg);

/* Any thread: a new reference to the current snapshot (release it with
 * ss_cfg_snap_release). */
ss_cfg_snap_t *ss_cfg_board_take(ss_cfg_board_t *b);
/* A reference to the current snapshot when it is newer than held (or held
 * is NULL), else NULL: the caller compares and then swaps. */
ss_cfg_snap_t *ss_cfg_board_newer(ss_cfg_board_t *b, const ss_cfg_snap_t *held);
/* At a frame boundary: replace *held by the current snapshot when there is
 * a newer one (the old reference dropped). Returns 1 when it did, else 0. */
int ss_cfg_refresh(ss_cfg_board_t *b, ss_cfg_snap_t **held);

/* Another reference to s (which the caller holds): s. */
ss_cfg_snap_t *ss_cfg_snap_ref(ss_cfg_snap_t *s);
/* Drop a reference (the last one frees the snapshot); NULL accepted; *s is
 * nulled. */
void ss_cfg_snap_release(ss_cfg_snap_t **s);
/* The snapshot's config, valid while the reference is held. */
const ss_config_t *ss_cfg_snap_config(const ss_cfg_snap_t *s);
/* Its generation: 1 at start, +1 per reload. */
uint64_t ss_cfg_snap_generation(const ss_cfg_snap_t *s);

#ifdef __cplusplus
}
#endif
#endif
