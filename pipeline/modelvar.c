/*
 * modelvar.c — the model-error term of the noise model (stages.h §6b):
 * near bright stars the residual holds what the prediction gets wrong,
 * in proportion to the star, besides the sky noise. The SNR map z is
 * divided by sqrt(1 + β·t²), t the star's own SNR map, β fitted per frame
 * from the star pixels by a median (so that movers and cosmic hits on
 * stars do not pull it, and a frame whose prediction is right gets β ≈ 0).
 * The division decides whether something is there, not how far it
 * reaches: ss_mv_apply keeps z as it was (the backends' SNR_RAW plane),
 * detection seeds on the divided map and grows on that one
 * (ss_label_seeded), so that a streak crossing a star's ring is not cut
 * there.
 *
 * Why a term in the variance and not a better prediction: the seeing's
 * second order and the interpolation's error were tried as fitted terms
 * (guided.biharmonic, and seeing terms in the weights: docs/QUALITY.md);
 * each fit took up other structure and raised the false alarms elsewhere.
 * A variance term cannot add a residual; it only lowers z where the
 * prediction is known to be uncertain (the astrometric and flux-scaling
 * noise terms of difference-imaging pipelines, ZOGY §3.3).
 */
#include "stages.h"

#include <math.h>
#include <string.h>

int ss_mv_radius(double psf_sigma)
{
    const int r = (int)ceil(SS_MV_RADIUS_PSF * psf_sigma);
    return r > 2 ? r : 2;
}

void ss_mv_template(const float *t, int w, int h, float *D)
{
#pragma omp parallel for schedule(static)
    for (int y = 0; y < h; y++) {
        float *dr = D + (size_t)y * (size_t)w;
        const float *tr = t + (size_t)y * (size_t)w;
        for (int x = 0; x < w; x++) {
            if (x == 0 || y == 0 || x == w - 1 || y == h - 1) {
                dr[x] = NAN;
                continue;
            }
            const float gx = 0.5f * (tr[x + 1] - tr[x - 1]);
            const float gy = 0.5f * (tr[x + (size_t)w] - tr[x - (size_t)w]);
            const float g2 = gx * gx + gy * gy;
            const float v = g2 / fmaxf(fmaxf(tr[x], sqrtf(g2)), 1.0f);
            dr[x] = isnan(tr[x]) ? NAN : v;     /* a NaN tap makes gx or gy NaN */
        }
    }
}

void ss_mv_clip(const float *P, const float *A, float *out, size_t n)
{
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++)
        out[i] = P[i] - fmaxf(A[i], 0.0f);
}

void ss_mv_restore(const float *S, const float *A, float *out, size_t n)
{
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++)
        out[i] = S[i] + fmaxf(A[i], 0.0f);
}

void ss_star_template(const float *P, int w, int h, int r, double psf_sigma, float sigma,
                      float *D, float *scratch)
{
    const size_t npix = (size_t)w * (size_t)h;
    float *A = scratch, *B = scratch + npix, *S = scratch + 2 * npix, *t = A;
    ss_hipass(P, w, h, r, A, scratch + 3 * npix);       /* A = P − box(P) */
    ss_mv_clip(P, A, B, npix);                          /* B = min(P, box(P)): stars cut */
    ss_hipass(B, w, h, r, S, scratch + 3 * npix);       /* S = B − box(B) */
    ss_mv_restore(S, A, B, npix);                       /* B = S + the cut = P − box(B) */
    ss_matched_filter(B, w, h, psf_sigma, 1, sigma, t, scratch + 2 * npix);
    ss_mv_template(t, w, h, D);
}

int ss_mv_gather(const float *z, const float *t, int w, int h, int stride, float tmin, float *q)
{
    if (stride < 1)
        stride = 1;
    int n = 0;
    for (int y = 0; y < h; y += stride) {
        const float *zr = z + (size_t)y * (size_t)w, *tr = t + (size_t)y * (size_t)w;
        for (int x = 0; x < w; x += stride)
            if (isfinite(zr[x]) && isfinite(tr[x]) && tr[x] >= tmin)
                q[n++] = ss_mv_q(zr[x], tr[x]);
    }
    return n;
}

/* The k-th smallest of a[0..n-1] (0-based; a is reordered): Hoare's
 * selection with the middle element as pivot. NaN-free input. */
static float select_kth(float *a, int n, int k)
{
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        const float pv = a[lo + (hi - lo) / 2];
        int i = lo, j = hi;
        while (i <= j) {
            while (a[i] < pv)
                i++;
            while (a[j] > pv)
                j--;
            if (i <= j) {
                const float tmp = a[i];
                a[i++] = a[j];
                a[j--] = tmp;
            }
        }
        if (k <= j)
            hi = j;
        else if (k >= i)
            lo = i;
        else
            return a[k];
    }
    return a[k];
}

float ss_mv_beta(float *q, int n)
{
    if (n < SS_MV_MIN_SAMPLES)
        return 0.0f;
    const float m = select_kth(q, n, (n - 1) / 2);
    return m > 0.0f ? m : 0.0f;
}

void ss_mv_apply(float *z, const float *t, int w, int h, float beta, float *raw)
{
    const size_t npix = (size_t)w * (size_t)h;
    if (raw)
        memcpy(raw, z, npix * sizeof *z);
    if (!(beta > 0.0f))
        return;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < npix; i++) {
        const float zv = z[i];
        if (isfinite(zv) && isfinite(t[i]))
            z[i] = zv / sqrtf(1.0f + beta * t[i] * t[i]);
    }
}
