/* The scalar arithmetic of mmcv's kernels in T (float or at::Half) for the compiled mmcv emulations
 * (the *_mmcv_kernel.c files of three_nn and deform_roi_pool), as gen/kernels/shared/mmcv_half.py computes it.
 *
 * Values are carried in float32 whatever T is (a half value is exact in float32); an at::Half operator
 * is the float32 operation rounded to half (float32 has enough bits that this double rounding is the
 * correctly rounded half result for + - * /).  Rounding to half is mmcv_half.round_to_half's own
 * arithmetic, operation for operation: adding and subtracting 1.5 * 2^(e + 13), e the exponent clamped to
 * [-14, 16], the sign copied back, |r| >= 65536 made infinite.  Built with -ffp-contract=off and without
 * fast-math (gen/native.py): nothing fused that is not written fmaf, no flush of subnormals.
 *
 * gen/native.py names a library by its source and the headers it includes, so editing this file
 * rebuilds every loop that includes it.
 */
#ifndef OPCASE_MMCV_HALF_H
#define OPCASE_MMCV_HALF_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#define MMCV_INLINE static inline __attribute__((always_inline))

MMCV_INLINE uint32_t mmcv_bits_of(float x) { uint32_t u; memcpy(&u, &x, 4); return u; }
MMCV_INLINE float mmcv_float_of(uint32_t u) { float x; memcpy(&x, &u, 4); return x; }

/* x rounded to the nearest half (ties to even), kept in float32: x.astype(float16).astype(float32). */
MMCV_INLINE float mmcv_round_to_half(float x)
{
    uint32_t shifter = mmcv_bits_of(x) & 0x7F800000u;
    const uint32_t low = (127u - 14u) << 23, high = (127u + 16u) << 23;
    shifter = shifter < low ? low : shifter > high ? high : shifter;
    shifter += (13u << 23) | 0x400000u;
    float rounded = x + mmcv_float_of(shifter);
    rounded -= mmcv_float_of(shifter);
    rounded = mmcv_float_of((mmcv_bits_of(rounded) & 0x7FFFFFFFu) | (mmcv_bits_of(x) & 0x80000000u));
    if (fabsf(rounded) >= 65536.0f)
        rounded = mmcv_float_of(mmcv_bits_of(INFINITY) | (mmcv_bits_of(rounded) & 0x80000000u));
    return rounded;
}

/* A float32 result of one operation in T: rounded to half where T is at::Half. */
MMCV_INLINE float mmcv_in_t(float x, int is_half) { return is_half ? mmcv_round_to_half(x) : x; }

/* ``(int)x`` as the GPU converts a float (cvt.rzi.s32.f32): toward zero, saturated to int32, NaN to 0
 * (mmcv_emulation.to_int). */
MMCV_INLINE long mmcv_to_int(float x)
{
    if (isnan(x))
        return 0;
    const double t = trunc((double)x);
    return t < -2147483648.0 ? -2147483648L : t > 2147483647.0 ? 2147483647L : (long)t;
}

/* A float16's bits as float32 (exact). */
MMCV_INLINE float mmcv_half_to_float(uint16_t h)
{
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exponent = (h >> 10) & 0x1Fu, fraction = h & 0x3FFu;
    if (exponent == 0x1F)
        return mmcv_float_of(sign | 0x7F800000u | (fraction << 13));
    if (exponent == 0) {                                        /* zero and subnormals: fraction * 2^-24 */
        const float magnitude = (float)fraction * 0x1p-24f;
        return mmcv_float_of(sign | mmcv_bits_of(magnitude));
    }
    return mmcv_float_of(sign | ((exponent + 112u) << 23) | (fraction << 13));
}

/* The float16 bits of a float32 carrier that holds a half value, as ScalarT.result gives them: every NaN
 * the GPU's canonical 0x7fff (mmcv_half.canonical_nan). */
MMCV_INLINE uint16_t mmcv_half_bits(float x)
{
    if (isnan(x))
        return 0x7FFFu;
    const uint32_t bits = mmcv_bits_of(x);
    const uint16_t sign = (uint16_t)((bits >> 16) & 0x8000u);
    const float magnitude = fabsf(x);
    if (isinf(x))
        return sign | 0x7C00u;
    if (magnitude < 0x1p-14f)                                   /* zero and subnormals: exact multiples of 2^-24 */
        return sign | (uint16_t)(magnitude * 0x1p24f);
    return sign | (uint16_t)((((bits >> 23) & 0xFFu) - 112u) << 10) | (uint16_t)((bits >> 13) & 0x3FFu);
}

/* A float32 result as ScalarT.result gives it: every NaN the GPU's canonical 0x7fffffff. */
MMCV_INLINE float mmcv_canonical_float(float x) { return isnan(x) ? mmcv_float_of(0x7FFFFFFFu) : x; }

#endif
