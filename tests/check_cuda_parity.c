/*
 * check_cuda_parity.c — the CUDA backend against the CPU reference, stage
 * by stage and over whole sequences (issue 3, item 6).
 *
 * Every stage test feeds both backends identical inputs (write_plane, or
 * the same raw frames), runs the op on each and compares the outputs:
 *  - exact stages (calibration, 3×3 median, hot-pixel mask, reference
 *    gradients, whitening, noise, matched filter, labels, history store)
 *    must agree bit for bit — the kernels do the CPU's arithmetic in the
 *    CPU's order — and the NaN (invalid) patterns must be identical;
 *    whitening's re-weighted pixels (per-pixel solves in double, the same
 *    code on both sides) within 1e-6 relative, expected identical;
 *  - reductions in double (guided filter) within relative L2 1e-5;
 *  - registration: the same coarse vote, fine shifts within 1e-6 px;
 *  - detection lists identical (count, order — most significant first —,
 *    truncated, label, kind, area, bbox, peak, flags), positions within
 *    1e-3 px, also for a frame with more components than accumulators.
 * Then the whole chain (ss_pipeline over a synthetic sequence with movers,
 * a streak, cosmics and hot pixels) on both backends; the GPU's graph,
 * direct and timed modes against each other; prefetching and two
 * instances sharing the GPU.
 *
 * Without a GPU (CI) the suite exits 77 (skipped) with the reason. CUDA is
 * never initialised in this parent process: the probe runs in a child,
 * and each test creates its backends inside its own forked process.
 */
#include <check.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "pipeline/backend.h"
#include "pipeline/pipeline.h"
#include "tools/synth.h"
#ifdef SKYSIEVE_HAVE_CUDA
#include "cuda/backend_cuda.h"
#endif

/* ---- helpers ------------------------------------------------------------ */

static uint64_t rng_state;
static uint64_t rng_u64(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static double rng_unif(void) { return (double)(rng_u64() >> 11) * 0x1.0p-53; }
static double rng_gauss(void)
{
    double u = rng_unif(), v = rng_unif();
    if (u < 1e-300)
        u = 1e-300;
    return sqrt(-2.0 * log(u)) * cos(2.0 * M_PI * v);
}

static const ss_backend_ops_t *gpu_ops(void)
{
    const ss_backend_ops_t *g = ss_backend_cuda_ops();
    ck_assert_ptr_nonnull(g);
    return g;
}

static void base_cfg(ss_pipeline_cfg_t *c)
{
    ss_pipeline_cfg_defaults(c);
    c->device = 0;
}

typedef struct pair {
    ss_backend_t *c, *g;
    const ss_backend_ops_t *go;
    int w, h;
} pair_t;

static void pair_new(pair_t *p, const ss_pipeline_cfg_t *cfg, const ss_geometry_t *geo,
                     const ss_calib_data_t *cal)
{
    memset(p, 0, sizeof *p);
    p->go = gpu_ops();
    ck_assert_int_eq(ss_backend_cpu.create(cfg, geo, cal, &p->c), SS_OK);
    ck_assert_int_eq(p->go->create(cfg, geo, cal, &p->g), SS_OK);
    p->w = geo->roi.w;
    p->h = geo->roi.h;
}

static void pair_free(pair_t *p)
{
    ss_backend_cpu.destroy(&p->c);
    p->go->destroy(&p->g);
    ck_assert_ptr_null(p->g);
}

static ss_geometry_t geometry(int w, int h, ss_dtype_t raw, ss_dtype_t hist, int n)
{
    ss_geometry_t g = { .raw_w = w, .raw_h = h, .raw_dtype = raw, .roi = { 0, 0, w, h },
                        .hist_dtype = hist, .history = n };
    return g;
}

static void write_both(pair_t *p, ss_plane_t pl, int slot, const void *src)
{
    ck_assert_int_eq(ss_backend_cpu.write_plane(p->c, pl, slot, src), SS_OK);
    ck_assert_int_eq(p->go->write_plane(p->g, pl, slot, src), SS_OK);
}

/* Compare a float plane: identical NaN pattern; returns the relative L2
 * difference over the finite pixels; exact = 1 also asserts bit-equal
 * values. */
static double cmp_float(pair_t *p, ss_plane_t pl, int exact, const char *what)
{
    const size_t n = (size_t)p->w * (size_t)p->h;
    float *a = malloc(n * sizeof(float)), *b = malloc(n * sizeof(float));
    ck_assert(a && b);
    ck_assert_int_eq(ss_backend_cpu.read_plane(p->c, pl, 0, a), SS_OK);
    ck_assert_int_eq(p->go->read_plane(p->g, pl, 0, b), SS_OK);
    double num = 0.0, den = 0.0;
    size_t nan_mis = 0, bit_mis = 0, first = (size_t)-1;
    for (size_t i = 0; i < n; i++) {
        if (isnan(a[i]) != isnan(b[i])) {
            nan_mis++;
            if (first == (size_t)-1)
                first = i;
            continue;
        }
        if (isnan(a[i]))
            continue;
        const double d = (double)a[i] - (double)b[i];
        num += d * d;
        den += (double)a[i] * (double)a[i];
        if (a[i] != b[i] && bit_mis++ == 0 && first == (size_t)-1)
            first = i;
    }
    const double rel = den > 0.0 ? sqrt(num / den) : sqrt(num);
    ck_assert_msg(nan_mis == 0, "%s (%s): %zu pixels invalid on one backend only (first %zu: cpu %g gpu %g)",
                  what, ss_plane_name(pl), nan_mis, first, first < n ? (double)a[first] : 0.0,
                  first < n ? (double)b[first] : 0.0);
    if (exact)
        ck_assert_msg(bit_mis == 0, "%s (%s): %zu pixels differ (first %zu: cpu %.9g gpu %.9g), rel L2 %.3g",
                      what, ss_plane_name(pl), bit_mis, first, (double)a[first], (double)b[first], rel);
    free(a);
    free(b);
    return rel;
}

static void cmp_bytes(pair_t *p, ss_plane_t pl, int slot, size_t bytes, const char *what)
{
    uint8_t *a = malloc(bytes), *b = malloc(bytes);
    ck_assert(a && b);
    ck_assert_int_eq(ss_backend_cpu.read_plane(p->c, pl, slot, a), SS_OK);
    ck_assert_int_eq(p->go->read_plane(p->g, pl, slot, b), SS_OK);
    size_t mis = 0, first = 0;
    for (size_t i = 0; i < bytes; i++)
        if (a[i] != b[i] && mis++ == 0)
            first = i;
    ck_assert_msg(mis == 0, "%s (%s): %zu bytes differ, first at %zu", what, ss_plane_name(pl),
                  mis, first);
    free(a);
    free(b);
}

/* ---- §1 calibration, median, hot pixels ---------------------------------- */

static void fill_raw(void *raw, ss_dtype_t dt, size_t n, const size_t *hot, int nhot)
{
    for (size_t i = 0; i < n; i++) {
        const double u = rng_unif();
        double v = 1000.0 + 30.0 * rng_gauss();
        if (u < 0.002)
            v = 1e9;                /* saturates every type */
        switch (dt) {
        case SS_DT_U8: ((uint8_t *)raw)[i] = (uint8_t)SS_CLAMP(v / 8.0, 0.0, 255.0); break;
        case SS_DT_U16: ((uint16_t *)raw)[i] = (uint16_t)SS_CLAMP(v, 0.0, 65535.0); break;
        case SS_DT_I16: ((int16_t *)raw)[i] = (int16_t)SS_CLAMP(v - 1000.0, -32768.0, 32767.0); break;
        case SS_DT_I32: ((int32_t *)raw)[i] = (int32_t)SS_CLAMP(v * 3e5, -2147483648.0, 2147483647.0); break;
        default: {
            float f = (float)v;
            if (u > 0.998)
                f = u > 0.999 ? NAN : INFINITY;
            ((float *)raw)[i] = f;
            break;
        }
        }
    }
    for (int k = 0; k < nhot; k++) {        /* planted hot pixels, always bright */
        const size_t i = hot[k];
        switch (dt) {
        case SS_DT_U8: ((uint8_t *)raw)[i] = 250; break;
        case SS_DT_U16: ((uint16_t *)raw)[i] = 5000; break;
        case SS_DT_I16: ((int16_t *)raw)[i] = 4000; break;
        case SS_DT_I32: ((int32_t *)raw)[i] = 2000000000; break;
        default: ((float *)raw)[i] = 5000.0f; break;
        }
    }
}

START_TEST(test_ingest_parity)
{
    const ss_dtype_t dt = (ss_dtype_t)_i;
    enum { RW = 203, RH = 157 };
    const ss_roi_t roi = { 5, 7, 181, 141 };
    const size_t rn = (size_t)RW * RH, n = (size_t)roi.w * roi.h;
    rng_state = 1000 + (uint64_t)_i;
    float *dark = malloc(n * sizeof(float)), *flat = malloc(n * sizeof(float));
    uint8_t *bad = calloc(n, 1), *valid = malloc(rn);
    void *raw = malloc(rn * sizeof(double));
    ck_assert(dark && flat && bad && valid && raw);
    for (size_t i = 0; i < n; i++) {
        dark[i] = (float)(5.0 * rng_unif());
        flat[i] = (float)(0.9 + 0.2 * rng_unif());
        if (rng_unif() < 0.002)
            flat[i] = rng_unif() < 0.5 ? 0.0f : NAN;
        bad[i] = rng_unif() < 0.003;
    }
    size_t hot[12];
    for (int k = 0; k < 12; k++)
        hot[k] = (size_t)(roi.y + 10 + 10 * k) * RW + (size_t)(roi.x + 7 + 13 * k);
    ss_pipeline_cfg_t cfg;
    base_cfg(&cfg);
    cfg.hotpix_learn = 1;
    cfg.hotpix_k = 6.0;
    cfg.hotpix_frames = 3;
    cfg.hotpix_fraction = 0.6;
    cfg.hotpix_min_frames = 2;      /* learned mid-window, after the 2nd frame of each */
    cfg.saturation = dt == SS_DT_F32 ? 60000.0 : 0.0;
    const int calibrated = dt != SS_DT_U8;      /* u8: no calibration data at all */
    ss_calib_data_t cal = { calibrated ? dark : NULL, calibrated ? flat : NULL, bad, NULL };
    ss_geometry_t geo = geometry(RW, RH, dt, ss_history_dtype(dt, calibrated), 4);
    geo.roi = roi;
    pair_t p;
    pair_new(&p, &cfg, &geo, &cal);
    ss_frame_t f = { .width = RW, .height = RH, .dtype = dt, .pixels = raw,
                     .capacity = rn * sizeof(double) };
    int learned = 0;
    for (int t = 0; t < 7; t++) {
        fill_raw(raw, dt, rn, hot, 12);
        for (size_t i = 0; i < rn; i++)
            valid[i] = rng_unif() > 0.01;
        f.valid = t % 2 ? valid : NULL;
        f.meta.seq = (uint64_t)t;
        ck_assert_int_eq(ss_backend_cpu.ingest(p.c, &f, NULL), SS_OK);
        ck_assert_int_eq(p.go->ingest(p.g, &f, NULL), SS_OK);
        cmp_float(&p, SS_PLANE_FRAME, 1, "calibrated frame");
        cmp_float(&p, SS_PLANE_FILTERED, 1, "3x3 median");
        cmp_bytes(&p, SS_PLANE_BADMASK, 0, n, "bad-pixel mask");
        uint8_t *m = malloc(n);
        ck_assert_int_eq(p.go->read_plane(p.g, SS_PLANE_BADMASK, 0, m), SS_OK);
        int nb = 0;
        for (size_t i = 0; i < n; i++)
            nb += m[i] && !bad[i];
        free(m);
        learned = nb;
        if (t == 1)                 /* the incremental rule, before the first window ends */
            ck_assert_int_ge(learned, 10);
    }
    /* the planted hot pixels were learned (the comparison is not vacuous) */
    ck_assert_int_ge(learned, 10);
    pair_free(&p);
    free(dark);
    free(flat);
    free(bad);
    free(valid);
    free(raw);
}
END_TEST

/* The rest of §1 (ss_calibrate_frame): a master bias, a dark scaled by
 * the exposure, an overscan row vector (through the CUDA backend's pinned
 * mirror), raw frames of varying size up to the reserved maximum (the
 * buffers grown by raw_reserve while the instance keeps its state), frames
 * that hold only part of the roi, and prefetched uploads of such frames:
 * FRAME and FILTERED bit for bit. */
START_TEST(test_ingest_calib_parity)
{
    const ss_dtype_t dt = (ss_dtype_t)_i;
    enum { RW0 = 196, RH0 = 150, RW1 = 211, RH1 = 165 };
    const ss_roi_t roi = { 5, 7, 181, 141 };
    const size_t rn = (size_t)RW1 * RH1, n = (size_t)roi.w * roi.h;
    rng_state = 2000 + (uint64_t)_i;
    float *dark = malloc(n * sizeof(float)), *flat = malloc(n * sizeof(float));
    float *bias = malloc(n * sizeof(float));
    uint8_t *bad = calloc(n, 1), *valid = malloc(rn);
    double *rb = malloc((size_t)roi.h * sizeof(double));
    ck_assert(dark && flat && bias && bad && valid && rb);
    for (size_t i = 0; i < n; i++) {
        bias[i] = (float)(3.0 * rng_gauss());
        dark[i] = (float)(5.0 * rng_unif());
        flat[i] = (float)(0.9 + 0.2 * rng_unif());
        bad[i] = rng_unif() < 0.003;
    }
    ss_pipeline_cfg_t cfg;
    base_cfg(&cfg);
    cfg.hotpix_learn = 0;
    cfg.saturation = dt == SS_DT_F32 ? 60000.0 : 0.0;
    ss_calib_data_t cal = { dark, flat, bad, bias };
    ss_geometry_t geo = geometry(RW0, RH0, dt, SS_DT_F32, 4);
    geo.roi = roi;
    pair_t p;
    pair_new(&p, &cfg, &geo, &cal);
    /* one buffer per frame: a prefetched frame must stay untouched */
    void *raw[2] = { malloc(rn * sizeof(double)), malloc(rn * sizeof(double)) };
    ck_assert(raw[0] && raw[1]);
    /* frame sizes and the part of the roi each holds */
    static const int fw[6] = { RW0, RW1, 190, RW0, 186, RW1 };
    static const int fh[6] = { RH0, RH1, 152, 140, RH0, RH1 };
    static const int vw[6] = { 181, 181, 181, 181, 175, 160 };
    static const int vh[6] = { 141, 141, 141, 133, 141, 120 };
    static const double scale[6] = { 1.0, 2.5, 0.37, 1.0, 7.0 / 3.0, 1.0 };
    for (int t = 0; t < 6; t++) {
        ss_frame_t f = { .width = fw[t], .height = fh[t], .dtype = dt, .pixels = raw[t & 1],
                         .capacity = rn * sizeof(double) };
        fill_raw(f.pixels, dt, (size_t)fw[t] * fh[t], NULL, 0);
        for (size_t i = 0; i < (size_t)fw[t] * fh[t]; i++)
            valid[i] = rng_unif() > 0.01;
        for (int y = 0; y < roi.h; y++)
            rb[y] = 100.0 + 7.0 * rng_gauss();
        f.valid = t % 2 ? valid : NULL;
        f.meta.seq = (uint64_t)t;
        const ss_calib_frame_t cf = { .dark_scale = scale[t], .row_bias = t % 3 ? rb : NULL,
                                      .valid_w = vw[t], .valid_h = vh[t] };
        if (t == 1) {
            /* larger than the buffers: refused until they grow */
            ck_assert_int_eq(p.go->ingest(p.g, &f, &cf), SS_ERR_SIZE);
            ck_assert_ptr_nonnull(p.go->raw_reserve);
            ck_assert_int_eq(p.go->raw_reserve(p.g, RW1, RH1), SS_OK);
        }
#ifdef SKYSIEVE_HAVE_CUDA
        if (t >= 2)
            ck_assert_int_eq(ss_cuda_prefetch(p.g, &f), SS_OK);
#endif
        ck_assert_int_eq(ss_backend_cpu.ingest(p.c, &f, &cf), SS_OK);
        ck_assert_int_eq(p.go->ingest(p.g, &f, &cf), SS_OK);
        for (int y = 0; y < roi.h; y++)     /* the backend copied the vector at ingest */
            rb[y] = NAN;
        cmp_float(&p, SS_PLANE_FRAME, 1, "calibrated frame");
        cmp_float(&p, SS_PLANE_FILTERED, 1, "3x3 median");
    }
    /* the comparison is not vacuous: the last frame's invalid band */
    float *fr = malloc(n * sizeof(float));
    ck_assert_int_eq(p.go->read_plane(p.g, SS_PLANE_FRAME, 0, fr), SS_OK);
    ck_assert(isnan(fr[(size_t)130 * roi.w + 10]) && isnan(fr[(size_t)10 * roi.w + 170]));
    int finite = 0;
    for (size_t i = 0; i < n; i++)
        finite += isfinite(fr[i]);
    ck_assert_int_gt(finite, 160 * 120 / 2);
    free(fr);
    pair_free(&p);
    free(dark), free(flat), free(bias), free(bad), free(valid), free(rb);
    free(raw[0]), free(raw[1]);
}
END_TEST

/* ---- §2 registration ------------------------------------------------------ */

static void synth_cfg(ss_synth_cfg_t *s, int w, int h, uint64_t seed)
{
    ss_synth_defaults(s);
    s->width = w;
    s->height = h;
    s->seed = seed;
    s->n_stars = (int)(2000.0 * w * h / (1024.0 * 1024.0));
    s->jitter = 2.0;
    s->n_hot = 20;
    s->cosmic_rate = 30.0;
}

static void cmp_coarse(const ss_coarse_t *a, const ss_coarse_t *b, int t)
{
    ck_assert_msg(a->ok == b->ok && a->dx == b->dx && a->dy == b->dy && a->n_ref == b->n_ref &&
                      a->n_cur == b->n_cur && a->n_votes == b->n_votes &&
                      a->n_second == b->n_second && strcmp(a->why, b->why) == 0,
                  "frame %d coarse: cpu ok %d (%d,%d) stars %d/%d votes %d second %d [%s]; "
                  "gpu ok %d (%d,%d) stars %d/%d votes %d second %d [%s]",
                  t, a->ok, a->dx, a->dy, a->n_ref, a->n_cur, a->n_votes, a->n_second, a->why,
                  b->ok, b->dx, b->dy, b->n_ref, b->n_cur, b->n_votes, b->n_second, b->why);
}

/* The GPU instance's host waits so far (ss_cuda_graph_stats; 0 without
 * CUDA). */
static long gpu_waits(ss_backend_t *g)
{
    long w = 0;
#ifdef SKYSIEVE_HAVE_CUDA
    ss_cuda_graph_stats(g, NULL, NULL, &w);
#else
    (void)g;
#endif
    return w;
}

/* The GPU instance waited exactly once since w0 (gpu_waits) for op, in
 * frame t (nothing to check without CUDA). */
static void waited_once(ss_backend_t *g, long w0, const char *op, int t)
{
#ifdef SKYSIEVE_HAVE_CUDA
    const long w = gpu_waits(g) - w0;
    ck_assert_msg(w == 1, "frame %d: %s waited %ld times", t, op, w);
#else
    (void)g, (void)w0, (void)op, (void)t;
#endif
}

/* The GPU's register_frame (the peaks, the vote, the refinement and every
 * fine pass in one segment, all decisions on the device) gives what its
 * register_coarse and register_fine gave, to the bit, with one host wait.
 * With the vote and the fine iteration on the host it took a wait for
 * the peaks, one for the refinement, one per fine pass and one for the
 * probe. */
static void frame_matches(pair_t *p, const ss_coarse_t *cg, const ss_shift_t *sg, int t)
{
    ck_assert_ptr_nonnull(p->go->register_frame);
    ss_coarse_t cf;
    ss_shift_t sf;
    const long w0 = gpu_waits(p->g);
    ck_assert_int_eq(p->go->register_frame(p->g, &cf, &sf), SS_OK);
    waited_once(p->g, w0, "register_frame", t);
    cmp_coarse(cg, &cf, t);
    if (!cg->ok)
        return;
    ck_assert_msg(sf.ok == sg->ok && sf.iterations == sg->iterations && sf.sx == sg->sx &&
                      sf.sy == sg->sy && strcmp(sf.why, sg->why) == 0,
                  "frame %d: register_frame ok %d it %d (%.12f, %.12f) [%s], the two ops ok %d "
                  "it %d (%.12f, %.12f) [%s]",
                  t, sf.ok, sf.iterations, sf.sx, sf.sy, sf.why, sg->ok, sg->iterations, sg->sx,
                  sg->sy, sg->why);
    ck_assert(memcmp(&sf.err_x, &sg->err_x, sizeof sf.err_x) == 0 &&
              memcmp(&sf.contrast, &sg->contrast, sizeof sf.contrast) == 0);
}

/* The GPU's predict_planned (the registration, the plan from the
 * device's shift, whitening, guided filter and σ, one host wait with
 * predict_take) gives what register_frame, the host's plan (ss_pc_plan
 * from that shift) and the ops one by one give, to the bit: the shift,
 * the offsets and weights, CLEAN and σ; where the registration failed, it
 * says so and plans nothing. The history slots hold what fill_history
 * left (4 frames); stride: the backend's cfg noise_stride. lsq: the
 * Wiener weights (moments, then k_lsq_solve), which agree to rounding. */
static void fill_history(pair_t *p, ss_dtype_t ht, int slots);

static void plan_matches(pair_t *p, const ss_coarse_t *cg, const ss_shift_t *sg, int stride,
                         int t, int lsq)
{
    enum { N = 4, RADIUS = 6 };
    const float eps = 120.0f;
    ss_wplan_t wp;
    memset(&wp, 0, sizeof wp);
    wp.n = N;
    wp.degree = 2;
    wp.min_valid = 2;
    wp.gamma = 1e-3;
    wp.lambda = 0.9;
    wp.kappa_x = 0.02;
    wp.kappa_y = -0.01;
    const int slots[N] = { 2, 0, 3, 1 };
    for (int k = 0; k < N; k++) {
        wp.hsx[k] = 2.7 * sin(1.3 * k + t);
        wp.hsy[k] = -1.9 * cos(0.7 * k + t);
    }
    ss_gmask_t gm;
    ck_assert_int_eq(ss_gmask_init(&gm, 1.4, 2.5, 20.0, 0.0, RADIUS), 0);
    wp.masked = 1;
    wp.lsq = lsq;
    wp.tau = gm.tau;
    wp.sigma = gm.sigma;
    wp.g = gm.g;
    const size_t n = (size_t)p->w * p->h;
    float *host = malloc(n * sizeof(float)), *dev = malloc(n * sizeof(float));
    ck_assert(host && dev);
    int ix[N], iy[N], dix[N], diy[N], planned = -1;
    double a[N], da[N];
    float sh = NAN, sd = NAN, beta;
    int nb;
    if (cg->ok && sg->ok) {     /* the host's plan, op by op */
        ss_reweight_t rw;
        float tl = 0.0f;
        if (lsq) {              /* the offsets, the moments, ss_weights_lsq */
            double fx[N], fy[N], R[N * N], pv[N], a2 = 0.0;
            ss_pc_offsets(ss_pc_unbias(sg->sx, wp.kappa_x), ss_pc_unbias(sg->sy, wp.kappa_y),
                          wp.hsx, wp.hsy, N, ix, iy, fx, fy);
            ck_assert_int_eq(p->go->lsq_moments(p->g, slots, ix, iy, N, R, pv), SS_OK);
            ck_assert_int_eq(ss_weights_lsq(R, pv, N, wp.gamma, a), 0);
            for (int k = 0; k < N; k++)
                a2 += a[k] * a[k];
            tl = ss_pc_gmask_tl(wp.tau, wp.sigma, wp.g, a2);
        } else {
            ck_assert_int_eq(ss_pc_plan(&wp, sg->sx, sg->sy, ix, iy, a, &rw, &tl), 0);
        }
        ss_gmask_t m = gm;
        m.tl = tl;
        ck_assert_int_eq(p->go->whiten(p->g, slots, ix, iy, a, N, lsq ? NULL : &rw), SS_OK);
        ck_assert_int_eq(p->go->guided(p->g, RADIUS, eps, &m), SS_OK);
        ck_assert_int_eq(p->go->noise(p->g, SS_PLANE_CLEAN, stride, &sh), SS_OK);
        ck_assert_int_eq(p->go->read_plane(p->g, SS_PLANE_CLEAN, 0, host), SS_OK);
    }
    ss_coarse_t cf;
    ss_shift_t sf;
    const long w0 = gpu_waits(p->g);
    ck_assert_int_eq(p->go->predict_planned(p->g, &wp, slots, RADIUS, eps, &gm, &cf), SS_OK);
    ck_assert_str_eq(cf.why, "");
    ck_assert_int_eq(p->go->predict_take(p->g, &cf, &sf, dix, diy, da, &planned), SS_OK);
    waited_once(p->g, w0, "predict_planned", t);
    cmp_coarse(cg, &cf, t);
    ck_assert_int_eq(planned, cg->ok && sg->ok);
    if (planned) {
        ck_assert(sf.sx == sg->sx && sf.sy == sg->sy && sf.ok == sg->ok);
        ck_assert(memcmp(ix, dix, sizeof ix) == 0 && memcmp(iy, diy, sizeof iy) == 0);
        ck_assert_int_eq(p->go->frame_stats(p->g, &sd, &beta, &nb), SS_OK);
        ck_assert_int_eq(p->go->read_plane(p->g, SS_PLANE_CLEAN, 0, dev), SS_OK);
        size_t finite = 0;
        if (!lsq) {             /* the same arithmetic: the same bits */
            ck_assert(memcmp(a, da, sizeof a) == 0);
            ck_assert(memcmp(&sh, &sd, sizeof sh) == 0 && isfinite(sd));
        } else {
            /* the moments are summed by double atomics in either order:
             * the weights agree to rounding, the residual to its noise */
            for (int k = 0; k < N; k++)
                ck_assert_msg(fabs(a[k] - da[k]) <= 1e-9 * (1.0 + fabs(a[k])),
                              "frame %d: lsq weight %d %.17g (host) vs %.17g (device)", t, k, a[k],
                              da[k]);
            ck_assert(isfinite(sd) && fabsf(sh - sd) <= 1e-5f * sh);
        }
        for (size_t i = 0; i < n; i++) {
            const int same = lsq ? (isnan(host[i]) && isnan(dev[i])) ||
                                       fabsf(host[i] - dev[i]) <= 1e-3f * sd
                                 : memcmp(&host[i], &dev[i], sizeof(float)) == 0;
            ck_assert_msg(same, "frame %d: CLEAN pixel %zu %.9g (host plan) vs %.9g (device plan)",
                          t, i, (double)host[i], (double)dev[i]);
            finite += isfinite(dev[i]);
        }
        ck_assert_uint_gt(finite, n / 2);
    }
    free(host);
    free(dev);
}

/* A level with more star peaks than the GPU ranks directly (1024: it
 * selects the brightest by a radix selection then): no pyramid, a dense
 * field. The same top peaks must vote alike: the coarse results, counts
 * and reasons included, agree. */
START_TEST(test_vote_many_peaks)
{
    enum { W = 512, H = 448 };
    ss_synth_cfg_t sc;
    synth_cfg(&sc, W, H, 91);
    sc.n_stars = 12000;
    ss_synth_t *syn = ss_synth_new(&sc);
    ck_assert_ptr_nonnull(syn);
    ss_pipeline_cfg_t cfg;
    base_cfg(&cfg);
    cfg.reg_levels = 0;
    ss_geometry_t geo = geometry(W, H, SS_DT_U16, SS_DT_U16, 4);
    pair_t p;
    pair_new(&p, &cfg, &geo, NULL);
    const size_t bytes = (size_t)W * H * 2;
    ss_frame_t f = { .pixels = malloc(bytes), .capacity = bytes };
    float *hp = malloc((size_t)W * H * sizeof(float));
    ss_peak_t *pk = malloc(SS_COARSE_PEAK_CAP * sizeof(ss_peak_t));
    ck_assert(f.pixels && hp && pk);
    int ok = 0;
    for (int t = 0; t < 5; t++) {
        ck_assert_int_eq(ss_synth_next(syn, &f, NULL), SS_OK);
        ck_assert_int_eq(ss_backend_cpu.ingest(p.c, &f, NULL), SS_OK);
        ck_assert_int_eq(p.go->ingest(p.g, &f, NULL), SS_OK);
        ck_assert_int_eq(ss_backend_cpu.read_plane(p.c, SS_PLANE_HIPASS, 0, hp), SS_OK);
        const int np = ss_find_peaks(hp, W, H, ss_diff_noise(hp, W, H), pk, SS_COARSE_PEAK_CAP);
        ck_assert_msg(np > 1024 && np < SS_COARSE_PEAK_CAP, "frame %d: %d peaks", t, np);
        if (t == 0) {
            ck_assert_int_eq(ss_backend_cpu.set_reference(p.c), SS_OK);
            ck_assert_int_eq(p.go->set_reference(p.g), SS_OK);
            continue;
        }
        ss_coarse_t cc, cg;
        ck_assert_int_eq(ss_backend_cpu.register_coarse(p.c, &cc), SS_OK);
        ck_assert_int_eq(p.go->register_coarse(p.g, &cg), SS_OK);
        cmp_coarse(&cc, &cg, t);
        ck_assert_int_eq(cg.n_ref, SS_COARSE_STARS);
        ok += cg.ok;
    }
    ck_assert_int_ge(ok, 3);
    free(pk);
    free(hp);
    free(f.pixels);
    ss_synth_destroy(&syn);
    pair_free(&p);
}
END_TEST

/* The reference's five-point mean divides by 5 on the host and multiplies
 * with a fused correction on the GPU (fine_core.h, ss_div5): the same
 * float for every input. */
START_TEST(test_div5)
{
#ifdef SKYSIEVE_HAVE_CUDA
    ck_assert_int_eq(ss_cuda_div5_mismatches(), 0);
#else
    ck_abort_msg("built without CUDA");
#endif
}
END_TEST

/* Whether frame t of test_registration_parity runs: all nine, or with
 * SKYSIEVE_PARITY_QUICK set (compute-sanitizer's racecheck, which takes
 * minutes a frame there) the reference, one plain frame, the two wide
 * searches and the blank frame. */
static int registration_frame_runs(int t)
{
    const char *q = getenv("SKYSIEVE_PARITY_QUICK");
    return !(q && *q) || t == 0 || t == 1 || t == 5 || t == 6 || t == 8;
}

/* _i = 0: the derived high-pass radius (5 px); 1: registration.highpass
 * 60 (a box wider than the search, the frames' edges inside every
 * window); 2: the derived radius with pipeline.device_feeds 8 (the fine
 * sums one warp a tile instead of eight). */
START_TEST(test_registration_parity)
{
    enum { W = 512, H = 448 };
    ss_synth_cfg_t sc;
    synth_cfg(&sc, W, H, 77);
    sc.jump_prob = 0.2;
    sc.jump_px = 14.0;
    ss_synth_t *syn = ss_synth_new(&sc);
    ck_assert_ptr_nonnull(syn);
    ss_pipeline_cfg_t cfg;
    base_cfg(&cfg);
    cfg.reg_hipass = _i == 1 ? 60 : 0;
    cfg.device_feeds = _i == 2 ? 8 : 1;
    ss_geometry_t geo = geometry(W, H, SS_DT_U16, SS_DT_U16, 4);
    pair_t p;
    pair_new(&p, &cfg, &geo, NULL);
    fill_history(&p, SS_DT_U16, 4);     /* what plan_matches predicts from */
    const size_t bytes = (size_t)W * H * 2;
    ss_frame_t f = { .pixels = malloc(bytes), .capacity = bytes };
    ck_assert_ptr_nonnull(f.pixels);
    int fine_ok = 0, fine_runs = 0;
    for (int t = 0; t < 9; t++) {
        ck_assert_int_eq(ss_synth_next(syn, &f, NULL), SS_OK);
        if (!registration_frame_runs(t))
            continue;
        fine_runs += t > 0 && t < 8;
        if (t == 8) {       /* a blank frame: sky and noise only */
            for (size_t i = 0; i < (size_t)W * H; i++)
                ((uint16_t *)f.pixels)[i] = (uint16_t)(1000.0 + 30.0 * rng_gauss());
        }
        ck_assert_int_eq(ss_backend_cpu.ingest(p.c, &f, NULL), SS_OK);
        ck_assert_int_eq(p.go->ingest(p.g, &f, NULL), SS_OK);
        cmp_float(&p, SS_PLANE_FILTERED, 1, "filtered");
        cmp_float(&p, SS_PLANE_HIPASS, 1, "registration input");
        if (t == 0) {
            ck_assert_int_eq(ss_backend_cpu.set_reference(p.c), SS_OK);
            ck_assert_int_eq(p.go->set_reference(p.g), SS_OK);
            cmp_float(&p, SS_PLANE_REFERENCE, 1, "reference");
            cmp_float(&p, SS_PLANE_REF_S, 1, "reference S");
            cmp_float(&p, SS_PLANE_REF_GX, 1, "reference gx");
            cmp_float(&p, SS_PLANE_REF_GY, 1, "reference gy");
            continue;
        }
        /* wide searches once each (reloadable): the GPU's vote keeps
         * R <= 53 in shared memory and R = 80 in global memory, which it
         * must leave zeroed for the frames after */
        cfg.reg_search = t == 5 ? 40 : t == 6 ? 80 : 16;
        ss_coarse_t cc, cg;
        ck_assert_int_eq(ss_backend_cpu.register_coarse(p.c, &cc), SS_OK);
        ck_assert_int_eq(p.go->register_coarse(p.g, &cg), SS_OK);
        cmp_coarse(&cc, &cg, t);
        if (!cc.ok) {
            frame_matches(&p, &cg, NULL, t);
            for (int lsq = 0; lsq < 2; lsq++)
                plan_matches(&p, &cg, NULL, cfg.noise_stride, t, lsq);
            continue;
        }
        ss_shift_t sc_, sg;
        ck_assert_int_eq(ss_backend_cpu.register_fine(p.c, cc.dx, cc.dy, &sc_), SS_OK);
        ck_assert_int_eq(p.go->register_fine(p.g, cg.dx, cg.dy, &sg), SS_OK);
        ck_assert_msg(sc_.ok == sg.ok && sc_.iterations == sg.iterations,
                      "frame %d fine: cpu ok %d it %d [%s], gpu ok %d it %d [%s]", t, sc_.ok,
                      sc_.iterations, sc_.why, sg.ok, sg.iterations, sg.why);
        ck_assert_msg(fabs(sc_.sx - sg.sx) < 1e-6 && fabs(sc_.sy - sg.sy) < 1e-6,
                      "frame %d fine: cpu (%.9f, %.9f) gpu (%.9f, %.9f)", t, sc_.sx, sc_.sy, sg.sx,
                      sg.sy);
        ck_assert(fabs(sc_.err_x - sg.err_x) <= 1e-6 * (1.0 + sc_.err_x));
        ck_assert(fabs(sc_.err_y - sg.err_y) <= 1e-6 * (1.0 + sc_.err_y));
        ck_assert(fabs(sc_.gain - sg.gain) <= 1e-9 * (1.0 + fabs(sc_.gain)));
        ck_assert(fabs(sc_.contrast - sg.contrast) <= 1e-6 * (1.0 + fabs(sc_.contrast)));
        fine_ok += sg.ok && t < 8;
        frame_matches(&p, &cg, &sg, t);
        for (int lsq = 0; lsq < 2; lsq++)
            plan_matches(&p, &cg, &sg, cfg.noise_stride, t, lsq);
    }
    /* at most two of the frames registered (7, or 3 quick) fail */
    ck_assert_int_ge(fine_ok, fine_runs - 2);
    free(f.pixels);
    ss_synth_destroy(&syn);
    pair_free(&p);
}
END_TEST

/* ---- §3 whitening, lsq moments -------------------------------------------- */

static void fill_history(pair_t *p, ss_dtype_t ht, int slots)
{
    const size_t n = (size_t)p->w * p->h;
    void *buf = malloc(n * 4);
    ck_assert_ptr_nonnull(buf);
    for (int s = 0; s < slots; s++) {
        for (size_t i = 0; i < n; i++) {
            const double v = 1000.0 + 200.0 * sin(0.05 * (double)(i % (size_t)p->w)) + 20.0 * rng_gauss();
            const int sentinel = rng_unif() < 0.005;
            if (ht == SS_DT_U16)
                ((uint16_t *)buf)[i] = sentinel ? UINT16_MAX : (uint16_t)v;
            else
                ((float *)buf)[i] = sentinel ? NAN : (float)v;
        }
        write_both(p, SS_PLANE_HISTORY, s, buf);
    }
    free(buf);
}

static void fill_plane(pair_t *p, ss_plane_t pl, double mean, double sd, double nan_frac)
{
    const size_t n = (size_t)p->w * p->h;
    float *buf = malloc(n * sizeof(float));
    ck_assert_ptr_nonnull(buf);
    for (size_t i = 0; i < n; i++)
        buf[i] = rng_unif() < nan_frac ? NAN : (float)(mean + sd * rng_gauss());
    write_both(p, pl, 0, buf);
    free(buf);
}

START_TEST(test_whiten_parity)
{
    const ss_dtype_t ht = _i ? SS_DT_F32 : SS_DT_U16;
    enum { W = 301, H = 203, N = 12 };
    rng_state = 55 + (uint64_t)_i;
    ss_pipeline_cfg_t cfg;
    base_cfg(&cfg);
    ss_geometry_t geo = geometry(W, H, ht == SS_DT_U16 ? SS_DT_U16 : SS_DT_F32, ht, N);
    pair_t p;
    pair_new(&p, &cfg, &geo, NULL);
    fill_history(&p, ht, N);
    fill_plane(&p, SS_PLANE_FRAME, 1000.0, 30.0, 0.01);
    int slots[N], ix[N], iy[N];
    double a[N], R1[N * N], p1[N], R2[N * N], p2[N];
    for (int k = 0; k < N; k++) {
        slots[k] = (k * 5) % N;
        ix[k] = (int)(rng_u64() % 9) - 4;
        iy[k] = (int)(rng_u64() % 9) - 4;
        a[k] = rng_gauss() / N + 1.0 / N;
    }
    ck_assert_int_eq(ss_backend_cpu.whiten(p.c, slots, ix, iy, a, N, NULL), SS_OK);
    ck_assert_int_eq(p.go->whiten(p.g, slots, ix, iy, a, N, NULL), SS_OK);
    cmp_float(&p, SS_PLANE_PREDICTION, 1, "prediction");
    cmp_float(&p, SS_PLANE_RESIDUAL, 1, "residual");
    ck_assert_int_eq(ss_backend_cpu.lsq_moments(p.c, slots, ix, iy, N, R1, p1), SS_OK);
    ck_assert_int_eq(p.go->lsq_moments(p.g, slots, ix, iy, N, R2, p2), SS_OK);
    for (int k = 0; k < N; k++) {
        ck_assert_msg(fabs(p1[k] - p2[k]) <= 1e-11 * fabs(p1[k]), "p[%d]: %.17g vs %.17g", k,
                      p1[k], p2[k]);
        for (int l = 0; l < N; l++)
            ck_assert_msg(fabs(R1[k * N + l] - R2[k * N + l]) <= 1e-11 * fabs(R1[k * N + l]),
                          "R[%d][%d]: %.17g vs %.17g", k, l, R1[k * N + l], R2[k * N + l]);
    }
    ck_assert(R1[0] > 0.0);
    /* invalid arguments are refused by both */
    slots[0] = N;
    ck_assert_int_eq(p.go->whiten(p.g, slots, ix, iy, a, N, NULL), SS_ERR_INVALID);
    ck_assert_int_eq(p.go->whiten(p.g, slots, ix, iy, a, 0, NULL), SS_ERR_INVALID);
    pair_free(&p);
}
END_TEST

/* Re-weighting at pixels with invalid history (poly mode): a history of
 * type ht with scattered invalid pixels (3 %), a few whole invalid rows
 * and columns, and offsets up to ±4 px plus one frame far out (12 px), so
 * that the border band re-weights with few valid frames; the current frame
 * 1 % invalid. Cases on one backend pair (so the graphs are replayed with
 * new parameter blocks, the re-weighting block included): degrees 0, 1, 2;
 * λ 1 and 0.9; min_valid automatic, 1 and n (the strict rule); a strict
 * (rw = NULL) whitening in between. Agreement: the same invalid pixels;
 * pixels whose every y_k is valid bit for bit; re-weighted pixels (a
 * per-pixel LDLᵀ solve in double on both sides, the same code,
 * --fmad=false) within 1e-6 relative in P and r — expected identical; the
 * number that differ at all is printed. */
static void fill_history_sparse(pair_t *p, ss_dtype_t ht, int slots)
{
    const size_t n = (size_t)p->w * p->h;
    void *buf = malloc(n * 4);
    ck_assert_ptr_nonnull(buf);
    for (int sl = 0; sl < slots; sl++) {
        const int bad_row = (int)(rng_u64() % (uint64_t)p->h);
        const int bad_col = (int)(rng_u64() % (uint64_t)p->w);
        for (size_t i = 0; i < n; i++) {
            const int x = (int)(i % (size_t)p->w), y = (int)(i / (size_t)p->w);
            const double v =
                1000.0 + 200.0 * sin(0.05 * x) + 100.0 * cos(0.07 * y) + 20.0 * rng_gauss();
            const int sentinel = rng_unif() < 0.03 || (sl % 4 == 1 && y == bad_row) ||
                                 (sl % 5 == 2 && x == bad_col);
            switch (ht) {
            case SS_DT_U8:
                ((uint8_t *)buf)[i] = sentinel ? UINT8_MAX : (uint8_t)SS_CLAMP(v / 8.0, 0.0, 254.0);
                break;
            case SS_DT_U16: ((uint16_t *)buf)[i] = sentinel ? UINT16_MAX : (uint16_t)v; break;
            case SS_DT_I16:
                ((int16_t *)buf)[i] = sentinel ? INT16_MAX : (int16_t)(v - 1000.0);
                break;
            default: ((float *)buf)[i] = sentinel ? NAN : (float)v; break;
            }
        }
        write_both(p, SS_PLANE_HISTORY, sl, buf);
    }
    free(buf);
}

/* P and r of both backends: the same NaN pattern; fast-path pixels
 * (mask 0) bit for bit; re-weighted ones (mask 1) within rel. Returns the
 * number of re-weighted pixels that are not bit-identical. */
static size_t cmp_reweighted(pair_t *p, const uint8_t *rew, double rel, const char *what,
                             size_t *n_rew)
{
    const size_t n = (size_t)p->w * p->h;
    float *a = malloc(n * sizeof(float)), *b = malloc(n * sizeof(float));
    float *ra = malloc(n * sizeof(float)), *rb = malloc(n * sizeof(float));
    ck_assert(a && b && ra && rb);
    ck_assert_int_eq(ss_backend_cpu.read_plane(p->c, SS_PLANE_PREDICTION, 0, a), SS_OK);
    ck_assert_int_eq(p->go->read_plane(p->g, SS_PLANE_PREDICTION, 0, b), SS_OK);
    ck_assert_int_eq(ss_backend_cpu.read_plane(p->c, SS_PLANE_RESIDUAL, 0, ra), SS_OK);
    ck_assert_int_eq(p->go->read_plane(p->g, SS_PLANE_RESIDUAL, 0, rb), SS_OK);
    size_t differ = 0;
    *n_rew = 0;
    for (size_t i = 0; i < n; i++) {
        ck_assert_msg(isnan(a[i]) == isnan(b[i]) && isnan(ra[i]) == isnan(rb[i]),
                      "%s: pixel %zu invalid on one backend only (cpu %g gpu %g)", what, i,
                      (double)a[i], (double)b[i]);
        if (isnan(a[i]))
            continue;
        if (!rew[i]) {
            ck_assert_msg(a[i] == b[i] && ra[i] == rb[i],
                          "%s: fast-path pixel %zu: cpu %.9g gpu %.9g", what, i, (double)a[i],
                          (double)b[i]);
            continue;
        }
        (*n_rew)++;
        const double tol = rel * (fabs((double)a[i]) + 1.0);
        ck_assert_msg(fabs((double)a[i] - (double)b[i]) <= tol &&
                          fabs((double)ra[i] - (double)rb[i]) <= tol,
                      "%s: re-weighted pixel %zu: P cpu %.9g gpu %.9g, r cpu %.9g gpu %.9g", what,
                      i, (double)a[i], (double)b[i], (double)ra[i], (double)rb[i]);
        differ += a[i] != b[i] || ra[i] != rb[i];
    }
    free(a);
    free(b);
    free(ra);
    free(rb);
    return differ;
}

START_TEST(test_whiten_reweight_parity)
{
    static const ss_dtype_t types[4] = { SS_DT_U8, SS_DT_U16, SS_DT_I16, SS_DT_F32 };
    const ss_dtype_t ht = types[_i];
    enum { W = 263, H = 181, N = 14 };
    rng_state = 71 + (uint64_t)_i;
    ss_pipeline_cfg_t cfg;
    base_cfg(&cfg);
    ss_geometry_t geo = geometry(W, H, ht == SS_DT_F32 ? SS_DT_F32 : ht, ht, N);
    pair_t p;
    pair_new(&p, &cfg, &geo, NULL);
    fill_history_sparse(&p, ht, N);
    fill_plane(&p, SS_PLANE_FRAME, 1000.0, 30.0, 0.01);
    int slots[N], ix[N], iy[N];
    double fx[N], fy[N], a[N];
    for (int k = 0; k < N; k++) {
        slots[k] = (k * 3) % N;
        ix[k] = k == 5 ? 12 : (int)(rng_u64() % 9) - 4;
        iy[k] = k == 9 ? -12 : (int)(rng_u64() % 9) - 4;
        fx[k] = rng_unif() - 0.5;
        fy[k] = rng_unif() - 0.5;
    }
    /* which pixels have an invalid or outside y_k (read back from the CPU) */
    uint8_t *rew = calloc((size_t)W * H, 1);
    void *hb = malloc((size_t)W * H * 4);
    ck_assert(rew && hb);
    for (int k = 0; k < N; k++) {
        ck_assert_int_eq(ss_backend_cpu.read_plane(p.c, SS_PLANE_HISTORY, slots[k], hb), SS_OK);
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++) {
                const int xx = x + ix[k], yy = y + iy[k];
                rew[(size_t)y * W + x] |= xx < 0 || yy < 0 || xx >= W || yy >= H ||
                                          isnan(ss_hist_value(hb, ht, (size_t)yy * W + xx));
            }
    }
    static const struct { int degree; double lambda; int min_valid; int strict; } cases[] = {
        { 2, 1.0, 0, 0 }, { 1, 1.0, 0, 0 }, { 0, 0.9, 0, 0 }, { 2, 0.9, 1, 0 },
        { 2, 1.0, 0, 1 }, { 1, 0.9, 1, 0 }, { 2, 1.0, N, 0 }, { 2, 0.9, 0, 0 },
    };
    size_t total_rew = 0, total_differ = 0;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int degree = cases[c].degree;
        ss_pipeline_cfg_t wc = cfg;
        wc.poly_degree = degree;
        wc.min_valid = cases[c].min_valid;
        const double gamma = 1e-3 * N;
        ck_assert_int_eq(ss_weights_poly(fx, fy, N, degree, gamma, cases[c].lambda, a), 0);
        ss_reweight_t rw;
        ck_assert_int_eq(ss_reweight_init(&rw, fx, fy, N, degree, gamma, cases[c].lambda,
                                          ss_cfg_min_valid(&wc, N)), 0);
        const ss_reweight_t *rwp = cases[c].strict ? NULL : &rw;
        ck_assert_int_eq(ss_backend_cpu.whiten(p.c, slots, ix, iy, a, N, rwp), SS_OK);
        ck_assert_int_eq(p.go->whiten(p.g, slots, ix, iy, a, N, rwp), SS_OK);
        char what[96];
        snprintf(what, sizeof what, "type %s degree %d lambda %g min_valid %d%s",
                 ss_dtype_name(ht), degree, cases[c].lambda, rw.min_valid,
                 cases[c].strict ? " strict" : "");
        size_t n_rew = 0;
        const size_t differ = cmp_reweighted(&p, rew, 1e-6, what, &n_rew);
        fprintf(stderr, "%s: %zu re-weighted pixels, %zu not bit-identical\n", what, n_rew,
                differ);
        if (!cases[c].strict && rw.min_valid < N)
            ck_assert_int_gt(n_rew, W * H / 10);
        else
            ck_assert_int_eq(n_rew, 0);
        total_rew += n_rew;
        total_differ += differ;
    }
    fprintf(stderr, "re-weighting parity (%s): %zu re-weighted pixels, %zu not bit-identical\n",
            ss_dtype_name(ht), total_rew, total_differ);
    /* a block that does not match n is refused by both */
    ss_reweight_t bad;
    ck_assert_int_eq(ss_reweight_init(&bad, fx, fy, N - 1, 1, 0.0, 1.0, 0), 0);
    ck_assert_int_eq(ss_backend_cpu.whiten(p.c, slots, ix, iy, a, N, &bad), SS_ERR_INVALID);
    ck_assert_int_eq(p.go->whiten(p.g, slots, ix, iy, a, N, &bad), SS_ERR_INVALID);
    free(rew);
    free(hb);
    pair_free(&p);
}
END_TEST

/* ---- §4 guided filter ----------------------------------------------------- */

START_TEST(test_guided_parity)
{
    static const int radii[] = { 0, 1, 4, 11, 40, 300 };
    /* pipeline.device_feeds: the band kernel's grid from one row a band
     * (the GPU to itself; this frame fills it with bands of one row) to
     * one band of the whole frame (more feeds than it has blocks) */
    static const int shares[] = { 1, 8, 100000 };
    enum { W = 257, H = 199 };
    /* _i % 3 = 0: one channel; 1: two, with the biharmonic term; 2:
     * without; _i >= 3: the same with the source mask (guided.mask) */
    const int mode = _i % 3, laplacian = mode > 0;
    rng_state = 909 + (uint64_t)mode;
    ss_pipeline_cfg_t cfg;
    base_cfg(&cfg);
    cfg.guided_laplacian = laplacian;
    cfg.guided_biharmonic = mode == 1;
    ss_gmask_t gm;
    ck_assert_int_eq(ss_gmask_init(&gm, 1.3, 2.5, 5.0, 0.05, 11), 0);
    const ss_gmask_t *mask = _i >= 3 ? &gm : NULL;
    ss_geometry_t geo = geometry(W, H, SS_DT_F32, SS_DT_F32, 2);
    const size_t n = (size_t)W * H;
    float *I = malloc(n * sizeof(float)), *r = malloc(n * sizeof(float));
    ck_assert(I && r);
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) {
            double v = 1000.0 + 0.5 * x, lap = 0.0;
            for (int s = 0; s < 6; s++) {
                const double sx = 20 + 41.0 * s, sy = 15 + 33.0 * s;
                const double d2 = (x - sx) * (x - sx) + (y - sy) * (y - sy), s2 = 1.7 * 1.7;
                const double g = 3e4 * exp(-d2 / (2 * s2));
                v += g;
                lap += g * (d2 / (s2 * s2) - 2.0 / s2);
            }
            const size_t i = (size_t)y * W + x;
            I[i] = (float)v;
            /* transparency, seeing change, noise, a mover */
            double rv = 0.01 * (v - 1000.0) + 0.05 * lap + 5.0 * rng_gauss();
            if (abs(x - 128) <= 2 && abs(y - 100) <= 2)
                rv += 200.0;
            r[i] = (float)rv;
            if (rng_unif() < 0.02)
                (rng_unif() < 0.5 ? I : r)[i] = NAN;
        }
    for (size_t q = 0; q < sizeof shares / sizeof shares[0]; q++) {
        cfg.device_feeds = shares[q];
        pair_t p;
        pair_new(&p, &cfg, &geo, NULL);
        write_both(&p, SS_PLANE_PREDICTION, 0, I);
        write_both(&p, SS_PLANE_RESIDUAL, 0, r);
        for (size_t k = 0; k < sizeof radii / sizeof radii[0]; k++) {
            ck_assert_int_eq(ss_backend_cpu.guided(p.c, radii[k], 25.0f, mask), SS_OK);
            ck_assert_int_eq(p.go->guided(p.g, radii[k], 25.0f, mask), SS_OK);
            const double rel = cmp_float(&p, SS_PLANE_CLEAN, radii[k] == 0, "guided");
            ck_assert_msg(rel <= 1e-5,
                          "guided (laplacian %d, mask %d, device_feeds %d) radius %d: rel L2 %.3g",
                          laplacian, mask != NULL, shares[q], radii[k], rel);
        }
        pair_free(&p);
    }
    free(I);
    free(r);
}
END_TEST

/* ---- §5 noise -------------------------------------------------------------- */

/* _i = 0: the GPU's default choice of selection kernel (one cluster for
 * up to SEL_SMALL_MAX samples: here every stride); 1: the grid-wide
 * passes for every stride; 2: the cluster for every stride, asked for
 * with no limit. */
START_TEST(test_noise_parity)
{
    static const int strides[] = { 1, 2, 3, 4, 7 };
    enum { W = 333, H = 290 };
    rng_state = 4242;
    ss_pipeline_cfg_t cfg;
    base_cfg(&cfg);
    ss_geometry_t geo = geometry(W, H, SS_DT_F32, SS_DT_F32, 2);
    pair_t p;
    pair_new(&p, &cfg, &geo, NULL);
#ifdef SKYSIEVE_HAVE_CUDA
    if (_i > 0)
        ss_cuda_set_select_small(p.g, _i == 1 ? 0 : (long long)W * H);
    ck_assert_msg(ss_cuda_select_cluster_max(p.g) >= (long long)W * H,
                  "the cluster selection takes %lld samples on this GPU",
                  ss_cuda_select_cluster_max(p.g));
#endif
    const size_t n = (size_t)W * H;
    float *v = malloc(n * sizeof(float));
    ck_assert_ptr_nonnull(v);
    for (int round = 0; round < 4; round++) {
        for (size_t i = 0; i < n; i++) {
            const double u = rng_unif();
            v[i] = (float)(7.0 * rng_gauss() + (round == 1 ? 3.0 : 0.0));
            if (round == 3)     /* uniform integer noise: the clip window keeps it all */
                v[i] = (float)(rng_u64() % 10) - 4.5f;
            if (u < 0.03)
                v[i] = NAN;
            else if (u < 0.035)
                v[i] = u < 0.032 ? INFINITY : -INFINITY;
            else if (u < 0.05)
                v[i] = (float)(1e4 * rng_gauss());
            if (round == 2)     /* many exact ties */
                v[i] = isfinite(v[i]) ? roundf(v[i] / 4.0f) : v[i];
        }
        write_both(&p, SS_PLANE_RESIDUAL, 0, v);
        for (size_t k = 0; k < sizeof strides / sizeof strides[0]; k++) {
            float sc = 0.0f, sg = 1.0f;
            ck_assert_int_eq(ss_backend_cpu.noise(p.c, SS_PLANE_RESIDUAL, strides[k], &sc), SS_OK);
            ck_assert_int_eq(p.go->noise(p.g, SS_PLANE_RESIDUAL, strides[k], &sg), SS_OK);
            ck_assert_msg(sc == sg, "round %d stride %d: cpu %.9g gpu %.9g", round, strides[k],
                          (double)sc, (double)sg);
            ck_assert(sc > 0.0f);
        }
    }
    for (size_t i = 0; i < n; i++)
        v[i] = NAN;
    write_both(&p, SS_PLANE_CLEAN, 0, v);
    float sg = 0.0f;
    ck_assert_int_eq(p.go->noise(p.g, SS_PLANE_CLEAN, 2, &sg), SS_OK);
    ck_assert(isnan(sg));
    ck_assert_int_eq(p.go->noise(p.g, SS_PLANE_LABELS, 2, &sg), SS_ERR_INVALID);
    free(v);
    pair_free(&p);
}
END_TEST

/* ---- §6 matched filter ---------------------------------------------------- */

/* _i = the configured phases per axis: 1 (one kernel), 2, 3 (the
 * sub-pixel banks), 0 (auto: the 2×2 bank for the PSFs under 1 px). The
 * bank's z, the signed phase value of largest |z|, must agree to the bit
 * too, NaN pattern included (phases whose kept weight is under ½ near
 * the invalid pixels drop out of the fold one by one). Two planes: 5 %
 * invalid (every tile of the kernel takes its general path) and 0.02 %
 * (most inner tiles are whole: k_matched's matched_whole, the rest not). */
START_TEST(test_matched_parity)
{
    static const double psf[] = { 1.4, 0.6, 0.68, 2.7, 0.0, 9.5 };
    enum { W = 211, H = 173 };
    rng_state = 31337 + (uint64_t)_i;
    ss_pipeline_cfg_t cfg;
    base_cfg(&cfg);
    ss_geometry_t geo = geometry(W, H, SS_DT_F32, SS_DT_F32, 2);
    pair_t p;
    pair_new(&p, &cfg, &geo, NULL);
    for (int f = 0; f < 2; f++) {
        const double nan_frac = f ? 0.0002 : 0.05;
        fill_plane(&p, SS_PLANE_CLEAN, 0.0, 5.0, nan_frac);
        for (size_t k = 0; k < sizeof psf / sizeof psf[0]; k++) {
            ck_assert_int_eq(ss_backend_cpu.matched(p.c, psf[k], _i, 5.0f), SS_OK);
            ck_assert_int_eq(p.go->matched(p.g, psf[k], _i, 5.0f), SS_OK);
            char what[96];
            snprintf(what, sizeof what, "matched filter psf %g phases %d, %g invalid", psf[k],
                     _i, nan_frac);
            cmp_float(&p, SS_PLANE_SNR, 1, what);
        }
    }
    pair_free(&p);
}
END_TEST

static void cmp_dets(const ss_detlist_t *a, const ss_detlist_t *b, const char *what);

/* The frame's σ left on the backend (noise with sigma NULL): the matched
 * filter, the model-error term and the detection take it as
 * SS_SIGMA_FRAME, and frame_stats returns it. On both backends the SNR
 * maps equal those made with σ passed by value (to the bit), the σ that
 * frame_stats returns (before any detection: the CUDA backend waits for
 * it) equals the synchronous noise op's, and a later synchronous noise
 * op takes the device's σ out of play again. */
START_TEST(test_frame_sigma_parity)
{
    enum { W = 211, H = 173 };
    rng_state = 4242;
    ss_pipeline_cfg_t cfg;
    base_cfg(&cfg);
    ss_geometry_t geo = geometry(W, H, SS_DT_F32, SS_DT_F32, 2);
    pair_t p;
    pair_new(&p, &cfg, &geo, NULL);
    fill_plane(&p, SS_PLANE_CLEAN, 0.0, 3.0, 0.05);
    float sc, sg, bc, bg;
    int nc, ng;
    ck_assert_int_eq(ss_backend_cpu.noise(p.c, SS_PLANE_CLEAN, 2, &sc), SS_OK);
    ck_assert_int_eq(p.go->noise(p.g, SS_PLANE_CLEAN, 2, &sg), SS_OK);
    ck_assert_msg(sc == sg && sc > 0.0f, "σ cpu %.9g gpu %.9g", (double)sc, (double)sg);
    ck_assert_int_eq(ss_backend_cpu.matched(p.c, 1.4, 1, sc), SS_OK);
    float *by_value = malloc((size_t)W * H * sizeof(float));
    ck_assert_ptr_nonnull(by_value);
    ck_assert_int_eq(ss_backend_cpu.read_plane(p.c, SS_PLANE_SNR, 0, by_value), SS_OK);

    ck_assert_int_eq(ss_backend_cpu.noise(p.c, SS_PLANE_CLEAN, 2, NULL), SS_OK);
    ck_assert_int_eq(p.go->noise(p.g, SS_PLANE_CLEAN, 2, NULL), SS_OK);
    ck_assert_int_eq(ss_backend_cpu.frame_stats(p.c, &sc, &bc, &nc), SS_OK);
    ck_assert_int_eq(p.go->frame_stats(p.g, &sg, &bg, &ng), SS_OK);
    ck_assert_msg(sc == sg, "frame σ cpu %.9g gpu %.9g", (double)sc, (double)sg);
    ck_assert_int_eq(ss_backend_cpu.matched(p.c, 1.4, 1, SS_SIGMA_FRAME), SS_OK);
    ck_assert_int_eq(p.go->matched(p.g, 1.4, 1, SS_SIGMA_FRAME), SS_OK);
    cmp_float(&p, SS_PLANE_SNR, 1, "matched filter with the frame's σ");
    float *z = malloc((size_t)W * H * sizeof(float));
    ck_assert_ptr_nonnull(z);
    ck_assert_int_eq(p.go->read_plane(p.g, SS_PLANE_SNR, 0, z), SS_OK);
    ck_assert_int_eq(memcmp(z, by_value, (size_t)W * H * sizeof(float)), 0);

    /* σ read back with the detection (no frame_stats before it) */
    ck_assert_int_eq(ss_backend_cpu.noise(p.c, SS_PLANE_CLEAN, 3, NULL), SS_OK);
    ck_assert_int_eq(p.go->noise(p.g, SS_PLANE_CLEAN, 3, NULL), SS_OK);
    ck_assert_int_eq(ss_backend_cpu.matched(p.c, 1.4, 1, SS_SIGMA_FRAME), SS_OK);
    ck_assert_int_eq(p.go->matched(p.g, 1.4, 1, SS_SIGMA_FRAME), SS_OK);
    ss_detlist_t dc, dg;
    ck_assert_int_eq(ss_detlist_init(&dc, 1000), 0);
    ck_assert_int_eq(ss_detlist_init(&dg, 1000), 0);
    ck_assert_int_eq(ss_backend_cpu.detect(p.c, SS_SIGMA_FRAME, &dc), SS_OK);
    ck_assert_int_eq(p.go->detect(p.g, SS_SIGMA_FRAME, &dg), SS_OK);
    cmp_dets(&dc, &dg, "detection with the frame's σ");
    ck_assert_int_eq(ss_backend_cpu.frame_stats(p.c, &sc, &bc, &nc), SS_OK);
    ck_assert_int_eq(p.go->frame_stats(p.g, &sg, &bg, &ng), SS_OK);
    ck_assert_msg(sc == sg && sc > 0.0f, "σ after detect cpu %.9g gpu %.9g", (double)sc,
                  (double)sg);
    for (int i = 0; i < dc.count; i++)
        ck_assert(dc.items[i].flux_err == (double)sc * sqrt((double)dc.items[i].area));

    /* a synchronous noise op again: σ by value from then on */
    ck_assert_int_eq(p.go->noise(p.g, SS_PLANE_CLEAN, 2, &sg), SS_OK);
    ck_assert_int_eq(p.go->matched(p.g, 1.4, 1, sg), SS_OK);
    ck_assert_int_eq(p.go->read_plane(p.g, SS_PLANE_SNR, 0, z), SS_OK);
    ck_assert_int_eq(memcmp(z, by_value, (size_t)W * H * sizeof(float)), 0);
    ss_detlist_free(&dc);
    ss_detlist_free(&dg);
    free(z);
    free(by_value);
    pair_free(&p);
}
END_TEST

/* ---- §6b model-error term ------------------------------------------------- */

/* A star field as the prediction (Gaussian stars of sigma 1.7 on a sky
 * with a gradient, 2 % invalid pixels) and an SNR map of noise plus a
 * share of each star's scale derivative, so that β is fitted from
 * thousands of samples: the template (STAR), the samples' number, β and
 * the divided SNR map must agree to the bit, and so must z before the
 * division (SNR_RAW) and the detections that grow on it from seeds of
 * the divided map (labels, lists). _i: 0 the residual's single kernel
 * configured; 1 the 2×2 bank configured (the template always takes one
 * kernel); 2 no star bright enough (β = 0, SNR unchanged, detection on
 * SNR alone). _i = 1 also takes the grid-wide selection passes for β's
 * median (the others: one cluster). */
START_TEST(test_modelvar_parity)
{
    static const double psf[] = { 1.4, 0.68, 2.7 };
    static const int strides[] = { 1, 2, 3 };
    /* _i = 1: a width that 4 divides (the high-pass's rows as float4) */
    const int W = _i == 1 ? 264 : 263, H = 181;
    rng_state = 5150 + (uint64_t)_i;
    ss_pipeline_cfg_t cfg;
    base_cfg(&cfg);
    cfg.mf_phases = _i == 1 ? 2 : 1;
    ss_geometry_t geo = geometry(W, H, SS_DT_F32, SS_DT_F32, 2);
    pair_t p;
    pair_new(&p, &cfg, &geo, NULL);
#ifdef SKYSIEVE_HAVE_CUDA
    if (_i == 1)
        ss_cuda_set_select_small(p.g, 0);
#endif
    const size_t n = (size_t)W * H;
    float *P = malloc(n * sizeof(float)), *z = malloc(n * sizeof(float));
    float *zd = malloc(n * sizeof(float));
    int32_t *lab = malloc(n * sizeof(int32_t));
    ss_detlist_t dc, dg;
    ck_assert(P && z && zd && lab && ss_detlist_init(&dc, 100000) == 0 &&
              ss_detlist_init(&dg, 100000) == 0);
    fill_plane(&p, SS_PLANE_CLEAN, 0.0, 5.0, 0.0);
    fill_plane(&p, SS_PLANE_RESIDUAL, 0.0, 6.0, 0.0);
    const double amp = _i == 2 ? 20.0 : 3e4;
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) {
            double v = 1000.0 + 0.5 * x, ring = 0.0;
            for (int s = 0; s < 24; s++) {
                const double sx = 11 + (s * 97) % (W - 22), sy = 9 + (s * 61) % (H - 18);
                const double d2 = (x - sx) * (x - sx) + (y - sy) * (y - sy), s2 = 1.7 * 1.7;
                const double g = amp * (1.0 + s % 5) * exp(-d2 / (2 * s2));
                v += g;
                ring += g * d2 / s2;
            }
            const size_t i = (size_t)y * W + x;
            P[i] = (float)v;
            z[i] = (float)(rng_gauss() + 0.002 * ring);
            if (rng_unif() < 0.02)
                (rng_unif() < 0.5 ? P : z)[i] = NAN;
        }
    /* The frame's noise of CLEAN starts the star map's high-passes of the
     * PREDICTION then held ahead (CUDA, the model-error term on): a
     * PREDICTION written after it must not meet the old one's. */
    for (size_t i = 0; i < n; i++)
        zd[i] = 500.0f + (float)(i % 97);
    write_both(&p, SS_PLANE_PREDICTION, 0, zd);
    ck_assert_int_eq(ss_backend_cpu.noise(p.c, SS_PLANE_CLEAN, 1, NULL), SS_OK);
    ck_assert_int_eq(p.go->noise(p.g, SS_PLANE_CLEAN, 1, NULL), SS_OK);
    write_both(&p, SS_PLANE_PREDICTION, 0, P);
    for (size_t k = 0; k < sizeof psf / sizeof psf[0]; k++) {
        write_both(&p, SS_PLANE_SNR, 0, z);
        const int st = strides[k];
        float bc = -1.0f, bg = -2.0f;
        int nc = -1, ng = -2;
        ck_assert_int_eq(ss_backend_cpu.modelvar(p.c, ss_mv_radius(psf[k]), psf[k], 5.0f, st,
                                                 20.0f), SS_OK);
        ck_assert_int_eq(p.go->modelvar(p.g, ss_mv_radius(psf[k]), psf[k], 5.0f, st, 20.0f),
                         SS_OK);
        /* before any detect: the CUDA backend waits for them here */
        float sc_, sg_;
        ck_assert_int_eq(ss_backend_cpu.frame_stats(p.c, &sc_, &bc, &nc), SS_OK);
        ck_assert_int_eq(p.go->frame_stats(p.g, &sg_, &bg, &ng), SS_OK);
        char what[80];
        snprintf(what, sizeof what, "model error psf %g stride %d", psf[k], st);
        cmp_float(&p, SS_PLANE_STAR, 1, what);
        ck_assert_msg(nc == ng && bc == bg, "%s: cpu beta %.9g from %d, gpu %.9g from %d", what,
                      (double)bc, nc, (double)bg, ng);
        if (_i == 2)
            ck_assert_msg(bc == 0.0f, "%s: beta %g without bright stars", what, (double)bc);
        else
            ck_assert_msg(bc > 0.0f && nc >= SS_MV_MIN_SAMPLES, "%s: beta %g from %d", what,
                          (double)bc, nc);
        cmp_float(&p, SS_PLANE_SNR, 1, what);
        cmp_float(&p, SS_PLANE_SNR_RAW, 1, what);      /* written whatever β */
        ck_assert_int_eq(ss_backend_cpu.detect(p.c, 5.0f, &dc), SS_OK);
        ck_assert_int_eq(p.go->detect(p.g, 5.0f, &dg), SS_OK);
        cmp_bytes(&p, SS_PLANE_LABELS, 0, n * sizeof(int32_t), what);
        cmp_dets(&dc, &dg, what);
        /* the new path was taken: some labelled pixels are below the
         * growth level in the divided map (grown on SNR_RAW) */
        ck_assert_int_eq(ss_backend_cpu.read_plane(p.c, SS_PLANE_SNR, 0, zd), SS_OK);
        ck_assert_int_eq(ss_backend_cpu.read_plane(p.c, SS_PLANE_LABELS, 0, lab), SS_OK);
        size_t grown = 0;
        for (size_t i = 0; i < n; i++)
            grown += lab[i] != 0 && !(fabsf(zd[i]) >= (float)cfg.thresh_low);
        ck_assert_msg(_i == 2 ? grown == 0 : grown > 0, "%s: %zu pixels grown on z before the "
                      "division", what, grown);
    }
    free(P);
    free(z);
    free(zd);
    free(lab);
    ss_detlist_free(&dc);
    ss_detlist_free(&dg);
    pair_free(&p);
}
END_TEST

/* ---- §7 labels and measurement -------------------------------------------- */

static void cmp_dets(const ss_detlist_t *a, const ss_detlist_t *b, const char *what)
{
    ck_assert_msg(a->count == b->count && a->truncated == b->truncated,
                  "%s: cpu %d detections (%d truncated), gpu %d (%d)", what, a->count,
                  a->truncated, b->count, b->truncated);
    for (int i = 0; i < a->count; i++) {
        const ss_detection_t *x = &a->items[i], *y = &b->items[i];
        ck_assert_msg(x->label == y->label && x->sign == y->sign && x->kind == y->kind &&
                          x->area == y->area && x->bbox_x0 == y->bbox_x0 &&
                          x->bbox_y0 == y->bbox_y0 && x->bbox_x1 == y->bbox_x1 &&
                          x->bbox_y1 == y->bbox_y1 && x->peak_x == y->peak_x &&
                          x->peak_y == y->peak_y && x->flags == y->flags,
                      "%s: detection %d differs: cpu label %d kind %d area %d peak (%d,%d) "
                      "flags %d; gpu label %d kind %d area %d peak (%d,%d) flags %d",
                      what, i, x->label, x->kind, x->area, x->peak_x, x->peak_y, x->flags,
                      y->label, y->kind, y->area, y->peak_x, y->peak_y, y->flags);
        ck_assert_msg(fabs(x->x - y->x) < 1e-3 && fabs(x->y - y->y) < 1e-3 &&
                          fabs(x->x0 - y->x0) < 1e-3 && fabs(x->y1 - y->y1) < 1e-3,
                      "%s: detection %d at cpu (%.6f, %.6f) gpu (%.6f, %.6f)", what, i, x->x, x->y,
                      y->x, y->y);
        ck_assert(fabs(x->flux - y->flux) <= 1e-6 * (1.0 + fabs(x->flux)));
        ck_assert(x->peak_snr == y->peak_snr);
        ck_assert(fabs(x->a - y->a) <= 1e-6 * (1.0 + x->a));
    }
}

START_TEST(test_detect_parity)
{
    static const double density[] = { 0.01, 0.05, 0.2, 0.4, 0.6 };
    static const int sizes[][2] = { { 333, 217 }, { 97, 400 }, { 64, 64 } };
    rng_state = 2718 + (uint64_t)_i;
    const int W = sizes[_i][0], H = sizes[_i][1];
    ss_pipeline_cfg_t cfg;
    base_cfg(&cfg);
    cfg.thresh = 5.0;
    cfg.thresh_low = 2.5;
    cfg.negative = 1;
    cfg.min_area = 2;
    ss_geometry_t geo = geometry(W, H, SS_DT_F32, SS_DT_F32, 2);
    pair_t p;
    pair_new(&p, &cfg, &geo, NULL);
    fill_plane(&p, SS_PLANE_CLEAN, 0.0, 5.0, 0.0);
    fill_plane(&p, SS_PLANE_RESIDUAL, 0.0, 6.0, 0.0);
    const size_t n = (size_t)W * H;
    float *z = malloc(n * sizeof(float));
    ss_detlist_t dc, dg;
    ck_assert(z && ss_detlist_init(&dc, 100000) == 0 && ss_detlist_init(&dg, 100000) == 0);
    int many = 0;
    (void)many;
    for (size_t d = 0; d < sizeof density / sizeof density[0]; d++) {
        for (size_t i = 0; i < n; i++) {
            const double u = rng_unif();
            if (u < density[d]) {           /* in the mask; a third are seeds */
                const double s = rng_unif() < 0.25 ? -1.0 : 1.0;
                z[i] = (float)(s * (2.5 + (rng_unif() < 0.33 ? 3.0 : 2.4) * rng_unif()));
            } else {
                z[i] = (float)(2.4 * (2.0 * rng_unif() - 1.0));
            }
            if (rng_unif() < 0.005)
                z[i] = NAN;
        }
        for (int k = 0; k < 12; k++) {      /* compact sources, some negative */
            const int bx = (int)(rng_u64() % (uint64_t)(W - 4)), by = (int)(rng_u64() % (uint64_t)(H - 4));
            const float s = k % 4 == 3 ? -1.0f : 1.0f;
            for (int y = by; y < by + 3; y++)
                for (int x = bx; x < bx + 4; x++)
                    z[(size_t)y * W + x] = s * (float)(3.0 + 6.0 * rng_unif());
        }
        write_both(&p, SS_PLANE_SNR, 0, z);
        ck_assert_int_eq(ss_backend_cpu.detect(p.c, 5.0f, &dc), SS_OK);
        const long w0 = gpu_waits(p.g);
        ck_assert_int_eq(p.go->detect(p.g, 5.0f, &dg), SS_OK);
#ifdef SKYSIEVE_HAVE_CUDA
        /* the accumulators come back with the detection's segment, as
         * many as were measured (up to 4096, eligible or not): one wait;
         * before, 256 came with it and more cost a second */
        const long w = gpu_waits(p.g) - w0;
        const int elig = dc.count + dc.truncated;
        printf("detect %dx%d density %.2f: %d eligible components, %ld waits\n", W, H,
               density[d], elig, w);
        ck_assert(w == 1 || (w == 2 && elig > 256));   /* 2: beyond 4096 */
        many += elig > 256 && w == 1;
#else
        (void)w0;
#endif
        cmp_bytes(&p, SS_PLANE_LABELS, 0, n * sizeof(int32_t), "labels");
        char what[64];
        snprintf(what, sizeof what, "%dx%d density %.2f", W, H, density[d]);
        cmp_dets(&dc, &dg, what);
        if (density[d] <= 0.05)
            ck_assert_int_gt(dc.count, 0);
    }
#ifdef SKYSIEVE_HAVE_CUDA
    if (_i == 0)    /* 333×217: frames of more than 256 components were met */
        ck_assert_int_gt(many, 0);
#endif
    free(z);
    ss_detlist_free(&dc);
    ss_detlist_free(&dg);
    pair_free(&p);
}
END_TEST

/* Kinds on both backends (the brightest unfiltered pixel's index and
 * weight, the shape without it): a residual with streaks, one crossed by a
 * bright 1-px hit, a sharp elongated track, 1-3 px hits and point sources,
 * through the matched filter and detection of each backend. The lists
 * must be identical (kinds included), and the planted streaks streaks. */
static void add_line(float *img, int w, int h, double x0, double y0, double x1, double y1,
                     double lam, double s)
{
    enum { SUB = 4 };
    const double L = hypot(x1 - x0, y1 - y0), ux = (x1 - x0) / L, uy = (y1 - y0) / L;
    const int R = (int)ceil(4 * s) + 2;
    for (int y = SS_MAX((int)floor(fmin(y0, y1)) - R, 0); y <= SS_MIN((int)ceil(fmax(y0, y1)) + R, h - 1); y++)
        for (int x = SS_MAX((int)floor(fmin(x0, x1)) - R, 0); x <= SS_MIN((int)ceil(fmax(x0, x1)) + R, w - 1); x++) {
            double v = 0.0;
            for (int sy = 0; sy < SUB; sy++)
                for (int sx = 0; sx < SUB; sx++) {
                    const double dx = x - 0.5 + (sx + 0.5) / SUB - x0, dy = y - 0.5 + (sy + 0.5) / SUB - y0;
                    const double t = dx * ux + dy * uy, dd = -dx * uy + dy * ux;
                    v += exp(-dd * dd / (2 * s * s)) / (sqrt(2 * M_PI) * s) * 0.5 *
                         (erf(t / (s * M_SQRT2)) - erf((t - L) / (s * M_SQRT2)));
                }
            img[(size_t)y * w + x] += (float)(lam * v / (SUB * SUB));
        }
}

START_TEST(test_detect_kinds_parity)
{
    enum { KW = 400, KH = 300 };
    const size_t n = (size_t)KW * KH;
    rng_state = 0x4b1d;
    ss_pipeline_cfg_t cfg;
    base_cfg(&cfg);
    cfg.negative = 1;
    cfg.min_area = 1;
    ss_geometry_t geo = geometry(KW, KH, SS_DT_F32, SS_DT_F32, 2);
    pair_t p;
    pair_new(&p, &cfg, &geo, NULL);
    float *img = malloc(n * sizeof(float));
    ck_assert_ptr_nonnull(img);
    for (size_t i = 0; i < n; i++)
        img[i] = (float)(5.0 * rng_gauss());
    add_line(img, KW, KH, 20, 30, 220, 80, 50.0, 1.4);         /* streak, λ/σ 10 */
    add_line(img, KW, KH, 40, 250, 300, 150, 50.0, 1.4);       /* streak with a hit */
    img[(size_t)200 * KW + 170] += 600.0f;
    add_line(img, KW, KH, 300, 20, 340, 60, 800.0, 0.3);       /* a sharp track */
    img[(size_t)120 * KW + 60] += 300.0f;                      /* 1-3 px hits */
    img[(size_t)130 * KW + 100] += 200.0f;
    img[(size_t)130 * KW + 101] += 150.0f;
    img[(size_t)140 * KW + 140] -= 250.0f;                     /* a vanished one */
    for (int k = 0; k < 3; k++)
        img[(size_t)(110 + k) * KW + 380 - k] += 120.0f;
    for (int k = 0; k < 6; k++) {                              /* point sources */
        const int cx = 60 + 50 * k, cy = 280 - 10 * (k % 2);
        for (int dy = -4; dy <= 4; dy++)
            for (int dx = -4; dx <= 4; dx++)
                img[(size_t)(cy + dy) * KW + cx + dx] +=
                    (float)((200 + 100 * k) * exp(-(dx * dx + dy * dy) / (2 * 1.96)) / (2 * M_PI * 1.96));
    }
    write_both(&p, SS_PLANE_CLEAN, 0, img);
    write_both(&p, SS_PLANE_RESIDUAL, 0, img);
    ck_assert_int_eq(ss_backend_cpu.matched(p.c, 1.4, 1, 5.0f), SS_OK);
    ck_assert_int_eq(p.go->matched(p.g, 1.4, 1, 5.0f), SS_OK);
    ss_detlist_t dc, dg;
    ck_assert(ss_detlist_init(&dc, 1000) == 0 && ss_detlist_init(&dg, 1000) == 0);
    ck_assert_int_eq(ss_backend_cpu.detect(p.c, 5.0f, &dc), SS_OK);
    ck_assert_int_eq(p.go->detect(p.g, 5.0f, &dg), SS_OK);
    cmp_bytes(&p, SS_PLANE_LABELS, 0, n * sizeof(int32_t), "kinds labels");
    cmp_dets(&dc, &dg, "kinds");
    int streaks = 0, cosmics = 0, points = 0;
    for (int i = 0; i < dg.count; i++) {
        streaks += dg.items[i].kind == SS_KIND_STREAK;
        cosmics += dg.items[i].kind == SS_KIND_COSMIC;
        points += dg.items[i].kind == SS_KIND_POINT;
    }
    ck_assert_msg(streaks == 2 && cosmics >= 5 && points >= 6, "streaks %d cosmics %d points %d",
                  streaks, cosmics, points);
    free(img);
    ss_detlist_free(&dc);
    ss_detlist_free(&dg);
    pair_free(&p);
}
END_TEST

/* More components than the GPU's accumulators (CU_MAX_COMPONENTS = 2^18;
 * the CPU's limit is the same): a 1024² map of isolated 1-px seeds,
 * positive at (even, even) and negative at (odd, odd) (2^19 components),
 * the most significant in the last rows, plus (variant 1) 2-px components
 * with min_area 2 so that the 1-px ones are rejects. Both backends must
 * report the same list (the device top-k through cu_detect_overflow, the
 * CPU's through ss_comp_preselect) and the same label plane, and it must
 * be the truth: the detect.max largest peaks, descending, truncated exact. */
START_TEST(test_detect_overflow_parity)
{
    enum { BW = 1024, BH = 1024 };
    const size_t n = (size_t)BW * BH;
    rng_state = 0x0f10 + (uint64_t)_i;
    ss_pipeline_cfg_t cfg;
    base_cfg(&cfg);
    cfg.thresh = 5.0;
    cfg.thresh_low = 2.5;
    cfg.negative = 1;
    cfg.min_area = _i ? 2 : 1;
    cfg.max_detections = _i ? 1000 : 300;
    ss_geometry_t geo = geometry(BW, BH, SS_DT_F32, SS_DT_F32, 2);
    pair_t p;
    pair_new(&p, &cfg, &geo, NULL);
    float *z = malloc(n * sizeof(float)), *rc = malloc(n * sizeof(float));
    ck_assert(z && rc);
    for (int y = 0; y < BH; y++)
        for (int x = 0; x < BW; x++) {
            const size_t i = (size_t)y * BW + x;
            const float v = (float)(5.0 + 3.0 * rng_unif());
            z[i] = !(x & 1) && !(y & 1) ? v : (x & 1) && (y & 1) ? -v : 0.0f;
            rc[i] = (float)(z[i] + rng_gauss());
        }
    for (int k = 0; k < 30; k++) {
        const int y = BH - 2 - 2 * (k % 3), x = 2 * (k * 13 % 500);
        z[(size_t)y * BW + x] = (float)(20.0 + k);
        z[(size_t)(y + 1) * BW + x + 1] = -(float)(20.5 + k);
    }
    int pairs = 0;
    if (_i) {
        for (int k = 0; k < 400; k++) {
            const int y = 2 * (int)(rng_unif() * (BH / 2 - 1)), x = 4 * (int)(rng_unif() * (BW / 4 - 1));
            const size_t i = (size_t)y * BW + x;
            pairs += z[i + 1] == 0.0f;
            z[i] = (float)(5.0 + 0.5 * rng_unif());
            z[i + 1] = 5.0f;
            z[i + 2] = 0.0f;
        }
    }
    write_both(&p, SS_PLANE_SNR, 0, z);
    write_both(&p, SS_PLANE_CLEAN, 0, rc);
    write_both(&p, SS_PLANE_RESIDUAL, 0, rc);
    ss_detlist_t dc, dg;
    ck_assert(ss_detlist_init(&dc, 5000) == 0 && ss_detlist_init(&dg, 5000) == 0);
    ck_assert_int_eq(ss_backend_cpu.detect(p.c, 1.0f, &dc), SS_OK);
    ck_assert_int_eq(p.go->detect(p.g, 1.0f, &dg), SS_OK);
    cmp_bytes(&p, SS_PLANE_LABELS, 0, n * sizeof(int32_t), "overflow labels");
    cmp_dets(&dc, &dg, _i ? "overflow, min_area 2" : "overflow");
    if (!_i) {
        ck_assert_int_eq(dg.count, 300);
        ck_assert_int_eq(dg.truncated, (int)(n / 2) - 300);
        for (int j = 0; j < 60; j++)
            ck_assert_msg(fabs(dg.items[j].peak_snr - (49.5 - 0.5 * j)) < 1e-5,
                          "detection %d: peak %g", j, dg.items[j].peak_snr);
    } else {
        ck_assert_int_ge(pairs, 300);
        ck_assert_int_eq(dg.truncated, 0);
        for (int j = 0; j < dg.count; j++)
            ck_assert_int_eq(dg.items[j].area, 2);
    }
    for (int j = 1; j < dg.count; j++)
        ck_assert(dg.items[j].peak_snr <= dg.items[j - 1].peak_snr);
    free(z);
    free(rc);
    ss_detlist_free(&dc);
    ss_detlist_free(&dg);
    pair_free(&p);
}
END_TEST

/* ---- §3 history store (object removal) ------------------------------------ */

START_TEST(test_history_store_parity)
{
    const ss_dtype_t ht = _i & 1 ? SS_DT_F32 : SS_DT_U16;
    const int clean = (_i >> 1) & 1;
    enum { W = 190, H = 141 };
    rng_state = 606 + (uint64_t)_i;
    ss_pipeline_cfg_t cfg;
    base_cfg(&cfg);
#ifdef SS_CLEAN_STRIDE
    cfg.clean_sharp = clean;
#else
    (void)clean;
#endif
    ss_geometry_t geo = geometry(W, H, ht == SS_DT_U16 ? SS_DT_U16 : SS_DT_F32, ht, 3);
    pair_t p;
    pair_new(&p, &cfg, &geo, NULL);
    const size_t n = (size_t)W * H;
    fill_plane(&p, SS_PLANE_FRAME, 1000.0, 400.0, 0.01);
    fill_plane(&p, SS_PLANE_FILTERED, 1000.0, 30.0, 0.01);
    fill_plane(&p, SS_PLANE_PREDICTION, 900.0, 30.0, 0.01);
    int32_t *lab = calloc(n, sizeof(int32_t));
    ck_assert_ptr_nonnull(lab);
    for (int b = 0; b < 25; b++) {
        const int cx = (int)(rng_u64() % W), cy = (int)(rng_u64() % H);
        const int32_t L = rng_unif() < 0.3 ? -(b + 1) : b + 1;
        for (int y = cy - 2; y <= cy + 2; y++)
            for (int x = cx - 1; x <= cx + 3; x++)
                if (x >= 0 && x < W && y >= 0 && y < H)
                    lab[(size_t)y * W + x] = L;
    }
    write_both(&p, SS_PLANE_LABELS, 0, lab);
    const size_t hb = n * ss_dtype_size(ht);
    /* radii up to CU_STORE_RMAX (16) take the one-pass tile kernel, 17
     * the two passes; the frame is not a whole number of tiles */
    static const int radii[] = { 0, 4, 16, 17 };
    for (int remove = 0; remove <= 1; remove++)
        for (int ri = 0; ri < 4; ri++) {
            const int radius = radii[ri];
            ck_assert_int_eq(ss_backend_cpu.history_store(p.c, 1, remove, radius), SS_OK);
            ck_assert_int_eq(p.go->history_store(p.g, 1, remove, radius), SS_OK);
            cmp_bytes(&p, SS_PLANE_HISTORY, 1, hb, "history slot");
        }
    ck_assert_int_eq(p.go->history_store(p.g, 3, 1, 2), SS_ERR_INVALID);
    free(lab);
    pair_free(&p);
}
END_TEST

/* ---- the whole chain --------------------------------------------------------- */

typedef struct run {
    int frames;
    ss_frame_status_t status[64];
    double sx[64], sy[64];
    float sigma[64];
    float beta[64];                 /* the model-error term's β and its samples */
    int mv_n[64];
    int ndet[64];
    ss_detection_t det[64][64];
    float *resid[64];
    int nw[64];
    double w[64][8];                /* the weights (history 8) */
    long waits;                     /* host waits (CUDA) */
    long launches[64];              /* graph launches up to the end of frame t */
    int graphs[64];                 /* graph shapes cached after frame t */
    uint64_t planned;               /* frames planned on the device */
} run_t;

static void run_free(run_t *r)
{
    for (int t = 0; t < r->frames; t++)
        free(r->resid[t]);
}

enum { CW = 384, CH = 320, CFRAMES = 24 };

static void record(run_t *out, int t, const ss_result_t *res)
{
    ck_assert_int_eq(res->residual_pending, 0);
    out->status[t] = res->status;
    out->sx[t] = res->shift.sx;
    out->sy[t] = res->shift.sy;
    out->sigma[t] = res->sigma;
    out->beta[t] = res->model_beta;
    out->mv_n[t] = res->model_samples;
    out->nw[t] = SS_MIN(res->n_weights, 8);
    memcpy(out->w[t], res->weights, (size_t)out->nw[t] * sizeof(double));
    out->ndet[t] = SS_MIN(res->dets.count, 64);
    memcpy(out->det[t], res->dets.items, (size_t)out->ndet[t] * sizeof(ss_detection_t));
    if (res->has_residual) {
        out->resid[t] = malloc((size_t)CW * CH * sizeof(float));
        memcpy(out->resid[t], res->residual, (size_t)CW * CH * sizeof(float));
    }
    out->frames = t + 1;
}

/* mode: 0 graphs, 1 direct launches, 2 timed, 3 graphs with the results
 * pipelined as the daemon does under load (pinned result buffers from
 * ss_pipeline_result_init; frame t starts before frame t-1's residual
 * download is waited for), 4 graphs with every prediction planned on the
 * host (ss_pipeline_set_backend_plan off); prefetch: ss_cuda_prefetch the
 * next frame before processing the current one. */
static int chain_lsq;            /* run_chain's weights: 1 the Wiener ones (lsq) */

static void run_chain(ss_backend_kind_t kind, int mode, int prefetch, uint64_t seed, run_t *out)
{
    memset(out, 0, sizeof *out);
    ss_synth_cfg_t sc;
    synth_cfg(&sc, CW, CH, seed);
    sc.jitter = 1.5;
    sc.n_movers = 4;
    sc.mover_snr = 12.0;
    sc.streak_prob = 0.15;
    sc.streak_snr = 12.0;
    sc.streak_len_min = 30.0;
    sc.streak_len_max = 80.0;
    sc.seeing_wobble = 0.03;
    ss_synth_t *syn = ss_synth_new(&sc);
    ck_assert_ptr_nonnull(syn);
    ss_pipeline_cfg_t cfg;
    base_cfg(&cfg);
    cfg.backend = kind;
    cfg.history = 8;
    cfg.mode = chain_lsq ? SS_WHITEN_LSQ : SS_WHITEN_POLY;
    char err[256];
    ss_pipeline_t *pl = ss_pipeline_new(&cfg, "parity", err, sizeof err);
    ck_assert_msg(pl != NULL, "pipeline: %s", err);
    ss_pipeline_set_backend_plan(pl, mode != 4);
    ss_result_t rb[2];
    for (int k = 0; k < 2; k++)
        if (mode == 3)
            ck_assert_int_eq(ss_pipeline_result_init(pl, &rb[k], (size_t)CW * CH, 1000), 0);
        else
            ck_assert_int_eq(ss_result_init(&rb[k], (size_t)CW * CH, 1000), 0);
    int pending = 0;
    const size_t bytes = (size_t)CW * CH * 2;
    ss_frame_t fr[2];
    for (int k = 0; k < 2; k++) {
        memset(&fr[k], 0, sizeof fr[k]);
        fr[k].pixels = malloc(bytes);
        fr[k].capacity = bytes;
        ck_assert_ptr_nonnull(fr[k].pixels);
    }
    ck_assert_int_eq(ss_synth_next(syn, &fr[0], NULL), SS_OK);
    for (int t = 0; t < CFRAMES; t++) {
        ss_frame_t *cur = &fr[t & 1], *next = &fr[(t + 1) & 1];
        if (t + 1 < CFRAMES)
            ck_assert_int_eq(ss_synth_next(syn, next, NULL), SS_OK);
#ifdef SKYSIEVE_HAVE_CUDA
        const ss_backend_ops_t *ops = NULL;
        ss_backend_t *be = ss_pipeline_backend(pl, &ops);
        if (kind == SS_BACKEND_CUDA && be && ops == ss_backend_cuda_ops())
            ss_cuda_set_mode(be, mode == 2, mode == 0 || mode == 3 || mode == 4);
#endif
        ss_result_t *rp = &rb[mode == 3 ? t & 1 : 0];
        if (mode == 3) {
            ck_assert_int_eq(ss_pipeline_start(pl, cur, rp), SS_OK);
            ck_assert_int_eq(rp->residual_pending, rp->status == SS_STATUS_OK);
            pending += rp->residual_pending;
            if (t > 0) {
                ck_assert_int_eq(ss_pipeline_finish(pl, &rb[(t + 1) & 1]), SS_OK);
                record(out, t - 1, &rb[(t + 1) & 1]);
            }
        } else {
            ck_assert_int_eq(ss_pipeline_process(pl, cur, rp), SS_OK);
        }
        const ss_result_t res = *rp;
        (void)res;
#ifdef SKYSIEVE_HAVE_CUDA
        be = ss_pipeline_backend(pl, &ops);
        if (kind == SS_BACKEND_CUDA) {
            ck_assert_ptr_eq(ops, ss_backend_cuda_ops());
            if (mode == 2 && res.status == SS_STATUS_OK)
                ck_assert(res.stage_ms[SS_STAGE_WHITEN] > 0.0);
            if (prefetch && t + 1 < CFRAMES)
                ck_assert_int_eq(ss_cuda_prefetch(be, next), SS_OK);
        }
#else
        (void)mode;
        (void)prefetch;
#endif
        if (mode != 3)
            record(out, t, rp);
#ifdef SKYSIEVE_HAVE_CUDA
        if (kind == SS_BACKEND_CUDA)
            ss_cuda_graph_stats(be, &out->graphs[t], &out->launches[t], NULL);
#endif
    }
    if (mode == 3) {
        ss_result_t *last = &rb[(CFRAMES - 1) & 1];
        ck_assert_int_eq(ss_pipeline_finish(pl, last), SS_OK);
        record(out, CFRAMES - 1, last);
        ck_assert_int_ge(pending, CFRAMES / 2);     /* the asynchronous path was taken */
    }
    ss_pipeline_stats_t st;
    ss_pipeline_get_stats(pl, &st);
    out->planned = st.backend_planned;
#ifdef SKYSIEVE_HAVE_CUDA
    if (kind == SS_BACKEND_CUDA) {
        const ss_backend_ops_t *ops = NULL;
        ss_cuda_graph_stats(ss_pipeline_backend(pl, &ops), NULL, NULL, &out->waits);
    }
    if (kind == SS_BACKEND_CUDA) {
        const ss_backend_ops_t *ops = NULL;
        ss_backend_t *be = ss_pipeline_backend(pl, &ops);
        int ng = 0;
        long nl = 0;
        ss_cuda_graph_stats(be, &ng, &nl, NULL);
        if (mode == 0 || mode == 3) {
            /* graphs are replayed, not captured anew: once the device
             * plans the weights and the history holds no frame stored
             * before object removal (no slow-mover fits on the host), no
             * new shape over the last quarter of the frames */
            char seq[16 * 64] = "";
            for (int t = 0; t < CFRAMES; t++)
                snprintf(seq + strlen(seq), sizeof seq - strlen(seq), " %d/%ld", out->graphs[t],
                         out->launches[t] - (t ? out->launches[t - 1] : 0));
            printf("chain mode %d, prefetch %d: graph shapes cached / launches, frame by "
                   "frame:%s\n", mode, prefetch, seq);
            ck_assert_int_gt(ng, 0);
            ck_assert_msg(ng == out->graphs[3 * CFRAMES / 4 - 1],
                          "graph shapes cached / launches, frame by frame:%s", seq);
        }
        ck_assert_int_eq(ss_cuda_error_count(be), 0);
    }
#endif
    for (int k = 0; k < 2; k++)
        free(fr[k].pixels);
    ss_pipeline_destroy(&pl);
    for (int k = 0; k < 2; k++)
        ss_result_free(&rb[k]);
    ss_synth_destroy(&syn);
}

static void cmp_runs(const run_t *a, const run_t *b, double tol_resid, const char *what)
{
    int ok_frames = 0, dets = 0, betas = 0;
    ck_assert_int_eq(a->frames, b->frames);
    for (int t = 0; t < a->frames; t++) {
        ck_assert_msg(a->status[t] == b->status[t], "%s frame %d: status %s vs %s", what, t,
                      ss_status_name(a->status[t]), ss_status_name(b->status[t]));
        ck_assert_msg(fabs(a->sx[t] - b->sx[t]) < 1e-6 && fabs(a->sy[t] - b->sy[t]) < 1e-6,
                      "%s frame %d: shift (%.9f,%.9f) vs (%.9f,%.9f)", what, t, a->sx[t], a->sy[t],
                      b->sx[t], b->sy[t]);
        if (a->status[t] != SS_STATUS_OK)
            continue;
        ok_frames++;
        ck_assert_msg(fabs(a->sigma[t] - b->sigma[t]) <= 1e-5f * a->sigma[t],
                      "%s frame %d: sigma %.9g vs %.9g", what, t, (double)a->sigma[t],
                      (double)b->sigma[t]);
        /* β comes from the star map, whose high-passes the CUDA backend
         * runs on its side lane: a wrong order there shows here */
        ck_assert_msg(tol_resid == 0.0 ? a->beta[t] == b->beta[t] && a->mv_n[t] == b->mv_n[t]
                                       : fabsf(a->beta[t] - b->beta[t]) <=
                                             1e-4f * fabsf(a->beta[t]) + 1e-6f,
                      "%s frame %d: beta %.9g (%d samples) vs %.9g (%d)", what, t,
                      (double)a->beta[t], a->mv_n[t], (double)b->beta[t], b->mv_n[t]);
        betas += a->beta[t] > 0.0f;
        const size_t n = (size_t)CW * CH;
        double num = 0.0, den = 0.0;
        size_t nan_mis = 0;
        for (size_t i = 0; i < n; i++) {
            const float x = a->resid[t][i], y = b->resid[t][i];
            if (isnan(x) != isnan(y)) {
                nan_mis++;
                continue;
            }
            if (isnan(x))
                continue;
            num += ((double)x - y) * ((double)x - y);
            den += (double)x * x;
        }
        ck_assert_msg(nan_mis == 0, "%s frame %d: %zu residual pixels invalid on one side", what,
                      t, nan_mis);
        ck_assert_msg(sqrt(num / den) <= tol_resid, "%s frame %d: residual rel L2 %.3g", what, t,
                      sqrt(num / den));
        ck_assert_msg(a->nw[t] == b->nw[t], "%s frame %d: %d vs %d weights", what, t, a->nw[t],
                      b->nw[t]);
        for (int k = 0; k < a->nw[t] && tol_resid == 0.0; k++)
            ck_assert_msg(a->w[t][k] == b->w[t][k], "%s frame %d: weight %d %.17g vs %.17g", what,
                          t, k, a->w[t][k], b->w[t][k]);
        ck_assert_msg(a->ndet[t] == b->ndet[t], "%s frame %d: %d vs %d detections", what, t,
                      a->ndet[t], b->ndet[t]);
        for (int i = 0; i < a->ndet[t]; i++) {
            const ss_detection_t *x = &a->det[t][i], *y = &b->det[t][i];
            ck_assert_msg(x->kind == y->kind && x->area == y->area && x->sign == y->sign &&
                              fabs(x->x - y->x) < 1e-3 && fabs(x->y - y->y) < 1e-3,
                          "%s frame %d detection %d: %s area %d (%.4f,%.4f) vs %s area %d (%.4f,%.4f)",
                          what, t, i, ss_kind_name(x->kind), x->area, x->x, x->y,
                          ss_kind_name(y->kind), y->area, y->x, y->y);
        }
        dets += a->ndet[t];
    }
    ck_assert_int_ge(ok_frames, CFRAMES / 2);
    ck_assert_int_gt(dets, 0);
    ck_assert_msg(betas > 0, "%s: no frame with a model-error term (beta > 0)", what);
}

START_TEST(test_chain_parity)
{
    run_t *c = malloc(sizeof *c), *g = malloc(sizeof *g);
    ck_assert(c && g);
    run_chain(SS_BACKEND_CPU, 0, 0, 4711, c);
    run_chain(SS_BACKEND_CUDA, 0, 0, 4711, g);
    cmp_runs(c, g, 1e-5, "cpu vs cuda");
    run_free(c);
    run_free(g);
    free(c);
    free(g);
}
END_TEST

/* Graphs, direct launches, the timed mode, prefetching and the pipelined
 * results (the residual download of frame t-1 overlapping frame t; the
 * guided filter of frame t must wait for it) compute the same thing:
 * residuals bit for bit (no atomics on that path). */
START_TEST(test_modes_agree)
{
    run_t *a = malloc(sizeof *a), *b = malloc(sizeof *b);
    ck_assert(a && b);
    run_chain(SS_BACKEND_CUDA, 0, 1, 99, a);
    static const char *const what[5] = { "", "graphs vs direct", "graphs vs timed",
                                         "graphs vs pipelined results",
                                         "the device's plan vs the host's" };
    /* with the next frame prefetched, a steady frame (the last quarter) is
     * one graph launch: the last frame's history store joins it, and the
     * residual's download leaves from a mark inside it */
    const int q = 3 * CFRAMES / 4 - 1;
    ck_assert_int_eq(a->launches[CFRAMES - 1] - a->launches[q], CFRAMES - 1 - q);
    for (int mode = 1; mode <= 4; mode++) {
        run_chain(SS_BACKEND_CUDA, mode, mode != 2, 99, b);
        cmp_runs(a, b, 0.0, what[mode]);
        if (mode == 3) {
            /* the same, plus one where frame t-1's tracking is long enough
             * to overlap frame t's first stages (SS_PIPELINE_OVERLAP_DETS) */
            long expect = CFRAMES - 1 - q;
            for (int t = q + 1; t < CFRAMES; t++)
                expect += b->ndet[t - 1] >= SS_PIPELINE_OVERLAP_DETS;
            ck_assert_int_eq(b->launches[CFRAMES - 1] - b->launches[q], expect);
        }
        if (mode == 4) {
            /* the plan ran on the device for the frames after the first
             * full screened history, each with one host wait less */
            ck_assert_int_eq(b->planned, 0);
            ck_assert_uint_ge(a->planned, CFRAMES / 4);
            ck_assert_int_eq(b->waits - a->waits, (long)a->planned);
        }
        run_free(b);
    }
    run_free(a);
    free(a);
    free(b);
}
END_TEST

/* The lsq weights planned on the device (the moments and k_lsq_solve)
 * against the host's solve of the same moments: the moments are summed by
 * double atomics, so the runs agree to rounding, not to the bit; one host
 * wait fewer per planned frame (the moments' read-back) and one more for
 * the registration. */
START_TEST(test_lsq_plan_agrees)
{
    run_t *a = malloc(sizeof *a), *b = malloc(sizeof *b);
    ck_assert(a && b);
    chain_lsq = 1;
    run_chain(SS_BACKEND_CUDA, 0, 1, 99, a);
    run_chain(SS_BACKEND_CUDA, 4, 1, 99, b);
    chain_lsq = 0;
    cmp_runs(a, b, 1e-5, "lsq: the device's plan vs the host's");
    ck_assert_int_eq(b->planned, 0);
    ck_assert_uint_ge(a->planned, CFRAMES / 4);
    ck_assert_int_eq(b->waits - a->waits, 2 * (long)a->planned);
    run_free(a);
    run_free(b);
    free(a);
    free(b);
}
END_TEST

/* Two feeds on one GPU, interleaved frame by frame, each on its own
 * streams: each gets what it gets alone. */
START_TEST(test_two_instances)
{
    enum { W = 256, H = 224, T = 10 };
    const ss_backend_ops_t *go = gpu_ops();
    ss_pipeline_cfg_t cfg;
    base_cfg(&cfg);
    ss_geometry_t geo = geometry(W, H, SS_DT_U16, SS_DT_U16, 4);
    ss_backend_t *b[3];
    for (int k = 0; k < 3; k++)
        ck_assert_int_eq(go->create(&cfg, &geo, NULL, &b[k]), SS_OK);
    ss_synth_t *syn[3];
    ss_frame_t f[3];
    const size_t bytes = (size_t)W * H * 2, n = (size_t)W * H;
    float *x = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float));
    for (int k = 0; k < 3; k++) {
        ss_synth_cfg_t sc;
        synth_cfg(&sc, W, H, k == 2 ? 1 : (uint64_t)k);    /* instance 2 repeats feed 1 alone */
        syn[k] = ss_synth_new(&sc);
        memset(&f[k], 0, sizeof f[k]);
        f[k].pixels = malloc(bytes);
        f[k].capacity = bytes;
    }
    for (int t = 0; t < T; t++) {
        for (int k = 0; k < 2; k++) {
            ck_assert_int_eq(ss_synth_next(syn[k], &f[k], NULL), SS_OK);
            ck_assert_int_eq(go->ingest(b[k], &f[k], NULL), SS_OK);
        }
        for (int k = 0; k < 2; k++) {
            if (t == 0)
                ck_assert_int_eq(go->set_reference(b[k]), SS_OK);
            ck_assert_int_eq(go->history_store(b[k], t % 4, 0, 0), SS_OK);
        }
    }
    for (int t = 0; t < T; t++) {
        ck_assert_int_eq(ss_synth_next(syn[2], &f[2], NULL), SS_OK);
        ck_assert_int_eq(go->ingest(b[2], &f[2], NULL), SS_OK);
        if (t == 0)
            ck_assert_int_eq(go->set_reference(b[2]), SS_OK);
        ck_assert_int_eq(go->history_store(b[2], t % 4, 0, 0), SS_OK);
    }
    for (int s = 0; s < 4; s++) {
        ck_assert_int_eq(go->read_plane(b[1], SS_PLANE_HISTORY, s, x), SS_OK);
        ck_assert_int_eq(go->read_plane(b[2], SS_PLANE_HISTORY, s, y), SS_OK);
        ck_assert(memcmp(x, y, n * 2) == 0);
    }
    ck_assert_int_eq(go->read_plane(b[1], SS_PLANE_REF_GX, 0, x), SS_OK);
    ck_assert_int_eq(go->read_plane(b[2], SS_PLANE_REF_GX, 0, y), SS_OK);
    ck_assert(memcmp(x, y, n * sizeof(float)) == 0);
    size_t used = 0, total = 0;
    go->memory(b[0], &used, &total);
    ck_assert(used > 0 && total > used);
    for (int k = 0; k < 3; k++) {
        go->destroy(&b[k]);
        ss_synth_destroy(&syn[k]);
        free(f[k].pixels);
    }
    free(x);
    free(y);
}
END_TEST

/* Feeds that start together on one GPU (as a daemon's do): FEEDS threads,
 * each its own CUDA pipeline, begin at one barrier, so that one creates
 * its backend or captures a new graph while another captures. No frame
 * may fail. Before the unsafe-calls lock (cu_backend.h), a create's
 * device synchronisation invalidated another feed's capture:
 * skysieve-bench --feeds 8 on the H100 lost the first frames of two
 * feeds of eight. */
enum { FEEDS = 8, FEED_FRAMES = 16 };

typedef struct feed_arg {
    int id;
    pthread_barrier_t *bar;
    int failed, ok;
} feed_arg_t;

static void *feed_main(void *arg)
{
    feed_arg_t *fa = arg;
    ss_synth_cfg_t sc;
    synth_cfg(&sc, CW, CH, 700 + (uint64_t)fa->id);
    ss_synth_t *syn = ss_synth_new(&sc);
    ss_pipeline_cfg_t cfg;
    base_cfg(&cfg);
    cfg.backend = SS_BACKEND_CUDA;
    cfg.history = 6 + fa->id % 3;           /* graph shapes differ between feeds */
    char err[256];
    ss_pipeline_t *pl = ss_pipeline_new(&cfg, "feed", err, sizeof err);
    ss_result_t res;
    ss_frame_t f = { 0 };
    f.capacity = (size_t)CW * CH * 2;
    f.pixels = malloc(f.capacity);
    const int ready = syn && pl && f.pixels && ss_result_init(&res, (size_t)CW * CH, 1000) == 0;
    pthread_barrier_wait(fa->bar);
    for (int t = 0; t < FEED_FRAMES && ready; t++) {
        if (ss_synth_next(syn, &f, NULL) != SS_OK)
            break;
        const ss_err_t e = ss_pipeline_process(pl, &f, &res);
        fa->failed += e != SS_OK || res.status == SS_STATUS_ERROR;
        fa->ok += e == SS_OK && res.status == SS_STATUS_OK;
    }
    if (!ready)
        fa->failed = -1;
    else
        ss_result_free(&res);
    ss_pipeline_destroy(&pl);
    ss_synth_destroy(&syn);
    free(f.pixels);
    return NULL;
}

START_TEST(test_feeds_at_once)
{
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, FEEDS);
    pthread_t th[FEEDS];
    feed_arg_t fa[FEEDS];
    for (int k = 0; k < FEEDS; k++) {
        fa[k] = (feed_arg_t){ k, &bar, 0, 0 };
        ck_assert_int_eq(pthread_create(&th[k], NULL, feed_main, &fa[k]), 0);
    }
    for (int k = 0; k < FEEDS; k++)
        pthread_join(th[k], NULL);
    pthread_barrier_destroy(&bar);
    for (int k = 0; k < FEEDS; k++) {
        ck_assert_msg(fa[k].failed == 0, "feed %d: %d frames failed", k, fa[k].failed);
        ck_assert_msg(fa[k].ok > 0, "feed %d: no ok frame", k);
    }
}
END_TEST

/* ---- main -------------------------------------------------------------------- */

/* ---- the residual's optional forms (outputs.h) ----------------------------- */

/* CLEAN as binary16 and its stamps, made by each backend's read_forms:
 * identical bytes (NaN, ±Inf, values past the float16 range, subnormals,
 * exact ties included), the boxes clipped at the edges and a streak's box;
 * _i = 1 asks twice before waiting, CLEAN rewritten in between, with the
 * second call's boxes elsewhere: the first copies keep the first CLEAN. */
static void forms_fill(pair_t *p, float *v)
{
    const size_t n = (size_t)p->w * p->h;
    for (size_t i = 0; i < n; i++) {
        const double u = rng_unif();
        v[i] = (float)(30.0 * rng_gauss());
        if (u < 0.03)
            v[i] = NAN;
        else if (u < 0.04)
            v[i] = u < 0.035 ? INFINITY : -INFINITY;
        else if (u < 0.06)
            v[i] = (float)(1e5 * rng_gauss());          /* past 65504 too */
        else if (u < 0.08)
            v[i] = (float)(1e-6 * rng_gauss());         /* float16 subnormals */
        else if (u < 0.10)
            v[i] = 1.0f + 0x1p-11f * (float)(rng_u64() % 4);  /* ties and halves */
    }
    write_both(p, SS_PLANE_CLEAN, 0, v);
}

static void forms_boxes(ss_detlist_t *l, int w, int h, int shift)
{
    ss_detlist_clear(l);
    const int px[] = { 0, w - 1, w / 2, 3 };
    const int py[] = { 0, h - 1, h / 3, h - 4 };
    for (int k = 0; k < 4; k++) {
        ss_detection_t *d = ss_detlist_push(l);
        *d = (ss_detection_t){ .kind = SS_KIND_POINT, .peak_x = (px[k] + shift) % w,
                               .peak_y = (py[k] + shift) % h };
    }
    ss_detection_t *d = ss_detlist_push(l);
    *d = (ss_detection_t){ .kind = SS_KIND_STREAK, .bbox_x0 = 5 + shift, .bbox_x1 = w - 20,
                           .bbox_y0 = h / 2, .bbox_y1 = h / 2 + 9 };
}

START_TEST(test_forms_parity)
{
    enum { W = 301, H = 187, ROUNDS = 2 };
    rng_state = 2718 + (uint64_t)_i;
    ss_pipeline_cfg_t cfg;
    base_cfg(&cfg);
    ss_geometry_t geo = geometry(W, H, SS_DT_F32, SS_DT_F32, 2);
    pair_t p;
    pair_new(&p, &cfg, &geo, NULL);
    const size_t n = (size_t)W * H;
    const ss_host_allocator_t *ha = &p.go->host_alloc;
    float *v = malloc(n * sizeof(float));
    ss_detlist_t l;
    ck_assert_int_eq(ss_detlist_init(&l, 8), 0);
    ss_outputs_t o = ss_outputs_default();
    o.stamp_size = 31;
    o.stamp_streak_max = 101;
    uint16_t *hc = malloc(n * sizeof *hc), *hg[ROUNDS];
    ss_stamps_t sc, sg[ROUNDS];
    sc.pixels = malloc(SS_STAMP_PIXELS_MAX * sizeof(float));
    float *vs[ROUNDS];
    uint64_t tk[ROUNDS];
    for (int r = 0; r < ROUNDS; r++) {
        hg[r] = ha->alloc(n * sizeof *hg[r], ha->user);
        sg[r].pixels = ha->alloc(SS_STAMP_PIXELS_MAX * sizeof(float), ha->user);
        vs[r] = malloc(n * sizeof(float));
    }
    const int rounds = _i ? ROUNDS : 1;
    for (int r = 0; r < rounds; r++) {
        forms_fill(&p, vs[r]);
        forms_boxes(&l, W, H, 7 * r);
        ss_stamp_boxes(&l, W, H, &o, &sg[r]);
        ck_assert_int_eq(sg[r].count, 5);
        ck_assert_int_eq(p.go->read_forms(p.g, hg[r], &sg[r], &tk[r]), SS_OK);
        if (!_i)
            ck_assert_int_eq(p.go->read_wait(p.g, tk[r]), SS_OK);
    }
    if (_i)
        ck_assert_int_eq(p.go->read_wait(p.g, tk[rounds - 1]), SS_OK);
    for (int r = 0; r < rounds; r++) {
        /* the CPU's forms of the same CLEAN */
        write_both(&p, SS_PLANE_CLEAN, 0, vs[r]);
        forms_boxes(&l, W, H, 7 * r);
        ss_stamp_boxes(&l, W, H, &o, &sc);
        uint64_t t;
        ck_assert_int_eq(ss_backend_cpu.read_forms(p.c, hc, &sc, &t), SS_OK);
        ck_assert(memcmp(hc, hg[r], n * sizeof *hc) == 0);
        ck_assert_uint_eq(sc.npix, sg[r].npix);
        ck_assert(memcmp(sc.pixels, sg[r].pixels, sc.npix * sizeof(float)) == 0);
    }
    for (int r = 0; r < ROUNDS; r++) {
        ha->free(hg[r], ha->user);
        ha->free(sg[r].pixels, ha->user);
        free(vs[r]);
    }
    free(sc.pixels);
    free(hc);
    free(v);
    ss_detlist_free(&l);
    pair_free(&p);
}
END_TEST

/* One test case per stage (so that a sanitizer run can take them one at
 * a time: CK_RUN_CASE=calib, registration, whiten, guided, noise, matched,
 * detect, history, forms, chain). */
static void add_case(Suite *s, const char *name, int timeout, void (*add)(TCase *))
{
    TCase *tc = tcase_create(name);
    tcase_set_timeout(tc, timeout);
    add(tc);
    suite_add_tcase(s, tc);
}

static void add_calib(TCase *tc)
{
    tcase_add_loop_test(tc, test_ingest_parity, 0, SS_DT__COUNT);
    tcase_add_loop_test(tc, test_ingest_calib_parity, 0, SS_DT__COUNT);
}
static void add_registration(TCase *tc)
{
    tcase_add_test(tc, test_div5);
    tcase_add_loop_test(tc, test_registration_parity, 0, 3);
    tcase_add_test(tc, test_vote_many_peaks);
}
static void add_whiten(TCase *tc)
{
    tcase_add_loop_test(tc, test_whiten_parity, 0, 2);
    tcase_add_loop_test(tc, test_whiten_reweight_parity, 0, 4);
}
static void add_guided(TCase *tc) { tcase_add_loop_test(tc, test_guided_parity, 0, 6); }
static void add_noise(TCase *tc) { tcase_add_loop_test(tc, test_noise_parity, 0, 3); }
static void add_matched(TCase *tc)
{
    tcase_add_loop_test(tc, test_matched_parity, 0, 4);
    tcase_add_test(tc, test_frame_sigma_parity);
}
static void add_modelvar(TCase *tc) { tcase_add_loop_test(tc, test_modelvar_parity, 0, 3); }
static void add_detect(TCase *tc)
{
    tcase_add_loop_test(tc, test_detect_parity, 0, 3);
    tcase_add_loop_test(tc, test_detect_overflow_parity, 0, 2);
    tcase_add_test(tc, test_detect_kinds_parity);
}
static void add_history(TCase *tc) { tcase_add_loop_test(tc, test_history_store_parity, 0, 4); }
static void add_forms(TCase *tc) { tcase_add_loop_test(tc, test_forms_parity, 0, 2); }
static void add_chain(TCase *tc)
{
    tcase_add_test(tc, test_chain_parity);
    tcase_add_test(tc, test_modes_agree);
    tcase_add_test(tc, test_lsq_plan_agrees);
    tcase_add_test(tc, test_two_instances);
    tcase_add_test(tc, test_feeds_at_once);
}

static Suite *suite(void)
{
    Suite *s = suite_create("cuda_parity");
    add_case(s, "calib", 600, add_calib);
    add_case(s, "registration", 600, add_registration);
    add_case(s, "whiten", 600, add_whiten);
    add_case(s, "guided", 600, add_guided);
    add_case(s, "noise", 600, add_noise);
    add_case(s, "matched", 600, add_matched);
    add_case(s, "modelvar", 600, add_modelvar);
    add_case(s, "detect", 600, add_detect);
    add_case(s, "history", 600, add_history);
    add_case(s, "forms", 600, add_forms);
    add_case(s, "chain", 900, add_chain);
    return s;
}

int main(void)
{
    const ss_backend_ops_t *g = ss_backend_cuda_ops();
    if (!g) {
        printf("check_cuda_parity: SKIP: built without CUDA (SKYSIEVE_CUDA=OFF or no nvcc)\n");
        return 77;
    }
    char why[256] = "";
    /* probe() asks CUDA in a child process: this one stays fork-safe */
    if (!g->probe(0, why, sizeof why)) {
        printf("check_cuda_parity: SKIP: no usable GPU: %s\n", why);
        return 77;
    }
    printf("check_cuda_parity: GPU %s\n", why);
    ss_log_setup(SS_LOG_WARNING, 0);
    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    const int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
