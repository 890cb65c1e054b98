/* float16 and float32 arrays widened to float64, the same bits as numpy's casts, several times faster.
 *
 * Widening is exact for every finite value and infinity, so the hardware conversions (F16C's vcvtph2ps,
 * then vcvtps2pd) give numpy's values.  Only NaNs may differ: the hardware quiets a signalling NaN, while
 * numpy keeps its payload as it is; so every NaN is rewritten with numpy's formula (the half's sign, an
 * all-ones exponent, its significand shifted up; a float's likewise).  Without F16C/AVX the loops are
 * plain C doing the same.
 */
#include <stdint.h>
#include <string.h>

static inline uint64_t half_bits_to_double_bits(uint16_t h)
{
    const uint64_t sign = (uint64_t)(h & 0x8000u) << 48;
    const uint16_t exponent = h & 0x7c00u;
    if (exponent == 0x7c00u)                      /* inf or NaN: the significand as it is */
        return sign | 0x7ff0000000000000ULL | ((uint64_t)(h & 0x03ffu) << 42);
    if (exponent != 0)                            /* normal: rebias the exponent */
        return sign | (((uint64_t)(h & 0x7fffu) + 0xfc000u) << 42);
    uint16_t significand = h & 0x03ffu;           /* zero or subnormal */
    if (significand == 0)
        return sign;
    int shift = 0;
    while (!(significand & 0x0400u)) {
        significand <<= 1;
        ++shift;
    }
    /* value = significand * 2^(-14 - 10 - shift), leading bit dropped */
    return sign | ((uint64_t)(1023 - 15 - shift + 1) << 52) | ((uint64_t)(significand & 0x03ffu) << 42);
}

static void widen_half_plain(const uint16_t *source, uint64_t *target, long n)
{
    for (long i = 0; i < n; ++i)
        target[i] = half_bits_to_double_bits(source[i]);
}

static void widen_float_plain(const float *source, double *target, long n)
{
    for (long i = 0; i < n; ++i)
        target[i] = source[i];
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

/* 8 at a time; a block holding a NaN is redone by the plain formula.
 *
 * Both AVX loops clear the upper halves of the ymm registers (vzeroupper) before they go on in plain code
 * and before they return: GCC leaves them dirty where a loop ends in a (tail) call, and the caller's
 * SSE code then runs slower (measured: border_align_backward's compiled golden 1.3-1.5x slower right
 * after a float16 widening, on this project's AMD Zen 4). */
__attribute__((target("avx,f16c"))) static void widen_half_f16c(const uint16_t *source, uint64_t *target, long n)
{
    long i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 single = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(source + i)));
        _mm256_storeu_pd((double *)(target + i), _mm256_cvtps_pd(_mm256_castps256_ps128(single)));
        _mm256_storeu_pd((double *)(target + i + 4), _mm256_cvtps_pd(_mm256_extractf128_ps(single, 1)));
        if (_mm256_movemask_ps(_mm256_cmp_ps(single, single, _CMP_UNORD_Q))) {
            _mm256_zeroupper();
            widen_half_plain(source + i, target + i, 8);
        }
    }
    _mm256_zeroupper();
    widen_half_plain(source + i, target + i, n - i);
}

__attribute__((target("avx"))) static void widen_float_avx(const float *source, double *target, long n)
{
    long i = 0;
    for (; i + 4 <= n; i += 4)
        _mm256_storeu_pd(target + i, _mm256_cvtps_pd(_mm_loadu_ps(source + i)));
    _mm256_zeroupper();
    widen_float_plain(source + i, target + i, n - i);
}
#endif

typedef void widen_fn(const void *, void *, long);

/* The widening loop for float16 (itemsize 2) or float32 (itemsize 4) on this CPU. */
static widen_fn *widener(long itemsize)
{
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    if (itemsize == 2 && __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx"))
        return (widen_fn *)widen_half_f16c;
    if (itemsize == 4 && __builtin_cpu_supports("avx"))
        return (widen_fn *)widen_float_avx;
#endif
    return itemsize == 2 ? (widen_fn *)widen_half_plain : (widen_fn *)widen_float_plain;
}

/* source: n float16 (itemsize 2) or float32 (itemsize 4) values; target: n float64. */
void widen_to_double(const void *source, long itemsize, void *target, long n)
{
    widener(itemsize)(source, target, n);
}

/* source: [rows, pixels, C] float16, float32 or float64 (itemsize 2, 4, 8), C-ordered; target: the same values
 * as float64 in blocks of B channels, channel c of pixel (y, x) at
 * target + (c / B) * block_stride + y * row_stride + x * B + c % B (B divides C; the padding is left as it is). */
void widen_to_double_blocked(const void *source, long itemsize, double *target, long rows, long pixels, long C,
                             long B, long row_stride, long block_stride)
{
    widen_fn *const widen = itemsize == 8 ? NULL : widener(itemsize);
    const char *from = source;
    for (long y = 0; y < rows; ++y)
        for (long x = 0; x < pixels; ++x)
            for (long block = 0; block < C / B; ++block, from += B * itemsize) {
                double *to = target + block * block_stride + y * row_stride + x * B;
                if (widen)
                    widen(from, to, B);
                else
                    memcpy(to, from, B * sizeof(double));
            }
}
