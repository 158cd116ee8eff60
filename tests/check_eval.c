/*
 * check_eval.c — skysieve-eval (tools/eval.c) end to end: sequences with
 * known truth are written with the synth library (FITS + truth.jsonl, as
 * skysieve-synth writes them), eval runs as a program with --json, and its
 * figures are checked against what each scenario implies:
 *  - a calm 512² field with movers at SNR 4, 10 and 20: the frame counts
 *    the warm-up implies, SNR bins holding exactly the movers of their
 *    SNR, completeness >= 0.9 at SNR 20, a measured shift error far below
 *    a pixel, the --config/--set values in force, the baselines scored on
 *    the same movers with more false alarms than the pipeline;
 *  - the same kind of field with a corrupted truth (movers moved by 5 px,
 *    true shifts off by ±0.25 px alternately) and a blank frame: the
 *    completeness falls to 0, the false alarms rise, the shift RMS reads
 *    0.25 px on x only, the blank frame is one regfail;
 *  - a drifting field that re-references: several reference epochs, and
 *    the shift error stays small (wrong epoch bookkeeping reads pixels);
 *  - frames of varying height with overscan columns and an unreadable
 *    file: no crash, every readable frame counted, exit status 1;
 *  - usage errors exit 2.
 * Skipped when skysieve-eval is not built.
 */
#include <cJSON.h>
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pipeline/frame_fits.h"
#include "tools/synth.h"

static char g_exe[1024];
static char g_dir[64];

static int have_eval(void)
{
    const char *bin = getenv("SKYSIEVE_BINARY_DIR");
    snprintf(g_exe, sizeof g_exe, "%s/tools/skysieve-eval", bin ? bin : "..");
    if (access(g_exe, X_OK) != 0) {
        fprintf(stderr, "check_eval: %s not built; skipped\n", g_exe);
        return 0;
    }
    return 1;
}

static int run_cmd(const char *cmd)
{
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* How a written sequence is corrupted (all off: as skysieve-synth writes it). */
typedef struct corrupt {
    double mover_dx;        /* added to every mover's x in the truth */
    double shift_wobble;    /* added to the truth sx, + on odd frames, - on even */
    int blank_frame;        /* this frame (> 0) is replaced by a star-free one */
} corrupt_t;

/* Write frames 0..n-1 of cfg as dir/frame_NNNNN.fits and dir/truth.jsonl. */
static void write_seq(const char *dir, const ss_synth_cfg_t *cfg, int n, const corrupt_t *cor)
{
    char path[512], err[1024];
    snprintf(path, sizeof path, "mkdir -p '%s'", dir);
    ck_assert_int_eq(run_cmd(path), 0);
    ss_synth_cfg_t blank_cfg = *cfg;
    blank_cfg.n_stars = 0;
    blank_cfg.n_movers = 0;
    blank_cfg.n_hot = 0;
    blank_cfg.seed = cfg->seed + 1000;
    ss_synth_t *s = ss_synth_new(cfg), *blank = ss_synth_new(&blank_cfg);
    ck_assert_ptr_nonnull(s);
    ck_assert_ptr_nonnull(blank);
    ss_frame_t f, b;
    memset(&f, 0, sizeof f);
    f.capacity = ss_synth_frame_bytes(cfg);
    f.pixels = malloc(f.capacity);
    b = f;
    b.pixels = malloc(b.capacity);
    static ss_synth_truth_t t;
    size_t line_max = ss_synth_truth_json_max(cfg);
    char *line = malloc(line_max);
    snprintf(path, sizeof path, "%s/truth.jsonl", dir);
    FILE *tf = fopen(path, "w");
    ck_assert_ptr_nonnull(tf);
    for (int k = 0; k < n; k++) {
        ck_assert_int_eq(ss_synth_next(s, &f, &t), SS_OK);
        ck_assert_int_eq(ss_synth_next(blank, &b, NULL), SS_OK);
        ss_frame_t *out = &f;
        if (cor && cor->blank_frame > 0 && k == cor->blank_frame) {
            b.meta.seq = f.meta.seq;
            out = &b;
        }
        snprintf(path, sizeof path, "%s/frame_%05d.fits", dir, k);
        ck_assert_msg(ss_fits_write_frame(path, out, err, sizeof err) == SS_OK, "%s", err);
        if (cor) {
            for (int i = 0; i < t.n_obj; i++)
                if (t.obj[i].kind == SS_SYNTH_MOVER)
                    t.obj[i].x += cor->mover_dx;
            t.sx += (k % 2 ? 1.0 : -1.0) * cor->shift_wobble;
        }
        ck_assert_int_gt(ss_synth_truth_json(&t, line, line_max), 0);
        fprintf(tf, "%s\n", line);
    }
    fclose(tf);
    free(line);
    free(f.pixels);
    free(b.pixels);
    ss_synth_destroy(&s);
    ss_synth_destroy(&blank);
}

/* Run skysieve-eval with args (%s = the sequence dir, twice at most);
 * returns its exit status, and its JSON output in *out (NULL when none). */
static int run_eval(const char *seq, const char *args, cJSON **out)
{
    char a[1024], cmd[4096], path[512];
    snprintf(a, sizeof a, args, seq, seq);
    snprintf(path, sizeof path, "%s/eval.json", g_dir);
    snprintf(cmd, sizeof cmd, "'%s' --quiet --json %s > '%s'", g_exe, a, path);
    int rc = run_cmd(cmd);
    *out = NULL;
    FILE *f = fopen(path, "r");
    if (f) {
        static char buf[1 << 16];
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        buf[n] = '\0';
        fclose(f);
        *out = cJSON_Parse(buf);
    }
    return rc;
}

/* A number at a path "a.b.c" (arrays: "a.3"); NaN when absent or null. */
static double jget(const cJSON *o, const char *path)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    char *save = NULL;
    for (char *p = strtok_r(buf, ".", &save); p && o; p = strtok_r(NULL, ".", &save))
        o = cJSON_IsArray(o) ? cJSON_GetArrayItem(o, atoi(p))
                             : cJSON_GetObjectItemCaseSensitive(o, p);
    return cJSON_IsNumber(o) ? o->valuedouble : NAN;
}

static void field_cfg(ss_synth_cfg_t *c, int w, int h, uint64_t seed)
{
    ss_synth_defaults(c);
    c->width = w;
    c->height = h;
    c->seed = seed;
    c->start_mjd = 60000.0;
    c->n_stars = (int)(2000.0 * w * h / (1024.0 * 1024.0));
    c->jitter = 1.0;
    c->n_hot = 10;
    c->cosmic_rate = 20.0;
}

static void setup(void)
{
    snprintf(g_dir, sizeof g_dir, "/tmp/check_eval.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(g_dir));
}

static void teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    ck_assert_int_eq(run_cmd(cmd), 0);
}

/* SNR bins of 4 5 6 7 8 10 15 20: indices of 4, 10, 20 */
enum { BIN4 = 0, BIN10 = 5, BIN20 = 7 };

/* A calm 512² field: the figures the scenario implies. */
START_TEST(test_calm_field)
{
    if (!have_eval())
        return;
    ss_synth_cfg_t c;
    field_cfg(&c, 512, 512, 31);
    c.n_movers = 24;
    c.n_mover_snr = 3;
    c.mover_snr_list[0] = 4;
    c.mover_snr_list[1] = 10;
    c.mover_snr_list[2] = 20;
    c.mover_speed = 1.5;
    c.streak_prob = 0.3;
    c.streak_len_min = 40;
    c.streak_len_max = 150;
    char seq[128], conf[160];
    snprintf(seq, sizeof seq, "%s/calm", g_dir);
    write_seq(seq, &c, 20, NULL);
    /* --config: history 8 (min_history then 8); --set a threshold on top */
    snprintf(conf, sizeof conf, "%s/eval.conf.json", g_dir);
    FILE *cf = fopen(conf, "w");
    ck_assert_ptr_nonnull(cf);
    fprintf(cf, "{\"feeds\": [{\"pipeline\": {\"history\": 8, \"detect\": {\"thresh\": 6}}}]}\n");
    fclose(cf);
    char args[512];
    snprintf(args, sizeof args, "--truth %%s/truth.jsonl --config '%s' --set detect.thresh=5 %%s",
             conf);
    cJSON *j;
    ck_assert_int_eq(run_eval(seq, args, &j), 0);
    ck_assert_ptr_nonnull(j);
    ck_assert(jget(j, "config.history") == 8 && jget(j, "config.min_history") == 8);
    ck_assert(jget(j, "config.thresh") == 5);
    /* frame 0 the reference, 1..7 warm-up, 8..19 ok */
    ck_assert(jget(j, "frames.total") == 20 && jget(j, "frames.reference") == 1);
    ck_assert(jget(j, "frames.warmup") == 7 && jget(j, "frames.ok") == 12);
    ck_assert(jget(j, "frames.first_ok") == 8 && jget(j, "frames.ok_after_warmup") == 1.0);
    ck_assert(jget(j, "frames.history_resets") == 0);
    /* 19 frames registered in one epoch; a 1-px jitter measured to ~0.01 px */
    ck_assert(jget(j, "shift.frames") == 19 && jget(j, "shift.epochs") == 1);
    double rms = jget(j, "shift.rms");
    ck_assert_msg(rms > 0.0 && rms < 0.05, "shift RMS %f", rms);
    ck_assert(isfinite(jget(j, "shift.ratio")) && jget(j, "shift.gross") == 0);
    /* only the bins of 4, 10 and 20 hold movers: 8 each per frame, minus the border */
    double seen = 0;
    for (int b = 0; b < 8; b++) {
        char k[64];
        snprintf(k, sizeof k, "pipeline.seen.%d", b);
        double v = jget(j, k);
        ck_assert_msg((b == BIN4 || b == BIN10 || b == BIN20) == (v > 0), "bin %d: %g seen", b, v);
        seen += v;
    }
    ck_assert_msg(seen > 0.8 * 24 * 12 && seen <= 24 * 12, "%g movers seen in 12 frames", seen);
    double c20 = jget(j, "pipeline.completeness.7"), c4 = jget(j, "pipeline.completeness.0");
    ck_assert_msg(c20 >= 0.9, "completeness at SNR 20: %f", c20);
    ck_assert_msg(c4 < c20, "completeness at SNR 4 (%f) not below SNR 20's (%f)", c4, c20);
    ck_assert(jget(j, "pipeline.found_as.point.7") >= 0.9 * jget(j, "pipeline.found.7"));
    double cen = jget(j, "pipeline.centroid_rms");
    ck_assert_msg(cen > 0.0 && cen < 0.5, "centroid RMS %f", cen);
    /* a few star-residual false alarms with a short history (measured 3.8
     * per Mpix-frame on 2026-11-23); movers or streaks counted as false
     * alarms would add ~90 */
    double fa = jget(j, "pipeline.false_alarms_non_cosmic");
    ck_assert_msg(fa >= 0.0 && fa <= 10.0, "pipeline false alarms %f", fa);
    ck_assert(jget(j, "pipeline.mpix_frames") > 12 * 0.262 && jget(j, "pipeline.mpix_frames") < 12 * 0.263);
    ck_assert(jget(j, "pipeline.streaks") >= 1);
    ck_assert(jget(j, "pipeline.invalid_residual") < 0.1 && jget(j, "pipeline.truncated") == 0);
    /* the baselines see the same movers; unregistered, a 1-px jitter leaves
     * star residuals: many more false alarms */
    ck_assert(jget(j, "diff.seen.7") == jget(j, "pipeline.seen.7"));
    ck_assert(jget(j, "median.seen.0") == jget(j, "pipeline.seen.0"));
    ck_assert(jget(j, "diff.frames") == 12 && jget(j, "median.frames") == 12);
    ck_assert_msg(jget(j, "diff.false_alarms_non_cosmic") > 5.0 * (fa + 1.0),
                  "diff baseline false alarms %f vs pipeline %f",
                  jget(j, "diff.false_alarms_non_cosmic"), fa);
    ck_assert(jget(j, "median.completeness.7") > 0.5);
    cJSON_Delete(j);
}
END_TEST

/* A corrupted truth and a blank frame show in the figures. */
START_TEST(test_corruption_shows)
{
    if (!have_eval())
        return;
    ss_synth_cfg_t c;
    field_cfg(&c, 256, 256, 32);
    c.n_stars = 300;
    c.n_movers = 12;
    c.mover_snr = 20;
    char clean[128], bad[128];
    snprintf(clean, sizeof clean, "%s/clean", g_dir);
    snprintf(bad, sizeof bad, "%s/bad", g_dir);
    write_seq(clean, &c, 20, NULL);
    corrupt_t cor = { .mover_dx = 5.0, .shift_wobble = 0.25, .blank_frame = 12 };
    write_seq(bad, &c, 20, &cor);
    const char *args = "--truth %s/truth.jsonl --set pipeline.history=8 --no-baselines %s";
    cJSON *a, *b;
    ck_assert_int_eq(run_eval(clean, args, &a), 0);
    ck_assert_int_eq(run_eval(bad, args, &b), 0);
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(b);
    ck_assert(jget(a, "pipeline.completeness_all") >= 0.9);
    ck_assert(jget(b, "pipeline.completeness_all") == 0.0);
    ck_assert_msg(jget(b, "pipeline.false_alarms_non_cosmic") >
                      jget(a, "pipeline.false_alarms_non_cosmic") + 10.0,
                  "false alarms %f (clean %f)", jget(b, "pipeline.false_alarms_non_cosmic"),
                  jget(a, "pipeline.false_alarms_non_cosmic"));
    ck_assert(jget(a, "shift.rms_x") < 0.05 && jget(a, "frames.regfail") == 0);
    /* the wobble: ±0.25 px on the truth of alternate frames, the reference's
     * (frame 0) -0.25 included: errors 0 and -0.5, RMS 0.35 px, 0.25 px
     * from frame to frame */
    double bx = jget(b, "shift.scatter_x"), by = jget(b, "shift.scatter_y");
    ck_assert_msg(fabs(bx - 0.25) < 0.03 && by < 0.05, "shift scatter x %f y %f", bx, by);
    ck_assert_msg(fabs(jget(b, "shift.rms_x") - 0.354) < 0.04, "shift RMS x %f",
                  jget(b, "shift.rms_x"));
    ck_assert_int_eq((int)jget(b, "frames.regfail"), 1);
    ck_assert(jget(b, "frames.ok_after_warmup") < 1.0);
    cJSON_Delete(a);
    cJSON_Delete(b);
}
END_TEST

/* A drift past reref_px: several reference epochs; per epoch the error is
 * measured against the epoch's reference, so it stays small. */
START_TEST(test_rereference_epochs)
{
    if (!have_eval())
        return;
    ss_synth_cfg_t c;
    field_cfg(&c, 256, 256, 33);
    c.n_stars = 300;
    c.jitter = 0.3;
    c.drift_x = 1.2;
    c.drift_y = -0.5;
    char seq[128];
    snprintf(seq, sizeof seq, "%s/drift", g_dir);
    write_seq(seq, &c, 24, NULL);
    cJSON *j;
    ck_assert_int_eq(run_eval(seq,
                              "--truth %s/truth.jsonl --set pipeline.history=8 "
                              "--set pipeline.registration.reref_px=6 --no-baselines %s",
                              &j),
                     0);
    ck_assert_ptr_nonnull(j);
    ck_assert(jget(j, "config.reref_px") == 6);
    ck_assert_msg(jget(j, "frames.rereferences") >= 3, "%g re-references",
                  jget(j, "frames.rereferences"));
    ck_assert(jget(j, "shift.epochs") >= 3);
    double rms = jget(j, "shift.rms");
    ck_assert_msg(rms > 0.0 && rms < 0.05, "shift RMS %f across epochs", rms);
    ck_assert(jget(j, "shift.gross") == 0);
    cJSON_Delete(j);
}
END_TEST

/* Frames of varying height with overscan columns, and an unreadable file:
 * every readable frame is processed and counted, exit status 1. */
START_TEST(test_varying_frames_and_read_error)
{
    if (!have_eval())
        return;
    ss_synth_cfg_t c;
    field_cfg(&c, 128, 128, 34);
    c.n_stars = 100;
    c.overscan = 8;
    c.height_jitter = 6;
    c.n_movers = 3;
    char seq[128], path[256];
    snprintf(seq, sizeof seq, "%s/vary", g_dir);
    write_seq(seq, &c, 10, NULL);
    cJSON *j;
    ck_assert_int_eq(run_eval(seq, "--truth %s/truth.jsonl %s", &j), 0);
    ck_assert_ptr_nonnull(j);
    ck_assert(jget(j, "frames.total") == 10);
    double sum = 0;
    static const char *const st[] = { "ok", "reference", "warmup", "regfail", "error" };
    for (int k = 0; k < 5; k++) {
        char key[32];
        snprintf(key, sizeof key, "frames.%s", st[k]);
        sum += jget(j, key);
    }
    ck_assert(sum == 10);
    cJSON_Delete(j);
    /* a file that claims to be FITS and is not */
    snprintf(path, sizeof path, "%s/frame_00010.fits", seq);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "SIMPLE  = not really\n");
    fclose(f);
    ck_assert_int_eq(run_eval(seq, "--truth %s/truth.jsonl --no-baselines %s", &j), 1);
    ck_assert_ptr_nonnull(j);
    ck_assert(jget(j, "frames.total") == 10 && jget(j, "frames.unreadable") == 1);
    cJSON_Delete(j);
}
END_TEST

/* Bad usage: status 2. */
START_TEST(test_usage)
{
    if (!have_eval())
        return;
    ss_synth_cfg_t c;
    field_cfg(&c, 64, 64, 35);
    c.n_stars = 20;
    char seq[128];
    snprintf(seq, sizeof seq, "%s/tiny", g_dir);
    write_seq(seq, &c, 2, NULL);
    static const char *const bad[] = {
        "%s",                                                   /* no --truth */
        "--truth %s/truth.jsonl",                               /* no input */
        "--truth %s/truth.jsonl --backend gpu %s",
        "--truth %s/truth.jsonl --set pipeline.histroy=8 %s",   /* unknown key */
        "--truth %s/truth.jsonl --set history=1 %s",            /* out of range */
        "--truth %s/truth.jsonl --set history %s",              /* not KEY=VALUE */
        "--truth %s/truth.jsonl --bogus %s",
        "--truth %s/truth.jsonl %s/nothing-here",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cJSON *j;
        char args[256];
        snprintf(args, sizeof args, "%s 2>/dev/null", bad[i]);
        ck_assert_msg(run_eval(seq, args, &j) == 2, "'%s' did not exit 2", bad[i]);
        cJSON_Delete(j);
    }
    cJSON *j;
    ck_assert_int_eq(run_eval(seq, "--truth %s/missing.jsonl %s 2>/dev/null", &j), 1);
    cJSON_Delete(j);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "'%s' --help | grep -q 'epoch'", g_exe);
    ck_assert_int_eq(run_cmd(cmd), 0);
}
END_TEST

static Suite *eval_suite(void)
{
    Suite *s = suite_create("eval");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_calm_field);
    tcase_add_test(tc, test_corruption_shows);
    tcase_add_test(tc, test_rereference_epochs);
    tcase_add_test(tc, test_varying_frames_and_read_error);
    tcase_add_test(tc, test_usage);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(eval_suite());
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf == 0 ? 0 : 1;
}
