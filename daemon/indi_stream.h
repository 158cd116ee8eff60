/*
 * indi_stream.h — the INDI client's side of an indiserver connection, as
 * a stream of bytes in and BLOBs out (the INDI source, source_indi.c, and
 * its tests and fuzz target use it; it does no I/O).
 *
 * The XML is parsed by expat. The INDI stream is a sequence of top-level
 * elements with no root: the parser is fed a synthetic "<indi>" root first.
 * Of the elements it looks at setBLOBVector only, and in it each oneBLOB:
 *   - of the wanted device ("" = any) and vector name (source.indi.blob);
 *   - base64 text: decoded as it streams in, straight into the buffer
 *     the caller lends for that BLOB (no copy of the text is kept);
 *   - attached="true" (the local socket): no text, the bytes are in a
 *     memfd passed beside the XML; the caller takes the fd in order.
 * A BLOB's bytes are `len` (the compressed size of a .fits.fz; `size` is
 * the uncompressed one), or `size` when len is absent; decoded bytes past
 * them are dropped (truncated to len), fewer is a malformed stream.
 *
 * Malformed (SS_ERR_FORMAT from ss_indi_stream_feed, the reason in why;
 * the caller restarts the connection and resets the stream): XML that
 * expat refuses, a oneBLOB without a name or with a size/len that is not
 * a decimal count (or over SS_INDI_LEN_MAX), base64 that is not base64,
 * cut short (not a whole number of 4-symbol groups) or, for a BLOB stored,
 * ending short of len, more than SS_INDI_MARKUP_MAX bytes of markup
 * (anything but BLOB text) inside one top-level element, or a top-level
 * element that is not an element (text outside elements is whitespace).
 */
#ifndef SS_INDI_STREAM_H
#define SS_INDI_STREAM_H

#include <stddef.h>
#include <stdint.h>

#include "pipeline/ss_common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SS_INDI_NAME_MAX 128                /* device, vector, element names, format */
#define SS_INDI_MARKUP_MAX ((size_t)1 << 20) /* markup bytes in one top-level element */
#define SS_INDI_LEN_MAX ((size_t)1 << 40)   /* a size or len beyond this is nonsense */

/* One oneBLOB, as its attributes say. */
typedef struct ss_indi_blob {
    char device[SS_INDI_NAME_MAX];  /* the setBLOBVector's device */
    char vector[SS_INDI_NAME_MAX];  /* its name ("CCD1") */
    char name[SS_INDI_NAME_MAX];    /* the oneBLOB's name */
    char format[SS_INDI_NAME_MAX];  /* ".fits", ".fits.fz", ... */
    size_t size;                    /* uncompressed bytes */
    size_t len;                     /* bytes sent: len, else size */
    int attached;                   /* attached="true": bytes in a passed memfd */
    int wanted;                     /* of the wanted device and vector */
} ss_indi_blob_t;

typedef struct ss_indi_stream_ops {
    /* A wanted, not attached BLOB starts: where its b->len bytes go (the
     * caller's, at least b->len bytes, valid until blob_done), or NULL to
     * skip it (too large, say: its text is still checked, not stored). */
    uint8_t *(*blob_buffer)(void *user, const ss_indi_blob_t *b);
    /* A oneBLOB ended. Attached ones (wanted or not: each has its fd, the
     * caller takes the next one): data NULL. Wanted ones with a buffer:
     * data is it, n = b->len bytes. Wanted ones skipped: not called. */
    void (*blob_done)(void *user, const ss_indi_blob_t *b, const uint8_t *data, size_t n);
    void *user;
} ss_indi_stream_ops_t;

typedef struct ss_indi_stream ss_indi_stream_t;

/* A parser for the BLOBs of device (NULL or "" = any) named vector; NULL
 * when out of memory. ops is copied. */
ss_indi_stream_t *ss_indi_stream_new(const char *device, const char *vector,
                                     const ss_indi_stream_ops_t *ops);
/* Free; NULL and *s NULL accepted; *s is nulled. */
void ss_indi_stream_destroy(ss_indi_stream_t **s);
/* Start over, as for a new connection (a BLOB half received is dropped). */
ss_err_t ss_indi_stream_reset(ss_indi_stream_t *s);
/* Parse the next n bytes of the stream: SS_OK, or SS_ERR_FORMAT with the
 * reason in why (then reset before feeding more), or SS_ERR_NOMEM. */
ss_err_t ss_indi_stream_feed(ss_indi_stream_t *s, const char *buf, size_t n, char *why,
                             size_t why_n);
/* Whether the stream is inside a top-level element (a message half
 * received: a connection that ends now ended mid-message). */
int ss_indi_stream_mid_message(const ss_indi_stream_t *s);
/* Whether a wanted BLOB was lent a buffer (blob_buffer) and not handed
 * over (blob_done): its text cut short by the connection's end, or a
 * malformed stream. 1 with *b its attributes and *got the bytes decoded
 * so far; 0 otherwise (also after a reset). b and got may be NULL. */
int ss_indi_stream_blob_pending(const ss_indi_stream_t *s, ss_indi_blob_t *b, size_t *got);
/* Whether expat's reparse deferral (2.6 and some 2.5.0 updates) is there
 * and so switched off in every stream: 1 yes, 0 the library has none. */
int ss_indi_stream_reparse_switch(void);

#ifdef __cplusplus
}
#endif
#endif
