/*
 * detection.h — one detected component (ALGORITHM.md §7) and the list of
 * them for a frame.
 */
#ifndef SS_DETECTION_H
#define SS_DETECTION_H

#include "ss_common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ss_kind {
    SS_KIND_POINT = 0,
    SS_KIND_STREAK,
    SS_KIND_COSMIC
} ss_kind_t;

const char *ss_kind_name(ss_kind_t k);          /* "point" "streak" "cosmic" */
int ss_kind_parse(const char *s, ss_kind_t *k); /* 0 ok, -1 unknown */

/* flags */
#define SS_DET_TOUCHES_INVALID 0x1  /* a pixel of the component borders an invalid pixel */
#define SS_DET_TOUCHES_EDGE    0x2  /* the component reaches the frame edge */

typedef struct ss_detection {
    int label;                  /* component label in the frame's label plane (sign · (index+1)) */
    int sign;                   /* +1 brighter than the background, -1 fainter (vanished) */
    ss_kind_t kind;
    double x, y;                /* position, 0-based pixel centres: a point's from its SNR
                                 * peak (peak_core.h), else the centroid weighted by
                                 * sign·r' > 0 */
    double flux;                /* Σ sign·r' over the component (ADU) */
    double flux_err;            /* σ·sqrt(area) */
    double peak_snr;            /* max sign·z over the component */
    int peak_x, peak_y;         /* pixel of that peak */
    int area;                   /* pixels */
    int bbox_x0, bbox_y0, bbox_x1, bbox_y1; /* inclusive bounds */
    double a, b;                /* semi-axes (px, from the second moments: sqrt of eigenvalues) */
    double theta;               /* major-axis angle, radians from +x towards +y, in (-pi/2, pi/2] */
    double x0, y0, x1, y1;      /* streak end points (both equal x, y for other kinds) */
    double peak_fraction;       /* brightest unfiltered-residual pixel / flux (cosmic test) */
    int flags;                  /* SS_DET_* */
    int has_radec;              /* 1 when a celestial WCS was known */
    double ra, dec;             /* degrees, ICRS, when has_radec */
    uint64_t track;             /* id of the confirmed track it was linked to (track.h); 0 = none */
    double mag, mag_err;        /* magnitude from flux and the frame's zero point
                                 * (photometry.h); NAN when unknown */
} ss_detection_t;

/* A frame's detections, most significant first (ss_measure_rank). */
typedef struct ss_detlist {
    ss_detection_t *items;
    int count;
    int capacity;               /* fixed at creation: no allocation per frame */
    int truncated;              /* components found (area >= min_area) but not reported:
                                 * detect.max / the capacity keep the most significant */
} ss_detlist_t;

/* Allocate room for `capacity` detections. Returns 0, or -1 on failure. */
int ss_detlist_init(ss_detlist_t *l, int capacity);
void ss_detlist_free(ss_detlist_t *l);
void ss_detlist_clear(ss_detlist_t *l);
/* Append; returns the new slot, or NULL (and counts truncated) when full. */
ss_detection_t *ss_detlist_push(ss_detlist_t *l);

#ifdef __cplusplus
}
#endif
#endif
