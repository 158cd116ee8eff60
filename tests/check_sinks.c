/*
 * check_sinks.c — the file sinks' formats on hand-built results: the DS9
 * region file (daemon/sink_ds9.c) line by line against the forms of the
 * DS9 region reference (version 4.1: the header line, "global", the
 * "image" coordinate system, circle(x,y,r), line(x1,y1,x2,y2) with
 * "# line=0 0", segment(x1,y1,x2,y2,...), local properties after "#"),
 * in DS9's 1-based image pixels, and its placing into a directory; the
 * IOD lines (daemon/sink_iod.c) against the format's example line; the
 * ADES PSV rows (daemon/sink_ades.c) against the standard's examples.
 */
#include <check.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/daemon.h"
#include "pipeline/wcs.h"
#include "ss_test.h"

/* A result with a point, a cosmic, a streak, a vanished point and two
 * track reports (three points, and one). */
static void sample(ss_result_t *r)
{
    ck_assert_int_eq(ss_result_init(r, 16, 8), 0);
    ss_strlcpy(r->meta.feed, "cam1", sizeof r->meta.feed);
    ss_strlcpy(r->meta.input, "img_0057.fits", sizeof r->meta.input);
    r->meta.seq = 57;
    r->meta.mjd_obs = 61366.2505;
    ss_detection_t *d = ss_detlist_push(&r->dets);
    d->sign = 1, d->kind = SS_KIND_POINT, d->x = 10.25, d->y = 20.5, d->a = 1.75;
    d = ss_detlist_push(&r->dets);
    d->sign = 1, d->kind = SS_KIND_COSMIC, d->x = 40, d->y = 50, d->a = 0.5;
    d = ss_detlist_push(&r->dets);
    d->sign = 1, d->kind = SS_KIND_STREAK, d->x0 = 99, d->y0 = 199, d->x1 = 199, d->y1 = 299;
    d = ss_detlist_push(&r->dets);
    d->sign = -1, d->kind = SS_KIND_POINT, d->x = 5, d->y = 6, d->a = 2.5;
    ss_track_t *t = &r->tracks.items[r->tracks.count++];
    memset(t, 0, sizeof *t);
    t->id = 7;
    t->mag = t->mag_err = NAN;
    t->n_points = 3;
    for (int i = 0; i < 3; i++)
        t->points[i] = (ss_track_point_t){ (uint64_t)(55 + i), NAN, 8.0 + i, 21.0 - i };
    t->x = 10, t->y = 19;
    t = &r->tracks.items[r->tracks.count++];
    memset(t, 0, sizeof *t);
    t->id = 8;
    t->mag = t->mag_err = NAN;
    t->n_points = 1;
    t->x = 70.5, t->y = 80.5;
}

/* A 1.008"/px TAN WCS at (150, 20) in r's frame keys. */
static void add_wcs(ss_result_t *r)
{
    static const struct { const char *k; const char *s; double v; } wcs[] = {
        { "CTYPE1", "RA---TAN", 0 }, { "CTYPE2", "DEC--TAN", 0 }, { "CRPIX1", NULL, 100 },
        { "CRPIX2", NULL, 100 }, { "CRVAL1", NULL, 150 }, { "CRVAL2", NULL, 20 },
        { "CD1_1", NULL, -2.8e-4 }, { "CD2_2", NULL, 2.8e-4 },
    };
    for (size_t i = 0; i < sizeof wcs / sizeof wcs[0]; i++) {
        ss_wcs_key_t *k = &r->meta.wcs[r->meta.n_wcs++];
        memset(k, 0, sizeof *k);
        ss_strlcpy(k->key, wcs[i].k, sizeof k->key);
        k->is_string = wcs[i].s != NULL;
        if (wcs[i].s)
            ss_strlcpy(k->sval, wcs[i].s, sizeof k->sval);
        k->dval = wcs[i].v;
    }
}

/* The sample on the sky: 2 s exposures, every detection with RA/Dec,
 * detection 0 (a point) on track 7 moving at rate arcsec/s. */
static void on_sky(ss_result_t *r, double rate)
{
    r->meta.exposure = 2.0;
    for (int i = 0; i < 4; i++) {
        r->dets.items[i].has_radec = 1;
        r->dets.items[i].ra = 150.01 + 0.001 * i;
        r->dets.items[i].dec = 20.02;
    }
    r->dets.items[0].track = 7;
    r->tracks.items[0].has_rate = 1;
    r->tracks.items[0].rate = rate;
}

START_TEST(test_ds9_regions)
{
    ss_result_t r;
    sample(&r);
    char *text = NULL;
    size_t len = 0;
    FILE *fp = open_memstream(&text, &len);
    ck_assert_int_eq(ss_ds9_regions(fp, &r), 0);
    fclose(fp);
    static const char *const want =
        "# Region file format: DS9 version 4.1\n"
        "# skysieve: feed cam1 seq 57 input img_0057.fits, 4 detections, 2 track reports\n"
        "global color=green width=1 font=\"helvetica 10 normal roman\" select=1 highlite=1 "
        "dash=0 fixed=0 edit=1 move=1 delete=1 include=1 source=1\n"
        "image\n"
        "circle(11.25,21.50,3.50) # color=green\n"
        "circle(41.00,51.00,3.00) # color=magenta\n"
        "line(100.00,200.00,200.00,300.00) # line=0 0 color=cyan\n"
        "circle(6.00,7.00,5.00) # color=red\n"
        "segment(9.00,22.00,10.00,21.00,11.00,20.00) # color=yellow text={track 7}\n"
        "circle(71.50,81.50,3.00) # color=yellow text={track 8}\n";
    ck_assert_str_eq(text, want);
    free(text);
    /* magnitudes as labels: a point's, a track's (issue 12, item 6) */
    r.dets.items[0].mag = 17.434, r.dets.items[0].mag_err = 0.05;
    r.tracks.items[1].mag = 16.5, r.tracks.items[1].mag_err = 0.1;
    fp = open_memstream(&text, &len);
    ck_assert_int_eq(ss_ds9_regions(fp, &r), 0);
    fclose(fp);
    ck_assert_ptr_nonnull(strstr(text, "circle(11.25,21.50,3.50) # color=green text={17.43}\n"));
    ck_assert_ptr_nonnull(strstr(text, "circle(41.00,51.00,3.00) # color=magenta\n"));
    ck_assert_ptr_nonnull(strstr(text, "# color=yellow text={track 7}\n"));
    ck_assert_ptr_nonnull(strstr(text, "circle(71.50,81.50,3.00) # color=yellow text={track 8 16.50}\n"));
    free(text);
    ss_result_free(&r);
}
END_TEST

/* Placed under the residuals' naming rule with ".reg", a second file for
 * the same frame beside it ("-1"), never over it, no temporary left. */
START_TEST(test_ds9_files)
{
    char dir[] = "/tmp/check_sinks.XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    ss_result_t r;
    sample(&r);
    ck_assert_int_eq(ss_sink_ds9_write(dir, &r, "cam1"), 0);
    ck_assert_int_eq(ss_sink_ds9_write(dir, &r, "cam1"), 0);
    DIR *dp = opendir(dir);
    struct dirent *e;
    int files = 0, hidden = 0;
    while ((e = readdir(dp))) {
        if (e->d_name[0] == '.' && strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            hidden++;
        if (strncmp(e->d_name, "cam1-0000000057-", 16) == 0 && strstr(e->d_name, ".reg"))
            files++;
    }
    closedir(dp);
    ck_assert_int_eq(files, 2);
    ck_assert_int_eq(hidden, 0);
    ck_assert_int_eq(ss_sink_ds9_write("/nonexistent/dir", &r, "cam1"), -1);
    ck_assert_int_eq(rmtree(dir), 0);
    ss_result_free(&r);
}
END_TEST

/* IOD: the columns of the format's own example line ("12345 98 123A   2007
 * G 20081122112233444 56 14 1122334+112233 39 S", G. D. Lewis 1998/2002):
 * the same station, sky code, time and sign at the same columns; the
 * angles in format 2 (HHMMmmm, DDMMmm) of the example's 11h22m33.4s
 * +11°22'33", and the uncertainty codes M·10^(X-8). */
START_TEST(test_iod_line)
{
    static const char *const spec =
        "12345 98 123A   2007 G 20081122112233444 56 14 1122334+112233 39 S";
    const double mjd = 54792.0 + (11 * 3600 + 22 * 60 + 33.444) / 86400.0;
    const double ra = (11 + 22 / 60.0 + 33.4 / 3600.0) * 15.0;
    const double dec = 11 + 22 / 60.0 + 33 / 3600.0;
    char line[100];
    ck_assert_int_eq(ss_iod_line(line, sizeof line, 2007, mjd, ra, dec, 0.01), 64);
    ck_assert_str_eq(line, "99999 00 000UNK 2007 G 20081122112233444 17 25 1122557+112255 16");
    /* column by column (1-based as the format counts): 17-20, 22, 24-40, 55 */
    ck_assert(strncmp(line + 16, spec + 16, 4) == 0);
    ck_assert(line[21] == spec[21]);
    ck_assert(strncmp(line + 23, spec + 23, 17) == 0);
    ck_assert(line[54] == spec[54]);
    ck_assert(line[41] != ' ' && line[44] != ' ' && line[62] != ' ');
    /* south, RA near 24h rounding to 0, uncertainties 0.3 and 2e-4 deg */
    ck_assert_int_eq(ss_iod_line(line, sizeof line, 42, mjd, 359.99999999, -5.5, 0.3), 64);
    ck_assert_str_eq(line + 47, "0000000-053000 37");
    ss_iod_line(line, sizeof line, 42, mjd, 10.0, 0.0, 2e-4);
    ck_assert_str_eq(line + 47, "0040000+000000 24");
}
END_TEST

/* Which detections become IOD lines: streaks, and the detections of
 * tracks of at least min_rate arcsec/s; nothing without a WCS or a time. */
START_TEST(test_iod_write)
{
    ss_result_t r;
    sample(&r);
    on_sky(&r, 100.0);
    char *text = NULL;
    size_t len = 0;
    FILE *fp = open_memstream(&text, &len);
    ck_assert_int_eq(ss_iod_write(fp, &r, 1234, 30.0), 0);   /* no WCS yet */
    add_wcs(&r);
    ck_assert_int_eq(ss_iod_write(fp, &r, 1234, 30.0), 2);   /* the track's point, the streak */
    r.tracks.items[0].rate = 10.0;                            /* an asteroid: not a satellite */
    ck_assert_int_eq(ss_iod_write(fp, &r, 1234, 30.0), 1);
    fclose(fp);
    /* mid-exposure: 06:00:43.200 + 1 s; 1 px = 1.008" -> 0.5 px = 1.4e-4 deg: "14" */
    ck_assert_ptr_nonnull(strstr(text, "99999 00 000UNK 1234 G 20261122060044200 17 25 "));
    ck_assert_ptr_nonnull(strstr(text, " 14\n"));
    ck_assert_ptr_nonnull(strstr(text, " 34\n"));    /* the streak: a pixel, 2.8e-4 deg */
    free(text);
    ss_result_free(&r);
}
END_TEST

/* The '|'-separated fields of one line (at most 16), blanks trimmed: an
 * empty string for a blank field. */
static int psv_fields(const char *line, char out[16][64])
{
    for (int n = 0;; n++) {
        size_t len = strcspn(line, "|\n");
        ck_assert_int_lt(n, 16);
        char tmp[64];
        snprintf(tmp, sizeof tmp, "%.*s", (int)len, line);
        out[n][0] = '\0';
        (void)sscanf(tmp, "%63s", out[n]);
        if (line[len] != '|')
            return n + 1;
        line += len + 1;
    }
}

/* ADES PSV against the standard's own examples (IAU-ADES tests, e.g.
 * pass.psv: "# version=2022", "# observatory", "! mpcCode 250", then a
 * column row "permID|trkSub|mode|stn|obsTime|ra|dec|rmsRA|rmsDec|astCat|
 * mag|rmsMag|band|photCat|..." and rows of as many '|'-separated values,
 * empty for absent ones): a slow track's detection is one row, a
 * satellite's none, and nothing without a WCS; mag, rmsMag, band and
 * photCat are filled only for a detection with a magnitude (issue 12,
 * item 6: "mag when a zero point is configured"). */
START_TEST(test_ades)
{
    ss_result_t r;
    sample(&r);
    on_sky(&r, 1.0);
    char *text = NULL;
    size_t len = 0;
    FILE *fp = open_memstream(&text, &len);
    ss_ades_header(fp, "XXX");
    ck_assert_int_eq(ss_ades_rows(fp, &r, "XXX", "UNK", "G", 30.0), 0);     /* no WCS */
    add_wcs(&r);
    ck_assert_int_eq(ss_ades_rows(fp, &r, "XXX", "UNK", "G", 30.0), 1);     /* no magnitude */
    r.dets.items[0].mag = 17.4321, r.dets.items[0].mag_err = 0.0449;
    ck_assert_int_eq(ss_ades_rows(fp, &r, "XXX", "Gaia3", "Rc", 30.0), 1);  /* with one */
    r.tracks.items[0].rate = 100.0;                                       /* a satellite */
    ck_assert_int_eq(ss_ades_rows(fp, &r, "XXX", "UNK", "G", 30.0), 0);
    fclose(fp);
    ck_assert(strncmp(text, "# version=2022\n# observatory\n! mpcCode XXX\n", 43) == 0);
    char *cols = strstr(text, "\ntrkSub");
    ck_assert_ptr_nonnull(cols);
    char *row = strchr(cols + 1, '\n') + 1, *row2 = strchr(row, '\n') + 1;
    ck_assert_str_eq(strchr(row2, '\n') + 1, "");                       /* no third row */
    /* the column names, trimmed, are ADES fields in the examples' order */
    static const char *const names[] = { "trkSub", "mode", "stn", "obsTime", "ra", "dec",
                                         "rmsRA", "rmsDec", "astCat", "mag", "rmsMag", "band",
                                         "photCat" };
    static const char *const want[] = { "ss7", "CCD", "XXX", "2026-11-22T06:00:44.200Z",
                                        "150.0100000", "+20.0200000", "0.504", "0.504", "UNK",
                                        "", "", "", "" };
    static const char *const want2[] = { "ss7", "CCD", "XXX", "2026-11-22T06:00:44.200Z",
                                         "150.0100000", "+20.0200000", "0.504", "0.504", "Gaia3",
                                         "17.43", "0.04", "Rc", "Gaia3" };
    char h[16][64], v[16][64], v2[16][64];
    ck_assert_int_eq(psv_fields(cols + 1, h), 13);
    ck_assert_int_eq(psv_fields(row, v), 13);
    ck_assert_int_eq(psv_fields(row2, v2), 13);
    for (int i = 0; i < 13; i++) {
        ck_assert_str_eq(h[i], names[i]);
        ck_assert_str_eq(v[i], want[i]);
        ck_assert_str_eq(v2[i], want2[i]);
    }
    /* the columns line up: every row's '|' where the column row has them */
    for (const char *a = cols + 1, *b = row, *c = row2; *a != '\n'; a++, b++, c++) {
        ck_assert_msg((*a == '|') == (*b == '|'), "row without mag: column at %d", (int)(a - cols));
        ck_assert_msg((*a == '|') == (*c == '|'), "row with mag: column at %d", (int)(a - cols));
    }
    free(text);
    ss_result_free(&r);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("sinks");
    TCase *tc = tcase_create("ds9");
    tcase_add_test(tc, test_ds9_regions);
    tcase_add_test(tc, test_ds9_files);
    tcase_add_test(tc, test_iod_line);
    tcase_add_test(tc, test_iod_write);
    tcase_add_test(tc, test_ades);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
