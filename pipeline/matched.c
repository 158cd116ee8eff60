/*
 * matched.c — the matched filter and SNR map (ALGORITHM.md §6): the
 * cleaned residual convolved with the Gaussian PSF, separably (rows, then
 * columns), valid-aware (invalid and out-of-frame taps contribute zero and
 * the result is renormalised by the kernel weight that was valid), scaled
 * to unit noise.
 *
 * All sums are float with taps in ascending order, as stages.h fixes, so
 * a CUDA kernel doing the same arithmetic agrees to the last bit or so.
 * Loops run over x innermost (tap outer) and are marked `omp simd` (the
 * pixels of a row are independent), so that they vectorise; each pixel
 * still sees its taps in ascending order, one rounding per operation.
 */
#include "stages.h"

#include <math.h>
#include <string.h>

/* Output pixels per chunk of the column pass (its accumulators live on
 * the stack). */
#define SS_MF_CHUNK 512

/* The kernel weight below which a renormalised value is too extrapolated
 * to trust (more than half the kernel was invalid). */
#define SS_MF_MIN_WEIGHT 0.5f

int ss_psf_kernel_phase(double psf_sigma, double phase, float *k)
{
    if (!(psf_sigma > 0.0) || !isfinite(psf_sigma)) {
        k[0] = 1.0f;            /* no PSF: a delta */
        return 0;
    }
    int R = (int)ceil(3.0 * psf_sigma);
    if (R > SS_KERNEL_MAX_RADIUS)
        R = SS_KERNEL_MAX_RADIUS;
    double t[2 * SS_KERNEL_MAX_RADIUS + 1], s = 0.0;
    for (int i = 0; i <= 2 * R; i++) {
        const double d = i - R - phase;
        t[i] = exp(-d * d / (2.0 * psf_sigma * psf_sigma));
        s += t[i];
    }
    for (int i = 0; i <= 2 * R; i++)
        k[i] = (float)(t[i] / s);
    return R;
}

int ss_psf_kernel(double psf_sigma, float *k)
{
    return ss_psf_kernel_phase(psf_sigma, 0.0, k);
}

double ss_mf_phase(int phases, int p)
{
    return (double)(2 * p + 1 - phases) / (2.0 * phases);
}

int ss_mf_phases_used(double psf_sigma, int phases)
{
    if (!(psf_sigma > 0.0) || !isfinite(psf_sigma))
        return 1;               /* a delta has no sub-pixel phase */
    if (phases <= 0)
        return psf_sigma < SS_MF_AUTO_SIGMA ? 2 : 1;
    return SS_MIN(phases, SS_MF_MAX_PHASES);
}

/* Row pass with taps k (k2 = k·k) of radius R: h1 = Σ k·v·in, hv1 = Σ
 * k·v, hv2 = Σ k2·v (ss_matched_filter's contract). Each chunk of a row
 * is first copied with its apron into v·in and v (0 for invalid and
 * out-of-frame taps: adding k·0 = 0 is exact), so the tap loops are plain
 * multiply-adds. */
static void row_pass(const float *in, int w, int h, int R, const float *k, const float *k2,
                     float *h1, float *hv1, float *hv2)
{
#pragma omp parallel for schedule(static)
    for (int y = 0; y < h; y++) {
        const float *ir = in + (size_t)y * (size_t)w;
        float mv[SS_MF_CHUNK + 2 * SS_KERNEL_MAX_RADIUS], mw[SS_MF_CHUNK + 2 * SS_KERNEL_MAX_RADIUS];
        float hs[SS_MF_CHUNK], ws[SS_MF_CHUNK], w2[SS_MF_CHUNK];
        for (int c0 = 0; c0 < w; c0 += SS_MF_CHUNK) {
            const int len = SS_MIN(SS_MF_CHUNK, w - c0);
            for (int j = 0; j < len + 2 * R; j++) {
                const int x = c0 - R + j;
                const float v = x >= 0 && x < w ? ir[x] : NAN;
                const int ok = isfinite(v);
                mv[j] = ok ? v : 0.0f;
                mw[j] = ok ? 1.0f : 0.0f;
            }
            for (int x = 0; x < len; x++)
                hs[x] = ws[x] = w2[x] = 0.0f;
            for (int i = 0; i <= 2 * R; i++) {
                const float ki = k[i], ki2 = k2[i];
#pragma omp simd
                for (int x = 0; x < len; x++) {
                    hs[x] += ki * mv[x + i];
                    ws[x] += ki * mw[x + i];
                    w2[x] += ki2 * mw[x + i];
                }
            }
            memcpy(h1 + (size_t)y * (size_t)w + c0, hs, (size_t)len * sizeof(float));
            memcpy(hv1 + (size_t)y * (size_t)w + c0, ws, (size_t)len * sizeof(float));
            memcpy(hv2 + (size_t)y * (size_t)w + c0, w2, (size_t)len * sizeof(float));
        }
    }
}

/* Column pass with taps k (k2 = k·k): num = Σ k·h1, den = Σ k·hv1, den2 =
 * Σ k2·hv2; this phase's value v = num / (σ·sqrtf(den2)) where the centre
 * is finite and den >= SS_MF_MIN_WEIGHT, else NaN. first: z = v; else z
 * takes v where z is NaN or |v| > |z| (the fold of ss_matched_filter). */
static void col_pass(const float *in, int w, int h, int R, const float *k, const float *k2,
                     const float *h1, const float *hv1, const float *hv2, float sigma, int first,
                     float *z)
{
#pragma omp parallel for schedule(static)
    for (int y = 0; y < h; y++) {
        const int j0 = SS_MAX(0, R - y), j1 = SS_MIN(2 * R, h - 1 - y + R);  /* rows in frame */
        for (int c0 = 0; c0 < w; c0 += SS_MF_CHUNK) {
            const int len = SS_MIN(SS_MF_CHUNK, w - c0);
            float num[SS_MF_CHUNK], den[SS_MF_CHUNK], den2[SS_MF_CHUNK];
            for (int x = 0; x < len; x++)
                num[x] = den[x] = den2[x] = 0.0f;
            for (int j = j0; j <= j1; j++) {
                const size_t off = (size_t)(y + j - R) * (size_t)w + (size_t)c0;
                const float kj = k[j], kj2 = k2[j];
                const float *hr = h1 + off, *vr = hv1 + off, *v2 = hv2 + off;
#pragma omp simd
                for (int x = 0; x < len; x++) {
                    num[x] += kj * hr[x];
                    den[x] += kj * vr[x];
                    den2[x] += kj2 * v2[x];
                }
            }
            const float *ir = in + (size_t)y * (size_t)w + c0;
            float *zr = z + (size_t)y * (size_t)w + c0;
            for (int x = 0; x < len; x++) {
                const float v = isfinite(ir[x]) && den[x] >= SS_MF_MIN_WEIGHT
                                    ? num[x] / (sigma * sqrtf(den2[x]))
                                    : NAN;
                if (first || isnan(zr[x]) || fabsf(v) > fabsf(zr[x]))
                    zr[x] = v;
            }
        }
    }
}

void ss_matched_filter(const float *in, int w, int h, double psf_sigma, int phases, float sigma,
                       float *z, float *scratch)
{
    const int n = ss_mf_phases_used(psf_sigma, phases);
    const size_t npix = (size_t)w * (size_t)h;
    float *h1 = scratch, *hv1 = scratch + npix, *hv2 = scratch + 2 * npix;
    float kx[2 * SS_KERNEL_MAX_RADIUS + 1], kx2[2 * SS_KERNEL_MAX_RADIUS + 1];
    float ky[2 * SS_KERNEL_MAX_RADIUS + 1], ky2[2 * SS_KERNEL_MAX_RADIUS + 1];
    /* phases in the order (px, py), px outer: the row pass once per x phase */
    for (int px = 0; px < n; px++) {
        const int R = ss_psf_kernel_phase(psf_sigma, ss_mf_phase(n, px), kx);
        for (int i = 0; i <= 2 * R; i++)
            kx2[i] = kx[i] * kx[i];
        row_pass(in, w, h, R, kx, kx2, h1, hv1, hv2);
        for (int py = 0; py < n; py++) {
            ss_psf_kernel_phase(psf_sigma, ss_mf_phase(n, py), ky);
            for (int i = 0; i <= 2 * R; i++)
                ky2[i] = ky[i] * ky[i];
            col_pass(in, w, h, R, ky, ky2, h1, hv1, hv2, sigma, px == 0 && py == 0, z);
        }
    }
}
