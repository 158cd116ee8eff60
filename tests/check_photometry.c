/*
 * check_photometry.c — magnitudes from fluxes, the zero point's precedence,
 * the catalogue fit (with outliers, too few stars) and aperture photometry
 * of synthetic stars of known flux (pipeline/photometry.h).
 */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/photometry.h"
#include "ss_test.h"

static ss_phot_zp_t zp_of(double zp, double err, int per_second)
{
    return (ss_phot_zp_t){ .source = SS_PHOT_CONFIG, .zp = zp, .zp_err = err,
                           .per_second = per_second };
}

/* mag = zp − 2.5 log10(flux / t), error 1.0857·σ/F ⊕ zp_err; none where
 * the flux, the zero point or (per second) the exposure is missing. */
START_TEST(test_mag)
{
    double m, e;
    ss_phot_zp_t z = zp_of(25.0, 0.0, 0);
    ck_assert_int_eq(ss_phot_mag(&z, 10.0, 10000.0, 100.0, &m, &e), 1);
    ck_assert_double_eq_tol(m, 15.0, 1e-12);                /* 25 − 2.5·4 */
    ck_assert_double_eq_tol(e, 0.010857362, 1e-9);
    z.per_second = 1;                                        /* 1000 ADU/s: 25 − 7.5 */
    ck_assert_int_eq(ss_phot_mag(&z, 10.0, 10000.0, 100.0, &m, &e), 1);
    ck_assert_double_eq_tol(m, 17.5, 1e-12);
    ck_assert_int_eq(ss_phot_mag(&z, 0.0, 10000.0, 100.0, &m, &e), 0);    /* no exposure */
    ck_assert(isnan(m) && isnan(e));
    z = zp_of(25.0, 0.03, 0);                                /* a fitted zp's error adds */
    ss_phot_mag(&z, 1.0, 10000.0, 100.0, &m, &e);
    ck_assert_double_eq_tol(e, hypot(0.010857362, 0.03), 1e-9);
    ck_assert_int_eq(ss_phot_mag(&z, 1.0, 0.0, 1.0, &m, &e), 0);
    ck_assert_int_eq(ss_phot_mag(&z, 1.0, -5.0, 1.0, &m, &e), 0);
    ck_assert_int_eq(ss_phot_mag(&z, 1.0, NAN, 1.0, &m, &e), 0);
    z.source = SS_PHOT_NONE;
    ck_assert_int_eq(ss_phot_mag(&z, 1.0, 100.0, 1.0, &m, &e), 0);
    ck_assert(isnan(m));
}
END_TEST

/* Detections: vanished ones and non-positive fluxes get no magnitude. */
START_TEST(test_apply)
{
    ss_detlist_t l;
    ck_assert_int_eq(ss_detlist_init(&l, 4), 0);
    ss_detection_t *a = ss_detlist_push(&l), *b = ss_detlist_push(&l), *c = ss_detlist_push(&l);
    ck_assert(isnan(a->mag) && isnan(a->mag_err));          /* a new slot has none */
    a->sign = 1, a->flux = 1000.0, a->flux_err = 10.0;
    b->sign = -1, b->flux = 1000.0, b->flux_err = 10.0;
    c->sign = 1, c->flux = -3.0, c->flux_err = 10.0;
    ss_phot_zp_t z = zp_of(20.0, 0.0, 1);
    ck_assert_int_eq(ss_phot_apply(&z, 2.0, &l), 1);
    ck_assert_double_eq_tol(a->mag, 20.0 - 2.5 * log10(500.0), 1e-12);
    ck_assert_double_eq_tol(a->mag_err, 0.010857362, 1e-9);
    ck_assert(isnan(b->mag) && isnan(c->mag) && isnan(c->mag_err));
    z.source = SS_PHOT_NONE;
    ck_assert_int_eq(ss_phot_apply(&z, 2.0, &l), 0);
    ck_assert(isnan(a->mag));
    ss_detlist_free(&l);
}
END_TEST

/* Precedence: configured, else fitted, else the header, else none. */
START_TEST(test_choose)
{
    ss_phot_cfg_t cfg = { .zeropoint = NAN, .per_second = 1, .band = "G" };
    ss_frame_meta_t m;
    ss_frame_meta_clear(&m);
    ss_phot_zp_t z, fit = { .source = SS_PHOT_FIT, .zp = 21.5, .zp_err = 0.02, .per_second = 1,
                            .n_used = 40 };
    ss_phot_zp_choose(&z, &cfg, &m, NULL);
    ck_assert_int_eq(z.source, SS_PHOT_NONE);
    m.has_zp_header = 1, m.zp_header = 22.25, m.zp_header_err = 0.05;
    ss_phot_zp_choose(&z, &cfg, &m, NULL);
    ck_assert_int_eq(z.source, SS_PHOT_HEADER);
    ck_assert_double_eq(z.zp, 22.25);
    ck_assert_double_eq(z.zp_err, 0.05);
    ck_assert_int_eq(z.per_second, 1);
    ss_phot_zp_choose(&z, &cfg, &m, &fit);
    ck_assert_int_eq(z.source, SS_PHOT_FIT);
    ck_assert_double_eq(z.zp, 21.5);
    cfg.zeropoint = 23.0;
    ss_phot_zp_choose(&z, &cfg, &m, &fit);
    ck_assert_int_eq(z.source, SS_PHOT_CONFIG);
    ck_assert_double_eq(z.zp, 23.0);
    ck_assert_double_eq(z.zp_err, 0.0);
    ck_assert_str_eq(ss_phot_source_name(z.source), "config");
}
END_TEST

/* 60 stars, zp 24.3 per second, 2% flux errors, 8 mismatched (2-4 mag
 * off): the fit keeps the 52 and finds 24.3 within 3 of its errors; the
 * plain mean would be 0.2 mag off. Fewer than 5 stars: refused. */
START_TEST(test_fit_outliers)
{
    rng_state = 12;
    ss_phot_star_t s[60];
    const double zp = 24.3, t = 30.0;
    double plain = 0.0;
    for (int i = 0; i < 60; i++) {
        double mag = 11.0 + 5.0 * rng_unif();
        double f = t * pow(10.0, -0.4 * (mag - zp));
        s[i] = (ss_phot_star_t){ f * (1.0 + 0.02 * rng_gauss()), 0.02 * f, mag };
        if (i % 7 == 3 && i < 56)
            s[i].cat_mag += 2.0 + 2.0 * rng_unif();         /* a wrong match */
        plain += s[i].cat_mag + 2.5 * log10(s[i].flux / t);
    }
    ck_assert(fabs(plain / 60 - zp) > 0.2);
    ss_phot_zp_t z;
    ck_assert_int_eq(ss_phot_fit_zeropoint(s, 60, t, 1, &z), 0);
    ck_assert_int_eq(z.source, SS_PHOT_FIT);
    ck_assert_int_eq(z.n_used, 52);
    ck_assert_int_eq(z.per_second, 1);
    ck_assert(z.zp_err > 0.002 && z.zp_err < 0.006);        /* 0.0217/sqrt(52) = 0.003 */
    ck_assert_msg(fabs(z.zp - zp) < 3.0 * z.zp_err, "zp %.4f ± %.4f", z.zp, z.zp_err);
    /* per frame instead: the zero point of the total counts, 2.5 log10(30) brighter */
    ck_assert_int_eq(ss_phot_fit_zeropoint(s, 60, t, 0, &z), 0);
    ck_assert(fabs(z.zp - (zp + 2.5 * log10(t))) < 3.0 * z.zp_err);
    /* four stars, or five with one unusable, or per second without exposure */
    ck_assert_int_eq(ss_phot_fit_zeropoint(s, 4, t, 1, &z), -1);
    ck_assert_int_eq(z.source, SS_PHOT_NONE);
    s[1].flux = -1.0;
    ck_assert_int_eq(ss_phot_fit_zeropoint(s, 5, t, 1, &z), -1);
    ck_assert_int_eq(ss_phot_fit_zeropoint(s + 4, 5, t, 1, &z), 0);
    ck_assert_int_eq(ss_phot_fit_zeropoint(s + 4, 5, 0.0, 1, &z), -1);
}
END_TEST

/* A frame of Gaussian stars of known flux on a sky with noise. */
#define W 200
#define H 160
static void star_frame(float *img, const double *x, const double *y, const double *flux,
                       int n, double sigma, double sky, double noise)
{
    for (int py = 0; py < H; py++)
        for (int px = 0; px < W; px++) {
            double v = sky + noise * rng_gauss();
            for (int k = 0; k < n; k++) {
                /* the pixel integral of the Gaussian (erf differences) */
                double s2 = sigma * M_SQRT2;
                double ix = 0.5 * (erf((px + 0.5 - x[k]) / s2) - erf((px - 0.5 - x[k]) / s2));
                double iy = 0.5 * (erf((py + 0.5 - y[k]) / s2) - erf((py - 0.5 - y[k]) / s2));
                v += flux[k] * ix * iy;
            }
            img[py * W + px] = (float)v;
        }
}

/* Three stars (one with a neighbour in its annulus): each flux back
 * within 3 of its error (the 1.3% a 3-sigma aperture leaves out is
 * corrected for here, as a zero-point fit absorbs it); the sky level;
 * refusals at the edge and on invalid pixels. Then a zero point fitted
 * from stars measured this way. */
START_TEST(test_aperture)
{
    static float img[W * H];
    rng_state = 5;
    /* the share of a pixel-integrated Gaussian within 3 sigma: the pixel
     * adds 1/12 px² to its variance (0.987, not the continuous 0.989) */
    const double sigma = 1.5, sky = 300.0, noise = 4.0;
    const double enc = 1.0 - exp(-4.5 * 4.5 / (2.0 * (sigma * sigma + 1.0 / 12.0)));
    double x[4] = { 50.3, 120.7, 150.1, 150.1 + 9.0 };
    double y[4] = { 60.6, 80.2, 110.5, 110.5 };
    double f[4] = { 20000.0, 5000.0, 12000.0, 30000.0 };
    star_frame(img, x, y, f, 4, sigma, sky, noise);
    for (int k = 0; k < 3; k++) {
        ss_phot_ap_t ap;
        ck_assert_int_eq(ss_phot_aperture(img, W, H, x[k], y[k], sigma, 0.0, &ap), 0);
        ck_assert_double_eq_tol(ap.r_ap, 4.5, 1e-12);
        ck_assert_double_eq_tol(ap.r_in, 7.5, 1e-12);
        ck_assert_double_eq_tol(ap.r_out, 12.0, 1e-12);
        ck_assert_double_eq_tol(ap.area, M_PI * 4.5 * 4.5, 0.2);
        /* star 2's annulus holds a neighbour 9 px off: the wings it leaves
         * within the clip raise that sky by 0.6 ADU (0.15 of the noise) */
        ck_assert_msg(fabs(ap.sky - sky) < (k == 2 ? 1.0 : 0.3), "star %d sky %.2f", k, ap.sky);
        ck_assert(ap.flux_err > 4.0 * sqrt(ap.area) && ap.flux_err < 6.0 * sqrt(ap.area));
        ck_assert_msg(fabs(ap.flux / enc - f[k]) < 3.0 * ap.flux_err, "star %d: %.1f ± %.1f vs %.1f",
                      k, ap.flux / enc, ap.flux_err, f[k]);
    }
    ss_phot_ap_t ap;
    ck_assert_int_eq(ss_phot_aperture(img, W, H, 5.0, 80.0, sigma, 0.0, &ap), -1);
    ck_assert_int_eq(ss_phot_aperture(img, W, H, 100.0, H - 8.0, sigma, 0.0, &ap), -1);
    img[60 * W + 51] = NAN;
    ck_assert_int_eq(ss_phot_aperture(img, W, H, x[0], y[0], sigma, 0.0, &ap), -1);
    /* shot noise: with gain 1 e-/ADU the error grows by the flux */
    ss_phot_ap_t a0, a1;
    ss_phot_aperture(img, W, H, x[1], y[1], sigma, 0.0, &a0);
    ss_phot_aperture(img, W, H, x[1], y[1], sigma, 1.0, &a1);
    ck_assert_double_eq_tol(a1.flux_err * a1.flux_err - a0.flux_err * a0.flux_err, a0.flux, 1e-6);

    /* a zero point from 12 stars measured on a frame of zp 22.0 per frame */
    double sx[12], sy[12], sf[12], cat[12];
    for (int k = 0; k < 12; k++) {
        sx[k] = 20.0 + 30.0 * (k % 6) + rng_unif();
        sy[k] = 30.0 + 60.0 * (k / 6) + rng_unif();
        cat[k] = 12.0 + 0.3 * k;
        sf[k] = pow(10.0, -0.4 * (cat[k] - 22.0));
    }
    star_frame(img, sx, sy, sf, 12, sigma, sky, noise);
    ss_phot_star_t st[12];
    for (int k = 0; k < 12; k++) {
        ck_assert_int_eq(ss_phot_aperture(img, W, H, sx[k], sy[k], sigma, 0.0, &ap), 0);
        st[k] = (ss_phot_star_t){ ap.flux, ap.flux_err, cat[k] };
    }
    ss_phot_zp_t z;
    ck_assert_int_eq(ss_phot_fit_zeropoint(st, 12, 1.0, 0, &z), 0);
    double want = 22.0 + 2.5 * log10(enc);                  /* the aperture's share */
    ck_assert_msg(fabs(z.zp - want) < 3.0 * z.zp_err + 1e-3, "zp %.4f ± %.4f, want %.4f", z.zp,
                  z.zp_err, want);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("photometry");
    TCase *tc = tcase_create("photometry");
    tcase_add_test(tc, test_mag);
    tcase_add_test(tc, test_apply);
    tcase_add_test(tc, test_choose);
    tcase_add_test(tc, test_fit_outliers);
    tcase_add_test(tc, test_aperture);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
