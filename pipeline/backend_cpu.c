/*
 * backend_cpu.c — the CPU backend: planes in host memory, every stage by
 * the reference functions of stages.h. It is deliberately plain: this is
 * the implementation the CUDA backend is tested against, and the fallback
 * for stations without a GPU. Parallelism lives inside the stage
 * functions (OpenMP).
 */
#include "backend.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* Components measured per frame at most (both signs together). A frame
 * with more (thresholding noise, or a huge frame) measures its most
 * significant ones (cpu_detect); the others count as truncated. */
#define CPU_MAX_COMPONENTS (1 << 18)
/* Ranking scratch per component: an ss_rank_t, its area and its slot. */
#define RANK_BYTES_PER_COMP (sizeof(ss_rank_t) + 2 * sizeof(int32_t))

struct ss_backend {
    const ss_pipeline_cfg_t *cfg;   /* the driver's copy; reloadable fields change between frames */
    ss_geometry_t geo;
    int w, h;
    size_t npix;

    float *dark, *flat, *bias;      /* roi-sized, NULL if none */
    uint8_t *bad;                   /* static mask, roi-sized, NULL if none */
    ss_hotpix_t hot;

    float *plane[SS_PLANE__COUNT];  /* float planes (FRAME .. STAR) */
    int32_t *labels;
    void **hist;                    /* geo.history slots of geo.hist_dtype */

    /* pyramids: level 0 is REFERENCE / FILTERED itself */
    float *ref_lvl[SS_MAX_LEVELS + 1], *cur_lvl[SS_MAX_LEVELS + 1];
    ss_pyramid_t ref_pyr, cur_pyr;

    float *fscratch;                /* 8·npix floats */
    double *dscratch;               /* 2·npix doubles, or more (RANK_BYTES_PER_COMP) */
    int32_t *iscratch;              /* npix */
    ss_peak_t *peaks;               /* 2·SS_COARSE_PEAK_CAP: the coarse step's star peaks */
    int *vote_hist;                 /* (2·SS_COARSE_MAX_R + 1)²: its vote histogram */
    uint8_t *bscratch;              /* npix */
    ss_comp_acc_t *acc;             /* CPU_MAX_COMPONENTS */
    double *moments;                /* history² + history: the lsq plan's R and p */

    double ms[SS_STAGE__COUNT];
    uint64_t rd_issued;             /* read_begin tickets */
    int grow_raw;                   /* SNR_RAW holds this frame's z before the model-error
                                     * division (modelvar): detection grows on it */
    float frame_sigma;              /* the last noise op's σ (frame_stats) */
    float mv_beta;                  /* the last modelvar's β and samples (frame_stats) */
    int mv_n;
    struct {                        /* the last predict_planned's results (predict_take) */
        ss_coarse_t coarse;
        ss_shift_t shift;
        int planned, n;
        int ix[SS_MAX_HISTORY], iy[SS_MAX_HISTORY];
        double a[SS_MAX_HISTORY];
        ss_reweight_t rw;
    } plan;
};

static int is_float_plane(ss_plane_t p)
{
    return p >= SS_PLANE_FRAME && p <= SS_PLANE_STAR;
}

static int cpu_probe(int device, char *why, size_t n)
{
    (void)device;
    (void)why;
    (void)n;
    return 1;
}

static void cpu_destroy(ss_backend_t **pb)
{
    if (!pb || !*pb)
        return;
    ss_backend_t *b = *pb;
    free(b->dark);
    free(b->flat);
    free(b->bias);
    free(b->bad);
    ss_hotpix_free(&b->hot);
    for (int i = 0; i < SS_PLANE__COUNT; i++)
        free(b->plane[i]);
    free(b->labels);
    if (b->hist)
        for (int i = 0; i < b->geo.history; i++)
            free(b->hist[i]);
    free(b->hist);
    free(b->moments);
    for (int l = 1; l <= SS_MAX_LEVELS; l++) {
        free(b->ref_lvl[l]);
        free(b->cur_lvl[l]);
    }
    free(b->fscratch);
    free(b->dscratch);
    free(b->iscratch);
    free(b->peaks);
    free(b->vote_hist);
    free(b->bscratch);
    free(b->acc);
    free(b);
    *pb = NULL;
}

static void *dup_or_null(const void *src, size_t bytes, int *fail)
{
    if (!src)
        return NULL;
    void *p = malloc(bytes);
    if (!p) {
        *fail = 1;
        return NULL;
    }
    memcpy(p, src, bytes);
    return p;
}

/* Sizes of the pyramid levels; level 0 is the processed frame. */
static void pyramid_shape(ss_pyramid_t *pyr, int w, int h, int levels)
{
    pyr->levels = levels;
    pyr->w[0] = w;
    pyr->h[0] = h;
    for (int l = 1; l <= levels; l++) {
        pyr->w[l] = pyr->w[l - 1] / 2;
        pyr->h[l] = pyr->h[l - 1] / 2;
    }
}

static ss_err_t cpu_create(const ss_pipeline_cfg_t *cfg, const ss_geometry_t *geo,
                           const ss_calib_data_t *calib, ss_backend_t **out)
{
    *out = NULL;
    if (geo->roi.w <= 0 || geo->roi.h <= 0 || geo->history <= 0 ||
        geo->history > SS_MAX_HISTORY || cfg->reg_levels < 0 || cfg->reg_levels > SS_MAX_LEVELS)
        return SS_ERR_INVALID;
    ss_backend_t *b = calloc(1, sizeof *b);
    if (!b)
        return SS_ERR_NOMEM;
    b->cfg = cfg;
    b->geo = *geo;
    b->w = geo->roi.w;
    b->h = geo->roi.h;
    b->npix = (size_t)b->w * (size_t)b->h;
    int fail = 0;
    if (calib) {
        b->dark = dup_or_null(calib->dark, b->npix * sizeof(float), &fail);
        b->flat = dup_or_null(calib->flat, b->npix * sizeof(float), &fail);
        b->bad = dup_or_null(calib->bad, b->npix, &fail);
        b->bias = dup_or_null(calib->bias, b->npix * sizeof(float), &fail);
    }
    if (ss_hotpix_init(&b->hot, b->w, b->h) != 0)
        fail = 1;
    for (int i = SS_PLANE_FRAME; i <= SS_PLANE_STAR; i++)
        if (!(b->plane[i] = malloc(b->npix * sizeof(float))))
            fail = 1;
    b->labels = calloc(b->npix, sizeof(int32_t));
    b->hist = calloc((size_t)geo->history, sizeof(void *));
    if (!b->labels || !b->hist)
        fail = 1;
    size_t hbytes = b->npix * ss_dtype_size(geo->hist_dtype);
    for (int i = 0; !fail && i < geo->history; i++)
        if (!(b->hist[i] = malloc(hbytes)))
            fail = 1;
    pyramid_shape(&b->ref_pyr, b->w, b->h, cfg->reg_levels);
    pyramid_shape(&b->cur_pyr, b->w, b->h, cfg->reg_levels);
    for (int l = 1; !fail && l <= cfg->reg_levels; l++) {
        size_t n = (size_t)b->ref_pyr.w[l] * (size_t)b->ref_pyr.h[l];
        b->ref_lvl[l] = malloc((n ? n : 1) * sizeof(float));
        b->cur_lvl[l] = malloc((n ? n : 1) * sizeof(float));
        if (!b->ref_lvl[l] || !b->cur_lvl[l])
            fail = 1;
    }
    b->fscratch = malloc(8 * b->npix * sizeof(float));
    /* 2·npix doubles for the guided filter; detection ranks its
     * components in the same memory (cpu_detect) */
    const size_t rank_bytes = (size_t)ss_comp_bound(b->w, b->h) * RANK_BYTES_PER_COMP;
    b->dscratch = malloc(SS_MAX(2 * b->npix * sizeof(double), rank_bytes));
    b->iscratch = malloc(b->npix * sizeof(int32_t));
    b->peaks = malloc(2 * (size_t)SS_COARSE_PEAK_CAP * sizeof(ss_peak_t));
    b->vote_hist = malloc((size_t)(2 * SS_COARSE_MAX_R + 1) * (2 * SS_COARSE_MAX_R + 1) * sizeof(int));
    b->bscratch = malloc(b->npix);
    b->acc = malloc(CPU_MAX_COMPONENTS * sizeof(ss_comp_acc_t));
    b->moments = malloc(((size_t)geo->history * geo->history + geo->history) * sizeof(double));
    if (fail || !b->fscratch || !b->dscratch || !b->iscratch || !b->bscratch || !b->acc ||
        !b->peaks || !b->vote_hist || !b->moments) {
        cpu_destroy(&b);
        return SS_ERR_NOMEM;
    }
    for (int i = SS_PLANE_FRAME; i <= SS_PLANE_STAR; i++)
        for (size_t j = 0; j < b->npix; j++)
            b->plane[i][j] = NAN;
    b->ref_pyr.lvl[0] = b->plane[SS_PLANE_REFERENCE];
    b->cur_pyr.lvl[0] = b->plane[SS_PLANE_HIPASS];
    for (int l = 1; l <= cfg->reg_levels; l++) {
        b->ref_pyr.lvl[l] = b->ref_lvl[l];
        b->cur_pyr.lvl[l] = b->cur_lvl[l];
    }
    for (int s = 0; s < SS_STAGE__COUNT; s++)
        b->ms[s] = -1.0;
    *out = b;
    return SS_OK;
}

/* Wall-clock timing of one stage into b->ms[stage]. */
#define TIMED(b, stage, ...)                                    \
    do {                                                        \
        double t0_ = ss_now_mono();                             \
        __VA_ARGS__;                                            \
        (b)->ms[stage] = (ss_now_mono() - t0_) * 1e3;           \
    } while (0)

/* The frame holds the part of the roi that cf says it carries. */
static int cpu_frame_fits(const ss_backend_t *b, const ss_frame_t *raw, const ss_calib_frame_t *cf)
{
    const ss_roi_t r = b->geo.roi;
    const int vw = cf ? cf->valid_w : r.w, vh = cf ? cf->valid_h : r.h;
    return raw->pixels && raw->dtype == b->geo.raw_dtype && vw >= 1 && vw <= r.w && vh >= 1 &&
           vh <= r.h && r.x + vw <= raw->width && r.y + vh <= raw->height;
}

static ss_err_t cpu_ingest(ss_backend_t *b, const ss_frame_t *raw, const ss_calib_frame_t *cf)
{
    if (!cpu_frame_fits(b, raw, cf))
        return SS_ERR_SIZE;
    for (int s = 0; s < SS_STAGE__COUNT; s++)
        b->ms[s] = -1.0;
    b->ms[SS_STAGE_UPLOAD] = 0.0;
#ifdef _OPENMP
    /* "threads" (reloadable): the team size of this worker thread's
     * parallel regions (an OpenMP setting of the calling thread only) */
    omp_set_num_threads(b->cfg->threads > 0 ? b->cfg->threads : omp_get_num_procs());
#endif
    float *frame = b->plane[SS_PLANE_FRAME], *filt = b->plane[SS_PLANE_FILTERED];
    const ss_pipeline_cfg_t *c = b->cfg;
    TIMED(b, SS_STAGE_CALIBRATE, {
        const ss_calib_data_t cal = { b->dark, b->flat, b->bad, b->bias };
        ss_calibrate_frame(raw->pixels, raw->dtype, raw->width, raw->valid, b->geo.roi, &cal, cf,
                           c->saturation, frame);
        ss_median3x3(frame, b->w, b->h, filt);
        if (c->hotpix_learn) {
            b->hot.min_frames = c->hotpix_min_frames;   /* reloadable */
            ss_hotpix_update(&b->hot, frame, filt, c->hotpix_k, c->hotpix_frames,
                             c->hotpix_fraction, b->fscratch);
            ss_hotpix_apply(&b->hot, frame, filt);
        }
        /* the registration input: sharp outliers out, then the local
         * mean (stages.h §2: the median itself is not used, it breaks the
         * sub-pixel equivariance that the fine step relies on) */
        ss_clean_sharp(frame, filt, b->w, b->h, c->clean_k, c->clean_ratio, b->fscratch,
                       b->fscratch + b->npix);
        ss_hipass(b->fscratch, b->w, b->h, ss_cfg_hipass_radius(c), b->plane[SS_PLANE_HIPASS],
                  b->fscratch + 3 * b->npix);
    });
    return SS_OK;
}

static void build_pyramid(ss_pyramid_t *pyr)
{
    for (int l = 1; l <= pyr->levels; l++)
        ss_bin2(pyr->lvl[l - 1], pyr->w[l - 1], pyr->h[l - 1], (float *)pyr->lvl[l]);
}

static ss_err_t cpu_set_reference(ss_backend_t *b)
{
    TIMED(b, SS_STAGE_REG_COARSE, {
        memcpy(b->plane[SS_PLANE_REFERENCE], b->plane[SS_PLANE_HIPASS], b->npix * sizeof(float));
        build_pyramid(&b->ref_pyr);
        ss_reference_prep(b->plane[SS_PLANE_REFERENCE], b->w, b->h, b->plane[SS_PLANE_REF_S],
                          b->plane[SS_PLANE_REF_GX], b->plane[SS_PLANE_REF_GY]);
    });
    return SS_OK;
}

static ss_err_t cpu_register_coarse(ss_backend_t *b, ss_coarse_t *out)
{
    TIMED(b, SS_STAGE_REG_COARSE, {
        build_pyramid(&b->cur_pyr);
        ss_register_coarse(&b->ref_pyr, &b->cur_pyr, b->cfg, b->peaks, SS_COARSE_PEAK_CAP,
                           b->vote_hist, out);
    });
    return SS_OK;
}

static void cpu_fine_sums(void *ctx, double sx, double sy, ss_fine_bands_t sums)
{
    ss_backend_t *b = ctx;
    ss_fine_sums(b->plane[SS_PLANE_HIPASS], b->plane[SS_PLANE_REFERENCE],
                 b->plane[SS_PLANE_REF_S], b->plane[SS_PLANE_REF_GX], b->plane[SS_PLANE_REF_GY],
                 b->w, b->h, sx, sy, sums);
}

static ss_err_t cpu_register_fine(ss_backend_t *b, double sx0, double sy0, ss_shift_t *out)
{
    TIMED(b, SS_STAGE_REG_FINE, ss_register_fine(cpu_fine_sums, b, sx0, sy0, b->cfg, out));
    return SS_OK;
}

static ss_err_t make_views(ss_backend_t *b, const int *slots, const int *ix, const int *iy, int n,
                           ss_hist_view_t *v)
{
    if (n < 1 || n > b->geo.history)
        return SS_ERR_INVALID;
    for (int k = 0; k < n; k++) {
        if (slots[k] < 0 || slots[k] >= b->geo.history)
            return SS_ERR_INVALID;
        v[k] = (ss_hist_view_t){ b->hist[slots[k]], b->geo.hist_dtype, ix[k], iy[k] };
    }
    return SS_OK;
}

static ss_err_t cpu_lsq_moments(ss_backend_t *b, const int *slots, const int *ix, const int *iy,
                                int n, double *R, double *p)
{
    ss_hist_view_t v[SS_MAX_HISTORY];
    ss_err_t e = make_views(b, slots, ix, iy, n, v);
    if (e)
        return e;
    TIMED(b, SS_STAGE_WHITEN, ss_lsq_moments(b->plane[SS_PLANE_FRAME], v, n, b->w, b->h, R, p));
    return SS_OK;
}

static ss_err_t cpu_whiten(ss_backend_t *b, const int *slots, const int *ix, const int *iy,
                           const double *a, int n, const ss_reweight_t *rw)
{
    ss_hist_view_t v[SS_MAX_HISTORY];
    ss_err_t e = make_views(b, slots, ix, iy, n, v);
    if (e)
        return e;
    if (rw && rw->n != n)
        return SS_ERR_INVALID;
    TIMED(b, SS_STAGE_WHITEN,
          ss_whiten(b->plane[SS_PLANE_FRAME], v, a, n, b->w, b->h, rw,
                    b->plane[SS_PLANE_PREDICTION], b->plane[SS_PLANE_RESIDUAL]));
    return SS_OK;
}

static ss_err_t cpu_guided(ss_backend_t *b, int radius, float eps, const ss_gmask_t *mask)
{
    TIMED(b, SS_STAGE_GUIDED, {
        if (radius <= 0)
            memcpy(b->plane[SS_PLANE_CLEAN], b->plane[SS_PLANE_RESIDUAL], b->npix * sizeof(float));
        else if (b->cfg->guided_laplacian)
            ss_guided_filter2(b->plane[SS_PLANE_PREDICTION], b->plane[SS_PLANE_RESIDUAL], b->w,
                              b->h, radius, eps, b->cfg->guided_biharmonic, mask,
                              b->plane[SS_PLANE_CLEAN], b->fscratch,
                              b->dscratch);
        else
            ss_guided_filter(b->plane[SS_PLANE_PREDICTION], b->plane[SS_PLANE_RESIDUAL], b->w,
                             b->h, radius, eps, mask, b->plane[SS_PLANE_CLEAN], b->fscratch,
                             b->dscratch);
    });
    return SS_OK;
}

static ss_err_t cpu_noise(ss_backend_t *b, ss_plane_t which, int stride, float *sigma)
{
    if (!is_float_plane(which))
        return SS_ERR_INVALID;
    TIMED(b, SS_STAGE_NOISE,
          b->frame_sigma = ss_noise_clipped(b->plane[which], b->w, b->h, stride));
    if (sigma)
        *sigma = b->frame_sigma;
    return SS_OK;
}

/* The lsq plan of the registered shift: the offsets, the moments at them
 * and the Wiener weights (ss_weights_lsq, as the driver solves them), and
 * the mask's guide threshold into *tl. Returns whether the weights were
 * solved (*e: an error of the moments). */
static int cpu_plan_lsq(ss_backend_t *b, const ss_wplan_t *wp, const int *slots, float *tl,
                        ss_err_t *e)
{
    const int n = wp->n;
    double fx[SS_MAX_HISTORY], fy[SS_MAX_HISTORY], *R = b->moments, *p = R + (size_t)n * n;
    ss_pc_offsets(ss_pc_unbias(b->plan.shift.sx, wp->kappa_x),
                  ss_pc_unbias(b->plan.shift.sy, wp->kappa_y), wp->hsx, wp->hsy, n, b->plan.ix,
                  b->plan.iy, fx, fy);
    if ((*e = cpu_lsq_moments(b, slots, b->plan.ix, b->plan.iy, n, R, p)) != SS_OK ||
        ss_weights_lsq(R, p, n, wp->gamma, b->plan.a) != 0)
        return 0;
    double a2 = 0.0;
    for (int k = 0; k < n; k++)
        a2 += b->plan.a[k] * b->plan.a[k];
    if (wp->masked)
        *tl = ss_pc_gmask_tl(wp->tau, wp->sigma, wp->g, a2);
    return 1;
}

/* The driver's planned path, step by step: the registration, the plan
 * from its shift (plan_core.h, the arithmetic of the driver's own
 * weights) and the prediction, guided filter and σ, so that the path runs,
 * and is tested, without a GPU as with one. A failed registration or
 * singular weights stop it; predict_take says which. */
static ss_err_t cpu_predict_planned(ss_backend_t *b, const ss_wplan_t *wp, const int *slots,
                                    int radius, float eps, const ss_gmask_t *gm,
                                    ss_coarse_t *coarse)
{
    if (wp->n < 1 || wp->n > b->geo.history || (wp->masked != 0) != (gm != NULL))
        return SS_ERR_INVALID;
    memset(coarse, 0, sizeof *coarse);      /* it ran: the result comes with predict_take */
    b->plan.planned = 0;
    b->plan.n = wp->n;
    memset(&b->plan.shift, 0, sizeof b->plan.shift);
    ss_err_t e = cpu_register_coarse(b, &b->plan.coarse);
    if (e == SS_OK && b->plan.coarse.ok)
        e = cpu_register_fine(b, b->plan.coarse.dx, b->plan.coarse.dy, &b->plan.shift);
    if (e != SS_OK || !b->plan.coarse.ok || !b->plan.shift.ok)
        return e;
    float tl = 0.0f;
    const int solved = wp->lsq ? cpu_plan_lsq(b, wp, slots, &tl, &e)
                               : ss_pc_plan(wp, b->plan.shift.sx, b->plan.shift.sy, b->plan.ix,
                                            b->plan.iy, b->plan.a, &b->plan.rw, &tl) == 0;
    if (e != SS_OK || !solved)
        return e;
    b->plan.planned = 1;
    ss_gmask_t m;
    if (gm) {
        m = *gm;
        m.tl = tl;
    }
    if ((e = cpu_whiten(b, slots, b->plan.ix, b->plan.iy, b->plan.a, wp->n,
                        wp->lsq ? NULL : &b->plan.rw)) ||
        (e = cpu_guided(b, radius, eps, gm ? &m : NULL)))
        return e;
    return cpu_noise(b, SS_PLANE_CLEAN, b->cfg->noise_stride, NULL);
}

static ss_err_t cpu_predict_take(ss_backend_t *b, ss_coarse_t *coarse, ss_shift_t *out, int *ix,
                                 int *iy, double *a, int *planned)
{
    *coarse = b->plan.coarse;
    *out = b->plan.shift;
    *planned = b->plan.planned;
    for (int k = 0; k < b->plan.n && b->plan.planned; k++) {
        ix[k] = b->plan.ix[k];
        iy[k] = b->plan.iy[k];
        a[k] = b->plan.a[k];
    }
    return SS_OK;
}

/* sigma as matched, modelvar and detect are given it (SS_SIGMA_FRAME:
 * the last noise op's). */
static float cpu_sigma(const ss_backend_t *b, float sigma)
{
    return sigma == SS_SIGMA_FRAME ? b->frame_sigma : sigma;
}

static ss_err_t cpu_matched(ss_backend_t *b, double psf_sigma, int phases, float sigma)
{
    sigma = cpu_sigma(b, sigma);
    TIMED(b, SS_STAGE_MATCHED,
          ss_matched_filter(b->plane[SS_PLANE_CLEAN], b->w, b->h, psf_sigma, phases, sigma,
                            b->plane[SS_PLANE_SNR], b->fscratch));
    b->grow_raw = 0;
    return SS_OK;
}

/* §6b. The samples go to the end of fscratch (at most npix/stride²
 * floats; the template's scratch is its first 5·npix). */
static ss_err_t cpu_modelvar(ss_backend_t *b, int r, double psf_sigma, float sigma, int stride,
                             float tmin)
{
    const double t0 = ss_now_mono();
    sigma = cpu_sigma(b, sigma);
    float *t = b->plane[SS_PLANE_STAR], *z = b->plane[SS_PLANE_SNR];
    ss_star_template(b->plane[SS_PLANE_PREDICTION], b->w, b->h, r, psf_sigma, sigma, t,
                     b->fscratch);
    float *q = b->fscratch + 5 * b->npix;
    b->mv_n = ss_mv_gather(z, t, b->w, b->h, stride, tmin, q);
    b->mv_beta = ss_mv_beta(q, b->mv_n);
    ss_mv_apply(z, t, b->w, b->h, b->mv_beta, b->plane[SS_PLANE_SNR_RAW]);
    b->grow_raw = 1;
    b->ms[SS_STAGE_MATCHED] += (ss_now_mono() - t0) * 1e3;     /* part of the matched filter */
    return SS_OK;
}

static ss_err_t cpu_frame_stats(ss_backend_t *b, float *sigma, float *beta, int *n)
{
    *sigma = b->frame_sigma;
    *beta = b->mv_beta;
    *n = b->mv_n;
    return SS_OK;
}

/* §7. Up to CPU_MAX_COMPONENTS components are measured and ranked as
 * they are; a frame with more first picks the most significant eligible
 * ones (ss_comp_preselect), so that the result is the same as if all had
 * been measured. The ranking scratch (rank, area, slot per component)
 * lives in dscratch, which is free during detection. */
static ss_err_t cpu_detect(ss_backend_t *b, float sigma, ss_detlist_t *out)
{
    sigma = cpu_sigma(b, sigma);
    const ss_pipeline_cfg_t *c = b->cfg;
    TIMED(b, SS_STAGE_DETECT, {
        int np = 0, nn = 0;
        const float *rc = b->plane[SS_PLANE_CLEAN], *r = b->plane[SS_PLANE_RESIDUAL];
        const float *z = b->plane[SS_PLANE_SNR];
        const float *zg = b->grow_raw ? b->plane[SS_PLANE_SNR_RAW] : z;
        ss_label_seeded(zg, z, b->w, b->h, (float)c->thresh, (float)c->thresh_low, c->negative,
                        b->labels, b->iscratch, &np, &nn);
        const int nc = np + nn;
        ss_rank_t *rank = (ss_rank_t *)b->dscratch;
        if (nc <= CPU_MAX_COMPONENTS) {
            ss_measure(b->labels, np, nn, rc, r, z, b->w, b->h, sigma, c, b->acc, rank, out);
        } else {
            int32_t *area = (int32_t *)(rank + nc), *slot = area + nc;
            const int elig = ss_comp_preselect(b->labels, np, nn, z, b->w, b->h, c->min_area,
                                               CPU_MAX_COMPONENTS, rank, area, slot);
            const int nslot = SS_MIN(elig, CPU_MAX_COMPONENTS);
            ss_measure_acc(b->labels, np, nn, slot, nslot, rc, r, z, b->w, b->h, c, b->acc);
            ss_measure_rank(b->acc, nslot, elig - nslot, sigma, b->w, c, rank, out);
        }
    });
    return SS_OK;
}

static ss_err_t cpu_history_store(ss_backend_t *b, int slot, int remove, int radius)
{
    if (slot < 0 || slot >= b->geo.history)
        return SS_ERR_INVALID;
    TIMED(b, SS_STAGE_HISTORY, {
        const float *src = b->plane[SS_PLANE_FRAME];
        if (b->cfg->clean_sharp) {
            ss_clean_sharp(src, b->plane[SS_PLANE_FILTERED], b->w, b->h, b->cfg->clean_k,
                           b->cfg->clean_ratio, b->fscratch, b->fscratch + b->npix);
            src = b->fscratch;
        }
        ss_history_store(src, remove ? b->plane[SS_PLANE_PREDICTION] : NULL,
                         remove ? b->labels : NULL, radius, b->w, b->h, b->hist[slot],
                         b->geo.hist_dtype, b->bscratch);
    });
    return SS_OK;
}

/* Where a plane lives and how many bytes it has. */
static void *plane_ptr(ss_backend_t *b, ss_plane_t p, int slot, size_t *bytes)
{
    if (is_float_plane(p)) {
        *bytes = b->npix * sizeof(float);
        return b->plane[p];
    }
    if (p == SS_PLANE_LABELS) {
        *bytes = b->npix * sizeof(int32_t);
        return b->labels;
    }
    if (p == SS_PLANE_HISTORY && slot >= 0 && slot < b->geo.history) {
        *bytes = b->npix * ss_dtype_size(b->geo.hist_dtype);
        return b->hist[slot];
    }
    return NULL;
}

static ss_err_t cpu_read_plane(ss_backend_t *b, ss_plane_t p, int slot, void *dst)
{
    if (p == SS_PLANE_BADMASK) {
        uint8_t *m = dst;
        for (size_t i = 0; i < b->npix; i++)
            m[i] = (uint8_t)((b->bad && b->bad[i]) || b->hot.learned[i]);
        return SS_OK;
    }
    size_t bytes;
    void *src = plane_ptr(b, p, slot, &bytes);
    if (!src)
        return SS_ERR_INVALID;
    memcpy(dst, src, bytes);
    return SS_OK;
}

static ss_err_t cpu_write_plane(ss_backend_t *b, ss_plane_t p, int slot, const void *src)
{
    size_t bytes;
    void *dst = plane_ptr(b, p, slot, &bytes);
    if (!dst)
        return SS_ERR_INVALID;
    memcpy(dst, src, bytes);
    if (p == SS_PLANE_SNR || p == SS_PLANE_SNR_RAW)
        b->grow_raw = p == SS_PLANE_SNR_RAW;    /* backend.h: which map detection grows on */
    /* a written reference must be followed by its pyramid and gradients */
    if (p == SS_PLANE_REFERENCE) {
        build_pyramid(&b->ref_pyr);
        ss_reference_prep(b->plane[SS_PLANE_REFERENCE], b->w, b->h, b->plane[SS_PLANE_REF_S],
                          b->plane[SS_PLANE_REF_GX], b->plane[SS_PLANE_REF_GY]);
    }
    return SS_OK;
}

static void cpu_stage_times(ss_backend_t *b, double ms[SS_STAGE__COUNT])
{
    memcpy(ms, b->ms, sizeof b->ms);
}

/* The CPU has nothing to overlap: the copy is made at once, so that the
 * driver's and the daemon's asynchronous hand-over run (and are tested) on
 * machines without a GPU the same way as with one. */
static ss_err_t cpu_read_begin(ss_backend_t *b, ss_plane_t p, void *dst, uint64_t *ticket)
{
    if (p != SS_PLANE_CLEAN || !dst || !ticket)
        return SS_ERR_INVALID;
    memcpy(dst, b->plane[SS_PLANE_CLEAN], b->npix * sizeof(float));
    *ticket = ++b->rd_issued;
    return SS_OK;
}

static ss_err_t cpu_read_wait(ss_backend_t *b, uint64_t ticket)
{
    return ticket == 0 || ticket > b->rd_issued ? SS_ERR_INVALID : SS_OK;
}

/* The forms at once, from the host's CLEAN (outputs.c: the reference of
 * the CUDA kernels). */
static ss_err_t cpu_read_forms(ss_backend_t *b, uint16_t *half, ss_stamps_t *st, uint64_t *ticket)
{
    if (!ticket)
        return SS_ERR_INVALID;
    const float *clean = b->plane[SS_PLANE_CLEAN];
    if (half)
        ss_plane_to_f16(clean, b->npix, half);
    if (st)
        ss_stamps_cut(clean, b->w, st);
    *ticket = ++b->rd_issued;
    return SS_OK;
}

static void cpu_memory(ss_backend_t *b, size_t *used, size_t *total)
{
    (void)b;
    *used = *total = 0;
}

static void *cpu_host_alloc(size_t n, void *u)
{
    (void)u;
    return malloc(n);
}

static void cpu_host_free(void *p, void *u)
{
    (void)u;
    free(p);
}

const ss_backend_ops_t ss_backend_cpu = {
    .name = "cpu",
    .probe = cpu_probe,
    .create = cpu_create,
    .destroy = cpu_destroy,
    .host_alloc = { cpu_host_alloc, cpu_host_free, NULL },
    .ingest = cpu_ingest,
    .set_reference = cpu_set_reference,
    .register_coarse = cpu_register_coarse,
    .register_fine = cpu_register_fine,
    .predict_planned = cpu_predict_planned,
    .predict_take = cpu_predict_take,
    .lsq_moments = cpu_lsq_moments,
    .whiten = cpu_whiten,
    .guided = cpu_guided,
    .noise = cpu_noise,
    .matched = cpu_matched,
    .modelvar = cpu_modelvar,
    .frame_stats = cpu_frame_stats,
    .detect = cpu_detect,
    .history_store = cpu_history_store,
    .read_plane = cpu_read_plane,
    .write_plane = cpu_write_plane,
    .stage_times = cpu_stage_times,
    .memory = cpu_memory,
    .read_begin = cpu_read_begin,
    .read_wait = cpu_read_wait,
    .read_forms = cpu_read_forms,
};
