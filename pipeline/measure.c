/*
 * measure.c — ALGORITHM.md §7, second half: per-component measurement and
 * classification (the CPU reference of ss_measure and ss_measure_finish in
 * stages.h).
 *
 * Split in two on purpose. ss_measure makes ONE raster pass over the label
 * plane and reduces every labelled pixel into its component's accumulator
 * (ss_comp_acc_t: only sums, minima and maxima, so that the CUDA backend
 * builds bit-compatible accumulators with atomics, apart from the order of
 * floating-point sums). ss_measure_finish, shared by both backends, turns
 * one accumulator into a detection; every formula is written down there.
 *
 * Ranking (ALGORITHM §7): when a frame has more components than it may
 * report, the most significant are kept — peak SNR first, then the
 * smaller peak index (ss_sig_key) — by an exact radix selection
 * (ss_rank_top), and reported most significant first.
 *
 * The kind is decided on the shape first (ss_measure_finish): elongation
 * and cross-section b' from the moments with the brightest unfiltered
 * pixel taken out, then the peak fraction for what is not elongated.
 * Measured (planted sources, σp = 1.4 matched filter, τ = 5 / 2.5, white
 * noise σ = 1, as tests/check_measure.c renders them), b'/psf_sigma:
 *  - streaks (20-300 px, any angle, ridge SNR λ/σ 6-40, 200 each): median
 *    1.07-1.15, minimum 0.86 (λ 6; 0.94 or more from λ 8 up); with a bright
 *    1-px hit on the ridge (hit SNR 20-200) minimum 0.97. When the true PSF
 *    is sharper than psf_sigma, b' shrinks with it: true σ 1.1 px, minimum
 *    0.76; true σ 0.9 px, minimum 0.70 (5th percentile 0.78);
 *  - sharp cosmic-ray tracks (15-60 px, Gaussian cross-section 0.3 / 0.5 /
 *    0.7 px, pixel-integrated): noise in the footprint widens them at low
 *    SNR. λ 200: 0.34-0.66 / 0.47-0.60 / 0.59-0.69; λ 50: median 0.51 /
 *    0.59 / 0.69, 95th percentile 0.59 / 0.66 / 0.77; λ 20: median 0.58 /
 *    0.66 / 0.75; λ 6-10: median 0.62-0.78, 95th percentile up to 1.0.
 * detect.streak_min_b = 0.75 keeps every streak measured at the right PSF
 * (and at a true PSF of 1.1 px, 0.79 of psf_sigma) and calls cosmic every
 * track of 0.3-0.5 px at λ 200, 98-99 % at λ 50, 90-98 % at λ 20, 77-88 %
 * at λ 6-10 (tracks 0.7 px wide: 100 / 91 / 48 / 36-47 %): faint, wide
 * tracks cannot be told from streaks by their width. With the hit on a
 * streak (λ 8-20, 200 each), the old rule (peak fraction first) lost up
 * to 9 % of the streaks at hit SNR 50 and 21-50 % at hit SNR 200; now 2
 * of 1800 (hit SNR 20-200), both 20-22 px long: the hit's own footprint
 * widens b' until a'/b' < 3.
 *
 * The cosmic test (peak fraction = brightest unfiltered pixel / Σ of the
 * positive unfiltered residual over the footprint) separates well at
 * detect.cosmic_fraction = 0.25, the value this module recommends as the
 * default. Measured after a σp = 1.4 matched filter, τ = 5 / 2.5, white
 * noise, 400 trials per case: point sources peak at 0.22 (SNR 5-8; 0.10
 * at SNR 20, 0.08 bright); 1-px hits never go below 0.32, 2-px hits
 * (uneven split) 0.23, 3-px hits 0.15 with 95 % above 0.23-0.35 depending
 * on SNR (an even 3-px split can hold no more than a third). Pure-noise
 * components (z >= 4) have a median of 0.26: about half of the noise
 * false alarms come out as "cosmic". tests/check_measure.c holds the
 * planted-source version of this.
 */
#include "stages.h"
#include "peak_core.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ----------------------------------------------------------------------
 * accumulation
 * -------------------------------------------------------------------- */

static void acc_init(ss_comp_acc_t *a, int sign, int label, int w, int h)
{
    memset(a, 0, sizeof *a);
    a->sign = sign;
    a->label = label;
    a->rmax = -INFINITY;
    a->zmax = -INFINITY;
    a->ridx = -1;
    a->zidx = -1;
    a->x0 = a->kx0 = w;
    a->y0 = a->ky0 = h;
    a->x1 = a->kx1 = -1;
    a->y1 = a->ky1 = -1;
    a->zn[0] = a->zn[1] = a->zn[2] = a->zn[3] = NAN;
}

/* 1 if any in-frame 8-neighbour of (x, y) is NaN in z. Neighbours outside
 * the frame do not count here: they are what the edge flag reports. */
static int has_invalid_neighbour(const float *z, int w, int h, int x, int y)
{
    for (int dy = -1; dy <= 1; dy++) {
        const int yy = y + dy;
        if (yy < 0 || yy >= h)
            continue;
        for (int dx = -1; dx <= 1; dx++) {
            const int xx = x + dx;
            if ((dx == 0 && dy == 0) || xx < 0 || xx >= w)
                continue;
            if (isnan(z[(size_t)yy * w + xx]))
                return 1;
        }
    }
    return 0;
}

/* The component index of label L (positives 0..np-1, then negatives), or
 * -1 for background and labels beyond np / nn. */
static inline int comp_of(int32_t L, int np, int nn)
{
    if (L > 0 && L <= np)
        return L - 1;
    if (L < 0 && -L <= nn)
        return np + (-L) - 1;
    return -1;
}

/* One pixel into its component's accumulator. */
static void acc_add(ss_comp_acc_t *a, const float *rc, const float *r, const float *z, int w,
                    int h, int x, int y, float hi)
{
    const size_t i = (size_t)y * w + x;
    const double s = a->sign;
    const double xd = x, yd = y;

    a->area++;
    const double vc = s * (double)rc[i];
    if (isfinite(vc)) {
        a->flux += vc;
        if (vc > 0.0) {
            a->sw += vc;
            a->swx += vc * xd;
            a->swy += vc * yd;
            a->swxx += vc * xd * xd;
            a->swxy += vc * xd * yd;
            a->swyy += vc * yd * yd;
        }
    }
    a->sx += xd;
    a->sy += yd;

    /* + 0.0f turns -0 into +0, so that ties at zero go to the smallest
     * index on the GPU too (its order-preserving keys put +0 above -0) */
    const float vr = (float)s * r[i] + 0.0f;
    if (isfinite(vr)) {
        if (vr > 0.0f)
            a->rpos += vr;
        if (vr > a->rmax) {      /* strict: the first (smallest index) wins ties */
            a->rmax = vr;
            a->ridx = (int)i;
        }
    }
    const float vz = (float)s * z[i];
    if (vz > a->zmax) {          /* strict: the first (smallest index) wins ties */
        a->zmax = vz;
        a->zidx = (int)i;
    }
    if (x < a->x0)
        a->x0 = x;
    if (x > a->x1)
        a->x1 = x;
    if (y < a->y0)
        a->y0 = y;
    if (y > a->y1)
        a->y1 = y;
    if (vz >= hi) {
        if (x < a->kx0)
            a->kx0 = x;
        if (x > a->kx1)
            a->kx1 = x;
        if (y < a->ky0)
            a->ky0 = y;
        if (y > a->ky1)
            a->ky1 = y;
    }
    if (x == 0 || y == 0 || x == w - 1 || y == h - 1)
        a->edge = 1;
    if (!a->invalid_nb && has_invalid_neighbour(z, w, h, x, y))
        a->invalid_nb = 1;
}

void ss_measure_acc(const int32_t *labels, int np, int nn, const int32_t *slot, int nslot,
                    const float *rc, const float *r, const float *z, int w, int h,
                    const ss_pipeline_cfg_t *c, ss_comp_acc_t *acc)
{
    np = SS_MAX(np, 0);
    nn = SS_MAX(nn, 0);
    const int nc = np + nn;
    const float hi = (float)c->thresh;     /* the seed level, as ss_label was given it */
    for (int k = 0; k < nc; k++) {
        const int a = slot ? slot[k] : k;
        if (a < 0 || (slot && a >= nslot))
            continue;
        acc_init(&acc[a], k < np ? +1 : -1, k < np ? k + 1 : -(k - np + 1), w, h);
    }

    /* The one pass. Non-finite rc or r values cannot occur inside a
     * component when z comes from ss_matched_filter (z is NaN wherever rc
     * is); if they do, they contribute nothing. */
    for (int y = 0; y < h; y++) {
        const size_t row = (size_t)y * w;
        for (int x = 0; x < w; x++) {
            const int k = comp_of(labels[row + x], np, nn);
            if (k < 0)
                continue;
            const int a = slot ? slot[k] : k;
            if (a < 0 || (slot && a >= nslot))
                continue;
            acc_add(&acc[a], rc, r, z, w, h, x, y, hi);
        }
    }

    /* The brightest unfiltered pixel's weight in the moments, and the
     * SNR peak's neighbours. */
    for (int k = 0; k < nc; k++) {
        const int a = slot ? slot[k] : k;
        if (a < 0 || (slot && a >= nslot))
            continue;
        if (acc[a].ridx >= 0) {
            const double v = acc[a].sign * (double)rc[acc[a].ridx];
            acc[a].rwgt = isfinite(v) && v > 0.0 ? v : 0.0;
        }
        ss_peak_neighbours(z, w, h, acc[a].zidx, acc[a].sign, acc[a].zn);
    }
}

/* ----------------------------------------------------------------------
 * ranking
 * -------------------------------------------------------------------- */

uint64_t ss_sig_key(float zmax, int zidx)
{
    uint32_t u;
    memcpy(&u, &zmax, sizeof u);
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return (uint64_t)u << 32 | (uint32_t)~(uint32_t)zidx;
}

static int rank_desc(const void *pa, const void *pb)
{
    const uint64_t a = ((const ss_rank_t *)pa)->key, b = ((const ss_rank_t *)pb)->key;
    return a < b ? 1 : a > b ? -1 : 0;
}

#define RADIX_BITS 8
#define RADIX_BINS (1 << RADIX_BITS)

/* The keep-th largest key of r[0..n) (1 <= keep <= n): at each byte from
 * the top, count the keys that share the prefix found so far by their
 * next byte, and descend into the bin where the running count from the
 * largest bin reaches keep. */
static uint64_t kth_largest(const ss_rank_t *r, int n, int keep)
{
    uint64_t prefix = 0, mask = 0;
    int want = keep;
    for (int shift = 64 - RADIX_BITS; shift >= 0; shift -= RADIX_BITS) {
        int cnt[RADIX_BINS] = { 0 };
        for (int i = 0; i < n; i++)
            if ((r[i].key & mask) == prefix)
                cnt[(r[i].key >> shift) & (RADIX_BINS - 1)]++;
        int bin = RADIX_BINS - 1;
        while (cnt[bin] < want) {       /* the bins above hold fewer than want */
            want -= cnt[bin];
            bin--;
        }
        prefix |= (uint64_t)bin << shift;
        mask |= (uint64_t)(RADIX_BINS - 1) << shift;
    }
    return prefix;
}

static void rank_swap(ss_rank_t *a, ss_rank_t *b)
{
    const ss_rank_t t = *a;
    *a = *b;
    *b = t;
}

int ss_rank_top(ss_rank_t *r, int n, int keep)
{
    if (n <= 0 || keep <= 0)
        return 0;
    if (keep < n) {
        const uint64_t t = kth_largest(r, n, keep);
        /* keys above t first, then those equal to it up to keep (one, for
         * distinct keys) */
        int j = 0;
        for (int i = 0; i < n; i++)
            if (r[i].key > t)
                rank_swap(&r[i], &r[j++]);
        for (int i = j; i < n && j < keep; i++)
            if (r[i].key == t)
                rank_swap(&r[i], &r[j++]);
        n = keep;
    }
    qsort(r, (size_t)n, sizeof *r, rank_desc);
    return n;
}

int ss_detect_keep(const ss_pipeline_cfg_t *c, const ss_detlist_t *out)
{
    return c->max_detections > 0 ? SS_MIN(out->capacity, c->max_detections) : out->capacity;
}

void ss_measure_rank(const ss_comp_acc_t *acc, int n, int unmeasured, float sigma, int w,
                     const ss_pipeline_cfg_t *c, ss_rank_t *rank, ss_detlist_t *out)
{
    const int min_area = SS_MAX(c->min_area, 1);
    int m = 0;
    for (int k = 0; k < n; k++)
        if (acc[k].area >= min_area)
            rank[m++] = (ss_rank_t){ ss_sig_key(acc[k].zmax, acc[k].zidx), k, 0 };
    const int kept = ss_rank_top(rank, m, ss_detect_keep(c, out));
    ss_detlist_clear(out);
    for (int j = 0; j < kept; j++) {
        const ss_comp_acc_t *a = &acc[rank[j].idx];
        ss_measure_finish(a, a->label, sigma, w, c, ss_detlist_push(out));
    }
    out->truncated = unmeasured + (m - kept);
}

void ss_measure(const int32_t *labels, int np, int nn, const float *rc, const float *r,
                const float *z, int w, int h, float sigma, const ss_pipeline_cfg_t *c,
                ss_comp_acc_t *acc, ss_rank_t *rank, ss_detlist_t *out)
{
    np = SS_MAX(np, 0);
    nn = SS_MAX(nn, 0);
    ss_measure_acc(labels, np, nn, NULL, 0, rc, r, z, w, h, c, acc);
    ss_measure_rank(acc, np + nn, 0, sigma, w, c, rank, out);
}

int ss_comp_preselect(const int32_t *labels, int np, int nn, const float *z, int w, int h,
                      int min_area, int cap, ss_rank_t *rank, int32_t *area, int32_t *slot)
{
    np = SS_MAX(np, 0);
    nn = SS_MAX(nn, 0);
    const int nc = np + nn;
    for (int k = 0; k < nc; k++) {
        rank[k] = (ss_rank_t){ 0, k, 0 };   /* 0 is below every pixel's key */
        area[k] = 0;
    }
    for (int y = 0; y < h; y++) {
        const size_t row = (size_t)y * w;
        for (int x = 0; x < w; x++) {
            const int k = comp_of(labels[row + x], np, nn);
            if (k < 0)
                continue;
            const float vz = (k < np ? 1.0f : -1.0f) * z[row + x];
            const uint64_t key = ss_sig_key(vz, (int)(row + x));
            area[k]++;
            if (key > rank[k].key)          /* the CUDA zkey's atomicMax */
                rank[k].key = key;
        }
    }
    min_area = SS_MAX(min_area, 1);
    int m = 0;
    for (int k = 0; k < nc; k++) {
        slot[k] = -1;
        if (area[k] >= min_area)
            rank[m++] = rank[k];            /* m <= k: nothing unread is overwritten */
    }
    const int kept = ss_rank_top(rank, m, cap);
    for (int j = 0; j < kept; j++)
        slot[rank[j].idx] = 0;
    int next = 0;
    for (int k = 0; k < nc; k++)
        if (slot[k] == 0)
            slot[k] = next++;
    return m;
}

/* ----------------------------------------------------------------------
 * finishing one component
 * -------------------------------------------------------------------- */

/* ---- streak end points ----------------------------------------------
 *
 * The moments alone do not place a long streak's ends well enough: the
 * weighted centroid wanders along the axis (every footprint pixel's noise
 * times its lever arm; measured 1.4 px rms at a ridge SNR of 8, L = 20-300
 * px), and the half-length sqrt(3·(a² - σp²)) carries a similar error:
 * centroid ± half-length puts the ends 2.1 px rms off for L > 150 px. The ends are instead found
 * where the streak's seed pixels (z >= τ) stop, from their bounding box
 * (acc->kx0..ky1), which depends on the few pixels at each end only and is
 * not moved by noise blobs hanging on at τ_low.
 *
 * Model (ALGORITHM §6, Gaussian PSF σp matched-filtered with itself): a
 * segment of λ ADU per px has a ridge SNR z_r = λ/σ away from its ends, and
 * at an offset τ beyond an end (along the axis) and d across it
 *     z(τ, d) = z_r · Φ(-τ/s) · exp(-d²/(2s²)),     s = √2·σp,
 * Φ the standard normal CDF. The seed pixels near an end fill the cap
 * {z >= τ_seed}; its reach along a direction with components (cα along,
 * sα across) is R(cα, sα) = max over the cap's contour of cα·τ + sα·|d|,
 * found by a golden-section search along τ (cap_reach).
 *
 * With θ the moments' major axis (u = (cos θ, sin θ)), the + end's x is
 * X1 = kx1 + ½ - R(|cos θ|, |sin θ|) (the bbox holds pixel centres, the
 * cap's continuous extreme lies on average half a pixel further), its y is
 * Y = ky1 + ½ - R(|sin θ|, |cos θ|) when sin θ >= 0 (else ky0 - ½ + R),
 * and likewise for the - end. Each end is the point of the line through
 * the centroid along u nearest to its (X, Y): t± = u·((X, Y) - centroid),
 * so a coordinate counts in proportion to how well it measures the axis.
 * z_r = flux / (σ·(t+ - t-)) is re-estimated from the current length,
 * three rounds starting from the moments' length 2·sqrt(3·(a² - b²)).
 * Measured on synthetic streaks (L = 20-300 px, σp = 1.4, any angle, 200
 * each): end-point error rms 0.85 / 0.55 / 0.45 px at z_r = 8 / 12 / 20
 * (moments: 1.4-2.1 / 0.9-1.4 / 0.6-0.85 px); tests/check_measure.c. */

#define STREAK_ROUNDS 3          /* z_r <-> length refinement rounds */
#define CAP_BISECT 50            /* bisection steps for the cap's tip (2^-50 of 12·s) */
#define CAP_GOLDEN 40            /* golden-section steps (0.618^40 ≈ 4e-9 of the range) */
#define CAP_TAIL_S 6.0           /* search from τ = -6·s, where d is the full half-width */

/* Standard normal CDF. */
static double norm_cdf(double x)
{
    return 0.5 * erfc(-x / M_SQRT2);
}

/* The cap's half-width at τ: d(τ) = s·sqrt(2·ln(z_r·Φ(-τ/s)/thr)), 0 past
 * the tip. */
static double cap_width(double t, double zr, double thr, double s)
{
    const double v = zr * norm_cdf(-t / s) / thr;
    return v > 1.0 ? s * sqrt(2.0 * log(v)) : 0.0;
}

/* R(ca, sa) of the cap {z_r·Φ(-τ/s)·exp(-d²/2s²) >= thr}: the maximum of
 * f(τ) = ca·τ + sa·d(τ) for τ from deep inside the streak (-6s, where
 * d = the full half-width) to the tip (d = 0). ln Φ is concave, so d and
 * f are concave: a golden-section search finds the maximum. Returns 0
 * when the ridge itself is below thr (no cap to speak of). */
static double cap_reach(double ca, double sa, double zr, double thr, double s)
{
    if (!(s > 0.0) || !(zr > thr))
        return 0.0;
    /* the tip, where z_r·Φ(-τ/s) = thr, by bisection */
    double lo = -CAP_TAIL_S * s, hi = CAP_TAIL_S * s;
    for (int i = 0; i < CAP_BISECT; i++) {
        const double m = 0.5 * (lo + hi);
        if (zr * norm_cdf(-m / s) > thr)
            lo = m;
        else
            hi = m;
    }
    double a = -CAP_TAIL_S * s, b = lo;
    const double g = 0.5 * (sqrt(5.0) - 1.0);
    double x1 = b - g * (b - a), x2 = a + g * (b - a);
    double f1 = ca * x1 + sa * cap_width(x1, zr, thr, s);
    double f2 = ca * x2 + sa * cap_width(x2, zr, thr, s);
    for (int i = 0; i < CAP_GOLDEN; i++) {
        if (f1 < f2) {
            a = x1;
            x1 = x2;
            f1 = f2;
            x2 = a + g * (b - a);
            f2 = ca * x2 + sa * cap_width(x2, zr, thr, s);
        } else {
            b = x2;
            x2 = x1;
            f2 = f1;
            x1 = b - g * (b - a);
            f1 = ca * x1 + sa * cap_width(x1, zr, thr, s);
        }
    }
    return fmax(f1, f2);
}

/* Streak end points into d->x0..y1 from the seed bbox, as above. */
static void streak_ends(const ss_comp_acc_t *acc, float sigma, const ss_pipeline_cfg_t *c,
                        ss_detection_t *d)
{
    const double ct = cos(d->theta), st = sin(d->theta);
    const double ac = fabs(ct), as = fabs(st);
    const double s = M_SQRT2 * c->psf_sigma;
    const double thr = (float)c->thresh;
    const double hl_mom = sqrt(fmax(3.0 * (d->a * d->a - d->b * d->b), 0.0));
    double tp = hl_mom, tm = -hl_mom;

    if (acc->kx1 >= acc->kx0 && acc->ky1 >= acc->ky0 && sigma > 0.0f) {
        for (int round = 0; round < STREAK_ROUNDS; round++) {
            const double len = fmax(tp - tm, 1.0);
            const double zr = d->flux / ((double)sigma * len);
            const double rx = cap_reach(ac, as, zr, thr, s);
            const double ry = cap_reach(as, ac, zr, thr, s);
            const double xp = acc->kx1 + 0.5 - rx, xm = acc->kx0 - 0.5 + rx;
            const double yhi = acc->ky1 + 0.5 - ry, ylo = acc->ky0 - 0.5 + ry;
            const double yp = st >= 0.0 ? yhi : ylo, ym = st >= 0.0 ? ylo : yhi;
            const double ntp = ct * (xp - d->x) + st * (yp - d->y);
            const double ntm = ct * (xm - d->x) + st * (ym - d->y);
            if (!isfinite(ntp) || !isfinite(ntm) || ntp <= ntm)
                break;          /* degenerate seed box: keep the last estimate */
            tp = ntp;
            tm = ntm;
        }
    }
    d->x0 = d->x + tm * ct;
    d->y0 = d->y + tm * st;
    d->x1 = d->x + tp * ct;
    d->y1 = d->y + tp * st;
}

/* The ellipse of weighted moments (Σw, Σwx, Σwy, Σwx², Σwxy, Σwy²):
 * a², b² are the eigenvalues of the central second moments
 * [[cxx, cxy], [cxy, cyy]] (cxx = Σwx²/Σw - x̄², ...),
 *   λ± = (cxx + cyy)/2 ± sqrt(((cxx - cyy)/2)² + cxy²),
 * a = sqrt(λ+) >= b = sqrt(λ-) (rounding can make λ- a hair below 0:
 * clamped), and the major axis angle θ = ½·atan2(2·cxy, cxx - cyy),
 * measured from +x towards +y. atan2 is in (-π, π], so θ is in
 * (-π/2, π/2]; -π/2 itself (atan2(-0, negative)) is mapped to +π/2.
 * sw <= 0: a = b = θ = 0. */
static void moment_ellipse(double sw, double swx, double swy, double swxx, double swxy,
                           double swyy, double *a, double *b, double *theta)
{
    double cxx = 0.0, cxy = 0.0, cyy = 0.0;
    if (sw > 0.0) {
        const double mx = swx / sw, my = swy / sw;
        cxx = swxx / sw - mx * mx;
        cxy = swxy / sw - mx * my;
        cyy = swyy / sw - my * my;
    }
    const double half_tr = 0.5 * (cxx + cyy);
    const double disc = sqrt(0.25 * (cxx - cyy) * (cxx - cyy) + cxy * cxy);
    const double l1 = half_tr + disc, l2 = half_tr - disc;
    *a = l1 > 0.0 ? sqrt(l1) : 0.0;
    *b = l2 > 0.0 ? sqrt(l2) : 0.0;
    double th = 0.5 * atan2(2.0 * cxy, cxx - cyy);
    if (th <= -0.5 * M_PI)
        th += M_PI;
    *theta = th;
}

/* A point's position from its SNR peak (peak_core.h): the vertex of the
 * parabolas through ln(s·z) at the peak and its neighbours, on each axis
 * where they allow it (d->x, d->y, the centroid, stay on an axis where they
 * do not). Only with one matched-filter phase: the maximum over several
 * phases' maps is flat-topped, not a Gaussian. */
static void peak_position(const ss_comp_acc_t *acc, int w, const ss_pipeline_cfg_t *c,
                          ss_detection_t *d)
{
    if (acc->zidx < 0 || w <= 0 || ss_mf_phases_used(c->psf_sigma, c->mf_phases) != 1)
        return;
    double ox, oy;
    if (ss_peak_offset(acc->zn[0], acc->zmax, acc->zn[1], &ox))
        d->x = d->peak_x + ox;
    if (ss_peak_offset(acc->zn[2], acc->zmax, acc->zn[3], &oy))
        d->y = d->peak_y + oy;
}

void ss_measure_finish(const ss_comp_acc_t *acc, int label, float sigma, int w,
                       const ss_pipeline_cfg_t *c, ss_detection_t *d)
{
    memset(d, 0, sizeof *d);
    d->label = label;
    d->sign = acc->sign;
    d->area = acc->area;
    d->bbox_x0 = acc->x0;
    d->bbox_y0 = acc->y0;
    d->bbox_x1 = acc->x1;
    d->bbox_y1 = acc->y1;

    /* Flux: Σ sign·r' over the footprint (noise included, so it can be
     * slightly negative for a faint component). Its error for white
     * noise of σ per pixel: σ·sqrt(area). */
    d->flux = acc->flux;
    d->flux_err = (double)sigma * sqrt((double)acc->area);

    /* Peak of the SNR map and its pixel. */
    d->peak_snr = acc->zmax;
    if (acc->zidx >= 0 && w > 0) {
        d->peak_x = acc->zidx % w;
        d->peak_y = acc->zidx / w;
    }

    /* Centroid: first moments weighted by wgt = max(sign·r', 0), i.e. the
     * object's own light (negative noise pixels would pull it around).
     * When no pixel has positive weight, the plain mean of the pixels. */
    double mx, my;
    if (acc->sw > 0.0) {
        mx = acc->swx / acc->sw;
        my = acc->swy / acc->sw;
    } else if (acc->area > 0) {
        mx = acc->sx / acc->area;
        my = acc->sy / acc->area;
    } else {
        mx = my = 0.0;
    }
    d->x = mx;
    d->y = my;
    moment_ellipse(acc->sw, acc->swx, acc->swy, acc->swxx, acc->swxy, acc->swyy, &d->a, &d->b,
                   &d->theta);

    /* The same moments without the brightest unfiltered pixel (its weight
     * rwgt at ridx): the shape a single sharp pixel cannot bend. */
    double ra = d->a, rb = d->b, rth;
    if (acc->ridx >= 0 && acc->rwgt > 0.0 && acc->sw - acc->rwgt > 0.0 && w > 0) {
        const double px = acc->ridx % w, py = acc->ridx / w, q = acc->rwgt;
        moment_ellipse(acc->sw - q, acc->swx - q * px, acc->swy - q * py, acc->swxx - q * px * px,
                       acc->swxy - q * px * py, acc->swyy - q * py * py, &ra, &rb, &rth);
    }

    /* Share of the flux in the brightest pixel of the unfiltered residual:
     * rmax / Σ max(sign·r, 0). A PSF of σ 1.4 puts ~8 % of its flux in
     * one pixel, a cosmic-ray hit of 1-3 px 30-100 %. */
    d->peak_fraction = acc->rpos > 0.0 && acc->rmax > 0.0f ? (double)acc->rmax / acc->rpos : 0.0;

    /* Kind (stages.h): the shape first, so that a cosmic-ray hit on a
     * streak does not turn it into a cosmic; an elongated component as
     * narrow as a pixel is a cosmic-ray track, not a streak. */
    const double ratio = rb > 0.0 ? ra / rb : (ra > 0.0 ? INFINITY : 1.0);
    const int elongated = ratio >= c->streak_ratio && ra >= c->streak_min_len * c->psf_sigma;
    if (elongated)
        d->kind = rb >= c->streak_min_b * c->psf_sigma ? SS_KIND_STREAK : SS_KIND_COSMIC;
    else if (d->peak_fraction >= c->cosmic_fraction)
        d->kind = SS_KIND_COSMIC;
    else
        d->kind = SS_KIND_POINT;

    if (d->kind == SS_KIND_POINT)
        peak_position(acc, w, c, d);

    /* Streak end points: on the line through the centroid along the major
     * axis, where the seed pixels stop (streak_ends); (x0, y0) is the end
     * towards -u, so x0 <= x1 (cos θ >= 0). Other kinds: both at the
     * position. */
    d->x0 = d->x1 = d->x;
    d->y0 = d->y1 = d->y;
    if (d->kind == SS_KIND_STREAK)
        streak_ends(acc, sigma, c, d);

    d->flags = (acc->invalid_nb ? SS_DET_TOUCHES_INVALID : 0) | (acc->edge ? SS_DET_TOUCHES_EDGE : 0);
    d->has_radec = 0;
}

