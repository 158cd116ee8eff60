/*
 * fuzz_indi.c — libFuzzer target: the INDI stream parser
 * (daemon/indi_stream.h) on a byte stream as indiserver would send it,
 * fed in chunks whose sizes the first byte picks; the FITS of each BLOB
 * it delivers is opened from memory (ss_fits_image_open_mem).
 */
#include <stdlib.h>
#include <string.h>

#include "daemon/indi_stream.h"
#include "pipeline/frame_fits.h"

enum { BLOB_CAP = 1 << 20 };

static uint8_t *blob_buffer(void *user, const ss_indi_blob_t *b)
{
    return b->len <= BLOB_CAP ? user : NULL;
}

static void blob_done(void *user, const ss_indi_blob_t *b, const uint8_t *data, size_t n)
{
    (void)user;
    (void)b;
    ss_fits_image_t *im;
    char err[512];
    if (data && ss_fits_image_open_mem(data, n, "fuzz", &im, err, sizeof err) == SS_OK)
        ss_fits_image_close(&im);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static uint8_t *buf;
    static ss_indi_stream_t *s;
    if (!buf && !(buf = malloc(BLOB_CAP)))
        abort();
    if (!s) {
        const ss_indi_stream_ops_t ops = { blob_buffer, blob_done, buf };
        if (!(s = ss_indi_stream_new("CCD Simulator", "CCD1", &ops)))
            abort();
    }
    if (size == 0 || ss_indi_stream_reset(s) != SS_OK)
        return 0;
    const size_t chunk = 1 + data[0] % 64u;
    char why[300];
    for (size_t off = 1; off < size; off += chunk) {
        const size_t k = chunk < size - off ? chunk : size - off;
        if (ss_indi_stream_feed(s, (const char *)data + off, k, why, sizeof why) != SS_OK)
            break;
    }
    return 0;
}
