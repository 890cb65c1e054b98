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
 * grad_input  per output pixel (ph, pw) = (i s + a, j s + b) from +0, one mac of grad_output by the mask
 *             entry (k-1-kh, k-1-kw) of output pixel (ph + (kh - r) s, pw + (kw - r) s) per tap whose pixel
 *             is in the map, kh outer, kw inner (CARAFEBackward_Feature); then grad_input[n, i, j, c] from +0
 *             adds those s x s sums, a outer, b inner (FeatureSum).
 * grad_mask   per (output pixel, group, tap inside the map) one warp: lane l from +0 macs grad_output by
 *             input over channels l, l + L, l + 2L, ... (L = 32, or the power of two at or above a smaller
 *             group's channels), then warpReduceSum's tree v[l] += v[l + o], o = L/2, ..., 1; lane 0's sum.
 *             A tap outside the map: 0.
 *
 * The loops run per input pixel (n, i, j) and its s x s output pixels: all of them (the whole kernel,
 * output [N, Hs, Ws, C]) or a list of them (the units of gen.sampled, output [units, s, s, C]).  NaN bits
 * are the caller's canonical NaN as ScalarT.result writes them (mmcv_write_result); a NaN decides nothing.
 * The channel loops run in fixed-length chunks so that GCC's -O2 vectorizer takes them (its cost model
 * vectorizes only loops with no scalar remainder), and the loops are built twice: for x86-64-v3 (AVX2 and
 * FMA: fmaf is one instruction), run where the CPU has it, and for the baseline (fmaf a libm call); the
 * same operations either way, so the same bits.
 */
#include <stdlib.h>

#include "../shared/mmcv_half.h"

/* Set to 1 (from Python, by ctypes) to run the baseline x86-64 build on any CPU: the tests check its bits too. */
int carafe_mmcv_generic_only = 0;

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
#define FORWARD_ARGS const void *input, const void *mask, const Shape *d, int is_half, const long *units, long count, \
    void *out
#define FORWARD(is_half) forward_body(d, input, mask, units, count, is_half, out)
static int forward_generic(FORWARD_ARGS) { return is_half ? FORWARD(1) : FORWARD(0); }
MMCV_V3 static int forward_v3(FORWARD_ARGS) { return is_half ? FORWARD(1) : FORWARD(0); }

int carafe_forward_mmcv(const void *input, const void *mask, long N, long H, long W, long C, long G, long k, long s,
                        int is_half, const long *units, long count, void *out)
{
    const Shape d = {N, H, W, C, G, k, s};
    return (mmcv_v3(carafe_mmcv_generic_only) ? forward_v3 : forward_generic)(input, mask, &d, is_half, units,
                                                                              count, out);
}

/* acc[c] = acc[c] + x[c] in T for c < n (ScalarT.add). */
MMCV_INLINE void add_row(float *restrict acc, const float *restrict x, long n, const int is_half)
{
    long c = 0;
    for (; c + CHUNK <= n; c += CHUNK)
        for (int l = 0; l < CHUNK; l++)
            acc[c + l] = mmcv_in_t(acc[c + l] + x[c + l], is_half);
    for (; c < n; c++)
        acc[c] = mmcv_in_t(acc[c] + x[c], is_half);
}

/* Row `pixel` (C values) of a T array as float32: the array itself where it is float (or already converted,
 * as_float), else converted into scratch. */
MMCV_INLINE const float *row_of(const void *array, long pixel, long C, int as_float, float *scratch)
{
    if (as_float)
        return (const float *)array + pixel * C;
    read_t(array, pixel * C, C, 1, scratch);
    return scratch;
}

/* CARAFEBackward_Mask's warp for one (output pixel, group, tap): lane l sums grad * x over channels l, l + L,
 * l + 2L, ... (L = lanes), then warpReduceSum's tree; the sum lane 0 holds.  Lanes past the group's last
 * channel keep their +0 (the emulation's zero padding, which adds +0 * +0 to a sum that is never -0). */
MMCV_INLINE float warp_sum(const float *restrict grad, const float *restrict x, long Cg, long lanes, const int is_half)
{
    float lane[32] = {0};
    long c = 0;
    if (lanes == 32)
        for (; c + 32 <= Cg; c += 32)
            for (int l = 0; l < 32; l++)
                lane[l] = mmcv_mac(lane[l], grad[c + l], x[c + l], is_half);
    for (long l = 0; c + l < Cg; l++)
        lane[l] = mmcv_mac(lane[l], grad[c + l], x[c + l], is_half);
    for (long offset = lanes / 2; offset > 0; offset /= 2)
        for (long l = 0; l < offset; l++)
            lane[l] = mmcv_in_t(lane[l] + lane[l + offset], is_half);
    return lane[0];
}

typedef struct {        /* one backward call's buffers: rows as float32, the sums of one input pixel */
    float *x, *own, *window, *spread, *total;
    const float **rows;
} Scratch;

/* grad_mask of the s x s output pixels of input pixel (n, i, j), [s s][G k k] at gm (rows: its window). */
MMCV_INLINE void grad_mask_pixel(const Shape *d, const void *grad_output, int as_float, long n, long i, long j,
                                 const float **rows, Scratch *b, float *gm, const int is_half)
{
    const long k = d->k, kk = k * k, C = d->C, G = d->G, Cg = C / G, s = d->s;
    long lanes = 1;
    while (lanes < Cg && lanes < 32)
        lanes *= 2;
    for (long q = 0; q < s * s; q++) {
        const long pixel = (n * d->H * s + i * s + q / s) * d->W * s + j * s + q % s;
        const float *grad = row_of(grad_output, pixel, C, as_float, b->own);
        for (long g = 0; g < G; g++)
            for (long t = 0; t < kk; t++)
                gm[(q * G + g) * kk + t] = rows[t] ? warp_sum(grad + g * Cg, rows[t] + g * Cg, Cg, lanes, is_half)
                                                   : 0.0f;
    }
}

/* grad_input of input pixel (n, i, j), C values at gi: CARAFEBackward_Feature's sums at its s x s output
 * pixels side by side (their chains overlap), each over the taps (kh, kw) whose output pixel
 * ((i + kh - r) s + a, (j + kw - r) s + b) is in the map, with that pixel's flipped mask entry; then
 * FeatureSum over the phases, a outer, b inner. */
MMCV_INLINE void grad_input_pixel(const Shape *d, const void *grad_output, const void *mask, int as_float, long n,
                                  long i, long j, const float **rows, Scratch *b, float *gi, const int is_half)
{
    const long k = d->k, kk = k * k, C = d->C, G = d->G, Cg = C / G, s = d->s, ss = s * s, r = (k - 1) / 2;
    memset(b->spread, 0, sizeof(float) * ss * C);
    for (long t = 0; t < kk; t++) {
        if (!rows[t])
            continue;
        const long ii = i + t / k - r, jj = j + t % k - r;
        for (long q = 0; q < ss; q++) {
            const long pixel = (n * d->H * s + ii * s + q / s) * d->W * s + jj * s + q % s;
            const float *grad = row_of(grad_output, pixel, C, as_float, b->window + q * C);
            for (long g = 0; g < G; g++)
                mac_row(b->spread + q * C + g * Cg, grad + g * Cg,
                        mmcv_value_of(mask, pixel * G * kk + g * kk + kk - 1 - t, is_half), Cg, is_half);
        }
    }
    memset(gi, 0, sizeof(float) * C);
    for (long q = 0; q < ss; q++)
        add_row(gi, b->spread + q * C, C, is_half);
}

/* Writes count T values of sums at element o of out. */
MMCV_INLINE void write_t(const float *sums, long count, const int is_half, void *out, long o)
{
    mmcv_write_result(sums, count, is_half, is_half ? (void *)((uint16_t *)out + o) : (void *)((float *)out + o));
}

/* A float32 copy of a whole half array (NULL: no memory). */
static float *widened(const void *array, long count)
{
    float *copy = malloc(sizeof(float) * (count > 0 ? count : 1));
    if (copy)
        read_t(array, 0, count, 1, copy);
    return copy;
}

MMCV_INLINE int backward_body(const Shape *d, const void *input, const void *mask, const void *grad_output,
                              const long *units, long count, const int is_half, void *grad_input_out,
                              void *grad_mask_out)
{
    const long kk = d->k * d->k, C = d->C, G = d->G, s = d->s, ss = s * s, one = C > 0 ? C : 1;
    const int whole = units == NULL;
    /* The whole kernel reads every row many times: half maps are widened once.  A few units read a few rows
     * of what may be maps of many GB: those are widened row by row. */
    float *x = whole && is_half ? widened(input, d->N * d->H * d->W * C) : NULL;
    float *grads = whole && is_half ? widened(grad_output, d->N * d->H * d->W * ss * C) : NULL;
    const int as_float = !is_half || whole;
    const void *x_rows = x ? x : input, *grad_rows = grads ? grads : grad_output;
    Scratch b = {malloc(sizeof(float) * kk * one), malloc(sizeof(float) * one), malloc(sizeof(float) * ss * one),
                 malloc(sizeof(float) * ss * one), malloc(sizeof(float) * one), malloc(sizeof(float *) * kk)};
    float *gm = malloc(sizeof(float) * (ss * G * kk > 0 ? ss * G * kk : 1));
    int status = NUMPY_DECIDES;
    if ((whole && is_half && (!x || !grads)) || !b.x || !b.own || !b.window || !b.spread || !b.total || !b.rows || !gm)
        goto done;
    for (long u = 0; u < count; u++) {
        const long p = whole ? u : units[u];
        const long n = p / (d->H * d->W), i = p / d->W % d->H, j = p % d->W;
        window_rows(d, x_rows, n, i, j, !as_float, b.x, b.rows);
        grad_mask_pixel(d, grad_rows, as_float, n, i, j, b.rows, &b, gm, is_half);
        grad_input_pixel(d, grad_rows, mask, as_float, n, i, j, b.rows, &b, b.total, is_half);
        write_t(b.total, C, is_half, grad_input_out, (whole ? p : u) * C);
        for (long q = 0; q < ss; q++)
            write_t(gm + q * G * kk, G * kk, is_half, grad_mask_out,
                    out_pixel(d, u, n, i, j, q / s, q % s, whole) * G * kk);
    }
    status = 0;
done:
    free(x);
    free(grads);
    free(b.x);
    free(b.own);
    free(b.window);
    free(b.spread);
    free(b.total);
    free(b.rows);
    free(gm);
    return status;
}

/* input [N, H, W, C], mask [N, Hs, Ws, G k k] and grad_output [N, Hs, Ws, C] in T (float, or float16 bits where
 * is_half) -> grad_input and grad_mask in T, NaNs canonical: [N, H, W, C] and [N, Hs, Ws, G k k] for units
 * NULL (count = N H W), else [count, C] and [count, s, s, G k k] for the input pixels units[0..count) (flat in
 * [N, H, W]).  C is a multiple of G >= 1.  Returns NUMPY_DECIDES (no memory). */
#define BACKWARD_ARGS const void *input, const void *mask, const void *grad_output, const Shape *d, int is_half, \
    const long *units, long count, void *grad_input, void *grad_mask
#define BACKWARD(is_half) backward_body(d, input, mask, grad_output, units, count, is_half, grad_input, grad_mask)
static int backward_generic(BACKWARD_ARGS) { return is_half ? BACKWARD(1) : BACKWARD(0); }
MMCV_V3 static int backward_v3(BACKWARD_ARGS) { return is_half ? BACKWARD(1) : BACKWARD(0); }

int carafe_backward_mmcv(const void *input, const void *mask, const void *grad_output, long N, long H, long W,
                         long C, long G, long k, long s, int is_half, const long *units, long count,
                         void *grad_input, void *grad_mask)
{
    const Shape d = {N, H, W, C, G, k, s};
    return (mmcv_v3(carafe_mmcv_generic_only) ? backward_v3 : backward_generic)(input, mask, grad_output, &d, is_half,
                                                                                units, count, grad_input, grad_mask);
}
