/*
 * proto.c — encode and decode every message of the skysieve wire protocol,
 * version 1 (proto/PROTOCOL.md is the specification; proto.h the API).
 *
 * Decoding goes through cJSON (cJSON_ParseWithLengthOpts, so that a part
 * need not be NUL-terminated and trailing bytes are caught) and checks
 * every field the message defines, in a fixed order, reporting the first
 * failure with the text PROTOCOL.md documents. Encoding goes through a
 * small writer into the caller's buffer: no allocation on the publishing
 * path, and numbers printed the same way every time (the shortest of
 * %.15g/%.16g/%.17g that reads back exactly), which is what makes the
 * golden messages of tests/golden byte-exact.
 *
 * Numbers are formatted and parsed in the "C" numeric locale (the daemon
 * never changes LC_NUMERIC).
 */
#include "proto.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* The pixel parts are little-endian and copied as they are: a big-endian
 * host would need byte swaps that this file does not have. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "proto.c assumes a little-endian host (pixel parts are little-endian)"
#endif

#define MJD_MIN 0.0             /* 1858-11-17: anything earlier is a sender bug */
#define MJD_MAX 200000.0        /* year 2406: keeps ISO formatting in range */
#define TIME_AGREE_S 1e-3       /* "time" has millisecond resolution */
#define FITS_KEY_MAX 8
#define FITS_STRVAL_MAX 68      /* characters of a FITS string value */
#define REQUEST_MAX SS_PROTO_CTL_REQUEST_MAX
#define STR_FIELD_MAX 256       /* longest string field read (reason, source, ...) */

/* ---- names -------------------------------------------------------------- */

const char *ss_msg_type_name(ss_msg_type_t t)
{
    static const char *const names[SS_MSG__COUNT] = {
        "none", "frame", "series_start", "series_end", "residual", "detections", "status",
        "tracks", "stamps",
    };
    return (unsigned)t < SS_MSG__COUNT ? names[t] : "none";
}

static const char *const reason_names[SS_PR__COUNT] = {
    [SS_PR_OK] = "ok",
    [SS_PR_NOT_JSON] = "not_json",
    [SS_PR_NOT_OBJECT] = "not_object",
    [SS_PR_TOO_LONG] = "too_long",
    [SS_PR_MISSING_FIELD] = "missing_field",
    [SS_PR_WRONG_TYPE] = "wrong_type",
    [SS_PR_DUPLICATE_FIELD] = "duplicate_field",
    [SS_PR_BAD_VALUE] = "bad_value",
    [SS_PR_VERSION] = "protocol_version",
    [SS_PR_UNKNOWN_TYPE] = "unknown_type",
    [SS_PR_UNKNOWN_DTYPE] = "unknown_dtype",
    [SS_PR_DIMENSIONS] = "dimensions",
    [SS_PR_BAD_TIME] = "bad_time",
    [SS_PR_BAD_WCS] = "bad_wcs",
    [SS_PR_META_TOO_LARGE] = "meta_too_large",
    [SS_PR_DATA_SIZE] = "data_size",
    [SS_PR_MASK_SIZE] = "mask_size",
    [SS_PR_MISSING_PART] = "missing_part",
    [SS_PR_TOO_MANY_PARTS] = "too_many_parts",
    [SS_PR_NO_BUFFER] = "no_buffer",
    [SS_PR_BAD_TOPIC] = "bad_topic",
};

const char *ss_proto_reason_name(ss_proto_reason_t r)
{
    return (unsigned)r < SS_PR__COUNT ? reason_names[r] : "unknown";
}

ss_proto_reason_t ss_proto_reason_parse(const char *s)
{
    for (int i = 0; s && i < SS_PR__COUNT; i++)
        if (strcmp(s, reason_names[i]) == 0)
            return (ss_proto_reason_t)i;
    return SS_PR__COUNT;
}

const char *ss_ctl_cmd_name(ss_ctl_cmd_t c)
{
    static const char *const names[SS_CTL__COUNT] = {
        "status", "stats", "reset", "reload", "config",
    };
    return (unsigned)c < SS_CTL__COUNT ? names[c] : "?";
}

const char *ss_proto_flag_name(int flag_bit)
{
    switch (flag_bit) {
    case SS_DET_TOUCHES_INVALID: return "touches_invalid";
    case SS_DET_TOUCHES_EDGE: return "touches_edge";
    default: return NULL;
    }
}

static const int known_flags[] = { SS_DET_TOUCHES_INVALID, SS_DET_TOUCHES_EDGE };
#define N_KNOWN_FLAGS ((int)(sizeof known_flags / sizeof known_flags[0]))

/* dtype names on the wire; the long forms are what EPICS areaDetector and
 * Dectris senders call the same types, accepted so that they adapt easily. */
static int dtype_parse(const char *s, ss_dtype_t *out)
{
    static const struct { const char *name; ss_dtype_t t; } alias[] = {
        { "uint8", SS_DT_U8 }, { "uint16", SS_DT_U16 }, { "int16", SS_DT_I16 },
        { "int32", SS_DT_I32 }, { "float32", SS_DT_F32 },
    };
    if (ss_dtype_parse(s, out) == 0)
        return 0;
    for (size_t i = 0; i < sizeof alias / sizeof alias[0]; i++)
        if (strcmp(s, alias[i].name) == 0) {
            *out = alias[i].t;
            return 0;
        }
    return -1;
}

static int status_parse(const char *s, ss_frame_status_t *out)
{
    for (int i = 0; i < SS_STATUS__COUNT; i++)
        if (strcmp(s, ss_status_name((ss_frame_status_t)i)) == 0) {
            *out = (ss_frame_status_t)i;
            return 0;
        }
    return -1;
}

void ss_proto_limits_default(ss_proto_limits_t *l)
{
    l->max_width = SS_PROTO_DEFAULT_MAX_WIDTH;
    l->max_height = SS_PROTO_DEFAULT_MAX_HEIGHT;
    l->max_header_bytes = SS_PROTO_DEFAULT_MAX_HEADER;
    l->max_meta_bytes = SS_PROTO_DEFAULT_MAX_META;
}

size_t ss_proto_max_data_bytes(const ss_proto_limits_t *l)
{
    return (size_t)l->max_width * (size_t)l->max_height * ss_dtype_size(SS_DT_F32);
}

/* ---- errors ------------------------------------------------------------- */

static int fail(ss_proto_error_t *e, ss_proto_reason_t r, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(ss_proto_error_t *e, ss_proto_reason_t r, const char *fmt, ...)
{
    e->reason = r;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->text, sizeof e->text, fmt, ap);
    va_end(ap);
    return -1;
}

static void ok_error(ss_proto_error_t *e)
{
    e->reason = SS_PR_OK;
    e->text[0] = '\0';
}

/* The error code that goes with a reason. */
static ss_err_t reason_err(ss_proto_reason_t r)
{
    switch (r) {
    case SS_PR_OK: return SS_OK;
    case SS_PR_VERSION: return SS_ERR_UNSUPPORTED;
    case SS_PR_TOO_LONG:
    case SS_PR_DIMENSIONS:
    case SS_PR_META_TOO_LARGE:
    case SS_PR_DATA_SIZE:
    case SS_PR_MASK_SIZE:
    case SS_PR_TOO_MANY_PARTS:
    case SS_PR_NO_BUFFER: return SS_ERR_SIZE;
    default: return SS_ERR_FORMAT;
    }
}

/* ---- JSON writer -------------------------------------------------------- */

#define JW_MAX_DEPTH 8

typedef struct jw {
    char *buf;
    size_t cap, len;
    int bad;                        /* overflow or misuse: the result is -1 */
    int depth;
    unsigned char first[JW_MAX_DEPTH]; /* no member written yet at this depth */
} jw_t;

static void jw_init(jw_t *w, char *buf, size_t cap)
{
    w->buf = buf;
    w->cap = cap;
    w->len = 0;
    w->bad = buf == NULL || cap == 0;
    w->depth = 0;
    w->first[0] = 1;
    if (!w->bad)
        buf[0] = '\0';
}

static void jw_put(jw_t *w, const char *s, size_t n)
{
    if (w->bad)
        return;
    if (w->len + n + 1 > w->cap) {
        w->bad = 1;
        return;
    }
    memcpy(w->buf + w->len, s, n);
    w->len += n;
    w->buf[w->len] = '\0';
}

static void jw_puts(jw_t *w, const char *s) { jw_put(w, s, strlen(s)); }

static void jw_quoted(jw_t *w, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    jw_put(w, "\"", 1);
    const char *run = s;
    for (const char *p = s; *p; p++) {
        unsigned char c = (unsigned char)*p;
        if (c >= 0x20 && c != '"' && c != '\\')
            continue;
        jw_put(w, run, (size_t)(p - run));
        run = p + 1;
        char esc[7] = { '\\', 0 };
        size_t n = 2;
        switch (c) {
        case '"': esc[1] = '"'; break;
        case '\\': esc[1] = '\\'; break;
        case '\n': esc[1] = 'n'; break;
        case '\r': esc[1] = 'r'; break;
        case '\t': esc[1] = 't'; break;
        case '\b': esc[1] = 'b'; break;
        case '\f': esc[1] = 'f'; break;
        default:
            memcpy(esc + 1, "u00", 3);
            esc[4] = hex[c >> 4];
            esc[5] = hex[c & 15];
            n = 6;
        }
        jw_put(w, esc, n);
    }
    jw_put(w, run, strlen(run));
    jw_put(w, "\"", 1);
}

/* Separator and key of the next member (key NULL inside arrays). */
static void jw_key(jw_t *w, const char *key)
{
    if (!w->first[w->depth])
        jw_put(w, ",", 1);
    w->first[w->depth] = 0;
    if (key) {
        jw_quoted(w, key);
        jw_put(w, ":", 1);
    }
}

static void jw_open(jw_t *w, const char *key, char c)
{
    jw_key(w, key);
    jw_put(w, &c, 1);
    if (w->depth + 1 >= JW_MAX_DEPTH) {
        w->bad = 1;
        return;
    }
    w->first[++w->depth] = 1;
}

static void jw_close(jw_t *w, char c)
{
    jw_put(w, &c, 1);
    if (w->depth == 0)
        w->bad = 1;
    else
        w->depth--;
}

static void jw_str(jw_t *w, const char *key, const char *v)
{
    jw_key(w, key);
    jw_quoted(w, v ? v : "");
}

/* The shortest of 15, 16 or 17 significant digits that reads back as the
 * same double: stable, exact, and as short as the value allows. */
static void fmt_double(double v, char out[40])
{
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(out, 40, "%.*g", prec, v);
        if (strtod(out, NULL) == v)
            return;
    }
}

/* The same for a float32 value: 6 to 9 digits. */
static void fmt_float(float v, char out[40])
{
    for (int prec = 6; prec <= 9; prec++) {
        snprintf(out, 40, "%.*g", prec, (double)v);
        if ((float)strtod(out, NULL) == v)
            return;
    }
}

/* Non-finite numbers have no JSON form: they travel as null. */
static void jw_num(jw_t *w, const char *key, double v)
{
    jw_key(w, key);
    if (!isfinite(v)) {
        jw_puts(w, "null");
        return;
    }
    char t[40];
    fmt_double(v, t);
    jw_puts(w, t);
}

static void jw_f32(jw_t *w, const char *key, float v)
{
    jw_key(w, key);
    if (!isfinite(v)) {
        jw_puts(w, "null");
        return;
    }
    char t[40];
    fmt_float(v, t);
    jw_puts(w, t);
}

static void jw_int(jw_t *w, const char *key, int64_t v)
{
    char t[32];
    jw_key(w, key);
    snprintf(t, sizeof t, "%lld", (long long)v);
    jw_puts(w, t);
}

static void jw_u64(jw_t *w, const char *key, uint64_t v)
{
    char t[32];
    jw_key(w, key);
    snprintf(t, sizeof t, "%llu", (unsigned long long)v);
    jw_puts(w, t);
}

static void jw_bool(jw_t *w, const char *key, int v)
{
    jw_key(w, key);
    jw_puts(w, v ? "true" : "false");
}

static void jw_null(jw_t *w, const char *key)
{
    jw_key(w, key);
    jw_puts(w, "null");
}

/* A value that is already JSON text (the validated "meta" object). */
static void jw_raw(jw_t *w, const char *key, const char *json)
{
    jw_key(w, key);
    jw_puts(w, json);
}

static int jw_done(jw_t *w)
{
    if (w->bad || w->depth != 0)
        return -1;
    return (int)w->len;
}

/* time + mjd pair; unknown times go out as null */
static void jw_time(jw_t *w, const char *iso_key, const char *mjd_key, double mjd)
{
    if (!isfinite(mjd)) {
        jw_null(w, iso_key);
        jw_null(w, mjd_key);
        return;
    }
    char iso[40];
    ss_mjd_to_iso(mjd, iso, sizeof iso);
    jw_str(w, iso_key, iso);
    jw_num(w, mjd_key, mjd);
}

/* The WCS keys of a frame; (ox, oy) is the first pixel of the image the
 * message carries within the input frame, by which CRPIX shifts. */
static void jw_wcs(jw_t *w, const ss_frame_meta_t *m, int ox, int oy)
{
    if (m->n_wcs <= 0)
        return;
    jw_open(w, "wcs", '{');
    for (int i = 0; i < m->n_wcs && i < SS_WCS_MAX; i++) {
        const ss_wcs_key_t *k = &m->wcs[i];
        if (k->is_string)
            jw_str(w, k->key, k->sval);
        else if (strcmp(k->key, "CRPIX1") == 0)
            jw_num(w, k->key, k->dval - ox);
        else if (strcmp(k->key, "CRPIX2") == 0)
            jw_num(w, k->key, k->dval - oy);
        else
            jw_num(w, k->key, k->dval);
    }
    jw_close(w, '}');
}

/* ---- decoding helpers --------------------------------------------------- */

/* Where decoding is: the object, the error, and a path prefix for nested
 * fields ("shift.", "detections[3].") so that texts name the full path. */
typedef struct dctx {
    const cJSON *obj;
    ss_proto_error_t *err;
    char prefix[48];
} dctx_t;

/* d's path prefix: parent + name (+ "[index]" when index >= 0) + ".",
 * cut short if it gets long (it only labels error texts). */
static void set_prefix(dctx_t *d, const char *parent, const char *name, int index)
{
    char idx[16] = "";
    if (index >= 0)
        snprintf(idx, sizeof idx, "[%d]", index);
    size_t cap = sizeof d->prefix, n = 0;
    const char *pieces[] = { parent, name, idx, "." };
    d->prefix[0] = '\0';
    for (size_t i = 0; i < sizeof pieces / sizeof pieces[0]; i++) {
        for (const char *p = pieces[i]; *p && n + 1 < cap; p++)
            d->prefix[n++] = *p;
    }
    d->prefix[n] = '\0';
}

static const char *json_kind(const cJSON *it)
{
    if (cJSON_IsString(it)) return "a string";
    if (cJSON_IsNumber(it)) return "a number";
    if (cJSON_IsBool(it)) return "a boolean";
    if (cJSON_IsNull(it)) return "null";
    if (cJSON_IsObject(it)) return "an object";
    if (cJSON_IsArray(it)) return "an array";
    return "an invalid value";
}

/* Parse one JSON part that must be an object. what names it in the texts
 * ("header", "body", "request", "response"). */
/* The first byte of buf[0..n) that does not start a valid UTF-8
 * character, or n. */
static size_t utf8_invalid_at(const unsigned char *buf, size_t n)
{
    size_t i = 0;
    while (i < n) {
        const int len = ss_utf8_char_len(buf + i, n - i);
        if (len == 0)
            return i;
        i += (size_t)len;
    }
    return n;
}

static int is_number_char(unsigned char c)
{
    return (c >= '0' && c <= '9') || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-';
}

/* The 4 hex digits at s (avail bytes readable) as *v; 0 when they are not. */
static int hex4(const unsigned char *s, size_t avail, unsigned *v)
{
    if (avail < 4)
        return 0;
    *v = 0;
    for (int k = 0; k < 4; k++) {
        const unsigned c = s[k];
        const int d = c >= '0' && c <= '9' ? (int)(c - '0')
                      : c >= 'a' && c <= 'f' ? (int)(c - 'a' + 10)
                      : c >= 'A' && c <= 'F' ? (int)(c - 'A' + 10) : -1;
        if (d < 0)
            return 0;
        *v = *v << 4 | (unsigned)d;
    }
    return 1;
}

/* What JSON (RFC 8259) or PROTOCOL.md §2 forbids and cJSON lets through,
 * in buf[0..n): a raw control character in a string, a number with a
 * leading zero, the escape \u0000 (cJSON would cut the string there) and
 * a UTF-16 surrogate escape that is not a high-low pair. Returns the
 * position of the first (the control character, the digit after the zero,
 * the backslash), or n. The same scan as the Python client's
 * _strict_violation. */
static size_t json_strict_violation(const unsigned char *s, size_t n)
{
    int in_str = 0;
    for (size_t i = 0; i < n; i++) {
        const unsigned c = s[i];
        if (in_str) {
            if (c == '"') {
                in_str = 0;
            } else if (c < 0x20) {
                return i;
            } else if (c == '\\' && i + 1 < n && s[i + 1] == 'u') {
                unsigned v, w;
                if (!hex4(s + i + 2, n - i - 2, &v)) {
                    i++;                        /* malformed: the parser's error */
                    continue;
                }
                if (v == 0 || (v >= 0xDC00 && v <= 0xDFFF))
                    return i;
                if (v >= 0xD800 && v <= 0xDBFF) {
                    if (!(i + 7 < n && s[i + 6] == '\\' && s[i + 7] == 'u' &&
                          hex4(s + i + 8, n - i - 8, &w) && w >= 0xDC00 && w <= 0xDFFF))
                        return i;
                    i += 11;
                } else {
                    i += 5;
                }
            } else if (c == '\\') {
                i++;                            /* the escaped character */
            }
            continue;
        }
        if (c == '"') {
            in_str = 1;
        } else if ((c == '-' || (c >= '0' && c <= '9')) && !(i > 0 && is_number_char(s[i - 1]))) {
            const size_t j = i + (c == '-');
            if (j + 1 < n && s[j] == '0' && s[j + 1] >= '0' && s[j + 1] <= '9')
                return j + 1;
        }
    }
    return n;
}

/* Parse a JSON part that must be one object. The error position, as the
 * Python client finds it too: the first invalid UTF-8 byte of the part;
 * else the first of the parser's own error (or what follows the value)
 * and json_strict_violation before it. */
static cJSON *parse_object(const void *buf, size_t len, size_t max_len, const char *what,
                           ss_proto_error_t *err)
{
    if (len > max_len) {
        fail(err, SS_PR_TOO_LONG, "%s too long: %zu bytes (maximum %zu)", what, len, max_len);
        return NULL;
    }
    const char *start = buf, *end = NULL;
    size_t at = utf8_invalid_at(buf, len);
    cJSON *root = NULL;
    if (at == len) {
        root = len ? cJSON_ParseWithLengthOpts(start, len, &end, 0) : NULL;
        at = root ? len : end && end >= start ? (size_t)(end - start) : 0;
        /* cJSON stops after the first value: anything but whitespace
         * behind it would be silently ignored, so it is an error here. */
        for (const char *p = end; root && p < start + len && at == len; p++)
            if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r')
                at = (size_t)(p - start);
        const size_t v = json_strict_violation(buf, at);
        if (v < at || (root && at < len)) {
            at = v < at ? v : at;
            cJSON_Delete(root);
            root = NULL;
        }
    }
    if (!root) {
        fail(err, SS_PR_NOT_JSON, "%s is not valid JSON (error at byte %zu)", what, at);
        return NULL;
    }
    if (!cJSON_IsObject(root)) {
        fail(err, SS_PR_NOT_OBJECT, "%s is not a JSON object (got %s)", what, json_kind(root));
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

/* Look up a member by exact name. Returns 1 found, 0 absent and optional,
 * -1 error (missing when required, or given twice). */
static int get(dctx_t *c, const char *name, int required, const cJSON **out)
{
    const cJSON *found = NULL;
    int n = 0;
    const cJSON *ch;
    cJSON_ArrayForEach(ch, c->obj)
    {
        if (ch->string && strcmp(ch->string, name) == 0) {
            if (!found)
                found = ch;
            n++;
        }
    }
    if (n > 1)
        return fail(c->err, SS_PR_DUPLICATE_FIELD, "duplicate field \"%s%s\"", c->prefix, name);
    if (!found) {
        if (required)
            return fail(c->err, SS_PR_MISSING_FIELD, "missing field \"%s%s\"", c->prefix, name);
        return 0;
    }
    *out = found;
    return 1;
}

static int wrong_type(dctx_t *c, const char *name, const char *expected, const cJSON *it)
{
    return fail(c->err, SS_PR_WRONG_TYPE, "field \"%s%s\" has the wrong type: expected %s, got %s",
                c->prefix, name, expected, json_kind(it));
}

/* An integral number in [lo, hi]; range_text describes the range in the
 * error. */
static int get_int(dctx_t *c, const char *name, int required, double lo, double hi,
                   const char *range_text, int64_t *out)
{
    const cJSON *it = NULL;
    int r = get(c, name, required, &it);
    if (r <= 0)
        return r;
    if (!cJSON_IsNumber(it))
        return wrong_type(c, name, "an integer", it);
    double v = it->valuedouble;
    if (!isfinite(v) || floor(v) != v)
        return fail(c->err, SS_PR_WRONG_TYPE,
                    "field \"%s%s\" has the wrong type: expected an integer, got %.17g", c->prefix,
                    name, v);
    if (v < lo || v > hi)
        return fail(c->err, SS_PR_BAD_VALUE, "field \"%s%s\" is out of range: %.17g (expected %s)",
                    c->prefix, name, v, range_text);
    *out = (int64_t)v;
    return 1;
}

static int get_int32(dctx_t *c, const char *name, int required, double lo, double hi,
                     const char *range_text, int *out)
{
    int64_t v = 0;
    int r = get_int(c, name, required, lo, hi, range_text, &v);
    if (r > 0)
        *out = (int)v;
    return r;
}

static int get_u64(dctx_t *c, const char *name, int required, uint64_t *out)
{
    int64_t v = 0;
    int r = get_int(c, name, required, 0, SS_PROTO_MAX_INT, "0 to 2^53", &v);
    if (r > 0)
        *out = (uint64_t)v;
    return r;
}

/* A finite number; with nullable, null reads as NaN. */
static int get_num(dctx_t *c, const char *name, int required, int nullable, double *out)
{
    const cJSON *it = NULL;
    int r = get(c, name, required, &it);
    if (r <= 0)
        return r;
    if (nullable && cJSON_IsNull(it)) {
        *out = NAN;
        return 1;
    }
    if (!cJSON_IsNumber(it))
        return wrong_type(c, name, nullable ? "a number or null" : "a number", it);
    if (!isfinite(it->valuedouble))
        return fail(c->err, SS_PR_BAD_VALUE,
                    "field \"%s%s\" is out of range: %g (expected a finite number)", c->prefix,
                    name, it->valuedouble);
    *out = it->valuedouble;
    return 1;
}

static int get_bool(dctx_t *c, const char *name, int required, int *out)
{
    const cJSON *it = NULL;
    int r = get(c, name, required, &it);
    if (r <= 0)
        return r;
    if (!cJSON_IsBool(it))
        return wrong_type(c, name, "a boolean", it);
    *out = cJSON_IsTrue(it);
    return 1;
}

enum { CHARS_ANY = 0, CHARS_NAME, CHARS_PRINTABLE };

/* A string of at most cap-1 bytes; chars restricts the alphabet (feed
 * names appear in topics, series ids in FITS cards). */
static int get_str(dctx_t *c, const char *name, int required, int chars, char *out, size_t cap)
{
    const cJSON *it = NULL;
    int r = get(c, name, required, &it);
    if (r <= 0)
        return r;
    if (!cJSON_IsString(it))
        return wrong_type(c, name, "a string", it);
    const char *s = it->valuestring;
    size_t n = strlen(s);
    if (n + 1 > cap)
        return fail(c->err, SS_PR_BAD_VALUE, "field \"%s%s\" is too long: %zu bytes (maximum %zu)",
                    c->prefix, name, n, cap - 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        int good = 1;
        if (chars == CHARS_NAME)
            good = (*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') ||
                   (*p >= '0' && *p <= '9') || *p == '_' || *p == '-' || *p == '.';
        else if (chars == CHARS_PRINTABLE)
            good = *p >= 0x20 && *p < 0x7f;
        if (!good)
            return fail(c->err, SS_PR_BAD_VALUE,
                        chars == CHARS_NAME
                            ? "field \"%s%s\" has a character outside A-Z a-z 0-9 _ - .: \"%s\""
                            : "field \"%s%s\" has a character outside printable ASCII: \"%s\"",
                        c->prefix, name, s);
    }
    memcpy(out, s, n + 1);
    return 1;
}

static int get_typed(dctx_t *c, const char *name, int required, int want_object,
                     const cJSON **out)
{
    const cJSON *it = NULL;
    int r = get(c, name, required, &it);
    if (r <= 0)
        return r;
    if (want_object ? !cJSON_IsObject(it) : !cJSON_IsArray(it))
        return wrong_type(c, name, want_object ? "an object" : "an array", it);
    *out = it;
    return 1;
}

/* protocol (required, = 1) and type (required, = want or one of the
 * input types). */
static int check_version(dctx_t *c)
{
    int64_t v = 0;
    if (get_int(c, "protocol", 1, -SS_PROTO_MAX_INT, SS_PROTO_MAX_INT, "an integer", &v) < 0)
        return -1;
    if (v != SS_PROTO_VERSION)
        return fail(c->err, SS_PR_VERSION,
                    "unsupported protocol version %lld (this receiver speaks version %d)",
                    (long long)v, SS_PROTO_VERSION);
    return 0;
}

static int check_type(dctx_t *c, ss_msg_type_t want)
{
    char type[SS_NAME_MAX];
    if (get_str(c, "type", 1, CHARS_ANY, type, sizeof type) < 0)
        return -1;
    if (strcmp(type, ss_msg_type_name(want)) != 0)
        return fail(c->err, SS_PR_UNKNOWN_TYPE, "unknown message type \"%s\" (expected %s)", type,
                    ss_msg_type_name(want));
    return 0;
}

/* A time pair: "time" (ISO-8601 UTC) and/or "mjd" (or other names for the
 * pair, e.g. "last_time"/"last_mjd"): either may be given; both must then
 * agree. nullable: they may be null (unknown time, output messages).
 * Returns 1 with *mjd set, 0 when absent (and optional; *mjd = NaN), -1. */
static int get_time_pair(dctx_t *c, const char *iso_key, const char *mjd_key, int required,
                         int nullable, double *mjd)
{
    const cJSON *t = NULL;
    double m = NAN;
    int rt = get(c, iso_key, 0, &t);
    if (rt < 0)
        return -1;
    int rm = get_num(c, mjd_key, 0, nullable, &m);
    if (rm < 0)
        return -1;
    double from_iso = NAN;
    if (rt > 0) {
        if (nullable && cJSON_IsNull(t)) {
            from_iso = NAN;
        } else if (!cJSON_IsString(t)) {
            return wrong_type(c, iso_key, nullable ? "a string or null" : "a string", t);
        } else if (ss_iso_to_mjd(t->valuestring, &from_iso) != 0 || !isfinite(from_iso)) {
            /* (sscanf's %lf would take "nan" seconds: not a time) */
            return fail(c->err, SS_PR_BAD_TIME, "field \"%s%s\" is not an ISO-8601 UTC time: \"%.80s\"",
                        c->prefix, iso_key, t->valuestring);
        }
    }
    if (rt == 0 && rm == 0) {
        *mjd = NAN;
        if (required)
            return fail(c->err, SS_PR_MISSING_FIELD, "missing field \"%s%s\" (or \"%s%s\")",
                        c->prefix, iso_key, c->prefix, mjd_key);
        return 0;
    }
    if (rt > 0 && rm > 0) {
        if (!isfinite(from_iso) != !isfinite(m))
            return fail(c->err, SS_PR_BAD_TIME, "fields \"%s%s\" and \"%s%s\" disagree (one is null)",
                        c->prefix, iso_key, c->prefix, mjd_key);
        if (isfinite(m) && fabs(from_iso - m) * 86400.0 > TIME_AGREE_S + 1e-6)
            return fail(c->err, SS_PR_BAD_TIME, "fields \"%s%s\" and \"%s%s\" disagree by %.3f s",
                        c->prefix, iso_key, c->prefix, mjd_key, fabs(from_iso - m) * 86400.0);
    }
    /* mjd carries more digits than the millisecond ISO text */
    double v = rm > 0 ? m : from_iso;
    if (isfinite(v) && (v < MJD_MIN || v >= MJD_MAX))
        return fail(c->err, SS_PR_BAD_TIME,
                    "field \"%s%s\" is out of range: MJD %.6f (expected 0 to 200000)", c->prefix,
                    rm > 0 ? mjd_key : iso_key, v);
    *mjd = v;
    return 1;
}

static int get_time(dctx_t *c, int required, int nullable, double *mjd)
{
    return get_time_pair(c, "time", "mjd", required, nullable, mjd);
}

static int is_fits_key(const char *k)
{
    size_t n = strlen(k);
    if (n == 0 || n > FITS_KEY_MAX)
        return 0;
    for (const char *p = k; *p; p++)
        if (!((*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '_' || *p == '-'))
            return 0;
    return 1;
}

/* "wcs": an object of FITS keyword -> number or string. */
static int get_wcs(dctx_t *c, ss_frame_meta_t *m)
{
    const cJSON *o = NULL;
    int r = get_typed(c, "wcs", 0, 1, &o);
    if (r <= 0)
        return r;
    int n = cJSON_GetArraySize(o);
    if (n > SS_WCS_MAX)
        return fail(c->err, SS_PR_BAD_WCS, "too many wcs keywords: %d (maximum %d)", n, SS_WCS_MAX);
    m->n_wcs = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, o)
    {
        const char *k = it->string ? it->string : "";
        if (!is_fits_key(k))
            return fail(c->err, SS_PR_BAD_WCS,
                        "wcs keyword \"%.40s\" is not a FITS keyword (1 to 8 characters of A-Z 0-9 _ -)",
                        k);
        for (int i = 0; i < m->n_wcs; i++)
            if (strcmp(m->wcs[i].key, k) == 0)
                return fail(c->err, SS_PR_BAD_WCS, "duplicate wcs keyword \"%s\"", k);
        ss_wcs_key_t *w = &m->wcs[m->n_wcs];
        memset(w, 0, sizeof *w);
        ss_strlcpy(w->key, k, sizeof w->key);
        if (cJSON_IsNumber(it)) {
            if (!isfinite(it->valuedouble))
                return fail(c->err, SS_PR_BAD_WCS, "wcs value of \"%s\" is not finite", k);
            w->dval = it->valuedouble;
        } else if (cJSON_IsString(it)) {
            size_t len = strlen(it->valuestring);
            if (len > FITS_STRVAL_MAX)
                return fail(c->err, SS_PR_BAD_WCS,
                            "wcs value of \"%s\" is too long: %zu characters (maximum %d)", k, len,
                            FITS_STRVAL_MAX);
            for (const unsigned char *p = (const unsigned char *)it->valuestring; *p; p++)
                if (*p < 0x20 || *p >= 0x7f)
                    return fail(c->err, SS_PR_BAD_WCS,
                                "wcs value of \"%s\" has a character outside printable ASCII", k);
            w->is_string = 1;
            ss_strlcpy(w->sval, it->valuestring, sizeof w->sval);
        } else {
            return fail(c->err, SS_PR_BAD_WCS,
                        "wcs value of \"%s\" has the wrong type: expected a number or a string, got %s",
                        k, json_kind(it));
        }
        m->n_wcs++;
    }
    return 1;
}

/* An optional object member kept as compact JSON text, size-capped:
 * "meta" (ADZMQ's "ndattr" plays its part). */
static int get_object_json(dctx_t *c, const char *name, size_t max_bytes,
                           char *out /* SS_META_MAX */)
{
    const cJSON *o = NULL;
    int r = get_typed(c, name, 0, 1, &o);
    if (r <= 0)
        return r;
    if (max_bytes > SS_META_MAX - 1)
        max_bytes = SS_META_MAX - 1;
    /* cJSON_PrintPreallocated may need a few bytes of slack beyond the
     * printed text; a failure there means "too large" either way. */
    char tmp[SS_META_MAX + 64];
    if (cJSON_PrintPreallocated((cJSON *)o, tmp, (int)sizeof tmp, 0) && strlen(tmp) <= max_bytes) {
        memcpy(out, tmp, strlen(tmp) + 1);
        return 1;
    }
    size_t n = 0;
    char *full = cJSON_PrintUnformatted(o);
    if (full) {
        n = strlen(full);
        cJSON_free(full);
    }
    return fail(c->err, SS_PR_META_TOO_LARGE,
                "field \"%s\" is too large: %zu bytes as compact JSON (maximum %zu)", name, n,
                max_bytes);
}

/* "meta": any object, kept as compact JSON text (size-capped). */
static int get_meta(dctx_t *c, size_t max_bytes, char *out /* SS_META_MAX */)
{
    return get_object_json(c, "meta", max_bytes, out);
}

/* ---- input: frame, series_start, series_end ---------------------------- */

/* A frame's width or height (what: "width", "height"; an integer within
 * ±2^53) held to its limit max: 0, or -1 with the "out of range" text. */
static int check_dim(dctx_t *c, const char *what, int64_t v, int max, int *out)
{
    if (v < 1 || v > max)
        return fail(c->err, SS_PR_DIMENSIONS, "%s %lld is out of range (1 to %d)", what,
                    (long long)v, max);
    *out = (int)v;
    return 0;
}

static int parse_frame_fields(dctx_t *c, const ss_proto_limits_t *lim, ss_proto_input_t *in)
{
    ss_frame_meta_t *m = &in->meta;
    int64_t v = 0;
    if (get_u64(c, "seq", 1, &m->seq) < 0)
        return -1;
    if (get_time(c, 1, 0, &m->mjd_obs) < 0)
        return -1;
    if (get_int(c, "width", 1, -SS_PROTO_MAX_INT, SS_PROTO_MAX_INT, "an integer", &v) < 0 ||
        check_dim(c, "width", v, lim->max_width, &in->width) < 0)
        return -1;
    if (get_int(c, "height", 1, -SS_PROTO_MAX_INT, SS_PROTO_MAX_INT, "an integer", &v) < 0 ||
        check_dim(c, "height", v, lim->max_height, &in->height) < 0)
        return -1;
    char dt[SS_NAME_MAX];
    if (get_str(c, "dtype", 1, CHARS_ANY, dt, sizeof dt) < 0)
        return -1;
    if (dtype_parse(dt, &in->dtype) != 0)
        return fail(c->err, SS_PR_UNKNOWN_DTYPE,
                    "unknown dtype \"%s\" (expected u8, u16, i16, i32 or f32)", dt);
    int r = get_num(c, "exposure", 0, 0, &m->exposure);
    if (r < 0)
        return -1;
    if (r > 0 && m->exposure < 0)
        return fail(c->err, SS_PR_BAD_VALUE,
                    "field \"exposure\" is out of range: %g (expected a number >= 0)", m->exposure);
    if (get_str(c, "feed", 0, CHARS_NAME, m->feed, sizeof m->feed) < 0)
        return -1;
    if (get_str(c, "series", 0, CHARS_PRINTABLE, m->series, sizeof m->series) < 0)
        return -1;
    if (get_wcs(c, m) < 0)
        return -1;
    if (get_meta(c, lim->max_meta_bytes, m->meta_json) < 0)
        return -1;
    return 0;
}

static int parse_series_fields(dctx_t *c, const ss_proto_limits_t *lim, ss_proto_input_t *in)
{
    ss_frame_meta_t *m = &in->meta;
    if (get_str(c, "series", 1, CHARS_PRINTABLE, m->series, sizeof m->series) < 0)
        return -1;
    if (m->series[0] == '\0')
        return fail(c->err, SS_PR_BAD_VALUE, "field \"series\" is empty");
    if (get_str(c, "feed", 0, CHARS_NAME, m->feed, sizeof m->feed) < 0)
        return -1;
    if (get_time(c, 0, 0, &m->mjd_obs) < 0)
        return -1;
    if (get_int(c, "frames", 0, 0, SS_PROTO_MAX_INT, "0 to 2^53", &in->frames) < 0)
        return -1;
    if (get_meta(c, lim->max_meta_bytes, m->meta_json) < 0)
        return -1;
    return 0;
}

/* This protocol's input header: protocol, type, then the type's fields. */
static int parse_skysieve_fields(dctx_t *c, const ss_proto_limits_t *lim, ss_proto_input_t *in)
{
    char type[SS_NAME_MAX];
    if (check_version(c) < 0 || get_str(c, "type", 1, CHARS_ANY, type, sizeof type) < 0)
        return -1;
    if (strcmp(type, "frame") == 0) {
        in->type = SS_MSG_FRAME;
        return parse_frame_fields(c, lim, in);
    }
    if (strcmp(type, "series_start") == 0 || strcmp(type, "series_end") == 0) {
        in->type = strcmp(type, "series_start") == 0 ? SS_MSG_SERIES_START : SS_MSG_SERIES_END;
        return parse_series_fields(c, lim, in);
    }
    return fail(c->err, SS_PR_UNKNOWN_TYPE,
                "unknown message type \"%s\" (expected frame, series_start or series_end)", type);
}

typedef int (*fields_fn)(dctx_t *c, const ss_proto_limits_t *lim, ss_proto_input_t *in);

/* Parse a header part of format fmt into in: the JSON object, then its
 * members by fields (which sets in->type). */
static ss_err_t parse_header(ss_proto_format_t fmt, fields_fn fields, const void *buf, size_t len,
                             const ss_proto_limits_t *lim, ss_proto_input_t *in,
                             ss_proto_error_t *err)
{
    in->format = fmt;
    in->type = SS_MSG_NONE;
    in->width = in->height = 0;
    in->dtype = SS_DT_U8;
    in->frames = -1;
    ss_frame_meta_clear(&in->meta);
    ok_error(err);
    cJSON *root = parse_object(buf, len, lim->max_header_bytes, "header", err);
    if (!root)
        return reason_err(err->reason);
    dctx_t c = { .obj = root, .err = err };
    const int rc = fields(&c, lim, in);
    cJSON_Delete(root);
    if (rc != 0) {
        in->type = SS_MSG_NONE;
        return reason_err(err->reason);
    }
    return SS_OK;
}

ss_err_t ss_proto_parse_input(const void *buf, size_t len, const ss_proto_limits_t *lim,
                              ss_proto_input_t *in, ss_proto_error_t *err)
{
    return parse_header(SS_PROTO_FMT_SKYSIEVE, parse_skysieve_fields, buf, len, lim, in, err);
}

/* ---- input: EPICS areaDetector NDPluginZMQ (ADZMQ) ---------------------- */

/* "htype": "array-1.0" (ADZMQ >= 1.4.0, shape in z,y,x order) or
 * ["array-1.0"] (earlier, shape in x,y,z order: *xyz set). */
static int adzmq_htype(dctx_t *c, int *xyz)
{
    const cJSON *it = NULL;
    if (get(c, "htype", 1, &it) < 0)
        return -1;
    *xyz = cJSON_IsArray(it);
    if (!*xyz && !cJSON_IsString(it))
        return wrong_type(c, "htype", "a string or an array", it);
    const cJSON *v = *xyz && cJSON_GetArraySize(it) == 1 ? cJSON_GetArrayItem(it, 0) : it;
    if (cJSON_IsString(v) && strcmp(v->valuestring, "array-1.0") == 0)
        return 1;
    if (cJSON_IsString(v))
        return fail(c->err, SS_PR_BAD_VALUE,
                    "field \"htype\" is \"%.40s\" (expected \"array-1.0\" or [\"array-1.0\"])",
                    v->valuestring);
    return fail(c->err, SS_PR_BAD_VALUE,
                "field \"htype\" is an array other than [\"array-1.0\"]");
}

/* "shape": two integers, [height, width] (z,y,x order) or, with xyz,
 * [width, height]; held to the limits. */
static int adzmq_shape(dctx_t *c, const ss_proto_limits_t *lim, int xyz, ss_proto_input_t *in)
{
    const cJSON *a = NULL;
    if (get_typed(c, "shape", 1, 0, &a) < 0)
        return -1;
    const int n = cJSON_GetArraySize(a);
    if (n != 2)
        return fail(c->err, SS_PR_DIMENSIONS,
                    "field \"shape\" has %d dimensions (expected 2: a monochrome image)", n);
    int64_t d[2];
    for (int i = 0; i < 2; i++) {
        const cJSON *it = cJSON_GetArrayItem(a, i);
        const double v = cJSON_IsNumber(it) ? it->valuedouble : NAN;
        if (!cJSON_IsNumber(it))
            return fail(c->err, SS_PR_WRONG_TYPE,
                        "field \"shape[%d]\" has the wrong type: expected an integer, got %s", i,
                        json_kind(it));
        if (!isfinite(v) || floor(v) != v || fabs(v) > SS_PROTO_MAX_INT)
            return fail(c->err, SS_PR_WRONG_TYPE,
                        "field \"shape[%d]\" has the wrong type: expected an integer, got %.17g", i,
                        v);
        d[i] = (int64_t)v;
    }
    const int64_t w = xyz ? d[0] : d[1], h = xyz ? d[1] : d[0];
    if (check_dim(c, "width", w, lim->max_width, &in->width) < 0 ||
        check_dim(c, "height", h, lim->max_height, &in->height) < 0)
        return -1;
    return 0;
}

/* "timeStamp": seconds since the EPICS epoch (1990-01-01 UTC), as
 * areaDetector's NDArray keeps it; into an MJD of the protocol's range. */
static int adzmq_time(dctx_t *c, double *mjd)
{
    double ts = 0;
    if (get_num(c, "timeStamp", 1, 0, &ts) < 0)
        return -1;
    const double m = SS_EPICS_EPOCH_MJD + ts / 86400.0;
    if (m < MJD_MIN || m >= MJD_MAX)
        return fail(c->err, SS_PR_BAD_TIME,
                    "field \"timeStamp\" is out of range: %.17g s after 1990-01-01 (expected MJD 0 "
                    "to 200000)", ts);
    *mjd = m;
    return 0;
}

/* "encoding": absent or "" (a raw array); anything else names the
 * compression codec that packed the array, which is not read here. */
static int adzmq_encoding(dctx_t *c)
{
    char enc[SS_NAME_MAX] = "";
    if (get_str(c, "encoding", 0, CHARS_ANY, enc, sizeof enc) < 0)
        return -1;
    if (enc[0] != '\0')
        return fail(c->err, SS_PR_UNKNOWN_DTYPE,
                    "field \"encoding\" is \"%s\": compressed arrays are not accepted (expected "
                    "\"\")", enc);
    return 0;
}

/* An ADZMQ header's members, in the order the plugin writes them. */
static int parse_adzmq_fields(dctx_t *c, const ss_proto_limits_t *lim, ss_proto_input_t *in)
{
    ss_frame_meta_t *m = &in->meta;
    int xyz = 0;
    char type[SS_NAME_MAX];
    in->type = SS_MSG_FRAME;
    if (adzmq_htype(c, &xyz) < 0 || get_str(c, "type", 1, CHARS_ANY, type, sizeof type) < 0)
        return -1;
    if (dtype_parse(type, &in->dtype) != 0)
        return fail(c->err, SS_PR_UNKNOWN_DTYPE,
                    "unknown type \"%s\" (expected uint8, uint16, int16, int32 or float32)", type);
    if (adzmq_shape(c, lim, xyz, in) < 0 || get_u64(c, "frame", 1, &m->seq) < 0 ||
        adzmq_time(c, &m->mjd_obs) < 0 || adzmq_encoding(c) < 0 ||
        get_object_json(c, "ndattr", lim->max_meta_bytes, m->meta_json) < 0)
        return -1;
    return 0;
}

ss_err_t ss_proto_parse_adzmq(const void *buf, size_t len, const ss_proto_limits_t *lim,
                              ss_proto_input_t *in, ss_proto_error_t *err)
{
    return parse_header(SS_PROTO_FMT_ADZMQ, parse_adzmq_fields, buf, len, lim, in, err);
}

ss_err_t ss_proto_parse_header(ss_proto_format_t fmt, const void *buf, size_t len,
                               const ss_proto_limits_t *lim, ss_proto_input_t *in,
                               ss_proto_error_t *err)
{
    if (fmt == SS_PROTO_FMT_ADZMQ)
        return ss_proto_parse_adzmq(buf, len, lim, in, err);
    return ss_proto_parse_input(buf, len, lim, in, err);
}

const char *ss_proto_format_name(ss_proto_format_t fmt)
{
    return fmt == SS_PROTO_FMT_ADZMQ ? "adzmq" : "skysieve";
}

size_t ss_proto_input_data_bytes(const ss_proto_input_t *in)
{
    if (in->type != SS_MSG_FRAME)
        return 0;
    return (size_t)in->width * (size_t)in->height * ss_dtype_size(in->dtype);
}

ss_err_t ss_proto_check_parts(const ss_proto_input_t *in, int n_parts, size_t data_len,
                              size_t mask_len, ss_proto_error_t *err)
{
    ok_error(err);
    if (in->type != SS_MSG_FRAME) {
        if (n_parts > 1) {
            fail(err, SS_PR_TOO_MANY_PARTS, "too many parts: %d (a %s message has 1)", n_parts,
                 ss_msg_type_name(in->type));
            return SS_ERR_SIZE;
        }
        return SS_OK;
    }
    const int adzmq = in->format == SS_PROTO_FMT_ADZMQ;
    if (n_parts < 2) {
        fail(err, SS_PR_MISSING_PART,
             adzmq ? "missing array part (an ADZMQ message has a header part and an array part)"
                   : "missing pixel part (a frame has a header part, a pixel part and an optional "
                     "mask part)");
        return SS_ERR_FORMAT;
    }
    if (adzmq && n_parts > 2) {
        fail(err, SS_PR_TOO_MANY_PARTS, "too many parts: %d (an ADZMQ message has 2: header, array)",
             n_parts);
        return SS_ERR_SIZE;
    }
    if (n_parts > SS_PROTO_FRAME_MAX_PARTS) {
        fail(err, SS_PR_TOO_MANY_PARTS,
             "too many parts: %d (a frame has at most 3: header, pixels, mask)", n_parts);
        return SS_ERR_SIZE;
    }
    size_t want = ss_proto_input_data_bytes(in);
    if (data_len != want) {
        fail(err, SS_PR_DATA_SIZE, "pixel part is %zu bytes; the header says %d x %d %s = %zu bytes",
             data_len, in->width, in->height, ss_dtype_name(in->dtype), want);
        return SS_ERR_SIZE;
    }
    size_t npix = (size_t)in->width * (size_t)in->height;
    if (n_parts == 3 && mask_len != npix) {
        fail(err, SS_PR_MASK_SIZE, "mask part is %zu bytes; the header says %d x %d = %zu bytes",
             mask_len, in->width, in->height, npix);
        return SS_ERR_SIZE;
    }
    return SS_OK;
}

ss_err_t ss_proto_check_mask(const uint8_t *mask, int width, int height, ss_proto_error_t *err)
{
    size_t n = (size_t)width * (size_t)height;
    /* branch-free scan first (vectorises); locate only on failure */
    uint8_t any = 0;
    for (size_t i = 0; i < n; i++)
        any |= mask[i] & 0xFE;
    if (!any) {
        ok_error(err);
        return SS_OK;
    }
    size_t i = 0;
    while (i < n && mask[i] <= 1)
        i++;
    fail(err, SS_PR_BAD_VALUE, "mask part has value %u at pixel (%zu, %zu) (expected 0 or 1)",
         mask[i], i % (size_t)width, i / (size_t)width);
    return SS_ERR_FORMAT;
}

ss_err_t ss_proto_frame_prepare(const ss_proto_input_t *in, ss_frame_t *f, ss_proto_error_t *err)
{
    ok_error(err);
    if (in->type != SS_MSG_FRAME) {
        fail(err, SS_PR_UNKNOWN_TYPE, "not a frame message");
        return SS_ERR_INVALID;
    }
    size_t bytes = ss_proto_input_data_bytes(in);
    if (bytes > f->capacity) {
        fail(err, SS_PR_NO_BUFFER, "frame of %zu bytes does not fit the frame buffer (%zu bytes)",
             bytes, f->capacity);
        return SS_ERR_SIZE;
    }
    /* keep what the receiver set: where the frame came from, and when */
    char source[SS_PATH_MAX];
    memcpy(source, f->meta.source, sizeof source);
    double recv = f->meta.recv_mono;
    f->meta = in->meta;
    memcpy(f->meta.source, source, sizeof source);
    f->meta.recv_mono = recv;
    f->width = in->width;
    f->height = in->height;
    f->dtype = in->dtype;
    f->valid = NULL;
    return SS_OK;
}

ss_err_t ss_proto_decode_input(const ss_proto_part_t *parts, int n_parts,
                               const ss_proto_limits_t *lim, ss_proto_input_t *in, ss_frame_t *f,
                               ss_proto_error_t *err)
{
    if (n_parts < 1) {
        in->type = SS_MSG_NONE;
        fail(err, SS_PR_MISSING_PART, "empty message (no header part)");
        return SS_ERR_FORMAT;
    }
    ss_err_t e = ss_proto_parse_input(parts[0].data, parts[0].len, lim, in, err);
    if (e != SS_OK)
        return e;
    e = ss_proto_check_parts(in, n_parts, n_parts > 1 ? parts[1].len : 0,
                             n_parts > 2 ? parts[2].len : 0, err);
    if (e != SS_OK || in->type != SS_MSG_FRAME)
        return e;
    if (!f) {
        fail(err, SS_PR_NO_BUFFER, "no frame to decode into");
        return SS_ERR_INVALID;
    }
    uint8_t *mask = NULL;
    if (n_parts == 3) {
        mask = ss_frame_mask_buffer(f);
        if (!mask) {
            fail(err, SS_PR_NO_BUFFER, "no mask buffer for this frame (not from a pool)");
            return SS_ERR_INVALID;
        }
        e = ss_proto_check_mask(parts[2].data, in->width, in->height, err);
        if (e != SS_OK)
            return e;
    }
    e = ss_proto_frame_prepare(in, f, err);
    if (e != SS_OK)
        return e;
    memcpy(f->pixels, parts[1].data, parts[1].len);
    if (mask) {
        memcpy(mask, parts[2].data, parts[2].len);
        f->valid = mask;
    }
    return SS_OK;
}

int ss_proto_encode_frame_header(const ss_frame_t *f, char *buf, size_t n)
{
    const ss_frame_meta_t *m = &f->meta;
    if (!isfinite(m->mjd_obs) || f->width < 1 || f->height < 1 || ss_dtype_size(f->dtype) == 0)
        return -1;
    jw_t w;
    jw_init(&w, buf, n);
    jw_open(&w, NULL, '{');
    jw_int(&w, "protocol", SS_PROTO_VERSION);
    jw_str(&w, "type", "frame");
    if (m->feed[0])
        jw_str(&w, "feed", m->feed);
    if (m->series[0])
        jw_str(&w, "series", m->series);
    jw_u64(&w, "seq", m->seq);
    jw_time(&w, "time", "mjd", m->mjd_obs);
    jw_num(&w, "exposure", m->exposure);
    jw_int(&w, "width", f->width);
    jw_int(&w, "height", f->height);
    jw_str(&w, "dtype", ss_dtype_name(f->dtype));
    jw_wcs(&w, m, 0, 0);
    if (m->meta_json[0])
        jw_raw(&w, "meta", m->meta_json);
    jw_close(&w, '}');
    return jw_done(&w);
}

int ss_proto_encode_series(ss_msg_type_t type, const char *series, const char *feed, double mjd,
                           int64_t frames, const char *meta_json, char *buf, size_t n)
{
    if ((type != SS_MSG_SERIES_START && type != SS_MSG_SERIES_END) || !series || !series[0])
        return -1;
    jw_t w;
    jw_init(&w, buf, n);
    jw_open(&w, NULL, '{');
    jw_int(&w, "protocol", SS_PROTO_VERSION);
    jw_str(&w, "type", ss_msg_type_name(type));
    jw_str(&w, "series", series);
    if (feed && feed[0])
        jw_str(&w, "feed", feed);
    if (isfinite(mjd))
        jw_time(&w, "time", "mjd", mjd);
    if (frames >= 0)
        jw_int(&w, "frames", frames);
    if (meta_json && meta_json[0])
        jw_raw(&w, "meta", meta_json);
    jw_close(&w, '}');
    return jw_done(&w);
}

/* ---- topics ------------------------------------------------------------- */

#define TOPIC_RESIDUAL "residual."
#define TOPIC_DETECTIONS "detections."
#define TOPIC_TRACKS "tracks."
#define TOPIC_STAMPS "stamps."
#define TOPIC_SHOWN_MAX 80      /* bytes of a wrong topic an error text shows, NUL included */
#define TOPIC_STATUS "status"

/* The topic prefix of a per-feed output message type; NULL for others. */
static const char *topic_prefix(ss_msg_type_t type)
{
    switch (type) {
    case SS_MSG_RESIDUAL: return TOPIC_RESIDUAL;
    case SS_MSG_DETECTIONS: return TOPIC_DETECTIONS;
    case SS_MSG_TRACKS: return TOPIC_TRACKS;
    case SS_MSG_STAMPS: return TOPIC_STAMPS;
    default: return NULL;
    }
}

int ss_proto_topic(ss_msg_type_t type, const char *feed, char *buf, size_t n)
{
    int len;
    const char *prefix = topic_prefix(type);
    if (type == SS_MSG_STATUS)
        len = snprintf(buf, n, "%s", TOPIC_STATUS);
    else if (prefix && feed && feed[0])
        len = snprintf(buf, n, "%s%s", prefix, feed);
    else
        return -1;
    return len < 0 || (size_t)len >= n ? -1 : len;
}

ss_msg_type_t ss_proto_topic_parse(const void *topic, size_t len, char *feed)
{
    const char *t = topic;
    static const struct { const char *prefix; ss_msg_type_t type; } kinds[] = {
        { TOPIC_RESIDUAL, SS_MSG_RESIDUAL }, { TOPIC_DETECTIONS, SS_MSG_DETECTIONS },
        { TOPIC_TRACKS, SS_MSG_TRACKS }, { TOPIC_STAMPS, SS_MSG_STAMPS },
    };
    if (feed)
        feed[0] = '\0';
    if (len == strlen(TOPIC_STATUS) && memcmp(t, TOPIC_STATUS, len) == 0)
        return SS_MSG_STATUS;
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        size_t p = strlen(kinds[k].prefix);
        if (len > p && len - p < SS_NAME_MAX && memcmp(t, kinds[k].prefix, p) == 0) {
            if (memchr(t + p, '\0', len - p))
                return SS_MSG_NONE;
            if (feed) {
                memcpy(feed, t + p, len - p);
                feed[len - p] = '\0';
            }
            return kinds[k].type;
        }
    }
    return SS_MSG_NONE;
}

/* ---- residual, detections and tracks ------------------------------------ */

static void jw_shift(jw_t *w, const ss_shift_t *s)
{
    if (!s->ok) {
        jw_null(w, "shift");
        return;
    }
    jw_open(w, "shift", '{');
    jw_num(w, "x", s->sx);
    jw_num(w, "y", s->sy);
    jw_num(w, "err_x", s->err_x);
    jw_num(w, "err_y", s->err_y);
    jw_num(w, "cov_xy", s->cov_xy);
    jw_close(w, '}');
}

int ss_proto_add_topic_seq(char *json, int len, size_t cap, uint64_t seq)
{
    if (len < 2 || json[0] != '{' || json[len - 1] != '}')
        return -1;
    char tail[48];
    const int t = snprintf(tail, sizeof tail, "%s\"topic_seq\":%llu}", len > 2 ? "," : "",
                           (unsigned long long)seq);
    if ((size_t)(len - 1 + t) + 1 > cap)
        return -1;
    memcpy(json + len - 1, tail, (size_t)t + 1);
    return len - 1 + t;
}

/* The optional "topic_seq" of a received message (0 and *has = 0 when
 * absent). */
static int get_topic_seq(dctx_t *c, uint64_t *seq, int *has)
{
    *seq = 0;
    const int r = get_u64(c, "topic_seq", 0, seq);
    *has = r > 0;
    return r < 0 ? -1 : 0;
}

void ss_proto_series_seq(const ss_frame_meta_t *m, char *buf, size_t n)
{
    snprintf(buf, n, "%s#%llu", m->series, (unsigned long long)m->seq);
}

const char *ss_proto_input(const ss_frame_meta_t *m, char *buf, size_t n)
{
    if (m->input[0])
        return m->input;
    ss_proto_series_seq(m, buf, n);
    return buf;
}

static void jw_input(jw_t *w, const ss_frame_meta_t *m)
{
    char buf[SS_PROTO_INPUT_MAX];
    jw_str(w, "input", ss_proto_input(m, buf, sizeof buf));
}

/* Members the result messages (residual, detections, tracks) share, in wire
 * order. */
static void jw_result_common(jw_t *w, const ss_result_t *res, ss_msg_type_t type)
{
    const ss_frame_meta_t *m = &res->meta;
    jw_int(w, "protocol", SS_PROTO_VERSION);
    jw_str(w, "type", ss_msg_type_name(type));
    jw_str(w, "feed", m->feed);
    jw_str(w, "series", m->series);
    jw_u64(w, "seq", m->seq);
    jw_input(w, m);
    jw_time(w, "time", "mjd", m->mjd_obs);
    jw_time(w, "time_mid", "mjd_mid", ss_frame_mid_mjd(m));
    jw_num(w, "exposure", m->exposure);
    jw_int(w, "width", res->width);
    jw_int(w, "height", res->height);
    jw_str(w, "status", ss_status_name(res->status));
    jw_str(w, "reason", res->reason);
    jw_shift(w, &res->shift);
    jw_f32(w, "sigma", res->sigma);
    jw_int(w, "history_len", res->history_len);
    jw_bool(w, "rereferenced", res->rereferenced);
    jw_bool(w, "history_reset", res->history_reset);
}

int ss_proto_encode_residual(const ss_result_t *res, char *buf, size_t n)
{
    if (!res->has_residual || res->width < 1 || res->height < 1 || !res->meta.feed[0])
        return -1;
    jw_t w;
    jw_init(&w, buf, n);
    jw_open(&w, NULL, '{');
    jw_result_common(&w, res, SS_MSG_RESIDUAL);
    jw_str(&w, "dtype", "f32");
    if (res->origin_x || res->origin_y) {
        /* a region of interest: where the residual's (0,0) is in the input */
        jw_open(&w, "origin", '[');
        jw_int(&w, NULL, res->origin_x);
        jw_int(&w, NULL, res->origin_y);
        jw_close(&w, ']');
    }
    jw_open(&w, "weights", '[');
    for (int k = 0; k < res->n_weights && k < SS_MAX_HISTORY; k++)
        jw_num(&w, NULL, res->weights[k]);
    jw_close(&w, ']');
    jw_wcs(&w, &res->meta, res->origin_x, res->origin_y);
    if (res->meta.meta_json[0])
        jw_raw(&w, "meta", res->meta.meta_json);
    jw_close(&w, '}');
    return jw_done(&w);
}

static const char *const form_names[SS_FORM__COUNT] = {
    "residual", "residual16", "residual_every", "residual16_every",
};

const char *ss_proto_form_name(ss_residual_form_t form)
{
    return (unsigned)form < SS_FORM__COUNT ? form_names[form] : "";
}

int ss_proto_form_topic(ss_residual_form_t form, const char *feed, char *buf, size_t n)
{
    if ((unsigned)form >= SS_FORM__COUNT || !feed || !feed[0])
        return -1;
    int len = snprintf(buf, n, "%s.%s", form_names[form], feed);
    return len < 0 || (size_t)len >= n ? -1 : len;
}

int ss_proto_form_topic_parse(const void *topic, size_t len, char *feed)
{
    const char *t = topic;
    if (feed)
        feed[0] = '\0';
    for (int k = 0; k < SS_FORM__COUNT; k++) {
        const size_t p = strlen(form_names[k]);
        if (len > p + 1 && len - p - 1 < SS_NAME_MAX && memcmp(t, form_names[k], p) == 0 &&
            t[p] == '.' && !memchr(t + p + 1, '\0', len - p - 1)) {
            if (feed) {
                memcpy(feed, t + p + 1, len - p - 1);
                feed[len - p - 1] = '\0';
            }
            return k;
        }
    }
    return -1;
}

int ss_proto_encode_residual_form(const ss_result_t *res, ss_residual_form_t form, int every,
                                  char *buf, size_t n)
{
    const int f16 = form == SS_FORM_F16 || form == SS_FORM_F16_EVERY;
    const int has = f16 ? res->has_residual16 : res->has_residual;
    if ((unsigned)form >= SS_FORM__COUNT || !has || res->width < 1 || res->height < 1 ||
        !res->meta.feed[0])
        return -1;
    jw_t w;
    jw_init(&w, buf, n);
    jw_open(&w, NULL, '{');
    jw_result_common(&w, res, SS_MSG_RESIDUAL);
    jw_str(&w, "dtype", f16 ? "f16" : "f32");
    if (form == SS_FORM_F32_EVERY || form == SS_FORM_F16_EVERY)
        jw_int(&w, "every", every);
    if (res->origin_x || res->origin_y) {
        jw_open(&w, "origin", '[');
        jw_int(&w, NULL, res->origin_x);
        jw_int(&w, NULL, res->origin_y);
        jw_close(&w, ']');
    }
    jw_open(&w, "weights", '[');
    for (int k = 0; k < res->n_weights && k < SS_MAX_HISTORY; k++)
        jw_num(&w, NULL, res->weights[k]);
    jw_close(&w, ']');
    jw_wcs(&w, &res->meta, res->origin_x, res->origin_y);
    if (res->meta.meta_json[0])
        jw_raw(&w, "meta", res->meta.meta_json);
    jw_close(&w, '}');
    return jw_done(&w);
}

size_t ss_proto_residual_mask(const float *pixels, size_t n, uint8_t *mask)
{
    size_t valid = 0;
    for (size_t i = 0; i < n; i++) {
        mask[i] = (uint8_t)(isfinite(pixels[i]) ? 1 : 0);
        valid += mask[i];
    }
    return valid;
}

/* "mag" and "mag_err" (photometry.h), together and only when known. */
static void jw_mag(jw_t *w, double mag, double err)
{
    if (isfinite(mag) && isfinite(err) && err >= 0.0) {
        jw_num(w, "mag", mag);
        jw_num(w, "mag_err", err);
    }
}

static void jw_detection_members(jw_t *w, const ss_detection_t *d)
{
    jw_num(w, "x", d->x);
    jw_num(w, "y", d->y);
    jw_num(w, "flux", d->flux);
    jw_num(w, "flux_err", d->flux_err);
    jw_num(w, "peak_snr", d->peak_snr);
    jw_int(w, "peak_x", d->peak_x);
    jw_int(w, "peak_y", d->peak_y);
    jw_int(w, "area", d->area);
    jw_open(w, "bbox", '[');
    jw_int(w, NULL, d->bbox_x0);
    jw_int(w, NULL, d->bbox_y0);
    jw_int(w, NULL, d->bbox_x1);
    jw_int(w, NULL, d->bbox_y1);
    jw_close(w, ']');
    jw_num(w, "a", d->a);
    jw_num(w, "b", d->b);
    jw_num(w, "theta", d->theta);
    jw_str(w, "kind", ss_kind_name(d->kind));
    jw_int(w, "sign", d->sign);
    if (d->kind == SS_KIND_STREAK) {
        jw_open(w, "ends", '[');
        jw_open(w, NULL, '[');
        jw_num(w, NULL, d->x0);
        jw_num(w, NULL, d->y0);
        jw_close(w, ']');
        jw_open(w, NULL, '[');
        jw_num(w, NULL, d->x1);
        jw_num(w, NULL, d->y1);
        jw_close(w, ']');
        jw_close(w, ']');
    }
    jw_num(w, "peak_fraction", d->peak_fraction);
    jw_open(w, "flags", '[');
    for (int i = 0; i < N_KNOWN_FLAGS; i++)
        if (d->flags & known_flags[i])
            jw_str(w, NULL, ss_proto_flag_name(known_flags[i]));
    jw_close(w, ']');
    jw_int(w, "label", d->label);
    jw_u64(w, "track", d->track);
    if (d->has_radec) {
        jw_num(w, "ra", d->ra);
        jw_num(w, "dec", d->dec);
    }
    jw_mag(w, d->mag, d->mag_err);
}

static void jw_detection(jw_t *w, const ss_detection_t *d)
{
    jw_open(w, NULL, '{');
    jw_detection_members(w, d);
    jw_close(w, '}');
}

int ss_proto_encode_detection_line(const ss_result_t *res, int index, char *buf, size_t n)
{
    if (index < 0 || index >= res->dets.count)
        return -1;
    const ss_frame_meta_t *m = &res->meta;
    jw_t w;
    jw_init(&w, buf, n);
    jw_open(&w, NULL, '{');
    jw_str(&w, "feed", m->feed);
    jw_str(&w, "series", m->series);
    jw_u64(&w, "seq", m->seq);
    jw_input(&w, m);
    jw_time(&w, "time", "mjd", m->mjd_obs);
    jw_time(&w, "time_mid", "mjd_mid", ss_frame_mid_mjd(m));
    jw_str(&w, "status", ss_status_name(res->status));
    jw_f32(&w, "sigma", res->sigma);
    jw_detection_members(&w, &res->dets.items[index]);
    jw_close(&w, '}');
    return jw_done(&w);
}

/* Generous per-detection bound: ~25 members of at most ~30 bytes each. */
#define DET_JSON_BOUND 1024
#define RESULT_JSON_BOUND 2048
#define DETECTIONS_BODY_MAX ((size_t)64 << 20) /* 64 MiB: ~250 000 detections */

size_t ss_proto_detections_bound(const ss_result_t *res)
{
    return RESULT_JSON_BOUND + strlen(res->reason) * 6 + strlen(res->meta.meta_json) +
           (size_t)(res->dets.count > 0 ? res->dets.count : 0) * DET_JSON_BOUND;
}

int ss_proto_encode_detections(const ss_result_t *res, char *buf, size_t n)
{
    if (!res->meta.feed[0])
        return -1;
    int count = res->dets.count > 0 ? res->dets.count : 0;
    jw_t w;
    jw_init(&w, buf, n);
    jw_open(&w, NULL, '{');
    jw_result_common(&w, res, SS_MSG_DETECTIONS);
    jw_int(&w, "count", count);
    jw_int(&w, "truncated", res->dets.truncated);
    jw_open(&w, "detections", '[');
    for (int i = 0; i < count; i++)
        jw_detection(&w, &res->dets.items[i]);
    jw_close(&w, ']');
    if (res->meta.meta_json[0])
        jw_raw(&w, "meta", res->meta.meta_json);
    jw_close(&w, '}');
    return jw_done(&w);
}

/* A track's "first" or "last": its frame's seq and mid-exposure time. */
static void jw_track_end(jw_t *w, const char *key, uint64_t seq, double mjd)
{
    jw_open(w, key, '{');
    jw_u64(w, "seq", seq);
    jw_time(w, "time", "mjd", mjd);
    jw_close(w, '}');
}

static void jw_track(jw_t *w, const ss_track_t *t)
{
    jw_open(w, NULL, '{');
    jw_u64(w, "id", t->id);
    jw_str(w, "kind", ss_kind_name(t->kind));
    jw_str(w, "state", ss_track_state_name(t->state));
    jw_int(w, "n", t->n);
    jw_int(w, "missed", t->missed);
    jw_track_end(w, "first", t->seq_first, t->mjd_first);
    jw_track_end(w, "last", t->seq_last, t->mjd_last);
    jw_open(w, "position", '{');
    jw_num(w, "x", t->x);
    jw_num(w, "y", t->y);
    jw_close(w, '}');
    jw_open(w, "velocity", '{');
    jw_num(w, "x", t->vx);
    jw_num(w, "y", t->vy);
    jw_num(w, "err_x", t->vx_err);
    jw_num(w, "err_y", t->vy_err);
    jw_str(w, "unit", t->timed ? "px/s" : "px/frame");
    jw_close(w, '}');
    jw_num(w, "rms", t->rms);
    jw_num(w, "snr", t->snr);
    /* rate and pa go together, as numbers: a rate not computed is left out */
    if (t->has_rate && isfinite(t->rate) && isfinite(t->pa)) {
        jw_num(w, "rate", t->rate);
        jw_num(w, "pa", t->pa);
    }
    jw_mag(w, t->mag, t->mag_err);
    jw_open(w, "points", '[');
    const int np = SS_CLAMP(t->n_points, 0, SS_TRACK_POINTS);
    for (int i = 0; i < np; i++) {
        const ss_track_point_t *p = &t->points[i];
        jw_open(w, NULL, '{');
        jw_u64(w, "seq", p->seq);
        jw_num(w, "x", p->x);
        jw_num(w, "y", p->y);
        jw_num(w, "mjd", p->mjd);
        jw_close(w, '}');
    }
    jw_close(w, ']');
    jw_close(w, '}');
}

/* Generous per-track bound: ~20 members, and SS_TRACK_POINTS points of 4
 * members, each at most ~30 bytes. */
#define TRACK_JSON_BOUND (1024 + SS_TRACK_POINTS * 128)

size_t ss_proto_tracks_bound(const ss_result_t *res)
{
    return RESULT_JSON_BOUND + strlen(res->reason) * 6 + strlen(res->meta.meta_json) +
           (size_t)(res->tracks.count > 0 ? res->tracks.count : 0) * TRACK_JSON_BOUND;
}

int ss_proto_encode_tracks(const ss_result_t *res, char *buf, size_t n)
{
    if (!res->meta.feed[0])
        return -1;
    int count = res->tracks.count > 0 ? res->tracks.count : 0;
    jw_t w;
    jw_init(&w, buf, n);
    jw_open(&w, NULL, '{');
    jw_result_common(&w, res, SS_MSG_TRACKS);
    jw_int(&w, "count", count);
    jw_int(&w, "truncated", res->tracks.truncated);
    jw_open(&w, "tracks", '[');
    for (int i = 0; i < count; i++)
        jw_track(&w, &res->tracks.items[i]);
    jw_close(&w, ']');
    if (res->meta.meta_json[0])
        jw_raw(&w, "meta", res->meta.meta_json);
    jw_close(&w, '}');
    return jw_done(&w);
}

/* Room for one stamp object: 8 members of at most ~24 characters each. */
#define STAMP_JSON_MAX 256

size_t ss_proto_stamps_bound(const ss_result_t *res)
{
    return ss_proto_tracks_bound(res) + (size_t)res->stamps.count * STAMP_JSON_MAX;
}

int ss_proto_encode_stamps(const ss_result_t *res, char *buf, size_t n)
{
    if (!res->has_stamps || !res->meta.feed[0])
        return -1;
    jw_t w;
    jw_init(&w, buf, n);
    jw_open(&w, NULL, '{');
    jw_result_common(&w, res, SS_MSG_STAMPS);
    jw_str(&w, "dtype", "f32");
    if (res->origin_x || res->origin_y) {
        jw_open(&w, "origin", '[');
        jw_int(&w, NULL, res->origin_x);
        jw_int(&w, NULL, res->origin_y);
        jw_close(&w, ']');
    }
    jw_int(&w, "count", res->stamps.count);
    jw_int(&w, "truncated", res->stamps.truncated);
    jw_open(&w, "stamps", '[');
    for (int i = 0; i < res->stamps.count; i++) {
        const ss_stamp_t *s = &res->stamps.items[i];
        const ss_detection_t *d = s->det < res->dets.count ? &res->dets.items[s->det] : NULL;
        jw_open(&w, NULL, '{');
        jw_int(&w, "det", s->det);
        jw_str(&w, "kind", d ? ss_kind_name(d->kind) : "point");
        jw_num(&w, "x", d ? d->x : NAN);
        jw_num(&w, "y", d ? d->y : NAN);
        jw_int(&w, "x0", s->x0 + res->origin_x);
        jw_int(&w, "y0", s->y0 + res->origin_y);
        jw_int(&w, "w", s->w);
        jw_int(&w, "h", s->h);
        jw_close(&w, '}');
    }
    jw_close(&w, ']');
    if (res->meta.meta_json[0])
        jw_raw(&w, "meta", res->meta.meta_json);
    jw_close(&w, '}');
    return jw_done(&w);
}

static int get_shift(dctx_t *c, ss_shift_t *s)
{
    const cJSON *it = NULL;
    memset(s, 0, sizeof *s);
    s->sx = s->sy = s->err_x = s->err_y = s->cov_xy = NAN;
    int r = get(c, "shift", 1, &it);
    if (r <= 0)
        return r;
    if (cJSON_IsNull(it))
        return 1;
    if (!cJSON_IsObject(it))
        return wrong_type(c, "shift", "an object or null", it);
    dctx_t sc = { .obj = it, .err = c->err };
    set_prefix(&sc, c->prefix, "shift", -1);
    if (get_num(&sc, "x", 1, 1, &s->sx) < 0 || get_num(&sc, "y", 1, 1, &s->sy) < 0 ||
        get_num(&sc, "err_x", 1, 1, &s->err_x) < 0 || get_num(&sc, "err_y", 1, 1, &s->err_y) < 0 ||
        get_num(&sc, "cov_xy", 1, 1, &s->cov_xy) < 0)
        return -1;
    s->ok = 1;
    return 1;
}

/* The topic part of an output message, checked against the body's feed. */
static int check_topic(const ss_proto_part_t *topic, ss_msg_type_t want, const char *feed,
                       ss_proto_error_t *err)
{
    char tfeed[SS_NAME_MAX];
    char shown[TOPIC_SHOWN_MAX];
    size_t n = topic->len < sizeof shown - 1 ? topic->len : sizeof shown - 1;
    memcpy(shown, topic->data, n);
    shown[n] = '\0';
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)shown[i] < 0x20 || (unsigned char)shown[i] >= 0x7f)
            shown[i] = '?';
    ss_msg_type_t t = ss_proto_topic_parse(topic->data, topic->len, tfeed);
    if (t != want || (want != SS_MSG_STATUS && strcmp(tfeed, feed) != 0)) {
        char expect[SS_PROTO_TOPIC_MAX];
        if (ss_proto_topic(want, feed, expect, sizeof expect) < 0)
            ss_strlcpy(expect, "?", sizeof expect);
        return fail(err, SS_PR_BAD_TOPIC, "topic \"%s\" does not match the body (expected \"%s\")",
                    shown, expect);
    }
    return 0;
}

static int parts_count(int n_parts, int min, int max, const char *what, ss_proto_error_t *err)
{
    if (n_parts < min)
        return fail(err, SS_PR_MISSING_PART, "missing part: %d of %d (%s)", n_parts, min, what);
    if (n_parts > max)
        return fail(err, SS_PR_TOO_MANY_PARTS, "too many parts: %d (%s)", n_parts, what);
    return 0;
}

#define RESIDUAL_PARTS_TEXT "a residual message has a topic, a header, a pixel part and an optional mask part"
#define DETECTIONS_PARTS_TEXT "a detections message has a topic and a body"
#define TRACKS_PARTS_TEXT "a tracks message has a topic and a body"
#define STATUS_PARTS_TEXT "a status message has a topic and a body"

/* The shared members of residual, detections and tracks messages. */
static int get_result_common(dctx_t *c, const ss_proto_limits_t *lim, ss_msg_type_t type,
                             ss_result_t *res)
{
    ss_frame_meta_t *m = &res->meta;
    ss_frame_meta_clear(m);
    memset(&res->coarse, 0, sizeof res->coarse);
    res->reason[0] = '\0';
    res->rereferenced = res->history_reset = 0;
    res->history_len = 0;
    res->n_weights = 0;
    res->sigma = NAN;
    res->status = SS_STATUS_OK;
    if (check_version(c) < 0 || check_type(c, type) < 0)
        return -1;
    if (get_str(c, "feed", 1, CHARS_NAME, m->feed, sizeof m->feed) < 0)
        return -1;
    if (!m->feed[0])
        return fail(c->err, SS_PR_BAD_VALUE, "field \"feed\" is empty");
    if (get_str(c, "series", 0, CHARS_PRINTABLE, m->series, sizeof m->series) < 0)
        return -1;
    if (get_u64(c, "seq", 1, &m->seq) < 0)
        return -1;
    if (get_str(c, "input", 0, CHARS_ANY, m->input, sizeof m->input) < 0 ||
        get_topic_seq(c, &res->topic_seq, &res->has_topic_seq) < 0)
        return -1;
    if (get_time(c, 1, 1, &m->mjd_obs) < 0)
        return -1;
    int r = get_num(c, "exposure", 0, 0, &m->exposure);
    if (r < 0)
        return -1;
    if (r > 0 && m->exposure < 0)
        return fail(c->err, SS_PR_BAD_VALUE,
                    "field \"exposure\" is out of range: %g (expected a number >= 0)", m->exposure);
    /* detections of a frame that failed before its size was known carry 0 */
    double wmin = type == SS_MSG_RESIDUAL ? 1 : 0;
    int64_t v = 0;
    if (get_int(c, "width", 1, -SS_PROTO_MAX_INT, SS_PROTO_MAX_INT, "an integer", &v) < 0)
        return -1;
    if (v < wmin || v > lim->max_width)
        return fail(c->err, SS_PR_DIMENSIONS, "width %lld is out of range (%g to %d)",
                    (long long)v, wmin, lim->max_width);
    res->width = (int)v;
    if (get_int(c, "height", 1, -SS_PROTO_MAX_INT, SS_PROTO_MAX_INT, "an integer", &v) < 0)
        return -1;
    if (v < wmin || v > lim->max_height)
        return fail(c->err, SS_PR_DIMENSIONS, "height %lld is out of range (%g to %d)",
                    (long long)v, wmin, lim->max_height);
    res->height = (int)v;
    char st[SS_NAME_MAX];
    if (get_str(c, "status", 1, CHARS_ANY, st, sizeof st) < 0)
        return -1;
    if (status_parse(st, &res->status) != 0)
        return fail(c->err, SS_PR_BAD_VALUE,
                    "field \"status\" is \"%s\" (expected ok, reference, warmup, regfail or error)",
                    st);
    if (get_str(c, "reason", 0, CHARS_ANY, res->reason, sizeof res->reason) < 0)
        return -1;
    if (get_shift(c, &res->shift) < 0)
        return -1;
    double sigma = NAN;
    if (get_num(c, "sigma", 1, 1, &sigma) < 0)
        return -1;
    res->sigma = (float)sigma;
    if (get_int32(c, "history_len", 1, 0, SS_MAX_HISTORY, "0 to 256", &res->history_len) < 0)
        return -1;
    if (get_bool(c, "rereferenced", 0, &res->rereferenced) < 0 ||
        get_bool(c, "history_reset", 0, &res->history_reset) < 0)
        return -1;
    if (get_meta(c, lim->max_meta_bytes, m->meta_json) < 0)
        return -1;
    return 0;
}

static int get_weights(dctx_t *c, ss_result_t *res)
{
    const cJSON *a = NULL;
    int r = get_typed(c, "weights", 1, 0, &a);
    if (r <= 0)
        return r;
    int n = cJSON_GetArraySize(a);
    if (n > SS_MAX_HISTORY)
        return fail(c->err, SS_PR_BAD_VALUE, "field \"weights\" has %d entries (maximum %d)", n,
                    SS_MAX_HISTORY);
    int k = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, a)
    {
        if (cJSON_IsNull(it)) {
            res->weights[k++] = NAN;
            continue;
        }
        if (!cJSON_IsNumber(it))
            return fail(c->err, SS_PR_WRONG_TYPE,
                        "field \"weights[%d]\" has the wrong type: expected a number, got %s", k,
                        json_kind(it));
        res->weights[k++] = it->valuedouble;
    }
    res->n_weights = n;
    return 1;
}

/* Optional "origin": [x, y], two non-negative integers (0, 0 when absent). */
#define SS_PROTO_MAX_ORIGIN 1073741824.0    /* 2^30, like the frame-size caps */
static int get_origin(dctx_t *c, ss_result_t *res)
{
    res->origin_x = res->origin_y = 0;
    const cJSON *a = NULL;
    int r = get_typed(c, "origin", 0, 0, &a);
    if (r <= 0)
        return r;
    const cJSON *x = cJSON_GetArrayItem(a, 0), *y = cJSON_GetArrayItem(a, 1);
    if (cJSON_GetArraySize(a) != 2 || !cJSON_IsNumber(x) || !cJSON_IsNumber(y) ||
        x->valuedouble < 0 || y->valuedouble < 0 || x->valuedouble > SS_PROTO_MAX_ORIGIN ||
        y->valuedouble > SS_PROTO_MAX_ORIGIN || x->valuedouble != floor(x->valuedouble) ||
        y->valuedouble != floor(y->valuedouble))
        return fail(c->err, SS_PR_BAD_VALUE,
                    "field \"origin\" must be [x, y], two integers >= 0");
    res->origin_x = (int)x->valuedouble;
    res->origin_y = (int)y->valuedouble;
    return 1;
}

ss_err_t ss_proto_decode_residual(const ss_proto_part_t *parts, int n_parts,
                                  const ss_proto_limits_t *lim, ss_result_t *res, uint8_t *mask,
                                  int *has_mask, ss_proto_error_t *err)
{
    ok_error(err);
    res->has_residual = 0;
    if (has_mask)
        *has_mask = 0;
    if (parts_count(n_parts, 3, SS_PROTO_RESIDUAL_MAX_PARTS, RESIDUAL_PARTS_TEXT, err) < 0)
        return reason_err(err->reason);
    cJSON *root = parse_object(parts[1].data, parts[1].len, lim->max_header_bytes, "header", err);
    if (!root)
        return reason_err(err->reason);
    dctx_t c = { .obj = root, .err = err };
    int rc = -1;
    char dt[SS_NAME_MAX];
    ss_dtype_t dtype;
    if (get_result_common(&c, lim, SS_MSG_RESIDUAL, res) < 0)
        goto out;
    if (get_str(&c, "dtype", 1, CHARS_ANY, dt, sizeof dt) < 0)
        goto out;
    if (dtype_parse(dt, &dtype) != 0 || dtype != SS_DT_F32) {
        fail(err, SS_PR_UNKNOWN_DTYPE, "unknown dtype \"%s\" (a residual is f32)", dt);
        goto out;
    }
    if (get_origin(&c, res) < 0 || get_weights(&c, res) < 0 || get_wcs(&c, &res->meta) < 0)
        goto out;
    if (check_topic(&parts[0], SS_MSG_RESIDUAL, res->meta.feed, err) < 0)
        goto out;
    size_t npix = (size_t)res->width * (size_t)res->height;
    if (parts[2].len != npix * sizeof(float)) {
        fail(err, SS_PR_DATA_SIZE, "pixel part is %zu bytes; the header says %d x %d f32 = %zu bytes",
             parts[2].len, res->width, res->height, npix * sizeof(float));
        goto out;
    }
    if (n_parts == 4 && parts[3].len != npix) {
        fail(err, SS_PR_MASK_SIZE, "mask part is %zu bytes; the header says %d x %d = %zu bytes",
             parts[3].len, res->width, res->height, npix);
        goto out;
    }
    if (n_parts == 4 && ss_proto_check_mask(parts[3].data, res->width, res->height, err) != SS_OK)
        goto out;
    if (npix > res->residual_capacity || !res->residual) {
        fail(err, SS_PR_NO_BUFFER, "residual of %zu pixels does not fit the buffer (%zu pixels)",
             npix, res->residual_capacity);
        goto out;
    }
    memcpy(res->residual, parts[2].data, parts[2].len);
    res->has_residual = 1;
    if (n_parts == 4) {
        if (mask)
            memcpy(mask, parts[3].data, npix);
        if (has_mask)
            *has_mask = 1;
    }
    rc = 0;
out:
    cJSON_Delete(root);
    return rc == 0 ? SS_OK : reason_err(err->reason);
}

/* "mag" and "mag_err" (PROTOCOL.md §6): optional, together, finite
 * numbers, the error not negative; absent: both NAN. 0, or -1. */
static int get_mag(dctx_t *c, double *mag, double *err)
{
    *mag = *err = NAN;
    const int rm = get_num(c, "mag", 0, 0, mag);
    if (rm < 0)
        return -1;
    const int re = get_num(c, "mag_err", 0, 0, err);
    if (re < 0)
        return -1;
    if (rm != re)
        return fail(c->err, SS_PR_MISSING_FIELD,
                    "missing field \"%s%s\" (mag and mag_err go together)", c->prefix,
                    rm ? "mag_err" : "mag");
    if (re > 0 && *err < 0.0)
        return fail(c->err, SS_PR_BAD_VALUE,
                    "field \"%smag_err\" is out of range: %g (expected a number >= 0)", c->prefix,
                    *err);
    return 0;
}

static int get_detection(dctx_t *c, ss_detection_t *d)
{
    memset(d, 0, sizeof *d);
    char kind[SS_NAME_MAX];
    const cJSON *a = NULL;
    if (get_num(c, "x", 1, 0, &d->x) < 0 || get_num(c, "y", 1, 0, &d->y) < 0 ||
        get_num(c, "flux", 1, 1, &d->flux) < 0 || get_num(c, "flux_err", 1, 1, &d->flux_err) < 0 ||
        get_num(c, "peak_snr", 1, 1, &d->peak_snr) < 0 ||
        get_int32(c, "peak_x", 1, -2147483648.0, 2147483647.0, "a 32-bit integer", &d->peak_x) < 0 ||
        get_int32(c, "peak_y", 1, -2147483648.0, 2147483647.0, "a 32-bit integer", &d->peak_y) < 0 ||
        get_int32(c, "area", 1, 0, 2147483647.0, "0 to 2^31-1", &d->area) < 0)
        return -1;
    if (get_typed(c, "bbox", 1, 0, &a) < 0)
        return -1;
    int bb[4], k = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, a)
    {
        if (k >= 4 || !cJSON_IsNumber(it) || floor(it->valuedouble) != it->valuedouble ||
            fabs(it->valuedouble) > 2147483647.0)
            return fail(c->err, SS_PR_WRONG_TYPE,
                        "field \"%sbbox\" has the wrong type: expected 4 integers [x0, y0, x1, y1]",
                        c->prefix);
        bb[k++] = (int)it->valuedouble;
    }
    if (k != 4)
        return fail(c->err, SS_PR_WRONG_TYPE,
                    "field \"%sbbox\" has the wrong type: expected 4 integers [x0, y0, x1, y1]",
                    c->prefix);
    d->bbox_x0 = bb[0];
    d->bbox_y0 = bb[1];
    d->bbox_x1 = bb[2];
    d->bbox_y1 = bb[3];
    if (get_num(c, "a", 1, 1, &d->a) < 0 || get_num(c, "b", 1, 1, &d->b) < 0 ||
        get_num(c, "theta", 1, 1, &d->theta) < 0)
        return -1;
    if (get_str(c, "kind", 1, CHARS_ANY, kind, sizeof kind) < 0)
        return -1;
    if (ss_kind_parse(kind, &d->kind) != 0)
        return fail(c->err, SS_PR_BAD_VALUE,
                    "field \"%skind\" is \"%s\" (expected point, streak or cosmic)", c->prefix, kind);
    if (get_int32(c, "sign", 1, -1, 1, "-1 or 1", &d->sign) < 0)
        return -1;
    if (d->sign == 0)
        return fail(c->err, SS_PR_BAD_VALUE, "field \"%ssign\" is out of range: 0 (expected -1 or 1)",
                    c->prefix);
    /* ends: streaks carry them; for other kinds both ends are the centroid */
    d->x0 = d->x1 = d->x;
    d->y0 = d->y1 = d->y;
    int r = get_typed(c, "ends", 0, 0, &a);
    if (r < 0)
        return -1;
    if (r > 0) {
        double e[4];
        int ne = 0, good = cJSON_GetArraySize(a) == 2;
        const cJSON *pt;
        cJSON_ArrayForEach(pt, a)
        {
            if (!good || !cJSON_IsArray(pt) || cJSON_GetArraySize(pt) != 2) {
                good = 0;
                break;
            }
            const cJSON *v;
            cJSON_ArrayForEach(v, pt)
            {
                if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
                    good = 0;
                else
                    e[ne++] = v->valuedouble;
            }
        }
        if (!good || ne != 4)
            return fail(c->err, SS_PR_WRONG_TYPE,
                        "field \"%sends\" has the wrong type: expected [[x0, y0], [x1, y1]]",
                        c->prefix);
        d->x0 = e[0];
        d->y0 = e[1];
        d->x1 = e[2];
        d->y1 = e[3];
    }
    d->peak_fraction = NAN;
    if (get_num(c, "peak_fraction", 0, 1, &d->peak_fraction) < 0)
        return -1;
    r = get_typed(c, "flags", 0, 0, &a);
    if (r < 0)
        return -1;
    if (r > 0) {
        cJSON_ArrayForEach(it, a)
        {
            if (!cJSON_IsString(it))
                return fail(c->err, SS_PR_WRONG_TYPE,
                            "field \"%sflags\" has the wrong type: expected an array of strings",
                            c->prefix);
            /* names this version does not know are ignored (compatibility) */
            for (int i = 0; i < N_KNOWN_FLAGS; i++)
                if (strcmp(it->valuestring, ss_proto_flag_name(known_flags[i])) == 0)
                    d->flags |= known_flags[i];
        }
    }
    if (get_int32(c, "label", 0, -2147483647.0, 2147483647.0, "a 32-bit integer", &d->label) < 0 ||
        get_u64(c, "track", 0, &d->track) < 0)
        return -1;
    int rra = get_num(c, "ra", 0, 0, &d->ra);
    if (rra < 0)
        return -1;
    int rdec = get_num(c, "dec", 0, 0, &d->dec);
    if (rdec < 0)
        return -1;
    if (rra != rdec)
        return fail(c->err, SS_PR_MISSING_FIELD, "missing field \"%s%s\" (ra and dec go together)",
                    c->prefix, rra ? "dec" : "ra");
    d->has_radec = rra > 0;
    return get_mag(c, &d->mag, &d->mag_err);
}

/* A message whose body is a result's header members, then "count",
 * "truncated" and an array of entries: detections or tracks. */
typedef struct list_msg {
    ss_msg_type_t type;
    const char *name;               /* the array member, "detections" or "tracks" */
    const char *parts_text;         /* for the part-count errors */
    /* decode the entry object c into the next slot of res's list, or
     * count it as truncated when the list is full: 0, or -1 with c->err */
    int (*entry)(dctx_t *c, ss_result_t *res);
} list_msg_t;

/* Decode a list message [topic, body] into res; *truncated is the body's
 * own "truncated" (0 when absent). The list itself is cleared by the
 * caller. */
static ss_err_t decode_list_msg(const ss_proto_part_t *parts, int n_parts,
                                const ss_proto_limits_t *lim, const list_msg_t *lm,
                                ss_result_t *res, int64_t *truncated, ss_proto_error_t *err)
{
    ok_error(err);
    *truncated = 0;
    if (parts_count(n_parts, 2, 2, lm->parts_text, err) < 0)
        return reason_err(err->reason);
    /* a body grows with its list: it may pass the header cap by
     * DETECTIONS_BODY_MAX (whatever the capacity of res: a list longer
     * than that is truncated, not rejected) */
    size_t cap = lim->max_header_bytes + DETECTIONS_BODY_MAX;
    cJSON *root = parse_object(parts[1].data, parts[1].len, cap, "body", err);
    if (!root)
        return reason_err(err->reason);
    dctx_t c = { .obj = root, .err = err };
    int rc = -1;
    int64_t count = 0;
    const cJSON *list = NULL, *it;
    if (get_result_common(&c, lim, lm->type, res) < 0)
        goto out;
    if (get_int(&c, "count", 1, 0, SS_PROTO_MAX_INT, "0 to 2^53", &count) < 0 ||
        get_int(&c, "truncated", 0, 0, SS_PROTO_MAX_INT, "0 to 2^53", truncated) < 0 ||
        get_typed(&c, lm->name, 1, 0, &list) < 0)
        goto out;
    if (count != cJSON_GetArraySize(list)) {
        fail(err, SS_PR_BAD_VALUE, "field \"count\" is %lld but \"%s\" has %d entries",
             (long long)count, lm->name, cJSON_GetArraySize(list));
        goto out;
    }
    if (check_topic(&parts[0], lm->type, res->meta.feed, err) < 0)
        goto out;
    int i = 0;
    cJSON_ArrayForEach(it, list)
    {
        dctx_t ec = { .obj = it, .err = err };
        set_prefix(&ec, "", lm->name, i);
        if (!cJSON_IsObject(it)) {
            fail(err, SS_PR_WRONG_TYPE,
                 "field \"%s[%d]\" has the wrong type: expected an object, got %s", lm->name, i,
                 json_kind(it));
            goto out;
        }
        if (lm->entry(&ec, res) < 0)
            goto out;
        i++;
    }
    rc = 0;
out:
    cJSON_Delete(root);
    return rc == 0 ? SS_OK : reason_err(err->reason);
}

static int detection_entry(dctx_t *c, ss_result_t *res)
{
    ss_detlist_t *l = &res->dets;
    ss_detection_t tmp, *d = l->count < l->capacity && l->items ? &l->items[l->count] : &tmp;
    if (get_detection(c, d) < 0)
        return -1;
    if (d == &tmp)
        l->truncated++;
    else
        l->count++;
    return 0;
}

ss_err_t ss_proto_decode_detections(const ss_proto_part_t *parts, int n_parts,
                                    const ss_proto_limits_t *lim, ss_result_t *res,
                                    ss_proto_error_t *err)
{
    static const list_msg_t lm = { SS_MSG_DETECTIONS, "detections", DETECTIONS_PARTS_TEXT,
                                   detection_entry };
    int64_t truncated = 0;
    res->dets.count = 0;
    res->dets.truncated = 0;
    ss_err_t e = decode_list_msg(parts, n_parts, lim, &lm, res, &truncated, err);
    if (e == SS_OK)
        res->dets.truncated += (int)SS_MIN(truncated, (int64_t)1 << 30);
    return e;
}

/* A track's "first" or "last": {seq, time / mjd (null when untimed)}. */
static int get_track_end(dctx_t *c, const char *name, uint64_t *seq, double *mjd)
{
    const cJSON *o = NULL;
    if (get_typed(c, name, 1, 1, &o) < 0)
        return -1;
    dctx_t ec = { .obj = o, .err = c->err };
    set_prefix(&ec, c->prefix, name, -1);
    return get_u64(&ec, "seq", 1, seq) < 0 || get_time(&ec, 1, 1, mjd) < 0 ? -1 : 0;
}

/* A track's "position": {x, y}, finite numbers. */
static int get_track_position(dctx_t *c, ss_track_t *t)
{
    const cJSON *o = NULL;
    if (get_typed(c, "position", 1, 1, &o) < 0)
        return -1;
    dctx_t pc = { .obj = o, .err = c->err };
    set_prefix(&pc, c->prefix, "position", -1);
    return get_num(&pc, "x", 1, 0, &t->x) < 0 || get_num(&pc, "y", 1, 0, &t->y) < 0 ? -1 : 0;
}

/* A track's "velocity": {x, y, err_x, err_y (numbers or null), unit}; the
 * unit says whether the track is timed. */
static int get_track_velocity(dctx_t *c, ss_track_t *t)
{
    const cJSON *o = NULL;
    char unit[SS_NAME_MAX];
    if (get_typed(c, "velocity", 1, 1, &o) < 0)
        return -1;
    dctx_t vc = { .obj = o, .err = c->err };
    set_prefix(&vc, c->prefix, "velocity", -1);
    if (get_num(&vc, "x", 1, 1, &t->vx) < 0 || get_num(&vc, "y", 1, 1, &t->vy) < 0 ||
        get_num(&vc, "err_x", 1, 1, &t->vx_err) < 0 ||
        get_num(&vc, "err_y", 1, 1, &t->vy_err) < 0 ||
        get_str(&vc, "unit", 1, CHARS_ANY, unit, sizeof unit) < 0)
        return -1;
    if (strcmp(unit, "px/s") != 0 && strcmp(unit, "px/frame") != 0)
        return fail(c->err, SS_PR_BAD_VALUE,
                    "field \"%sunit\" is \"%s\" (expected px/s or px/frame)", vc.prefix, unit);
    t->timed = strcmp(unit, "px/s") == 0;
    return 0;
}

/* A track's "points": at most SS_TRACK_POINTS objects {seq, x, y, mjd
 * (null when untimed)}. */
static int get_track_points(dctx_t *c, ss_track_t *t)
{
    const cJSON *a = NULL, *it;
    if (get_typed(c, "points", 1, 0, &a) < 0)
        return -1;
    const int n = cJSON_GetArraySize(a);
    if (n > SS_TRACK_POINTS)
        return fail(c->err, SS_PR_BAD_VALUE, "field \"%spoints\" has %d entries (maximum %d)",
                    c->prefix, n, SS_TRACK_POINTS);
    int i = 0;
    cJSON_ArrayForEach(it, a)
    {
        if (!cJSON_IsObject(it))
            return fail(c->err, SS_PR_WRONG_TYPE,
                        "field \"%spoints[%d]\" has the wrong type: expected an object, got %s",
                        c->prefix, i, json_kind(it));
        dctx_t pc = { .obj = it, .err = c->err };
        set_prefix(&pc, c->prefix, "points", i);
        ss_track_point_t *p = &t->points[i];
        if (get_u64(&pc, "seq", 1, &p->seq) < 0 || get_num(&pc, "x", 1, 0, &p->x) < 0 ||
            get_num(&pc, "y", 1, 0, &p->y) < 0 || get_num(&pc, "mjd", 1, 1, &p->mjd) < 0)
            return -1;
        i++;
    }
    t->n_points = n;
    return 0;
}

/* One entry of "tracks", in the order of PROTOCOL.md §6a. */
static int get_track(dctx_t *c, ss_track_t *t)
{
    memset(t, 0, sizeof *t);
    t->mjd_first = t->mjd_last = t->rate = t->pa = NAN;
    char kind[SS_NAME_MAX], state[SS_NAME_MAX];
    int64_t id = 0;
    if (get_int(c, "id", 1, 1, SS_PROTO_MAX_INT, "1 to 2^53", &id) < 0 ||
        get_str(c, "kind", 1, CHARS_ANY, kind, sizeof kind) < 0)
        return -1;
    t->id = (uint64_t)id;
    if (ss_kind_parse(kind, &t->kind) != 0 || t->kind == SS_KIND_COSMIC)
        return fail(c->err, SS_PR_BAD_VALUE,
                    "field \"%skind\" is \"%s\" (expected point or streak)", c->prefix, kind);
    if (get_str(c, "state", 1, CHARS_ANY, state, sizeof state) < 0)
        return -1;
    if (ss_track_state_parse(state, &t->state) != 0)
        return fail(c->err, SS_PR_BAD_VALUE,
                    "field \"%sstate\" is \"%s\" (expected active, coasting or ended)", c->prefix,
                    state);
    if (get_int32(c, "n", 1, 1, 2147483647.0, "1 to 2^31-1", &t->n) < 0 ||
        get_int32(c, "missed", 1, 0, 2147483647.0, "0 to 2^31-1", &t->missed) < 0 ||
        get_track_end(c, "first", &t->seq_first, &t->mjd_first) < 0 ||
        get_track_end(c, "last", &t->seq_last, &t->mjd_last) < 0 ||
        get_track_position(c, t) < 0 || get_track_velocity(c, t) < 0 ||
        get_num(c, "rms", 1, 1, &t->rms) < 0 || get_num(c, "snr", 1, 1, &t->snr) < 0)
        return -1;
    const int rr = get_num(c, "rate", 0, 0, &t->rate);
    if (rr < 0)
        return -1;
    const int rp = get_num(c, "pa", 0, 0, &t->pa);
    if (rp < 0)
        return -1;
    if (rr != rp)
        return fail(c->err, SS_PR_MISSING_FIELD,
                    "missing field \"%s%s\" (rate and pa go together)", c->prefix,
                    rr ? "pa" : "rate");
    t->has_rate = rr > 0;
    if (get_mag(c, &t->mag, &t->mag_err) < 0)
        return -1;
    return get_track_points(c, t);
}

static int track_entry(dctx_t *c, ss_result_t *res)
{
    ss_tracklist_t *l = &res->tracks;
    ss_track_t tmp, *t = l->count < l->capacity && l->items ? &l->items[l->count] : &tmp;
    if (get_track(c, t) < 0)
        return -1;
    if (t == &tmp)
        l->truncated++;
    else
        l->count++;
    return 0;
}

ss_err_t ss_proto_decode_tracks(const ss_proto_part_t *parts, int n_parts,
                                const ss_proto_limits_t *lim, ss_result_t *res,
                                ss_proto_error_t *err)
{
    static const list_msg_t lm = { SS_MSG_TRACKS, "tracks", TRACKS_PARTS_TEXT, track_entry };
    int64_t truncated = 0;
    res->tracks.count = 0;
    res->tracks.truncated = 0;
    ss_err_t e = decode_list_msg(parts, n_parts, lim, &lm, res, &truncated, err);
    if (e == SS_OK)
        res->tracks.truncated += (int)SS_MIN(truncated, (int64_t)1 << 30);
    return e;
}

/* ---- status -------------------------------------------------------------- */

void ss_proto_feed_stats_clear(ss_proto_feed_stats_t *fs)
{
    memset(fs, 0, sizeof *fs);
    fs->last_mjd = NAN;
    for (int s = 0; s < SS_STAGE__COUNT; s++)
        fs->stage_ms[s] = -1.0;
    fs->total_ms = -1.0;
}

void ss_proto_status_clear(ss_proto_status_t *st)
{
    memset(st, 0, sizeof *st);
    st->mjd = NAN;
    for (int i = 0; i < SS_PROTO_MAX_FEEDS; i++)
        ss_proto_feed_stats_clear(&st->feeds[i]);
}

static void jw_feed(jw_t *w, const ss_proto_feed_stats_t *f, int full)
{
    jw_open(w, NULL, '{');
    jw_str(w, "name", f->name);
    jw_str(w, "state", f->state);
    jw_str(w, "backend", f->backend);
    jw_str(w, "source", f->source);
    if (full) {
        jw_u64(w, "received", f->received);
        jw_u64(w, "accepted", f->accepted);
        jw_u64(w, "rejected", f->rejected);
        jw_open(w, "rejected_by", '{');
        for (int r = SS_PR_OK + 1; r < SS_PR__COUNT; r++)
            jw_u64(w, reason_names[r], f->rejected_by[r]);
        jw_close(w, '}');
        jw_u64(w, "dropped_queue", f->dropped_queue);
    }
    jw_u64(w, "processed", f->processed);
    if (full) {
        jw_open(w, "status", '{');
        for (int s = 0; s < SS_STATUS__COUNT; s++)
            jw_u64(w, ss_status_name((ss_frame_status_t)s), f->status_count[s]);
        jw_close(w, '}');
        jw_u64(w, "detections", f->detections);
        jw_u64(w, "detections_truncated", f->detections_truncated);
        jw_u64(w, "reg_failures", f->reg_failures);
        jw_u64(w, "resets", f->resets);
        jw_u64(w, "published", f->published);
        jw_u64(w, "pub_dropped", f->pub_dropped);
    }
    jw_int(w, "queue_depth", f->queue_depth);
    if (full)
        jw_int(w, "queue_capacity", f->queue_capacity);
    jw_num(w, "fps", f->fps);
    jw_u64(w, "last_seq", f->last_seq);
    if (full) {
        jw_time(w, "last_time", "last_mjd", f->last_mjd);
        jw_open(w, "stage_ms", '{');
        for (int s = 0; s < SS_STAGE__COUNT; s++)
            jw_num(w, ss_stage_name((ss_stage_id_t)s), f->stage_ms[s]);
        jw_close(w, '}');
        jw_num(w, "total_ms", f->total_ms);
        jw_u64(w, "device_mem_used", f->device_mem_used);
        jw_u64(w, "device_mem_total", f->device_mem_total);
    }
    jw_close(w, '}');
}

static void jw_status_members(jw_t *w, const ss_proto_status_t *st, int full)
{
    jw_str(w, "version", st->version);
    jw_time(w, "time", "mjd", st->mjd);
    jw_num(w, "uptime_s", st->uptime_s);
    jw_open(w, "feeds", '[');
    for (int i = 0; i < st->n_feeds && i < SS_PROTO_MAX_FEEDS; i++)
        jw_feed(w, &st->feeds[i], full);
    jw_close(w, ']');
}

int ss_proto_encode_status(const ss_proto_status_t *st, char *buf, size_t n)
{
    jw_t w;
    jw_init(&w, buf, n);
    jw_open(&w, NULL, '{');
    jw_int(&w, "protocol", SS_PROTO_VERSION);
    jw_str(&w, "type", "status");
    jw_status_members(&w, st, 1);
    jw_close(&w, '}');
    return jw_done(&w);
}

int ss_proto_encode_status_body(const ss_proto_status_t *st, int full, char *buf, size_t n)
{
    jw_t w;
    jw_init(&w, buf, n);
    jw_open(&w, NULL, '{');
    jw_status_members(&w, st, full);
    jw_close(&w, '}');
    return jw_done(&w);
}

/* An object of name -> counter, names from a table; unknown names are
 * ignored (newer senders may count more). */
static int get_counter_map(dctx_t *c, const char *name, const char *(*name_of)(int), int count,
                           uint64_t *out)
{
    const cJSON *o = NULL;
    int r = get_typed(c, name, 0, 1, &o);
    if (r <= 0)
        return r;
    dctx_t mc = { .obj = o, .err = c->err };
    set_prefix(&mc, c->prefix, name, -1);
    for (int i = 0; i < count; i++) {
        const char *k = name_of(i);
        if (k && get_u64(&mc, k, 0, &out[i]) < 0)
            return -1;
    }
    return 1;
}

static const char *reason_key(int i) { return i == SS_PR_OK ? NULL : reason_names[i]; }
static const char *status_key(int i) { return ss_status_name((ss_frame_status_t)i); }

static int get_feed_stats(dctx_t *c, ss_proto_feed_stats_t *f)
{
    ss_proto_feed_stats_clear(f);
    if (get_str(c, "name", 1, CHARS_NAME, f->name, sizeof f->name) < 0 ||
        get_str(c, "state", 0, CHARS_ANY, f->state, sizeof f->state) < 0 ||
        get_str(c, "backend", 0, CHARS_ANY, f->backend, sizeof f->backend) < 0 ||
        get_str(c, "source", 0, CHARS_ANY, f->source, sizeof f->source) < 0 ||
        get_u64(c, "received", 0, &f->received) < 0 ||
        get_u64(c, "accepted", 0, &f->accepted) < 0 ||
        get_u64(c, "rejected", 0, &f->rejected) < 0 ||
        get_counter_map(c, "rejected_by", reason_key, SS_PR__COUNT,
                        f->rejected_by) < 0 ||
        get_u64(c, "dropped_queue", 0, &f->dropped_queue) < 0 ||
        get_u64(c, "processed", 0, &f->processed) < 0 ||
        get_counter_map(c, "status", status_key, SS_STATUS__COUNT, f->status_count) < 0 ||
        get_u64(c, "detections", 0, &f->detections) < 0 ||
        get_u64(c, "detections_truncated", 0, &f->detections_truncated) < 0 ||
        get_u64(c, "reg_failures", 0, &f->reg_failures) < 0 ||
        get_u64(c, "resets", 0, &f->resets) < 0 ||
        get_u64(c, "published", 0, &f->published) < 0 ||
        get_u64(c, "pub_dropped", 0, &f->pub_dropped) < 0 ||
        get_int32(c, "queue_depth", 0, 0, 2147483647.0, "0 to 2^31-1", &f->queue_depth) < 0 ||
        get_int32(c, "queue_capacity", 0, 0, 2147483647.0, "0 to 2^31-1", &f->queue_capacity) < 0 ||
        get_num(c, "fps", 0, 1, &f->fps) < 0 || get_u64(c, "last_seq", 0, &f->last_seq) < 0 ||
        get_time_pair(c, "last_time", "last_mjd", 0, 1, &f->last_mjd) < 0)
        return -1;
    const cJSON *sm = NULL;
    if (get_typed(c, "stage_ms", 0, 1, &sm) < 0)
        return -1;
    if (sm) {
        dctx_t mc = { .obj = sm, .err = c->err };
        set_prefix(&mc, c->prefix, "stage_ms", -1);
        for (int s = 0; s < SS_STAGE__COUNT; s++)
            if (get_num(&mc, ss_stage_name((ss_stage_id_t)s), 0, 1, &f->stage_ms[s]) < 0)
                return -1;
    }
    if (get_num(c, "total_ms", 0, 1, &f->total_ms) < 0 ||
        get_u64(c, "device_mem_used", 0, &f->device_mem_used) < 0 ||
        get_u64(c, "device_mem_total", 0, &f->device_mem_total) < 0)
        return -1;
    return 0;
}

static int get_status_members(dctx_t *c, ss_proto_status_t *st)
{
    const cJSON *feeds = NULL, *it;
    if (get_str(c, "version", 0, CHARS_ANY, st->version, sizeof st->version) < 0 ||
        get_topic_seq(c, &st->topic_seq, &st->has_topic_seq) < 0 ||
        get_time(c, 0, 1, &st->mjd) < 0 || get_num(c, "uptime_s", 0, 1, &st->uptime_s) < 0 ||
        get_typed(c, "feeds", 1, 0, &feeds) < 0)
        return -1;
    int n = cJSON_GetArraySize(feeds);
    if (n > SS_PROTO_MAX_FEEDS)
        return fail(c->err, SS_PR_BAD_VALUE, "field \"feeds\" has %d entries (maximum %d)", n,
                    SS_PROTO_MAX_FEEDS);
    int i = 0;
    cJSON_ArrayForEach(it, feeds)
    {
        if (!cJSON_IsObject(it))
            return fail(c->err, SS_PR_WRONG_TYPE,
                        "field \"feeds[%d]\" has the wrong type: expected an object, got %s", i,
                        json_kind(it));
        dctx_t fc = { .obj = it, .err = c->err };
        set_prefix(&fc, "", "feeds", i);
        if (get_feed_stats(&fc, &st->feeds[i]) < 0)
            return -1;
        i++;
    }
    st->n_feeds = n;
    return 0;
}

ss_err_t ss_proto_decode_status(const ss_proto_part_t *parts, int n_parts,
                                const ss_proto_limits_t *lim, ss_proto_status_t *st,
                                ss_proto_error_t *err)
{
    ok_error(err);
    ss_proto_status_clear(st);
    if (parts_count(n_parts, 2, 2, STATUS_PARTS_TEXT, err) < 0)
        return reason_err(err->reason);
    if (check_topic(&parts[0], SS_MSG_STATUS, "", err) < 0)
        return reason_err(err->reason);
    /* one feed's full counters take about 1.5 kB */
    size_t cap = lim->max_header_bytes + SS_PROTO_MAX_FEEDS * 4096;
    cJSON *root = parse_object(parts[1].data, parts[1].len, cap, "body", err);
    if (!root)
        return reason_err(err->reason);
    dctx_t c = { .obj = root, .err = err };
    int rc = -1;
    if (check_version(&c) == 0 && check_type(&c, SS_MSG_STATUS) == 0 &&
        get_status_members(&c, st) == 0)
        rc = 0;
    cJSON_Delete(root);
    return rc == 0 ? SS_OK : reason_err(err->reason);
}

ss_err_t ss_proto_decode_status_body(const void *buf, size_t len, ss_proto_status_t *st,
                                     ss_proto_error_t *err)
{
    ok_error(err);
    ss_proto_status_clear(st);
    cJSON *root = parse_object(buf, len, SS_PROTO_DEFAULT_MAX_HEADER + SS_PROTO_MAX_FEEDS * 4096,
                               "body", err);
    if (!root)
        return reason_err(err->reason);
    dctx_t c = { .obj = root, .err = err };
    int rc = get_status_members(&c, st);
    cJSON_Delete(root);
    return rc == 0 ? SS_OK : reason_err(err->reason);
}

/* ---- control ------------------------------------------------------------- */

int ss_proto_encode_request(const ss_ctl_request_t *r, char *buf, size_t n)
{
    if ((unsigned)r->cmd >= SS_CTL__COUNT)
        return -1;
    jw_t w;
    jw_init(&w, buf, n);
    jw_open(&w, NULL, '{');
    jw_str(&w, "cmd", ss_ctl_cmd_name(r->cmd));
    if (r->feed[0])
        jw_str(&w, "feed", r->feed);
    jw_close(&w, '}');
    return jw_done(&w);
}

ss_err_t ss_proto_decode_request(const void *buf, size_t len, ss_ctl_request_t *r,
                                 ss_proto_error_t *err)
{
    ok_error(err);
    memset(r, 0, sizeof *r);
    cJSON *root = parse_object(buf, len, REQUEST_MAX, "request", err);
    if (!root)
        return reason_err(err->reason);
    dctx_t c = { .obj = root, .err = err };
    int rc = -1;
    const cJSON *pv = NULL;
    char cmd[SS_NAME_MAX];
    /* "protocol" is optional in a request; when given it must be 1 */
    int rp = get(&c, "protocol", 0, &pv);
    if (rp < 0 || (rp > 0 && check_version(&c) < 0))
        goto out;
    if (get_str(&c, "cmd", 1, CHARS_ANY, cmd, sizeof cmd) < 0)
        goto out;
    r->cmd = SS_CTL__COUNT;
    for (int i = 0; i < SS_CTL__COUNT; i++)
        if (strcmp(cmd, ss_ctl_cmd_name((ss_ctl_cmd_t)i)) == 0)
            r->cmd = (ss_ctl_cmd_t)i;
    if (r->cmd == SS_CTL__COUNT) {
        fail(err, SS_PR_UNKNOWN_TYPE,
             "unknown command \"%s\" (expected status, stats, reset, reload or config)", cmd);
        goto out;
    }
    if (get_str(&c, "feed", 0, CHARS_NAME, r->feed, sizeof r->feed) < 0)
        goto out;
    rc = 0;
out:
    cJSON_Delete(root);
    return rc == 0 ? SS_OK : reason_err(err->reason);
}

int ss_proto_encode_response(const char *cmd, const char *body, char *buf, size_t n)
{
    char *compact = NULL;
    if (body && body[0]) {
        ss_proto_error_t e;
        cJSON *o = parse_object(body, strlen(body), (size_t)-1, "body", &e);
        if (!o)
            return -1;
        int clash = cJSON_HasObjectItem(o, "ok") || cJSON_HasObjectItem(o, "cmd") ||
                    cJSON_HasObjectItem(o, "error");
        /* re-printed compact, so that responses look alike whoever made
         * the body (config/ pretty-prints, proto/ does not) */
        if (!clash)
            compact = cJSON_PrintUnformatted(o);
        cJSON_Delete(o);
        if (!compact)
            return -1;
    }
    jw_t w;
    jw_init(&w, buf, n);
    jw_open(&w, NULL, '{');
    jw_bool(&w, "ok", 1);
    if (cmd)
        jw_str(&w, "cmd", cmd);
    /* the members between the outer braces of "{...}" */
    size_t len = compact ? strlen(compact) : 0;
    if (len > 2) {
        jw_put(&w, ",", 1);
        jw_put(&w, compact + 1, len - 2);
    }
    cJSON_free(compact);
    jw_close(&w, '}');
    return jw_done(&w);
}

int ss_proto_encode_error_response(const char *cmd, const char *error, char *buf, size_t n)
{
    jw_t w;
    jw_init(&w, buf, n);
    jw_open(&w, NULL, '{');
    jw_bool(&w, "ok", 0);
    if (cmd)
        jw_str(&w, "cmd", cmd);
    jw_str(&w, "error", error ? error : "");
    jw_close(&w, '}');
    return jw_done(&w);
}

ss_err_t ss_proto_decode_response(const void *buf, size_t len, ss_ctl_response_t *r,
                                  ss_proto_error_t *err)
{
    ok_error(err);
    memset(r, 0, sizeof *r);
    cJSON *root = parse_object(buf, len, (size_t)64 << 20, "response", err);
    if (!root)
        return reason_err(err->reason);
    dctx_t c = { .obj = root, .err = err };
    int rc = -1;
    if (get_bool(&c, "ok", 1, &r->ok) < 0 ||
        get_str(&c, "cmd", 0, CHARS_ANY, r->cmd, sizeof r->cmd) < 0)
        goto out;
    if (!r->ok && get_str(&c, "error", 1, CHARS_ANY, r->error, sizeof r->error) < 0)
        goto out;
    cJSON_DeleteItemFromObjectCaseSensitive(root, "ok");
    cJSON_DeleteItemFromObjectCaseSensitive(root, "cmd");
    cJSON_DeleteItemFromObjectCaseSensitive(root, "error");
    r->body = cJSON_PrintUnformatted(root);
    if (!r->body) {
        fail(err, SS_PR_NO_BUFFER, "out of memory");
        goto out;
    }
    rc = 0;
out:
    cJSON_Delete(root);
    return rc == 0 ? SS_OK : (err->reason == SS_PR_NO_BUFFER ? SS_ERR_NOMEM : reason_err(err->reason));
}

void ss_ctl_response_free(ss_ctl_response_t *r)
{
    if (!r)
        return;
    if (r->body)
        cJSON_free(r->body);
    r->body = NULL;
}
