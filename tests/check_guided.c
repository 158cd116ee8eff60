/*
 * check_guided.c — tests of ALGORITHM.md §4 (pipeline/guided.c):
 *  - ss_box_mean against brute force (a direct double sum over every
 *    clipped window), for many shapes, NaN/Inf pixels, radii 0..large,
 *    radius beyond the frame, and thread counts;
 *  - ss_guided_filter against a brute-force windowed computation of the
 *    stages.h definition, in double, to 1e-5 relative, with NaN pixels,
 *    borders and radii beyond the frame;
 *  - properties: a residual that is exactly linear in the guide is
 *    removed; a compact mover on the sky survives; with the source mask
 *    a faint mover on an undersampled PSF keeps its matched-filter
 *    response, and star residuals stay fitted;
 *  - the whole chain (ss_pipeline_*, CPU backend, config defaults) on a
 *    synthetic sequence with 5 % seeing wobble and SNR-10 movers: the
 *    guided filter lowers false alarms (positive detections of kinds
 *    other than cosmic matching no true object) at equal completeness.
 */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "config/config.h"
#include "pipeline/pipeline.h"
#include "pipeline/stages.h"
#include "tools/synth.h"
#include "ss_test.h"
#include "ss_chain.h"


static int same_bits(const float *a, const float *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!((isnan(a[i]) && isnan(b[i])) || a[i] == b[i]))
            return 0;
    return 1;
}

/* ======================================================================
 * ss_box_mean
 * ==================================================================== */

/* Brute force: mean of the finite values of the clipped window, and the
 * mean of their magnitudes (the scale for the tolerance). */
static void brute_box(const float *in, int w, int h, int r, int x, int y, double *mean, double *amean)
{
    double s = 0.0, a = 0.0;
    long n = 0;
    for (int yy = y - r; yy <= y + r; yy++)
        for (int xx = x - r; xx <= x + r; xx++) {
            if (xx < 0 || yy < 0 || xx >= w || yy >= h)
                continue;
            const float v = in[(size_t)yy * w + xx];
            if (!isfinite(v))
                continue;
            s += v;
            a += fabs(v);
            n++;
        }
    *mean = n ? s / (double)n : NAN;
    *amean = n ? a / (double)n : NAN;
}

static void fill_random(float *x, size_t n, double p_nan, double offset, double scale)
{
    for (size_t i = 0; i < n; i++) {
        const double u = rng_unif();
        if (u < p_nan)
            x[i] = NAN;
        else if (u < p_nan * 1.1)
            x[i] = (rng_u64() & 1) ? INFINITY : -INFINITY;
        else
            x[i] = (float)(offset + scale * rng_gauss());
    }
}

START_TEST(test_box_mean_brute_force)
{
    static const int shapes[][2] = { { 1, 1 }, { 1, 9 }, { 9, 1 }, { 2, 2 }, { 3, 7 },
                                     { 13, 9 }, { 37, 23 }, { 64, 130 }, { 130, 67 } };
    static const int radii[] = { 0, 1, 2, 5, 11, 40, 200 };
    rng_state = 101;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int w = shapes[s][0], h = shapes[s][1];
        const size_t n = (size_t)w * h;
        float *in = malloc(n * sizeof(float)), *out = malloc(n * sizeof(float));
        double *scr = malloc(2 * n * sizeof(double));
        for (int pass = 0; pass < 3; pass++) {
            /* pass 0: no invalid pixels; 1: 10 %; 2: 70 % (windows with none) */
            fill_random(in, n, pass == 0 ? 0.0 : pass == 1 ? 0.1 : 0.7, pass == 1 ? 1000.0 : 0.0,
                        pass == 1 ? 300.0 : 1.0);
            for (size_t ri = 0; ri < sizeof radii / sizeof radii[0]; ri++) {
                const int r = radii[ri];
                if (r > 11 && n > 3000)
                    continue;                /* keep the brute force quick */
                ss_box_mean(in, w, h, r, out, scr);
                for (int y = 0; y < h; y++)
                    for (int x = 0; x < w; x++) {
                        double m, am;
                        brute_box(in, w, h, r, x, y, &m, &am);
                        const float g = out[(size_t)y * w + x];
                        if (isnan(m)) {
                            ck_assert_msg(isnan(g), "%dx%d r %d (%d,%d): want NaN, got %g", w, h,
                                          r, x, y, (double)g);
                            continue;
                        }
                        ck_assert_msg(fabs(g - m) <= 1e-6 * am + 1e-30,
                                      "%dx%d r %d pass %d (%d,%d): got %.9g want %.9g", w, h, r,
                                      pass, x, y, (double)g, m);
                    }
            }
        }
        free(in);
        free(out);
        free(scr);
    }
}
END_TEST

/* The result does not depend on the number of threads (bit for bit), on
 * a frame tall enough for many bands. */
START_TEST(test_box_mean_thread_independent)
{
    enum { W = 300, H = 700 };
    float *in = malloc(W * H * sizeof(float)), *a = malloc(W * H * sizeof(float)),
          *b = malloc(W * H * sizeof(float));
    double *scr = malloc(2 * (size_t)W * H * sizeof(double));
    rng_state = 7;
    fill_random(in, (size_t)W * H, 0.05, 500.0, 100.0);
    static const int radii[] = { 1, 11, 50 };
    for (int ri = 0; ri < 3; ri++) {
        set_threads(1);
        ss_box_mean(in, W, H, radii[ri], a, scr);
        for (int t = 2; t <= 5; t += 3) {
            set_threads(t);
            ss_box_mean(in, W, H, radii[ri], b, scr);
            ck_assert_msg(same_bits(a, b, (size_t)W * H), "r %d: %d threads differ from 1",
                          radii[ri], t);
        }
    }
    set_threads(2);
    free(in);
    free(a);
    free(b);
    free(scr);
}
END_TEST

/* ======================================================================
 * ss_guided_filter
 * ==================================================================== */

/* The stages.h definition, by brute force in double: every mean a direct
 * sum over the clipped window of the pixels that take part. */
static void brute_guided(const float *I, const float *p, int w, int h, int r, double eps,
                         double *out, double *q_out)
{
    const size_t n = (size_t)w * h;
    unsigned char *part = malloc(n);
    double *A = malloc(n * sizeof(double)), *B = malloc(n * sizeof(double));
    double c = 0.0;
    long nc = 0;
    for (size_t i = 0; i < n; i++) {
        part[i] = isfinite(I[i]) && isfinite(p[i]);
        if (part[i]) {
            c += I[i];
            nc++;
        }
    }
    c = nc ? c / (double)nc : 0.0;
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            double si = 0, sp = 0, sip = 0, sii = 0;
            long k = 0;
            for (int yy = SS_MAX(0, y - r); yy <= SS_MIN(h - 1, y + r); yy++)
                for (int xx = SS_MAX(0, x - r); xx <= SS_MIN(w - 1, x + r); xx++) {
                    const size_t j = (size_t)yy * w + xx;
                    if (!part[j])
                        continue;
                    const double ic = I[j] - c, pv = p[j];
                    si += ic;
                    sp += pv;
                    sip += ic * pv;
                    sii += ic * ic;
                    k++;
                }
            const size_t i = (size_t)y * w + x;
            if (!part[i] || k == 0) {
                A[i] = B[i] = NAN;
                continue;
            }
            const double mi = si / k, mp = sp / k, cip = sip / k, cii = sii / k;
            A[i] = (cip - mi * mp) / (cii - mi * mi + eps);
            B[i] = mp - A[i] * mi;
        }
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            const size_t i = (size_t)y * w + x;
            if (!part[i]) {
                out[i] = q_out[i] = NAN;
                continue;
            }
            double sa = 0, sb = 0;
            long k = 0;
            for (int yy = SS_MAX(0, y - r); yy <= SS_MIN(h - 1, y + r); yy++)
                for (int xx = SS_MAX(0, x - r); xx <= SS_MIN(w - 1, x + r); xx++) {
                    const size_t j = (size_t)yy * w + xx;
                    if (!isfinite(A[j]))
                        continue;
                    sa += A[j];
                    sb += B[j];
                    k++;
                }
            const double q = (sa / k) * (I[i] - c) + sb / k;
            /* the scale of the terms (they may cancel) */
            q_out[i] = fabs((sa / k) * (I[i] - c)) + fabs(sb / k);
            out[i] = p[i] - q;
        }
    free(part);
    free(A);
    free(B);
}

/* A star field guide (sky, gradient, Gaussian stars up to 3e4 ADU,
 * noise) and a residual that is partly proportional to it (imperfect
 * subtraction) plus noise and a gradient; NaN sprinkled in both and a
 * NaN block in the guide. */
static void make_guided_inputs(float *I, float *p, int w, int h, double p_nan)
{
    const size_t n = (size_t)w * h;
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            I[(size_t)y * w + x] = (float)(1000.0 + 0.3 * x - 0.2 * y + 5.0 * rng_gauss());
    const int nstars = (w * h) / 150 + 1;
    for (int s = 0; s < nstars; s++) {
        const double sx = rng_unif() * w, sy = rng_unif() * h, peak = 30000.0 * pow(rng_unif(), 3);
        for (int y = SS_MAX(0, (int)sy - 6); y < SS_MIN(h, (int)sy + 7); y++)
            for (int x = SS_MAX(0, (int)sx - 6); x < SS_MIN(w, (int)sx + 7); x++) {
                const double d2 = (x - sx) * (x - sx) + (y - sy) * (y - sy);
                I[(size_t)y * w + x] += (float)(peak * exp(-d2 / (2 * 1.4 * 1.4)));
            }
    }
    for (size_t i = 0; i < n; i++) {
        const int x = (int)(i % (size_t)w), y = (int)(i / (size_t)w);
        p[i] = (float)(0.01 * (I[i] - 1000.0) * (1.0 + 0.5 * sin(x * 0.2)) + 3.0 * rng_gauss() +
                       0.05 * y);
    }
    for (size_t i = 0; i < n; i++) {
        if (rng_unif() < p_nan)
            I[i] = NAN;
        if (rng_unif() < p_nan)
            p[i] = NAN;
    }
    for (int y = h / 3; y < SS_MIN(h, h / 3 + 4); y++)
        for (int x = w / 2; x < SS_MIN(w, w / 2 + 5); x++)
            I[(size_t)y * w + x] = NAN;
}

START_TEST(test_guided_brute_force)
{
    static const int shapes[][2] = { { 1, 1 }, { 1, 12 }, { 12, 1 }, { 2, 2 }, { 5, 3 },
                                     { 19, 2 }, { 61, 47 }, { 40, 90 } };
    static const int radii[] = { 1, 3, 8, 60 };
    rng_state = 202;
    double worst = 0.0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int w = shapes[s][0], h = shapes[s][1];
        const size_t n = (size_t)w * h;
        float *I = malloc(n * sizeof(float)), *p = malloc(n * sizeof(float));
        float *out = malloc(n * sizeof(float)), *scr = malloc(8 * n * sizeof(float));
        double *dscr = malloc(2 * n * sizeof(double));
        double *ref = malloc(n * sizeof(double)), *q = malloc(n * sizeof(double));
        make_guided_inputs(I, p, w, h, 0.05);
        for (size_t ri = 0; ri < sizeof radii / sizeof radii[0]; ri++) {
            const int r = radii[ri];
            const double eps = ri == 0 ? 9.0 : 90.0;
            ss_guided_filter(I, p, w, h, r, (float)eps, NULL, out, scr, dscr);
            brute_guided(I, p, w, h, r, eps, ref, q);
            for (size_t i = 0; i < n; i++) {
                if (isnan(ref[i])) {
                    ck_assert_msg(isnan(out[i]), "%dx%d r %d px %zu: want NaN got %g", w, h, r, i,
                                  (double)out[i]);
                    continue;
                }
                ck_assert_msg(isfinite(out[i]), "%dx%d r %d px %zu: NaN, want %g", w, h, r, i,
                              ref[i]);
                /* relative to the size of the terms: p, box(A)·I', box(B) */
                const double scale = fabs((double)p[i]) + q[i];
                const double rel = fabs(out[i] - ref[i]) / scale;
                worst = fmax(worst, rel);
                ck_assert_msg(rel <= 1e-5, "%dx%d r %d px %zu: got %.8g want %.8g (p %g terms %g)", w,
                              h, r, i, (double)out[i], ref[i], (double)p[i], q[i]);
            }
        }
        free(I);
        free(p);
        free(out);
        free(scr);
        free(dscr);
        free(ref);
        free(q);
    }
    fprintf(stderr, "guided vs brute force: worst relative error %.2e\n", worst);
}
END_TEST

/* ss_guided_filter2 by brute force in double: the Laplacian channel, then
 * the 2x2 window systems, then the box means of A1, A2, B. */
static void brute_guided2(const float *I, const float *p, int w, int h, int r, double eps,
                          double *out, double *q_out)
{
    const size_t n = (size_t)w * h;
    double *L = malloc(n * sizeof(double));
    unsigned char *part = malloc(n);
    double *A1 = malloc(n * sizeof(double)), *A2 = malloc(n * sizeof(double));
    double *B = malloc(n * sizeof(double));
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            const size_t i = (size_t)y * w + x;
            L[i] = (x == 0 || y == 0 || x == w - 1 || y == h - 1)
                       ? NAN
                       : (double)I[i - 1] + I[i + 1] + I[i - w] + I[i + w] - 4.0 * I[i];
        }
    double c = 0.0;
    long nc = 0;
    for (size_t i = 0; i < n; i++) {
        part[i] = isfinite(I[i]) && isfinite(p[i]) && isfinite(L[i]);
        if (part[i]) {
            c += I[i];
            nc++;
        }
    }
    c = nc ? c / (double)nc : 0.0;
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            double s1 = 0, s2 = 0, sp = 0, s1p = 0, s2p = 0, s11 = 0, s12 = 0, s22 = 0;
            long k = 0;
            for (int yy = SS_MAX(0, y - r); yy <= SS_MIN(h - 1, y + r); yy++)
                for (int xx = SS_MAX(0, x - r); xx <= SS_MIN(w - 1, x + r); xx++) {
                    const size_t j = (size_t)yy * w + xx;
                    if (!part[j])
                        continue;
                    const double a = I[j] - c, l = L[j], v = p[j];
                    s1 += a, s2 += l, sp += v, s1p += a * v, s2p += l * v;
                    s11 += a * a, s12 += a * l, s22 += l * l;
                    k++;
                }
            const size_t i = (size_t)y * w + x;
            if (!part[i] || k == 0) {
                A1[i] = A2[i] = B[i] = NAN;
                continue;
            }
            const double m1 = s1 / k, m2 = s2 / k, mp = sp / k;
            const double c1 = s1p / k - m1 * mp, c2 = s2p / k - m2 * mp;
            const double v11 = s11 / k - m1 * m1 + eps, v12 = s12 / k - m1 * m2;
            const double v22 = s22 / k - m2 * m2 + eps, det = v11 * v22 - v12 * v12;
            A1[i] = (c1 * v22 - c2 * v12) / det;
            A2[i] = (c2 * v11 - c1 * v12) / det;
            B[i] = mp - A1[i] * m1 - A2[i] * m2;
        }
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            const size_t i = (size_t)y * w + x;
            if (!part[i]) {
                out[i] = q_out[i] = NAN;
                continue;
            }
            double sa = 0, sl = 0, sb = 0;
            long k = 0;
            for (int yy = SS_MAX(0, y - r); yy <= SS_MIN(h - 1, y + r); yy++)
                for (int xx = SS_MAX(0, x - r); xx <= SS_MIN(w - 1, x + r); xx++) {
                    const size_t j = (size_t)yy * w + xx;
                    if (!isfinite(A1[j]))
                        continue;
                    sa += A1[j], sl += A2[j], sb += B[j];
                    k++;
                }
            const double t1 = (sa / k) * (I[i] - c), t2 = (sl / k) * L[i], t3 = sb / k;
            q_out[i] = fabs(t1) + fabs(t2) + fabs(t3);
            out[i] = p[i] - (t1 + t2 + t3);
        }
    free(L);
    free(part);
    free(A1);
    free(A2);
    free(B);
}

/* The two-channel filter against its definition, NaN and borders
 * included (the frame's outer ring is NaN: the Laplacian needs it). */
START_TEST(test_guided2_brute_force)
{
    static const int shapes[][2] = { { 1, 1 }, { 3, 12 }, { 12, 3 }, { 5, 5 }, { 19, 9 },
                                     { 61, 47 }, { 40, 90 } };
    static const int radii[] = { 1, 3, 8, 60 };
    rng_state = 303;
    double worst = 0.0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int w = shapes[s][0], h = shapes[s][1];
        const size_t n = (size_t)w * h;
        float *I = malloc(n * sizeof(float)), *p = malloc(n * sizeof(float));
        float *out = malloc(n * sizeof(float)), *scr = malloc(8 * n * sizeof(float));
        double *dscr = malloc(2 * n * sizeof(double));
        double *ref = malloc(n * sizeof(double)), *q = malloc(n * sizeof(double));
        make_guided_inputs(I, p, w, h, 0.03);
        for (size_t ri = 0; ri < sizeof radii / sizeof radii[0]; ri++) {
            const int r = radii[ri];
            const double eps = ri == 0 ? 9.0 : 90.0;
            ss_guided_filter2(I, p, w, h, r, (float)eps, 0, NULL, out, scr, dscr);
            brute_guided2(I, p, w, h, r, eps, ref, q);
            for (size_t i = 0; i < n; i++) {
                if (isnan(ref[i])) {
                    ck_assert_msg(isnan(out[i]), "%dx%d r %d px %zu: want NaN got %g", w, h, r, i,
                                  (double)out[i]);
                    continue;
                }
                ck_assert_msg(isfinite(out[i]), "%dx%d r %d px %zu: NaN, want %g", w, h, r, i,
                              ref[i]);
                const double rel = fabs(out[i] - ref[i]) / (fabs((double)p[i]) + q[i]);
                worst = fmax(worst, rel);
                ck_assert_msg(rel <= 1e-5, "%dx%d r %d px %zu: got %.8g want %.8g", w, h, r, i,
                              (double)out[i], ref[i]);
            }
        }
        free(I);
        free(p);
        free(out);
        free(scr);
        free(dscr);
        free(ref);
        free(q);
    }
    fprintf(stderr, "guided2 vs brute force: worst relative error %.2e\n", worst);
}
END_TEST

/* A star field of Gaussians of sigma sg on a sky of 1000, no noise:
 * ns stars (seeded: the same places and fluxes, 2e3..2e5, for any sg),
 * several per guided window as on a real field. */
static void star_field(float *I, int w, int h, double sg, int ns)
{
    uint64_t keep = rng_state;
    rng_state = 4711;
    double sx[200], sy[200], f[200];
    for (int s = 0; s < ns && s < 200; s++) {
        sx[s] = 3.0 + (w - 6) * rng_unif();
        sy[s] = 3.0 + (h - 6) * rng_unif();
        f[s] = 2e3 * pow(100.0, rng_unif());
    }
    rng_state = keep;
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            double v = 1000.0;
            for (int s = 0; s < ns && s < 200; s++) {
                const double d2 = (x - sx[s]) * (x - sx[s]) + (y - sy[s]) * (y - sy[s]);
                v += f[s] / (2 * M_PI * sg * sg) * exp(-d2 / (2 * sg * sg));
            }
            I[(size_t)y * w + x] = (float)v;
        }
}

/* ss_seeing_term finds the coefficient of Q = ∇⁴I in an exact
 * combination of 1, I, ∇²I and Q (to its 12-bit rounding), and 0 when
 * p has no Q in it. */
START_TEST(test_seeing_term_recovers)
{
    enum { W = 150, H = 100 };
    const size_t n = (size_t)W * H;
    float *I = malloc(n * sizeof(float)), *L = malloc(n * sizeof(float));
    float *Q = malloc(n * sizeof(float)), *p = malloc(n * sizeof(float));
    double *dscr = malloc(2 * n * sizeof(double));
    star_field(I, W, H, 1.5, 60);
    ss_laplacian5(I, W, H, L);
    ss_laplacian5(L, W, H, Q);
    static const double want[] = { 0.04, -0.013, 0.0 };
    for (int k = 0; k < 3; k++) {
        for (size_t i = 0; i < n; i++)
            p[i] = (float)(3.0 + 0.02 * (I[i] - 1000.0) + 0.3 * L[i] + want[k] * Q[i]);
        const float c2 = ss_seeing_term(I, L, p, W, H, 1000.0f, Q, dscr);
        ck_assert_msg(fabs(c2 - want[k]) <= 1e-3 * fabs(want[k]) + 1e-6, "c2 %.6g, want %.6g",
                      (double)c2, want[k]);
    }
    free(I);
    free(L);
    free(Q);
    free(p);
    free(dscr);
}
END_TEST

/* Seeing changes on a star field with sky noise 3: (_i = 0) a history
 * that mixes frames of sigma 1.3 and 1.7 against a current frame of 1.5
 * (no first-order change at all: the history's profile is not a
 * Gaussian), (_i = 1) a frame 10 % sharper than a history of 1.5. The
 * two-channel filter leaves the second order on the stars, over 100 ADU on
 * the brightest; the biharmonic term takes most of it out. */
START_TEST(test_biharmonic_removes_second_order)
{
    enum { W = 150, H = 100 };
    const size_t n = (size_t)W * H;
    float *I = malloc(n * sizeof(float)), *F = malloc(n * sizeof(float));
    float *G = malloc(n * sizeof(float)), *p = malloc(n * sizeof(float));
    float *o0 = malloc(n * sizeof(float)), *o1 = malloc(n * sizeof(float));
    float *scr = malloc(8 * n * sizeof(float));
    double *dscr = malloc(2 * n * sizeof(double));
    rng_state = 5;
    if (_i == 0) {
        star_field(G, W, H, 1.3, 60);
        star_field(I, W, H, 1.7, 60);
        for (size_t i = 0; i < n; i++)
            I[i] = 0.5f * (I[i] + G[i]);
        star_field(F, W, H, 1.5, 60);
    } else {
        star_field(I, W, H, 1.5, 60);
        star_field(F, W, H, 1.35, 60);
    }
    for (size_t i = 0; i < n; i++)
        p[i] = F[i] - I[i] + (float)(3.0 * rng_gauss());
    ss_guided_filter2(I, p, W, H, 12, 9.0f, 0, NULL, o0, scr, dscr);
    ss_guided_filter2(I, p, W, H, 12, 9.0f, 1, NULL, o1, scr, dscr);
    double m0 = 0.0, m1 = 0.0;
    for (size_t i = 0; i < n; i++)
        if (isfinite(o0[i]) && isfinite(o1[i])) {
            m0 = fmax(m0, fabs(o0[i]));
            m1 = fmax(m1, fabs(o1[i]));
        }
    fprintf(stderr, "seeing change %d: largest residual %.1f without the biharmonic term, %.1f "
            "with (noise 3)\n", _i, m0, m1);
    ck_assert_msg(m0 > 100.0, "no second-order residual to remove: %.1f", m0);
    ck_assert_msg(m1 < 0.35 * m0, "the biharmonic term leaves %.1f of %.1f", m1, m0);
    free(I);
    free(F);
    free(G);
    free(p);
    free(o0);
    free(o1);
    free(scr);
    free(dscr);
}
END_TEST

/* A residual made of a brightness change (∝ I) and a seeing change
 * (∝ ∇²I) over a star field: the two-channel filter removes both, the
 * one-channel filter cannot remove the second. */
START_TEST(test_guided2_removes_seeing_residual)
{
    enum { W = 160, H = 140 };
    const size_t n = (size_t)W * H;
    float *I = malloc(n * sizeof(float)), *p = malloc(n * sizeof(float)), *L = malloc(n * sizeof(float));
    float *o1 = malloc(n * sizeof(float)), *o2 = malloc(n * sizeof(float));
    float *scr = malloc(8 * n * sizeof(float));
    double *dscr = malloc(2 * n * sizeof(double));
    rng_state = 77;
    make_guided_inputs(I, p, W, H, 0.0);
    ss_laplacian5(I, W, H, L);
    double sp = 0.0;
    long k = 0;
    for (size_t i = 0; i < n; i++) {
        p[i] = isfinite(L[i]) ? (float)(0.02 * (I[i] - 1000.0) + 0.15 * L[i]) : NAN;
        if (isfinite(p[i]))
            sp += (double)p[i] * p[i], k++;
    }
    ss_guided_filter(I, p, W, H, 8, 1.0f, NULL, o1, scr, dscr);
    ss_guided_filter2(I, p, W, H, 8, 1.0f, 0, NULL, o2, scr, dscr);
    double s1 = 0.0, s2 = 0.0;
    for (size_t i = 0; i < n; i++)
        if (isfinite(o2[i]) && isfinite(o1[i]))
            s1 += (double)o1[i] * o1[i], s2 += (double)o2[i] * o2[i];
    fprintf(stderr, "seeing residual rms %.3g: one channel leaves %.3g, two leave %.3g\n",
            sqrt(sp / k), sqrt(s1 / k), sqrt(s2 / k));
    ck_assert(sqrt(s2 / k) < 0.02 * sqrt(sp / k));
    ck_assert(sqrt(s1 / k) > 0.1 * sqrt(sp / k));
    free(I);
    free(p);
    free(L);
    free(o1);
    free(o2);
    free(scr);
    free(dscr);
}
END_TEST

START_TEST(test_guided_thread_independent)
{
    enum { W = 257, H = 300 };
    const size_t n = (size_t)W * H;
    float *I = malloc(n * sizeof(float)), *p = malloc(n * sizeof(float));
    float *a = malloc(n * sizeof(float)), *b = malloc(n * sizeof(float));
    float *scr = malloc(8 * n * sizeof(float));
    double *dscr = malloc(2 * n * sizeof(double));
    rng_state = 3;
    make_guided_inputs(I, p, W, H, 0.02);
    set_threads(1);
    ss_guided_filter(I, p, W, H, 11, 1000.0f, NULL, a, scr, dscr);
    set_threads(3);
    ss_guided_filter(I, p, W, H, 11, 1000.0f, NULL, b, scr, dscr);
    set_threads(2);
    ck_assert(same_bits(a, b, n));
    free(I);
    free(p);
    free(a);
    free(b);
    free(scr);
    free(dscr);
}
END_TEST

/* p = a0·I + b0 exactly: the local model fits it everywhere, so (with a
 * negligible ε) nothing is left. And the filter is not the identity:
 * the same p with its sign flipped in the right half is not removed
 * near the seam. */
START_TEST(test_guided_removes_linear_residual)
{
    enum { W = 96, H = 80 };
    const size_t n = (size_t)W * H;
    float *I = malloc(n * sizeof(float)), *p = malloc(n * sizeof(float)), *out = malloc(n * sizeof(float));
    float *scr = malloc(8 * n * sizeof(float));
    double *dscr = malloc(2 * n * sizeof(double));
    rng_state = 4;
    float dummy[W * H];
    make_guided_inputs(I, dummy, W, H, 0.0);
    double pmax = 0.0;
    for (size_t i = 0; i < n; i++) {
        p[i] = (float)(0.02 * I[i] - 7.0);
        pmax = fmax(pmax, fabs(p[i]));
    }
    ss_guided_filter(I, p, W, H, 5, 1e-6f, NULL, out, scr, dscr);
    double worst = 0.0;
    for (size_t i = 0; i < n; i++)
        worst = fmax(worst, fabs(out[i]));
    ck_assert_msg(worst < 1e-4 * pmax, "linear residual left %g (max |p| %g)", worst, pmax);
    free(I);
    free(p);
    free(out);
    free(scr);
    free(dscr);
}
END_TEST

/* A compact source in the residual that the guide does not have (a
 * mover on plain sky) keeps most of its peak: the window is much larger
 * than the PSF and the guide carries no matching structure. */
START_TEST(test_guided_keeps_compact_mover)
{
    enum { W = 128, H = 128 };
    const size_t n = (size_t)W * H;
    float *I = malloc(n * sizeof(float)), *p = malloc(n * sizeof(float)), *out = malloc(n * sizeof(float));
    float *scr = malloc(8 * n * sizeof(float));
    double *dscr = malloc(2 * n * sizeof(double));
    rng_state = 8;
    for (size_t i = 0; i < n; i++) {
        I[i] = (float)(1000.0 + 7.0 * rng_gauss());
        p[i] = (float)(30.0 * rng_gauss());
    }
    const int mx = 64, my = 64;
    const double peak = 300.0;
    for (int y = my - 6; y <= my + 6; y++)
        for (int x = mx - 6; x <= mx + 6; x++)
            p[(size_t)y * W + x] += (float)(peak * exp(-((x - mx) * (x - mx) + (y - my) * (y - my)) /
                                                       (2 * 1.4 * 1.4)));
    /* ε = 1·σ² of the residual, radius 8·psf_sigma (the defaults) */
    ss_guided_filter(I, p, W, H, 11, 900.0f, NULL, out, scr, dscr);
    /* compare the 3×3 core sum before and after (noise averages out) */
    double before = 0, after = 0;
    for (int y = my - 1; y <= my + 1; y++)
        for (int x = mx - 1; x <= mx + 1; x++) {
            before += p[(size_t)y * W + x];
            after += out[(size_t)y * W + x];
        }
    ck_assert_msg(after > 0.9 * before, "mover core %g before, %g after", before, after);
    free(I);
    free(p);
    free(out);
    free(scr);
    free(dscr);
}
END_TEST


/* The source mask (ss_gmask_t): on an undersampled PSF (σ 0.68, window
 * radius 5 = round(8σ), ε 0.1σ², the two-channel default) the fit takes a
 * share of a faint mover's matched-filter response (B = mean_p − A·mean_I
 * holds the window's mean). Movers of z 6 on a flat guide, measured as the
 * difference of the filter's output with and without them (the noise
 * cancels): the mask gives back what the fit took. Stars in the guide
 * with a residual ∝ I (transparency) stay fitted: the mask leaves the
 * pixels where the guide has structure in the moments. */
static double gm_response(const float *out, const float *out0, const float *k, int R, int W,
                          int mx, int my)
{
    double s = 0.0;
    for (int j = -R; j <= R; j++)
        for (int i = -R; i <= R; i++) {
            const size_t q = (size_t)(my + j) * W + (size_t)(mx + i);
            s += (double)k[j + R] * k[i + R] * ((double)out[q] - (double)out0[q]);
        }
    return s;
}

START_TEST(test_gmask_keeps_faint_mover)
{
    enum { W = 200, H = 200, NM = 36 };
    const size_t n = (size_t)W * H;
    const double sig = 3.0, psf = 0.68, z = 6.0;
    float *I = malloc(n * sizeof(float)), *p0 = malloc(n * sizeof(float));
    float *p1 = malloc(n * sizeof(float)), *o[4];
    float *scr = malloc(8 * n * sizeof(float));
    double *dscr = malloc(2 * n * sizeof(double));
    for (int q = 0; q < 4; q++)
        o[q] = malloc(n * sizeof(float));
    ck_assert(I && p0 && p1 && scr && dscr && o[0] && o[1] && o[2] && o[3]);
    rng_state = 77;
    /* the guide: sky with its own (history) noise σ/√20 and a few stars
     * away from the movers; the residual: noise + 2 % of the stars */
    for (size_t i = 0; i < n; i++)
        I[i] = (float)(20.0 + sig / sqrt(20.0) * rng_gauss());
    for (int s = 0; s < 30; s++) {
        const int sx = 10 + (int)(rng_unif() * (W - 20)), sy = 10 + (int)(rng_unif() * (H - 20));
        for (int y = sy - 4; y <= sy + 4; y++)
            for (int x = sx - 4; x <= sx + 4; x++)
                I[(size_t)y * W + x] += (float)(2000.0 * exp(-((x - sx) * (x - sx) +
                                                             (y - sy) * (y - sy)) /
                                                            (2 * psf * psf)) /
                                                (2 * M_PI * psf * psf));
    }
    for (size_t i = 0; i < n; i++)
        p0[i] = (float)(sig * rng_gauss() + 0.02 * (I[i] - 20.0));
    /* movers of z 6 (§6: F = z·σ·√(4π)·σ_psf) on a grid, pixel-centred */
    float k[2 * SS_KERNEL_MAX_RADIUS + 1];
    const int R = ss_psf_kernel(psf, k);
    double k2 = 0.0;
    for (int i = 0; i <= 2 * R; i++)
        k2 += (double)k[i] * k[i];
    const double F = z * sig / k2;  /* Σ(k⊗k)·(F·k⊗k) = F·(Σk²)² = z·σ·Σk² */
    memcpy(p1, p0, n * sizeof(float));
    int mxs[NM], mys[NM];
    for (int m = 0; m < NM; m++) {
        mxs[m] = 20 + 32 * (m % 6);
        mys[m] = 20 + 32 * (m / 6);
        for (int j = -R; j <= R; j++)
            for (int i = -R; i <= R; i++)
                p1[(size_t)(mys[m] + j) * W + mxs[m] + i] += (float)(F * k[j + R] * k[i + R]);
    }
    ss_gmask_t gm;
    ck_assert_int_eq(ss_gmask_init(&gm, psf, 2.5, sig, 1.0 / 20.0, 5), 0);
    ss_guided_filter2(I, p0, W, H, 5, (float)(0.1 * sig * sig), 0, NULL, o[0], scr, dscr);
    ss_guided_filter2(I, p1, W, H, 5, (float)(0.1 * sig * sig), 0, NULL, o[1], scr, dscr);
    ss_guided_filter2(I, p0, W, H, 5, (float)(0.1 * sig * sig), 0, &gm, o[2], scr, dscr);
    ss_guided_filter2(I, p1, W, H, 5, (float)(0.1 * sig * sig), 0, &gm, o[3], scr, dscr);
    double g_off = 0.0, g_on = 0.0;
    int used = 0;
    for (int m = 0; m < NM; m++) {
        /* movers within 6 px of a star are not this test's case */
        int near = 0;
        for (int y = mys[m] - 6; y <= mys[m] + 6; y++)
            for (int x = mxs[m] - 6; x <= mxs[m] + 6; x++)
                near |= I[(size_t)y * W + x] > 20.0 + 5.0 * sig;
        if (near)
            continue;
        const double full = z * sig * k2;
        g_off += gm_response(o[1], o[0], k, R, W, mxs[m], mys[m]) / full;
        g_on += gm_response(o[3], o[2], k, R, W, mxs[m], mys[m]) / full;
        used++;
    }
    g_off /= used;
    g_on /= used;
    /* the residual at the stars' cores: as well fitted with the mask */
    double e_off = 0.0, e_on = 0.0;
    for (size_t i = 0; i < n; i++)
        if (I[i] > 20.0 + 10.0 * sig) {
            e_off += (double)o[0][i] * o[0][i];
            e_on += (double)o[2][i] * o[2][i];
        }
    fprintf(stderr, "faint mover (z %.0f, %d of %d): response kept %.3f without the mask, "
            "%.3f with; star cores rms² %.3g without, %.3g with\n", z, used, NM, g_off, g_on,
            e_off, e_on);
    ck_assert_int_ge(used, NM / 2);
    ck_assert_msg(g_off < 0.97, "without the mask the fit took only %.3f", 1.0 - g_off);
    ck_assert_msg(g_on > 0.98, "with the mask the fit still took %.3f", 1.0 - g_on);
    ck_assert_msg(e_on < 1.05 * e_off, "star cores: rms² %g with the mask, %g without", e_on,
                  e_off);
    for (int q = 0; q < 4; q++)
        free(o[q]);
    free(I);
    free(p0);
    free(p1);
    free(scr);
    free(dscr);
}
END_TEST

/* ======================================================================
 * the whole chain: false alarms with and without the guided filter
 * ==================================================================== */

/* Run a synthetic sequence with seeing wobble through the CPU pipeline
 * (defaults of the config key table), guided filter on or off. */
static void chain_run(int guided, int frames, chain_score_t *sc)
{
    ss_synth_cfg_t c;
    ss_synth_defaults(&c);
    c.width = 512;
    c.height = 512;
    c.n_stars = 700;
    c.seeing_wobble = 0.05;
    c.jitter = 1.0;
    c.n_movers = 12;
    c.mover_snr = 10.0;
    c.mover_speed = 2.0;
    c.seed = 9090;
    ss_pipeline_cfg_t pc;
    ss_pipeline_cfg_defaults(&pc);
    pc.backend = SS_BACKEND_CPU;
    pc.guided = guided;
    chain_score_run(&c, &pc, frames, sc);
}

/* ALGORITHM §4: with 5 % seeing wobble, imperfect subtraction around
 * stars leaves residual proportional to the background; the guided
 * filter removes it. Same sequence, same detection settings: fewer false
 * alarms with the filter, and the movers (SNR 10) found as often. */
START_TEST(test_guided_lowers_false_alarms)
{
    chain_score_t on, off;
    const int frames = 36;
    chain_run(1, frames, &on);
    chain_run(0, frames, &off);
    const double comp_on = (double)on.mover_seen / SS_MAX(on.mover_total, 1);
    const double comp_off = (double)off.mover_seen / SS_MAX(off.mover_total, 1);
    fprintf(stderr,
            "guided on:  %d frames, completeness %.3f (%d/%d), false alarms %d\n"
            "guided off: %d frames, completeness %.3f (%d/%d), false alarms %d\n",
            on.frames, comp_on, on.mover_seen, on.mover_total, on.false_alarms, off.frames,
            comp_off, off.mover_seen, off.mover_total, off.false_alarms);
    ck_assert_int_ge(on.frames, 10);
    ck_assert_int_eq(on.frames, off.frames);
    ck_assert_msg(off.false_alarms >= 10, "too few false alarms without the filter (%d) to "
                  "show anything", off.false_alarms);
    ck_assert_msg(on.false_alarms * 2 <= off.false_alarms,
                  "guided filter: %d false alarms, without: %d", on.false_alarms, off.false_alarms);
    ck_assert_msg(comp_on >= comp_off - 0.02, "completeness %.3f with the filter, %.3f without",
                  comp_on, comp_off);
}
END_TEST

static Suite *guided_suite(void)
{
    Suite *s = suite_create("guided");
    TCase *tc = tcase_create("box_mean");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_box_mean_brute_force);
    tcase_add_test(tc, test_box_mean_thread_independent);
    suite_add_tcase(s, tc);
    tc = tcase_create("guided_filter");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_guided_brute_force);
    tcase_add_test(tc, test_guided2_brute_force);
    tcase_add_test(tc, test_guided2_removes_seeing_residual);
    tcase_add_test(tc, test_seeing_term_recovers);
    tcase_add_loop_test(tc, test_biharmonic_removes_second_order, 0, 2);
    tcase_add_test(tc, test_guided_thread_independent);
    tcase_add_test(tc, test_guided_removes_linear_residual);
    tcase_add_test(tc, test_guided_keeps_compact_mover);
    tcase_add_test(tc, test_gmask_keeps_faint_mover);
    suite_add_tcase(s, tc);
    tc = tcase_create("chain");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_guided_lowers_false_alarms);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return ss_run_suite(guided_suite());
}
