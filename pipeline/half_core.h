/*
 * half_core.h — float32 to IEEE-754 binary16 (float16), round to nearest,
 * ties to even, as one inline function that the CPU backend and the CUDA
 * kernels both compile, so that the two give identical bytes.
 *
 * Every NaN becomes 0x7E00 (the quiet NaN, sign clear: the residual's
 * "invalid"); values from 65520 in magnitude become ±Inf; below 2^-14 the
 * result is subnormal (or ±0), as IEEE-754 rounds. Plain integer
 * arithmetic, no compiler half type.
 */
#ifndef SS_HALF_CORE_H
#define SS_HALF_CORE_H

#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define SS_HALF_FN static __host__ __device__ __forceinline__
#else
#define SS_HALF_FN static inline
#endif

#define SS_F16_NAN 0x7E00u

/* The binary16 bits of f, rounded to nearest even. */
SS_HALF_FN uint16_t ss_f16_bits(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    const uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7FFFFFFFu;
    if (ax > 0x7F800000u)                       /* NaN */
        return (uint16_t)SS_F16_NAN;
    if (ax >= 0x477FF000u)                      /* >= 65520: rounds to Inf (Inf too) */
        return (uint16_t)(sign | 0x7C00u);
    if (ax >= 0x38800000u) {                    /* normal: drop 13 bits, ties to even */
        const uint32_t r = ax + 0xFFFu + ((ax >> 13) & 1u) - 0x38000000u;
        return (uint16_t)(sign | (r >> 13));
    }
    if (ax < 0x33000000u)                       /* at most 2^-25: rounds to 0 */
        return (uint16_t)sign;
    /* subnormal: units of 2^-24 */
    const uint32_t e = ax >> 23, mant = (ax & 0x7FFFFFu) | 0x800000u;
    const uint32_t shift = 126u - e;            /* 14 .. 24 */
    uint32_t q = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1u), halfway = 1u << (shift - 1u);
    if (rem > halfway || (rem == halfway && (q & 1u)))
        q++;
    return (uint16_t)(sign | q);
}

#endif
