/*
 * check_streak_merge.c — ss_merge_streaks: collinear streak pieces with a
 * short gap become one detection; anything else is left alone.
 */
#include <check.h>
#include <math.h>
#include <stdlib.h>

#include "pipeline/stages.h"

/* A streak piece from (x0,y0) to (x1,y1), as measure would report it. */
static ss_detection_t piece(double x0, double y0, double x1, double y1, int sign, int area)
{
    ss_detection_t d = { 0 };
    if (x0 > x1) {
        double t = x0;
        x0 = x1, x1 = t;
        t = y0, y0 = y1, y1 = t;
    }
    d.kind = SS_KIND_STREAK;
    d.sign = sign;
    d.x0 = x0, d.y0 = y0, d.x1 = x1, d.y1 = y1;
    d.x = 0.5 * (x0 + x1), d.y = 0.5 * (y0 + y1);
    d.theta = atan2(y1 - y0, x1 - x0);
    if (d.theta > M_PI / 2)
        d.theta -= M_PI;
    if (d.theta <= -M_PI / 2)
        d.theta += M_PI;
    d.a = hypot(x1 - x0, y1 - y0) / sqrt(12.0);
    d.b = 1.2;
    d.area = area;
    d.flux = 10.0 * area;
    d.flux_err = sqrt((double)area);
    d.peak_snr = area / 10.0;
    d.bbox_x0 = (int)floor(fmin(x0, x1)), d.bbox_x1 = (int)ceil(fmax(x0, x1));
    d.bbox_y0 = (int)floor(fmin(y0, y1)), d.bbox_y1 = (int)ceil(fmax(y0, y1));
    return d;
}

static ss_detlist_t list_of(const ss_detection_t *d, int n)
{
    ss_detlist_t l;
    ck_assert_int_eq(ss_detlist_init(&l, 16), 0);
    for (int i = 0; i < n; i++)
        *ss_detlist_push(&l) = d[i];
    return l;
}

/* The broken trail of check_pipeline: a long piece and a short one on
 * the same line, 6 px apart, become one with the outer ends. */
START_TEST(test_collinear_pieces_merge)
{
    ss_detection_t d[3] = {
        piece(97.8, 452.7, 77.4, 530.3, 1, 419),
        piece(300, 300, 310, 310, 1, 30),            /* elsewhere: stays */
        piece(75.4, 536.1, 71.5, 552.1, 1, 89),
    };
    d[1].kind = SS_KIND_POINT;
    ss_detlist_t l = list_of(d, 3);
    ck_assert_int_eq(ss_merge_streaks(&l, 15.0, 3.0), 1);
    ck_assert_int_eq(l.count, 2);
    const ss_detection_t *m = &l.items[0];
    ck_assert_int_eq(m->kind, SS_KIND_STREAK);
    ck_assert_double_eq_tol(m->x0, 71.5, 1e-9);
    ck_assert_double_eq_tol(m->y0, 552.1, 1e-9);
    ck_assert_double_eq_tol(m->x1, 97.8, 1e-9);
    ck_assert_double_eq_tol(m->y1, 452.7, 1e-9);
    ck_assert_int_eq(m->area, 419 + 89);
    ck_assert_double_eq_tol(m->flux, 10.0 * (419 + 89), 1e-9);
    ck_assert_double_eq_tol(m->flux_err, sqrt(419.0 + 89.0), 1e-9);
    ck_assert_double_eq_tol(m->a, hypot(97.8 - 71.5, 452.7 - 552.1) / sqrt(12.0), 1e-9);
    ck_assert(m->bbox_y1 >= 552 && m->bbox_y0 <= 453);
    ck_assert_int_eq(l.items[1].kind, SS_KIND_POINT);
    ss_detlist_free(&l);
}
END_TEST

/* Three pieces of one trail chain into one. */
START_TEST(test_chain_of_three)
{
    ss_detection_t d[3] = {
        piece(0, 0, 40, 20, 1, 100),
        piece(90, 45, 130, 65, 1, 100),
        piece(50, 25, 80, 40, 1, 80),
    };
    ss_detlist_t l = list_of(d, 3);
    ck_assert_int_eq(ss_merge_streaks(&l, 15.0, 3.0), 2);
    ck_assert_int_eq(l.count, 1);
    ck_assert_double_eq_tol(l.items[0].x0, 0, 1e-9);
    ck_assert_double_eq_tol(l.items[0].x1, 130, 1e-9);
    ck_assert_int_eq(l.items[0].area, 280);
    ss_detlist_free(&l);
}
END_TEST

/* Left alone: a crossing streak, a parallel one offset sideways, a piece
 * beyond the gap, the other sign, and everything when merging is off. */
START_TEST(test_not_merged)
{
    ss_detection_t base = piece(0, 0, 100, 0, 1, 200);
    ss_detection_t others[5] = {
        piece(110, -30, 110, 30, 1, 100),   /* perpendicular, close */
        piece(110, 6, 160, 6, 1, 100),      /* parallel, 6 px off the line */
        piece(120, 0, 160, 0, 1, 100),      /* collinear, gap 20 > 15 */
        piece(105, 0, 150, 0, -1, 100),     /* collinear, opposite sign */
        piece(105, 0, 150, 0, 1, 100),      /* would merge, but merging is off below */
    };
    for (int i = 0; i < 5; i++) {
        ss_detection_t d[2] = { base, others[i] };
        ss_detlist_t l = list_of(d, 2);
        ck_assert_int_eq(ss_merge_streaks(&l, i == 4 ? 0.0 : 15.0, 3.0), 0);
        ck_assert_int_eq(l.count, 2);
        ss_detlist_free(&l);
    }
    ss_detection_t d[2] = { base, others[4] };
    ss_detlist_t l = list_of(d, 2);
    ck_assert_int_eq(ss_merge_streaks(&l, 15.0, 3.0), 1);
    ss_detlist_free(&l);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("streak_merge");
    TCase *tc = tcase_create("merge");
    tcase_add_test(tc, test_collinear_pieces_merge);
    tcase_add_test(tc, test_chain_of_three);
    tcase_add_test(tc, test_not_merged);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
