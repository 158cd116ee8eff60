/*
 * calib_cli.c — skysieve-calib: master bias, dark and flat frames from raw
 * calibration FITS files, what a station makes once a night for the
 * daemon's pipeline.bias / pipeline.dark / pipeline.flat (ALGORITHM §1).
 *
 *   skysieve-calib bias -o master_bias.fits raw_bias*.fits
 *   skysieve-calib dark --bias master_bias.fits -o master_dark.fits raw_dark*.fits
 *   skysieve-calib flat --bias master_bias.fits [--dark master_dark.fits] -o master_flat.fits ...
 *
 * Each input is read with pipeline/frame_fits.h and calibrated as the
 * daemon does (ss_overscan, ss_calibrate_frame): cut to its processed
 * region (--roi, else TRIMSEC/DATASEC clipped to the image, else the whole
 * frame), the overscan taken off (--overscan), then the bias master (dark,
 * flat) and the dark master scaled by EXPTIME (flat); saturated and
 * non-finite pixels take no part. Flats are each divided by their own
 * median. Per pixel the inputs are combined by a sigma-clipped median: the
 * values further than K·σ from their median (σ = 1.4826·MAD, robust with
 * the handful of frames a night gives) are dropped, --iters times at
 * most, and the median of the rest is the master's value (NaN where no
 * input is valid). A flat master is normalised to median 1.
 *
 * The master is a float32 FITS image of the region, with LTV1/LTV2 = minus
 * the region's origin (IRAF's convention, which the daemon reads to place
 * it), EXPTIME for darks, and the provenance: IMAGETYP, NCOMBINE, COMBINE,
 * CLIPSIG, CLIPITER, OVERSCAN, BIASFILE, DARKFILE, HISTORY cards.
 *
 * Exit status: 0 master written; 1 an input could not be read, the inputs
 * disagree (region sizes, dark exposures beyond 1 %), a flat has no
 * positive median, or the output could not be written; 2 bad usage.
 */
#include <errno.h>
#include <fitsio.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/frame_fits.h"
#include "pipeline/stages.h"

#define PROG "skysieve-calib"
#define EXIT_DATA 1
#define EXIT_USAGE 2
#define DEFAULT_SIGMA 3.0
#define DEFAULT_ITERS 3
#define MAX_ITERS 100
#define MAD_TO_SIGMA 1.4826         /* σ of a Gaussian from its MAD */
#define EXPTIME_AGREE 0.01          /* dark inputs' EXPTIMEs agree within 1 % */
#define MIN_INPUTS 1

typedef enum kind { KIND_BIAS = 0, KIND_DARK, KIND_FLAT } kind_t;
static const char *const kind_name[] = { "bias", "dark", "flat" };

typedef struct opts {
    kind_t kind;
    const char *out, *bias, *dark;
    ss_overscan_mode_t overscan;
    double sigma;
    int iters;
    double scale_to;                /* > 0: dark inputs scaled to this exposure */
    int have_roi, no_trim, quiet;
    ss_roi_t roi;
    int n_in;
    char **in;
} opts_t;

/* A master read for subtraction, cut to the region. */
typedef struct master {
    float *px;                      /* region-sized; NULL: none */
    double exposure;
} master_t;

/* ---- usage ---------------------------------------------------------------- */

static void usage(FILE *out)
{
    fprintf(out,
"Usage: " PROG " bias|dark|flat -o MASTER.fits [options] RAW.fits...\n"
"Make a master calibration frame for skysieved (pipeline.bias, pipeline.dark,\n"
"pipeline.flat) from raw calibration frames: per pixel the sigma-clipped median\n"
"of the inputs (values beyond K sigma of their median dropped, sigma = 1.4826 MAD,\n"
"repeated ITERS times at most; then the median of the rest).\n"
"\n"
"  bias   the inputs are bias (zero-second) frames\n"
"  dark   dark frames of one exposure (EXPTIME within 1 %%, or --scale-to);\n"
"         the master carries that EXPTIME, by which the daemon scales it\n"
"  flat   flat fields: each divided by its own median, the master\n"
"         normalised to median 1\n"
"\n"
"  -o, --out FILE          the master (float32 FITS; overwritten)     [required]\n"
"      --bias FILE         master bias subtracted from each input (dark, flat)\n"
"      --dark FILE         master dark subtracted from each input (flat), scaled\n"
"                          by EXPTIME when a bias is removed (--bias or --overscan)\n"
"      --overscan MODE     none|scalar|row: each input's BIASSEC overscan taken off\n"
"                          first, as pipeline.overscan does                 [none]\n"
"      --sigma K           clipping threshold in sigma (> 0)              [%g]\n"
"      --iters N           clipping iterations (0 = the plain median)    [%d]\n"
"      --scale-to T        dark: scale each input to T seconds (t/T) instead of\n"
"                          requiring equal exposures; the master says EXPTIME T\n"
"      --roi X,Y,W,H       the region kept, 0-based raw pixels (as pipeline.roi);\n"
"                          default: TRIMSEC/DATASEC clipped to the image, else the\n"
"                          whole frame (as the daemon with use_trimsec)\n"
"      --no-trim           ignore TRIMSEC/DATASEC: keep the whole frame\n"
"  -q, --quiet             no summary line\n"
"  -h, --help              this text\n"
"\n"
"All inputs must give regions of one size (a camera whose height varies: fix the\n"
"region with --roi, and the same roi in the daemon). The master is the region;\n"
"its LTV1/LTV2 (minus the region's origin) tell the daemon where it lies.\n"
"Exit status: 0 written; 1 an input unreadable, inputs that disagree (sizes,\n"
"dark exposures), a flat without a positive median, or the output unwritable;\n"
"2 bad usage.\n", DEFAULT_SIGMA, DEFAULT_ITERS);
}

static int bad(const char *opt, const char *arg, const char *what)
{
    fprintf(stderr, PROG ": --%s: '%s' is not %s (see --help)\n", opt, arg, what);
    return -1;
}

static int parse_dbl(const char *opt, const char *s, double lo, double *out)
{
    char *end;
    errno = 0;
    const double v = strtod(s, &end);
    if (end == s || *end != '\0' || errno == ERANGE || !isfinite(v) || v <= lo)
        return bad(opt, s, lo == 0.0 ? "a positive number" : "a number");
    *out = v;
    return 0;
}

static int parse_roi(const char *s, ss_roi_t *r)
{
    int used = 0;
    if (sscanf(s, "%d,%d,%d,%d%n", &r->x, &r->y, &r->w, &r->h, &used) != 4 || s[used] != '\0' ||
        r->x < 0 || r->y < 0 || r->w < 1 || r->h < 1)
        return bad("roi", s, "X,Y,W,H with X, Y >= 0 and W, H >= 1");
    return 0;
}

enum { O_BIAS = 256, O_DARK, O_OVERSCAN, O_SIGMA, O_ITERS, O_SCALE_TO, O_ROI, O_NO_TRIM };

static const struct option long_opts[] = {
    { "out", required_argument, NULL, 'o' },
    { "quiet", no_argument, NULL, 'q' },
    { "help", no_argument, NULL, 'h' },
    { "bias", required_argument, NULL, O_BIAS },
    { "dark", required_argument, NULL, O_DARK },
    { "overscan", required_argument, NULL, O_OVERSCAN },
    { "sigma", required_argument, NULL, O_SIGMA },
    { "iters", required_argument, NULL, O_ITERS },
    { "scale-to", required_argument, NULL, O_SCALE_TO },
    { "roi", required_argument, NULL, O_ROI },
    { "no-trim", no_argument, NULL, O_NO_TRIM },
    { NULL, 0, NULL, 0 }
};

static int apply_opt(int c, const char *a, opts_t *o)
{
    switch (c) {
    case 'o': o->out = a; return 0;
    case 'q': o->quiet = 1; return 0;
    case O_BIAS: o->bias = a; return 0;
    case O_DARK: o->dark = a; return 0;
    case O_OVERSCAN:
        if (strcmp(a, "none") == 0)
            o->overscan = SS_OVERSCAN_NONE;
        else if (strcmp(a, "scalar") == 0)
            o->overscan = SS_OVERSCAN_SCALAR;
        else if (strcmp(a, "row") == 0)
            o->overscan = SS_OVERSCAN_ROW;
        else
            return bad("overscan", a, "none, scalar or row");
        return 0;
    case O_SIGMA: return parse_dbl("sigma", a, 0.0, &o->sigma);
    case O_SCALE_TO: return parse_dbl("scale-to", a, 0.0, &o->scale_to);
    case O_ITERS: {
        char *end;
        errno = 0;
        const long v = strtol(a, &end, 10);
        if (end == a || *end || errno || v < 0 || v > MAX_ITERS)
            return bad("iters", a, "an integer in [0, 100]");
        o->iters = (int)v;
        return 0;
    }
    case O_ROI:
        o->have_roi = 1;
        return parse_roi(a, &o->roi);
    case O_NO_TRIM: o->no_trim = 1; return 0;
    }
    return -1;
}

/* Options and operands; 0, or -1 (message printed) for bad usage; 1 for --help. */
static int parse_args(int argc, char **argv, opts_t *o)
{
    memset(o, 0, sizeof *o);
    o->sigma = DEFAULT_SIGMA;
    o->iters = DEFAULT_ITERS;
    opterr = 0;
    int c, idx;
    while ((c = getopt_long(argc, argv, ":o:qh", long_opts, &idx)) != -1) {
        if (c == 'h')
            return 1;
        if (c == ':' || c == '?') {
            fprintf(stderr, PROG ": %s '%s' (see --help)\n",
                    c == ':' ? "a value is missing after" : "unknown option", argv[optind - 1]);
            return -1;
        }
        if (apply_opt(c, optarg, o) != 0)
            return -1;
    }
    if (optind >= argc) {
        fprintf(stderr, PROG ": say bias, dark or flat (see --help)\n");
        return -1;
    }
    const char *k = argv[optind++];
    for (o->kind = KIND_BIAS; o->kind <= KIND_FLAT; o->kind++)
        if (strcmp(k, kind_name[o->kind]) == 0)
            break;
    if (o->kind > KIND_FLAT) {
        fprintf(stderr, PROG ": '%s' is not bias, dark or flat (see --help)\n", k);
        return -1;
    }
    o->in = argv + optind;
    o->n_in = argc - optind;
    const char *wrong = o->kind == KIND_BIAS && o->bias             ? "--bias with bias frames"
                        : o->kind != KIND_FLAT && o->dark           ? "--dark (flats only)"
                        : o->kind != KIND_DARK && o->scale_to > 0.0 ? "--scale-to (darks only)"
                                                                    : NULL;
    if (wrong) {
        fprintf(stderr, PROG ": %s makes no sense (see --help)\n", wrong);
        return -1;
    }
    if (!o->out || o->n_in < MIN_INPUTS) {
        fprintf(stderr, PROG ": -o MASTER.fits and at least one input are required (see --help)\n");
        return -1;
    }
    return 0;
}

/* ---- medians -------------------------------------------------------------- */

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of v[0..n), n > 0 (sorts v): the middle value, or the mean of the two. */
static double median_sorted(double *v, size_t n)
{
    if (n <= 32) {          /* a night's handful of frames: insertion sort */
        for (size_t i = 1; i < n; i++) {
            const double a = v[i];
            size_t k = i;
            for (; k > 0 && v[k - 1] > a; k--)
                v[k] = v[k - 1];
            v[k] = a;
        }
    } else {
        qsort(v, n, sizeof *v, cmp_double);
    }
    return n & 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* The sigma-clipped median of v[0..n) (finite values; reordered; dev:
 * scratch of n): NaN when n is 0. */
static double clipped_median(double *v, size_t n, double k, int iters, double *dev)
{
    if (n == 0)
        return NAN;
    for (int it = 0; it < iters && n > 2; it++) {
        const double med = median_sorted(v, n);
        for (size_t i = 0; i < n; i++)
            dev[i] = fabs(v[i] - med);
        const double sigma = MAD_TO_SIGMA * median_sorted(dev, n);
        if (!(sigma > 0.0))
            break;          /* at least half agree exactly: nothing to clip against */
        size_t kept = 0;
        for (size_t i = 0; i < n; i++)
            if (fabs(v[i] - med) <= k * sigma)
                v[kept++] = v[i];
        if (kept == n)
            break;
        n = kept;
    }
    return median_sorted(v, n);
}

/* Median of the finite values of a plane (NaN if none); scratch: n doubles. */
static double plane_median(const float *p, size_t n, double *scratch)
{
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (isfinite(p[i]))
            scratch[m++] = p[i];
    return m ? median_sorted(scratch, m) : NAN;
}

/* ---- inputs --------------------------------------------------------------- */

/* The region of a frame, as the daemon takes it (pipeline.roi, else
 * TRIMSEC/DATASEC, else the whole frame); -1 when --roi does not fit. */
static int input_region(const opts_t *o, const ss_frame_t *f, const char *path, ss_roi_t *r)
{
    if (o->have_roi)
        *r = o->roi;
    else if (!o->no_trim && f->meta.trim_w > 0 && f->meta.trim_h > 0)
        *r = (ss_roi_t){ f->meta.trim_x0, f->meta.trim_y0, f->meta.trim_w, f->meta.trim_h };
    else
        *r = (ss_roi_t){ 0, 0, f->width, f->height };
    if (r->x + r->w > f->width || r->y + r->h > f->height) {
        fprintf(stderr, PROG ": %s: the region [%d,%d %dx%d] does not fit its %dx%d image\n", path,
                r->x, r->y, r->w, r->h, f->width, f->height);
        return -1;
    }
    return 0;
}

/* Read a master (--bias, --dark) and cut it to the region, placed as the
 * daemon places it (ss_fits_master_place). */
static int load_master(const char *what, const char *path, ss_roi_t r, master_t *m)
{
    float *px = NULL;
    int w, h, ox, oy;
    ss_fits_master_t info;
    char err[SS_PATH_MAX + 256];
    if (ss_fits_read_master(path, &px, &w, &h, &info, err, sizeof err) != SS_OK) {
        fprintf(stderr, PROG ": --%s: %s\n", what, err);
        return -1;
    }
    if (!ss_fits_master_place(&info, w, h, r.x, r.y, r.w, r.h, &ox, &oy)) {
        fprintf(stderr, PROG ": --%s %s is %dx%d (at raw [%d,%d]) and does not hold the inputs' "
                "region [%d,%d %dx%d]\n", what, path, w, h, ox, oy, r.x, r.y, r.w, r.h);
        free(px);
        return -1;
    }
    m->px = malloc((size_t)r.w * (size_t)r.h * sizeof(float));
    if (!m->px) {
        free(px);
        fprintf(stderr, PROG ": out of memory\n");
        return -1;
    }
    for (int y = 0; y < r.h; y++)
        memcpy(m->px + (size_t)y * r.w, px + (size_t)(y + r.y - oy) * w + (r.x - ox),
               (size_t)r.w * sizeof(float));
    m->exposure = info.exposure;
    free(px);
    return 0;
}

/* The calibrated inputs, and what they agree on (from the first one). */
typedef struct stack {
    ss_roi_t region;
    const char *first;              /* the input that fixed the region */
    size_t npix;
    int n;                          /* planes filled */
    float *planes;                  /* n_in × npix */
    double exposure;                /* dark: the sum of the inputs' EXPTIMEs */
    master_t bias, dark;
    double *row_bias;               /* region.h: an input's overscan per row */
    double *scratch;                /* npix: medians of a plane */
    double *os_buf;                 /* BIASSEC samples (grown to the largest) */
    size_t os_cap;
    int warned_overscan, warned_scale;
} stack_t_;

/* The dark's scale for a flat of exposure t, as the daemon's. */
static double flat_dark_scale(const opts_t *o, stack_t_ *s, double t, const char *path)
{
    const double td = s->dark.exposure;
    const int known = t > 0.0 && td > 0.0;
    if (o->bias || o->overscan != SS_OVERSCAN_NONE) {
        if (known)
            return t / td;
        if (!s->warned_scale)
            fprintf(stderr, PROG ": %s: EXPTIME of the flat or the dark unknown: dark used "
                    "unscaled\n", path);
        s->warned_scale = 1;
    } else if (known && t != td) {
        if (!s->warned_scale)
            fprintf(stderr, PROG ": %s: no --bias nor --overscan: the dark holds the bias and is "
                    "used unscaled (%g s against a %g s flat)\n", path, td, t);
        s->warned_scale = 1;
    }
    return 1.0;
}

/* Dark inputs: their EXPTIMEs agree within 1 % (or --scale-to); the
 * scale each is multiplied by. -1 on disagreement. */
static int dark_exposure(const opts_t *o, stack_t_ *s, double t, const char *path, double *mul)
{
    *mul = 1.0;
    if (o->scale_to > 0.0) {
        if (!(t > 0.0)) {
            fprintf(stderr, PROG ": %s: no EXPTIME/EXPOSURE, cannot scale to %g s\n", path,
                    o->scale_to);
            return -1;
        }
        *mul = o->scale_to / t;
        return 0;
    }
    if (s->n == 0) {
        s->exposure = t;
        return 0;
    }
    const double t0 = s->exposure / s->n;      /* the running mean */
    if ((t0 > 0.0) != (t > 0.0) || fabs(t - t0) > EXPTIME_AGREE * t0) {
        fprintf(stderr, PROG ": %s: EXPTIME %g s, the inputs before it %g s: dark exposures "
                "must agree within 1 %% (or use --scale-to T)\n", path, t, t0);
        return -1;
    }
    s->exposure += t;
    return 0;
}

/* Read input i, calibrate it into the next plane of the stack. */
/* The first input fixes the region: the planes, the per-input buffers
 * and the masters (cut to it) follow. */
static int stack_start(const opts_t *o, stack_t_ *s, ss_roi_t r, const char *path)
{
    s->region = r;
    s->first = path;
    s->npix = (size_t)r.w * (size_t)r.h;
    s->planes = malloc((size_t)o->n_in * s->npix * sizeof(float));
    s->row_bias = malloc((size_t)r.h * sizeof(double));
    s->scratch = malloc(s->npix * sizeof(double));
    if (!s->planes || !s->row_bias || !s->scratch) {
        fprintf(stderr, PROG ": out of memory for %d planes of %dx%d\n", o->n_in, r.w, r.h);
        return -1;
    }
    if ((o->bias && load_master("bias", o->bias, r, &s->bias) != 0) ||
        (o->dark && load_master("dark", o->dark, r, &s->dark) != 0))
        return -1;
    if (o->kind == KIND_DARK && !o->bias && o->overscan == SS_OVERSCAN_NONE)
        fprintf(stderr, PROG ": no --bias nor --overscan: the master dark holds the bias (the "
                "daemon then never scales it by exposure)\n");
    return 0;
}

/* The overscan of frame f's rows of region r into s->row_bias (--overscan);
 * *use = 0 when there is none. */
static int input_overscan(const opts_t *o, stack_t_ *s, const ss_frame_t *f, ss_roi_t r,
                          const char *path, int *use)
{
    const ss_frame_meta_t *m = &f->meta;
    *use = 0;
    if (o->overscan == SS_OVERSCAN_NONE)
        return 0;
    if (m->bias_w <= 0 || m->bias_h <= 0) {
        if (!s->warned_overscan)
            fprintf(stderr, PROG ": %s: no BIASSEC: no overscan taken off\n", path);
        s->warned_overscan = 1;
        return 0;
    }
    const size_t n = (size_t)m->bias_w * (size_t)m->bias_h;
    if (n > s->os_cap) {
        double *g = realloc(s->os_buf, n * sizeof(double));
        if (!g) {
            fprintf(stderr, PROG ": out of memory\n");
            return -1;
        }
        s->os_buf = g;
        s->os_cap = n;
    }
    const ss_roi_t bsec = { m->bias_x0, m->bias_y0, m->bias_w, m->bias_h };
    const int row = o->overscan == SS_OVERSCAN_ROW;
    const double sc = ss_overscan(f->pixels, f->dtype, f->width, f->height, f->valid, bsec, r.y,
                                  r.h, row ? s->row_bias : NULL, s->os_buf);
    if (!isfinite(sc)) {
        fprintf(stderr, PROG ": %s: BIASSEC holds no valid pixel\n", path);
        return -1;
    }
    if (!row)
        for (int y = 0; y < r.h; y++)
            s->row_bias[y] = sc;
    *use = 1;
    return 0;
}

static int add_input(const opts_t *o, stack_t_ *s, const char *path, ss_frame_t *f)
{
    char err[SS_PATH_MAX + 256];
    int w, h;
    if (ss_fits_probe(path, &w, &h, NULL, err, sizeof err) != SS_OK) {
        fprintf(stderr, PROG ": %s\n", err);
        return -1;
    }
    const size_t need = (size_t)w * (size_t)h * sizeof(float);     /* the widest pixel type */
    if (need > f->capacity) {
        void *grown = realloc(f->pixels, need);
        if (!grown) {
            fprintf(stderr, PROG ": out of memory for %s\n", path);
            return -1;
        }
        f->pixels = grown;
        f->capacity = need;
    }
    if (ss_fits_read_frame(path, f, err, sizeof err) != SS_OK) {
        fprintf(stderr, PROG ": %s\n", err);
        return -1;
    }
    ss_roi_t r;
    if (input_region(o, f, path, &r) != 0)
        return -1;
    if (!s->planes) {
        if (stack_start(o, s, r, path) != 0)
            return -1;
    } else if (r.w != s->region.w || r.h != s->region.h) {
        fprintf(stderr, PROG ": %s gives a %dx%d region (its image is %dx%d), %s a %dx%d one: "
                "inputs of different sizes (fix the region with --roi)\n", path, r.w, r.h,
                f->width, f->height, s->first, s->region.w, s->region.h);
        return -1;
    }
    double mul = 1.0;
    if (o->kind == KIND_DARK && dark_exposure(o, s, f->meta.exposure, path, &mul) != 0)
        return -1;

    ss_calib_frame_t cf = { .dark_scale = 1.0, .valid_w = r.w, .valid_h = r.h };
    int use_os;
    if (input_overscan(o, s, f, r, path, &use_os) != 0)
        return -1;
    cf.row_bias = use_os ? s->row_bias : NULL;
    if (o->kind == KIND_FLAT && o->dark)
        cf.dark_scale = flat_dark_scale(o, s, f->meta.exposure, path);
    const ss_calib_data_t cal = { .dark = s->dark.px, .bias = s->bias.px };
    float *plane = s->planes + (size_t)s->n * s->npix;
    ss_calibrate_frame(f->pixels, f->dtype, f->width, f->valid, r, &cal, &cf, 0.0, plane);

    if (o->kind == KIND_DARK && mul != 1.0)
        for (size_t i = 0; i < s->npix; i++)
            plane[i] = (float)(plane[i] * mul);
    if (o->kind == KIND_FLAT) {
        const double med = plane_median(plane, s->npix, s->scratch);
        if (!(med > 0.0)) {
            fprintf(stderr, PROG ": %s: the flat's median is %g after calibration, not positive\n",
                    path, med);
            return -1;
        }
        for (size_t i = 0; i < s->npix; i++)
            plane[i] = (float)(plane[i] / med);
    }
    s->n++;
    return 0;
}

/* ---- combine and write ---------------------------------------------------- */

static void combine(const opts_t *o, const stack_t_ *s, float *out)
{
    const int n = s->n;
#pragma omp parallel
    {
        double *v = malloc(2 * (size_t)n * sizeof(double));
#pragma omp for schedule(static)
        for (size_t i = 0; i < s->npix; i++) {
            if (!v) {
                out[i] = NAN;
                continue;
            }
            size_t m = 0;
            for (int k = 0; k < n; k++) {
                const float a = s->planes[(size_t)k * s->npix + i];
                if (isfinite(a))
                    v[m++] = a;
            }
            out[i] = (float)clipped_median(v, m, o->sigma, o->iters, v + n);
        }
        free(v);
    }
}

static void put_key_str(fitsfile *fp, const char *key, const char *v, const char *com, int *st)
{
    char buf[FLEN_VALUE];
    ss_strlcpy(buf, v, sizeof buf);     /* a long path is cut; the HISTORY has it whole */
    fits_update_key(fp, TSTRING, key, buf, com, st);
}

/* The master into o->out (via a temporary file, renamed at the end). */
static int write_master(const opts_t *o, const stack_t_ *s, const float *px)
{
    char tmp[SS_PATH_MAX + 8], line[FLEN_CARD * 8];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp", o->out) >= sizeof tmp) {
        fprintf(stderr, PROG ": %s: file name too long\n", o->out);
        return -1;
    }
    remove(tmp);
    fitsfile *fp = NULL;
    int st = 0;
    fits_create_diskfile(&fp, tmp, &st);
    long naxes[2] = { s->region.w, s->region.h };
    fits_create_img(fp, FLOAT_IMG, 2, naxes, &st);
    put_key_str(fp, "IMAGETYP", kind_name[o->kind], "master calibration frame", &st);
    long ncomb = s->n;
    fits_update_key(fp, TLONG, "NCOMBINE", &ncomb, "input frames combined", &st);
    put_key_str(fp, "COMBINE", "sigclip-median", "per pixel: median after sigma clipping", &st);
    double k = o->sigma;
    fits_update_key(fp, TDOUBLE, "CLIPSIG", &k, "clipping at K sigma (1.4826 MAD)", &st);
    long iters = o->iters;
    fits_update_key(fp, TLONG, "CLIPITER", &iters, "clipping iterations at most", &st);
    static const char *const os[] = { "none", "scalar", "row" };
    put_key_str(fp, "OVERSCAN", os[o->overscan], "BIASSEC overscan taken off the inputs", &st);
    if (o->kind == KIND_DARK) {
        double t = o->scale_to > 0.0 ? o->scale_to : s->exposure / s->n;
        if (t > 0.0)
            fits_update_key(fp, TDOUBLE, "EXPTIME", &t, "[s] exposure of this dark", &st);
    }
    double ltv1 = -s->region.x, ltv2 = -s->region.y;
    fits_update_key(fp, TDOUBLE, "LTV1", &ltv1, "region: raw x = x - LTV1", &st);
    fits_update_key(fp, TDOUBLE, "LTV2", &ltv2, "region: raw y = y - LTV2", &st);
    if (o->bias)
        put_key_str(fp, "BIASFILE", o->bias, "master bias subtracted", &st);
    if (o->dark)
        put_key_str(fp, "DARKFILE", o->dark, "master dark subtracted", &st);
    snprintf(line, sizeof line, PROG " %s: sigma-clipped median of %d inputs (K = %g, %d "
             "iterations), region [%d,%d %dx%d], overscan %s%s", kind_name[o->kind], s->n,
             o->sigma, o->iters, s->region.x, s->region.y, s->region.w, s->region.h,
             os[o->overscan], o->kind == KIND_FLAT ? ", each input / its median, master / its median" : "");
    fits_write_history(fp, line, &st);
    for (int i = 0; i < o->n_in; i++) {
        snprintf(line, sizeof line, "input %d: %s", i + 1, o->in[i]);
        fits_write_history(fp, line, &st);
    }
    fits_write_img(fp, TFLOAT, 1, (LONGLONG)s->npix, (void *)px, &st);
    fits_write_chksum(fp, &st);
    int cst = 0;
    if (fp)
        fits_close_file(fp, &cst);
    if (st || cst || rename(tmp, o->out) != 0) {
        char txt[FLEN_STATUS] = "";
        fits_get_errstatus(st ? st : cst, txt);
        fprintf(stderr, PROG ": cannot write %s: %s\n", o->out,
                st || cst ? txt : strerror(errno));
        remove(tmp);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    opts_t o;
    const int pa = parse_args(argc, argv, &o);
    if (pa > 0) {
        usage(stdout);
        return 0;
    }
    if (pa < 0)
        return EXIT_USAGE;
    ss_log_setup(SS_LOG_WARNING, 0);

    int rc = EXIT_DATA;
    stack_t_ s;
    memset(&s, 0, sizeof s);
    ss_frame_t f;
    memset(&f, 0, sizeof f);
    float *master = NULL;
    for (int i = 0; i < o.n_in; i++)
        if (add_input(&o, &s, o.in[i], &f) != 0)
            goto done;
    if (!(master = malloc(s.npix * sizeof(float)))) {
        fprintf(stderr, PROG ": out of memory\n");
        goto done;
    }
    if (o.kind == KIND_DARK && o.scale_to <= 0.0 && !(s.exposure > 0.0))
        fprintf(stderr, PROG ": the inputs carry no EXPTIME/EXPOSURE: the master has none, and "
                "the daemon will use it unscaled\n");
    combine(&o, &s, master);
    if (o.kind == KIND_FLAT) {
        const double med = plane_median(master, s.npix, s.scratch);
        if (!(med > 0.0)) {
            fprintf(stderr, PROG ": the combined flat's median is %g, not positive\n", med);
            goto done;
        }
        for (size_t i = 0; i < s.npix; i++)
            master[i] = (float)(master[i] / med);
    }
    if (write_master(&o, &s, master) != 0)
        goto done;
    if (!o.quiet)
        printf("%s: master %s of %d inputs, %dx%d (region [%d,%d])\n", o.out, kind_name[o.kind],
               s.n, s.region.w, s.region.h, s.region.x, s.region.y);
    rc = 0;
done:
    free(master);
    free(f.pixels);
    free(s.planes);
    free(s.bias.px);
    free(s.dark.px);
    free(s.row_bias);
    free(s.os_buf);
    free(s.scratch);
    return rc;
}
