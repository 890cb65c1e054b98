/* deform_roi_pool's goldens as compiled loops, bit for bit what gen/kernels/deform_roi_pool/reference.py (forward) and
 * gen/kernels/deform_roi_pool/reference_backward.py (backward) compute with numpy.
 *
 * Both walk the flat sequence of samples bin by bin (bin b holds grid_h[b] * grid_w[b] samples, iy outer,
 * ix inner), cut into chunks of `step` samples at multiples of `step`, as the numpy paths do:
 *
 * - forward: each bin's run of samples within a chunk is summed as _first_plus_pairwise does (the first
 *   sample plus numpy's pairwise sum of the rest: blocks of up to 128 rows with 8 interleaved
 *   accumulators, longer runs halved at a multiple of 8) and added to the bin's sum, which starts at +0;
 *   a sample is ((v00*w0 + v10*w1) + v01*w2) + v11*w3, each product rounded on its own.  A sample
 *   outside [-1, H] x [-1, W] is evaluated at (0, 0) with weights +0, as bilinear_corners does, so
 *   that an Inf or NaN there reaches the sum as numpy's does.
 * - backward: each sample inside the map adds w_q * g to its four corners in turn (np.add.at's order,
 *   which gen.kernels.shared.ordered_scatter keeps), g = the bin's grad_output / count; with an offset, each
 *   sample's two derivative terms are sums over the channels as numpy's .sum(axis=1) adds them (+0
 *   plus the pairwise sum of all), and a bin's terms are added as the numpy path's np.bincount chunk
 *   by chunk does (each chunk's terms one by one from +0, then the chunk's sum added to the bin's).
 *
 * The input is read in its own dtype (float16, float32 or float64) and widened exactly, as numpy does.
 *
 * Equal operations give equal bits except for which NaN comes out where two meet (x86 returns the first
 * operand's, numpy's SIMD loops choose their own): the caller recomputes with numpy when an output is NaN.
 * Built with -ffp-contract=off and without fast-math (gen/native.py): nothing fused, nothing
 * reassociated.  target_clones picks AVX-512, AVX2 or SSE2 at load time: the same bits, at different
 * speeds (each channel is its own sum; vectors only hold several channels side by side).
 */
#include <math.h>
#include <stddef.h>
#include <string.h>

typedef double vec8 __attribute__((vector_size(64), aligned(8)));   /* 8 channels, unaligned access */
typedef float vecf8 __attribute__((vector_size(32), aligned(4)));
typedef unsigned short vech8 __attribute__((vector_size(16), aligned(2)));   /* 8 float16 bit patterns */
typedef unsigned long long vecu8 __attribute__((vector_size(64)));
typedef unsigned int vecu32x8 __attribute__((vector_size(32)));

#if defined(__x86_64__) && defined(__GNUC__)
#define CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define CLONES
#endif

#define PAIRWISE_BLOCK 128

#define INLINE static inline __attribute__((always_inline))
INLINE vec8 load8(const double *p) { return *(const vec8 *)p; }
INLINE vec8 load8f(const float *p) { return __builtin_convertvector(*(const vecf8 *)p, vec8); }
INLINE void store8(double *p, vec8 v) { *(vec8 *)p = v; }

/* float16 bits to float64, exactly (no F16C needed): the exponent and mantissa moved into a double's
 * fields and scaled by 2^(1023 - 15), which is exact for normal and subnormal halves alike; Inf and
 * NaN (exponent all ones) are rebuilt with their payload; the sign is put back last. */
#define HALF_SCALE 0x1p1008
INLINE vec8 load8h(const unsigned short *p)
{
    /* Written so that GCC keeps every step in vector registers without AVX-512: 16 to 32 to 64 bits (a
     * direct 16 to 64-bit conversion, or any 64-bit compare, it does element by element through the
     * stack, which made the whole loop 5x slower on an AVX2 CPU); "magnitude >= 0x7c00" as the carry
     * out of bit 15 (magnitude < 2^15), negated into an all-ones mask. */
    const vecu8 h = __builtin_convertvector(__builtin_convertvector(*(const vech8 *)p, vecu32x8), vecu8);
    const vecu8 magnitude = h & 0x7fff;
    const vecu8 finite = (vecu8)((vec8)(magnitude << 42) * HALF_SCALE);
    const vecu8 special = -((magnitude + (0x10000 - 0x7c00)) >> 16);
    const vecu8 inf_nan = (0x7ffULL << 52) | ((magnitude & 0x3ff) << 42);
    return (vec8)((finite & ~special) | (inf_nan & special) | ((h & 0x8000) << 48));
}

INLINE double half_to_double(unsigned short h)
{
    const unsigned long long magnitude = h & 0x7fff, sign = (unsigned long long)(h & 0x8000) << 48;
    unsigned long long bits = magnitude << 42;
    double value;
    if (magnitude >= 0x7c00) {
        bits = (0x7ffULL << 52) | ((magnitude & 0x3ff) << 42);
    } else {
        memcpy(&value, &bits, sizeof value);
        value *= HALF_SCALE;
        memcpy(&bits, &value, sizeof bits);
    }
    bits |= sign;
    memcpy(&value, &bits, sizeof value);
    return value;
}

/* out = a + b, channel by channel (out may be a or b). */
INLINE void add_rows(double *out, const double *a, const double *b, long C)
{
    long c = 0;
    for (; c + 8 <= C; c += 8)
        store8(out + c, load8(a + c) + load8(b + c));
    for (; c < C; ++c)
        out[c] = a[c] + b[c];
}

/* row = row + w * g, channel by channel: one scatter-add entry of grad_input (operands in np.add.at's order). */
INLINE void add_scaled(double *row, double w, const double *g, long C)
{
    long c = 0;
    for (; c + 8 <= C; c += 8)
        store8(row + c, load8(row + c) + w * load8(g + c));
    for (; c < C; ++c)
        row[c] = row[c] + w * g[c];
}

/* _pairwise_sum of gen/kernels/deform_roi_pool/reference.py over rows: out = numpy's pairwise sum of the n >= 1 rows
 * [n, C] at a, channel by channel.  scratch: (8 + depth) * C doubles, depth the levels of halving. */
CLONES static void pairwise_rows(const double *a, long n, long C, double *out, double *scratch)
{
    if (n > PAIRWISE_BLOCK) {
        long half = n / 2;
        half -= half % 8;
        pairwise_rows(a, half, C, out, scratch);
        pairwise_rows(a + half * C, n - half, C, scratch, scratch + C);
        add_rows(out, out, scratch, C);
        return;
    }
    if (n < 8) {
        memcpy(out, a, (size_t)C * sizeof(double));
        for (long i = 1; i < n; ++i)
            add_rows(out, out, a + i * C, C);
        return;
    }
    double *r = scratch;
    memcpy(r, a, (size_t)(8 * C) * sizeof(double));
    const long whole = n - n % 8;
    for (long i = 8; i < whole; i += 8)
        for (long j = 0; j < 8; ++j)
            add_rows(r + j * C, r + j * C, a + (i + j) * C, C);
    long c = 0;
    for (; c + 8 <= C; c += 8) {
        const vec8 r0 = load8(r + c), r1 = load8(r + C + c), r2 = load8(r + 2 * C + c);
        const vec8 r3 = load8(r + 3 * C + c), r4 = load8(r + 4 * C + c), r5 = load8(r + 5 * C + c);
        const vec8 r6 = load8(r + 6 * C + c), r7 = load8(r + 7 * C + c);
        store8(out + c, ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7)));
    }
    for (; c < C; ++c)
        out[c] = ((r[c] + r[C + c]) + (r[2 * C + c] + r[3 * C + c]))
                 + ((r[4 * C + c] + r[5 * C + c]) + (r[6 * C + c] + r[7 * C + c]));
    for (long i = whole; i < n; ++i)
        add_rows(out, out, a + i * C, C);
}

/* The same pairwise sum of n >= 1 values (numpy's .sum of a contiguous row is +0 plus this). */
CLONES static double pairwise(const double *a, long n)
{
    if (n > PAIRWISE_BLOCK) {
        long half = n / 2;
        half -= half % 8;
        return pairwise(a, half) + pairwise(a + half, n - half);
    }
    double res = a[0];
    if (n < 8) {
        for (long i = 1; i < n; ++i)
            res += a[i];
        return res;
    }
    double r[8];
    for (int j = 0; j < 8; ++j)
        r[j] = a[j];
    const long whole = n - n % 8;
    for (long i = 8; i < whole; i += 8)
        for (int j = 0; j < 8; ++j)
            r[j] += a[i + j];
    res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (long i = whole; i < n; ++i)
        res += a[i];
    return res;
}

/* The geometry of every bin, flattened in (roi, ph, pw) order (gen.kernels.deform_roi_pool.reference.Bins). */
struct bins {
    const long *batch, *grid_h, *grid_w, *first;     /* first: the bin's first sample in the flat sequence */
    const double *y0, *x0, *bin_h, *bin_w;
};

/* One sample (bilinear_corners): corner q (y_low/x_low, y_low/x_high, y_high/x_low, y_high/x_high) is
 * pixel row index[q] with weight w[q]; y, x the sample as computed (unclamped). */
struct sample {
    double y, x, y_low, y_high, x_low, x_high;
    double w[4];
    long index[4];
    int inside;
};

/* _bilinear_axis: the low and high neighbour along an axis of `size` cells and the fraction towards the high one. */
static inline void axis(double coord, long size, double *low, double *high, double *frac)
{
    if (coord < 0)
        coord = 0.0;
    double lo = floor(coord);
    if (lo >= (double)(size - 1)) {            /* at or past the last cell: snapped onto it */
        lo = (double)(size - 1);
        coord = lo;
        *high = lo;
    } else {
        *high = lo + 1;
    }
    *low = lo;
    *frac = coord - lo;
}

/* Sample k (iy = k / grid_w, ix = k % grid_w) of bin `bin`, as sample_points and bilinear_corners compute it;
 * a sample outside [-1, H] x [-1, W] takes its corners at (0, 0), weights +0. */
static inline void sample_at(const struct bins *b, long bin, long k, long H, long W, struct sample *s)
{
    const long gh = b->grid_h[bin], gw = b->grid_w[bin];
    const long iy = k / gw, ix = k % gw;
    s->y = b->y0[bin] + (((double)iy + 0.5) * b->bin_h[bin]) / (double)gh;
    s->x = b->x0[bin] + (((double)ix + 0.5) * b->bin_w[bin]) / (double)gw;
    s->inside = s->y >= -1 && s->y <= (double)H && s->x >= -1 && s->x <= (double)W;
    double ly, lx;
    axis(s->inside ? s->y : 0.0, H, &s->y_low, &s->y_high, &ly);
    axis(s->inside ? s->x : 0.0, W, &s->x_low, &s->x_high, &lx);
    const double hy = 1 - ly, hx = 1 - lx;
    if (s->inside) {
        s->w[0] = hy * hx; s->w[1] = hy * lx; s->w[2] = ly * hx; s->w[3] = ly * lx;
    } else {
        s->w[0] = s->w[1] = s->w[2] = s->w[3] = 0.0;
    }
    const long base = b->batch[bin] * H;
    const long yl = (long)s->y_low, yh = (long)s->y_high, xl = (long)s->x_low, xh = (long)s->x_high;
    s->index[0] = (base + yl) * W + xl;
    s->index[1] = (base + yl) * W + xh;
    s->index[2] = (base + yh) * W + xl;
    s->index[3] = (base + yh) * W + xh;
}

/* One kernel pair per pixel type T (float or double), LOAD8 its 8-channel load as float64. */
#define KERNELS(SUFFIX, T, LOAD8, LOAD1)                                                                          \
                                                                                                           \
/* row = ((v00 * w0 + v10 * w1) + v01 * w2) + v11 * w3 (_sample_values' order). */                        \
INLINE void weigh_corners_##SUFFIX(double *row, const T *pixels,     \
                                                                        const struct sample *s, long C)    \
{                                                                                                          \
    const T *p0 = pixels + s->index[0] * C, *p1 = pixels + s->index[1] * C;                                \
    const T *p2 = pixels + s->index[2] * C, *p3 = pixels + s->index[3] * C;                                \
    const double w0 = s->w[0], w1 = s->w[1], w2 = s->w[2], w3 = s->w[3];                                   \
    long c = 0;                                                                                            \
    for (; c + 8 <= C; c += 8)                                                                             \
        store8(row + c, ((LOAD8(p0 + c) * w0 + LOAD8(p1 + c) * w1) + LOAD8(p2 + c) * w2) + LOAD8(p3 + c) * w3); \
    for (; c < C; ++c)                                                                                     \
        row[c] = ((LOAD1(p0[c]) * w0 + LOAD1(p1[c]) * w1) + LOAD1(p2[c]) * w2) + LOAD1(p3[c]) * w3;         \
}                                                                                                          \
                                                                                                           \
/* out[c] = g[c] * ((a[c] - b[c]) * fa + (d[c] - e[c]) * fb) (_offset_terms' order). */                   \
INLINE void offset_products_##SUFFIX(                                \
    double *out, const double *g, const T *a, const T *b, double fa, const T *d, const T *e, double fb, long C) \
{                                                                                                          \
    long c = 0;                                                                                            \
    for (; c + 8 <= C; c += 8)                                                                             \
        store8(out + c, load8(g + c) * ((LOAD8(a + c) - LOAD8(b + c)) * fa + (LOAD8(d + c) - LOAD8(e + c)) * fb)); \
    for (; c < C; ++c)                                                                                     \
        out[c] = g[c] * ((LOAD1(a[c]) - LOAD1(b[c])) * fa + (LOAD1(d[c]) - LOAD1(e[c])) * fb);             \
}                                                                                                          \
                                                                                                           \
/* sums [bins, C] (+0 on entry): each bin's sum of samples, run by run (module doc).                       \
 * work: (max_run + 1 + 8 + 64) * C doubles, max_run the longest run (<= step).  Returns 0. */            \
CLONES int deform_roi_pool_sums_##SUFFIX(                                                                  \
    const T *pixels, long H, long W, long C, long count, const long *batch, const long *grid_h,            \
    const long *grid_w, const long *first, const double *y0, const double *x0, const double *bin_h,        \
    const double *bin_w, long step, double *sums, double *work, long max_run)                              \
{                                                                                                          \
    const struct bins b = {batch, grid_h, grid_w, first, y0, x0, bin_h, bin_w};                            \
    double *run_sum = work + max_run * C, *scratch = run_sum + C;                                          \
    struct sample s;                                                                                       \
    for (long bin = 0; bin < count; ++bin) {                                                               \
        const long n = grid_h[bin] * grid_w[bin];                                                          \
        double *sum = sums + bin * C;                                                                      \
        for (long k0 = 0; k0 < n;) {                                                                       \
            const long chunk_end = ((first[bin] + k0) / step + 1) * step - first[bin];                     \
            const long k1 = chunk_end < n ? chunk_end : n;                                                 \
            for (long k = k0; k < k1; ++k) {                                                               \
                sample_at(&b, bin, k, H, W, &s);                                                           \
                weigh_corners_##SUFFIX(work + (k - k0) * C, pixels, &s, C);                                \
            }                                                                                              \
            if (k1 - k0 == 1) {                                                                            \
                add_rows(sum, sum, work, C);                                                               \
            } else {                                                                                       \
                pairwise_rows(work + C, k1 - k0 - 1, C, run_sum, scratch);                                 \
                add_rows(run_sum, work, run_sum, C);                                                       \
                add_rows(sum, sum, run_sum, C);                                                            \
            }                                                                                              \
            k0 = k1;                                                                                       \
        }                                                                                                  \
    }                                                                                                      \
    return 0;                                                                                              \
}                                                                                                          \
                                                                                                           \
/* grad_input [N*H*W, C] (+0 on entry) gets every inside sample's four corners in turn, w_q * bin_grad;    \
 * with_offset: offset_x, offset_y [bins] get each bin's sums of the samples' derivative terms (module doc). \
 * work: C doubles.  Returns 0. */                                                                         \
CLONES int deform_roi_pool_grads_##SUFFIX(                                                                 \
    const T *pixels, long H, long W, long C, long count, const long *batch, const long *grid_h,            \
    const long *grid_w, const long *first, const double *y0, const double *x0, const double *bin_h,        \
    const double *bin_w, long step, const double *bin_grad, int with_offset, double *grad_input,           \
    double *offset_x, double *offset_y, double *work)                                                      \
{                                                                                                          \
    const struct bins b = {batch, grid_h, grid_w, first, y0, x0, bin_h, bin_w};                            \
    struct sample s;                                                                                       \
    for (long bin = 0; bin < count; ++bin) {                                                               \
        const long n = grid_h[bin] * grid_w[bin];                                                          \
        const double *g = bin_grad + bin * C;                                                              \
        double total_x = 0.0, total_y = 0.0, chunk_x = 0.0, chunk_y = 0.0;                                 \
        for (long k = 0; k < n; ++k) {                                                                     \
            if (k > 0 && (first[bin] + k) % step == 0) {                                                   \
                total_x = total_x + chunk_x; total_y = total_y + chunk_y;                                  \
                chunk_x = 0.0; chunk_y = 0.0;                                                              \
            }                                                                                              \
            sample_at(&b, bin, k, H, W, &s);                                                               \
            if (!s.inside) {                                                                               \
                chunk_x = chunk_x + 0.0; chunk_y = chunk_y + 0.0;                                          \
                continue;                                                                                  \
            }                                                                                              \
            for (int q = 0; q < 4; ++q)                                                                    \
                add_scaled(grad_input + s.index[q] * C, s.w[q], g, C);                                     \
            if (!with_offset)                                                                              \
                continue;                                                                                  \
            const T *v00 = pixels + s.index[0] * C, *v10 = pixels + s.index[1] * C;                        \
            const T *v01 = pixels + s.index[2] * C, *v11 = pixels + s.index[3] * C;                        \
            offset_products_##SUFFIX(work, g, v11, v01, s.y - s.y_low, v10, v00, s.y_high - s.y, C);       \
            chunk_x = chunk_x + (0.0 + pairwise(work, C));                                                 \
            offset_products_##SUFFIX(work, g, v11, v10, s.x - s.x_low, v01, v00, s.x_high - s.x, C);       \
            chunk_y = chunk_y + (0.0 + pairwise(work, C));                                                 \
        }                                                                                                  \
        if (n > 0 && with_offset) {                                                                        \
            offset_x[bin] = total_x + chunk_x;                                                             \
            offset_y[bin] = total_y + chunk_y;                                                             \
        }                                                                                                  \
    }                                                                                                      \
    return 0;                                                                                              \
}

#define WIDEN(x) ((double)(x))
KERNELS(f16, unsigned short, load8h, half_to_double)
KERNELS(f32, float, load8f, WIDEN)
KERNELS(f64, double, load8, WIDEN)
