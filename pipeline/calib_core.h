/*
 * calib_core.h — one pixel of ss_calibrate_frame (stages.h), header-only
 * so that the CPU reference (calib.c) and the CUDA kernel (cuda/k_calib.cu)
 * run the very same double arithmetic.
 */
#ifndef SS_CALIB_CORE_H
#define SS_CALIB_CORE_H

#include <math.h>

#if defined(__CUDACC__)
#define SS_CAL_FN static __host__ __device__ __forceinline__
#else
#define SS_CAL_FN static inline
#endif

/* The calibrated value of raw v: (((v − rb) − b) − d·s) / f in double,
 * rounded to float once; without a flat (divide 0) the division by 1 is
 * skipped, which is exact. NaN unless ok (the pixel's validity and bad
 * flags), v finite and below sat, f finite and positive, and the float
 * finite: NaN is the only invalid marker. d·s is rounded before the
 * subtraction (no fused multiply-add: the build's contract). */
SS_CAL_FN float ss_calib_px(double v, double rb, double b, double d, double s, double f,
                            int divide, int ok, double sat)
{
    ok = ok && isfinite(v) && v < sat && isfinite(f) && f > 0.0;
    const double c = ((v - rb) - b) - d * s;
    const float o = (float)(divide ? c / f : c);
    return ok && isfinite(o) ? o : NAN;
}

#endif
