/*
 * check_pipeline.c — the whole chain on the CPU backend, through the
 * driver, on synthetic sequences with known truth (issue 2's detection
 * requirements), and the driver's policy: reference, warm-up, slews,
 * geometry changes, hostile frames.
 */
#include <check.h>
#include <fitsio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/config.h"
#include "pipeline/frame_fits.h"
#include "pipeline/half_core.h"
#include "pipeline/pipeline.h"
#include "pipeline/wcs.h"
#include "tools/synth.h"
#include "ss_test.h"

/* A synthetic sequence run through a CPU pipeline, one frame at a time. */
typedef struct run {
    ss_synth_t *syn;
    ss_pipeline_t *pipe;
    ss_frame_t frame;
    ss_result_t res;
    ss_synth_truth_t truth;
} run_t;

static void run_open(run_t *r, const ss_synth_cfg_t *sc, const ss_pipeline_cfg_t *pc)
{
    memset(r, 0, sizeof *r);
    char err[256] = "";
    r->syn = ss_synth_new(sc);
    ck_assert_ptr_nonnull(r->syn);
    r->pipe = ss_pipeline_new(pc, "test", err, sizeof err);
    ck_assert_msg(r->pipe != NULL, "pipeline: %s", err);
    size_t npix = (size_t)sc->width * (size_t)sc->height;
    r->frame.capacity = npix * 4;
    r->frame.pixels = malloc(r->frame.capacity);
    ck_assert_ptr_nonnull(r->frame.pixels);
    ck_assert_int_eq(ss_result_init(&r->res, npix, 2000), 0);
}

static void run_close(run_t *r)
{
    ss_pipeline_destroy(&r->pipe);
    ck_assert_ptr_null(r->pipe);
    ss_synth_destroy(&r->syn);
    free(r->frame.pixels);
    ss_result_free(&r->res);
}

/* Render and process the next frame. */
static void run_step(run_t *r)
{
    ck_assert_int_eq(ss_synth_next(r->syn, &r->frame, &r->truth), SS_OK);
    ss_err_t e = ss_pipeline_process(r->pipe, &r->frame, &r->res);
    ck_assert_msg(e == SS_OK, "process: %s (%s)", ss_strerror(e), r->res.reason);
}

static void field_cfg(ss_synth_cfg_t *sc, int w, int h, uint64_t seed)
{
    ss_synth_defaults(sc);
    sc->width = w;
    sc->height = h;
    sc->seed = seed;
    sc->n_stars = (int)(2000.0 * w * h / (1024.0 * 1024.0));
    sc->jitter = 1.0;
    sc->n_hot = 20;
    sc->cosmic_rate = 20.0;
}

static void pipe_cfg(ss_pipeline_cfg_t *pc)
{
    ss_pipeline_cfg_defaults(pc);
    pc->backend = SS_BACKEND_CPU;
}

/* Is detection d within tol px of a truth object of the given kind? */
static int near_truth(const ss_synth_truth_t *t, const ss_detection_t *d, int kind, double tol)
{
    for (int i = 0; i < t->n_obj; i++) {
        const ss_synth_obj_t *o = &t->obj[i];
        if ((int)o->kind != kind)
            continue;
        if (kind == SS_SYNTH_STREAK) {
            /* within tol of the segment */
            double vx = o->x1 - o->x0, vy = o->y1 - o->y0, L2 = vx * vx + vy * vy;
            double u = L2 > 0 ? ((d->x - o->x0) * vx + (d->y - o->y0) * vy) / L2 : 0.0;
            u = SS_CLAMP(u, 0.0, 1.0);
            if (hypot(d->x - (o->x0 + u * vx), d->y - (o->y0 + u * vy)) <= tol)
                return 1;
        } else if (hypot(d->x - o->x, d->y - o->y) <= tol) {
            return 1;
        }
    }
    return 0;
}

/* Issue 9, item 5: slow movers (0.3-1 px per frame, SNR 20), present in
 * the frames stored during warm-up before anything was detected. Each is
 * found (within max(2, 2·psf_sigma) px) in the first ok frame and in 98 %
 * of the ok frames; the history does not keep it: no negative detection
 * within the reach of its copies (speed·history + 3 px) in the first ok
 * frame, at most 0.02 per mover and frame over all (without the take-out
 * 0.68-1.0: the copies' lobe in almost every frame); the position RMS is
 * at most 0.3 px at every speed over all ok frames, and at most 0.2 px in
 * the first one alone, where the detection takes the stack fit's
 * position. Measured 2026-11-25 with the stack fit (slow_movers.h): 0.161,
 * 0.159, 0.151 px over all ok frames, 0.122, 0.120, 0.094 px in the first
 * (0.172, 0.170, 0.252 with the detections' own peaks); no negative. With
 * the fit of the residual alone (a session earlier): the first ok frame
 * alone 0.61 px at 0.3 px/frame, negatives 25, 6, 7. */
START_TEST(test_slow_movers_leave_history)
{
    const double speeds[] = { 0.3, 0.5, 1.0 };
    const double v = speeds[_i];
    ss_synth_cfg_t sc;
    ss_pipeline_cfg_t pc;
    field_cfg(&sc, 512, 512, 900 + (uint64_t)_i);
    sc.n_movers = 10;
    sc.mover_snr = 20.0;
    sc.mover_speed = v;
    sc.cosmic_rate = 5.0;
    pipe_cfg(&pc);
    pc.negative = 1;                /* the copies' lobe shows as negative detections */
    run_t r;
    run_open(&r, &sc, &pc);
    const int border = 12;
    const double reach = v * pc.history + 3.0;
    int first_ok = -1, seen = 0, found = 0, negatives = 0, missed_first = 0, found_first = 0;
    int neg_first = 0;
    double c2 = 0.0, c2_first = 0.0;
    for (int f = 0; f < 36; f++) {
        run_step(&r);
        if (r.res.status != SS_STATUS_OK)
            continue;
        if (first_ok < 0)
            first_ok = f;
        const ss_detlist_t *dl = &r.res.dets;
        for (int i = 0; i < r.truth.n_obj; i++) {
            const ss_synth_obj_t *o = &r.truth.obj[i];
            if (o->kind != SS_SYNTH_MOVER || o->x < border || o->y < border ||
                o->x > sc.width - 1 - border || o->y > sc.height - 1 - border)
                continue;
            seen++;
            double best = INFINITY;
            for (int j = 0; j < dl->count; j++) {
                const ss_detection_t *d = &dl->items[j];
                const double dist = hypot(d->x - o->x, d->y - o->y);
                if (d->sign > 0)
                    best = fmin(best, dist);
                else if (dist <= reach) {
                    negatives++;
                    neg_first += f == first_ok;
                }
            }
            if (best > fmax(2.0, 2.0 * pc.psf_sigma)) {
                fprintf(stderr, "speed %.1f, frame %d: the mover at (%.1f, %.1f) not found (nearest "
                        "%.1f px)\n", v, f, o->x, o->y, best);
                missed_first += f == first_ok;
                continue;
            }
            found++;
            c2 += best * best;
            found_first += f == first_ok;
            c2_first += f == first_ok ? best * best : 0.0;
        }
    }
    const double rms = sqrt(c2 / found), rms_first = sqrt(c2_first / found_first);
    fprintf(stderr, "slow movers at %.1f px/frame: first ok frame %d, found %d/%d, centroid RMS "
            "%.3f px (%.3f in the first ok frame, %d movers), negatives near movers %d (%.3f per "
            "mover-frame, %d in the first ok frame)\n", v, first_ok, found, seen, rms, rms_first,
            found_first, negatives, (double)negatives / seen, neg_first);
    ck_assert_int_ge(seen, 100);
    ck_assert_int_eq(missed_first, 0);
    ck_assert_msg(found >= 0.98 * seen, "found %d of %d", found, seen);
    ck_assert_msg(negatives <= 0.02 * seen && neg_first == 0, "history keeps the movers: %d "
                  "negative detections in %d mover-frames, %d in the first ok frame", negatives,
                  seen, neg_first);
    ck_assert_msg(rms <= 0.3 && rms_first <= 0.2, "centroid RMS %.3f px (%.3f in the first ok "
                  "frame) at %.1f px/frame", rms, rms_first, v);
    run_close(&r);
}
END_TEST

/* The detection requirements of issue 2 on one long sequence: movers at
 * SNR 8 found in >= 90 % of the frames they are in, at most 2 false alarms
 * (kinds other than cosmic) per Mpix per frame, every streak one detection
 * with end points within 3 px. _i: the model-error term off (0) or on (1):
 * with it on, a streak crossing a bright star's ring stays one detection
 * only because components grow on z before the term's division (with
 * growth on the divided z, one streak of ten here came out as a streak
 * and a point). */
START_TEST(test_detection_quality)
{
    ss_synth_cfg_t sc;
    ss_pipeline_cfg_t pc;
    field_cfg(&sc, 768, 768, 42);
    sc.n_movers = 12;
    sc.mover_snr = 8.0;
    sc.mover_speed = 1.5;
    sc.streak_prob = 0.25;
    sc.streak_snr = 10.0;
    sc.streak_len_min = 30.0;
    sc.streak_len_max = 200.0;
    pipe_cfg(&pc);
    pc.model_error = _i;
    run_t r;
    run_open(&r, &sc, &pc);

    const int frames = 45;
    const int border = 12;
    int movers_seen = 0, movers_found = 0, false_alarms = 0, ok_frames = 0;
    int streaks = 0, streaks_good = 0;
    for (int f = 0; f < frames; f++) {
        run_step(&r);
        if (r.res.status != SS_STATUS_OK)
            continue;
        ok_frames++;
        const ss_detlist_t *dl = &r.res.dets;
        ck_assert_int_eq(dl->truncated, 0);
        for (int i = 0; i < r.truth.n_obj; i++) {
            const ss_synth_obj_t *o = &r.truth.obj[i];
            if (o->kind == SS_SYNTH_MOVER) {
                if (o->x < border || o->y < border || o->x > sc.width - 1 - border ||
                    o->y > sc.height - 1 - border)
                    continue;
                movers_seen++;
                for (int j = 0; j < dl->count; j++)
                    if (dl->items[j].sign > 0 && hypot(dl->items[j].x - o->x, dl->items[j].y - o->y) < 2.0) {
                        movers_found++;
                        break;
                    }
            } else if (o->kind == SS_SYNTH_STREAK) {
                /* one detection on the streak, of kind streak, ends within 3 px */
                streaks++;
                int pieces = 0, good = 0;
                for (int j = 0; j < dl->count; j++) {
                    const ss_detection_t *d = &dl->items[j];
                    ss_synth_truth_t one = { .n_obj = 1 };
                    one.obj[0] = *o;
                    if (d->sign < 0 || !near_truth(&one, d, SS_SYNTH_STREAK, 4.0))
                        continue;
                    pieces++;
                    fprintf(stderr, "  piece %s (%.1f,%.1f)-(%.1f,%.1f) a %.1f b %.1f snr %.1f area %d\n",
                            ss_kind_name(d->kind), d->x0, d->y0, d->x1, d->y1, d->a, d->b,
                            d->peak_snr, d->area);
                    double e1 = fmax(hypot(d->x0 - o->x0, d->y0 - o->y0), hypot(d->x1 - o->x1, d->y1 - o->y1));
                    double e2 = fmax(hypot(d->x0 - o->x1, d->y0 - o->y1), hypot(d->x1 - o->x0, d->y1 - o->y0));
                    if (d->kind == SS_KIND_STREAK && fmin(e1, e2) <= 3.0)
                        good = 1;
                }
                if (pieces == 1 && good)
                    streaks_good++;
                else
                    fprintf(stderr, "streak (%.1f,%.1f)-(%.1f,%.1f): %d pieces, good %d\n", o->x0,
                            o->y0, o->x1, o->y1, pieces, good);
            }
        }
        for (int j = 0; j < dl->count; j++) {
            const ss_detection_t *d = &dl->items[j];
            if (d->kind == SS_KIND_COSMIC)
                continue;
            if (near_truth(&r.truth, d, SS_SYNTH_MOVER, 3.0) ||
                near_truth(&r.truth, d, SS_SYNTH_STREAK, 4.0) ||
                near_truth(&r.truth, d, SS_SYNTH_COSMIC, 3.0))
                continue;
            false_alarms++;
            fprintf(stderr, "false alarm frame %d: (%.1f, %.1f) %s snr %.1f area %d sign %d\n", f,
                    d->x, d->y, ss_kind_name(d->kind), d->peak_snr, d->area, d->sign);
        }
    }
    double mpix = sc.width * (double)sc.height / 1e6;
    double fa_rate = false_alarms / (mpix * ok_frames);
    double completeness = movers_seen ? (double)movers_found / movers_seen : 0.0;
    fprintf(stderr, "model error %s: ok frames %d, movers %d/%d (%.3f), false alarms %d (%.3f "
            "/Mpix/frame), streaks %d/%d\n", _i ? "on" : "off", ok_frames, movers_found,
            movers_seen, completeness, false_alarms, fa_rate, streaks_good, streaks);
    ck_assert_int_ge(ok_frames, frames - ss_cfg_min_history(&pc) - 2);
    ck_assert_int_gt(movers_seen, 100);
    ck_assert_msg(completeness >= 0.90, "completeness %.3f", completeness);
    ck_assert_msg(fa_rate <= 2.0, "false alarm rate %.3f", fa_rate);
    ck_assert_int_ge(streaks, 3);
    ck_assert_int_eq(streaks_good, streaks);
    run_close(&r);
}
END_TEST

/* r on a 256² field of 300 stars (seed 7) through a CPU pipeline with a
 * history of 8; *pc: that pipeline's config. */
static void small_run_open(run_t *r, ss_pipeline_cfg_t *pc)
{
    ss_synth_cfg_t sc;
    field_cfg(&sc, 256, 256, 7);
    sc.n_stars = 300;
    pipe_cfg(pc);
    pc->history = 8;
    run_open(r, &sc, pc);
}

/* The driver's statuses: the first frame becomes the reference, then
 * warm-up until min_history, then residuals; shifts track the truth. */
START_TEST(test_reference_and_warmup)
{
    ss_pipeline_cfg_t pc;
    run_t r;
    small_run_open(&r, &pc);
    int minh = ss_cfg_min_history(&pc);
    ck_assert_int_gt(minh, 1);
    double sx0 = 0, sy0 = 0;
    for (int f = 0; f < 14; f++) {
        run_step(&r);
        if (f == 0) {
            ck_assert_int_eq(r.res.status, SS_STATUS_REFERENCE);
            sx0 = r.truth.sx;
            sy0 = r.truth.sy;
            continue;
        }
        ck_assert_int_eq(r.res.status, f < minh ? SS_STATUS_WARMUP : SS_STATUS_OK);
        /* every handled frame has a residual; all invalid without a prediction */
        ck_assert_int_eq(r.res.has_residual, 1);
        ck_assert_int_eq(isnan(r.res.residual[r.res.width * 7 + 9]), r.res.status != SS_STATUS_OK);
        /* shifts are against frame 0 */
        ck_assert_double_eq_tol(r.res.shift.sx, r.truth.sx - sx0, 0.05);
        ck_assert_double_eq_tol(r.res.shift.sy, r.truth.sy - sy0, 0.05);
        if (r.res.status == SS_STATUS_OK) {
            ck_assert_int_eq(r.res.n_weights, SS_MIN(f, pc.history));
            double sum = 0;
            for (int k = 0; k < r.res.n_weights; k++)
                sum += r.res.weights[k];
            ck_assert_double_eq_tol(sum, 1.0, 1e-9);   /* flux is preserved exactly */
            ck_assert(isfinite(r.res.sigma) && r.res.sigma > 0);
        }
    }
    ss_pipeline_stats_t st;
    ss_pipeline_get_stats(r.pipe, &st);
    ck_assert_uint_eq(st.processed, 14);
    ck_assert_uint_eq(st.status[SS_STATUS_REFERENCE], 1);
    run_close(&r);
}
END_TEST

/* A camera that re-sends one frame: once the history holds only copies
 * of it, the residual is zero, σ is 0 and the frame fails, its reason
 * saying so (not "no valid residual pixels", which names another cause);
 * a new frame after them is processed as usual. */
START_TEST(test_repeated_frame_says_so)
{
    ss_pipeline_cfg_t pc;
    run_t r;
    small_run_open(&r, &pc);
    ck_assert_int_eq(ss_synth_next(r.syn, &r.frame, &r.truth), SS_OK);
    const size_t bytes = (size_t)r.frame.width * (size_t)r.frame.height * ss_dtype_size(r.frame.dtype);
    void *copy = malloc(bytes);
    ck_assert_ptr_nonnull(copy);
    memcpy(copy, r.frame.pixels, bytes);
    const uint64_t seq0 = r.frame.meta.seq;
    int failed = 0, ok = 0;
    for (int f = 0; f < 16; f++) {
        memcpy(r.frame.pixels, copy, bytes);
        r.frame.meta.seq = seq0 + (uint64_t)f;
        const ss_err_t e = ss_pipeline_process(r.pipe, &r.frame, &r.res);
        if (r.res.status == SS_STATUS_ERROR) {
            ck_assert_int_eq(e, SS_ERR_BACKEND);
            ck_assert_msg(strstr(r.res.reason, "repeats its prediction") != NULL, "frame %d: %s",
                          f, r.res.reason);
            failed++;
        }
        ok += r.res.status == SS_STATUS_OK;
    }
    ck_assert_int_gt(failed, 0);
    ck_assert_int_eq(ok, 0);
    run_step(&r);                       /* the sequence's next frame: new noise */
    ck_assert_int_eq(r.res.status, SS_STATUS_OK);
    ck_assert(isfinite(r.res.sigma) && r.res.sigma > 0);
    free(copy);
    run_close(&r);
}
END_TEST

/* detect.max through the driver: each ok frame reports at most that
 * many detections, most significant first, and the pipeline's
 * detections_truncated counter is the sum of the frames' truncated. */
START_TEST(test_truncated_counter)
{
    ss_synth_cfg_t sc;
    ss_pipeline_cfg_t pc;
    field_cfg(&sc, 256, 256, 11);
    sc.n_stars = 300;
    sc.n_movers = 12;
    sc.mover_snr = 12.0;
    pipe_cfg(&pc);
    pc.history = 8;
    pc.max_detections = 3;
    run_t r;
    run_open(&r, &sc, &pc);
    uint64_t sum = 0, count = 0;
    int frames_cut = 0;
    for (int f = 0; f < 16; f++) {
        run_step(&r);
        const ss_detlist_t *dl = &r.res.dets;
        ck_assert_int_le(dl->count, 3);
        for (int i = 1; i < dl->count; i++)
            ck_assert(dl->items[i].peak_snr <= dl->items[i - 1].peak_snr);
        sum += (uint64_t)dl->truncated;
        count += (uint64_t)dl->count;
        frames_cut += dl->truncated > 0;
    }
    ck_assert_int_ge(frames_cut, 4);        /* 12 movers, room for 3 */
    ss_pipeline_stats_t st;
    ss_pipeline_get_stats(r.pipe, &st);
    ck_assert_uint_eq(st.detections_truncated, sum);
    ck_assert_uint_eq(st.detections, count);
    run_close(&r);
}
END_TEST

/* A featureless (closed dome) run fails registration; max_failures in a
 * row reset the history; the next good frame becomes the reference. */
START_TEST(test_failures_and_slew)
{
    ss_synth_cfg_t sc, blank;
    ss_pipeline_cfg_t pc;
    field_cfg(&sc, 256, 256, 9);
    sc.n_stars = 300;
    blank = sc;
    blank.n_stars = 0;
    blank.n_hot = 0;
    blank.cosmic_rate = 0;
    blank.seed = 99;    /* the same seed would repeat frame 0's noise, which matches */
    pipe_cfg(&pc);
    pc.max_failures = 3;
    run_t r;
    run_open(&r, &sc, &pc);
    ss_synth_t *dome = ss_synth_new(&blank);
    for (int f = 0; f < 4; f++)
        run_step(&r);
    for (int f = 0; f < 3; f++) {
        ck_assert_int_eq(ss_synth_next(dome, &r.frame, NULL), SS_OK);
        ck_assert_int_eq(ss_pipeline_process(r.pipe, &r.frame, &r.res), SS_OK);
        ck_assert_int_eq(r.res.status, SS_STATUS_REG_FAILED);
        ck_assert(strstr(r.res.reason, "registration failed") != NULL);
        ck_assert_int_eq(r.res.history_reset, f == 2);
        ck_assert_int_eq(r.res.dets.count, 0);
    }
    run_step(&r);
    ck_assert_int_eq(r.res.status, SS_STATUS_REFERENCE);
    ss_pipeline_stats_t st;
    ss_pipeline_get_stats(r.pipe, &st);
    ck_assert_uint_eq(st.status[SS_STATUS_REG_FAILED], 3);
    ck_assert_uint_eq(st.resets, 1);
    ss_synth_destroy(&dome);
    run_close(&r);
}
END_TEST

/* A frame of another size resets the history instead of crashing; a frame
 * of NaNs or a too-small frame is handled with a status, not a crash. */
START_TEST(test_geometry_change_and_bad_frames)
{
    ss_synth_cfg_t sc, other;
    ss_pipeline_cfg_t pc;
    field_cfg(&sc, 256, 256, 11);
    sc.n_stars = 300;
    other = sc;
    other.width = 200;
    other.height = 180;
    pipe_cfg(&pc);
    run_t r;
    run_open(&r, &sc, &pc);
    for (int f = 0; f < 3; f++)
        run_step(&r);
    ss_synth_t *s2 = ss_synth_new(&other);
    ck_assert_int_eq(ss_synth_next(s2, &r.frame, NULL), SS_OK);
    ck_assert_int_eq(ss_pipeline_process(r.pipe, &r.frame, &r.res), SS_OK);
    ck_assert_int_eq(r.res.status, SS_STATUS_REFERENCE);
    ck_assert_int_eq(r.res.history_reset, 1);
    ck_assert_int_eq(r.res.width, 200);
    ss_synth_destroy(&s2);

    /* all-NaN float frame: registration fails, no crash */
    ss_frame_t nanf = r.frame;
    nanf.dtype = SS_DT_F32;
    nanf.width = 200;
    nanf.height = 180;
    for (int i = 0; i < 200 * 180; i++)
        ((float *)nanf.pixels)[i] = NAN;
    ck_assert_int_eq(ss_pipeline_process(r.pipe, &nanf, &r.res), SS_OK);
    ck_assert_int_eq(r.res.history_reset, 1); /* new dtype: new geometry */
    ck_assert_int_eq(r.res.status, SS_STATUS_REG_FAILED);
    ck_assert(strstr(r.res.reason, "no valid pixels") != NULL);
    ck_assert_int_eq(ss_pipeline_process(r.pipe, &nanf, &r.res), SS_OK);
    ck_assert_int_eq(r.res.status, SS_STATUS_REG_FAILED);

    /* a 4x4 frame is too small to process */
    nanf.width = nanf.height = 4;
    ck_assert_int_eq(ss_pipeline_process(r.pipe, &nanf, &r.res), SS_ERR_SIZE);
    ck_assert_int_eq(r.res.status, SS_STATUS_ERROR);
    ck_assert(strstr(r.res.reason, "does not fit") != NULL);
    run_close(&r);
}
END_TEST

/* Large drift makes the driver re-reference; detection keeps working. */
START_TEST(test_rereference)
{
    ss_synth_cfg_t sc;
    ss_pipeline_cfg_t pc;
    field_cfg(&sc, 320, 320, 13);
    sc.n_stars = 400;
    sc.jitter = 0.3;
    sc.drift_x = 1.5;
    sc.drift_y = -0.7;
    pipe_cfg(&pc);
    pc.reref_px = 6.0;
    pc.history = 8;
    pc.min_history = 4;
    run_t r;
    run_open(&r, &sc, &pc);
    int rerefs = 0, ok = 0;
    for (int f = 0; f < 20; f++) {
        run_step(&r);
        rerefs += r.res.rereferenced && r.res.status != SS_STATUS_REFERENCE;
        ok += r.res.status == SS_STATUS_OK;
        ck_assert_int_ne(r.res.status, SS_STATUS_REG_FAILED);
        ck_assert(hypot(r.res.shift.sx, r.res.shift.sy) < pc.reref_px + 3.0);
    }
    ck_assert_int_ge(rerefs, 2);
    ck_assert_int_ge(ok, 10);
    run_close(&r);
}
END_TEST

/* Robust noise of a plane's horizontal differences (a noise proxy that
 * ignores the smooth sky and most of the stars). */
static double diff_noise(const float *pl, int w, int h)
{
    float *d = malloc((size_t)w * h * sizeof(float)), *scr = malloc((size_t)w * h * sizeof(float));
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            d[(size_t)y * w + x] = x + 1 < w ? pl[(size_t)y * w + x + 1] - pl[(size_t)y * w + x] : NAN;
    double n = ss_noise_mad(d, w, h, 1, scr);
    free(d);
    free(scr);
    return n;
}

/* registration.reference_frames = M: the reference becomes the mean of
 * the first M aligned frames — less noisy by about sqrt(M) — and the
 * shifts stay right against it. */
START_TEST(test_mean_reference)
{
    ss_synth_cfg_t sc;
    ss_pipeline_cfg_t pc;
    field_cfg(&sc, 256, 256, 21);
    sc.n_stars = 300;
    double noise[2];
    for (int m = 0; m < 2; m++) {
        pipe_cfg(&pc);
        pc.ref_frames = m ? 6 : 1;
        run_t r;
        run_open(&r, &sc, &pc);
        double sx0 = 0, sy0 = 0;
        for (int f = 0; f < 10; f++) {
            run_step(&r);
            if (f == 0) {
                sx0 = r.truth.sx;
                sy0 = r.truth.sy;
                continue;
            }
            ck_assert_int_ne(r.res.status, SS_STATUS_REG_FAILED);
            /* still measured against frame 0's pointing, to the accuracy of a good reference */
            ck_assert_double_eq_tol(r.res.shift.sx, r.truth.sx - sx0, 0.05);
            ck_assert_double_eq_tol(r.res.shift.sy, r.truth.sy - sy0, 0.05);
        }
        const ss_backend_ops_t *ops;
        ss_backend_t *b = ss_pipeline_backend(r.pipe, &ops);
        float *ref = malloc(256 * 256 * sizeof(float));
        ck_assert_int_eq(ops->read_plane(b, SS_PLANE_REFERENCE, 0, ref), SS_OK);
        noise[m] = diff_noise(ref, 256, 256);
        free(ref);
        run_close(&r);
    }
    fprintf(stderr, "reference noise: one frame %.2f, mean of 6 %.2f\n", noise[0], noise[1]);
    ck_assert(noise[1] < 0.6 * noise[0]);
}
END_TEST

/* Write a w×h float plane as a FITS file (calibration frames). */
static void write_plane_fits(const char *path, const float *v, int w, int h)
{
    ss_frame_t f = { .width = w, .height = h, .dtype = SS_DT_F32, .pixels = (void *)v,
                     .capacity = (size_t)w * h * sizeof(float) };
    ss_frame_meta_clear(&f.meta);
    char err[300];
    ck_assert_msg(ss_fits_write_frame(path, &f, err, sizeof err) == SS_OK, "%s", err);
}

/* Calibration files named in the config (dark, flat, bad-pixel mask) are
 * read at start and applied to every frame: FRAME = (raw - dark) / flat,
 * NaN at masked pixels; a region of interest crops frames and the
 * calibration alike, and detections come back in input-frame pixels. A
 * calibration frame of the wrong size fails each frame with the reason;
 * a missing file fails the pipeline's creation with its name. */
START_TEST(test_calibration_files_and_roi)
{
    enum { W = 200, H = 160 };
    char dir[] = "/tmp/check_pipeline.XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char dark[300], flat[300], bad[300], small[300];
    snprintf(dark, sizeof dark, "%s/dark.fits", dir);
    snprintf(flat, sizeof flat, "%s/flat.fits", dir);
    snprintf(bad, sizeof bad, "%s/bad.fits", dir);
    snprintf(small, sizeof small, "%s/small.fits", dir);
    float *d = malloc(W * H * sizeof(float)), *fl = malloc(W * H * sizeof(float));
    float *b = malloc(W * H * sizeof(float));
    for (int i = 0; i < W * H; i++) {
        d[i] = 100.0f + (float)(i % 7);
        /* small: the synthetic sky carries no flat-field pattern to undo */
        fl[i] = 0.99f + 0.02f * (float)((i * 13) % 101) / 100.0f;
        b[i] = i == 55 * W + 66 ? 1.0f : 0.0f;
    }
    write_plane_fits(dark, d, W, H);
    write_plane_fits(flat, fl, W, H);
    write_plane_fits(bad, b, W, H);
    write_plane_fits(small, d, W / 2, H / 2);

    ss_synth_cfg_t sc;
    ss_pipeline_cfg_t pc;
    field_cfg(&sc, W, H, 31);
    sc.n_stars = 150;
    sc.bias = 300.0;
    sc.n_movers = 3;
    sc.mover_snr = 15.0;
    pipe_cfg(&pc);
    ss_strlcpy(pc.dark, dark, sizeof pc.dark);
    ss_strlcpy(pc.flat, flat, sizeof pc.flat);
    ss_strlcpy(pc.bad_pixels, bad, sizeof pc.bad_pixels);
    pc.hotpix_learn = 0;
    pc.roi_x = 20, pc.roi_y = 10, pc.roi_w = 150, pc.roi_h = 120;
    run_t r;
    run_open(&r, &sc, &pc);
    run_step(&r);
    ck_assert_int_eq(r.res.status, SS_STATUS_REFERENCE);
    ck_assert_int_eq(r.res.width, 150);
    ck_assert_int_eq(r.res.height, 120);
    ck_assert_int_eq(r.res.origin_x, 20);
    ck_assert_int_eq(r.res.origin_y, 10);
    const ss_backend_ops_t *ops;
    ss_backend_t *be = ss_pipeline_backend(r.pipe, &ops);
    float *fr = malloc(150 * 120 * sizeof(float));
    ck_assert_int_eq(ops->read_plane(be, SS_PLANE_FRAME, 0, fr), SS_OK);
    const uint16_t *raw = r.frame.pixels;
    for (int y = 0; y < 120; y++)
        for (int x = 0; x < 150; x++) {
            const int i = (y + 10) * W + (x + 20);
            const float got = fr[y * 150 + x];
            if (i == 55 * W + 66) {
                ck_assert_msg(isnan(got), "masked pixel not invalid");
                continue;
            }
            const float want = (float)(((double)raw[i] - d[i]) / fl[i]);
            ck_assert_msg(fabsf(got - want) <= 1e-4f * fabsf(want) + 1e-3f,
                          "(%d,%d): %g want %g", x, y, (double)got, (double)want);
        }
    free(fr);
    /* detections in input-frame coordinates: inside the roi, offset by it */
    int seen = 0, matched = 0;
    for (int f = 0; f < 16; f++) {
        run_step(&r);
        for (int j = 0; j < r.res.dets.count; j++) {
            const ss_detection_t *det = &r.res.dets.items[j];
            ck_assert(det->x >= 20 - 0.5 && det->x <= 20 + 150 - 0.5);
            ck_assert(det->y >= 10 - 0.5 && det->y <= 10 + 120 - 0.5);
            ck_assert(det->bbox_x0 >= 20 && det->bbox_y0 >= 10);
            seen++;
            /* the synth's truth is in input-frame pixels too */
            matched += near_truth(&r.truth, det, SS_SYNTH_MOVER, 2.0);
        }
    }
    ck_assert_int_gt(seen, 0);
    ck_assert_int_gt(matched, 0);
    run_close(&r);

    /* a dark of another size: every frame fails, saying why */
    ss_strlcpy(pc.dark, small, sizeof pc.dark);
    run_open(&r, &sc, &pc);
    ck_assert_int_eq(ss_synth_next(r.syn, &r.frame, NULL), SS_OK);
    ck_assert_int_ne(ss_pipeline_process(r.pipe, &r.frame, &r.res), SS_OK);
    ck_assert_int_eq(r.res.status, SS_STATUS_ERROR);
    ck_assert_msg(strstr(r.res.reason, "dark frame is 100x80 but frames are 200x160") != NULL,
                  "%s", r.res.reason);
    run_close(&r);

    /* a missing file: no pipeline, and the message names it */
    char err[400] = "";
    snprintf(pc.dark, sizeof pc.dark, "%s/nope.fits", dir);
    ck_assert_ptr_null(ss_pipeline_new(&pc, "t", err, sizeof err));
    ck_assert_msg(strstr(err, "dark") && strstr(err, "nope.fits"), "%s", err);

    unlink(dark), unlink(flat), unlink(bad), unlink(small);
    rmdir(dir);
    free(d), free(fl), free(b);
}
END_TEST

/* Invalid history pixels are re-weighted through the driver (poly mode,
 * whiten.min_valid automatic): with a static bad-pixel mask of 0.5 % and
 * a few px of jitter, the whitening's residual (RESIDUAL) is invalid, away
 * from the border band, only where the current frame is (+ at most 1 %);
 * with min_valid = N (the strict rule) and in lsq mode (strict by design)
 * invalid pixels accumulate over the history. The published residual
 * (CLEAN, after the guided filter) is printed too: the filter's Laplacian
 * channel makes the 4 neighbours of an invalid pixel invalid. */
static void invalid_shares(const char *bad, int mode, int min_valid, double *cur_inv,
                           double *res_inv, double *clean_inv)
{
    enum { W = 256, H = 224, MARGIN = 12, T = 26, NT = 4 };
    ss_synth_cfg_t sc;
    ss_pipeline_cfg_t pc;
    field_cfg(&sc, W, H, 77);
    sc.n_hot = 0;
    sc.jitter = 2.0;
    pipe_cfg(&pc);
    ss_strlcpy(pc.bad_pixels, bad, sizeof pc.bad_pixels);
    pc.mode = (ss_whiten_mode_t)mode;
    pc.min_valid = min_valid;
    run_t r;
    run_open(&r, &sc, &pc);
    const ss_backend_ops_t *ops;
    float *fr = malloc((size_t)W * H * sizeof(float)), *rr = malloc((size_t)W * H * sizeof(float));
    size_t n = 0, nc = 0, nr = 0, ncl = 0;
    for (int t = 0; t < T; t++) {
        run_step(&r);
        if (t < T - NT)
            continue;
        ck_assert_int_eq(r.res.status, SS_STATUS_OK);
        ss_backend_t *be = ss_pipeline_backend(r.pipe, &ops);
        ck_assert_int_eq(ops->read_plane(be, SS_PLANE_FRAME, 0, fr), SS_OK);
        ck_assert_int_eq(ops->read_plane(be, SS_PLANE_RESIDUAL, 0, rr), SS_OK);
        for (int y = MARGIN; y < H - MARGIN; y++)
            for (int x = MARGIN; x < W - MARGIN; x++) {
                n++;
                nc += isnan(fr[(size_t)y * W + x]);
                nr += isnan(rr[(size_t)y * W + x]);
                ncl += isnan(r.res.residual[(size_t)y * W + x]);
            }
    }
    *cur_inv = (double)nc / n;
    *res_inv = (double)nr / n;
    *clean_inv = (double)ncl / n;
    free(fr);
    free(rr);
    run_close(&r);
}

START_TEST(test_invalid_history_reweighted)
{
    enum { W = 256, H = 224 };
    char dir[] = "/tmp/check_pipeline.XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char bad[300];
    snprintf(bad, sizeof bad, "%s/bad.fits", dir);
    float *b = malloc(W * H * sizeof(float));
    uint64_t st = 99;
    for (int i = 0; i < W * H; i++) {
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        b[i] = (st >> 40) % 1000 < 5 ? 1.0f : 0.0f;         /* 0.5 % */
    }
    write_plane_fits(bad, b, W, H);
    double c_auto, r_auto, k_auto, c_strict, r_strict, k_strict, c_lsq, r_lsq, k_lsq;
    invalid_shares(bad, SS_WHITEN_POLY, 0, &c_auto, &r_auto, &k_auto);
    invalid_shares(bad, SS_WHITEN_POLY, SS_MAX_HISTORY, &c_strict, &r_strict, &k_strict);
    invalid_shares(bad, SS_WHITEN_LSQ, 0, &c_lsq, &r_lsq, &k_lsq);
    fprintf(stderr,
            "invalid share away from the border: current frame %.3f %%; residual: re-weighted "
            "%.3f %% (after the guided filter %.3f %%), min_valid = N %.3f %% (%.3f %%), lsq "
            "%.3f %% (%.3f %%)\n",
            100.0 * c_auto, 100.0 * r_auto, 100.0 * k_auto, 100.0 * r_strict, 100.0 * k_strict,
            100.0 * r_lsq, 100.0 * k_lsq);
    ck_assert(c_auto > 0.004);
    ck_assert_msg(r_auto <= c_auto + 0.01, "re-weighted: %.4f, current %.4f", r_auto, c_auto);
    ck_assert_msg(r_strict > c_strict + 0.03, "strict: %.4f, current %.4f", r_strict, c_strict);
    ck_assert_msg(r_lsq > c_lsq + 0.03, "lsq: %.4f, current %.4f", r_lsq, c_lsq);
    unlink(bad);
    rmdir(dir);
    free(b);
}
END_TEST

/* ---- raw frames whose size varies (ALGORITHM §1: the history belongs to
 * the processed region, not to the raw size) ---------------------------- */

/* Cut a rendered frame down to w×h (its first rows and columns), in place. */
static void shrink_frame(ss_frame_t *f, int w, int h)
{
    const size_t px = ss_dtype_size(f->dtype);
    for (int y = 0; y < h; y++)
        memmove((char *)f->pixels + (size_t)y * w * px, (char *)f->pixels + (size_t)y * f->width * px,
                (size_t)w * px);
    f->width = w;
    f->height = h;
}

/* Through a FITS file with the given TRIMSEC (1-based, inclusive, as the
 * camera writes it, reaching past NAXIS2 when the frame is short) and
 * back, as the FITS source reads it. */
static void via_fits(const char *dir, ss_frame_t *f, int x1, int x2, int y1, int y2, ss_frame_t *out)
{
    char path[300], err[400];
    snprintf(path, sizeof path, "%s/frame.fits", dir);
    f->meta.trim_x0 = x1 - 1;
    f->meta.trim_w = x2 - x1 + 1;
    f->meta.trim_y0 = y1 - 1;
    f->meta.trim_h = y2 - y1 + 1;
    ck_assert_msg(ss_fits_write_frame(path, f, err, sizeof err) == SS_OK, "%s", err);
    ck_assert_msg(ss_fits_read_frame(path, out, err, sizeof err) == SS_OK, "%s", err);
    unlink(path);
}

/* A camera whose frames are 270..279 rows high and whose TRIMSEC says rows
 * 1..276 whatever the height: the section is clipped to each frame, the
 * processed region's height moves by a few rows (within
 * pipeline.geometry_slack of the first), and the history survives: no
 * reset, 'ok' frames come out. Rows a short frame lacks are invalid. */
START_TEST(test_trimsec_past_naxis_keeps_history)
{
    enum { W = 256, HMAX = 279, N = 14 };
    char dir[] = "/tmp/check_pipeline.XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    ss_synth_cfg_t sc;
    ss_pipeline_cfg_t pc;
    field_cfg(&sc, W, HMAX, 61);
    sc.n_movers = 3;
    sc.mover_snr = 12.0;
    pipe_cfg(&pc);
    pc.min_history = 4;                         /* 'ok' frames early: a short test */
    ck_assert_int_eq(pc.geometry_slack, 16);    /* the default */
    run_t r;
    run_open(&r, &sc, &pc);
    ss_frame_t in = { .capacity = r.frame.capacity, .pixels = malloc(r.frame.capacity) };
    ck_assert_ptr_nonnull(in.pixels);
    float *fr = malloc((size_t)W * HMAX * sizeof(float));
    int ok = 0, slack = 0;
    for (int t = 0; t < N; t++) {
        ck_assert_int_eq(ss_synth_next(r.syn, &r.frame, &r.truth), SS_OK);
        const int h = HMAX - (t * 7) % 10;
        shrink_frame(&r.frame, W, h);
        via_fits(dir, &r.frame, 1, 250, 1, 276, &in);
        ck_assert_int_eq(in.height, h);
        ck_assert_int_eq(in.meta.trim_h, SS_MIN(h, 276));     /* clipped by the reader */
        ck_assert_int_eq(ss_pipeline_process(r.pipe, &in, &r.res), SS_OK);
        ck_assert_msg(!r.res.history_reset, "frame %d (%d rows): history reset", t, h);
        ck_assert_int_eq(r.res.width, 250);
        ck_assert_int_eq(r.res.height, 276);                 /* the first frame's region */
        ok += r.res.status == SS_STATUS_OK;
        slack += in.meta.trim_h != 276;
        if (h < 276) {
            /* the rows this frame lacks are invalid, the others are not */
            const ss_backend_ops_t *ops;
            ss_backend_t *be = ss_pipeline_backend(r.pipe, &ops);
            ck_assert_int_eq(ops->read_plane(be, SS_PLANE_FRAME, 0, fr), SS_OK);
            int bad_rows = 0, good_rows = 0;
            for (int y = 0; y < 276; y++) {
                int fin = 0;
                for (int x = 0; x < 250; x++)
                    fin += isfinite(fr[y * 250 + x]);
                bad_rows += y >= h && fin == 0;
                good_rows += y < h && fin > 200;
            }
            ck_assert_int_eq(bad_rows, 276 - h);
            ck_assert_int_eq(good_rows, h);
        }
    }
    ss_pipeline_stats_t st;
    ss_pipeline_get_stats(r.pipe, &st);
    ck_assert_uint_eq(st.resets, 0);
    ck_assert_int_gt(slack, 3);
    ck_assert_uint_eq(st.slack_frames, (uint64_t)slack);
    ck_assert_msg(ok >= N - 1 - ss_cfg_min_history(&pc) - 2, "%d ok frames of %d", ok, N);

    /* a real change still resets: a region 46 rows shorter (beyond the slack) */
    ck_assert_int_eq(ss_synth_next(r.syn, &r.frame, NULL), SS_OK);
    shrink_frame(&r.frame, W, HMAX);
    via_fits(dir, &r.frame, 1, 250, 1, 230, &in);
    ck_assert_int_eq(ss_pipeline_process(r.pipe, &in, &r.res), SS_OK);
    ck_assert_int_eq(r.res.history_reset, 1);
    ck_assert_int_eq(r.res.status, SS_STATUS_REFERENCE);
    ck_assert_int_eq(r.res.height, 230);
    /* ... and so does another origin, even of the same size */
    ck_assert_int_eq(ss_synth_next(r.syn, &r.frame, NULL), SS_OK);
    shrink_frame(&r.frame, W, HMAX);
    via_fits(dir, &r.frame, 3, 252, 1, 230, &in);
    ck_assert_int_eq(ss_pipeline_process(r.pipe, &in, &r.res), SS_OK);
    ck_assert_int_eq(r.res.history_reset, 1);
    ck_assert_int_eq(r.res.origin_x, 2);
    ss_pipeline_get_stats(r.pipe, &st);
    ck_assert_uint_eq(st.resets, 2);
    run_close(&r);

    /* geometry_slack 0: a one-row change of the region resets */
    pc.geometry_slack = 0;
    run_open(&r, &sc, &pc);
    for (int t = 0; t < 3; t++) {
        ck_assert_int_eq(ss_synth_next(r.syn, &r.frame, NULL), SS_OK);
        shrink_frame(&r.frame, W, 275 + t % 2);
        via_fits(dir, &r.frame, 1, 250, 1, 276, &in);
        ck_assert_int_eq(ss_pipeline_process(r.pipe, &in, &r.res), SS_OK);
        ck_assert_int_eq(r.res.history_reset, t > 0);
    }
    run_close(&r);
    free(in.pixels);
    free(fr);
    rmdir(dir);
}
END_TEST

/* A fixed roi with raw frames of varying size (width and height): the
 * processed region does not change, the history goes on. */
START_TEST(test_fixed_roi_varying_raw_size)
{
    enum { W = 256, H = 256, N = 12 };
    ss_synth_cfg_t sc;
    ss_pipeline_cfg_t pc;
    field_cfg(&sc, W, H, 71);
    sc.n_stars = 400;           /* the coarse search needs structure in a 200×190 region */
    sc.n_movers = 3;
    sc.mover_snr = 12.0;
    pipe_cfg(&pc);
    pc.roi_x = 8, pc.roi_y = 6, pc.roi_w = 200, pc.roi_h = 190;
    pc.min_history = 4;
    run_t r;
    run_open(&r, &sc, &pc);
    int ok = 0;
    for (int t = 0; t < N; t++) {
        ck_assert_int_eq(ss_synth_next(r.syn, &r.frame, &r.truth), SS_OK);
        /* sizes well beyond any slack: 208..256 by 196..256 */
        shrink_frame(&r.frame, 208 + (t * 13) % 49, 196 + (t * 29) % 61);
        ck_assert_int_eq(ss_pipeline_process(r.pipe, &r.frame, &r.res), SS_OK);
        ck_assert_msg(!r.res.history_reset, "frame %d (%dx%d): history reset", t, r.frame.width,
                      r.frame.height);
        ck_assert(r.res.width == 200 && r.res.height == 190 && r.res.origin_x == 8);
        ok += r.res.status == SS_STATUS_OK;
        for (int j = 0; j < r.res.dets.count; j++)
            ck_assert(r.res.dets.items[j].x >= 8 - 0.5 && r.res.dets.items[j].y >= 6 - 0.5);
    }
    ss_pipeline_stats_t st;
    ss_pipeline_get_stats(r.pipe, &st);
    ck_assert_uint_eq(st.resets, 0);
    ck_assert_uint_eq(st.slack_frames, 0);
    ck_assert_msg(ok >= N - 1 - ss_cfg_min_history(&pc) - 2, "%d ok frames of %d", ok, N);
    /* a frame 5 rows short of the roi (within the slack): processed, those
     * rows invalid, the history kept */
    ck_assert_int_eq(ss_synth_next(r.syn, &r.frame, NULL), SS_OK);
    shrink_frame(&r.frame, 230, 6 + 190 - 5);
    ck_assert_int_eq(ss_pipeline_process(r.pipe, &r.frame, &r.res), SS_OK);
    ck_assert_int_eq(r.res.history_reset, 0);
    ck_assert_int_eq(r.res.height, 190);
    {
        const ss_backend_ops_t *ops;
        ss_backend_t *be = ss_pipeline_backend(r.pipe, &ops);
        float *fr = malloc(200 * 190 * sizeof(float));
        ck_assert_int_eq(ops->read_plane(be, SS_PLANE_FRAME, 0, fr), SS_OK);
        for (int x = 0; x < 200; x++)
            ck_assert(isnan(fr[185 * 200 + x]) && isnan(fr[189 * 200 + x]));
        int fin = 0;
        for (int x = 0; x < 200; x++)
            fin += isfinite(fr[184 * 200 + x]);
        ck_assert_int_gt(fin, 190);
        free(fr);
    }
    ss_pipeline_get_stats(r.pipe, &st);
    ck_assert_uint_eq(st.slack_frames, 1);
    ck_assert_uint_eq(st.resets, 0);
    /* a frame too small for the roi (by more than the slack) fails, saying why */
    ck_assert_int_eq(ss_synth_next(r.syn, &r.frame, NULL), SS_OK);
    shrink_frame(&r.frame, 180, 190);
    ck_assert_int_eq(ss_pipeline_process(r.pipe, &r.frame, &r.res), SS_ERR_SIZE);
    ck_assert(strstr(r.res.reason, "does not fit") != NULL);
    run_close(&r);
}
END_TEST

/* §1 through the driver: x = (raw - overscan - bias - dark·t/t_dark) /
 * flat on hand-made frames with a planted BIASSEC; masters raw-sized or
 * trimmed (LTV origin); the exposure-scaled dark; a master of the wrong
 * size fails the frame naming the file. */
enum { CW = 64, CH = 48, CTW = 56 };           /* raw frame; TRIMSEC [1:56,1:48] */

static void calib_frame(ss_frame_t *f, double exposure, int with_biassec)
{
    uint16_t *px = f->pixels;
    f->width = CW;
    f->height = CH;
    f->dtype = SS_DT_U16;
    f->valid = NULL;
    ss_frame_meta_clear(&f->meta);
    f->meta.exposure = exposure;
    f->meta.trim_w = CTW;
    f->meta.trim_h = CH;
    for (int y = 0; y < CH; y++)
        for (int x = 0; x < CW; x++)
            px[y * CW + x] = (uint16_t)(x < CTW ? 1000 + 3 * x + y + ((x * 7 + y * 3) % 11) * 20
                                                : 300 + y);
    if (with_biassec) {
        f->meta.bias_x0 = CTW;
        f->meta.bias_w = CW - CTW;
        f->meta.bias_h = CH;
    }
}

/* Process one frame (it becomes the reference) and read FRAME. */
static void calib_run(const ss_pipeline_cfg_t *pc, ss_frame_t *f, float *out, char *reason,
                      ss_err_t want)
{
    char err[400] = "";
    ss_pipeline_t *pl = ss_pipeline_new(pc, "calib", err, sizeof err);
    ck_assert_msg(pl != NULL, "%s", err);
    ss_result_t res;
    ck_assert_int_eq(ss_result_init(&res, CW * CH, 100), 0);
    ck_assert_int_eq(ss_pipeline_process(pl, f, &res), want);
    if (reason)
        ss_strlcpy(reason, res.reason, sizeof res.reason);
    if (want == SS_OK) {
        const ss_backend_ops_t *ops;
        ss_backend_t *be = ss_pipeline_backend(pl, &ops);
        ck_assert_int_eq(ops->read_plane(be, SS_PLANE_FRAME, 0, out), SS_OK);
    }
    ss_result_free(&res);
    ss_pipeline_destroy(&pl);
}

static void write_master(const char *path, float v, int w, int h, double exptime, int ltv)
{
    float *px = malloc((size_t)w * h * sizeof(float));
    for (int i = 0; i < w * h; i++)
        px[i] = v;
    ss_frame_t f = { .width = w, .height = h, .dtype = SS_DT_F32, .pixels = px,
                     .capacity = (size_t)w * h * sizeof(float) };
    ss_frame_meta_clear(&f.meta);
    f.meta.exposure = exptime;
    char err[300];
    ck_assert_msg(ss_fits_write_frame(path, &f, err, sizeof err) == SS_OK, "%s", err);
    free(px);
    if (ltv) {          /* a trimmed master: LTV1/LTV2 = -origin */
        fitsfile *fp;
        int st = 0;
        double l1 = 0.0, l2 = 0.0;
        fits_open_diskfile(&fp, path, READWRITE, &st);
        fits_update_key(fp, TDOUBLE, "LTV1", &l1, NULL, &st);
        fits_update_key(fp, TDOUBLE, "LTV2", &l2, NULL, &st);
        fits_close_file(fp, &st);
        ck_assert_int_eq(st, 0);
    }
}

START_TEST(test_calibration_bias_dark_overscan)
{
    char dir[] = "/tmp/check_pipeline.XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char bias[300], dark[300], small[300];
    snprintf(bias, sizeof bias, "%s/bias.fits", dir);
    snprintf(dark, sizeof dark, "%s/dark.fits", dir);
    snprintf(small, sizeof small, "%s/small.fits", dir);
    write_master(bias, 10.0f, CW, CH, 0.0, 0);          /* raw-sized */
    write_master(dark, 2.0f, CTW, CH, 10.0, 1);         /* trimmed, EXPTIME 10 s */
    write_master(small, 1.0f, 40, CH, 0.0, 0);
    ss_frame_t f = { .capacity = CW * CH * 2, .pixels = malloc(CW * CH * 2) };
    float *out = malloc(CTW * CH * sizeof(float));
    ss_pipeline_cfg_t pc;
    pipe_cfg(&pc);
    pc.hotpix_learn = 0;
    ss_strlcpy(pc.bias, bias, sizeof pc.bias);
    ss_strlcpy(pc.dark, dark, sizeof pc.dark);
    const uint16_t *raw = f.pixels;

    /* per-row overscan (each BIASSEC row is 300 + y), bias 10, dark 2·25/10 */
    pc.overscan = SS_OVERSCAN_ROW;
    calib_frame(&f, 25.0, 1);
    calib_run(&pc, &f, out, NULL, SS_OK);
    for (int y = 0; y < CH; y++)
        for (int x = 0; x < CTW; x++)
            ck_assert_msg(out[y * CTW + x] == (float)(raw[y * CW + x] - (300.0 + y) - 10.0 - 5.0),
                          "row mode (%d,%d): %g", x, y, (double)out[y * CTW + x]);
    /* scalar: the median of all 384 BIASSEC pixels (8 per row, 300..347): 323.5 */
    pc.overscan = SS_OVERSCAN_SCALAR;
    calib_run(&pc, &f, out, NULL, SS_OK);
    for (int i = 0; i < CTW * CH; i++)
        ck_assert_msg(out[i] == (float)(raw[(i / CTW) * CW + i % CTW] - 323.5 - 10.0 - 5.0),
                      "scalar mode pixel %d: %g", i, (double)out[i]);
    /* exposure unknown: the dark unscaled; no BIASSEC: no overscan */
    calib_frame(&f, 0.0, 0);
    calib_run(&pc, &f, out, NULL, SS_OK);
    ck_assert(out[0] == (float)(raw[0] - 10.0 - 2.0));
    ck_assert(out[CTW * CH - 1] == (float)(raw[(CH - 1) * CW + CTW - 1] - 10.0 - 2.0));
    /* no bias removed at all: the dark holds the bias, used unscaled */
    pc.overscan = SS_OVERSCAN_NONE;
    pc.bias[0] = '\0';
    calib_frame(&f, 25.0, 1);
    calib_run(&pc, &f, out, NULL, SS_OK);
    ck_assert(out[5] == (float)(raw[5] - 2.0));
    /* a bias master of the wrong size: the frame fails, the reason names it */
    ss_strlcpy(pc.bias, small, sizeof pc.bias);
    char reason[200];
    calib_run(&pc, &f, out, reason, SS_ERR_SIZE);
    ck_assert_msg(strstr(reason, "bias frame is 40x48 but frames are 64x48") &&
                      strstr(reason, "small.fits"), "%s", reason);
    unlink(bias), unlink(dark), unlink(small);
    rmdir(dir);
    free(f.pixels);
    free(out);
}
END_TEST

/* Frames with a celestial WCS: every detection carries RA/Dec, that of
 * its input-frame pixel — also when a region of interest is processed
 * (detections are moved back to input-frame pixels first). A mover's
 * RA/Dec agrees with the sky position of its true pixel. */
/* The start/finish tests' world: a 256² field of seed with 4 movers of
 * the given SNR, a CPU pipeline with 6 history frames. */
static void movers_cfg(ss_synth_cfg_t *sc, ss_pipeline_cfg_t *pc, uint64_t seed, double snr)
{
    field_cfg(sc, 256, 256, seed);
    sc->n_movers = 4;
    sc->mover_snr = snr;
    pipe_cfg(pc);
    pc->history = 6;
}

/* Tracks of two results: the same reports (ids, states, positions, speed). */
static void same_tracks(const ss_result_t *a, const ss_result_t *b)
{
    ck_assert_int_eq(a->tracks.count, b->tracks.count);
    for (int i = 0; i < a->tracks.count; i++) {
        const ss_track_t *ta = &a->tracks.items[i], *tb = &b->tracks.items[i];
        ck_assert_uint_eq(ta->id, tb->id);
        ck_assert_int_eq(ta->state, tb->state);
        ck_assert_int_eq(ta->n, tb->n);
        ck_assert(ta->x == tb->x && ta->y == tb->y && ta->vx == tb->vx && ta->vy == tb->vy);
    }
}

/* A reset while a frame's tracking is still pending (ss_pipeline_start
 * leaves it to the next start or the finish) tracks that frame first, on
 * the history it was processed with: every result, before and after the
 * reset, has the tracks ss_pipeline_process gives with the reset between
 * the same two frames. */
START_TEST(test_reset_tracks_pending_first)
{
    ss_synth_cfg_t sc;
    ss_pipeline_cfg_t pc;
    movers_cfg(&sc, &pc, 91, 12.0);
    run_t a, b;
    run_open(&a, &sc, &pc);
    run_open(&b, &sc, &pc);
    int tracks_seen = 0;
    for (int t = 0; t < 16; t++) {
        ck_assert_int_eq(ss_synth_next(a.syn, &a.frame, NULL), SS_OK);
        ck_assert_int_eq(ss_pipeline_process(a.pipe, &a.frame, &a.res), SS_OK);
        ck_assert_int_eq(ss_synth_next(b.syn, &b.frame, NULL), SS_OK);
        ck_assert_int_eq(ss_pipeline_start(b.pipe, &b.frame, &b.res), SS_OK);
        ck_assert_int_eq(b.res.tracks_pending, 1);
        if (t == 10) {
            ss_pipeline_reset(a.pipe, "test");
            ss_pipeline_reset(b.pipe, "test");     /* frame 10 still to track */
            ck_assert_int_eq(b.res.tracks_pending, 0);
        }
        ck_assert_int_eq(ss_pipeline_finish(b.pipe, &b.res), SS_OK);
        ck_assert_int_eq(b.res.status, a.res.status);
        same_tracks(&a.res, &b.res);
        tracks_seen += a.res.tracks.count;
    }
    ck_assert_int_gt(tracks_seen, 0);
    run_close(&a);
    run_close(&b);
}
END_TEST

/* ss_pipeline_start / ss_pipeline_finish: frame t starts before frame
 * t-1's residual is collected (the daemon's hand-over under load), with
 * result buffers from the backend's allocator. Frame t-1's tracking runs
 * in frame t's start (tracks_pending until then). Every result, its
 * tracks and the detections' track ids included, equals the one
 * ss_pipeline_process gives on an identical pipeline; a result still
 * pending when the pipeline goes is completed by the destroy. */
static int n_allocs, n_frees;
static void *count_alloc(size_t n, void *u)
{
    (void)u;
    n_allocs++;
    return malloc(n);
}
static void count_free(void *ptr, void *u)
{
    (void)u;
    if (ptr)
        n_frees++;
    free(ptr);
}

static void same_result(const ss_result_t *a, const ss_result_t *b)
{
    ck_assert_int_eq(a->status, b->status);
    ck_assert_int_eq(a->meta.seq, b->meta.seq);
    ck_assert_int_eq(a->has_residual, b->has_residual);
    ck_assert_int_eq(b->residual_pending, 0);
    ck_assert(memcmp(&a->sigma, &b->sigma, sizeof a->sigma) == 0);
    ck_assert_int_eq(a->dets.count, b->dets.count);
    for (int i = 0; i < a->dets.count; i++) {
        ck_assert(a->dets.items[i].x == b->dets.items[i].x);
        ck_assert(a->dets.items[i].y == b->dets.items[i].y);
        ck_assert_uint_eq(a->dets.items[i].track, b->dets.items[i].track);
    }
    ck_assert_int_eq(b->tracks_pending, 0);
    same_tracks(a, b);
    const size_t npix = (size_t)a->width * (size_t)a->height;
    ck_assert(memcmp(a->residual, b->residual, npix * sizeof(float)) == 0);
}

START_TEST(test_start_finish)
{
    ss_synth_cfg_t sc;
    ss_pipeline_cfg_t pc;
    movers_cfg(&sc, &pc, 77, 10.0);
    run_t a;                    /* the reference: ss_pipeline_process, malloc'ed results */
    run_open(&a, &sc, &pc);
    ss_result_t ares[2];
    ares[0] = a.res;
    ck_assert_int_eq(ss_result_init(&ares[1], 256 * 256, 2000), 0);
    char err[256];
    ss_pipeline_t *p = ss_pipeline_new(&pc, "async", err, sizeof err);
    ck_assert_msg(p != NULL, "%s", err);
    ss_synth_t *syn = ss_synth_new(&sc);
    ss_frame_t fr = { 0 };
    fr.capacity = 256 * 256 * 4;
    fr.pixels = malloc(fr.capacity);
    ss_result_t bres[2];
    for (int k = 0; k < 2; k++)
        ck_assert_int_eq(ss_pipeline_result_init(p, &bres[k], 256 * 256, 2000), 0);

    const int frames = 14;
    int pending_seen = 0, ok = 0, tracks_seen = 0;
    for (int t = 0; t < frames; t++) {
        ck_assert_int_eq(ss_synth_next(a.syn, &a.frame, NULL), SS_OK);
        ck_assert_int_eq(ss_pipeline_process(a.pipe, &a.frame, &ares[t % 2]), SS_OK);
        ck_assert_int_eq(ares[t % 2].residual_pending, 0);
        ck_assert_int_eq(ss_synth_next(syn, &fr, NULL), SS_OK);
        ss_result_t *cur = &bres[t % 2];
        ck_assert_int_eq(ss_pipeline_start(p, &fr, cur), SS_OK);
        /* a residual computed (status ok) comes back asynchronously; the
         * tracking waits for the next start */
        ck_assert_int_eq(cur->residual_pending, cur->status == SS_STATUS_OK);
        ck_assert_int_eq(cur->tracks_pending, 1);
        pending_seen += cur->residual_pending;
        ok += cur->status == SS_STATUS_OK;
        if (t > 0) {
            ss_result_t *prev = &bres[(t + 1) % 2];
            ck_assert_int_eq(prev->tracks_pending, 0);
            ck_assert_int_eq(ss_pipeline_finish(p, prev), SS_OK);
            same_result(&ares[(t + 1) % 2], prev);
            tracks_seen += prev->tracks.count;
        }
    }
    ck_assert_int_ge(ok, 5);
    ck_assert_int_eq(pending_seen, ok);
    ck_assert_int_gt(tracks_seen, 0);       /* the tracks compared were there */
    /* the last one pending when the pipeline goes: completed by destroy */
    ss_result_t *last = &bres[(frames - 1) % 2];
    ck_assert_int_eq(last->residual_pending, 1);
    ss_pipeline_stats_t st;
    ss_pipeline_get_stats(p, &st);
    ck_assert_int_eq(st.processed, frames);
    ck_assert_int_eq(st.status[SS_STATUS_ERROR], 0);
    ss_pipeline_destroy(&p);
    ck_assert_int_eq(last->residual_pending, 0);
    same_result(&ares[(frames - 1) % 2], last);
    /* finish on a completed result is a no-op */
    ck_assert_int_eq(ss_pipeline_finish(a.pipe, &ares[0]), SS_OK);

    for (int k = 0; k < 2; k++)
        ss_result_free(&bres[k]);
    ss_result_free(&ares[1]);
    a.res = ares[0];
    run_close(&a);
    ss_synth_destroy(&syn);
    free(fr.pixels);

    /* a result's pixel buffers (the residual, its float16 form, the
     * stamps) are freed by the allocator that made them */
    const ss_host_allocator_t al = { count_alloc, count_free, NULL };
    ss_result_t r;
    n_allocs = n_frees = 0;
    ck_assert_int_eq(ss_result_init_with(&r, 1000, 10, &al), 0);
    ck_assert_int_eq(n_allocs, 3);
    ss_result_free(&r);
    ck_assert_int_eq(n_frees, 3);
}
END_TEST

/* The backend's plan (predict_planned: the registration, the weights from
 * its shift, the prediction and σ without the driver between them, the
 * verdict after the detection) gives what the driver's op-by-op path
 * gives, to the bit: statuses, reasons, shifts, weights, σ, detections and
 * residuals, through the asynchronous hand-over, with a dome closing
 * (registration failures) while the backend plans: those frames are
 * discarded as failures, all-NaN residual and no detections. */
START_TEST(test_backend_plan_agrees)
{
    const int lsq = _i;         /* the poly weights, then the Wiener ones */
    ss_synth_cfg_t sc, blank;
    ss_pipeline_cfg_t pc;
    field_cfg(&sc, 256, 224, 31);
    sc.n_movers = 3;
    sc.mover_snr = 10.0;
    blank = sc;
    blank.n_stars = 0;
    blank.n_movers = 0;
    blank.n_hot = 0;
    blank.cosmic_rate = 0;
    blank.seed = 5;
    pipe_cfg(&pc);
    pc.history = 6;
    pc.max_failures = 3;
    pc.mode = lsq ? SS_WHITEN_LSQ : SS_WHITEN_POLY;
    ss_pipeline_t *pl[2];
    ss_synth_t *syn[2], *dome[2];
    ss_result_t res[2];
    ss_frame_t fr[2];
    char err[256];
    for (int k = 0; k < 2; k++) {
        pl[k] = ss_pipeline_new(&pc, k ? "host" : "backend", err, sizeof err);
        ck_assert_msg(pl[k] != NULL, "%s", err);
        ss_pipeline_set_backend_plan(pl[k], k == 0);
        syn[k] = ss_synth_new(&sc);
        dome[k] = ss_synth_new(&blank);
        ck_assert(syn[k] && dome[k]);
        ck_assert_int_eq(ss_pipeline_result_init(pl[k], &res[k], 256 * 224, 2000), 0);
        fr[k] = (ss_frame_t){ .capacity = 256 * 224 * 4 };
        fr[k].pixels = malloc(fr[k].capacity);
        ck_assert_ptr_nonnull(fr[k].pixels);
    }
    int ok = 0, failed_planned = 0;
    for (int t = 0; t < 30; t++) {
        const int closed = t == 20 || t == 21;       /* two failures: no reset */
        uint64_t planned_before = 0;
        for (int k = 0; k < 2; k++) {
            ss_pipeline_stats_t st;
            ss_pipeline_get_stats(pl[k], &st);
            if (k == 0)
                planned_before = st.backend_planned;
            ck_assert_int_eq(ss_synth_next(closed ? dome[k] : syn[k], &fr[k], NULL), SS_OK);
            ck_assert_int_eq(ss_pipeline_process(pl[k], &fr[k], &res[k]), SS_OK);
        }
        const ss_result_t *a = &res[0], *b = &res[1];
        same_result(a, b);
        ck_assert_str_eq(a->reason, b->reason);
        ck_assert(a->shift.sx == b->shift.sx && a->shift.sy == b->shift.sy);
        ck_assert_int_eq(a->n_weights, b->n_weights);
        ck_assert(memcmp(a->weights, b->weights, (size_t)a->n_weights * sizeof(double)) == 0);
        ck_assert(a->model_beta == b->model_beta && a->model_samples == b->model_samples);
        ok += a->status == SS_STATUS_OK;
        if (closed) {
            ss_pipeline_stats_t st;
            ss_pipeline_get_stats(pl[0], &st);
            ck_assert_int_eq(a->status, SS_STATUS_REG_FAILED);
            ck_assert_int_eq(a->dets.count, 0);
            ck_assert(isnan(a->sigma) && isnan(a->residual[1000]));
            failed_planned += st.backend_planned == planned_before + 1;
        }
    }
    ss_pipeline_stats_t sa, sb;
    ss_pipeline_get_stats(pl[0], &sa);
    ss_pipeline_get_stats(pl[1], &sb);
    ck_assert_uint_eq(sb.backend_planned, 0);
    ck_assert_uint_ge(sa.backend_planned, 10);  /* once the history is screened */
    ck_assert_int_eq(failed_planned, 2);        /* the dome's frames went the planned way */
    ck_assert_int_ge(ok, 20);
    for (int k = 0; k < 2; k++) {
        ss_pipeline_destroy(&pl[k]);
        ss_synth_destroy(&syn[k]);
        ss_synth_destroy(&dome[k]);
        ss_result_free(&res[k]);
        free(fr[k].pixels);
    }
}
END_TEST

/* Issue 14 item 4: the residual's forms asked of the pipeline
 * (ss_pipeline_set_outputs). Without the float32 form the residual buffer
 * is not written (has_residual 0); the float16 form is ss_f16_bits of the
 * float32 residual a default pipeline gives for the same frames (0x7E00
 * for frames without a prediction), through the asynchronous path; the
 * stamps of ok frames hold that residual's pixels at their boxes, one per
 * detection up to the maximum. */
START_TEST(test_outputs_in_chain)
{
    ss_synth_cfg_t sc;
    ss_pipeline_cfg_t pc;
    field_cfg(&sc, 192, 160, 91);
    sc.n_movers = 6;
    sc.mover_snr = 15.0;
    pipe_cfg(&pc);
    pc.history = 6;
    run_t a;
    run_open(&a, &sc, &pc);
    char err[256];
    ss_pipeline_t *p = ss_pipeline_new(&pc, "forms", err, sizeof err);
    ck_assert_msg(p != NULL, "%s", err);
    ss_outputs_t o = ss_outputs_default();
    o.f32 = 0;
    o.f16 = 1;
    o.stamps = 1;
    o.stamp_size = 11;
    o.stamp_max = 3;
    ss_pipeline_set_outputs(p, &o);
    ss_synth_t *syn = ss_synth_new(&sc);
    ss_frame_t fr = { 0 };
    fr.capacity = (size_t)192 * 160 * 4;
    fr.pixels = malloc(fr.capacity);
    ss_result_t b;
    ck_assert_int_eq(ss_pipeline_result_init(p, &b, (size_t)192 * 160, 2000), 0);
    const size_t npix = (size_t)192 * 160;
    int ok = 0, stamped = 0, truncated = 0;
    for (int t = 0; t < 14; t++) {
        ck_assert_int_eq(ss_synth_next(a.syn, &a.frame, NULL), SS_OK);
        ck_assert_int_eq(ss_pipeline_process(a.pipe, &a.frame, &a.res), SS_OK);
        ck_assert_int_eq(ss_synth_next(syn, &fr, NULL), SS_OK);
        for (size_t i = 0; i < npix; i++)
            b.residual[i] = 12345.0f;
        ck_assert_int_eq(ss_pipeline_process(p, &fr, &b), SS_OK);
        ck_assert_int_eq(b.status, a.res.status);
        ck_assert_int_eq(b.has_residual, 0);
        ck_assert_int_eq(b.has_residual16, 1);
        for (size_t i = 0; i < npix; i++) {
            ck_assert_float_eq(b.residual[i], 12345.0f);
            ck_assert_uint_eq(b.residual16[i], ss_f16_bits(a.res.residual[i]));
        }
        ck_assert_int_eq(b.has_stamps, b.status == SS_STATUS_OK);
        if (b.status != SS_STATUS_OK)
            continue;
        ok++;
        ck_assert_int_eq(b.dets.count, a.res.dets.count);
        ck_assert_int_eq(b.stamps.count, SS_MIN(b.dets.count, 3));
        ck_assert_int_eq(b.stamps.count + b.stamps.truncated, b.dets.count);
        stamped += b.stamps.count;
        truncated += b.stamps.truncated;
        for (int k = 0; k < b.stamps.count; k++) {
            const ss_stamp_t *s = &b.stamps.items[k];
            const ss_detection_t *d = &b.dets.items[s->det];
            ck_assert_int_eq(s->det, k);
            if (d->kind != SS_KIND_STREAK)      /* centred on the peak (input pixels = roi's) */
                ck_assert(s->x0 == SS_MAX(d->peak_x - 5, 0) && s->y0 == SS_MAX(d->peak_y - 5, 0));
            for (int y = 0; y < s->h; y++)
                ck_assert(memcmp(b.stamps.pixels + s->offset + (size_t)y * s->w,
                                 a.res.residual + (size_t)(s->y0 + y) * 192 + s->x0,
                                 (size_t)s->w * sizeof(float)) == 0);
        }
    }
    ck_assert_int_ge(ok, 5);
    ck_assert_int_gt(stamped, ok);
    ck_assert_int_gt(truncated, 0);
    ss_result_free(&b);
    ss_pipeline_destroy(&p);
    ss_synth_destroy(&syn);
    free(fr.pixels);
    run_close(&a);
}
END_TEST

START_TEST(test_radec)
{
    ss_synth_cfg_t sc;
    ss_pipeline_cfg_t pc;
    field_cfg(&sc, 320, 256, 41);
    sc.n_stars = 400;
    sc.n_movers = 4;
    sc.mover_snr = 15.0;
    sc.wcs = 1;
    sc.wcs_ra = 150.0;
    sc.wcs_dec = -20.0;
    sc.wcs_scale = 1.5;
    pipe_cfg(&pc);
    pc.roi_x = 24, pc.roi_y = 16, pc.roi_w = 280, pc.roi_h = 224;
    run_t r;
    run_open(&r, &sc, &pc);
    int checked = 0;
    for (int f = 0; f < 18; f++) {
        run_step(&r);
        if (r.res.status != SS_STATUS_OK)
            continue;
        ss_wcs_t w;
        char why[200];
        ck_assert_msg(ss_wcs_from_meta(&w, &r.frame.meta, why, sizeof why) == SS_OK, "%s", why);
        for (int j = 0; j < r.res.dets.count; j++) {
            const ss_detection_t *d = &r.res.dets.items[j];
            ck_assert_int_eq(d->has_radec, 1);
            for (int o = 0; o < r.truth.n_obj; o++) {
                const ss_synth_obj_t *t = &r.truth.obj[o];
                if (t->kind != SS_SYNTH_MOVER || hypot(d->x - t->x, d->y - t->y) > 2.0)
                    continue;
                double ra, dec;
                ck_assert_int_eq(ss_wcs_pix2sky(&w, t->x, t->y, &ra, &dec), 0);
                /* within 2 px of 1.5": 3 arcsec */
                double dra = (d->ra - ra) * cos(dec * M_PI / 180.0) * 3600.0;
                double ddec = (d->dec - dec) * 3600.0;
                ck_assert_msg(hypot(dra, ddec) < 3.0, "RA/Dec off by %.2f\"", hypot(dra, ddec));
                ck_assert(fabs(d->dec - (-20.0)) < 0.2 && fabs(d->ra - 150.0) < 0.2);
                checked++;
            }
        }
        ss_wcs_free(&w);
    }
    ck_assert_int_gt(checked, 4);
    run_close(&r);
}
END_TEST

/* Tracking in the chain (issue 12): movers at 2 px per frame, SNR 12, with
 * 1 px of pointing jitter: each one's detections, once its track is
 * confirmed (by its 4th ok frame or so), all carry one id, its own; the
 * frame's track reports hold that id with the mover's speed (registered
 * frame: the jitter is taken out) within 0.05 px per frame. */
/* Issue 12, item 6, end to end: with pipeline.photometry.zeropoint set
 * (per second), every positive detection gets mag = zp − 2.5 log10(flux/t)
 * and 1.0857·flux_err/flux, vanished ones none; a synthetic mover of known
 * flux F (SNR 40, 4 px/frame) gets zp − 2.5 log10(F/t) within its error:
 * at least 90% within 3 errors, the mean offset under 0.05 mag, the
 * scatter no more than 1.5 errors. The guided filter is off here: on, it
 * takes ~0.10 mag of a point source's light (README "Photometry"). Active
 * tracks have a magnitude; after a reload with the zero point null no
 * detection has one, until a fitted one is handed over. */
START_TEST(test_photometry_in_chain)
{
    ss_synth_cfg_t sc;
    ss_pipeline_cfg_t pc;
    field_cfg(&sc, 512, 512, 777);
    sc.n_movers = 8;
    sc.mover_snr = 40.0;
    sc.mover_speed = 4.0;
    sc.exposure = 4.0;
    sc.trail = 0;       /* point movers (16 px trails in a 4 s exposure otherwise) */
    pipe_cfg(&pc);
    pc.guided = 0;
    pc.phot.zeropoint = 25.0;
    pc.phot.per_second = 1;
    run_t r;
    run_open(&r, &sc, &pc);
    enum { F = 30 };
    int n = 0, n_track = 0, within = 0;
    double sum = 0.0, sum2 = 0.0, sum_err = 0.0;
    for (int f = 0; f < F; f++) {
        run_step(&r);
        if (r.res.status != SS_STATUS_OK)
            continue;
        ck_assert_int_eq(r.res.zp.source, SS_PHOT_CONFIG);
        for (int j = 0; j < r.res.dets.count; j++) {
            const ss_detection_t *d = &r.res.dets.items[j];
            if (d->sign < 0 || d->flux <= 0.0) {
                ck_assert(isnan(d->mag) && isnan(d->mag_err));
                continue;
            }
            ck_assert_double_eq_tol(d->mag, 25.0 - 2.5 * log10(d->flux / 4.0), 1e-9);
            ck_assert_double_eq_tol(d->mag_err, SS_PHOT_K * d->flux_err / d->flux, 1e-12);
        }
        for (int k = 0; k < r.truth.n_obj; k++) {
            const ss_synth_obj_t *o = &r.truth.obj[k];
            if (o->kind != SS_SYNTH_MOVER)
                continue;
            for (int j = 0; j < r.res.dets.count; j++) {
                const ss_detection_t *d = &r.res.dets.items[j];
                if (d->sign > 0 && hypot(d->x - o->x, d->y - o->y) <= 1.5) {
                    double truth = 25.0 - 2.5 * log10(o->flux / 4.0);
                    sum += d->mag - truth;
                    sum2 += (d->mag - truth) * (d->mag - truth);
                    sum_err += d->mag_err;
                    within += fabs(d->mag - truth) <= 3.0 * d->mag_err;
                    n++;
                    break;
                }
            }
        }
        for (int t = 0; t < r.res.tracks.count; t++) {
            const ss_track_t *tr = &r.res.tracks.items[t];
            if (tr->state != SS_TRACK_ACTIVE)
                continue;
            ck_assert_msg(isfinite(tr->mag) && tr->mag_err > 0.0, "track %llu: no magnitude",
                          (unsigned long long)tr->id);
            n_track++;
        }
    }
    double mean = sum / n, sd = sqrt(fmax(0.0, sum2 / n - mean * mean)), err = sum_err / n;
    fprintf(stderr, "photometry: %d mover detections, mag − truth %.4f ± %.4f (sd), mean error "
            "%.4f, %d within 3 errors; %d active track reports\n", n, mean, sd, err, within,
            n_track);
    ck_assert_int_ge(n, 100);
    ck_assert_int_ge(n_track, 50);
    ck_assert_msg(within >= 0.9 * n, "%d of %d movers' magnitudes within 3 errors", within, n);
    ck_assert_msg(fabs(mean) < 0.05, "mean offset %.4f mag", mean);
    ck_assert_msg(sd < 1.5 * err, "scatter %.4f, error %.4f", sd, err);
    /* then the zero point null (a reload): no magnitudes */
    pc.phot.zeropoint = NAN;
    char err_text[256];
    ck_assert_int_eq(ss_pipeline_reconfigure(r.pipe, &pc, err_text, sizeof err_text), 0);
    for (int f = 0; f < 3; f++) {
        run_step(&r);
        ck_assert_int_eq(r.res.zp.source, SS_PHOT_NONE);
        for (int j = 0; j < r.res.dets.count; j++)
            ck_assert(isnan(r.res.dets.items[j].mag));
    }
    /* a zero point fitted elsewhere (plate solving) is used, with its error */
    ss_phot_zp_t fit = { .source = SS_PHOT_FIT, .zp = 24.0, .zp_err = 0.03, .per_second = 1,
                         .n_used = 12 };
    ss_pipeline_set_zeropoint(r.pipe, &fit);
    int with_mag = 0;
    for (int f = 0; f < 2; f++) {
        run_step(&r);
        ck_assert_int_eq(r.res.zp.source, SS_PHOT_FIT);
        for (int j = 0; j < r.res.dets.count; j++) {
            const ss_detection_t *d = &r.res.dets.items[j];
            if (d->sign < 0 || d->flux <= 0.0)
                continue;
            ck_assert_double_eq_tol(d->mag, 24.0 - 2.5 * log10(d->flux / 4.0), 1e-9);
            ck_assert(d->mag_err >= 0.03);
            with_mag++;
        }
    }
    ck_assert_int_gt(with_mag, 0);
    run_close(&r);
}
END_TEST

START_TEST(test_tracks_in_chain)
{
    ss_synth_cfg_t sc;
    ss_pipeline_cfg_t pc;
    field_cfg(&sc, 512, 512, 4242);
    sc.n_movers = 8;
    sc.mover_snr = 12.0;
    sc.mover_speed = 2.0;
    pipe_cfg(&pc);
    run_t r;
    run_open(&r, &sc, &pc);
    enum { M = 8, F = 40 };
    uint64_t ids[M][F];
    int n_found[M] = { 0 }, wrapped[M] = { 0 };
    double last_x[M], last_y[M], speed_seen[M];
    for (int i = 0; i < M; i++)
        last_x[i] = last_y[i] = NAN, speed_seen[i] = NAN;
    double mjd_prev = NAN, dt = 1.0;
    for (int f = 0; f < F; f++) {
        run_step(&r);
        if (isfinite(mjd_prev) && isfinite(r.frame.meta.mjd_obs))
            dt = (r.frame.meta.mjd_obs - mjd_prev) * 86400.0;   /* s per frame */
        mjd_prev = r.frame.meta.mjd_obs;
        for (int k = 0; k < r.truth.n_obj; k++) {
            const ss_synth_obj_t *o = &r.truth.obj[k];
            if (o->kind != SS_SYNTH_MOVER || o->id >= M)
                continue;
            int i = (int)o->id;
            /* the registered frame: x + s */
            double u = o->x + r.truth.sx, v = o->y + r.truth.sy;
            if (isfinite(last_x[i]) && hypot(u - last_x[i], v - last_y[i]) > 10.0)
                wrapped[i] = 1;
            last_x[i] = u, last_y[i] = v;
            if (r.res.status != SS_STATUS_OK)
                continue;
            for (int j = 0; j < r.res.dets.count; j++) {
                const ss_detection_t *d = &r.res.dets.items[j];
                if (d->sign > 0 && hypot(d->x - o->x, d->y - o->y) <= 2.0) {
                    ids[i][n_found[i]++] = d->track;
                    break;
                }
            }
        }
        for (int t = 0; t < r.res.tracks.count; t++) {
            const ss_track_t *tr = &r.res.tracks.items[t];
            for (int i = 0; i < M; i++)
                if (n_found[i] && tr->id == ids[i][n_found[i] - 1] && tr->id != 0)
                    speed_seen[i] = hypot(tr->vx, tr->vy) * (tr->timed ? dt : 1.0);
        }
    }
    int checked = 0;
    uint64_t mains[M] = { 0 };
    for (int i = 0; i < M; i++) {
        if (wrapped[i] || n_found[i] < 20)
            continue;
        uint64_t main = ids[i][n_found[i] - 1];
        int on = 0;
        for (int k = 0; k < n_found[i]; k++)
            on += ids[i][k] == main;
        fprintf(stderr, "mover %d: %d found, %d on track %llu, speed %.3f px/frame\n", i,
                n_found[i], on, (unsigned long long)main, speed_seen[i]);
        ck_assert_msg(main != 0, "mover %d: not in a track", i);
        ck_assert_msg(on >= n_found[i] - 5, "mover %d: %d of %d detections on its track", i, on,
                      n_found[i]);
        ck_assert_msg(fabs(speed_seen[i] - 2.0) < 0.05, "mover %d: speed %.3f px/frame", i,
                      speed_seen[i]);
        for (int k = 0; k < checked; k++)
            ck_assert(mains[k] != main);
        mains[checked++] = main;
    }
    ck_assert_int_ge(checked, 5);
    run_close(&r);
}
END_TEST

/* What a stored history frame (u16, w px wide) keeps of a Gaussian source
 * of the given sigma and flux at (x, y) that the input frame `in` (u16)
 * holds: 1 + a/flux, a the least-squares amplitude of c + a·G over the
 * (2·7+1)² window of stored - input (the stars, the sky and the noise
 * cancel; sentinels left out): 1 when the frame was stored as it came,
 * about 0 when the source was taken out. NAN when the window leaves the
 * frame. */
static double stored_fraction(const uint16_t *hist, const uint16_t *in, int w, int h, double x,
                              double y, double sigma, double flux)
{
    enum { R = 7 };
    const int cx = (int)lround(x), cy = (int)lround(y);
    if (cx < R || cy < R || cx >= w - R || cy >= h - R)
        return NAN;
    const double k = 1.0 / (sqrt(2.0) * sigma);
    double n = 0, sg = 0, sv = 0, sgg = 0, sgv = 0;
    for (int Y = cy - R; Y <= cy + R; Y++)
        for (int X = cx - R; X <= cx + R; X++) {
            const size_t i = (size_t)Y * (size_t)w + (size_t)X;
            if (hist[i] == UINT16_MAX)
                continue;
            const double v = (double)hist[i] - (double)in[i];
            const double g = 0.25 * (erf((X + 0.5 - x) * k) - erf((X - 0.5 - x) * k)) *
                             (erf((Y + 0.5 - y) * k) - erf((Y - 0.5 - y) * k));
            n++, sg += g, sv += v, sgg += g * g, sgv += g * v;
        }
    const double det = n * sgg - sg * sg;
    return det > 0.0 ? 1.0 + (n * sgv - sg * sv) / det / flux : NAN;
}

/* Issue 12, item 1, and issue 9, items 5-6: faint slow comets (SNR 6.5,
 * sigma 2 px, 0.5 px per frame, below the slow-mover fit's
 * SS_SLOW_MIN_SNR) present from frame 0. Once the tracker confirms one,
 * the stored frames that still hold it (warm-up frames, frames where it
 * was missed) are cleaned along its track. Measured in the stored frames
 * themselves at the end, against the input frames, at each comet's true
 * place: over the stored frames where it was not detected, the mean share
 * of its flux left is at most 0.3 (measured -0.036 over 33 comet-frames;
 * without the cleaning 1.000 over 44: they hold it whole; with the model-
 * error term, the source mask and the warm-up protection, 2026-11-24,
 * -0.093 over 24, fewer missed); and the comets are found in at least
 * 85 % of the ok frames after frame 27 (measured 136 of 156, then 140;
 * without the cleaning 129, 82.7 %). At least 20 missed comet-frames make
 * the first figure a measurement. */
START_TEST(test_slow_tracks_clean_history)
{
    enum { FRAMES = 40, MOVERS = 12, LATE = 27 };
    ss_synth_cfg_t sc;
    ss_pipeline_cfg_t pc;
    field_cfg(&sc, 512, 512, 4242);
    sc.jitter = 0.3;
    sc.n_hot = 0;
    sc.cosmic_rate = 2.0;
    sc.seeing_wobble = 0.0;
    sc.transparency = 0.0;
    sc.n_movers = MOVERS;
    sc.mover_snr = 6.5;
    sc.mover_speed = 0.5;
    sc.mover_sigma = 2.0;
    pipe_cfg(&pc);
    run_t r;
    run_open(&r, &sc, &pc);
    /* each comet's truth and detection by the pipeline's count of frames */
    static double tx[FRAMES + 1][MOVERS], ty[FRAMES + 1][MOVERS], tf[FRAMES + 1][MOVERS];
    static int det[FRAMES + 1][MOVERS];
    int late_seen = 0, late_found = 0;
    double sigma = 2.0;
    const size_t npix = (size_t)sc.width * (size_t)sc.height;
    uint16_t *input = malloc((FRAMES + 1) * npix * sizeof *input);
    ck_assert_ptr_nonnull(input);
    for (int f = 1; f <= FRAMES; f++) {
        run_step(&r);
        ck_assert(r.frame.dtype == SS_DT_U16 && r.frame.width == sc.width &&
                  r.frame.height == sc.height);
        memcpy(input + (size_t)f * npix, r.frame.pixels, npix * sizeof *input);
        int m = 0;
        for (int i = 0; i < r.truth.n_obj && m < MOVERS; i++) {
            const ss_synth_obj_t *o = &r.truth.obj[i];
            if (o->kind != SS_SYNTH_MOVER)
                continue;
            tx[f][m] = o->x, ty[f][m] = o->y, tf[f][m] = o->flux, sigma = o->sigma;
            det[f][m] = 0;
            for (int j = 0; j < r.res.dets.count; j++) {
                const ss_detection_t *d = &r.res.dets.items[j];
                det[f][m] |= d->sign > 0 && hypot(d->x - o->x, d->y - o->y) <= 3.0;
            }
            if (r.res.status == SS_STATUS_OK && f > LATE && o->x > 12 && o->y > 12 &&
                o->x < sc.width - 13 && o->y < sc.height - 13) {
                late_seen++;
                late_found += det[f][m];
            }
            m++;
        }
        ck_assert_int_eq(m, MOVERS);
    }
    const ss_backend_ops_t *ops;
    ss_backend_t *be = ss_pipeline_backend(r.pipe, &ops);
    ck_assert(ss_history_dtype(r.frame.dtype, 0) == SS_DT_U16);
    uint16_t *buf = malloc(npix * sizeof *buf);
    ck_assert_ptr_nonnull(buf);
    int slot, n_missed = 0, n_found = 0;
    double sx, sy, left_missed = 0.0, left_found = 0.0;
    uint64_t seq;
    for (int k = 0; ss_pipeline_history_entry(r.pipe, k, &slot, &sx, &sy, &seq) == 0; k++) {
        ck_assert_int_eq(ops->read_plane(be, SS_PLANE_HISTORY, slot, buf), SS_OK);
        ck_assert(seq >= 1 && seq <= FRAMES);
        for (int m = 0; m < MOVERS; m++) {
            /* the processed region is the whole frame: its px are the input's */
            const double a = stored_fraction(buf, input + (size_t)seq * npix, sc.width, sc.height,
                                             tx[seq][m], ty[seq][m], sigma, tf[seq][m]);
            if (!isfinite(a))
                continue;
            if (det[seq][m]) {
                left_found += a;
                n_found++;
            } else {
                left_missed += a;
                n_missed++;
            }
        }
    }
    free(buf);
    free(input);
    fprintf(stderr, "faint slow comets: stored frames without their detection keep %.3f of the "
            "flux (%d comet-frames), with it %.3f (%d); found in %d of %d ok frames after %d\n",
            left_missed / n_missed, n_missed, left_found / n_found, n_found, late_found,
            late_seen, LATE);
    ck_assert_int_ge(n_missed, 20);
    ck_assert_msg(left_missed / n_missed <= 0.3, "the history keeps %.3f of the comets",
                  left_missed / n_missed);
    ck_assert_msg(late_found >= 0.85 * late_seen, "found %d of %d", late_found, late_seen);
    run_close(&r);
}
END_TEST

/* Of faint slow comets in the warm-up (ALGORITHM.md §3, object removal;
 * README "Slow movers in the warm-up"), the share found in the first
 * FIRST ok frames, whose history is the warm-up alone and holds each of
 * them a fraction of a pixel per frame behind: run with protect_speed v. */
static double warmup_comets_found(double v, int *seen)
{
    enum { FIRST = 3, MOVERS = 64 };
    ss_synth_cfg_t sc;
    ss_pipeline_cfg_t pc;
    field_cfg(&sc, 512, 512, 777);
    sc.jitter = 0.3;
    sc.n_hot = 0;
    sc.cosmic_rate = 2.0;
    sc.seeing_wobble = 0.0;
    sc.transparency = 0.0;
    sc.n_movers = MOVERS;
    sc.mover_snr = 7.0;
    sc.mover_speed = 0.5;
    sc.mover_sigma = 2.0;
    pipe_cfg(&pc);
    pc.protect_speed = v;
    run_t r;
    run_open(&r, &sc, &pc);
    int ok = 0, found = 0;
    *seen = 0;
    while (ok < FIRST) {
        run_step(&r);
        ck_assert_int_le(r.truth.seq, 40);
        if (r.res.status != SS_STATUS_OK)
            continue;
        ok++;
        for (int i = 0; i < r.truth.n_obj; i++) {
            const ss_synth_obj_t *o = &r.truth.obj[i];
            if (o->kind != SS_SYNTH_MOVER || o->x < 12 || o->y < 12 || o->x > sc.width - 13 ||
                o->y > sc.height - 13)
                continue;
            (*seen)++;
            for (int j = 0; j < r.res.dets.count; j++) {
                const ss_detection_t *d = &r.res.dets.items[j];
                if (d->sign > 0 && hypot(d->x - o->x, d->y - o->y) <= 4.0) {
                    found++;
                    break;
                }
            }
        }
    }
    run_close(&r);
    return (double)found / *seen;
}

/* object_removal.protect_speed: the first ok frames find the warm-up's
 * slow comets (SNR 7, 0.5 px/frame, sigma 2 px) that their prediction
 * would otherwise hold a copy of. Measured 2026-11-24 with 24 comets:
 * 0.730 of 63 with the default 0.5, 0.667 with 0 (off) — 4 comets apart,
 * and one flipped by the SNR-peak positions; with 64 comets (171 seen)
 * 0.579 and 0.515: 11 apart. */
START_TEST(test_warmup_protects_slow_movers)
{
    int seen_on, seen_off;
    const double on = warmup_comets_found(0.5, &seen_on), off = warmup_comets_found(0.0, &seen_off);
    fprintf(stderr, "warm-up comets found in the first ok frames: %.3f of %d protected, %.3f of %d "
            "not\n", on, seen_on, off, seen_off);
    ck_assert_int_ge(seen_on, 60);
    ck_assert_msg(on >= off + 0.05, "protected %.3f, not %.3f", on, off);
}
END_TEST

static Suite *pipeline_suite(void)
{
    Suite *s = suite_create("pipeline");
    TCase *tc = tcase_create("driver");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_reference_and_warmup);
    tcase_add_test(tc, test_repeated_frame_says_so);
    tcase_add_test(tc, test_truncated_counter);
    tcase_add_test(tc, test_failures_and_slew);
    tcase_add_test(tc, test_geometry_change_and_bad_frames);
    tcase_add_test(tc, test_rereference);
    tcase_add_test(tc, test_mean_reference);
    tcase_add_test(tc, test_calibration_files_and_roi);
    tcase_add_test(tc, test_invalid_history_reweighted);
    tcase_add_test(tc, test_calibration_bias_dark_overscan);
    tcase_add_test(tc, test_trimsec_past_naxis_keeps_history);
    tcase_add_test(tc, test_fixed_roi_varying_raw_size);
    tcase_add_test(tc, test_radec);
    tcase_add_test(tc, test_start_finish);
    tcase_add_test(tc, test_reset_tracks_pending_first);
    tcase_add_loop_test(tc, test_backend_plan_agrees, 0, 2);
    tcase_add_test(tc, test_outputs_in_chain);
    suite_add_tcase(s, tc);
    TCase *q = tcase_create("quality");
    tcase_set_timeout(q, 900);
    tcase_add_loop_test(q, test_detection_quality, 0, 2);
    tcase_add_loop_test(q, test_slow_movers_leave_history, 0, 3);
    tcase_add_test(q, test_slow_tracks_clean_history);
    tcase_add_test(q, test_warmup_protects_slow_movers);
    tcase_add_test(q, test_tracks_in_chain);
    tcase_add_test(q, test_photometry_in_chain);
    suite_add_tcase(s, q);
    return s;
}

int main(void)
{
    return ss_run_suite(pipeline_suite());
}
