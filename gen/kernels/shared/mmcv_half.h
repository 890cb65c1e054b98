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

#endif
