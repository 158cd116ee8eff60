/*
 * cu_clean.cuh — the sharp-outlier test of ss_clean_sharp (clean.c) as a
 * device function, for the kernels that apply it: the history store
 * (k_whiten.cu) and the registration input (k_register.cu).
 */
#ifndef SS_CU_CLEAN_CUH
#define SS_CU_CLEAN_CUH

#include <cuda_runtime.h>
#include <math.h>

/* Minimum of the finite 8-neighbours of (x, y) (NaN if none), as clean.c. */
__device__ __forceinline__ float cu_ring_min(const float *f, int w, int h, int x, int y)
{
    float m = __int_as_float(0x7fc00000);
    for (int dy = -1; dy <= 1; dy++) {
        const int yy = y + dy;
        if (yy < 0 || yy >= h)
            continue;
        for (int dx = -1; dx <= 1; dx++) {
            const int xx = x + dx;
            if ((dx == 0 && dy == 0) || xx < 0 || xx >= w)
                continue;
            const float v = f[(size_t)yy * (size_t)w + (size_t)xx];
            if (isfinite(v) && !(v >= m))
                m = v;
        }
    }
    return m;
}

/* The frame's pixel (x, y), of value v, after ss_clean_sharp: replaced by
 * the median md where v - md > (float)k·σ and v - md >= ratio·(v - ring
 * min). The caller loads v and md (with its other loads, not after them). */
__device__ __forceinline__ float cu_clean_v(const float *frame, float v, float md, float sigma,
                                            double k, double ratio, int w, int h, int x, int y)
{
    if (!isfinite(v) || !isfinite(md) || !(sigma > 0.0f))
        return v;
    const float dv = v - md;
    if (!(dv > (float)k * sigma))
        return v;
    float lo = cu_ring_min(frame, w, h, x, y);
    if (!isfinite(lo))
        lo = md;
    return dv >= (float)ratio * (v - lo) ? md : v;
}

/* The same, v read here. */
__device__ __forceinline__ float cu_clean_value(const float *frame, float md, float sigma,
                                                double k, double ratio, int w, int h, int x,
                                                int y)
{
    return cu_clean_v(frame, frame[(size_t)y * (size_t)w + (size_t)x], md, sigma, k, ratio, w, h,
                      x, y);
}

#endif
