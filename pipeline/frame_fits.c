/*
 * frame_fits.c — frames to and from FITS files through CFITSIO (contract in
 * frame_fits.h).
 *
 * Files are opened with fits_open_diskfile / created with
 * fits_create_diskfile: a path is a path, never CFITSIO's extended file name
 * syntax (a name with brackets or a leading '!' must not change meaning).
 *
 * Reading, in order (plain, gzip'ed or tile-compressed files): pick the image HDU (the primary when it has data, else
 * the first image extension — tile-compressed ones included, CFITSIO
 * presents them as images), check its geometry (2-D, or N-D with every axis
 * beyond the second of length 1; no empty or absurd sizes), map BITPIX and
 * BZERO/BSCALE to a pixel type, read the pixels, then the metadata. A
 * header value that does not parse is logged and left unknown. Time and
 * exposure keywords missing from an extension are taken from the primary
 * header (the usual layout of multi-extension and .fz files).
 *
 * Writing goes to "<path>.tmp" and is renamed over path at the end, so a
 * reader never sees half a file. Every HDU gets CHECKSUM/DATASUM.
 */
#include "frame_fits.h"
#ifdef SS_HAVE_ZLIB
#include <zlib.h>
#endif

#include <errno.h>
#include <fcntl.h>
#include <fitsio.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pipeline.h"

#define TAG "fits"

#define FITS_MAX_PIXELS (1ll << 28)     /* 16384²: larger images are refused (a 1 GiB float plane) */
#define FITS_BLOCK 2880
#define FITS_MAX_AXES 9                 /* NAXIS <= 999 by the standard; we look at 9 */
#define BZERO_U16 32768.0
#define WCS_AXES 2

/* ---- errors ------------------------------------------------------------- */

static void set_err(char *err, size_t n, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void set_err(char *err, size_t n, const char *path, const char *fmt, ...)
{
    if (!err || n == 0)
        return;
    int k = snprintf(err, n, "%s: ", path ? path : "(null)");
    if (k < 0 || (size_t)k >= n)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err + k, n - (size_t)k, fmt, ap);
    va_end(ap);
}

/* "what: CFITSIO's text (status N)" */
static ss_err_t fits_fail(char *err, size_t n, const char *path, const char *what, int status,
                          ss_err_t code)
{
    char txt[FLEN_STATUS];
    fits_get_errstatus(status, txt);
    set_err(err, n, path, "%s: %s (CFITSIO status %d)", what, txt, status);
    return code;
}

/* ---- header helpers ----------------------------------------------------- */

/* String keyword: 1 and the value in buf (FLEN_VALUE) if present and a
 * string; 0 otherwise (status untouched). */
static int key_str(fitsfile *fp, const char *key, char *buf)
{
    int st = 0;
    buf[0] = '\0';
    fits_read_key(fp, TSTRING, key, buf, NULL, &st);
    if (st != 0)
        return 0;
    /* CFITSIO drops trailing blanks only; some writers right-justify */
    size_t lead = strspn(buf, " ");
    if (lead)
        memmove(buf, buf + lead, strlen(buf + lead) + 1);
    return 1;
}

/* Numeric keyword: 1 = value in *v; 0 = absent; -1 = present, not a number. */
static int key_dbl(fitsfile *fp, const char *key, double *v)
{
    int st = 0;
    char card[FLEN_CARD];
    fits_read_card(fp, key, card, &st);
    if (st != 0)
        return 0;
    st = 0;
    fits_read_key_dbl(fp, key, v, NULL, &st);
    return st == 0 && isfinite(*v) ? 1 : -1;
}

/* ---- which HDU, what geometry, which type ------------------------------- */

typedef struct img_info {
    int hdu;                    /* 1-based HDU number of the image */
    int w, h;
    int bitpix;
    double bzero, bscale;
    ss_dtype_t dtype;
    int read_type;              /* CFITSIO datatype to read as */
    int proxy_fd;               /* the file's descriptor when opened as /proc/self/fd/N,
                                 * else -1; closed with the file (close_image) */
} img_info_t;

/* Close what open_image opened. The proxy descriptor stays open as long as
 * CFITSIO's handle: CFITSIO shares handles between opens of the same name,
 * and a reused descriptor number would give another file the same name. */
static void close_image(fitsfile *fp, img_info_t *ii)
{
    ss_fits_close_readonly(fp, ii->proxy_fd);
    ii->proxy_fd = -1;
}

/* Move to the image HDU (primary if it has data, else the first image
 * extension with data). */
static ss_err_t find_image_hdu(fitsfile *fp, const char *path, int *naxis, char *err, size_t n)
{
    int st = 0, type = 0;
    fits_movabs_hdu(fp, 1, &type, &st);
    if (st)
        return fits_fail(err, n, path, "cannot read the primary header", st, SS_ERR_FORMAT);
    fits_get_img_dim(fp, naxis, &st);
    if (st)
        return fits_fail(err, n, path, "cannot read NAXIS of the primary HDU", st, SS_ERR_FORMAT);
    if (*naxis > 0)
        return SS_OK;
    for (int hdu = 2;; hdu++) {
        st = 0;
        fits_movabs_hdu(fp, hdu, &type, &st);
        if (st == END_OF_FILE) {
            set_err(err, n, path, "no image data (empty primary HDU and no image extension)");
            return SS_ERR_FORMAT;
        }
        if (st)
            return fits_fail(err, n, path, "cannot read an extension header", st, SS_ERR_FORMAT);
        if (type != IMAGE_HDU)
            continue;           /* compressed images count as IMAGE_HDU */
        fits_get_img_dim(fp, naxis, &st);
        if (st)
            return fits_fail(err, n, path, "cannot read NAXIS of an image extension", st,
                             SS_ERR_FORMAT);
        if (*naxis > 0)
            return SS_OK;
    }
}

/* Pixel type by the contract's table: BITPIX 8 -> u8; 16 -> i16, or u16
 * with BZERO 32768 / BSCALE 1; 32 -> i32; floats and any other scaling ->
 * f32 (CFITSIO applies BSCALE/BZERO while reading). */
static void map_type(img_info_t *ii)
{
    int unscaled = ii->bscale == 1.0 && ii->bzero == 0.0;
    ii->dtype = SS_DT_F32;
    ii->read_type = TFLOAT;
    if (ii->bitpix == BYTE_IMG && unscaled) {
        ii->dtype = SS_DT_U8;
        ii->read_type = TBYTE;
    } else if (ii->bitpix == SHORT_IMG && unscaled) {
        ii->dtype = SS_DT_I16;
        ii->read_type = TSHORT;
    } else if (ii->bitpix == SHORT_IMG && ii->bscale == 1.0 && ii->bzero == BZERO_U16) {
        ii->dtype = SS_DT_U16;
        ii->read_type = TUSHORT;
    } else if (ii->bitpix == LONG_IMG && unscaled) {
        ii->dtype = SS_DT_I32;
        ii->read_type = TINT;
    }
}

/* The most bytes a gzip'ed file may inflate to (ss_fits_set_inflate_limit). */
static _Atomic size_t inflate_limit = (size_t)1 << 30;

void ss_fits_set_inflate_limit(size_t bytes)
{
    atomic_store(&inflate_limit, bytes);
}

size_t ss_fits_inflate_limit(void)
{
    return atomic_load(&inflate_limit);
}

/* Bytes inflated from gzip'ed files since the start (ss_fits_inflated_bytes). */
static _Atomic size_t inflated_bytes;

size_t ss_fits_inflated_bytes(void)
{
    return atomic_load(&inflated_bytes);
}

/* Whether the file at path starts with the gzip magic. */
static int is_gzip(const char *path)
{
    unsigned char magic[2] = { 0, 0 };
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    const int got = (int)fread(magic, 1, 2, f);
    fclose(f);
    return got == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
}

#ifdef SS_HAVE_ZLIB
/* Inflate the gzip'ed file at path into a new memfd, stopping as soon as
 * more than limit bytes come out: the fd (at offset 0), or -1 with
 * *too_big set when the limit was passed (else a read or memory error).
 * With peek > 0 only the first peek bytes are inflated (a header read):
 * no error when the file is longer. */
static int inflate_bounded(const char *path, size_t limit, size_t peek, int *too_big)
{
    *too_big = 0;
    gzFile gz = gzopen(path, "rb");
    if (!gz)
        return -1;
    const int fd = memfd_create("skysieve-inflated", MFD_CLOEXEC);
    char buf[65536];
    size_t total = 0;
    int n = 0;
    while (fd >= 0 && (n = gzread(gz, buf, sizeof buf)) > 0) {
        if (peek > 0 && total + (size_t)n >= peek) {
            n = (int)(peek - total);
            total = peek;
            if (write(fd, buf, (size_t)n) != n)
                break;
            n = 0;          /* stop here, as at the end of the stream */
            break;
        }
        total += (size_t)n;
        if (total > limit) {
            *too_big = 1;
            break;
        }
        if (write(fd, buf, (size_t)n) != n)
            break;
    }
    atomic_fetch_add(&inflated_bytes, total);
    gzclose(gz);
    if (fd < 0 || n != 0 || lseek(fd, 0, SEEK_SET) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}
#else
/* Without zlib: the gzip trailer's ISIZE (the inflated size mod 2^32),
 * which CFITSIO allocates up front, is held to the limit; a file that lies
 * about it is inflated by CFITSIO unbounded. The fd of path, or -1 with
 * *too_big set. */
static int inflate_bounded(const char *path, size_t limit, size_t peek, int *too_big)
{
    (void)peek;
    *too_big = 0;
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    unsigned char t[4];
    if (fd < 0)
        return -1;
    const off_t end = lseek(fd, -4, SEEK_END);
    if (end < 0 || read(fd, t, 4) != 4 || lseek(fd, 0, SEEK_SET) != 0) {
        close(fd);
        return -1;
    }
    const size_t isize = (size_t)t[0] | (size_t)t[1] << 8 | (size_t)t[2] << 16 | (size_t)t[3] << 24;
    if (isize > limit) {
        *too_big = 1;
        close(fd);
        return -1;
    }
    return fd;
}
#endif

/* ss_fits_open_readonly, inflating only the first peek bytes of a
 * gzip'ed file when peek > 0. */
static int open_readonly(const char *path, size_t peek, void **fptr, int *proxy_fd)
{
    *fptr = NULL;
    *proxy_fd = -1;
    /* A gzip'ed file (by its magic bytes, whatever its name) is inflated
     * here, at most ss_fits_inflate_limit() bytes, into a memfd that CFITSIO
     * reads through /proc/self/fd/N as a plain file: CFITSIO alone
     * allocates what the gzip trailer claims (a 300-byte file asked for
     * 2.4 GB under the fuzzer) and grows without bound, and it picks the
     * decompressor by searching the whole path for ".Z" and ".bz2". */
    char proxy[64];
    const char *open_path = path;
    if (is_gzip(path)) {
        int too_big = 0;
        *proxy_fd = inflate_bounded(path, ss_fits_inflate_limit(), peek, &too_big);
        if (*proxy_fd < 0)
            return too_big ? SS_FITS_TOO_LARGE : FILE_NOT_OPENED;
        snprintf(proxy, sizeof proxy, "/proc/self/fd/%d", *proxy_fd);
        open_path = proxy;
    }
    fitsfile *fp = NULL;
    int st = 0;
    fits_open_diskfile(&fp, open_path, READONLY, &st);
    *fptr = fp;
    if (st && *proxy_fd >= 0 && !fp) {
        close(*proxy_fd);
        *proxy_fd = -1;
    }
    return st;
}

int ss_fits_open_readonly(const char *path, void **fptr, int *proxy_fd)
{
    return open_readonly(path, 0, fptr, proxy_fd);
}

int ss_fits_open_header(const char *path, void **fptr, int *proxy_fd)
{
    return open_readonly(path, SS_FITS_HEADER_PEEK, fptr, proxy_fd);
}

void ss_fits_close_readonly(void *fptr, int proxy_fd)
{
    int st = 0;
    if (fptr)
        fits_close_file((fitsfile *)fptr, &st);
    if (proxy_fd >= 0)
        close(proxy_fd);
}

static ss_err_t describe_image(fitsfile *fp, const char *path, long long have, img_info_t *ii,
                               char *err, size_t n);

/* Open path and describe its image; on success *out_fp is open at the
 * image HDU (the caller closes it). */
static ss_err_t open_image(const char *path, fitsfile **out_fp, img_info_t *ii, char *err,
                           size_t n)
{
    *out_fp = NULL;
    ii->proxy_fd = -1;
    if (!path || !*path) {
        set_err(err, n, path ? path : "(null)", "no file name");
        return SS_ERR_INVALID;
    }
    /* a missing or unreadable file is an I/O error, not a format error */
    FILE *probe = fopen(path, "rb");
    if (!probe) {
        set_err(err, n, path, "cannot open: %s", strerror(errno));
        return SS_ERR_IO;
    }
    char magic[6] = { 0 };
    /* plain FITS starts with SIMPLE; anything else may be a gzip'ed file,
     * which CFITSIO inflates in memory (its size on disk says nothing) */
    int plain = fread(magic, 1, sizeof magic, probe) == sizeof magic &&
                memcmp(magic, "SIMPLE", sizeof magic) == 0;
    fclose(probe);
    fitsfile *fp = NULL;
    int st = ss_fits_open_readonly(path, (void **)&fp, &ii->proxy_fd);
    if (st == SS_FITS_TOO_LARGE) {
        set_err(err, n, path, "gzip'ed, and inflates to more than %zu bytes (the largest frame "
                "accepted)", ss_fits_inflate_limit());
        close_image(fp, ii);
        return SS_ERR_SIZE;
    }
    if (st) {
        const ss_err_t fe = fits_fail(err, n, path, "not a readable FITS file", st, SS_ERR_FORMAT);
        close_image(fp, ii);
        return fe;
    }
    struct stat sb;
    const long long have = plain && stat(path, &sb) == 0 ? (long long)sb.st_size : -1;
    ss_err_t e = describe_image(fp, path, have, ii, err, n);
    if (e != SS_OK) {
        close_image(fp, ii);
        return e;
    }
    *out_fp = fp;
    return SS_OK;
}

/* Move the open fp to its image HDU and describe the image into ii
 * (geometry, BITPIX, scaling, pixel type), refusing what the contract
 * refuses; have: the bytes of the file when known (a file cut short is
 * refused), else -1. path names it in err. The caller closes fp. */
static ss_err_t describe_image(fitsfile *fp, const char *path, long long have, img_info_t *ii,
                               char *err, size_t n)
{
    int st = 0, naxis = 0;
    ss_err_t e = find_image_hdu(fp, path, &naxis, err, n);
    if (e != SS_OK)
        goto fail;
    fits_get_hdu_num(fp, &ii->hdu);

    LONGLONG dims[FITS_MAX_AXES] = { 0 };
    int bitpix = 0;
    fits_get_img_paramll(fp, FITS_MAX_AXES, &bitpix, &naxis, dims, &st);
    if (st) {
        e = fits_fail(err, n, path, "cannot read the image geometry", st, SS_ERR_FORMAT);
        goto fail;
    }
    if (naxis < 2) {
        set_err(err, n, path, "HDU %d: NAXIS = %d, not a 2-D image", ii->hdu, naxis);
        e = SS_ERR_UNSUPPORTED;
        goto fail;
    }
    for (int a = 2; a < naxis && a < FITS_MAX_AXES; a++)
        if (dims[a] != 1) {
            set_err(err, n, path, "HDU %d: NAXIS = %d with NAXIS%d = %lld: only 2-D images are "
                    "supported", ii->hdu, naxis, a + 1, (long long)dims[a]);
            e = SS_ERR_UNSUPPORTED;
            goto fail;
        }
    if (naxis > FITS_MAX_AXES) {
        set_err(err, n, path, "HDU %d: NAXIS = %d: only 2-D images are supported", ii->hdu, naxis);
        e = SS_ERR_UNSUPPORTED;
        goto fail;
    }
    if (dims[0] <= 0 || dims[1] <= 0) {
        set_err(err, n, path, "HDU %d: empty image (%lld x %lld)", ii->hdu, (long long)dims[0],
                (long long)dims[1]);
        e = SS_ERR_SIZE;
        goto fail;
    }
    if (dims[0] > INT_MAX || dims[1] > INT_MAX || dims[0] > FITS_MAX_PIXELS / dims[1]) {
        set_err(err, n, path, "HDU %d: image of %lld x %lld pixels is beyond the supported %lld",
                ii->hdu, (long long)dims[0], (long long)dims[1], (long long)FITS_MAX_PIXELS);
        e = SS_ERR_SIZE;
        goto fail;
    }
    ii->w = (int)dims[0];
    ii->h = (int)dims[1];
    ii->bitpix = bitpix;
    ii->bzero = 0.0;
    ii->bscale = 1.0;
    if (key_dbl(fp, "BZERO", &ii->bzero) < 0 || key_dbl(fp, "BSCALE", &ii->bscale) < 0 ||
        ii->bscale == 0.0) {
        set_err(err, n, path, "HDU %d: BZERO/BSCALE not usable numbers", ii->hdu);
        e = SS_ERR_FORMAT;
        goto fail;
    }
    switch (bitpix) {
    case BYTE_IMG: case SHORT_IMG: case LONG_IMG: case LONGLONG_IMG: case FLOAT_IMG:
    case DOUBLE_IMG:
        break;
    default:
        set_err(err, n, path, "HDU %d: BITPIX = %d not supported", ii->hdu, bitpix);
        e = SS_ERR_UNSUPPORTED;
        goto fail;
    }
    map_type(ii);
    /* A file cut short is refused before anything is allocated: the HDU's
     * data must end inside the file (its last block's padding may be
     * missing, some writers leave it off). */
    LONGLONG hstart = 0, dstart = 0, dend = 0;
    fits_get_hduaddrll(fp, &hstart, &dstart, &dend, &st);
    if (st == 0 && have >= 0 && (LONGLONG)have < dend - (FITS_BLOCK - 1)) {
        set_err(err, n, path, "truncated: HDU %d needs %lld bytes, the file has %lld", ii->hdu,
                (long long)dend, have);
        return SS_ERR_FORMAT;
    }
    return SS_OK;
fail:
    return e;
}

/* Read all pixels of the open image as read_type into buf. Integer images
 * read as float turn BLANK (undefined) pixels into NaN. Float images are read
 * without CFITSIO's null checking: it would also flush -0 and subnormals to
 * +0, and their NaNs are NaN already — this way float data is bit-exact.
 * Doubles beyond the float range are clipped to ±FLT_MAX (logged). */
static ss_err_t read_pixels(fitsfile *fp, const img_info_t *ii, int read_type, void *buf,
                            const char *path, char *err, size_t n)
{
    int st = 0, anynul = 0;
    float fnan = NAN;
    int int_image = ii->bitpix > 0;
    void *nulval = read_type == TFLOAT && int_image ? (void *)&fnan : NULL;
    LONGLONG npix = (LONGLONG)ii->w * ii->h;
    fits_read_img(fp, read_type, 1, npix, nulval, buf, &anynul, &st);
    if (st == NUM_OVERFLOW && read_type == TFLOAT) {
        SS_LOG(SS_LOG_WARNING, TAG, "%s: values beyond the float range clipped", path);
        st = 0;
    }
    if (st)
        return fits_fail(err, n, path, "cannot read the pixels", st, SS_ERR_FORMAT);
    return SS_OK;
}

/* ---- metadata ----------------------------------------------------------- */

/* What parse_section made of a section keyword. */
typedef enum section_kind {
    SECTION_INSIDE = 0,         /* inside the image, taken as it is */
    SECTION_CLIPPED,            /* reached past the image: clipped to it */
    SECTION_MALFORMED,          /* not "[x1:x2,y1:y2]" with 1 <= x1 <= x2, 1 <= y1 <= y2 */
    SECTION_OUTSIDE,            /* starts beyond the image */
    SECTION_FOREIGN             /* the image holds less than half of it along an axis */
} section_kind_t;

/* A section that the image holds less than this share of (per axis) is
 * not this image's: a cutout keeps its parent's TRIMSEC (the DECam cutout
 * in tests/data/real has [57:2104,51:4146] on 100×100 pixels), and
 * clipping that would process a corner of the cutout. The sections this
 * clipping is for reach past by a few rows (ALGORITHM §1). */
#define SECTION_MIN_HELD 0.5

/* "[x1:x2,y1:y2]" (1-based, inclusive) -> 0-based box (x0, y0, sw, sh)
 * inside w×h: a section that reaches past the image is clipped to it. */
static section_kind_t parse_section(const char *s, int w, int h, int *x0, int *y0, int *sw,
                                    int *sh)
{
    int a, b, c, d, used = 0;
    if (sscanf(s, " [ %d : %d , %d : %d ]%n", &a, &b, &c, &d, &used) != 4)
        return SECTION_MALFORMED;
    for (const char *p = s + used; *p; p++)
        if (*p != ' ')
            return SECTION_MALFORMED;
    if (a < 1 || c < 1 || b < a || d < c)
        return SECTION_MALFORMED;
    if (a > w || c > h)
        return SECTION_OUTSIDE;
    const int bc = SS_MIN(b, w), dc = SS_MIN(d, h);
    if (bc - a + 1 < SECTION_MIN_HELD * ((double)b - a + 1) ||
        dc - c + 1 < SECTION_MIN_HELD * ((double)d - c + 1))
        return SECTION_FOREIGN;
    *x0 = a - 1;
    *y0 = c - 1;
    *sw = bc - a + 1;
    *sh = dc - c + 1;
    return bc != b || dc != d ? SECTION_CLIPPED : SECTION_INSIDE;
}

/* Clipped sections are logged once per distinct (keyword, text, image
 * size), not once per file: a camera whose frame height jitters writes
 * the same section into every frame. A small table of what was logged,
 * shared by the source threads; when full, the oldest entry goes. */
#define CLIP_LOG_SLOTS 32

static struct {
    pthread_mutex_t lock;
    int next;
    struct {
        char key[9];
        char text[FLEN_VALUE];
        int w, h;
    } seen[CLIP_LOG_SLOTS];
} clip_log = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* 1 the first time this clipping is met (then it is remembered). */
static int clip_first_time(const char *key, const char *text, int w, int h)
{
    int first = 1;
    pthread_mutex_lock(&clip_log.lock);
    for (int i = 0; i < CLIP_LOG_SLOTS && first; i++)
        if (clip_log.seen[i].w == w && clip_log.seen[i].h == h &&
            strcmp(clip_log.seen[i].key, key) == 0 && strcmp(clip_log.seen[i].text, text) == 0)
            first = 0;
    if (first) {
        const int i = clip_log.next;
        clip_log.next = (i + 1) % CLIP_LOG_SLOTS;
        ss_strlcpy(clip_log.seen[i].key, key, sizeof clip_log.seen[i].key);
        ss_strlcpy(clip_log.seen[i].text, text, sizeof clip_log.seen[i].text);
        clip_log.seen[i].w = w;
        clip_log.seen[i].h = h;
    }
    pthread_mutex_unlock(&clip_log.lock);
    return first;
}

/* One section keyword into *box (x0, y0, w, h): 1 when taken (inside or
 * clipped, logged once), 0 when absent, -1 when present and ignored
 * (logged: malformed, outside the image, or another image's). */
static int read_section(fitsfile *fp, const char *key, const img_info_t *ii, int box[4],
                        const char *path)
{
    char buf[FLEN_VALUE];
    if (!key_str(fp, key, buf))
        return 0;
    const section_kind_t k = parse_section(buf, ii->w, ii->h, &box[0], &box[1], &box[2], &box[3]);
    if (k == SECTION_INSIDE)
        return 1;
    if (k == SECTION_CLIPPED) {
        if (clip_first_time(key, buf, ii->w, ii->h))
            SS_LOG(SS_LOG_NOTICE, TAG, "%s: %s = '%s' reaches past the %dx%d image: clipped to "
                   "[%d:%d,%d:%d] (logged once for this section and image size)", path, key, buf,
                   ii->w, ii->h, box[0] + 1, box[0] + box[2], box[1] + 1, box[1] + box[3]);
        return 1;
    }
    const char *why = k == SECTION_MALFORMED ? "is not a section"
                      : k == SECTION_OUTSIDE ? "lies outside"
                                             : "lies mostly outside (not a section of this image)";
    SS_LOG(SS_LOG_WARNING, TAG, "%s: %s = '%s' %s of the %dx%d image; ignored", path, key, buf,
           why, ii->w, ii->h);
    box[0] = box[1] = box[2] = box[3] = 0;
    return -1;
}

static int is_digit_str(const char *s, int min_len)
{
    int k = 0;
    for (; s[k]; k++)
        if (s[k] < '0' || s[k] > '9')
            return 0;
    return k >= min_len;
}

/* Core (linear) WCS keywords of a 2-D image. */
static int wcs_core_key(const char *k)
{
    static const char *const fixed[] = { "CROTA2", "LONPOLE", "LATPOLE", "EQUINOX", "RADESYS",
                                         "RADECSYS", NULL };
    for (int i = 0; fixed[i]; i++)
        if (strcmp(k, fixed[i]) == 0)
            return 1;
    static const char *const per_axis[] = { "CTYPE", "CRPIX", "CRVAL", "CDELT", "CUNIT", NULL };
    for (int i = 0; per_axis[i]; i++) {
        size_t L = strlen(per_axis[i]);
        if (strncmp(k, per_axis[i], L) == 0 && (k[L] == '1' || k[L] == '2') && k[L + 1] == '\0')
            return 1;
    }
    if ((strncmp(k, "CD", 2) == 0 && strlen(k) == 5) || (strncmp(k, "PC", 2) == 0 && strlen(k) == 5))
        return (k[2] == '1' || k[2] == '2') && k[3] == '_' && (k[4] == '1' || k[4] == '2');
    return 0;
}

/* Distortion terms: 1 = SIP (A_, B_, AP_, BP_ and their _ORDER), 2 = PVi_m. */
static int wcs_extra_key(const char *k)
{
    if (strncmp(k, "PV", 2) == 0 && (k[2] == '1' || k[2] == '2') && k[3] == '_' &&
        is_digit_str(k + 4, 1))
        return 2;
    static const char *const sip[] = { "AP_", "BP_", "A_", "B_", NULL };
    for (int i = 0; sip[i]; i++) {
        size_t L = strlen(sip[i]);
        if (strncmp(k, sip[i], L) != 0)
            continue;
        const char *r = k + L;
        if (strcmp(r, "ORDER") == 0)
            return 1;
        const char *us = strchr(r, '_');
        if (!us || us == r)
            return 0;
        char p[8];
        size_t pl = (size_t)(us - r);
        if (pl >= sizeof p)
            return 0;
        memcpy(p, r, pl);
        p[pl] = '\0';
        return is_digit_str(p, 1) && is_digit_str(us + 1, 1) ? 1 : 0;
    }
    return 0;
}

static void wcs_add(fitsfile *fp, ss_frame_meta_t *m, const char *key, const char *value)
{
    if (m->n_wcs >= SS_WCS_MAX || ss_frame_wcs_find(m, key))
        return;
    ss_wcs_key_t *k = &m->wcs[m->n_wcs];
    memset(k, 0, sizeof *k);
    ss_strlcpy(k->key, key, sizeof k->key);
    if (value[0] == '\'') {
        char buf[FLEN_VALUE];
        if (!key_str(fp, key, buf))
            return;
        k->is_string = 1;
        ss_strlcpy(k->sval, buf, sizeof k->sval);
    } else {
        double v;
        if (key_dbl(fp, key, &v) != 1)
            return;
        k->dval = v;
    }
    m->n_wcs++;
}

/* WCS keywords of the current HDU. The linear part always fits; the
 * distortion terms are kept only when all of them fit SS_WCS_MAX (half a
 * polynomial is worse than none) — if dropped, a "-SIP" suffix or a "TPV"
 * projection is turned into plain TAN so that the header stays coherent. */
static void read_wcs(fitsfile *fp, ss_frame_meta_t *m, const char *path)
{
    int st = 0, nkeys = 0;
    fits_get_hdrspace(fp, &nkeys, NULL, &st);
    if (st)
        return;
    char key[FLEN_KEYWORD], val[FLEN_VALUE], com[FLEN_COMMENT];
    int n_extra = 0, keep_extra = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 1; i <= nkeys; i++) {
            st = 0;
            fits_read_keyn(fp, i, key, val, com, &st);
            if (st || !val[0])
                continue;
            int core = wcs_core_key(key), extra = core ? 0 : wcs_extra_key(key);
            if (pass == 0 && extra)
                n_extra++;
            if (pass == 0 && core)
                wcs_add(fp, m, key, val);
            else if (pass == 1 && extra)
                wcs_add(fp, m, key, val);
        }
        if (pass == 0) {
            keep_extra = m->n_wcs + n_extra <= SS_WCS_MAX;
            if (!keep_extra)
                break;
        }
    }
    if (n_extra > 0 && !keep_extra) {
        SS_LOG(SS_LOG_WARNING, TAG, "%s: %d WCS distortion keywords do not fit (max %d WCS keys); "
               "kept the linear WCS only", path, n_extra, SS_WCS_MAX);
        for (int i = 0; i < m->n_wcs; i++) {
            ss_wcs_key_t *k = &m->wcs[i];
            if (!k->is_string || strncmp(k->key, "CTYPE", 5) != 0)
                continue;
            char *p = strstr(k->sval, "-SIP");
            if (p)
                *p = '\0';
            p = strstr(k->sval, "-TPV");
            if (p)
                memcpy(p, "-TAN", 4);
        }
    }
}

ss_err_t ss_fits_read_header_wcs(const char *path, ss_frame_meta_t *m, char *err, size_t err_len)
{
    m->n_wcs = 0;
    void *fp = NULL;
    int proxy = -1;
    int st = ss_fits_open_readonly(path, &fp, &proxy);
    if (st) {
        char txt[FLEN_STATUS];
        fits_get_errstatus(st, txt);
        set_err(err, err_len, path, "cannot open: %s", txt);
        ss_fits_close_readonly(fp, proxy);
        return SS_ERR_IO;
    }
    read_wcs((fitsfile *)fp, m, path);
    ss_fits_close_readonly(fp, proxy);
    if (m->n_wcs == 0) {
        set_err(err, err_len, path, "no WCS keywords in the primary header");
        return SS_ERR_FORMAT;
    }
    return SS_OK;
}

/* The exposure: EXPTIME, else EXPOSURE, in the image HDU, else the
 * primary (the current HDU is left at one of them). */
static void read_exposure(fitsfile *fp, const int *hdus, int nh, ss_frame_meta_t *m,
                          const char *path)
{
    int type, st;
    for (int k = 0; k < nh; k++) {
        st = 0;
        fits_movabs_hdu(fp, hdus[k], &type, &st);
        if (st)
            continue;
        double v;
        int r = key_dbl(fp, "EXPTIME", &v);
        if (r == 0)
            r = key_dbl(fp, "EXPOSURE", &v);
        if (r == 1 && v >= 0.0) {
            m->exposure = v;
            return;
        }
        if (r < 0)
            SS_LOG(SS_LOG_WARNING, TAG, "%s: EXPTIME/EXPOSURE is not a number; exposure unknown",
                   path);
    }
}

/* One reading of the start of the exposure, and where it came from. */
typedef struct time_cand {
    double mjd;
    char from[40];
} time_cand_t;

/* The time keywords real observatories write, in order of trust; each
 * found one becomes a candidate start of exposure (MJD UTC):
 *   DATE-OBS with a time of day;
 *   DATE-OBS with the date only, the time from UTCSTART, UTC-OBS,
 *   TIME-OBS or UT (hh:mm:ss[.s]);
 *   MJD-OBS (start); JD (start, as camera software writes it);
 *   DATE-AVG, MJD-AVG, MJD-MID, JD-MID: mid-exposure, less half EXPTIME.
 * A DATE-OBS that is neither is remembered in bad_date. Returns the count. */
static int time_candidates(fitsfile *fp, const ss_frame_meta_t *m, time_cand_t *c, int max,
                           char *bad_date, size_t bad_len)
{
    static const char *const tod_keys[] = { "UTCSTART", "UTC-OBS", "TIME-OBS", "UT" };
    int n = 0;
    char date[FLEN_VALUE], tm[FLEN_VALUE], iso[2 * FLEN_VALUE + 2];
    double v, half = 0.5 * m->exposure / 86400.0;
    if (key_str(fp, "DATE-OBS", date)) {
        if (strlen(date) > 10 && ss_iso_to_mjd(date, &v) == 0) {
            c[n++] = (time_cand_t){ v, "DATE-OBS" };
        } else {
            int found = 0;
            for (size_t k = 0; strlen(date) == 10 && k < 4 && !found; k++) {
                if (!key_str(fp, tod_keys[k], tm))
                    continue;
                snprintf(iso, sizeof iso, "%sT%s", date, tm);
                if (ss_iso_to_mjd(iso, &v) == 0) {
                    c[n] = (time_cand_t){ v, "" };
                    snprintf(c[n++].from, sizeof c->from, "DATE-OBS + %s", tod_keys[k]);
                    found = 1;
                }
            }
            if (!found && !bad_date[0])
                ss_strlcpy(bad_date, date, bad_len);
        }
    }
    if (n < max && key_dbl(fp, "MJD-OBS", &v) == 1 && v > 0.0)
        c[n++] = (time_cand_t){ v, "MJD-OBS" };
    if (n < max && key_dbl(fp, "JD", &v) == 1 && v > 2400000.5)
        c[n++] = (time_cand_t){ v - 2400000.5, "JD" };
    if (n < max && key_str(fp, "DATE-AVG", date) && ss_iso_to_mjd(date, &v) == 0)
        c[n++] = (time_cand_t){ v - half, "DATE-AVG" };
    static const char *const mid_keys[] = { "MJD-AVG", "MJD-MID", "JD-MID" };
    for (int k = 0; k < 3 && n < max; k++)
        if (key_dbl(fp, mid_keys[k], &v) == 1 && v > 0.0) {
            c[n] = (time_cand_t){ (k == 2 ? v - 2400000.5 : v) - half, "" };
            ss_strlcpy(c[n++].from, mid_keys[k], sizeof c->from);
        }
    return n;
}

/* The observation time (start of exposure) and the exposure, from the
 * image HDU, else the primary: the first candidate of time_candidates;
 * the others are checked against it, and one more than a second off is
 * logged (the first still counts). No time: mjd_obs stays NAN, and a
 * DATE-OBS that could not be read is logged. */
static void read_time(fitsfile *fp, int img_hdu, ss_frame_meta_t *m, const char *path)
{
    int hdus[2] = { img_hdu, 1 };
    int nh = img_hdu == 1 ? 1 : 2, type, st;
    char bad_date[FLEN_VALUE] = "";
    read_exposure(fp, hdus, nh, m, path);
    time_cand_t c[8];
    int n = 0;
    for (int k = 0; k < nh && n == 0; k++) {
        st = 0;
        fits_movabs_hdu(fp, hdus[k], &type, &st);
        if (!st)
            n = time_candidates(fp, m, c, 8, bad_date, sizeof bad_date);
    }
    if (n > 0)
        m->mjd_obs = c[0].mjd;
    for (int i = 1; i < n; i++)
        if (fabs(c[i].mjd - c[0].mjd) * 86400.0 > 1.0)
            SS_LOG(SS_LOG_WARNING, TAG, "%s: %s and %s disagree by %.1f s; time taken from %s",
                   path, c[0].from, c[i].from, (c[i].mjd - c[0].mjd) * 86400.0, c[0].from);
    if (bad_date[0] && n > 0)
        SS_LOG(SS_LOG_NOTICE, TAG, "%s: DATE-OBS '%s' is not an ISO-8601 date and time; time "
               "taken from %s", path, bad_date, c[0].from);
    else if (bad_date[0])
        SS_LOG(SS_LOG_WARNING, TAG, "%s: DATE-OBS '%s' is not an ISO-8601 date and time (nor "
               "completed by UTCSTART, UTC-OBS, TIME-OBS or UT) and there is no MJD-OBS, JD or "
               "mid-exposure time; observation time unknown", path, bad_date);
    st = 0;
    fits_movabs_hdu(fp, img_hdu, &type, &st);
}

/* A photometric zero point in the image HDU (photometry.h): MAGZERO,
 * else MAGZPT with MAGZRR, else PHOTZP with PHOTZPER (errors optional);
 * a value that is not a number is logged and ignored. */
static void read_zeropoint(fitsfile *fp, ss_frame_meta_t *m, const char *path)
{
    static const char *const keys[][2] = { { "MAGZERO", NULL }, { "MAGZPT", "MAGZRR" },
                                           { "PHOTZP", "PHOTZPER" } };
    for (int k = 0; k < 3; k++) {
        double v, e;
        int r = key_dbl(fp, keys[k][0], &v);
        if (r < 0)
            SS_LOG(SS_LOG_WARNING, TAG, "%s: %s is not a number; ignored", path, keys[k][0]);
        if (r != 1)
            continue;
        m->has_zp_header = 1;
        m->zp_header = v;
        m->zp_header_err = keys[k][1] && key_dbl(fp, keys[k][1], &e) == 1 && e >= 0.0 ? e : 0.0;
        return;
    }
}

static void read_meta(fitsfile *fp, const img_info_t *ii, ss_frame_meta_t *m, const char *path)
{
    ss_frame_meta_clear(m);
    ss_strlcpy(m->source, path, sizeof m->source);
    ss_input_name(m->input, sizeof m->input, path);
    read_time(fp, ii->hdu, m, path);

    double seq;
    if (key_dbl(fp, "SEQ", &seq) == 1 && seq >= 0.0 && seq < 1.8e19 && seq == floor(seq))
        m->seq = (uint64_t)seq;
    else
        m->seq_missing = 1;
    read_zeropoint(fp, m, path);
    char buf[FLEN_VALUE];
    if (key_str(fp, "FEED", buf))
        ss_strlcpy(m->feed, buf, sizeof m->feed);
    if (key_str(fp, "SERIES", buf))
        ss_strlcpy(m->series, buf, sizeof m->series);
    if (key_str(fp, "ROWORDER", buf)) {
        m->top_down = strcmp(buf, "TOP-DOWN") == 0;
        if (!m->top_down && strcmp(buf, "BOTTOM-UP") != 0)
            SS_LOG(SS_LOG_WARNING, TAG, "%s: ROWORDER '%s' is neither TOP-DOWN nor BOTTOM-UP; "
                   "taken as BOTTOM-UP", path, buf);
    }

    /* TRIMSEC, else DATASEC; BIASSEC (the overscan) on its own */
    int box[4];
    if (read_section(fp, "TRIMSEC", ii, box, path) == 1 ||
        read_section(fp, "DATASEC", ii, box, path) == 1) {
        m->trim_x0 = box[0], m->trim_y0 = box[1], m->trim_w = box[2], m->trim_h = box[3];
    }
    if (read_section(fp, "BIASSEC", ii, box, path) == 1) {
        m->bias_x0 = box[0], m->bias_y0 = box[1], m->bias_w = box[2], m->bias_h = box[3];
    }
    read_wcs(fp, m, path);
}

/* ---- public: reading ---------------------------------------------------- */

struct ss_fits_image {
    fitsfile *fp;
    img_info_t ii;
    char *path;
    void *mem;                  /* an image in memory: the caller's bytes (CFITSIO */
    size_t mem_n;               /* keeps the address of these two) */
};

ss_err_t ss_fits_image_open(const char *path, ss_fits_image_t **out, char *err, size_t err_len)
{
    *out = NULL;
    ss_fits_image_t *im = calloc(1, sizeof *im);
    if (!im || !(im->path = strdup(path ? path : ""))) {
        free(im);
        set_err(err, err_len, path ? path : "(null)", "out of memory");
        return SS_ERR_NOMEM;
    }
    ss_err_t e = open_image(path, &im->fp, &im->ii, err, err_len);
    if (e != SS_OK) {
        free(im->path);
        free(im);
        return e;
    }
    *out = im;
    return SS_OK;
}

ss_err_t ss_fits_image_open_mem(const void *buf, size_t n, const char *name,
                                ss_fits_image_t **out, char *err, size_t err_len)
{
    *out = NULL;
    ss_fits_image_t *im = calloc(1, sizeof *im);
    if (!im || !(im->path = strdup(name ? name : "(memory)"))) {
        free(im);
        set_err(err, err_len, name, "out of memory");
        return SS_ERR_NOMEM;
    }
    im->ii.proxy_fd = -1;
    im->mem = (void *)buf;      /* read only: CFITSIO never writes a READONLY file */
    im->mem_n = n;
    int st = 0;
    ss_err_t e = SS_OK;
    if (n < FITS_BLOCK || memcmp(buf, "SIMPLE", 6) != 0) {
        set_err(err, err_len, im->path, "not a FITS file (%zu bytes, no SIMPLE card)", n);
        e = SS_ERR_FORMAT;
    } else if (fits_open_memfile(&im->fp, im->path, READONLY, &im->mem, &im->mem_n, 0, NULL,
                                 &st) != 0) {
        e = fits_fail(err, err_len, im->path, "not a readable FITS file", st, SS_ERR_FORMAT);
    } else {
        e = describe_image(im->fp, im->path, (long long)n, &im->ii, err, err_len);
    }
    if (e != SS_OK) {
        ss_fits_image_close(&im);
        return e;
    }
    *out = im;
    return SS_OK;
}

void ss_fits_image_size(const ss_fits_image_t *im, int *w, int *h, ss_dtype_t *dt)
{
    if (w)
        *w = im->ii.w;
    if (h)
        *h = im->ii.h;
    if (dt)
        *dt = im->ii.dtype;
}

ss_err_t ss_fits_image_read(ss_fits_image_t *im, ss_frame_t *f, char *err, size_t err_len)
{
    const img_info_t *ii = &im->ii;
    if (!f || !f->pixels) {
        set_err(err, err_len, im->path, "no frame buffer");
        return SS_ERR_INVALID;
    }
    size_t need = (size_t)ii->w * ii->h * ss_dtype_size(ii->dtype);
    if (need > f->capacity) {
        set_err(err, err_len, im->path, "%dx%d %s image needs %zu bytes, the frame holds %zu",
                ii->w, ii->h, ss_dtype_name(ii->dtype), need, f->capacity);
        return SS_ERR_SIZE;
    }
    ss_err_t e = read_pixels(im->fp, ii, ii->read_type, f->pixels, im->path, err, err_len);
    if (e != SS_OK)
        return e;
    f->width = ii->w;
    f->height = ii->h;
    f->dtype = ii->dtype;
    f->valid = NULL;
    read_meta(im->fp, ii, &f->meta, im->path);
    return SS_OK;
}

void ss_fits_image_close(ss_fits_image_t **im)
{
    if (!im || !*im)
        return;
    close_image((*im)->fp, &(*im)->ii);
    free((*im)->path);
    free(*im);
    *im = NULL;
}

ss_err_t ss_fits_probe(const char *path, int *w, int *h, ss_dtype_t *dt, char *err,
                       size_t err_len)
{
    ss_fits_image_t *im;
    ss_err_t e = ss_fits_image_open(path, &im, err, err_len);
    if (e != SS_OK)
        return e;
    ss_fits_image_size(im, w, h, dt);
    ss_fits_image_close(&im);
    return SS_OK;
}

ss_err_t ss_fits_read_frame(const char *path, ss_frame_t *f, char *err, size_t err_len)
{
    if (!f || !f->pixels) {
        set_err(err, err_len, path, "no frame buffer");
        return SS_ERR_INVALID;
    }
    ss_fits_image_t *im;
    ss_err_t e = ss_fits_image_open(path, &im, err, err_len);
    if (e != SS_OK)
        return e;
    e = ss_fits_image_read(im, f, err, err_len);
    ss_fits_image_close(&im);
    return e;
}

ss_err_t ss_fits_read_float(const char *path, float **out, int *w, int *h, char *err,
                            size_t err_len)
{
    if (!out) {
        set_err(err, err_len, path, "no output pointer");
        return SS_ERR_INVALID;
    }
    *out = NULL;
    fitsfile *fp;
    img_info_t ii;
    ss_err_t e = open_image(path, &fp, &ii, err, err_len);
    if (e != SS_OK)
        return e;
    float *buf = malloc((size_t)ii.w * ii.h * sizeof *buf);
    if (!buf) {
        set_err(err, err_len, path, "out of memory for %dx%d floats", ii.w, ii.h);
        e = SS_ERR_NOMEM;
    } else {
        e = read_pixels(fp, &ii, TFLOAT, buf, path, err, err_len);
    }
    close_image(fp, &ii);
    if (e != SS_OK) {
        free(buf);
        return e;
    }
    *out = buf;
    if (w)
        *w = ii.w;
    if (h)
        *h = ii.h;
    return SS_OK;
}

/* A master's place in raw coordinates from IRAF's LTV1/LTV2 (image pixel =
 * raw pixel + LTV): a section cut out of raw frames has LTV <= 0. Positive
 * or fractional values describe something else (DECam's raw frames say
 * LTV1 = 56 for their prescan) and are not an origin. */
static void read_origin(fitsfile *fp, ss_fits_master_t *info)
{
    double l1, l2;
    if (key_dbl(fp, "LTV1", &l1) != 1 || key_dbl(fp, "LTV2", &l2) != 1)
        return;
    if (l1 > 0.0 || l2 > 0.0 || l1 != floor(l1) || l2 != floor(l2) || l1 < -INT_MAX ||
        l2 < -INT_MAX)
        return;
    info->has_origin = 1;
    info->origin_x = (int)-l1;
    info->origin_y = (int)-l2;
}

ss_err_t ss_fits_read_master(const char *path, float **out, int *w, int *h,
                             ss_fits_master_t *info, char *err, size_t err_len)
{
    if (!out || !info) {
        set_err(err, err_len, path, "no output pointer");
        return SS_ERR_INVALID;
    }
    *out = NULL;
    memset(info, 0, sizeof *info);
    fitsfile *fp;
    img_info_t ii;
    ss_err_t e = open_image(path, &fp, &ii, err, err_len);
    if (e != SS_OK)
        return e;
    float *buf = malloc((size_t)ii.w * ii.h * sizeof *buf);
    if (!buf) {
        set_err(err, err_len, path, "out of memory for %dx%d floats", ii.w, ii.h);
        e = SS_ERR_NOMEM;
    } else {
        e = read_pixels(fp, &ii, TFLOAT, buf, path, err, err_len);
    }
    if (e == SS_OK) {
        ss_frame_meta_t *m = malloc(sizeof *m);
        if (m) {
            ss_frame_meta_clear(m);
            read_time(fp, ii.hdu, m, path);     /* EXPTIME/EXPOSURE, also from the primary */
            info->exposure = m->exposure;
            free(m);
        }
        read_origin(fp, info);
    }
    close_image(fp, &ii);
    if (e != SS_OK) {
        free(buf);
        return e;
    }
    *out = buf;
    if (w)
        *w = ii.w;
    if (h)
        *h = ii.h;
    return SS_OK;
}

int ss_fits_master_place(const ss_fits_master_t *info, int mw, int mh, int rx, int ry, int rw,
                         int rh, int *ox, int *oy)
{
    *ox = *oy = 0;
    if (info && info->has_origin) {
        *ox = info->origin_x;
        *oy = info->origin_y;
    } else if (mw == rw && mh == rh) {
        *ox = rx;
        *oy = ry;
    }
    return rx >= *ox && ry >= *oy && (long)rx + rw <= (long)*ox + mw &&
           (long)ry + rh <= (long)*oy + mh;
}

/* ---- writing ------------------------------------------------------------ */

/* DATE-OBS in the FITS form (no zone suffix: FITS times are UTC by default). */
static void fits_date(double mjd, char *buf, size_t n)
{
    ss_mjd_to_iso(mjd, buf, n);
    size_t L = strlen(buf);
    if (L && buf[L - 1] == 'Z')
        buf[L - 1] = '\0';
}

static void put_str(fitsfile *fp, const char *key, const char *v, const char *com, int *st)
{
    if (strlen(v) <= 68) {
        fits_update_key(fp, TSTRING, key, (void *)v, com, st);
    } else {
        /* the long-string convention, announced by LONGSTRN as fitsverify wants */
        fits_write_key_longwarn(fp, st);
        fits_update_key_longstr(fp, key, v, com, st);
    }
}

/* A number; a non-finite one (unknown) is left out: FITS has no NaN
 * keyword value and fitsverify warns about undefined ones. */
static void put_dbl(fitsfile *fp, const char *key, double v, const char *com, int *st)
{
    if (isfinite(v))
        fits_update_key_dbl(fp, key, v, -15, com, st);
}

static void put_int(fitsfile *fp, const char *key, long long v, const char *com, int *st)
{
    LONGLONG x = v;
    fits_update_key(fp, TLONGLONG, key, &x, com, st);
}

static void put_log(fitsfile *fp, const char *key, int v, const char *com, int *st)
{
    int x = v ? 1 : 0;
    fits_update_key(fp, TLOGICAL, key, &x, com, st);
}

/* Keywords every output carries: identity, time, WCS. (ox, oy): the
 * first pixel of the written image in the input frame (a region of
 * interest), by which CRPIX shifts so that the WCS stays right. */
static void put_meta(fitsfile *fp, const ss_frame_meta_t *m, int ox, int oy, int *st)
{
    put_int(fp, "SEQ", (long long)SS_MIN(m->seq, (uint64_t)LLONG_MAX), "frame sequence number",
            st);
    if (m->feed[0])
        put_str(fp, "FEED", m->feed, "skysieve feed", st);
    if (m->series[0])
        put_str(fp, "SERIES", m->series, "sender's series id", st);
    if (m->source[0])
        put_str(fp, "SOURCE", m->source, "where the frame came from", st);
    if (isfinite(m->mjd_obs)) {
        char iso[40];
        fits_date(m->mjd_obs, iso, sizeof iso);
        put_str(fp, "DATE-OBS", iso, "start of exposure (UTC)", st);
        fits_update_key_dbl(fp, "MJD-OBS", m->mjd_obs, -15, "start of exposure (MJD, UTC)", st);
    }
    if (m->exposure > 0.0)
        put_dbl(fp, "EXPTIME", m->exposure, "[s] exposure time", st);
    if (m->top_down)
        put_str(fp, "ROWORDER", "TOP-DOWN", "the first row is the top (as the input's)", st);
    for (int i = 0; i < m->n_wcs && i < SS_WCS_MAX; i++) {
        const ss_wcs_key_t *k = &m->wcs[i];
        if (!k->key[0])
            continue;
        if (k->is_string)
            put_str(fp, k->key, k->sval, NULL, st);
        else if (strcmp(k->key, "CRPIX1") == 0)
            put_dbl(fp, k->key, k->dval - ox, NULL, st);
        else if (strcmp(k->key, "CRPIX2") == 0)
            put_dbl(fp, k->key, k->dval - oy, NULL, st);
        else
            put_dbl(fp, k->key, k->dval, NULL, st);
    }
    if (ox || oy) {
        /* IRAF's physical-to-image offset: input pixel = image pixel - LTV */
        put_dbl(fp, "LTV1", -ox, "region of interest: input x = x - LTV1", st);
        put_dbl(fp, "LTV2", -oy, "region of interest: input y = y - LTV2", st);
    }
}

/* Create "<path>.tmp" (removing a stale one). */
static ss_err_t create_tmp(const char *path, char *tmp, size_t tn, fitsfile **fp, char *err,
                           size_t n)
{
    if (!path || !*path) {
        set_err(err, n, "(null)", "no file name");
        return SS_ERR_INVALID;
    }
    if ((size_t)snprintf(tmp, tn, "%s.tmp", path) >= tn) {
        set_err(err, n, path, "file name too long");
        return SS_ERR_INVALID;
    }
    remove(tmp);
    int st = 0;
    *fp = NULL;
    fits_create_diskfile(fp, tmp, &st);
    if (st) {
        int cst = 0;
        if (*fp)
            fits_close_file(*fp, &cst);
        *fp = NULL;
        return fits_fail(err, n, path, "cannot create", st, SS_ERR_IO);
    }
    return SS_OK;
}

/* Checksums on every HDU, close, rename over path; on any error the
 * temporary file is removed. */
static ss_err_t finish_file(fitsfile *fp, const char *path, const char *tmp, int st, char *err,
                            size_t n)
{
    ss_err_t e = SS_OK;
    if (!st) {
        int nh = 0;
        fits_get_num_hdus(fp, &nh, &st);
        for (int i = 1; i <= nh && !st; i++) {
            int type;
            fits_movabs_hdu(fp, i, &type, &st);
            fits_write_chksum(fp, &st);
        }
        if (st)
            e = fits_fail(err, n, path, "cannot write", st, SS_ERR_IO);
    } else {
        e = fits_fail(err, n, path, "cannot write", st, SS_ERR_IO);
    }
    int cst = 0;
    fits_close_file(fp, &cst);
    if (e == SS_OK && cst)
        e = fits_fail(err, n, path, "cannot close", cst, SS_ERR_IO);
    if (e == SS_OK && rename(tmp, path) != 0) {
        set_err(err, n, path, "cannot rename from %s: %s", tmp, strerror(errno));
        e = SS_ERR_IO;
    }
    if (e != SS_OK)
        remove(tmp);
    return e;
}

ss_err_t ss_fits_write_frame(const char *path, const ss_frame_t *f, char *err, size_t err_len)
{
    if (!f || !f->pixels || f->width <= 0 || f->height <= 0 ||
        (unsigned)f->dtype >= SS_DT__COUNT) {
        set_err(err, err_len, path, "no frame to write");
        return SS_ERR_INVALID;
    }
    static const int img_type[SS_DT__COUNT] = { BYTE_IMG, USHORT_IMG, SHORT_IMG, LONG_IMG,
                                                FLOAT_IMG };
    static const int data_type[SS_DT__COUNT] = { TBYTE, TUSHORT, TSHORT, TINT, TFLOAT };
    char tmp[SS_PATH_MAX + 8];
    fitsfile *fp;
    ss_err_t e = create_tmp(path, tmp, sizeof tmp, &fp, err, err_len);
    if (e != SS_OK)
        return e;
    int st = 0;
    long naxes[2] = { f->width, f->height };
    fits_create_img(fp, img_type[f->dtype], 2, naxes, &st);
    put_meta(fp, &f->meta, 0, 0, &st);
    if (f->meta.trim_w > 0 && f->meta.trim_h > 0) {
        char sec[80];
        snprintf(sec, sizeof sec, "[%d:%d,%d:%d]", f->meta.trim_x0 + 1,
                 f->meta.trim_x0 + f->meta.trim_w, f->meta.trim_y0 + 1,
                 f->meta.trim_y0 + f->meta.trim_h);
        put_str(fp, "TRIMSEC", sec, "good section", &st);
    }
    if (f->meta.bias_w > 0 && f->meta.bias_h > 0) {
        char sec[80];
        snprintf(sec, sizeof sec, "[%d:%d,%d:%d]", f->meta.bias_x0 + 1,
                 f->meta.bias_x0 + f->meta.bias_w, f->meta.bias_y0 + 1,
                 f->meta.bias_y0 + f->meta.bias_h);
        put_str(fp, "BIASSEC", sec, "overscan section", &st);
    }
    fits_write_img(fp, data_type[f->dtype], 1, (LONGLONG)f->width * f->height, f->pixels, &st);
    return finish_file(fp, path, tmp, st, err, err_len);
}

ss_err_t ss_fits_write_residual(const char *path, const struct ss_result *res, int compress,
                                char *err, size_t err_len)
{
    if (!res || !res->has_residual || !res->residual || res->width <= 0 || res->height <= 0) {
        set_err(err, err_len, path, "no residual in this result");
        return SS_ERR_INVALID;
    }
    char tmp[SS_PATH_MAX + 8];
    fitsfile *fp;
    ss_err_t e = create_tmp(path, tmp, sizeof tmp, &fp, err, err_len);
    if (e != SS_OK)
        return e;
    int st = 0;
    if (compress) {
        /* GZIP tiles (byte-shuffled) with quantisation off: CFITSIO stores
         * the float bits as they are, so the file is lossless, NaN included */
        fits_set_compression_type(fp, GZIP_2, &st);
        fits_set_quantize_level(fp, 0.0f, &st);
    }
    long naxes[2] = { res->width, res->height };
    fits_create_img(fp, FLOAT_IMG, 2, naxes, &st);
    put_meta(fp, &res->meta, res->origin_x, res->origin_y, &st);
    put_str(fp, "PRODUCT", "residual", "skysieve cleaned residual r' (NaN = invalid)", &st);
    put_str(fp, "STATUS", ss_status_name(res->status), "skysieve frame status", &st);
    if (res->reason[0])
        put_str(fp, "REASON", res->reason, NULL, &st);
    put_log(fp, "REGOK", res->shift.ok, "registration succeeded", &st);
    put_dbl(fp, "SHIFTX", res->shift.sx, "[px] shift s_t, x: F_t(x) = R(x + s)", &st);
    put_dbl(fp, "SHIFTY", res->shift.sy, "[px] shift s_t, y", &st);
    put_dbl(fp, "SHIFTEX", res->shift.err_x, "[px] standard error of SHIFTX", &st);
    put_dbl(fp, "SHIFTEY", res->shift.err_y, "[px] standard error of SHIFTY", &st);
    put_dbl(fp, "SHIFTCXY", res->shift.cov_xy, "[px2] covariance of SHIFTX, SHIFTY", &st);
    put_int(fp, "REGITER", res->shift.iterations, "fine registration iterations", &st);
    put_int(fp, "COARSEX", res->coarse.dx, "[px] coarse integer shift, x", &st);
    put_int(fp, "COARSEY", res->coarse.dy, "[px] coarse integer shift, y", &st);
    put_log(fp, "REREF", res->rereferenced, "frame became the reference", &st);
    put_log(fp, "HRESET", res->history_reset, "history reset at this frame", &st);
    put_int(fp, "HISTLEN", res->history_len, "history frames in the prediction", &st);
    put_dbl(fp, "SIGMA", res->sigma, "noise of the residual (clipped std)", &st);
    int nw = SS_CLAMP(res->n_weights, 0, SS_MAX_HISTORY);
    put_int(fp, "NWEIGHT", nw, "history weights W0001..", &st);
    for (int i = 0; i < nw; i++) {
        char key[FLEN_KEYWORD];
        snprintf(key, sizeof key, "W%04d", i + 1);
        put_dbl(fp, key, res->weights[i], "history weight a_k", &st);
    }
    fits_write_img(fp, TFLOAT, 1, (LONGLONG)res->width * res->height, res->residual, &st);
    return finish_file(fp, path, tmp, st, err, err_len);
}

int ss_residual_file_name(char *out, size_t n, const char *dir, const char *feed, uint64_t seq,
                          double mjd, const char *ext, int k)
{
    char when[40] = "", stamp[40] = "";
    if (isfinite(mjd)) {
        ss_mjd_to_iso(mjd, when, sizeof when);      /* 2026-11-22T06:00:43.200Z */
        size_t j = 0;
        stamp[j++] = '-';
        for (const char *c = when; *c && j + 1 < sizeof stamp; c++)
            if (*c != '-' && *c != ':')
                stamp[j++] = *c;
        stamp[j] = '\0';
    }
    char suffix[16] = "";
    if (k > 0)
        snprintf(suffix, sizeof suffix, "-%d", k);
    const int len = snprintf(out, n, "%s/%s-%010llu%s%s%s", dir, feed, (unsigned long long)seq,
                             stamp, suffix, ext);
    return len >= 0 && (size_t)len < n ? len : -1;
}
