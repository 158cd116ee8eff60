/*
 * check_sky.c — a plate solution carried to every frame through its
 * registration shift (ss_pipeline_set_sky, README "Plate solving"),
 * without astrometry.net: the synthetic field's own TAN WCS (which
 * follows the pointing: jitter and drift) of the reference frame stands
 * for the solution; every later frame is processed with its WCS taken
 * away, and the WCS the pipeline gives it must put its pixels where the
 * frame's own WCS does, within 0.1 px, through drift that makes the
 * pipeline re-reference several times. A history reset drops the
 * solution (and a solution of the old epoch is refused); a frame with a
 * WCS of its own keeps it.
 */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "pipeline/pipeline.h"
#include "pipeline/wcs.h"
#include "tools/synth.h"
#include "ss_test.h"

#define SW 320
#define SH 320

/* The largest distance, px, between where two WCSs put a 5×5 grid of
 * pixels, measured in a's pixels (b's sky position back through a). */
static double wcs_diff_px(const ss_frame_meta_t *a, const ss_frame_meta_t *b)
{
    ss_wcs_t wa, wb;
    char why[160];
    ck_assert_msg(ss_wcs_from_meta(&wa, a, why, sizeof why) == SS_OK, "%s", why);
    ck_assert_msg(ss_wcs_from_meta(&wb, b, why, sizeof why) == SS_OK, "%s", why);
    double worst = 0.0;
    for (int j = 0; j < 5; j++)
        for (int i = 0; i < 5; i++) {
            double x = i * (SW - 1) / 4.0, y = j * (SH - 1) / 4.0, ra, dec, x2, y2;
            ck_assert_int_eq(ss_wcs_pix2sky(&wb, x, y, &ra, &dec), 0);
            ck_assert_int_eq(ss_wcs_sky2pix(&wa, ra, dec, &x2, &y2), 0);
            worst = fmax(worst, hypot(x2 - x, y2 - y));
        }
    ss_wcs_free(&wa);
    ss_wcs_free(&wb);
    return worst;
}

START_TEST(test_sky_through_shifts)
{
    ss_synth_cfg_t sc;
    ss_synth_defaults(&sc);
    sc.width = SW;
    sc.height = SH;
    sc.seed = 31;
    sc.n_stars = 400;
    sc.jitter = 0.3;
    sc.drift_x = 1.5;
    sc.drift_y = -0.7;
    sc.n_hot = 0;
    sc.cosmic_rate = 0.0;
    sc.wcs = 1;
    sc.wcs_ra = 150.0;
    sc.wcs_dec = 20.0;
    sc.wcs_scale = 2.0;
    ss_pipeline_cfg_t pc;
    ss_pipeline_cfg_defaults(&pc);
    pc.backend = SS_BACKEND_CPU;
    pc.reref_px = 6.0;
    pc.history = 8;
    pc.min_history = 4;
    char err[256] = "";
    ss_synth_t *syn = ss_synth_new(&sc);
    ss_pipeline_t *p = ss_pipeline_new(&pc, "sky", err, sizeof err);
    ck_assert_msg(syn && p, "%s", err);
    ss_frame_t f;
    memset(&f, 0, sizeof f);
    f.capacity = (size_t)SW * SH * 4;
    f.pixels = malloc(f.capacity);
    ss_result_t res;
    ck_assert_int_eq(ss_result_init(&res, (size_t)SW * SH, 2000), 0);
    static ss_frame_meta_t own;     /* the frame's own WCS */

    /* frame 0: the reference; its WCS is "the solution" */
    ck_assert_int_eq(ss_synth_next(syn, &f, NULL), SS_OK);
    ck_assert_int_gt(f.meta.n_wcs, 0);
    own = f.meta;
    f.meta.n_wcs = 0;
    ck_assert_int_eq(ss_pipeline_process(p, &f, &res), SS_OK);
    ck_assert_int_eq(res.status, SS_STATUS_REFERENCE);
    ck_assert(res.reg_known);
    ck_assert(!res.sky_solved);
    ck_assert_int_eq(res.meta.n_wcs, 0);
    ck_assert_int_eq(ss_pipeline_set_sky(p, own.wcs, own.n_wcs, res.sky_epoch, res.reg_x,
                                         res.reg_y), 0);
    const uint64_t epoch0 = res.sky_epoch;

    int rerefs = 0, checked = 0, with_dets = 0;
    double worst = 0.0;
    for (int k = 1; k < 25; k++) {
        ck_assert_int_eq(ss_synth_next(syn, &f, NULL), SS_OK);
        own = f.meta;
        f.meta.n_wcs = 0;
        ck_assert_int_eq(ss_pipeline_process(p, &f, &res), SS_OK);
        ck_assert_int_ne(res.status, SS_STATUS_REG_FAILED);
        rerefs += res.rereferenced;
        ck_assert(res.reg_known && res.sky_solved);
        ck_assert_int_eq(res.sky_epoch, epoch0);
        worst = fmax(worst, wcs_diff_px(&own, &res.meta));
        checked++;
        for (int i = 0; i < res.dets.count; i++)
            ck_assert(res.dets.items[i].has_radec);
        with_dets += res.dets.count > 0;
    }
    printf("check_sky: %d frames, %d re-references; solution through the shifts vs each frame's "
           "own WCS: max %.4f px\n", checked, rerefs, worst);
    fflush(stdout);
    ck_assert_int_ge(rerefs, 2);
    ck_assert_msg(worst < 0.1, "off by %.3f px", worst);
    ck_assert_int_ge(with_dets, 1);

    /* a frame with a WCS of its own keeps it */
    ck_assert_int_eq(ss_synth_next(syn, &f, NULL), SS_OK);
    own = f.meta;
    ck_assert_int_eq(ss_pipeline_process(p, &f, &res), SS_OK);
    ck_assert(!res.sky_solved);
    ck_assert_int_eq(res.meta.n_wcs, own.n_wcs);
    ck_assert_mem_eq(res.meta.wcs, own.wcs, sizeof own.wcs[0] * (size_t)own.n_wcs);

    /* a reset: the solution is gone, one of the old epoch refused */
    ss_pipeline_reset(p, "test");
    ck_assert_int_gt(ss_pipeline_sky_epoch(p), epoch0);
    ck_assert_int_eq(ss_pipeline_set_sky(p, own.wcs, own.n_wcs, epoch0, 0.0, 0.0), -1);
    ck_assert_int_eq(ss_synth_next(syn, &f, NULL), SS_OK);
    f.meta.n_wcs = 0;
    ck_assert_int_eq(ss_pipeline_process(p, &f, &res), SS_OK);
    ck_assert_int_eq(res.status, SS_STATUS_REFERENCE);
    ck_assert(!res.sky_solved);
    ck_assert_int_eq(res.meta.n_wcs, 0);
    ck_assert_int_eq(res.sky_epoch, ss_pipeline_sky_epoch(p));

    ss_result_free(&res);
    free(f.pixels);
    ss_pipeline_destroy(&p);
    ss_synth_destroy(&syn);
}
END_TEST

static Suite *sky_suite(void)
{
    Suite *s = suite_create("sky");
    TCase *tc = tcase_create("sky");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_sky_through_shifts);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return ss_run_suite(sky_suite());
}
