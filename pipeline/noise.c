/*
 * noise.c — robust noise of a residual (ALGORITHM.md §5):
 * σ = 1.4826 · MAD over the finite pixels on a sub-sampling grid.
 *
 * Both medians are exact order statistics (rank floor((n-1)/2), the lower
 * median) found by selection, not by sorting: a Hoare-partition
 * quickselect with a median-of-three pivot, O(n) expected, in place on a
 * copy in the caller's scratch. Any exact selection gives the same value,
 * so a CUDA histogram/selection can reproduce the result bit for bit.
 */
#include "stages.h"

#include <math.h>

/* The Gaussian consistency factor: MAD = 0.6745·σ for normal noise. */
#define SS_MAD_TO_SIGMA 1.4826

static inline void swapf(float *a, float *b)
{
    float t = *a;
    *a = *b;
    *b = t;
}

/* The k-th smallest (0-based) of v[0..n-1]; v is permuted. No NaN in v.
 * Classic iterative quickselect (Numerical Recipes' `select`): the pivot
 * is the median of v[lo], v[mid], v[hi], which also places sentinels at
 * both ends so that the inner scans need no bounds checks. */
static float select_kth(float *v, size_t n, size_t k)
{
    size_t lo = 0, hi = n - 1;
    for (;;) {
        if (hi <= lo + 1) {
            if (hi == lo + 1 && v[hi] < v[lo])
                swapf(&v[lo], &v[hi]);
            return v[k];
        }
        size_t mid = lo + (hi - lo) / 2;
        swapf(&v[mid], &v[lo + 1]);
        if (v[lo] > v[hi])
            swapf(&v[lo], &v[hi]);
        if (v[lo + 1] > v[hi])
            swapf(&v[lo + 1], &v[hi]);
        if (v[lo] > v[lo + 1])
            swapf(&v[lo], &v[lo + 1]);
        /* now v[lo] <= v[lo+1] (pivot) <= v[hi] */
        size_t i = lo + 1, j = hi;
        const float pivot = v[lo + 1];
        for (;;) {
            do
                i++;
            while (v[i] < pivot);
            do
                j--;
            while (v[j] > pivot);
            if (j < i)
                break;
            swapf(&v[i], &v[j]);
        }
        v[lo + 1] = v[j];
        v[j] = pivot;
        if (j >= k)
            hi = j - 1;
        if (j <= k)
            lo = i;
    }
}

float ss_noise_mad(const float *x, int w, int h, int stride, float *scratch)
{
    if (stride < 1)
        stride = 1;
    size_t n = 0;
    for (int y = 0; y < h; y += stride) {
        const float *row = x + (size_t)y * (size_t)w;
        for (int i = 0; i < w; i += stride) {
            const float v = row[i];
            if (isfinite(v))
                scratch[n++] = v;
        }
    }
    if (n == 0)
        return NAN;
    const size_t k = (n - 1) / 2;
    const float m = select_kth(scratch, n, k);
    /* the samples are still all in scratch (permuted): reuse them in place */
    for (size_t i = 0; i < n; i++)
        scratch[i] = fabsf(scratch[i] - m);
    const float mad = select_kth(scratch, n, k);
    return (float)(SS_MAD_TO_SIGMA * (double)mad);
}
