/*
 * ss_common.c — error texts, logging, pixel types, time conversions.
 */
#define _POSIX_C_SOURCE 200809L
#include "ss_common.h"

#include <math.h>
#include <stddef.h>
#include <pthread.h>
#include <stdarg.h>
#include <string.h>
#include <strings.h>
#include <time.h>

/* ---- errors ------------------------------------------------------------ */

const char *ss_strerror(ss_err_t e)
{
    switch (e) {
    case SS_OK: return "ok";
    case SS_ERR_NOMEM: return "out of memory";
    case SS_ERR_INVALID: return "invalid argument";
    case SS_ERR_IO: return "I/O error";
    case SS_ERR_FORMAT: return "malformed input";
    case SS_ERR_SIZE: return "size out of bounds";
    case SS_ERR_CONFIG: return "configuration error";
    case SS_ERR_REGISTRATION: return "registration failed";
    case SS_ERR_BACKEND: return "backend error";
    case SS_ERR_BROKEN: return "backend broken";
    case SS_ERR_UNSUPPORTED: return "not supported";
    case SS_ERR_NODEVICE: return "no GPU device";
    case SS_ERR_TIMEOUT: return "timed out";
    case SS_ERR_FULL: return "full";
    case SS_ERR_EMPTY: return "empty";
    case SS_ERR_STOPPED: return "stopped";
    case SS_ERR__COUNT: break;
    }
    return "unknown error";
}

/* ---- logging ----------------------------------------------------------- */

static int log_max_level = SS_LOG_INFO;  /* __atomic access only */
static int log_prefix;                  /* __atomic access only */
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

static const char *const level_names[8] = {
    "emerg", "alert", "crit", "err", "warning", "notice", "info", "debug"
};

int ss_log_max(void)
{
    return __atomic_load_n(&log_max_level, __ATOMIC_RELAXED);
}

void ss_log_setup(int max_level, int priority_prefix)
{
    __atomic_store_n(&log_max_level, SS_CLAMP(max_level, SS_LOG_ERR, SS_LOG_DEBUG),
                     __ATOMIC_RELAXED);
    __atomic_store_n(&log_prefix, priority_prefix, __ATOMIC_RELAXED);
}

int ss_log_level_parse(const char *s)
{
    for (int i = SS_LOG_ERR; i <= SS_LOG_DEBUG; i++)
        if (s && strcasecmp(s, level_names[i]) == 0)
            return i;
    return -1;
}

const char *ss_log_level_name(int level)
{
    return level_names[SS_CLAMP(level, 0, 7)];
}

void ss_msgf(char *buf, size_t n, const char *fmt, ...)
{
    if (!buf || n == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, n, fmt, ap);
    va_end(ap);
}

void ss_log_write(int level, const char *tag, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* one fprintf per line, under a lock, so lines from threads never mix */
    pthread_mutex_lock(&log_lock);
    if (__atomic_load_n(&log_prefix, __ATOMIC_RELAXED))
        fprintf(stderr, "<%d>%s: %s\n", level, tag, msg);
    else
        fprintf(stderr, "skysieve %-7s %s: %s\n", ss_log_level_name(level), tag, msg);
    fflush(stderr);
    pthread_mutex_unlock(&log_lock);
}

/* ---- pixel types ------------------------------------------------------- */

static const struct {
    const char *name;
    size_t size;
    double max;
} dtypes[SS_DT__COUNT] = {
    [SS_DT_U8] = { "u8", 1, 255.0 },
    [SS_DT_U16] = { "u16", 2, 65535.0 },
    [SS_DT_I16] = { "i16", 2, 32767.0 },
    [SS_DT_I32] = { "i32", 4, 2147483647.0 },
    [SS_DT_F32] = { "f32", 4, INFINITY },
};

size_t ss_dtype_size(ss_dtype_t t)
{
    return (unsigned)t < SS_DT__COUNT ? dtypes[t].size : 0;
}

const char *ss_dtype_name(ss_dtype_t t)
{
    return (unsigned)t < SS_DT__COUNT ? dtypes[t].name : "?";
}

int ss_dtype_parse(const char *s, ss_dtype_t *out)
{
    for (int i = 0; i < SS_DT__COUNT; i++)
        if (s && strcmp(s, dtypes[i].name) == 0) {
            *out = (ss_dtype_t)i;
            return 0;
        }
    return -1;
}

double ss_dtype_max(ss_dtype_t t)
{
    return (unsigned)t < SS_DT__COUNT ? dtypes[t].max : 0.0;
}

double ss_dtype_get(const void *buf, ss_dtype_t t, size_t i)
{
    switch (t) {
    case SS_DT_U8: return ((const uint8_t *)buf)[i];
    case SS_DT_U16: return ((const uint16_t *)buf)[i];
    case SS_DT_I16: return ((const int16_t *)buf)[i];
    case SS_DT_I32: return ((const int32_t *)buf)[i];
    case SS_DT_F32: return ((const float *)buf)[i];
    default: return NAN;
    }
}

/* ---- time -------------------------------------------------------------- */

double ss_unix_to_mjd(double unix_s) { return unix_s / 86400.0 + SS_MJD_UNIX_EPOCH; }
double ss_mjd_to_unix(double mjd) { return (mjd - SS_MJD_UNIX_EPOCH) * 86400.0; }

/* days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant) */
static long days_from_civil(long y, unsigned m, unsigned d)
{
    y -= m <= 2;
    long era = (y >= 0 ? y : y - 399) / 400;
    unsigned yoe = (unsigned)(y - era * 400);
    unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + (long)doe - 719468;
}

void ss_mjd_to_iso(double mjd, char *buf, size_t n)
{
    double u = ss_mjd_to_unix(mjd);
    double fl = floor(u);
    long ms = lround((u - fl) * 1000.0);
    time_t secs = (time_t)fl;
    if (ms >= 1000) {
        ms -= 1000;
        secs += 1;
    }
    struct tm tm;
    gmtime_r(&secs, &tm);
    snprintf(buf, n, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ", tm.tm_year + 1900,
             tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ms);
}

/* n decimal digits at *p as *v, advancing *p; 0 when they are not. */
static int digits(const char **p, int n, int *v)
{
    *v = 0;
    for (int i = 0; i < n; i++) {
        const char c = (*p)[i];
        if (c < '0' || c > '9')
            return 0;
        *v = *v * 10 + (c - '0');
    }
    *p += n;
    return 1;
}

int ss_iso_to_mjd(const char *s, double *mjd)
{
    int y, mo, d, hh = 0, mi = 0, sec = 0;
    double frac = 0.0;
    const char *p = s;
    if (!p || !digits(&p, 4, &y) || *p++ != '-' || !digits(&p, 2, &mo) || *p++ != '-' ||
        !digits(&p, 2, &d))
        return -1;
    if (*p == 'T' || *p == ' ') {
        p++;
        if (!digits(&p, 2, &hh) || *p++ != ':' || !digits(&p, 2, &mi) || *p++ != ':' ||
            !digits(&p, 2, &sec))
            return -1;
        if (*p == '.') {
            p++;
            if (*p < '0' || *p > '9')
                return -1;
            double scale = 0.1;
            for (; *p >= '0' && *p <= '9'; p++, scale *= 0.1)
                frac += (*p - '0') * scale;
        }
        if (*p == 'Z')
            p++;
    }
    if (*p != '\0')
        return -1;
    if (mo < 1 || mo > 12 || d < 1 || d > 31 || hh > 23 || mi > 59 || sec > 60)
        return -1;
    long days = days_from_civil(y, (unsigned)mo, (unsigned)d);
    *mjd = (double)days + SS_MJD_UNIX_EPOCH + (hh * 3600.0 + mi * 60.0 + sec + frac) / 86400.0;
    return 0;
}

double ss_now_unix(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

double ss_now_mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int ss_utf8_char_len(const unsigned char *s, size_t avail)
{
    const unsigned c = s[0];
    int len;
    unsigned min;
    if (c < 0x80)
        return 1;
    if ((c & 0xE0) == 0xC0) {
        len = 2;
        min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
        len = 3;
        min = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
        len = 4;
        min = 0x10000;
    } else {
        return 0;
    }
    if ((size_t)len > avail)
        return 0;
    unsigned cp = c & (0x7Fu >> len);
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3Fu);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return len;
}

char *ss_strlcpy(char *dst, const char *src, size_t n)
{
    if (n == 0)
        return dst;
    size_t i = 0;
    for (; src && src[i] && i + 1 < n; i++)
        dst[i] = src[i];
    dst[i] = '\0';
    return dst;
}

/* The k-th smallest of a[0..n) (0-based), a partially reordered so that
 * a[i] <= a[k] for i < k and a[i] >= a[k] for i > k (Wirth's selection). */
double ss_select_kth_d(double *a, size_t n, size_t k)
{
    ptrdiff_t l = 0, m = (ptrdiff_t)n - 1;
    const ptrdiff_t kk = (ptrdiff_t)k;
    while (l < m) {
        const double x = a[kk];
        ptrdiff_t i = l, j = m;
        do {
            while (a[i] < x)
                i++;
            while (x < a[j])
                j--;
            if (i <= j) {
                const double t = a[i];
                a[i] = a[j];
                a[j] = t;
                i++;
                j--;
            }
        } while (i <= j);
        if (j < kk)
            l = i;
        if (kk < i)
            m = j;
    }
    return a[kk];
}

double ss_median_d(double *a, size_t n)
{
    const size_t k = (n - 1) / 2;
    const double lo = ss_select_kth_d(a, n, k);
    if (n & 1)
        return lo;
    double hi = a[k + 1];
    for (size_t i = k + 2; i < n; i++)
        hi = a[i] < hi ? a[i] : hi;
    return 0.5 * (lo + hi);
}
