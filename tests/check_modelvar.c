/*
 * check_modelvar.c — the model-error term of the noise model (stages.h
 * §6b, modelvar.c): the fit's median, the template, and the whole of
 * pipeline on a sequence with 10 % seeing wobble — the rings that the
 * guided filter leaves around bright stars are false alarms without the
 * term and mostly gone with it, while the movers are found as often.
 */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "pipeline/pipeline.h"
#include "pipeline/stages.h"
#include "tools/synth.h"
#include "ss_test.h"
#include "ss_chain.h"

/* ---------------------------------------------------------------------- */
/* the fit                                                                 */
/* ---------------------------------------------------------------------- */

START_TEST(test_beta_is_lower_median)
{
    float q[101];
    for (int i = 0; i < 101; i++)
        q[i] = (float)((i * 37) % 101) * 1e-4f;         /* 0 .. 0.01, scrambled */
    ck_assert_float_eq(ss_mv_beta(q, 101), 50e-4f);
    for (int i = 0; i < 100; i++)
        q[i] = (float)((i * 37) % 100) * 1e-4f;          /* even count: the lower of the two */
    ck_assert_float_eq(ss_mv_beta(q, 100), 49e-4f);
    ck_assert_float_eq(ss_mv_beta(q, SS_MV_MIN_SAMPLES - 1), 0.0f);     /* too few: no term */
    for (int i = 0; i < 100; i++)
        q[i] = -1e-3f + (float)i * 1e-5f;                /* a prediction better than its noise */
    ck_assert_float_eq(ss_mv_beta(q, 100), 0.0f);
}
END_TEST

/* Up to half the samples may be movers or cosmic hits on stars: the
 * median does not move with them (a mean would). */
START_TEST(test_beta_ignores_outliers)
{
    enum { N = 4001 };
    float *q = malloc(N * sizeof(float));
    rng_state = 3;
    const float beta = 2e-3f;
    for (int i = 0; i < N; i++) {
        const float t = 20.0f + 200.0f * (float)rng_unif();
        const float z = (float)(sqrt(1.0 + beta * t * t) * rng_gauss());
        q[i] = ss_mv_q(i % 3 == 0 ? z + 40.0f : z, t);   /* a third on movers */
    }
    const float b = ss_mv_beta(q, N);
    fprintf(stderr, "beta %.3g from samples of beta %.3g, a third of them outliers\n", (double)b,
            (double)beta);
    /* the outliers push the median up by their share, not by their size */
    ck_assert_msg(b > 0.5f * beta && b < 4.0f * beta, "beta %g, want about %g", (double)b,
                  (double)beta);
    free(q);
}
END_TEST

/* ss_mv_template: its formula, and NaN on the border and next to NaN. */
START_TEST(test_template_formula)
{
    enum { W = 9, H = 7 };
    float t[W * H], D[W * H];
    for (int i = 0; i < W * H; i++)
        t[i] = (float)(i % 5) * 3.0f - 2.0f;
    t[4 * W + 6] = NAN;
    ss_mv_template(t, W, H, D);
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) {
            const float d = D[y * W + x];
            if (x == 0 || y == 0 || x == W - 1 || y == H - 1 ||
                abs(x - 6) + abs(y - 4) <= 1) {
                ck_assert_msg(isnan(d), "(%d, %d) %g, want NaN", x, y, (double)d);
                continue;
            }
            const float gx = 0.5f * (t[y * W + x + 1] - t[y * W + x - 1]);
            const float gy = 0.5f * (t[(y + 1) * W + x] - t[(y - 1) * W + x]);
            const float g2 = gx * gx + gy * gy;
            ck_assert_float_eq(d, g2 / fmaxf(fmaxf(t[y * W + x], sqrtf(g2)), 1.0f));
        }
}
END_TEST

/* ---------------------------------------------------------------------- */
/* the pipeline on a sequence with 10 % seeing wobble                      */
/* ---------------------------------------------------------------------- */

/* The sky scenario's seeing (docs/QUALITY.md, scenario 3) on a 512² field
 * of Moffat stars through the CPU pipeline at its defaults, the term on
 * or off. On a synthetic star and on an averaged history the guided
 * filter leaves nothing above the threshold; a sequence is what leaves
 * the rings (the prediction mixes 20 frames of random seeing, read at
 * sub-pixel offsets). */
static void chain_run(int term, int frames, chain_score_t *sc)
{
    ss_synth_cfg_t c;
    ss_synth_defaults(&c);
    c.width = 512;
    c.height = 512;
    c.n_stars = 500;                /* the sky scenario's density, more of them bright */
    c.star_alpha = 1.5;
    c.flux_max = 5e5;
    c.seeing_wobble = 0.10;
    c.jitter = 1.0;
    c.n_movers = 16;
    c.mover_snr = 10.0;
    c.mover_speed = 2.0;
    c.cosmic_rate = 0.0;
    c.n_hot = 0;
    c.seed = 4711;
    ss_pipeline_cfg_t pc;
    ss_pipeline_cfg_defaults(&pc);
    pc.backend = SS_BACKEND_CPU;
    pc.model_error = term;
    chain_score_run(&c, &pc, frames, sc);
}

/* 10 % seeing wobble: the term takes out most of the false alarms on the
 * stars and keeps the movers (SNR 10). */
START_TEST(test_seeing_wobble_false_alarms)
{
    chain_score_t on, off;
    const int frames = 40;
    chain_run(1, frames, &on);
    chain_run(0, frames, &off);
    const double comp_on = (double)on.mover_seen / SS_MAX(on.mover_total, 1);
    const double comp_off = (double)off.mover_seen / SS_MAX(off.mover_total, 1);
    fprintf(stderr,
            "10 %% seeing wobble, %d frames: false alarms %d without the term, %d with (beta up "
            "to %.3g); movers found %.3f (%d/%d) without, %.3f (%d/%d) with\n",
            on.frames, off.false_alarms, on.false_alarms, on.beta_max, comp_off, off.mover_seen,
            off.mover_total, comp_on, on.mover_seen, on.mover_total);
    ck_assert_int_ge(on.frames, 10);
    ck_assert_int_eq(on.frames, off.frames);
    ck_assert_msg(off.false_alarms >= 10, "too few false alarms without the term (%d)",
                  off.false_alarms);
    ck_assert_msg(on.false_alarms * 2 <= off.false_alarms, "with the term %d, without %d",
                  on.false_alarms, off.false_alarms);
    ck_assert_msg(on.beta_max > 0.0, "no β fitted");
    ck_assert_msg(comp_on >= comp_off - 0.03, "completeness %.3f with the term, %.3f without",
                  comp_on, comp_off);
}
END_TEST

static Suite *modelvar_suite(void)
{
    Suite *s = suite_create("modelvar");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_beta_is_lower_median);
    tcase_add_test(tc, test_beta_ignores_outliers);
    tcase_add_test(tc, test_template_formula);
    tcase_add_test(tc, test_seeing_wobble_false_alarms);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(modelvar_suite());
    srunner_run_all(sr, CK_NORMAL);
    const int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
