/*
 * photometry.c — see photometry.h; README "Photometry" has the figures.
 */
#include "photometry.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *ss_phot_source_name(ss_phot_source_t s)
{
    static const char *const names[] = { "none", "config", "fit", "header" };
    return (unsigned)s < 4 ? names[s] : "?";
}

/* The divisor of a flux: the exposure in s when per_second, else 1; 0
 * when per_second and the exposure is unknown. */
static double flux_time(int per_second, double exposure)
{
    if (!per_second)
        return 1.0;
    return isfinite(exposure) && exposure > 0.0 ? exposure : 0.0;
}

int ss_phot_mag(const ss_phot_zp_t *zp, double exposure, double flux, double flux_err,
                double *mag, double *mag_err)
{
    *mag = *mag_err = NAN;
    if (!zp || zp->source == SS_PHOT_NONE || !isfinite(zp->zp) || !isfinite(flux) || flux <= 0.0)
        return 0;
    double t = flux_time(zp->per_second, exposure);
    if (t <= 0.0)
        return 0;
    double rel = isfinite(flux_err) && flux_err > 0.0 ? flux_err / flux : 0.0;
    double ze = isfinite(zp->zp_err) ? zp->zp_err : 0.0;
    *mag = zp->zp - 2.5 * log10(flux / t);
    *mag_err = hypot(SS_PHOT_K * rel, ze);
    return 1;
}

int ss_phot_apply(const ss_phot_zp_t *zp, double exposure, ss_detlist_t *dets)
{
    int n = 0;
    for (int i = 0; i < dets->count; i++) {
        ss_detection_t *d = &dets->items[i];
        if (d->sign > 0)
            n += ss_phot_mag(zp, exposure, d->flux, d->flux_err, &d->mag, &d->mag_err);
        else
            d->mag = d->mag_err = NAN;
    }
    return n;
}

void ss_phot_zp_choose(ss_phot_zp_t *out, const ss_phot_cfg_t *cfg, const ss_frame_meta_t *m,
                       const ss_phot_zp_t *fitted)
{
    memset(out, 0, sizeof *out);
    out->source = SS_PHOT_NONE;
    out->per_second = cfg->per_second;
    if (isfinite(cfg->zeropoint)) {
        out->source = SS_PHOT_CONFIG;
        out->zp = cfg->zeropoint;
    } else if (fitted && fitted->source == SS_PHOT_FIT && isfinite(fitted->zp)) {
        *out = *fitted;
    } else if (m && m->has_zp_header && isfinite(m->zp_header)) {
        out->source = SS_PHOT_HEADER;
        out->zp = m->zp_header;
        out->zp_err = isfinite(m->zp_header_err) && m->zp_header_err > 0.0 ? m->zp_header_err : 0.0;
    }
}

/* ---- the zero-point fit ------------------------------------------------ */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of v[0..n) (n > 0), which it sorts. */
static double median_sorted(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Robust centre and spread of zp[0..n): the median and 1.4826·MAD (tmp:
 * n doubles of scratch). */
static void robust_stats(const double *zp, int n, double *tmp, double *med, double *sd)
{
    memcpy(tmp, zp, (size_t)n * sizeof *tmp);
    *med = median_sorted(tmp, n);
    for (int i = 0; i < n; i++)
        tmp[i] = fabs(zp[i] - *med);
    *sd = 1.4826 * median_sorted(tmp, n);
}

int ss_phot_fit_zeropoint(const ss_phot_star_t *stars, int n, double exposure, int per_second,
                          ss_phot_zp_t *out)
{
    double zp[SS_PHOT_FIT_MAX], var[SS_PHOT_FIT_MAX], tmp[SS_PHOT_FIT_MAX];  /* 24 KiB of stack */
    memset(out, 0, sizeof *out);
    out->source = SS_PHOT_NONE;
    out->per_second = per_second;
    double t = flux_time(per_second, exposure);
    if (t <= 0.0 || !stars || n <= 0)
        return -1;
    int m = 0;
    for (int i = 0; i < n && i < SS_PHOT_FIT_MAX; i++) {
        const ss_phot_star_t *s = &stars[i];
        if (!isfinite(s->flux) || s->flux <= 0.0 || !isfinite(s->cat_mag))
            continue;
        double rel = isfinite(s->flux_err) && s->flux_err > 0.0 ? s->flux_err / s->flux : 0.0;
        zp[m] = s->cat_mag + 2.5 * log10(s->flux / t);
        var[m] = SS_PHOT_K * rel * SS_PHOT_K * rel;
        m++;
    }
    if (m < SS_PHOT_MIN_STARS)
        return -1;
    double centre, sd;
    robust_stats(zp, m, tmp, &centre, &sd);
    int kept = 0, prev = -1;
    double mean = centre, s2 = 0.0, svar = 0.0;
    for (int it = 0; it < 20 && kept != prev; it++) {
        prev = kept;
        double lim = SS_PHOT_CLIP * sd, sum = 0.0;
        kept = 0;
        svar = 0.0;
        for (int i = 0; i < m; i++)
            if (fabs(zp[i] - centre) <= lim) {
                sum += zp[i];
                svar += var[i];
                kept++;
            }
        if (kept < SS_PHOT_MIN_STARS)
            return -1;
        mean = sum / kept;
        s2 = 0.0;
        for (int i = 0; i < m; i++)
            if (fabs(zp[i] - centre) <= lim)
                s2 += (zp[i] - mean) * (zp[i] - mean);
        /* the next clip: around the mean, with the kept stars' spread (no
         * smaller than the robust one, so that a tight core cannot shrink
         * the window onto itself) */
        centre = mean;
        sd = fmax(sd, sqrt(s2 / (kept - 1)));
    }
    double err_scatter = sqrt(s2 / (kept - 1) / kept);
    double err_stars = sqrt(svar) / kept;       /* the mean of kept values with these errors */
    out->source = SS_PHOT_FIT;
    out->zp = mean;
    out->zp_err = fmax(err_scatter, err_stars);
    out->n_used = kept;
    return 0;
}

/* ---- aperture photometry ------------------------------------------------ */

#define SUB 16                  /* sub-pixels per axis at the aperture's edge */

/* The fraction of pixel (px, py) within r of (x, y): 1 or 0 away from the
 * edge, a SUB×SUB sampling across it (16: the area within 0.2 px²). */
static double inside(int px, int py, double x, double y, double r)
{
    double dx = px - x, dy = py - y, d = hypot(dx, dy);
    if (d <= r - 0.7072)
        return 1.0;
    if (d >= r + 0.7072)
        return 0.0;
    int n = 0;
    for (int j = 0; j < SUB; j++)
        for (int i = 0; i < SUB; i++) {
            double sx = dx + (i + 0.5) / SUB - 0.5, sy = dy + (j + 0.5) / SUB - 0.5;
            n += sx * sx + sy * sy <= r * r;
        }
    return (double)n / (SUB * SUB);
}

/* Clipped mean and deviation of the annulus r_in < d <= r_out around
 * (x, y): passes dropping pixels beyond 3 deviations of the last pass's
 * mean, until none more are dropped (at most SKY_PASSES). Returns the
 * pixels kept. */
#define SKY_PASSES 12
static int sky_annulus(const float *img, int w, int x0, int y0, int x1, int y1, double x,
                       double y, double r_in, double r_out, double *mean, double *sd)
{
    double m = 0.0, s = INFINITY;
    int kept = -1;
    for (int pass = 0; pass < SKY_PASSES; pass++) {
        double sum = 0.0, sum2 = 0.0;
        int n = 0;
        for (int py = y0; py <= y1; py++)
            for (int px = x0; px <= x1; px++) {
                double d2 = (px - x) * (px - x) + (py - y) * (py - y);
                float v = img[(size_t)py * w + px];
                if (d2 <= r_in * r_in || d2 > r_out * r_out || !isfinite(v) ||
                    fabs(v - m) > 3.0 * s)
                    continue;
                sum += v;
                sum2 += (double)v * v;
                n++;
            }
        if (n < 2)
            return n;
        m = sum / n;
        s = sqrt(fmax(0.0, sum2 / n - m * m));
        if (n == kept)
            break;
        kept = n;
    }
    *mean = m;
    *sd = s;
    return kept;
}

int ss_phot_aperture(const float *img, int w, int h, double x, double y, double psf_sigma,
                     double gain, ss_phot_ap_t *out)
{
    memset(out, 0, sizeof *out);
    out->flux = out->flux_err = out->sky = out->sky_sd = NAN;
    if (!img || !isfinite(x) || !isfinite(y) || !(psf_sigma > 0.0))
        return -1;
    double r_ap = fmax(3.0 * psf_sigma, 2.0);
    double r_in = fmax(5.0 * psf_sigma, r_ap + 2.0);
    double r_out = fmax(8.0 * psf_sigma, r_in + 3.0);
    out->r_ap = r_ap, out->r_in = r_in, out->r_out = r_out;
    int x0 = (int)floor(x - r_out), x1 = (int)ceil(x + r_out);
    int y0 = (int)floor(y - r_out), y1 = (int)ceil(y + r_out);
    if (x0 < 0 || y0 < 0 || x1 >= w || y1 >= h)
        return -1;
    double sky = 0.0, sd = 0.0;
    int n_sky = sky_annulus(img, w, x0, y0, x1, y1, x, y, r_in, r_out, &sky, &sd);
    double annulus = M_PI * (r_out * r_out - r_in * r_in);
    if (n_sky < 2 || n_sky < 0.5 * annulus)
        return -1;
    double flux = 0.0, area = 0.0;
    int ax0 = (int)floor(x - r_ap - 1), ax1 = (int)ceil(x + r_ap + 1);
    int ay0 = (int)floor(y - r_ap - 1), ay1 = (int)ceil(y + r_ap + 1);
    for (int py = ay0; py <= ay1; py++)
        for (int px = ax0; px <= ax1; px++) {
            double f = inside(px, py, x, y, r_ap);
            if (f <= 0.0)
                continue;
            float v = img[(size_t)py * w + px];
            if (!isfinite(v))
                return -1;
            flux += f * (v - sky);
            area += f;
        }
    double var = area * sd * sd + area * area * sd * sd / n_sky;
    if (gain > 0.0 && flux > 0.0)
        var += flux / gain;
    out->flux = flux;
    out->flux_err = sqrt(var);
    out->sky = sky;
    out->sky_sd = sd;
    out->area = area;
    out->n_sky = n_sky;
    return 0;
}
