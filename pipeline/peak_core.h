/*
 * peak_core.h — a point source's position from its SNR peak (ALGORITHM.md
 * §7, "position"), header-only so that the CPU reference (measure.c) and
 * the CUDA kernel (cuda/k_detect.cu, k_acc_finish) gather the same four
 * neighbours, and ss_measure_finish (shared) refines from them.
 *
 * The matched filter's output around a point source is its PSF correlated
 * with the kernel: for Gaussians, a Gaussian of variance σ_psf² + σ_k² +
 * 1/12, whose logarithm is exactly a parabola. Its maximum is the
 * maximum-likelihood position for a known PSF in white noise, so the
 * parabola through ln z at the peak and its two neighbours on each axis
 * places the source without the noise of a flux-weighted centroid over
 * the footprint (docs/QUALITY.md, "Point positions", has the figures).
 */
#ifndef SS_PEAK_CORE_H
#define SS_PEAK_CORE_H

#include <math.h>

#if defined(__CUDACC__)
#define SS_PK_FN static __host__ __device__ __forceinline__
#else
#define SS_PK_FN static inline
#endif

/* s·z at the neighbours of pixel idx of the w×h plane z, in the order x-1,
 * x+1, y-1, y+1; NaN outside the frame, and all four NaN when idx < 0. */
SS_PK_FN void ss_peak_neighbours(const float *z, int w, int h, int idx, int s, float *zn)
{
    zn[0] = zn[1] = zn[2] = zn[3] = NAN;
    if (idx < 0 || w <= 0)
        return;
    const int x = idx % w, y = idx / w;
    const float sf = (float)s;
    if (x > 0)
        zn[0] = sf * z[idx - 1];
    if (x < w - 1)
        zn[1] = sf * z[idx + 1];
    if (y > 0)
        zn[2] = sf * z[idx - w];
    if (y < h - 1)
        zn[3] = sf * z[idx + w];
}

/* The offset of the parabola's vertex through ln lo, ln c, ln hi at -1, 0,
 * +1, in [-½, ½] when c is at least lo and hi, all three positive (then
 * the caller's peak is the pixel nearest the vertex). Returns 0 with *off
 * unchanged when any value is not finite and positive or c is below a
 * neighbour. */
SS_PK_FN int ss_peak_offset(float lo, float c, float hi, double *off)
{
    if (!(lo > 0.0f) || !(hi > 0.0f) || !(c >= lo) || !(c >= hi) || !isfinite(c))
        return 0;
    const double l = log((double)lo), m = log((double)c), r = log((double)hi);
    const double curv = l - 2.0 * m + r;
    *off = curv < 0.0 ? 0.5 * (l - r) / curv : 0.0;
    return 1;
}

#endif
