/* carafe's forward golden as a compiled loop, bit for bit what gen/kernels/carafe/reference.py's np.einsum computes.
 *
 * For a group of at least 2 channels, np.einsum("pwgabhv,pwgvhc->pwgabc") runs its inner loop over
 * the channels (out[c] = w * x[c] + out[c], a multiply then an add: numpy's baseline has no FMA) and
 * walks the taps kh outer, kw inner, starting from out = +0.  This loop does the same operations in
 * the same order for every output element; only which channels share a vector register differs, which
 * changes nothing since each channel is its own sum.  A tap outside the map is skipped: numpy adds
 * 0 * 0 = +0 there, and out + (+0) == out because out is never -0 (it starts at +0, and a sum of
 * round-to-nearest additions is -0 only when both terms are -0).
 *
 * Equal operations give equal bits except for which NaN comes out when two meet (x86 returns the
 * first operand's, and the compiler may swap a product's operands).  So the loop reports whether it
 * made a NaN, and the caller then recomputes those rows with numpy.
 *
 * Built with -ffp-contract=off (no multiply-add fused into one rounding) and without fast-math, so
 * the compiler may widen the channel loop but not change what is rounded where.  target_clones picks
 * AVX-512, AVX2 or plain SSE2 at load time: the same bits, at different speeds.  With AVX-512 the sums
 * are vectors of 8 channels; without it, of 4 (see CHANNEL_LOOPS).
 */
#include <stddef.h>

typedef double vec8 __attribute__((vector_size(64), aligned(8)));   /* 8 channels, unaligned access */
typedef long long mask8 __attribute__((vector_size(64)));
typedef double vec4 __attribute__((vector_size(32), aligned(8)));   /* 4 channels, for CPUs without AVX-512 */
typedef long long mask4 __attribute__((vector_size(32)));

/* Set to 1 (from Python, by ctypes) to run the narrow loops on any CPU: the tests check their bits too. */
int carafe_narrow_only = 0;

#if defined(__x86_64__) && defined(__GNUC__)
#define CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
/* Whether the AVX-512 clone runs (32 registers of 8 doubles) or a narrower one (16 or fewer, of 4 or 2). */
static int wide_vectors(void) { return !carafe_narrow_only && __builtin_cpu_supports("avx512f"); }
#else
#define CLONES
static int wide_vectors(void) { return 0; }
#endif

/* The taps of one input pixel's window, for the channel loops below: output channel c of phase p is
 * sum over h in [h_lo, h_hi), v in [v_lo, v_hi) (h outer) of m[p][h * k + v] * x[h * row + v * C + c],
 * added one by one from +0. */
struct window {
    const double *x;          /* the window's tap (h_lo, v_lo)... shifted back to tap (0, 0), at channel 0 */
    long row, C, k, h_lo, h_hi, v_lo, v_hi;     /* row: row stride; C: pixel stride (in doubles) */
};

#define TAPS(w, ...)                                                               \
    for (long h = (w)->h_lo; h < (w)->h_hi; ++h)                                   \
        for (long v = (w)->v_lo; v < (w)->v_hi; ++v) {                             \
            const long tap = h * (w)->k + v;                                       \
            const double *xt = (w)->x + h * (w)->row + v * (w)->C;                 \
            __VA_ARGS__                                                            \
        }

/* The channel loops, written once for a vector type VEC of L doubles (MASK: its comparison result) and
 * defined twice below: 8-double vectors where the CPU has AVX-512, 4-double ones where it has fewer and
 * narrower registers (GCC keeps a vector wider than the CPU's registers in memory, moving it through
 * general registers at every tap, which made the loops slower than numpy's einsum on an AVX2 CPU).
 * Each channel is its own sum, in the same order, whatever the vector width.
 *
 * FOUR_PHASES: four phases at once, 2L channels per step: 8 independent sums in flight, and each load of
 * the input serves four products.  Returns whether a NaN came out; *done: the channels done.
 * ONE_PHASE: one phase, 8L channels per step (8 sums in flight), then L, then one by one. */
#define CHANNEL_LOOPS(FOUR_PHASES, ONE_PHASE, VEC, MASK, L)                                                   \
static inline __attribute__((always_inline)) int FOUR_PHASES(const struct window *w, const double *const m[4], \
                                                             double *const o[4], long c0, long c1, long *done) \
{                                                                                                          \
    MASK nan = {0};                                                                                        \
    long c = c0;                                                                                           \
    for (; c + 2 * L <= c1; c += 2 * L) {                                                                  \
        VEC a0 = {0}, a1 = {0}, b0 = {0}, b1 = {0}, d0 = {0}, d1 = {0}, e0 = {0}, e1 = {0};                \
        TAPS(w, {                                                                                          \
            const VEC x0 = *(const VEC *)(xt + c), x1 = *(const VEC *)(xt + c + L);                        \
            const double wa = m[0][tap], wb = m[1][tap], wd = m[2][tap], we = m[3][tap];                   \
            a0 = wa * x0 + a0; a1 = wa * x1 + a1;                                                          \
            b0 = wb * x0 + b0; b1 = wb * x1 + b1;                                                          \
            d0 = wd * x0 + d0; d1 = wd * x1 + d1;                                                          \
            e0 = we * x0 + e0; e1 = we * x1 + e1;                                                          \
        })                                                                                                 \
        *(VEC *)(o[0] + c) = a0; *(VEC *)(o[0] + c + L) = a1;                                              \
        *(VEC *)(o[1] + c) = b0; *(VEC *)(o[1] + c + L) = b1;                                              \
        *(VEC *)(o[2] + c) = d0; *(VEC *)(o[2] + c + L) = d1;                                              \
        *(VEC *)(o[3] + c) = e0; *(VEC *)(o[3] + c + L) = e1;                                              \
        nan |= (a0 != a0) | (a1 != a1) | (b0 != b0) | (b1 != b1) | (d0 != d0) | (d1 != d1) | (e0 != e0) | (e1 != e1); \
    }                                                                                                      \
    *done = c;                                                                                             \
    int made_nan = 0;                                                                                      \
    for (int lane = 0; lane < L; ++lane)                                                                   \
        made_nan |= nan[lane] != 0;                                                                        \
    return made_nan;                                                                                       \
}                                                                                                          \
                                                                                                           \
static inline __attribute__((always_inline)) int ONE_PHASE(const struct window *w, const double *m, double *o, \
                                                           long c, long c1)                                \
{                                                                                                          \
    MASK nan = {0};                                                                                        \
    for (; c + 8 * L <= c1; c += 8 * L) {                                                                  \
        VEC acc[8] = {{0}};                                                                                \
        TAPS(w, {                                                                                          \
            const double wt = m[tap];                                                                      \
            for (int q = 0; q < 8; ++q)                                                                    \
                acc[q] = wt * *(const VEC *)(xt + c + L * q) + acc[q];                                     \
        })                                                                                                 \
        for (int q = 0; q < 8; ++q) {                                                                      \
            *(VEC *)(o + c + L * q) = acc[q];                                                              \
            nan |= acc[q] != acc[q];                                                                       \
        }                                                                                                  \
    }                                                                                                      \
    for (; c + L <= c1; c += L) {                                                                          \
        VEC acc = {0};                                                                                     \
        TAPS(w, { acc = m[tap] * *(const VEC *)(xt + c) + acc; })                                          \
        *(VEC *)(o + c) = acc;                                                                             \
        nan |= acc != acc;                                                                                 \
    }                                                                                                      \
    int made_nan = 0;                                                                                      \
    for (; c < c1; ++c) {                                                                                  \
        double acc = 0.0;                                                                                  \
        TAPS(w, { acc = m[tap] * xt[c] + acc; })                                                           \
        o[c] = acc;                                                                                        \
        made_nan |= acc != acc;                                                                            \
    }                                                                                                      \
    for (int lane = 0; lane < L; ++lane)                                                                   \
        made_nan |= nan[lane] != 0;                                                                        \
    return made_nan;                                                                                       \
}

CHANNEL_LOOPS(four_phases, one_phase, vec8, mask8, 8)
CHANNEL_LOOPS(four_phases_narrow, one_phase_narrow, vec4, mask4, 4)

/* Every phase (a, b) of one input pixel's window and group: output pixel (row0 + a, col0 + b).  `wide` is a
 * constant at each call, so each of the two copies keeps its sums in registers: 8 sums of 8 channels in
 * flight where the CPU has AVX-512's 32 registers, 8 sums of 4 where it has fewer and narrower ones. */
static inline __attribute__((always_inline)) int window_phases(const struct window *w, const double *mask, double *out,
                                                                 long row0, long col0, long g, long s, long Ws,
                                                                 long taps_stride, long kk, long C, long Cg,
                                                                 const int wide)
{
    int made_nan = 0;
    long phase = 0;
    for (; phase + 4 <= s * s; phase += 4) {
        const double *m[4];
        double *o[4];
        for (int q = 0; q < 4; ++q) {
            const long pixel = (row0 + (phase + q) / s) * Ws + col0 + (phase + q) % s;
            m[q] = mask + pixel * taps_stride + g * kk;
            o[q] = out + pixel * C + g * Cg;
        }
        long c;
        made_nan |= wide ? four_phases(w, m, o, 0, Cg, &c) : four_phases_narrow(w, m, o, 0, Cg, &c);
        for (int q = 0; q < 4; ++q)
            made_nan |= wide ? one_phase(w, m[q], o[q], c, Cg) : one_phase_narrow(w, m[q], o[q], c, Cg);
    }
    for (; phase < s * s; ++phase) {
        const long pixel = (row0 + phase / s) * Ws + col0 + phase % s;
        const double *m = mask + pixel * taps_stride + g * kk;
        double *o = out + pixel * C + g * Cg;
        made_nan |= wide ? one_phase(w, m, o, 0, Cg) : one_phase_narrow(w, m, o, 0, Cg);
    }
    return made_nan;
}

/* Output rows i*s .. i*s + s-1 of input rows i0 <= i < i1.
 *
 * image:  float64 rows [rows_lo, rows_hi) of the [H, W, C] input, row rows_lo first, pixel (y, x) at
 *         image + (y - rows_lo) * row_stride + x * pixel_stride; it must hold every row in [i0 - r, i1 + r)
 *         that lies inside [0, H).
 * mask:   float64 [(i1 - i0) * s, W * s, G * k * k], the mask rows of these output rows.
 * out:    float64 [(i1 - i0) * s, W * s, C], written (not accumulated into).
 * Returns 1 if an output is NaN, else 0.
 */
CLONES int carafe_forward_rows(const double *image, long rows_lo, const double *mask, double *out,
                               long H, long W, long C, long G, long k, long s, long i0, long i1,
                               long row_stride, long pixel_stride)
{
    const long r = (k - 1) / 2, Cg = C / G, kk = k * k, Ws = W * s, taps_stride = G * kk;
    const int wide = wide_vectors();
    int made_nan = 0;
    for (long i = i0; i < i1; ++i) {
        for (long j = 0; j < W; ++j) {
            for (long g = 0; g < G; ++g) {
                struct window w = {
                    .x = image + (i - r - rows_lo) * row_stride + (j - r) * pixel_stride + g * Cg,
                    .row = row_stride, .C = pixel_stride, .k = k,
                    .h_lo = r - i > 0 ? r - i : 0, .h_hi = H - i + r < k ? H - i + r : k,
                    .v_lo = r - j > 0 ? r - j : 0, .v_hi = W - j + r < k ? W - j + r : k,
                };
                made_nan |= wide ? window_phases(&w, mask, out, (i - i0) * s, j * s, g, s, Ws, taps_stride, kk, C, Cg, 1)
                                 : window_phases(&w, mask, out, (i - i0) * s, j * s, g, s, Ws, taps_stride, kk, C, Cg, 0);
            }
        }
    }
    return made_nan;
}
