/* carafe's backward golden as compiled loops, bit for bit what gen/kernels/carafe/reference.py's np.einsum calls compute.
 *
 * grad_mask: np.einsum("pwgabc,pwgvhc->pwgabhv") reduces over the channels of a group with numpy's
 * `contig_contig_outstride0_two` loop, compiled at numpy's x86-64 baseline (128-bit SSE, no FMA): two
 * running sums, lane 0 over the even channels and lane 1 over the odd ones, each `sum = x * y + sum`
 * (a multiply, then an add) from +0; whole blocks of 8 channels are taken pair 3, 2, 1, 0 (channels
 * 6-7 first, then 4-5, 2-3, 0-1); the pairs left after the last block come in order, an odd last
 * channel paired with a zero (its lane 1 adds +0 * +0).  The result is (+0) + (lane 0 + lane 1), the
 * einsum's zeroed output plus the loop's sum.  Here each of those 2-lane sums keeps its own lanes of a
 * wider register: four output phases side by side (lanes 2q, 2q+1 for phase q), so one multiply and one
 * add serve four outputs, and a window's taps are independent sums in flight.  Taps outside the map
 * are 0, as numpy's copyto makes them.
 *
 * grad_input: np.einsum("pwgxy,pwgxyc->pwgc") runs its inner loop over the channels (out[c] = w * x[c] +
 * out[c], from +0), the window entries x = (v, b) outer and y = (u, a) inner, as the forward does.  An
 * entry whose output pixel lies outside the map is skipped: numpy adds 0 * 0 = +0 there, and a sum from
 * +0 is never -0, so that changes no bit.
 *
 * As in carafe_kernel.c: -ffp-contract=off and no fast-math keep every rounding where numpy has it; a
 * NaN output is reported so that the caller recomputes those rows with numpy (which NaN survives when
 * two meet depends on operand order, which the compiler may swap); target_clones picks AVX-512, AVX2 or
 * SSE2 at load time, the same bits at different speeds.
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

typedef double vec8 __attribute__((vector_size(64), aligned(8)));   /* unaligned access */
typedef long long mask8 __attribute__((vector_size(64)));
typedef double vec2 __attribute__((vector_size(16), aligned(8)));
typedef double vec4 __attribute__((vector_size(32), aligned(8)));   /* for CPUs without AVX-512 */
typedef long long mask4 __attribute__((vector_size(32)));

/* Set to 1 (from Python, by ctypes) to run the narrow loops on any CPU (grad_mask's AVX2 one where the CPU has
 * AVX2): the tests check their bits too. */
int carafe_backward_narrow_only = 0;

#if defined(__x86_64__) && defined(__GNUC__)
#define CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
/* Whether the AVX-512 clone runs (32 registers of 8 doubles) or a narrower one (16 or fewer, of 4 or 2). */
static int wide_vectors(void) { return !carafe_backward_narrow_only && __builtin_cpu_supports("avx512f"); }
#else
#define CLONES
static int wide_vectors(void) { return 0; }
#endif
#define INLINE static inline __attribute__((always_inline))

static int any_nan(mask8 nan)
{
    int made_nan = 0;
    for (int lane = 0; lane < 8; ++lane)
        made_nan |= nan[lane] != 0;
    return made_nan;
}

/* tap_sums(T, packed, x, Cg, acc): T taps' sums over the channel pairs, acc[t] lanes (2q, 2q+1) = the two lanes
 * of phase q's sum with tap t.  packed: [pairs][4 phases][2] grad_output channels (an odd last channel paired
 * with 0); x[t]: tap t's channels (an odd last channel read alone, with 0 as its pair).  Written once with
 * AVX-512 intrinsics (a 2-channel pair broadcast to the four phase slots is one load) and once in generic
 * vectors for other CPUs; the same operations in the same order, so the same bits. */
#define TAP_SUMS_BODY(VEC, ZERO, LOAD8, PAIR4, PAIR4_ODD, MULADD)                          \
    const long pairs = Cg / 2;                                                             \
    _Pragma("GCC unroll 16") for (int t = 0; t < T; ++t) acc[t] = ZERO;                   \
    long p = 0;                                                                            \
    for (; p + 4 <= pairs; p += 4)                                                         \
        _Pragma("GCC unroll 4") for (int q = 3; q >= 0; --q) {                             \
            const VEC g = LOAD8(packed + 8 * (p + q));                                     \
            _Pragma("GCC unroll 16") for (int t = 0; t < T; ++t)                           \
                acc[t] = MULADD(g, PAIR4(x[t] + 2 * (p + q)), acc[t]);                     \
        }                                                                                  \
    for (; p < pairs; ++p) {                                                               \
        const VEC g = LOAD8(packed + 8 * p);                                               \
        _Pragma("GCC unroll 16") for (int t = 0; t < T; ++t)                               \
            acc[t] = MULADD(g, PAIR4(x[t] + 2 * p), acc[t]);                               \
    }                                                                                      \
    if (Cg % 2) {                                                                          \
        const VEC g = LOAD8(packed + 8 * p);                                               \
        _Pragma("GCC unroll 16") for (int t = 0; t < T; ++t)                               \
            acc[t] = MULADD(g, PAIR4_ODD(x[t][2 * p]), acc[t]);                            \
    }

#define VEC8_LOAD(a) (*(const vec8 *)(a))
#define VEC8_PAIR4(a) ((vec8){(a)[0], (a)[1], (a)[0], (a)[1], (a)[0], (a)[1], (a)[0], (a)[1]})
#define VEC8_PAIR4_ODD(v) ((vec8){(v), 0, (v), 0, (v), 0, (v), 0})
#define VEC8_MULADD(a, b, c) ((a) * (b) + (c))

INLINE void tap_sums_generic(int T, const double *packed, const double *const *x, long Cg, vec8 *acc)
{
    TAP_SUMS_BODY(vec8, ((vec8){0}), VEC8_LOAD, VEC8_PAIR4, VEC8_PAIR4_ODD, VEC8_MULADD)
}

#define TAP_BLOCK 10

static void tap_block_generic(int T, const double *packed, const double *const *x, long Cg, vec8 *out)
{
    switch (T) {   /* constant block sizes, so that the sums stay in registers */
#define CASE(n) case n: tap_sums_generic(n, packed, x, Cg, out); break;
    CASE(1) CASE(2) CASE(3) CASE(4) CASE(5) CASE(6) CASE(7) CASE(8) CASE(9) CASE(10)
#undef CASE
    default: break;
    }
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define AVX512 __attribute__((target("avx512f")))
#define M512_PAIR4(a) _mm512_castps_pd(_mm512_broadcast_f32x4(_mm_castpd_ps(_mm_loadu_pd(a))))
#define M512_PAIR4_ODD(v) _mm512_castps_pd(_mm512_broadcast_f32x4(_mm_castpd_ps(_mm_set_pd(0.0, (v)))))
#define M512_MULADD(a, b, c) _mm512_add_pd(_mm512_mul_pd((a), (b)), (c))

AVX512 INLINE void tap_sums_avx512(int T, const double *packed, const double *const *x, long Cg, __m512d *acc)
{
    TAP_SUMS_BODY(__m512d, _mm512_setzero_pd(), _mm512_loadu_pd, M512_PAIR4, M512_PAIR4_ODD, M512_MULADD)
}

AVX512 static void tap_block_avx512(int T, const double *packed, const double *const *x, long Cg, vec8 *out)
{
    __m512d acc[TAP_BLOCK];
    switch (T) {
#define CASE(n) case n: tap_sums_avx512(n, packed, x, Cg, acc); break;
    CASE(1) CASE(2) CASE(3) CASE(4) CASE(5) CASE(6) CASE(7) CASE(8) CASE(9) CASE(10)
#undef CASE
    default: break;
    }
    for (int t = 0; t < T; ++t)
        _mm512_storeu_pd((double *)(out + t), acc[t]);
}

/* AVX2 has 16 registers of 4 doubles: each tap's 8 lanes are two of them (phases 0-1, phases 2-3), and a
 * block's taps are summed NARROW_TAPS at a time, so that the sums stay in registers (GCC keeps the generic
 * 8-double vectors in memory there: the whole backward golden took 1.2-1.7x the CPU time with them). */
#define AVX2 __attribute__((target("avx2")))
#define NARROW_TAPS 5
typedef struct { __m256d lo, hi; } m256x2;

AVX2 INLINE m256x2 m256x2_load(const double *a) { return (m256x2){_mm256_loadu_pd(a), _mm256_loadu_pd(a + 4)}; }
AVX2 INLINE m256x2 m256x2_pair4(const double *a)
{
    const __m256d pair = _mm256_broadcast_pd((const __m128d *)a);
    return (m256x2){pair, pair};
}
AVX2 INLINE m256x2 m256x2_pair4_odd(double v)
{
    const __m256d pair = _mm256_set_pd(0.0, v, 0.0, v);
    return (m256x2){pair, pair};
}
AVX2 INLINE m256x2 m256x2_muladd(m256x2 a, m256x2 b, m256x2 c)
{
    return (m256x2){_mm256_add_pd(_mm256_mul_pd(a.lo, b.lo), c.lo), _mm256_add_pd(_mm256_mul_pd(a.hi, b.hi), c.hi)};
}
#define M256X2_ZERO ((m256x2){_mm256_setzero_pd(), _mm256_setzero_pd()})

AVX2 INLINE void tap_sums_avx2(int T, const double *packed, const double *const *x, long Cg, m256x2 *acc)
{
    TAP_SUMS_BODY(m256x2, M256X2_ZERO, m256x2_load, m256x2_pair4, m256x2_pair4_odd, m256x2_muladd)
}

AVX2 static void tap_block_avx2(int T, const double *packed, const double *const *x, long Cg, vec8 *out)
{
    for (int t0 = 0; t0 < T; t0 += NARROW_TAPS) {
        const int n = T - t0 < NARROW_TAPS ? T - t0 : NARROW_TAPS;
        m256x2 acc[NARROW_TAPS];
        switch (n) {
#define CASE(n) case n: tap_sums_avx2(n, packed, x + t0, Cg, acc); break;
        CASE(1) CASE(2) CASE(3) CASE(4) CASE(5)
#undef CASE
        default: break;
        }
        for (int t = 0; t < n; ++t) {
            _mm256_storeu_pd((double *)(out + t0 + t), acc[t].lo);
            _mm256_storeu_pd((double *)(out + t0 + t) + 4, acc[t].hi);
        }
    }
}
#endif

typedef void tap_block_fn(int, const double *, const double *const *, long, vec8 *);

static tap_block_fn *tap_block(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    if (!carafe_backward_narrow_only && __builtin_cpu_supports("avx512f"))
        return tap_block_avx512;
    if (__builtin_cpu_supports("avx2"))
        return tap_block_avx2;
#endif
    return tap_block_generic;
}

/* Writes T taps' results for `phases` (<= 4) phases; returns the NaN lanes. */
INLINE mask8 store_taps(int T, const vec8 *acc, const long *tap, double *const *o, int phases)
{
    mask8 nan = {0};
    for (int t = 0; t < T; ++t) {
        vec8 sum = {0};
        for (int q = 0; q < phases; ++q) {
            sum[q] = 0.0 + (acc[t][2 * q] + acc[t][2 * q + 1]);
            o[q][tap[t]] = sum[q];
        }
        nan |= sum != sum;
    }
    return nan;
}

/* grad_mask rows i*s .. i*s + s-1 of input rows i0 <= i < i1.
 *
 * image: float64 rows [image_lo, ...) of the [H, W, C] input, holding every row of [i0 - r, i1 + r) inside [0, H),
 *        pixel (y, x) at image + (y - image_lo) * row_stride + x * pixel_stride.
 * grad:  float64 [(i1 - i0) * s, W * s, C], the grad_output rows of these output rows.
 * out:   float64 [(i1 - i0) * s, W * s, G * k * k], written.
 * Returns 1 if an output is NaN, 0 if none, -1 if out of memory.
 */
int carafe_grad_mask_rows(const double *image, long image_lo, const double *grad, double *out,
                          long H, long W, long C, long G, long k, long s, long i0, long i1,
                          long row_stride, long pixel_stride)
{
    const long r = (k - 1) / 2, Cg = C / G, kk = k * k, Ws = W * s, pairs = (Cg + 1) / 2;
    double *packed = aligned_alloc(64, (size_t)(pairs * 8 * sizeof(double) + 64) / 64 * 64);
    const double **x = malloc(sizeof(double *) * kk);
    long *tap = malloc(sizeof(long) * kk);
    if (!packed || !x || !tap) {
        free(packed); free(x); free(tap);
        return -1;
    }
    tap_block_fn *const block = tap_block();
    mask8 nan = {0};
    for (long i = i0; i < i1; ++i)
        for (long j = 0; j < W; ++j)
            for (long g = 0; g < G; ++g) {
                const long h_lo = r - i > 0 ? r - i : 0, h_hi = H - i + r < k ? H - i + r : k;
                const long v_lo = r - j > 0 ? r - j : 0, v_hi = W - j + r < k ? W - j + r : k;
                long taps = 0;
                for (long h = h_lo; h < h_hi; ++h)
                    for (long v = v_lo; v < v_hi; ++v) {
                        x[taps] = image + (i - r + h - image_lo) * row_stride + (j - r + v) * pixel_stride + g * Cg;
                        tap[taps++] = h * k + v;
                    }
                for (long phase = 0; phase < s * s; phase += 4) {
                    const int phases = s * s - phase < 4 ? (int)(s * s - phase) : 4;
                    double *o[4];
                    /* Lanes no channel fills are +0: the absent phases', and an odd last channel's pair. */
                    if (phases < 4)
                        memset(packed, 0, sizeof(double) * pairs * 8);
                    else if (Cg % 2)
                        memset(packed + (pairs - 1) * 8, 0, sizeof(double) * 8);
                    for (int q = 0; q < phases; ++q) {
                        const long a = (phase + q) / s, b = (phase + q) % s;
                        const long pixel = ((i - i0) * s + a) * Ws + j * s + b;
                        const double *gp = grad + pixel * C + g * Cg;
                        /* A pair at a time, one 16-byte copy; the next window's pixels (s further) fetched
                         * meanwhile, a cache line per 8 channels: read once each, they come from memory. */
                        for (long c = 0; c + 2 <= Cg; c += 2) {
                            if (c % 8 == 0)
                                __builtin_prefetch(gp + s * C + c);
                            *(vec2 *)(packed + c * 4 + 2 * q) = *(const vec2 *)(gp + c);
                        }
                        if (Cg % 2)
                            packed[(Cg / 2) * 8 + 2 * q] = gp[Cg - 1];
                        o[q] = out + pixel * G * kk + g * kk;
                        for (long t = 0; t < kk; ++t)
                            o[q][t] = 0.0;
                    }
                    vec8 acc[TAP_BLOCK];
                    for (long t = 0; t < taps; t += TAP_BLOCK) {
                        const int T = taps - t < TAP_BLOCK ? (int)(taps - t) : TAP_BLOCK;
                        block(T, packed, x + t, Cg, acc);
                        nan |= store_taps(T, acc, tap + t, o, phases);
                    }
                }
            }
    free(packed); free(x); free(tap);
    return any_nan(nan);
}

/* grad_input's sums for channels c .. c + L*V of a group, over a block of input pixels: o[p, c] = sum over
 * pixel p's entries e of w[e] * x[e][c], from +0, x[e] = grad + offset[e]; two pixels at a time where their
 * windows have as many entries (8 sums in flight for V = 4).  Returns whether a NaN came out.  Written once
 * for a vector type VEC of L doubles (MASK: its comparison result) and defined twice below: 8-double
 * vectors where the CPU has AVX-512, 4-double ones where it has fewer and narrower registers (GCC keeps a
 * vector wider than the CPU's registers in memory, which made this loop slower than numpy's einsum on an
 * AVX2 CPU).  Each channel is its own sum, in the same order, whatever the width. */
#define ENTRY_SUMS(NAME, VEC, MASK, L)                                                                     \
INLINE int NAME(int V, long pixels, const long *entries, long most, const double *w, const long *offset,   \
                const double *grad, double *o, long C)                                                    \
{                                                                                                         \
    MASK nan = {0};                                                                                       \
    for (long p = 0; p < pixels;) {                                                                       \
        const int two = p + 1 < pixels && entries[p] == entries[p + 1];                                   \
        const double *w0 = w + p * most, *w1 = w0 + (two ? most : 0);                                     \
        const long *x0 = offset + p * most, *x1 = x0 + (two ? most : 0);                                 \
        VEC acc0[4], acc1[4];                                                                             \
        _Pragma("GCC unroll 4") for (int q = 0; q < V; ++q)                                               \
            acc0[q] = acc1[q] = (VEC){0};                                                                 \
        if (two)                                                                                          \
            for (long e = 0; e < entries[p]; ++e) {                                                       \
                const double we0 = w0[e], we1 = w1[e], *xe0 = grad + x0[e], *xe1 = grad + x1[e];          \
                _Pragma("GCC unroll 4") for (int q = 0; q < V; ++q) {                                     \
                    acc0[q] = we0 * *(const VEC *)(xe0 + L * q) + acc0[q];                                \
                    acc1[q] = we1 * *(const VEC *)(xe1 + L * q) + acc1[q];                                \
                }                                                                                         \
            }                                                                                             \
        else                                                                                              \
            for (long e = 0; e < entries[p]; ++e) {                                                       \
                const double we0 = w0[e], *xe0 = grad + x0[e];                                            \
                _Pragma("GCC unroll 4") for (int q = 0; q < V; ++q)                                       \
                    acc0[q] = we0 * *(const VEC *)(xe0 + L * q) + acc0[q];                                \
            }                                                                                             \
        _Pragma("GCC unroll 4") for (int q = 0; q < V; ++q) {                                             \
            *(VEC *)(o + p * C + L * q) = acc0[q];                                                        \
            nan |= acc0[q] != acc0[q];                                                                    \
        }                                                                                                 \
        if (two)                                                                                          \
            _Pragma("GCC unroll 4") for (int q = 0; q < V; ++q) {                                         \
                *(VEC *)(o + (p + 1) * C + L * q) = acc1[q];                                              \
                nan |= acc1[q] != acc1[q];                                                                \
            }                                                                                             \
        p += 1 + two;                                                                                     \
    }                                                                                                     \
    int made_nan = 0;                                                                                     \
    for (int lane = 0; lane < L; ++lane)                                                                  \
        made_nan |= nan[lane] != 0;                                                                       \
    return made_nan;                                                                                      \
}

ENTRY_SUMS(entry_sums, vec8, mask8, 8)
ENTRY_SUMS(entry_sums_narrow, vec4, mask4, 4)

/* Input rows per block of carafe_grad_input_rows: the entries of a block's pixels stay in cache. */
#define ROW_BLOCK 4

/* grad_input rows i0 <= i < i1.
 *
 * grad:  float64 rows [out_lo, ...) of the [H*s, W*s, C] grad_output, holding every output row of input rows
 *        [i0 - r, i1 + r) inside [0, H), in blocks of B channels (B divides C / G): channel c of pixel (y, x)
 *        at grad + (c / B) * block_stride + (y - out_lo) * row_stride + x * B + c % B.  A window's pixels
 *        (k*s x k*s of them) then lie close together for each block, where grad_output's own layout spreads
 *        them over dozens of pages that meet on a few L1 sets.
 * mask:  float64 rows [out_lo, ...) of the [H*s, W*s, G*k*k] mask, the same rows, C-ordered.
 * out:   float64 [i1 - i0, W, C], written.
 * Returns 1 if an output is NaN, 0 if none, -1 if out of memory.
 */
CLONES int carafe_grad_input_rows(const double *grad, long out_lo, const double *mask, double *out,
                                  long H, long W, long C, long G, long k, long s, long i0, long i1,
                                  long row_stride, long block_stride, long B)
{
    const long r = (k - 1) / 2, Cg = C / G, kk = k * k, Ws = W * s, most = kk * s * s, pixels = ROW_BLOCK * W;
    double *w = malloc(sizeof(double) * most * pixels);
    long *m = malloc(sizeof(long) * most * pixels), *offset = malloc(sizeof(long) * most * pixels);
    long *entries = malloc(sizeof(long) * pixels);
    if (!w || !m || !offset || !entries) {
        free(w); free(m); free(offset); free(entries);
        return -1;
    }
    const int wide = wide_vectors();
    int made_nan = 0;
    for (long b0 = i0; b0 < i1; b0 += ROW_BLOCK) {
        const long b1 = b0 + ROW_BLOCK < i1 ? b0 + ROW_BLOCK : i1, count = (b1 - b0) * W;
        /* Each pixel's entries in numpy's order: v, b outer, u, a inner; output pixel (i' s + a, j' s + b)
         * with i' = i - r + u, j' = j - r + v, through tap (2r - u, 2r - v). */
        for (long i = b0; i < b1; ++i)
            for (long j = 0; j < W; ++j) {
                const long p = (i - b0) * W + j;
                long n = 0;
                for (long v = 0; v < k; ++v) {
                    const long jp = j - r + v;
                    if (jp < 0 || jp >= W)
                        continue;
                    for (long b = 0; b < s; ++b)
                        for (long u = 0; u < k; ++u) {
                            const long ip = i - r + u;
                            if (ip < 0 || ip >= H)
                                continue;
                            for (long a = 0; a < s; ++a, ++n) {
                                const long y = ip * s + a - out_lo, x = jp * s + b;
                                m[p * most + n] = (y * Ws + x) * G * kk + (2 * r - u) * k + (2 * r - v);
                                offset[p * most + n] = y * row_stride + x * B;
                            }
                        }
                }
                entries[p] = n;
            }
        for (long g = 0; g < G; ++g) {
            for (long p = 0; p < count; ++p)
                for (long e = 0; e < entries[p]; ++e)
                    w[p * most + e] = mask[m[p * most + e] + g * kk];
            for (long block = g * Cg / B; block < (g + 1) * Cg / B; ++block) {
                const double *band = grad + block * block_stride;
                double *o = out + (b0 - i0) * W * C + block * B;
                long c = 0;
                if (wide) {
                    for (; c + 32 <= B; c += 32)
                        made_nan |= entry_sums(4, count, entries, most, w, offset, band + c, o + c, C);
                    for (; c + 8 <= B; c += 8)
                        made_nan |= entry_sums(1, count, entries, most, w, offset, band + c, o + c, C);
                } else {
                    for (; c + 16 <= B; c += 16)
                        made_nan |= entry_sums_narrow(4, count, entries, most, w, offset, band + c, o + c, C);
                    for (; c + 4 <= B; c += 4)
                        made_nan |= entry_sums_narrow(1, count, entries, most, w, offset, band + c, o + c, C);
                }
                for (; c < B; ++c)
                    for (long p = 0; p < count; ++p) {
                        double acc = 0.0;
                        for (long e = 0; e < entries[p]; ++e)
                            acc = w[p * most + e] * band[offset[p * most + e] + c] + acc;
                        o[p * C + c] = acc;
                        made_nan |= acc != acc;
                    }
            }
        }
    }
    free(w); free(m); free(offset); free(entries);
    return made_nan;
}
