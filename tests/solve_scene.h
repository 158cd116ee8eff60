/*
 * solve_scene.h — a star field from real catalogue positions, for the
 * plate-solving tests (check_solve.c, check_daemon.c): the Tycho-2 stars
 * of astrometry.net's index file (read with query-starkd, which ships
 * with astrometry.net: its FITS output, the text one has 3 decimals)
 * projected through a known TAN WCS (rotated, east left) into an image of
 * Gaussian stars whose fluxes follow their V_T magnitudes. Header-only
 * (static functions), included by the Check files; needs ss_test.h.
 */
#ifndef SS_SOLVE_SCENE_H
#define SS_SOLVE_SCENE_H

#include <check.h>
#include <fitsio.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pipeline/solve.h"
#include "pipeline/wcs.h"

#define SCENE_INDEX_DIR "/usr/share/astrometry"
#define SCENE_INDEX10 SCENE_INDEX_DIR "/index-tycho2-10.littleendian.fits"
#define SCENE_D2R (M_PI / 180.0)
#define SCENE_CAT_MAX 4000

typedef struct scene_cat {
    int n;
    double ra[SCENE_CAT_MAX], dec[SCENE_CAT_MAX], mag[SCENE_CAT_MAX];
} scene_cat_t;

/* Why the scene cannot be made here (solve-field, query-starkd or the
 * index missing), or NULL when it can. */
static inline const char *scene_missing(void)
{
    if (!ss_solve_available("solve-field") || !ss_solve_available("query-starkd"))
        return "solve-field / query-starkd not found (Debian astrometry.net)";
    if (access(SCENE_INDEX10, R_OK) != 0)
        return SCENE_INDEX10 " missing (Debian astrometry-data-tycho2-10-19)";
    return NULL;
}

static inline void scene_add_num(ss_frame_meta_t *m, const char *k, double v)
{
    ss_wcs_key_t *w = &m->wcs[m->n_wcs++];
    memset(w, 0, sizeof *w);
    ss_strlcpy(w->key, k, sizeof w->key);
    w->dval = v;
}

static inline void scene_add_str(ss_frame_meta_t *m, const char *k, const char *v)
{
    ss_wcs_key_t *w = &m->wcs[m->n_wcs++];
    memset(w, 0, sizeof *w);
    ss_strlcpy(w->key, k, sizeof w->key);
    w->is_string = 1;
    ss_strlcpy(w->sval, v, sizeof w->sval);
}

/* The known WCS of a w×h frame: TAN at (ra0, dec0) on the pixel
 * ((w-1)/2 + dx, (h-1)/2 + dy) (0-based), scale arcsec/px, east left,
 * the y axis rotated by rot degrees east of north. */
static inline void scene_wcs(ss_wcs_t *wcs, int w, int h, double ra0, double dec0, double scale,
                             double rot, double dx, double dy)
{
    ss_frame_meta_t *m = calloc(1, sizeof *m);
    ck_assert_ptr_nonnull(m);
    const double s = scale / 3600.0, c = cos(rot * SCENE_D2R), n = sin(rot * SCENE_D2R);
    scene_add_str(m, "CTYPE1", "RA---TAN");
    scene_add_str(m, "CTYPE2", "DEC--TAN");
    scene_add_num(m, "CRVAL1", ra0);
    scene_add_num(m, "CRVAL2", dec0);
    scene_add_num(m, "CRPIX1", (w - 1) / 2.0 + 1.0 + dx);
    scene_add_num(m, "CRPIX2", (h - 1) / 2.0 + 1.0 + dy);
    scene_add_num(m, "CD1_1", -s * c);
    scene_add_num(m, "CD1_2", s * n);
    scene_add_num(m, "CD2_1", s * n);
    scene_add_num(m, "CD2_2", s * c);
    char why[160];
    ck_assert_msg(ss_wcs_from_meta(wcs, m, why, sizeof why) == SS_OK, "%s", why);
    free(m);
}

/* The index's stars within radius degrees of (ra0, dec0); dir: a scratch
 * directory. */
static inline void scene_catalogue(scene_cat_t *c, const char *dir, double ra0, double dec0,
                                   double radius)
{
    char out[600], cmd[1400];
    snprintf(out, sizeof out, "%s/stars.fits", dir);
    snprintf(cmd, sizeof cmd, "query-starkd -r %.6f -d %.6f -R %.4f -T -o %s %s >/dev/null 2>&1",
             ra0, dec0, radius, out, SCENE_INDEX10);
    ck_assert_int_eq(system(cmd), 0);
    fitsfile *fp;
    int st = 0, cr, cd, cm;
    long nrows;
    fits_open_table(&fp, out, READONLY, &st);
    fits_get_num_rows(fp, &nrows, &st);
    fits_get_colnum(fp, CASEINSEN, "RA", &cr, &st);
    fits_get_colnum(fp, CASEINSEN, "DEC", &cd, &st);
    fits_get_colnum(fp, CASEINSEN, "MAG_VT", &cm, &st);
    ck_assert_int_eq(st, 0);
    ck_assert_int_le(nrows, SCENE_CAT_MAX);
    c->n = (int)nrows;
    fits_read_col(fp, TDOUBLE, cr, 1, 1, nrows, NULL, c->ra, NULL, &st);
    fits_read_col(fp, TDOUBLE, cd, 1, 1, nrows, NULL, c->dec, NULL, &st);
    fits_read_col(fp, TDOUBLE, cm, 1, 1, nrows, NULL, c->mag, NULL, &st);
    fits_close_file(fp, &st);
    ck_assert_int_eq(st, 0);
    unlink(out);
}

/* Add a Gaussian star (sigma px) of flux at (x, y) to a w×h image. */
static inline void scene_star(float *img, int w, int h, double x, double y, double flux,
                              double sigma)
{
    const double amp = flux / (2 * M_PI * sigma * sigma);
    for (int yy = (int)y - 8; yy <= (int)y + 8; yy++)
        for (int xx = (int)x - 8; xx <= (int)x + 8; xx++) {
            if (xx < 0 || yy < 0 || xx >= w || yy >= h)
                continue;
            const double dx = xx - x, dy = yy - y;
            img[(size_t)yy * w + xx] += (float)(amp * exp(-(dx * dx + dy * dy) / (2 * sigma * sigma)));
        }
}

/* Render the catalogue through wcs into a w×h image: sky 1000 ADU,
 * Gaussian noise of 10 ADU (from ss_test.h's generator: seed rng_state
 * first), stars of sigma 1.5 px, flux 2e5 ADU at V_T = 9. Returns the
 * stars inside the frame. */
static inline int scene_render(const ss_wcs_t *wcs, const scene_cat_t *c, float *img, int w, int h)
{
    for (size_t i = 0; i < (size_t)w * h; i++)
        img[i] = (float)(1000.0 + 10.0 * rng_gauss());
    int in = 0;
    for (int k = 0; k < c->n; k++) {
        double x, y;
        if (ss_wcs_sky2pix(wcs, c->ra[k], c->dec[k], &x, &y) != 0)
            continue;
        if (x < -10 || y < -10 || x > w + 10 || y > h + 10)
            continue;
        in += x >= 0 && y >= 0 && x < w && y < h;
        scene_star(img, w, h, x, y, 2e5 * pow(10.0, -0.4 * (c->mag[k] - 9.0)), 1.5);
    }
    return in;
}

/* Great-circle distance, arcsec. */
static inline double scene_sep(double ra1, double d1, double ra2, double d2)
{
    const double a = sin((d2 - d1) * SCENE_D2R / 2), b = sin((ra2 - ra1) * SCENE_D2R / 2);
    const double hv = a * a + cos(d1 * SCENE_D2R) * cos(d2 * SCENE_D2R) * b * b;
    return 2.0 * asin(sqrt(hv)) / SCENE_D2R * 3600.0;
}

#endif
