/* mmcv 2.2.0's CUDA CARAFE in T (float or at::Half) as compiled loops, bit for bit what
 * gen/kernels/carafe/mmcv_emulation.py computes with numpy (the baseline `opcase gen` computes beside the
 * golden for dynamic thresholds).
 *
 * Values are float32 here whatever T is (../shared/mmcv_half.h: an at::Half operator is the float32
 * operation rounded to half); `mmcv_mac(acc, a, b)` is ScalarT.mac (fmaf(a, b, acc) for float, two
 * roundings and nothing fused for half), `mmcv_in_t(x + y)` ScalarT.add.  Each output element is its own
 * sum, so only the order within one sum matters, and it is the emulation's:
 *
 * forward     output[n, ho, wo, c] from +0, one mac per tap inside the map, kh outer, kw inner.
 *
 * The loops run per input pixel (n, i, j) and its s x s output pixels: all of them (the whole kernel,
 * output [N, Hs, Ws, C]) or a list of them (the units of gen.sampled, output [units, s, s, C]).  NaN bits
 * are the caller's canonical NaN as ScalarT.result writes them (mmcv_write_result); a NaN decides nothing.
 * The channel loops run in fixed-length chunks so that GCC's -O2 vectorizer takes them (its cost model
 * vectorizes only loops with no scalar remainder), and the loops are built twice (target_clones): for
 * x86-64-v3 (AVX2 and FMA: fmaf is one instruction) and for the baseline, the same operations either way.
 */
#include <stdlib.h>

#include "../shared/mmcv_half.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define CLONES
#endif

#define CHUNK 16                   /* channels per vectorized step */
#define NUMPY_DECIDES 1            /* a status besides 0 (done): no memory; numpy runs */

/* count values of a T array from element first, as float32 (exact). */
MMCV_INLINE void read_t(const void *array, long first, long count, const int is_half, float *out)
{
    if (is_half) {
        const uint16_t *bits = (const uint16_t *)array + first;
        for (long i = 0; i < count; i++)
            out[i] = mmcv_half_to_float(bits[i]);
    } else {
        memcpy(out, (const float *)array + first, sizeof(float) * count);
    }
}

/* acc[c] += x[c] * w for c < n (ScalarT.mac: fmaf(x, w, acc) for float). */
MMCV_INLINE void mac_row(float *restrict acc, const float *restrict x, float w, long n, const int is_half)
{
    long c = 0;
    for (; c + CHUNK <= n; c += CHUNK)
        for (int l = 0; l < CHUNK; l++)
            acc[c + l] = mmcv_mac(acc[c + l], x[c + l], w, is_half);
    for (; c < n; c++)
        acc[c] = mmcv_mac(acc[c], x[c], w, is_half);
}

typedef struct {        /* the shapes: input [N, H, W, C] in G groups, k x k taps, scale s */
    long N, H, W, C, G, k, s;
} Shape;

/* Where input pixel p = (n, i, j) of the units list (or of the whole map) writes output phase (a, b). */
MMCV_INLINE long out_pixel(const Shape *d, long unit, long n, long i, long j, long a, long b, int whole)
{
    return whole ? (n * d->H * d->s + i * d->s + a) * d->W * d->s + j * d->s + b : (unit * d->s + a) * d->s + b;
}

/* The window of input pixel (n, i, j): rows[t] = input[n, i + kh - r, j + kw - r] as float32 for each tap
 * t = kh k + kw inside the map, NULL outside; half rows are converted into buffer (k k C floats). */
MMCV_INLINE void window_rows(const Shape *d, const void *input, long n, long i, long j, const int is_half,
                             float *buffer, const float **rows)
{
    const long k = d->k, r = (k - 1) / 2;
    for (long kh = 0; kh < k; kh++)
        for (long kw = 0; kw < k; kw++) {
            const long ii = i + kh - r, jj = j + kw - r, t = kh * k + kw;
            if (ii < 0 || ii >= d->H || jj < 0 || jj >= d->W) {
                rows[t] = NULL;
                continue;
            }
            const long first = ((n * d->H + ii) * d->W + jj) * d->C;
            if (is_half) {
                read_t(input, first, d->C, is_half, buffer + t * d->C);
                rows[t] = buffer + t * d->C;
            } else {
                rows[t] = (const float *)input + first;
            }
        }
}

/* The s x s output pixels of each input pixel side by side (acc [s s][C]): their sums are independent, so
 * taking each tap for all of them in turn overlaps their dependency chains (a sum of one channel is one
 * chain of adds and roundings, the doc's mluops_case_0 nothing else). */
MMCV_INLINE int forward_body(const Shape *d, const void *input, const void *mask, const long *units, long count,
                             const int is_half, void *out)
{
    const long k = d->k, kk = k * k, C = d->C, G = d->G, Cg = C / G, s = d->s, ss = s * s;
    const long Ho = d->H * s, Wo = d->W * s;
    const int whole = units == NULL;
    float *buffer = malloc(sizeof(float) * (is_half ? kk * C : 1));
    float *acc = malloc(sizeof(float) * (ss * C > 0 ? ss * C : 1));
    const float **rows = malloc(sizeof(float *) * kk);
    long *taps = malloc(sizeof(long) * ss);
    if (!buffer || !acc || !rows || !taps) {
        free(buffer);
        free(acc);
        free(rows);
        free(taps);
        return NUMPY_DECIDES;
    }
    for (long u = 0; u < count; u++) {
        const long p = whole ? u : units[u];
        const long n = p / (d->H * d->W), i = p / d->W % d->H, j = p % d->W;
        window_rows(d, input, n, i, j, is_half, buffer, rows);
        for (long q = 0; q < ss; q++)           /* phase q = (a, b) = (q / s, q % s): its mask entries */
            taps[q] = ((n * Ho + i * s + q / s) * Wo + j * s + q % s) * G * kk;
        memset(acc, 0, sizeof(float) * ss * C);
        for (long t = 0; t < kk; t++) {
            if (!rows[t])
                continue;
            for (long q = 0; q < ss; q++)
                for (long g = 0; g < G; g++)
                    mac_row(acc + q * C + g * Cg, rows[t] + g * Cg, mmcv_value_of(mask, taps[q] + g * kk + t, is_half),
                            Cg, is_half);
        }
        for (long q = 0; q < ss; q++) {
            const long o = out_pixel(d, u, n, i, j, q / s, q % s, whole) * C;
            mmcv_write_result(acc + q * C, C, is_half,
                              is_half ? (void *)((uint16_t *)out + o) : (void *)((float *)out + o));
        }
    }
    free(buffer);
    free(acc);
    free(rows);
    free(taps);
    return 0;
}

/* input [N, H, W, C] and mask [N, Hs, Ws, G k k] in T (float, or float16 bits where is_half) -> output in T,
 * NaNs canonical: [N, Hs, Ws, C] for units NULL (count = N H W), else [count, s, s, C] for the input pixels
 * units[0..count) (flat in [N, H, W]).  C is a multiple of G >= 1.  Returns NUMPY_DECIDES (no memory). */
CLONES int carafe_forward_mmcv(const void *input, const void *mask, long N, long H, long W, long C, long G, long k,
                               long s, int is_half, const long *units, long count, void *out)
{
    const Shape d = {N, H, W, C, G, k, s};
    return is_half ? forward_body(&d, input, mask, units, count, 1, out)
                   : forward_body(&d, input, mask, units, count, 0, out);
}
