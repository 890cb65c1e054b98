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
 *   The backward's entry takes the rois and offsets themselves and computes each bin's geometry as
 *   bin_geometry does (gen/kernels/deform_roi_pool/compiled_backward.py), so a call is one call.
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

/* The same pairwise sum of n >= 1 values (numpy's .sum of a contiguous row is +0 plus this); a block's 8
 * accumulators are the 8 lanes of one vector: each lane adds its own elements in numpy's order. */
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
    vec8 r = load8(a);
    const long whole = n - n % 8;
    for (long i = 8; i < whole; i += 8)
        r = r + load8(a + i);
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

/* Sample (iy, ix) of a bin whose grid starts at (y0, x0), as sample_points and bilinear_corners compute it;
 * a sample outside [-1, H] x [-1, W] takes its corners at (0, 0), weights +0. */
static inline void sample_point(double y0, double x0, double bin_h, double bin_w, long gh, long gw, long batch,
                                long iy, long ix, long H, long W, struct sample *s)
{
    s->y = y0 + (((double)iy + 0.5) * bin_h) / (double)gh;
    s->x = x0 + (((double)ix + 0.5) * bin_w) / (double)gw;
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
    const long base = batch * H;
    const long yl = (long)s->y_low, yh = (long)s->y_high, xl = (long)s->x_low, xh = (long)s->x_high;
    s->index[0] = (base + yl) * W + xl;
    s->index[1] = (base + yl) * W + xh;
    s->index[2] = (base + yh) * W + xl;
    s->index[3] = (base + yh) * W + xh;
}

/* Sample k (iy = k / grid_w, ix = k % grid_w) of bin `bin` of the flattened geometry. */
static inline void sample_at(const struct bins *b, long bin, long k, long H, long W, struct sample *s)
{
    const long gw = b->grid_w[bin];
    sample_point(b->y0[bin], b->x0[bin], b->bin_h[bin], b->bin_w[bin], b->grid_h[bin], gw, b->batch[bin],
                 k / gw, k % gw, H, W, s);
}

/* One roi's geometry as bin_geometry computes it: the start (before any offset), size, bin size and the
 * samples per axis as doubles (fmax(ceil(bin size), 0) for an adaptive grid: a NaN roi has none). */
struct roi {
    double start_w, start_h, roi_w, roi_h, bin_w, bin_h, grid_h, grid_w;
};

static inline void roi_geometry(const double *roi, double scale, long PH, long PW, long sampling_ratio,
                                struct roi *g)
{
    g->start_w = roi[1] * scale - 0.5;
    g->start_h = roi[2] * scale - 0.5;
    g->roi_w = (roi[3] * scale - 0.5) - g->start_w;
    g->roi_h = (roi[4] * scale - 0.5) - g->start_h;
    g->bin_h = g->roi_h / (double)PH;
    g->bin_w = g->roi_w / (double)PW;
    if (sampling_ratio > 0) {
        g->grid_h = g->grid_w = (double)sampling_ratio;
    } else {
        g->grid_h = fmax(ceil(g->roi_h / (double)PH), 0.0);
        g->grid_w = fmax(ceil(g->roi_w / (double)PW), 0.0);
    }
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
}

/* The backward per pixel type T, as KERNELS. */
#define BACKWARD(SUFFIX, T, LOAD8, LOAD1)                                                                      \
/* One sample's share of the backward (the module doc), every channel in one pass: grad_input's four corner    \
 * rows get w_q * g in turn (np.add.at's order: rows that coincide take them one after the other), and with    \
 * an offset px, py [C] the derivative terms g * ((v11 - v01) * (y - y_low) + (v10 - v00) * (y_high - y))      \
 * and g * ((v11 - v10) * (x - x_low) + (v01 - v00) * (x_high - x)) (_offset_terms' order), the four corner    \
 * pixels read once for both. */                                                                               \
INLINE void sample_grads_##SUFFIX(double *grad_input, const T *pixels, const struct sample *s, const double *g, \
                                  long C, int with_offset, double *px, double *py)                             \
{                                                                                                              \
    double *r0 = grad_input + s->index[0] * C, *r1 = grad_input + s->index[1] * C;                             \
    double *r2 = grad_input + s->index[2] * C, *r3 = grad_input + s->index[3] * C;                             \
    const double w0 = s->w[0], w1 = s->w[1], w2 = s->w[2], w3 = s->w[3];                                       \
    if (!with_offset) {                                                                                        \
        long c = 0;                                                                                            \
        for (; c + 8 <= C; c += 8) {                                                                           \
            const vec8 gv = load8(g + c);                                                                      \
            store8(r0 + c, load8(r0 + c) + w0 * gv);                                                           \
            store8(r1 + c, load8(r1 + c) + w1 * gv);                                                           \
            store8(r2 + c, load8(r2 + c) + w2 * gv);                                                           \
            store8(r3 + c, load8(r3 + c) + w3 * gv);                                                           \
        }                                                                                                      \
        for (; c < C; ++c) {                                                                                   \
            r0[c] = r0[c] + w0 * g[c];                                                                         \
            r1[c] = r1[c] + w1 * g[c];                                                                         \
            r2[c] = r2[c] + w2 * g[c];                                                                         \
            r3[c] = r3[c] + w3 * g[c];                                                                         \
        }                                                                                                      \
        return;                                                                                                \
    }                                                                                                          \
    const T *p00 = pixels + s->index[0] * C, *p10 = pixels + s->index[1] * C;                                  \
    const T *p01 = pixels + s->index[2] * C, *p11 = pixels + s->index[3] * C;                                  \
    const double from_low_y = s->y - s->y_low, to_high_y = s->y_high - s->y;                                   \
    const double from_low_x = s->x - s->x_low, to_high_x = s->x_high - s->x;                                   \
    long c = 0;                                                                                                \
    for (; c + 8 <= C; c += 8) {                                                                               \
        const vec8 gv = load8(g + c);                                                                          \
        store8(r0 + c, load8(r0 + c) + w0 * gv);                                                               \
        store8(r1 + c, load8(r1 + c) + w1 * gv);                                                               \
        store8(r2 + c, load8(r2 + c) + w2 * gv);                                                               \
        store8(r3 + c, load8(r3 + c) + w3 * gv);                                                               \
        const vec8 v00 = LOAD8(p00 + c), v10 = LOAD8(p10 + c), v01 = LOAD8(p01 + c), v11 = LOAD8(p11 + c);     \
        store8(px + c, gv * ((v11 - v01) * from_low_y + (v10 - v00) * to_high_y));                             \
        store8(py + c, gv * ((v11 - v10) * from_low_x + (v01 - v00) * to_high_x));                             \
    }                                                                                                          \
    for (; c < C; ++c) {                                                                                       \
        r0[c] = r0[c] + w0 * g[c];                                                                             \
        r1[c] = r1[c] + w1 * g[c];                                                                             \
        r2[c] = r2[c] + w2 * g[c];                                                                             \
        r3[c] = r3[c] + w3 * g[c];                                                                             \
        const double v00 = LOAD1(p00[c]), v10 = LOAD1(p10[c]), v01 = LOAD1(p01[c]), v11 = LOAD1(p11[c]);       \
        px[c] = g[c] * ((v11 - v01) * from_low_y + (v10 - v00) * to_high_y);                                   \
        py[c] = g[c] * ((v11 - v10) * from_low_x + (v01 - v00) * to_high_x);                                   \
    }                                                                                                          \
}                                                                                                              \
                                                                                                               \
/* The backward golden whole (gen/kernels/deform_roi_pool/compiled_backward.py): from the rois [R, 5] and offset \
 * [R, 2, PH, PW] (float64; offset NULL without one) each bin's geometry as bin_geometry computes it, its      \
 * grad_output / count, its samples and their sums as the module doc says, bin after bin in (roi, ph, pw)      \
 * order, and grad_offset [R, 2, PH * PW] = gamma * roi size * the bin's sum (NaN made +0 in a bin without     \
 * samples).  grad_input [N*H*W, C] and grad_offset are +0 on entry; work: 3 C doubles.                        \
 * Returns 0; 2 where an adaptive grid asks for over max_points samples (*points: how many, counted as         \
 * bin_geometry counts them; nothing computed); 1 where numpy's path must run instead: a grid numpy would      \
 * make negative, an image index outside the batch in a roi with samples, a NaN in a sum. */                   \
CLONES int deform_roi_pool_backward_##SUFFIX(                                                                  \
    const T *pixels, const T *grad_output, long N, long H, long W, long C, const double *rois, long R,         \
    const double *offset, long PH, long PW, double scale, double gamma, long sampling_ratio, long step,        \
    double max_points, double *grad_input, double *grad_offset, double *points, double *work)                  \
{                                                                                                              \
    struct roi geometry;                                                                                       \
    if (sampling_ratio <= 0) {                                                                                 \
        double total = 0.0;                               /* np.nansum of the grids' products */               \
        for (long r = 0; r < R; ++r) {                                                                         \
            roi_geometry(rois + 5 * r, scale, PH, PW, sampling_ratio, &geometry);                              \
            const double product = geometry.grid_h * geometry.grid_w;                                          \
            if (!isnan(product))                                                                               \
                total += product;                                                                              \
        }                                                                                                      \
        *points = total * (double)PH * (double)PW;                                                             \
        if (!(isfinite(*points) && *points <= max_points))                                                     \
            return 2;                                                                                          \
    }                                                                                                          \
    for (long r = 0; r < R; ++r) {                                                                             \
        roi_geometry(rois + 5 * r, scale, PH, PW, sampling_ratio, &geometry);                                  \
        /* Beyond 2^62 numpy's int64 cast is no longer the value (INT64_MIN for inf): its path decides. */     \
        if (!(geometry.grid_h < 0x1p62 && geometry.grid_w < 0x1p62))                                           \
            return 1;                                                                                          \
        const double batch = rois[5 * r];                                                                      \
        if ((long)geometry.grid_h * (long)geometry.grid_w > 0 && !(batch > -1.0 && batch < (double)N))         \
            return 1;                                                                                          \
    }                                                                                                          \
    double *g = work, *px = work + C, *py = work + 2 * C;                                                      \
    double largest = 0.0;                                 /* the largest |g| of a bin with samples */          \
    long first = 0;                                       /* the bin's first sample in the flat sequence */    \
    struct sample s;                                                                                           \
    for (long r = 0; r < R; ++r) {                                                                             \
        roi_geometry(rois + 5 * r, scale, PH, PW, sampling_ratio, &geometry);                                  \
        const long gh = (long)geometry.grid_h, gw = (long)geometry.grid_w, n = gh * gw;                        \
        const long batch = n > 0 ? (long)rois[5 * r] : 0;                                                      \
        const double gamma_w = gamma * geometry.roi_w, gamma_h = gamma * geometry.roi_h;                       \
        for (long bin_of_roi = 0; bin_of_roi < PH * PW; ++bin_of_roi) {                                        \
            const long bin = r * PH * PW + bin_of_roi, ph = bin_of_roi / PW, pw = bin_of_roi % PW;             \
            double start_w = geometry.start_w, start_h = geometry.start_h;                                     \
            if (offset != NULL) {                                                                              \
                start_w = geometry.start_w + gamma_w * offset[2 * r * PH * PW + bin_of_roi];                   \
                start_h = geometry.start_h + gamma_h * offset[(2 * r + 1) * PH * PW + bin_of_roi];             \
            }                                                                                                  \
            const double y0 = start_h + (double)ph * geometry.bin_h, x0 = start_w + (double)pw * geometry.bin_w; \
            double total_x = 0.0, total_y = 0.0, chunk_x = 0.0, chunk_y = 0.0;                                 \
            if (n > 0) {                                                                                       \
                const T *go = grad_output + bin * C;                                                           \
                for (long c = 0; c < C; ++c) {                                                                 \
                    g[c] = LOAD1(go[c]) / (double)n;                                                           \
                    const double size = fabs(g[c]);                                                            \
                    largest = size > largest ? size : (size == size ? largest : INFINITY);                     \
                }                                                                                              \
            }                                                                                                  \
            for (long k = 0; k < n; ++k) {                                                                     \
                if (k > 0 && (first + k) % step == 0) {                                                        \
                    total_x = total_x + chunk_x; total_y = total_y + chunk_y;                                  \
                    chunk_x = 0.0; chunk_y = 0.0;                                                              \
                }                                                                                              \
                sample_point(y0, x0, geometry.bin_h, geometry.bin_w, gh, gw, batch, k / gw, k % gw, H, W, &s); \
                if (!s.inside) {                                                                               \
                    chunk_x = chunk_x + 0.0; chunk_y = chunk_y + 0.0;                                          \
                    continue;                                                                                  \
                }                                                                                              \
                sample_grads_##SUFFIX(grad_input, pixels, &s, g, C, offset != NULL, px, py);                   \
                if (offset == NULL)                                                                            \
                    continue;                                                                                  \
                chunk_x = chunk_x + (0.0 + pairwise(px, C));                                                   \
                chunk_y = chunk_y + (0.0 + pairwise(py, C));                                                   \
            }                                                                                                  \
            first += n;                                                                                        \
            if (offset == NULL)                                                                                \
                continue;                                                                                      \
            const double sum_x = n > 0 ? total_x + chunk_x : 0.0, sum_y = n > 0 ? total_y + chunk_y : 0.0;     \
            if (isnan(sum_x) || isnan(sum_y))                                                                  \
                return 1;                                                                                      \
            double *out_x = grad_offset + 2 * r * PH * PW + bin_of_roi, *out_y = out_x + PH * PW;              \
            *out_x = gamma_w * sum_x;                                                                          \
            *out_y = gamma_h * sum_y;                                                                          \
            if (n == 0 && isnan(*out_x))                                                                       \
                *out_x = 0.0;                                                                                  \
            if (n == 0 && isnan(*out_y))                                                                       \
                *out_y = 0.0;                                                                                  \
        }                                                                                                      \
    }                                                                                                          \
    /* Each grad_input element is a sum of at most 4 * first terms w * g with |w| <= 1: below this bound no    \
     * partial sum can overflow, so none is NaN; above it (or with an inf or NaN g) the rows are looked at. */ \
    if (!(largest * 4.0 * (double)first <= 1e300)) {                                                           \
        for (long i = 0; i < N * H * W * C; ++i)                                                               \
            if (isnan(grad_input[i]))                                                                          \
                return 1;                                                                                      \
    }                                                                                                          \
    return 0;                                                                                                  \
}

#define WIDEN(x) ((double)(x))
KERNELS(f16, unsigned short, load8h, half_to_double)
KERNELS(f32, float, load8f, WIDEN)
KERNELS(f64, double, load8, WIDEN)
BACKWARD(f16, unsigned short, load8h, half_to_double)
BACKWARD(f32, float, load8f, WIDEN)
BACKWARD(f64, double, load8, WIDEN)
