/*
 * synth_cli.c — skysieve-synth: write a synthetic star-field sequence as
 * FITS files plus a truth file (tools/synth.h is the generator).
 *
 *   skysieve-synth --out DIR --frames N [options]
 *
 * Writes DIR/frame_00000.fits ... (one image per frame, the generator's
 * pixel type; u16 as BITPIX 16 + BZERO 32768) and DIR/truth.jsonl (one JSON
 * line per frame: true shift, seeing, transparency, pixel noise, sky level,
 * frame size, and every mover, streak and cosmic ray with its frame
 * position, flux and SNR; frame 0's line also lists the hot pixels; with
 * a speed list, crossing pairs or --truth-motion each mover also carries
 * its sky-fixed velocity and its segment, the count of its wraps; a mover
 * trailed over its exposure carries its trail's ends x0, y0, x1, y1).
 * With overscan columns or a varying height, each file carries TRIMSEC and
 * DATASEC (the image columns, the full configured height: past NAXIS2 on a
 * cut frame, as real cameras write them) and BIASSEC (the overscan
 * columns); pipeline/frame_fits.c writes TRIMSEC, and DATASEC/BIASSEC are
 * added here with CFITSIO (the frame writer has no field for them).
 * Exit status: 0 done, 1 a file could not be written, 2 bad usage.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <fitsio.h>

#include "pipeline/frame_fits.h"
#include "config/config.h"
#include "tools/synth.h"

#define PROG "skysieve-synth"
#define EXIT_USAGE 2
#define MAX_FRAMES 10000000

/* The defaults: those of the daemon's built-in synthetic feed (or the
 * generator's own when memory is short), with movers trailed over their
 * exposure (the feed has no key for it: its movers, 1.5 px/frame over a
 * 0.5 s exposure at 1 frame/s, stay points either way). */
static void cli_defaults(ss_synth_cfg_t *c)
{
    if (ss_feed_synth_defaults(c) != 0)
        ss_synth_defaults(c);
    c->trail = 1;
}

static void usage(FILE *out)
{
    ss_synth_cfg_t d;
    cli_defaults(&d);
    fprintf(out,
"Usage: " PROG " --out DIR --frames N [options]\n"
"Write a synthetic star-field sequence: DIR/frame_00000.fits, ... and\n"
"DIR/truth.jsonl (one JSON line per frame: true shift s_t, seeing,\n"
"transparency, pixel noise, and each mover/streak/cosmic ray with its frame\n"
"position (0-based px), flux (ADU) and SNR). Same seed, same options: the\n"
"same pixels, bit for bit. A star at sky position p appears at p - s_t.\n"
"The defaults (in brackets) are those of skysieved's built-in synthetic\n"
"feed (source.synth.*): without options, the sky the demo shows.\n"
"\n"
"Output\n"
"  -o, --out DIR           output directory (created if missing)   [required]\n"
"  -n, --frames N          number of frames                        [required]\n"
"  -q, --quiet             no summary line\n"
"  -h, --help              this text\n"
"Frame\n"
"      --size WxH          frame size                               [%dx%d]\n"
"      --width W, --height H\n"
"      --dtype T           u8|u16|i16|i32|f32                       [%s]\n"
"      --seed S            random seed                              [%llu]\n"
"      --interval S        seconds between frames (timestamps)      [%g]\n"
"      --start-mjd MJD     time of frame 0; 0 = now                 [%g]\n"
"      --exposure S        exposure time in the header; a mover moves\n"
"                          speed*S/interval px during it (--no-trail) [%g]\n"
"Stars (dN/dF ~ F^-alpha between flux-min and flux-max, ADU)\n"
"      --stars N           mean number of stars in the frame        [%d]\n"
"      --flux-min F, --flux-max F, --star-alpha A                   [%g, %g, %g]\n"
"      --psf gauss|moffat  PSF shape (Moffat with the Gaussian's FWHM) [gauss]\n"
"      --psf-sigma PX      Gaussian sigma                           [%g]\n"
"      --moffat-beta B     Moffat beta (> 1)                        [%g]\n"
"      --seeing-wobble W   fractional rms sigma change per frame    [%g]\n"
"Sky, detector, noise (ADU)\n"
"      --sky ADU           sky level at the frame centre            [%g]\n"
"      --sky-grad DX,DY    sky gradient, ADU per px                 [%g,%g]\n"
"      --gain G            e-/ADU for Poisson noise; 0 = none       [%g]\n"
"      --read-noise ADU    read noise rms                           [%g]\n"
"      --bias ADU          offset added to every pixel              [%g]\n"
"      --saturation ADU    clip level; 0 = the type's maximum       [%g]\n"
"      --hot N             hot pixels, fixed on the detector        [%d]\n"
"      --hot-level ADU     their level above the sky (x0.5..1.5)    [%g]\n"
"      --cosmic-rate R     cosmic-ray hits per Mpix per frame       [%g]\n"
"      --noise gauss|uniform  gauss: Poisson (gain) + read noise; uniform:\n"
"                          integer U{0..K} alone (INDI simulator)   [gauss]\n"
"      --uniform-max K     K of the uniform noise, 0..65535         [%d]\n"
"      --overscan N        overscan columns at the right (bias + read noise);\n"
"                          the FITS get TRIMSEC/DATASEC/BIASSEC     [%d]\n"
"      --height-jitter K   each frame loses U{0..K} rows at the bottom of the sky;\n"
"                          TRIMSEC/DATASEC keep the full height     [%d]\n"
"Telescope motion and sky (px)\n"
"      --jitter PX         rms pointing jitter per axis per frame   [%g]\n"
"      --drift DX,DY       drift per frame                          [%g,%g]\n"
"      --jump-prob P       probability per frame of a pointing jump [%g]\n"
"      --jump-px PX        size of a jump (random direction)        [%g]\n"
"      --transparency T    fractional rms transparency change       [%g]\n"
"      --jump-at T         frame at which the pointing jumps by jump-px; 0 = none [%d]\n"
"      --sky-var V         fractional rms of the sky level per frame [%g]\n"
"      --sky-trend R       fractional sky change per frame, sky*(1+R)^t [%g]\n"
"      --stray ADU         stray-light glow fixed on the detector, ADU at its\n"
"                          centre (x(1+N(0,0.2)) per frame, direction drifting) [%g]\n"
"      --star-snap         stars on whole-pixel sky positions         [off]\n"
"Transients (SNR: peak matched-filter SNR, F = snr*sigma_pix*sqrt(pi)*(2k^2+1/12)/k,\n"
"k = psf_sigma;\n"
"the truth's snr is the peak in the frame's seeing and transparency;\n"
"streaks: SNR on the streak axis = flux per px of length / sigma_pix)\n"
"      --movers N          moving point sources (max %d)           [%d]\n"
"      --mover-snr S                                                [%g]\n"
"      --mover-snr-list L  comma list: mover i gets L[i %% len]       [off]\n"
"      --mover-speed PX    px per frame, random direction           [%g]\n"
"      --mover-speed-list L  comma list of speeds (px per frame): mover i gets\n"
"                          L[(i + i / len(snr list)) %% len], so that with an SNR\n"
"                          list every speed meets several SNRs        [off]\n"
"      --crossing N        N pairs of extra movers whose paths cross at frame\n"
"                          --crossing-at, at angles 180*(k+0.5)/N deg  [0]\n"
"      --crossing-at T     the frame of the crossings              [frames/2]\n"
"      --wrap-scatter      a mover that wraps re-appears at a random place, not at\n"
"                          the periodic one (where a fast mover's positions every\n"
"                          few frames line up like a slower mover's)   [off]\n"
"      --truth-motion      each mover's velocity (vx, vy px/frame; vx_s, vy_s\n"
"                          px/s) and segment (+1 at every wrap) in the truth;\n"
"                          on with --mover-speed-list or --crossing   [off]\n"
"      --no-trail          draw every mover as a point; by default one whose path\n"
"                          during the exposure is longer than sqrt(12) sigma\n"
"                          (PSF or --mover-sigma) is that trail, centred on its\n"
"                          position, SNR kept as the peak matched-filter SNR,\n"
"                          its ends in the truth (x0, y0 at the start) [trail]\n"
"      --mover-sigma PX    movers as Gaussians of this sigma (comets),\n"
"                          SNR kept as the peak matched-filter SNR; 0 = the PSF [%g]\n"
"      --streak-prob P     probability per frame of a streak        [%g]\n"
"      --streak-snr S                                               [%g]\n"
"      --streak-len MIN,MAX  streak length range, px                [%g,%g]\n"
"World coordinates\n"
"      --wcs               write a TAN WCS that follows the pointing\n"
"      --wcs-center RA,DEC sky at frame 0's centre, deg             [%g,%g]\n"
"      --wcs-scale ARCSEC  arcsec per px                            [%g]\n",
            d.width, d.height, ss_dtype_name(d.dtype), (unsigned long long)d.seed,
            d.frame_interval, d.start_mjd, d.exposure, d.n_stars, d.flux_min, d.flux_max,
            d.star_alpha, d.psf_sigma, d.moffat_beta, d.seeing_wobble, d.sky, d.sky_grad_x,
            d.sky_grad_y, d.gain, d.read_noise, d.bias, d.saturation, d.n_hot, d.hot_level,
            d.cosmic_rate, d.uniform_max, d.overscan, d.height_jitter, d.jitter, d.drift_x,
            d.drift_y, d.jump_prob, d.jump_px, d.transparency, d.jump_at, d.sky_var,
            d.sky_trend, d.stray, SS_SYNTH_MAX_OBJ, d.n_movers, d.mover_snr, d.mover_speed,
            d.mover_sigma, d.streak_prob, d.streak_snr, d.streak_len_min, d.streak_len_max, d.wcs_ra,
            d.wcs_dec, d.wcs_scale);
}

static int bad(const char *opt, const char *arg, const char *what)
{
    fprintf(stderr, PROG ": --%s: '%s' is not %s (see --help)\n", opt, arg, what);
    return -1;
}

static int parse_dbl(const char *opt, const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end != '\0' || errno == ERANGE || !isfinite(v))
        return bad(opt, s, "a number");
    *out = v;
    return 0;
}

static int parse_int(const char *opt, const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || *end != '\0' || errno == ERANGE || v < lo || v > hi) {
        char what[96];
        snprintf(what, sizeof what, "an integer in [%ld, %ld]", lo, hi);
        return bad(opt, s, what);
    }
    *out = v;
    return 0;
}

/* "A,B" (or "AxB" for sizes): two numbers. */
static int parse_pair(const char *opt, const char *s, char sep, double *a, double *b)
{
    const char *p = strchr(s, sep);
    char what[64];
    snprintf(what, sizeof what, "two numbers as A%cB", sep);
    if (!p)
        return bad(opt, s, what);
    char first[64];
    size_t L = (size_t)(p - s);
    if (L == 0 || L >= sizeof first)
        return bad(opt, s, what);
    memcpy(first, s, L);
    first[L] = '\0';
    char *end;
    errno = 0;
    *a = strtod(first, &end);
    if (*end || errno || !isfinite(*a))
        return bad(opt, s, what);
    *b = strtod(p + 1, &end);
    if (end == p + 1 || *end || errno || !isfinite(*b))
        return bad(opt, s, what);
    return 0;
}

/* "A,B,C": up to SS_SYNTH_MAX_SNR_LIST numbers. */
static int parse_list(const char *opt, const char *s, double *out, int *n)
{
    char what[64];
    snprintf(what, sizeof what, "a comma list of up to %d numbers", SS_SYNTH_MAX_SNR_LIST);
    int k = 0;
    const char *p = s;
    for (;;) {
        char *end;
        errno = 0;
        double v = strtod(p, &end);
        if (end == p || errno || !isfinite(v) || k >= SS_SYNTH_MAX_SNR_LIST)
            return bad(opt, s, what);
        out[k++] = v;
        if (*end == '\0')
            break;
        if (*end != ',')
            return bad(opt, s, what);
        p = end + 1;
    }
    *n = k;
    return 0;
}

/* DATASEC (= the TRIMSEC the frame writer put there) and BIASSEC, added
 * to a written file with CFITSIO (then its checksum is renewed). The
 * sections declare the configured height, past NAXIS2 on a cut frame. */
static int add_sections(const char *path, const ss_synth_cfg_t *c)
{
    fitsfile *fp;
    int st = 0;
    char sec[80];
    if (fits_open_diskfile(&fp, path, READWRITE, &st))
        goto fail;
    snprintf(sec, sizeof sec, "[1:%d,1:%d]", c->width, c->height);
    fits_update_key_str(fp, "DATASEC", sec, "image section (the full height)", &st);
    if (c->overscan > 0) {
        snprintf(sec, sizeof sec, "[%d:%d,1:%d]", c->width + 1, c->width + c->overscan, c->height);
        fits_update_key_str(fp, "BIASSEC", sec, "overscan section", &st);
    }
    fits_write_chksum(fp, &st);
    fits_close_file(fp, &st);
    if (!st)
        return 0;
fail: {
    char msg[FLEN_STATUS];
    fits_get_errstatus(st, msg);
    fprintf(stderr, PROG ": %s: cannot add DATASEC/BIASSEC: %s\n", path, msg);
    return -1;
}
}

/* mkdir -p */
static int make_dirs(const char *dir)
{
    char buf[SS_PATH_MAX];
    if (!dir[0] || strlen(dir) >= sizeof buf) {
        fprintf(stderr, PROG ": --out: empty or too long a path\n");
        return -1;
    }
    ss_strlcpy(buf, dir, sizeof buf);
    for (char *p = buf + 1;; p++) {
        if (*p == '/' || *p == '\0') {
            char c = *p;
            *p = '\0';
            if (mkdir(buf, 0777) != 0 && errno != EEXIST) {
                fprintf(stderr, PROG ": cannot create %s: %s\n", buf, strerror(errno));
                return -1;
            }
            *p = c;
            if (c == '\0')
                break;
        }
    }
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        fprintf(stderr, PROG ": %s is not a directory\n", dir);
        return -1;
    }
    return 0;
}

enum {
    O_SIZE = 256, O_WIDTH, O_HEIGHT, O_DTYPE, O_SEED, O_INTERVAL, O_START, O_EXPOSURE,
    O_STARS, O_FMIN, O_FMAX, O_ALPHA, O_PSF, O_PSF_SIGMA, O_BETA, O_WOBBLE,
    O_SKY, O_SKY_GRAD, O_GAIN, O_RN, O_BIAS, O_SAT, O_HOT, O_HOT_LEVEL, O_COSMIC,
    O_JITTER, O_DRIFT, O_JUMP_PROB, O_JUMP_PX, O_TRANSP,
    O_MOVERS, O_MOVER_SNR, O_MOVER_SPEED, O_STREAK_PROB, O_STREAK_SNR, O_STREAK_LEN,
    O_WCS, O_WCS_CENTER, O_WCS_SCALE,
    O_SKY_VAR, O_SKY_TREND, O_STRAY, O_STAR_SNAP, O_NOISE, O_UNIFORM_MAX, O_OVERSCAN,
    O_HEIGHT_JITTER, O_JUMP_AT, O_MOVER_SNR_LIST, O_MOVER_SIGMA, O_MOVER_SPEED_LIST,
    O_CROSSING, O_CROSSING_AT, O_TRUTH_MOTION, O_WRAP_SCATTER, O_NO_TRAIL
};

static const struct option long_opts[] = {
    { "out", required_argument, NULL, 'o' },
    { "frames", required_argument, NULL, 'n' },
    { "quiet", no_argument, NULL, 'q' },
    { "help", no_argument, NULL, 'h' },
    { "size", required_argument, NULL, O_SIZE },
    { "width", required_argument, NULL, O_WIDTH },
    { "height", required_argument, NULL, O_HEIGHT },
    { "dtype", required_argument, NULL, O_DTYPE },
    { "seed", required_argument, NULL, O_SEED },
    { "interval", required_argument, NULL, O_INTERVAL },
    { "start-mjd", required_argument, NULL, O_START },
    { "exposure", required_argument, NULL, O_EXPOSURE },
    { "stars", required_argument, NULL, O_STARS },
    { "flux-min", required_argument, NULL, O_FMIN },
    { "flux-max", required_argument, NULL, O_FMAX },
    { "star-alpha", required_argument, NULL, O_ALPHA },
    { "psf", required_argument, NULL, O_PSF },
    { "psf-sigma", required_argument, NULL, O_PSF_SIGMA },
    { "moffat-beta", required_argument, NULL, O_BETA },
    { "seeing-wobble", required_argument, NULL, O_WOBBLE },
    { "sky", required_argument, NULL, O_SKY },
    { "sky-grad", required_argument, NULL, O_SKY_GRAD },
    { "gain", required_argument, NULL, O_GAIN },
    { "read-noise", required_argument, NULL, O_RN },
    { "bias", required_argument, NULL, O_BIAS },
    { "saturation", required_argument, NULL, O_SAT },
    { "hot", required_argument, NULL, O_HOT },
    { "hot-level", required_argument, NULL, O_HOT_LEVEL },
    { "cosmic-rate", required_argument, NULL, O_COSMIC },
    { "jitter", required_argument, NULL, O_JITTER },
    { "drift", required_argument, NULL, O_DRIFT },
    { "jump-prob", required_argument, NULL, O_JUMP_PROB },
    { "jump-px", required_argument, NULL, O_JUMP_PX },
    { "transparency", required_argument, NULL, O_TRANSP },
    { "movers", required_argument, NULL, O_MOVERS },
    { "mover-snr", required_argument, NULL, O_MOVER_SNR },
    { "mover-speed", required_argument, NULL, O_MOVER_SPEED },
    { "streak-prob", required_argument, NULL, O_STREAK_PROB },
    { "streak-snr", required_argument, NULL, O_STREAK_SNR },
    { "streak-len", required_argument, NULL, O_STREAK_LEN },
    { "wcs", no_argument, NULL, O_WCS },
    { "wcs-center", required_argument, NULL, O_WCS_CENTER },
    { "wcs-scale", required_argument, NULL, O_WCS_SCALE },
    { "sky-var", required_argument, NULL, O_SKY_VAR },
    { "sky-trend", required_argument, NULL, O_SKY_TREND },
    { "stray", required_argument, NULL, O_STRAY },
    { "star-snap", no_argument, NULL, O_STAR_SNAP },
    { "noise", required_argument, NULL, O_NOISE },
    { "uniform-max", required_argument, NULL, O_UNIFORM_MAX },
    { "overscan", required_argument, NULL, O_OVERSCAN },
    { "height-jitter", required_argument, NULL, O_HEIGHT_JITTER },
    { "jump-at", required_argument, NULL, O_JUMP_AT },
    { "mover-snr-list", required_argument, NULL, O_MOVER_SNR_LIST },
    { "mover-sigma", required_argument, NULL, O_MOVER_SIGMA },
    { "mover-speed-list", required_argument, NULL, O_MOVER_SPEED_LIST },
    { "crossing", required_argument, NULL, O_CROSSING },
    { "crossing-at", required_argument, NULL, O_CROSSING_AT },
    { "truth-motion", no_argument, NULL, O_TRUTH_MOTION },
    { "wrap-scatter", no_argument, NULL, O_WRAP_SCATTER },
    { "no-trail", no_argument, NULL, O_NO_TRAIL },
    { NULL, 0, NULL, 0 },
};

/* Apply one option to the config; -1 on a bad value (message printed). */
static int apply(int c, const char *name, const char *a, ss_synth_cfg_t *g)
{
    long v;
    double x, y;
    switch (c) {
    case O_SIZE:
        if (parse_pair(name, a, 'x', &x, &y))
            return -1;
        if (x != floor(x) || y != floor(y) || x < 1 || y < 1 || x > 65536 || y > 65536)
            return bad(name, a, "a size WxH of whole pixels (1..65536)");
        g->width = (int)x;
        g->height = (int)y;
        return 0;
    case O_WIDTH:
        if (parse_int(name, a, 1, 65536, &v))
            return -1;
        g->width = (int)v;
        return 0;
    case O_HEIGHT:
        if (parse_int(name, a, 1, 65536, &v))
            return -1;
        g->height = (int)v;
        return 0;
    case O_DTYPE:
        if (ss_dtype_parse(a, &g->dtype) != 0)
            return bad(name, a, "one of u8, u16, i16, i32, f32");
        return 0;
    case O_SEED: {
        char *end;
        errno = 0;
        unsigned long long s = strtoull(a, &end, 0);
        if (end == a || *end || errno || a[0] == '-')
            return bad(name, a, "an unsigned integer");
        g->seed = s;
        return 0;
    }
    case O_INTERVAL: return parse_dbl(name, a, &g->frame_interval);
    case O_START: return parse_dbl(name, a, &g->start_mjd);
    case O_EXPOSURE: return parse_dbl(name, a, &g->exposure);
    case O_STARS:
        if (parse_int(name, a, 0, 10000000, &v))
            return -1;
        g->n_stars = (int)v;
        return 0;
    case O_FMIN: return parse_dbl(name, a, &g->flux_min);
    case O_FMAX: return parse_dbl(name, a, &g->flux_max);
    case O_ALPHA: return parse_dbl(name, a, &g->star_alpha);
    case O_PSF:
        if (strcmp(a, "gauss") == 0 || strcmp(a, "gaussian") == 0)
            g->psf = SS_SYNTH_GAUSS;
        else if (strcmp(a, "moffat") == 0)
            g->psf = SS_SYNTH_MOFFAT;
        else
            return bad(name, a, "gauss or moffat");
        return 0;
    case O_PSF_SIGMA: return parse_dbl(name, a, &g->psf_sigma);
    case O_BETA: return parse_dbl(name, a, &g->moffat_beta);
    case O_WOBBLE: return parse_dbl(name, a, &g->seeing_wobble);
    case O_SKY: return parse_dbl(name, a, &g->sky);
    case O_SKY_GRAD: return parse_pair(name, a, ',', &g->sky_grad_x, &g->sky_grad_y);
    case O_GAIN: return parse_dbl(name, a, &g->gain);
    case O_RN: return parse_dbl(name, a, &g->read_noise);
    case O_BIAS: return parse_dbl(name, a, &g->bias);
    case O_SAT: return parse_dbl(name, a, &g->saturation);
    case O_HOT:
        if (parse_int(name, a, 0, INT_MAX, &v))
            return -1;
        g->n_hot = (int)v;
        return 0;
    case O_HOT_LEVEL: return parse_dbl(name, a, &g->hot_level);
    case O_COSMIC: return parse_dbl(name, a, &g->cosmic_rate);
    case O_JITTER: return parse_dbl(name, a, &g->jitter);
    case O_DRIFT: return parse_pair(name, a, ',', &g->drift_x, &g->drift_y);
    case O_JUMP_PROB: return parse_dbl(name, a, &g->jump_prob);
    case O_JUMP_PX: return parse_dbl(name, a, &g->jump_px);
    case O_TRANSP: return parse_dbl(name, a, &g->transparency);
    case O_MOVERS:
        if (parse_int(name, a, 0, SS_SYNTH_MAX_OBJ, &v))
            return -1;
        g->n_movers = (int)v;
        return 0;
    case O_MOVER_SNR: return parse_dbl(name, a, &g->mover_snr);
    case O_MOVER_SPEED: return parse_dbl(name, a, &g->mover_speed);
    case O_STREAK_PROB: return parse_dbl(name, a, &g->streak_prob);
    case O_STREAK_SNR: return parse_dbl(name, a, &g->streak_snr);
    case O_STREAK_LEN: return parse_pair(name, a, ',', &g->streak_len_min, &g->streak_len_max);
    case O_WCS: g->wcs = 1; return 0;
    case O_WCS_CENTER:
        g->wcs = 1;
        return parse_pair(name, a, ',', &g->wcs_ra, &g->wcs_dec);
    case O_WCS_SCALE:
        g->wcs = 1;
        return parse_dbl(name, a, &g->wcs_scale);
    case O_SKY_VAR: return parse_dbl(name, a, &g->sky_var);
    case O_SKY_TREND: return parse_dbl(name, a, &g->sky_trend);
    case O_STRAY: return parse_dbl(name, a, &g->stray);
    case O_STAR_SNAP: g->star_snap = 1; return 0;
    case O_NOISE:
        if (strcmp(a, "gauss") == 0)
            g->noise_model = SS_SYNTH_NOISE_GAUSS;
        else if (strcmp(a, "uniform") == 0)
            g->noise_model = SS_SYNTH_NOISE_UNIFORM;
        else
            return bad(name, a, "gauss or uniform");
        return 0;
    case O_UNIFORM_MAX:
        if (parse_int(name, a, 0, 65535, &v))
            return -1;
        g->uniform_max = (int)v;
        return 0;
    case O_OVERSCAN:
        if (parse_int(name, a, 0, 4096, &v))
            return -1;
        g->overscan = (int)v;
        return 0;
    case O_HEIGHT_JITTER:
        if (parse_int(name, a, 0, 32768, &v))
            return -1;
        g->height_jitter = (int)v;
        return 0;
    case O_JUMP_AT:
        if (parse_int(name, a, 0, INT_MAX, &v))
            return -1;
        g->jump_at = (int)v;
        return 0;
    case O_MOVER_SNR_LIST: return parse_list(name, a, g->mover_snr_list, &g->n_mover_snr);
    case O_MOVER_SIGMA: return parse_dbl(name, a, &g->mover_sigma);
    case O_MOVER_SPEED_LIST: return parse_list(name, a, g->mover_speed_list, &g->n_mover_speed);
    case O_CROSSING:
        if (parse_int(name, a, 0, SS_SYNTH_MAX_OBJ / 2, &v))
            return -1;
        g->n_crossing = (int)v;
        return 0;
    case O_CROSSING_AT:
        if (parse_int(name, a, 0, INT_MAX, &v))
            return -1;
        g->crossing_at = (int)v;
        return 0;
    case O_TRUTH_MOTION: g->truth_motion = 1; return 0;
    case O_WRAP_SCATTER: g->wrap_scatter = 1; return 0;
    case O_NO_TRAIL: g->trail = 0; return 0;
    }
    return -1;
}

int main(int argc, char **argv)
{
    ss_synth_cfg_t cfg;
    cli_defaults(&cfg);
    const char *out = NULL;
    long frames = -1;
    int quiet = 0, crossing_at_set = 0;

    opterr = 0;
    int c, idx;
    while ((c = getopt_long(argc, argv, ":o:n:qh", long_opts, &idx)) != -1) {
        switch (c) {
        case 'o': out = optarg; break;
        case 'n':
            if (parse_int("frames", optarg, 1, MAX_FRAMES, &frames))
                return EXIT_USAGE;
            break;
        case 'q': quiet = 1; break;
        case 'h': usage(stdout); return 0;
        case ':':
            fprintf(stderr, PROG ": %s needs a value (see --help)\n", argv[optind - 1]);
            return EXIT_USAGE;
        case '?':
            fprintf(stderr, PROG ": unknown option '%s' (see --help)\n", argv[optind - 1]);
            return EXIT_USAGE;
        default: {
            const char *name = "?";
            for (const struct option *o = long_opts; o->name; o++)
                if (o->val == c)
                    name = o->name;
            if (apply(c, name, optarg, &cfg) != 0)
                return EXIT_USAGE;
            crossing_at_set |= c == O_CROSSING_AT;
        }
        }
    }
    if (optind < argc) {
        fprintf(stderr, PROG ": unexpected argument '%s' (see --help)\n", argv[optind]);
        return EXIT_USAGE;
    }
    if (!out || frames < 0) {
        fprintf(stderr, PROG ": --out DIR and --frames N are required (see --help)\n");
        return EXIT_USAGE;
    }

    if (!crossing_at_set)
        cfg.crossing_at = (int)(frames / 2);
    ss_synth_t *s = ss_synth_new(&cfg);
    if (!s) {
        fprintf(stderr, PROG ": configuration rejected (reason above)\n");
        return EXIT_USAGE;
    }
    if (make_dirs(out) != 0) {
        ss_synth_destroy(&s);
        return 1;
    }

    int rc = 1;
    char path[SS_PATH_MAX + 32], err[SS_PATH_MAX + 256];
    const size_t line_max = ss_synth_truth_json_max(&cfg);
    char *line = malloc(line_max);
    ss_synth_truth_t *truth = malloc(sizeof *truth);
    ss_frame_t f;
    memset(&f, 0, sizeof f);
    f.capacity = ss_synth_frame_bytes(&cfg);
    f.pixels = malloc(f.capacity);
    FILE *tf = NULL;
    if (!line || !truth || !f.pixels) {
        fprintf(stderr, PROG ": out of memory\n");
        goto done;
    }
    snprintf(path, sizeof path, "%s/truth.jsonl", out);
    tf = fopen(path, "w");
    if (!tf) {
        fprintf(stderr, PROG ": cannot create %s: %s\n", path, strerror(errno));
        goto done;
    }
    for (long t = 0; t < frames; t++) {
        ss_err_t e = ss_synth_next(s, &f, truth);
        if (e != SS_OK) {
            fprintf(stderr, PROG ": frame %ld: %s\n", t, ss_strerror(e));
            goto done;
        }
        snprintf(path, sizeof path, "%s/frame_%05ld.fits", out, t);
        ss_strlcpy(f.meta.source, path, sizeof f.meta.source);
        if (ss_fits_write_frame(path, &f, err, sizeof err) != SS_OK) {
            fprintf(stderr, PROG ": %s\n", err);
            goto done;
        }
        if ((cfg.overscan > 0 || cfg.height_jitter > 0) && add_sections(path, &cfg) != 0)
            goto done;
        int n = ss_synth_truth_json(truth, line, line_max);
        if (n < 0 || fprintf(tf, "%s\n", line) < 0) {
            fprintf(stderr, PROG ": cannot write the truth of frame %ld\n", t);
            goto done;
        }
    }
    if (fclose(tf) != 0) {
        tf = NULL;
        fprintf(stderr, PROG ": cannot write %s/truth.jsonl: %s\n", out, strerror(errno));
        goto done;
    }
    tf = NULL;
    if (!quiet)
        printf("wrote %ld frames (%dx%d %s, seed %llu) and truth.jsonl to %s\n", frames,
               cfg.width, cfg.height, ss_dtype_name(cfg.dtype), (unsigned long long)cfg.seed, out);
    rc = 0;
done:
    if (tf)
        fclose(tf);
    free(f.pixels);
    free(truth);
    free(line);
    ss_synth_destroy(&s);
    return rc;
}
