/*
 * ss_common.h — things every skysieve module shares: the one error enum,
 * the logging macro, pixel types and time helpers.
 *
 * Conventions (ALGORITHM.md): frames are row-major, x = column, y = row,
 * 0-based, (0,0) is the centre of the first pixel. Float planes mark an
 * invalid pixel with NaN; nothing else is used as an invalid marker in
 * float data.
 */
#ifndef SS_COMMON_H
#define SS_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- errors ------------------------------------------------------------ */

typedef enum ss_err {
    SS_OK = 0,
    SS_ERR_NOMEM,          /* allocation failed */
    SS_ERR_INVALID,        /* bad argument from the caller (a bug) */
    SS_ERR_IO,             /* file or socket I/O failed */
    SS_ERR_FORMAT,         /* malformed input (message, FITS, JSON) */
    SS_ERR_SIZE,           /* dimensions or sizes out of bounds / disagree */
    SS_ERR_CONFIG,         /* configuration rejected */
    SS_ERR_REGISTRATION,   /* registration failed for this frame */
    SS_ERR_BACKEND,        /* backend failed this frame (recoverable) */
    SS_ERR_BROKEN,         /* backend is broken for good (sticky GPU error) */
    SS_ERR_UNSUPPORTED,    /* feature or type not supported here */
    SS_ERR_NODEVICE,       /* no GPU present */
    SS_ERR_TIMEOUT,
    SS_ERR_FULL,           /* queue or pool is full */
    SS_ERR_EMPTY,          /* queue or pool is empty */
    SS_ERR_STOPPED,        /* the component is shutting down */
    SS_ERR__COUNT
} ss_err_t;

/* Static English text for an error code; never NULL. */
const char *ss_strerror(ss_err_t e);

/* ---- logging ----------------------------------------------------------- */

/* Levels are syslog priorities so that "<N>" prefixes go straight to journald. */
typedef enum ss_log_level {
    SS_LOG_ERR = 3,
    SS_LOG_WARNING = 4,
    SS_LOG_NOTICE = 5,
    SS_LOG_INFO = 6,
    SS_LOG_DEBUG = 7
} ss_log_level_t;

/* The level above which messages are dropped (a relaxed atomic read:
 * a reload may change it while workers log). */
int ss_log_max(void);

/* Set the level; prefix=1 writes "<N>" priority prefixes (for journald).
 * Thread-safe to call at any time. */
void ss_log_setup(int max_level, int priority_prefix);
/* Parse "err|warning|notice|info|debug"; returns -1 if unknown. */
int ss_log_level_parse(const char *s);
const char *ss_log_level_name(int level);

void ss_log_write(int level, const char *tag, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The one logging macro: level is checked before any formatting happens. */
#define SS_LOG(level, tag, ...)                                    \
    do {                                                           \
        if ((int)(level) <= ss_log_max())                          \
            ss_log_write((level), (tag), __VA_ARGS__);             \
    } while (0)

/* ---- pixel types ------------------------------------------------------- */

typedef enum ss_dtype {
    SS_DT_U8 = 0,
    SS_DT_U16,
    SS_DT_I16,
    SS_DT_I32,
    SS_DT_F32,
    SS_DT__COUNT
} ss_dtype_t;

size_t ss_dtype_size(ss_dtype_t t);          /* bytes per pixel; 0 if unknown */
const char *ss_dtype_name(ss_dtype_t t);     /* "u8" "u16" "i16" "i32" "f32" */
/* Parse a dtype name; returns 0 and sets *out, or -1 if unknown. */
int ss_dtype_parse(const char *s, ss_dtype_t *out);
/* Largest representable value of an integer type (f32: +inf). */
double ss_dtype_max(ss_dtype_t t);
/* Read pixel i of a raw buffer as double. */
double ss_dtype_get(const void *buf, ss_dtype_t t, size_t i);

/* ---- time -------------------------------------------------------------- */

#define SS_MJD_UNIX_EPOCH 40587.0   /* MJD of 1970-01-01T00:00:00 UTC */

double ss_unix_to_mjd(double unix_s);
double ss_mjd_to_unix(double mjd);
/* Format as ISO-8601 UTC with milliseconds: "2026-11-22T05:05:22.123Z". */
void ss_mjd_to_iso(double mjd, char *buf, size_t n);
/* Parse ISO-8601 UTC ("YYYY-MM-DDThh:mm:ss[.fff][Z]" or "YYYY-MM-DD");
 * returns 0 and sets *mjd, or -1 if the text is not such a date. */
int ss_iso_to_mjd(const char *s, double *mjd);
/* Wall clock now, as Unix seconds; monotonic clock, as seconds. */
double ss_now_unix(void);
double ss_now_mono(void);

/* ---- small helpers ----------------------------------------------------- */

/* Format a message into buf (n bytes, truncated, NUL-terminated); buf NULL
 * or n 0: nothing. For the err/why out-parameters of fallible calls. */
void ss_msgf(char *buf, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* The k-th smallest of a[0..n) (0-based), a partially reordered so that
 * a[i] <= a[k] for i < k and a[i] >= a[k] for i > k (Wirth's selection). */
double ss_select_kth_d(double *a, size_t n, size_t k);
/* Median of a[0..n), n > 0, a reordered: the middle value, or the mean of
 * the two. */
double ss_median_d(double *a, size_t n);

/* strncpy that always terminates; returns dst. */
char *ss_strlcpy(char *dst, const char *src, size_t n);

/* The length (1..4) of the valid UTF-8 character at s, of which avail >= 1
 * bytes may be read; 0 when s does not start one (a stray or missing
 * continuation byte, an overlong form, a surrogate, past U+10FFFF). */
int ss_utf8_char_len(const unsigned char *s, size_t avail);

#define SS_MIN(a, b) ((a) < (b) ? (a) : (b))
#define SS_MAX(a, b) ((a) > (b) ? (a) : (b))
#define SS_CLAMP(v, lo, hi) ((v) < (lo) ? (lo) : (v) > (hi) ? (hi) : (v))

#ifdef __cplusplus
}
#endif
#endif
