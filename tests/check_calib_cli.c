/*
 * check_calib_cli.c — skysieve-calib (tools/calib_cli.c), run as the
 * station runs it, on raw calibration frames written here with known
 * content: a per-frame, per-row overscan in BIASSEC, a bias pattern, a dark
 * pattern, a flat-field gain, small frame-to-frame offsets (so that the
 * MAD is not 0) and planted outliers (cosmic-ray hits, a saturated pixel)
 * that the sigma clipping must reject. The masters must come out as the
 * planted patterns (to a tolerance), with the header the daemon reads
 * (EXPTIME, LTV origin) and the provenance; disagreeing inputs and bad
 * usage give their exit codes.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pipeline/frame_fits.h"
#include "ss_test.h"

enum { W = 40, H = 30, TW = 32, N = 7 };    /* TRIMSEC [1:32,1:30], BIASSEC [33:40,1:30] */

static char dir[64];

/* Run skysieve-calib with args; its stdout and stderr into out. */
static int run_calib(const char *args, char *out, size_t n)
{
    const char *bd = getenv("SKYSIEVE_BINARY_DIR");
    ck_assert_msg(bd != NULL, "SKYSIEVE_BINARY_DIR is not set (run through ctest)");
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s/tools/skysieve-calib' %s 2>&1", dir, bd, args);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    const size_t got = fread(out, 1, n - 1, p);
    out[got] = '\0';
    const int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The planted patterns (region pixels). */
static double bias_pat(int x, int y) { return 20.0 + (x * 3 + y * 5) % 17; }
static double dark_pat(int x, int y) { return 2.0 + (x + 2 * y) % 7; }      /* ADU in 30 s */
static double gain_pat(int x, int y) { return 0.9 + 0.2 * ((x * 7 + y * 11) % 13) / 12.0; }
static double overscan_of(int t, int y) { return 1000.0 + 5.0 * t + y; }

typedef enum { RAW_BIAS, RAW_DARK, RAW_FLAT } raw_kind_t;

/* Raw frame t of a kind into dir/name: u16, TRIMSEC, BIASSEC, EXPTIME. */
static void write_raw(const char *name, raw_kind_t k, int t, double exptime, int h)
{
    uint16_t *px = malloc((size_t)W * h * sizeof *px);
    ck_assert_ptr_nonnull(px);
    const double delta = t - 3;                 /* -3..3: the frames' spread */
    const double level = 10000.0 + 500.0 * t;   /* flats' illumination */
    for (int y = 0; y < h; y++)
        for (int x = 0; x < W; x++) {
            double v = overscan_of(t, y);
            if (x < TW) {
                v += bias_pat(x, y) + delta;
                if (k != RAW_BIAS)
                    v += dark_pat(x, y) * exptime / 30.0;
                if (k == RAW_FLAT)
                    v += gain_pat(x, y) * level;
            }
            px[y * W + x] = (uint16_t)lround(v);
        }
    /* outliers: two hits on one pixel, one on another, a saturated pixel
     * (the last two in the frame with offset 0, so that the median of the
     * rest is still the pattern) */
    if (t == 0 || t == 4)
        px[5 * W + 5] = (uint16_t)(px[5 * W + 5] + 4000);
    if (t == 3) {
        px[10 * W + 20] = (uint16_t)(px[10 * W + 20] + 30000);
        px[7 * W + 7] = 65535;
    }
    ss_frame_t f = { .width = W, .height = h, .dtype = SS_DT_U16, .pixels = px,
                     .capacity = (size_t)W * h * 2 };
    ss_frame_meta_clear(&f.meta);
    f.meta.exposure = exptime;
    f.meta.trim_w = TW;
    f.meta.trim_h = h;
    f.meta.bias_x0 = TW;
    f.meta.bias_w = W - TW;
    f.meta.bias_h = h;
    char path[256], err[400];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    ck_assert_msg(ss_fits_write_frame(path, &f, err, sizeof err) == SS_OK, "%s", err);
    free(px);
}

static void write_set(const char *prefix, raw_kind_t k, double exptime)
{
    for (int t = 0; t < N; t++) {
        char name[64];
        snprintf(name, sizeof name, "%s%d.fits", prefix, t);
        write_raw(name, k, t, exptime, H);
    }
}

/* A master read back: TW×H floats, its header through the daemon's reader. */
static float *read_master(const char *name, ss_fits_master_t *info)
{
    char path[256], err[400];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    float *px = NULL;
    int w = 0, h = 0;
    ck_assert_msg(ss_fits_read_master(path, &px, &w, &h, info, err, sizeof err) == SS_OK, "%s",
                  err);
    ck_assert_int_eq(w, TW);
    ck_assert_int_eq(h, H);
    /* the daemon places it at the region's origin, from LTV1/LTV2 */
    ck_assert(info->has_origin && info->origin_x == 0 && info->origin_y == 0);
    return px;
}

/* max |master - want(x, y)| over the region */
static double max_err(const float *m, double (*want)(int, int), double scale)
{
    double worst = 0.0;
    for (int y = 0; y < H; y++)
        for (int x = 0; x < TW; x++)
            worst = fmax(worst, fabs(m[y * TW + x] - scale * want(x, y)));
    return worst;
}

static void make_dir(void)
{
    ss_strlcpy(dir, "/tmp/check_calib_cli.XXXXXX", sizeof dir);
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void remove_dir(void)
{
    ck_assert_int_eq(rmtree(dir), 0);
}

/* bias: per-row overscan off, then the clipped median is the pattern
 * exactly (the offsets -3..3 have median 0); the pixel with two hits is
 * the pattern only because they are clipped: --iters 0 (the plain median)
 * leaves it 2 ADU off. */
START_TEST(test_master_bias)
{
    make_dir();
    write_set("b", RAW_BIAS, 0.0);
    char out[4096];
    ck_assert_msg(run_calib("bias --overscan row -o mbias.fits b0.fits b1.fits b2.fits b3.fits "
                            "b4.fits b5.fits b6.fits", out, sizeof out) == 0, "%s", out);
    ss_fits_master_t info;
    float *m = read_master("mbias.fits", &info);
    ck_assert_msg(max_err(m, bias_pat, 1.0) < 1e-3, "bias off by %g", max_err(m, bias_pat, 1.0));
    ck_assert(info.exposure == 0.0);
    free(m);

    ck_assert_int_eq(run_calib("bias --overscan row --iters 0 -o plain.fits b?.fits", out,
                               sizeof out), 0);
    m = read_master("plain.fits", &info);
    ck_assert_msg(fabs(m[5 * TW + 5] - (bias_pat(5, 5) + 2.0)) < 1e-3, "unclipped %g",
                  (double)m[5 * TW + 5]);
    free(m);

    /* the scalar overscan leaves each row's offset (y - the median row) in */
    ck_assert_int_eq(run_calib("bias --overscan scalar -o scal.fits b?.fits", out, sizeof out), 0);
    m = read_master("scal.fits", &info);
    ck_assert(fabs(m[0] - (bias_pat(0, 0) - 14.5)) < 1e-3);
    ck_assert(fabs(m[29 * TW] - (bias_pat(0, 29) + 14.5)) < 1e-3);
    free(m);

    /* the provenance */
    char path[256];
    snprintf(path, sizeof path, "%s/mbias.fits", dir);
    FILE *fp = fopen(path, "rb");
    ck_assert_ptr_nonnull(fp);
    char hdr[2880 * 2 + 1];
    const size_t got = fread(hdr, 1, sizeof hdr - 1, fp);
    hdr[got] = '\0';
    fclose(fp);
    ck_assert_ptr_nonnull(strstr(hdr, "IMAGETYP= 'bias"));
    ck_assert_ptr_nonnull(strstr(hdr, "NCOMBINE=                    7"));
    ck_assert_ptr_nonnull(strstr(hdr, "OVERSCAN= 'row"));
    ck_assert_ptr_nonnull(strstr(hdr, "HISTORY skysieve-calib bias: sigma-clipped median of 7"));
    remove_dir();
}
END_TEST

/* dark: bias master and overscan off, the clipped median is the dark
 * pattern; its EXPTIME is the inputs'; exposures that differ by more than
 * 1 % are an error unless --scale-to. */
START_TEST(test_master_dark)
{
    make_dir();
    write_set("b", RAW_BIAS, 0.0);
    write_set("d", RAW_DARK, 30.0);
    char out[4096];
    ck_assert_msg(run_calib("bias --overscan row -o mbias.fits b?.fits", out, sizeof out) == 0,
                  "%s", out);
    ck_assert_msg(run_calib("dark --overscan row --bias mbias.fits -o mdark.fits d?.fits", out,
                            sizeof out) == 0, "%s", out);
    ss_fits_master_t info;
    float *m = read_master("mdark.fits", &info);
    ck_assert_msg(max_err(m, dark_pat, 1.0) < 1e-3, "dark off by %g", max_err(m, dark_pat, 1.0));
    ck_assert(info.exposure == 30.0);
    free(m);

    write_raw("d3.fits", RAW_DARK, 3, 45.0, H);     /* one of another exposure */
    ck_assert_int_eq(run_calib("dark --overscan row --bias mbias.fits -o x.fits d?.fits", out,
                               sizeof out), 1);
    ck_assert_msg(strstr(out, "d3.fits") && strstr(out, "1 %"), "%s", out);
    char xpath[256];
    snprintf(xpath, sizeof xpath, "%s/x.fits", dir);
    ck_assert_int_eq(access(xpath, F_OK), -1);
    ck_assert_msg(run_calib("dark --overscan row --bias mbias.fits --scale-to 30 -o x.fits "
                            "d?.fits", out, sizeof out) == 0, "%s", out);
    m = read_master("x.fits", &info);
    ck_assert(info.exposure == 30.0);
    ck_assert_msg(max_err(m, dark_pat, 1.0) <= 1.0, "scaled dark off by %g",
                  max_err(m, dark_pat, 1.0));
    free(m);
    remove_dir();
}
END_TEST

/* flat: bias and the exposure-scaled dark off, each input over its median,
 * the master over its median: the gain pattern over its median. */
START_TEST(test_master_flat)
{
    make_dir();
    write_set("b", RAW_BIAS, 0.0);
    write_set("d", RAW_DARK, 30.0);
    write_set("f", RAW_FLAT, 10.0);
    char out[4096];
    ck_assert_int_eq(run_calib("bias --overscan row -o mbias.fits b?.fits", out, sizeof out), 0);
    ck_assert_int_eq(run_calib("dark --overscan row --bias mbias.fits -o mdark.fits d?.fits", out,
                               sizeof out), 0);
    ck_assert_msg(run_calib("flat --overscan row --bias mbias.fits --dark mdark.fits "
                            "-o mflat.fits f?.fits", out, sizeof out) == 0, "%s", out);
    ss_fits_master_t info;
    float *m = read_master("mflat.fits", &info);
    double g[TW * H];
    for (int y = 0; y < H; y++)
        for (int x = 0; x < TW; x++)
            g[y * TW + x] = gain_pat(x, y);
    /* the gain's median (an even count: the mean of the middle two) */
    double s[TW * H];
    memcpy(s, g, sizeof s);
    for (int i = 1; i < TW * H; i++)
        for (int k = i; k > 0 && s[k - 1] > s[k]; k--) {
            const double t = s[k];
            s[k] = s[k - 1];
            s[k - 1] = t;
        }
    const double med = 0.5 * (s[TW * H / 2 - 1] + s[TW * H / 2]);
    double worst = 0.0;
    for (int i = 0; i < TW * H; i++)
        worst = fmax(worst, fabs(m[i] - g[i] / med));
    ck_assert_msg(worst < 1e-3, "flat off by %g", worst);
    free(m);
    remove_dir();
}
END_TEST

/* Inputs of different sizes, unreadable inputs, bad usage; --help. */
START_TEST(test_errors_and_usage)
{
    make_dir();
    write_set("b", RAW_BIAS, 0.0);
    write_raw("tall.fits", RAW_BIAS, 2, 0.0, H + 1);
    char out[4096];
    ck_assert_int_eq(run_calib("bias -o x.fits b0.fits b1.fits tall.fits", out, sizeof out), 1);
    ck_assert_msg(strstr(out, "tall.fits") && strstr(out, "different sizes") &&
                      strstr(out, "32x31") && strstr(out, "32x30"), "%s", out);
    /* with one region for all (--roi), they agree */
    ck_assert_msg(run_calib("bias --roi 0,0,32,30 -o x.fits b0.fits b1.fits tall.fits", out,
                            sizeof out) == 0, "%s", out);
    ck_assert_int_eq(run_calib("bias -o x.fits b0.fits nope.fits", out, sizeof out), 1);
    ck_assert_ptr_nonnull(strstr(out, "nope.fits"));
    ck_assert_int_eq(run_calib("dark --bias nope.fits -o x.fits b0.fits", out, sizeof out), 1);
    ck_assert_ptr_nonnull(strstr(out, "nope.fits"));

    ck_assert_int_eq(run_calib("--help", out, sizeof out), 0);
    ck_assert_ptr_nonnull(strstr(out, "Usage: skysieve-calib bias|dark|flat"));
    ck_assert_ptr_nonnull(strstr(out, "Exit status: 0"));
    for (const char *o = "--bias\0--dark\0--overscan\0--sigma\0--iters\0--scale-to\0--roi\0";
         *o; o += strlen(o) + 1)
        ck_assert_msg(strstr(out, o) != NULL, "--help does not mention %s", o);
    ck_assert_int_eq(run_calib("", out, sizeof out), 2);
    ck_assert_int_eq(run_calib("bias b0.fits", out, sizeof out), 2);          /* no -o */
    ck_assert_int_eq(run_calib("lamp -o x.fits b0.fits", out, sizeof out), 2);
    ck_assert_int_eq(run_calib("bias --frobnicate -o x.fits b0.fits", out, sizeof out), 2);
    ck_assert_int_eq(run_calib("bias --sigma -1 -o x.fits b0.fits", out, sizeof out), 2);
    ck_assert_int_eq(run_calib("bias --overscan rows -o x.fits b0.fits", out, sizeof out), 2);
    ck_assert_int_eq(run_calib("bias --bias b1.fits -o x.fits b0.fits", out, sizeof out), 2);
    ck_assert_int_eq(run_calib("dark --dark b1.fits -o x.fits b0.fits", out, sizeof out), 2);
    remove_dir();
}
END_TEST

static Suite *calib_cli_suite(void)
{
    Suite *s = suite_create("calib_cli");
    TCase *tc = tcase_create("masters");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_master_bias);
    tcase_add_test(tc, test_master_dark);
    tcase_add_test(tc, test_master_flat);
    tcase_add_test(tc, test_errors_and_usage);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return ss_run_suite(calib_cli_suite());
}
