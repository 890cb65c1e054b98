/* The scalar arithmetic of mmcv's kernels in T (float or at::Half) for the compiled mmcv emulations
 * (the *_mmcv_kernel.c files of three_nn, deform_roi_pool, border_align and carafe), as
 * gen/kernels/shared/mmcv_half.py and the bilinear sampling of gen/kernels/deform_roi_pool/mmcv_emulation.py compute it.
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

/* A loop built twice: for x86-64-v3 (AVX2 and FMA, where fmaf is one instruction; mark it MMCV_V3) and for the
 * baseline (fmaf a libm call): the same operations, so the same bits.  mmcv_v3(generic_only) says whether this
 * CPU runs the v3 build; generic_only is the library's own exported flag, set to 1 from Python (ctypes) so that
 * the tests check the baseline build's bits on any CPU. */
#if defined(__x86_64__) && defined(__GNUC__)
#define MMCV_V3 __attribute__((target("arch=x86-64-v3")))
MMCV_INLINE int mmcv_v3(int generic_only)
{
    __builtin_cpu_init();
    return !generic_only && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
#else
#define MMCV_V3
MMCV_INLINE int mmcv_v3(int generic_only) { (void)generic_only; return 0; }
#endif

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

/* ScalarT.mac, acc += a * b: fmaf(a, b, acc) for float (nvcc's contraction); for half the product rounded,
 * then the sum, nothing fused. */
MMCV_INLINE float mmcv_mac(float acc, float a, float b, int is_half)
{
    return is_half ? mmcv_round_to_half(acc + mmcv_round_to_half(a * b)) : fmaf(a, b, acc);
}

/* static_cast<T> of an int: through float (mmcv_emulation.as_t). */
MMCV_INLINE float mmcv_int_in_t(long x, int is_half) { return mmcv_in_t((float)x, is_half); }

/* atomicAdd(target, value) in T: the sum rounded to T (np.add.at in T). */
MMCV_INLINE void mmcv_atomic_add(float *target, float value, int is_half)
{
    *target = mmcv_in_t(*target + value, is_half);
}

/* One axis of bilinear_interpolate (mmcv_emulation._bilinear_axis), for a coordinate inside the map's
 * bounds: ``if (y <= 0) y = 0; y_low = (int)y;``, the snap onto the last row (``y = (T)y_low``), and
 * ly = y - y_low in T. */
MMCV_INLINE void mmcv_bilinear_axis(float coord, long size, int is_half, long *low, long *high, float *fraction)
{
    if (coord <= 0)
        coord = 0.0f;
    long l = mmcv_to_int(coord);
    if (l >= size - 1) {
        l = size - 1;
        coord = mmcv_int_in_t(l, is_half);
        *high = l;
    } else {
        *high = l + 1;
    }
    *low = l;
    *fraction = mmcv_in_t(coord - mmcv_int_in_t(l, is_half), is_half);
}

typedef struct {        /* the corners (y_low, x_low), (y_low, x_high), (y_high, x_low), (y_high, x_high) */
    long y_low, y_high, x_low, x_high;
    float weight[4];    /* hy*hx, hy*lx, ly*hx, ly*lx in T */
} MmcvBilinear;

/* bilinear_interpolate(_gradient)'s corners and weights at (y, x) in T on an H x W map
 * (mmcv_emulation.bilinear_corners); 0 where the point is more than a pixel outside (a NaN is inside). */
MMCV_INLINE int mmcv_bilinear(float y, float x, long H, long W, int is_half, MmcvBilinear *b)
{
    if (y < -1 || y > (float)H || x < -1 || x > (float)W)
        return 0;
    float ly, lx;
    mmcv_bilinear_axis(y, H, is_half, &b->y_low, &b->y_high, &ly);
    mmcv_bilinear_axis(x, W, is_half, &b->x_low, &b->x_high, &lx);
    const float hy = mmcv_in_t(1.0f - ly, is_half), hx = mmcv_in_t(1.0f - lx, is_half);
    b->weight[0] = mmcv_in_t(hy * hx, is_half);
    b->weight[1] = mmcv_in_t(hy * lx, is_half);
    b->weight[2] = mmcv_in_t(ly * hx, is_half);
    b->weight[3] = mmcv_in_t(ly * lx, is_half);
    return 1;
}

/* Element i of a T array (float, or float16 bits). */
MMCV_INLINE float mmcv_value_of(const void *array, long i, int is_half)
{
    return is_half ? mmcv_half_to_float(((const uint16_t *)array)[i]) : ((const float *)array)[i];
}

/* Float32 carriers written as ScalarT.result writes them: in T, every NaN canonical. */
static inline void mmcv_write_result(const float *sums, long count, int is_half, void *out)
{
    if (is_half)
        for (long i = 0; i < count; i++)
            ((uint16_t *)out)[i] = mmcv_half_bits(sums[i]);
    else
        for (long i = 0; i < count; i++)
            ((float *)out)[i] = mmcv_canonical_float(sums[i]);
}

#endif
