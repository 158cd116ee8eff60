/*
 * solver.h — a feed's plate solving off the frame path (README "Plate
 * solving"), one thread per feed with wcs.solve on (solver.c). The feed
 * owns it (feed.h); its worker submits and takes solutions.
 */
#ifndef SS_SOLVER_H
#define SS_SOLVER_H

#include <stdint.h>

#include "config/config.h"
#include "pipeline/frame.h"
#include "pipeline/photometry.h"
#include "stats.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ss_solver ss_solver_t;

/* ss_solver_new starts the feed's solver thread with cfg's wcs.* keys
 * (NULL on failure); ss_solver_destroy kills a solve under way, joins and
 * frees (NULL is accepted; *p is nulled). */
ss_solver_t *ss_solver_new(const char *feed, const ss_feed_cfg_t *cfg, ss_feed_stats_t *stats);
void ss_solver_destroy(ss_solver_t **p);
/* Worker: solve frame f (a reference without a WCS; its result said
 * sky_epoch = epoch, reg_x/y = ox/oy). The pixels are copied; a job not
 * yet started is replaced. Never waits for a solve. */
void ss_solver_submit(ss_solver_t *s, const ss_frame_t *f, uint64_t epoch, double ox, double oy);
/* Worker: a new solution, if one came since the last call: 1 with its
 * WCS keys (up to SS_WCS_MAX into keys, *n), what it was submitted with,
 * and the zero point fitted against its matched stars' catalogue
 * magnitudes (*zp; source SS_PHOT_NONE when none); else 0. */
int ss_solver_take(ss_solver_t *s, ss_wcs_key_t *keys, int *n, uint64_t *epoch, double *ox,
                   double *oy, ss_phot_zp_t *zp);

#ifdef __cplusplus
}
#endif
#endif
