/*
 * eval.c — skysieve-eval: how well the pipeline does on a FITS sequence
 * with known truth (the truth.jsonl of skysieve-synth), against two
 * baselines built from skysieve's own stage functions. A program, never a
 * test: it measures and prints; docs/QUALITY.md defines every figure and
 * the targets.
 *
 *   skysieve-eval --truth FILE [options] INPUT...
 *
 * For every frame (files sorted by path, matched to truth lines by the
 * FITS SEQ keyword) it runs ss_pipeline_process and scores:
 *  - frames: per status, history resets, re-references, the share of
 *    frames ok from the first ok frame on;
 *  - shift: per reference epoch (the frames measured against one
 *    reference), error = s_meas - (s_true(t) - s_true(ref)), the epoch's
 *    mean error removed (the reference's own noise is common to its
 *    epoch), RMS per axis and combined, and RMS(error) / RMS(reported
 *    standard error);
 *  - detection (ok frames): completeness per SNR bin, what kind the found
 *    movers were reported as, false alarms per Mpix-frame by kind and on
 *    hot pixels, centroid RMS at SNR >= 20, negative twins, streaks found
 *    whole, invalid pixels of the residual and of the calibrated frame,
 *    truncated components;
 *  - tracks (ok frames; tools/eval_track.c): truth mover segments in one
 *    track (overall, SNR >= 7, per speed), the tracks' purity, false
 *    tracks per 100 Mpix-frames, the velocity error of the pure tracks;
 *  - the same detection figures for two baselines on the same frames:
 *    (a) x_t - x_{t-1} and (b) x_t - the per-pixel median of the last N
 *    calibrated frames, both unregistered, through ss_calibrate,
 *    ss_noise_mad, ss_matched_filter, ss_label, ss_measure and
 *    ss_merge_streaks with the pipeline's thresholds.
 *
 * Exit status: 0 done, 1 a file could not be read (the rest is still
 * scored and printed), the backend broke or --json-out could not be
 * written, 2 bad usage.
 */
#include <cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "config/config.h"
#include "pipeline/frame_fits.h"
#include "pipeline/pipeline.h"
#include "tools/eval_track.h"

#define PROG "skysieve-eval"
#define EXIT_READ 1
#define EXIT_USAGE 2

/* ---- the definitions of docs/QUALITY.md -------------------------------- */

#define N_BINS 8
static const double SNR_BINS[N_BINS] = { 4, 5, 6, 7, 8, 10, 15, 20 };
#define BORDER_MIN_PX 12.0          /* movers counted >= this far inside the processed frame */
#define FOUND_MIN_PX 2.0            /* found: a positive detection within max(2, 2 sigma) px */
#define FOUND_SIGMA_FACTOR 2.0
#define MATCH_OBJ_PX 3.0            /* not a false alarm: within 3 px of a mover or cosmic ray */
#define MATCH_STREAK_PX 4.0         /* ... or within 4 px of a streak segment */
#define HOT_PX 1.5                  /* a detection on a hot pixel: within 1.5 px of one */
#define TWIN_PX 3.0                 /* a negative twin: within 3 px of a found mover */
#define STREAK_END_PX 3.0           /* streak found whole: both end points within 3 px */
#define CENTROID_MIN_SNR 20.0       /* centroid RMS over found movers of this truth SNR and up */
#define GROSS_SHIFT_PX 1.0          /* a shift error this large is counted apart */
#define MAX_COMPONENTS (1 << 18)    /* baseline components measured per frame (as the CPU backend) */
#define MAX_SETS 64                 /* --set options */
#define MAX_SEQ 10000000            /* largest truth seq accepted */
#define MAX_MOVER_ID (1 << 20)      /* largest truth mover id accepted */
#define TRACK_MATCH_PX 5.0          /* track figures: a detection belongs to the nearest truth
                                     * mover within this (or its found radius, if larger) */
#define TRACK_MIN_POINTS 3          /* segments need this many found detections (unless the
                                     * pipeline's track.min_points says otherwise) */

enum { KIND_N = 3 };                /* point, streak, cosmic (ss_kind_t) */
enum { M_PIPE = 0, M_DIFF, M_MEDIAN, M__COUNT };
static const char *const METHOD_NAME[M__COUNT] = { "pipeline", "diff", "median" };

/* ---- truth ---------------------------------------------------------------- */

typedef enum tkind { T_MOVER = 0, T_STREAK, T_COSMIC } tkind_t;

typedef struct tobj {
    tkind_t kind;
    int id;                         /* the truth id (movers: stable across frames), -1 none */
    double x, y, x0, y0, x1, y1;    /* input-frame pixels, 0-based */
    double snr, sigma;
    int trailed;                    /* a mover drawn as its trail over the exposure: the
                                     * truth gave its ends (x0, y0)-(x1, y1) apart */
    /* movers: motion on the sky-fixed frame, from the truth or derived
     * (truth_motion) */
    int has_motion;                 /* the truth gave vx, vy and segment */
    double vx, vy;                  /* px/frame */
    int segment, pair;              /* pair: crossing pair, -1 none */
} tobj_t;

typedef struct tframe {
    int present;
    double sx, sy, psf_sigma;
    int n;
    tobj_t *o;
} tframe_t;

typedef struct truth {
    tframe_t *f;                    /* indexed by seq */
    long n_f;
    int n_hot;
    int *hot_x, *hot_y;             /* detector coordinates */
} truth_t;

/* ---- scores ------------------------------------------------------------------ */

typedef struct score {
    long seen[N_BINS], found[N_BINS], found_as[N_BINS][KIND_N];
    long fa[KIND_N], fa_hot[KIND_N];    /* false alarms by kind; of them on hot pixels */
    double mpix_frames;
    long frames;
    double cen_sum2;                /* squared centroid errors, SNR >= 20 */
    long cen_n;
    long neg_total, neg_twins;
    long streaks, streaks_whole;
    long star_seen[2], star_found[2];   /* -v with noise.model_error: movers of truth SNR
                                     * >= 7 near a star (template D >= STAR_D[k] within
                                     * STAR_NEAR_PX), and of them found */
} score_t;

/* One frame as scored: its truth, the processed region in input-frame
 * pixels, the border band of the completeness test. */
typedef struct fctx {
    const tframe_t *t;
    const truth_t *truth;
    int ox, oy, w, h;
    double border;
} fctx_t;

/* One shift measurement. */
typedef struct shift_rec {
    long epoch;
    double ex, ey;                  /* measured - true change since the epoch's reference */
    double sex, sey;                /* reported standard errors */
} shift_rec_t;

/* The pipeline's history as the truth knows it: the true shifts of the
 * frames it stored since its last reset (newest last), for the border
 * band (largest displacement to the history). */
typedef struct shift_ring {
    int cap, n, head;
    double *sx, *sy;
} shift_ring_t;

/* A calibrated frame kept for the baselines, with its place in the input. */
typedef struct bframe {
    float *px;
    int w, h, ox, oy;
} bframe_t;

typedef struct base_ring {
    int cap, n, head;               /* newest at head - 1 */
    bframe_t *f;
} base_ring_t;

/* Scratch of the baselines' detection, sized for the largest frame. */
typedef struct base_work {
    float *diff, *z, *fscratch, *vals;
    int32_t *labels, *iscratch;
    ss_comp_acc_t *acc;
    ss_rank_t *rank;                /* ss_measure's ranking scratch, as acc */
    ss_detlist_t dl;
} base_work_t;

typedef struct totals {
    long files, unreadable, no_truth;
    long status[SS_STATUS__COUNT];
    long resets, rerefs;
    long first_ok;                  /* index of the first ok frame, -1 none */
    long ok_from_first, frames_from_first;
    shift_rec_t *shifts;
    long n_shifts, cap_shifts;
    long long res_nan, res_px, res_nan_in, res_px_in;
    long long cal_nan, cal_px, cal_nan_in, cal_px_in;
    long truncated, truncated_frames, truncated_max;
    score_t sc[M__COUNT];
} totals_t;

typedef struct opts {
    const char *truth, *config, *json_out;
    const char *sets[MAX_SETS];
    int n_sets;
    ss_backend_kind_t backend;
    int negative, baselines, json, quiet, verbose;
} opts_t;

/* ======================================================================
 * usage
 * ==================================================================== */

static void usage(FILE *out)
{
    fprintf(out,
"Usage: " PROG " --truth FILE [options] INPUT...\n"
"Run the skysieve pipeline over a FITS sequence and score it against the\n"
"truth of skysieve-synth (truth.jsonl), beside two baselines. Definitions and\n"
"targets: docs/QUALITY.md.\n"
"\n"
"INPUT is a directory (its *.fits *.fit *.fts *.fz files, also .gz), a list\n"
"file (one path per line, # comments, relative to the list's directory) or\n"
"FITS files; all frames are processed in the order of their paths. A frame is\n"
"matched to its truth line by the FITS keyword SEQ.\n"
"\n"
"Options\n"
"  -t, --truth FILE       truth.jsonl of skysieve-synth                [required]\n"
"  -c, --config FILE      a skysieved JSON config: its first feed's pipeline\n"
"                         section is used (else the defaults)\n"
"  -s, --set KEY=VALUE    a pipeline key, e.g. pipeline.history=20 or\n"
"                         detect.thresh=4 (the 'pipeline.' may be left out);\n"
"                         VALUE is JSON (a number, true, [0,0,512,512]) or a\n"
"                         string; checked by the config module; repeatable\n"
"  -b, --backend B        cpu, cuda or auto (the config's backend is not used) [cpu]\n"
"      --negative         set detect.negative on, for the negative-twin count [on]\n"
"      --no-negative      leave detect.negative as configured\n"
"      --no-baselines     score the pipeline only\n"
"  -j, --json             one JSON object instead of the table\n"
"      --json-out FILE    also write that JSON object to FILE\n"
"  -q, --quiet            errors only on stderr\n"
"  -v, --verbose          one line per frame, its false alarms and its missed movers\n"
"                         (the largest z near each, the nearest detection), on stderr\n"
"  -h, --help             this text\n"
"\n"
"What is measured\n"
"  frames      per status (ok/reference/warmup/regfail/error), history resets,\n"
"              re-references; ok after warm-up = ok frames / frames from the\n"
"              first ok frame on (no ok frame: 0 / frames from min_history on).\n"
"  shift       frames registered against a reference (ok, warmup) form reference\n"
"              epochs (a new one at each reference or re-reference frame). In each,\n"
"              error(t) = s_meas(t) - (s_true(t) - s_true(ref)) (epochs of one\n"
"              frame are left out); RMS per axis and combined (sqrt(x^2 + y^2));\n"
"              ratio = RMS(error) / RMS(reported standard error) (the reported\n"
"              error covers the reference's own noise too); frame to frame =\n"
"              the RMS with each epoch's mean error removed, sqrt(sum / (n -\n"
"              epochs)); gross = |error - epoch mean| > 1 px.\n"
"  detection   in ok frames. A truth mover counts when inside the processed frame\n"
"              at least B = max(12, the largest |shift difference| to the\n"
"              frames in the pipeline's history) px from its edges; it is found\n"
"              when a positive detection lies within max(2, 2 sigma) px (sigma:\n"
"              the mover's own, from the truth); a trailed mover (the truth gives its\n"
"              trail's ends) counts with both ends inside and is found by one streak\n"
"              detection whose ends lie within 3 px of them (a trail shorter than\n"
"              sqrt(96) sigma also as a point is). SNR bins 4 5 6 7 8 10 15 20 (the\n"
"              truth SNR rounded to the nearest). A positive detection is a false\n"
"              alarm unless within 3 px (or the found radius) of a truth mover\n"
"              or cosmic ray or 4 px of a truth streak segment or trail; per Mpix-frame of\n"
"              processed area, by kind, and those within 1.5 px of a hot pixel;\n"
"              headline = point + streak false alarms. Centroid RMS over found\n"
"              movers of SNR >= 20. Negative twins: negative detections within\n"
"              3 px of a found mover. Streaks (ends inside the band): found whole\n"
"              = exactly one positive detection within 4 px of the segment, of\n"
"              kind streak, both ends within 3 px.\n"
"  baselines   diff: x_t - x_{t-1}; median: x_t - the per-pixel median of the\n"
"              last N calibrated frames (N = pipeline.history); calibrated by\n"
"              ss_calibrate over the pipeline's processed region (saturation\n"
"              from the config, no dark/flat/mask), no registration, whole\n"
"              frame; detected with the pipeline's thresholds; scored on the\n"
"              frames where the pipeline is ok, with the same border B.\n"
"  invalid     NaN share of the residual and of the calibrated frame (the\n"
"              backend's FRAME plane) in ok frames, whole and without a border\n"
"              band as wide as the largest |shift difference| to the history.\n"
"  truncated   components beyond the detection list (res.dets.truncated).\n"
"  tracks      in ok frames, from the detections' track ids and the track reports.\n"
"              A detection is credited to its track, or (linked before the track\n"
"              was confirmed) to the track whose points name it. Per truth mover\n"
"              segment (a branch of its path between wraps; from the truth, or\n"
"              derived from the positions) with >= track.min_points found\n"
"              detections: in one track when one track holds >= 80 %% of them;\n"
"              completeness = segments in one track / segments, all, SNR >= 7\n"
"              (median SNR > 6.5), per speed bin 0.2 .. 300 px/frame, crossing\n"
"              pairs. Detections belong to the nearest truth mover within\n"
"              max(5 px, the found radius); a track is pure when >= 90 %% of its\n"
"              detections belong to one mover segment, false when more than half\n"
"              belong to none (per 100 Mpix-frames); velocity error of the pure\n"
"              tracks' last report against the truth, px/frame (px/s times the\n"
"              frame interval of the frames' times). -v lists the failures.\n"
"\n"
"Exit status: 0 done, 1 a file could not be read (the others are scored), the\n"
"backend broke or --json-out could not be written, 2 bad usage.\n");
}

/* ======================================================================
 * inputs
 * ==================================================================== */

typedef struct paths {
    char **p;
    int n, cap;
} paths_t;

static int paths_add(paths_t *ps, const char *path)
{
    if (ps->n == ps->cap) {
        int cap = ps->cap ? 2 * ps->cap : 64;
        char **np = realloc(ps->p, (size_t)cap * sizeof *np);
        if (!np)
            return -1;
        ps->p = np;
        ps->cap = cap;
    }
    if (!(ps->p[ps->n] = strdup(path)))
        return -1;
    ps->n++;
    return 0;
}

static void paths_free(paths_t *ps)
{
    for (int i = 0; i < ps->n; i++)
        free(ps->p[i]);
    free(ps->p);
    memset(ps, 0, sizeof *ps);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int has_suffix(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcmp(s + a - b, suf) == 0;
}

/* A FITS file name: .fits .fit .fts .fz, optionally .gz. */
static int fits_name(const char *name)
{
    static const char *const ext[] = { ".fits", ".fit", ".fts", ".fz" };
    for (int i = 0; i < 4; i++) {
        char gz[16];
        snprintf(gz, sizeof gz, "%s.gz", ext[i]);
        if (has_suffix(name, ext[i]) || has_suffix(name, gz))
            return 1;
    }
    return 0;
}

/* The file starts like a FITS file (or is gzip'ed). */
static int looks_fits(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    unsigned char b[9] = { 0 };
    size_t n = fread(b, 1, sizeof b, f);
    fclose(f);
    return (n == 9 && memcmp(b, "SIMPLE  =", 9) == 0) || (n >= 2 && b[0] == 0x1f && b[1] == 0x8b);
}

static int add_dir(paths_t *ps, const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, PROG ": cannot read directory %s: %s\n", dir, strerror(errno));
        return -1;
    }
    struct dirent *e;
    int rc = 0;
    while ((e = readdir(d)) && rc == 0) {
        if (e->d_name[0] == '.' || !fits_name(e->d_name))
            continue;
        char path[SS_PATH_MAX];
        if (snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= (int)sizeof path)
            continue;
        rc = paths_add(ps, path);
    }
    closedir(d);
    return rc;
}

/* A list file: one path per line, # comments, blank lines skipped;
 * relative paths are taken from the list's directory. */
static int add_list(paths_t *ps, const char *list)
{
    FILE *f = fopen(list, "r");
    if (!f) {
        fprintf(stderr, PROG ": cannot read %s: %s\n", list, strerror(errno));
        return -1;
    }
    char base[SS_PATH_MAX];
    ss_strlcpy(base, list, sizeof base);
    char *slash = strrchr(base, '/');
    if (slash)
        slash[1] = '\0';
    else
        base[0] = '\0';
    char line[SS_PATH_MAX];
    int rc = 0;
    while (rc == 0 && fgets(line, sizeof line, f)) {
        char *s = line;
        while (*s == ' ' || *s == '\t')
            s++;
        s[strcspn(s, "\r\n")] = '\0';
        for (size_t k = strlen(s); k > 0 && (s[k - 1] == ' ' || s[k - 1] == '\t'); k--)
            s[k - 1] = '\0';
        if (!s[0] || s[0] == '#')
            continue;
        char path[2 * SS_PATH_MAX];
        snprintf(path, sizeof path, "%s%s", s[0] == '/' ? "" : base, s);
        rc = paths_add(ps, path);
    }
    fclose(f);
    return rc;
}

/* Collect the frames named by the arguments, sorted by path. */
static int collect_inputs(char **args, int n, paths_t *ps)
{
    for (int i = 0; i < n; i++) {
        struct stat sb;
        if (stat(args[i], &sb) != 0) {
            fprintf(stderr, PROG ": %s: %s\n", args[i], strerror(errno));
            return -1;
        }
        int rc = S_ISDIR(sb.st_mode) ? add_dir(ps, args[i])
                 : looks_fits(args[i]) ? paths_add(ps, args[i])
                                       : add_list(ps, args[i]);
        if (rc != 0)
            return -1;
    }
    qsort(ps->p, (size_t)ps->n, sizeof *ps->p, cmp_str);
    return 0;
}

/* ======================================================================
 * truth
 * ==================================================================== */

static double jnum(const cJSON *o, const char *k, double dflt)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}

static int parse_objects(const cJSON *arr, tframe_t *tf)
{
    int n = cJSON_GetArraySize(arr);
    tf->o = calloc((size_t)(n > 0 ? n : 1), sizeof *tf->o);
    if (!tf->o)
        return -1;
    const cJSON *it;
    cJSON_ArrayForEach(it, arr) {
        const cJSON *k = cJSON_GetObjectItemCaseSensitive(it, "kind");
        if (!cJSON_IsString(k))
            continue;
        tobj_t *o = &tf->o[tf->n];
        if (strcmp(k->valuestring, "mover") == 0)
            o->kind = T_MOVER;
        else if (strcmp(k->valuestring, "streak") == 0)
            o->kind = T_STREAK;
        else if (strcmp(k->valuestring, "cosmic") == 0)
            o->kind = T_COSMIC;
        else
            continue;
        o->x = jnum(it, "x", NAN);
        o->y = jnum(it, "y", NAN);
        o->x0 = jnum(it, "x0", o->x);
        o->y0 = jnum(it, "y0", o->y);
        o->x1 = jnum(it, "x1", o->x);
        o->y1 = jnum(it, "y1", o->y);
        o->snr = jnum(it, "snr", NAN);
        o->sigma = jnum(it, "sigma", tf->psf_sigma);
        double id = jnum(it, "id", -1.0);
        o->id = id >= 0.0 && id < MAX_MOVER_ID && id == floor(id) ? (int)id : -1;
        o->vx = jnum(it, "vx", NAN);
        o->vy = jnum(it, "vy", NAN);
        double seg = jnum(it, "segment", NAN);
        o->has_motion = isfinite(o->vx) && isfinite(o->vy) && seg >= 0.0;
        o->segment = o->has_motion ? (int)seg : 0;
        o->pair = (int)jnum(it, "pair", -1.0);
        o->trailed = o->kind == T_MOVER && hypot(o->x1 - o->x0, o->y1 - o->y0) > 0.0;
        if (isfinite(o->x) && isfinite(o->y))
            tf->n++;
    }
    return 0;
}

static int parse_hot(const cJSON *arr, truth_t *t)
{
    int n = cJSON_GetArraySize(arr);
    free(t->hot_x);
    free(t->hot_y);
    t->hot_x = malloc((size_t)(n > 0 ? n : 1) * sizeof(int));
    t->hot_y = malloc((size_t)(n > 0 ? n : 1) * sizeof(int));
    t->n_hot = 0;
    if (!t->hot_x || !t->hot_y)
        return -1;
    const cJSON *it;
    cJSON_ArrayForEach(it, arr) {
        if (cJSON_GetArraySize(it) != 2)
            continue;
        t->hot_x[t->n_hot] = cJSON_GetArrayItem(it, 0)->valueint;
        t->hot_y[t->n_hot] = cJSON_GetArrayItem(it, 1)->valueint;
        t->n_hot++;
    }
    return 0;
}

static int truth_put(truth_t *t, const cJSON *j, long lineno, const char *path)
{
    double seq = jnum(j, "seq", -1.0);
    const cJSON *objs = cJSON_GetObjectItemCaseSensitive(j, "objects");
    if (!(seq >= 0.0 && seq < MAX_SEQ && seq == floor(seq)) || !cJSON_IsArray(objs) ||
        !isfinite(jnum(j, "sx", NAN)) || !isfinite(jnum(j, "sy", NAN))) {
        fprintf(stderr, PROG ": %s:%ld: not a truth line (seq, sx, sy, objects)\n", path, lineno);
        return -1;
    }
    long s = (long)seq;
    if (s >= t->n_f) {
        long n = SS_MAX(s + 1, 2 * t->n_f);
        tframe_t *nf = realloc(t->f, (size_t)n * sizeof *nf);
        if (!nf)
            return -1;
        memset(nf + t->n_f, 0, (size_t)(n - t->n_f) * sizeof *nf);
        t->f = nf;
        t->n_f = n;
    }
    tframe_t *tf = &t->f[s];
    if (tf->present) {
        fprintf(stderr, PROG ": %s:%ld: seq %ld listed twice\n", path, lineno, s);
        return -1;
    }
    tf->present = 1;
    tf->sx = jnum(j, "sx", 0.0);
    tf->sy = jnum(j, "sy", 0.0);
    tf->psf_sigma = jnum(j, "psf_sigma", 1.0);
    if (parse_objects(objs, tf) != 0)
        return -1;
    const cJSON *hot = cJSON_GetObjectItemCaseSensitive(j, "hot");
    return cJSON_IsArray(hot) ? parse_hot(hot, t) : 0;
}

/* Movers whose truth line has no velocity and segment (skysieve-synth
 * without the motion options) get them from their positions:
 * ss_evt_derive_motion on the sky positions (frame position + true
 * shift) of each mover id, in seq order. Returns 0, or -1 out of memory. */
static int truth_motion(truth_t *t)
{
    int max_id = -1;
    long total = 0;
    for (long s = 0; s < t->n_f; s++)
        for (int i = 0; t->f[s].present && i < t->f[s].n; i++) {
            const tobj_t *o = &t->f[s].o[i];
            if (o->kind == T_MOVER && !o->has_motion && o->id >= 0) {
                max_id = SS_MAX(max_id, o->id);
                total++;
            }
        }
    if (max_id < 0)
        return 0;
    size_t n = (size_t)total;
    long *start = calloc((size_t)max_id + 2, sizeof *start);
    uint64_t *seq = malloc(n * sizeof *seq);
    double *px = malloc(n * sizeof *px), *py = malloc(n * sizeof *py);
    int *seg = malloc(n * sizeof *seg);
    tobj_t **at = malloc(n * sizeof *at);
    int rc = start && seq && px && py && seg && at ? 0 : -1;
    for (int pass = 0; rc == 0 && pass < 2; pass++) {
        for (long s = 0; s < t->n_f; s++)
            for (int i = 0; t->f[s].present && i < t->f[s].n; i++) {
                tobj_t *o = &t->f[s].o[i];
                if (o->kind != T_MOVER || o->has_motion || o->id < 0)
                    continue;
                if (pass == 0) {
                    start[o->id + 1]++;         /* counts, turned into starts below */
                    continue;
                }
                long k = start[o->id]++;        /* the fill moves each start to the next id's */
                seq[k] = (uint64_t)s;
                px[k] = o->x + t->f[s].sx;
                py[k] = o->y + t->f[s].sy;
                at[k] = o;
            }
        if (pass == 0)
            for (int id = 0; id <= max_id; id++)
                start[id + 1] += start[id];
    }
    for (int id = 0, a = 0; rc == 0 && id <= max_id; id++) {
        int b = (int)start[id];                 /* after the fill: the end of id's run */
        double vx, vy;
        rc = ss_evt_derive_motion(seq + a, px + a, py + a, b - a, &vx, &vy, seg + a);
        for (int k = a; rc == 0 && k < b; k++) {
            at[k]->vx = vx;
            at[k]->vy = vy;
            at[k]->segment = seg[k];
        }
        a = b;
    }
    free(start);
    free(seq);
    free(px);
    free(py);
    free(seg);
    free(at);
    return rc;
}

static int truth_load(const char *path, truth_t *t)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, PROG ": cannot read %s: %s\n", path, strerror(errno));
        return -1;
    }
    char *line = NULL;
    size_t cap = 0;
    long lineno = 0;
    int rc = 0;
    while (rc == 0 && getline(&line, &cap, f) > 0) {
        lineno++;
        if (strspn(line, " \t\r\n") == strlen(line))
            continue;
        cJSON *j = cJSON_Parse(line);
        if (!j) {
            fprintf(stderr, PROG ": %s:%ld: not JSON\n", path, lineno);
            rc = -1;
            break;
        }
        rc = truth_put(t, j, lineno, path);
        cJSON_Delete(j);
    }
    free(line);
    fclose(f);
    if (rc == 0 && truth_motion(t) != 0) {
        fprintf(stderr, PROG ": %s: out of memory\n", path);
        rc = -1;
    }
    return rc;
}

static void truth_free(truth_t *t)
{
    for (long i = 0; i < t->n_f; i++)
        free(t->f[i].o);
    free(t->f);
    free(t->hot_x);
    free(t->hot_y);
    memset(t, 0, sizeof *t);
}

static const tframe_t *truth_frame(const truth_t *t, uint64_t seq)
{
    return seq < (uint64_t)t->n_f && t->f[seq].present ? &t->f[seq] : NULL;
}

/* ======================================================================
 * the pipeline config: --config, then --set through the config module
 * ==================================================================== */

/* Set "a.b.c" = value (JSON, else a string) inside obj, creating objects. */
static int json_set(cJSON *obj, const char *key, const char *value)
{
    char buf[256];
    ss_strlcpy(buf, key, sizeof buf);
    char *save = NULL;
    cJSON *at = obj;
    char *part = strtok_r(buf, ".", &save);
    while (part) {
        char *next = strtok_r(NULL, ".", &save);
        if (!next) {
            cJSON *v = cJSON_Parse(value);
            if (!v)
                v = cJSON_CreateString(value);
            if (!v)
                return -1;
            if (cJSON_GetObjectItemCaseSensitive(at, part))
                cJSON_ReplaceItemInObjectCaseSensitive(at, part, v);
            else
                cJSON_AddItemToObject(at, part, v);
            return 0;
        }
        cJSON *child = cJSON_GetObjectItemCaseSensitive(at, part);
        if (!child)
            child = cJSON_AddObjectToObject(at, part);
        if (!cJSON_IsObject(child))
            return -1;
        at = child;
        part = next;
    }
    return -1;
}

/* The pipeline section: defaults or the first feed of --config, then each
 * --set applied to that feed's JSON and the whole re-validated by
 * ss_config_load_string. Returns 0, or -1 with a message printed. */
static int load_pipeline_cfg(const opts_t *o, ss_pipeline_cfg_t *out)
{
    ss_config_t *c = malloc(sizeof *c);
    char err[512];
    int rc = -1;
    char *js = NULL, *txt = NULL;
    cJSON *root = NULL;
    if (!c)
        return -1;
    if (o->config) {
        if (ss_config_load_file(o->config, c, err, sizeof err) != SS_OK) {
            fprintf(stderr, PROG ": %s\n", err);
            goto done;
        }
    } else {
        ss_config_defaults(c);
    }
    if (o->n_sets > 0) {
        js = ss_config_to_json(c);
        root = js ? cJSON_Parse(js) : NULL;
        cJSON *feed = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(root, "feeds"), 0);
        if (!feed)
            goto done;
        for (int i = 0; i < o->n_sets; i++) {
            const char *eq = strchr(o->sets[i], '=');
            char key[256];
            size_t kl = eq ? (size_t)(eq - o->sets[i]) : 0;
            if (!eq || kl == 0 || kl >= sizeof key - 16) {
                fprintf(stderr, PROG ": --set '%s': not KEY=VALUE\n", o->sets[i]);
                goto done;
            }
            int prefixed = strncmp(o->sets[i], "pipeline.", 9) == 0;
            snprintf(key, sizeof key, "%s%.*s", prefixed ? "" : "pipeline.", (int)kl, o->sets[i]);
            if (json_set(feed, key, eq + 1) != 0) {
                fprintf(stderr, PROG ": --set '%s': cannot set %s\n", o->sets[i], key);
                goto done;
            }
        }
        txt = cJSON_PrintUnformatted(root);
        if (!txt || ss_config_load_string(txt, strlen(txt), c, err, sizeof err) != SS_OK) {
            fprintf(stderr, PROG ": --set: %s\n", txt ? err : "out of memory");
            goto done;
        }
    }
    *out = c->feeds[0].pipeline;
    rc = 0;
done:
    cJSON_Delete(root);
    free(js);
    free(txt);
    free(c);
    return rc;
}

/* ======================================================================
 * scoring one frame's detections against its truth
 * ==================================================================== */

static int snr_bin(double snr)
{
    int best = 0;
    for (int i = 1; i < N_BINS; i++)
        if (fabs(snr - SNR_BINS[i]) < fabs(snr - SNR_BINS[best]))
            best = i;   /* strict: a tie goes to the lower bin */
    return best;
}

static double seg_dist(double x, double y, const tobj_t *o)
{
    double vx = o->x1 - o->x0, vy = o->y1 - o->y0, L2 = vx * vx + vy * vy;
    double u = L2 > 0 ? ((x - o->x0) * vx + (y - o->y0) * vy) / L2 : 0.0;
    u = SS_CLAMP(u, 0.0, 1.0);
    return hypot(x - (o->x0 + u * vx), y - (o->y0 + u * vy));
}

static double found_radius(const tobj_t *o)
{
    double s = isfinite(o->sigma) && o->sigma > 0 ? o->sigma : 0.0;
    return fmax(FOUND_MIN_PX, FOUND_SIGMA_FACTOR * s);
}

/* Inside the processed region, at least b px from its edges. */
static int inside(const fctx_t *c, double x, double y, double b)
{
    return x >= c->ox + b && y >= c->oy + b && x <= c->ox + c->w - 1 - b &&
           y <= c->oy + c->h - 1 - b;
}

static int near_truth(const fctx_t *c, const ss_detection_t *d)
{
    for (int i = 0; i < c->t->n; i++) {
        const tobj_t *o = &c->t->o[i];
        if (o->kind == T_STREAK ? seg_dist(d->x, d->y, o) <= MATCH_STREAK_PX
            : o->trailed        ? seg_dist(d->x, d->y, o) <= fmax(MATCH_STREAK_PX, found_radius(o))
                                : hypot(d->x - o->x, d->y - o->y) <=
                                      fmax(MATCH_OBJ_PX, o->kind == T_MOVER ? found_radius(o) : 0))
            return 1;
    }
    return 0;
}

static int on_hot(const truth_t *t, const ss_detection_t *d)
{
    for (int i = 0; i < t->n_hot; i++)
        if (hypot(d->x - t->hot_x[i], d->y - t->hot_y[i]) <= HOT_PX)
            return 1;
    return 0;
}

/* The nearest positive detection within r of (x, y), or -1. */
static int nearest_positive(const ss_detlist_t *dl, double x, double y, double r)
{
    int best = -1;
    double bd = r;
    for (int j = 0; j < dl->count; j++) {
        const ss_detection_t *d = &dl->items[j];
        double dd = hypot(d->x - x, d->y - y);
        if (d->sign > 0 && dd <= bd) {
            bd = dd;
            best = j;
        }
    }
    return best;
}

/* Whether truth mover o counts in this frame: inside the processed
 * region b px from its edges (a trailed mover: both its trail's ends). */
static int mover_counts(const fctx_t *c, const tobj_t *o, double b)
{
    if (!o->trailed)
        return inside(c, o->x, o->y, b);
    return inside(c, o->x0, o->y0, b) && inside(c, o->x1, o->y1, b);
}

/* Whether detection d's ends lie within STREAK_END_PX of o's, either way
 * round. */
static int ends_match(const ss_detection_t *d, const tobj_t *o)
{
    double e1 = fmax(hypot(d->x0 - o->x0, d->y0 - o->y0), hypot(d->x1 - o->x1, d->y1 - o->y1));
    double e2 = fmax(hypot(d->x0 - o->x1, d->y0 - o->y1), hypot(d->x1 - o->x0, d->y1 - o->y0));
    return fmin(e1, e2) <= STREAK_END_PX;
}

/* The detection that found truth mover o, or -1. A point mover: the
 * nearest positive detection within its found radius. A trailed one: a
 * positive streak detection whose ends match the trail's (the streaks'
 * "found whole" test; the nearest to its centre), else, for a trail the
 * detector would not call a streak (§7: a/b ≥ 3 with a² = σ² + L²/12, b =
 * σ, i.e. L ≥ sqrt(96)·σ), the nearest positive detection within its found
 * radius of its centre, as for a point: a piece of a longer trail is not
 * the mover found. */
static int mover_found(const ss_detlist_t *dl, const tobj_t *o)
{
    if (!o->trailed)
        return nearest_positive(dl, o->x, o->y, found_radius(o));
    int best = -1;
    double bd = INFINITY;
    for (int j = 0; j < dl->count; j++) {
        const ss_detection_t *d = &dl->items[j];
        double dd = hypot(d->x - o->x, d->y - o->y);
        if (d->sign > 0 && d->kind == SS_KIND_STREAK && ends_match(d, o) && dd < bd) {
            bd = dd;
            best = j;
        }
    }
    const double L = hypot(o->x1 - o->x0, o->y1 - o->y0);
    if (best < 0 && isfinite(o->sigma) && L < sqrt(96.0) * o->sigma)
        best = nearest_positive(dl, o->x, o->y, found_radius(o));
    return best;
}

/* -v with noise.model_error: the STAR plane (processed region, origin
 * g_star_x0/y0 in input pixels), so that each false alarm lists the star
 * SNR t at its peak; NULL: not listed */
static const float *g_star;
static int g_star_w, g_star_h, g_star_x0, g_star_y0;

/* t at input pixel (x, y), NaN when unknown. */
static float star_at(int x, int y)
{
    x -= g_star_x0, y -= g_star_y0;
    if (!g_star || x < 0 || y < 0 || x >= g_star_w || y >= g_star_h)
        return NAN;
    return g_star[(size_t)y * (size_t)g_star_w + (size_t)x];
}

/* The largest t within r px of input pixel (x, y) and its distance. */
static float star_near(int x, int y, int r, float *dist)
{
    float best = NAN;
    *dist = NAN;
    for (int dy = -r; dy <= r; dy++)
        for (int dx = -r; dx <= r; dx++) {
            const float v = dx * dx + dy * dy <= r * r ? star_at(x + dx, y + dy) : NAN;
            if (isfinite(v) && !(v <= best)) {
                best = v;
                *dist = sqrtf((float)(dx * dx + dy * dy));
            }
        }
    return best;
}

/* a star's ring: the fit's default noise.model_error_snr, and a fainter one */
static const float STAR_D[2] = { 20.0f, 5.0f };
#define STAR_NEAR_PX 3
#define STAR_MIN_SNR 6.5            /* the bins of SNR 7 and up */

static void score_movers(score_t *s, const ss_detlist_t *dl, const fctx_t *c, int twins)
{
    for (int i = 0; i < c->t->n; i++) {
        const tobj_t *o = &c->t->o[i];
        if (o->kind != T_MOVER || !mover_counts(c, o, c->border))
            continue;
        int b = snr_bin(o->snr);
        s->seen[b]++;
        int j = mover_found(dl, o);
        float dist;
        const float dn = g_star && o->snr > STAR_MIN_SNR
                             ? star_near((int)lround(o->x), (int)lround(o->y), STAR_NEAR_PX, &dist)
                             : NAN;
        for (int k = 0; k < 2; k++) {
            s->star_seen[k] += dn >= STAR_D[k];
            s->star_found[k] += dn >= STAR_D[k] && j >= 0;
        }
        if (j < 0)
            continue;
        const ss_detection_t *d = &dl->items[j];
        s->found[b]++;
        s->found_as[b][SS_CLAMP((int)d->kind, 0, KIND_N - 1)]++;
        if (o->snr >= CENTROID_MIN_SNR) {
            s->cen_sum2 += (d->x - o->x) * (d->x - o->x) + (d->y - o->y) * (d->y - o->y);
            s->cen_n++;
        }
        if (!twins)
            continue;
        for (int k = 0; k < dl->count; k++) {
            const ss_detection_t *n = &dl->items[k];
            if (n->sign < 0 && hypot(n->x - o->x, n->y - o->y) <= TWIN_PX)
                s->neg_twins++;
        }
    }
}

static void score_streaks(score_t *s, const ss_detlist_t *dl, const fctx_t *c)
{
    for (int i = 0; i < c->t->n; i++) {
        const tobj_t *o = &c->t->o[i];
        if (o->kind != T_STREAK || !inside(c, o->x0, o->y0, c->border) ||
            !inside(c, o->x1, o->y1, c->border))
            continue;
        s->streaks++;
        int pieces = 0, whole = 0;
        for (int j = 0; j < dl->count; j++) {
            const ss_detection_t *d = &dl->items[j];
            if (d->sign < 0 || seg_dist(d->x, d->y, o) > MATCH_STREAK_PX)
                continue;
            pieces++;
            whole = d->kind == SS_KIND_STREAK && ends_match(d, o);
        }
        s->streaks_whole += pieces == 1 && whole;
    }
}

static int g_verbose;               /* -v: false alarms listed on stderr */
static void score_false_alarms(score_t *s, const ss_detlist_t *dl, const fctx_t *c)
{
    for (int j = 0; j < dl->count; j++) {
        const ss_detection_t *d = &dl->items[j];
        if (d->sign < 0) {
            s->neg_total++;
            continue;
        }
        if (near_truth(c, d))
            continue;
        int k = SS_CLAMP((int)d->kind, 0, KIND_N - 1);
        int hot = on_hot(c->truth, d);
        s->fa[k]++;
        s->fa_hot[k] += hot;
        if (g_verbose) {
            float dist, near = star_near(d->peak_x, d->peak_y, 8, &dist);
            fprintf(stderr,
                    "  false alarm (%.1f, %.1f) %s snr %.1f area %d model D %.0f (%.0f at %.1f px)%s\n",
                    d->x, d->y, ss_kind_name(d->kind), d->peak_snr, d->area,
                    star_at(d->peak_x, d->peak_y), near, dist, hot ? " on a hot pixel" : "");
        }
    }
}

/* Score one frame's detections (input-frame coordinates). twins: count
 * the negative detections next to found movers. */
static void score_frame(score_t *s, const ss_detlist_t *dl, const fctx_t *c, int twins)
{
    s->frames++;
    s->mpix_frames += (double)c->w * c->h / 1e6;
    score_movers(s, dl, c, twins);
    score_streaks(s, dl, c);
    score_false_alarms(s, dl, c);
}

/* ======================================================================
 * the border band: the largest displacement to the pipeline's history
 * ==================================================================== */

static int ring_init(shift_ring_t *r, int cap)
{
    memset(r, 0, sizeof *r);
    r->cap = cap;
    r->sx = malloc((size_t)cap * sizeof(double));
    r->sy = malloc((size_t)cap * sizeof(double));
    return r->sx && r->sy ? 0 : -1;
}

static void ring_push(shift_ring_t *r, double sx, double sy)
{
    r->sx[r->head] = sx;
    r->sy[r->head] = sy;
    r->head = (r->head + 1) % r->cap;
    if (r->n < r->cap)
        r->n++;
}

/* max over the history of max(|Δx|, |Δy|) against (sx, sy); 0 if empty. */
static double ring_spread(const shift_ring_t *r, double sx, double sy)
{
    double m = 0.0;
    for (int k = 0; k < r->n; k++)
        m = fmax(m, fmax(fabs(sx - r->sx[k]), fabs(sy - r->sy[k])));
    return m;
}

/* ======================================================================
 * shift errors per reference epoch
 * ==================================================================== */

static int shift_add(totals_t *T, long epoch, const ss_shift_t *s, double tdx, double tdy)
{
    if (T->n_shifts == T->cap_shifts) {
        long cap = T->cap_shifts ? 2 * T->cap_shifts : 256;
        shift_rec_t *n = realloc(T->shifts, (size_t)cap * sizeof *n);
        if (!n)
            return -1;
        T->shifts = n;
        T->cap_shifts = cap;
    }
    T->shifts[T->n_shifts++] =
        (shift_rec_t){ epoch, s->sx - tdx, s->sy - tdy, s->err_x, s->err_y };
    return 0;
}

typedef struct shift_stats {
    long n, epochs, gross;
    double rms_x, rms_y, rms, rep_x, rep_y, rep, ratio_x, ratio_y, ratio;
    double scat_x, scat_y, scat;    /* frame-to-frame: the epoch means removed */
} shift_stats_t;

/* Records are in frame order, so an epoch's records are consecutive. */
static void shift_summary(const totals_t *T, shift_stats_t *o)
{
    memset(o, 0, sizeof *o);
    double sxx = 0, syy = 0, rxx = 0, ryy = 0, exx = 0, eyy = 0;
    for (long a = 0; a < T->n_shifts;) {
        long b = a;
        double mx = 0, my = 0;
        while (b < T->n_shifts && T->shifts[b].epoch == T->shifts[a].epoch) {
            mx += T->shifts[b].ex;
            my += T->shifts[b].ey;
            b++;
        }
        long n = b - a;
        if (n >= 2) {
            mx /= n;
            my /= n;
            for (long k = a; k < b; k++) {
                const shift_rec_t *r = &T->shifts[k];
                double dx = r->ex - mx, dy = r->ey - my;
                sxx += dx * dx;
                syy += dy * dy;
                exx += r->ex * r->ex;
                eyy += r->ey * r->ey;
                rxx += r->sex * r->sex;
                ryy += r->sey * r->sey;
                o->gross += fabs(dx) > GROSS_SHIFT_PX || fabs(dy) > GROSS_SHIFT_PX;
            }
            o->n += n;
            o->epochs++;
        }
        a = b;
    }
    double dof = (double)(o->n - o->epochs);
    if (dof <= 0) {
        o->rms_x = o->rms_y = o->rms = o->rep_x = o->rep_y = o->rep = NAN;
        o->ratio_x = o->ratio_y = o->ratio = o->scat_x = o->scat_y = o->scat = NAN;
        return;
    }
    o->scat_x = sqrt(sxx / dof);
    o->scat_y = sqrt(syy / dof);
    o->scat = hypot(o->scat_x, o->scat_y);
    o->rms_x = sqrt(exx / o->n);
    o->rms_y = sqrt(eyy / o->n);
    o->rms = hypot(o->rms_x, o->rms_y);
    o->rep_x = sqrt(rxx / o->n);
    o->rep_y = sqrt(ryy / o->n);
    o->rep = hypot(o->rep_x, o->rep_y);
    o->ratio_x = o->rms_x / o->rep_x;
    o->ratio_y = o->rms_y / o->rep_y;
    o->ratio = o->rms / o->rep;
}

/* ======================================================================
 * baselines
 * ==================================================================== */

static int base_ring_init(base_ring_t *r, int cap, size_t max_px)
{
    memset(r, 0, sizeof *r);
    r->cap = cap;
    r->f = calloc((size_t)cap, sizeof *r->f);
    if (!r->f)
        return -1;
    for (int k = 0; k < cap; k++)
        if (!(r->f[k].px = malloc(max_px * sizeof(float))))
            return -1;
    return 0;
}

static void base_ring_free(base_ring_t *r)
{
    for (int k = 0; r->f && k < r->cap; k++)
        free(r->f[k].px);
    free(r->f);
    memset(r, 0, sizeof *r);
}

/* The k-th newest frame (0 = the newest). */
static const bframe_t *base_ring_get(const base_ring_t *r, int k)
{
    return &r->f[((r->head - 1 - k) % r->cap + r->cap) % r->cap];
}

static void base_ring_push(base_ring_t *r, const float *px, int w, int h, int ox, int oy)
{
    bframe_t *b = &r->f[r->head];
    memcpy(b->px, px, (size_t)w * h * sizeof(float));
    b->w = w;
    b->h = h;
    b->ox = ox;
    b->oy = oy;
    r->head = (r->head + 1) % r->cap;
    if (r->n < r->cap)
        r->n++;
}

/* Pixel of a kept frame at input-frame position (x, y); NaN outside it. */
static float bframe_at(const bframe_t *b, int x, int y)
{
    x -= b->ox;
    y -= b->oy;
    if (x < 0 || y < 0 || x >= b->w || y >= b->h)
        return NAN;
    return b->px[(size_t)y * b->w + x];
}

static int base_work_init(base_work_t *w, size_t max_px, int hist, int max_dets)
{
    memset(w, 0, sizeof *w);
    size_t ncomp = SS_MIN(max_px / 2 + 1, (size_t)MAX_COMPONENTS);
    w->diff = malloc(max_px * sizeof(float));
    w->z = malloc(max_px * sizeof(float));
    w->fscratch = malloc(3 * max_px * sizeof(float));
    w->vals = malloc((size_t)hist * sizeof(float));
    w->labels = malloc(max_px * sizeof(int32_t));
    w->iscratch = malloc(max_px * sizeof(int32_t));
    w->acc = malloc(ncomp * sizeof *w->acc);
    w->rank = malloc(ncomp * sizeof *w->rank);
    if (!w->diff || !w->z || !w->fscratch || !w->vals || !w->labels || !w->iscratch || !w->acc ||
        !w->rank)
        return -1;
    return ss_detlist_init(&w->dl, max_dets);
}

static void base_work_free(base_work_t *w)
{
    free(w->diff);
    free(w->z);
    free(w->fscratch);
    free(w->vals);
    free(w->labels);
    free(w->iscratch);
    free(w->acc);
    free(w->rank);
    ss_detlist_free(&w->dl);
    memset(w, 0, sizeof *w);
}

/* Median of the finite values (mean of the two middle ones for an even
 * count, as ss_median3x3); NaN when none. Sorts v[0..n). */
static float median_of(float *v, int n)
{
    int m = 0;
    for (int i = 0; i < n; i++)
        if (isfinite(v[i]))
            v[m++] = v[i];
    if (m == 0)
        return NAN;
    for (int i = 1; i < m; i++) {
        float x = v[i];
        int j = i - 1;
        for (; j >= 0 && v[j] > x; j--)
            v[j + 1] = v[j];
        v[j + 1] = x;
    }
    return m % 2 ? v[m / 2] : 0.5f * (v[m / 2 - 1] + v[m / 2]);
}

/* out = cur - (the previous frame | the median of the kept frames), at
 * the same input-frame pixels; NaN where either side is missing. */
static void baseline_plane(int method, const float *cur, int w, int h, int ox, int oy,
                           const base_ring_t *r, float *out)
{
    const bframe_t *prev = base_ring_get(r, 0);
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (int y = 0; y < h; y++) {
        float vals[SS_MAX_HISTORY];
        for (int x = 0; x < w; x++) {
            size_t i = (size_t)y * w + x;
            float bg;
            if (method == M_DIFF) {
                bg = bframe_at(prev, x + ox, y + oy);
            } else {
                for (int k = 0; k < r->n; k++)
                    vals[k] = bframe_at(base_ring_get(r, k), x + ox, y + oy);
                bg = median_of(vals, r->n);
            }
            out[i] = cur[i] - bg;
        }
    }
}

/* Detect on a baseline's difference plane with the pipeline's stage
 * functions and thresholds; detections into w->dl in input-frame pixels. */
static void baseline_detect(base_work_t *w, int pw, int ph, int ox, int oy,
                            const ss_pipeline_cfg_t *c)
{
    ss_detlist_clear(&w->dl);
    float sigma = ss_noise_mad(w->diff, pw, ph, c->noise_stride, w->fscratch);
    if (!isfinite(sigma) || sigma <= 0.0f)
        return;
    ss_matched_filter(w->diff, pw, ph, c->psf_sigma, c->mf_phases, sigma, w->z, w->fscratch);
    int np = 0, nn = 0;
    ss_label(w->z, pw, ph, (float)c->thresh, (float)c->thresh_low, 0, w->labels, w->iscratch,
             &np, &nn);
    int cap = (int)SS_MIN((size_t)pw * ph / 2 + 1, (size_t)MAX_COMPONENTS);
    int keep = SS_MIN(np, cap);
    ss_measure(w->labels, keep, 0, w->diff, w->diff, w->z, pw, ph, sigma, c, w->acc, w->rank,
               &w->dl);
    w->dl.truncated += np - keep;
    ss_merge_streaks(&w->dl, c->streak_gap, fmax(3.0, 2.0 * c->psf_sigma));
    for (int j = 0; j < w->dl.count; j++) {
        ss_detection_t *d = &w->dl.items[j];
        d->x += ox, d->y += oy;
        d->x0 += ox, d->y0 += oy, d->x1 += ox, d->y1 += oy;
    }
}

/* ======================================================================
 * one frame
 * ==================================================================== */

typedef struct eval {
    opts_t o;
    ss_pipeline_cfg_t pc;
    truth_t truth;
    ss_pipeline_t *pipe;
    ss_frame_t frame;
    ss_result_t res;
    float *plane;                   /* the calibrated frame (FRAME plane, or ss_calibrate) */
    shift_ring_t hist;
    base_ring_t bring;
    base_work_t bw;
    long epoch;
    double ref_sx, ref_sy;
    totals_t T;
    ss_evt_t evt;                   /* the inputs of the track figures */
    long *det_ix;                   /* this frame's detection j -> its ss_evt index, -1 none */
    int evt_failed;                 /* out of memory collecting them: no track figures */
    long n_timed;                   /* frames with a time: the frame interval */
    uint64_t seq_t0, seq_t1;
    double mjd_t0, mjd_t1;
} eval_t;

/* NaN counts of a w×h plane, whole and without a band of `band` px. */
static void count_nan(const float *p, int w, int h, int band, long long *nan, long long *px,
                      long long *nan_in, long long *px_in)
{
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            int bad = isnan(p[(size_t)y * w + x]);
            int in = x >= band && y >= band && x < w - band && y < h - band;
            *nan += bad;
            *px += 1;
            *nan_in += bad && in;
            *px_in += in;
        }
}

static void track_shift(eval_t *E, const tframe_t *t)
{
    const ss_result_t *r = &E->res;
    int measured = (r->status == SS_STATUS_OK || r->status == SS_STATUS_WARMUP) && r->shift.ok;
    if (t && measured)
        (void)shift_add(&E->T, E->epoch, &r->shift, t->sx - E->ref_sx, t->sy - E->ref_sy);
    if (r->status == SS_STATUS_REFERENCE || r->rereferenced) {
        E->epoch++;
        E->ref_sx = t ? t->sx : NAN;
        E->ref_sy = t ? t->sy : NAN;
    }
}

/* The baselines of an ok frame, scored; every handled frame is then kept. */
static void run_baselines(eval_t *E, const fctx_t *c, int ok)
{
    const ss_result_t *r = &E->res;
    const int w = r->width, h = r->height;
    ss_roi_t roi = { r->origin_x, r->origin_y, w, h };
    ss_calibrate(E->frame.pixels, E->frame.dtype, E->frame.width, E->frame.valid, roi, NULL, NULL,
                 E->pc.saturation, NULL, E->plane);
    if (ok && c && E->bring.n > 0)
        for (int m = M_DIFF; m <= M_MEDIAN; m++) {
            baseline_plane(m, E->plane, w, h, roi.x, roi.y, &E->bring, E->bw.diff);
            baseline_detect(&E->bw, w, h, roi.x, roi.y, &E->pc);
            score_frame(&E->T.sc[m], &E->bw.dl, c, 0);
        }
    base_ring_push(&E->bring, E->plane, w, h, roi.x, roi.y);
}

/* The truth mover nearest to (x, y) within max(TRACK_MATCH_PX, its found
 * radius), or NULL: looser than the false-alarm radius, because the track
 * figures ask which object a track follows, and a mover blended with a
 * star's residual is measured a few px off. */
static const tobj_t *nearest_mover(const fctx_t *c, double x, double y)
{
    const tobj_t *best = NULL;
    double bd = INFINITY;
    for (int i = 0; i < c->t->n; i++) {
        const tobj_t *o = &c->t->o[i];
        double d = seg_dist(x, y, o);     /* a point mover: its distance */
        if (o->kind == T_MOVER && d <= fmax(TRACK_MATCH_PX, found_radius(o)) && d < bd) {
            bd = d;
            best = o;
        }
    }
    return best;
}

/* The track figures' inputs of an ok frame: its positive detections, each
 * with the truth mover it matches, and the movers the completeness counts
 * (same border, same found radius), each with the detection that found it. */
static void record_tracks(eval_t *E, const fctx_t *c)
{
    const ss_detlist_t *dl = &E->res.dets;
    const uint64_t seq = E->frame.meta.seq;
    for (int j = 0; j < dl->count && !E->evt_failed; j++) {
        const ss_detection_t *d = &dl->items[j];
        E->det_ix[j] = -1;
        if (d->sign <= 0)
            continue;
        const tobj_t *m = nearest_mover(c, d->x, d->y);
        ss_evt_det_t ed = { seq, d->x, d->y, d->track, m ? m->id : -1, m ? m->segment : 0,
                            m ? m->vx : NAN, m ? m->vy : NAN };
        E->det_ix[j] = ss_evt_add_det(&E->evt, &ed);
        E->evt_failed |= E->det_ix[j] < 0;
    }
    for (int i = 0; i < c->t->n && !E->evt_failed; i++) {
        const tobj_t *o = &c->t->o[i];
        if (o->kind != T_MOVER || !mover_counts(c, o, c->border))
            continue;
        int j = mover_found(dl, o);
        ss_evt_sample_t es = { o->id, o->segment, o->pair, seq, o->snr, hypot(o->vx, o->vy),
                               j >= 0 ? E->det_ix[j] : -1 };
        E->evt_failed |= ss_evt_add_sample(&E->evt, &es) != 0;
    }
}

/* Every track report of a processed frame, and the frame's time (for the
 * frame interval that turns px/s into px/frame). */
static void record_reports(eval_t *E)
{
    const ss_tracklist_t *tl = &E->res.tracks;
    for (int i = 0; i < tl->count && !E->evt_failed; i++)
        E->evt_failed |= ss_evt_add_report(&E->evt, &tl->items[i]) != 0;
    double mjd = E->frame.meta.mjd_obs;
    if (!isfinite(mjd))
        return;
    if (E->n_timed++ == 0) {
        E->seq_t0 = E->frame.meta.seq;
        E->mjd_t0 = mjd;
    }
    E->seq_t1 = E->frame.meta.seq;
    E->mjd_t1 = mjd;
}

/* s per frame from the first and last timed frames; NAN when unknown. */
static double frame_interval(const eval_t *E)
{
    if (E->n_timed < 2 || E->seq_t1 == E->seq_t0)
        return NAN;
    return (E->mjd_t1 - E->mjd_t0) * 86400.0 / ((double)E->seq_t1 - (double)E->seq_t0);
}

/* -v: each counted mover that no positive detection found, on stderr:
 * its truth SNR, the largest z of the SNR map z within 1 px of it, and
 * the nearest positive detection (distance, kind, peak SNR) within 8 px. */
static void list_missed(const ss_detlist_t *dl, const fctx_t *c, const float *z)
{
    for (int i = 0; i < c->t->n; i++) {
        const tobj_t *o = &c->t->o[i];
        if (o->kind != T_MOVER || !mover_counts(c, o, c->border) || mover_found(dl, o) >= 0)
            continue;
        const int px = (int)lround(o->x) - c->ox, py = (int)lround(o->y) - c->oy;
        float zm = NAN;
        for (int y = py - 1; y <= py + 1; y++)
            for (int x = px - 1; x <= px + 1; x++)
                if (x >= 0 && y >= 0 && x < c->w && y < c->h && !(z[(size_t)y * c->w + x] <= zm))
                    zm = isnan(zm) ? z[(size_t)y * c->w + x] : fmaxf(zm, z[(size_t)y * c->w + x]);
        const int j = nearest_positive(dl, o->x, o->y, 8.0);
        fprintf(stderr, "  missed mover %d (%.2f, %.2f) snr %.2f: max z within 1 px %.2f", o->id,
                o->x, o->y, o->snr, (double)zm);
        if (o->trailed) {
            fprintf(stderr, "; trail (%.1f, %.1f)-(%.1f, %.1f), pieces within %g px:",
                    o->x0, o->y0, o->x1, o->y1, MATCH_STREAK_PX);
            for (int k = 0; k < dl->count; k++) {
                const ss_detection_t *d = &dl->items[k];
                if (d->sign > 0 && seg_dist(d->x, d->y, o) <= MATCH_STREAK_PX)
                    fprintf(stderr, " [%s (%.1f, %.1f)-(%.1f, %.1f) snr %.1f area %d]",
                            ss_kind_name(d->kind), d->x0, d->y0, d->x1, d->y1, d->peak_snr,
                            d->area);
            }
        }
        if (j >= 0)
            fprintf(stderr, "; nearest detection %.2f px, %s, snr %.1f, area %d\n",
                    hypot(dl->items[j].x - o->x, dl->items[j].y - o->y),
                    ss_kind_name(dl->items[j].kind), dl->items[j].peak_snr, dl->items[j].area);
        else
            fprintf(stderr, "; no detection within 8 px\n");
    }
}

/* Score an ok frame of the pipeline. */
static void score_ok_frame(eval_t *E, const fctx_t *c, int band)
{
    const ss_result_t *r = &E->res;
    totals_t *T = &E->T;
    const ss_backend_ops_t *ops;
    ss_backend_t *be = ss_pipeline_backend(E->pipe, &ops);
    g_verbose = E->o.verbose;
    g_star = NULL;
    if (g_verbose && E->pc.model_error && be &&
        ops->read_plane(be, SS_PLANE_STAR, 0, E->plane) == SS_OK) {
        g_star = E->plane;
        g_star_w = r->width, g_star_h = r->height, g_star_x0 = r->origin_x,
        g_star_y0 = r->origin_y;
        fprintf(stderr, "  model error: beta %.3g from %d star pixels\n", r->model_beta,
                r->model_samples);
    }
    score_frame(&T->sc[M_PIPE], &r->dets, c, 1);
    g_verbose = 0;
    g_star = NULL;
    record_tracks(E, c);
    count_nan(r->residual, r->width, r->height, band, &T->res_nan, &T->res_px, &T->res_nan_in,
              &T->res_px_in);
    if (E->o.verbose && be && ops->read_plane(be, SS_PLANE_SNR, 0, E->plane) == SS_OK)
        list_missed(&r->dets, c, E->plane);
    if (be && ops->read_plane(be, SS_PLANE_FRAME, 0, E->plane) == SS_OK)
        count_nan(E->plane, r->width, r->height, band, &T->cal_nan, &T->cal_px, &T->cal_nan_in,
                  &T->cal_px_in);
    T->truncated += r->dets.truncated;
    T->truncated_frames += r->dets.truncated > 0;
    T->truncated_max = SS_MAX(T->truncated_max, (long)r->dets.truncated);
}

static void frame_status(eval_t *E, ss_frame_status_t st)
{
    totals_t *T = &E->T;
    long idx = T->files - 1;
    T->status[st]++;
    if (st == SS_STATUS_OK && T->first_ok < 0)
        T->first_ok = idx;
    if (T->first_ok >= 0) {
        T->frames_from_first++;
        T->ok_from_first += st == SS_STATUS_OK;
    }
}

/* Process and score one file. Returns 0, 1 on a read error, -1 when the
 * backend broke. */
static int eval_file(eval_t *E, const char *path)
{
    char err[SS_PATH_MAX + 256];
    totals_t *T = &E->T;
    if (ss_fits_read_frame(path, &E->frame, err, sizeof err) != SS_OK) {
        fprintf(stderr, PROG ": %s\n", err);
        T->unreadable++;
        return 1;
    }
    T->files++;
    ss_err_t e = ss_pipeline_process(E->pipe, &E->frame, &E->res);
    ss_result_t *r = &E->res;
    ss_frame_status_t st = e == SS_OK ? r->status : SS_STATUS_ERROR;
    frame_status(E, st);
    T->resets += r->history_reset;
    T->rerefs += r->rereferenced && st != SS_STATUS_REFERENCE;
    if (e == SS_ERR_BROKEN) {
        fprintf(stderr, PROG ": %s: the backend broke: %s\n", path, r->reason);
        return -1;
    }
    const tframe_t *t = truth_frame(&E->truth, E->frame.meta.seq);
    T->no_truth += t == NULL;
    if (r->history_reset)
        E->hist.n = E->hist.head = 0;
    double spread = t ? ring_spread(&E->hist, t->sx, t->sy) : 0.0;
    if (st != SS_STATUS_ERROR) {
        track_shift(E, t);
        record_reports(E);
    }
    fctx_t c = { t, &E->truth, r->origin_x, r->origin_y, r->width, r->height,
                 fmax(BORDER_MIN_PX, ceil(spread)) };
    int ok = st == SS_STATUS_OK && t;
    if (ok)
        score_ok_frame(E, &c, (int)ceil(spread));
    if (E->o.baselines && st != SS_STATUS_ERROR)
        run_baselines(E, ok ? &c : NULL, ok);
    if (t && (st == SS_STATUS_OK || st == SS_STATUS_WARMUP || st == SS_STATUS_REFERENCE))
        ring_push(&E->hist, t->sx, t->sy);
    if (E->o.verbose)
        fprintf(stderr, "%s seq %llu %-9s %dx%d+%d+%d shift %8.3f %8.3f dets %d %s\n", path,
                (unsigned long long)E->frame.meta.seq, ss_status_name(st), r->width, r->height,
                r->origin_x, r->origin_y, r->shift.sx, r->shift.sy, r->dets.count, r->reason);
    return 0;
}

/* ======================================================================
 * output
 * ==================================================================== */

static double ratio(double a, double b) { return b > 0 ? a / b : NAN; }

/* Frames ok after warm-up: ok / frames from the first ok frame on; with no
 * ok frame at all, 0 of the frames from min_history on (where the first
 * could have been at the earliest). */
static void ok_share(const eval_t *E, long *num, long *den)
{
    const totals_t *T = &E->T;
    if (T->first_ok >= 0) {
        *num = T->ok_from_first;
        *den = T->frames_from_first;
    } else {
        *num = 0;
        *den = SS_MAX(T->files - (long)ss_cfg_min_history(&E->pc), 0L);
    }
}

static long sum_bins(const long *v)
{
    long s = 0;
    for (int i = 0; i < N_BINS; i++)
        s += v[i];
    return s;
}

static void print_score_rows(const score_t *s, const char *name)
{
    printf("  %-9s seen    ", name);
    for (int b = 0; b < N_BINS; b++)
        printf(" %6ld", s->seen[b]);
    printf(" %7ld\n", sum_bins(s->seen));
    printf("  %-9s found   ", "");
    for (int b = 0; b < N_BINS; b++)
        printf(" %6ld", s->found[b]);
    printf(" %7ld\n", sum_bins(s->found));
    printf("  %-9s complete", "");
    for (int b = 0; b < N_BINS; b++)
        printf(" %6.3f", ratio((double)s->found[b], (double)s->seen[b]));
    printf(" %7.3f\n", ratio((double)sum_bins(s->found), (double)sum_bins(s->seen)));
}

/* Found detections a truth mover segment needs for the track figures. */
static int track_min_points(const eval_t *E)
{
    return E->pc.track.min_points > 0 ? E->pc.track.min_points : TRACK_MIN_POINTS;
}

/* The track figures (docs/QUALITY.md, "Tracks"); with -v the failures are
 * listed on stderr. Returns out, or NULL when they could not be computed. */
static const ss_evt_result_t *score_tracks(const eval_t *E, ss_evt_result_t *out)
{
    if (E->evt_failed)
        return NULL;
    ss_evt_cfg_t c = { track_min_points(E), frame_interval(E), E->T.sc[M_PIPE].mpix_frames };
    return ss_evt_score(&E->evt, &c, out, E->o.verbose ? stderr : NULL) == 0 ? out : NULL;
}

static void print_tracks(const eval_t *E, const ss_evt_result_t *t)
{
    printf("tracks (ok frames; pipeline.track %s; %ld reports): truth mover segments with >= %d "
           "found detections, in one track = one track holds >= %.0f %% of them\n",
           E->pc.track.enabled ? "on" : "off", E->evt.reports, track_min_points(E),
           100.0 * SS_EVT_ONE_TRACK);
    printf("  segments %ld: in one track %ld = %.3f, split %ld, partly %ld, untracked %ld; "
           "SNR >= 7: %ld/%ld = %.3f; crossing pairs %ld/%ld\n",
           t->segments, t->in_one, t->completeness, t->split, t->partial, t->untracked,
           t->in_one_snr7, t->segments_snr7, t->completeness_snr7, t->crossing_in_one,
           t->crossing_segments);
    printf("  speed (px/frame) ");
    for (int b = 0; b < SS_EVT_SPEED_BINS; b++)
        printf(" %6g", ss_evt_speed_bins[b]);
    printf("\n  segments         ");
    for (int b = 0; b < SS_EVT_SPEED_BINS; b++)
        printf(" %6ld", t->seg_speed[b]);
    printf("\n  in one track     ");
    for (int b = 0; b < SS_EVT_SPEED_BINS; b++)
        printf(" %6ld", t->in_one_speed[b]);
    printf("\n  complete         ");
    for (int b = 0; b < SS_EVT_SPEED_BINS; b++)
        printf(" %6.3f", t->completeness_speed[b]);
    printf("\n  velocity rel. RMS");
    for (int b = 0; b < SS_EVT_SPEED_BINS; b++)
        printf(" %6.3f", t->vel_rel_rms_speed[b]);
    printf("\n  confirmed tracks %ld: pure (>= %.0f %% on one mover segment) %ld = %.3f, false "
           "(most detections on no mover) %ld = %.3f per 100 Mpix-frames\n",
           t->tracks, 100.0 * SS_EVT_PURE, t->pure, t->purity, t->false_tracks,
           t->false_per_100mpix);
    printf("  velocity error (pure tracks, last report, px/frame; frame interval %.4g s): RMS "
           "%.4f, relative RMS %.4f (%ld tracks)\n",
           frame_interval(E), t->vel_rms, t->vel_rel_rms, t->vel_n);
}

static void print_text(const eval_t *E, const shift_stats_t *sh, const ss_evt_result_t *tr)
{
    const totals_t *T = &E->T;
    const char *const kinds[KIND_N] = { "point", "streak", "cosmic" };
    printf("skysieve-eval: %ld frames (%ld unreadable, %ld without truth), backend %s, "
           "history %d, min_history %d, psf_sigma %g, thresh %g/%g\n",
           T->files, T->unreadable, T->no_truth, ss_pipeline_backend_name(E->pipe),
           E->pc.history, ss_cfg_min_history(&E->pc), E->pc.psf_sigma, E->pc.thresh,
           E->pc.thresh_low);
    printf("frames      ");
    for (int s = 0; s < SS_STATUS__COUNT; s++)
        printf("%s %ld  ", ss_status_name((ss_frame_status_t)s), T->status[s]);
    long okn, okd;
    ok_share(E, &okn, &okd);
    printf("\n            history resets %ld, re-references %ld, ok after warm-up %ld/%ld = %.3f",
           T->resets, T->rerefs, okn, okd, ratio((double)okn, (double)okd));
    if (T->first_ok >= 0)
        printf(" (from frame %ld, the first ok)\n", T->first_ok);
    else
        printf(" (no ok frame: counted from frame %d)\n", ss_cfg_min_history(&E->pc));
    printf("shift       %ld frames in %ld reference epochs (error = measured - true change since"
           " the epoch's reference)\n",
           sh->n, sh->epochs);
    printf("            RMS error x %.4f  y %.4f  combined %.4f px; reported x %.4f  y %.4f  "
           "combined %.4f px\n",
           sh->rms_x, sh->rms_y, sh->rms, sh->rep_x, sh->rep_y, sh->rep);
    printf("            frame to frame (epoch means removed) x %.4f  y %.4f  combined %.4f px\n",
           sh->scat_x, sh->scat_y, sh->scat);
    printf("            ratio RMS(error)/RMS(reported) x %.2f  y %.2f  combined %.2f; gross "
           "errors (> %.0f px) %ld\n",
           sh->ratio_x, sh->ratio_y, sh->ratio, GROSS_SHIFT_PX, sh->gross);
    printf("completeness (ok frames; movers >= max(12, history spread) px inside; found within "
           "max(2, 2 sigma) px)\n  SNR bin           ");
    for (int b = 0; b < N_BINS; b++)
        printf(" %6g", SNR_BINS[b]);
    printf("     all\n");
    int nm = E->o.baselines ? M__COUNT : 1;
    for (int m = 0; m < nm; m++)
        print_score_rows(&T->sc[m], METHOD_NAME[m]);
    if (E->o.baselines)
        printf("  (baselines, unregistered, on the whole processed frame, scored on the pipeline's "
               "ok frames: diff = x_t - x_t-1, median = x_t - median of the last %d)\n",
               E->pc.history);
    for (int m = 0; m < nm; m++) {
        long as[KIND_N] = { 0 };
        for (int b = 0; b < N_BINS; b++)
            for (int k = 0; k < KIND_N; k++)
                as[k] += T->sc[m].found_as[b][k];
        printf("  %-9s found as point %ld, streak %ld, cosmic %ld\n", METHOD_NAME[m], as[0],
               as[1], as[2]);
    }
    printf("false alarms per Mpix-frame (ok frames; of which on hot pixels in brackets)\n"
           "  %-9s %8s %16s %16s %16s %10s\n", "", "Mpix-fr", kinds[0], kinds[1], kinds[2],
           "non-cosmic");
    for (int m = 0; m < nm; m++) {
        const score_t *s = &T->sc[m];
        printf("  %-9s %8.2f", METHOD_NAME[m], s->mpix_frames);
        for (int k = 0; k < KIND_N; k++)
            printf("  %7.3f (%6.3f)", ratio((double)s->fa[k], s->mpix_frames),
                   ratio((double)s->fa_hot[k], s->mpix_frames));
        printf(" %10.3f\n", ratio((double)(s->fa[0] + s->fa[1]), s->mpix_frames));
    }
    printf("centroid RMS (found movers, truth SNR >= %g):", CENTROID_MIN_SNR);
    for (int m = 0; m < nm; m++)
        printf(" %s %.3f px (%ld)", METHOD_NAME[m],
               T->sc[m].cen_n ? sqrt(T->sc[m].cen_sum2 / T->sc[m].cen_n) : NAN, T->sc[m].cen_n);
    for (int k = 0; k < 2; k++)
        if (T->sc[M_PIPE].star_seen[k])
            printf("\nmovers of SNR >= 7 near stars (model-error template D >= %g within %d px): "
                   "found %ld of %ld",
                   (double)STAR_D[k], STAR_NEAR_PX, T->sc[M_PIPE].star_found[k],
                   T->sc[M_PIPE].star_seen[k]);
    printf("\nnegative detections (pipeline, detect.negative %s): %ld, twins within %g px of a "
           "found mover: %ld\n",
           E->pc.negative ? "on" : "off", T->sc[M_PIPE].neg_total, TWIN_PX,
           T->sc[M_PIPE].neg_twins);
    printf("streaks found whole (one streak detection, ends within %g px):", STREAK_END_PX);
    for (int m = 0; m < nm; m++)
        printf(" %s %ld/%ld", METHOD_NAME[m], T->sc[m].streaks_whole, T->sc[m].streaks);
    printf("\ninvalid pixels (ok frames): residual %.4f (without the spread band %.4f), "
           "calibrated frame %.4f (%.4f)\n",
           ratio((double)T->res_nan, (double)T->res_px),
           ratio((double)T->res_nan_in, (double)T->res_px_in),
           ratio((double)T->cal_nan, (double)T->cal_px),
           ratio((double)T->cal_nan_in, (double)T->cal_px_in));
    printf("truncated components: %ld in %ld frames (at most %ld in one)\n", T->truncated,
           T->truncated_frames, T->truncated_max);
    if (tr)
        print_tracks(E, tr);
    else
        printf("tracks: not scored (out of memory)\n");
}

static cJSON *num_array(const double *v, int n)
{
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < n; i++)
        cJSON_AddItemToArray(a, cJSON_CreateNumber(v[i]));
    return a;
}

static cJSON *score_json(const score_t *s)
{
    cJSON *o = cJSON_CreateObject();
    double seen[N_BINS], found[N_BINS], comp[N_BINS];
    for (int b = 0; b < N_BINS; b++) {
        seen[b] = (double)s->seen[b];
        found[b] = (double)s->found[b];
        comp[b] = ratio(found[b], seen[b]);
    }
    cJSON_AddItemToObject(o, "seen", num_array(seen, N_BINS));
    cJSON_AddItemToObject(o, "found", num_array(found, N_BINS));
    cJSON_AddItemToObject(o, "completeness", num_array(comp, N_BINS));
    cJSON_AddNumberToObject(o, "completeness_all",
                            ratio((double)sum_bins(s->found), (double)sum_bins(s->seen)));
    cJSON *as = cJSON_AddObjectToObject(o, "found_as");
    static const char *const kinds[KIND_N] = { "point", "streak", "cosmic" };
    for (int k = 0; k < KIND_N; k++) {
        double v[N_BINS];
        for (int b = 0; b < N_BINS; b++)
            v[b] = (double)s->found_as[b][k];
        cJSON_AddItemToObject(as, kinds[k], num_array(v, N_BINS));
    }
    cJSON_AddNumberToObject(o, "frames", (double)s->frames);
    cJSON_AddNumberToObject(o, "mpix_frames", s->mpix_frames);
    cJSON *fa = cJSON_AddObjectToObject(o, "false_alarms_per_mpix_frame");
    cJSON *fh = cJSON_AddObjectToObject(o, "false_alarms_on_hot_per_mpix_frame");
    for (int k = 0; k < KIND_N; k++) {
        cJSON_AddNumberToObject(fa, kinds[k], ratio((double)s->fa[k], s->mpix_frames));
        cJSON_AddNumberToObject(fh, kinds[k], ratio((double)s->fa_hot[k], s->mpix_frames));
    }
    cJSON_AddNumberToObject(o, "false_alarms_non_cosmic",
                            ratio((double)(s->fa[0] + s->fa[1]), s->mpix_frames));
    cJSON_AddNumberToObject(o, "false_alarm_count", (double)(s->fa[0] + s->fa[1] + s->fa[2]));
    cJSON_AddNumberToObject(o, "centroid_rms", s->cen_n ? sqrt(s->cen_sum2 / s->cen_n) : NAN);
    cJSON_AddNumberToObject(o, "centroid_n", (double)s->cen_n);
    cJSON_AddNumberToObject(o, "streaks", (double)s->streaks);
    cJSON_AddNumberToObject(o, "streaks_whole", (double)s->streaks_whole);
    return o;
}

static cJSON *long_array(const long *v, int n)
{
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < n; i++)
        cJSON_AddItemToArray(a, cJSON_CreateNumber((double)v[i]));
    return a;
}

/* The "tracks" member. */
static cJSON *tracks_json(const eval_t *E, const ss_evt_result_t *t)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddBoolToObject(o, "enabled", E->pc.track.enabled);
    cJSON_AddNumberToObject(o, "reports", (double)E->evt.reports);
    cJSON_AddNumberToObject(o, "min_points", track_min_points(E));
    cJSON_AddNumberToObject(o, "frame_interval", frame_interval(E));
    cJSON_AddNumberToObject(o, "segments", (double)t->segments);
    cJSON_AddNumberToObject(o, "in_one", (double)t->in_one);
    cJSON_AddNumberToObject(o, "split", (double)t->split);
    cJSON_AddNumberToObject(o, "partial", (double)t->partial);
    cJSON_AddNumberToObject(o, "untracked", (double)t->untracked);
    cJSON_AddNumberToObject(o, "completeness", t->completeness);
    cJSON_AddNumberToObject(o, "segments_snr7", (double)t->segments_snr7);
    cJSON_AddNumberToObject(o, "in_one_snr7", (double)t->in_one_snr7);
    cJSON_AddNumberToObject(o, "completeness_snr7", t->completeness_snr7);
    cJSON_AddNumberToObject(o, "crossing_segments", (double)t->crossing_segments);
    cJSON_AddNumberToObject(o, "crossing_in_one", (double)t->crossing_in_one);
    cJSON_AddNumberToObject(o, "completeness_crossing", t->completeness_crossing);
    cJSON_AddItemToObject(o, "speed_bins", num_array(ss_evt_speed_bins, SS_EVT_SPEED_BINS));
    cJSON_AddItemToObject(o, "segments_by_speed", long_array(t->seg_speed, SS_EVT_SPEED_BINS));
    cJSON_AddItemToObject(o, "in_one_by_speed", long_array(t->in_one_speed, SS_EVT_SPEED_BINS));
    cJSON_AddItemToObject(o, "completeness_by_speed",
                          num_array(t->completeness_speed, SS_EVT_SPEED_BINS));
    cJSON_AddNumberToObject(o, "tracks", (double)t->tracks);
    cJSON_AddNumberToObject(o, "pure", (double)t->pure);
    cJSON_AddNumberToObject(o, "purity", t->purity);
    cJSON_AddNumberToObject(o, "false_tracks", (double)t->false_tracks);
    cJSON_AddNumberToObject(o, "false_per_100_mpix_frames", t->false_per_100mpix);
    cJSON_AddNumberToObject(o, "velocity_n", (double)t->vel_n);
    cJSON_AddNumberToObject(o, "velocity_rms", t->vel_rms);
    cJSON_AddNumberToObject(o, "velocity_rel_rms", t->vel_rel_rms);
    cJSON_AddItemToObject(o, "velocity_n_by_speed", long_array(t->vel_n_speed, SS_EVT_SPEED_BINS));
    cJSON_AddItemToObject(o, "velocity_rel_rms_by_speed",
                          num_array(t->vel_rel_rms_speed, SS_EVT_SPEED_BINS));
    return o;
}

/* The figures as one JSON object, to out. Returns 0, or -1 when it could
 * not be written. */
static int print_json(const eval_t *E, const shift_stats_t *sh, const ss_evt_result_t *tr,
                      FILE *out)
{
    const totals_t *T = &E->T;
    cJSON *o = cJSON_CreateObject();
    cJSON *cf = cJSON_AddObjectToObject(o, "config");
    cJSON_AddStringToObject(cf, "backend", ss_pipeline_backend_name(E->pipe));
    cJSON_AddNumberToObject(cf, "history", E->pc.history);
    cJSON_AddNumberToObject(cf, "min_history", ss_cfg_min_history(&E->pc));
    cJSON_AddNumberToObject(cf, "psf_sigma", E->pc.psf_sigma);
    cJSON_AddNumberToObject(cf, "thresh", E->pc.thresh);
    cJSON_AddNumberToObject(cf, "thresh_low", E->pc.thresh_low);
    cJSON_AddBoolToObject(cf, "negative", E->pc.negative);
    cJSON_AddNumberToObject(cf, "reref_px", E->pc.reref_px);
    cJSON_AddItemToObject(o, "snr_bins", num_array(SNR_BINS, N_BINS));
    cJSON *fr = cJSON_AddObjectToObject(o, "frames");
    cJSON_AddNumberToObject(fr, "total", (double)T->files);
    cJSON_AddNumberToObject(fr, "unreadable", (double)T->unreadable);
    cJSON_AddNumberToObject(fr, "without_truth", (double)T->no_truth);
    for (int s = 0; s < SS_STATUS__COUNT; s++)
        cJSON_AddNumberToObject(fr, ss_status_name((ss_frame_status_t)s), (double)T->status[s]);
    cJSON_AddNumberToObject(fr, "history_resets", (double)T->resets);
    cJSON_AddNumberToObject(fr, "rereferences", (double)T->rerefs);
    cJSON_AddNumberToObject(fr, "first_ok", (double)T->first_ok);
    long okn, okd;
    ok_share(E, &okn, &okd);
    cJSON_AddNumberToObject(fr, "ok_after_warmup", ratio((double)okn, (double)okd));
    cJSON *s = cJSON_AddObjectToObject(o, "shift");
    cJSON_AddNumberToObject(s, "frames", (double)sh->n);
    cJSON_AddNumberToObject(s, "epochs", (double)sh->epochs);
    cJSON_AddNumberToObject(s, "rms_x", sh->rms_x);
    cJSON_AddNumberToObject(s, "rms_y", sh->rms_y);
    cJSON_AddNumberToObject(s, "rms", sh->rms);
    cJSON_AddNumberToObject(s, "scatter_x", sh->scat_x);
    cJSON_AddNumberToObject(s, "scatter_y", sh->scat_y);
    cJSON_AddNumberToObject(s, "scatter", sh->scat);
    cJSON_AddNumberToObject(s, "reported_x", sh->rep_x);
    cJSON_AddNumberToObject(s, "reported_y", sh->rep_y);
    cJSON_AddNumberToObject(s, "reported", sh->rep);
    cJSON_AddNumberToObject(s, "ratio_x", sh->ratio_x);
    cJSON_AddNumberToObject(s, "ratio_y", sh->ratio_y);
    cJSON_AddNumberToObject(s, "ratio", sh->ratio);
    cJSON_AddNumberToObject(s, "gross", (double)sh->gross);
    int nm = E->o.baselines ? M__COUNT : 1;
    for (int m = 0; m < nm; m++)
        cJSON_AddItemToObject(o, METHOD_NAME[m], score_json(&T->sc[m]));
    cJSON *p = cJSON_GetObjectItemCaseSensitive(o, "pipeline");
    cJSON_AddNumberToObject(p, "negative", (double)T->sc[M_PIPE].neg_total);
    cJSON_AddNumberToObject(p, "negative_twins", (double)T->sc[M_PIPE].neg_twins);
    cJSON_AddNumberToObject(p, "invalid_residual", ratio((double)T->res_nan, (double)T->res_px));
    cJSON_AddNumberToObject(p, "invalid_residual_interior",
                            ratio((double)T->res_nan_in, (double)T->res_px_in));
    cJSON_AddNumberToObject(p, "invalid_frame", ratio((double)T->cal_nan, (double)T->cal_px));
    cJSON_AddNumberToObject(p, "invalid_frame_interior",
                            ratio((double)T->cal_nan_in, (double)T->cal_px_in));
    cJSON_AddNumberToObject(p, "truncated", (double)T->truncated);
    cJSON_AddNumberToObject(p, "truncated_frames", (double)T->truncated_frames);
    cJSON_AddNumberToObject(p, "truncated_max", (double)T->truncated_max);
    if (tr)
        cJSON_AddItemToObject(o, "tracks", tracks_json(E, tr));
    char *txt = cJSON_PrintUnformatted(o);
    int rc = txt && fprintf(out, "%s\n", txt) > 0 ? 0 : -1;
    free(txt);
    cJSON_Delete(o);
    return rc;
}

/* --json-out: the JSON object into a file as well. */
static int write_json_file(const eval_t *E, const shift_stats_t *sh, const ss_evt_result_t *tr,
                           const char *path)
{
    FILE *f = fopen(path, "w");
    int rc = f ? print_json(E, sh, tr, f) : -1;
    if (f && fclose(f) != 0)
        rc = -1;
    if (rc != 0)
        fprintf(stderr, PROG ": cannot write %s: %s\n", path, strerror(errno));
    return rc;
}

/* ======================================================================
 * main
 * ==================================================================== */

enum { O_NO_NEGATIVE = 256, O_NEGATIVE, O_NO_BASELINES, O_JSON_OUT };

static const struct option long_opts[] = {
    { "truth", required_argument, NULL, 't' },
    { "config", required_argument, NULL, 'c' },
    { "set", required_argument, NULL, 's' },
    { "backend", required_argument, NULL, 'b' },
    { "negative", no_argument, NULL, O_NEGATIVE },
    { "no-negative", no_argument, NULL, O_NO_NEGATIVE },
    { "no-baselines", no_argument, NULL, O_NO_BASELINES },
    { "json", no_argument, NULL, 'j' },
    { "json-out", required_argument, NULL, O_JSON_OUT },
    { "quiet", no_argument, NULL, 'q' },
    { "verbose", no_argument, NULL, 'v' },
    { "help", no_argument, NULL, 'h' },
    { NULL, 0, NULL, 0 },
};

/* Returns -1 to go on, else the exit status. */
static int parse_args(int argc, char **argv, opts_t *o)
{
    memset(o, 0, sizeof *o);
    o->backend = SS_BACKEND_CPU;
    o->negative = 1;
    o->baselines = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":t:c:s:b:jqvh", long_opts, NULL)) != -1) {
        switch (c) {
        case 't': o->truth = optarg; break;
        case 'c': o->config = optarg; break;
        case 's':
            if (o->n_sets == MAX_SETS) {
                fprintf(stderr, PROG ": more than %d --set options\n", MAX_SETS);
                return EXIT_USAGE;
            }
            o->sets[o->n_sets++] = optarg;
            break;
        case 'b':
            if (strcmp(optarg, "cpu") == 0)
                o->backend = SS_BACKEND_CPU;
            else if (strcmp(optarg, "cuda") == 0)
                o->backend = SS_BACKEND_CUDA;
            else if (strcmp(optarg, "auto") == 0)
                o->backend = SS_BACKEND_AUTO;
            else {
                fprintf(stderr, PROG ": --backend: '%s' is not cpu, cuda or auto\n", optarg);
                return EXIT_USAGE;
            }
            break;
        case O_NEGATIVE: o->negative = 1; break;
        case O_NO_NEGATIVE: o->negative = 0; break;
        case O_NO_BASELINES: o->baselines = 0; break;
        case 'j': o->json = 1; break;
        case O_JSON_OUT: o->json_out = optarg; break;
        case 'q': o->quiet = 1; break;
        case 'v': o->verbose = 1; break;
        case 'h': usage(stdout); return 0;
        case ':':
            fprintf(stderr, PROG ": %s needs a value (see --help)\n", argv[optind - 1]);
            return EXIT_USAGE;
        default:
            fprintf(stderr, PROG ": unknown option '%s' (see --help)\n", argv[optind - 1]);
            return EXIT_USAGE;
        }
    }
    if (!o->truth || optind >= argc) {
        fprintf(stderr, PROG ": --truth FILE and at least one INPUT are required (see --help)\n");
        return EXIT_USAGE;
    }
    return -1;
}

/* The largest frame of the inputs, in pixels; files that cannot be
 * probed are left to the read (which reports them). */
static size_t largest_frame(const paths_t *ps)
{
    size_t m = 0;
    for (int i = 0; i < ps->n; i++) {
        int w, h;
        ss_dtype_t dt;
        char err[SS_PATH_MAX + 256];
        if (ss_fits_probe(ps->p[i], &w, &h, &dt, err, sizeof err) == SS_OK)
            m = SS_MAX(m, (size_t)w * (size_t)h);
    }
    return m;
}

static int eval_open(eval_t *E, size_t max_px)
{
    char err[512];
    E->pipe = ss_pipeline_new(&E->pc, "eval", err, sizeof err);
    if (!E->pipe) {
        fprintf(stderr, PROG ": %s\n", err);
        return -1;
    }
    E->frame.capacity = max_px * sizeof(float);     /* the widest pixel type */
    E->frame.pixels = malloc(E->frame.capacity);
    E->plane = malloc(max_px * sizeof(float));
    E->T.first_ok = -1;
    E->ref_sx = E->ref_sy = NAN;
    if (!E->frame.pixels || !E->plane || ss_result_init(&E->res, max_px, E->pc.max_detections) ||
        ring_init(&E->hist, E->pc.history) != 0)
        return -1;
    E->det_ix = malloc((size_t)SS_MAX(E->res.dets.capacity, 1) * sizeof *E->det_ix);
    if (!E->det_ix)
        return -1;
    if (E->o.baselines && (base_ring_init(&E->bring, E->pc.history, max_px) != 0 ||
                           base_work_init(&E->bw, max_px, E->pc.history, E->pc.max_detections) != 0))
        return -1;
    return 0;
}

static void eval_close(eval_t *E)
{
    ss_pipeline_destroy(&E->pipe);
    free(E->frame.pixels);
    free(E->plane);
    ss_result_free(&E->res);
    free(E->hist.sx);
    free(E->hist.sy);
    base_ring_free(&E->bring);
    base_work_free(&E->bw);
    free(E->T.shifts);
    free(E->det_ix);
    ss_evt_free(&E->evt);
    truth_free(&E->truth);
}

int main(int argc, char **argv)
{
    static eval_t E;
    int rc = parse_args(argc, argv, &E.o);
    if (rc >= 0)
        return rc;
    ss_log_setup(E.o.quiet ? SS_LOG_ERR : SS_LOG_WARNING, 0);
    paths_t ps = { 0 };
    if (load_pipeline_cfg(&E.o, &E.pc) != 0 || collect_inputs(argv + optind, argc - optind, &ps) != 0) {
        paths_free(&ps);
        return EXIT_USAGE;
    }
    E.pc.backend = E.o.backend;
    if (E.o.negative)
        E.pc.negative = 1;
    if (ps.n == 0) {
        fprintf(stderr, PROG ": no FITS frames in the inputs\n");
        paths_free(&ps);
        return EXIT_USAGE;
    }
    if (truth_load(E.o.truth, &E.truth) != 0) {
        paths_free(&ps);
        truth_free(&E.truth);
        return EXIT_READ;
    }
    size_t max_px = largest_frame(&ps);
    rc = 0;
    if (max_px == 0 || eval_open(&E, max_px) != 0) {
        fprintf(stderr, PROG ": %s\n", max_px ? "cannot set up (out of memory?)"
                                              : "none of the inputs can be read");
        rc = EXIT_READ;
    }
    int unreadable = 0, broken = 0;
    for (int i = 0; rc == 0 && !broken && i < ps.n; i++) {
        int r = eval_file(&E, ps.p[i]);
        broken = r < 0;
        unreadable |= r > 0;            /* remembered; the rest is still scored */
    }
    if (broken || unreadable)
        rc = EXIT_READ;
    if (E.pipe && E.T.files > 0) {
        shift_stats_t sh;
        shift_summary(&E.T, &sh);
        ss_evt_result_t trs;
        const ss_evt_result_t *tr = score_tracks(&E, &trs);
        if (E.o.json)
            (void)print_json(&E, &sh, tr, stdout);
        else
            print_text(&E, &sh, tr);
        if (E.o.json_out && write_json_file(&E, &sh, tr, E.o.json_out) != 0)
            rc = EXIT_READ;
    }
    eval_close(&E);
    paths_free(&ps);
    return rc;
}
