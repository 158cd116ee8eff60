/*
 * track.c — see track.h; the method and its figures are in README "Tracks".
 */
#include "track.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

const char *ss_track_state_name(ss_track_state_t s)
{
    static const char *const names[] = { "active", "coasting", "ended" };
    return (unsigned)s < 3 ? names[s] : "?";
}

int ss_track_state_parse(const char *s, ss_track_state_t *out)
{
    for (int i = 0; i < 3; i++)
        if (s && strcmp(s, ss_track_state_name((ss_track_state_t)i)) == 0) {
            *out = (ss_track_state_t)i;
            return 0;
        }
    return -1;
}

int ss_track_reports_max(int max_dets)
{
    return (max_dets > 0 ? max_dets : 0) + SS_TRACK_EXTRA;
}

int ss_tracklist_init(ss_tracklist_t *l, int capacity)
{
    memset(l, 0, sizeof *l);
    if (capacity < 0)
        return -1;
    if (capacity > 0 && !(l->items = calloc((size_t)capacity, sizeof *l->items)))
        return -1;
    l->capacity = capacity;
    return 0;
}

void ss_tracklist_free(ss_tracklist_t *l)
{
    if (!l)
        return;
    free(l->items);
    memset(l, 0, sizeof *l);
}

/* ---- the tracker ---------------------------------------------------- */

#define MAX_CONFIRMED 1024      /* confirmed tracks alive */
#define MAX_TENTATIVE 4096      /* tentative tracks alive */
#define MAX_SEEDS 4096          /* unlinked detections of the last frames */
#define PAIRS_PER_DET 16        /* new tentative tracks per detection, nearest seeds first */
#define CENTROID_FLOOR 0.2      /* px: the least position scatter a fit assumes */
#define STREAK_ANGLE 0.26       /* rad (15°): streaks of one track agree in direction */
#define MIN_MOTION 1.0          /* px a confirmed track must have moved */
#define MOTION_SIGNIFICANCE 5.0 /* |v| / its standard error, to confirm */
#define BIRTHS_MEMORY 0.1       /* weight of a frame in the running mean of births */
#define GATE_CANDS 8            /* detections considered per track and frame */
#define GRID_CELL 32.0          /* px: the observations' lookup grid */
#define SEED_CELL 64.0          /* px: the seeds' lookup grid (births search far) */
#define GRID_CELLS 65536        /* at most; the cell grows for wide spreads */
#define MAG_ERR_FLOOR 1e-3      /* mag: the least error a detection's weight assumes */
#define SNR_REL 0.1             /* a detection's peak SNR scatters by sqrt(1 + (0.1·SNR)²)
                                 * about its track's (docs/QUALITY.md: its derivation) */
#define SNR_WINDOW 3.0          /* a link's SNR within 3 of those of its track's mean looks
                                 * alike */
#define ALIKE_SHARE 0.9         /* of a link's chance budget: the part spent on links that
                                 * look alike (flux_charge) */

/* One linked detection. u, v: registered px; x, y: input-frame px. */
typedef struct obs {
    uint64_t key;               /* frame number << 20 | index: unique per tracker */
    uint64_t seq;
    long frame;                 /* the tracker's frame number */
    double t, mjd;
    double u, v, x, y;
    double half_len, theta;     /* streaks: half the end-to-end length, axis angle */
    double eu0, ev0, eu1, ev1;  /* streaks: the end points, registered px */
    int streak;
    double snr;
    double mag, mag_err;        /* NAN when unknown */
    int has_radec;
    double ra, dec;
} obs_t;

typedef struct pt {
    ss_track_point_t p;
    uint64_t key;
} pt_t;

/* A track, tentative (id 0) or confirmed. The fit is a least-squares
 * line per axis in τ = t − t0, kept as sums. */
typedef struct trk {
    uint64_t id;
    int alive;
    int updated;                /* linked in the current frame */
    int missed;
    int n, n_streak;
    double half_sum;            /* Σ half_len of its streak detections */
    double lchance;             /* log10 of the product of its links' chances (those
                                 * past the first two; link_chance) */
    int n_links;                /* the links in that product */
    double lflux;               /* log10 of the product of its links' flux charges (those
                                 * past the first two; flux_charge) */
    double t0;
    double S, St, Stt, Su, Stu, Suu, Sv, Stv, Svv, snr_sum;
    int n_mag;                  /* detections with a magnitude: weighted sums of them */
    double Sw, Swm, Swmm;
    int np, head;               /* ring of the latest points */
    obs_t first, last;          /* add_obs writes both at the first detection */
    pt_t pts[SS_TRACK_POINTS];  /* last: trk_reset leaves it as it is */
} trk_t;
_Static_assert(offsetof(trk_t, pts) + sizeof(((trk_t *)0)->pts) == sizeof(trk_t),
               "the ring of points is trk_t's last member");

/* Points (observations or seeds) by grid cell, a counting sort: the
 * points of cell c are items[start[c] .. start[c + 1]). */
typedef struct grid {
    double u0, v0, cell;
    int w, h;
    int *start, *items;
    int cap;
} grid_t;

typedef struct cand {
    int track, obs;
    double d;                   /* distance / gate */
    double g;                   /* the gate, px */
} cand_t;

struct ss_tracker {
    ss_track_cfg_t cfg;
    long frame;
    int timed;                  /* -1 before the first frame */
    double rho;                 /* this frame's candidates per px² */
    double rho_streak;          /* of them streaks, per px² */
    double *free_snr;           /* their peak SNRs, ascending */
    int n_free;
    int seed_fewest;            /* start_tracks: the fewest free SNRs any alike seed's
                                 * window holds (seed_window_fewest) */
    double births;              /* tentative tracks started per frame (running mean) */
    int births_now;
    double births_streak;       /* of them from two streaks (running mean) */
    int births_streak_now;
    double mjd0;
    uint64_t next_id;
    trk_t *conf, *tent;
    int n_conf, n_tent;         /* high-water marks of the arrays (slots may be dead) */
    int *tent_free;             /* dead tentative slots, listed once per frame */
    int n_tent_free;
    obs_t *seeds;
    int n_seeds;
    double *seed_w, *seed_share;    /* start_tracks: each seed's alike_width and the share
                                     * of the free SNRs within it (pair_metric's) */
    obs_t *obs;                 /* this frame's candidates */
    int *obs_det;               /* their index in the detection list */
    int *taken;
    int obs_cap;
    cand_t *cands;
    int cand_cap;
    grid_t og;                  /* this frame's observations */
    double max_half;            /* the longest half streak among them */
    grid_t sg;                  /* the seeds, while new tracks start */
};

static void fit_line(const trk_t *k, double S, double St, double Stt, double Sa, double Sta,
                     double *slope, double *mean_a, double *stt_c)
{
    (void)k;
    double tb = St / S;
    *stt_c = Stt - St * tb;
    *mean_a = Sa / S;
    *slope = *stt_c > 1e-12 ? (Sta - tb * Sa) / *stt_c : 0.0;
}

/* The track's fitted motion: velocity, position at τ, scatter. */
typedef struct motion {
    double vu, vv, tb, ub, vb, stt_c, rms, err;
} motion_t;

static motion_t motion_of(const trk_t *k)
{
    motion_t m;
    fit_line(k, k->S, k->St, k->Stt, k->Su, k->Stu, &m.vu, &m.ub, &m.stt_c);
    fit_line(k, k->S, k->St, k->Stt, k->Sv, k->Stv, &m.vv, &m.vb, &m.stt_c);
    m.tb = k->St / k->S;
    double res = (k->Suu - k->Su * m.ub - m.vu * m.vu * m.stt_c) +
                 (k->Svv - k->Sv * m.vb - m.vv * m.vv * m.stt_c);
    int dof = 2 * (k->n - 2);
    m.rms = dof > 0 && res > 0.0 ? sqrt(res / dof) : 0.0;
    double sc = fmax(m.rms, CENTROID_FLOOR);
    m.err = m.stt_c > 1e-12 ? sc / sqrt(m.stt_c) : INFINITY;
    return m;
}

/* Where the track expects to be at time t, and the 1-σ spread of that. */
static void predict(const trk_t *k, double t, double *u, double *v, double *spread)
{
    motion_t m = motion_of(k);
    double tau = t - k->t0 - m.tb;
    *u = m.ub + m.vu * tau;
    *v = m.vb + m.vv * tau;
    double sc = fmax(m.rms, CENTROID_FLOOR);
    *spread = m.stt_c > 1e-12 ? sc * sqrt(1.0 / k->n + tau * tau / m.stt_c) : INFINITY;
}

/* Distance of an observation from a predicted position: along a streak's
 * axis, its own half length is free (the centroid of a clipped streak
 * moves along it). */
static double obs_dist(const obs_t *o, double u, double v)
{
    double du = o->u - u, dv = o->v - v;
    if (!o->streak)
        return hypot(du, dv);
    double c = cos(o->theta), s = sin(o->theta);
    double along = fabs(du * c + dv * s), across = fabs(-du * s + dv * c);
    along = fmax(0.0, along - 0.5 * o->half_len);
    return hypot(along, across);
}

/* A track's weighted mean magnitude and its error (track.h); NAN when
 * none of its detections had one. */
static void track_mag(const trk_t *k, double *mag, double *err)
{
    *mag = *err = NAN;
    if (k->n_mag == 0 || !(k->Sw > 0.0))
        return;
    double m = k->Swm / k->Sw;
    double e = sqrt(1.0 / k->Sw);
    if (k->n_mag > 1) {
        double var = fmax(0.0, k->Swmm / k->Sw - m * m) * k->n_mag / (k->n_mag - 1);
        e = fmax(e, sqrt(var / k->n_mag));
    }
    *mag = m;
    *err = e;
}

static void add_obs(trk_t *k, const obs_t *o)
{
    if (k->n == 0) {
        k->t0 = o->t;
        k->first = *o;
    }
    double tau = o->t - k->t0;
    k->S += 1.0;
    k->St += tau;
    k->Stt += tau * tau;
    k->Su += o->u;
    k->Stu += tau * o->u;
    k->Suu += o->u * o->u;
    k->Sv += o->v;
    k->Stv += tau * o->v;
    k->Svv += o->v * o->v;
    k->snr_sum += o->snr;
    if (isfinite(o->mag) && isfinite(o->mag_err)) {
        double w = 1.0 / fmax(o->mag_err * o->mag_err, MAG_ERR_FLOOR * MAG_ERR_FLOOR);
        k->n_mag++;
        k->Sw += w;
        k->Swm += w * o->mag;
        k->Swmm += w * o->mag * o->mag;
    }
    k->n++;
    k->n_streak += o->streak;
    if (o->streak)
        k->half_sum += o->half_len;
    k->last = *o;
    k->missed = 0;
    k->updated = 1;
    int slot = (k->head + k->np) % SS_TRACK_POINTS;
    if (k->np == SS_TRACK_POINTS)
        k->head = (k->head + 1) % SS_TRACK_POINTS;
    else
        k->np++;
    k->pts[slot] = (pt_t){ { o->seq, o->mjd, o->x, o->y }, o->key };
}

static int has_key(const trk_t *k, uint64_t key)
{
    for (int i = 0; i < k->np; i++)
        if (k->pts[i].key == key)
            return 1;
    return 0;
}

/* log10 of the chance that a link r px from its track's prediction, after
 * waiting w frames, was a chance detection: that one of the free
 * candidates (T->rho per px²) fell within r of the prediction, ρ·π·r² (r
 * at least CENTROID_FLOOR) per frame, times w·H, H = Σ 1/j for j = 1 ..
 * max_missed + 1; at most 1. A track is tested in each frame it waits:
 * the chance that it passes at x in any of them is Σ_w x / (w·H) = x, so
 * that this is a p-value, P(chance <= x) <= x. */
static double link_chance(const ss_tracker_t *T, double r, int wait)
{
    double h = 0.0;
    for (int j = 1; j <= T->cfg.max_missed + 1; j++)
        h += 1.0 / j;
    r = fmax(r, CENTROID_FLOOR);
    return log10(fmin(1.0, wait * h * T->rho * M_PI * r * r));
}

/* Distance of a streak observation's end points from those its streak
 * track k predicts at t (its predicted centre ± its streaks' mean half
 * length along its velocity), the nearer pairing of the ends; INFINITY
 * when k is no streak track or o no streak. */
static double end_dist(const trk_t *k, const obs_t *o, double t)
{
    if (!o->streak || !k->first.streak || k->n_streak == 0)
        return INFINITY;
    double pu, pv, spread;
    predict(k, t, &pu, &pv, &spread);
    const motion_t m = motion_of(k);
    const double sp = hypot(m.vu, m.vv), h = k->half_sum / k->n_streak;
    if (!(sp > 0.0) || !isfinite(pu) || !isfinite(pv))
        return INFINITY;
    const double ku = h * m.vu / sp, kv = h * m.vv / sp;
    /* the observation's ends either way round */
    const double same = fmax(hypot(o->eu1 - pu - ku, o->ev1 - pv - kv),
                             hypot(o->eu0 - pu + ku, o->ev0 - pv + kv));
    const double swap = fmax(hypot(o->eu0 - pu - ku, o->ev0 - pv - kv),
                             hypot(o->eu1 - pu + ku, o->ev1 - pv + kv));
    return fmin(same, swap);
}

/* log10 of the chance that a streak whose both ends fell within e px of
 * those its streak track predicts (end_dist), after waiting w frames, was
 * a chance streak: that one of the free streak candidates (T->rho_streak
 * per px²) has its centre within e of the predicted one (π·e²) and its
 * axis within e/h rad of the track's direction (h: the track's mean half
 * length; 2·(e/h)/π of the axes, at most 1), times w·H as link_chance; e
 * at least CENTROID_FLOOR. */
static double end_chance(const ss_tracker_t *T, const trk_t *k, double e, int wait)
{
    double hsum = 0.0;
    for (int j = 1; j <= T->cfg.max_missed + 1; j++)
        hsum += 1.0 / j;
    e = fmax(e, CENTROID_FLOOR);
    const double h = k->half_sum / k->n_streak;
    const double dir = fmin(1.0, 2.0 * e / (M_PI * h));
    return log10(fmin(1.0, wait * hsum * T->rho_streak * M_PI * e * e * dir));
}

/* The number of the ascending v[0..n) below x (at most x when
 * inclusive). */
static int count_below(const double *v, int n, double x, int inclusive)
{
    int a = 0, b = n;
    while (a < b) {
        int mid = (a + b) / 2;
        if (v[mid] < x || (inclusive && v[mid] == x))
            a = mid + 1;
        else
            b = mid;
    }
    return a;
}

/* The share of this frame's free candidates whose peak SNR lies in
 * [lo, hi] (0 without any). */
static double share_between(const ss_tracker_t *T, double lo, double hi)
{
    if (T->n_free == 0)
        return 0.0;
    const int a = count_below(T->free_snr, T->n_free, lo, 0);
    const int c = count_below(T->free_snr, T->n_free, hi, 1);
    return (double)(c - a) / T->n_free;
}

/* The half width of the SNRs that look like a track whose n detections
 * average mean: SNR_WINDOW times their scatter, sqrt((1 +
 * (SNR_REL·mean)²)(1 + 1/n)). */
static double alike_width(double mean, int n)
{
    return SNR_WINDOW * sqrt((1.0 + SNR_REL * SNR_REL * mean * mean) * (1.0 + 1.0 / n));
}

/* Whether a detection of SNR snr looks like such a track (within
 * alike_width of mean), into *alike; returns the share of the free
 * candidates that look like it. */
static double alike_share(const ss_tracker_t *T, double mean, int n, double snr, int *alike)
{
    const double w = alike_width(mean, n);
    *alike = fabs(snr - mean) <= w;
    return share_between(T, mean - w, mean + w);
}

/* log10 of a link's flux charge: a detection of SNR snr joins a track
 * whose n detections average mean. It looks alike when within SNR_WINDOW
 * of their scatter, sqrt((1 + (SNR_REL·mean)²)(1 + 1/n)); f, the share of
 * the free candidates that look alike, is the chance that a chance
 * detection does. The charge is f / ALIKE_SHARE when it looks alike, else
 * (1 − f) / (1 − ALIKE_SHARE): independent of where the detection lies,
 * and a chance detection's charge c is below x with probability
 * ALIKE_SHARE·x + (1 − ALIKE_SHARE)·x, so that a product of p-values and
 * charges stays a p-value (f / ALIKE_SHARE may exceed 1: capped, the
 * bound would not hold). A source whose flux varies (a tumbling
 * satellite) pays (1 − f) / (1 − ALIKE_SHARE) per link unlike its mean. */
static double flux_charge(const ss_tracker_t *T, double mean, int n, double snr)
{
    int alike;
    const double f = alike_share(T, mean, n, snr, &alike);
    if (alike)
        return log10(fmax(f, 1e-12) / ALIKE_SHARE);     /* not capped at 1: see above */
    return log10(fmax(1.0 - f, 1e-12) / (1.0 - ALIKE_SHARE));
}

/* log10 of P(Π of m p-values <= x) for x = 10^lx: the product of m
 * independent uniform variables is at most x with probability
 * x·Σ_{i<m} (−ln x)^i / i! (m = 0: 1). */
static double log10_product_tail(double lx, int m)
{
    if (m <= 0 || lx >= 0.0)
        return 0.0;
    const double y = -lx * M_LN10;
    double term = 1.0, sum = 1.0;
    for (int i = 1; i < m; i++) {
        term *= y / i;
        sum += term;
    }
    return fmin(0.0, lx + log10(sum));
}

/* Whether a tentative track may be confirmed: enough detections, moved
 * by more than its scatter (a detection that repeats at one place — a
 * star's residual, a hot pixel — is no mover), and unlikely to be chance
 * detections lined up: the tracks started per frame times the chance
 * that its later links, each as near its prediction as it was
 * (link_chance), were chance detections at most 1 / SS_TRACK_CHANCE. */
static int confirmable(const ss_tracker_t *T, const trk_t *k)
{
    if (k->n < T->cfg.min_points)
        return 0;
    motion_t m = motion_of(k);
    double speed = hypot(m.vu, m.vv);
    double span = k->last.t - k->first.t;
    const double births = k->first.streak ? T->births_streak : T->births;
    double chance = log10(fmax(1.0, births)) + log10_product_tail(k->lchance, k->n_links) +
                    k->lflux;
    return speed * span >= MIN_MOTION && speed >= MOTION_SIGNIFICANCE * m.err &&
           m.rms <= T->cfg.gate && chance <= -log10(SS_TRACK_CHANCE);
}

/* The report of a confirmed track. */
static void report(const ss_tracker_t *T, const trk_t *k, ss_track_state_t st, ss_tracklist_t *out)
{
    if (!out)
        return;
    if (out->count >= out->capacity) {
        out->truncated++;
        return;
    }
    ss_track_t *r = &out->items[out->count++];
    motion_t m = motion_of(k);
    memset(r, 0, sizeof *r);
    r->id = k->id;
    r->kind = 2 * k->n_streak > k->n ? SS_KIND_STREAK : SS_KIND_POINT;
    r->state = st;
    r->n = k->n;
    r->missed = k->missed;
    r->timed = T->timed == 1;
    r->mjd_first = k->first.mjd;
    r->mjd_last = k->last.mjd;
    r->seq_first = k->first.seq;
    r->seq_last = k->last.seq;
    r->x = k->last.x;
    r->y = k->last.y;
    r->vx = m.vu;
    r->vy = m.vv;
    r->vx_err = r->vy_err = m.err;
    r->rms = m.rms;
    r->snr = k->snr_sum / k->n;
    track_mag(k, &r->mag, &r->mag_err);
    double dt = k->last.t - k->first.t;
    if (r->timed && dt > 0.0 && k->first.has_radec && k->last.has_radec) {
        const double d2r = M_PI / 180.0;
        double d1 = k->first.dec * d2r, d2 = k->last.dec * d2r;
        double da = (k->last.ra - k->first.ra) * d2r;
        double c = sin(d1) * sin(d2) + cos(d1) * cos(d2) * cos(da);
        double sep = acos(fmin(1.0, fmax(-1.0, c)));
        r->has_rate = 1;
        r->rate = sep / d2r * 3600.0 / dt;
        double pa = atan2(sin(da) * cos(d2), cos(d1) * sin(d2) - sin(d1) * cos(d2) * cos(da));
        r->pa = fmod(pa / d2r + 360.0, 360.0);
    }
    r->n_points = k->np;
    for (int i = 0; i < k->np; i++)
        r->points[i] = k->pts[(k->head + i) % SS_TRACK_POINTS].p;
}

ss_tracker_t *ss_tracker_new(const ss_track_cfg_t *cfg)
{
    ss_tracker_t *T = calloc(1, sizeof *T);
    if (!T)
        return NULL;
    T->cfg = *cfg;
    T->timed = -1;
    T->next_id = 1;
    T->conf = calloc(MAX_CONFIRMED, sizeof *T->conf);
    T->tent = calloc(MAX_TENTATIVE, sizeof *T->tent);
    T->seeds = calloc(MAX_SEEDS, sizeof *T->seeds);
    T->seed_w = calloc(MAX_SEEDS, sizeof *T->seed_w);
    T->seed_share = calloc(MAX_SEEDS, sizeof *T->seed_share);
    T->tent_free = calloc(MAX_TENTATIVE, sizeof *T->tent_free);
    if (!T->conf || !T->tent || !T->seeds || !T->seed_w || !T->seed_share || !T->tent_free)
        ss_tracker_destroy(&T);
    return T;
}

void ss_tracker_destroy(ss_tracker_t **pt)
{
    if (!pt || !*pt)
        return;
    ss_tracker_t *T = *pt;
    free(T->conf);
    free(T->tent);
    free(T->seeds);
    free(T->seed_w);
    free(T->seed_share);
    free(T->tent_free);
    free(T->obs);
    free(T->obs_det);
    free(T->taken);
    free(T->free_snr);
    free(T->cands);
    free(T->og.start);
    free(T->sg.start);
    free(T);
    *pt = NULL;
}

void ss_tracker_set_cfg(ss_tracker_t *T, const ss_track_cfg_t *cfg)
{
    T->cfg = *cfg;
}

void ss_tracker_reset(ss_tracker_t *T, ss_tracklist_t *out)
{
    for (int i = 0; i < T->n_conf; i++)
        if (T->conf[i].alive)
            report(T, &T->conf[i], SS_TRACK_ENDED, out);
    T->n_conf = T->n_tent = T->n_seeds = 0;
    T->timed = -1;
}

long ss_tracker_frames(const ss_tracker_t *T)
{
    return T->frame;
}

int ss_tracker_position(const ss_tracker_t *T, uint64_t id, double mjd_mid, long frame, double *u,
                        double *v, double *spread)
{
    if (T->timed == -1 || (T->timed == 1 && !isfinite(mjd_mid)))
        return -1;
    const double t = T->timed == 1 ? (mjd_mid - T->mjd0) * 86400.0 : (double)frame;
    for (int i = 0; i < T->n_conf; i++)
        if (T->conf[i].alive && T->conf[i].id == id) {
            predict(&T->conf[i], t, u, v, spread);
            return 0;
        }
    return -1;
}

/* Room for n observations and m candidate pairs. */
static int reserve(ss_tracker_t *T, int n, int m)
{
    if (n > T->obs_cap) {
        free(T->obs);
        free(T->obs_det);
        free(T->taken);
        T->obs = malloc((size_t)n * sizeof *T->obs);
        T->obs_det = malloc((size_t)n * sizeof *T->obs_det);
        T->taken = malloc((size_t)n * sizeof *T->taken);
        free(T->free_snr);
        T->free_snr = malloc((size_t)n * sizeof *T->free_snr);
        T->obs_cap = T->obs && T->obs_det && T->taken && T->free_snr ? n : 0;
        if (!T->obs_cap)
            return -1;
    }
    if (m > T->cand_cap) {
        free(T->cands);
        T->cands = malloc((size_t)m * sizeof *T->cands);
        T->cand_cap = T->cands ? m : 0;
        if (!T->cands)
            return -1;
    }
    return 0;
}

/* This frame's candidates: every positive detection. A `cosmic` counts
 * too: on an undersampled camera (PSF sigma under about 0.8 px) most
 * point sources are sharp enough to be called so, and a true cosmic-ray
 * hit never lines up with others (the chance test below counts it). */
static int collect(ss_tracker_t *T, ss_detlist_t *dets, uint64_t seq, double t, double mjd,
                   double ox, double oy)
{
    int n = 0;
    for (int i = 0; dets && i < dets->count; i++) {
        ss_detection_t *d = &dets->items[i];
        d->track = 0;
        if (d->sign <= 0 || !isfinite(d->x) || !isfinite(d->y))
            continue;
        obs_t *o = &T->obs[n];
        o->key = ((uint64_t)T->frame << 20) | (uint64_t)i;
        o->seq = seq;
        o->frame = T->frame;
        o->t = t;
        o->mjd = mjd;
        o->x = d->x;
        o->y = d->y;
        o->u = d->x + ox;
        o->v = d->y + oy;
        o->streak = d->kind == SS_KIND_STREAK;
        o->half_len = 0.5 * hypot(d->x1 - d->x0, d->y1 - d->y0);
        o->eu0 = d->x0 + ox, o->ev0 = d->y0 + oy;
        o->eu1 = d->x1 + ox, o->ev1 = d->y1 + oy;
        o->theta = d->theta;
        o->snr = d->peak_snr;
        o->mag = d->mag;
        o->mag_err = d->mag_err;
        o->has_radec = d->has_radec;
        o->ra = d->ra;
        o->dec = d->dec;
        T->obs_det[n] = i;
        T->taken[n] = 0;
        n++;
    }
    return n;
}

static int cmp_dbl(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The peak SNRs of the nobs observations no confirmed track took, into
 * free_snr, ascending (flux_charge's reference). */
static void sort_free_snr(ss_tracker_t *T, int nobs)
{
    T->n_free = 0;
    for (int j = 0; j < nobs; j++)
        if (!T->taken[j])
            T->free_snr[T->n_free++] = T->obs[j].snr;
    qsort(T->free_snr, (size_t)T->n_free, sizeof *T->free_snr, cmp_dbl);
}

static int cmp_cand(const void *a, const void *b)
{
    const cand_t *x = a, *y = b;
    return (x->d > y->d) - (x->d < y->d);
}

/* Sort the n points into g's cells of at least min_cell px, doubled
 * until there are at most max_cells (and GRID_CELLS). Returns 0, or -1
 * out of memory. */
static int grid_build(grid_t *g, const obs_t *pts, int n, double min_cell, double max_cells)
{
    double u0 = INFINITY, v0 = INFINITY, u1 = -INFINITY, v1 = -INFINITY;
    for (int j = 0; j < n; j++) {
        u0 = fmin(u0, pts[j].u), u1 = fmax(u1, pts[j].u);
        v0 = fmin(v0, pts[j].v), v1 = fmax(v1, pts[j].v);
    }
    if (n == 0)
        u0 = v0 = u1 = v1 = 0.0;
    double cell = min_cell;
    max_cells = fmin(max_cells, GRID_CELLS);
    while ((floor((u1 - u0) / cell) + 1) * (floor((v1 - v0) / cell) + 1) > max_cells)
        cell *= 2.0;
    g->u0 = u0, g->v0 = v0, g->cell = cell;
    g->w = (int)floor((u1 - u0) / cell) + 1;
    g->h = (int)floor((v1 - v0) / cell) + 1;
    int cells = g->w * g->h, need = cells + 1 + n;
    if (need > g->cap) {
        free(g->start);
        g->start = malloc((size_t)need * sizeof *g->start);
        g->cap = g->start ? need : 0;
        if (!g->start)
            return -1;
    }
    g->items = g->start + cells + 1;
    memset(g->start, 0, (size_t)(cells + 1) * sizeof *g->start);
    for (int j = 0; j < n; j++) {
        int cx = (int)((pts[j].u - u0) / cell), cy = (int)((pts[j].v - v0) / cell);
        g->start[cy * g->w + cx + 1]++;
    }
    for (int c = 0; c < cells; c++)
        g->start[c + 1] += g->start[c];
    for (int j = 0; j < n; j++) {
        int cx = (int)((pts[j].u - u0) / cell), cy = (int)((pts[j].v - v0) / cell);
        g->items[g->start[cy * g->w + cx]++] = j;
    }
    for (int c = cells; c > 0; c--)     /* the fills moved each start to the next cell's */
        g->start[c] = g->start[c - 1];
    g->start[0] = 0;
    return 0;
}

/* This frame's observations into og, and their longest half streak, so
 * that a gate looks at the cells it covers only. Returns 0, or -1. */
static int build_grid(ss_tracker_t *T, int nobs)
{
    T->max_half = 0.0;
    for (int j = 0; j < nobs; j++)
        if (T->obs[j].streak)
            T->max_half = fmax(T->max_half, 0.5 * T->obs[j].half_len);
    return grid_build(&T->og, T->obs, nobs, GRID_CELL, GRID_CELLS);
}

static int clampi(int v, int lo, int hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

/* Whether observation o may join track k. A streak joining a track of
 * streaks lies along the track's motion (its axis within STREAK_ANGLE of
 * the velocity) and is no longer than the track's streaks by more than
 * the gate (a longer one is another trail, or this one merged with
 * another: its centroid lies anywhere along its axis, which obs_dist
 * leaves free). */
static int compatible(const ss_tracker_t *T, const trk_t *k, const obs_t *o)
{
    if (!o->streak || !k->first.streak || k->n_streak == 0)
        return 1;
    const motion_t m = motion_of(k);
    if (o->half_len > k->half_sum / k->n_streak + T->cfg.gate)
        return 0;
    return fabs(remainder(o->theta - atan2(m.vv, m.vu), M_PI)) <= STREAK_ANGLE;
}

/* Candidate pairs of track k (index ki) within the gate of its prediction
 * at t: the nearest GATE_CANDS, appended to T->cands at m. Returns the new
 * count. */
static int track_cands(ss_tracker_t *T, const trk_t *k, int ki, double t, int m)
{
    double pu, pv, spread;
    predict(k, t, &pu, &pv, &spread);
    double g = T->cfg.gate + 3.0 * spread, r = g + T->max_half;
    if (!isfinite(r))
        return m;
    const grid_t *og = &T->og;
    int x0 = clampi((int)floor((pu - r - og->u0) / og->cell), 0, og->w - 1);
    int x1 = clampi((int)floor((pu + r - og->u0) / og->cell), 0, og->w - 1);
    int y0 = clampi((int)floor((pv - r - og->v0) / og->cell), 0, og->h - 1);
    int y1 = clampi((int)floor((pv + r - og->v0) / og->cell), 0, og->h - 1);
    const int m0 = m;
    for (int cy = y0; cy <= y1; cy++)
        for (int cx = x0; cx <= x1; cx++) {
            int c = cy * og->w + cx;
            for (int e = og->start[c]; e < og->start[c + 1]; e++) {
                int j = og->items[e];
                /* a track of points measures a streak by its centroid: the
                 * free length along a long streak's axis would put it in
                 * the gate of many chance pairs of points */
                const obs_t *o = &T->obs[j];
                double d = T->taken[j] || !compatible(T, k, o) ? INFINITY
                           : k->first.streak ? obs_dist(o, pu, pv)
                                             : hypot(o->u - pu, o->v - pv);
                if (!(d <= g))
                    continue;
                cand_t cd = { ki, j, d / g, g };
                if (m - m0 < GATE_CANDS) {
                    T->cands[m++] = cd;
                    continue;
                }
                int worst = m0;         /* full: replace the farthest */
                for (int i = m0 + 1; i < m; i++)
                    if (T->cands[i].d > T->cands[worst].d)
                        worst = i;
                if (cd.d < T->cands[worst].d)
                    T->cands[worst] = cd;
            }
        }
    return m;
}

/* Candidate (track, observation) pairs of tracks[0..nt), nearest (in
 * units of each gate) first. Returns the count. */
static int gate_pairs(ss_tracker_t *T, const trk_t *tracks, int nt, double t)
{
    int m = 0;
    for (int k = 0; k < nt; k++)
        if (tracks[k].alive)
            m = track_cands(T, &tracks[k], k, t, m);
    qsort(T->cands, (size_t)m, sizeof *T->cands, cmp_cand);
    return m;
}

/* Link o to track k at t. A streak shorter than the track's streaks by
 * more than the gate is a piece of one (clipped at the frame's edge, or
 * split): its centroid lies anywhere along the trail, so only its place
 * across its axis is fitted, its place along it taken from k's
 * prediction (the fit's velocity is not pulled along the axis by it). */
static void add_linked(const ss_tracker_t *T, trk_t *k, const obs_t *o, double t)
{
    if (!o->streak || k->n_streak == 0 || k->n < 2 ||
        o->half_len >= k->half_sum / k->n_streak - T->cfg.gate) {
        add_obs(k, o);
        return;
    }
    double pu, pv, spread;
    predict(k, t, &pu, &pv, &spread);
    obs_t p = *o;
    const double nu = -sin(o->theta), nv = cos(o->theta);
    const double across = (o->u - pu) * nu + (o->v - pv) * nv;
    p.u = pu + across * nu;
    p.v = pv + across * nv;
    add_obs(k, &p);
}

/* Tentative tracks that share a detection with k are dropped. */
static void drop_siblings(ss_tracker_t *T, const trk_t *k)
{
    for (int i = 0; i < T->n_tent; i++) {
        trk_t *o = &T->tent[i];
        if (!o->alive || o == k)
            continue;
        for (int p = 0; p < k->np; p++)
            if (has_key(o, k->pts[p].key)) {
                o->alive = 0;
                break;
            }
    }
}

static trk_t *free_slot(trk_t *arr, int *n, int cap)
{
    for (int i = 0; i < *n; i++)
        if (!arr[i].alive)
            return &arr[i];
    return *n < cap ? &arr[(*n)++] : NULL;
}

/* Confirmed tracks take the detections nearest their predictions. A
 * track whose gate holds only detections that other tracks took shares
 * the nearest of them: where two movers' paths cross, the two are one
 * detection (a blend) for a few frames, and both tracks go on through it
 * instead of one ending after max_missed frames. */
static void link_confirmed(ss_tracker_t *T, double t)
{
    int m = gate_pairs(T, T->conf, T->n_conf, t);
    for (int pass = 0; pass < 2; pass++)
        for (int c = 0; c < m; c++) {
            trk_t *k = &T->conf[T->cands[c].track];
            if (k->updated || (pass == 0 && T->taken[T->cands[c].obs]))
                continue;
            T->taken[T->cands[c].obs] = 1;
            add_linked(T, k, &T->obs[T->cands[c].obs], t);
        }
}

/* Tentative tracks grow the same way; one that is confirmable becomes a
 * confirmed track with the next id. */
static void link_tentative(ss_tracker_t *T, double t)
{
    int m = gate_pairs(T, T->tent, T->n_tent, t);
    for (int c = 0; c < m; c++) {
        trk_t *k = &T->tent[T->cands[c].track];
        if (!k->alive || k->updated || T->taken[T->cands[c].obs])
            continue;
        /* the chance of this link: a chance detection as near its
         * prediction in any of the frames the track waited for it */
        int wait = 1 + k->missed;
        const obs_t *o = &T->obs[T->cands[c].obs];
        T->taken[T->cands[c].obs] = 1;
        const double e = end_dist(k, o, t);
        if (e <= T->cands[c].g) {
            /* a streak on the track's ends: its own chance, no flux charge */
            k->lchance += end_chance(T, k, e, wait);
        } else {
            k->lchance += link_chance(T, T->cands[c].d * T->cands[c].g, wait);
            k->lflux += flux_charge(T, k->snr_sum / k->n, k->n, o->snr);
        }
        k->n_links++;
        add_linked(T, k, o, t);
        if (!confirmable(T, k))
            continue;
        trk_t *slot = free_slot(T->conf, &T->n_conf, MAX_CONFIRMED);
        if (!slot)
            continue;
        drop_siblings(T, k);
        *slot = *k;
        slot->id = T->next_id++;
        k->alive = 0;
    }
}

/* Whether a seed and a later observation may start a track. */
static int pairable(const ss_tracker_t *T, const obs_t *s, const obs_t *o)
{
    if (s->streak != o->streak)
        return 0;
    double du = o->u - s->u, dv = o->v - s->v, reach = T->cfg.max_speed * (double)(o->frame - s->frame);
    if (du * du + dv * dv > reach * reach)
        return 0;
    if (!o->streak)
        return 1;
    if (fabs(o->half_len - s->half_len) > T->cfg.gate)
        return 0;   /* one trail of one exposure time: the same length, unless cut */
    double d = hypot(du, dv);
    double dth = fabs(remainder(o->theta - s->theta, M_PI));
    double dir = d > T->cfg.gate ? fabs(remainder(atan2(dv, du) - s->theta, M_PI)) : 0.0;
    return dth <= STREAK_ANGLE && dir <= STREAK_ANGLE;
}

/* The least factor pair_metric applies to a squared distance. */
static double least_alike(const ss_tracker_t *T)
{
    return 1.0 / SS_MAX(T->n_free, 1);
}

/* How seed s ranks as o's partner: the squared distance, times the share
 * of the free candidates that look like the seed when o does
 * (alike_share of a track of one, the seed's, which start_tracks keeps
 * per seed; at least least_alike): the area, scaled by the chance that a
 * detection there looks alike, in which a chance partner would be as
 * good. */
static double pair_metric(const ss_tracker_t *T, int s, const obs_t *o)
{
    const obs_t *sd = &T->seeds[s];
    const double du = o->u - sd->u, dv = o->v - sd->v;
    const int alike = fabs(o->snr - sd->snr) <= T->seed_w[s];
    return (du * du + dv * dv) * (alike ? fmax(T->seed_share[s], least_alike(T)) : 1.0);
}

/* The fewest of the ascending v[0..n) in [a, a + L] for any a in [lo,
 * hi], or, once that falls to `enough` or below, a count that does. The
 * count only falls where a passes a value, so the fewest are at a = lo or
 * just past a value below hi (counted without those at exactly a + L
 * there, which can only lower the result). */
static int fewest_in(const double *v, int n, double L, double lo, double hi, int enough)
{
    int k = count_below(v, n, lo, 0), top = count_below(v, n, lo + L, 1), first = k;
    int fewest = top - k;
    for (; fewest > enough && k < n && v[k] < hi; k++) {
        while (top < n && v[top] <= v[k] + L)
            top++;
        while (first < n && v[first] <= v[k])
            first++;
        fewest = SS_MIN(fewest, top - first);
    }
    return fewest;
}

/* The narrowest SNR window of alike_share for a seed (n = 1): 2·w1, w1 =
 * SNR_WINDOW·√2 (a hair less, against rounding). */
#define ALIKE_MIN_WIDTH (2.0 * SNR_WINDOW * M_SQRT2 * (1.0 - 1e-9))

/* The fewest free SNRs the window of any seed that looks alike holds: it
 * is centred on the seed's SNR c, in [cmin, cmax] (the seeds'), and
 * holds [c − w1, c + w1]. */
static int seed_window_fewest(const ss_tracker_t *T, double cmin, double cmax)
{
    const double L = ALIKE_MIN_WIDTH;
    return fewest_in(T->free_snr, T->n_free, L, cmin - 0.5 * L, cmax - 0.5 * L, -1);
}

/* The least factor pair_metric can apply for observation o of SNR x (≥
 * least_alike): a seed that does not look alike gets 1; one that does
 * gets the share of the free SNRs in its window, which holds at least
 * T->seed_fewest of them, and, since it holds x and is at least 2·w1
 * wide, at least the fewest in any [a, a + 2·w1] with x − 2·w1 ≤ a ≤ x.
 * A lower bound: nearest_seeds stops its search by it. */
static double alike_floor(const ss_tracker_t *T, double x)
{
    const double L = ALIKE_MIN_WIDTH;
    const int fewest =
        SS_MAX(fewest_in(T->free_snr, T->n_free, L, x - L, x, T->seed_fewest), T->seed_fewest);
    return fmax((double)fewest / SS_MAX(T->n_free, 1), least_alike(T));
}

/* Seed s into best / d2 (n of them, best first by pair_metric, at most
 * PAIRS_PER_DET) when it is pairable with o and better than the last;
 * least: alike_floor of o (a seed whose squared distance times it cannot
 * beat the last is skipped before its metric). */
static void offer_seed(const ss_tracker_t *T, const obs_t *o, int s, double least, int *best,
                       double *d2, int *n)
{
    const obs_t *sd = &T->seeds[s];
    if (*n == PAIRS_PER_DET) {
        const double du = o->u - sd->u, dv = o->v - sd->v;
        if ((du * du + dv * dv) * least > d2[*n - 1])
            return;
    }
    if (!pairable(T, sd, o))
        return;
    const double e = pair_metric(T, s, o);
    if (*n == PAIRS_PER_DET && e >= d2[*n - 1])
        return;
    int i = *n < PAIRS_PER_DET ? (*n)++ : *n - 1;
    for (; i > 0 && d2[i - 1] > e; i--) {
        d2[i] = d2[i - 1];
        best[i] = best[i - 1];
    }
    d2[i] = e;
    best[i] = s;
}

/* The (at most PAIRS_PER_DET) best seeds o may pair with by pair_metric,
 * best first, as indices in best; returns their count. The seed grid (sg)
 * is searched ring by ring around o's cell until no seed of a ring can
 * rank above the last kept, or a ring lies beyond the birth reach, or the
 * grid ends. */
static int nearest_seeds(const ss_tracker_t *T, const obs_t *o, int best[PAIRS_PER_DET])
{
    const grid_t *g = &T->sg;
    double d2[PAIRS_PER_DET];
    int n = 0;
    const int cx = (int)floor((o->u - g->u0) / g->cell), cy = (int)floor((o->v - g->v0) / g->cell);
    const int last = SS_MAX(SS_MAX(abs(cx), abs(cx - g->w + 1)), SS_MAX(abs(cy), abs(cy - g->h + 1)));
    const double reach = T->cfg.max_speed * (T->cfg.max_missed + 1), least = alike_floor(T, o->snr);
    for (int r = 0; r <= last; r++) {
        const double near = (r - 1) * g->cell;     /* no point of ring r is nearer */
        if (near > reach || (n == PAIRS_PER_DET && near * near * least > d2[n - 1]))
            break;
        for (int y = SS_MAX(cy - r, 0); y <= SS_MIN(cy + r, g->h - 1); y++) {
            /* the ring's top and bottom rows whole, its sides' two cells */
            const int whole = y == cy - r || y == cy + r;
            for (int x = SS_MAX(cx - r, 0); x <= SS_MIN(cx + r, g->w - 1); x++) {
                if (!whole && x != cx - r && x != cx + r) {
                    x = cx + r - 1;     /* jump to the right side */
                    continue;
                }
                const int c = y * g->w + x;
                for (int e = g->start[c]; e < g->start[c + 1]; e++)
                    offer_seed(T, o, g->items[e], least, best, d2, &n);
            }
        }
    }
    return n;
}

/* k as a new track with no detection: every field zero but first and
 * last, which add_obs writes at the first detection, and the ring of
 * points, read only below np (zero here). A birth costs the sums, not the
 * 1.3 kB ring nor the two observations (docs/PERFORMANCE.md,
 * 2026-11-26). */
static void trk_reset(trk_t *k)
{
    memset(k, 0, offsetof(trk_t, first));
}

/* A free slot for a tentative track: one that died (listed once per frame
 * by start_tracks), else the next unused; NULL when all are in use. */
static trk_t *new_tentative(ss_tracker_t *T)
{
    if (T->n_tent_free > 0)
        return &T->tent[T->tent_free[--T->n_tent_free]];
    return T->n_tent < MAX_TENTATIVE ? &T->tent[T->n_tent++] : NULL;
}

/* New tentative tracks from this frame's free observations and the seeds
 * of the last max_missed + 1 frames, the nearest PAIRS_PER_DET per
 * observation; then the free observations become seeds. */
static int start_tracks(ss_tracker_t *T, int nobs)
{
    /* about a seed a cell or more: a sparse field's ring walk would
     * otherwise cross mostly empty cells (docs/PERFORMANCE.md, 2026-11-26) */
    if (grid_build(&T->sg, T->seeds, T->n_seeds, SEED_CELL, SS_MAX(T->n_seeds, 1)) != 0)
        return -1;
    double cmin = INFINITY, cmax = -INFINITY;
    for (int s = 0; s < T->n_seeds; s++) {
        cmin = fmin(cmin, T->seeds[s].snr);
        cmax = fmax(cmax, T->seeds[s].snr);
    }
    T->seed_fewest = T->n_seeds > 0 ? seed_window_fewest(T, cmin, cmax) : 0;
    for (int s = 0; s < T->n_seeds; s++) {
        const double x = T->seeds[s].snr, w = alike_width(x, 1);
        T->seed_w[s] = w;
        T->seed_share[s] = share_between(T, x - w, x + w);
    }
    T->n_tent_free = 0;
    for (int i = T->n_tent - 1; i >= 0; i--)
        if (!T->tent[i].alive)
            T->tent_free[T->n_tent_free++] = i;
    for (int j = 0; j < nobs; j++) {
        if (T->taken[j])
            continue;
        const obs_t *o = &T->obs[j];
        int best[PAIRS_PER_DET];
        const int m = nearest_seeds(T, o, best);
        for (int c = 0; c < m; c++) {
            trk_t *k = new_tentative(T);
            if (!k)
                break;
            trk_reset(k);
            k->alive = 1;
            add_obs(k, &T->seeds[best[c]]);
            add_obs(k, o);
            T->births_now++;
            T->births_streak_now += o->streak;
        }
    }
    int keep = 0;
    for (int s = 0; s < T->n_seeds; s++)
        if (T->frame - T->seeds[s].frame <= T->cfg.max_missed)
            T->seeds[keep++] = T->seeds[s];
    T->n_seeds = keep;
    for (int j = 0; j < nobs && T->n_seeds < MAX_SEEDS; j++)
        if (!T->taken[j])
            T->seeds[T->n_seeds++] = T->obs[j];
    return 0;
}

/* Age every track by the frame; report the confirmed ones; set the
 * detections' track ids. */
static void age_and_report(ss_tracker_t *T, ss_detlist_t *dets, ss_tracklist_t *out)
{
    for (int i = 0; i < T->n_tent; i++) {
        trk_t *k = &T->tent[i];
        if (k->alive && !k->updated && ++k->missed > T->cfg.max_missed)
            k->alive = 0;
        k->updated = 0;
    }
    for (int i = 0; i < T->n_conf; i++) {
        trk_t *k = &T->conf[i];
        if (!k->alive)
            continue;
        if (k->updated) {
            k->updated = 0;
            report(T, k, SS_TRACK_ACTIVE, out);
            if (dets && (uint64_t)(k->last.key >> 20) == (uint64_t)T->frame)
                dets->items[k->last.key & 0xFFFFF].track = k->id;
        } else if (++k->missed > T->cfg.max_missed) {
            report(T, k, SS_TRACK_ENDED, out);
            k->alive = 0;
        } else {
            report(T, k, SS_TRACK_COASTING, out);
        }
    }
}

int ss_tracker_frame(ss_tracker_t *T, const ss_track_frame_t *f, ss_detlist_t *dets,
                     ss_tracklist_t *out)
{
    if (out) {
        out->count = 0;
        out->truncated = 0;
    }
    int timed = isfinite(f->mjd_mid) ? 1 : 0;
    if (T->timed != -1 && T->timed != timed)
        ss_tracker_reset(T, out);
    if (T->timed == -1) {
        T->timed = timed;
        T->mjd0 = timed ? f->mjd_mid : 0.0;
    }
    T->frame++;
    double t = timed ? (f->mjd_mid - T->mjd0) * 86400.0 : (double)T->frame;
    int ndet = dets ? dets->count : 0;
    if (reserve(T, ndet > 0 ? ndet : 1, (MAX_CONFIRMED + MAX_TENTATIVE) * GATE_CANDS) != 0) {
        ss_tracker_reset(T, out);
        return -1;
    }
    int nobs = collect(T, dets, f->seq, t, timed ? f->mjd_mid : NAN, f->ox, f->oy);
    if (build_grid(T, nobs) != 0) {
        ss_tracker_reset(T, out);
        return -1;
    }
    link_confirmed(T, t);
    int free_obs = 0, free_streaks = 0; /* what tentative tracks may take: chance detections */
    for (int j = 0; j < nobs; j++) {
        free_obs += !T->taken[j];
        free_streaks += !T->taken[j] && T->obs[j].streak;
    }
    T->rho = free_obs / fmax(f->area, 1.0);
    T->rho_streak = free_streaks / fmax(f->area, 1.0);
    sort_free_snr(T, nobs);
    link_tentative(T, t);
    T->births_now = T->births_streak_now = 0;
    if (start_tracks(T, nobs) != 0) {
        ss_tracker_reset(T, out);
        return -1;
    }
    T->births += BIRTHS_MEMORY * (T->births_now - T->births);
    T->births_streak += BIRTHS_MEMORY * (T->births_streak_now - T->births_streak);
    age_and_report(T, dets, out);
    return 0;
}
