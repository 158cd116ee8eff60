/*
 * sink_ades.c — slow movers as ADES PSV (the IAU Astrometry Data Exchange
 * Standard, pipe-separated form, version 2022, github.com/IAU-ADES): for
 * every detection of a track slower than sinks.iod.min_rate arcsec/s (an
 * asteroid or comet, not a satellite) in a frame with a celestial WCS and
 * a time, one row:
 *
 *   trkSub   "ss" and the track id in base 36 (8 characters at most: the
 *            observer's own designation until the object is identified)
 *   mode     CCD
 *   stn      sinks.ades.stn (the MPC code; XXX, the MPC's code for an
 *            observer without one, by default)
 *   obsTime  mid-exposure UTC, ISO-8601 to the millisecond, Z
 *   ra, dec  degrees (ICRS)
 *   rmsRA, rmsDec  arcsec (rmsRA includes cos dec): half a pixel at the
 *            frame's pixel scale
 *   astCat   sinks.ades.astcat: the catalogue the frames' WCS was fitted
 *            to, which skysieve cannot know
 *   mag, rmsMag  the detection's magnitude and its error (photometry.h),
 *            two decimals, when a zero point was known; else blank
 *   band     pipeline.photometry.band, with a magnitude; else blank
 *   photCat  sinks.ades.astcat again, with a magnitude (the catalogue the
 *            zero point was calibrated against, taken to be the
 *            astrometric one); else blank
 *
 * Blank fields are absent values (ADES PSV: a field may be empty). The
 * columns are those of ADES's optical block in the standard's order.
 *
 * A new (empty) file first gets the header ("# version=2022", the
 * observatory block with the station code) and the column row. Rows are
 * appended per frame, the file opened and closed each time.
 */
#include "daemon.h"

#include "pipeline/wcs.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#define TAG "ades-sink"

static const char COLUMNS[] = "trkSub  |mode|stn |obsTime                 |ra         |dec        "
                              "|rmsRA |rmsDec|astCat  |mag  |rmsMag|band|photCat";

/* "ss" and id in base 36, at most 8 characters. */
static void trk_sub(uint64_t id, char out[9])
{
    char tmp[16];
    int n = 0;
    do {
        int d = (int)(id % 36);
        tmp[n++] = (char)(d < 10 ? '0' + d : 'a' + d - 10);
        id /= 36;
    } while (id && n < 6);
    out[0] = 's', out[1] = 's';
    for (int i = 0; i < n; i++)
        out[2 + i] = tmp[n - 1 - i];
    out[2 + n] = '\0';
}

/* The slow track detection d is linked to, or NULL. */
static const ss_track_t *slow_track(const ss_result_t *res, const ss_detection_t *d,
                                    double max_rate)
{
    if (d->sign <= 0 || !d->has_radec || !d->track)
        return NULL;
    for (int i = 0; i < res->tracks.count; i++) {
        const ss_track_t *t = &res->tracks.items[i];
        if (t->id == d->track)
            return t->has_rate && t->rate < max_rate ? t : NULL;
    }
    return NULL;
}

void ss_ades_header(FILE *fp, const char *stn)
{
    fprintf(fp, "# version=2022\n# observatory\n! mpcCode %s\n"
                "# comment\n! line positions by skysieve from the frames' own WCS\n%s\n",
            stn, COLUMNS);
}

int ss_ades_rows(FILE *fp, const ss_result_t *res, const char *stn, const char *astcat,
                 const char *band, double max_rate)
{
    if (!isfinite(res->meta.mjd_obs) || res->meta.n_wcs == 0)
        return 0;
    ss_wcs_t w;
    if (ss_wcs_from_meta(&w, &res->meta, NULL, 0) != SS_OK)
        return 0;
    char when[40];
    ss_mjd_to_iso(ss_frame_mid_mjd(&res->meta), when, sizeof when);
    int rows = 0;
    for (int i = 0; i < res->dets.count; i++) {
        const ss_detection_t *d = &res->dets.items[i];
        const ss_track_t *t = slow_track(res, d, max_rate);
        if (!t)
            continue;
        char sub[9];
        trk_sub(t->id, sub);
        double rms = 0.5 * ss_wcs_pixel_scale(&w, d->x, d->y) * 3600.0;
        fprintf(fp, "%-8s|CCD |%-4s|%-24s|%-11.7f|%+-11.7f|%-6.3f|%-6.3f|%-8s|", sub, stn, when,
                d->ra, d->dec, rms, rms, astcat);
        if (isfinite(d->mag) && isfinite(d->mag_err))
            fprintf(fp, "%-5.2f|%-6.2f|%-4s|%s\n", d->mag, d->mag_err, band, astcat);
        else
            fprintf(fp, "     |      |    |\n");
        rows++;
    }
    ss_wcs_free(&w);
    return ferror(fp) ? -1 : rows;
}

int ss_sink_ades_append(const char *path, const ss_result_t *res, const char *stn,
                        const char *astcat, const char *band, double max_rate)
{
    FILE *fp = fopen(path, "a");
    if (!fp) {
        SS_LOG(SS_LOG_ERR, TAG, "cannot open %s: %s", path, strerror(errno));
        return -1;
    }
    if (ftell(fp) == 0)
        ss_ades_header(fp, stn);
    int rows = ss_ades_rows(fp, res, stn, astcat, band, max_rate);
    if (fclose(fp) != 0 || rows < 0) {
        SS_LOG(SS_LOG_ERR, TAG, "%s: write failed: %s", path, strerror(errno));
        return -1;
    }
    return rows;
}
