/*
 * check_fits.c — tests of FITS frame I/O (pipeline/frame_fits.c):
 * write/read round trips for every pixel type (u16 through BZERO 32768),
 * BSCALE/BZERO scaling to f32, the on-disk header checked by an independent
 * raw header parser, real files (the tile-compressed DECam cutout, the
 * ASTRiDE image with its non-standard DATE-OBS) against an independent
 * big-endian decoder, TRIMSEC/DATASEC parsing, corrupt and hostile files
 * (truncated, overwritten bytes, empty, text, zero-size, NAXIS 3, huge
 * NAXIS) that must give errors naming the file and never crash, and the
 * residual writer: fitsverify-clean (0 warnings, 0 errors), checksums,
 * header keys, bit-exact read-back with NaN positions, plain and compressed.
 */
#include <check.h>
#include <fitsio.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/daemon.h"
#include "pipeline/frame_fits.h"
#include "pipeline/pipeline.h"
#include "ss_test.h"

/* ---- helpers ------------------------------------------------------------ */

static char tmpdir[256];

static void make_tmpdir(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/check_fits.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void rm_tmpdir(void)
{
    ck_assert_int_eq(rmtree(tmpdir), 0);
}

static const char *tpath(const char *name)
{
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
    return buf[k];
}

static const char *data_path(const char *rel)
{
    static char buf[1024];
    const char *src = getenv("SKYSIEVE_SOURCE_DIR");
    snprintf(buf, sizeof buf, "%s/tests/data/real/%s", src ? src : "..", rel);
    return buf;
}

static ss_frame_t *frame_alloc(size_t bytes)
{
    ss_frame_t *f = calloc(1, sizeof *f);
    ck_assert_ptr_nonnull(f);
    f->capacity = bytes;
    f->pixels = malloc(bytes ? bytes : 1);
    ck_assert_ptr_nonnull(f->pixels);
    ss_frame_meta_clear(&f->meta);
    return f;
}

static void frame_free(ss_frame_t *f)
{
    if (f) {
        free(f->pixels);
        free(f);
    }
}

static unsigned char *slurp(const char *path, size_t *n)
{
    FILE *fp = fopen(path, "rb");
    ck_assert_msg(fp != NULL, "cannot open %s", path);
    fseek(fp, 0, SEEK_END);
    long L = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)L + 1);
    ck_assert_ptr_nonnull(b);
    ck_assert_int_eq(fread(b, 1, (size_t)L, fp), (size_t)L);
    fclose(fp);
    *n = (size_t)L;
    return b;
}

static void spit(const char *path, const void *b, size_t n)
{
    FILE *fp = fopen(path, "wb");
    ck_assert_ptr_nonnull(fp);
    ck_assert_int_eq(fwrite(b, 1, n, fp), n);
    fclose(fp);
}

/* ---- an independent reader of plain FITS (primary HDU only) ------------- */

typedef struct raw_fits {
    int bitpix, naxis, n1, n2;
    double bzero, bscale;
    size_t data_off;
    char cards[200][81];
    int ncards;
} raw_fits_t;

/* Parse the primary header of a plain FITS file from its bytes. */
static void raw_parse(const unsigned char *b, size_t n, raw_fits_t *r)
{
    memset(r, 0, sizeof *r);
    r->bscale = 1.0;
    size_t off = 0;
    for (;;) {
        ck_assert_msg(off + 80 <= n, "no END card");
        char c[81];
        memcpy(c, b + off, 80);
        c[80] = '\0';
        off += 80;
        if (r->ncards < 200)
            memcpy(r->cards[r->ncards++], c, 81);
        if (strncmp(c, "END     ", 8) == 0)
            break;
        if (strncmp(c, "BITPIX  =", 9) == 0)
            r->bitpix = atoi(c + 10);
        else if (strncmp(c, "NAXIS   =", 9) == 0)
            r->naxis = atoi(c + 10);
        else if (strncmp(c, "NAXIS1  =", 9) == 0)
            r->n1 = atoi(c + 10);
        else if (strncmp(c, "NAXIS2  =", 9) == 0)
            r->n2 = atoi(c + 10);
        else if (strncmp(c, "BZERO   =", 9) == 0)
            r->bzero = strtod(c + 10, NULL);
        else if (strncmp(c, "BSCALE  =", 9) == 0)
            r->bscale = strtod(c + 10, NULL);
    }
    r->data_off = (off + 2879) / 2880 * 2880;
}

/* The card of a keyword ("" if absent). */
static const char *raw_card(const raw_fits_t *r, const char *key)
{
    char k[9];
    snprintf(k, sizeof k, "%-8s", key);
    for (int i = 0; i < r->ncards; i++)
        if (strncmp(r->cards[i], k, 8) == 0)
            return r->cards[i];
    return "";
}

/* Physical value of pixel i decoded from big-endian bytes. */
static double raw_pixel(const unsigned char *b, const raw_fits_t *r, size_t i)
{
    const unsigned char *p = b + r->data_off + i * (size_t)(abs(r->bitpix) / 8);
    double v;
    switch (r->bitpix) {
    case 8: v = p[0]; break;
    case 16: v = (int16_t)(uint16_t)((p[0] << 8) | p[1]); break;
    case 32: v = (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3]); break;
    case -32: {
        uint32_t u = ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
        float f;
        memcpy(&f, &u, 4);
        v = f;
        break;
    }
    case -64: {
        uint64_t u = 0;
        for (int k = 0; k < 8; k++)
            u = (u << 8) | p[k];
        memcpy(&v, &u, 8);
        break;
    }
    default: ck_abort_msg("bitpix %d", r->bitpix); return 0;
    }
    return v * r->bscale + r->bzero;
}

/* ---- a FITS file built card by card (for hostile headers) --------------- */

static void write_cards(const char *path, const char *const *cards, size_t data_bytes,
                        unsigned char fill)
{
    size_t nc = 0;
    while (cards[nc])
        nc++;
    size_t hbytes = ((nc + 1) * 80 + 2879) / 2880 * 2880;
    size_t dbytes = (data_bytes + 2879) / 2880 * 2880;
    unsigned char *b = malloc(hbytes + dbytes + 1);
    ck_assert_ptr_nonnull(b);
    memset(b, ' ', hbytes);
    for (size_t i = 0; i < nc; i++) {
        size_t L = strlen(cards[i]);
        memcpy(b + i * 80, cards[i], L < 80 ? L : 80);
    }
    memcpy(b + nc * 80, "END", 3);
    memset(b + hbytes, fill, dbytes);
    spit(path, b, hbytes + dbytes);
    free(b);
}

/* An error must be an error code and a message naming the file. */
static void expect_error(const char *path, ss_err_t want)
{
    char err[512] = "";
    ss_frame_t *f = frame_alloc(1 << 22);
    ss_err_t e = ss_fits_read_frame(path, f, err, sizeof err);
    ck_assert_msg(e != SS_OK, "%s: read succeeded", path);
    if (want != SS_OK)
        ck_assert_msg(e == want, "%s: error %s (%s), want %s", path, ss_strerror(e), err,
                      ss_strerror(want));
    ck_assert_msg(strstr(err, path) != NULL, "error text '%s' does not name %s", err, path);
    float *pix = (float *)0x1;
    int w = -1, h = -1;
    err[0] = '\0';
    ck_assert_int_ne(ss_fits_read_float(path, &pix, &w, &h, err, sizeof err), SS_OK);
    ck_assert_ptr_null(pix);
    ck_assert_ptr_nonnull(strstr(err, path));
    err[0] = '\0';
    ck_assert_int_ne(ss_fits_probe(path, &w, &h, NULL, err, sizeof err), SS_OK);
    ck_assert_ptr_nonnull(strstr(err, path));
    frame_free(f);
}

/* fitsverify on a file: returns 1 if clean (0 warnings, 0 errors), 0 if
 * not (its report printed), -1 if fitsverify is not installed. */
static int fitsverify_clean(const char *path)
{
    const char *fv = "/usr/bin/fitsverify";
    if (access(fv, X_OK) != 0)
        return -1;
    char cmd[700];
    snprintf(cmd, sizeof cmd, "%s '%s' 2>&1", fv, path);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    static char out[1 << 16];
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = '\0';
    pclose(p);
    int warn = -1, errs = -1;
    const char *s = strstr(out, "Verification found");
    if (s)
        sscanf(s, "Verification found %d warning(s) and %d error(s)", &warn, &errs);
    if (warn == 0 && errs == 0)
        return 1;
    fprintf(stderr, "fitsverify %s:\n%s\n", path, out);
    return 0;
}

/* ---- round trips -------------------------------------------------------- */

/* A complete TAN WCS (fitsverify warns about incomplete ones). */
static void set_wcs(ss_frame_meta_t *m)
{
    static const char *const sk[2][2] = { { "CTYPE1", "RA---TAN" }, { "CTYPE2", "DEC--TAN" } };
    static const struct { const char *k; double v; } dk[8] = {
        { "CRPIX1", 18.25 }, { "CRPIX2", 11.5 }, { "CRVAL1", 123.456 }, { "CRVAL2", -33.25 },
        { "CD1_1", -2.7777777777777e-4 }, { "CD1_2", 1e-6 }, { "CD2_1", -1e-6 },
        { "CD2_2", 2.7777777777777e-4 },
    };
    m->n_wcs = 0;
    for (int i = 0; i < 2; i++) {
        ss_wcs_key_t *k = &m->wcs[m->n_wcs++];
        memset(k, 0, sizeof *k);
        ss_strlcpy(k->key, sk[i][0], sizeof k->key);
        k->is_string = 1;
        ss_strlcpy(k->sval, sk[i][1], sizeof k->sval);
    }
    for (int i = 0; i < 8; i++) {
        ss_wcs_key_t *k = &m->wcs[m->n_wcs++];
        memset(k, 0, sizeof *k);
        ss_strlcpy(k->key, dk[i].k, sizeof k->key);
        k->dval = dk[i].v;
    }
}

enum { RW = 37, RH = 23 };   /* odd sizes: no accidental alignment */

/* Fill a frame of type t with a pattern that hits the type's extremes. */
static void fill_pattern(ss_frame_t *f, ss_dtype_t t)
{
    f->width = RW;
    f->height = RH;
    f->dtype = t;
    for (int i = 0; i < RW * RH; i++) {
        uint32_t h = (uint32_t)i * 2654435761u;
        switch (t) {
        case SS_DT_U8: ((uint8_t *)f->pixels)[i] = i == 0 ? 0 : i == 1 ? 255 : (uint8_t)h; break;
        case SS_DT_U16:
            ((uint16_t *)f->pixels)[i] = i == 0 ? 0 : i == 1 ? 65535 : i == 2 ? 32768 : (uint16_t)h;
            break;
        case SS_DT_I16:
            ((int16_t *)f->pixels)[i] = i == 0 ? -32768 : i == 1 ? 32767 : (int16_t)(uint16_t)h;
            break;
        case SS_DT_I32:
            ((int32_t *)f->pixels)[i] = i == 0 ? INT32_MIN : i == 1 ? INT32_MAX : (int32_t)h;
            break;
        default: {
            float v = (float)((double)(int32_t)h * 1.37e-3);
            if (i == 0) v = 3.4e38f;
            if (i == 1) v = -1.0e-38f;
            if (i == 2) v = NAN;
            if (i == 3) v = -0.0f;
            ((float *)f->pixels)[i] = v;
        }
        }
    }
}

START_TEST(test_roundtrip_every_dtype)
{
    make_tmpdir();
    static const int want_bitpix[SS_DT__COUNT] = { 8, 16, 16, 32, -32 };
    static const double want_bzero[SS_DT__COUNT] = { 0, 32768, 0, 0, 0 };
    for (int t = 0; t < SS_DT__COUNT; t++) {
        ss_frame_t *f = frame_alloc(RW * RH * 4);
        fill_pattern(f, (ss_dtype_t)t);
        f->meta.seq = 123456789012ull + t;
        f->meta.mjd_obs = 60000.123456789;
        f->meta.exposure = 2.5;
        ss_strlcpy(f->meta.feed, "cam1", sizeof f->meta.feed);
        f->meta.trim_x0 = 2;
        f->meta.trim_y0 = 1;
        f->meta.trim_w = 30;
        f->meta.trim_h = 20;
        f->meta.bias_x0 = 32;
        f->meta.bias_y0 = 0;
        f->meta.bias_w = 4;
        f->meta.bias_h = 21;
        set_wcs(&f->meta);
        char name[64], err[512];
        snprintf(name, sizeof name, "rt_%s.fits", ss_dtype_name((ss_dtype_t)t));
        const char *p = tpath(name);
        ck_assert_msg(ss_fits_write_frame(p, f, err, sizeof err) == SS_OK, "%s", err);

        /* on disk, read independently */
        size_t n;
        unsigned char *b = slurp(p, &n);
        raw_fits_t r;
        raw_parse(b, n, &r);
        ck_assert_int_eq(r.bitpix, want_bitpix[t]);
        ck_assert_int_eq(r.naxis, 2);
        ck_assert_int_eq(r.n1, RW);
        ck_assert_int_eq(r.n2, RH);
        ck_assert(r.bzero == want_bzero[t]);
        for (int i = 0; i < RW * RH; i++) {
            double a = raw_pixel(b, &r, (size_t)i), e = ss_dtype_get(f->pixels, f->dtype, (size_t)i);
            ck_assert_msg((isnan(a) && isnan(e)) || a == e, "%s pixel %d on disk %g want %g",
                          name, i, a, e);
        }
        ck_assert_ptr_nonnull(strstr(raw_card(&r, "TRIMSEC"), "'[3:32,2:21]'"));
        ck_assert_ptr_nonnull(strstr(raw_card(&r, "DATE-OBS"), "'2023-02-25T02:57:46.667'"));
        ck_assert_ptr_nonnull(strstr(raw_card(&r, "CHECKSUM"), "'"));
        free(b);
        ck_assert_int_ne(fitsverify_clean(p), 0);

        /* read back through the library */
        int w, h;
        ss_dtype_t dt;
        ck_assert_msg(ss_fits_probe(p, &w, &h, &dt, err, sizeof err) == SS_OK, "%s", err);
        ck_assert(w == RW && h == RH && dt == (ss_dtype_t)t);
        ss_frame_t *g = frame_alloc(RW * RH * 4);
        ck_assert_msg(ss_fits_read_frame(p, g, err, sizeof err) == SS_OK, "%s", err);
        ck_assert_int_eq(g->dtype, t);
        ck_assert_int_eq(g->width, RW);
        ck_assert_int_eq(g->height, RH);
        ck_assert_int_eq(memcmp(g->pixels, f->pixels, (size_t)RW * RH * ss_dtype_size(g->dtype)), 0);
        ck_assert_uint_eq(g->meta.seq, f->meta.seq);
        ck_assert_msg(fabs(g->meta.mjd_obs - f->meta.mjd_obs) * 86400.0 < 1e-3, "mjd %.9f",
                      g->meta.mjd_obs);
        ck_assert(g->meta.exposure == 2.5);
        ck_assert_str_eq(g->meta.feed, "cam1");
        ck_assert_str_eq(g->meta.source, p);
        ck_assert(g->meta.trim_x0 == 2 && g->meta.trim_y0 == 1 && g->meta.trim_w == 30 &&
                  g->meta.trim_h == 20);
        ck_assert(g->meta.bias_x0 == 32 && g->meta.bias_y0 == 0 && g->meta.bias_w == 4 &&
                  g->meta.bias_h == 21);
        ck_assert_int_eq(g->meta.n_wcs, 10);
        const ss_wcs_key_t *k = ss_frame_wcs_find(&g->meta, "CTYPE1");
        ck_assert(k && k->is_string && strcmp(k->sval, "RA---TAN") == 0);
        k = ss_frame_wcs_find(&g->meta, "CD1_1");
        ck_assert(k && !k->is_string && fabs(k->dval / -2.7777777777777e-4 - 1) < 1e-14);

        /* as float */
        float *fl = NULL;
        ck_assert_msg(ss_fits_read_float(p, &fl, &w, &h, err, sizeof err) == SS_OK, "%s", err);
        for (int i = 0; i < RW * RH; i++) {
            double e = ss_dtype_get(f->pixels, f->dtype, (size_t)i);
            ck_assert((isnan(e) && isnan(fl[i])) || fl[i] == (float)e);
        }
        free(fl);

        /* too small a frame */
        g->capacity = (size_t)RW * RH * ss_dtype_size(g->dtype) - 1;
        ck_assert_int_eq(ss_fits_read_frame(p, g, err, sizeof err), SS_ERR_SIZE);
        ck_assert_ptr_nonnull(strstr(err, p));
        frame_free(f);
        frame_free(g);
    }
    /* a gzip'ed file reads the same (CFITSIO inflates it); skipped without gzip */
    {
        char cmd[1200], err2[512];
        snprintf(cmd, sizeof cmd, "gzip -c '%s' > '%s' 2>/dev/null", tpath("rt_i16.fits"),
                 tpath("rt_i16.fits.gz"));
        if (system(cmd) == 0) {
            ss_frame_t *a = frame_alloc(RW * RH * 2), *z = frame_alloc(RW * RH * 2);
            ck_assert_msg(ss_fits_read_frame(tpath("rt_i16.fits"), a, err2, sizeof err2) == SS_OK,
                          "%s", err2);
            ck_assert_msg(ss_fits_read_frame(tpath("rt_i16.fits.gz"), z, err2, sizeof err2) ==
                              SS_OK, "%s", err2);
            ck_assert_int_eq(memcmp(a->pixels, z->pixels, RW * RH * 2), 0);
            /* ... also where the path has ".Z" or ".bz2" before the name:
             * CFITSIO picks its decompressor by searching the whole path
             * for those (frame_fits.c opens such files by descriptor) */
            static const char *const dirs[] = { "run.Zenith", "x.bz2data" };
            for (int d = 0; d < 2; d++) {
                char dir[1024], gz[1100];
                snprintf(dir, sizeof dir, "%s", tpath(dirs[d]));
                ck_assert_int_eq(mkdir(dir, 0755), 0);
                snprintf(gz, sizeof gz, "%s/rt_i16.fits.gz", dir);
                snprintf(cmd, sizeof cmd, "gzip -c '%s' > '%s'", tpath("rt_i16.fits"), gz);
                ck_assert_int_eq(system(cmd), 0);
                memset(z->pixels, 0, RW * RH * 2);
                ck_assert_msg(ss_fits_read_frame(gz, z, err2, sizeof err2) == SS_OK, "%s", err2);
                ck_assert_int_eq(memcmp(a->pixels, z->pixels, RW * RH * 2), 0);
                float *fl = NULL;
                int fw = 0, fh = 0;
                ck_assert_msg(ss_fits_read_float(gz, &fl, &fw, &fh, err2, sizeof err2) == SS_OK,
                              "%s", err2);
                ck_assert(fw == RW && fh == RH);
                free(fl);
                /* the glob source's DATE-OBS ordering reads it too */
                const double m0 = ss_fits_date_obs_mjd(tpath("rt_i16.fits"));
                ck_assert(isfinite(m0));
                ck_assert(ss_fits_date_obs_mjd(gz) == m0);
            }
            frame_free(a);
            frame_free(z);
        } else {
            fprintf(stderr, "check_fits: no gzip; .fits.gz case skipped\n");
        }
    }
    /* overwriting an existing file works and leaves no temporary behind */
    ss_frame_t *f = frame_alloc(RW * RH * 4);
    fill_pattern(f, SS_DT_U8);
    char err[512];
    ck_assert_int_eq(ss_fits_write_frame(tpath("rt_u8.fits"), f, err, sizeof err), SS_OK);
    ck_assert_int_ne(access(tpath("rt_u8.fits.tmp"), F_OK), 0);
    /* a directory that does not exist: an I/O error naming the file */
    ck_assert_int_eq(ss_fits_write_frame(tpath("nodir/x.fits"), f, err, sizeof err), SS_ERR_IO);
    ck_assert_ptr_nonnull(strstr(err, "nodir/x.fits"));
    frame_free(f);
    rm_tmpdir();
}
END_TEST

/* Files written with CFITSIO directly, with scaling the reader must apply. */
static void write_scaled(const char *path, int bitpix, double bscale, double bzero, int kind)
{
    fitsfile *fp;
    int st = 0;
    remove(path);
    fits_create_diskfile(&fp, path, &st);
    long ax[2] = { RW, RH };
    fits_create_img(fp, bitpix, 2, ax, &st);
    if (bscale != 1.0 || bzero != 0.0) {
        fits_write_key(fp, TDOUBLE, "BSCALE", &bscale, NULL, &st);
        fits_write_key(fp, TDOUBLE, "BZERO", &bzero, NULL, &st);
        fits_set_bscale(fp, 1.0, 0.0, &st);     /* write the stored values raw */
    }
    double raw[RW * RH];
    for (int i = 0; i < RW * RH; i++)
        raw[i] = kind == 0   ? (double)((i * 37) % 251) - 125.0
                 : kind == 2 ? (double)((i * 37) % 251)
                             : (double)((int64_t)i * 1234567 % 2000000000) - 1000000000.0;
    if (bitpix == DOUBLE_IMG)
        for (int i = 0; i < RW * RH; i++)
            raw[i] = raw[i] * 1.0000001 + 1e-3;
    fits_write_img(fp, TDOUBLE, 1, RW * RH, raw, &st);
    fits_close_file(fp, &st);
    ck_assert_int_eq(st, 0);
}

START_TEST(test_bscale_bzero)
{
    make_tmpdir();
    char err[512];
    struct { int bitpix; double bscale, bzero; ss_dtype_t want; int kind; } cases[] = {
        { SHORT_IMG, 0.5, 100.0, SS_DT_F32, 0 },     /* scaled -> f32 */
        { SHORT_IMG, 2.92273835509, 3713.66692596, SS_DT_F32, 0 },   /* as in real data */
        { SHORT_IMG, 1.0, 32768.0, SS_DT_U16, 0 },   /* unsigned 16 */
        { SHORT_IMG, 1.0, 10.0, SS_DT_F32, 0 },      /* any other offset -> f32 */
        { BYTE_IMG, 1.0, -128.0, SS_DT_F32, 0 },     /* signed bytes */
        { LONG_IMG, 1.0, 2147483648.0, SS_DT_F32, 1 },
        { LONG_IMG, 1.0, 0.0, SS_DT_I32, 1 },
        { DOUBLE_IMG, 1.0, 0.0, SS_DT_F32, 1 },
        { FLOAT_IMG, 1.0, 0.0, SS_DT_F32, 0 },
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const char *p = tpath("scaled.fits");
        int kind = cases[c].kind;
        if (cases[c].bitpix == BYTE_IMG || cases[c].want == SS_DT_U16)
            kind = 2;   /* stored values must fit the unsigned storage */
        write_scaled(p, cases[c].bitpix, cases[c].bscale, cases[c].bzero, kind);
        size_t n;
        unsigned char *b = slurp(p, &n);
        raw_fits_t r;
        raw_parse(b, n, &r);
        ss_frame_t *f = frame_alloc(RW * RH * 4);
        ck_assert_msg(ss_fits_read_frame(p, f, err, sizeof err) == SS_OK, "%s", err);
        ck_assert_msg(f->dtype == cases[c].want, "case %zu: dtype %s", c, ss_dtype_name(f->dtype));
        for (int i = 0; i < RW * RH; i++) {
            double want = raw_pixel(b, &r, (size_t)i);
            double got = ss_dtype_get(f->pixels, f->dtype, (size_t)i);
            if (f->dtype == SS_DT_F32)
                ck_assert_msg(got == (double)(float)want, "case %zu pixel %d: %.9g want %.9g", c,
                              i, got, want);
            else
                ck_assert_msg(got == want, "case %zu pixel %d: %g want %g", c, i, got, want);
        }
        free(b);
        frame_free(f);
    }
    rm_tmpdir();
}
END_TEST

/* ---- real files --------------------------------------------------------- */

/* The ASTRiDE image: BITPIX 16, EXPTIME 60, DATE-OBS '26/07/102' (the old
 * dd/mm/yy form, year 1900 + 102, not ISO), TIME-OBS '19:36:37', no
 * MJD-OBS, JD 2452482.31709: read fine, the time from JD, which is
 * 2002-07-26T19:36:37 as the old DATE-OBS and TIME-OBS say; pixels equal
 * the raw decode. */
START_TEST(test_real_astride_bad_date)
{
    const char *p = data_path("astride/long.fits");
    char err[512];
    ss_frame_t *f = frame_alloc(512 * 512 * 2);
    ck_assert_msg(ss_fits_read_frame(p, f, err, sizeof err) == SS_OK, "%s", err);
    ck_assert_int_eq(f->width, 512);
    ck_assert_int_eq(f->height, 512);
    ck_assert_int_eq(f->dtype, SS_DT_I16);
    double want = 52481.0 + (19 * 3600 + 36 * 60 + 37) / 86400.0;
    ck_assert_msg(fabs(f->meta.mjd_obs - want) * 86400.0 < 0.5, "mjd %.6f, want %.6f (JD)",
                  f->meta.mjd_obs, want);
    ck_assert(f->meta.exposure == 60.0);
    const ss_wcs_key_t *k = ss_frame_wcs_find(&f->meta, "CTYPE1");
    ck_assert(k && k->is_string && strcmp(k->sval, "RA---TAN") == 0);
    k = ss_frame_wcs_find(&f->meta, "CRPIX1");
    ck_assert(k && k->dval == -511.5);
    size_t n;
    unsigned char *b = slurp(p, &n);
    raw_fits_t r;
    raw_parse(b, n, &r);
    ck_assert_int_eq(r.bitpix, 16);
    for (size_t i = 0; i < 512 * 512; i++)
        ck_assert(ss_dtype_get(f->pixels, f->dtype, i) == raw_pixel(b, &r, i));
    free(b);
    frame_free(f);
}
END_TEST

/* The tile-compressed DECam cutout: empty primary, image in the first
 * compressed extension (RICE, BITPIX 16 + BZERO 32768 -> u16), time and
 * exposure from the primary, TPV WCS from the extension, out-of-cutout
 * TRIMSEC ignored. Pixels equal CFITSIO's own read of that HDU. */
START_TEST(test_real_decam_fz)
{
    const char *p = data_path("trailblazer/cutout_c4d_200306_000415_ori.fits.fz");
    char err[512];
    int w, h;
    ss_dtype_t dt;
    ck_assert_msg(ss_fits_probe(p, &w, &h, &dt, err, sizeof err) == SS_OK, "%s", err);
    ck_assert(w == 100 && h == 100 && dt == SS_DT_U16);
    ss_frame_t *f = frame_alloc(100 * 100 * 2);
    ck_assert_msg(ss_fits_read_frame(p, f, err, sizeof err) == SS_OK, "%s", err);
    ck_assert_int_eq(f->dtype, SS_DT_U16);
    /* DATE-OBS = '2020-03-06T00:04:15.410235': MJD 58914 + 255.410235 s */
    double want_mjd = 58914.0 + 255.410235 / 86400.0;
    ck_assert_msg(fabs(f->meta.mjd_obs - want_mjd) * 86400.0 < 1e-4, "mjd %.9f", f->meta.mjd_obs);
    ck_assert(f->meta.exposure == 120.0);
    ck_assert_int_eq(f->meta.trim_w, 0);
    const ss_wcs_key_t *k = ss_frame_wcs_find(&f->meta, "CTYPE1");
    ck_assert(k && k->is_string && strcmp(k->sval, "RA---TPV") == 0);
    ck_assert_ptr_nonnull(ss_frame_wcs_find(&f->meta, "PV2_10"));
    k = ss_frame_wcs_find(&f->meta, "CRPIX1");
    ck_assert(k && k->dval == 1121.2);

    /* reference: HDU 2 read by CFITSIO directly as 32-bit integers (the
     * physical values), and HDU 3 to show that the HDU choice matters */
    fitsfile *in;
    int st = 0, type, anynul = 0;
    static int ref[100 * 100], other[100 * 100];
    fits_open_diskfile(&in, p, READONLY, &st);
    fits_movabs_hdu(in, 2, &type, &st);
    fits_read_img(in, TINT, 1, 100 * 100, NULL, ref, &anynul, &st);
    fits_movabs_hdu(in, 3, &type, &st);
    fits_read_img(in, TINT, 1, 100 * 100, NULL, other, &anynul, &st);
    fits_close_file(in, &st);
    ck_assert_int_eq(st, 0);
    double mn = 1e9, mx = -1e9;
    int differ = 0;
    for (size_t i = 0; i < 100 * 100; i++) {
        double v = ss_dtype_get(f->pixels, f->dtype, i);
        ck_assert(v == ref[i]);
        differ += ref[i] != other[i];
        mn = fmin(mn, v);
        mx = fmax(mx, v);
    }
    ck_assert_int_gt(differ, 1000);
    ck_assert_msg(mn < mx && mn > 0, "pixel range %g..%g", mn, mx);
    frame_free(f);
}
END_TEST

/* ---- TRIMSEC / DATASEC -------------------------------------------------- */

/* A 40×30 u8 image with the given section keywords (NULL: absent), read
 * back; the caller frees the frame. */
static ss_frame_t *section_frame(const char *trimsec, const char *datasec, const char *biassec)
{
    char t[80], d[80], b[80];
    const char *cards[9] = { "SIMPLE  =                    T", "BITPIX  =                    8",
                             "NAXIS   =                    2", "NAXIS1  =                   40",
                             "NAXIS2  =                   30", NULL, NULL, NULL, NULL };
    int nc = 5;
    if (trimsec) {
        snprintf(t, sizeof t, "TRIMSEC = '%s'", trimsec);
        cards[nc++] = t;
    }
    if (datasec) {
        snprintf(d, sizeof d, "DATASEC = '%s'", datasec);
        cards[nc++] = d;
    }
    if (biassec) {
        snprintf(b, sizeof b, "BIASSEC = '%s'", biassec);
        cards[nc++] = b;
    }
    const char *p = tpath("trim.fits");
    write_cards(p, cards, 40 * 30, 7);
    ss_frame_t *f = frame_alloc(40 * 30);
    char err[512];
    ck_assert_msg(ss_fits_read_frame(p, f, err, sizeof err) == SS_OK, "%s", err);
    ck_assert_int_eq(((uint8_t *)f->pixels)[5], 7);
    return f;
}

static void trim_case(const char *trimsec, const char *datasec, int x0, int y0, int w, int h)
{
    ss_frame_t *f = section_frame(trimsec, datasec, NULL);
    ck_assert_msg(f->meta.trim_x0 == x0 && f->meta.trim_y0 == y0 && f->meta.trim_w == w &&
                      f->meta.trim_h == h,
                  "TRIMSEC %s DATASEC %s: got %d,%d %dx%d want %d,%d %dx%d", trimsec, datasec,
                  f->meta.trim_x0, f->meta.trim_y0, f->meta.trim_w, f->meta.trim_h, x0, y0, w, h);
    ck_assert_int_eq(f->meta.bias_w, 0);
    frame_free(f);
}

static void bias_case(const char *biassec, int x0, int y0, int w, int h)
{
    ss_frame_t *f = section_frame("[1:32,1:30]", NULL, biassec);
    ck_assert_msg(f->meta.bias_x0 == x0 && f->meta.bias_y0 == y0 && f->meta.bias_w == w &&
                      f->meta.bias_h == h,
                  "BIASSEC %s: got %d,%d %dx%d want %d,%d %dx%d", biassec, f->meta.bias_x0,
                  f->meta.bias_y0, f->meta.bias_w, f->meta.bias_h, x0, y0, w, h);
    ck_assert(f->meta.trim_x0 == 0 && f->meta.trim_y0 == 0 && f->meta.trim_w == 32 &&
              f->meta.trim_h == 30);
    frame_free(f);
}

START_TEST(test_trimsec)
{
    make_tmpdir();
    trim_case("[3:10,2:5]", NULL, 2, 1, 8, 4);
    trim_case(NULL, "[1:40,1:30]", 0, 0, 40, 30);
    trim_case("[5:36,3:28]", "[1:40,1:30]", 4, 2, 32, 26);     /* TRIMSEC wins */
    trim_case("[ 2 : 39 , 4 : 27 ]", NULL, 1, 3, 38, 24);        /* blanks allowed */
    trim_case("UNKNOWN", "[2:39,2:29]", 1, 1, 38, 28);          /* bad TRIMSEC: DATASEC */
    trim_case("[41:50,1:30]", NULL, 0, 0, 0, 0);                /* outside the image */
    trim_case("[1:10,31:40]", NULL, 0, 0, 0, 0);
    trim_case("[10:3,1:30]", NULL, 0, 0, 0, 0);                 /* reversed */
    trim_case("[0:10,1:30]", NULL, 0, 0, 0, 0);                 /* 0 is not 1-based */
    trim_case("[1:10,1:30]x", NULL, 0, 0, 0, 0);                /* trailing junk */
    trim_case("[1:10]", NULL, 0, 0, 0, 0);
    rm_tmpdir();
}
END_TEST

/* Sections that reach past the image (real cameras write TRIMSEC rows
 * beyond NAXIS2 on frames whose height varies) are clipped to it, for
 * TRIMSEC, DATASEC and BIASSEC alike; one the image holds less than half
 * of along an axis (a cutout's parent section) is ignored. */
START_TEST(test_sections_clipped)
{
    make_tmpdir();
    trim_case("[1:41,1:30]", NULL, 0, 0, 40, 30);               /* one column past */
    trim_case("[3:40,2:37]", NULL, 2, 1, 38, 29);               /* NAXIS2 = 30, rows to 37 */
    trim_case("[5:44,1:33]", "[1:40,1:30]", 4, 0, 36, 30);      /* both axes; TRIMSEC wins */
    trim_case("UNKNOWN", "[2:39,2:31]", 1, 1, 38, 29);          /* DATASEC clipped */
    trim_case("[1:40,20:60]", NULL, 0, 0, 0, 0);                /* 11 of 41 rows: foreign */
    trim_case("[1:40,20:60]", "[1:40,1:32]", 0, 0, 40, 30);     /* ... then DATASEC */
    trim_case("[57:2104,1:30]", NULL, 0, 0, 0, 0);              /* outside */
    bias_case("[33:40,1:30]", 32, 0, 8, 30);
    bias_case("[33:40,1:34]", 32, 0, 8, 30);                    /* clipped like TRIMSEC */
    bias_case("[34:41,3:31]", 33, 2, 7, 28);
    bias_case("[41:48,1:30]", 0, 0, 0, 0);                      /* outside: ignored */
    bias_case("[33:40]", 0, 0, 0, 0);                           /* malformed: ignored */
    rm_tmpdir();
}
END_TEST

/* Calibration masters: the pixels as floats, EXPTIME (else EXPOSURE), and
 * the origin of a trimmed master from LTV1/LTV2 (<= 0, integers only). */
static void master_case(const char *extra1, const char *extra2, double exposure, int has_origin,
                        int ox, int oy)
{
    const char *cards[8] = { "SIMPLE  =                    T", "BITPIX  =                    8",
                             "NAXIS   =                    2", "NAXIS1  =                    6",
                             "NAXIS2  =                    5", extra1, extra2, NULL };
    const char *p = tpath("master.fits");
    write_cards(p, cards, 6 * 5, 9);
    float *px = NULL;
    int w = 0, h = 0;
    ss_fits_master_t info;
    char err[512];
    ck_assert_msg(ss_fits_read_master(p, &px, &w, &h, &info, err, sizeof err) == SS_OK, "%s", err);
    ck_assert(w == 6 && h == 5 && px[0] == 9.0f && px[29] == 9.0f);
    ck_assert_msg(info.exposure == exposure, "exposure %g want %g", info.exposure, exposure);
    ck_assert_int_eq(info.has_origin, has_origin);
    ck_assert_int_eq(info.origin_x, ox);
    ck_assert_int_eq(info.origin_y, oy);
    free(px);
}

START_TEST(test_master_header)
{
    make_tmpdir();
    master_case(NULL, NULL, 0.0, 0, 0, 0);
    master_case("EXPTIME =                 30.0", NULL, 30.0, 0, 0, 0);
    master_case("EXPOSURE=                 12.5", NULL, 12.5, 0, 0, 0);
    master_case("LTV1    =                -56.0", "LTV2    =                -50.0", 0.0, 1, 56, 50);
    master_case("LTV1    =                  0.0", "LTV2    =                 -3.0", 0.0, 1, 0, 3);
    master_case("LTV1    =                 56.0", "LTV2    =                 50.0", 0.0, 0, 0, 0);
    master_case("LTV1    =                 -2.5", "LTV2    =                  0.0", 0.0, 0, 0, 0);
    master_case("LTV1    =                 -2.0", NULL, 0.0, 0, 0, 0);
    rm_tmpdir();
}
END_TEST

/* DATE-OBS forms: ISO with time; date + TIME-OBS; date alone (unknown
 * unless MJD-OBS); non-ISO with MJD-OBS (MJD-OBS used). */
static double date_case(const char *date, const char *time, const char *mjd)
{
    char d[80], t[80], m[80];
    const char *cards[9] = { "SIMPLE  =                    T", "BITPIX  =                    8",
                             "NAXIS   =                    2", "NAXIS1  =                    4",
                             "NAXIS2  =                    4", NULL, NULL, NULL, NULL };
    int nc = 5;
    if (date) {
        snprintf(d, sizeof d, "DATE-OBS= '%s'", date);
        cards[nc++] = d;
    }
    if (time) {
        snprintf(t, sizeof t, "TIME-OBS= '%s'", time);
        cards[nc++] = t;
    }
    if (mjd) {
        snprintf(m, sizeof m, "MJD-OBS =  %s", mjd);
        cards[nc++] = m;
    }
    const char *p = tpath("date.fits");
    write_cards(p, cards, 16, 0);
    ss_frame_t *f = frame_alloc(16);
    char err[512];
    ck_assert_msg(ss_fits_read_frame(p, f, err, sizeof err) == SS_OK, "%s", err);
    double v = f->meta.mjd_obs;
    frame_free(f);
    return v;
}

START_TEST(test_dates)
{
    make_tmpdir();
    double base = 59000.0;   /* 2020-05-31 */
    ck_assert(fabs(date_case("2020-05-31T12:00:00", NULL, NULL) - (base + 0.5)) < 1e-9);
    ck_assert(fabs(date_case("2020-05-31T06:00:00.5Z", NULL, NULL) - (base + 0.25 + 0.5 / 86400)) < 1e-9);
    ck_assert(fabs(date_case("2020-05-31", "18:00:00", NULL) - (base + 0.75)) < 1e-9);
    ck_assert(fabs(date_case("  2020-05-31", "18:00:00", NULL) - (base + 0.75)) < 1e-9);
    ck_assert(isnan(date_case("2020-05-31", NULL, NULL)));
    ck_assert(fabs(date_case("2020-05-31", NULL, "59000.3") - 59000.3) < 1e-9);
    ck_assert(fabs(date_case("26/10/92", NULL, "48921.62787") - 48921.62787) < 1e-9);
    ck_assert(isnan(date_case("26/07/102", "19:36:37", NULL)));
    ck_assert(isnan(date_case(NULL, NULL, NULL)));
    ck_assert(isnan(date_case("2020-13-01T00:00:00", NULL, NULL)));
    rm_tmpdir();
}
END_TEST

/* The observation time of a 16×16 file with the given extra header cards. */
static double time_of(const char *const *extra, int n)
{
    const char *cards[16] = { "SIMPLE  =                    T", "BITPIX  =                    8",
                              "NAXIS   =                    2", "NAXIS1  =                    4",
                              "NAXIS2  =                    4" };
    int nc = 5;
    for (int i = 0; i < n && nc < 15; i++)
        cards[nc++] = extra[i];
    const char *p = tpath("time.fits");
    write_cards(p, cards, 16, 0);
    ss_frame_t *f = frame_alloc(16);
    char err[512];
    ck_assert_msg(ss_fits_read_frame(p, f, err, sizeof err) == SS_OK, "%s", err);
    double v = f->meta.mjd_obs;
    frame_free(f);
    return v;
}

#define TIME_OF(...) time_of((const char *const[]){ __VA_ARGS__ }, \
                             (int)(sizeof((const char *const[]){ __VA_ARGS__ }) / sizeof(char *)))

/* Issue 12: the time keywords real observatories write — a date-only
 * DATE-OBS with the time in UTCSTART, UTC-OBS, TIME-OBS or UT; MJD-OBS;
 * JD; mid-exposure DATE-AVG, MJD-AVG, MJD-MID, JD-MID less half EXPTIME;
 * DATE-OBS first where they disagree. */
START_TEST(test_time_keywords)
{
    make_tmpdir();
    const double base = 59000.0, s = 1.0 / 86400.0;   /* 2020-05-31 */
    struct { double got, want; const char *what; } c[] = {
        { TIME_OF("DATE-OBS= '2020-05-31'", "UTCSTART= '03:10:05.5'"), base + (3 * 3600 + 605.5) * s, "UTCSTART" },
        { TIME_OF("DATE-OBS= '2020-05-31'", "UTC-OBS = '18:00:00'"), base + 0.75, "UTC-OBS" },
        { TIME_OF("DATE-OBS= '2020-05-31'", "UT      = '06:00:00.25'"), base + 0.25 + 0.25 * s, "UT" },
        { TIME_OF("DATE-OBS= '2020-05-31'", "UTCSTART= '01:00:00'", "TIME-OBS= '02:00:00'"), base + 1.0 / 24, "UTCSTART first" },
        { TIME_OF("JD      =            2459000.75"), base + 0.25, "JD" },
        { TIME_OF("EXPTIME =                 60.0", "MJD-MID =             59000.5"), base + 0.5 - 30 * s, "MJD-MID" },
        { TIME_OF("EXPTIME =                 60.0", "MJD-AVG =             59000.5"), base + 0.5 - 30 * s, "MJD-AVG" },
        { TIME_OF("EXPTIME =                 60.0", "JD-MID  =            2459001.0"), base + 0.5 - 30 * s, "JD-MID" },
        { TIME_OF("EXPTIME =                 60.0", "DATE-AVG= '2020-05-31T12:00:30'"), base + 0.5, "DATE-AVG" },
        { TIME_OF("DATE-OBS= '2020-05-31T12:00:00'", "MJD-OBS =             59000.7"), base + 0.5, "DATE-OBS over a disagreeing MJD-OBS" },
        { TIME_OF("DATE-OBS= '2020-05-31'", "MJD-OBS =             59000.7"), base + 0.7, "MJD-OBS when the date has no time" },
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++)
        ck_assert_msg(fabs(c[i].got - c[i].want) * 86400.0 < 1e-3, "%s: MJD %.9f, want %.9f",
                      c[i].what, c[i].got, c[i].want);
    ck_assert(isnan(TIME_OF("DATE-OBS= '2020-05-31'", "UT      = 'noon'")));
    rm_tmpdir();
}
END_TEST

/* The header zero point of a 16×16 file with the given extra cards:
 * MAGZERO, else MAGZPT (MAGZRR), else PHOTZP (PHOTZPER); has_zp_header. */
static ss_frame_meta_t zp_of(const char *const *extra, int n)
{
    const char *cards[16] = { "SIMPLE  =                    T", "BITPIX  =                    8",
                              "NAXIS   =                    2", "NAXIS1  =                    4",
                              "NAXIS2  =                    4" };
    int nc = 5;
    for (int i = 0; i < n && nc < 15; i++)
        cards[nc++] = extra[i];
    const char *p = tpath("zp.fits");
    write_cards(p, cards, 16, 0);
    ss_frame_t *f = frame_alloc(16);
    char err[512];
    ck_assert_msg(ss_fits_read_frame(p, f, err, sizeof err) == SS_OK, "%s", err);
    ss_frame_meta_t m = f->meta;
    frame_free(f);
    return m;
}
#define ZP_OF(...) zp_of((const char *const[]){ __VA_ARGS__ }, \
                         (int)(sizeof((const char *const[]){ __VA_ARGS__ }) / sizeof(char *)))

/* Issue 12, item 6: the photometric zero-point keywords (photometry.h). */
START_TEST(test_zeropoint_keywords)
{
    make_tmpdir();
    ss_frame_meta_t m = ZP_OF("EXPTIME =                 10.0");
    ck_assert_int_eq(m.has_zp_header, 0);
    m = ZP_OF("MAGZERO =                25.10");
    ck_assert_int_eq(m.has_zp_header, 1);
    ck_assert_double_eq_tol(m.zp_header, 25.1, 1e-12);
    ck_assert_double_eq(m.zp_header_err, 0.0);
    m = ZP_OF("PHOTZP  =                 23.5", "PHOTZPER=                 0.04");
    ck_assert_double_eq_tol(m.zp_header, 23.5, 1e-12);
    ck_assert_double_eq_tol(m.zp_header_err, 0.04, 1e-12);
    m = ZP_OF("PHOTZP  =                 23.5", "MAGZPT  =                 24.0", "MAGZRR  =                 0.02");
    ck_assert_double_eq_tol(m.zp_header, 24.0, 1e-12);     /* MAGZPT before PHOTZP */
    ck_assert_double_eq_tol(m.zp_header_err, 0.02, 1e-12);
    m = ZP_OF("MAGZERO = 'bright'", "PHOTZP  =                 23.5");
    ck_assert_double_eq_tol(m.zp_header, 23.5, 1e-12);     /* not a number: the next one */
    rm_tmpdir();
}
END_TEST

/* ---- hostile files ------------------------------------------------------ */

START_TEST(test_corrupt_files)
{
    make_tmpdir();
    /* a valid file to mutilate */
    ss_frame_t *f = frame_alloc(64 * 64 * 2);
    f->width = f->height = 64;
    f->dtype = SS_DT_U16;
    for (int i = 0; i < 64 * 64; i++)
        ((uint16_t *)f->pixels)[i] = (uint16_t)(i * 7);
    char err[512];
    const char *good = tpath("good.fits");
    ck_assert_int_eq(ss_fits_write_frame(good, f, err, sizeof err), SS_OK);
    size_t n;
    unsigned char *b = slurp(good, &n);
    ck_assert_int_eq(n % 2880, 0);

    /* missing file: I/O error */
    expect_error(tpath("missing.fits"), SS_ERR_IO);
    /* empty file */
    spit(tpath("empty.fits"), "", 0);
    expect_error(tpath("empty.fits"), SS_ERR_FORMAT);
    /* text */
    const char *txt = "This is not a FITS file at all.\nJust some text.\n";
    spit(tpath("text.fits"), txt, strlen(txt));
    expect_error(tpath("text.fits"), SS_ERR_FORMAT);
    /* truncated: in the data, at the header/data boundary, inside the header */
    spit(tpath("trunc_data.fits"), b, n - 2880);
    expect_error(tpath("trunc_data.fits"), SS_ERR_FORMAT);
    spit(tpath("trunc_hdr.fits"), b, 2880);
    expect_error(tpath("trunc_hdr.fits"), SS_ERR_FORMAT);
    spit(tpath("trunc_mid.fits"), b, 1000);
    expect_error(tpath("trunc_mid.fits"), SS_ERR_FORMAT);
    /* header bytes overwritten: SIMPLE card destroyed; NAXIS1 garbage */
    unsigned char *c = malloc(n);
    memcpy(c, b, n);
    memset(c, 0xA5, 80);
    spit(tpath("bad_simple.fits"), c, n);
    expect_error(tpath("bad_simple.fits"), SS_ERR_FORMAT);
    memcpy(c, b, n);
    memcpy(c + 3 * 80 + 10, "        #@!x", 12);   /* the value of NAXIS1 */
    spit(tpath("bad_naxis1.fits"), c, n);
    expect_error(tpath("bad_naxis1.fits"), SS_OK);   /* any error */
    /* data bytes overwritten: still a valid FITS file, reads, changed pixel */
    memcpy(c, b, n);
    c[n - 2880 * 2 + 100] ^= 0xFF;
    spit(tpath("bad_data.fits"), c, n);
    ss_frame_t *g = frame_alloc(64 * 64 * 2);
    ck_assert_int_eq(ss_fits_read_frame(tpath("bad_data.fits"), g, err, sizeof err), SS_OK);
    ck_assert_int_ne(memcmp(g->pixels, f->pixels, 64 * 64 * 2), 0);

    /* random byte damage anywhere: any outcome but a crash; errors name the file */
    uint64_t x = 12345;
    for (int trial = 0; trial < 200; trial++) {
        memcpy(c, b, n);
        int nbytes = 1 + trial % 8;
        for (int k = 0; k < nbytes; k++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            size_t pos = (size_t)(x >> 33) % (trial % 2 ? 2880 : n);
            c[pos] = (unsigned char)(x >> 20);
        }
        size_t len = trial % 5 == 0 ? (size_t)(x >> 40) % n : n;
        spit(tpath("fuzz.fits"), c, len);
        err[0] = '\0';
        ss_err_t e = ss_fits_read_frame(tpath("fuzz.fits"), g, err, sizeof err);
        if (e != SS_OK)
            ck_assert_msg(strstr(err, "fuzz.fits") != NULL, "trial %d: '%s'", trial, err);
        float *fl = NULL;
        int w, h;
        if (ss_fits_read_float(tpath("fuzz.fits"), &fl, &w, &h, err, sizeof err) == SS_OK)
            free(fl);
    }

    /* zero-size image */
    const char *zero[] = { "SIMPLE  =                    T", "BITPIX  =                   16",
                           "NAXIS   =                    2", "NAXIS1  =                    0",
                           "NAXIS2  =                   10", NULL };
    write_cards(tpath("zero.fits"), zero, 0, 0);
    expect_error(tpath("zero.fits"), SS_OK);
    /* NAXIS 3 with 3 planes: unsupported; with 1 plane: fine */
    const char *cube[] = { "SIMPLE  =                    T", "BITPIX  =                    8",
                           "NAXIS   =                    3", "NAXIS1  =                    8",
                           "NAXIS2  =                    8", "NAXIS3  =                    3", NULL };
    write_cards(tpath("cube.fits"), cube, 8 * 8 * 3, 1);
    expect_error(tpath("cube.fits"), SS_ERR_UNSUPPORTED);
    const char *plane[] = { "SIMPLE  =                    T", "BITPIX  =                    8",
                            "NAXIS   =                    3", "NAXIS1  =                    8",
                            "NAXIS2  =                    8", "NAXIS3  =                    1", NULL };
    write_cards(tpath("plane.fits"), plane, 8 * 8, 3);
    ck_assert_int_eq(ss_fits_read_frame(tpath("plane.fits"), g, err, sizeof err), SS_OK);
    ck_assert(g->width == 8 && g->height == 8 && ((uint8_t *)g->pixels)[63] == 3);
    /* 1-D */
    const char *line[] = { "SIMPLE  =                    T", "BITPIX  =                    8",
                           "NAXIS   =                    1", "NAXIS1  =                    8", NULL };
    write_cards(tpath("line.fits"), line, 8, 0);
    expect_error(tpath("line.fits"), SS_ERR_UNSUPPORTED);
    /* huge NAXIS values, no data behind them */
    const char *huge[] = { "SIMPLE  =                    T", "BITPIX  =                  -32",
                           "NAXIS   =                    2", "NAXIS1  =           2000000000",
                           "NAXIS2  =           2000000000", NULL };
    write_cards(tpath("huge.fits"), huge, 0, 0);
    expect_error(tpath("huge.fits"), SS_OK);
    const char *big[] = { "SIMPLE  =                    T", "BITPIX  =                   16",
                          "NAXIS   =                    2", "NAXIS1  =                40000",
                          "NAXIS2  =                40000", NULL };
    write_cards(tpath("big.fits"), big, 0, 0);
    expect_error(tpath("big.fits"), SS_ERR_SIZE);
    /* BITPIX not allowed */
    const char *bp[] = { "SIMPLE  =                    T", "BITPIX  =                   12",
                         "NAXIS   =                    2", "NAXIS1  =                    4",
                         "NAXIS2  =                    4", NULL };
    write_cards(tpath("bitpix.fits"), bp, 32, 0);
    expect_error(tpath("bitpix.fits"), SS_OK);
    /* primary empty, no extension */
    const char *nodata[] = { "SIMPLE  =                    T", "BITPIX  =                    8",
                             "NAXIS   =                    0", NULL };
    write_cards(tpath("nodata.fits"), nodata, 0, 0);
    expect_error(tpath("nodata.fits"), SS_ERR_FORMAT);

    /* a truncated tile-compressed file */
    size_t zn;
    unsigned char *z = slurp(data_path("trailblazer/cutout_c4d_200306_000415_ori.fits.fz"), &zn);
    spit(tpath("trunc.fits.fz"), z, 2880 * 9 + 1234);   /* inside HDU 2's heap */
    expect_error(tpath("trunc.fits.fz"), SS_OK);
    /* garbage in the compressed heap of HDU 2 */
    raw_fits_t r;
    raw_parse(z, zn, &r);
    memset(z + r.data_off + 2880 * 2 + 1000, 0x5A, 3000);
    spit(tpath("garbled.fits.fz"), z, zn);
    err[0] = '\0';
    ss_err_t e = ss_fits_read_frame(tpath("garbled.fits.fz"), g, err, sizeof err);
    if (e != SS_OK)
        ck_assert_ptr_nonnull(strstr(err, "garbled.fits.fz"));
    free(z);

    /* NULL arguments */
    ck_assert_int_eq(ss_fits_read_frame(good, NULL, err, sizeof err), SS_ERR_INVALID);
    ck_assert_int_eq(ss_fits_read_float(good, NULL, NULL, NULL, err, sizeof err), SS_ERR_INVALID);
    ck_assert_int_ne(ss_fits_probe(NULL, NULL, NULL, NULL, err, sizeof err), SS_OK);
    free(c);
    free(b);
    frame_free(f);
    frame_free(g);
    rm_tmpdir();
}
END_TEST

/* ---- residual writer ---------------------------------------------------- */

START_TEST(test_residual_writer)
{
    make_tmpdir();
    enum { W = 97, H = 61 };
    ss_result_t res;
    memset(&res, 0, sizeof res);
    ck_assert_int_eq(ss_result_init(&res, W * H, 16), 0);
    ss_frame_meta_clear(&res.meta);
    res.meta.seq = 42;
    res.meta.mjd_obs = 60636.25;          /* 2024-11-22T06:00:00 */
    res.meta.exposure = 10.0;
    ss_strlcpy(res.meta.feed, "east", sizeof res.meta.feed);
    /* a source name longer than one card's string */
    snprintf(res.meta.source, sizeof res.meta.source,
             "/data/incoming/night-2024-11-22/camera-east/very/long/path/to/frame_00042.fits");
    set_wcs(&res.meta);
    res.width = W;
    res.height = H;
    res.status = SS_STATUS_OK;
    res.shift.ok = 1;
    res.shift.sx = 1.25;
    res.shift.sy = -0.75;
    res.shift.err_x = 0.01;
    res.shift.err_y = 0.02;
    res.shift.iterations = 3;
    res.sigma = 3.5f;
    res.n_weights = 3;
    res.weights[0] = 0.5;
    res.weights[1] = 0.3;
    res.weights[2] = 0.2;
    res.has_residual = 1;
    res.origin_x = 8;       /* a region of interest starting at input pixel (8, 4) */
    res.origin_y = 4;
    for (int i = 0; i < W * H; i++) {
        uint32_t hsh = (uint32_t)i * 2654435761u;
        float v = (float)((int)(hsh >> 16) - 32768) * 1e-3f;
        if (hsh % 17 == 0)
            v = NAN;
        if (i == 5)
            v = -0.0f;
        if (i == 6)
            v = 1e-40f;      /* subnormal */
        if (i == 7)
            v = 3.4e38f;
        res.residual[i] = v;
    }
    for (int comp = 0; comp < 2; comp++) {
        const char *p = tpath(comp ? "res.fits.fz" : "res.fits");
        char err[512];
        ck_assert_msg(ss_fits_write_residual(p, &res, comp, err, sizeof err) == SS_OK, "%s", err);
        int fv = fitsverify_clean(p);
        if (fv < 0)
            fprintf(stderr, "check_fits: fitsverify not installed; verification skipped\n");
        else
            ck_assert_msg(fv == 1, "%s does not pass fitsverify", p);

        /* bit-exact read-back, NaN where NaN */
        float *back = NULL;
        int w, h;
        ck_assert_msg(ss_fits_read_float(p, &back, &w, &h, err, sizeof err) == SS_OK, "%s", err);
        ck_assert(w == W && h == H);
        for (int i = 0; i < W * H; i++) {
            if (isnan(res.residual[i])) {
                ck_assert_msg(isnan(back[i]), "pixel %d lost its NaN", i);
                continue;
            }
            ck_assert_msg(memcmp(&back[i], &res.residual[i], 4) == 0, "pixel %d: %a want %a", i,
                          (double)back[i], (double)res.residual[i]);
        }
        free(back);

        /* header keys and checksums, through CFITSIO */
        fitsfile *fp;
        int st = 0, type, nh = 0;
        fits_open_diskfile(&fp, p, READONLY, &st);
        fits_get_num_hdus(fp, &nh, &st);
        ck_assert_int_eq(nh, comp ? 2 : 1);
        for (int k = 1; k <= nh; k++) {
            int dataok = 0, hduok = 0;
            fits_movabs_hdu(fp, k, &type, &st);
            fits_verify_chksum(fp, &dataok, &hduok, &st);
            ck_assert_msg(dataok == 1 && hduok == 1, "HDU %d checksums %d %d", k, dataok, hduok);
        }
        if (comp) {
            int is_comp = 0;
            fits_movabs_hdu(fp, 2, &type, &st);
            is_comp = fits_is_compressed_image(fp, &st);
            ck_assert_int_eq(is_comp, 1);
            char ctype[FLEN_VALUE] = "";
            fits_read_key(fp, TSTRING, "ZCMPTYPE", ctype, NULL, &st);
            ck_assert_str_eq(ctype, "GZIP_2");
            char q[FLEN_VALUE] = "";
            int st2 = 0;
            fits_read_key(fp, TSTRING, "ZQUANTIZ", q, NULL, &st2);
            ck_assert_msg(st2 != 0 || strcmp(q, "NONE") == 0, "ZQUANTIZ = %s", q);
        }
        double v;
        long long seq;
        char s[FLEN_VALUE];
        fits_read_key(fp, TLONGLONG, "SEQ", &seq, NULL, &st);
        ck_assert_int_eq(seq, 42);
        fits_read_key(fp, TDOUBLE, "SHIFTX", &v, NULL, &st);
        ck_assert(v == 1.25);
        fits_read_key(fp, TDOUBLE, "SHIFTY", &v, NULL, &st);
        ck_assert(v == -0.75);
        fits_read_key(fp, TDOUBLE, "SHIFTEY", &v, NULL, &st);
        ck_assert(v == 0.02);
        fits_read_key(fp, TDOUBLE, "SIGMA", &v, NULL, &st);
        ck_assert(v == 3.5);
        fits_read_key(fp, TDOUBLE, "W0002", &v, NULL, &st);
        ck_assert(v == 0.3);
        fits_read_key(fp, TDOUBLE, "MJD-OBS", &v, NULL, &st);
        ck_assert(v == 60636.25);
        fits_read_key(fp, TSTRING, "DATE-OBS", s, NULL, &st);
        ck_assert_str_eq(s, "2024-11-22T06:00:00.000");
        fits_read_key(fp, TSTRING, "STATUS", s, NULL, &st);
        ck_assert_str_eq(s, "ok");
        fits_read_key(fp, TSTRING, "CTYPE1", s, NULL, &st);
        ck_assert_str_eq(s, "RA---TAN");
        /* the WCS describes the residual's own grid: CRPIX moved by the origin */
        fits_read_key(fp, TDOUBLE, "CRPIX1", &v, NULL, &st);
        ck_assert(v == 18.25 - 8);
        fits_read_key(fp, TDOUBLE, "CRPIX2", &v, NULL, &st);
        ck_assert(v == 11.5 - 4);
        fits_read_key(fp, TDOUBLE, "LTV1", &v, NULL, &st);
        ck_assert(v == -8);
        fits_read_key(fp, TDOUBLE, "LTV2", &v, NULL, &st);
        ck_assert(v == -4);
        int lg = 0;
        fits_read_key(fp, TLOGICAL, "REGOK", &lg, NULL, &st);
        ck_assert_int_eq(lg, 1);
        char *longs = NULL;
        fits_read_key_longstr(fp, "SOURCE", &longs, NULL, &st);
        ck_assert_int_eq(st, 0);
        ck_assert_str_eq(longs, res.meta.source);
        fits_free_memory(longs, &st);
        ck_assert_int_eq(st, 0);
        int st3 = 0;
        fits_read_key(fp, TDOUBLE, "W0004", &v, NULL, &st3);
        ck_assert_int_eq(st3, KEY_NO_EXIST);
        fits_close_file(fp, &st);

        /* read as a frame: metadata comes back */
        ss_frame_t *f = frame_alloc(W * H * 4);
        ck_assert_msg(ss_fits_read_frame(p, f, err, sizeof err) == SS_OK, "%s", err);
        ck_assert_uint_eq(f->meta.seq, 42);
        ck_assert(fabs(f->meta.mjd_obs - 60636.25) < 1e-9);
        ck_assert_str_eq(f->meta.feed, "east");
        frame_free(f);
    }
    /* an unknown sigma and time are left out of the header; still verified */
    res.sigma = NAN;
    res.meta.mjd_obs = NAN;
    res.status = SS_STATUS_WARMUP;
    char err[512];
    const char *p = tpath("res_nan.fits");
    ck_assert_msg(ss_fits_write_residual(p, &res, 0, err, sizeof err) == SS_OK, "%s", err);
    ck_assert_int_ne(fitsverify_clean(p), 0);
    {
        fitsfile *fp;
        int st = 0, st2 = 0;
        double v;
        char s[FLEN_VALUE];
        fits_open_diskfile(&fp, p, READONLY, &st);
        fits_read_key(fp, TDOUBLE, "SIGMA", &v, NULL, &st2);
        ck_assert_int_eq(st2, KEY_NO_EXIST);
        st2 = 0;
        fits_read_key(fp, TSTRING, "DATE-OBS", s, NULL, &st2);
        ck_assert_int_eq(st2, KEY_NO_EXIST);
        fits_read_key(fp, TSTRING, "STATUS", s, NULL, &st);
        ck_assert_str_eq(s, "warmup");
        fits_close_file(fp, &st);
        ck_assert_int_eq(st, 0);
    }
    /* no residual: refused */
    res.has_residual = 0;
    ck_assert_int_eq(ss_fits_write_residual(p, &res, 0, err, sizeof err), SS_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(err, p));
    ss_result_free(&res);
    rm_tmpdir();
}
END_TEST

/* Issue 11: a gzip'ed file is inflated at most ss_fits_inflate_limit()
 * bytes, once per open, whatever its trailer claims: 8 MB of zeros after
 * a valid 16x16 image (a "gzip bomb" of a few kB) is refused under a 1 MiB
 * limit with SS_ERR_SIZE and a message that says why, and read whole
 * under a larger one. */
START_TEST(test_gzip_inflate_limit)
{
    make_tmpdir();
    char cmd[1400], err[512];
    const char *plain = tpath("bomb.fits"), *gz = tpath("bomb.fits.gz");
    ss_frame_t *f = frame_alloc(16 * 16 * 2);
    f->width = f->height = 16;
    f->dtype = SS_DT_U16;
    ck_assert_int_eq(ss_fits_write_frame(plain, f, err, sizeof err), SS_OK);
    snprintf(cmd, sizeof cmd, "{ cat '%s'; head -c 8000000 /dev/zero; } | gzip -c > '%s'", plain, gz);
    ck_assert_int_eq(system(cmd), 0);
    const size_t was = ss_fits_inflate_limit();
    ss_fits_set_inflate_limit((size_t)1 << 20);
    ss_frame_t *g = frame_alloc(16 * 16 * 2);
    ck_assert_int_eq(ss_fits_read_frame(gz, g, err, sizeof err), SS_ERR_SIZE);
    ck_assert_msg(strstr(err, "inflates to more than 1048576 bytes"), "%s", err);
    ss_fits_set_inflate_limit((size_t)16 << 20);
    ck_assert_msg(ss_fits_read_frame(gz, g, err, sizeof err) == SS_OK, "%s", err);
    ck_assert_int_eq(g->width, 16);
    ss_fits_set_inflate_limit(was);
    frame_free(f);
    frame_free(g);
    rm_tmpdir();
}
END_TEST

/* Issue 11: a gzip'ed file is inflated once on its way in — the FITS
 * source opens it once for the size check and the read
 * (ss_fits_image_open), and the DATE-OBS look of the directory and glob
 * modes inflates only the headers (ss_fits_open_header). Before, probe,
 * read and date look inflated it three times. */
START_TEST(test_gzip_inflated_once)
{
    enum { W = 600, H = 600 };
    make_tmpdir();
    char cmd[1400], err[512];
    const char *plain = tpath("big.fits"), *gz = tpath("big.fits.gz");
    ss_frame_t *f = frame_alloc(W * H * 2);
    f->width = W;
    f->height = H;
    f->dtype = SS_DT_U16;
    for (int i = 0; i < W * H; i++)
        ((uint16_t *)f->pixels)[i] = (uint16_t)(i % 1000);
    f->meta.mjd_obs = 61000.25;
    ck_assert_int_eq(ss_fits_write_frame(plain, f, err, sizeof err), SS_OK);
    struct stat st;
    ck_assert_int_eq(stat(plain, &st), 0);
    snprintf(cmd, sizeof cmd, "gzip -c '%s' > '%s'", plain, gz);
    ck_assert_int_eq(system(cmd), 0);

    size_t before = ss_fits_inflated_bytes();
    const double mjd = ss_fits_date_obs_mjd(gz);
    ck_assert_msg(fabs(mjd - 61000.25) < 1e-6, "date %.6f", mjd);
    const size_t peeked = ss_fits_inflated_bytes() - before;
    ck_assert_msg(peeked <= SS_FITS_HEADER_PEEK && peeked < (size_t)st.st_size, "%zu", peeked);

    before = ss_fits_inflated_bytes();
    ss_fits_image_t *im = NULL;
    ck_assert_msg(ss_fits_image_open(gz, &im, err, sizeof err) == SS_OK, "%s", err);
    int w = 0, h = 0;
    ss_dtype_t dt;
    ss_fits_image_size(im, &w, &h, &dt);
    ck_assert(w == W && h == H && dt == SS_DT_U16);
    ss_frame_t *g = frame_alloc(W * H * 2);
    ck_assert_msg(ss_fits_image_read(im, g, err, sizeof err) == SS_OK, "%s", err);
    ss_fits_image_close(&im);
    ck_assert_ptr_null(im);
    ss_fits_image_close(&im);   /* accepts NULL */
    ck_assert_int_eq(ss_fits_inflated_bytes() - before, (size_t)st.st_size);
    ck_assert_int_eq(memcmp(f->pixels, g->pixels, (size_t)W * H * 2), 0);
    ck_assert(fabs(g->meta.mjd_obs - 61000.25) < 1e-6);
    frame_free(f);
    frame_free(g);
    rm_tmpdir();
}
END_TEST

/* The input name results carry (PROTOCOL.md §5 "input"): the base name,
 * valid UTF-8 kept, invalid bytes and control characters as '?', cut at a
 * character boundary. */
START_TEST(test_input_name)
{
    char out[16];
    ss_input_name(out, sizeof out, "/data/night/img_0042.fits");
    ck_assert_str_eq(out, "img_0042.fits");
    ss_input_name(out, sizeof out, "plain.fits");
    ck_assert_str_eq(out, "plain.fits");
    ss_input_name(out, sizeof out, "d/M\xc3\xbcnchen.fits");      /* ü kept */
    ck_assert_str_eq(out, "M\xc3\xbcnchen.fits");
    ss_input_name(out, sizeof out, "a\xff\x01\x7f\xc3(b");        /* bad bytes, a cut sequence */
    ck_assert_str_eq(out, "a????" "(b");                       /* (no trigraph) */
    ss_input_name(out, sizeof out, "\xed\xa0\x80\xc0\xaf.fits");  /* a surrogate, an overlong */
    ck_assert_str_eq(out, "?????.fits");
    ss_input_name(out, 8, "abcde\xc3\xbc");                       /* 8 bytes: no half ü */
    ck_assert_str_eq(out, "abcde\xc3\xbc");
    ss_input_name(out, 7, "abcde\xc3\xbc");
    ck_assert_str_eq(out, "abcde");
    ss_input_name(out, sizeof out, "dir/");
    ck_assert_str_eq(out, "");
}
END_TEST

static Suite *fits_suite(void)
{
    Suite *s = suite_create("fits");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_roundtrip_every_dtype);
    tcase_add_test(tc, test_input_name);
    tcase_add_test(tc, test_gzip_inflate_limit);
    tcase_add_test(tc, test_gzip_inflated_once);
    tcase_add_test(tc, test_bscale_bzero);
    tcase_add_test(tc, test_real_astride_bad_date);
    tcase_add_test(tc, test_real_decam_fz);
    tcase_add_test(tc, test_trimsec);
    tcase_add_test(tc, test_sections_clipped);
    tcase_add_test(tc, test_master_header);
    tcase_add_test(tc, test_dates);
    tcase_add_test(tc, test_time_keywords);
    tcase_add_test(tc, test_zeropoint_keywords);
    tcase_add_test(tc, test_corrupt_files);
    tcase_add_test(tc, test_residual_writer);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    ss_log_setup(SS_LOG_ERR, 0);    /* the hostile files log warnings by design */
    SRunner *sr = srunner_create(fits_suite());
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf == 0 ? 0 : 1;
}
