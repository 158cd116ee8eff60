/*
 * pipeline.c — the backend-neutral driver of one feed (ALGORITHM.md §1–7
 * policy): geometry, reference and re-reference, the history ring and its
 * shifts, the weights (solved here, on the host), failures and slews.
 * Pixel work goes through the backend's ops table.
 *
 * History ring: hist[0] is the newest frame. Each entry remembers the
 * backend slot holding its pixels and its shift against the current
 * reference; a frame's shift is computed once, when it arrives, and only
 * re-expressed (never re-measured) when the reference changes.
 */
#include "pipeline.h"
#include "half_core.h"
#include "plan_core.h"

#include "frame_fits.h"
#include "slow_movers.h"
#include "wcs.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define TAG "pipeline"
#define REF_CHECK_STRIDE 8          /* sampling of the "has valid pixels" check */
#define MIN_REGION 16               /* px: smaller processed regions are refused */

/* The calibration masters, in the order they are read and cropped. */
enum { CAL_DARK = 0, CAL_FLAT, CAL_BAD, CAL_BIAS, CAL_N };
static const char *const cal_what[CAL_N] = { "dark", "flat", "bad_pixels", "bias" };

#define SLOW_TRACKS 64              /* slow movers remembered while the history holds them */
#define SLOW_KEEP 0.5               /* a take-out stays when this share of the fit's gain shows */
#define SLOW_NEAR 3.0               /* px: a detection this near a known slow mover is it */
#define CLEAN_TRACKS 64             /* confirmed slow tracks whose stored frames are cleaned */
#define CLEAN_SPREAD 0.5            /* px: a stored frame is cleaned along a track once the
                                     * track's position there is known this well (1 σ) */
#define REMOVED_CAP 256             /* positive detections remembered per stored frame */

typedef struct hist_entry {
    int slot;
    double sx, sy;
    uint64_t seq;                   /* stats.processed when it was stored */
    int screened;                   /* stored with object removal: movers already out */
    double mjd;                     /* its mid-exposure MJD (NAN: not timed) */
    long tframe;                    /* its number as the tracker counts frames */
    int n_removed;                  /* its removed detections (p->removed, by slot); -1:
                                     * more than REMOVED_CAP, so any place may be */
} hist_entry_t;

/* A confirmed slow track whose stored frames are cleaned along it: the
 * flux and sigma of its last fit, and the stored frames (by seq) already
 * handled for it (cleaned, or stored with it removed). */
typedef struct clean_track {
    uint64_t id;
    int fitted;
    double flux, sigma;
    int n_done;
    uint64_t done[SS_MAX_HISTORY];
} clean_track_t;

struct ss_pipeline {
    ss_pipeline_cfg_t cfg;          /* as configured */
    ss_pipeline_cfg_t bcfg;         /* what the backend reads: cfg with the values fitted
                                     * to the frame size (registration levels) */
    int levels;                     /* the registration levels in use (bcfg.reg_levels) */
    char feed[SS_NAME_MAX];
    const ss_backend_ops_t *ops;
    ss_backend_t *be;
    ss_geometry_t geo;

    /* calibration masters as read (raw-sized or trimmed), their sizes and
     * headers (CAL_*) */
    float *cal[CAL_N];
    int cal_w[CAL_N], cal_h[CAL_N];
    ss_fits_master_t cal_info[CAL_N];
    /* per-frame calibration on the host: the overscan of each processed
     * row (geo.roi.h, sized at build) and the BIASSEC samples (grown only
     * when a larger BIASSEC arrives) */
    double *row_bias;
    double *os_scratch;
    size_t os_cap;
    int warned_overscan, warned_dark_unknown, warned_dark_bias;  /* one warning each */
    int slack_logged;               /* the geometry-slack line of this geometry is out */

    int have_ref;
    int fail_run;                   /* registration failures in a row */
    /* the mean reference (registration.reference_frames = M > 1): sums of
     * the aligned filtered frames and per-pixel counts, until M are in */
    double *ref_sum;
    uint16_t *ref_cnt;
    float *ref_buf;
    int ref_n;                      /* frames summed so far */
    int ref_done;                   /* the mean is in place (until the next reset) */
    float sigma_prev;               /* last noise estimate (guided-filter ε) */
    int backend_plan;               /* let the backend plan predictions where it can
                                     * (ss_pipeline_set_backend_plan) */
    /* the bilinear-resampling bias of the fine step, per axis, from the
     * current reference (ss_interp_bias), and the host copy it is
     * computed from */
    double kappa_x, kappa_y;
    float *ref_host;
    int n_hist;
    hist_entry_t hist[SS_MAX_HISTORY];
    /* slow movers taken out of the history: reference coordinates at
     * stats.processed == seq, px per frame (only while unscreened
     * frames remain; cleared with the history) */
    struct slow_track { double x, y, vx, vy; uint64_t seq; } slow[SLOW_TRACKS];
    int n_slow;
    /* confirmed slow tracks cleaned out of the stored frames (clean_tracks),
     * the detections each slot's frame was stored without (dilated
     * bounding boxes x0, y0, x1, y1, processed px; REMOVED_CAP per slot),
     * and a host copy of this frame's RESIDUAL plane for their fits */
    clean_track_t clean[CLEAN_TRACKS];
    int n_clean;
    float (*removed)[4];
    float *res_host;
    ss_outputs_t out;               /* what results carry (ss_pipeline_set_outputs) */
    ss_reweight_t rw;               /* this frame's poly re-weighting block (compute_weights) */
    int free_slots[SS_MAX_HISTORY];
    int n_free;

    /* tracking (track.h): the registered frame is the current reference's
     * pixels plus ref_off (the re-references since the last reset), so that
     * tracks run on through re-references; track_lost: end them at the
     * next frame (a reset between frames) */
    ss_tracker_t *tracker;
    ss_phot_zp_t fitted_zp;     /* ss_pipeline_set_zeropoint; source NONE when none */
    double ref_off_x, ref_off_y;
    int track_lost;

    /* a plate solution for frames without a WCS (ss_pipeline_set_sky):
     * valid for sky_epoch (the reset count; a rebuild too), made on a
     * frame registered at (sky_off_x, sky_off_y) */
    uint64_t sky_epoch;
    int have_sky;
    double sky_off_x, sky_off_y;
    int sky_n;
    ss_wcs_key_t sky_keys[SS_WCS_MAX];

    ss_pipeline_stats_t stats;
    /* results whose residual is still arriving (ss_pipeline_start) */
    ss_result_t *inflight[SS_PIPELINE_INFLIGHT];
    int n_inflight;
    /* the result whose tracking is still to run (tracks_pending; post_run) */
    ss_result_t *post_res;
};

const char *ss_status_name(ss_frame_status_t s)
{
    static const char *const names[SS_STATUS__COUNT] = {
        "ok", "reference", "warmup", "regfail", "error",
    };
    return (unsigned)s < SS_STATUS__COUNT ? names[s] : "?";
}

int ss_result_init(ss_result_t *r, size_t max_pixels, int max_dets)
{
    return ss_result_init_with(r, max_pixels, max_dets, NULL);
}

int ss_result_init_with(ss_result_t *r, size_t max_pixels, int max_dets,
                        const ss_host_allocator_t *alloc)
{
    memset(r, 0, sizeof *r);
    if (alloc && alloc->alloc) {
        r->residual_alloc = *alloc;
        r->residual = alloc->alloc(max_pixels * sizeof(float), alloc->user);
        r->residual16 = alloc->alloc(max_pixels * sizeof(uint16_t), alloc->user);
        r->stamps.pixels = alloc->alloc(SS_STAMP_PIXELS_MAX * sizeof(float), alloc->user);
    } else {
        r->residual = malloc(max_pixels * sizeof(float));
        r->residual16 = malloc(max_pixels * sizeof(uint16_t));
        r->stamps.pixels = malloc(SS_STAMP_PIXELS_MAX * sizeof(float));
    }
    if (!r->residual || !r->residual16 || !r->stamps.pixels ||
        ss_detlist_init(&r->dets, max_dets) != 0 ||
        ss_tracklist_init(&r->tracks, ss_track_reports_max(max_dets)) != 0) {
        ss_result_free(r);
        return -1;
    }
    r->residual_capacity = max_pixels;
    r->sigma = NAN;
    return 0;
}

void ss_result_free(ss_result_t *r)
{
    if (!r)
        return;
    void *bufs[3] = { r->residual, r->residual16, r->stamps.pixels };
    for (int i = 0; i < 3; i++) {
        if (r->residual_alloc.free && bufs[i])
            r->residual_alloc.free(bufs[i], r->residual_alloc.user);
        else
            free(bufs[i]);
    }
    r->residual = NULL;
    r->residual16 = NULL;
    r->stamps.pixels = NULL;
    r->residual_capacity = 0;
    ss_detlist_free(&r->dets);
    ss_tracklist_free(&r->tracks);
}

/* ---- calibration files ------------------------------------------------ */

static void free_ref_mean(ss_pipeline_t *p)
{
    free(p->ref_sum);
    free(p->ref_cnt);
    free(p->ref_buf);
    free(p->ref_host);
    free(p->res_host);
    p->res_host = NULL;
    p->ref_sum = NULL;
    p->ref_cnt = NULL;
    p->ref_buf = NULL;
    p->ref_host = NULL;
    p->ref_n = 0;
    p->ref_done = 0;
}

static void free_calibration(ss_pipeline_t *p)
{
    for (int i = 0; i < CAL_N; i++) {
        free(p->cal[i]);
        p->cal[i] = NULL;
    }
    free(p->row_bias);
    free(p->os_scratch);
    p->row_bias = NULL;
    p->os_scratch = NULL;
    p->os_cap = 0;
}

/* The file configured for master i ("" = none). */
static const char *cfg_cal_path(const ss_pipeline_cfg_t *c, int i)
{
    const char *paths[CAL_N] = { c->dark, c->flat, c->bad_pixels, c->bias };
    return paths[i];
}

static const char *cal_path(const ss_pipeline_t *p, int i)
{
    return cfg_cal_path(&p->cfg, i);
}

static int load_calibration(ss_pipeline_t *p, char *err, size_t n)
{
    for (int i = 0; i < CAL_N; i++) {
        if (!cal_path(p, i)[0])
            continue;
        char e[400];
        if (ss_fits_read_master(cal_path(p, i), &p->cal[i], &p->cal_w[i], &p->cal_h[i],
                                &p->cal_info[i], e, sizeof e) != SS_OK) {
            snprintf(err, n, "%s: %s", cal_what[i], e);
            free_calibration(p);
            return -1;
        }
    }
    return 0;
}

int ss_pipeline_check_calibration(const ss_pipeline_cfg_t *cfg, ss_roi_t region, char *err,
                                  size_t n)
{
    const ss_roi_t r = cfg->roi_w > 0 && cfg->roi_h > 0
                           ? (ss_roi_t){ cfg->roi_x, cfg->roi_y, cfg->roi_w, cfg->roi_h }
                           : region;
    for (int i = 0; i < CAL_N; i++) {
        const char *path = cfg_cal_path(cfg, i);
        if (!path[0])
            continue;
        float *px = NULL;
        int w, h, ox, oy;
        ss_fits_master_t info;
        char e[400];
        if (ss_fits_read_master(path, &px, &w, &h, &info, e, sizeof e) != SS_OK) {
            snprintf(err, n, "pipeline.%s: %s", cal_what[i], e);
            return -1;
        }
        free(px);
        if (r.w > 0 && r.h > 0 && !ss_fits_master_place(&info, w, h, r.x, r.y, r.w, r.h, &ox, &oy)) {
            snprintf(err, n, "pipeline.%s: %s is %dx%d and does not hold the processed region "
                     "[%d,%d %dx%d]%s", cal_what[i], path, w, h, r.x, r.y, r.w, r.h,
                     cfg->roi_w > 0 && cfg->roi_h > 0 ? " (pipeline.roi)" : " (of the last frame)");
            return -1;
        }
    }
    return 0;
}

/* ---- history bookkeeping ---------------------------------------------- */

static ss_err_t post_run(ss_pipeline_t *p);

static void history_clear(ss_pipeline_t *p)
{
    p->n_hist = 0;
    p->n_slow = 0;
    p->n_clean = 0;
    p->n_free = 0;
    for (int i = p->cfg.history - 1; i >= 0; i--)
        p->free_slots[p->n_free++] = i;
}

static void reset_state(ss_pipeline_t *p)
{
    p->have_ref = 0;
    p->fail_run = 0;
    p->ref_n = 0;
    p->ref_done = 0;
    p->ref_off_x = p->ref_off_y = 0.0;
    p->track_lost = 1;
    p->sky_epoch++;             /* a solution of the old pointing is no more */
    p->have_sky = 0;
    history_clear(p);
}

void ss_pipeline_reset(ss_pipeline_t *p, const char *why)
{
    (void)post_run(p);                  /* the last frame tracked on the old history */
    SS_LOG(SS_LOG_NOTICE, TAG, "feed %s: history reset (%s)", p->feed, why ? why : "requested");
    reset_state(p);
    p->stats.resets++;
}

/* Insert the current frame's slot at the head of the ring. */
static void history_push(ss_pipeline_t *p, int slot, double sx, double sy, int screened)
{
    int keep = SS_MIN(p->n_hist, p->cfg.history - 1);
    memmove(&p->hist[1], &p->hist[0], (size_t)keep * sizeof p->hist[0]);
    p->hist[0] = (hist_entry_t){ .slot = slot, .sx = sx, .sy = sy, .seq = p->stats.processed,
                                 .screened = screened, .mjd = NAN };
    p->n_hist = keep + 1;
}

/* The slot the next stored frame goes to: a free one, else the oldest. */
static int history_next_slot(ss_pipeline_t *p)
{
    if (p->n_free > 0)
        return p->free_slots[--p->n_free];
    return p->hist[p->n_hist - 1].slot;
}

/* ---- residuals in flight ----------------------------------------------- */

/* A result that start returned fails after all (error e, reason why): it
 * becomes an ERROR without its residual and detections, the counters
 * corrected when start had counted it. Returns the error for finish. */
static ss_err_t late_failure(ss_pipeline_t *p, ss_result_t *res, int counted, ss_err_t e,
                             const char *why)
{
    if (counted) {
        p->stats.status[res->status]--;
        p->stats.detections -= (uint64_t)res->dets.count;
        p->stats.detections_truncated -= (uint64_t)res->dets.truncated;
        p->stats.status[SS_STATUS_ERROR]++;
    }
    res->status = SS_STATUS_ERROR;
    res->has_residual = res->has_residual16 = res->has_stamps = 0;
    snprintf(res->reason, sizeof res->reason, "%s: %s", why, ss_strerror(e));
    ss_detlist_clear(&res->dets);
    SS_LOG(SS_LOG_WARNING, TAG, "feed %s: frame %llu failed: %s", p->feed,
           (unsigned long long)res->meta.seq, res->reason);
    return e == SS_ERR_BROKEN ? SS_ERR_BROKEN : SS_ERR_BACKEND;
}

/* Wait for res's residual download and take it off the in-flight list.
 * On failure the result becomes an ERROR (counters corrected). */
static ss_err_t settle(ss_pipeline_t *p, ss_result_t *res, int counted)
{
    if (!res->residual_pending)
        return SS_OK;
    for (int i = 0; i < p->n_inflight; i++)
        if (p->inflight[i] == res) {
            p->inflight[i] = p->inflight[--p->n_inflight];
            break;
        }
    res->residual_pending = 0;
    ss_err_t e = p->be ? p->ops->read_wait(p->be, res->residual_ticket) : SS_ERR_BACKEND;
    if (e == SS_OK)
        return SS_OK;
    return late_failure(p, res, counted, e, "residual download");
}

static void track(ss_pipeline_t *p, ss_result_t *res);
static ss_err_t clean_tracks(ss_pipeline_t *p, ss_result_t *res);

/* The tracking that start left pending (post_res, tracks_pending): the
 * tracker's step and the slow tracks' cleaning of the stored frames, in
 * frame order and before anything that changes what they read. A failed
 * cleaning fails that frame (late_failure) and is returned. */
static ss_err_t post_run(ss_pipeline_t *p)
{
    ss_result_t *res = p->post_res;
    if (!res)
        return SS_OK;
    p->post_res = NULL;
    res->tracks_pending = 0;
    const double t0 = ss_now_mono();
    track(p, res);
    const ss_err_t e = clean_tracks(p, res);
    res->track_ms = (ss_now_mono() - t0) * 1e3;
    res->total_ms += res->track_ms;
    return e == SS_OK ? SS_OK : late_failure(p, res, 1, e, "cleaning the stored frames");
}

/* Before the backend goes (rebuild, reconfigure, destroy). */
static void settle_all(ss_pipeline_t *p)
{
    (void)post_run(p);
    while (p->n_inflight > 0)
        (void)settle(p, p->inflight[p->n_inflight - 1], 1);
}

/* ---- lifecycle -------------------------------------------------------- */

ss_pipeline_t *ss_pipeline_new(const ss_pipeline_cfg_t *cfg, const char *feed, char *err,
                               size_t err_len)
{
    if (cfg->history < 1 || cfg->history > SS_MAX_HISTORY) {
        snprintf(err, err_len, "history must be 1..%d", SS_MAX_HISTORY);
        return NULL;
    }
    ss_pipeline_t *p = calloc(1, sizeof *p);
    if (!p) {
        snprintf(err, err_len, "out of memory");
        return NULL;
    }
    p->cfg = *cfg;
    p->out = ss_outputs_default();
    ss_strlcpy(p->feed, feed ? feed : "", sizeof p->feed);
    p->ops = ss_backend_select(cfg->backend, cfg->device, err, err_len);
    if (!p->ops || load_calibration(p, err, err_len) != 0) {
        free(p);
        return NULL;
    }
    p->removed = malloc((size_t)SS_MAX(cfg->history, 1) * REMOVED_CAP * sizeof p->removed[0]);
    if (!p->removed || !(p->tracker = ss_tracker_new(&cfg->track))) {
        snprintf(err, err_len, "out of memory (tracker)");
        free(p->removed);
        free_calibration(p);
        free(p);
        return NULL;
    }
    p->sigma_prev = NAN;
    p->backend_plan = 1;
    reset_state(p);
    SS_LOG(SS_LOG_INFO, TAG, "feed %s: backend %s, history %d", p->feed, p->ops->name,
           cfg->history);
    return p;
}

void ss_pipeline_destroy(ss_pipeline_t **pp)
{
    if (!pp || !*pp)
        return;
    ss_pipeline_t *p = *pp;
    settle_all(p);
    if (p->be)
        p->ops->destroy(&p->be);
    free_calibration(p);
    free_ref_mean(p);
    free(p->removed);
    ss_tracker_destroy(&p->tracker);
    free(p);
    *pp = NULL;
}

/* Crop region r (in the master's own pixels) out of a master w pixels
 * wide (into a malloc'ed copy). */
static float *crop(const float *src, int w, ss_roi_t r)
{
    float *out = malloc((size_t)r.w * (size_t)r.h * sizeof(float));
    if (!out)
        return NULL;
    for (int y = 0; y < r.h; y++)
        memcpy(out + (size_t)y * r.w, src + (size_t)(y + r.y) * w + r.x,
               (size_t)r.w * sizeof(float));
    return out;
}

/* Master i cropped to the geometry's region (*out malloc'ed; where it
 * lies: ss_fits_master_place), or an error naming the file, its size, the
 * frame's and the region. */
static ss_err_t master_for(const ss_pipeline_t *p, int i, const ss_geometry_t *geo, int frame_w,
                           int frame_h, float **out, char *err, size_t n)
{
    const ss_roi_t r = geo->roi;
    const int cw = p->cal_w[i], ch = p->cal_h[i];
    int ox, oy;
    if (!ss_fits_master_place(&p->cal_info[i], cw, ch, r.x, r.y, r.w, r.h, &ox, &oy)) {
        char at[64] = "";
        if (ox || oy)
            snprintf(at, sizeof at, ", the master at raw [%d,%d]", ox, oy);
        snprintf(err, n, "%s frame is %dx%d but frames are %dx%d (%s; it must hold the processed "
                 "region [%d,%d %dx%d]%s)", cal_what[i], cw, ch, frame_w, frame_h, cal_path(p, i),
                 r.x, r.y, r.w, r.h, at);
        return SS_ERR_SIZE;
    }
    if (!p->cal_info[i].has_origin && (ox || oy || cw != r.w || ch != r.h) &&
        (cw != frame_w || ch != frame_h))
        SS_LOG(SS_LOG_NOTICE, TAG, "feed %s: %s frame is %dx%d, frames %dx%d: used in raw pixel "
               "coordinates (it holds the processed region [%d,%d %dx%d])", p->feed, cal_what[i],
               cw, ch, frame_w, frame_h, r.x, r.y, r.w, r.h);
    *out = crop(p->cal[i], cw, (ss_roi_t){ r.x - ox, r.y - oy, r.w, r.h });
    return *out ? SS_OK : SS_ERR_NOMEM;
}

/* Registration levels for a frame size: the configured L, or fewer when
 * the coarsest level would be under SS_COARSE_MIN_LEVEL px on a side (too
 * few stars left to vote, and the search range R binned px a large part of
 * the frame: at the default R = 16 a 128² frame is searched ±32 px at
 * L = 1, a quarter of its side; binning stays where it can, it lifts
 * faint stars above the peak threshold). */
static int fit_levels(const ss_pipeline_cfg_t *c, int w, int h)
{
    int L = c->reg_levels;
    while (L > 0 && SS_MIN(w >> L, h >> L) < SS_COARSE_MIN_LEVEL)
        L--;
    return L;
}

/* Make the backend instance for a new geometry. Runs at start and when
 * the processed region changes (frame_w×frame_h: the frame that asks for
 * it, for the messages): allocation is fine here, not per frame. */
static ss_err_t build_backend(ss_pipeline_t *p, const ss_geometry_t *geo, int frame_w,
                              int frame_h, char *err, size_t n)
{
    settle_all(p);
    if (p->be)
        p->ops->destroy(&p->be);
    float *roi_cal[CAL_N] = { NULL };
    uint8_t *bad = NULL;
    ss_err_t e = SS_OK;
    for (int i = 0; i < CAL_N; i++)
        if (p->cal[i] && (e = master_for(p, i, geo, frame_w, frame_h, &roi_cal[i], err, n)))
            goto out;
    size_t npix = (size_t)geo->roi.w * (size_t)geo->roi.h;
    if (roi_cal[CAL_BAD]) {
        if (!(bad = malloc(npix))) {
            e = SS_ERR_NOMEM;
            goto out;
        }
        for (size_t i = 0; i < npix; i++)
            bad[i] = roi_cal[CAL_BAD][i] != 0.0f;
    }
    free_ref_mean(p);
    if (!(p->ref_host = malloc(npix * sizeof(float))) ||
        !(p->res_host = malloc(npix * sizeof(float)))) {
        e = SS_ERR_NOMEM;
        goto out;
    }
    if (p->cfg.ref_frames > 1) {
        p->ref_sum = malloc(npix * sizeof(double));
        p->ref_cnt = malloc(npix * sizeof(uint16_t));
        p->ref_buf = malloc(npix * sizeof(float));
        if (!p->ref_sum || !p->ref_cnt || !p->ref_buf) {
            e = SS_ERR_NOMEM;
            goto out;
        }
    }
    free(p->row_bias);
    if (!(p->row_bias = malloc((size_t)geo->roi.h * sizeof(double)))) {
        e = SS_ERR_NOMEM;
        goto out;
    }
    ss_calib_data_t cd = { roi_cal[CAL_DARK], roi_cal[CAL_FLAT], bad, roi_cal[CAL_BIAS] };
    p->geo = *geo;
    p->slack_logged = 0;
    p->levels = fit_levels(&p->cfg, geo->roi.w, geo->roi.h);
    if (p->levels != p->cfg.reg_levels)
        SS_LOG(SS_LOG_NOTICE, TAG,
               "feed %s: %dx%d frames: registration binned %d times, not %d (the block "
               "search must fit the coarsest level)", p->feed, geo->roi.w, geo->roi.h, p->levels,
               p->cfg.reg_levels);
    p->bcfg = p->cfg;
    p->bcfg.reg_levels = p->levels;
    e = p->ops->create(&p->bcfg, geo, &cd, &p->be);
    if (e != SS_OK)
        snprintf(err, n, "backend %s: cannot create for %dx%d: %s", p->ops->name, geo->roi.w,
                 geo->roi.h, ss_strerror(e));
out:
    for (int i = 0; i < CAL_N; i++)
        free(roi_cal[i]);
    free(bad);
    return e;
}

/* The region this frame asks to have processed: the configured roi, else
 * the frame's trim section (when honoured; the FITS reader clipped it to
 * the frame), else the whole frame; *held_w×*held_h of it, from its
 * origin, lie inside the frame. A configured roi may reach past a frame a
 * few rows or columns short by at most the geometry slack (the rest is
 * invalid), not more. */
static int frame_roi(const ss_pipeline_cfg_t *c, const ss_frame_t *f, ss_roi_t *roi, int *held_w,
                     int *held_h, char *err, size_t n)
{
    if (c->roi_w > 0 && c->roi_h > 0)
        *roi = (ss_roi_t){ c->roi_x, c->roi_y, c->roi_w, c->roi_h };
    else if (c->use_trimsec && f->meta.trim_w > 0 && f->meta.trim_h > 0)
        *roi = (ss_roi_t){ f->meta.trim_x0, f->meta.trim_y0, f->meta.trim_w, f->meta.trim_h };
    else
        *roi = (ss_roi_t){ 0, 0, f->width, f->height };
    *held_w = SS_MIN(roi->w, f->width - roi->x);
    *held_h = SS_MIN(roi->h, f->height - roi->y);
    const int slack = SS_MAX(c->geometry_slack, 0);
    if (roi->x < 0 || roi->y < 0 || *held_w < MIN_REGION || *held_h < MIN_REGION ||
        roi->w - *held_w > slack || roi->h - *held_h > slack || roi->w < MIN_REGION ||
        roi->h < MIN_REGION) {
        snprintf(err, n, "region [%d,%d %dx%d] does not fit a %dx%d frame (or is under %d px)",
                 roi->x, roi->y, roi->w, roi->h, f->width, f->height, MIN_REGION);
        return -1;
    }
    return 0;
}

static int calibrated(const ss_pipeline_t *p)
{
    return p->cal[CAL_DARK] || p->cal[CAL_FLAT] || p->cal[CAL_BIAS] ||
           p->cfg.overscan != SS_OVERSCAN_NONE;
}

/* A bias is removed (master or overscan): the dark is then taken to be
 * bias-free, and only then can it be scaled by the exposure time. */
static int bias_removed(const ss_pipeline_t *p)
{
    return p->cal[CAL_BIAS] || p->cfg.overscan != SS_OVERSCAN_NONE;
}

/* ---- geometry ------------------------------------------------------- */

/* What a frame's region and type do to the current geometry. */
typedef enum geo_fit {
    GEO_SAME,                   /* the same region and storage */
    GEO_SLACK,                  /* same origin and storage, size within the slack */
    GEO_NEW                     /* anything else: a new backend, the history reset */
} geo_fit_t;

static geo_fit_t geometry_fit(const ss_pipeline_t *p, const ss_geometry_t *g)
{
    const ss_geometry_t *c = &p->geo;
    if (!p->be || g->raw_dtype != c->raw_dtype || g->hist_dtype != c->hist_dtype ||
        g->history != c->history || g->roi.x != c->roi.x || g->roi.y != c->roi.y)
        return GEO_NEW;
    if (g->roi.w == c->roi.w && g->roi.h == c->roi.h)
        return GEO_SAME;
    const int slack = p->cfg.geometry_slack;
    if (slack > 0 && abs(g->roi.w - c->roi.w) <= slack && abs(g->roi.h - c->roi.h) <= slack)
        return GEO_SLACK;
    return GEO_NEW;
}

/* A frame within the slack of the current geometry (or one that holds
 * only part of a configured roi) is processed at it: *vw×*vh, the part it
 * holds, is trimmed to the geometry (the rest of the geometry is invalid,
 * the rest of the frame is not used). Logged once per geometry, counted
 * per frame. */
static void enter_slack(ss_pipeline_t *p, const ss_frame_t *f, ss_roi_t roi, int *vw, int *vh)
{
    *vw = SS_MIN(*vw, p->geo.roi.w);
    *vh = SS_MIN(*vh, p->geo.roi.h);
    p->stats.slack_frames++;
    if (p->slack_logged)
        return;
    p->slack_logged = 1;
    char what[96];
    if (roi.w != p->geo.roi.w || roi.h != p->geo.roi.h)
        snprintf(what, sizeof what, "asks for region [%d,%d %dx%d]", roi.x, roi.y, roi.w, roi.h);
    else
        snprintf(what, sizeof what, "holds %dx%d of the region", *vw, *vh);
    SS_LOG(SS_LOG_NOTICE, TAG, "feed %s: frame %llu (%dx%d) %s, within %d px of the current "
           "[%d,%d %dx%d]: processed at the current size, the history kept (pixels the frame "
           "lacks are invalid; logged once, counted in the stats)", p->feed,
           (unsigned long long)f->meta.seq, f->width, f->height, what, p->cfg.geometry_slack,
           p->geo.roi.x, p->geo.roi.y, p->geo.roi.w, p->geo.roi.h);
}

/* Raw frames may be larger than any before (a fixed roi, a camera whose
 * height varies): the backend's raw buffers grow, the history stays. */
static ss_err_t reserve_raw(ss_pipeline_t *p, const ss_frame_t *f, char *err, size_t n)
{
    if (f->width <= p->geo.raw_w && f->height <= p->geo.raw_h)
        return SS_OK;
    const int slack = SS_MAX(p->cfg.geometry_slack, 0);
    const int w = SS_MAX(p->geo.raw_w, f->width + slack);
    const int h = SS_MAX(p->geo.raw_h, f->height + slack);
    if (p->ops->raw_reserve) {
        settle_all(p);
        ss_err_t e = p->ops->raw_reserve(p->be, w, h);
        if (e != SS_OK) {
            snprintf(err, n, "backend %s: no room for %dx%d raw frames: %s", p->ops->name, w, h,
                     ss_strerror(e));
            return e;
        }
        SS_LOG(SS_LOG_INFO, TAG, "feed %s: raw frames up to %dx%d (frame %llu is %dx%d); the "
               "history is kept", p->feed, w, h, (unsigned long long)f->meta.seq, f->width,
               f->height);
    }
    p->geo.raw_w = w;
    p->geo.raw_h = h;
    return SS_OK;
}

/* Settle the geometry for frame f (region roi, held_w×held_h of it in
 * the frame): keep it, keep it within the slack, or build a new backend
 * (history reset, logged). *vw×*vh: the part of the geometry's region the
 * frame holds. */
static ss_err_t settle_geometry(ss_pipeline_t *p, const ss_frame_t *f, ss_roi_t roi, int held_w,
                                int held_h, ss_result_t *res, int *vw, int *vh, char *err,
                                size_t n)
{
    const int slack = SS_MAX(p->cfg.geometry_slack, 0);
    ss_geometry_t geo = {
        .raw_w = f->width + slack, .raw_h = f->height + slack, .raw_dtype = f->dtype, .roi = roi,
        .hist_dtype = ss_history_dtype(f->dtype, calibrated(p)), .history = p->cfg.history,
    };
    *vw = held_w;
    *vh = held_h;
    const geo_fit_t fit = geometry_fit(p, &geo);
    if (fit != GEO_NEW) {
        /* a region within the slack, or a roi a short frame holds part of */
        if (fit == GEO_SLACK || held_w < p->geo.roi.w || held_h < p->geo.roi.h)
            enter_slack(p, f, roi, vw, vh);
        return reserve_raw(p, f, err, n);
    }
    if (p->be) {
        char why[200];
        snprintf(why, sizeof why, "frame geometry changed from [%d,%d %dx%d] %s to [%d,%d %dx%d] "
                 "%s (a %dx%d frame)", p->geo.roi.x, p->geo.roi.y, p->geo.roi.w, p->geo.roi.h,
                 ss_dtype_name(p->geo.raw_dtype), roi.x, roi.y, roi.w, roi.h,
                 ss_dtype_name(f->dtype), f->width, f->height);
        ss_pipeline_reset(p, why);
        res->history_reset = 1;
    }
    ss_err_t e = build_backend(p, &geo, f->width, f->height, err, n);
    if (e != SS_OK) {
        memset(&p->geo, 0, sizeof p->geo);
        return e;
    }
    reset_state(p);
    return SS_OK;
}

/* ---- per-frame calibration parameters -------------------------------- */

/* t / t_dark (ALGORITHM §1): the frame's exposure against the dark's. */
static double dark_scale(ss_pipeline_t *p, const ss_frame_t *f)
{
    if (!p->cal[CAL_DARK])
        return 1.0;
    const double t = f->meta.exposure, td = p->cal_info[CAL_DARK].exposure;
    if (!bias_removed(p)) {
        /* the dark holds the bias: scaling it would scale the bias too */
        if (t > 0.0 && td > 0.0 && t != td && !p->warned_dark_bias) {
            p->warned_dark_bias = 1;
            SS_LOG(SS_LOG_WARNING, TAG, "feed %s: frame exposure %g s, dark %g s, but no bias "
                   "is configured (pipeline.bias or pipeline.overscan): the dark holds the bias "
                   "and is used unscaled (warned once)", p->feed, t, td);
        }
        return 1.0;
    }
    if (t > 0.0 && td > 0.0)
        return t == td ? 1.0 : t / td;
    if (!p->warned_dark_unknown) {
        p->warned_dark_unknown = 1;
        SS_LOG(SS_LOG_WARNING, TAG, "feed %s: the exposure time of %s is unknown: the dark is "
               "used unscaled (warned once)", p->feed,
               td > 0.0 ? "the frames" : t > 0.0 ? "the dark (no EXPTIME/EXPOSURE)" : "both");
    }
    return 1.0;
}

/* The overscan of each processed row into p->row_bias (pipeline.overscan),
 * from the frame's BIASSEC on the host; *use = 0 when there is none. */
static ss_err_t overscan(ss_pipeline_t *p, const ss_frame_t *f, int *use, char *err, size_t n)
{
    *use = 0;
    const ss_frame_meta_t *m = &f->meta;
    if (p->cfg.overscan == SS_OVERSCAN_NONE)
        return SS_OK;
    if (m->bias_w <= 0 || m->bias_h <= 0) {
        if (!p->warned_overscan) {
            p->warned_overscan = 1;
            SS_LOG(SS_LOG_WARNING, TAG, "feed %s: pipeline.overscan is %s but frame %llu has no "
                   "BIASSEC: no overscan subtracted (warned once)", p->feed,
                   p->cfg.overscan == SS_OVERSCAN_ROW ? "row" : "scalar",
                   (unsigned long long)m->seq);
        }
        return SS_OK;
    }
    const size_t need = (size_t)m->bias_w * (size_t)m->bias_h;
    if (need > p->os_cap) {
        /* a larger BIASSEC than any before: not per frame */
        double *grown = realloc(p->os_scratch, need * sizeof(double));
        if (!grown)
            return SS_ERR_NOMEM;
        p->os_scratch = grown;
        p->os_cap = need;
    }
    const ss_roi_t bsec = { m->bias_x0, m->bias_y0, m->bias_w, m->bias_h };
    const int row = p->cfg.overscan == SS_OVERSCAN_ROW;
    const double sc = ss_overscan(f->pixels, f->dtype, f->width, f->height, f->valid, bsec,
                                  p->geo.roi.y, p->geo.roi.h, row ? p->row_bias : NULL,
                                  p->os_scratch);
    if (!isfinite(sc)) {
        snprintf(err, n, "overscan: BIASSEC [%d:%d,%d:%d] holds no valid pixel", bsec.x + 1,
                 bsec.x + bsec.w, bsec.y + 1, bsec.y + bsec.h);
        return SS_ERR_BACKEND;
    }
    if (!row)
        for (int y = 0; y < p->geo.roi.h; y++)
            p->row_bias[y] = sc;
    *use = 1;
    return SS_OK;
}

/* ---- one frame -------------------------------------------------------- */

static void result_begin(ss_result_t *res, const ss_frame_t *f)
{
    res->meta = f->meta;
    res->status = SS_STATUS_OK;
    res->reason[0] = '\0';
    res->track_ms = 0.0;
    memset(&res->coarse, 0, sizeof res->coarse);
    memset(&res->shift, 0, sizeof res->shift);
    res->rereferenced = 0;
    res->history_reset = 0;
    res->reg_known = 0;
    res->reg_x = res->reg_y = 0.0;
    res->sky_solved = 0;
    res->history_len = 0;
    res->sigma = NAN;
    res->model_beta = 0.0f;
    res->model_samples = 0;
    res->n_weights = 0;
    res->has_residual = res->has_residual16 = res->has_stamps = 0;
    res->stamps.count = res->stamps.truncated = 0;
    res->stamps.npix = 0;
    res->tracks.count = res->tracks.truncated = 0;
    res->tracks_pending = 0;
    ss_detlist_clear(&res->dets);
    for (int s = 0; s < SS_STAGE__COUNT; s++)
        res->stage_ms[s] = -1.0;
}

/* The detections' magnitudes (photometry.h): the zero point by its
 * precedence, the exposure from the frame; before the tracker, which
 * averages them per track. */
static void photometry(const ss_pipeline_t *p, ss_result_t *res)
{
    ss_phot_zp_choose(&res->zp, &p->cfg.phot, &res->meta, &p->fitted_zp);
    ss_phot_apply(&res->zp, res->meta.exposure, &res->dets);
}

void ss_pipeline_set_zeropoint(ss_pipeline_t *p, const ss_phot_zp_t *fitted)
{
    memset(&p->fitted_zp, 0, sizeof p->fitted_zp);
    if (fitted && fitted->source == SS_PHOT_FIT)
        p->fitted_zp = *fitted;
}

/* The frame's step of the tracker (track.h): an ok frame links its
 * detections, any other handled frame counts as a miss; after a reset the
 * tracks end first. Fills res->tracks and the detections' track ids. */
static void track(ss_pipeline_t *p, ss_result_t *res)
{
    res->tracks.count = res->tracks.truncated = 0;
    if (!p->cfg.track.enabled)
        return;
    if (p->track_lost) {
        ss_tracker_reset(p->tracker, &res->tracks);
        p->track_lost = 0;
    }
    const ss_frame_meta_t *m = &res->meta;
    double mjd = ss_frame_mid_mjd(m);
    int ok = res->status == SS_STATUS_OK && res->shift.ok;
    /* the registered frame: x + s against the current reference (its
     * earlier re-references in ref_off; a frame that re-referenced has
     * already added its own shift) */
    double ox = ok ? res->shift.sx + p->ref_off_x - (res->rereferenced ? res->shift.sx : 0.0) : 0.0;
    double oy = ok ? res->shift.sy + p->ref_off_y - (res->rereferenced ? res->shift.sy : 0.0) : 0.0;
    ss_tracklist_t keep = res->tracks;      /* the ended reports of a reset stay */
    res->tracks.items += keep.count;
    res->tracks.capacity -= keep.count;
    ss_track_frame_t tf = { m->seq, mjd, ox, oy, (double)res->width * res->height };
    if (ss_tracker_frame(p->tracker, &tf, ok ? &res->dets : NULL, &res->tracks) != 0)
        SS_LOG(SS_LOG_WARNING, TAG, "feed %s: tracker out of memory: tracks ended", p->feed);
    res->tracks.items -= keep.count;
    res->tracks.capacity += keep.count;
    res->tracks.count += keep.count;
    res->tracks.truncated += keep.truncated;
}

static ss_err_t fail_frame(ss_pipeline_t *p, ss_result_t *res, ss_err_t e, const char *why)
{
    (void)post_run(p);                  /* the frame before, tracked first */
    if (res->residual_pending)          /* a later step failed: the copy is of no use */
        (void)settle(p, res, 0);
    res->has_residual = res->has_residual16 = res->has_stamps = 0;
    res->status = SS_STATUS_ERROR;
    ss_strlcpy(res->reason, why, sizeof res->reason);
    p->stats.status[SS_STATUS_ERROR]++;
    SS_LOG(SS_LOG_WARNING, TAG, "feed %s: frame %llu failed: %s", p->feed,
           (unsigned long long)res->meta.seq, why);
    if (e == SS_ERR_BROKEN)
        SS_LOG(SS_LOG_ERR, TAG, "feed %s: backend %s is broken", p->feed, p->ops->name);
    return e == SS_ERR_BROKEN ? SS_ERR_BROKEN : e == SS_ERR_SIZE ? SS_ERR_SIZE : SS_ERR_BACKEND;
}

#define TRY(call)                                                                   \
    do {                                                                            \
        ss_err_t e_ = (call);                                                       \
        if (e_ != SS_OK) {                                                          \
            char w_[160];                                                           \
            snprintf(w_, sizeof w_, "%s: %s", #call, ss_strerror(e_));             \
            return fail_frame(p, res, e_, w_);                                      \
        }                                                                           \
    } while (0)

/* For the n newest history frames: d[k] = λ^k (whiten.forget, as the
 * running product), and rho[k] the share of the matched-filter peak of a
 * point mover at object_removal.protect_speed that its copy in frame k
 * takes, exp(−(v·τ_k)²/(4σ²)) for a frame stored without object removal
 * (τ_k processed frames ago), 0 otherwise. Returns whether any rho is
 * above 0. */
static int copy_overlap(const ss_pipeline_t *p, int n, double *d, double *rho)
{
    const double v = p->cfg.protect_speed, s = p->cfg.psf_sigma;
    int any = 0;
    double dk = 1.0;
    for (int k = 0; k < n; k++) {
        const double dist = v * (double)(p->stats.processed - p->hist[k].seq);
        d[k] = dk;
        dk *= p->cfg.forget;
        rho[k] = v > 0.0 && !p->hist[k].screened ? exp(-dist * dist / (4.0 * s * s)) : 0.0;
        any |= rho[k] > 0.0;
    }
    return any;
}

/* §2: the coarse step, then the fine one from its result (the backend's
 * register_frame where it has one: the same results in fewer round trips). */
static ss_err_t register_frame(ss_pipeline_t *p, ss_coarse_t *c, ss_shift_t *s)
{
    if (p->ops->register_frame)
        return p->ops->register_frame(p->be, c, s);
    ss_err_t e = p->ops->register_coarse(p->be, c);
    if (e == SS_OK && c->ok)
        e = p->ops->register_fine(p->be, c->dx, c->dy, s);
    return e;
}

/* Weights for the n newest history frames against the current shift;
 * fills slots/offsets for the backend, and in poly mode *rw with the
 * re-weighting block for pixels with invalid history (NULL in lsq mode:
 * strict there, README). */
static ss_err_t compute_weights(ss_pipeline_t *p, const ss_shift_t *s, int n, int *slots,
                                int *ix, int *iy, double *a, const ss_reweight_t **rw)
{
    *rw = NULL;
    double hsx[SS_MAX_HISTORY], hsy[SS_MAX_HISTORY], fx[SS_MAX_HISTORY], fy[SS_MAX_HISTORY];
    for (int k = 0; k < n; k++) {
        slots[k] = p->hist[k].slot;
        hsx[k] = p->hist[k].sx;
        hsy[k] = p->hist[k].sy;
    }
    ss_pc_offsets(s->sx, s->sy, hsx, hsy, n, ix, iy, fx, fy);
    if (p->cfg.mode == SS_WHITEN_LSQ) {
        double R[SS_MAX_HISTORY * SS_MAX_HISTORY], pv[SS_MAX_HISTORY];
        ss_err_t e = p->ops->lsq_moments(p->be, slots, ix, iy, n, R, pv);
        if (e != SS_OK)
            return e;
        if (ss_weights_lsq(R, pv, n, ss_cfg_gamma(&p->cfg), a) != 0)
            return SS_ERR_BACKEND;
        return SS_OK;
    }
    double d[SS_MAX_HISTORY], rho[SS_MAX_HISTORY];
    const int protect = copy_overlap(p, n, d, rho);
    if ((protect ? ss_weights_protect(fx, fy, d, rho, n, p->cfg.poly_degree,
                                      ss_cfg_gamma(&p->cfg), a)
                 : ss_weights_poly_d(fx, fy, d, n, p->cfg.poly_degree, ss_cfg_gamma(&p->cfg),
                                     a)) != 0 ||
        ss_reweight_init(&p->rw, fx, fy, n, p->cfg.poly_degree, ss_cfg_gamma(&p->cfg),
                         p->cfg.forget, ss_cfg_min_valid(&p->cfg, n)) != 0)
        return SS_ERR_BACKEND;
    *rw = &p->rw;
    return SS_OK;
}

/* The reference changed: its resampling bias (ss_interp_bias), from a
 * host copy (one read per reference, not per frame). */
static ss_err_t reference_bias(ss_pipeline_t *p)
{
    ss_err_t e = p->ops->read_plane(p->be, SS_PLANE_REFERENCE, 0, p->ref_host);
    if (e != SS_OK)
        return e;
    ss_interp_bias(p->ref_host, p->geo.roi.w, p->geo.roi.h, &p->kappa_x, &p->kappa_y);
    return SS_OK;
}

/* A new reference from the current frame. */
static ss_err_t new_reference(ss_pipeline_t *p)
{
    ss_err_t e = p->ops->set_reference(p->be);
    return e != SS_OK ? e : reference_bias(p);
}

/* The mean reference (ALGORITHM §2, "optionally the mean of the first M
 * aligned frames, for lower noise"): each good frame's filtered image,
 * aligned to the reference by bilinear resampling at its shift
 * (R(y) ≈ F(y - s); an integer alignment would displace the mean by the
 * average fractional shift), is summed per pixel over its valid values;
 * after M frames the mean becomes the reference (the backend rebuilds the
 * pyramid and gradients). Runs on the host through read/write_plane, only
 * for the first M frames after a start, reset or re-reference. */
static ss_err_t ref_mean_add(ss_pipeline_t *p, const ss_shift_t *s)
{
    const int w = p->geo.roi.w, h = p->geo.roi.h;
    const size_t npix = (size_t)w * (size_t)h;
    ss_err_t e = p->ops->read_plane(p->be, SS_PLANE_HIPASS, 0, p->ref_buf);
    if (e != SS_OK)
        return e;
    if (p->ref_n == 0) {
        memset(p->ref_sum, 0, npix * sizeof(double));
        memset(p->ref_cnt, 0, npix * sizeof(uint16_t));
    }
    const double ox = floor(-s->sx), oy = floor(-s->sy);
    const double fx = -s->sx - ox, fy = -s->sy - oy;
    const int ix = (int)ox, iy = (int)oy;
    const float *F = p->ref_buf;
    for (int y = 0; y < h; y++) {
        const int y0 = y + iy;
        if (y0 < 0 || y0 + 1 >= h)
            continue;
        for (int x = 0; x < w; x++) {
            const int x0 = x + ix;
            if (x0 < 0 || x0 + 1 >= w)
                continue;
            const size_t i = (size_t)y0 * w + x0;
            const double v = (1 - fy) * ((1 - fx) * F[i] + fx * F[i + 1]) +
                             fy * ((1 - fx) * F[i + w] + fx * F[i + w + 1]);
            if (isfinite(v)) {
                p->ref_sum[(size_t)y * w + x] += v;
                p->ref_cnt[(size_t)y * w + x]++;
            }
        }
    }
    if (++p->ref_n < p->cfg.ref_frames)
        return SS_OK;
    for (size_t i = 0; i < npix; i++)
        p->ref_buf[i] = p->ref_cnt[i] ? (float)(p->ref_sum[i] / p->ref_cnt[i]) : NAN;
    p->ref_n = 0;
    p->ref_done = 1;
    SS_LOG(SS_LOG_INFO, TAG, "feed %s: reference is the mean of %d frames", p->feed,
           p->cfg.ref_frames);
    e = p->ops->write_plane(p->be, SS_PLANE_REFERENCE, 0, p->ref_buf);
    return e != SS_OK ? e : reference_bias(p);
}

/* A registered frame: its offset in the registered frame (x + s against
 * the reference, plus the re-references since the last reset: what the
 * tracker uses), and, for a frame without a WCS of its own, the plate
 * solution's WCS carried over to it. A solution made on frame F (offset
 * o_F) gives frame G (offset o_G) the sky of F's pixel x + o_G - o_F at
 * its pixel x, i.e. F's WCS with CRPIX moved by -(o_G - o_F): the
 * distortion terms are relative to CRPIX and stay. Called before this
 * frame's own re-reference (ref_off holds the earlier ones only). */
static void sky_for_frame(const ss_pipeline_t *p, ss_result_t *res)
{
    const ss_shift_t *s = &res->shift;
    res->reg_known = 1;
    res->reg_x = s->sx + p->ref_off_x;
    res->reg_y = s->sy + p->ref_off_y;
    res->sky_epoch = p->sky_epoch;
    ss_frame_meta_t *m = &res->meta;
    if (!p->have_sky || m->n_wcs > 0)
        return;
    memcpy(m->wcs, p->sky_keys, sizeof p->sky_keys[0] * (size_t)p->sky_n);
    m->n_wcs = p->sky_n;
    for (int i = 0; i < m->n_wcs; i++) {
        ss_wcs_key_t *k = &m->wcs[i];
        if (!k->is_string && strcmp(k->key, "CRPIX1") == 0)
            k->dval -= res->reg_x - p->sky_off_x;
        else if (!k->is_string && strcmp(k->key, "CRPIX2") == 0)
            k->dval -= res->reg_y - p->sky_off_y;
    }
    res->sky_solved = 1;
}

int ss_pipeline_set_sky(ss_pipeline_t *p, const ss_wcs_key_t *keys, int n, uint64_t epoch,
                        double off_x, double off_y)
{
    if (epoch != p->sky_epoch || n < 0 || n > SS_WCS_MAX)
        return -1;
    if (n == 0) {
        p->have_sky = 0;
        return 0;
    }
    memcpy(p->sky_keys, keys, sizeof keys[0] * (size_t)n);
    p->sky_n = n;
    p->sky_off_x = off_x;
    p->sky_off_y = off_y;
    p->have_sky = 1;
    return 0;
}

uint64_t ss_pipeline_sky_epoch(const ss_pipeline_t *p)
{
    return p->sky_epoch;
}

/* Detections from processed-region coordinates to input-frame pixel
 * coordinates, with RA/Dec when the frame carries a celestial WCS (whose
 * CRPIX refers to the input frame). */
static void to_input_frame(ss_detlist_t *l, ss_roi_t roi, const ss_frame_meta_t *meta)
{
    if (l->count == 0)
        return;
    ss_wcs_t wcs;
    char why[160];
    int have_wcs = meta->n_wcs > 0 && ss_wcs_from_meta(&wcs, meta, why, sizeof why) == SS_OK;
    for (int i = 0; i < l->count; i++) {
        ss_detection_t *d = &l->items[i];
        d->x += roi.x, d->y += roi.y;
        d->x0 += roi.x, d->y0 += roi.y, d->x1 += roi.x, d->y1 += roi.y;
        d->peak_x += roi.x, d->peak_y += roi.y;
        d->bbox_x0 += roi.x, d->bbox_x1 += roi.x, d->bbox_y0 += roi.y, d->bbox_y1 += roi.y;
        d->has_radec = have_wcs && ss_wcs_pix2sky(&wcs, d->x, d->y, &d->ra, &d->dec) == 0;
    }
    if (have_wcs)
        ss_wcs_free(&wcs);
}

/* The guided filter's radius, ε (from the last σ) and source mask for a
 * prediction whose weights have the squared norm a2 (the mask: at the
 * detector's growth threshold, the guide's noise from the weights,
 * ss_gmask_t). Returns whether the mask is on. */
static int guided_setup(const ss_pipeline_t *p, double a2, int *radius, float *eps,
                        ss_gmask_t *gm)
{
    *radius = p->cfg.guided ? ss_cfg_guided_radius(&p->cfg) : 0;
    *eps = (float)(p->cfg.guided_eps * (double)p->sigma_prev * (double)p->sigma_prev);
    return *radius > 0 && p->cfg.guided_mask &&
           ss_gmask_init(gm, p->cfg.psf_sigma, p->cfg.thresh_low, (double)p->sigma_prev, a2,
                         *radius) == 0;
}

/* §4–§5 for the weights in res: prediction and residual, the guided
 * filter, and the noise of CLEAN, left with the backend as the frame's σ
 * (find, or frame_stats, brings it to res->sigma: NaN or 0 when no
 * residual pixel is valid, and the caller fails the frame). */
static ss_err_t predict(ss_pipeline_t *p, ss_result_t *res, const int *slots, const int *ix,
                        const int *iy, int n, const ss_reweight_t *rw)
{
    ss_err_t e = p->ops->whiten(p->be, slots, ix, iy, res->weights, n, rw);
    if (e == SS_OK && !isfinite(p->sigma_prev))
        e = p->ops->noise(p->be, SS_PLANE_RESIDUAL, p->cfg.noise_stride, &p->sigma_prev);
    if (e != SS_OK)
        return e;
    double a2 = 0.0;
    for (int k = 0; k < n; k++)
        a2 += res->weights[k] * res->weights[k];
    int radius;
    float eps;
    ss_gmask_t gm;
    const int masked = guided_setup(p, a2, &radius, &eps, &gm);
    if ((e = p->ops->guided(p->be, radius, eps, masked ? &gm : NULL)) != SS_OK)
        return e;
    return p->ops->noise(p->be, SS_PLANE_CLEAN, p->cfg.noise_stride, NULL);
}

/* The frame's σ, β and the model-error samples into res (after detect,
 * or waited for). */
static ss_err_t frame_stats(ss_pipeline_t *p, ss_result_t *res)
{
    float beta;
    int n;
    ss_err_t e = p->ops->frame_stats(p->be, &res->sigma, &beta, &n);
    res->model_beta = p->cfg.model_error ? beta : 0.0f;
    res->model_samples = p->cfg.model_error ? n : 0;
    return e;
}

/* Why a frame whose σ cannot scale an SNR map fails: no residual pixel
 * to measure it on, or σ = 0, which only a frame equal to its prediction
 * at most sampled pixels gives (a camera that re-sends one frame). */
static const char *sigma_why(float sigma)
{
    return sigma == 0.0f ? "residual noise is zero: the frame repeats its prediction "
                           "(a camera re-sending one frame?)"
                         : "no valid residual pixels (noise undefined)";
}

/* Whether σ can scale an SNR map (a frame without it fails). */
static int sigma_ok(float sigma)
{
    return isfinite(sigma) && sigma > 0.0f;
}

/* §6–§7: the matched filter, detection and streak merging into res->dets
 * (processed-region coordinates), with the frame's σ as predict left it
 * (no host round trip before the detection's) and res->sigma after. */
static ss_err_t find(ss_pipeline_t *p, ss_result_t *res)
{
    ss_err_t e = p->ops->matched(p->be, p->cfg.psf_sigma, p->cfg.mf_phases, SS_SIGMA_FRAME);
    if (e == SS_OK && p->cfg.model_error)
        e = p->ops->modelvar(p->be, ss_mv_radius(p->cfg.psf_sigma), p->cfg.psf_sigma,
                             SS_SIGMA_FRAME, p->cfg.noise_stride, (float)p->cfg.model_error_snr);
    if (e == SS_OK)
        e = p->ops->detect(p->be, SS_SIGMA_FRAME, &res->dets);
    if (e == SS_OK)
        e = frame_stats(p, res);
    if (e == SS_OK)
        ss_merge_streaks(&res->dets, p->cfg.streak_gap, fmax(3.0, 2.0 * p->cfg.psf_sigma));
    return e;
}

/* The n history frames of this prediction as the slow-mover fit sees them
 * (slow_movers.h): weights, ages in processed frames, fractional offsets,
 * and which were stored without object removal and weigh in. Returns how
 * many of those there are. */
static int unscreened_history(const ss_pipeline_t *p, const ss_result_t *res, int n,
                              const int *ix, const int *iy, ss_slow_hist_t *h)
{
    int m = 0;
    h->n = n;
    for (int k = 0; k < n; k++) {
        h->a[k] = res->weights[k];
        h->tau[k] = (double)(p->stats.processed - p->hist[k].seq);
        h->fx[k] = res->shift.sx - p->hist[k].sx - ix[k];
        h->fy[k] = res->shift.sy - p->hist[k].sy - iy[k];
        h->ix[k] = ix[k];
        h->iy[k] = iy[k];
        h->unscreened[k] = !p->hist[k].screened && res->weights[k] != 0.0;
        m += h->unscreened[k];
    }
    return m;
}

/* A detection at (x, y) (processed region) is a slow mover already taken
 * out of the history. */
static int known_slow(const ss_pipeline_t *p, const ss_shift_t *s, double x, double y)
{
    for (int k = 0; k < p->n_slow; k++) {
        const double age = (double)(p->stats.processed - p->slow[k].seq);
        if (hypot(p->slow[k].x + p->slow[k].vx * age - s->sx - x,
                  p->slow[k].y + p->slow[k].vy * age - s->sy - y) <= SLOW_NEAR)
            return 1;
    }
    return 0;
}

/* The stacks (slow_movers.h) of the detections res->dets.items[idx[c]],
 * c < nc: the current frame and the unscreened history frames of h
 * (newest first, at most SS_SLOW_STACK_MAX - 1), each cut around the
 * detection, into *px (allocated here, the caller frees it). Reads FRAME
 * and each of those history planes once, through p->ref_host. */
static ss_err_t slow_stacks(ss_pipeline_t *p, const ss_result_t *res, const ss_slow_hist_t *h,
                            const int *idx, int nc, float **px, ss_slow_stack_t *st)
{
    int hk[SS_SLOW_STACK_MAX], K = 1, side = 0;
    double tau_max = 0.0;
    for (int k = 0; k < h->n && K < SS_SLOW_STACK_MAX; k++)
        if (h->unscreened[k]) {
            hk[K++] = k;
            tau_max = fmax(tau_max, h->tau[k]);
        }
    for (int c = 0; c < nc; c++) {
        const ss_detection_t *d = &res->dets.items[idx[c]];
        st[c] = (ss_slow_stack_t){ .k = K };
        ss_slow_stack_window(d->x, d->y, p->cfg.psf_sigma, tau_max, &st[c].x0, &st[c].y0, &side);
        st[c].side = side;
        for (int q = 1; q < K; q++) {
            st[c].tau[q] = h->tau[hk[q]];
            st[c].fx[q] = h->fx[hk[q]];
            st[c].fy[q] = h->fy[hk[q]];
        }
    }
    const size_t win = (size_t)side * (size_t)side;
    *px = malloc((size_t)nc * (size_t)K * win * sizeof **px);
    if (!*px)
        return SS_ERR_NOMEM;
    for (int c = 0; c < nc; c++)
        st[c].px = *px + (size_t)c * (size_t)K * win;
    for (int q = 0; q < K; q++) {
        const int k = hk[q];
        ss_err_t e = q == 0 ? p->ops->read_plane(p->be, SS_PLANE_FRAME, 0, p->ref_host)
                            : p->ops->read_plane(p->be, SS_PLANE_HISTORY, p->hist[k].slot,
                                                 p->ref_host);
        if (e != SS_OK)
            return e;
        for (int c = 0; c < nc; c++) {
            float *dst = *px + ((size_t)c * (size_t)K + (size_t)q) * win;
            ss_slow_stack_cut(p->ref_host, q == 0 ? SS_DT_F32 : p->geo.hist_dtype, p->geo.roi.w,
                              p->geo.roi.h, q == 0 ? 0 : h->ix[k], q == 0 ? 0 : h->iy[k],
                              st[c].x0, st[c].y0, side, dst);
        }
    }
    return SS_OK;
}

/* Fits of the bright point detections that are not known slow movers
 * (residual read into p->res_host, stacks from slow_stacks): at most
 * SS_SLOW_MAX_FITS detections are tried, the most significant first (the
 * order of res->dets), so that a frame with hundreds of bright detections
 * costs a bounded time (a fit costs milliseconds); the movers found go
 * to fit[]. */
static ss_err_t fit_slow_movers(ss_pipeline_t *p, ss_result_t *res, const ss_slow_hist_t *h,
                                ss_slow_fit_t *fit, int *nf)
{
    const int w = p->geo.roi.w, hh = p->geo.roi.h;
    int idx[SS_SLOW_MAX_FITS], nc = 0;
    *nf = 0;
    for (int i = 0; i < res->dets.count && nc < SS_SLOW_MAX_FITS; i++) {
        const ss_detection_t *d = &res->dets.items[i];
        if (d->sign > 0 && d->kind == SS_KIND_POINT && d->peak_snr >= SS_SLOW_MIN_SNR &&
            !known_slow(p, &res->shift, d->x, d->y))
            idx[nc++] = i;
    }
    if (nc == 0)
        return SS_OK;
    ss_slow_stack_t st[SS_SLOW_MAX_FITS];
    float *px = NULL;
    ss_err_t e = slow_stacks(p, res, h, idx, nc, &px, st);
    if (e == SS_OK)
        e = p->ops->read_plane(p->be, SS_PLANE_RESIDUAL, 0, p->res_host);
    for (int j = 0; j < nc && e == SS_OK; j++) {
        const ss_detection_t *d = &res->dets.items[idx[j]];
        *nf += ss_slow_mover_fit(p->res_host, w, hh, d->x, d->y, p->cfg.psf_sigma, res->sigma,
                                 h, &st[j], &fit[*nf]);
    }
    free(px);
    return e;
}

/* Take the movers of fit[] (sign +1) out of the unscreened history frames
 * of h, or put them back (sign -1; use[j] = 0 skips fit j): a mover at p
 * with speed v is in frame k at p - v·τ_k + d_k of its own pixels (d_k =
 * s - s_k), with the flux it has now. */
static ss_err_t slow_apply(ss_pipeline_t *p, const ss_result_t *res, const ss_slow_hist_t *h,
                           const ss_slow_fit_t *fit, const int *use, int nf, double sign)
{
    for (int k = 0; k < h->n; k++) {
        if (!h->unscreened[k])
            continue;
        ss_point_source_t src[SS_SLOW_MAX_FITS];
        const double dx = res->shift.sx - p->hist[k].sx, dy = res->shift.sy - p->hist[k].sy;
        int m = 0;
        for (int j = 0; j < nf; j++)
            if (use[j])
                src[m++] = (ss_point_source_t){ fit[j].x - fit[j].vx * h->tau[k] + dx,
                                                fit[j].y - fit[j].vy * h->tau[k] + dy,
                                                sign * fit[j].flux, fit[j].sigma };
        ss_err_t e = p->ops->read_plane(p->be, SS_PLANE_HISTORY, p->hist[k].slot, p->ref_host);
        if (e != SS_OK)
            return e;
        ss_history_subtract(p->ref_host, p->geo.hist_dtype, p->geo.roi.w, p->geo.roi.h, src, m);
        if ((e = p->ops->write_plane(p->be, SS_PLANE_HISTORY, p->hist[k].slot, p->ref_host)))
            return e;
    }
    return SS_OK;
}

/* Predict the frame again (the history changed) and find its objects. */
static ss_err_t repredict(ss_pipeline_t *p, ss_result_t *res, int n, int find_too)
{
    int slots[SS_MAX_HISTORY], ix[SS_MAX_HISTORY], iy[SS_MAX_HISTORY];
    const ss_reweight_t *rw;
    ss_err_t e = compute_weights(p, &res->shift, n, slots, ix, iy, res->weights, &rw);
    if (e == SS_OK)
        e = predict(p, res, slots, ix, iy, n, rw);
    if (e == SS_OK)
        e = find_too ? find(p, res) : frame_stats(p, res);
    if (e == SS_OK && !sigma_ok(res->sigma))
        e = SS_ERR_BACKEND;
    return e;
}

/* The movers of fit[] that stayed out of the history (back[j] = 0): each
 * one's nearest positive point detection within SLOW_NEAR px takes the
 * fitted position, which all the frames of the stack fit pinned down
 * (measured in test_slow_movers_leave_history's first ok frame at 1
 * px/frame: 0.095 px RMS against 0.252 for the detection's own peak). */
static void place_movers(ss_result_t *res, const ss_slow_fit_t *fit, const int *back, int nf)
{
    for (int j = 0; j < nf; j++) {
        if (back[j])
            continue;
        ss_detection_t *best = NULL;
        double dbest = SLOW_NEAR;
        for (int i = 0; i < res->dets.count; i++) {
            ss_detection_t *d = &res->dets.items[i];
            const double dist = hypot(d->x - fit[j].x, d->y - fit[j].y);
            if (d->sign > 0 && d->kind == SS_KIND_POINT && dist <= dbest) {
                best = d;
                dbest = dist;
            }
        }
        if (best) {
            best->x = best->x0 = best->x1 = fit[j].x;
            best->y = best->y0 = best->y1 = fit[j].y;
        }
    }
}

/* Slow movers (slow_movers.h) among this frame's detections: fitted,
 * taken out of the unscreened history frames of h, the frame predicted
 * again, and each take-out kept only where the new residual shows at
 * least SLOW_KEEP of the gain its fit promised (a source alone is left);
 * the others are put back. The movers kept are remembered (p->slow) and
 * not fitted again. res->dets are this frame's detections at the end. */
static ss_err_t slow_movers(ss_pipeline_t *p, ss_result_t *res, const ss_slow_hist_t *h, int n)
{
    ss_slow_fit_t fit[SS_SLOW_MAX_FITS];
    int all[SS_SLOW_MAX_FITS], back[SS_SLOW_MAX_FITS], nf, nback = 0;
    ss_err_t e = fit_slow_movers(p, res, h, fit, &nf);
    if (e != SS_OK)
        return e;
    if (nf == 0)
        return SS_OK;
    for (int j = 0; j < nf; j++)
        all[j] = 1;
    if ((e = slow_apply(p, res, h, fit, all, nf, 1.0)) || (e = repredict(p, res, n, 0)) ||
        (e = p->ops->read_plane(p->be, SS_PLANE_RESIDUAL, 0, p->res_host)))
        return e;
    for (int j = 0; j < nf; j++) {
        const double after = ss_slow_source_rss(p->res_host, p->geo.roi.w, p->geo.roi.h, &fit[j],
                                                p->cfg.psf_sigma, res->sigma, h);
        const double before = fit[j].rss_new / fit[j].npix;
        const double promised = (fit[j].rss_new - fit[j].rss) / fit[j].npix;
        back[j] = !(after <= before - SLOW_KEEP * promised);
        nback += back[j];
        if (!back[j] && p->n_slow < SLOW_TRACKS)
            p->slow[p->n_slow++] = (struct slow_track){ fit[j].x + res->shift.sx,
                                                        fit[j].y + res->shift.sy, fit[j].vx,
                                                        fit[j].vy, p->stats.processed };
    }
    SS_LOG(SS_LOG_DEBUG, TAG, "feed %s: frame %llu: %d slow mover(s) taken out of the history, "
           "%d put back", p->feed, (unsigned long long)res->meta.seq, nf - nback, nback);
    if (nback == 0)
        e = find(p, res);
    else if ((e = slow_apply(p, res, h, fit, back, nf, -1.0)) == SS_OK)
        e = repredict(p, res, n, 1);
    if (e == SS_OK)
        place_movers(res, fit, back, nf);
    return e;
}

/* ---- stored frames cleaned along confirmed slow tracks ------------------ */

/* What the stored frame of entry e was stored without: the positive
 * detections of res (input-frame px; most significant first), as their
 * bounding boxes dilated by the removal radius, in processed px. */
static void remember_removed(ss_pipeline_t *p, hist_entry_t *e, const ss_result_t *res,
                             int removed, int radius)
{
    float (*box)[4] = p->removed + (size_t)e->slot * REMOVED_CAP;
    e->n_removed = 0;
    for (int i = 0; removed && i < res->dets.count; i++) {
        const ss_detection_t *d = &res->dets.items[i];
        if (d->sign <= 0)
            continue;
        if (e->n_removed == REMOVED_CAP) {
            e->n_removed = -1;
            return;
        }
        float *b = box[e->n_removed++];
        b[0] = (float)(d->bbox_x0 - res->origin_x - radius);
        b[1] = (float)(d->bbox_y0 - res->origin_y - radius);
        b[2] = (float)(d->bbox_x1 - res->origin_x + radius);
        b[3] = (float)(d->bbox_y1 - res->origin_y + radius);
    }
}

/* Whether the stored frame of entry e may lack an object at (x, y) (its
 * processed px): a removed detection's box holds the place, or there were
 * more than were remembered. */
static int removed_at(const ss_pipeline_t *p, const hist_entry_t *e, double x, double y)
{
    if (e->n_removed < 0)
        return 1;
    const float (*box)[4] = (const float (*)[4])(p->removed + (size_t)e->slot * REMOVED_CAP);
    for (int i = 0; i < e->n_removed; i++)
        if (x >= box[i][0] && x <= box[i][2] && y >= box[i][1] && y <= box[i][3])
            return 1;
    return 0;
}

/* Where confirmed track id is in the stored frame of entry e (its own
 * processed px) and the 1-σ spread of that; -1 when the tracker does not
 * know. Registered px are the current reference's plus ref_off; a frame's
 * px plus its shift are the reference's. */
static int track_in_frame(const ss_pipeline_t *p, uint64_t id, const hist_entry_t *e, double *x,
                          double *y, double *spread)
{
    double u, v;
    if (ss_tracker_position(p->tracker, id, e->mjd, e->tframe, &u, &v, spread) != 0)
        return -1;
    *x = u - p->ref_off_x - e->sx;
    *y = v - p->ref_off_y - e->sy;
    return 0;
}

static int clean_done(const clean_track_t *c, uint64_t seq)
{
    for (int i = 0; i < c->n_done; i++)
        if (c->done[i] == seq)
            return 1;
    return 0;
}

/* The record of track id (made when new; NULL when the table is full).
 * The records of tracks not reported alive in res are dropped, and the
 * handled seqs of frames no longer stored. */
static clean_track_t *clean_record(ss_pipeline_t *p, uint64_t id)
{
    for (int i = 0; i < p->n_clean; i++)
        if (p->clean[i].id == id)
            return &p->clean[i];
    if (p->n_clean == CLEAN_TRACKS)
        return NULL;
    clean_track_t *c = &p->clean[p->n_clean++];
    c->id = id;
    c->fitted = 0;
    c->n_done = 0;
    return c;
}

/* Drop the records of tracks that res does not report alive, and from the
 * others the seqs of frames no longer stored. */
static void clean_prune(ss_pipeline_t *p, const ss_result_t *res)
{
    int keep = 0;
    for (int i = 0; i < p->n_clean; i++) {
        clean_track_t *c = &p->clean[i];
        int alive = 0;
        for (int j = 0; j < res->tracks.count && !alive; j++)
            alive = res->tracks.items[j].id == c->id &&
                    res->tracks.items[j].state != SS_TRACK_ENDED;
        if (!alive)
            continue;
        int nd = 0;
        for (int d = 0; d < c->n_done; d++)
            for (int k = 0; k < p->n_hist; k++)
                if (p->hist[k].seq == c->done[d]) {
                    c->done[nd++] = c->done[d];
                    break;
                }
        c->n_done = nd;
        if (keep != i)
            p->clean[keep] = *c;
        keep++;
    }
    p->n_clean = keep;
}

/* A track is slow when it moves at most SS_SLOW_VMAX px between the last
 * two stored frames (per frame of the tracker between them): its copies
 * in the stored frames lie under it. */
static int track_is_slow(const ss_pipeline_t *p, uint64_t id)
{
    double x0, y0, x1, y1, s;
    if (p->n_hist < 2 || track_in_frame(p, id, &p->hist[0], &x0, &y0, &s) != 0 ||
        track_in_frame(p, id, &p->hist[1], &x1, &y1, &s) != 0)
        return 0;
    const long frames = p->hist[0].tframe - p->hist[1].tframe;
    /* registered displacement: the frame px difference less the shifts' */
    const double du = x0 + p->hist[0].sx - x1 - p->hist[1].sx;
    const double dv = y0 + p->hist[0].sy - y1 - p->hist[1].sy;
    return frames > 0 && hypot(du, dv) <= SS_SLOW_VMAX * (double)frames;
}

/* Fit the flux and sigma of the track's mover on this frame's residual
 * (p->res_host, read by the caller; processed px): where the track puts it
 * now, with the copies that this frame's prediction (the stored frames 1..,
 * weights res->weights) still held of it; c takes them when the fit is ok
 * (ss_slow_track_fit). det: its detection in this frame. */
static void clean_fit(ss_pipeline_t *p, const ss_result_t *res, const ss_detection_t *det,
                      clean_track_t *c)
{
    double x, y, sp;
    if (track_in_frame(p, c->id, &p->hist[0], &x, &y, &sp) != 0)
        return;
    ss_slow_hist_t h;
    h.n = 0;
    const int n = SS_MIN(res->n_weights, p->n_hist - 1);
    for (int k = 1; k <= n; k++) {
        const hist_entry_t *e = &p->hist[k];
        double xk, yk;
        const int ix = (int)lround(p->hist[0].sx - e->sx), iy = (int)lround(p->hist[0].sy - e->sy);
        h.a[h.n] = res->weights[k - 1];
        h.tau[h.n] = 0.0;
        h.unscreened[h.n] = 0;
        if (h.a[h.n] != 0.0 && !clean_done(c, e->seq) &&
            track_in_frame(p, c->id, e, &xk, &yk, &sp) == 0 && !removed_at(p, e, xk, yk)) {
            /* the copy in the prediction: frame k's px less its whole-px offset */
            h.fx[h.n] = xk - ix - x;
            h.fy[h.n] = yk - iy - y;
            h.unscreened[h.n] = 1;
        }
        h.n++;
    }
    ss_slow_fit_t f;
    if (ss_slow_track_fit(p->res_host, p->geo.roi.w, p->geo.roi.h, x, y, det->flux,
                          p->cfg.psf_sigma, res->sigma, &h, &f)) {
        c->fitted = 1;
        c->flux = f.flux;
        c->sigma = f.sigma;
    }
}

/* Where stored frame e holds the mover of c: 1 with its frame px when the
 * position is known to CLEAN_SPREAD, 0 otherwise. */
static int clean_at(const ss_pipeline_t *p, const clean_track_t *c, const hist_entry_t *e,
                    double *x, double *y)
{
    double sp;
    return track_in_frame(p, c->id, e, x, y, &sp) == 0 && sp <= CLEAN_SPREAD;
}

/* Mark handled for c the stored frames that need no subtraction: those
 * stored with its detection removed where the position is known. Returns
 * how many stored frames then still wait for a subtraction whose place is
 * known — the frames a fit is made for. */
static int clean_pending(ss_pipeline_t *p, clean_track_t *c)
{
    int pending = 0;
    for (int k = 0; k < p->n_hist; k++) {
        const hist_entry_t *e = &p->hist[k];
        double x, y;
        if (clean_done(c, e->seq) || !clean_at(p, c, e, &x, &y))
            continue;
        if (removed_at(p, e, x, y))
            c->done[c->n_done++] = e->seq;
        else
            pending++;
    }
    return pending;
}

/* Take the mover of every fitted record out of the stored frames not yet
 * handled for it where its position is known to CLEAN_SPREAD, once per
 * frame and record (a frame stored with its detection removed is only
 * marked handled); one read and write per stored frame. */
static ss_err_t clean_frames(ss_pipeline_t *p)
{
    for (int k = 0; k < p->n_hist; k++) {
        hist_entry_t *e = &p->hist[k];
        ss_point_source_t src[CLEAN_TRACKS];
        int m = 0;
        for (int i = 0; i < p->n_clean; i++) {
            clean_track_t *c = &p->clean[i];
            double x, y;
            if (!c->fitted || clean_done(c, e->seq) || !clean_at(p, c, e, &x, &y))
                continue;
            c->done[c->n_done++] = e->seq;
            if (!removed_at(p, e, x, y))
                src[m++] = (ss_point_source_t){ x, y, c->flux, c->sigma };
        }
        if (m == 0)
            continue;
        ss_err_t err = p->ops->read_plane(p->be, SS_PLANE_HISTORY, e->slot, p->ref_host);
        if (err != SS_OK)
            return err;
        ss_history_subtract(p->ref_host, p->geo.hist_dtype, p->geo.roi.w, p->geo.roi.h, src, m);
        if ((err = p->ops->write_plane(p->be, SS_PLANE_HISTORY, e->slot, p->ref_host)))
            return err;
    }
    return SS_OK;
}

/* ALGORITHM.md §3 with §8: a slow mover that the tracker confirmed is
 * still in the frames stored before (warm-up included) and in those where
 * it was missed. After the tracker's step of a stored frame, every
 * confirmed slow point track reported alive is taken out of the stored
 * frames that still hold it (clean_frames); those of a slow mover that the
 * slow-mover fit already took out of the unscreened frames, or that were
 * stored with its detection removed, count as handled there. Its flux and
 * sigma are fitted on an ok frame where it was detected, and only while a
 * stored frame waits for a subtraction: the RESIDUAL plane is read then,
 * not every frame. */
static ss_err_t clean_tracks(ss_pipeline_t *p, ss_result_t *res)
{
    if (!p->cfg.remove_objects || !p->cfg.track.enabled || p->n_hist == 0)
        return SS_OK;
    clean_prune(p, res);
    const int ok = res->status == SS_STATUS_OK;
    int read = 0;
    for (int j = 0; j < res->tracks.count; j++) {
        const ss_track_t *t = &res->tracks.items[j];
        if (t->state == SS_TRACK_ENDED || t->kind != SS_KIND_POINT || !track_is_slow(p, t->id))
            continue;
        clean_track_t *c = clean_record(p, t->id);
        if (!c)
            continue;
        double x, y, sp;
        const ss_shift_t now = { .sx = p->hist[0].sx, .sy = p->hist[0].sy };
        if (track_in_frame(p, t->id, &p->hist[0], &x, &y, &sp) == 0 && known_slow(p, &now, x, y))
            for (int k = 0; k < p->n_hist; k++)
                if (!p->hist[k].screened && !clean_done(c, p->hist[k].seq))
                    c->done[c->n_done++] = p->hist[k].seq;
        if (clean_pending(p, c) == 0)
            continue;
        const ss_detection_t *det = NULL;
        for (int i = 0; ok && t->state == SS_TRACK_ACTIVE && i < res->dets.count && !det; i++)
            if (res->dets.items[i].track == t->id)
                det = &res->dets.items[i];
        if (!det)
            continue;
        ss_err_t e;
        if (!read++ && (e = p->ops->read_plane(p->be, SS_PLANE_RESIDUAL, 0, p->res_host)))
            return e;
        clean_fit(p, res, det, c);
    }
    return clean_frames(p);
}

int ss_pipeline_result_init(ss_pipeline_t *p, ss_result_t *r, size_t max_pixels, int max_dets)
{
    return ss_result_init_with(r, max_pixels, max_dets, &p->ops->host_alloc);
}

/* The residual can come back asynchronously: the backend can, the buffer
 * is its host memory (pinned), and there is room in the in-flight list. */
static int async_read(const ss_pipeline_t *p, const ss_result_t *res)
{
    return p->ops->read_begin && p->ops->read_wait &&
           res->residual_alloc.alloc == p->ops->host_alloc.alloc &&
           p->n_inflight < SS_PIPELINE_INFLIGHT;
}

/* Start the download of CLEAN into res->residual (async_read holds). */
static ss_err_t residual_begin(ss_pipeline_t *p, ss_result_t *res)
{
    ss_err_t e = p->ops->read_begin(p->be, SS_PLANE_CLEAN, res->residual, &res->residual_ticket);
    if (e == SS_OK) {
        res->residual_pending = 1;
        p->inflight[p->n_inflight++] = res;
    }
    return e;
}

/* The optional forms of an ok frame's residual (p->out): its binary16
 * and the stamps of its detections (still in residual pixels), made by
 * the backend from CLEAN. With async they arrive with the residual
 * (settle waits for the later ticket), else they are complete on return. */
static ss_err_t forms_begin(ss_pipeline_t *p, ss_result_t *res, int async)
{
    uint16_t *half = p->out.f16 ? res->residual16 : NULL;
    ss_stamps_t *st = NULL;
    if (p->out.stamps) {
        ss_stamp_boxes(&res->dets, res->width, res->height, &p->out, &res->stamps);
        st = &res->stamps;
    }
    if (!half && !st)
        return SS_OK;
    uint64_t ticket = 0;
    ss_err_t e = p->ops->read_forms(p->be, half, st, &ticket);
    if (e != SS_OK)
        return e;
    res->has_residual16 = half != NULL;
    res->has_stamps = st != NULL;
    if (!async)
        return p->ops->read_wait ? p->ops->read_wait(p->be, ticket) : SS_OK;
    res->residual_ticket = ticket;
    if (!res->residual_pending) {
        res->residual_pending = 1;
        p->inflight[p->n_inflight++] = res;
    }
    return SS_OK;
}

/* Frames without a prediction: all-invalid forms of their size, so that
 * every processed frame has each form asked for (no stamps: no
 * detections). */
static void forms_invalid(const ss_pipeline_t *p, ss_result_t *res)
{
    const size_t npix = (size_t)res->width * (size_t)res->height;
    if (p->out.f32) {
        for (size_t i = 0; i < npix; i++)
            res->residual[i] = NAN;
        res->has_residual = npix > 0;
    }
    if (p->out.f16) {
        for (size_t i = 0; i < npix; i++)
            res->residual16[i] = (uint16_t)SS_F16_NAN;
        res->has_residual16 = npix > 0;
    }
}

void ss_pipeline_set_backend_plan(ss_pipeline_t *p, int on)
{
    p->backend_plan = on != 0;
}

void ss_pipeline_set_outputs(ss_pipeline_t *p, const ss_outputs_t *o)
{
    p->out = *o;
}

/* The registration's verdict on res (coarse and shift filled): a failure
 * is counted, and after cfg max_failures in a row resets the history
 * (a slew?); a success has its interpolation bias taken out and is placed
 * on the sky. Returns whether the registration succeeded. */
static int reg_verdict(ss_pipeline_t *p, ss_result_t *res)
{
    ss_shift_t *s = &res->shift;
    if (!res->coarse.ok || !s->ok) {
        res->status = SS_STATUS_REG_FAILED;
        snprintf(res->reason, sizeof res->reason, "registration failed: %s",
                 !res->coarse.ok ? res->coarse.why : s->why);
        p->fail_run++;
        if (p->fail_run >= p->cfg.max_failures) {
            char why[200];
            snprintf(why, sizeof why, "%d registration failures in a row (slew?)", p->fail_run);
            ss_pipeline_reset(p, why);
            res->history_reset = 1;
        }
        return 0;
    }
    p->fail_run = 0;
    s->sx = ss_interp_unbias(s->sx, p->kappa_x);
    s->sy = ss_interp_unbias(s->sy, p->kappa_y);
    sky_for_frame(p, res);
    return 1;
}

/* Whether the backend can plan this frame's prediction from its own shift
 * (predict_planned, plan_core.h; CUDA on the device): the backend can,
 * planning is not switched off, the history is deep enough, no slow-mover
 * protection of the poly weights, a σ from an earlier frame for ε, no
 * mean reference being formed, and every history frame stored with its
 * objects removed (else the slow-mover search needs the host between the
 * stages). */
static int backend_plans(const ss_pipeline_t *p, int n)
{
    if (!p->ops->predict_planned || !p->backend_plan || n < ss_cfg_min_history(&p->cfg) ||
        !isfinite(p->sigma_prev) || (p->ref_sum && !p->ref_done))
        return 0;
    double d[SS_MAX_HISTORY], rho[SS_MAX_HISTORY];
    if (copy_overlap(p, n, d, rho))
        return 0;
    for (int k = 0; k < n; k++)
        if (p->cfg.remove_objects && !p->hist[k].screened)
            return 0;
    return 1;
}

/* What the driver knows of the backend's plan before the shift: wp, the
 * history slots, and the guided filter's settings (the mask's threshold
 * that depends on the weights, tl, is left to the device). */
static void plan_inputs(const ss_pipeline_t *p, int n, ss_wplan_t *wp, int *slots, int *radius,
                        float *eps, ss_gmask_t *gm)
{
    memset(wp, 0, offsetof(ss_wplan_t, hsx));
    wp->n = n;
    wp->lsq = p->cfg.mode == SS_WHITEN_LSQ;
    wp->degree = p->cfg.poly_degree;
    wp->min_valid = ss_cfg_min_valid(&p->cfg, n);
    wp->gamma = ss_cfg_gamma(&p->cfg);
    wp->lambda = p->cfg.forget;
    wp->kappa_x = p->kappa_x;
    wp->kappa_y = p->kappa_y;
    for (int k = 0; k < n; k++) {
        slots[k] = p->hist[k].slot;
        wp->hsx[k] = p->hist[k].sx;
        wp->hsy[k] = p->hist[k].sy;
    }
    wp->masked = guided_setup(p, 0.0, radius, eps, gm);
    if (wp->masked) {
        wp->tau = gm->tau;
        wp->sigma = gm->sigma;
        wp->g = gm->g;
    }
}

/* §2–§7 with the prediction planned by the backend (backend_plans): the
 * registration, the weights, the prediction, the guided filter, σ, the
 * matched filter and the detection run without the driver between them
 * (on CUDA one wait: the detection's), and the verdict on the
 * registration comes after. A failed registration discards what was made from it, as if
 * nothing had been predicted (res->status says so). *predicted: res holds
 * a residual and detections, as the host path leaves them before
 * forms_begin. */
static ss_err_t planned_frame(ss_pipeline_t *p, ss_result_t *res, int n, int async,
                              int *predicted)
{
    ss_wplan_t wp;
    int slots[SS_MAX_HISTORY], ix[SS_MAX_HISTORY], iy[SS_MAX_HISTORY], radius, planned;
    float eps;
    ss_gmask_t gm;
    plan_inputs(p, n, &wp, slots, &radius, &eps, &gm);
    p->stats.backend_planned++;
    ss_err_t e = p->ops->predict_planned(p->be, &wp, slots, radius, eps, wp.masked ? &gm : NULL,
                                         &res->coarse);
    if (e != SS_OK)
        return e;
    if (res->coarse.why[0] != '\0') {        /* the coarse step could not run: nothing ran */
        (void)reg_verdict(p, res);
        return SS_OK;
    }
    if (p->out.f32 && async && (e = residual_begin(p, res)) != SS_OK)
        return e;
    if ((e = find(p, res)) != SS_OK ||
        (e = p->ops->predict_take(p->be, &res->coarse, &res->shift, ix, iy, res->weights,
                                  &planned)) != SS_OK)
        return e;
    if (!res->coarse.ok || !res->shift.ok) {
        if ((e = settle(p, res, 0)) != SS_OK)
            return e;
        ss_detlist_clear(&res->dets);
        res->sigma = NAN;
        res->model_beta = 0.0f;
        res->model_samples = 0;
        (void)reg_verdict(p, res);
        return SS_OK;
    }
    if (!planned)
        return SS_ERR_BACKEND;
    (void)reg_verdict(p, res);
    res->n_weights = n;
    res->history_len = n;
    *predicted = 1;
    return SS_OK;
}

ss_err_t ss_pipeline_process(ss_pipeline_t *p, const ss_frame_t *f, ss_result_t *res)
{
    ss_err_t e = ss_pipeline_start(p, f, res);
    if (e != SS_OK)
        return e;
    return ss_pipeline_finish(p, res);
}

ss_err_t ss_pipeline_finish(ss_pipeline_t *p, ss_result_t *res)
{
    const ss_err_t e = p->post_res == res ? post_run(p) : SS_OK;
    const ss_err_t s = settle(p, res, 1);
    return e != SS_OK ? e : s;
}

/* What ss_pipeline_start's steps share of one frame. */
typedef struct {
    ss_roi_t roi;                   /* the region processed (start_ingest) */
    int n;                          /* history frames in use */
    int async;                      /* the residual's download runs beside the work (async_read,
                                     * taken once: the download joins n_inflight) */
    int go;                         /* registered: on to the prediction and the history */
    int predicted;                  /* res holds a residual and detections */
} start_t;

/* §1 for frame f up to its ingest: the processed region *roi (a new one,
 * or the first frame, makes a new backend; raw frames of other sizes and
 * regions within the slack keep the history), the overscan and the dark's
 * scale; then the last frame's tracking, with enough to track on the host
 * while this frame's first stages run on the device (ops->launch). On
 * failure the frame has failed (fail_frame) and its code is returned. */
static ss_err_t start_ingest(ss_pipeline_t *p, const ss_frame_t *f, ss_result_t *res,
                             ss_roi_t *roi)
{
    char err[SS_PATH_MAX + 200];
    int held_w, held_h, use_os;
    ss_calib_frame_t cf = { .dark_scale = 1.0 };
    if (frame_roi(&p->cfg, f, roi, &held_w, &held_h, err, sizeof err) != 0)
        return fail_frame(p, res, SS_ERR_SIZE, err);
    if ((size_t)roi->w * (size_t)roi->h > res->residual_capacity)
        return fail_frame(p, res, SS_ERR_SIZE, "frame larger than the configured maximum");
    ss_err_t e = settle_geometry(p, f, *roi, held_w, held_h, res, &cf.valid_w, &cf.valid_h, err,
                                 sizeof err);
    if (e != SS_OK)
        return fail_frame(p, res, e, err);
    *roi = p->geo.roi;
    res->width = roi->w;
    res->height = roi->h;
    res->origin_x = roi->x;
    res->origin_y = roi->y;
    if ((e = overscan(p, f, &use_os, err, sizeof err)) != SS_OK)
        return fail_frame(p, res, e, err);
    cf.row_bias = use_os ? p->row_bias : NULL;
    cf.dark_scale = dark_scale(p, f);
    TRY(p->ops->ingest(p->be, f, &cf));
    if (!p->post_res)
        return SS_OK;
    if (p->ops->launch && p->cfg.track.enabled &&
        p->post_res->dets.count >= SS_PIPELINE_OVERLAP_DETS)
        TRY(p->ops->launch(p->be));
    TRY(post_run(p));
    return SS_OK;
}

/* §2's first usable frame becomes the reference (the first of a mean
 * reference's frames); one without a valid pixel is refused, its
 * registration failed. *go: it became the reference. On failure the frame
 * has failed (fail_frame). */
static ss_err_t take_reference(ss_pipeline_t *p, ss_result_t *res, int *go)
{
    ss_shift_t *s = &res->shift;
    float spread;
    TRY(p->ops->noise(p->be, SS_PLANE_FILTERED, REF_CHECK_STRIDE, &spread));
    if (!isfinite(spread)) {
        res->status = SS_STATUS_REG_FAILED;
        ss_strlcpy(res->reason, "registration failed: no valid pixels for a reference",
                   sizeof res->reason);
        p->fail_run++;
        return SS_OK;
    }
    TRY(new_reference(p));
    p->have_ref = 1;
    s->ok = 1;
    if (p->ref_sum)
        TRY(ref_mean_add(p, s));
    res->status = SS_STATUS_REFERENCE;
    res->rereferenced = 1;
    ss_strlcpy(res->reason, "first good frame after start or reset", sizeof res->reason);
    sky_for_frame(p, res);
    *go = 1;
    return SS_OK;
}

/* §2 for a frame with st->n history frames, on one of three paths: the
 * first usable frame becomes the reference (take_reference); the backend
 * plans the frame up to its detection (planned_frame: st->predicted); or
 * the host registers it against the reference. st->go: the frame goes on
 * to its prediction and the history (0: its registration failed). On
 * failure the frame has failed (fail_frame). */
static ss_err_t start_register(ss_pipeline_t *p, ss_result_t *res, start_t *st)
{
    ss_shift_t *s = &res->shift;
    if (!p->have_ref)
        return take_reference(p, res, &st->go);
    if (backend_plans(p, st->n)) {
        TRY(planned_frame(p, res, st->n, st->async, &st->predicted));
        if (res->status != SS_STATUS_OK)
            return SS_OK;
        if (!sigma_ok(res->sigma))
            return fail_frame(p, res, SS_ERR_BACKEND, sigma_why(res->sigma));
        st->go = 1;
        return SS_OK;
    }
    TRY(register_frame(p, &res->coarse, s));
    if (!reg_verdict(p, res))
        return SS_OK;
    if (p->ref_sum && !p->ref_done)
        TRY(ref_mean_add(p, s));
    st->go = 1;
    return SS_OK;
}

/* §3–§7 on the host's path for an ok frame with n history frames (async:
 * start_t's): the
 * weights, the prediction, the slow movers that history frames stored
 * before object removal still hold (found, taken out, the frame predicted
 * again), σ and the detection. The residual's download starts once r' is
 * final (with slow movers, only after them), so that it runs alongside the
 * matched filter and the detection, or after them and, pending, alongside
 * the next frame's first stages. On failure the frame has failed
 * (fail_frame). */
static ss_err_t host_predict(ss_pipeline_t *p, ss_result_t *res, int n, int async)
{
    int slots[SS_MAX_HISTORY], ix[SS_MAX_HISTORY], iy[SS_MAX_HISTORY];
    const ss_reweight_t *rw;
    const int f32 = p->out.f32;
    TRY(compute_weights(p, &res->shift, n, slots, ix, iy, res->weights, &rw));
    res->n_weights = n;
    res->history_len = n;
    TRY(predict(p, res, slots, ix, iy, n, rw));
    ss_slow_hist_t sh;
    const int slow = p->cfg.remove_objects && unscreened_history(p, res, n, ix, iy, &sh) > 0;
    if (f32 && async && !slow)
        TRY(residual_begin(p, res));
    TRY(find(p, res));
    if (!sigma_ok(res->sigma))
        return fail_frame(p, res, SS_ERR_BACKEND, sigma_why(res->sigma));
    if (slow) {
        TRY(slow_movers(p, res, &sh, n));
        if (f32 && async)
            TRY(residual_begin(p, res));
    }
    return SS_OK;
}

/* A registered frame's prediction once the history is deep enough (else
 * it is a warm-up; the planned path made it already: st->predicted), then
 * its residual's forms and its detections in input-frame pixels. On
 * failure the frame has failed (fail_frame). */
static ss_err_t start_predict(ss_pipeline_t *p, ss_result_t *res, start_t *st)
{
    if (res->status == SS_STATUS_OK && st->n < ss_cfg_min_history(&p->cfg))
        res->status = SS_STATUS_WARMUP;
    if (res->status == SS_STATUS_OK && !st->predicted) {
        const ss_err_t e = host_predict(p, res, st->n, st->async);
        if (e != SS_OK)
            return e;
        st->predicted = 1;
    }
    if (!st->predicted)
        return SS_OK;
    const int async = st->async, f32 = p->out.f32;
    TRY(forms_begin(p, res, async));
    to_input_frame(&res->dets, st->roi, &res->meta);
    if (f32 && !async)
        TRY(p->ops->read_plane(p->be, SS_PLANE_CLEAN, 0, res->residual));
    res->has_residual = f32;
    p->sigma_prev = res->sigma;
    return SS_OK;
}

/* A new reference at frame f, which moved more than reference.reref_px
 * from the last one: the history's and the slow movers' offsets move with
 * it, and a mean reference starts again from it. On failure the frame has
 * failed (fail_frame). */
static ss_err_t rereference(ss_pipeline_t *p, const ss_frame_t *f, ss_result_t *res)
{
    const ss_shift_t *s = &res->shift;
    TRY(new_reference(p));
    p->ref_off_x += s->sx;
    p->ref_off_y += s->sy;
    for (int k = 0; k < p->n_hist; k++) {
        p->hist[k].sx -= s->sx;
        p->hist[k].sy -= s->sy;
    }
    for (int k = 0; k < p->n_slow; k++) {
        p->slow[k].x -= s->sx;
        p->slow[k].y -= s->sy;
    }
    res->rereferenced = 1;
    p->stats.rereferences++;
    if (p->ref_sum) {
        ss_shift_t zero = { .ok = 1 };
        p->ref_n = 0;
        p->ref_done = 0;
        TRY(ref_mean_add(p, &zero));
    }
    SS_LOG(SS_LOG_INFO, TAG, "feed %s: re-referenced at frame %llu (|s| = %.2f px)", p->feed,
           (unsigned long long)f->meta.seq, hypot(s->sx, s->sy));
    return SS_OK;
}

/* A registered frame into the history (its objects removed when it is ok
 * and object removal is on), then re-referenced if it moved too far. On
 * failure the frame has failed (fail_frame). */
static ss_err_t start_store(ss_pipeline_t *p, const ss_frame_t *f, ss_result_t *res)
{
    const ss_shift_t *s = &res->shift;
    const int slot = history_next_slot(p);
    const int remove = res->status == SS_STATUS_OK && p->cfg.remove_objects;
    TRY(p->ops->history_store(p->be, slot, remove, (int)floor(ss_cfg_mask_radius(&p->cfg))));
    history_push(p, slot, s->sx, s->sy, remove);
    p->hist[0].mjd = ss_frame_mid_mjd(&res->meta);
    p->hist[0].tframe = ss_tracker_frames(p->tracker) + 1;
    remember_removed(p, &p->hist[0], res, remove, (int)floor(ss_cfg_mask_radius(&p->cfg)));
    if (res->status != SS_STATUS_REFERENCE && hypot(s->sx, s->sy) > p->cfg.reref_px)
        return rereference(p, f, res);
    return SS_OK;
}

/* The end of every frame that did not fail: a frame without a prediction
 * (reference, warm-up, failed registration) still gets a residual of its
 * size, all invalid, so that consumers see each frame and its status,
 * nothing silently skipped; then the magnitudes, the counters, the stage
 * times, and its tracking left to the next frame's start or its finish. */
static ss_err_t start_done(ss_pipeline_t *p, ss_result_t *res, double t0, int predicted)
{
    if (!predicted)
        forms_invalid(p, res);
    photometry(p, res);
    p->stats.status[res->status]++;
    p->stats.detections += (uint64_t)res->dets.count;
    p->stats.detections_truncated += (uint64_t)res->dets.truncated;
    p->ops->stage_times(p->be, res->stage_ms);
    res->total_ms = (ss_now_mono() - t0) * 1e3;
    res->tracks_pending = 1;
    p->post_res = res;
    return SS_OK;
}

ss_err_t ss_pipeline_start(ss_pipeline_t *p, const ss_frame_t *f, ss_result_t *res)
{
    const double t0 = ss_now_mono();
    if (p->post_res == res)             /* the caller skipped finish: complete it now */
        (void)post_run(p);
    (void)settle(p, res, 1);            /* (nothing when no residual is pending) */
    result_begin(res, f);
    p->stats.processed++;
    start_t st = { .go = 0 };
    ss_err_t e = start_ingest(p, f, res, &st.roi);
    if (e != SS_OK)
        return e;
    st.n = SS_MIN(p->n_hist, p->cfg.history);
    st.async = async_read(p, res);
    if ((e = start_register(p, res, &st)) == SS_OK && st.go &&
        (e = start_predict(p, res, &st)) == SS_OK)
        e = start_store(p, f, res);
    return e != SS_OK ? e : start_done(p, res, t0, st.predicted);
}

void ss_pipeline_prefetch(ss_pipeline_t *p, const ss_frame_t *next)
{
    if (!p->be || !p->ops->prefetch || next->width > p->geo.raw_w ||
        next->height > p->geo.raw_h || next->dtype != p->geo.raw_dtype)
        return;
    /* a failed prefetch costs nothing: the ingest uploads the frame itself */
    (void)p->ops->prefetch(p->be, next);
}

/* Keys whose change needs a new backend instance (and a history reset). */
static int needs_rebuild(const ss_pipeline_cfg_t *a, const ss_pipeline_cfg_t *b)
{
    return a->backend != b->backend || a->device != b->device || a->history != b->history ||
           a->roi_x != b->roi_x || a->roi_y != b->roi_y || a->roi_w != b->roi_w ||
           a->roi_h != b->roi_h || a->use_trimsec != b->use_trimsec ||
           a->ref_frames != b->ref_frames ||
           a->reg_levels != b->reg_levels ||
           ss_cfg_hipass_radius(a) != ss_cfg_hipass_radius(b) || strcmp(a->dark, b->dark) != 0 ||
           strcmp(a->flat, b->flat) != 0 || strcmp(a->bad_pixels, b->bad_pixels) != 0 ||
           strcmp(a->bias, b->bias) != 0 || a->overscan != b->overscan;
}

int ss_pipeline_reconfigure(ss_pipeline_t *p, const ss_pipeline_cfg_t *cfg, char *err,
                            size_t err_len)
{
    (void)post_run(p);                  /* the last frame tracked with the old settings */
    ss_tracker_set_cfg(p->tracker, &cfg->track);
    if (!needs_rebuild(&p->cfg, cfg)) {
        p->cfg = *cfg;
        p->bcfg = *cfg;
        p->bcfg.reg_levels = p->levels;
        return 0;
    }
    /* Build the new pipeline aside, so that a failure leaves the old one. */
    ss_pipeline_t *fresh = ss_pipeline_new(cfg, p->feed, err, err_len);
    if (!fresh)
        return -1;
    settle_all(p);
    ss_pipeline_stats_t stats = p->stats;
    if (p->be)
        p->ops->destroy(&p->be);
    free_calibration(p);
    ss_tracker_t *tracker = p->tracker;     /* track ids stay unique for the feed */
    const uint64_t sky_epoch = p->sky_epoch;
    ss_phot_zp_t fitted = p->fitted_zp;     /* the sky's zero point outlives a rebuild */
    ss_tracker_destroy(&fresh->tracker);
    free_ref_mean(p);
    free(p->removed);
    *p = *fresh;
    free(fresh);
    p->tracker = tracker;
    p->sky_epoch = sky_epoch + 1;           /* a solve under way is of the old pipeline */
    p->fitted_zp = fitted;
    p->track_lost = 1;
    p->stats = stats;
    p->stats.resets++;
    SS_LOG(SS_LOG_NOTICE, TAG, "feed %s: reconfigured (history reset)", p->feed);
    return 0;
}

void ss_pipeline_get_stats(const ss_pipeline_t *p, ss_pipeline_stats_t *out)
{
    *out = p->stats;
}

const char *ss_pipeline_backend_name(const ss_pipeline_t *p)
{
    return p->ops->name;
}

void ss_pipeline_memory(ss_pipeline_t *p, size_t *used, size_t *total)
{
    *used = *total = 0;
    if (p->be)
        p->ops->memory(p->be, used, total);
}

ss_backend_t *ss_pipeline_backend(ss_pipeline_t *p, const ss_backend_ops_t **ops)
{
    if (ops)
        *ops = p->ops;
    return p->be;
}

int ss_pipeline_history_entry(const ss_pipeline_t *p, int k, int *slot, double *sx, double *sy,
                              uint64_t *seq)
{
    if (k < 0 || k >= p->n_hist)
        return -1;
    *slot = p->hist[k].slot;
    *sx = p->hist[k].sx;
    *sy = p->hist[k].sy;
    *seq = p->hist[k].seq;
    return 0;
}
