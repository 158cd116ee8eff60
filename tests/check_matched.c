/*
 * check_matched.c — tests of ALGORITHM.md §6 (pipeline/matched.c):
 *  - the PSF kernel: radius rule, normalisation, shape, the cap;
 *  - the separable valid-aware filter against a brute-force 2-D
 *    computation in double (every kernel tap, invalid and out-of-frame
 *    taps left out, renormalised), with NaN pixels and borders, and the
 *    rules for NaN output (centre invalid, kernel weight below 0.5);
 *  - calibration of the SNR map: a point source of flux F peaks at
 *    z ≈ F/(σ·√(4π)·psf_sigma) (5 %), pure noise has unit standard
 *    deviation (5 %);
 *  - the sub-pixel phase bank: its kernels, the bank against brute force,
 *    the z it recovers for an undersampled source off the pixel centre
 *    (what the single kernel loses), its spread at the frame's edges;
 *  - results independent of the number of threads.
 */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "pipeline/stages.h"
#include "ss_test.h"


/* ======================================================================
 * kernel
 * ==================================================================== */

START_TEST(test_psf_kernel)
{
    static const double sig[] = { 0.3, 1.0, 1.4, 2.5, 7.9, 8.0, 20.0 };
    for (size_t t = 0; t < sizeof sig / sizeof sig[0]; t++) {
        float k[2 * SS_KERNEL_MAX_RADIUS + 1];
        const int R = ss_psf_kernel(sig[t], k);
        const int want_R = SS_MIN((int)ceil(3.0 * sig[t]), SS_KERNEL_MAX_RADIUS);
        ck_assert_int_eq(R, want_R);
        double s = 0.0;
        for (int i = 0; i <= 2 * R; i++)
            s += k[i];
        ck_assert_msg(fabs(s - 1.0) < 1e-6, "sigma %g: sum %.9g", sig[t], s);
        for (int i = 0; i <= 2 * R; i++) {
            /* symmetric, and the Gaussian ratio to the centre tap */
            ck_assert(k[i] == k[2 * R - i]);
            const double d = i - R, ratio = exp(-d * d / (2 * sig[t] * sig[t]));
            ck_assert_msg(fabs(k[i] / k[R] - ratio) < 1e-6 * (1 + ratio), "sigma %g tap %d", sig[t], i);
        }
    }
    /* no PSF: a delta */
    float k[2 * SS_KERNEL_MAX_RADIUS + 1];
    ck_assert_int_eq(ss_psf_kernel(0.0, k), 0);
    ck_assert(k[0] == 1.0f);
}
END_TEST

/* ======================================================================
 * brute force
 * ==================================================================== */

/* z by the 2-D definition, in double: Σ k_i k_j v in over σ·sqrt(Σ
 * (k_i k_j)² v), over the taps inside the frame; NaN at an invalid centre
 * or where the valid weight Σ k_i k_j v is under 0.5. */
static void brute_z(const float *in, int w, int h, double psf_sigma, double sigma, double *z)
{
    float k[2 * SS_KERNEL_MAX_RADIUS + 1];
    const int R = ss_psf_kernel(psf_sigma, k);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            double num = 0.0, den = 0.0, den2 = 0.0;
            for (int j = 0; j <= 2 * R; j++)
                for (int i = 0; i <= 2 * R; i++) {
                    const int xx = x + i - R, yy = y + j - R;
                    if (xx < 0 || yy < 0 || xx >= w || yy >= h)
                        continue;
                    const float v = in[(size_t)yy * w + xx];
                    if (!isfinite(v))
                        continue;
                    num += (double)k[i] * k[j] * v;
                    den += (double)k[i] * k[j];
                    den2 += (double)k[i] * k[i] * k[j] * k[j];
                }
            z[(size_t)y * w + x] = isfinite(in[(size_t)y * w + x]) && den >= 0.5
                                       ? num / (sigma * sqrt(den2))
                                       : NAN;
        }
}

/* The phase bank by the same definition: brute_z of each phase's kernels
 * (ss_psf_kernel_phase), folded to the value of largest |z| (the first of
 * equal ones), NaN where no phase is finite. */
static void brute_bank(const float *in, int w, int h, double psf_sigma, int phases, double sigma,
                       double *z)
{
    const int n = ss_mf_phases_used(psf_sigma, phases);
    float kx[2 * SS_KERNEL_MAX_RADIUS + 1], ky[2 * SS_KERNEL_MAX_RADIUS + 1];
    for (size_t i = 0; i < (size_t)w * h; i++)
        z[i] = NAN;
    for (int px = 0; px < n; px++)
        for (int py = 0; py < n; py++) {
            const int R = ss_psf_kernel_phase(psf_sigma, ss_mf_phase(n, px), kx);
            ss_psf_kernel_phase(psf_sigma, ss_mf_phase(n, py), ky);
            for (int y = 0; y < h; y++)
                for (int x = 0; x < w; x++) {
                    double num = 0.0, den = 0.0, den2 = 0.0;
                    for (int j = 0; j <= 2 * R; j++)
                        for (int i = 0; i <= 2 * R; i++) {
                            const int xx = x + i - R, yy = y + j - R;
                            if (xx < 0 || yy < 0 || xx >= w || yy >= h)
                                continue;
                            const float v = in[(size_t)yy * w + xx];
                            if (!isfinite(v))
                                continue;
                            num += (double)kx[i] * ky[j] * v;
                            den += (double)kx[i] * ky[j];
                            den2 += (double)kx[i] * kx[i] * ky[j] * ky[j];
                        }
                    if (!isfinite(in[(size_t)y * w + x]) || den < 0.5)
                        continue;
                    const double v = num / (sigma * sqrt(den2));
                    double *o = &z[(size_t)y * w + x];
                    if (isnan(*o) || fabs(v) > fabs(*o))
                        *o = v;
                }
        }
}

START_TEST(test_matched_brute_force)
{
    static const int shapes[][2] = { { 1, 1 }, { 3, 40 }, { 40, 3 }, { 11, 11 }, { 57, 43 } };
    static const double psf[] = { 0.0, 0.8, 1.4, 3.0 };
    rng_state = 99;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int w = shapes[s][0], h = shapes[s][1];
        const size_t n = (size_t)w * h;
        float *in = malloc(n * sizeof(float)), *z = malloc(n * sizeof(float));
        float *scr = malloc(3 * n * sizeof(float));
        double *ref = malloc(n * sizeof(double));
        for (size_t i = 0; i < n; i++) {
            const double u = rng_unif();
            in[i] = u < 0.08 ? NAN : u < 0.09 ? INFINITY : (float)(5.0 + 10.0 * rng_gauss());
        }
        /* a fully invalid block: its centre region has weight < 0.5 */
        for (int y = h / 4; y < SS_MIN(h, h / 4 + 9); y++)
            for (int x = w / 3; x < SS_MIN(w, w / 3 + 9); x++)
                in[(size_t)y * w + x] = NAN;
        if (n > 1)
            in[(size_t)(h / 4 + 4) * w + SS_MIN(w - 1, w / 3 + 4)] = 7.0f;  /* a lone valid pixel */
        for (size_t pi = 0; pi < sizeof psf / sizeof psf[0]; pi++) {
            const float sigma = 10.0f;
            ss_matched_filter(in, w, h, psf[pi], 1, sigma, z, scr);
            brute_z(in, w, h, psf[pi], sigma, ref);
            for (size_t i = 0; i < n; i++) {
                if (isnan(ref[i])) {
                    ck_assert_msg(isnan(z[i]), "%dx%d psf %g px %zu: want NaN got %g", w, h,
                                  psf[pi], i, (double)z[i]);
                    continue;
                }
                /* float sums of O(1) terms: 1e-5 of the z scale */
                ck_assert_msg(fabs(z[i] - ref[i]) <= 1e-5 * (1.0 + fabs(ref[i])),
                              "%dx%d psf %g px %zu: got %.8g want %.8g", w, h, psf[pi], i,
                              (double)z[i], ref[i]);
            }
        }
        free(in);
        free(z);
        free(scr);
        free(ref);
    }
}
END_TEST

/* The banks (2×2, 3×3, auto) against brute_bank, with invalid pixels and
 * borders. A phase value whose kept weight is under ½ drops out of the
 * fold on its own, so near holes the NaN pattern is the union rule. */
START_TEST(test_matched_bank_brute_force)
{
    static const int shapes[][2] = { { 1, 1 }, { 3, 40 }, { 40, 3 }, { 57, 43 } };
    static const double psf[] = { 0.6, 0.68, 1.4, 0.0 };
    static const int phases[] = { 2, 3, 0 };
    rng_state = 77;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int w = shapes[s][0], h = shapes[s][1];
        const size_t n = (size_t)w * h;
        float *in = malloc(n * sizeof(float)), *z = malloc(n * sizeof(float));
        float *scr = malloc(3 * n * sizeof(float));
        double *ref = malloc(n * sizeof(double));
        for (size_t i = 0; i < n; i++) {
            const double u = rng_unif();
            in[i] = u < 0.1 ? NAN : (float)(5.0 + 10.0 * rng_gauss());
        }
        for (int y = h / 4; y < SS_MIN(h, h / 4 + 6); y++)
            for (int x = w / 3; x < SS_MIN(w, w / 3 + 6); x++)
                in[(size_t)y * w + x] = NAN;
        for (size_t pi = 0; pi < sizeof psf / sizeof psf[0]; pi++)
            for (size_t ph = 0; ph < sizeof phases / sizeof phases[0]; ph++) {
                ss_matched_filter(in, w, h, psf[pi], phases[ph], 10.0f, z, scr);
                brute_bank(in, w, h, psf[pi], phases[ph], 10.0, ref);
                for (size_t i = 0; i < n; i++) {
                    if (isnan(ref[i])) {
                        ck_assert_msg(isnan(z[i]), "%dx%d psf %g phases %d px %zu: want NaN got %g",
                                      w, h, psf[pi], phases[ph], i, (double)z[i]);
                        continue;
                    }
                    ck_assert_msg(fabs(z[i] - ref[i]) <= 1e-5 * (1.0 + fabs(ref[i])),
                                  "%dx%d psf %g phases %d px %zu: got %.8g want %.8g", w, h,
                                  psf[pi], phases[ph], i, (double)z[i], ref[i]);
                }
            }
        free(in);
        free(z);
        free(scr);
        free(ref);
    }
}
END_TEST

/* The phases: the grid, phase 0 is the plain kernel to the bit, each
 * phase kernel sums to 1 and is centred at R + phase; the auto rule. */
START_TEST(test_matched_phase_kernels)
{
    ck_assert(ss_mf_phase(1, 0) == 0.0);
    ck_assert(ss_mf_phase(2, 0) == -0.25 && ss_mf_phase(2, 1) == 0.25);
    ck_assert(fabs(ss_mf_phase(3, 0) + 1.0 / 3.0) < 1e-15 && ss_mf_phase(3, 1) == 0.0);
    ck_assert_int_eq(ss_mf_phases_used(0.68, 0), 2);
    ck_assert_int_eq(ss_mf_phases_used(1.4, 0), 1);
    ck_assert_int_eq(ss_mf_phases_used(1.4, 3), 3);
    ck_assert_int_eq(ss_mf_phases_used(0.0, 2), 1);
    ck_assert_int_eq(ss_mf_phases_used(0.68, 9), SS_MF_MAX_PHASES);
    static const double sig[] = { 0.5, 0.68, 1.4, 3.0 };
    for (size_t t = 0; t < sizeof sig / sizeof sig[0]; t++) {
        float k0[2 * SS_KERNEL_MAX_RADIUS + 1], k[2 * SS_KERNEL_MAX_RADIUS + 1];
        const int R = ss_psf_kernel(sig[t], k0);
        ck_assert_int_eq(ss_psf_kernel_phase(sig[t], 0.0, k), R);
        ck_assert(memcmp(k, k0, (size_t)(2 * R + 1) * sizeof(float)) == 0);
        for (int p = 0; p < 3; p++) {
            const double ph = ss_mf_phase(3, p);
            ck_assert_int_eq(ss_psf_kernel_phase(sig[t], ph, k), R);
            double s = 0.0, m = 0.0;
            for (int i = 0; i <= 2 * R; i++) {
                s += k[i];
                m += k[i] * (i - R);
            }
            ck_assert_msg(fabs(s - 1.0) < 1e-6, "sigma %g phase %g: sum %.9g", sig[t], ph, s);
            ck_assert_msg(fabs(m - ph) < 0.025, "sigma %g phase %g: centre %.5f", sig[t], ph, m);
        }
    }
}
END_TEST

/* The reason for the bank (docs/QUALITY.md, the static scenario): an
 * undersampled mover (pixel-integrated Gaussian of sigma 0.68 px, no
 * noise) off the pixel centre. Its continuous SNR is F/(σ√(4π)·0.68); the
 * pixels keep 0.918 of it on average. The best z within a pixel of it,
 * per source phase (dx, dy), measured (development host, 2026-11-24):
 *   one kernel:  (0, 0) 0.921, (½, ½) 0.704 of the SNR — 24 % below the
 *                centred source at the half-pixel phase;
 *   2×2 bank:    (¼, ¼) 0.915 (a phase of the bank: as good as the
 *                centred source with one kernel), (½, ½) 0.845, (0, 0)
 *                0.876, (½, 0) 0.860 (¼ px from the nearest phase);
 *   3×3 bank:    (½, ½) 0.880, (⅓, ⅓) 0.912.
 * A test that the bank is there and works: the one kernel fails the
 * bounds that the banks pass. */
static double best_z(double psf, double dx, double dy, int phases)
{
    enum { W = 33, H = 33 };
    const int cx = 16, cy = 16;
    const double snr = 20.0, F = snr * sqrt(4.0 * M_PI) * psf, s2 = M_SQRT2 * psf;
    float in[W * H], z[W * H], scr[3 * W * H];
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) {
            const double ax = 0.5 * (erf((x + 0.5 - cx - dx) / s2) - erf((x - 0.5 - cx - dx) / s2));
            const double ay = 0.5 * (erf((y + 0.5 - cy - dy) / s2) - erf((y - 0.5 - cy - dy) / s2));
            in[y * W + x] = (float)(F * ax * ay);
        }
    ss_matched_filter(in, W, H, psf, phases, 1.0f, z, scr);
    double m = -1e30;
    for (int y = cy - 1; y <= cy + 2; y++)
        for (int x = cx - 1; x <= cx + 2; x++)
            m = fmax(m, z[y * W + x]);
    return m / snr;
}

START_TEST(test_matched_bank_phase_loss)
{
    const double p = 0.68;
    const double one_c = best_z(p, 0, 0, 1), one_h = best_z(p, 0.5, 0.5, 1);
    const double two_q = best_z(p, 0.25, 0.25, 2), two_h = best_z(p, 0.5, 0.5, 2);
    const double two_c = best_z(p, 0, 0, 2), two_xh = best_z(p, 0.5, 0, 2);
    const double three_h = best_z(p, 0.5, 0.5, 3), three_t = best_z(p, 1.0 / 3, 1.0 / 3, 3);
    printf("z/SNR at psf 0.68: one kernel (0,0) %.3f (1/2,1/2) %.3f; 2x2 (1/4,1/4) %.3f "
           "(1/2,1/2) %.3f (0,0) %.3f (1/2,0) %.3f; 3x3 (1/2,1/2) %.3f (1/3,1/3) %.3f\n",
           one_c, one_h, two_q, two_h, two_c, two_xh, three_h, three_t);
    /* the single kernel: 0.92 at the centre, under 0.75 at half a pixel */
    ck_assert_msg(one_c > 0.90, "one kernel at the centre: %.3f", one_c);
    ck_assert_msg(one_h < 0.75, "one kernel at (1/2,1/2): %.3f", one_h);
    /* 2×2: at its own phase as good as a centred source with one kernel,
     * and no phase below 0.83 */
    ck_assert_msg(two_q > 0.90, "2x2 at (1/4,1/4): %.3f", two_q);
    ck_assert_msg(two_h > 0.83 && two_c > 0.83 && two_xh > 0.83,
                  "2x2 at (1/2,1/2) %.3f (0,0) %.3f (1/2,0) %.3f", two_h, two_c, two_xh);
    ck_assert_msg(three_h > 0.86 && three_t > 0.90, "3x3 at (1/2,1/2) %.3f (1/3,1/3) %.3f",
                  three_h, three_t);
    /* a bank is never below the single kernel of its phase 0 (3×3 holds it) */
    ck_assert(best_z(p, 0.2, 0.4, 3) >= best_z(p, 0.2, 0.4, 1) - 1e-6);
}
END_TEST

/* Unit variance per phase where taps are missing: the bank's z (the
 * largest of 4 correlated unit normals in |z|) has the same spread on the
 * frame's edge rows as inside (each phase divided by its own √den2); a
 * bank normalised by the kept weight would be wider along the edge. */
START_TEST(test_matched_bank_edges)
{
    enum { W = 400, H = 400 };
    float *in = malloc(W * H * sizeof(float)), *z = malloc(W * H * sizeof(float));
    float *scr = malloc(3 * W * H * sizeof(float));
    rng_state = 43;
    for (int i = 0; i < W * H; i++)
        in[i] = (float)(5.0 * rng_gauss());
    ss_matched_filter(in, W, H, 0.68, 2, 5.0f, z, scr);
    double e2 = 0, h2 = 0;
    long ne = 0, nh = 0;
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) {
            const double v = z[y * W + x];
            if (x < 2 || y < 2 || x >= W - 2 || y >= H - 2) {
                e2 += v * v;
                ne++;
            } else {
                h2 += v * v;
                nh++;
            }
        }
    const double se = sqrt(e2 / ne), sh = sqrt(h2 / nh);
    printf("2x2 bank, psf 0.68: rms(z) %.3f on the edge rows and columns, %.3f inside\n", se, sh);
    ck_assert_msg(sh > 1.05 && sh < 1.3, "inside rms(z) %.3f", sh);
    ck_assert_msg(fabs(se / sh - 1.0) < 0.06, "edge rms(z) %.3f against %.3f inside", se, sh);
    free(in);
    free(z);
    free(scr);
}
END_TEST

/* ======================================================================
 * SNR calibration
 * ==================================================================== */

/* Point sources of flux F (Gaussian PSF sampled at pixel centres, on
 * pixel centres) in Gaussian noise σ: z at each centre ≈ F/(σ√(4π)ψ). */
START_TEST(test_matched_point_source_snr)
{
    enum { W = 400, H = 400 };
    const double psf = 1.4, sigma = 12.0, want = 40.0;
    const double F = want * sigma * sqrt(4.0 * M_PI) * psf;
    float *in = malloc(W * H * sizeof(float)), *z = malloc(W * H * sizeof(float));
    float *scr = malloc(3 * W * H * sizeof(float));
    rng_state = 17;
    for (int i = 0; i < W * H; i++)
        in[i] = (float)(sigma * rng_gauss());
    int px[64], py[64], ns = 0;
    for (int y = 25; y < H - 20; y += 50)
        for (int x = 25; x < W - 20; x += 50) {
            px[ns] = x;
            py[ns++] = y;
            for (int yy = y - 10; yy <= y + 10; yy++)
                for (int xx = x - 10; xx <= x + 10; xx++) {
                    const double d2 = (xx - x) * (xx - x) + (yy - y) * (yy - y);
                    in[yy * W + xx] += (float)(F / (2 * M_PI * psf * psf) * exp(-d2 / (2 * psf * psf)));
                }
        }
    ss_matched_filter(in, W, H, psf, 1, (float)sigma, z, scr);
    double mean = 0.0;
    for (int s = 0; s < ns; s++) {
        const double zc = z[py[s] * W + px[s]];
        /* noise adds ±1 to z: 5 % of 40 is 2 σ of it */
        ck_assert_msg(fabs(zc / want - 1.0) < 0.075, "source %d: z %g, want %g", s, zc, want);
        mean += zc / ns;
    }
    ck_assert_msg(fabs(mean / want - 1.0) < 0.05, "mean z %g, want %g", mean, want);
    free(in);
    free(z);
    free(scr);
}
END_TEST

/* Pure Gaussian noise: z has unit standard deviation (away from the
 * borders) with the true σ, and with σ from ss_noise_mad. */
START_TEST(test_matched_noise_unit_variance)
{
    enum { W = 512, H = 512 };
    float *in = malloc(W * H * sizeof(float)), *z = malloc(W * H * sizeof(float));
    float *scr = malloc(3 * W * H * sizeof(float));
    static const double psf[] = { 1.0, 1.4, 2.5 };
    rng_state = 23;
    for (size_t t = 0; t < sizeof psf / sizeof psf[0]; t++) {
        const double sigma = 3.0 + 10.0 * t;
        for (int i = 0; i < W * H; i++)
            in[i] = (float)(100.0 + sigma * rng_gauss());
        /* the filter sees a residual: remove the offset first */
        for (int i = 0; i < W * H; i++)
            in[i] -= 100.0f;
        for (int pass = 0; pass < 2; pass++) {
            const float s = pass == 0 ? (float)sigma : ss_noise_mad(in, W, H, 2, scr);
            ss_matched_filter(in, W, H, psf[t], 1, s, z, scr);
            double s1 = 0, s2 = 0;
            long n = 0;
            for (int y = 30; y < H - 30; y++)
                for (int x = 30; x < W - 30; x++) {
                    s1 += z[y * W + x];
                    s2 += (double)z[y * W + x] * z[y * W + x];
                    n++;
                }
            const double sd = sqrt(s2 / n - (s1 / n) * (s1 / n));
            ck_assert_msg(fabs(sd - 1.0) < 0.05, "psf %g pass %d: std(z) %g", psf[t], pass, sd);
        }
    }
    free(in);
    free(z);
    free(scr);
}
END_TEST

/* Unit variance where taps are missing too: along the frame's edges and
 * around masked pixels (10 % of them, in clumps of 2×2). Dividing by the
 * kept kernel weight, as before, gave std(z) ≈ 1.3 on the edge rows. */
START_TEST(test_matched_unit_variance_edges_and_holes)
{
    enum { W = 400, H = 400 };
    float *in = malloc(W * H * sizeof(float)), *z = malloc(W * H * sizeof(float));
    float *scr = malloc(3 * W * H * sizeof(float));
    rng_state = 41;
    for (int i = 0; i < W * H; i++)
        in[i] = (float)(5.0 * rng_gauss());
    for (int c = 0; c < W * H / 40; c++) {
        const int x = (int)(rng_unif() * (W - 1)), y = (int)(rng_unif() * (H - 1));
        in[y * W + x] = in[y * W + x + 1] = in[(y + 1) * W + x] = in[(y + 1) * W + x + 1] = NAN;
    }
    ss_matched_filter(in, W, H, 1.4, 1, 5.0f, z, scr);
    double e2 = 0, h2 = 0;
    long ne = 0, nh = 0;
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) {
            const float v = z[y * W + x];
            if (isnan(v))
                continue;
            if (x < 2 || y < 2 || x >= W - 2 || y >= H - 2) {
                e2 += (double)v * v;
                ne++;
            } else {
                h2 += (double)v * v;
                nh++;
            }
        }
    const double se = sqrt(e2 / ne), sh = sqrt(h2 / nh);
    printf("std(z): %.3f on the edge rows and columns (%ld px), %.3f inside with holes\n", se, ne,
           sh);
    ck_assert_msg(fabs(se - 1.0) < 0.06, "edge std(z) %.3f", se);
    ck_assert_msg(fabs(sh - 1.0) < 0.03, "inside std(z) %.3f", sh);
    free(in);
    free(z);
    free(scr);
}
END_TEST

START_TEST(test_matched_thread_independent)
{
    enum { W = 301, H = 257 };
    float *in = malloc(W * H * sizeof(float)), *a = malloc(W * H * sizeof(float)),
          *b = malloc(W * H * sizeof(float)), *scr = malloc(3 * W * H * sizeof(float));
    rng_state = 5;
    for (int i = 0; i < W * H; i++)
        in[i] = rng_unif() < 0.03 ? NAN : (float)rng_gauss();
    set_threads(1);
    ss_matched_filter(in, W, H, 1.4, 1, 1.0f, a, scr);
    set_threads(3);
    ss_matched_filter(in, W, H, 1.4, 1, 1.0f, b, scr);
    set_threads(2);
    for (int i = 0; i < W * H; i++)
        ck_assert((isnan(a[i]) && isnan(b[i])) || a[i] == b[i]);
    free(in);
    free(a);
    free(b);
    free(scr);
}
END_TEST

static Suite *matched_suite(void)
{
    Suite *s = suite_create("matched");
    TCase *tc = tcase_create("matched");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_psf_kernel);
    tcase_add_test(tc, test_matched_brute_force);
    tcase_add_test(tc, test_matched_bank_brute_force);
    tcase_add_test(tc, test_matched_phase_kernels);
    tcase_add_test(tc, test_matched_bank_phase_loss);
    tcase_add_test(tc, test_matched_bank_edges);
    tcase_add_test(tc, test_matched_point_source_snr);
    tcase_add_test(tc, test_matched_noise_unit_variance);
    tcase_add_test(tc, test_matched_unit_variance_edges_and_holes);
    tcase_add_test(tc, test_matched_thread_independent);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return ss_run_suite(matched_suite());
}
