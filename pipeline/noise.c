/*
 * noise.c — robust noise of a residual (ALGORITHM.md §5):
 * σ = 1.4826 · MAD over the finite pixels on a sub-sampling grid.
 *
 * Both medians are exact order statistics (rank floor((n-1)/2), the lower
 * median), found by radix selection rather than by sorting: a float's
 * bits, with the sign handled, order like the float itself, so the k-th
 * smallest value is found digit by digit (11, 11 and 10 bits, most
 * significant first): one histogram pass per digit over the samples that
 * share the digits found so far. Six passes in all (three per median),
 * read straight from the frame with the stride (no copy), rows in
 * parallel with per-thread histograms (integer counts: the same result
 * for any number of threads). Any exact selection gives the same value,
 * and a GPU does the same histograms with atomics.
 */
#include "stages.h"
#include "noise_core.h"

#include <math.h>
#include <string.h>

/* The Gaussian consistency factor: MAD = 0.6745·σ for normal noise. */
#define SS_MAD_TO_SIGMA 1.4826

/* Digits of the radix selection: bits [31..21], [20..10], [9..0]. */
#define SS_RADIX_BITS 11
#define SS_RADIX_BINS (1 << SS_RADIX_BITS)
#define SS_RADIX_WAYS 4
static const int radix_shift[3] = { 21, 10, 0 };
static const uint32_t radix_mask[3] = { 0x7ffu, 0x7ffu, 0x3ffu };

static inline uint32_t float_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float bits_float(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* An unsigned key that orders like the float (for non-NaN floats):
 * negative floats have their bits flipped, positive ones the sign set. */
static inline uint32_t float_key(float f)
{
    const uint32_t u = float_bits(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

static inline float key_float(uint32_t k)
{
    return bits_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

static inline int is_finite_bits(uint32_t u)
{
    return (u & 0x7f800000u) != 0x7f800000u;
}

/* Histogram of digit `d` of the keys of the samples whose higher digits
 * equal `prefix` (under `pmask`). The samples are x at rows and columns
 * that are multiples of stride, finite; with mad, the sample is
 * fabsf(x - m) (in float) instead of x. */
static void radix_hist(const float *x, int w, int h, int stride, int mad, float m, uint32_t prefix,
                       uint32_t pmask, int d, uint64_t hist[SS_RADIX_BINS])
{
    const int shift = radix_shift[d];
    const uint32_t dm = radix_mask[d];
    memset(hist, 0, SS_RADIX_BINS * sizeof hist[0]);
#pragma omp parallel
    {
        /* SS_RADIX_WAYS interleaved sub-histograms per thread: noise piles
         * into a few bins, and consecutive increments of one counter would
         * wait on each other */
        uint32_t sub[SS_RADIX_WAYS][SS_RADIX_BINS];
        memset(sub, 0, sizeof sub);
#pragma omp for schedule(static)
        for (int y = 0; y < h; y += stride) {
            const float *row = x + (size_t)y * (size_t)w;
            int j = 0;
            for (int i = 0; i < w; i += stride, j = (j + 1) & (SS_RADIX_WAYS - 1)) {
                const float v = row[i];
                if (!is_finite_bits(float_bits(v)))
                    continue;
                const uint32_t key = float_key(mad ? fabsf(v - m) : v);
                if ((key & pmask) == prefix)
                    sub[j][(key >> shift) & dm]++;
            }
        }
#pragma omp critical(ss_noise_hist)
        for (int b = 0; b < SS_RADIX_BINS; b++)
            for (int q = 0; q < SS_RADIX_WAYS; q++)
                hist[b] += sub[q][b];
    }
}

/* The k-th smallest sample (0-based); *n_out (if not NULL) gets the
 * number of samples, and k = -1 asks for the lower median. Returns NaN
 * when there are no samples. */
static float radix_select(const float *x, int w, int h, int stride, int mad, float m, int64_t k,
                          uint64_t *n_out)
{
    uint64_t hist[SS_RADIX_BINS];
    uint32_t prefix = 0, pmask = 0;
    for (int d = 0; d < 3; d++) {
        radix_hist(x, w, h, stride, mad, m, prefix, pmask, d, hist);
        if (d == 0) {
            uint64_t n = 0;
            for (int b = 0; b < SS_RADIX_BINS; b++)
                n += hist[b];
            if (n_out)
                *n_out = n;
            if (n == 0)
                return NAN;
            if (k < 0)
                k = (int64_t)((n - 1) / 2);
        }
        /* the bin holding rank k; k becomes the rank within it */
        int b = 0;
        while ((uint64_t)k >= hist[b]) {
            k -= (int64_t)hist[b];
            b++;
        }
        prefix |= (uint32_t)b << radix_shift[d];
        pmask |= radix_mask[d] << radix_shift[d];
    }
    return key_float(prefix);
}

/* The lower median m and the MAD of the samples (NaN, NaN if none). */
/* s = 1.4826·MAD of the samples and their lower median *m (stride >= 1);
 * NaN when there is no sample. */
static float mad_sigma(const float *x, int w, int h, int stride, float *m)
{
    uint64_t n = 0;
    *m = NAN;
    if (w <= 0 || h <= 0)
        return NAN;
    *m = radix_select(x, w, h, stride, 0, 0.0f, -1, &n);
    if (n == 0)
        return NAN;
    const float mad = radix_select(x, w, h, stride, 1, *m, -1, NULL);
    return (float)(SS_MAD_TO_SIGMA * (double)mad);
}

float ss_noise_mad(const float *x, int w, int h, int stride, float *scratch)
{
    (void)scratch;              /* the selection reads the frame in place */
    float m;
    return mad_sigma(x, w, h, stride < 1 ? 1 : stride, &m);
}

/* Σq, Σq², n over the samples within the clip window (stages.h). */
static void clip_moments(const float *x, int w, int h, int stride, float m, float s,
                         int64_t *s1, int64_t *s2, int64_t *n)
{
    int64_t a1 = 0, a2 = 0, an = 0;
#pragma omp parallel for schedule(static) reduction(+ : a1, a2, an)
    for (int y = 0; y < h; y += stride) {
        const float *row = x + (size_t)y * (size_t)w;
        for (int i = 0; i < w; i += stride)
            ss_noise_clip_add(row[i], m, s, &a1, &a2, &an);
    }
    *s1 = a1;
    *s2 = a2;
    *n = an;
}

float ss_noise_clipped(const float *x, int w, int h, int stride)
{
    if (stride < 1)
        stride = 1;
    float m;
    const float s = mad_sigma(x, w, h, stride, &m);
    if (!(s > 0.0f) || !isfinite(s))
        return s;
    int64_t s1, s2, n;
    clip_moments(x, w, h, stride, m, s, &s1, &s2, &n);
    return ss_noise_clip_sigma(s, s1, s2, n);
}
