/*
 * track.h — detections linked across frames into tracks (ALGORITHM.md §8).
 *
 * A constant-velocity model on the registered (sky-fixed) pixel frame:
 * every positive detection of an ok frame that no track
 * takes starts a seed; a seed and a later detection within max_speed px per
 * frame form a tentative track; a tentative track that collects min_points
 * detections, each within the gate of its prediction, moves by more than
 * its own scatter, and would be formed by chance detections less than
 * once in SS_TRACK_CHANCE frames, is confirmed and gets an id. A track ends after
 * max_missed frames without a detection, and at a history reset (the
 * pointing is lost). Streaks link by their direction and their centroids
 * along it. Host code, the same for both backends.
 */
#ifndef SS_TRACK_H
#define SS_TRACK_H

#include "detection.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SS_TRACK_POINTS 32          /* positions a published track carries (its latest) */
#define SS_TRACK_CHANCE 1000.0      /* frames per chance track a confirmation allows */

typedef enum ss_track_state {
    SS_TRACK_ACTIVE = 0,            /* confirmed; a detection linked in this frame */
    SS_TRACK_COASTING,              /* confirmed; no detection in this frame (a gap) */
    SS_TRACK_ENDED                  /* last report: max_missed frames missed, or a reset */
} ss_track_state_t;

const char *ss_track_state_name(ss_track_state_t s);    /* "active" "coasting" "ended" */
int ss_track_state_parse(const char *s, ss_track_state_t *out); /* 0, or -1 unknown */

typedef struct ss_track_point {
    uint64_t seq;                   /* the frame's seq */
    double mjd;                     /* its mid-exposure MJD UTC; NAN when not timed */
    double x, y;                    /* the detection, input-frame px */
} ss_track_point_t;

typedef struct ss_track {
    uint64_t id;                    /* > 0, unique per feed since the daemon's start */
    ss_kind_t kind;                 /* SS_KIND_STREAK when most of its detections are, else point */
    ss_track_state_t state;
    int n;                          /* detections linked */
    int missed;                     /* frames since its last detection */
    int timed;                      /* 1: t in s from the frames' mid-exposure times
                                     * (velocity px/s); 0: t = frame number (px/frame) */
    double mjd_first, mjd_last;     /* mid-exposure MJD UTC of the first and last
                                     * detection; NAN when not timed */
    uint64_t seq_first, seq_last;
    double x, y;                    /* last detection, input-frame px */
    double vx, vy;                  /* fitted velocity on the registered frame, px per unit t */
    double vx_err, vy_err;          /* its standard errors */
    double rms;                     /* rms distance of its detections from the fitted
                                     * motion, px (the quality figure; streaks: across) */
    double snr;                     /* mean peak SNR of its detections */
    double mag, mag_err;            /* the mean magnitude of its detections that had one,
                                     * weighted by 1/mag_err², and its error: the larger of
                                     * 1/sqrt(Σ weights) and the weighted scatter / sqrt(n)
                                     * (photometry.h); NAN when none had one */
    int has_rate;                   /* 1: timed and a celestial WCS on its first and last */
    double rate;                    /* angular rate, arcsec/s */
    double pa;                      /* position angle of the motion, deg east of north */
    int n_points;                   /* positions below: the latest min(n, SS_TRACK_POINTS) */
    ss_track_point_t points[SS_TRACK_POINTS];   /* oldest first */
} ss_track_t;

/* A frame's track reports: every confirmed track that was linked, coasted
 * or ended at this frame, by id. Fixed capacity, no allocation per frame. */
typedef struct ss_tracklist {
    ss_track_t *items;
    int count;
    int capacity;
    int truncated;                  /* reports that did not fit */
} ss_tracklist_t;

int ss_tracklist_init(ss_tracklist_t *l, int capacity);    /* 0, or -1 */
/* The reports one frame with up to max_dets detections can produce: its
 * linked tracks plus SS_TRACK_EXTRA coasting or ended ones. */
#define SS_TRACK_EXTRA 256
int ss_track_reports_max(int max_dets);
void ss_tracklist_free(ss_tracklist_t *l);

typedef struct ss_track_cfg {
    int enabled;                    /* "track.enabled" */
    double max_speed;               /* "track.max_speed": px per frame a new track may move */
    double gate;                    /* "track.gate": px around the prediction */
    int max_missed;                 /* "track.max_missed": frames a track may miss */
    int min_points;                 /* "track.min_points": detections that confirm */
} ss_track_cfg_t;

typedef struct ss_tracker ss_tracker_t;

/* A tracker with room for the given detections per frame. NULL on
 * allocation failure. cfg is copied. */
ss_tracker_t *ss_tracker_new(const ss_track_cfg_t *cfg);
void ss_tracker_destroy(ss_tracker_t **t);
void ss_tracker_set_cfg(ss_tracker_t *t, const ss_track_cfg_t *cfg);

/* One frame as the tracker sees it. */
typedef struct ss_track_frame {
    uint64_t seq;                   /* its number */
    double mjd_mid;                 /* mid-exposure MJD UTC; NAN when unknown: the tracker
                                     * then counts frames, and a change between timed and
                                     * untimed frames ends the tracks */
    double ox, oy;                  /* input-frame px to registered px (x maps to x + ox),
                                     * continuous over re-references */
    double area;                    /* processed px² (the density of chance detections) */
} ss_track_frame_t;

/* Link one frame's detections (NULL for a frame without any: it counts as
 * a miss); their `track` is set (0 = none). out: cleared, then filled with
 * the reports of this frame. Returns 0, or -1 when out of memory (the
 * tracker is then reset). */
int ss_tracker_frame(ss_tracker_t *t, const ss_track_frame_t *f, ss_detlist_t *dets,
                     ss_tracklist_t *out);

/* Frames passed to ss_tracker_frame since the tracker was made: the
 * next frame is number ss_tracker_frames(t) + 1 (a reset does not
 * restart the count). */
long ss_tracker_frames(const ss_tracker_t *t);

/* Where the live confirmed track `id` is by its fitted motion at one
 * frame: that of mid-exposure MJD mjd_mid when the tracker counts time
 * (ss_track_t.timed), else the frame numbered `frame` as
 * ss_tracker_frames counts. (*u, *v): registered px (ss_track_frame_t);
 * *spread: the 1-σ error of that position from the fit (its scatter, at
 * least 0.2 px, and the velocity's error times the distance in time from
 * the track's mean). Returns 0, or -1 when no live confirmed track has
 * that id (or the time is unknown). */
int ss_tracker_position(const ss_tracker_t *t, uint64_t id, double mjd_mid, long frame, double *u,
                        double *v, double *spread);

/* The pointing was lost (a history reset): every confirmed track is
 * reported ended in out (appended), and nothing carries over. */
void ss_tracker_reset(ss_tracker_t *t, ss_tracklist_t *out);

#ifdef __cplusplus
}
#endif
#endif
