/*
 * check_whiten.c — tests of the prediction, residual and history of
 * ALGORITHM.md §3 (pipeline/whiten.c, pipeline/history.c):
 *  - ss_whiten against a per-pixel reference of the stages.h definition
 *    (bit for bit: the same double accumulation order), every history
 *    type with its invalid sentinel, offsets that leave the frame, NaN in
 *    the current frame;
 *  - ss_lsq_moments against direct double sums, validity rules, and the
 *    same bits for any number of threads;
 *  - ss_history_dtype; ss_history_store: rounding, clamping, sentinels,
 *    and the removal footprint against a brute-force square dilation;
 *  - ss_history_subtract against its definition; the slow-mover stack fit
 *    (slow_movers.h) on frames drawn from its own model (stars, sky and
 *    gain changes, fractional offsets), a new source;
 *  - on jittered synthetic star fields (tools/synth.h), with the true
 *    shifts split into integer and fractional parts as the driver does
 *    and frames stored with ss_history_store: the residual noise is
 *    σ·sqrt(1 + ‖a‖²) within 15 %;
 *  - object removal: a bright mover leaves a negative trail in later
 *    residuals without removal (matched-filter SNR < -3 at its past
 *    positions) and none with it (> -3);
 *  - re-weighting at pixels with invalid history (poly mode): ss_whiten
 *    bit for bit against a per-pixel reference (strict when min_valid =
 *    n), thread independence; on a jittered field with 50 cosmic-ray hits
 *    per Mpix per frame and 0.5 % bad pixels, the residual's invalid
 *    share outside the border band is at most the current frame's + 1 %
 *    (the strict rule's is many times that), and the residual at
 *    re-weighted pixels has the mean and spread of the fully valid ones,
 *    on the sky and on stars (where a wrong re-weighting fails).
 */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "pipeline/slow_movers.h"
#include "pipeline/stages.h"
#include "tools/synth.h"
#include "ss_test.h"


static int same(float a, float b)
{
    return (isnan(a) && isnan(b)) || a == b;
}

/* ======================================================================
 * ss_whiten, ss_lsq_moments: unit tests
 * ==================================================================== */

static const ss_dtype_t hist_types[4] = { SS_DT_U8, SS_DT_U16, SS_DT_I16, SS_DT_F32 };

/* A random history plane of type t, ~8 % invalid (the sentinel / NaN). */
static void *random_hist(ss_dtype_t t, int n)
{
    void *p = malloc((size_t)n * ss_dtype_size(t));
    for (int i = 0; i < n; i++) {
        const int bad = rng_unif() < 0.08;
        switch (t) {
        case SS_DT_U8: ((uint8_t *)p)[i] = bad ? UINT8_MAX : (uint8_t)(rng_u64() % 255); break;
        case SS_DT_U16: ((uint16_t *)p)[i] = bad ? UINT16_MAX : (uint16_t)(rng_u64() % 65535); break;
        case SS_DT_I16:
            ((int16_t *)p)[i] = bad ? INT16_MAX : (int16_t)((int)(rng_u64() % 65535) - 32768);
            break;
        default: ((float *)p)[i] = bad ? NAN : (float)(1000.0 + 100.0 * rng_gauss()); break;
        }
    }
    return p;
}

/* y_k(x) by the definition: NaN when outside the frame or invalid. */
static double ref_y(const ss_hist_view_t *v, int w, int h, int x, int y)
{
    const int xx = x + v->ix, yy = y + v->iy;
    if (xx < 0 || yy < 0 || xx >= w || yy >= h)
        return NAN;
    double val;
    const size_t i = (size_t)yy * w + xx;
    switch (v->dtype) {
    case SS_DT_U8: {
        const uint8_t u = ((const uint8_t *)v->pixels)[i];
        val = u == UINT8_MAX ? NAN : u;
        break;
    }
    case SS_DT_U16: {
        const uint16_t u = ((const uint16_t *)v->pixels)[i];
        val = u == UINT16_MAX ? NAN : u;
        break;
    }
    case SS_DT_I16: {
        const int16_t u = ((const int16_t *)v->pixels)[i];
        val = u == INT16_MAX ? NAN : u;
        break;
    }
    default: val = ((const float *)v->pixels)[i]; break;
    }
    return val;
}

START_TEST(test_whiten_reference)
{
    rng_state = 301;
    for (int trial = 0; trial < 200; trial++) {
        const int w = 1 + (int)(rng_u64() % 40), h = 1 + (int)(rng_u64() % 30);
        const int n = 1 + (int)(rng_u64() % 7);
        const size_t np = (size_t)w * h;
        ss_hist_view_t hv[7];
        double a[7];
        float *cur = malloc(np * sizeof(float)), *P = malloc(np * sizeof(float)),
              *r = malloc(np * sizeof(float));
        for (size_t i = 0; i < np; i++)
            cur[i] = rng_unif() < 0.05 ? NAN : (float)(1000.0 + 50.0 * rng_gauss());
        const ss_dtype_t t = hist_types[trial % 4];
        for (int k = 0; k < n; k++) {
            /* mixed types across frames too, every 5th trial */
            const ss_dtype_t tk = trial % 5 == 0 ? hist_types[rng_u64() % 4] : t;
            hv[k] = (ss_hist_view_t){ random_hist(tk, (int)np), tk, (int)(rng_u64() % 7) - 3,
                                      (int)(rng_u64() % 7) - 3 };
            a[k] = (k == 2 && trial % 3 == 0) ? 0.0 : rng_gauss() / n;   /* zero weights too */
        }
        ss_whiten(cur, hv, a, n, w, h, NULL, P, r);
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++) {
                double s = 0.0;
                for (int k = 0; k < n; k++)
                    s += a[k] * ref_y(&hv[k], w, h, x, y);
                const size_t i = (size_t)y * w + x;
                const float pf = (float)s;
                const float want_P = isnan(cur[i]) || isnan(pf) ? NAN : pf;
                const float want_r = isnan(want_P) ? NAN : cur[i] - pf;
                ck_assert_msg(same(P[i], want_P) && same(r[i], want_r),
                              "trial %d (%dx%d n %d) px (%d,%d): P %g/%g r %g/%g", trial, w, h, n, x,
                              y, (double)P[i], (double)want_P, (double)r[i], (double)want_r);
            }
        for (int k = 0; k < n; k++)
            free((void *)hv[k].pixels);
        free(cur);
        free(P);
        free(r);
    }
}
END_TEST

START_TEST(test_lsq_moments_reference)
{
    rng_state = 302;
    for (int trial = 0; trial < 60; trial++) {
        const int w = 1 + (int)(rng_u64() % 70), h = 1 + (int)(rng_u64() % 50);
        const int n = 1 + (int)(rng_u64() % 6);
        const size_t np = (size_t)w * h;
        ss_hist_view_t hv[6];
        float *cur = malloc(np * sizeof(float));
        for (size_t i = 0; i < np; i++)
            cur[i] = rng_unif() < 0.05 ? NAN : (float)(1000.0 + 50.0 * rng_gauss());
        for (int k = 0; k < n; k++) {
            const ss_dtype_t tk = hist_types[(trial + k) % 4];
            hv[k] = (ss_hist_view_t){ random_hist(tk, (int)np), tk, (int)(rng_u64() % 5) - 2,
                                      (int)(rng_u64() % 5) - 2 };
        }
        double R[36], p[6], Rr[36] = { 0 }, pr[6] = { 0 };
        ss_lsq_moments(cur, hv, n, w, h, R, p);
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++) {
                double yk[6];
                int ok = !isnan(cur[(size_t)y * w + x]);
                for (int k = 0; k < n; k++) {
                    yk[k] = ref_y(&hv[k], w, h, x, y);
                    ok = ok && !isnan(yk[k]);
                }
                if (!ok)
                    continue;
                for (int k = 0; k < n; k++) {
                    pr[k] += (double)cur[(size_t)y * w + x] * yk[k];
                    for (int l = 0; l < n; l++)
                        Rr[k * n + l] += yk[k] * yk[l];
                }
            }
        for (int k = 0; k < n; k++) {
            ck_assert_msg(fabs(p[k] - pr[k]) <= 1e-12 * fabs(pr[k]) + 1e-9, "trial %d p[%d] %.17g vs %.17g",
                          trial, k, p[k], pr[k]);
            for (int l = 0; l < n; l++) {
                ck_assert_msg(fabs(R[k * n + l] - Rr[k * n + l]) <= 1e-12 * fabs(Rr[k * n + l]) + 1e-9,
                              "trial %d R[%d][%d] %.17g vs %.17g", trial, k, l, R[k * n + l],
                              Rr[k * n + l]);
                ck_assert(R[k * n + l] == R[l * n + k]);
            }
        }
        for (int k = 0; k < n; k++)
            free((void *)hv[k].pixels);
        free(cur);
    }
}
END_TEST

START_TEST(test_whiten_lsq_thread_independent)
{
    enum { W = 333, H = 260, N = 9 };
    const size_t np = (size_t)W * H;
    rng_state = 303;
    ss_hist_view_t hv[N];
    double a[N];
    float *cur = malloc(np * sizeof(float));
    for (size_t i = 0; i < np; i++)
        cur[i] = rng_unif() < 0.01 ? NAN : (float)(1000.0 + 50.0 * rng_gauss());
    for (int k = 0; k < N; k++) {
        hv[k] = (ss_hist_view_t){ random_hist(SS_DT_U16, (int)np), SS_DT_U16, k % 3 - 1, k / 3 - 1 };
        a[k] = 1.0 / N;
    }
    float *P1 = malloc(np * sizeof(float)), *r1 = malloc(np * sizeof(float));
    float *P3 = malloc(np * sizeof(float)), *r3 = malloc(np * sizeof(float));
    double R1[N * N], p1[N], R3[N * N], p3[N];
    set_threads(1);
    ss_whiten(cur, hv, a, N, W, H, NULL, P1, r1);
    ss_lsq_moments(cur, hv, N, W, H, R1, p1);
    set_threads(3);
    ss_whiten(cur, hv, a, N, W, H, NULL, P3, r3);
    ss_lsq_moments(cur, hv, N, W, H, R3, p3);
    set_threads(2);
    for (size_t i = 0; i < np; i++)
        ck_assert(same(P1[i], P3[i]) && same(r1[i], r3[i]));
    ck_assert(memcmp(R1, R3, sizeof R1) == 0 && memcmp(p1, p3, sizeof p1) == 0);
    for (int k = 0; k < N; k++)
        free((void *)hv[k].pixels);
    free(cur);
    free(P1);
    free(r1);
    free(P3);
    free(r3);
}
END_TEST

/* Random fractional shifts and an ss_reweight_t for them. */
static void random_reweight(ss_reweight_t *rw, int n, int degree, double lambda, int min_valid)
{
    double fx[SS_MAX_HISTORY], fy[SS_MAX_HISTORY];
    for (int k = 0; k < n; k++) {
        fx[k] = rng_unif() - 0.5;
        fy[k] = rng_unif() - 0.5;
    }
    ck_assert_int_eq(ss_reweight_init(rw, fx, fy, n, degree, 1e-3 * n, lambda, min_valid), 0);
}

/* The re-weighted ss_whiten against a per-pixel reference of the
 * stages.h definition, bit for bit: every history type and sentinel,
 * offsets that leave the frame (whole rows and columns), NaN in the
 * current frame, degrees 0..2, λ < 1, min_valid from 1 to n. Where every
 * y_k is valid it is the plain sum; where some are invalid, the sum over
 * the valid ones with ss_reweight_subset's weights (tested in
 * check_weights), NaN when that fails; with min_valid = n the output is
 * the strict one (rw = NULL) exactly. */
START_TEST(test_whiten_reweight_reference)
{
    rng_state = 305;
    int n_rew = 0, n_short = 0;
    for (int trial = 0; trial < 200; trial++) {
        const int w = 1 + (int)(rng_u64() % 48), h = 1 + (int)(rng_u64() % 36);
        const int n = 1 + (int)(rng_u64() % 9);
        const int degree = trial % 3;
        const double lambda = trial % 4 == 1 ? 0.85 : 1.0;
        const int min_valid = trial % 7 == 0 ? n : 1 + (int)(rng_u64() % n);
        const size_t np = (size_t)w * h;
        ss_hist_view_t hv[9];
        double a[9];
        float *cur = malloc(np * sizeof(float)), *P = malloc(np * sizeof(float)),
              *r = malloc(np * sizeof(float)), *Ps = malloc(np * sizeof(float)),
              *rs = malloc(np * sizeof(float));
        for (size_t i = 0; i < np; i++)
            cur[i] = rng_unif() < 0.05 ? NAN : (float)(1000.0 + 50.0 * rng_gauss());
        const ss_dtype_t t = hist_types[trial % 4];
        for (int k = 0; k < n; k++) {
            const ss_dtype_t tk = trial % 5 == 0 ? hist_types[rng_u64() % 4] : t;
            hv[k] = (ss_hist_view_t){ random_hist(tk, (int)np), tk, (int)(rng_u64() % 7) - 3,
                                      (int)(rng_u64() % 7) - 3 };
            a[k] = rng_gauss() / n;
        }
        ss_reweight_t rw;
        random_reweight(&rw, n, degree, lambda, min_valid);
        ss_whiten(cur, hv, a, n, w, h, &rw, P, r);
        ss_whiten(cur, hv, a, n, w, h, NULL, Ps, rs);
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++) {
                const size_t i = (size_t)y * w + x;
                double yk[9], s = 0.0;
                uint8_t inv[9];
                int nbad = 0;
                for (int k = 0; k < n; k++) {
                    yk[k] = ref_y(&hv[k], w, h, x, y);
                    inv[k] = isnan(yk[k]);
                    nbad += inv[k];
                    s += a[k] * yk[k];
                }
                float want = NAN;
                if (!isnan(cur[i]) && nbad == 0) {
                    want = (float)s;
                } else if (!isnan(cur[i])) {
                    double aw[9];
                    if (ss_reweight_subset(&rw, inv, aw) == 0) {
                        double acc = 0.0;
                        for (int k = 0; k < n; k++)
                            if (!inv[k])
                                acc += aw[k] * yk[k];
                        want = (float)acc;
                        n_rew++;
                    } else {
                        n_short++;
                    }
                }
                const float want_r = isnan(want) ? NAN : cur[i] - want;
                ck_assert_msg(same(P[i], want) && same(r[i], want_r),
                              "trial %d (%dx%d n %d degree %d min_valid %d) px (%d,%d): P %g/%g "
                              "r %g/%g", trial, w, h, n, degree, min_valid, x, y, (double)P[i],
                              (double)want, (double)r[i], (double)want_r);
                if (rw.min_valid == n)
                    ck_assert(same(P[i], Ps[i]) && same(r[i], rs[i]));
            }
        for (int k = 0; k < n; k++)
            free((void *)hv[k].pixels);
        free(cur);
        free(P);
        free(r);
        free(Ps);
        free(rs);
    }
    /* both branches were exercised */
    ck_assert_int_gt(n_rew, 5000);
    ck_assert_int_gt(n_short, 1000);
}
END_TEST

/* The same bits for any number of threads, and whatever the per-thread
 * caches hold: a frame with more invalid patterns than a cache has slots
 * (scattered sentinels in 16 frames, offsets up to ±5 px). */
START_TEST(test_whiten_reweight_thread_independent)
{
    enum { W = 401, H = 230, N = 16 };
    const size_t np = (size_t)W * H;
    rng_state = 306;
    ss_hist_view_t hv[N];
    double a[N];
    float *cur = malloc(np * sizeof(float));
    for (size_t i = 0; i < np; i++)
        cur[i] = rng_unif() < 0.01 ? NAN : (float)(1000.0 + 50.0 * rng_gauss());
    for (int k = 0; k < N; k++) {
        hv[k] = (ss_hist_view_t){ random_hist(k % 2 ? SS_DT_U16 : SS_DT_F32, (int)np),
                                  k % 2 ? SS_DT_U16 : SS_DT_F32, (int)(rng_u64() % 11) - 5,
                                  (int)(rng_u64() % 11) - 5 };
        a[k] = 1.0 / N;
    }
    ss_reweight_t rw;
    random_reweight(&rw, N, 2, 0.95, 10);
    float *P1 = malloc(np * sizeof(float)), *r1 = malloc(np * sizeof(float));
    float *P3 = malloc(np * sizeof(float)), *r3 = malloc(np * sizeof(float));
    set_threads(1);
    ss_whiten(cur, hv, a, N, W, H, &rw, P1, r1);
    set_threads(3);
    ss_whiten(cur, hv, a, N, W, H, &rw, P3, r3);
    set_threads(2);
    size_t nvalid = 0;
    for (size_t i = 0; i < np; i++) {
        ck_assert(same(P1[i], P3[i]) && same(r1[i], r3[i]));
        nvalid += !isnan(r1[i]);
    }
    /* 8 % invalid per frame and 16 frames: the strict rule would keep
     * (0.92)^16 ≈ 26 %; the re-weighting keeps most of it */
    ck_assert_msg(nvalid > np / 2, "only %zu of %zu valid", nvalid, np);
    for (int k = 0; k < N; k++)
        free((void *)hv[k].pixels);
    free(cur);
    free(P1);
    free(r1);
    free(P3);
    free(r3);
}
END_TEST

/* ======================================================================
 * history
 * ==================================================================== */

START_TEST(test_history_dtype)
{
    ck_assert_int_eq(ss_history_dtype(SS_DT_U8, 0), SS_DT_U8);
    ck_assert_int_eq(ss_history_dtype(SS_DT_U16, 0), SS_DT_U16);
    ck_assert_int_eq(ss_history_dtype(SS_DT_I16, 0), SS_DT_I16);
    ck_assert_int_eq(ss_history_dtype(SS_DT_I32, 0), SS_DT_F32);
    ck_assert_int_eq(ss_history_dtype(SS_DT_F32, 0), SS_DT_F32);
    for (int t = 0; t < SS_DT__COUNT; t++)
        ck_assert_int_eq(ss_history_dtype((ss_dtype_t)t, 1), SS_DT_F32);
}
END_TEST

/* Conversion: round half away from zero, clamp to [min, max-1], NaN to
 * the sentinel; f32 stored as is. No removal (labels/P NULL). */
START_TEST(test_history_store_conversion)
{
    enum { N = 12 };
    const float in[N] = { 0.0f, 0.49f, 0.5f, 1.5f, 2.5f, -0.5f, -2.5f, 254.6f, 70000.0f, -70000.0f,
                          NAN, 65534.4f };
    uint8_t u8[N], sc[N];
    uint16_t u16[N];
    int16_t i16[N];
    float f32[N];
    ss_history_store(in, NULL, NULL, 3, N, 1, u8, SS_DT_U8, sc);
    ss_history_store(in, NULL, NULL, 3, N, 1, u16, SS_DT_U16, sc);
    ss_history_store(in, NULL, NULL, 3, 4, 3, i16, SS_DT_I16, sc);
    ss_history_store(in, NULL, NULL, 3, 6, 2, f32, SS_DT_F32, sc);
    const uint8_t w8[N] = { 0, 0, 1, 2, 3, 0, 0, 254, 254, 0, 255, 254 };
    const uint16_t w16[N] = { 0, 0, 1, 2, 3, 0, 0, 255, 65534, 0, 65535, 65534 };
    const int16_t wi16[N] = { 0, 0, 1, 2, 3, -1, -3, 255, 32766, -32768, 32767, 32766 };
    for (int i = 0; i < N; i++) {
        ck_assert_msg(u8[i] == w8[i], "u8 %d: %d want %d", i, u8[i], w8[i]);
        ck_assert_msg(u16[i] == w16[i], "u16 %d: %d want %d", i, u16[i], w16[i]);
        ck_assert_msg(i16[i] == wi16[i], "i16 %d: %d want %d", i, i16[i], wi16[i]);
        ck_assert(same(f32[i], in[i]));
    }
    /* read back through ss_hist_value: the sentinel is NaN again */
    ck_assert(isnan(ss_hist_value(u16, SS_DT_U16, 10)));
    ck_assert(ss_hist_value(u16, SS_DT_U16, 4) == 3.0f);
    ck_assert(isnan(ss_hist_value(i16, SS_DT_I16, 10)));
}
END_TEST

/* ss_history_subtract against its definition: every pixel within
 * ceil(4σ) of the rounded centre loses flux·gx·gy (pixel-integrated
 * Gaussian), stored as the history stores (u16 rounded and clamped),
 * the sentinel and the pixels outside the box untouched; a negative flux
 * puts the source back; sources with sigma <= 0 or non-finite fields are
 * skipped. */
START_TEST(test_history_subtract_definition)
{
    enum { W = 40, H = 30 };
    static uint16_t u[W * H];
    static float f[W * H];
    for (int i = 0; i < W * H; i++) {
        u[i] = (uint16_t)(1000 + i % 7);
        f[i] = 1000.0f + (float)(i % 7);
    }
    u[15 * W + 20] = UINT16_MAX;    /* a sentinel inside the box */
    f[15 * W + 20] = NAN;
    const ss_point_source_t src[3] = { { 20.3, 14.6, 5000.0, 1.5 }, { 5, 5, 1e6, 0.0 },
                                       { 5, 5, NAN, 1.0 } };
    ss_history_subtract(u, SS_DT_U16, W, H, src, 3);
    ss_history_subtract(f, SS_DT_F32, W, H, src, 3);
    const double k = 1.0 / (sqrt(2.0) * 1.5);
    const int R = (int)ceil(4.0 * 1.5);
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) {
            const int i = y * W + x;
            double g = 0.0;
            if (abs(x - 20) <= R && abs(y - 15) <= R)
                g = 5000.0 * 0.25 * (erf((x + 0.5 - 20.3) * k) - erf((x - 0.5 - 20.3) * k)) *
                    (erf((y + 0.5 - 14.6) * k) - erf((y - 0.5 - 14.6) * k));
            if (i == 15 * W + 20) {
                ck_assert_int_eq(u[i], UINT16_MAX);
                ck_assert(isnan(f[i]));
                continue;
            }
            const double want = 1000.0 + i % 7 - g;
            ck_assert_msg(fabs(f[i] - want) < 1e-3, "f32 (%d,%d): %g want %g", x, y, f[i], want);
            ck_assert_msg(u[i] == (uint16_t)lround(want), "u16 (%d,%d): %d want %.2f", x, y, u[i],
                          want);
        }
    const ss_point_source_t back = { 20.3, 14.6, -5000.0, 1.5 };
    ss_history_subtract(f, SS_DT_F32, W, H, &back, 1);
    for (int i = 0; i < W * H; i++)
        if (i != 15 * W + 20)
            ck_assert_msg(fabs(f[i] - (1000.0f + (float)(i % 7))) < 1e-3, "put back %d: %g", i,
                          f[i]);
}
END_TEST

/* A pixel-integrated Gaussian of unit flux and sigma sg at (cx, cy),
 * pixel (x, y). */
static double pix_gauss(int x, int y, double cx, double cy, double sg)
{
    const double k = 1.0 / (sqrt(2.0) * sg);
    return 0.25 * (erf((x + 0.5 - cx) * k) - erf((x - 0.5 - cx) * k)) *
           (erf((y + 0.5 - cy) * k) - erf((y - 0.5 - cy) * k));
}

/* Gaussian noise by Box-Muller on a xorshift. */
static double gauss_noise(uint64_t *st)
{
    double u[2];
    for (int i = 0; i < 2; i++) {
        *st ^= *st << 13;
        *st ^= *st >> 7;
        *st ^= *st << 17;
        u[i] = ((*st >> 11) + 0.5) / 9007199254740992.0;
    }
    return sqrt(-2.0 * log(u[0])) * cos(2.0 * M_PI * u[1]);
}

/* The stack a slow mover leaves (slow_movers.h): the current frame and N
 * history frames of a star field, each with its own sky offset, gain
 * (±5 %) and fractional offset, the mover (or, mover == 0, a source in
 * the current frame alone) on its track p - v·τ_k; noise on top. The
 * residual r is the current frame minus the mean of the history frames.
 * The stack fit finds the mover (speed within 0.04 px/frame, position
 * within 0.3 px, flux within 15 %: about 3 times the scatter over ten
 * noise draws, 2026-11-25) and ss_slow_mover_fit takes it; a new
 * source without copies is no mover, and neither is anything when no
 * history frame is left to read. */
enum { SM_S = 81, SM_N = 12 };

static void slow_scene(int mover, ss_slow_hist_t *hist, ss_slow_stack_t *st, float *px, float *r)
{
    const double stars[4][3] = { { 30.2, 44.7, 40000 }, { 52.6, 35.1, 15000 },
                                 { 44.0, 52.3, 60000 }, { 20.5, 20.5, 8000 } };
    const double sig = 1.4, noise = 20.0, flux = 3000.0, px0 = 40.3, py0 = 39.6, vx = 0.35,
                 vy = -0.25;
    uint64_t seed = 12345u + (uint64_t)mover;
    *hist = (ss_slow_hist_t){ .n = SM_N };
    *st = (ss_slow_stack_t){ .k = SM_N + 1, .x0 = 0, .y0 = 0, .side = SM_S, .px = px };
    for (int q = 0; q <= SM_N; q++) {
        const double fx = q ? 0.1 * ((q % 5) - 2) : 0.0, fy = q ? -0.15 * ((q % 3) - 1) : 0.0;
        const double tau = q, gain = 1.0 + 0.05 * sin(1.7 * q), sky = 300.0 + 7.0 * q;
        if (q) {
            hist->a[q - 1] = 1.0 / SM_N;
            hist->tau[q - 1] = st->tau[q] = tau;
            hist->fx[q - 1] = st->fx[q] = fx;
            hist->fy[q - 1] = st->fy[q] = fy;
            hist->unscreened[q - 1] = 1;
        }
        for (int y = 0; y < SM_S; y++)
            for (int x = 0; x < SM_S; x++) {
                double v = sky;
                for (int i = 0; i < 4; i++)
                    v += gain * stars[i][2] * pix_gauss(x, y, stars[i][0] + fx, stars[i][1] + fy, sig);
                if (mover || q == 0)
                    v += flux * pix_gauss(x, y, px0 - vx * tau + fx, py0 - vy * tau + fy, sig);
                px[((size_t)q * SM_S + y) * SM_S + x] = (float)(v + noise * gauss_noise(&seed));
            }
    }
    for (int i = 0; i < SM_S * SM_S; i++) {
        double m = 0.0;
        for (int q = 1; q <= SM_N; q++)
            m += px[(size_t)q * SM_S * SM_S + i] / SM_N;
        r[i] = (float)(px[i] - m);
    }
}

START_TEST(test_slow_mover_fit)
{
    static float px[(SM_N + 1) * SM_S * SM_S], r[SM_S * SM_S];
    ss_slow_hist_t hist;
    ss_slow_stack_t st;
    slow_scene(1, &hist, &st, px, r);
    ss_slow_stack_fit_t sf;
    ck_assert_int_eq(ss_slow_stack_fit(&st, 40.0, 40.0, 1.4, &sf), 0);
    ck_assert_msg(fabs(sf.vx - 0.35) < 0.04 && fabs(sf.vy + 0.25) < 0.04, "v %.3f %.3f", sf.vx,
                  sf.vy);
    ck_assert_msg(hypot(sf.x - 40.3, sf.y - 39.6) < 0.3, "p %.2f %.2f", sf.x, sf.y);
    ck_assert_msg(fabs(sf.flux / 3000.0 - 1.0) < 0.15, "flux %.0f", sf.flux);
    ck_assert_msg(fabs(sf.noise / 20.0 - 1.0) < 0.15, "noise %.1f", sf.noise);
    ss_slow_fit_t fit;
    ck_assert_int_eq(ss_slow_mover_fit(r, SM_S, SM_S, 40.0, 40.0, 1.4, 20.0, &hist, &st, &fit), 1);
    ck_assert(fit.rss < fit.rss_new);
    /* after the take-out, the residual is the source alone: its RSS is
     * the mover model's */
    for (int y = 0; y < SM_S; y++)
        for (int x = 0; x < SM_S; x++) {
            double copies = 0.0;
            for (int k = 0; k < SM_N; k++)
                copies += hist.a[k] * fit.flux *
                          pix_gauss(x, y, fit.x - fit.vx * hist.tau[k] + hist.fx[k],
                                    fit.y - fit.vy * hist.tau[k] + hist.fy[k], fit.sigma);
            r[y * SM_S + x] += (float)copies;
        }
    const double after = ss_slow_source_rss(r, SM_S, SM_S, &fit, 1.4, 20.0, &hist);
    ck_assert_msg(after < (fit.rss + 0.2 * (fit.rss_new - fit.rss)) / fit.npix,
                  "after %.1f, mover %.1f, source %.1f", after, fit.rss / fit.npix,
                  fit.rss_new / fit.npix);
    /* a new source without copies */
    slow_scene(0, &hist, &st, px, r);
    ck_assert_int_eq(ss_slow_mover_fit(r, SM_S, SM_S, 40.0, 40.0, 1.4, 20.0, &hist, &st, &fit), 0);
    /* nothing left in the history to read */
    st.k = 1;
    ck_assert_int_eq(ss_slow_stack_fit(&st, 40.0, 40.0, 1.4, &sf), -1);
    ck_assert_int_eq(ss_slow_mover_fit(r, SM_S, SM_S, 40.0, 40.0, 1.4, 20.0, &hist, &st, &fit), 0);
}
END_TEST

/* The removal footprint: positive labels dilated by a square of the
 * radius; P there, the frame elsewhere. Brute force per pixel. Negative
 * labels (vanished objects) are not removed. */
START_TEST(test_history_store_footprint)
{
    rng_state = 304;
    for (int trial = 0; trial < 120; trial++) {
        const int big = trial % 7 == 6;             /* a radius beyond the frame */
        const int w = 1 + (int)(rng_u64() % (big ? 60 : 300)), h = 1 + (int)(rng_u64() % 40);
        const int radius = big ? 70 : (int)(rng_u64() % 5);
        const size_t np = (size_t)w * h;
        float *fr = malloc(np * sizeof(float)), *P = malloc(np * sizeof(float)),
              *out = malloc(np * sizeof(float));
        int32_t *lab = malloc(np * sizeof(int32_t));
        uint8_t *sc = malloc(np);
        const double dens = rng_unif() * 0.03;
        for (size_t i = 0; i < np; i++) {
            fr[i] = (float)(i % 1000);
            P[i] = -1.0f - (float)(i % 7);
            const double u = rng_unif();
            lab[i] = u < dens ? 1 + (int)(rng_u64() % 5) : u < 2 * dens ? -1 : 0;
        }
        ss_history_store(fr, P, lab, radius, w, h, out, SS_DT_F32, sc);
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++) {
                int in = 0;
                for (int yy = SS_MAX(0, y - radius); yy <= SS_MIN(h - 1, y + radius) && !in; yy++)
                    for (int xx = SS_MAX(0, x - radius); xx <= SS_MIN(w - 1, x + radius); xx++)
                        if (lab[(size_t)yy * w + xx] > 0) {
                            in = 1;
                            break;
                        }
                const size_t i = (size_t)y * w + x;
                ck_assert_msg(out[i] == (in ? P[i] : fr[i]), "trial %d (%dx%d r %d) px (%d,%d)",
                              trial, w, h, radius, x, y);
            }
        free(fr);
        free(P);
        free(out);
        free(lab);
        free(sc);
    }
}
END_TEST

/* ======================================================================
 * synthetic sequences
 * ==================================================================== */

#define SEQ_MAX_N 32

/* A synthetic feed processed the way the driver does it, with the true
 * shifts standing in for registration: u16 history, newest first. */
typedef struct seq {
    ss_synth_t *syn;
    ss_frame_t raw;
    ss_synth_truth_t truth;         /* of the current frame */
    int w, h, N;
    float *cur, *P, *r, *z, *fscr;
    int32_t *labels, *iscr;
    uint8_t *bscr;
    void *hist[SEQ_MAX_N];          /* slots */
    int slot[SEQ_MAX_N];            /* ring: slot of the k-th newest frame */
    double sx[SEQ_MAX_N], sy[SEQ_MAX_N];
    ss_synth_truth_t htruth[SEQ_MAX_N]; /* truth of each stored frame, by ring position */
    int nh;
    double a[SEQ_MAX_N];
    const uint8_t *bad;             /* static bad-pixel mask (detector), or NULL */
    int flag_cosmics;               /* set the 3×3 around each cosmic-ray hit invalid */
    ss_hist_view_t hv[SEQ_MAX_N];   /* the views of the last seq_whiten */
    double fx[SEQ_MAX_N], fy[SEQ_MAX_N];
} seq_t;

static void seq_init(seq_t *s, const ss_synth_cfg_t *c, int N)
{
    memset(s, 0, sizeof *s);
    s->syn = ss_synth_new(c);
    ck_assert_ptr_nonnull(s->syn);
    s->w = c->width;
    s->h = c->height;
    s->N = N;
    const size_t np = (size_t)s->w * s->h;
    s->raw.capacity = np * ss_dtype_size(c->dtype);
    s->raw.pixels = malloc(s->raw.capacity);
    s->cur = malloc(np * sizeof(float));
    s->P = malloc(np * sizeof(float));
    s->r = malloc(np * sizeof(float));
    s->z = malloc(np * sizeof(float));
    s->fscr = malloc(3 * np * sizeof(float));
    s->labels = calloc(np, sizeof(int32_t));
    s->iscr = malloc(np * sizeof(int32_t));
    s->bscr = malloc(np);
    for (int k = 0; k < N; k++) {
        s->hist[k] = malloc(np * sizeof(uint16_t));
        s->slot[k] = k;
    }
}

static void seq_free(seq_t *s)
{
    ss_synth_destroy(&s->syn);
    free(s->raw.pixels);
    free(s->cur);
    free(s->P);
    free(s->r);
    free(s->z);
    free(s->fscr);
    free(s->labels);
    free(s->iscr);
    free(s->bscr);
    for (int k = 0; k < s->N; k++)
        free(s->hist[k]);
}

/* Render and calibrate the next frame into cur. */
static void seq_next(seq_t *s)
{
    ck_assert_int_eq(ss_synth_next(s->syn, &s->raw, &s->truth), SS_OK);
    const ss_roi_t roi = { 0, 0, s->w, s->h };
    ss_calibrate(s->raw.pixels, s->raw.dtype, s->w, NULL, roi, NULL, NULL, 0.0, s->bad, s->cur);
    /* an instrument pipeline's flags: the hits' pixels (1-3 in a row
     * around the truth centroid) are invalid */
    for (int o = 0; s->flag_cosmics && o < s->truth.n_obj; o++) {
        if (s->truth.obj[o].kind != SS_SYNTH_COSMIC)
            continue;
        const long cx = lround(s->truth.obj[o].x), cy = lround(s->truth.obj[o].y);
        for (long y = SS_MAX(cy - 1, 0); y <= SS_MIN(cy + 1, s->h - 1); y++)
            for (long x = SS_MAX(cx - 1, 0); x <= SS_MIN(cx + 1, s->w - 1); x++)
                s->cur[y * s->w + x] = NAN;
    }
}

/* Weights and whitening of cur against the n newest history frames, the
 * integer/fraction split of the driver: d = s_t - s_k, i = round(d).
 * rw: NULL for the strict rule, else filled here for the re-weighting
 * (degree rw_degree, min_valid). */
static void seq_whiten_rw(seq_t *s, int degree, double gamma, double lambda, ss_reweight_t *rw,
                          int rw_degree, int min_valid)
{
    const int n = s->nh;
    for (int k = 0; k < n; k++) {
        const double dx = s->truth.sx - s->sx[k], dy = s->truth.sy - s->sy[k];
        const int ix = (int)lround(dx), iy = (int)lround(dy);
        s->fx[k] = dx - ix;
        s->fy[k] = dy - iy;
        s->hv[k] = (ss_hist_view_t){ s->hist[s->slot[k]], SS_DT_U16, ix, iy };
    }
    ck_assert_int_eq(ss_weights_poly(s->fx, s->fy, n, degree, gamma, lambda, s->a), 0);
    if (rw)
        ck_assert_int_eq(ss_reweight_init(rw, s->fx, s->fy, n, rw_degree, gamma, lambda,
                                          min_valid), 0);
    ss_whiten(s->cur, s->hv, s->a, n, s->w, s->h, rw, s->P, s->r);
}

static void seq_whiten(seq_t *s, int degree, double gamma, double lambda)
{
    seq_whiten_rw(s, degree, gamma, lambda, NULL, 0, 0);
}

/* Store cur as the newest history frame (into the oldest slot), with
 * object removal from labels/P when remove is set. */
static void seq_store(seq_t *s, int remove, int radius)
{
    const int slot = s->nh < s->N ? s->slot[s->nh] : s->slot[s->N - 1];
    ss_history_store(s->cur, remove ? s->P : NULL, remove ? s->labels : NULL, radius, s->w, s->h,
                     s->hist[slot], SS_DT_U16, s->bscr);
    const int keep = SS_MIN(s->nh, s->N - 1);
    memmove(&s->slot[1], &s->slot[0], (size_t)keep * sizeof s->slot[0]);
    memmove(&s->sx[1], &s->sx[0], (size_t)keep * sizeof s->sx[0]);
    memmove(&s->sy[1], &s->sy[0], (size_t)keep * sizeof s->sy[0]);
    memmove(&s->htruth[1], &s->htruth[0], (size_t)keep * sizeof s->htruth[0]);
    s->slot[0] = slot;
    s->sx[0] = s->truth.sx;
    s->sy[0] = s->truth.sy;
    s->htruth[0] = s->truth;
    s->nh = keep + 1;
    /* the free slots stay behind the used ones */
    if (s->nh < s->N) {
        int used[SEQ_MAX_N] = { 0 }, j = s->nh;
        for (int k = 0; k < s->nh; k++)
            used[s->slot[k]] = 1;
        for (int q = 0; q < s->N; q++)
            if (!used[q])
                s->slot[j++] = q;
    }
}

static double sum_sq(const double *a, int n)
{
    double s = 0.0;
    for (int k = 0; k < n; k++)
        s += a[k] * a[k];
    return s;
}

/* Residual noise on jittered star fields, after the history is full:
 *  - over the frame, 1.4826·MAD of the residual ≈ σ·sqrt(1 + ‖a‖²), σ the
 *    per-pixel noise at the sky level (synth truth), within 15 %, for
 *    degrees 0, 1, 2, a forgetting factor and the default γ = 1e-3·N;
 *  - on the stars (predicted level above sky + 10σ), the residual divided
 *    by its expected noise, sqrt((P/gain + read²)(1 + ‖a‖²)), has unit
 *    robust spread within 15 % at degree 2: the sub-pixel shifts are
 *    really compensated there. Degree 0 (a plain mean of integer-aligned
 *    frames) must fail that (> 1.15 on average), or the check proves
 *    nothing. */
START_TEST(test_residual_noise_jittered_field)
{
    ss_synth_cfg_t c;
    ss_synth_defaults(&c);
    c.width = 384;
    c.height = 320;
    c.n_stars = 1500;
    c.jitter = 1.0;
    c.seed = 77;
    const int N = 20, NT = 4;
    seq_t s;
    seq_init(&s, &c, N);
    static const struct { int degree; double gamma, lambda; } modes[] = {
        { 0, 0.0, 1.0 }, { 1, 0.0, 1.0 }, { 2, 0.0, 1.0 }, { 2, 0.0, 0.95 }, { 2, 0.02, 1.0 },
    };
    enum { NM = sizeof modes / sizeof modes[0] };
    double star_mean[NM] = { 0 };
    for (int t = 0; t < N + NT; t++) {
        seq_next(&s);
        if (s.nh == N) {
            for (int m = 0; m < NM; m++) {
                seq_whiten(&s, modes[m].degree, modes[m].gamma, modes[m].lambda);
                const double got = ss_noise_mad(s.r, s.w, s.h, 1, s.fscr);
                const double fa = 1.0 + sum_sq(s.a, N);
                const double want = s.truth.sigma_pix * sqrt(fa);
                ck_assert_msg(fabs(got / want - 1.0) < 0.15,
                              "frame %d degree %d gamma %g lambda %g: noise %g, want %g", t,
                              modes[m].degree, modes[m].gamma, modes[m].lambda, got, want);
                const double rn2 = c.read_noise * c.read_noise;
                const double thr = c.sky + 10.0 * s.truth.sigma_pix;
                float *u = s.fscr + (size_t)s.w * s.h;
                size_t ns = 0;
                for (size_t i = 0; i < (size_t)s.w * s.h; i++)
                    if (!isnan(s.r[i]) && s.P[i] > thr)
                        u[ns++] = (float)(s.r[i] / sqrt((s.P[i] / c.gain + rn2) * fa));
                ck_assert(ns > 500);
                const double star = ss_noise_mad(u, (int)ns, 1, 1, s.fscr);
                star_mean[m] += star / NT;
                fprintf(stderr,
                        "frame %d degree %d gamma %g lambda %g: |a|^2 %.4f, residual noise %.3f "
                        "vs sigma*sqrt(1+|a|^2) %.3f (ratio %.3f); on %zu star pixels %.3f\n",
                        t, modes[m].degree, modes[m].gamma, modes[m].lambda, fa - 1.0, got, want,
                        got / want, ns, star);
                if (modes[m].degree == 2)
                    ck_assert_msg(fabs(star - 1.0) < 0.15,
                                  "frame %d degree 2 gamma %g lambda %g: star-pixel noise %g", t,
                                  modes[m].gamma, modes[m].lambda, star);
            }
        }
        seq_store(&s, 0, 0);
    }
    ck_assert_msg(star_mean[0] > 1.15, "degree 0 star-pixel noise %g: the check is blind",
                  star_mean[0]);
    seq_free(&s);
}
END_TEST

/* ---- re-weighting on a field with cosmic rays and bad pixels ---------- */

/* The field of the re-weighting tests: jitter of a few px (2.5 rms per
 * axis), 50 cosmic-ray hits per Mpix per frame (flagged invalid, 3×3),
 * 0.5 % static bad pixels (invalid in every frame, in detector
 * coordinates), no movers; N = 20, degree 2, the default γ and the
 * automatic min_valid. */
enum { RWF_W = 512, RWF_H = 448, RWF_N = 20, RWF_NT = 6 };

/* Residual statistics of one pixel class, in units of the expected noise
 * sqrt((P/gain + read²)(1 + ‖a‖²)) with the weights a the pixel used. */
typedef struct rw_stats {
    size_t n;
    double sum, sum2;
    float *u;                       /* the samples (robust spread) */
    size_t cap;
} rw_stats_t;

static void stats_add(rw_stats_t *st, double u)
{
    if (st->n == st->cap) {
        st->cap = st->cap ? 2 * st->cap : 4096;
        st->u = realloc(st->u, st->cap * sizeof(float));
        ck_assert_ptr_nonnull(st->u);
    }
    st->u[st->n++] = (float)u;
    st->sum += u;
    st->sum2 += u * u;
}

static double stats_mean(const rw_stats_t *st) { return st->sum / (double)st->n; }
static double stats_rms(const rw_stats_t *st) { return sqrt(st->sum2 / (double)st->n); }
static double stats_robust(const rw_stats_t *st, float *scratch)
{
    return ss_noise_mad(st->u, (int)st->n, 1, 1, scratch);
}

/* What one pass over the field measures. Classes: [0] pixels whose every
 * y_k is valid, [1] re-weighted pixels; [.][0] sky, [.][1] stars
 * (P > sky + 10σ). */
typedef struct rwf_out {
    double f_cur, f_strict, f_rw;   /* invalid fractions outside the border band */
    double band_frac;               /* share of the frame in the border band */
    double band_rw;                 /* valid share of the band, re-weighted */
    double reweighted;              /* share of the valid residual that was re-weighted */
    double a2_full, a2_worst;       /* ‖a‖² of the full history, and the largest used */
    rw_stats_t st[2][2];            /* the correct re-weighting */
    rw_stats_t wrong[2];            /* [sky, star] of re-weighted pixels, degree-0 subset weights */
} rwf_out_t;

static void rwf_free(rwf_out_t *o)
{
    for (int i = 0; i < 2; i++) {
        free(o->st[i][0].u);
        free(o->st[i][1].u);
        free(o->wrong[i].u);
    }
}

/* Classify and accumulate one whitened frame (s->P, s->r from rw). */
static void rwf_accumulate(seq_t *s, const ss_synth_cfg_t *c, const ss_reweight_t *rw,
                           rw_stats_t st[2][2], double *a2_worst, size_t *n_rew, size_t *n_valid)
{
    const int n = s->nh;
    const double rn2 = c->read_noise * c->read_noise, a2 = sum_sq(s->a, n);
    const double thr = c->sky + 10.0 * s->truth.sigma_pix;
    double aw[SEQ_MAX_N];
    for (int y = 0; y < s->h; y++)
        for (int x = 0; x < s->w; x++) {
            const size_t i = (size_t)y * s->w + x;
            if (isnan(s->r[i]))
                continue;
            uint8_t inv[SEQ_MAX_N];
            int nbad = 0;
            for (int k = 0; k < n; k++) {
                inv[k] = isnan(ref_y(&s->hv[k], s->w, s->h, x, y));
                nbad += inv[k];
            }
            double q = a2;
            if (nbad) {
                ck_assert_int_eq(ss_reweight_subset(rw, inv, aw), 0);
                q = sum_sq(aw, n);
                *a2_worst = fmax(*a2_worst, q);
                (*n_rew)++;
            }
            (*n_valid)++;
            const double e = sqrt((s->P[i] / c->gain + rn2) * (1.0 + q));
            stats_add(&st[nbad > 0][s->P[i] > thr], s->r[i] / e);
        }
}

static void reweight_field_run(rwf_out_t *o)
{
    memset(o, 0, sizeof *o);
    ss_synth_cfg_t c;
    ss_synth_defaults(&c);
    c.width = RWF_W;
    c.height = RWF_H;
    c.n_stars = 3000;
    c.jitter = 2.5;
    c.cosmic_rate = 50.0;
    c.seed = 91;
    const size_t np = (size_t)RWF_W * RWF_H;
    uint8_t *bad = malloc(np);
    rng_state = 307;
    for (size_t i = 0; i < np; i++)
        bad[i] = rng_unif() < 0.005;
    seq_t s;
    seq_init(&s, &c, RWF_N);
    s.bad = bad;
    s.flag_cosmics = 1;
    ss_pipeline_cfg_t pc;
    memset(&pc, 0, sizeof pc);
    pc.mode = SS_WHITEN_POLY;
    pc.poly_degree = 2;
    pc.history = RWF_N;
    pc.gamma = -1.0;                                            /* the default, 1e-3·N */
    const int min_valid = ss_cfg_min_valid(&pc, RWF_N);      /* the automatic value */
    const double gamma = ss_cfg_gamma(&pc);
    float *rs = malloc(np * sizeof(float)), *r0 = malloc(np * sizeof(float));
    uint8_t *band = malloc(np);
    size_t cnt_out = 0, cnt_cur = 0, cnt_strict = 0, cnt_rw = 0, cnt_band = 0, band_ok = 0;
    size_t n_rew = 0, n_valid = 0;
    for (int t = 0; t < RWF_N + RWF_NT; t++) {
        seq_next(&s);
        if (s.nh == RWF_N) {
            ss_reweight_t rw, rw0;
            /* the strict rule, for the record */
            seq_whiten(&s, 2, gamma, 1.0);
            memcpy(rs, s.r, np * sizeof(float));
            /* a wrong re-weighting: degree-0 subset weights (the plain mean of
             * the valid frames) where frames are missing */
            seq_whiten_rw(&s, 2, gamma, 1.0, &rw0, 0, min_valid);
            memcpy(r0, s.r, np * sizeof(float));
            float *P0 = s.fscr;
            memcpy(P0, s.P, np * sizeof(float));
            /* the re-weighting */
            seq_whiten_rw(&s, 2, gamma, 1.0, &rw, 2, min_valid);
            o->a2_full = sum_sq(s.a, RWF_N);
            /* border band: where some frame's offset leaves the frame */
            int xlo = 0, xhi = RWF_W, ylo = 0, yhi = RWF_H;
            for (int k = 0; k < RWF_N; k++) {
                xlo = SS_MAX(xlo, -s.hv[k].ix);
                xhi = SS_MIN(xhi, RWF_W - s.hv[k].ix);
                ylo = SS_MAX(ylo, -s.hv[k].iy);
                yhi = SS_MIN(yhi, RWF_H - s.hv[k].iy);
            }
            for (int y = 0; y < RWF_H; y++)
                for (int x = 0; x < RWF_W; x++) {
                    const size_t i = (size_t)y * RWF_W + x;
                    band[i] = x < xlo || x >= xhi || y < ylo || y >= yhi;
                    if (band[i]) {
                        cnt_band++;
                        band_ok += !isnan(s.r[i]);
                        continue;
                    }
                    cnt_out++;
                    cnt_cur += isnan(s.cur[i]);
                    cnt_strict += isnan(rs[i]);
                    cnt_rw += isnan(s.r[i]);
                }
            rwf_accumulate(&s, &c, &rw, o->st, &o->a2_worst, &n_rew, &n_valid);
            /* the wrong variant at the same re-weighted pixels */
            const double rn2 = c.read_noise * c.read_noise;
            const double thr = c.sky + 10.0 * s.truth.sigma_pix;
            double aw[SEQ_MAX_N];
            for (int y = 0; y < RWF_H; y++)
                for (int x = 0; x < RWF_W; x++) {
                    const size_t i = (size_t)y * RWF_W + x;
                    if (isnan(r0[i]) || isnan(s.r[i]))
                        continue;
                    uint8_t inv[SEQ_MAX_N];
                    int nbad = 0;
                    for (int k = 0; k < RWF_N; k++) {
                        inv[k] = isnan(ref_y(&s.hv[k], RWF_W, RWF_H, x, y));
                        nbad += inv[k];
                    }
                    if (!nbad)
                        continue;
                    ck_assert_int_eq(ss_reweight_subset(&rw0, inv, aw), 0);
                    const double e = sqrt((P0[i] / c.gain + rn2) * (1.0 + sum_sq(aw, RWF_N)));
                    stats_add(&o->wrong[P0[i] > thr], r0[i] / e);
                }
        }
        seq_store(&s, 0, 0);
    }
    o->f_cur = (double)cnt_cur / cnt_out;
    o->f_strict = (double)cnt_strict / cnt_out;
    o->f_rw = (double)cnt_rw / cnt_out;
    o->band_frac = (double)cnt_band / (cnt_band + cnt_out);
    o->band_rw = cnt_band ? (double)band_ok / cnt_band : 1.0;
    o->reweighted = (double)n_rew / n_valid;
    free(rs);
    free(r0);
    free(band);
    free(bad);
    seq_free(&s);
}

/* Invalid pixels no longer accumulate over the history: outside the
 * border band the shifts push out, the residual is invalid only where
 * the current frame is (+ at most 1 %), while the strict rule (any
 * invalid y_k) loses many times that — the measurement the test rests
 * on, asserted so that the test can tell the two apart. */
START_TEST(test_reweight_invalid_fraction)
{
    rwf_out_t o;
    reweight_field_run(&o);
    fprintf(stderr,
            "invalid residual outside the border band (%.1f %% of the frame): current frame "
            "%.3f %%, strict rule %.3f %%, re-weighted %.3f %%; border band valid %.1f %% "
            "(strict 0 %%); %.1f %% of the valid residual re-weighted\n",
            100.0 * o.band_frac, 100.0 * o.f_cur, 100.0 * o.f_strict, 100.0 * o.f_rw,
            100.0 * o.band_rw, 100.0 * o.reweighted);
    ck_assert_msg(o.f_rw <= o.f_cur + 0.01, "re-weighted invalid %.4f, current %.4f", o.f_rw,
                  o.f_cur);
    ck_assert_msg(o.f_strict > o.f_cur + 0.03, "strict %.4f: the field does not show the problem",
                  o.f_strict);
    ck_assert(o.f_cur > 0.004);
    ck_assert(o.band_rw > 0.5);
    rwf_free(&o);
}
END_TEST

/* Re-weighting is right, against truth: on a field without movers, the
 * residual at re-weighted pixels, in units of its expected noise (which
 * counts the ‖a‖² of the weights it used), has the mean and spread of the
 * fully valid pixels — on the sky and on the stars, where a wrong weight
 * set (one that breaks the shift moments) shows at once. The wrong
 * variant, the plain mean of the valid frames (degree-0 subset weights),
 * is measured at the same pixels and must fail the star check, or the
 * check proves nothing. */
START_TEST(test_reweight_unbiased)
{
    rwf_out_t o;
    reweight_field_run(&o);
    float *scratch = malloc((o.st[1][0].n + o.st[0][0].n + 16) * sizeof(float));
    static const char *const cls[2] = { "all valid", "re-weighted" };
    static const char *const where[2] = { "sky", "stars" };
    double mean[2][2], rob[2][2], rms[2][2];
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++) {
            const rw_stats_t *st = &o.st[i][j];
            ck_assert_msg(st->n > (j ? 1500u : 20000u), "%s %s: %zu pixels", cls[i], where[j],
                          st->n);
            mean[i][j] = stats_mean(st);
            rms[i][j] = stats_rms(st);
            rob[i][j] = stats_robust(st, scratch);
            fprintf(stderr,
                    "residual / expected noise, %s pixels on %s: n %zu, mean %+.4f, rms %.4f, "
                    "robust sigma %.4f\n", cls[i], where[j], st->n, mean[i][j], rms[i][j],
                    rob[i][j]);
        }
    double wmean[2], wrob[2], wrms[2];
    for (int j = 0; j < 2; j++) {
        wmean[j] = stats_mean(&o.wrong[j]);
        wrms[j] = stats_rms(&o.wrong[j]);
        wrob[j] = stats_robust(&o.wrong[j], scratch);
        fprintf(stderr,
                "  wrong re-weighting (plain mean of the valid frames) on %s: mean %+.4f, rms "
                "%.4f, robust sigma %.4f\n", where[j], wmean[j], wrms[j], wrob[j]);
    }
    fprintf(stderr, "  |a|^2: full history %.4f, largest re-weighted %.4f\n", o.a2_full,
            o.a2_worst);
    for (int j = 0; j < 2; j++) {
        /* mean: within 0.05 σ of the fully valid pixels' (which have
         * their own small star residual) */
        ck_assert_msg(fabs(mean[1][j] - mean[0][j]) < 0.05, "%s: mean %+.4f vs %+.4f", where[j],
                      mean[1][j], mean[0][j]);
        ck_assert_msg(fabs(rob[1][j] / rob[0][j] - 1.0) < 0.10, "%s: robust sigma %.4f vs %.4f",
                      where[j], rob[1][j], rob[0][j]);
        ck_assert_msg(fabs(rms[1][j] / rms[0][j] - 1.0) < 0.15, "%s: rms %.4f vs %.4f", where[j],
                      rms[1][j], rms[0][j]);
    }
    /* the check can fail: the wrong weights miss it on the stars */
    ck_assert_msg(wrms[1] / rms[0][1] - 1.0 > 0.15,
                  "the plain mean passes the star check too (rms %.4f vs %.4f): it is blind",
                  wrms[1], rms[0][1]);
    free(scratch);
    rwf_free(&o);
}
END_TEST

/* One run of a bright mover through the whitening chain, object removal
 * on or off. Returns, at the last frame, the matched-filter SNR at the
 * mover's past positions (those of the frames in the history, mapped into
 * the current frame), as their minimum and mean, and the SNR at its
 * current position. */
static void mover_run(int remove, double *zmin, double *zmean, double *znow, int *npos)
{
    ss_synth_cfg_t c;
    ss_synth_defaults(&c);
    c.width = 320;
    c.height = 288;
    c.n_stars = 500;
    c.jitter = 1.0;
    c.n_movers = 1;
    c.mover_snr = 100.0;
    c.mover_speed = 3.0;
    c.seed = 4242;
    const int N = 12, T = 2 * N + 1;
    const double psf = c.psf_sigma;
    const int radius = (int)floor(2.0 * psf + 1.0);       /* the default mask radius */
    seq_t s;
    seq_init(&s, &c, N);
    for (int t = 0; t < T; t++) {
        seq_next(&s);
        int whitened = 0;
        if (s.nh == N) {
            seq_whiten(&s, 1, 1e-3 * N, 1.0);
            const float sigma = ss_noise_mad(s.r, s.w, s.h, 2, s.fscr);
            ss_matched_filter(s.r, s.w, s.h, psf, 1, sigma, s.z, s.fscr);
            int np = 0, nn = 0;
            ss_label(s.z, s.w, s.h, 5.0f, 2.5f, 0, s.labels, s.iscr, &np, &nn);
            whitened = 1;
        }
        if (t == T - 1)
            break;
        seq_store(&s, remove && whitened, radius);
    }
    /* the mover now, and where it was in each history frame */
    ck_assert_int_ge(s.truth.n_obj, 1);
    const double cx = s.truth.obj[0].x, cy = s.truth.obj[0].y;
    *znow = s.z[(size_t)lround(cy) * s.w + lround(cx)];
    *zmin = INFINITY;
    *zmean = 0.0;
    *npos = 0;
    for (int k = 0; k < s.nh; k++) {
        const ss_synth_truth_t *ht = &s.htruth[k];
        const double px = ht->obj[0].x + ht->sx - s.truth.sx, py = ht->obj[0].y + ht->sy - s.truth.sy;
        if (hypot(px - cx, py - cy) < 4.0 * psf)   /* inside the mover's own PSF */
            continue;
        const long ix = lround(px), iy = lround(py);
        if (ix < 0 || iy < 0 || ix >= s.w || iy >= s.h)
            continue;
        const float zv = s.z[(size_t)iy * s.w + ix];
        if (isnan(zv))
            continue;
        *zmin = fmin(*zmin, zv);
        *zmean += zv;
        (*npos)++;
    }
    *zmean /= SS_MAX(*npos, 1);
    seq_free(&s);
}

/* Object removal: without it, the history frames carry the mover and the
 * prediction subtracts it at its past positions (a negative trail, SNR
 * well below -3); with it, the trail is gone (no SNR below -3 there).
 * Both are asserted: the test proves that removal is what makes the
 * difference. The mover itself is detected in both. */
START_TEST(test_object_removal_no_trail)
{
    double zmin_off, zmean_off, znow_off, zmin_on, zmean_on, znow_on;
    int n_off, n_on;
    mover_run(0, &zmin_off, &zmean_off, &znow_off, &n_off);
    mover_run(1, &zmin_on, &zmean_on, &znow_on, &n_on);
    fprintf(stderr,
            "mover trail: without removal min z %.2f mean %.2f (%d positions, mover z %.1f); "
            "with removal min z %.2f mean %.2f (%d positions, mover z %.1f)\n",
            zmin_off, zmean_off, n_off, znow_off, zmin_on, zmean_on, n_on, znow_on);
    ck_assert_int_ge(n_off, 8);
    ck_assert_int_eq(n_on, n_off);
    ck_assert_msg(zmin_off < -3.0 && zmean_off < -3.0,
                  "without removal the trail should be negative: min %g mean %g", zmin_off, zmean_off);
    ck_assert_msg(zmin_on > -3.0, "with removal the trail remains: min z %g", zmin_on);
    ck_assert_msg(fabs(zmean_on) < 1.0, "with removal the trail's mean z is %g", zmean_on);
    ck_assert(znow_off > 50.0 && znow_on > 50.0);
}
END_TEST

static Suite *whiten_suite(void)
{
    Suite *s = suite_create("whiten");
    TCase *tc = tcase_create("whiten");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_whiten_reference);
    tcase_add_test(tc, test_lsq_moments_reference);
    tcase_add_test(tc, test_whiten_lsq_thread_independent);
    tcase_add_test(tc, test_whiten_reweight_reference);
    tcase_add_test(tc, test_whiten_reweight_thread_independent);
    suite_add_tcase(s, tc);
    tc = tcase_create("history");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_history_dtype);
    tcase_add_test(tc, test_history_store_conversion);
    tcase_add_test(tc, test_history_store_footprint);
    tcase_add_test(tc, test_history_subtract_definition);
    tcase_add_test(tc, test_slow_mover_fit);
    suite_add_tcase(s, tc);
    tc = tcase_create("synthetic");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_residual_noise_jittered_field);
    tcase_add_test(tc, test_object_removal_no_trail);
    tcase_add_test(tc, test_reweight_invalid_fraction);
    tcase_add_test(tc, test_reweight_unbiased);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return ss_run_suite(whiten_suite());
}
