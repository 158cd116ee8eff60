/*
 * frame.h — the raw frame as a source delivers it, and the pool that owns
 * frame buffers.
 *
 * A source fills a frame taken from a pool (pixels in the pool's buffer,
 * which is pinned host memory when the CUDA backend is in use), hands it to
 * the pipeline through a queue, and the pipeline puts it back. Nothing is
 * allocated per frame: pools are sized at start (or reload).
 */
#ifndef SS_FRAME_H
#define SS_FRAME_H

#include "ss_common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SS_NAME_MAX 64          /* feed, series and source names, with the NUL */
#define SS_INPUT_MAX 256        /* an input file's base name, with the NUL (NAME_MAX + 1) */
#define SS_PATH_MAX 512
#define SS_WCS_MAX 48           /* WCS keywords carried per frame */
#define SS_META_MAX 4096        /* sender's free "meta" object as compact JSON, with the NUL */

/* One FITS-style WCS keyword (CTYPE1, CRVAL1, CD1_1, PV2_1, A_0_2, ...). */
typedef struct ss_wcs_key {
    char key[9];                /* FITS keyword, upper case, <= 8 chars */
    int is_string;              /* 1: sval holds the value; 0: dval does */
    double dval;
    char sval[72];
} ss_wcs_key_t;

typedef struct ss_frame_meta {
    uint64_t seq;                   /* sender's frame counter */
    char series[SS_NAME_MAX];       /* sender's series id ("" if none) */
    char feed[SS_NAME_MAX];         /* feed the frame belongs to */
    char source[SS_PATH_MAX];       /* file name, endpoint, or "synth" */
    char input[SS_INPUT_MAX];       /* the input file's base name (ss_input_name), "" for
                                     * frames not read from a file; results carry it
                                     * (PROTOCOL.md §5 "input") */
    int seq_missing;                /* the input had no frame number (a FITS file without SEQ) */
    double mjd_obs;                 /* start of exposure, MJD UTC; NAN if unknown */
    double exposure;                /* seconds; 0 if unknown */
    int has_zp_header;              /* 1: the FITS header gave a photometric zero point */
    double zp_header, zp_header_err; /* MAGZERO, MAGZPT (MAGZRR) or PHOTZP (PHOTZPER), mag;
                                     * the error 0 when not given (photometry.h) */
    double recv_mono;               /* monotonic time it was received (s) */
    int top_down;                   /* FITS ROWORDER = 'TOP-DOWN' (INDI, N.I.N.A.): the first
                                     * row is the top of the picture. Rows stay in file
                                     * order (pixel coordinates and WCS keywords refer to
                                     * it); written files say ROWORDER again */
    /* Trim section from the input (FITS TRIMSEC/DATASEC), 0-based, inclusive
     * start, exclusive end; trim_w == 0 means none given. */
    int trim_x0, trim_y0, trim_w, trim_h;
    /* Overscan section (FITS BIASSEC), the same way; bias_w == 0: none. */
    int bias_x0, bias_y0, bias_w, bias_h;
    int n_wcs;
    ss_wcs_key_t wcs[SS_WCS_MAX];
    /* The sender's free-form "meta" object (proto/PROTOCOL.md), compact
     * JSON text, "" when none: carried untouched to the published results. */
    char meta_json[SS_META_MAX];
} ss_frame_meta_t;

typedef struct ss_frame_pool ss_frame_pool_t;

typedef struct ss_frame {
    int width, height;
    ss_dtype_t dtype;
    void *pixels;               /* width*height*ss_dtype_size(dtype) bytes, row-major */
    uint8_t *valid;             /* optional source-supplied mask, 1 = valid; NULL = none */
    size_t capacity;            /* bytes available at pixels (and w*h bytes at valid) */
    ss_frame_meta_t meta;
    ss_frame_pool_t *pool;      /* owner; NULL for frames not from a pool */
} ss_frame_t;

/* Host memory provider: plain malloc by default, pinned memory from the
 * CUDA backend. alloc returns NULL on failure. */
typedef struct ss_host_allocator {
    void *(*alloc)(size_t bytes, void *user);
    void (*free)(void *p, void *user);
    void *user;
} ss_host_allocator_t;

/* Bytes of pixel data of a frame (width * height * pixel size). */
size_t ss_frame_bytes(const ss_frame_t *f);
/* Reset metadata to "unknown" values (mjd_obs NAN, strings empty). */
void ss_frame_meta_clear(ss_frame_meta_t *m);

/* The base name of path (after the last '/') into dst (n bytes), as
 * results name an input: valid UTF-8 without control characters — any
 * other byte becomes '?' — cut at a character boundary to fit. */
void ss_input_name(char *dst, size_t n, const char *path);
/* Find a WCS keyword; NULL if absent. */
const ss_wcs_key_t *ss_frame_wcs_find(const ss_frame_meta_t *m, const char *key);
/* The middle of the exposure, MJD UTC (ALGORITHM §9: a detection's time);
 * NAN when the frame has no time. */
double ss_frame_mid_mjd(const ss_frame_meta_t *m);

/* Create a pool of `count` frames of `max_bytes` pixel bytes each, and,
 * when max_mask > 0, a mask buffer of max_mask bytes per frame (one byte
 * per pixel: the largest frame's pixel count; 0 for sources that never
 * supply a mask). alloc may be NULL (malloc). Returns NULL on failure.
 * Thread-safe get/put. */
ss_frame_pool_t *ss_frame_pool_new(int count, size_t max_bytes, size_t max_mask,
                                   const ss_host_allocator_t *alloc);
void ss_frame_pool_destroy(ss_frame_pool_t **pool);
/* Take a free frame, or NULL if none is free (never blocks). The frame's
 * metadata is cleared, valid is set to NULL. */
ss_frame_t *ss_frame_pool_get(ss_frame_pool_t *pool);
/* Return a frame to its pool; NULL is accepted. */
void ss_frame_pool_put(ss_frame_t *f);
/* The mask buffer owned by a pooled frame (max_mask bytes): a source that
 * supplies a validity mask fills it and sets f->valid to it. NULL for
 * frames not from a pool, or a pool made without mask buffers. */
uint8_t *ss_frame_mask_buffer(ss_frame_t *f);
int ss_frame_pool_free_count(ss_frame_pool_t *pool);
size_t ss_frame_pool_max_bytes(const ss_frame_pool_t *pool);

#ifdef __cplusplus
}
#endif
#endif
