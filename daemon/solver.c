/*
 * solver.c — one plate-solving thread per feed with wcs.solve on (README
 * "Plate solving"): the worker hands it a reference frame without a WCS
 * (ss_solver_submit: a copy of the raw pixels, at a reference or
 * re-reference only) and goes on with the next frame; this thread runs
 * solve-field on it (pipeline/solve.c: a child process with the
 * wcs.solve_timeout limit) and leaves the result for the worker, which
 * picks it up between frames (ss_solver_take) and gives it to the
 * pipeline (ss_pipeline_set_sky), with the zero point fitted against the
 * matched stars' catalogue magnitudes (ss_pipeline_set_zeropoint). The worker never waits for a solve: the
 * lock is held for a copy or a few assignments only.
 *
 * One job at a time and one waiting: a reference that comes while a solve
 * runs replaces the waiting one (the latest pointing wins).
 */
#include "daemon.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define TAG "solver"

struct ss_solver {
    char feed[SS_NAME_MAX];
    ss_solve_opts_t opts;
    double psf_sigma;               /* for the zero point's aperture photometry */
    int per_second;                 /* pipeline.photometry.per_second */
    ss_feed_stats_t *stats;
    pthread_t thread;
    int started;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    atomic_int stop;                /* also opts.cancel: a running solve is killed */
    /* the waiting job (under lock) */
    int job;
    void *job_pix;
    size_t job_cap;
    int job_w, job_h;
    ss_dtype_t job_dt;
    uint64_t job_seq, job_epoch;
    double job_ox, job_oy;
    double job_exposure;            /* s; 0 unknown */
    /* the thread's own copy while it solves */
    void *run_pix;
    size_t run_cap;
    float *img;
    size_t img_cap;
    /* the result waiting for the worker (under lock) */
    int done;
    ss_solution_t *sol;             /* the latest solution */
    ss_phot_zp_t zp;                /* its zero point against the catalogue; source NONE if none */
    uint64_t done_epoch;
    double done_ox, done_oy;
};

/* The solved frame's zero point against the matched stars' catalogue
 * magnitudes (ss_solution_zeropoint), logged; source NONE when it cannot
 * be fitted. */
static ss_phot_zp_t fit_zeropoint(const ss_solver_t *s, const ss_solution_t *sol, int w, int h,
                                  double exposure, uint64_t seq)
{
    ss_phot_zp_t zp;
    if (ss_solution_zeropoint(sol, s->img, w, h, s->psf_sigma, 0.0, exposure, s->per_second,
                              &zp) != 0) {
        SS_LOG(SS_LOG_INFO, TAG, "feed %s: frame %llu: no zero point (fewer than 5 matched stars "
               "with a catalogue magnitude measured)", s->feed, (unsigned long long)seq);
        memset(&zp, 0, sizeof zp);
        return zp;
    }
    SS_LOG(SS_LOG_NOTICE, TAG, "feed %s: frame %llu: zero point %.3f +- %.3f mag%s from %d "
           "catalogue stars", s->feed, (unsigned long long)seq, zp.zp, zp.zp_err,
           zp.per_second ? " (per second)" : "", zp.n_used);
    return zp;
}

/* Solve the job now in run_pix (this thread, lock not held). */
static void solve_one(ss_solver_t *s, int w, int h, ss_dtype_t dt, uint64_t seq, uint64_t epoch,
                      double ox, double oy, double exposure)
{
    const size_t npix = (size_t)w * h;
    if (s->img_cap < npix) {
        float *g = realloc(s->img, sizeof *g * npix);
        if (!g) {
            SS_LOG(SS_LOG_ERR, TAG, "feed %s: no memory for a %dx%d frame to solve", s->feed, w, h);
            SS_SINK_ADD(s->stats, solve_failed, 1);
            return;
        }
        s->img = g;
        s->img_cap = npix;
    }
    for (size_t i = 0; i < npix; i++)
        s->img[i] = (float)ss_dtype_get(s->run_pix, dt, i);
    SS_SINK_ADD(s->stats, solve_started, 1);
    SS_LOG(SS_LOG_INFO, TAG, "feed %s: solving frame %llu (%dx%d)", s->feed,
           (unsigned long long)seq, w, h);
    ss_solution_t *sol = NULL;
    char why[400] = "";
    ss_err_t e = ss_solve_field(&s->opts, s->img, w, h, &sol, why, sizeof why);
    if (e == SS_ERR_STOPPED)
        return;
    if (e == SS_ERR_TIMEOUT) {
        SS_SINK_ADD(s->stats, solve_timeouts, 1);
        SS_LOG(SS_LOG_WARNING, TAG, "feed %s: frame %llu: %s", s->feed, (unsigned long long)seq,
               why);
        return;
    }
    if (e != SS_OK) {
        SS_SINK_ADD(s->stats, solve_failed, 1);
        SS_LOG(SS_LOG_WARNING, TAG, "feed %s: frame %llu not solved: %s", s->feed,
               (unsigned long long)seq, why);
        return;
    }
    SS_SINK_ADD(s->stats, solve_ok, 1);
    int nst;
    (void)ss_solution_stars(sol, &nst);
    double ra = NAN, dec = NAN;
    (void)ss_wcs_pix2sky(ss_solution_wcs(sol), (w - 1) / 2.0, (h - 1) / 2.0, &ra, &dec);
    SS_LOG(SS_LOG_NOTICE, TAG, "feed %s: frame %llu solved in %.1f s: centre RA %.5f Dec %+.5f, "
           "%.3f\"/px, %d matched stars, fit rms %.2f\"", s->feed, (unsigned long long)seq,
           ss_solution_seconds(sol), ra, dec,
           ss_wcs_pixel_scale(ss_solution_wcs(sol), (w - 1) / 2.0, (h - 1) / 2.0) * 3600.0, nst,
           ss_solution_rms(sol));
    const ss_phot_zp_t zp = fit_zeropoint(s, sol, w, h, exposure, seq);
    pthread_mutex_lock(&s->lock);
    ss_solution_destroy(&s->sol);
    s->sol = sol;
    s->zp = zp;
    s->done = 1;
    s->done_epoch = epoch;
    s->done_ox = ox;
    s->done_oy = oy;
    pthread_mutex_unlock(&s->lock);
}

static void *solver_main(void *arg)
{
    ss_solver_t *s = arg;
    pthread_mutex_lock(&s->lock);
    for (;;) {
        while (!s->job && !atomic_load(&s->stop))
            pthread_cond_wait(&s->cond, &s->lock);
        if (atomic_load(&s->stop))
            break;
        /* take the job: its buffer becomes ours, ours the next job's */
        void *p = s->run_pix;
        size_t c = s->run_cap;
        s->run_pix = s->job_pix, s->run_cap = s->job_cap;
        s->job_pix = p, s->job_cap = c;
        const int w = s->job_w, h = s->job_h;
        const ss_dtype_t dt = s->job_dt;
        const uint64_t seq = s->job_seq, epoch = s->job_epoch;
        const double ox = s->job_ox, oy = s->job_oy, exposure = s->job_exposure;
        s->job = 0;
        pthread_mutex_unlock(&s->lock);
        solve_one(s, w, h, dt, seq, epoch, ox, oy, exposure);
        pthread_mutex_lock(&s->lock);
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

ss_solver_t *ss_solver_new(const char *feed, const ss_feed_cfg_t *cfg, ss_feed_stats_t *stats)
{
    ss_solver_t *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    ss_strlcpy(s->feed, feed, sizeof s->feed);
    ss_strlcpy(s->opts.program, cfg->wcs_solver, sizeof s->opts.program);
    ss_strlcpy(s->opts.index_dir, cfg->wcs_index_dir, sizeof s->opts.index_dir);
    s->opts.timeout_s = cfg->wcs_solve_timeout;
    s->opts.scale_low = cfg->wcs_scale_low;
    s->opts.scale_high = cfg->wcs_scale_high;
    s->opts.cancel = &s->stop;
    s->psf_sigma = cfg->pipeline.psf_sigma;
    s->per_second = cfg->pipeline.phot.per_second;
    s->stats = stats;
    atomic_init(&s->stop, 0);
    if (pthread_mutex_init(&s->lock, NULL) != 0) {
        free(s);
        return NULL;
    }
    if (pthread_cond_init(&s->cond, NULL) != 0) {
        pthread_mutex_destroy(&s->lock);
        free(s);
        return NULL;
    }
    if (pthread_create(&s->thread, NULL, solver_main, s) != 0) {
        pthread_cond_destroy(&s->cond);
        pthread_mutex_destroy(&s->lock);
        free(s);
        return NULL;
    }
    s->started = 1;
    return s;
}

void ss_solver_destroy(ss_solver_t **p)
{
    if (!p || !*p)
        return;
    ss_solver_t *s = *p;
    pthread_mutex_lock(&s->lock);
    atomic_store(&s->stop, 1);
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
    if (s->started)
        pthread_join(s->thread, NULL);
    pthread_cond_destroy(&s->cond);
    pthread_mutex_destroy(&s->lock);
    ss_solution_destroy(&s->sol);
    free(s->job_pix);
    free(s->run_pix);
    free(s->img);
    free(s);
    *p = NULL;
}

void ss_solver_submit(ss_solver_t *s, const ss_frame_t *f, uint64_t epoch, double ox, double oy)
{
    const size_t bytes = ss_frame_bytes(f);
    pthread_mutex_lock(&s->lock);
    if (s->job_cap < bytes) {
        void *g = realloc(s->job_pix, bytes);
        if (!g) {
            pthread_mutex_unlock(&s->lock);
            SS_LOG(SS_LOG_ERR, TAG, "feed %s: no memory to keep frame %llu for the solver",
                   s->feed, (unsigned long long)f->meta.seq);
            return;
        }
        s->job_pix = g;
        s->job_cap = bytes;
    }
    memcpy(s->job_pix, f->pixels, bytes);
    s->job_w = f->width;
    s->job_h = f->height;
    s->job_dt = f->dtype;
    s->job_seq = f->meta.seq;
    s->job_epoch = epoch;
    s->job_ox = ox;
    s->job_oy = oy;
    s->job_exposure = f->meta.exposure;
    s->job = 1;
    pthread_cond_signal(&s->cond);
    pthread_mutex_unlock(&s->lock);
}

int ss_solver_take(ss_solver_t *s, ss_wcs_key_t *keys, int *n, uint64_t *epoch, double *ox,
                   double *oy, ss_phot_zp_t *zp)
{
    int got = 0;
    pthread_mutex_lock(&s->lock);
    if (s->done && s->sol) {
        const ss_wcs_key_t *k = ss_solution_keys(s->sol, n);
        memcpy(keys, k, sizeof *k * (size_t)*n);
        *epoch = s->done_epoch;
        *ox = s->done_ox;
        *oy = s->done_oy;
        *zp = s->zp;
        s->done = 0;
        got = 1;
    }
    pthread_mutex_unlock(&s->lock);
    return got;
}
