/*
 * wcs.h — celestial coordinates of frame pixels (ALGORITHM.md §9): the
 * FITS WCS of a frame's keywords (ss_frame_meta_t.wcs), evaluated by
 * WCSLIB at 0-based pixel positions.
 *
 * Every projection WCSLIB knows (TAN, SIN, ZPN, ZEA, ARC, STG, CAR, ...;
 * FITS WCS Papers I and II) with the SIP (A_p_q, B_p_q, their _ORDER) and
 * TPV (PVi_m) distortions, either axis order, the linear part from PCi_j
 * (+ CDELTi), CDi_j or CDELTi + CROTA2, CRPIXi, CRVALi, LONPOLE, LATPOLE.
 * skysieve's own checks first: the axes are RA / DEC, the frame ICRS or
 * FK5 (FK5 J2000 differs from ICRS by < 0.03"; FK4 and others are
 * refused), the reference point and a linear part are given (WCSLIB
 * would default them) and SIP orders are complete. Numeric keys written
 * as quoted strings, as some pipelines do, are read as numbers when they
 * parse fully (counted in `quoted`, for a warning).
 *
 * Pixel convention: skysieve pixels are 0-based (ALGORITHM.md), FITS CRPIX
 * is 1-based: the FITS pixel coordinate of our pixel x is x + 1.
 */
#ifndef SS_WCS_H
#define SS_WCS_H

#include "detection.h"
#include "frame.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SS_SIP_MAX_ORDER 9          /* A_ORDER / B_ORDER accepted up to this */

struct wcsprm;

/* A frame's WCS: WCSLIB's parameters, owned (ss_wcs_free). */
typedef struct ss_wcs {
    struct wcsprm *prm;
    int nwcs;                       /* WCSLIB's count, for freeing */
    int quoted;                     /* numeric keys that came as quoted strings */
    int sip;                        /* 1: a SIP distortion ("-SIP") */
} ss_wcs_t;

/* Build a WCS from a frame's keywords; free it with ss_wcs_free. Returns
 * SS_OK; SS_ERR_UNSUPPORTED when there is no celestial WCS we can
 * evaluate (no CTYPE, not RA/DEC, a projection WCSLIB does not know,
 * another frame); SS_ERR_FORMAT when keys are missing, of the wrong type
 * or singular (nothing to free then). why (may be NULL) gets a one-line
 * reason on failure. */
ss_err_t ss_wcs_from_meta(ss_wcs_t *w, const ss_frame_meta_t *m, char *why, size_t why_len);
void ss_wcs_free(ss_wcs_t *w);

/* Pixel (x, y), 0-based, to RA, Dec in degrees (RA in [0, 360)). Returns 0,
 * or -1 when the point has no sky position (at or beyond the native
 * horizon of the projection, or non-finite input). */
int ss_wcs_pix2sky(const ss_wcs_t *w, double x, double y, double *ra, double *dec);

/* RA, Dec (degrees) to pixel (x, y), 0-based (WCSLIB's wcss2p; its
 * iterative inverse of a distortion). Returns 0, or -1 for a point
 * without a pixel (beyond the projection's horizon). */
int ss_wcs_sky2pix(const ss_wcs_t *w, double ra, double dec, double *x, double *y);

/* The size of pixel (x, y) on the sky, degrees (the great-circle distance
 * to its neighbour in x); NAN where pix2sky fails. */
double ss_wcs_pixel_scale(const ss_wcs_t *w, double x, double y);

/* Set ra, dec and has_radec of every detection in l from its centroid
 * (has_radec = 0 where pix2sky fails). w may be NULL: all has_radec = 0. */
void ss_wcs_apply(const ss_wcs_t *w, ss_detlist_t *l);

#ifdef __cplusplus
}
#endif
#endif
