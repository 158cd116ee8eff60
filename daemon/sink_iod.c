/*
 * sink_iod.c — satellite observations as IOD lines (the 80-column
 * Interactive Orbit Determination format of G. D. Lewis, 1998, clarified
 * 2002, as SeeSat-L and stvid use it), one per streak and per detection of
 * a fast track, for frames with a celestial WCS and a time:
 *
 *   cols  1-15  "99999 00 000UNK": not identified (object number and
 *               international designation unknown)
 *   cols 17-20  station number (sinks.iod.station)
 *   col     22  sky condition: G (skysieve cannot judge it)
 *   cols 24-40  UTC YYYYMMDDHHMMSSsss, mid-exposure (a streak's centroid is
 *               where the object was then)
 *   cols 42-43  time uncertainty M·10^(X-8) s: "17", 0.1 s (the camera's
 *               clock is not known to skysieve)
 *   cols 45-46  angle format 2 (RA HHMMmmm, Dec DDMMmm), epoch 5 (J2000:
 *               ICRS within its precision)
 *   cols 48-61  RA HHMMmmm, sign, Dec DDMMmm
 *   cols 63-64  position uncertainty M·10^(X-8) degrees: half a pixel for a
 *               point, a pixel for a streak, at the frame's pixel scale
 *
 * Lines are appended to sinks.iod.path (opened and closed per frame, so
 * that log rotation needs nothing).
 */
#include "daemon.h"

#include "pipeline/wcs.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#define TAG "iod-sink"

/* v > 0 as the format's M·10^(X-8) code, two digits. */
static void mx_code(double v, char out[3])
{
    int x = 0, m = 1;
    if (v > 0.0 && isfinite(v)) {
        x = (int)floor(log10(v)) + 8;
        m = (int)lround(v / pow(10.0, x - 8));
        if (m >= 10)
            m = 1, x++;
        if (m < 1)
            m = 1;
        x = x < 0 ? 0 : x > 9 ? 9 : x;
    }
    out[0] = (char)('0' + m);
    out[1] = (char)('0' + x);
    out[2] = '\0';
}

int ss_iod_line(char *out, size_t n, int station, double mjd, double ra, double dec,
                double pos_sigma_deg)
{
    char iso[40], t[18] = "";
    ss_mjd_to_iso(mjd, iso, sizeof iso);
    /* "2008-11-22T11:22:33.444Z" -> "20081122112233444" */
    size_t k = 0;
    for (const char *c = iso; *c && k < 17; c++)
        if (*c >= '0' && *c <= '9')
            t[k++] = *c;
    t[k] = '\0';
    long rt = lround(fmod(fmod(ra, 360.0) + 360.0, 360.0) / 15.0 * 60.0 * 1000.0) % (24L * 60000);
    long dd = lround(fabs(dec) * 60.0 * 100.0);
    char pp[3];
    mx_code(pos_sigma_deg, pp);
    return snprintf(out, n, "99999 00 000UNK %04d G %-17s 17 25 %02ld%05ld%c%02ld%04ld %s",
                    station, t, rt / 60000, rt % 60000, dec < 0 ? '-' : '+', dd / 6000,
                    dd % 6000, pp);
}

/* Whether detection d belongs in the report: a streak, or linked to a
 * track of at least min_rate arcsec/s. */
static int reported(const ss_result_t *res, const ss_detection_t *d, double min_rate)
{
    if (d->sign <= 0 || !d->has_radec)
        return 0;
    if (d->kind == SS_KIND_STREAK)
        return 1;
    for (int i = 0; d->track && i < res->tracks.count; i++) {
        const ss_track_t *t = &res->tracks.items[i];
        if (t->id == d->track)
            return t->has_rate && t->rate >= min_rate;
    }
    return 0;
}

int ss_iod_write(FILE *fp, const ss_result_t *res, int station, double min_rate)
{
    if (!isfinite(res->meta.mjd_obs) || res->meta.n_wcs == 0)
        return 0;
    ss_wcs_t w;
    if (ss_wcs_from_meta(&w, &res->meta, NULL, 0) != SS_OK)
        return 0;
    const double mjd = ss_frame_mid_mjd(&res->meta);
    int lines = 0;
    for (int i = 0; i < res->dets.count; i++) {
        const ss_detection_t *d = &res->dets.items[i];
        if (!reported(res, d, min_rate))
            continue;
        double sigma_px = d->kind == SS_KIND_STREAK ? 1.0 : 0.5;
        char line[96];
        ss_iod_line(line, sizeof line, station, mjd, d->ra, d->dec,
                    sigma_px * ss_wcs_pixel_scale(&w, d->x, d->y));
        fprintf(fp, "%s\n", line);
        lines++;
    }
    ss_wcs_free(&w);
    return ferror(fp) ? -1 : lines;
}

int ss_sink_iod_append(const char *path, const ss_result_t *res, int station, double min_rate)
{
    FILE *fp = fopen(path, "a");
    if (!fp) {
        SS_LOG(SS_LOG_ERR, TAG, "cannot open %s: %s", path, strerror(errno));
        return -1;
    }
    int lines = ss_iod_write(fp, res, station, min_rate);
    if (fclose(fp) != 0 || lines < 0) {
        SS_LOG(SS_LOG_ERR, TAG, "%s: write failed: %s", path, strerror(errno));
        return -1;
    }
    return lines;
}
