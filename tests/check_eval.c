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
 *  - usage errors exit 2;
 *  - the track figures (tools/eval_track.c) on hand-built detections,
 *    truth samples and track reports, where every figure is known: a
 *    segment in one track only when the detections linked before the
 *    track's confirmation are credited through its points, a split, an
 *    untracked and a too short segment, the 80 % boundary, pure, false
 *    and mixed tracks, the velocity error in px/frame from timed and
 *    untimed tracks; the speed bins; the motion derived for truth files
 *    without it (velocity from the median step, a segment per wrap);
 *  - the track figures end to end: a field of movers at three speeds with
 *    a crossing pair scored with the tracker on and off, and the same
 *    figures from a truth without velocities and segments (derived).
 * The end-to-end cases are skipped when skysieve-eval is not built.
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
#include "tools/eval_track.h"
#include "tools/synth.h"
#include "ss_test.h"

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
    int no_motion;          /* the truth without the movers' velocities and segments */
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
            t.motion = t.motion && !cor->no_motion;
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
    ck_assert_int_eq(rmtree(g_dir), 0);
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

/* The track figures end to end: movers of SNR 20 at 1, 5 and 20 px/frame
 * and a crossing pair on a 256² field. With the tracker on, most segments
 * are in one track, the tracks are pure and their velocities right; off,
 * nothing is tracked; a truth without velocities and segments gives the
 * same figures (eval derives them). */
START_TEST(test_tracks_end_to_end)
{
    if (!have_eval())
        return;
    ss_synth_cfg_t c;
    field_cfg(&c, 256, 256, 41);
    c.n_stars = 300;
    c.n_movers = 12;
    c.mover_snr = 20;
    c.n_mover_speed = 3;
    c.mover_speed_list[0] = 1;
    c.mover_speed_list[1] = 5;
    c.mover_speed_list[2] = 20;
    c.n_crossing = 1;
    c.crossing_at = 16;
    char seq[128], bare[128];
    snprintf(seq, sizeof seq, "%s/tracks", g_dir);
    snprintf(bare, sizeof bare, "%s/bare", g_dir);
    write_seq(seq, &c, 24, NULL);
    corrupt_t nm = { .no_motion = 1 };
    write_seq(bare, &c, 24, &nm);
    const char *args = "--truth %s/truth.jsonl --set pipeline.history=8 --no-baselines %s";
    cJSON *a, *b, *off;
    ck_assert_int_eq(run_eval(seq, args, &a), 0);
    ck_assert_int_eq(run_eval(bare, args, &b), 0);
    ck_assert_int_eq(run_eval(seq, "--truth %s/truth.jsonl --set pipeline.history=8 "
                                   "--set track.enabled=false --no-baselines %s", &off), 0);
    ck_assert(a && b && off);
    /* 16 ok frames: 14 movers, more segments where the fast ones wrap */
    double segs = jget(a, "tracks.segments");
    ck_assert_msg(segs >= 14 && jget(a, "tracks.min_points") >= 3, "%g segments", segs);
    ck_assert(jget(a, "tracks.reports") > 0 && jget(a, "tracks.crossing_segments") >= 2);
    double comp = jget(a, "tracks.completeness_snr7");
    ck_assert_msg(comp >= 0.75, "SNR >= 7 in one track: %f", comp);
    ck_assert(jget(a, "tracks.segments_snr7") == segs);
    /* 14 movers on 256²: a mover passing within another's gate in a frame
     * where that one was missed gives it one foreign detection (measured:
     * 2 of 17 tracks, 7 of 8 and 8 of 9 their own, since cosmic-labelled
     * detections are tracked too) */
    ck_assert_msg(jget(a, "tracks.purity") >= 0.85, "purity %f", jget(a, "tracks.purity"));
    ck_assert_msg(jget(a, "tracks.false_tracks") <= 1, "%g false tracks",
                  jget(a, "tracks.false_tracks"));
    /* relative to each mover's speed: a pure track of three detections of
     * a 20 px/frame trailed mover is 4 % (0.8 px/frame) off (measured
     * 2026-11-24: 0.021 over 17 tracks, 0.20 px/frame absolute) */
    double vr = jget(a, "tracks.velocity_rel_rms");
    ck_assert_msg(jget(a, "tracks.velocity_n") >= 10 && vr < 0.05, "velocity relative RMS %f", vr);
    ck_assert(fabs(jget(a, "tracks.frame_interval") - c.frame_interval) < 1e-3);
    double by_speed = 0;
    for (int k = 0; k < 8; k++) {
        char key[64];
        snprintf(key, sizeof key, "tracks.segments_by_speed.%d", k);
        by_speed += jget(a, key);
    }
    ck_assert(by_speed == segs && jget(a, "tracks.segments_by_speed.2") >= 4);
    /* the derived motion: the same segments, tracks and velocities */
    ck_assert(jget(b, "tracks.segments") == segs);
    ck_assert(jget(b, "tracks.in_one") == jget(a, "tracks.in_one"));
    ck_assert(jget(b, "tracks.pure") == jget(a, "tracks.pure"));
    ck_assert_msg(fabs(jget(b, "tracks.velocity_rel_rms") - vr) < 1e-3, "derived %f, truth %f",
                  jget(b, "tracks.velocity_rel_rms"), vr);
    /* the tracker off: the same segments, none tracked */
    ck_assert(jget(off, "tracks.segments") == segs && jget(off, "tracks.reports") == 0);
    ck_assert(jget(off, "tracks.in_one") == 0 && jget(off, "tracks.untracked") == segs);
    ck_assert(jget(off, "tracks.tracks") == 0 && isnan(jget(off, "tracks.purity")));
    /* the detection figures do not depend on the tracker */
    ck_assert(jget(off, "pipeline.completeness_all") == jget(a, "pipeline.completeness_all"));
    cJSON_Delete(a);
    cJSON_Delete(b);
    cJSON_Delete(off);
}
END_TEST

/* ---- the track figures on hand-built inputs ----------------------------- */

/* Detections of one truth mover segment in frames seq0.. seq0+n-1, found
 * in every frame except `miss` (-1: none), each with tracks[k] (NULL: 0). */
static void add_segment(ss_evt_t *e, int mover, int seg, int pair, uint64_t seq0, int n,
                        double snr, double vx, double vy, const uint64_t *tracks, int miss)
{
    for (int k = 0; k < n; k++) {
        uint64_t seq = seq0 + (uint64_t)k;
        long di = -1;
        if (k != miss) {
            ss_evt_det_t d = { seq, 100.0 * mover + k * vx, 50.0 + k * vy, tracks ? tracks[k] : 0,
                               mover, seg, vx, vy };
            di = ss_evt_add_det(e, &d);
            ck_assert_int_ge(di, 0);
        }
        ss_evt_sample_t sm = { mover, seg, pair, seq, snr, hypot(vx, vy), di };
        ck_assert_int_eq(ss_evt_add_sample(e, &sm), 0);
    }
}

/* A report of track id naming the detections of mover at frames
 * seq0..seq0+n-1 (positions as add_segment makes them). */
static void add_report(ss_evt_t *e, uint64_t id, int mover, uint64_t seq0, int n, double vx,
                       double vy, int timed, double rvx, double rvy)
{
    static ss_track_t r;
    memset(&r, 0, sizeof r);
    r.id = id;
    r.timed = timed;
    r.vx = rvx;
    r.vy = rvy;
    r.n = n;
    r.seq_first = seq0;
    r.seq_last = seq0 + (uint64_t)n - 1;
    r.n_points = n < SS_TRACK_POINTS ? n : SS_TRACK_POINTS;
    for (int i = 0; i < r.n_points; i++) {
        int k = n - r.n_points + i;
        r.points[i] = (ss_track_point_t){ seq0 + (uint64_t)k, NAN, 100.0 * mover + k * vx,
                                          50.0 + k * vy };
    }
    ck_assert_int_eq(ss_evt_add_report(e, &r), 0);
}

START_TEST(test_track_scoring)
{
    ss_evt_t e;
    memset(&e, 0, sizeof e);
    /* mover 0: 10 frames, the first 3 linked before confirmation (id 0),
     * named by track 1's points; 7/10 alone would not be "in one" */
    uint64_t t0[10] = { 0, 0, 0, 1, 1, 1, 1, 1, 1, 1 };
    add_segment(&e, 0, 0, -1, 10, 10, 10.0, 1.0, 0.1, t0, -1);
    /* mover 1 (a crossing pair): split 5 + 5 over tracks 2 and 3; its
     * segment 1 has 2 detections only: not counted */
    uint64_t t1[10] = { 2, 2, 2, 2, 2, 3, 3, 3, 3, 3 };
    add_segment(&e, 1, 0, 0, 10, 10, 8.0, 10.0, 0.0, t1, -1);
    add_segment(&e, 1, 1, 0, 20, 2, 8.0, 10.0, 0.0, NULL, -1);
    /* mover 2: found 5 of 6, never tracked */
    add_segment(&e, 2, 0, -1, 10, 6, 20.0, 0.2, 0.0, NULL, 2);
    /* mover 3, SNR 5: 4 of its 5 found detections in track 4: 80 %, in one */
    uint64_t t3[5] = { 0, 4, 4, 4, 4 };
    add_segment(&e, 3, 0, -1, 10, 5, 5.0, 3.0, 0.0, t3, -1);
    /* track 5 on nothing (false); track 6: 3 on mover 4, 2 on nothing */
    for (int k = 0; k < 4; k++) {
        ss_evt_det_t d = { 30 + (uint64_t)k, 500.0 + k, 500.0, 5, -1, 0, NAN, NAN };
        ck_assert_int_ge(ss_evt_add_det(&e, &d), 0);
    }
    for (int k = 0; k < 5; k++) {
        ss_evt_det_t d = { 30 + (uint64_t)k, 700.0 + k, 700.0, 6, k < 3 ? 4 : -1, 0, 1.0, 0.0 };
        ck_assert_int_ge(ss_evt_add_det(&e, &d), 0);
    }
    /* the reports, in frame order: track 1 first with its first 3 points,
     * then with more (the points merge without doubles); timed at 0.5 s
     * per frame: 2 px/s = 1 px/frame against the truth (1, 0.1) */
    add_report(&e, 1, 0, 10, 3, 1.0, 0.1, 1, 9.0, 9.0);
    add_report(&e, 1, 0, 10, 10, 1.0, 0.1, 1, 2.0, 0.0);
    add_report(&e, 2, 1, 10, 5, 10.0, 0.0, 0, 10.0, 0.0);
    add_report(&e, 3, 1, 15, 5, 10.0, 0.0, 0, 10.0, 0.0);
    add_report(&e, 4, 3, 11, 4, 3.0, 0.0, 0, 3.3, 0.0);   /* untimed px/frame: 0.3 off */
    ck_assert_int_eq(e.n_tracks, 4);
    ck_assert_int_eq(e.tracks[0].n_pts, 10);
    ck_assert_int_eq(e.reports, 5);

    ss_evt_cfg_t c = { 3, 0.5, 50.0 };
    ss_evt_result_t r;
    ck_assert_int_eq(ss_evt_score(&e, &c, &r, NULL), 0);
    ck_assert_int_eq(r.segments, 4);
    ck_assert_int_eq(r.in_one, 2);
    ck_assert_int_eq(r.split, 1);
    ck_assert_int_eq(r.untracked, 1);
    ck_assert_int_eq(r.partial, 0);
    ck_assert(r.completeness == 0.5);
    ck_assert_int_eq(r.segments_snr7, 3);
    ck_assert_int_eq(r.in_one_snr7, 1);
    ck_assert_int_eq(r.crossing_segments, 1);
    ck_assert_int_eq(r.crossing_in_one, 0);
    ck_assert_int_eq(r.seg_speed[2], 1);        /* 1 px/frame */
    ck_assert_int_eq(r.in_one_speed[2], 1);
    ck_assert_int_eq(r.seg_speed[4], 1);        /* 10 */
    ck_assert_int_eq(r.in_one_speed[4], 0);
    ck_assert_int_eq(r.seg_speed[0], 1);        /* 0.2 */
    ck_assert_int_eq(r.in_one_speed[3], 1);     /* 3 */
    ck_assert(isnan(r.completeness_speed[7]));
    ck_assert_int_eq(r.tracks, 6);
    ck_assert_int_eq(r.pure, 4);
    ck_assert_int_eq(r.false_tracks, 1);
    ck_assert(fabs(r.purity - 4.0 / 6.0) < 1e-12);
    ck_assert(fabs(r.false_per_100mpix - 2.0) < 1e-12);
    /* velocity: errors 0.1 (track 1), 0, 0, 0.3 (track 4) px/frame */
    ck_assert_int_eq(r.vel_n, 4);
    ck_assert_msg(fabs(r.vel_rms - sqrt(0.1 / 4.0)) < 1e-9, "velocity RMS %f", r.vel_rms);
    double rel1 = 0.1 / hypot(1.0, 0.1), rel4 = 0.1;
    ck_assert(fabs(r.vel_rel_rms - sqrt((rel1 * rel1 + rel4 * rel4) / 4.0)) < 1e-9);
    ck_assert_int_eq(r.vel_n_speed[4], 2);
    ck_assert(r.vel_rel_rms_speed[4] == 0.0);
    ck_assert(fabs(r.vel_rel_rms_speed[3] - 0.1) < 1e-9);

    /* frame interval unknown: the timed track's velocity is not scored;
     * min_points 6: mover 3's 5 detections no longer count */
    c.frame_interval = NAN;
    c.min_points = 6;
    ck_assert_int_eq(ss_evt_score(&e, &c, &r, NULL), 0);
    ck_assert_int_eq(r.vel_n, 3);
    ck_assert_int_eq(r.segments, 2);
    ck_assert_int_eq(r.in_one, 1);
    /* split needs two tracks of >= min_points each: 5 + 5 is partly tracked now */
    ck_assert_int_eq(r.split, 0);
    ck_assert_int_eq(r.partial, 1);
    /* the cases listing names the failures */
    char *buf = NULL;
    size_t len = 0;
    FILE *mf = open_memstream(&buf, &len);
    ck_assert_ptr_nonnull(mf);
    c.min_points = 3;
    ck_assert_int_eq(ss_evt_score(&e, &c, &r, mf), 0);
    fclose(mf);
    ck_assert_ptr_nonnull(strstr(buf, "mover 1/0 (crossing)"));
    ck_assert_ptr_nonnull(strstr(buf, "track 2: 5 track 3: 5"));
    ck_assert_ptr_nonnull(strstr(buf, "track 5 (false)"));
    ck_assert_ptr_nonnull(strstr(buf, "track 6: 5 detections"));
    ck_assert_ptr_null(strstr(buf, "mover 0/0"));
    free(buf);
    ss_evt_free(&e);
    ck_assert_int_eq(e.n_dets, 0);

    /* nothing collected: no figures, no failure */
    ck_assert_int_eq(ss_evt_score(&e, &c, &r, NULL), 0);
    ck_assert(r.segments == 0 && r.tracks == 0 && isnan(r.completeness) && isnan(r.purity));
    ck_assert(r.false_per_100mpix == 0.0);
}
END_TEST

/* A blend two tracks share (a crossing pair): mover 1's detections 5..7
 * carry track 1 (mover 0's), and track 2's points name them too. They
 * count for mover 1's segment in track 2 (10 of 10, in one track; 7 of 10
 * without), and for neither track's purity (track 1 would hold 3 of
 * mover 1's: 10 of 13, not pure). */
START_TEST(test_track_shared)
{
    ss_evt_t e;
    memset(&e, 0, sizeof e);
    uint64_t t0[10] = { 1, 1, 1, 1, 1, 1, 1, 1, 1, 1 };
    uint64_t t1[10] = { 2, 2, 2, 2, 2, 1, 1, 1, 2, 2 };
    add_segment(&e, 0, 0, 0, 10, 10, 10.0, 1.0, 0.0, t0, -1);
    add_segment(&e, 1, 0, 0, 10, 10, 10.0, 1.0, 0.0, t1, -1);
    add_report(&e, 1, 0, 10, 10, 1.0, 0.0, 0, 1.0, 0.0);
    add_report(&e, 2, 1, 10, 10, 1.0, 0.0, 0, 1.0, 0.0);
    ss_evt_cfg_t c = { 3, 1.0, 50.0 };
    ss_evt_result_t r;
    ck_assert_int_eq(ss_evt_score(&e, &c, &r, NULL), 0);
    ck_assert_int_eq(r.segments, 2);
    ck_assert_int_eq(r.in_one, 2);
    ck_assert_int_eq(r.crossing_in_one, 2);
    ck_assert_int_eq(r.tracks, 2);
    ck_assert_int_eq(r.pure, 2);
    ss_evt_free(&e);
}
END_TEST

/* Speed bins: the nearest in log. */
START_TEST(test_track_speed_bins)
{
    ck_assert_int_eq(ss_evt_speed_bin(0.0), 0);
    ck_assert_int_eq(ss_evt_speed_bin(0.2), 0);
    ck_assert_int_eq(ss_evt_speed_bin(0.35), 1);
    ck_assert_int_eq(ss_evt_speed_bin(2.0), 3);     /* log: nearer 3 than 1 */
    ck_assert_int_eq(ss_evt_speed_bin(1.5), 2);
    ck_assert_int_eq(ss_evt_speed_bin(150.0), 6);
    ck_assert_int_eq(ss_evt_speed_bin(1e5), 7);
}
END_TEST

/* Motion from positions: the velocity most pairs of positions agree on,
 * a branch per line (p - v t), numbered as skysieve-synth does: a wrap
 * (either axis) starts a new one, gaps in seq are fine, and a mover that
 * goes back and forth across an edge in every frame (no step is its
 * velocity) keeps its velocity and two numbers. */
START_TEST(test_track_derive_motion)
{
    uint64_t seq[40];
    double px[40], py[40];
    int seg[40], n = 0;
    for (uint64_t s = 0; s < 14; s++) {
        if (s == 3 || s == 10)
            continue;                               /* frames without this mover */
        seq[n] = s;
        px[n] = 40.0 + 2.5 * (double)s - (s >= 5 ? 1000.0 : 0.0);
        py[n] = 70.0 - 1.0 * (double)s + (s >= 9 ? 800.0 : 0.0);
        n++;
    }
    double vx, vy;
    ck_assert_int_eq(ss_evt_derive_motion(seq, px, py, n, &vx, &vy, seg), 0);
    ck_assert_msg(fabs(vx - 2.5) < 1e-9 && fabs(vy + 1.0) < 1e-9, "velocity %f %f", vx, vy);
    static const int want[12] = { 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2 };
    for (int k = 0; k < n; k++)
        ck_assert_msg(seg[k] == want[k], "position %d (seq %llu): segment %d want %d", k,
                      (unsigned long long)seq[k], seg[k], want[k]);
    ck_assert_int_eq(ss_evt_derive_motion(seq, px, py, 1, &vx, &vy, seg), 0);
    ck_assert(vx == 0.0 && vy == 0.0 && seg[0] == 0);
    /* back and forth across x = 0 of a 1014-px frame in every frame, with
     * the truth's 4 decimals */
    for (int k = 0; k < 40; k++) {
        seq[k] = (uint64_t)k;
        px[k] = round((3.0 + 0.3 * k + (k % 2 ? 1014.0 : 0.0)) * 1e4) / 1e4;
        py[k] = round((500.0 - 0.7 * k) * 1e4) / 1e4;
    }
    ck_assert_int_eq(ss_evt_derive_motion(seq, px, py, 40, &vx, &vy, seg), 0);
    ck_assert_msg(fabs(vx - 0.3) < 1e-3 && fabs(vy + 0.7) < 1e-3, "velocity %f %f", vx, vy);
    for (int k = 0; k < 40; k++)
        ck_assert_int_eq(seg[k], k % 2);
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
    tcase_add_test(tc, test_track_scoring);
    tcase_add_test(tc, test_track_shared);
    tcase_add_test(tc, test_track_speed_bins);
    tcase_add_test(tc, test_track_derive_motion);
    tcase_add_test(tc, test_tracks_end_to_end);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return ss_run_suite(eval_suite());
}
