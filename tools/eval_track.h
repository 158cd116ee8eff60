/*
 * eval_track.h — the track figures of skysieve-eval (docs/QUALITY.md,
 * Definitions, "Tracks"), apart from the program so that they can be
 * tested on hand-built inputs.
 *
 * The caller collects, over the ok frames: every positive detection with
 * its track id (res.dets[i].track) and the truth mover it matches; every
 * truth mover the completeness scoring counts, with the detection that
 * found it; and every track report (res.tracks). ss_evt_score then:
 *  - credits each detection to a track: its own id, or, when it carries 0
 *    (linked before the track was confirmed), the track whose reported
 *    points name it (same frame seq, same position);
 *  - per truth mover segment (the stretch between two wraps) with at
 *    least min_points found detections: "in one track" when one track is
 *    credited with >= SS_EVT_ONE_TRACK of them; "split" (not in one) when
 *    two or more tracks each hold >= min_points of them; "untracked" when
 *    none is credited; "partly tracked" otherwise;
 *  - per confirmed track with credited detections: "pure" when one truth
 *    mover segment holds >= SS_EVT_PURE of them, "false" when more than
 *    half match no truth mover;
 *  - the velocity error of the pure tracks: the last report's velocity
 *    (px/s times frame_interval when timed) against the mover's truth
 *    velocity, px/frame.
 */
#ifndef SS_EVAL_TRACK_H
#define SS_EVAL_TRACK_H

#include <stdio.h>

#include "pipeline/track.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SS_EVT_SPEED_BINS 8
extern const double ss_evt_speed_bins[SS_EVT_SPEED_BINS];  /* 0.2 0.5 1 3 10 30 100 300 px/frame */
#define SS_EVT_ONE_TRACK 0.8        /* share of a segment's found detections: in one track */
#define SS_EVT_PURE 0.9             /* share of a track's detections on one mover segment: pure */
#define SS_EVT_SNR7 6.5             /* segment SNR above this rounds to the bin of 7 or up */
#define SS_EVT_POS_TOL 1e-3         /* px: a reported point names a detection this close */
#define SS_EVT_WRAP_PX 1.0          /* derived motion: positions this far off one line are on
                                     * another branch */

/* A positive detection of an ok frame. */
typedef struct ss_evt_det {
    uint64_t seq;                   /* the frame */
    double x, y;                    /* input-frame px */
    uint64_t track;                 /* res.dets[i].track: 0 = none */
    int mover;                      /* the truth mover it belongs to (skysieve-eval: the
                                     * nearest within max(5 px, its found radius)), -1 none */
    int segment;                    /* that mover's segment */
    double vx, vy;                  /* that mover's truth velocity, px/frame */
} ss_evt_det_t;

/* A truth mover the completeness scoring counted in an ok frame. */
typedef struct ss_evt_sample {
    int mover, segment;
    int pair;                       /* its crossing pair, -1 none */
    uint64_t seq;
    double snr;                     /* truth SNR in this frame */
    double speed;                   /* |truth velocity|, px/frame */
    long det;                       /* the detection that found it (index of ss_evt_add_det),
                                     * -1 not found */
} ss_evt_sample_t;

/* A confirmed track as its reports showed it. */
typedef struct ss_evt_track {
    uint64_t id;
    ss_track_t last;                /* its last report */
    ss_track_point_t *pts;          /* every point any report named, seq ascending */
    int n_pts, cap_pts;
} ss_evt_track_t;

/* What the caller collected (growable arrays; zero-initialise, then
 * ss_evt_free). */
typedef struct ss_evt {
    ss_evt_det_t *dets;
    long n_dets, cap_dets;
    ss_evt_sample_t *samples;
    long n_samples, cap_samples;
    ss_evt_track_t *tracks;
    long n_tracks, cap_tracks;
    long reports;                   /* reports added */
} ss_evt_t;

/* Append a detection; returns its index, or -1 out of memory. */
long ss_evt_add_det(ss_evt_t *e, const ss_evt_det_t *d);
/* Append a sample (its det an index returned above, or -1); 0, or -1. */
int ss_evt_add_sample(ss_evt_t *e, const ss_evt_sample_t *s);
/* A track report, in the order of the frames: it becomes the track's last
 * report, and its points newer than those held are added. 0, or -1. */
int ss_evt_add_report(ss_evt_t *e, const ss_track_t *r);
void ss_evt_free(ss_evt_t *e);

typedef struct ss_evt_cfg {
    int min_points;                 /* found detections a segment needs to count (3) */
    double frame_interval;          /* s per frame, for timed tracks; NAN: unknown (their
                                     * velocities are then not scored) */
    double mpix_frames;             /* processed area of the ok frames, Mpix-frames */
} ss_evt_cfg_t;

typedef struct ss_evt_result {
    long segments;                  /* eligible segments */
    long in_one, split, partial, untracked;
    long segments_snr7, in_one_snr7;
    long crossing_segments, crossing_in_one;    /* of movers of crossing pairs */
    long seg_speed[SS_EVT_SPEED_BINS], in_one_speed[SS_EVT_SPEED_BINS];
    double completeness, completeness_snr7, completeness_crossing;  /* NAN without segments */
    double completeness_speed[SS_EVT_SPEED_BINS];
    long tracks;                    /* confirmed tracks credited with a detection */
    long pure, false_tracks;
    double purity;                  /* pure / tracks */
    double false_per_100mpix;       /* false tracks per 100 Mpix-frames */
    long vel_n;                     /* pure tracks whose velocity was scored */
    double vel_rms;                 /* px/frame */
    double vel_rel_rms;             /* |error| / |truth velocity| (movers that move) */
    long vel_n_speed[SS_EVT_SPEED_BINS];
    double vel_rel_rms_speed[SS_EVT_SPEED_BINS];
} ss_evt_result_t;

/* The speed bin of v px/frame: the nearest entry of ss_evt_speed_bins in
 * log(v) (a tie goes to the lower; 0 to the first). */
int ss_evt_speed_bin(double v);

/* Score what was collected. cases: when not NULL, the failures are listed
 * there (segments not in one track, tracks not pure, the worst velocity
 * errors). Returns 0, or -1 out of memory. */
int ss_evt_score(const ss_evt_t *e, const ss_evt_cfg_t *c, ss_evt_result_t *r, FILE *cases);

/* The motion of one truth mover from its positions, for truth files
 * without velocities and segments: seq[0..n) ascending, (px, py) its sky
 * (registered-frame) positions = frame position + true shift. Velocity:
 * the one most pairs of positions up to 8 frames apart agree on (within
 * 0.002 px/frame; pairs across a wrap disagree). Segment: the branch, as
 * skysieve-synth numbers it: positions whose p - v·seq agree within
 * SS_EVT_WRAP_PX lie on one branch; a branch among the last 16 keeps its
 * number, another gets the next. Fills *vx, *vy (0 when n < 2) and
 * segment[0..n). Returns 0, or -1 out of memory. */
int ss_evt_derive_motion(const uint64_t *seq, const double *px, const double *py, int n,
                         double *vx, double *vy, int *segment);

#ifdef __cplusplus
}
#endif
#endif
