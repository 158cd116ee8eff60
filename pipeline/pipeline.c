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

#include "frame_fits.h"
#include "wcs.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define TAG "pipeline"
#define REF_CHECK_STRIDE 8          /* sampling of the "has valid pixels" check */

typedef struct hist_entry {
    int slot;
    double sx, sy;
} hist_entry_t;

struct ss_pipeline {
    ss_pipeline_cfg_t cfg;          /* as configured */
    ss_pipeline_cfg_t bcfg;         /* what the backend reads: cfg with the values fitted
                                     * to the frame size (registration levels) */
    int levels;                     /* the registration levels in use (bcfg.reg_levels) */
    char feed[SS_NAME_MAX];
    const ss_backend_ops_t *ops;
    ss_backend_t *be;
    ss_geometry_t geo;

    /* calibration frames as read (raw-sized), and their size */
    float *dark, *flat, *badf;
    int cal_w[3], cal_h[3];

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
    int n_hist;
    hist_entry_t hist[SS_MAX_HISTORY];
    ss_reweight_t rw;               /* this frame's poly re-weighting block (compute_weights) */
    int free_slots[SS_MAX_HISTORY];
    int n_free;

    ss_pipeline_stats_t stats;
    /* results whose residual is still arriving (ss_pipeline_start) */
    ss_result_t *inflight[SS_PIPELINE_INFLIGHT];
    int n_inflight;
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
    } else {
        r->residual = malloc(max_pixels * sizeof(float));
    }
    if (!r->residual || ss_detlist_init(&r->dets, max_dets) != 0) {
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
    if (r->residual_alloc.free)
        r->residual_alloc.free(r->residual, r->residual_alloc.user);
    else
        free(r->residual);
    r->residual = NULL;
    r->residual_capacity = 0;
    ss_detlist_free(&r->dets);
}

/* ---- calibration files ------------------------------------------------ */

static void free_ref_mean(ss_pipeline_t *p)
{
    free(p->ref_sum);
    free(p->ref_cnt);
    free(p->ref_buf);
    p->ref_sum = NULL;
    p->ref_cnt = NULL;
    p->ref_buf = NULL;
    p->ref_n = 0;
    p->ref_done = 0;
}

static void free_calibration(ss_pipeline_t *p)
{
    free(p->dark);
    free(p->flat);
    free(p->badf);
    p->dark = p->flat = p->badf = NULL;
}

static int load_calibration(ss_pipeline_t *p, char *err, size_t n)
{
    const char *paths[3] = { p->cfg.dark, p->cfg.flat, p->cfg.bad_pixels };
    float **dst[3] = { &p->dark, &p->flat, &p->badf };
    static const char *const what[3] = { "dark", "flat", "bad_pixels" };
    for (int i = 0; i < 3; i++) {
        if (!paths[i][0])
            continue;
        char e[400];
        if (ss_fits_read_float(paths[i], dst[i], &p->cal_w[i], &p->cal_h[i], e, sizeof e) != SS_OK) {
            snprintf(err, n, "%s: %s", what[i], e);
            free_calibration(p);
            return -1;
        }
    }
    return 0;
}

/* ---- history bookkeeping ---------------------------------------------- */

static void history_clear(ss_pipeline_t *p)
{
    p->n_hist = 0;
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
    history_clear(p);
}

void ss_pipeline_reset(ss_pipeline_t *p, const char *why)
{
    SS_LOG(SS_LOG_NOTICE, TAG, "feed %s: history reset (%s)", p->feed, why ? why : "requested");
    reset_state(p);
    p->stats.resets++;
}

/* Insert the current frame's slot at the head of the ring. */
static void history_push(ss_pipeline_t *p, int slot, double sx, double sy)
{
    int keep = SS_MIN(p->n_hist, p->cfg.history - 1);
    memmove(&p->hist[1], &p->hist[0], (size_t)keep * sizeof p->hist[0]);
    p->hist[0] = (hist_entry_t){ slot, sx, sy };
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
    if (counted) {
        p->stats.status[res->status]--;
        p->stats.detections -= (uint64_t)res->dets.count;
        p->stats.detections_truncated -= (uint64_t)res->dets.truncated;
        p->stats.status[SS_STATUS_ERROR]++;
    }
    res->status = SS_STATUS_ERROR;
    res->has_residual = 0;
    snprintf(res->reason, sizeof res->reason, "residual download: %s", ss_strerror(e));
    ss_detlist_clear(&res->dets);
    SS_LOG(SS_LOG_WARNING, TAG, "feed %s: frame %llu failed: %s", p->feed,
           (unsigned long long)res->meta.seq, res->reason);
    return e == SS_ERR_BROKEN ? SS_ERR_BROKEN : SS_ERR_BACKEND;
}

/* Before the backend goes (rebuild, reconfigure, destroy). */
static void settle_all(ss_pipeline_t *p)
{
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
    ss_strlcpy(p->feed, feed ? feed : "", sizeof p->feed);
    p->ops = ss_backend_select(cfg->backend, cfg->device, err, err_len);
    if (!p->ops || load_calibration(p, err, err_len) != 0) {
        free(p);
        return NULL;
    }
    p->sigma_prev = NAN;
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
    free(p);
    *pp = NULL;
}

/* Crop a raw-sized calibration plane to the roi (into a malloc'ed copy). */
static float *crop(const float *src, int raw_w, ss_roi_t roi)
{
    float *out = malloc((size_t)roi.w * (size_t)roi.h * sizeof(float));
    if (!out)
        return NULL;
    for (int y = 0; y < roi.h; y++)
        memcpy(out + (size_t)y * roi.w, src + (size_t)(y + roi.y) * raw_w + roi.x,
               (size_t)roi.w * sizeof(float));
    return out;
}

/* Registration levels for a frame size: the configured L, or fewer when
 * the coarsest level would be too small for the block search (a block of
 * B binned px and ±R search on both sides need more than B + 2R px). */
static int fit_levels(const ss_pipeline_cfg_t *c, int w, int h)
{
    int L = c->reg_levels;
    while (L > 0 && SS_MIN(w >> L, h >> L) <= c->reg_block + 2 * c->reg_search)
        L--;
    return L;
}

/* Make the backend instance for a new geometry. Runs at start and when
 * the frame size changes: allocation is fine here, not per frame. */
static ss_err_t build_backend(ss_pipeline_t *p, const ss_geometry_t *geo, char *err, size_t n)
{
    settle_all(p);
    if (p->be)
        p->ops->destroy(&p->be);
    const float *cal[3] = { p->dark, p->flat, p->badf };
    static const char *const what[3] = { "dark", "flat", "bad_pixels" };
    float *roi_cal[3] = { NULL, NULL, NULL };
    uint8_t *bad = NULL;
    ss_err_t e = SS_OK;
    for (int i = 0; i < 3; i++) {
        if (!cal[i])
            continue;
        if (p->cal_w[i] != geo->raw_w || p->cal_h[i] != geo->raw_h) {
            snprintf(err, n, "%s frame is %dx%d but frames are %dx%d", what[i], p->cal_w[i],
                     p->cal_h[i], geo->raw_w, geo->raw_h);
            e = SS_ERR_SIZE;
            goto out;
        }
        if (!(roi_cal[i] = crop(cal[i], geo->raw_w, geo->roi))) {
            e = SS_ERR_NOMEM;
            goto out;
        }
    }
    size_t npix = (size_t)geo->roi.w * (size_t)geo->roi.h;
    if (roi_cal[2]) {
        if (!(bad = malloc(npix))) {
            e = SS_ERR_NOMEM;
            goto out;
        }
        for (size_t i = 0; i < npix; i++)
            bad[i] = roi_cal[2][i] != 0.0f;
    }
    free_ref_mean(p);
    if (p->cfg.ref_frames > 1) {
        p->ref_sum = malloc(npix * sizeof(double));
        p->ref_cnt = malloc(npix * sizeof(uint16_t));
        p->ref_buf = malloc(npix * sizeof(float));
        if (!p->ref_sum || !p->ref_cnt || !p->ref_buf) {
            e = SS_ERR_NOMEM;
            goto out;
        }
    }
    ss_calib_data_t cd = { roi_cal[0], roi_cal[1], bad };
    p->geo = *geo;
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
    for (int i = 0; i < 3; i++)
        free(roi_cal[i]);
    free(bad);
    return e;
}

/* The region processed for this frame: the configured roi, else the
 * frame's trim section (when honoured), else the whole frame. */
static int frame_roi(const ss_pipeline_cfg_t *c, const ss_frame_t *f, ss_roi_t *roi, char *err,
                     size_t n)
{
    if (c->roi_w > 0 && c->roi_h > 0)
        *roi = (ss_roi_t){ c->roi_x, c->roi_y, c->roi_w, c->roi_h };
    else if (c->use_trimsec && f->meta.trim_w > 0 && f->meta.trim_h > 0)
        *roi = (ss_roi_t){ f->meta.trim_x0, f->meta.trim_y0, f->meta.trim_w, f->meta.trim_h };
    else
        *roi = (ss_roi_t){ 0, 0, f->width, f->height };
    if (roi->x < 0 || roi->y < 0 || roi->x + roi->w > f->width || roi->y + roi->h > f->height ||
        roi->w < 16 || roi->h < 16) {
        snprintf(err, n, "region [%d,%d %dx%d] does not fit a %dx%d frame (or is under 16 px)",
                 roi->x, roi->y, roi->w, roi->h, f->width, f->height);
        return -1;
    }
    return 0;
}

static int calibrated(const ss_pipeline_t *p)
{
    return p->dark != NULL || p->flat != NULL;
}

/* ---- one frame -------------------------------------------------------- */

static void result_begin(ss_result_t *res, const ss_frame_t *f)
{
    res->meta = f->meta;
    res->status = SS_STATUS_OK;
    res->reason[0] = '\0';
    memset(&res->coarse, 0, sizeof res->coarse);
    memset(&res->shift, 0, sizeof res->shift);
    res->rereferenced = 0;
    res->history_reset = 0;
    res->history_len = 0;
    res->sigma = NAN;
    res->n_weights = 0;
    res->has_residual = 0;
    ss_detlist_clear(&res->dets);
    for (int s = 0; s < SS_STAGE__COUNT; s++)
        res->stage_ms[s] = -1.0;
}

static ss_err_t fail_frame(ss_pipeline_t *p, ss_result_t *res, ss_err_t e, const char *why)
{
    if (res->residual_pending)          /* a later step failed: the copy is of no use */
        (void)settle(p, res, 0);
    res->has_residual = 0;
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

/* Weights for the n newest history frames against the current shift;
 * fills slots/offsets for the backend, and in poly mode *rw with the
 * re-weighting block for pixels with invalid history (NULL in lsq mode:
 * strict there, README). */
static ss_err_t compute_weights(ss_pipeline_t *p, const ss_shift_t *s, int n, int *slots,
                                int *ix, int *iy, double *a, const ss_reweight_t **rw)
{
    *rw = NULL;
    double fx[SS_MAX_HISTORY], fy[SS_MAX_HISTORY];
    for (int k = 0; k < n; k++) {
        double dx = s->sx - p->hist[k].sx, dy = s->sy - p->hist[k].sy;
        slots[k] = p->hist[k].slot;
        ix[k] = (int)lround(dx);
        iy[k] = (int)lround(dy);
        fx[k] = dx - ix[k];
        fy[k] = dy - iy[k];
    }
    if (p->cfg.mode == SS_WHITEN_LSQ) {
        double R[SS_MAX_HISTORY * SS_MAX_HISTORY], pv[SS_MAX_HISTORY];
        ss_err_t e = p->ops->lsq_moments(p->be, slots, ix, iy, n, R, pv);
        if (e != SS_OK)
            return e;
        if (ss_weights_lsq(R, pv, n, ss_cfg_gamma(&p->cfg), a) != 0)
            return SS_ERR_BACKEND;
        return SS_OK;
    }
    if (ss_weights_poly(fx, fy, n, p->cfg.poly_degree, ss_cfg_gamma(&p->cfg), p->cfg.forget,
                        a) != 0 ||
        ss_reweight_init(&p->rw, fx, fy, n, p->cfg.poly_degree, ss_cfg_gamma(&p->cfg),
                         p->cfg.forget, ss_cfg_min_valid(&p->cfg, n)) != 0)
        return SS_ERR_BACKEND;
    *rw = &p->rw;
    return SS_OK;
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
    ss_err_t e = p->ops->read_plane(p->be, SS_PLANE_FILTERED, 0, p->ref_buf);
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
    return p->ops->write_plane(p->be, SS_PLANE_REFERENCE, 0, p->ref_buf);
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

ss_err_t ss_pipeline_process(ss_pipeline_t *p, const ss_frame_t *f, ss_result_t *res)
{
    ss_err_t e = ss_pipeline_start(p, f, res);
    if (e != SS_OK)
        return e;
    return ss_pipeline_finish(p, res);
}

ss_err_t ss_pipeline_finish(ss_pipeline_t *p, ss_result_t *res)
{
    return settle(p, res, 1);
}

ss_err_t ss_pipeline_start(ss_pipeline_t *p, const ss_frame_t *f, ss_result_t *res)
{
    double t0 = ss_now_mono();
    char err[200];
    if (res->residual_pending)          /* the caller skipped finish: complete it now */
        (void)settle(p, res, 1);
    result_begin(res, f);
    p->stats.processed++;

    /* geometry: a new size (or the first frame) makes a new backend */
    ss_roi_t roi;
    if (frame_roi(&p->cfg, f, &roi, err, sizeof err) != 0)
        return fail_frame(p, res, SS_ERR_SIZE, err);
    if ((size_t)roi.w * (size_t)roi.h > res->residual_capacity)
        return fail_frame(p, res, SS_ERR_SIZE, "frame larger than the configured maximum");
    ss_geometry_t geo = {
        .raw_w = f->width, .raw_h = f->height, .raw_dtype = f->dtype, .roi = roi,
        .hist_dtype = ss_history_dtype(f->dtype, calibrated(p)), .history = p->cfg.history,
    };
    if (!p->be || memcmp(&geo, &p->geo, sizeof geo) != 0) {
        if (p->be) {
            char why[160];
            snprintf(why, sizeof why, "frame geometry changed from %dx%d %s to %dx%d %s",
                     p->geo.raw_w, p->geo.raw_h, ss_dtype_name(p->geo.raw_dtype), f->width,
                     f->height, ss_dtype_name(f->dtype));
            ss_pipeline_reset(p, why);
            res->history_reset = 1;
        }
        ss_err_t e = build_backend(p, &geo, err, sizeof err);
        if (e != SS_OK) {
            memset(&p->geo, 0, sizeof p->geo);
            return fail_frame(p, res, e, err);
        }
        reset_state(p);
    }
    res->width = roi.w;
    res->height = roi.h;
    res->origin_x = roi.x;
    res->origin_y = roi.y;

    TRY(p->ops->ingest(p->be, f));

    ss_shift_t *s = &res->shift;
    if (!p->have_ref) {
        /* a reference needs valid pixels: an all-invalid frame is refused */
        float spread;
        TRY(p->ops->noise(p->be, SS_PLANE_FILTERED, REF_CHECK_STRIDE, &spread));
        if (!isfinite(spread)) {
            res->status = SS_STATUS_REG_FAILED;
            ss_strlcpy(res->reason, "registration failed: no valid pixels for a reference",
                       sizeof res->reason);
            p->fail_run++;
            goto done;
        }
        TRY(p->ops->set_reference(p->be));
        p->have_ref = 1;
        s->ok = 1;
        if (p->ref_sum)     /* the first of the M frames of a mean reference */
            TRY(ref_mean_add(p, s));
        res->status = SS_STATUS_REFERENCE;
        res->rereferenced = 1;
        ss_strlcpy(res->reason, "first good frame after start or reset", sizeof res->reason);
    } else {
        TRY(p->ops->register_coarse(p->be, &res->coarse));
        if (res->coarse.ok)
            TRY(p->ops->register_fine(p->be, res->coarse.dx, res->coarse.dy, s));
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
            goto done;
        }
        p->fail_run = 0;
        if (p->ref_sum && !p->ref_done)
            TRY(ref_mean_add(p, s));
    }

    /* prediction, cleanup and detection once the history is deep enough */
    int n = SS_MIN(p->n_hist, p->cfg.history);
    if (res->status == SS_STATUS_OK && n < ss_cfg_min_history(&p->cfg))
        res->status = SS_STATUS_WARMUP;
    if (res->status == SS_STATUS_OK) {
        int slots[SS_MAX_HISTORY], ix[SS_MAX_HISTORY], iy[SS_MAX_HISTORY];
        const ss_reweight_t *rw;
        TRY(compute_weights(p, s, n, slots, ix, iy, res->weights, &rw));
        res->n_weights = n;
        res->history_len = n;
        TRY(p->ops->whiten(p->be, slots, ix, iy, res->weights, n, rw));
        if (!isfinite(p->sigma_prev))
            TRY(p->ops->noise(p->be, SS_PLANE_RESIDUAL, p->cfg.noise_stride, &p->sigma_prev));
        int radius = p->cfg.guided ? ss_cfg_guided_radius(&p->cfg) : 0;
        float eps = (float)(p->cfg.guided_eps * (double)p->sigma_prev * (double)p->sigma_prev);
        TRY(p->ops->guided(p->be, radius, eps));
        TRY(p->ops->noise(p->be, SS_PLANE_CLEAN, p->cfg.noise_stride, &res->sigma));
        if (!isfinite(res->sigma) || res->sigma <= 0.0f)
            return fail_frame(p, res, SS_ERR_BACKEND, "no valid residual pixels (noise undefined)");
        /* r' is final: its download runs alongside the matched filter and
         * the detection (and, pending, the next frame's first stages) */
        const int async = async_read(p, res);
        if (async) {
            TRY(p->ops->read_begin(p->be, SS_PLANE_CLEAN, res->residual, &res->residual_ticket));
            res->residual_pending = 1;
            p->inflight[p->n_inflight++] = res;
        }
        TRY(p->ops->matched(p->be, p->cfg.psf_sigma, res->sigma));
        TRY(p->ops->detect(p->be, res->sigma, &res->dets));
        ss_merge_streaks(&res->dets, p->cfg.streak_gap, fmax(3.0, 2.0 * p->cfg.psf_sigma));
        to_input_frame(&res->dets, roi, &f->meta);
        if (!async)
            TRY(p->ops->read_plane(p->be, SS_PLANE_CLEAN, 0, res->residual));
        res->has_residual = 1;
        p->sigma_prev = res->sigma;
    }

    /* into the history (objects removed), then re-reference if needed */
    int slot = history_next_slot(p);
    int remove = res->status == SS_STATUS_OK && p->cfg.remove_objects;
    TRY(p->ops->history_store(p->be, slot, remove, (int)floor(ss_cfg_mask_radius(&p->cfg))));
    history_push(p, slot, s->sx, s->sy);
    if (res->status != SS_STATUS_REFERENCE && hypot(s->sx, s->sy) > p->cfg.reref_px) {
        TRY(p->ops->set_reference(p->be));
        for (int k = 0; k < p->n_hist; k++) {
            p->hist[k].sx -= s->sx;
            p->hist[k].sy -= s->sy;
        }
        res->rereferenced = 1;
        p->stats.rereferences++;
        if (p->ref_sum) {   /* a new mean starts from this frame */
            ss_shift_t zero = { .ok = 1 };
            p->ref_n = 0;
            p->ref_done = 0;
            TRY(ref_mean_add(p, &zero));
        }
        SS_LOG(SS_LOG_INFO, TAG, "feed %s: re-referenced at frame %llu (|s| = %.2f px)", p->feed,
               (unsigned long long)f->meta.seq, hypot(s->sx, s->sy));
    }

done:
    if (!res->has_residual) {
        /* Frames without a prediction (reference, warm-up, failed
         * registration) still get a residual of their size, all invalid,
         * so that every processed frame has one: consumers see each frame
         * and its status, nothing silently skipped. */
        size_t npix = (size_t)res->width * (size_t)res->height;
        for (size_t i = 0; i < npix; i++)
            res->residual[i] = NAN;
        res->has_residual = npix > 0;
    }
    p->stats.status[res->status]++;
    p->stats.detections += (uint64_t)res->dets.count;
    p->stats.detections_truncated += (uint64_t)res->dets.truncated;
    p->ops->stage_times(p->be, res->stage_ms);
    res->total_ms = (ss_now_mono() - t0) * 1e3;
    return SS_OK;
}

void ss_pipeline_prefetch(ss_pipeline_t *p, const ss_frame_t *next)
{
    if (!p->be || !p->ops->prefetch || next->width != p->geo.raw_w ||
        next->height != p->geo.raw_h || next->dtype != p->geo.raw_dtype)
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
           a->reg_levels != b->reg_levels || a->reg_block != b->reg_block ||
           a->reg_search != b->reg_search || strcmp(a->dark, b->dark) != 0 ||
           strcmp(a->flat, b->flat) != 0 || strcmp(a->bad_pixels, b->bad_pixels) != 0;
}

int ss_pipeline_reconfigure(ss_pipeline_t *p, const ss_pipeline_cfg_t *cfg, char *err,
                            size_t err_len)
{
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
    *p = *fresh;
    free(fresh);
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
