/*
 * indi_stream.c — INDI's XML stream to BLOBs, through expat (contract in
 * indi_stream.h).
 *
 * Depths: 1 the synthetic root, 2 a message (setBLOBVector, defNumber-
 * Vector, message, ...), 3 its members (oneBLOB). The base64 text of a
 * oneBLOB is decoded in the character-data handler, four symbols at a
 * time, into the caller's buffer; nothing of it is kept.
 */
#include "indi_stream.h"

#ifndef SS_EXPAT_REPARSE_SWITCH
#include <dlfcn.h>
#endif
#include <pthread.h>

#include <expat.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ROOT "<indi>"
#define WHY_MAX 200

/* base64 symbol values; -1 not base64, -2 whitespace, -3 padding */
static signed char b64_value(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return (signed char)(c - 'A');
    if (c >= 'a' && c <= 'z')
        return (signed char)(c - 'a' + 26);
    if (c >= '0' && c <= '9')
        return (signed char)(c - '0' + 52);
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    if (c == ' ' || c == '\n' || c == '\r' || c == '\t')
        return -2;
    return c == '=' ? -3 : -1;
}

struct ss_indi_stream {
    XML_Parser xp;
    ss_indi_stream_ops_t ops;
    char device[SS_INDI_NAME_MAX];  /* "" = any */
    char vector[SS_INDI_NAME_MAX];
    int depth;
    int in_set_blob;                /* inside a setBLOBVector */
    int in_blob;                    /* inside a oneBLOB of it */
    ss_indi_blob_t blob;            /* the current setBLOBVector / oneBLOB */
    uint8_t *out;                   /* the caller's buffer, NULL: not stored */
    size_t out_n;                   /* bytes decoded so far */
    unsigned char quad[4];
    int qn;                         /* symbols in quad */
    int pads;                       /* '=' seen: the text has ended */
    uint64_t fed;                   /* bytes given to expat, the root included */
    uint64_t blob_chars;            /* of them, BLOB text */
    uint64_t mark_fed, mark_blob;   /* the same at the end of the last message */
    int failed;
    char why[WHY_MAX];
};

/* Stop the parse: the stream is malformed for the reason given (the
 * first reason is kept). */
static void fail(ss_indi_stream_t *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(ss_indi_stream_t *s, const char *fmt, ...)
{
    if (!s->failed) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(s->why, sizeof s->why, fmt, ap);
        va_end(ap);
        s->failed = 1;
    }
    XML_StopParser(s->xp, XML_FALSE);
}
#define FAIL(...) do { fail(__VA_ARGS__); return; } while (0)

static const char *attr(const XML_Char **atts, const char *name)
{
    for (int i = 0; atts[i]; i += 2)
        if (strcmp(atts[i], name) == 0)
            return atts[i + 1];
    return NULL;
}

/* A decimal count of bytes (digits only, at most SS_INDI_LEN_MAX): 0, or -1. */
static int parse_count(const char *t, size_t *v)
{
    size_t x = 0;
    if (!t || !*t || strspn(t, "0123456789") != strlen(t) || strlen(t) > 13)
        return -1;
    for (; *t; t++)
        x = x * 10 + (size_t)(*t - '0');
    if (x > SS_INDI_LEN_MAX)
        return -1;
    *v = x;
    return 0;
}

/* Copy a name; 1 when it fit, 0 when it was cut (then it matches nothing). */
static int copy_name(char *dst, const char *src)
{
    ss_strlcpy(dst, src ? src : "", SS_INDI_NAME_MAX);
    return !src || strlen(src) < SS_INDI_NAME_MAX;
}

static void start_set_blob(ss_indi_stream_t *s, const XML_Char **atts)
{
    memset(&s->blob, 0, sizeof s->blob);
    const int fits = copy_name(s->blob.device, attr(atts, "device")) &
                     copy_name(s->blob.vector, attr(atts, "name"));
    s->in_set_blob = 1;
    s->blob.wanted = fits && (!s->device[0] || strcmp(s->device, s->blob.device) == 0) &&
                     strcmp(s->vector, s->blob.vector) == 0;
}

static void start_one_blob(ss_indi_stream_t *s, const XML_Char **atts)
{
    ss_indi_blob_t *b = &s->blob;
    const char *name = attr(atts, "name"), *len = attr(atts, "len"), *at = attr(atts, "attached");
    if (!name)
        FAIL(s, "oneBLOB without a name");
    if (parse_count(attr(atts, "size"), &b->size) != 0)
        FAIL(s, "oneBLOB %s: size is not a byte count", name);
    if (len && parse_count(len, &b->len) != 0)
        FAIL(s, "oneBLOB %s: len is not a byte count", name);
    if (!len)
        b->len = b->size;
    (void)copy_name(b->name, name);
    (void)copy_name(b->format, attr(atts, "format"));
    b->attached = at && strcmp(at, "true") == 0;
    s->in_blob = 1;
    s->out = NULL;
    s->out_n = 0;
    s->qn = s->pads = 0;
    if (b->wanted && !b->attached && s->ops.blob_buffer)
        s->out = s->ops.blob_buffer(s->ops.user, b);
}

static void XMLCALL on_start(void *user, const XML_Char *el, const XML_Char **atts)
{
    ss_indi_stream_t *s = user;
    s->depth++;
    if (s->in_blob)
        FAIL(s, "an element inside a oneBLOB: <%s>", el);
    if (s->depth == 2 && strcmp(el, "setBLOBVector") == 0)
        start_set_blob(s, atts);
    else if (s->depth == 3 && s->in_set_blob && strcmp(el, "oneBLOB") == 0)
        start_one_blob(s, atts);
}

static void end_one_blob(ss_indi_stream_t *s)
{
    ss_indi_blob_t *b = &s->blob;
    s->in_blob = 0;
    if (b->attached) {
        if (s->ops.blob_done)
            s->ops.blob_done(s->ops.user, b, NULL, 0);
        return;
    }
    if (s->qn != 0)
        FAIL(s, "oneBLOB %s: base64 text cut short (%d symbols left over)", b->name, s->qn);
    if (s->out && s->out_n < b->len)       /* a BLOB not stored is not held to len */
        FAIL(s, "oneBLOB %s: the text ends short of len (%zu bytes of %zu)", b->name, s->out_n,
             b->len);
    if (s->out && s->ops.blob_done)
        s->ops.blob_done(s->ops.user, b, s->out, b->len);
    s->out = NULL;
}

static void XMLCALL on_end(void *user, const XML_Char *el)
{
    ss_indi_stream_t *s = user;
    if (s->depth == 3 && s->in_blob)
        end_one_blob(s);
    else if (s->depth == 2) {
        s->in_set_blob = 0;
        s->mark_fed = (uint64_t)XML_GetCurrentByteIndex(s->xp);
        s->mark_blob = s->blob_chars;
    }
    (void)el;
    s->depth--;
}

/* One decoded byte: stored while within len, counted always. */
static void put_byte(ss_indi_stream_t *s, unsigned v)
{
    if (s->out && s->out_n < s->blob.len)
        s->out[s->out_n] = (uint8_t)v;
    s->out_n++;
}

/* A full quad of symbols (pads of them '='). */
static void put_quad(ss_indi_stream_t *s)
{
    const unsigned v = (unsigned)s->quad[0] << 18 | (unsigned)s->quad[1] << 12 |
                       (unsigned)s->quad[2] << 6 | s->quad[3];
    put_byte(s, v >> 16 & 0xff);
    if (s->pads < 2)
        put_byte(s, v >> 8 & 0xff);
    if (s->pads < 1)
        put_byte(s, v & 0xff);
    s->qn = 0;
}

static void blob_text(ss_indi_stream_t *s, const XML_Char *t, int n)
{
    s->blob_chars += (uint64_t)n;
    for (int i = 0; i < n && !s->failed; i++) {
        const signed char v = b64_value((unsigned char)t[i]);
        if (v == -2)
            continue;
        if (v == -1 || s->blob.attached)
            FAIL(s, "oneBLOB %s: text that is not base64", s->blob.name);
        if (v == -3) {
            /* "xx==" or "xxx=": padding ends the text */
            if (s->qn < 2)
                FAIL(s, "oneBLOB %s: misplaced base64 padding", s->blob.name);
            s->quad[s->qn++] = 0;
            s->pads++;
            if (s->qn == 4)
                put_quad(s);
            continue;
        }
        if (s->pads)
            FAIL(s, "oneBLOB %s: base64 text after its padding", s->blob.name);
        s->quad[s->qn++] = (unsigned char)v;
        if (s->qn == 4)
            put_quad(s);
    }
}

static void XMLCALL on_text(void *user, const XML_Char *t, int n)
{
    ss_indi_stream_t *s = user;
    if (s->in_blob) {
        blob_text(s, t, n);
        return;
    }
    if (s->depth == 1)
        for (int i = 0; i < n; i++)
            if (b64_value((unsigned char)t[i]) != -2)
                FAIL(s, "text outside a message");
}

/* expat 2.6 (and Debian 12's later security updates of 2.5.0, whose
 * header still says 2.5.0) defers re-parsing a token that a buffer cut
 * until more input has come: a message's closing tags, and so its BLOB,
 * would wait for the next message, and a malformed tail would not be
 * refused until then. Where the header declares the switch (CMake's
 * check) it is called directly, which also holds for a static libexpat;
 * otherwise it is looked up at run time, because the library the daemon
 * runs with may be newer than the header it was built against. */
typedef XML_Bool (*reparse_fn)(XML_Parser, XML_Bool);
static reparse_fn reparse_switch;
static pthread_once_t reparse_once = PTHREAD_ONCE_INIT;

static void reparse_lookup(void)
{
#ifdef SS_EXPAT_REPARSE_SWITCH
    reparse_switch = XML_SetReparseDeferralEnabled;
#else
    void *f = dlsym(RTLD_DEFAULT, "XML_SetReparseDeferralEnabled");
    memcpy(&reparse_switch, &f, sizeof reparse_switch);
#endif
}

int ss_indi_stream_reparse_switch(void)
{
    pthread_once(&reparse_once, reparse_lookup);
    return reparse_switch != NULL;
}

/* The parser as callbacks need it: handlers, user data, and every
 * complete token reported as soon as it has been fed. */
static void set_handlers(ss_indi_stream_t *s)
{
    if (ss_indi_stream_reparse_switch())
        (void)reparse_switch(s->xp, XML_FALSE);
    XML_SetUserData(s->xp, s);
    XML_SetElementHandler(s->xp, on_start, on_end);
    XML_SetCharacterDataHandler(s->xp, on_text);
}

ss_indi_stream_t *ss_indi_stream_new(const char *device, const char *vector,
                                     const ss_indi_stream_ops_t *ops)
{
    ss_indi_stream_t *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->ops = *ops;
    ss_strlcpy(s->device, device ? device : "", sizeof s->device);
    ss_strlcpy(s->vector, vector ? vector : "", sizeof s->vector);
    s->xp = XML_ParserCreate("UTF-8");
    if (!s->xp || ss_indi_stream_reset(s) != SS_OK) {
        ss_indi_stream_destroy(&s);
        return NULL;
    }
    return s;
}

void ss_indi_stream_destroy(ss_indi_stream_t **ps)
{
    if (!ps || !*ps)
        return;
    if ((*ps)->xp)
        XML_ParserFree((*ps)->xp);
    free(*ps);
    *ps = NULL;
}

ss_err_t ss_indi_stream_reset(ss_indi_stream_t *s)
{
    if (!XML_ParserReset(s->xp, "UTF-8"))
        return SS_ERR_NOMEM;
    set_handlers(s);
    s->depth = 0;
    s->in_set_blob = s->in_blob = 0;
    s->out = NULL;
    s->fed = s->blob_chars = s->mark_fed = s->mark_blob = 0;
    s->failed = 0;
    s->why[0] = '\0';
    s->fed = strlen(ROOT);
    return XML_Parse(s->xp, ROOT, (int)strlen(ROOT), 0) == XML_STATUS_OK ? SS_OK : SS_ERR_NOMEM;
}

ss_err_t ss_indi_stream_feed(ss_indi_stream_t *s, const char *buf, size_t n, char *why,
                             size_t why_n)
{
    if (s->failed) {
        ss_msgf(why, why_n, "%s (the stream was not reset)", s->why);
        return SS_ERR_FORMAT;
    }
    while (n > 0) {
        const int k = n > (1u << 20) ? 1 << 20 : (int)n;
        s->fed += (uint64_t)k;
        if (XML_Parse(s->xp, buf, k, 0) != XML_STATUS_OK) {
            if (!s->failed) {
                if (XML_GetErrorCode(s->xp) == XML_ERROR_NO_MEMORY)
                    return SS_ERR_NOMEM;
                ss_msgf(s->why, sizeof s->why, "not XML: %s (line %lu)",
                        XML_ErrorString(XML_GetErrorCode(s->xp)),
                        (unsigned long)XML_GetCurrentLineNumber(s->xp));
                s->failed = 1;
            }
            ss_msgf(why, why_n, "%s", s->why);
            return SS_ERR_FORMAT;
        }
        if (s->fed - s->mark_fed - (s->blob_chars - s->mark_blob) > SS_INDI_MARKUP_MAX) {
            ss_msgf(s->why, sizeof s->why, "a message with more than %zu bytes of markup",
                    SS_INDI_MARKUP_MAX);
            s->failed = 1;
            ss_msgf(why, why_n, "%s", s->why);
            return SS_ERR_FORMAT;
        }
        buf += k;
        n -= (size_t)k;
    }
    return SS_OK;
}

int ss_indi_stream_mid_message(const ss_indi_stream_t *s)
{
    return s->depth >= 2;
}

int ss_indi_stream_blob_pending(const ss_indi_stream_t *s, ss_indi_blob_t *b, size_t *got)
{
    if (!s->out)                    /* nulled by blob_done's hand-over and by a reset */
        return 0;
    if (b)
        *b = s->blob;
    if (got)
        *got = SS_MIN(s->out_n, s->blob.len);
    return 1;
}
