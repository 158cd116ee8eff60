/*
 * outputs.h — the residual's optional forms, besides the float32 plane:
 * binary16 (float16) of the whole frame, and stamps, cut-outs of the
 * residual around the detections (PROTOCOL.md §5a, §5b). Which forms a
 * frame's result carries is asked per frame (ss_pipeline_set_outputs);
 * the backend makes them where the residual lives (on the GPU for CUDA),
 * so that only their bytes travel.
 */
#ifndef SS_OUTPUTS_H
#define SS_OUTPUTS_H

#include <stddef.h>
#include <stdint.h>

#include "detection.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SS_STAMPS_MAX 256               /* stamps per frame, at most */
#define SS_STAMP_PIXELS_MAX (1u << 18)  /* stamp pixels per frame, at most (1 MiB of floats) */
#define SS_STAMP_SIDE_MAX 255           /* px, a stamp's side at most */

/* What the next frames' results carry (ss_pipeline_set_outputs). */
typedef struct ss_outputs {
    int f32;                /* res->residual (the float32 plane); 1 by default */
    int f16;                /* res->residual16 */
    int stamps;             /* res->stamps */
    int stamp_size;         /* a point's stamp side, px (odd) */
    int stamp_streak_max;   /* a streak's box side at most, px (>= stamp_size) */
    int stamp_max;          /* stamps per frame at most (<= SS_STAMPS_MAX) */
} ss_outputs_t;

/* One stamp: the residual's box [x0, x0 + w) × [y0, y0 + h) (residual
 * pixels: the processed region's grid), of detection det. */
typedef struct ss_stamp {
    int det;                /* index into the frame's detections */
    int x0, y0, w, h;
    size_t offset;          /* its first pixel in ss_stamps_t.pixels */
} ss_stamp_t;

/* A frame's stamps: boxes in detection order, pixels box after box, each
 * row-major, float32 as the residual (NaN = invalid). */
typedef struct ss_stamps {
    ss_stamp_t items[SS_STAMPS_MAX];
    int count;
    int truncated;          /* detections left without a stamp (count or pixel budget) */
    size_t npix;            /* pixels used */
    float *pixels;          /* SS_STAMP_PIXELS_MAX floats */
} ss_stamps_t;

/* The default outputs: the float32 residual alone; stamps of 31 px, streak
 * boxes up to 127 px, 64 per frame. */
ss_outputs_t ss_outputs_default(void);

/* The boxes of dets (positions in residual pixels, i.e. before the
 * region's origin is added) in a w × h residual, into st (pixels not
 * touched): a point's (and a cosmic ray's) is the square of side
 * o->stamp_size centred on its peak pixel; a streak's is its bounding box
 * grown by (stamp_size − 1)/2 on every side, each side capped at
 * o->stamp_streak_max around the box's centre. Boxes are clipped at the
 * frame's edge. Detections past o->stamp_max or past the pixel budget get
 * none (st->truncated). */
void ss_stamp_boxes(const ss_detlist_t *dets, int w, int h, const ss_outputs_t *o,
                    ss_stamps_t *st);

/* Copy the boxes of st out of plane (w floats per row) into st->pixels. */
void ss_stamps_cut(const float *plane, int w, ss_stamps_t *st);

/* dst[i] = ss_f16_bits(src[i]) for n pixels. */
void ss_plane_to_f16(const float *src, size_t n, uint16_t *dst);

#ifdef __cplusplus
}
#endif
#endif
