/*
 * sink_fits.c — residual frames as FITS files (pipeline/frame_fits.h's
 * ss_fits_write_residual: float32, NaN = invalid, lossless, the shift, its
 * errors, sigma, the weights, the registration status and the input's WCS
 * keywords in the header, CHECKSUM/DATASUM last).
 *
 * Files are named by ss_residual_file_name (<dir>/<feed>-<seq, 10
 * digits>-<DATE-OBS>.fits, .fits.fz when tile-compressed). Each is written
 * under a hidden temporary name and linked into place — never over an
 * existing file: a name that exists (the same frame twice, say) takes
 * the next "-k" — so that a program watching the directory never reads
 * half a file and no result replaces another.
 */
#include "daemon.h"

#include "pipeline/frame_fits.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define TAG "fits-sink"

#define MAX_TWINS 1000              /* names tried for one frame */

int ss_sink_place(const char *tmp, const char *dir, const char *feed, const ss_result_t *res,
                  const char *ext, const char *tag)
{
    char path[2 * SS_PATH_MAX];
    int rc = -1;
    for (int k = 0; k < MAX_TWINS; k++) {
        if (ss_residual_file_name(path, sizeof path, dir, feed, res->meta.seq, res->meta.mjd_obs,
                                  ext, k) < 0)
            break;
        if (link(tmp, path) == 0) {
            rc = 0;
            break;
        }
        if (errno != EEXIST) {
            SS_LOG(SS_LOG_ERR, tag, "feed %s: cannot link %s to %s: %s", feed, tmp, path,
                   strerror(errno));
            break;
        }
    }
    if (rc != 0 && errno == EEXIST)
        SS_LOG(SS_LOG_ERR, tag, "feed %s: %d files named for seq %llu already: not written", feed,
               MAX_TWINS, (unsigned long long)res->meta.seq);
    unlink(tmp);
    return rc;
}

int ss_sink_fits_write(const char *dir, int compress, const ss_result_t *res, const char *feed)
{
    char tmp[2 * SS_PATH_MAX + 16], err[600];
    snprintf(tmp, sizeof tmp, "%s/.%s-%010llu.part", dir, feed, (unsigned long long)res->meta.seq);
    unlink(tmp);
    ss_err_t e = ss_fits_write_residual(tmp, res, compress, err, sizeof err);
    if (e != SS_OK) {
        SS_LOG(SS_LOG_ERR, TAG, "feed %s: %s", feed, err);
        unlink(tmp);
        return -1;
    }
    return ss_sink_place(tmp, dir, feed, res, compress ? ".fits.fz" : ".fits", TAG);
}
