/*
 * frame_fits.h — frames to and from FITS files, through CFITSIO.
 *
 * Reading: the primary HDU, or the first image extension when the primary
 * has no data; BITPIX 8/16/32/-32/-64 with BZERO/BSCALE; tile-compressed
 * images (.fz) transparently. Pixel type mapping:
 *   BITPIX 8 -> u8; 16 -> i16, or u16 when BZERO = 32768 and BSCALE = 1;
 *   32 -> i32; -32 and -64 -> f32; any other BSCALE/BZERO -> f32 scaled.
 * Metadata: DATE-OBS (+ TIME-OBS when DATE-OBS has no time), EXPTIME or
 * EXPOSURE, TRIMSEC (else DATASEC) as 0-based trim box, BIASSEC as the
 * overscan box (a section that reaches past the image is clipped to it,
 * logged once per distinct section and image size; one that starts
 * outside, of which the image holds less than half along an axis — a
 * cutout's parent section —, or that is malformed is ignored with a
 * warning), and the WCS
 * keywords (CTYPEi, CRPIXi, CRVALi, CDi_j, CDELTi, PCi_j, CROTA2, CUNITi,
 * LONPOLE, LATPOLE, EQUINOX, RADESYS, A_/B_/AP_/BP_ SIP terms). A header
 * value that does not parse (a non-standard DATE-OBS, say) leaves the field
 * unknown and is logged, not fatal. ROWORDER = 'TOP-DOWN' (INDI's
 * frames) sets meta.top_down; the rows are returned in file order, the
 * order the pixel coordinates and any WCS keywords of the file refer to,
 * and the frame and residual writers write ROWORDER back.
 *
 * All functions return SS_OK or an error with a one-line reason in err
 * (which names the file); they never abort on a corrupt file.
 */
#ifndef SS_FRAME_FITS_H
#define SS_FRAME_FITS_H

#include "frame.h"

#ifdef __cplusplus
extern "C" {
#endif

struct ss_result;

/* Size and pixel type of the image a read would return. */
ss_err_t ss_fits_probe(const char *path, int *w, int *h, ss_dtype_t *dt, char *err,
                       size_t err_len);

/* Read an image into f: pixels go to f->pixels (SS_ERR_SIZE if more than
 * f->capacity bytes), f->width/height/dtype/meta are set (meta.source =
 * path). */
ss_err_t ss_fits_read_frame(const char *path, ss_frame_t *f, char *err, size_t err_len);

/* An image opened once for a look at its size and then a read (a gzip'ed
 * file is inflated once, not per call as probe + read would). */
typedef struct ss_fits_image ss_fits_image_t;

/* Open path at its image HDU: SS_OK and *out (close it with
 * ss_fits_image_close), or an error with a message in err (*out NULL). */
ss_err_t ss_fits_image_open(const char *path, ss_fits_image_t **out, char *err, size_t err_len);
/* The same for a FITS file held in memory (n bytes at buf, plain or with
 * tile-compressed HDUs; not gzip'ed), named name in messages and in
 * meta.source: buf must stay unchanged until the image is closed. */
ss_err_t ss_fits_image_open_mem(const void *buf, size_t n, const char *name,
                                ss_fits_image_t **out, char *err, size_t err_len);
/* The image's size and the pixel type a read gives (any pointer may be NULL). */
void ss_fits_image_size(const ss_fits_image_t *im, int *w, int *h, ss_dtype_t *dt);
/* Read the pixels and metadata into f, as ss_fits_read_frame does. */
ss_err_t ss_fits_image_read(ss_fits_image_t *im, ss_frame_t *f, char *err, size_t err_len);
/* Close; accepts NULL and *im NULL, sets *im to NULL. */
void ss_fits_image_close(ss_fits_image_t **im);

/* Open a FITS file for reading with CFITSIO (*fptr: a fitsfile *), a path
 * being a path (no extended-name syntax), gzip'ed files included wherever
 * they are (CFITSIO alone misreads them under a directory with ".Z" or
 * ".bz2" in its name). Returns the CFITSIO status; close with
 * ss_fits_close_readonly(*fptr, *proxy_fd), also after a failure. */
int ss_fits_open_readonly(const char *path, void **fptr, int *proxy_fd);

/* As ss_fits_open_readonly, for reading headers only: of a gzip'ed file
 * only the first SS_FITS_HEADER_PEEK bytes are inflated (the primary
 * header and, for most files, the first extension's), so that a look at
 * DATE-OBS does not inflate the whole file. */
int ss_fits_open_header(const char *path, void **fptr, int *proxy_fd);
#define SS_FITS_HEADER_PEEK ((size_t)64 * 2880)

/* Bytes inflated from gzip'ed files by this process so far (all opens). */
size_t ss_fits_inflated_bytes(void);

/* The status ss_fits_open_readonly returns for a gzip'ed file that
 * inflates to more than ss_fits_inflate_limit() bytes (outside CFITSIO's
 * range of statuses). */
#define SS_FITS_TOO_LARGE 9001

/* The most bytes a gzip'ed FITS file may inflate to, process-wide
 * (default 1 GiB): the daemon sets it from the largest frame its feeds
 * accept. The file is inflated once per open, never past this. */
void ss_fits_set_inflate_limit(size_t bytes);
size_t ss_fits_inflate_limit(void);
void ss_fits_close_readonly(void *fptr, int proxy_fd);

/* The WCS keywords of a FITS file's primary header (as a frame's, above;
 * a header-only file such as solve-field's .wcs) into m->wcs / m->n_wcs;
 * nothing else of m is touched. SS_ERR_FORMAT when there are none. */
ss_err_t ss_fits_read_header_wcs(const char *path, ss_frame_meta_t *m, char *err, size_t err_len);
/* Read an image as float (calibration frames, masks): *out is malloc'ed
 * (w·h floats), the caller frees it. */
ss_err_t ss_fits_read_float(const char *path, float **out, int *w, int *h, char *err,
                            size_t err_len);

/* What the daemon takes from a calibration master's header. */
typedef struct ss_fits_master {
    double exposure;            /* EXPTIME (else EXPOSURE), s; 0 = unknown */
    int has_origin;             /* 1: LTV1/LTV2 <= 0 (integers) place the image in raw
                                 * coordinates: a master trimmed to a region */
    int origin_x, origin_y;     /* then: its first pixel in raw pixels, 0-based (= -LTV) */
} ss_fits_master_t;

/* Read a calibration master (bias, dark, flat, mask) as float, like
 * ss_fits_read_float, and its header's exposure and origin into *info. */
ss_err_t ss_fits_read_master(const char *path, float **out, int *w, int *h,
                             ss_fits_master_t *info, char *err, size_t err_len);

/* Where a master of mw×mh pixels lies in raw pixels, for the processed
 * region (rx, ry, rw, rh): at its LTV origin (a trimmed master, as
 * skysieve-calib writes); at the region's origin when it has the region's
 * size and no LTV (trimmed elsewhere); else at (0, 0), in raw coordinates
 * (raw frames whose size varies share such a master as long as it holds
 * the region). Sets *ox, *oy; returns 1 when the master holds the region,
 * 0 when not. */
int ss_fits_master_place(const ss_fits_master_t *info, int mw, int mh, int rx, int ry, int rw,
                         int rh, int *ox, int *oy);

/* Write a raw frame (its own type; u16 as BITPIX 16 + BZERO 32768) with its
 * metadata (DATE-OBS, EXPTIME, SEQ, WCS keys, TRIMSEC, BIASSEC). Overwrites
 * path. */
ss_err_t ss_fits_write_frame(const char *path, const ss_frame_t *f, char *err, size_t err_len);

/* The one naming rule for residual files (skysieved's FITS sink,
 * skysieve-sub --save-residuals, the Python client's residual_file_name):
 * <dir>/<feed>-<seq, 10 digits>[-<DATE-OBS as yyyymmddThhmmss.sssZ>][-<k>]<ext>,
 * the time when mjd is finite, "-k" for k > 0 (the k-th name taken when
 * the others exist: a name is never reused, a file never overwritten).
 * ext includes its dot (".fits", ".fits.fz"). Returns the length, or -1
 * when it does not fit in n. */
int ss_residual_file_name(char *out, size_t n, const char *dir, const char *feed, uint64_t seq,
                          double mjd, const char *ext, int k);

/* Write a residual: float32 image, NaN for invalid pixels; lossless (no
 * quantisation; compress = 1 writes a GZIP tile-compressed image with
 * quantisation off); header with SEQ, DATE-OBS, MJD-OBS, the shift and
 * its errors, SIGMA, the weights (W0001..), registration status, and the
 * input's WCS keywords; CHECKSUM/DATASUM written last. */
ss_err_t ss_fits_write_residual(const char *path, const struct ss_result *res, int compress,
                                char *err, size_t err_len);

#ifdef __cplusplus
}
#endif
#endif
