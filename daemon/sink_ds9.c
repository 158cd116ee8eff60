/*
 * sink_ds9.c — a frame's detections and track reports as a SAOImage DS9
 * region file (format version 4.1, ds9.si.edu/doc/ref/region.html), to
 * look at a residual or its input with the results on it:
 *   point   circle(x, y, r)            green, r = 2·a (at least 3 px)
 *   cosmic  circle(x, y, r)            magenta
 *   streak  line(x0, y0, x1, y1)       cyan, "# line=0 0" (no arrows)
 *   vanished (sign -1)                 red, the same shapes
 *   track   segment(x1, y1, x2, y2...) yellow, its latest points, the text
 *                                      "track <id>" (a circle when it has
 *                                      one point only)
 * A detection with a magnitude (photometry.h) has it as its text
 * ("17.43"), a track with one "track <id> 17.43".
 * in image coordinates, which DS9 counts from 1: skysieve's 0-based pixel
 * x is DS9's x + 1. Written under a hidden name and linked into place like
 * the residual files, named like them with ".reg".
 */
#include "daemon.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define TAG "ds9-sink"
#define MIN_RADIUS 3.0              /* px: a circle one can see around a faint point */

static const char *det_colour(const ss_detection_t *d)
{
    if (d->sign < 0)
        return "red";
    return d->kind == SS_KIND_COSMIC ? "magenta" : d->kind == SS_KIND_STREAK ? "cyan" : "green";
}

/* " text={17.43}" for a known magnitude, else "" (into buf, n bytes). */
static const char *mag_text(char *buf, size_t n, double mag)
{
    if (!isfinite(mag))
        return "";
    snprintf(buf, n, " text={%.2f}", mag);
    return buf;
}

/* One detection's region line. */
static void det_region(FILE *fp, const ss_detection_t *d)
{
    char text[40];
    if (d->kind == SS_KIND_STREAK)
        fprintf(fp, "line(%.2f,%.2f,%.2f,%.2f) # line=0 0 color=%s%s\n", d->x0 + 1, d->y0 + 1,
                d->x1 + 1, d->y1 + 1, det_colour(d), mag_text(text, sizeof text, d->mag));
    else
        fprintf(fp, "circle(%.2f,%.2f,%.2f) # color=%s%s\n", d->x + 1, d->y + 1,
                d->a * 2 > MIN_RADIUS ? d->a * 2 : MIN_RADIUS, det_colour(d),
                mag_text(text, sizeof text, d->mag));
}

/* A track's label: "track <id>", with its magnitude when known. */
static const char *track_text(char *buf, size_t n, const ss_track_t *t)
{
    if (isfinite(t->mag))
        snprintf(buf, n, "track %llu %.2f", (unsigned long long)t->id, t->mag);
    else
        snprintf(buf, n, "track %llu", (unsigned long long)t->id);
    return buf;
}

/* One track's region line: its latest points as a segment. */
static void track_region(FILE *fp, const ss_track_t *t)
{
    char text[64];
    if (t->n_points < 2) {
        fprintf(fp, "circle(%.2f,%.2f,%.2f) # color=yellow text={%s}\n", t->x + 1, t->y + 1,
                MIN_RADIUS, track_text(text, sizeof text, t));
        return;
    }
    fputs("segment(", fp);
    for (int i = 0; i < t->n_points; i++)
        fprintf(fp, "%s%.2f,%.2f", i ? "," : "", t->points[i].x + 1, t->points[i].y + 1);
    fprintf(fp, ") # color=yellow text={%s}\n", track_text(text, sizeof text, t));
}

int ss_ds9_regions(FILE *fp, const ss_result_t *res)
{
    char input[SS_INPUT_MAX];
    fputs("# Region file format: DS9 version 4.1\n", fp);
    fprintf(fp, "# skysieve: feed %s seq %llu input %s, %d detections, %d track reports\n",
            res->meta.feed, (unsigned long long)res->meta.seq,
            ss_proto_input(&res->meta, input, sizeof input), res->dets.count, res->tracks.count);
    fputs("global color=green width=1 font=\"helvetica 10 normal roman\" select=1 highlite=1 "
          "dash=0 fixed=0 edit=1 move=1 delete=1 include=1 source=1\n",
          fp);
    fputs("image\n", fp);
    for (int i = 0; i < res->dets.count; i++)
        det_region(fp, &res->dets.items[i]);
    for (int i = 0; i < res->tracks.count; i++)
        track_region(fp, &res->tracks.items[i]);
    return ferror(fp) ? -1 : 0;
}

int ss_sink_ds9_write(const char *dir, const ss_result_t *res, const char *feed)
{
    char tmp[2 * SS_PATH_MAX + 16];
    snprintf(tmp, sizeof tmp, "%s/.%s-%010llu.reg.part", dir, feed,
             (unsigned long long)res->meta.seq);
    FILE *fp = fopen(tmp, "w");
    if (!fp) {
        SS_LOG(SS_LOG_ERR, TAG, "feed %s: cannot create %s: %s", feed, tmp, strerror(errno));
        return -1;
    }
    int bad = ss_ds9_regions(fp, res);
    if (fclose(fp) != 0 || bad) {
        SS_LOG(SS_LOG_ERR, TAG, "feed %s: writing %s failed: %s", feed, tmp, strerror(errno));
        unlink(tmp);
        return -1;
    }
    return ss_sink_place(tmp, dir, feed, res, ".reg", TAG);
}
