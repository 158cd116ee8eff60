/*
 * check_solve.c — plate solving (pipeline/solve.c) against real catalogue
 * positions: the Tycho-2 stars of astrometry.net's index file (read with
 * query-starkd, which ships with astrometry.net) projected with a known
 * TAN WCS (rotated, east left) into a synthetic image (Gaussian stars from
 * their V_T magnitudes, sky and noise), solved through ss_solve_field; the
 * solved WCS must give the known one's sky position within 1" everywhere
 * on a 9×9 grid over the field. Also: the matched stars carry the index's
 * magnitude; a child that outlives its limit is killed (with its process
 * group) and reported as a timeout; an empty frame is refused.
 *
 * Skips (exit 77, reason printed) when solve-field, query-starkd or the
 * Tycho-2 index (Debian astrometry-data-tycho2-10-19) is missing.
 */
#include <check.h>
#include <errno.h>
#include <fitsio.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pipeline/solve.h"
#include "ss_test.h"
#include "solve_scene.h"

#define W 1024
#define H 1024
#define SCALE 10.0          /* arcsec/px: a 2.8° field, the scale of index 10 */
#define RA0 150.0
#define DEC0 20.0
#define ROT 30.0            /* degrees, position angle of the y axis */

static char tmpdir[256];

static void make_tmp(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/check_solve-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void rm_tmp(void)
{
    ck_assert_int_eq(rmtree(tmpdir), 0);
}

START_TEST(test_solve_tycho2)
{
    make_tmp();
    ss_wcs_t truth;
    scene_wcs(&truth, W, H, RA0, DEC0, SCALE, ROT, 0.0, 0.0);
    static scene_cat_t cat;
    scene_catalogue(&cat, tmpdir, RA0, DEC0, 2.3);
    float *img = malloc(sizeof *img * W * H);
    ck_assert_ptr_nonnull(img);
    rng_state = 12;
    int in = scene_render(&truth, &cat, img, W, H);
    ck_assert_int_ge(in, 30);

    /* the star finder recovers the rendered positions */
    ss_solve_xy_t xy[200];
    int nxy = ss_solve_find_stars(img, W, H, xy, 200);
    ck_assert_int_ge(nxy, 30);

    ss_solve_opts_t o = { .program = "solve-field", .index_dir = SCENE_INDEX_DIR, .timeout_s = 120,
                          .scale_low = 8.0, .scale_high = 12.0 };
    ss_solution_t *sol = NULL;
    char why[300] = "";
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    ss_err_t e = ss_solve_field(&o, img, W, H, &sol, why, sizeof why);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    ck_assert_msg(e == SS_OK, "solve failed (%d): %s", e, why);
    const ss_wcs_t *sw = ss_solution_wcs(sol);
    double worst = 0.0, sum2 = 0.0;
    int np = 0;
    for (int j = 0; j <= 8; j++)
        for (int i = 0; i <= 8; i++) {
            double x = i * (W - 1) / 8.0, y = j * (H - 1) / 8.0, r1, d1, r2, d2;
            ck_assert_int_eq(ss_wcs_pix2sky(&truth, x, y, &r1, &d1), 0);
            ck_assert_int_eq(ss_wcs_pix2sky(sw, x, y, &r2, &d2), 0);
            double a = scene_sep(r1, d1, r2, d2);
            worst = fmax(worst, a);
            sum2 += a * a;
            np++;
        }
    int nkeys, nst;
    (void)ss_solution_keys(sol, &nkeys);
    const ss_solve_star_t *st = ss_solution_stars(sol, &nst);
    printf("check_solve: %d catalogue stars in the field, %d found, %d matched (fit rms %.3f\"); "
           "solved in %.2f s; solved vs known WCS over a 9x9 grid: max %.3f\", rms %.3f\"\n",
           in, nxy, nst, ss_solution_rms(sol), (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9, worst,
           sqrt(sum2 / np));
    fflush(stdout);
    for (int k = 0; getenv("CHECK_SOLVE_DEBUG") && k < nst; k++) {
        double r, d, x, y;
        ss_wcs_pix2sky(&truth, st[k].x, st[k].y, &r, &d);
        ss_wcs_sky2pix(&truth, st[k].ra, st[k].dec, &x, &y);
        printf("%3d x %8.2f y %8.2f  true x %8.2f y %8.2f  mag %.2f off %.2f\"\n", k, st[k].x, st[k].y,
               x, y, st[k].mag, scene_sep(r, d, st[k].ra, st[k].dec));
    }
    ck_assert_msg(worst < 1.0, "solved WCS off by %.3f arcsec", worst);
    ck_assert_int_ge(nkeys, 10);
    /* the matched stars: field position through the known WCS at the
     * index star, and the index's magnitude (MAG_VT) with each */
    ck_assert_int_ge(nst, 10);
    int off = 0;
    for (int k = 0; k < nst; k++) {
        double r, d;
        ck_assert_int_eq(ss_wcs_pix2sky(&truth, st[k].x, st[k].y, &r, &d), 0);
        /* a blend (a Tycho-2 double rendered as one star) is off by a few
         * arcsec: at most one in ten may be */
        off += scene_sep(r, d, st[k].ra, st[k].dec) > 1.0;
        ck_assert(st[k].has_mag);
        ck_assert(st[k].mag > 0.0 && st[k].mag < 16.0);
    }
    ck_assert_int_le(off * 10, nst);
    /* the refit's residual: the centroids' error, well under 1" */
    ck_assert(ss_solution_rms(sol) < 0.5);
    /* the zero point against the catalogue (issue 12, item 6): the scene
     * gives 2e5 ADU at V_T = 9, so 9 + 2.5 log10(2e5) = 22.253 less the
     * 1.1 % of a Gaussian outside the 3-sigma aperture (0.012 mag) */
    ss_phot_zp_t zp;
    ck_assert_int_eq(ss_solution_zeropoint(sol, img, W, H, 1.5, 0.0, 10.0, 0, &zp), 0);
    printf("check_solve: zero point %.4f +- %.4f from %d stars (expected 22.241)\n", zp.zp,
           zp.zp_err, zp.n_used);
    ck_assert_int_eq(zp.source, SS_PHOT_FIT);
    ck_assert_int_ge(zp.n_used, 5);
    ck_assert_msg(fabs(zp.zp - 22.241) < 0.03 && zp.zp_err < 0.03, "zero point %.4f +- %.4f",
                  zp.zp, zp.zp_err);
    ss_solution_destroy(&sol);
    ck_assert_ptr_null(sol);
    ss_wcs_free(&truth);
    free(img);
    rm_tmp();
}
END_TEST

/* A child that does not finish in the limit is killed, its process group
 * with it, and the solve says so in about the limit. */
START_TEST(test_solve_timeout)
{
    make_tmp();
    char prog[400], pidf[400];
    snprintf(prog, sizeof prog, "%s/slow-solver", tmpdir);
    snprintf(pidf, sizeof pidf, "%s/child.pid", tmpdir);
    FILE *fp = fopen(prog, "w");
    ck_assert_ptr_nonnull(fp);
    fprintf(fp, "#!/bin/sh\nsleep 60 &\necho $! > %s\nwait\n", pidf);
    fclose(fp);
    ck_assert_int_eq(chmod(prog, 0755), 0);
    ck_assert(ss_solve_available(prog));

    /* stars enough for the finder: a grid of bright ones */
    float *img = malloc(sizeof *img * 256 * 256);
    rng_state = 3;
    for (int i = 0; i < 256 * 256; i++)
        img[i] = (float)(100.0 + rng_gauss());
    for (int k = 0; k < 36; k++) {
        int cx = 20 + (k % 6) * 40, cy = 20 + (k / 6) * 40;
        for (int dy = -3; dy <= 3; dy++)
            for (int dx = -3; dx <= 3; dx++)
                img[(cy + dy) * 256 + cx + dx] += (float)(1000.0 * exp(-(dx * dx + dy * dy) / 4.5));
    }
    ss_solve_opts_t o = { .timeout_s = 0.5 };
    ss_strlcpy(o.program, prog, sizeof o.program);
    ss_solution_t *sol = NULL;
    char why[300] = "";
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    ss_err_t e = ss_solve_field(&o, img, 256, 256, &sol, why, sizeof why);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double dt = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9;
    ck_assert_msg(e == SS_ERR_TIMEOUT, "got %d: %s", e, why);
    ck_assert_ptr_null(sol);
    ck_assert_msg(dt >= 0.5 && dt < 3.0, "took %.2f s", dt);
    ck_assert_ptr_nonnull(strstr(why, "killed"));
    /* the private directory (with the pid file the script wrote in its
     * own tmp dir) is ours: the grandchild must be gone too */
    fp = fopen(pidf, "r");
    ck_assert_ptr_nonnull(fp);
    int gpid = 0;
    ck_assert_int_eq(fscanf(fp, "%d", &gpid), 1);
    fclose(fp);
    int alive = 1;
    for (int i = 0; i < 100 && alive; i++) {
        alive = kill(gpid, 0) == 0;
        if (alive) {
            char path[64], state = '?';
            snprintf(path, sizeof path, "/proc/%d/stat", gpid);
            FILE *sf = fopen(path, "r");
            if (sf) {
                if (fscanf(sf, "%*d %*s %c", &state) == 1 && state == 'Z')
                    alive = 0;      /* killed, not yet reaped by its new parent */
                fclose(sf);
            }
            usleep(10000);
        }
    }
    ck_assert_msg(!alive, "the solver's child %d outlived the limit", gpid);
    /* with nothing to solve, no child at all */
    for (int i = 0; i < 256 * 256; i++)
        img[i] = (float)(100.0 + rng_gauss());
    e = ss_solve_field(&o, img, 256, 256, &sol, why, sizeof why);
    ck_assert_int_eq(e, SS_ERR_REGISTRATION);
    ck_assert_ptr_null(sol);
    free(img);
    rm_tmp();
}
END_TEST

static Suite *solve_suite(void)
{
    Suite *s = suite_create("solve");
    TCase *tc = tcase_create("solve");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_solve_timeout);
    tcase_add_test(tc, test_solve_tycho2);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    const char *missing = scene_missing();
    if (missing) {
        printf("check_solve: skipped: %s\n", missing);
        return 77;
    }
    SRunner *sr = srunner_create(solve_suite());
    srunner_run_all(sr, CK_NORMAL);
    const int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
