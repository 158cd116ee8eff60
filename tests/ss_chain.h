/*
 * ss_chain.h — a synthetic sequence through the CPU pipeline, scored
 * against the generator's truth: frames with a residual, movers found,
 * non-cosmic false alarms. Shared by the suites that show a stage's effect
 * on the whole chain (check_guided, check_modelvar). Header-only (static
 * functions); needs check.h, config/config.h, pipeline/pipeline.h and
 * tools/synth.h before it.
 */
#ifndef SS_CHAIN_H
#define SS_CHAIN_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A detection matches a true object when within this many px of it. */
#define MATCH_PX 3.0

typedef struct chain_score {
    int frames;             /* frames with a residual */
    int mover_seen;         /* true mover instances that were detected */
    int mover_total;        /* true mover instances (in frames with a residual) */
    int false_alarms;       /* positive detections, not cosmic, matching no true object */
    double beta_max;        /* the largest model-error β fitted (noise.model_error) */
} chain_score_t;

/* One ok frame's truth against its detections, into sc. */
static void chain_score_frame(const ss_synth_truth_t *truth, const ss_result_t *res,
                              chain_score_t *sc)
{
    sc->frames++;
    sc->beta_max = fmax(sc->beta_max, (double)res->model_beta);
    for (int o = 0; o < truth->n_obj; o++) {
        if (truth->obj[o].kind != SS_SYNTH_MOVER)
            continue;
        sc->mover_total++;
        for (int d = 0; d < res->dets.count; d++) {
            const ss_detection_t *det = &res->dets.items[d];
            if (det->sign > 0 &&
                hypot(det->x - truth->obj[o].x, det->y - truth->obj[o].y) <= MATCH_PX) {
                sc->mover_seen++;
                break;
            }
        }
    }
    for (int d = 0; d < res->dets.count; d++) {
        const ss_detection_t *det = &res->dets.items[d];
        if (det->sign < 0 || det->kind == SS_KIND_COSMIC)
            continue;
        int matched = 0;
        for (int o = 0; o < truth->n_obj && !matched; o++)
            matched = hypot(det->x - truth->obj[o].x, det->y - truth->obj[o].y) <= MATCH_PX;
        sc->false_alarms += !matched;
    }
}

/* frames frames of the generator c through a CPU pipeline of config pc,
 * scored into sc (zeroed first). */
static void chain_score_run(const ss_synth_cfg_t *c, const ss_pipeline_cfg_t *pc, int frames,
                            chain_score_t *sc)
{
    char err[256] = "";
    ss_synth_t *syn = ss_synth_new(c);
    ck_assert_ptr_nonnull(syn);
    ss_pipeline_t *pipe = ss_pipeline_new(pc, "chain-test", err, sizeof err);
    ck_assert_msg(pipe != NULL, "pipeline: %s", err);
    const size_t npix = (size_t)c->width * c->height;
    ss_frame_t f;
    memset(&f, 0, sizeof f);
    f.capacity = npix * ss_dtype_size(c->dtype);
    f.pixels = malloc(f.capacity);
    ss_result_t res;
    ck_assert_int_eq(ss_result_init(&res, npix, 4000), 0);
    ss_synth_truth_t truth;
    memset(sc, 0, sizeof *sc);
    for (int t = 0; t < frames; t++) {
        ck_assert_int_eq(ss_synth_next(syn, &f, &truth), SS_OK);
        ck_assert_int_eq(ss_pipeline_process(pipe, &f, &res), SS_OK);
        if (res.status == SS_STATUS_OK)
            chain_score_frame(&truth, &res, sc);
    }
    ss_result_free(&res);
    free(f.pixels);
    ss_pipeline_destroy(&pipe);
    ss_synth_destroy(&syn);
}

#endif
