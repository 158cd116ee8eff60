/*
 * wcs.h — celestial coordinates of frame pixels (ALGORITHM.md §9): the
 * FITS WCS of a frame's keywords (ss_frame_meta_t.wcs), gnomonic (TAN)
 * projection with optional SIP distortion, evaluated at 0-based pixel
 * positions.
 *
 * Supported (FITS WCS Papers I and II, SIP convention of Shupe et al.
 * 2005): CTYPE1/2 = RA---TAN / DEC--TAN (either axis order), with the
 * "-SIP" suffix for distortion (A_ORDER, A_p_q, B_ORDER, B_p_q; the
 * inverse AP/BP polynomials are not needed and ignored); the linear part
 * from PCi_j (+ CDELTi), else CDi_j, else CDELTi + CROTA2 (the precedence
 * of WCSLIB); CRPIXi, CRVALi, LONPOLE (default 180°). RADESYS ICRS or FK5
 * (FK5 J2000 differs from ICRS by < 0.03"); FK4 and other frames are
 * refused. Other projections are refused.
 *
 * Pixel convention: skysieve pixels are 0-based (ALGORITHM.md), FITS CRPIX
 * is 1-based: the FITS pixel coordinate of our pixel x is x + 1.
 *
 * Built once per frame (or once per series when the keys do not change)
 * from the keys, no allocation; evaluation is a few dozen flops.
 */
#ifndef SS_WCS_H
#define SS_WCS_H

#include "detection.h"
#include "frame.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SS_SIP_MAX_ORDER 9          /* A_ORDER / B_ORDER accepted up to this */

typedef struct ss_wcs {
    int lon_axis;                   /* 0: axis 1 is RA; 1: axis 2 is RA */
    double crpix[2];                /* FITS reference pixel (1-based) */
    double crval[2];                /* RA, Dec of the reference point (deg) */
    double cd[2][2];                /* pixel offset -> intermediate world (deg/px), FITS axis order */
    double lonpole;                 /* native longitude of the celestial pole (deg) */
    int sip;                        /* 1: SIP distortion present */
    int a_order, b_order;
    double a[SS_SIP_MAX_ORDER + 1][SS_SIP_MAX_ORDER + 1];  /* a[p][q] = A_p_q */
    double b[SS_SIP_MAX_ORDER + 1][SS_SIP_MAX_ORDER + 1];
    /* derived once: sin/cos of the reference point's Dec, and cd⁻¹ */
    double sin_dp, cos_dp;
    double cd_inv[2][2];
} ss_wcs_t;

/* Build a WCS from a frame's keywords. Returns SS_OK; SS_ERR_UNSUPPORTED
 * when there is no celestial WCS we can evaluate (no CTYPE, another
 * projection or frame); SS_ERR_FORMAT when keys are missing, of the wrong
 * type or singular. why (may be NULL) gets a one-line reason on failure.
 * Numeric keys given as strings that parse fully as numbers are accepted. */
ss_err_t ss_wcs_from_meta(ss_wcs_t *w, const ss_frame_meta_t *m, char *why, size_t why_len);

/* Pixel (x, y), 0-based, to RA, Dec in degrees (RA in [0, 360)). Returns 0,
 * or -1 when the point has no sky position (at or beyond the native
 * horizon of the projection, or non-finite input). */
int ss_wcs_pix2sky(const ss_wcs_t *w, double x, double y, double *ra, double *dec);

/* RA, Dec (degrees) to pixel (x, y), 0-based: the exact inverse of the TAN
 * part, and of SIP by Newton iteration on the forward polynomials (to
 * 1e-10 px) started from the undistorted position, so where a (too
 * strong) distortion folds over, the preimage found is the one reached
 * from there. Returns 0, or -1 for a point on the far hemisphere or when
 * the iteration does not converge. */
int ss_wcs_sky2pix(const ss_wcs_t *w, double ra, double dec, double *x, double *y);

/* Set ra, dec and has_radec of every detection in l from its centroid
 * (has_radec = 0 where pix2sky fails). w may be NULL: all has_radec = 0. */
void ss_wcs_apply(const ss_wcs_t *w, ss_detlist_t *l);

#ifdef __cplusplus
}
#endif
#endif
