/*
 * sink_fits.c — residual frames as FITS files (pipeline/frame_fits.h's
 * ss_fits_write_residual: float32, NaN = invalid, lossless, the shift, its
 * errors, sigma, the weights, the registration status and the input's WCS
 * keywords in the header, CHECKSUM/DATASUM last).
 *
 * Files are <dir>/<feed>-<seq, 10 digits>.fits (.fits.fz when
 * tile-compressed). Each is written under a hidden temporary name and
 * renamed into place, so that a program watching the directory never
 * reads half a file.
 */
#include "daemon.h"

#include "pipeline/frame_fits.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define TAG "fits-sink"

int ss_sink_fits_write(const char *dir, int compress, const ss_result_t *res, const char *feed)
{
    char path[2 * SS_PATH_MAX], tmp[2 * SS_PATH_MAX + 16], err[600];
    snprintf(path, sizeof path, "%s/%s-%010llu.fits%s", dir, feed,
             (unsigned long long)res->meta.seq, compress ? ".fz" : "");
    snprintf(tmp, sizeof tmp, "%s/.%s-%010llu.part", dir, feed, (unsigned long long)res->meta.seq);
    unlink(tmp);
    ss_err_t e = ss_fits_write_residual(tmp, res, compress, err, sizeof err);
    if (e != SS_OK) {
        SS_LOG(SS_LOG_ERR, TAG, "feed %s: %s", feed, err);
        unlink(tmp);
        return -1;
    }
    if (rename(tmp, path) != 0) {
        SS_LOG(SS_LOG_ERR, TAG, "feed %s: cannot rename %s to %s: %s", feed, tmp, path,
               strerror(errno));
        unlink(tmp);
        return -1;
    }
    return 0;
}
