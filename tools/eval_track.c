/*
 * eval_track.c — the track figures of skysieve-eval (contract in
 * eval_track.h; definitions in docs/QUALITY.md, "Tracks").
 */
#include "tools/eval_track.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

const double ss_evt_speed_bins[SS_EVT_SPEED_BINS] = { 0.2, 0.5, 1, 3, 10, 30, 100, 300 };

/* ---- collecting ---------------------------------------------------------- */

/* Room for one more element of size sz in *arr (count n, capacity *cap). */
static int grow(void **arr, long n, long *cap, size_t sz)
{
    if (n < *cap)
        return 0;
    long nc = *cap ? 2 * *cap : 256;
    void *p = realloc(*arr, (size_t)nc * sz);
    if (!p)
        return -1;
    *arr = p;
    *cap = nc;
    return 0;
}

long ss_evt_add_det(ss_evt_t *e, const ss_evt_det_t *d)
{
    if (grow((void **)&e->dets, e->n_dets, &e->cap_dets, sizeof *e->dets) != 0)
        return -1;
    e->dets[e->n_dets] = *d;
    return e->n_dets++;
}

int ss_evt_add_sample(ss_evt_t *e, const ss_evt_sample_t *s)
{
    if (grow((void **)&e->samples, e->n_samples, &e->cap_samples, sizeof *e->samples) != 0)
        return -1;
    e->samples[e->n_samples++] = *s;
    return 0;
}

/* The track of this id, newest first (reports come in frame order, so a
 * live track is near the end); NULL when new. */
static ss_evt_track_t *find_track(const ss_evt_t *e, uint64_t id)
{
    for (long i = e->n_tracks - 1; i >= 0; i--)
        if (e->tracks[i].id == id)
            return &e->tracks[i];
    return NULL;
}

int ss_evt_add_report(ss_evt_t *e, const ss_track_t *r)
{
    ss_evt_track_t *t = find_track(e, r->id);
    if (!t) {
        if (grow((void **)&e->tracks, e->n_tracks, &e->cap_tracks, sizeof *e->tracks) != 0)
            return -1;
        t = &e->tracks[e->n_tracks++];
        memset(t, 0, sizeof *t);
        t->id = r->id;
    }
    t->last = *r;
    e->reports++;
    int np = SS_CLAMP(r->n_points, 0, SS_TRACK_POINTS);
    for (int i = 0; i < np; i++) {
        const ss_track_point_t *p = &r->points[i];
        if (t->n_pts > 0 && p->seq <= t->pts[t->n_pts - 1].seq)
            continue;                   /* held already (points are oldest first) */
        long cap = t->cap_pts;
        if (grow((void **)&t->pts, t->n_pts, &cap, sizeof *t->pts) != 0)
            return -1;
        t->cap_pts = (int)cap;
        t->pts[t->n_pts++] = *p;
    }
    return 0;
}

void ss_evt_free(ss_evt_t *e)
{
    for (long i = 0; i < e->n_tracks; i++)
        free(e->tracks[i].pts);
    free(e->tracks);
    free(e->dets);
    free(e->samples);
    memset(e, 0, sizeof *e);
}

int ss_evt_speed_bin(double v)
{
    if (!(v > 0.0))
        return 0;
    int best = 0;
    for (int i = 1; i < SS_EVT_SPEED_BINS; i++)
        if (fabs(log(v / ss_evt_speed_bins[i])) < fabs(log(v / ss_evt_speed_bins[best])))
            best = i;   /* strict: a tie goes to the lower bin */
    return best;
}

/* ---- crediting detections to tracks ------------------------------------ */

typedef struct seq_ix {
    uint64_t seq;
    long i;
} seq_ix_t;

static int cmp_seq_ix(const void *a, const void *b)
{
    const seq_ix_t *x = a, *y = b;
    if (x->seq != y->seq)
        return x->seq < y->seq ? -1 : 1;
    return (x->i > y->i) - (x->i < y->i);
}

/* First element of by[0..n) with seq >= s. */
static long lower_seq(const seq_ix_t *by, long n, uint64_t s)
{
    long lo = 0, hi = n;
    while (lo < hi) {
        long mid = lo + (hi - lo) / 2;
        if (by[mid].seq < s)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* cred[i] = the track detection i is credited to: its own id, or the
 * track whose points name it (same seq, within SS_EVT_POS_TOL px);
 * shared[i] = a second track whose points name it (a blend two tracks
 * share), else 0. */
static int credit(const ss_evt_t *e, uint64_t *cred, uint64_t *shared)
{
    seq_ix_t *by = malloc((size_t)(e->n_dets > 0 ? e->n_dets : 1) * sizeof *by);
    if (!by)
        return -1;
    for (long i = 0; i < e->n_dets; i++) {
        cred[i] = e->dets[i].track;
        shared[i] = 0;
        by[i] = (seq_ix_t){ e->dets[i].seq, i };
    }
    qsort(by, (size_t)e->n_dets, sizeof *by, cmp_seq_ix);
    for (long t = 0; t < e->n_tracks; t++) {
        const ss_evt_track_t *tr = &e->tracks[t];
        for (int p = 0; p < tr->n_pts; p++) {
            const ss_track_point_t *pt = &tr->pts[p];
            for (long k = lower_seq(by, e->n_dets, pt->seq);
                 k < e->n_dets && by[k].seq == pt->seq; k++) {
                const long i = by[k].i;
                const ss_evt_det_t *d = &e->dets[i];
                if (fabs(d->x - pt->x) > SS_EVT_POS_TOL || fabs(d->y - pt->y) > SS_EVT_POS_TOL ||
                    cred[i] == tr->id)
                    continue;
                if (cred[i] == 0)
                    cred[i] = tr->id;
                else if (shared[i] == 0 && tr->id != cred[i])
                    shared[i] = tr->id;
                else
                    continue;
                break;
            }
        }
    }
    free(by);
    return 0;
}

/* ---- tracks: purity, false tracks, velocity ----------------------------- */

typedef struct tkey {
    uint64_t id;
    int mover, segment;
    long det;
} tkey_t;

static int cmp_tkey(const void *a, const void *b)
{
    const tkey_t *x = a, *y = b;
    if (x->id != y->id)
        return x->id < y->id ? -1 : 1;
    if (x->mover != y->mover)
        return x->mover < y->mover ? -1 : 1;
    if (x->segment != y->segment)
        return x->segment < y->segment ? -1 : 1;
    return (x->det > y->det) - (x->det < y->det);
}

typedef struct vel_acc {
    double sum2, rel2, rel2_speed[SS_EVT_SPEED_BINS];
    long n_rel;
} vel_acc_t;

/* One track's credited detections k[0..n), sorted by (mover, segment):
 * counted into r; a pure track's velocity into va. */
static void score_track(const ss_evt_t *e, const tkey_t *k, long n, const ss_evt_cfg_t *c,
                        ss_evt_result_t *r, vel_acc_t *va, FILE *cases)
{
    long none = 0, best = 0, best_at = -1;
    for (long a = 0; a < n;) {
        long b = a;
        while (b < n && k[b].mover == k[a].mover && k[b].segment == k[a].segment)
            b++;
        if (k[a].mover < 0)
            none += b - a;
        else if (b - a > best) {
            best = b - a;
            best_at = a;
        }
        a = b;
    }
    r->tracks++;
    int pure = best >= SS_EVT_PURE * (double)n, fals = none > 0.5 * (double)n;
    r->pure += pure;
    r->false_tracks += fals;
    const ss_evt_track_t *tr = find_track(e, k[0].id);
    if (cases && !pure) {
        fprintf(cases, "  track %llu%s: %ld detections:", (unsigned long long)k[0].id,
                fals ? " (false)" : "", n);
        for (long a = 0; a < n;) {
            long b = a;
            while (b < n && k[b].mover == k[a].mover && k[b].segment == k[a].segment)
                b++;
            if (k[a].mover < 0)
                fprintf(cases, " on no mover %ld", b - a);
            else
                fprintf(cases, " mover %d/%d %ld", k[a].mover, k[a].segment, b - a);
            if (a != best_at)           /* where the others are: up to 4 */
                for (long j = a; j < b && j < a + 4; j++)
                    fprintf(cases, " [seq %llu (%.1f, %.1f)]",
                            (unsigned long long)e->dets[k[j].det].seq, e->dets[k[j].det].x,
                            e->dets[k[j].det].y);
            a = b;
        }
        if (tr)
            fprintf(cases, "; %s, seq %llu..%llu, last at (%.1f, %.1f)",
                    ss_kind_name(tr->last.kind), (unsigned long long)tr->last.seq_first,
                    (unsigned long long)tr->last.seq_last, tr->last.x, tr->last.y);
        fprintf(cases, "\n");
    }
    if (!pure || !tr || best_at < 0)
        return;
    double f = 1.0;
    if (tr->last.timed) {
        if (!isfinite(c->frame_interval))
            return;
        f = c->frame_interval;
    }
    const ss_evt_det_t *d = &e->dets[k[best_at].det];
    double ex = tr->last.vx * f - d->vx, ey = tr->last.vy * f - d->vy;
    double err2 = ex * ex + ey * ey, speed = hypot(d->vx, d->vy);
    r->vel_n++;
    va->sum2 += err2;
    if (speed > 0.0) {
        double rel2 = err2 / (speed * speed);
        int sb = ss_evt_speed_bin(speed);
        va->rel2 += rel2;
        va->n_rel++;
        va->rel2_speed[sb] += rel2;
        r->vel_n_speed[sb]++;
        if (cases && rel2 > 0.01)
            fprintf(cases, "  track %llu (mover %d/%d): velocity (%.4f, %.4f) px/frame, truth "
                    "(%.4f, %.4f): %.1f %% off\n", (unsigned long long)k[0].id,
                    k[best_at].mover, k[best_at].segment, tr->last.vx * f, tr->last.vy * f,
                    d->vx, d->vy, 100.0 * sqrt(rel2));
    }
}

/* A shared detection (a blend of two movers) counts for neither track's
 * purity: the truth names one mover for it. */
static int score_tracks(const ss_evt_t *e, const uint64_t *cred, const uint64_t *shared,
                        const ss_evt_cfg_t *c, ss_evt_result_t *r, FILE *cases)
{
    long m = 0;
    tkey_t *k = malloc((size_t)(e->n_dets > 0 ? e->n_dets : 1) * sizeof *k);
    if (!k)
        return -1;
    for (long i = 0; i < e->n_dets; i++)
        if (cred[i] && !shared[i])
            k[m++] = (tkey_t){ cred[i], e->dets[i].mover,
                               e->dets[i].mover >= 0 ? e->dets[i].segment : 0, i };
    qsort(k, (size_t)m, sizeof *k, cmp_tkey);
    vel_acc_t va;
    memset(&va, 0, sizeof va);
    for (long a = 0; a < m;) {
        long b = a;
        while (b < m && k[b].id == k[a].id)
            b++;
        score_track(e, k + a, b - a, c, r, &va, cases);
        a = b;
    }
    free(k);
    r->purity = r->tracks > 0 ? (double)r->pure / r->tracks : NAN;
    r->false_per_100mpix = c->mpix_frames > 0 ? 100.0 * r->false_tracks / c->mpix_frames : NAN;
    r->vel_rms = r->vel_n > 0 ? sqrt(va.sum2 / r->vel_n) : NAN;
    r->vel_rel_rms = va.n_rel > 0 ? sqrt(va.rel2 / va.n_rel) : NAN;
    for (int s = 0; s < SS_EVT_SPEED_BINS; s++)
        r->vel_rel_rms_speed[s] =
            r->vel_n_speed[s] > 0 ? sqrt(va.rel2_speed[s] / r->vel_n_speed[s]) : NAN;
    return 0;
}

/* ---- segments: in one track ------------------------------------------------ */

typedef struct skey {
    int mover, segment;
    uint64_t seq;
    long i;
} skey_t;

static int cmp_skey(const void *a, const void *b)
{
    const skey_t *x = a, *y = b;
    if (x->mover != y->mover)
        return x->mover < y->mover ? -1 : 1;
    if (x->segment != y->segment)
        return x->segment < y->segment ? -1 : 1;
    if (x->seq != y->seq)
        return x->seq < y->seq ? -1 : 1;
    return (x->i > y->i) - (x->i < y->i);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static int cmp_dbl(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The tracks credited with one segment's found detections: ids[0..n)
 * (0 = none), sorted here. Sets the largest count of one track, how many
 * tracks hold >= min_points, and whether any track holds one. */
static void id_counts(uint64_t *ids, long n, int min_points, long *best, int *big, int *any)
{
    qsort(ids, (size_t)n, sizeof *ids, cmp_u64);
    *best = 0;
    *big = *any = 0;
    for (long a = 0; a < n;) {
        long b = a;
        while (b < n && ids[b] == ids[a])
            b++;
        if (ids[a] != 0) {
            *any = 1;
            *best = b - a > *best ? b - a : *best;
            *big += b - a >= min_points;
        }
        a = b;
    }
}

/* One segment: samples k[0..n) of one (mover, segment), seq ascending;
 * snr is scratch of n, ids of 2n. A detection two tracks share counts for
 * both. */
static void score_segment(const ss_evt_t *e, const skey_t *k, long n, const uint64_t *cred,
                          const uint64_t *shared, const ss_evt_cfg_t *c, double *snr,
                          uint64_t *ids, ss_evt_result_t *r, FILE *cases)
{
    long nf = 0, ni = 0;
    for (long j = 0; j < n; j++) {
        const ss_evt_sample_t *s = &e->samples[k[j].i];
        snr[j] = s->snr;
        if (s->det >= 0 && s->det < e->n_dets) {
            nf++;
            ids[ni++] = cred[s->det];
            if (shared[s->det])
                ids[ni++] = shared[s->det];
        }
    }
    if (nf < c->min_points)
        return;
    qsort(snr, (size_t)n, sizeof *snr, cmp_dbl);
    double med = n % 2 ? snr[n / 2] : 0.5 * (snr[n / 2 - 1] + snr[n / 2]);
    const ss_evt_sample_t *s0 = &e->samples[k[0].i];
    int sb = ss_evt_speed_bin(s0->speed);
    long best;
    int big, any;
    id_counts(ids, ni, c->min_points, &best, &big, &any);
    int one = best >= SS_EVT_ONE_TRACK * (double)nf;
    r->segments++;
    r->in_one += one;
    r->split += !one && big >= 2;
    r->untracked += !any;
    r->partial += !one && big < 2 && any;
    r->seg_speed[sb]++;
    r->in_one_speed[sb] += one;
    if (med > SS_EVT_SNR7) {
        r->segments_snr7++;
        r->in_one_snr7 += one;
    }
    if (s0->pair >= 0) {
        r->crossing_segments++;
        r->crossing_in_one += one;
    }
    if (!cases || one)
        return;
    fprintf(cases, "  mover %d/%d%s speed %.3g px/frame SNR %.1f, seq %llu..%llu: %ld found of "
            "%ld seen;", s0->mover, s0->segment, s0->pair >= 0 ? " (crossing)" : "", s0->speed,
            med, (unsigned long long)s0->seq, (unsigned long long)e->samples[k[n - 1].i].seq,
            nf, n);
    for (long a = 0; a < ni;) {
        long b = a;
        while (b < ni && ids[b] == ids[a])
            b++;
        if (ids[a])
            fprintf(cases, " track %llu: %ld", (unsigned long long)ids[a], b - a);
        else
            fprintf(cases, " no track: %ld", b - a);
        a = b;
    }
    fprintf(cases, "\n");
}

static int score_segments(const ss_evt_t *e, const uint64_t *cred, const uint64_t *shared,
                          const ss_evt_cfg_t *c, ss_evt_result_t *r, FILE *cases)
{
    size_t n = (size_t)(e->n_samples > 0 ? e->n_samples : 1);
    skey_t *k = malloc(n * sizeof *k);
    double *snr = malloc(n * sizeof *snr);
    uint64_t *ids = malloc(2 * n * sizeof *ids);
    if (!k || !snr || !ids) {
        free(k);
        free(snr);
        free(ids);
        return -1;
    }
    for (long i = 0; i < e->n_samples; i++)
        k[i] = (skey_t){ e->samples[i].mover, e->samples[i].segment, e->samples[i].seq, i };
    qsort(k, (size_t)e->n_samples, sizeof *k, cmp_skey);
    for (long a = 0; a < e->n_samples;) {
        long b = a;
        while (b < e->n_samples && k[b].mover == k[a].mover && k[b].segment == k[a].segment)
            b++;
        score_segment(e, k + a, b - a, cred, shared, c, snr, ids, r, cases);
        a = b;
    }
    free(k);
    free(snr);
    free(ids);
    r->completeness = r->segments > 0 ? (double)r->in_one / r->segments : NAN;
    r->completeness_snr7 = r->segments_snr7 > 0 ? (double)r->in_one_snr7 / r->segments_snr7 : NAN;
    r->completeness_crossing =
        r->crossing_segments > 0 ? (double)r->crossing_in_one / r->crossing_segments : NAN;
    for (int s = 0; s < SS_EVT_SPEED_BINS; s++)
        r->completeness_speed[s] =
            r->seg_speed[s] > 0 ? (double)r->in_one_speed[s] / r->seg_speed[s] : NAN;
    return 0;
}

int ss_evt_score(const ss_evt_t *e, const ss_evt_cfg_t *c, ss_evt_result_t *r, FILE *cases)
{
    memset(r, 0, sizeof *r);
    const size_t nd = (size_t)(e->n_dets > 0 ? e->n_dets : 1);
    uint64_t *cred = malloc(2 * nd * sizeof *cred), *shared = cred ? cred + nd : NULL;
    if (!cred || credit(e, cred, shared) != 0) {
        free(cred);
        return -1;
    }
    if (cases)
        fprintf(cases, "track cases: segments not in one track (mover/segment)\n");
    int rc = score_segments(e, cred, shared, c, r, cases);
    if (cases && rc == 0)
        fprintf(cases, "track cases: tracks not pure, velocities more than 10 %% off\n");
    if (rc == 0)
        rc = score_tracks(e, cred, shared, c, r, cases);
    free(cred);
    return rc;
}

/* ---- motion of truth files without velocities ------------------------- */

#define PAIR_FRAMES 8               /* velocity candidates from positions this many frames apart */
#define VEL_TOL 2e-3                /* px/frame: candidates this close agree (the truth's
                                     * positions carry 4 decimals) */
#define RECENT_BRANCHES 16          /* as skysieve-synth: a branch seen among the last 16 keeps
                                     * its number */

typedef struct vcand {
    double vx, vy;
} vcand_t;

static int cmp_vx(const void *a, const void *b)
{
    double x = ((const vcand_t *)a)->vx, y = ((const vcand_t *)b)->vx;
    return (x > y) - (x < y);
}

static int cmp_vy(const void *a, const void *b)
{
    double x = ((const vcand_t *)a)->vy, y = ((const vcand_t *)b)->vy;
    return (x > y) - (x < y);
}

/* The densest window of width VEL_TOL in c[0..n) sorted by key (0: vx,
 * 1: vy): its first index and length (the first of equals). */
static void densest(const vcand_t *c, long n, int key, long *at, long *len)
{
    *at = 0;
    *len = n > 0 ? 1 : 0;
    for (long i = 0, j = 0; i < n; i++) {
        double lo = key ? c[i].vy : c[i].vx;
        if (j < i)
            j = i;
        while (j + 1 < n && (key ? c[j + 1].vy : c[j + 1].vx) - lo <= VEL_TOL)
            j++;
        if (j - i + 1 > *len) {
            *at = i;
            *len = j - i + 1;
        }
    }
}

/* The velocity most pairs of positions up to PAIR_FRAMES frames apart
 * agree on (the pairs on one branch all give it; pairs across a wrap give
 * scattered values): the densest vx window, then within it the densest vy
 * window, its mean. Returns 0, or -1 out of memory. */
static int mode_velocity(const uint64_t *seq, const double *px, const double *py, int n,
                         double *vx, double *vy)
{
    vcand_t *c = malloc((size_t)n * PAIR_FRAMES * sizeof *c);
    if (!c)
        return -1;
    long m = 0;
    for (int k = 1; k < n; k++)
        for (int j = k - 1; j >= 0 && j >= k - PAIR_FRAMES; j--) {
            double dt = (double)seq[k] - (double)seq[j];
            if (dt > 0.0)
                c[m++] = (vcand_t){ (px[k] - px[j]) / dt, (py[k] - py[j]) / dt };
        }
    long at, len, at2, len2;
    qsort(c, (size_t)m, sizeof *c, cmp_vx);
    densest(c, m, 0, &at, &len);
    vcand_t *w = c + at;                    /* the vx window, then its densest vy window */
    qsort(w, (size_t)len, sizeof *w, cmp_vy);
    densest(w, len, 1, &at2, &len2);
    w += at2;
    len = len2;
    double sx = 0.0, sy = 0.0;
    for (long i = 0; i < len; i++) {
        sx += w[i].vx;
        sy += w[i].vy;
    }
    *vx = len > 0 ? sx / len : 0.0;
    *vy = len > 0 ? sy / len : 0.0;
    free(c);
    return 0;
}

int ss_evt_derive_motion(const uint64_t *seq, const double *px, const double *py, int n,
                         double *vx, double *vy, int *segment)
{
    *vx = *vy = 0.0;
    if (n <= 0)
        return 0;
    if (n > 1 && mode_velocity(seq, px, py, n, vx, vy) != 0)
        return -1;
    /* the branch of each position: its place less the motion, q = p - v t;
     * a branch within SS_EVT_WRAP_PX of one of the recent ones is that one */
    double bq[RECENT_BRANCHES][2];
    int bseg[RECENT_BRANCHES], nb = 0, next = 0;
    for (int k = 0; k < n; k++) {
        double qx = px[k] - *vx * (double)seq[k], qy = py[k] - *vy * (double)seq[k];
        int b = 0;
        while (b < nb &&
               (fabs(bq[b][0] - qx) > SS_EVT_WRAP_PX || fabs(bq[b][1] - qy) > SS_EVT_WRAP_PX))
            b++;
        segment[k] = b < nb ? bseg[b] : next++;
        if (b == nb && nb < RECENT_BRANCHES)
            nb++;
        for (int j = b < RECENT_BRANCHES ? b : RECENT_BRANCHES - 1; j > 0; j--) {
            bq[j][0] = bq[j - 1][0];
            bq[j][1] = bq[j - 1][1];
            bseg[j] = bseg[j - 1];
        }
        bq[0][0] = qx;
        bq[0][1] = qy;
        bseg[0] = segment[k];
    }
    return 0;
}
