/*
 * config.c — the machinery behind the key table (config_keys.c): defaults,
 * loading JSON into the typed structs, validation, printing, comparison,
 * reload rules and the Markdown key reference.
 *
 * Loading parses once with cJSON_ParseWithLengthOpts, walks the tree
 * against the table (so that every member is either a key, an object on
 * the way to keys, or an error naming its full path), copies each value
 * into the struct and frees the tree. Nothing outside this module sees
 * cJSON.
 */
#define _POSIX_C_SOURCE 200809L
#include "config.h"
#include "pipeline/solve.h"

#include <cJSON.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PATH_TEXT_MAX 256           /* longest key path, with feeds[i]. */
#define NEAR_BEFORE 16              /* context before a JSON syntax error */
#define NEAR_AFTER 8                /* and after it */
#define SUGGEST_MAX_DIST 2          /* edits for a "did you mean" hint */

/* ======================================================================
 * small helpers
 * ==================================================================== */

/* Shortest text that reads back to exactly v (JSON number syntax for
 * finite v); integers below 1e15 without an exponent ("3600", not
 * "3.6e+03"). */
static void fmt_double(char *buf, size_t n, double v)
{
    if (v == floor(v) && fabs(v) < 1e15) {
        snprintf(buf, n, "%.0f", v);
        return;
    }
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, n, "%.*g", prec, v);
        if (strtod(buf, NULL) == v)
            return;
    }
}

static void *field(void *base, const ss_config_key_t *k)
{
    return (char *)base + k->offset;
}
static const void *cfield(const void *base, const ss_config_key_t *k)
{
    return (const char *)base + k->offset;
}

static size_t field_size(const ss_config_key_t *k)
{
    switch (k->type) {
    case SS_KEY_BOOL:
    case SS_KEY_INT:
    case SS_KEY_ENUM: return sizeof(int);
    case SS_KEY_U64: return sizeof(uint64_t);
    case SS_KEY_DOUBLE: return sizeof(double);
    case SS_KEY_STRING: return k->size;
    case SS_KEY_INT4: return 4 * sizeof(int);
    }
    return 0;
}

static const char *enum_name(const ss_config_key_t *k, int v)
{
    for (const ss_enum_name_t *e = k->names; e && e->name; e++)
        if (e->value == v)
            return e->name;
    return NULL;
}

static int enum_value(const ss_config_key_t *k, const char *name, int *out)
{
    for (const ss_enum_name_t *e = k->names; e && e->name; e++)
        if (strcmp(e->name, name) == 0) {
            *out = e->value;
            return 0;
        }
    return -1;
}

/* "poly, lsq" */
static void enum_list(const ss_config_key_t *k, char *buf, size_t n)
{
    size_t used = 0;
    buf[0] = '\0';
    for (const ss_enum_name_t *e = k->names; e && e->name; e++) {
        int w = snprintf(buf + used, n - used, "%s%s", e == k->names ? "" : ", ", e->name);
        if (w < 0 || (size_t)w >= n - used)
            break;
        used += (size_t)w;
    }
}

/* Display path of a key: "feeds[2].pipeline.history" or "log_level". */
static void key_display(char *buf, size_t n, const ss_config_key_t *k, int feed)
{
    if (k->scope == SS_SCOPE_FEED)
        snprintf(buf, n, "feeds[%d].%s", feed, k->path);
    else
        snprintf(buf, n, "%s", k->path);
}

/* ---- a growing text buffer (printer, docs) ----------------------------- */

typedef struct sb {
    char *buf;
    size_t len, cap;
    int failed;
} sb_t;

static void sb_put(sb_t *s, const char *text, size_t len)
{
    if (s->failed)
        return;
    if (s->len + len + 1 > s->cap) {
        size_t cap = s->cap ? s->cap : 4096;
        while (s->len + len + 1 > cap)
            cap *= 2;
        char *nb = realloc(s->buf, cap);
        if (!nb) {
            s->failed = 1;
            return;
        }
        s->buf = nb;
        s->cap = cap;
    }
    memcpy(s->buf + s->len, text, len);
    s->len += len;
    s->buf[s->len] = '\0';
}

static void sb_puts(sb_t *s, const char *text)
{
    sb_put(s, text, strlen(text));
}

static void sb_printf(sb_t *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sb_t *s, const char *fmt, ...)
{
    char tmp[1024];
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (w < 0) {
        s->failed = 1;
        return;
    }
    sb_put(s, tmp, SS_MIN((size_t)w, sizeof tmp - 1));
}

static void sb_indent(sb_t *s, int indent)
{
    for (int i = 0; i < indent; i++)
        sb_put(s, " ", 1);
}

/* A JSON string literal. */
static void sb_json_string(sb_t *s, const char *text)
{
    sb_put(s, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)text; *p; p++) {
        switch (*p) {
        case '"': sb_puts(s, "\\\""); break;
        case '\\': sb_puts(s, "\\\\"); break;
        case '\n': sb_puts(s, "\\n"); break;
        case '\r': sb_puts(s, "\\r"); break;
        case '\t': sb_puts(s, "\\t"); break;
        default:
            if (*p < 0x20)
                sb_printf(s, "\\u%04x", *p);
            else
                sb_put(s, (const char *)p, 1);
        }
    }
    sb_put(s, "\"", 1);
}

static char *sb_finish(sb_t *s)
{
    if (s->failed) {
        free(s->buf);
        return NULL;
    }
    if (!s->buf)
        sb_put(s, "", 0);
    return s->failed ? NULL : s->buf;
}

/* ======================================================================
 * defaults
 * ==================================================================== */

static void apply_defaults(ss_key_scope_t scope, void *base)
{
    size_t nk;
    const ss_config_key_t *keys = ss_config_keys(scope, &nk);
    for (size_t i = 0; i < nk; i++) {
        const ss_config_key_t *k = &keys[i];
        void *p = field(base, k);
        switch (k->type) {
        case SS_KEY_BOOL:
        case SS_KEY_INT: *(int *)p = (int)k->def; break;
        case SS_KEY_U64: *(uint64_t *)p = (uint64_t)k->def; break;
        case SS_KEY_DOUBLE: *(double *)p = k->def; break;
        case SS_KEY_STRING:
            memset(p, 0, k->size);
            ss_strlcpy(p, k->def_str, k->size);
            break;
        case SS_KEY_ENUM: {
            int v = 0;
            (void)enum_value(k, k->def_str, &v);    /* the table test checks it exists */
            *(int *)p = v;
            break;
        }
        case SS_KEY_INT4:
            for (int j = 0; j < 4; j++)
                ((int *)p)[j] = (int)k->def;
            break;
        }
    }
}

void ss_feed_defaults(ss_feed_cfg_t *f)
{
    memset(f, 0, sizeof *f);
    apply_defaults(SS_SCOPE_FEED, f);
}

void ss_config_defaults(ss_config_t *c)
{
    memset(c, 0, sizeof *c);
    apply_defaults(SS_SCOPE_DAEMON, c);
    c->n_feeds = 1;
    ss_feed_defaults(&c->feeds[0]);
}

void ss_pipeline_cfg_defaults(ss_pipeline_cfg_t *p)
{
    ss_feed_cfg_t f;
    ss_feed_defaults(&f);
    memcpy(p, &f.pipeline, sizeof *p);     /* padding stays zero, like the source */
}

/* ======================================================================
 * value checks shared by the loader and the validator
 * ==================================================================== */

static int check_range(const ss_config_key_t *k, double v, const char *disp, char *err, size_t n)
{
    if (isfinite(v) && v >= k->min && v <= k->max)
        return 0;
    char a[32], lo[32], hi[32];
    fmt_double(a, sizeof a, v);
    fmt_double(lo, sizeof lo, k->min);
    fmt_double(hi, sizeof hi, k->max);
    ss_msgf(err, n, "%s: %s is out of range [%s, %s]", disp, a, lo, hi);
    return -1;
}

/* Check the value stored in the struct (configs built in code). */
static int check_stored(const ss_config_key_t *k, const void *base, int feed, char *err, size_t n)
{
    char disp[PATH_TEXT_MAX];
    key_display(disp, sizeof disp, k, feed);
    const void *p = cfield(base, k);
    switch (k->type) {
    case SS_KEY_BOOL: {
        int v = *(const int *)p;
        if (v != 0 && v != 1) {
            ss_msgf(err, n, "%s: %d is not a boolean (0 or 1)", disp, v);
            return -1;
        }
        return 0;
    }
    case SS_KEY_INT: return check_range(k, *(const int *)p, disp, err, n);
    case SS_KEY_U64: return check_range(k, (double)*(const uint64_t *)p, disp, err, n);
    case SS_KEY_DOUBLE:
        if (k->nullable && isnan(*(const double *)p))
            return 0;
        return check_range(k, *(const double *)p, disp, err, n);
    case SS_KEY_STRING:
        if (!memchr(p, '\0', k->size)) {
            ss_msgf(err, n, "%s: not terminated within %zu bytes", disp, k->size);
            return -1;
        }
        return 0;
    case SS_KEY_ENUM:
        if (!enum_name(k, *(const int *)p)) {
            char names[256];
            enum_list(k, names, sizeof names);
            ss_msgf(err, n, "%s: value %d is not one of: %s", disp, *(const int *)p, names);
            return -1;
        }
        return 0;
    case SS_KEY_INT4:
        for (int j = 0; j < 4; j++) {
            char el[PATH_TEXT_MAX + 64];
            snprintf(el, sizeof el, "%s[%d]", disp, j);
            if (check_range(k, ((const int *)p)[j], el, err, n))
                return -1;
        }
        return 0;
    }
    return 0;
}

/* ======================================================================
 * loading
 * ==================================================================== */

static const char *json_kind(const cJSON *v)
{
    if (cJSON_IsBool(v))
        return "a boolean";
    if (cJSON_IsNull(v))
        return "null";
    if (cJSON_IsNumber(v))
        return "a number";
    if (cJSON_IsString(v))
        return "a string";
    if (cJSON_IsArray(v))
        return "an array";
    if (cJSON_IsObject(v))
        return "an object";
    return "an invalid value";
}

/* A JSON number that is an integer within the key's range. */
static int get_integer(const ss_config_key_t *k, const cJSON *v, const char *disp, double *out,
                       char *err, size_t n)
{
    if (!cJSON_IsNumber(v)) {
        ss_msgf(err, n, "%s: expected an integer, got %s", disp, json_kind(v));
        return -1;
    }
    double d = v->valuedouble;
    if (d != floor(d)) {
        char a[32];
        fmt_double(a, sizeof a, d);
        ss_msgf(err, n, "%s: expected an integer, got %s", disp, a);
        return -1;
    }
    if (check_range(k, d, disp, err, n))
        return -1;
    *out = d;
    return 0;
}

static int apply_value(const ss_config_key_t *k, const cJSON *v, void *base, const char *disp,
                       char *err, size_t n)
{
    void *p = field(base, k);
    double d;
    switch (k->type) {
    case SS_KEY_BOOL:
        if (!cJSON_IsBool(v)) {
            ss_msgf(err, n, "%s: expected true or false, got %s", disp, json_kind(v));
            return -1;
        }
        *(int *)p = cJSON_IsTrue(v) ? 1 : 0;
        return 0;
    case SS_KEY_INT:
        if (get_integer(k, v, disp, &d, err, n))
            return -1;
        *(int *)p = (int)d;
        return 0;
    case SS_KEY_U64:
        if (get_integer(k, v, disp, &d, err, n))
            return -1;
        *(uint64_t *)p = (uint64_t)d;
        return 0;
    case SS_KEY_DOUBLE:
        if (k->nullable && cJSON_IsNull(v)) {
            *(double *)p = NAN;
            return 0;
        }
        if (!cJSON_IsNumber(v)) {
            ss_msgf(err, n, "%s: expected a number%s, got %s", disp, k->nullable ? " or null" : "",
                    json_kind(v));
            return -1;
        }
        if (check_range(k, v->valuedouble, disp, err, n))
            return -1;
        *(double *)p = v->valuedouble;
        return 0;
    case SS_KEY_STRING: {
        if (!cJSON_IsString(v) || !v->valuestring) {
            ss_msgf(err, n, "%s: expected a string, got %s", disp, json_kind(v));
            return -1;
        }
        size_t len = strlen(v->valuestring);
        if (len >= k->size) {
            ss_msgf(err, n, "%s: %zu characters, at most %zu are allowed", disp, len, k->size - 1);
            return -1;
        }
        memset(p, 0, k->size);
        memcpy(p, v->valuestring, len);
        return 0;
    }
    case SS_KEY_ENUM: {
        char names[256];
        enum_list(k, names, sizeof names);
        if (!cJSON_IsString(v) || !v->valuestring) {
            ss_msgf(err, n, "%s: expected a string (one of: %s), got %s", disp, names, json_kind(v));
            return -1;
        }
        if (enum_value(k, v->valuestring, (int *)p)) {
            ss_msgf(err, n, "%s: \"%.64s\" is not one of: %s", disp, v->valuestring, names);
            return -1;
        }
        return 0;
    }
    case SS_KEY_INT4: {
        if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) != 4) {
            ss_msgf(err, n, "%s: expected an array of 4 integers [x, y, w, h], got %s", disp,
                    cJSON_IsArray(v) ? "an array of another length" : json_kind(v));
            return -1;
        }
        int vals[4], j = 0;
        const cJSON *e;
        cJSON_ArrayForEach(e, v) {
            char el[PATH_TEXT_MAX + 64];
            snprintf(el, sizeof el, "%s[%d]", disp, j);
            if (get_integer(k, e, el, &d, err, n))
                return -1;
            vals[j++] = (int)d;
        }
        memcpy(p, vals, sizeof vals);
        return 0;
    }
    }
    return -1;
}

static const ss_config_key_t *find_key(ss_key_scope_t scope, const char *path)
{
    size_t nk;
    const ss_config_key_t *keys = ss_config_keys(scope, &nk);
    for (size_t i = 0; i < nk; i++)
        if (strcmp(keys[i].path, path) == 0)
            return &keys[i];
    return NULL;
}

/* Is path ("pipeline.registration") the object above some key? */
static int is_prefix(ss_key_scope_t scope, const char *path)
{
    size_t nk, len = strlen(path);
    const ss_config_key_t *keys = ss_config_keys(scope, &nk);
    for (size_t i = 0; i < nk; i++)
        if (strncmp(keys[i].path, path, len) == 0 && keys[i].path[len] == '.')
            return 1;
    return 0;
}

/* Levenshtein distance of two short names (longer names are cut). */
static int edit_distance(const char *a, const char *b)
{
    enum { L = 48 };
    size_t la = SS_MIN(strlen(a), (size_t)L), lb = SS_MIN(strlen(b), (size_t)L);
    int row[L + 1];
    for (size_t j = 0; j <= lb; j++)
        row[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            int up = row[j];
            int best = diag + (a[i - 1] != b[j - 1]);
            best = SS_MIN(best, up + 1);
            best = SS_MIN(best, row[j - 1] + 1);
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

/* The member name closest to name among those valid in the object at
 * prefix ("" = the scope's top), for a "did you mean" hint. */
static const char *suggest(ss_key_scope_t scope, const char *prefix, const char *name, char *buf,
                           size_t n)
{
    size_t nk, plen = strlen(prefix);
    const ss_config_key_t *keys = ss_config_keys(scope, &nk);
    int best = SUGGEST_MAX_DIST + 1;
    buf[0] = '\0';
    for (size_t i = 0; i <= nk; i++) {
        char seg[64];
        if (i == nk) {                  /* "feeds" lives outside the table */
            if (scope != SS_SCOPE_DAEMON || plen)
                break;
            ss_strlcpy(seg, "feeds", sizeof seg);
        } else {
            const char *p = keys[i].path;
            if (plen && (strncmp(p, prefix, plen) != 0 || p[plen] != '.'))
                continue;
            p += plen ? plen + 1 : 0;
            size_t sl = strcspn(p, ".");
            if (sl >= sizeof seg)
                continue;
            memcpy(seg, p, sl);
            seg[sl] = '\0';
        }
        int d = edit_distance(name, seg);
        if (d < best) {
            best = d;
            ss_strlcpy(buf, seg, n);
        }
    }
    return buf[0] ? buf : NULL;
}

typedef struct walk {
    ss_key_scope_t scope;
    void *base;
    int feed;               /* index for display paths (feed scope) */
    char *err;
    size_t n;
} walk_t;

static int load_feeds(const cJSON *arr, ss_config_t *c, char *err, size_t n);

static int walk_object(walk_t *w, const cJSON *obj, const char *prefix)
{
    const cJSON *m;
    cJSON_ArrayForEach(m, obj) {
        const char *name = m->string ? m->string : "";
        char rel[PATH_TEXT_MAX], disp[PATH_TEXT_MAX + 16];
        snprintf(rel, sizeof rel, "%s%s%s", prefix, *prefix ? "." : "", name);
        if (w->scope == SS_SCOPE_FEED)
            snprintf(disp, sizeof disp, "feeds[%d].%s", w->feed, rel);
        else
            snprintf(disp, sizeof disp, "%s", rel);

        for (const cJSON *o = obj->child; o != m; o = o->next)
            if (o->string && strcmp(o->string, name) == 0) {
                ss_msgf(w->err, w->n, "%s: duplicate key", disp);
                return -1;
            }

        /* Dotted member names would alias nested paths; one spelling only. */
        const ss_config_key_t *k = strchr(name, '.') ? NULL : find_key(w->scope, rel);
        if (k) {
            if (apply_value(k, m, w->base, disp, w->err, w->n))
                return -1;
        } else if (!strchr(name, '.') && *name && is_prefix(w->scope, rel)) {
            if (!cJSON_IsObject(m)) {
                ss_msgf(w->err, w->n, "%s: expected an object, got %s", disp, json_kind(m));
                return -1;
            }
            if (walk_object(w, m, rel))
                return -1;
        } else if (w->scope == SS_SCOPE_DAEMON && !*prefix && strcmp(name, "feeds") == 0) {
            if (load_feeds(m, w->base, w->err, w->n))
                return -1;
        } else {
            char hint[64];
            if (suggest(w->scope, prefix, name, hint, sizeof hint))
                ss_msgf(w->err, w->n, "%s: unknown key (did you mean \"%s\"?)", disp, hint);
            else
                ss_msgf(w->err, w->n, "%s: unknown key", disp);
            return -1;
        }
    }
    return 0;
}

static int load_feeds(const cJSON *arr, ss_config_t *c, char *err, size_t n)
{
    if (!cJSON_IsArray(arr)) {
        ss_msgf(err, n, "feeds: expected an array of feed objects, got %s", json_kind(arr));
        return -1;
    }
    int count = cJSON_GetArraySize(arr);
    if (count == 0) {
        ss_msgf(err, n, "feeds: at least one feed is required");
        return -1;
    }
    if (count > SS_MAX_FEEDS) {
        ss_msgf(err, n, "feeds: %d feeds given, at most %d are supported", count, SS_MAX_FEEDS);
        return -1;
    }
    memset(c->feeds, 0, sizeof c->feeds);
    int i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, arr) {
        if (!cJSON_IsObject(e)) {
            ss_msgf(err, n, "feeds[%d]: expected an object, got %s", i, json_kind(e));
            return -1;
        }
        ss_feed_defaults(&c->feeds[i]);
        walk_t w = { SS_SCOPE_FEED, &c->feeds[i], i, err, n };
        if (walk_object(&w, e, ""))
            return -1;
        i++;
    }
    c->n_feeds = count;
    return 0;
}

/* Line and column (1-based) of pos in text. */
static void line_col(const char *text, const char *pos, int *line, int *col)
{
    *line = 1;
    *col = 1;
    for (const char *p = text; p < pos; p++) {
        if (*p == '\n') {
            (*line)++;
            *col = 1;
        } else {
            (*col)++;
        }
    }
}

ss_err_t ss_config_load_string(const char *json, size_t len, ss_config_t *c, char *err, size_t n)
{
    if (!c || (!json && len)) {
        ss_msgf(err, n, "no config given");
        return SS_ERR_INVALID;
    }
    ss_config_defaults(c);
    if (err && n)
        err[0] = '\0';

    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(json ? json : "", len, &end, 0);
    /* A value followed by more than whitespace (or a final NUL) is not JSON. */
    if (root && end) {
        const char *p = end, *lim = json + len;
        while (p < lim && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
            p++;
        if (p < lim && !(*p == '\0' && p + 1 == lim)) {
            cJSON_Delete(root);
            root = NULL;
            end = p;
        }
    }
    if (!root) {
        if (!end || end < json || end > json + len)
            end = json ? json + len : NULL;
        int line = 1, col = 1;
        if (json)
            line_col(json, end, &line, &col);
        /* cJSON's error position is approximate (at or just after the
         * offending token), so show the text of that line leading up to it. */
        const char *lim = json ? json + len : NULL, *p = end;
        while (p && p < lim && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
            p++;
        if (!json || p >= lim || *p == '\0') {
            if (json)       /* cJSON reports the last byte; the end is clearer */
                line_col(json, lim, &line, &col);
            ss_msgf(err, n, "invalid JSON at line %d, column %d (unexpected end of input)", line, col);
        } else {
            const char *from = end;
            while (from > json && from[-1] != '\n' && end - from < NEAR_BEFORE)
                from--;
            while (from < end && (*from == ' ' || *from == '\t'))
                from++;
            char near[NEAR_BEFORE + NEAR_AFTER + 1];
            size_t k = 0;
            for (const char *q = from; q < lim && q < end + NEAR_AFTER && *q && *q != '\n' && *q != '\r'; q++)
                near[k++] = (*q >= 0x20 && *q < 0x7f) ? *q : '?';
            near[k] = '\0';
            ss_msgf(err, n, "invalid JSON at line %d, column %d (near: %s)", line, col, near);
        }
        return SS_ERR_CONFIG;
    }
    ss_err_t rc = SS_OK;
    if (!cJSON_IsObject(root)) {
        ss_msgf(err, n, "the top level must be a JSON object, got %s", json_kind(root));
        rc = SS_ERR_CONFIG;
    } else {
        walk_t w = { SS_SCOPE_DAEMON, c, 0, err, n };
        if (walk_object(&w, root, ""))
            rc = SS_ERR_CONFIG;
    }
    cJSON_Delete(root);
    if (rc == SS_OK)
        rc = ss_config_validate(c, err, n);
    return rc;
}

ss_err_t ss_config_load_file(const char *path, ss_config_t *c, char *err, size_t n)
{
    if (!path || !c) {
        ss_msgf(err, n, "no config file given");
        return SS_ERR_INVALID;
    }
    FILE *f = fopen(path, "rb");
    if (!f) {
        ss_msgf(err, n, "%s: cannot open: %s", path, strerror(errno));
        return SS_ERR_IO;
    }
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        ss_msgf(err, n, "%s: not a regular file", path);
        fclose(f);
        return SS_ERR_IO;
    }
    if ((uint64_t)st.st_size > SS_CONFIG_FILE_MAX) {
        ss_msgf(err, n, "%s: %lld bytes, a config file may have at most %u", path,
                (long long)st.st_size, SS_CONFIG_FILE_MAX);
        fclose(f);
        return SS_ERR_IO;
    }
    size_t size = (size_t)st.st_size;
    char *buf = malloc(size + 1);
    if (!buf) {
        ss_msgf(err, n, "%s: out of memory", path);
        fclose(f);
        return SS_ERR_NOMEM;
    }
    size_t got = fread(buf, 1, size, f);
    int rerr = ferror(f);
    fclose(f);
    if (rerr || got != size) {
        ss_msgf(err, n, "%s: read error", path);
        free(buf);
        return SS_ERR_IO;
    }
    buf[size] = '\0';
    char inner[512];
    ss_err_t rc = ss_config_load_string(buf, size, c, inner, sizeof inner);
    free(buf);
    if (rc != SS_OK)
        ss_msgf(err, n, "%s: %s", path, inner);
    return rc;
}

/* ======================================================================
 * validation
 * ==================================================================== */

/* A feed name as PROTOCOL.md §2 allows it: 1-63 bytes of A-Z a-z 0-9
 * _ - . (the key's size caps the length). */
static int name_ok(const char *s)
{
    if (!*s)
        return 0;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              *s == '_' || *s == '-' || *s == '.'))
            return 0;
    return 1;
}

static int endpoint_ok(const char *e)
{
    const char *sep = strstr(e, "://");
    return sep && sep > e && sep[3] != '\0';
}

/* Whether a ZeroMQ endpoint is reachable from this host only: ipc://,
 * inproc://, or tcp:// on 127.x.x.x, localhost or [::1] (an interface
 * name or 0.0.0.0 / * is not). */
static int endpoint_local(const char *e)
{
    if (strncmp(e, "tcp://", 6) != 0)
        return strncmp(e, "ipc://", 6) == 0 || strncmp(e, "inproc://", 9) == 0;
    const char *h = e + 6;
    return strncmp(h, "127.", 4) == 0 || strncmp(h, "localhost:", 10) == 0 ||
           strncmp(h, "[::1]:", 6) == 0;
}

/* Cross-key checks of one feed. */
static int check_feed(const ss_config_t *c, int i, char *err, size_t n)
{
    const ss_feed_cfg_t *f = &c->feeds[i];
    const ss_pipeline_cfg_t *p = &f->pipeline;

    if (!name_ok(f->name)) {
        ss_msgf(err, n, "feeds[%d].name: \"%s\" is not a valid feed name (letters, digits, '_', '-', '.')",
                i, f->name);
        return -1;
    }
    for (int j = 0; j < i; j++)
        if (strcmp(c->feeds[j].name, f->name) == 0) {
            ss_msgf(err, n, "feeds[%d].name: \"%s\" is also the name of feeds[%d]", i, f->name, j);
            return -1;
        }
    if ((f->wcs_scale_low > 0.0) != (f->wcs_scale_high > 0.0) ||
        f->wcs_scale_low > f->wcs_scale_high) {
        ss_msgf(err, n, "feeds[%d].wcs.solve_scale_high: %g is not at least wcs.solve_scale_low "
                "%g (or one is 0: give both or neither)", i, f->wcs_scale_high, f->wcs_scale_low);
        return -1;
    }
    if (f->wcs_solve && !f->wcs_solver[0]) {
        ss_msgf(err, n, "feeds[%d].wcs.solve_program: empty with wcs.solve on", i);
        return -1;
    }

    if ((uint64_t)f->max_width * (uint64_t)f->max_height > SS_MAX_FRAME_PIXELS) {
        ss_msgf(err, n, "feeds[%d].limits: %dx%d is more than %llu pixels", i, f->max_width,
                f->max_height, (unsigned long long)SS_MAX_FRAME_PIXELS);
        return -1;
    }

    /* source */
    switch (f->source) {
    case SS_SOURCE_SYNTH: {
        const ss_synth_cfg_t *g = &f->synth.gen;
        if (g->width > f->max_width || g->height > f->max_height) {
            ss_msgf(err, n,
                    "feeds[%d].source.synth: %dx%d frames exceed limits.max_width x max_height %dx%d",
                    i, g->width, g->height, f->max_width, f->max_height);
            return -1;
        }
        if ((uint64_t)g->n_hot > (uint64_t)g->width * (uint64_t)g->height / 4) {
            ss_msgf(err, n, "feeds[%d].source.synth.n_hot: %d is more than a quarter of the pixels",
                    i, g->n_hot);
            return -1;
        }
        if (g->flux_min > g->flux_max) {
            ss_msgf(err, n, "feeds[%d].source.synth.flux_min: above flux_max", i);
            return -1;
        }
        if (g->streak_len_min > g->streak_len_max) {
            ss_msgf(err, n, "feeds[%d].source.synth.streak_len_min: above streak_len_max", i);
            return -1;
        }
        break;
    }
    case SS_SOURCE_ZMQ:
        if (!endpoint_ok(f->zmq.endpoint)) {
            ss_msgf(err, n, "feeds[%d].source.zmq.endpoint: \"%s\" is not a ZeroMQ endpoint (transport://address)",
                    i, f->zmq.endpoint);
            return -1;
        }
        break;
    case SS_SOURCE_INDI:
        if (!f->indi.host[0] && !f->indi.local[0]) {
            ss_msgf(err, n, "feeds[%d].source.indi.host: required (or source.indi.local)", i);
            return -1;
        }
        if (!f->indi.blob[0]) {
            ss_msgf(err, n, "feeds[%d].source.indi.blob: required", i);
            return -1;
        }
        if (f->indi.active && !f->indi.device[0]) {
            ss_msgf(err, n, "feeds[%d].source.indi.device: required in active mode", i);
            return -1;
        }
        if (strpbrk(f->indi.device, "<>&\"") || strpbrk(f->indi.blob, "<>&\"")) {
            ss_msgf(err, n, "feeds[%d].source.indi: device and blob names may not hold < > & \"", i);
            return -1;
        }
        break;
    case SS_SOURCE_FITS: {
        const ss_fits_source_cfg_t *s = &f->fits;
        static const char *const need[] = { "path", "list", "pattern" };
        const char *have[] = { s->path, s->list, s->pattern };
        if ((int)s->mode >= 0 && (int)s->mode < 3 && !*have[s->mode]) {
            ss_msgf(err, n, "feeds[%d].source.fits.%s: required in %s mode", i, need[s->mode],
                    s->mode == SS_FITS_DIRECTORY ? "directory" : s->mode == SS_FITS_LIST ? "list" : "glob");
            return -1;
        }
        if (s->after == SS_FITS_MOVE) {
            if (!*s->move_dir) {
                ss_msgf(err, n, "feeds[%d].source.fits.move_dir: required when after is \"move\"", i);
                return -1;
            }
            if (s->mode == SS_FITS_DIRECTORY && strcmp(s->move_dir, s->path) == 0) {
                ss_msgf(err, n, "feeds[%d].source.fits.move_dir: must differ from the watched path", i);
                return -1;
            }
        }
        break;
    }
    }

    /* pipeline */
    size_t bl = strlen(p->phot.band);
    if (bl == 0 || strspn(p->phot.band, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789") != bl) {
        ss_msgf(err, n, "feeds[%d].pipeline.photometry.band: \"%s\" is not a band name (letters and digits)",
                i, p->phot.band);
        return -1;
    }
    if (p->thresh_low > p->thresh) {
        ss_msgf(err, n, "feeds[%d].pipeline.detect.thresh_low: %g is above detect.thresh %g", i,
                p->thresh_low, p->thresh);
        return -1;
    }
    if ((p->roi_w == 0) != (p->roi_h == 0)) {
        ss_msgf(err, n, "feeds[%d].pipeline.roi: w and h must both be 0 (whole frame) or both positive", i);
        return -1;
    }
    if (p->roi_w > 0 && ((long)p->roi_x + p->roi_w > f->max_width ||
                         (long)p->roi_y + p->roi_h > f->max_height)) {
        ss_msgf(err, n, "feeds[%d].pipeline.roi: [%d, %d, %d, %d] reaches beyond limits.max_width x max_height %dx%d",
                i, p->roi_x, p->roi_y, p->roi_w, p->roi_h, f->max_width, f->max_height);
        return -1;
    }
    if (p->roi_w > 0 && f->source == SS_SOURCE_SYNTH &&
        ((long)p->roi_x + p->roi_w > f->synth.gen.width ||
         (long)p->roi_y + p->roi_h > f->synth.gen.height)) {
        ss_msgf(err, n, "feeds[%d].pipeline.roi: [%d, %d, %d, %d] reaches beyond the %dx%d synthetic frames",
                i, p->roi_x, p->roi_y, p->roi_w, p->roi_h, f->synth.gen.width, f->synth.gen.height);
        return -1;
    }
    if (p->min_history > p->history) {
        ss_msgf(err, n, "feeds[%d].pipeline.min_history: %d is above history %d", i, p->min_history,
                p->history);
        return -1;
    }
    if (p->mode == SS_WHITEN_POLY && p->history < ss_poly_terms(p->poly_degree)) {
        ss_msgf(err, n, "feeds[%d].pipeline.history: %d frames cannot fit the %d terms of whiten.degree %d",
                i, p->history, ss_poly_terms(p->poly_degree), p->poly_degree);
        return -1;
    }

    /* sinks: two feeds appending to one file would interleave lines */
    for (int j = 0; j < i && *f->jsonl_path; j++)
        if (strcmp(c->feeds[j].jsonl_path, f->jsonl_path) == 0) {
            ss_msgf(err, n, "feeds[%d].sinks.jsonl.path: \"%s\" is also used by feeds[%d]", i,
                    f->jsonl_path, j);
            return -1;
        }
    return 0;
}

ss_err_t ss_config_validate(const ss_config_t *c, char *err, size_t n)
{
    if (!c) {
        ss_msgf(err, n, "no config given");
        return SS_ERR_INVALID;
    }
    size_t nd, nf;
    const ss_config_key_t *dk = ss_config_keys(SS_SCOPE_DAEMON, &nd);
    const ss_config_key_t *fk = ss_config_keys(SS_SCOPE_FEED, &nf);
    for (size_t k = 0; k < nd; k++)
        if (check_stored(&dk[k], c, 0, err, n))
            return SS_ERR_CONFIG;
    if (c->n_feeds < 1) {
        ss_msgf(err, n, "feeds: at least one feed is required");
        return SS_ERR_CONFIG;
    }
    if (c->n_feeds > SS_MAX_FEEDS) {
        ss_msgf(err, n, "feeds: %d feeds given, at most %d are supported", c->n_feeds, SS_MAX_FEEDS);
        return SS_ERR_CONFIG;
    }
    for (int i = 0; i < c->n_feeds; i++)
        for (size_t k = 0; k < nf; k++)
            if (check_stored(&fk[k], &c->feeds[i], i, err, n))
                return SS_ERR_CONFIG;

    /* daemon-wide */
    if (*c->control_endpoint && !endpoint_ok(c->control_endpoint)) {
        ss_msgf(err, n, "control.endpoint: \"%s\" is not a ZeroMQ endpoint (transport://address)",
                c->control_endpoint);
        return SS_ERR_CONFIG;
    }
    if (!*c->curve_key != !*c->client_keys) {
        ss_msgf(err, n, "%s: required with %s", *c->curve_key ? "security.client_keys" :
                "security.curve_key", *c->curve_key ? "security.curve_key" : "security.client_keys");
        return SS_ERR_CONFIG;
    }
    if (*c->control_endpoint && !endpoint_local(c->control_endpoint) && !*c->curve_key) {
        ss_msgf(err, n, "control.endpoint: \"%s\" is reachable from other hosts: it needs CURVE "
                "(security.curve_key and security.client_keys), or bind it to "
                "tcp://127.0.0.1:PORT or ipc://", c->control_endpoint);
        return SS_ERR_CONFIG;
    }
    if (*c->publish_endpoint && !endpoint_ok(c->publish_endpoint)) {
        ss_msgf(err, n, "publish.endpoint: \"%s\" is not a ZeroMQ endpoint (transport://address)",
                c->publish_endpoint);
        return SS_ERR_CONFIG;
    }
    for (int i = 0; i < c->n_feeds; i++)
        if (check_feed(c, i, err, n))
            return SS_ERR_CONFIG;

    /* every endpoint this daemon binds must be distinct */
    const char *bound[2 + SS_MAX_FEEDS];
    char names[2 + SS_MAX_FEEDS][PATH_TEXT_MAX];
    int nb = 0;
    if (*c->control_endpoint) {
        bound[nb] = c->control_endpoint;
        ss_strlcpy(names[nb++], "control.endpoint", PATH_TEXT_MAX);
    }
    if (*c->publish_endpoint) {
        bound[nb] = c->publish_endpoint;
        ss_strlcpy(names[nb++], "publish.endpoint", PATH_TEXT_MAX);
    }
    for (int i = 0; i < c->n_feeds; i++) {
        const ss_feed_cfg_t *f = &c->feeds[i];
        if (f->source == SS_SOURCE_ZMQ && f->zmq.bind) {
            bound[nb] = f->zmq.endpoint;
            snprintf(names[nb++], PATH_TEXT_MAX, "feeds[%d].source.zmq.endpoint", i);
        }
    }
    for (int a = 1; a < nb; a++)
        for (int b = 0; b < a; b++)
            if (strcmp(bound[a], bound[b]) == 0) {
                ss_msgf(err, n, "%s: \"%s\" is also bound as %s", names[a], bound[a], names[b]);
                return SS_ERR_CONFIG;
            }
    return SS_OK;
}

/* ======================================================================
 * printing
 * ==================================================================== */

static void sb_value(sb_t *s, const ss_config_key_t *k, const void *base)
{
    const void *p = cfield(base, k);
    char num[32];
    switch (k->type) {
    case SS_KEY_BOOL: sb_puts(s, *(const int *)p ? "true" : "false"); break;
    case SS_KEY_INT: sb_printf(s, "%d", *(const int *)p); break;
    case SS_KEY_U64: sb_printf(s, "%llu", (unsigned long long)*(const uint64_t *)p); break;
    case SS_KEY_DOUBLE:
        fmt_double(num, sizeof num, *(const double *)p);
        sb_puts(s, isfinite(*(const double *)p) ? num : "null");
        break;
    case SS_KEY_STRING: {
        char tmp[SS_PATH_MAX + 1];
        size_t len = strnlen(p, k->size);
        len = SS_MIN(len, sizeof tmp - 1);
        memcpy(tmp, p, len);
        tmp[len] = '\0';
        sb_json_string(s, tmp);
        break;
    }
    case SS_KEY_ENUM: {
        const char *nm = enum_name(k, *(const int *)p);
        sb_json_string(s, nm ? nm : "?");
        break;
    }
    case SS_KEY_INT4: {
        const int *a = p;
        sb_printf(s, "[%d, %d, %d, %d]", a[0], a[1], a[2], a[3]);
        break;
    }
    }
}

/* Print the members of rows [lo, hi), all of whose paths start with prefix
 * (a dotted prefix ending in '.', or ""), one per line at indent; a run of
 * rows sharing the next segment becomes a nested object. Returns the
 * number of members printed. */
static int sb_members(sb_t *s, const ss_config_key_t *keys, size_t lo, size_t hi, const char *prefix,
                      const void *base, int indent)
{
    size_t plen = strlen(prefix);
    int count = 0;
    for (size_t i = lo; i < hi;) {
        const char *rest = keys[i].path + plen;
        const char *dot = strchr(rest, '.');
        if (count++)
            sb_puts(s, ",\n");
        sb_indent(s, indent);
        if (!dot) {
            sb_json_string(s, rest);
            sb_puts(s, ": ");
            sb_value(s, &keys[i], base);
            i++;
            continue;
        }
        char sub[PATH_TEXT_MAX];
        snprintf(sub, sizeof sub, "%.*s", (int)(dot - keys[i].path + 1), keys[i].path);
        size_t j = i;
        while (j < hi && strncmp(keys[j].path, sub, strlen(sub)) == 0)
            j++;
        char seg[64];
        snprintf(seg, sizeof seg, "%.*s", (int)(dot - rest), rest);
        sb_json_string(s, seg);
        sb_puts(s, ": {\n");
        sb_members(s, keys, i, j, sub, base, indent + 2);
        sb_puts(s, "\n");
        sb_indent(s, indent);
        sb_puts(s, "}");
        i = j;
    }
    return count;
}

char *ss_config_to_json(const ss_config_t *c)
{
    if (!c)
        return NULL;
    sb_t s = { 0 };
    size_t nd, nf;
    const ss_config_key_t *dk = ss_config_keys(SS_SCOPE_DAEMON, &nd);
    const ss_config_key_t *fk = ss_config_keys(SS_SCOPE_FEED, &nf);
    sb_puts(&s, "{\n");
    if (sb_members(&s, dk, 0, nd, "", c, 2))
        sb_puts(&s, ",\n");
    sb_puts(&s, "  \"feeds\": [");
    int nfeeds = SS_CLAMP(c->n_feeds, 0, SS_MAX_FEEDS);
    for (int i = 0; i < nfeeds; i++) {
        sb_puts(&s, i ? ",\n    {\n" : "\n    {\n");
        sb_members(&s, fk, 0, nf, "", &c->feeds[i], 6);
        sb_puts(&s, "\n    }");
    }
    sb_puts(&s, nfeeds ? "\n  ]\n}\n" : "]\n}\n");
    return sb_finish(&s);
}

/* ======================================================================
 * comparing and reloading
 * ==================================================================== */

static int key_equal(const ss_config_key_t *k, const void *a, const void *b)
{
    if (k->type == SS_KEY_STRING)
        return strncmp(cfield(a, k), cfield(b, k), k->size) == 0;
    return memcmp(cfield(a, k), cfield(b, k), field_size(k)) == 0;
}

int ss_config_equal(const ss_config_t *a, const ss_config_t *b)
{
    size_t nd, nf;
    const ss_config_key_t *dk = ss_config_keys(SS_SCOPE_DAEMON, &nd);
    const ss_config_key_t *fk = ss_config_keys(SS_SCOPE_FEED, &nf);
    for (size_t k = 0; k < nd; k++)
        if (!key_equal(&dk[k], a, b))
            return 0;
    if (a->n_feeds != b->n_feeds)
        return 0;
    for (int i = 0; i < a->n_feeds && i < SS_MAX_FEEDS; i++)
        for (size_t k = 0; k < nf; k++)
            if (!key_equal(&fk[k], &a->feeds[i], &b->feeds[i]))
                return 0;
    return 1;
}

int ss_config_diff_nonreloadable(const ss_config_t *old, const ss_config_t *neu, char *which, size_t n)
{
    size_t nd, nf;
    const ss_config_key_t *dk = ss_config_keys(SS_SCOPE_DAEMON, &nd);
    const ss_config_key_t *fk = ss_config_keys(SS_SCOPE_FEED, &nf);
    int count = 0;
    char first[PATH_TEXT_MAX] = "";
    for (size_t k = 0; k < nd; k++)
        if (!dk[k].reloadable && !key_equal(&dk[k], old, neu) && !count++)
            key_display(first, sizeof first, &dk[k], 0);
    if (old->n_feeds != neu->n_feeds && !count++)
        ss_strlcpy(first, "feeds", sizeof first);
    int common = SS_CLAMP(SS_MIN(old->n_feeds, neu->n_feeds), 0, SS_MAX_FEEDS);
    for (int i = 0; i < common; i++)
        for (size_t k = 0; k < nf; k++)
            if (!fk[k].reloadable && !key_equal(&fk[k], &old->feeds[i], &neu->feeds[i]) && !count++)
                key_display(first, sizeof first, &fk[k], i);
    if (which && n)
        ss_strlcpy(which, first, n);
    return count;
}

void ss_config_apply_reloadable(ss_config_t *cur, const ss_config_t *neu)
{
    size_t nd, nf;
    const ss_config_key_t *dk = ss_config_keys(SS_SCOPE_DAEMON, &nd);
    const ss_config_key_t *fk = ss_config_keys(SS_SCOPE_FEED, &nf);
    for (size_t k = 0; k < nd; k++)
        if (dk[k].reloadable)
            memcpy(field(cur, &dk[k]), cfield(neu, &dk[k]), field_size(&dk[k]));
    int common = SS_CLAMP(SS_MIN(cur->n_feeds, neu->n_feeds), 0, SS_MAX_FEEDS);
    for (int i = 0; i < common; i++)
        for (size_t k = 0; k < nf; k++)
            if (fk[k].reloadable)
                memcpy(field(&cur->feeds[i], &fk[k]), cfield(&neu->feeds[i], &fk[k]),
                       field_size(&fk[k]));
}

/* ======================================================================
 * Markdown key reference
 * ==================================================================== */

/* Table-cell text: '|' would end the cell, '<' open an HTML tag
 * ("residual.<feed>" would vanish) and '*' start emphasis, so escape them. */
static void sb_cell(sb_t *s, const char *text)
{
    for (const char *p = text; *p; p++) {
        if (*p == '|')
            sb_puts(s, "\\|");
        else if (*p == '<')
            sb_puts(s, "&lt;");
        else if (*p == '*')
            sb_puts(s, "\\*");
        else
            sb_put(s, p, 1);
    }
}

static const char *type_word(const ss_config_key_t *k)
{
    switch (k->type) {
    case SS_KEY_BOOL: return "bool";
    case SS_KEY_INT:
    case SS_KEY_U64: return "integer";
    case SS_KEY_DOUBLE: return k->nullable ? "number or null" : "number";
    case SS_KEY_STRING: return "string";
    case SS_KEY_ENUM: return "enum";
    case SS_KEY_INT4: return "[x, y, w, h]";
    }
    return "?";
}

static void sb_doc_rows(sb_t *s, ss_key_scope_t scope)
{
    size_t nk;
    const ss_config_key_t *keys = ss_config_keys(scope, &nk);
    /* The defaults come from a defaulted struct, printed as JSON values. */
    ss_config_t *c = malloc(sizeof *c);
    if (!c) {
        s->failed = 1;
        return;
    }
    ss_config_defaults(c);
    const void *base = scope == SS_SCOPE_DAEMON ? (const void *)c : (const void *)&c->feeds[0];
    sb_puts(s, "| Key | Type | Default | Range or values | Reload | Meaning |\n");
    sb_puts(s, "|---|---|---|---|---|---|\n");
    for (size_t i = 0; i < nk; i++) {
        const ss_config_key_t *k = &keys[i];
        sb_printf(s, "| `%s` | %s | `", k->path, type_word(k));
        sb_value(s, k, base);
        sb_puts(s, "` | ");
        char lo[32], hi[32], names[256];
        switch (k->type) {
        case SS_KEY_INT:
        case SS_KEY_U64:
        case SS_KEY_DOUBLE:
        case SS_KEY_INT4:
            fmt_double(lo, sizeof lo, k->min);
            fmt_double(hi, sizeof hi, k->max);
            sb_printf(s, "%s to %s%s", lo, hi, k->type == SS_KEY_INT4 ? " each" : "");
            break;
        case SS_KEY_ENUM:
            enum_list(k, names, sizeof names);
            sb_cell(s, names);
            break;
        case SS_KEY_STRING: sb_printf(s, "up to %zu characters", k->size - 1); break;
        case SS_KEY_BOOL: sb_puts(s, "true, false"); break;
        }
        sb_printf(s, " | %s | ", k->reloadable ? "yes" : "no");
        sb_cell(s, k->doc);
        sb_puts(s, " |\n");
    }
    free(c);
}

char *ss_config_doc_markdown(void)
{
    sb_t s = { 0 };
    sb_puts(&s, "<!-- generated by ss_config_doc_markdown() from config/config_keys.c; do not edit -->\n\n"
                "A config file is one JSON object. Dotted keys below are nested objects "
                "(`pipeline.registration.levels` is written `{\"pipeline\": {\"registration\": "
                "{\"levels\": 2}}}`). A key that is absent keeps its default; unknown keys, wrong "
                "types and values out of range are errors that name the key. "
                "`skysieved --print-default-config` prints every key at its default. "
                "Keys marked *Reload: yes* take effect on SIGHUP (or the `reload` command); "
                "changing any other key needs a restart.\n\n");
    sb_puts(&s, "#### Daemon keys (top level)\n\n");
    sb_doc_rows(&s, SS_SCOPE_DAEMON);
    sb_printf(&s, "\n#### Feed keys (each element of `feeds`, 1 to %d feeds)\n\n"
                  "Each element of the `feeds` array starts from these defaults. The numbers in "
                  "brackets are the sections of ALGORITHM.md.\n\n",
              SS_MAX_FEEDS);
    sb_doc_rows(&s, SS_SCOPE_FEED);
    return sb_finish(&s);
}

/* ======================================================================
 * derived values
 * ==================================================================== */

ss_pipeline_cfg_t ss_feed_pipeline_cfg(const ss_config_t *c, int i)
{
    ss_pipeline_cfg_t p = c->feeds[i].pipeline;
    int k = 0;
    for (int j = 0; j < SS_CLAMP(c->n_feeds, 0, SS_MAX_FEEDS); j++) {
        const ss_pipeline_cfg_t *q = &c->feeds[j].pipeline;
        k += q->backend != SS_BACKEND_CPU && q->device == p.device;
    }
    p.device_feeds = k > 0 ? k : 1;
    return p;
}

size_t ss_feed_max_pixel_bytes(const ss_feed_cfg_t *f)
{
    return (size_t)f->max_width * (size_t)f->max_height * sizeof(float);
}

size_t ss_feed_max_message_bytes(const ss_feed_cfg_t *f)
{
    return (size_t)f->max_header_bytes + ss_feed_max_pixel_bytes(f) +
           (size_t)f->max_width * (size_t)f->max_height;
}

void ss_feed_synth_cfg(const ss_feed_cfg_t *f, ss_synth_cfg_t *out)
{
    *out = f->synth.gen;
    if (out->frame_interval <= 0.0)
        out->frame_interval = f->synth.rate > 0.0 ? 1.0 / f->synth.rate : 1.0;
}

int ss_feed_synth_defaults(ss_synth_cfg_t *out)
{
    ss_config_t *c = malloc(sizeof *c);
    if (!c)
        return -1;
    ss_config_defaults(c);
    ss_feed_synth_cfg(&c->feeds[0], out);
    free(c);
    return 0;
}

int ss_publish_sndhwm(uint64_t byte_budget, size_t msg_bytes)
{
    uint64_t hwm = msg_bytes ? byte_budget / msg_bytes : (uint64_t)INT_MAX;
    if (hwm < SS_PUBLISH_MIN_HWM)
        hwm = SS_PUBLISH_MIN_HWM;
    return hwm > (uint64_t)INT_MAX ? INT_MAX : (int)hwm;
}

const char *ss_source_type_name(ss_source_type_t t)
{
    const ss_config_key_t *k = find_key(SS_SCOPE_FEED, "source.type");
    const char *nm = k ? enum_name(k, (int)t) : NULL;
    return nm ? nm : "?";
}

const char *ss_queue_policy_name(ss_queue_policy_t p)
{
    const ss_config_key_t *k = find_key(SS_SCOPE_FEED, "queue.policy");
    const char *nm = k ? enum_name(k, (int)p) : NULL;
    return nm ? nm : "?";
}

/* ======================================================================
 * paths on this machine
 * ==================================================================== */

/* 0 when path is a directory this process may use with mode (R_OK or
 * W_OK, and X_OK); else -1 with "<key>: <path>: <reason>" in err. */
static int dir_usable(const char *key, const char *path, int mode, char *err, size_t n)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        ss_msgf(err, n, "%s: %s: %s", key, path, strerror(errno));
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) {
        ss_msgf(err, n, "%s: %s is not a directory", key, path);
        return -1;
    }
    if (access(path, mode | X_OK) != 0) {
        ss_msgf(err, n, "%s: %s is not %s: %s", key, path,
                mode == W_OK ? "writable" : "readable", strerror(errno));
        return -1;
    }
    return 0;
}

/* The JSON-lines file: its directory writable, the file writable if it
 * is there. */
static int jsonl_usable(const char *key, const char *path, char *err, size_t n)
{
    char dir[SS_PATH_MAX];
    ss_strlcpy(dir, path, sizeof dir);
    char *slash = strrchr(dir, '/');
    if (!slash)
        ss_strlcpy(dir, ".", sizeof dir);
    else if (slash == dir)
        dir[1] = '\0';
    else
        *slash = '\0';
    if (dir_usable(key, dir, W_OK, err, n) != 0)
        return -1;
    if (access(path, F_OK) == 0 && access(path, W_OK) != 0) {
        ss_msgf(err, n, "%s: %s is not writable: %s", key, path, strerror(errno));
        return -1;
    }
    return 0;
}

ss_err_t ss_config_check_paths(const ss_config_t *c, char *err, size_t n)
{
    char key[96];
    if (c->client_keys[0] && dir_usable("security.client_keys", c->client_keys, R_OK, err, n))
        return SS_ERR_CONFIG;
    if (c->curve_key[0] && access(c->curve_key, R_OK) != 0) {
        ss_msgf(err, n, "security.curve_key: %s: %s", c->curve_key, strerror(errno));
        return SS_ERR_CONFIG;
    }
    for (int i = 0; i < c->n_feeds; i++) {
        const ss_feed_cfg_t *f = &c->feeds[i];
#define KEY(k) (snprintf(key, sizeof key, "feeds[%d].%s", i, (k)), key)
        if (f->fits_dir[0] && dir_usable(KEY("sinks.fits.dir"), f->fits_dir, W_OK, err, n))
            return SS_ERR_CONFIG;
        if (f->jsonl_path[0] && jsonl_usable(KEY("sinks.jsonl.path"), f->jsonl_path, err, n))
            return SS_ERR_CONFIG;
        if (f->ds9_dir[0] && dir_usable(KEY("sinks.ds9.dir"), f->ds9_dir, W_OK, err, n))
            return SS_ERR_CONFIG;
        if (f->iod_path[0] && jsonl_usable(KEY("sinks.iod.path"), f->iod_path, err, n))
            return SS_ERR_CONFIG;
        if (f->ades_path[0] && jsonl_usable(KEY("sinks.ades.path"), f->ades_path, err, n))
            return SS_ERR_CONFIG;
        if (f->wcs_solve && !ss_solve_available(f->wcs_solver)) {
            ss_msgf(err, n, "%s: \"%s\" %s (Debian: apt install astrometry.net)",
                    KEY("wcs.solve"), f->wcs_solver,
                    strchr(f->wcs_solver, '/') ? "is not executable" : "is not found on PATH");
            return SS_ERR_CONFIG;
        }
        if (f->wcs_solve && f->wcs_index_dir[0] &&
            dir_usable(KEY("wcs.solve_index_dir"), f->wcs_index_dir, R_OK, err, n))
            return SS_ERR_CONFIG;
        if (f->source != SS_SOURCE_FITS)
            continue;
        const ss_fits_source_cfg_t *s = &f->fits;
        if (s->mode == SS_FITS_DIRECTORY &&
            dir_usable(KEY("source.fits.path"), s->path, R_OK, err, n))
            return SS_ERR_CONFIG;
        if (s->mode == SS_FITS_LIST && access(s->list, R_OK) != 0) {
            ss_msgf(err, n, "%s: %s: %s", KEY("source.fits.list"), s->list, strerror(errno));
            return SS_ERR_CONFIG;
        }
        if (s->after == SS_FITS_MOVE &&
            dir_usable(KEY("source.fits.move_dir"), s->move_dir, W_OK, err, n))
            return SS_ERR_CONFIG;
#undef KEY
    }
    return SS_OK;
}

int ss_config_control_endpoint(const char *configured, char *out, size_t n, char *why,
                               size_t why_n)
{
    static const char prefix[] = "ipc://";
    ss_strlcpy(out, configured, n);
    if (strncmp(configured, prefix, strlen(prefix)) != 0)
        return 0;
    char dir[SS_ENDPOINT_MAX];
    ss_strlcpy(dir, configured + strlen(prefix), sizeof dir);
    char *slash = strrchr(dir, '/');
    if (!slash || slash == dir)
        return 0;
    *slash = '\0';
    if (access(dir, W_OK | X_OK) == 0)
        return 0;
    ss_msgf(why, why_n, "%s: %s", dir, strerror(errno));
    const char *rt = getenv("XDG_RUNTIME_DIR");
    if (!rt || !rt[0] || access(rt, W_OK | X_OK) != 0)
        rt = "/tmp";
    snprintf(out, n, "ipc://%s/skysieve-control", rt);
    return 1;
}

ss_err_t ss_config_load_checked(const char *path, ss_config_t *c, char *err, size_t n)
{
    ss_err_t e = ss_config_load_file(path, c, err, n);
    if (e != SS_OK)
        return e;
    char perr[512];
    if ((e = ss_config_check_paths(c, perr, sizeof perr)) != SS_OK)
        ss_msgf(err, n, "%s: %s", path, perr);
    return e;
}
