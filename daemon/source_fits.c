/*
 * source_fits.c — frames from FITS files (pipeline/frame_fits.h does the
 * reading: BITPIX 8/16/32/-32/-64 with BZERO/BSCALE, tile-compressed .fz,
 * primary or first image extension, TRIMSEC/DATASEC, WCS keywords).
 *
 * Modes (source.fits.mode):
 *   directory  watch source.fits.path (daemon/dirwatch.h): a file is taken
 *              once it is renamed into place or its size has been stable
 *              for source.fits.settle seconds; each exactly once, in the
 *              order they became complete (ties by DATE-OBS, then name).
 *              Files present at start are taken only with
 *              source.fits.existing.
 *   list       the files named in source.fits.list (one per line, '#'
 *              comments, relative names against the list's directory);
 *   glob       the files source.fits.pattern matches (glob(3));
 *              both ordered by DATE-OBS, then name; with
 *              source.fits.exit_at_end the daemon stops (after draining)
 *              once the last one is queued.
 *
 * After a file is read and queued it is kept, moved to source.fits.move_dir
 * or deleted (source.fits.after). A file that cannot be read is rejected
 * (logged, counted) and left where it is. A file larger than the feed's
 * limits is rejected; a file of another size than the previous one is
 * fine: the pipeline resets its history (and logs it).
 */
#include "feed.h"
#include "source.h"

#include "dirwatch.h"
#include "pipeline/frame_fits.h"

#include <errno.h>
#include <fitsio.h>
#include <glob.h>
#include <libgen.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TAG "fits-source"
#define LIST_LINE_MAX 4096

/* Rejection reason of a file that is not a readable FITS image. */
#define REASON_BAD_FILE SS_PR_BAD_VALUE

/* Name filters of directory mode when source.fits.pattern is "". */
static const char *const default_patterns[] = {
    "*.fits", "*.fit", "*.fts", "*.fz", "*.fits.gz", "*.fit.gz", "*.fts.gz", NULL,
};

typedef struct file_key {
    char *path;
    double key;
} file_key_t;

typedef struct fits_src {
    ss_feed_t *feed;
    const atomic_int *stop;         /* the source's stop flag */
    int directory;                  /* directory mode (else list / glob) */
    ss_dirwatch_t *watch;           /* directory mode */
    file_key_t *files;              /* list / glob mode, sorted */
    int n_files;
    uint64_t arrivals;              /* files accepted: the seq of those without SEQ */
} fits_src_t;

/* ---- DATE-OBS ------------------------------------------------------------- */

static int read_date(fitsfile *fp, double *mjd)
{
    char date[FLEN_VALUE], time[FLEN_VALUE];
    int status = 0;
    if (fits_read_key_str(fp, "DATE-OBS", date, NULL, &status) != 0)
        return -1;
    if (!strchr(date, 'T')) {
        int st2 = 0;
        if (fits_read_key_str(fp, "TIME-OBS", time, NULL, &st2) == 0) {
            char both[2 * FLEN_VALUE + 2];
            snprintf(both, sizeof both, "%sT%s", date, time);
            return ss_iso_to_mjd(both, mjd);
        }
    }
    return ss_iso_to_mjd(date, mjd);
}

double ss_fits_date_obs_mjd(const char *path)
{
    fitsfile *fp = NULL;
    int status = 0, proxy_fd = -1;
    double mjd = NAN;
    if (ss_fits_open_header(path, (void **)&fp, &proxy_fd) != 0) {
        ss_fits_close_readonly(fp, proxy_fd);
        return NAN;
    }
    if (read_date(fp, &mjd) != 0) {
        /* the primary may be an empty header with the image in HDU 2 */
        int hdutype = 0;
        status = 0;
        mjd = NAN;
        if (fits_movabs_hdu(fp, 2, &hdutype, &status) == 0 && read_date(fp, &mjd) != 0)
            mjd = NAN;
    }
    ss_fits_close_readonly(fp, proxy_fd);
    return mjd;
}

static double key_of(const char *path, void *user)
{
    (void)user;
    return ss_fits_date_obs_mjd(path);
}

/* ---- one file ------------------------------------------------------------- */

static void reject_file(ss_feed_t *f, ss_proto_reason_t why, const char *text)
{
    ss_stats_rejected(ss_feed_stats(f), why);
    SS_LOG(SS_LOG_WARNING, TAG, "feed %s: frame rejected (%s): %s", ss_feed_name(f),
           ss_proto_reason_name(why), text);
}

static void after_file(ss_feed_t *f, const char *path)
{
    const ss_fits_source_cfg_t *c = &ss_feed_cfg(f)->fits;
    if (c->after == SS_FITS_DELETE) {
        if (unlink(path) != 0) {
            SS_LOG(SS_LOG_ERR, TAG, "feed %s: cannot delete %s: %s", ss_feed_name(f), path,
                   strerror(errno));
            SS_SINK_ADD(ss_feed_stats(f), source_errors, 1);
        }
    } else if (c->after == SS_FITS_MOVE) {
        char tmp[SS_PATH_MAX], dst[2 * SS_PATH_MAX];
        ss_strlcpy(tmp, path, sizeof tmp);
        snprintf(dst, sizeof dst, "%s/%s", c->move_dir, basename(tmp));
        if (rename(path, dst) != 0) {
            SS_LOG(SS_LOG_ERR, TAG, "feed %s: cannot move %s to %s: %s", ss_feed_name(f), path,
                   c->move_dir, strerror(errno));
            SS_SINK_ADD(ss_feed_stats(f), source_errors, 1);
        }
    }
}

/* Read one file into the feed. Returns 0 when it was accepted, 1 when it
 * was rejected as unreadable (truncated, say: a directory source watches
 * it again), 2 when it was rejected for good. */
static int take_file(fits_src_t *fs, const char *path)
{
    ss_feed_t *f = fs->feed;
    char err[600];
    ss_fits_image_t *im;
    ss_stats_received(ss_feed_stats(f));
    /* one open for the size check and the read: a gzip'ed file is
     * inflated once */
    if (ss_fits_image_open(path, &im, err, sizeof err) != SS_OK) {
        reject_file(f, REASON_BAD_FILE, err);
        return 1;
    }
    int code = 0;
    ss_frame_t *fr = ss_source_fits_frame(f, &im, path, fs->stop, &fs->arrivals, &code);
    if (!fr)
        return code;
    ss_stats_accepted(ss_feed_stats(f));
    SS_LOG(SS_LOG_DEBUG, TAG, "feed %s: %s (%dx%d %s)", ss_feed_name(f), path, fr->width,
           fr->height, ss_dtype_name(fr->dtype));
    ss_feed_submit(f, fr);
    return 0;
}

ss_frame_t *ss_source_fits_frame(ss_feed_t *f, ss_fits_image_t **pim, const char *what,
                                 const atomic_int *stop, uint64_t *arrivals, int *code)
{
    char err[600], text[SS_PROTO_ERR_MAX];
    int w, h;
    ss_fits_image_t *im = *pim;
    *pim = NULL;
    *code = 2;
    ss_fits_image_size(im, &w, &h, NULL);
    if (w > ss_feed_cfg(f)->max_width || h > ss_feed_cfg(f)->max_height) {
        snprintf(text, sizeof text, "%s: %d x %d is above the limits (%d x %d)", what, w, h,
                 ss_feed_cfg(f)->max_width, ss_feed_cfg(f)->max_height);
        ss_fits_image_close(&im);
        reject_file(f, SS_PR_DIMENSIONS, text);
        return NULL;
    }
    ss_frame_t *fr = ss_feed_frame_get(f, stop);
    if (!fr) {
        ss_fits_image_close(&im);
        reject_file(f, SS_PR_NO_BUFFER, "shutting down");
        return NULL;
    }
    ss_err_t e = ss_fits_image_read(im, fr, err, sizeof err);
    ss_fits_image_close(&im);
    if (e != SS_OK) {
        ss_frame_pool_put(fr);
        reject_file(f, e == SS_ERR_SIZE ? SS_PR_NO_BUFFER : REASON_BAD_FILE, err);
        *code = e == SS_ERR_SIZE ? 2 : 1;
        return NULL;
    }
    ss_strlcpy(fr->meta.feed, ss_feed_name(f), sizeof fr->meta.feed);
    /* a frame without SEQ: the source's arrival number (frames accepted,
     * from 1), so that its results stay apart from the others' */
    (*arrivals)++;
    if (fr->meta.seq_missing)
        fr->meta.seq = *arrivals;
    fr->meta.recv_mono = ss_now_mono();
    *code = 0;
    return fr;
}

/* source.fits.after, once the file's frame was processed (ops.frame_done,
 * worker thread): a frame dropped from the queue leaves its file where it
 * was. */
static void fits_frame_done(void *impl, const ss_frame_meta_t *m)
{
    fits_src_t *fs = impl;
    if (ss_feed_cfg(fs->feed)->fits.after != SS_FITS_KEEP && m->source[0])
        after_file(fs->feed, m->source);
}

/* ---- modes ---------------------------------------------------------------- */

static void run_directory(fits_src_t *fs)
{
    char path[2 * SS_PATH_MAX];
    uint64_t refused = 0;
    while (!atomic_load(fs->stop)) {
        ss_err_t e = ss_dirwatch_next(fs->watch, path, sizeof path, SS_POLL_S);
        const uint64_t r = ss_dirwatch_refused(fs->watch);
        if (r > refused) {              /* symbolic links, not followed */
            SS_SINK_ADD(ss_feed_stats(fs->feed), source_errors, r - refused);
            refused = r;
        }
        if (e == SS_OK) {
            /* unreadable: a writer that paused longer than settle; taken
             * again once the file changes */
            if (take_file(fs, path) == 1 && ss_dirwatch_retry(fs->watch, path) == 0)
                SS_LOG(SS_LOG_NOTICE, TAG, "feed %s: %s is watched again: it is taken when "
                       "it changes", ss_feed_name(fs->feed), path);
        } else if (e == SS_ERR_IO) {
            SS_LOG(SS_LOG_ERR, TAG, "feed %s: the watched directory %s is gone",
                   ss_feed_name(fs->feed), ss_feed_cfg(fs->feed)->fits.path);
            SS_SINK_ADD(ss_feed_stats(fs->feed), source_errors, 1);
            return;
        }
    }
}

static const char *run_files(fits_src_t *fs)
{
    ss_feed_t *f = fs->feed;
    for (int i = 0; i < fs->n_files && !atomic_load(fs->stop); i++)
        (void)take_file(fs, fs->files[i].path);
    if (!atomic_load(fs->stop)) {
        SS_LOG(SS_LOG_NOTICE, TAG, "feed %s: all %d files queued", ss_feed_name(f), fs->n_files);
        if (ss_feed_cfg(f)->fits.exit_at_end)
            return "source.fits.exit_at_end: every file is read";
    }
    return NULL;
}

static const char *fits_run(void *impl)
{
    fits_src_t *fs = impl;
    if (!fs->directory)
        return run_files(fs);
    run_directory(fs);
    return NULL;
}

static int by_key(const void *pa, const void *pb)
{
    const file_key_t *a = pa, *b = pb;
    int ka = isfinite(a->key), kb = isfinite(b->key);
    if (ka != kb)
        return ka ? -1 : 1;
    if (ka && a->key != b->key)
        return a->key < b->key ? -1 : 1;
    return strcmp(a->path, b->path);
}

static int add_file(fits_src_t *fs, int *cap, const char *path)
{
    if (fs->n_files == *cap) {
        int nc = *cap ? 2 * *cap : 64;
        file_key_t *nf = realloc(fs->files, (size_t)nc * sizeof *nf);
        if (!nf)
            return -1;
        fs->files = nf;
        *cap = nc;
    }
    char *p = strdup(path);
    if (!p)
        return -1;
    fs->files[fs->n_files].path = p;
    fs->files[fs->n_files].key = ss_fits_date_obs_mjd(p);
    fs->n_files++;
    return 0;
}

static int load_list(fits_src_t *fs, const ss_fits_source_cfg_t *c, char *err, size_t n)
{
    FILE *fp = fopen(c->list, "r");
    if (!fp) {
        snprintf(err, n, "source.fits.list: cannot open %s: %s", c->list, strerror(errno));
        return -1;
    }
    char dirbuf[SS_PATH_MAX];
    ss_strlcpy(dirbuf, c->list, sizeof dirbuf);
    const char *dir = dirname(dirbuf);
    char line[LIST_LINE_MAX], path[LIST_LINE_MAX + SS_PATH_MAX];
    int cap = 0, rc = 0;
    while (fgets(line, sizeof line, fp)) {
        char *p = line;
        while (*p == ' ' || *p == '\t')
            p++;
        size_t len = strcspn(p, "\r\n");
        p[len] = '\0';
        while (len && (p[len - 1] == ' ' || p[len - 1] == '\t'))
            p[--len] = '\0';
        if (!*p || *p == '#')
            continue;
        if (*p == '/')
            ss_strlcpy(path, p, sizeof path);
        else
            snprintf(path, sizeof path, "%s/%s", dir, p);
        if (add_file(fs, &cap, path) != 0) {
            snprintf(err, n, "out of memory reading %s", c->list);
            rc = -1;
            break;
        }
    }
    fclose(fp);
    return rc;
}

static int load_glob(fits_src_t *fs, const ss_fits_source_cfg_t *c, char *err, size_t n)
{
    glob_t g;
    int r = glob(c->pattern, GLOB_NOSORT, NULL, &g);
    if (r == GLOB_NOMATCH) {
        SS_LOG(SS_LOG_WARNING, TAG, "source.fits.pattern %s matches no file", c->pattern);
        return 0;
    }
    if (r != 0) {
        snprintf(err, n, "source.fits.pattern %s: glob failed", c->pattern);
        return -1;
    }
    int cap = 0, rc = 0;
    for (size_t i = 0; i < g.gl_pathc; i++)
        if (add_file(fs, &cap, g.gl_pathv[i]) != 0) {
            snprintf(err, n, "out of memory");
            rc = -1;
            break;
        }
    globfree(&g);
    return rc;
}

static void fits_close(void **impl)
{
    fits_src_t *fs = *impl;
    if (!fs)
        return;
    ss_dirwatch_destroy(&fs->watch);
    for (int i = 0; i < fs->n_files; i++)
        free(fs->files[i].path);
    free(fs->files);
    free(fs);
    *impl = NULL;
}

static void *fits_open(ss_source_t *s, char *desc, size_t desc_n, char *err, size_t n)
{
    ss_feed_t *f = ss_source_feed(s);
    const ss_feed_cfg_t *fc = ss_feed_cfg(f);
    const ss_fits_source_cfg_t *c = &fc->fits;
    fits_src_t *fs = calloc(1, sizeof *fs);
    if (!fs) {
        snprintf(err, n, "out of memory");
        return NULL;
    }
    fs->feed = f;
    fs->stop = ss_source_stop_flag(s);
    char e[1200] = "";
    switch (c->mode) {
    case SS_FITS_DIRECTORY: {
        const char *one[2] = { c->pattern, NULL };
        fs->watch = ss_dirwatch_new(c->path, c->pattern[0] ? one : default_patterns, c->settle,
                                    c->existing, key_of, NULL, e, sizeof e);
        if (!fs->watch)
            goto fail;
        fs->directory = 1;
        snprintf(desc, desc_n, "fits directory %s", c->path);
        break;
    }
    case SS_FITS_LIST:
        if (load_list(fs, c, e, sizeof e) != 0)
            goto fail;
        snprintf(desc, desc_n, "fits list %s (%d files)", c->list, fs->n_files);
        break;
    case SS_FITS_GLOB:
        if (load_glob(fs, c, e, sizeof e) != 0)
            goto fail;
        snprintf(desc, desc_n, "fits glob %s (%d files)", c->pattern, fs->n_files);
        break;
    }
    if (fs->files)
        qsort(fs->files, (size_t)fs->n_files, sizeof *fs->files, by_key);
    return fs;
fail:
    snprintf(err, n, "feed %s: %s", fc->name, e);
    void *impl = fs;
    fits_close(&impl);
    return NULL;
}

const ss_source_ops_t ss_source_fits_ops = {
    .name = "fits",
    .open = fits_open,
    .run = fits_run,
    .close = fits_close,
    .frame_done = fits_frame_done,
};
