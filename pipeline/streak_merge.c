/*
 * streak_merge.c — one streak, one detection: collinear streak pieces
 * that a gap split are merged (host code, after measurement, shared by
 * both backends).
 *
 * Why: a satellite trail is continuous, but its connected component can
 * break where something takes pixels out of it: a bright star it crosses
 * (the guided filter takes the part on the star for star residual), a
 * column of invalid pixels, a stretch where the trail fades. ALGORITHM §7
 * wants one detection per streak, so pieces that lie on one line with a
 * short gap between facing ends are joined.
 */
#include "stages.h"

#include <math.h>

/* The smallest angle between two axis directions (radians, in [0, π/2]). */
static double axis_angle(double t1, double t2)
{
    double d = fabs(fmod(t1 - t2, M_PI));
    return d > M_PI / 2 ? M_PI - d : d;
}

/* Distance of point (x, y) from the line through (x0, y0) with unit
 * direction (ux, uy). */
static double line_dist(double x, double y, double x0, double y0, double ux, double uy)
{
    return fabs((x - x0) * uy - (y - y0) * ux);
}

static double seg_len(const ss_detection_t *d)
{
    return hypot(d->x1 - d->x0, d->y1 - d->y0);
}

/* Can a and b be one streak? a is the longer piece. */
static int mergeable(const ss_detection_t *a, const ss_detection_t *b, double max_gap,
                     double max_off)
{
    if (a->kind != SS_KIND_STREAK || b->kind != SS_KIND_STREAK || a->sign != b->sign)
        return 0;
    double la = seg_len(a);
    if (la <= 0.0)
        return 0;
    double ux = (a->x1 - a->x0) / la, uy = (a->y1 - a->y0) / la;
    if (axis_angle(atan2(uy, ux), b->theta) > SS_STREAK_MERGE_ANGLE)
        return 0;
    if (line_dist(b->x0, b->y0, a->x0, a->y0, ux, uy) > max_off ||
        line_dist(b->x1, b->y1, a->x0, a->y0, ux, uy) > max_off)
        return 0;
    /* positions along a's axis: a spans [0, la]; the gap is the distance
     * between the intervals (negative when they overlap) */
    double p0 = (b->x0 - a->x0) * ux + (b->y0 - a->y0) * uy;
    double p1 = (b->x1 - a->x0) * ux + (b->y1 - a->y0) * uy;
    double lo = fmin(p0, p1), hi = fmax(p0, p1);
    double gap = lo > la ? lo - la : hi < 0.0 ? -hi : 0.0;
    return gap <= max_gap;
}

/* Fold b into a (a the longer piece). */
static void merge_into(ss_detection_t *a, const ss_detection_t *b)
{
    double la = seg_len(a);
    double ux = (a->x1 - a->x0) / la, uy = (a->y1 - a->y0) / la;
    /* the outermost of the four end points along a's axis */
    double px[4] = { a->x0, a->x1, b->x0, b->x1 }, py[4] = { a->y0, a->y1, b->y0, b->y1 };
    int imin = 0, imax = 0;
    double tmin = 0.0, tmax = 0.0;
    for (int i = 0; i < 4; i++) {
        double t = (px[i] - a->x0) * ux + (py[i] - a->y0) * uy;
        if (i == 0 || t < tmin)
            tmin = t, imin = i;
        if (i == 0 || t > tmax)
            tmax = t, imax = i;
    }
    double wa = a->area, wb = b->area;
    a->x = (a->x * wa + b->x * wb) / (wa + wb);
    a->y = (a->y * wa + b->y * wb) / (wa + wb);
    a->flux += b->flux;
    a->flux_err = hypot(a->flux_err, b->flux_err);
    a->area += b->area;
    if (b->peak_snr > a->peak_snr) {
        a->peak_snr = b->peak_snr;
        a->peak_x = b->peak_x;
        a->peak_y = b->peak_y;
    }
    a->bbox_x0 = SS_MIN(a->bbox_x0, b->bbox_x0);
    a->bbox_y0 = SS_MIN(a->bbox_y0, b->bbox_y0);
    a->bbox_x1 = SS_MAX(a->bbox_x1, b->bbox_x1);
    a->bbox_y1 = SS_MAX(a->bbox_y1, b->bbox_y1);
    a->peak_fraction = fmin(a->peak_fraction, b->peak_fraction);
    a->flags |= b->flags;
    double x0 = px[imin], y0 = py[imin], x1 = px[imax], y1 = py[imax];
    if (x0 > x1) {                      /* the measure convention: x0 <= x1 */
        double t = x0;
        x0 = x1, x1 = t;
        t = y0, y0 = y1, y1 = t;
    }
    a->x0 = x0, a->y0 = y0, a->x1 = x1, a->y1 = y1;
    /* a uniform line of length L has the semi-axis a = L/√12 */
    a->a = fmax(a->a, hypot(x1 - x0, y1 - y0) / sqrt(12.0));
    a->b = fmax(a->b, b->b);
    double th = atan2(y1 - y0, x1 - x0);
    if (th <= -M_PI / 2)
        th += M_PI;
    else if (th > M_PI / 2)
        th -= M_PI;
    a->theta = th;
}

int ss_merge_streaks(ss_detlist_t *l, double max_gap, double max_off)
{
    if (!(max_gap > 0.0))
        return 0;
    /* Only streaks take part: gather their slots first, so that a frame of
     * many points and cosmics (hundreds) costs one pass, and the pairwise
     * scan runs over the few streaks (at most SS_STREAK_MERGE_MAX). */
    int idx[SS_STREAK_MERGE_MAX], ns = 0;
    for (int i = 0; i < l->count && ns < SS_STREAK_MERGE_MAX; i++)
        if (l->items[i].kind == SS_KIND_STREAK)
            idx[ns++] = i;
    int merged = 0, again = ns > 1;
    while (again) {
        again = 0;
        for (int a = 0; a < ns && !again; a++)
            for (int b = a + 1; b < ns && !again; b++) {
                ss_detection_t *da = &l->items[idx[a]], *db = &l->items[idx[b]];
                int a_longer = seg_len(da) >= seg_len(db);
                ss_detection_t *lo = a_longer ? da : db, *sh = a_longer ? db : da;
                if (!mergeable(lo, sh, max_gap, max_off))
                    continue;
                merge_into(lo, sh);
                if (lo != da)           /* keep the earlier slot (list order) */
                    *da = *lo;
                db->area = 0;           /* folded in: removed below */
                for (int k = b + 1; k < ns; k++)
                    idx[k - 1] = idx[k];
                ns--;
                merged++;
                again = 1;
            }
    }
    if (merged) {
        int out = 0;
        for (int i = 0; i < l->count; i++)
            if (l->items[i].area > 0)
                l->items[out++] = l->items[i];
        l->count = out;
    }
    return merged;
}
