/* border_align's forward golden as a compiled loop, bit for bit what gen/kernels/border_align/reference.py's forward
 * computes with numpy (float64 throughout).
 *
 * Per image n, box k and border e (top, left, bottom, right): the start point and stride as
 * _border_lines lays them out (stride_w = (x2 - x1) / pool_size, stride_h likewise, the other axis's
 * step 0.0), the P+1 points reached by repeated addition (x = x + step_x: the same additions numpy
 * does, +0.0 steps included), each sampled by the bilinear rule as gen/kernels/shared/bilinear.py does it:
 * outside [-1, H] x [-1, W] the sample is +0.0; otherwise each axis clamped at 0, snapped onto the last
 * row (column) at or past it, split into low, high and the fraction l; weights hy*hx, hy*lx, ly*hx,
 * ly*lx with h = 1 - l; the sample ((c0*w0 + c1*w1) + c2*w2) + c3*w3.  The first maximum is kept
 * (strict >: a NaN never wins, a NaN start stays) with its point index.
 *
 * The points' corners and weights are computed once per border and then applied to all C channels of
 * the border at once (contiguous in input and output), so there is no per-channel geometry.  Which NaN
 * comes out where two meet is the compiler's choice: the caller recomputes with numpy when an output is
 * NaN.  Built with -ffp-contract=off and without fast-math (gen/native.py): nothing fused or reassociated.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

/* floor(c) for 0 <= c <= size (c may be -0.0): the truncation, with c's sign where it is zero, as floor
 * gives it; without SSE4.1 floor is a library call per point, which the narrow maps (C = 1, 2) feel. */
static inline double floor_of_nonnegative(double c)
{
    const double t = (double)(int64_t)c;
    return t == 0.0 ? copysign(0.0, c) : t;
}

/* One axis of bilinear_corners: low and high neighbour and the fraction towards the high one. */
static void axis(double coord, long size, int64_t *low, int64_t *high, double *fraction)
{
    double c = coord < 0.0 ? 0.0 : coord;           /* np.maximum(coord, 0): -0.0 stays -0.0 */
    double lo = floor_of_nonnegative(c);
    if (lo >= (double)(size - 1)) {
        lo = (double)(size - 1);
        c = lo;
        *high = (int64_t)lo;
    } else {
        *high = (int64_t)(lo + 1.0);
    }
    *low = (int64_t)lo;
    *fraction = c - lo;
}

/* ----------------------------------------------------------------------------- narrow maps: borders in lanes
 *
 * Where a border has few channels its points' geometry is all the work, and branches on it mispredict
 * (the clamp, the snap, every new maximum).  So four borders (of any boxes and images) are taken at
 * once, one per vector lane, each lane doing the scalar loop's operations on its own border: the same
 * additions along the border, the same clamp, floor, snap and weights (floor of 0 <= c < 2^52 as
 * (c + 2^52) - 2^52, one less where that rounded up, with c's sign where it is 0, as floor gives it), and
 * the same strict-> maximum, by selects (a NaN never wins).  A point outside the map is evaluated at
 * (0, 0), whose corners exist, and its sample replaced by +0.0.  Only the corners' pixel loads and the
 * sample ((c0*w0 + c1*w1) + c2*w2) + c3*w3 are computed lane by lane. */

/* 4 lanes: GCC 12 turns compares of 8-double vectors into scalar ones without AVX-512DQ, not of 4. */
typedef double vec4 __attribute__((vector_size(32)));
typedef long long mask4 __attribute__((vector_size(32)));

#if defined(__x86_64__) && defined(__GNUC__)
#define CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define CLONES
#endif
#define INLINE static inline __attribute__((always_inline))
#define LANES 4
#define NARROW 16                  /* channels up to which this loop runs (measured 2-2.5x faster there) */

INLINE vec4 pick(mask4 when, vec4 a, vec4 b) { return (vec4)((when & (mask4)a) | (~when & (mask4)b)); }
INLINE vec4 splat(double value) { return (vec4){value, value, value, value}; }   /* not {0} + value: -0.0 */

/* An integer-valued 0 <= v < 2^51 in every lane as an int64 (exactly: v + 2^52 has v in its low bits),
 * without the conversion instruction AVX-512F and AVX2 lack.  The pixel offsets are computed as doubles
 * (integers below 2^51: exact) and converted once. */
INLINE mask4 to_integer(vec4 v) { return (mask4)(v + 0x1p52) - (mask4)splat(0x1p52); }

/* One axis of bilinear_corners in every lane (coord within [-1, size]): low and high neighbour (as
 * doubles) and the fraction towards the high one; what `axis` below does. */
INLINE void axis8(vec4 coord, long size, vec4 *low, vec4 *high, vec4 *fraction)
{
    const vec4 zero = splat(0.0), big = splat(0x1p52), last = splat((double)(size - 1));
    vec4 c = pick(coord < zero, zero, coord);
    vec4 lo = (c + big) - big;
    lo = pick(lo > c, lo - 1.0, lo);
    lo = (vec4)((mask4)lo | ((lo == zero) & (mask4)c & (mask4)splat(-0.0)));      /* floor(-0.0) is -0.0 */
    const mask4 snapped = lo >= last;
    lo = pick(snapped, last, lo);
    c = pick(snapped, lo, c);
    *high = pick(snapped, lo, lo + 1.0);
    *low = lo;
    *fraction = c - lo;
}

CLONES static void narrow_borders(const double *features, const double *boxes, long N, long H, long W, long K,
                                  long C, long pool_size, double *output, int32_t *argmax_idx)
{
    const long borders = N * K * 4, row = 4 * C;
    long box = 0, e = 0;                                 /* the next border: box n * K + k, side e */
    for (long t0 = 0; t0 < borders; t0 += LANES) {
        const long used = borders - t0 < LANES ? borders - t0 : LANES;
        vec4 x, y, step_x, step_y;
        vec4 base;                                       /* each lane's image and border, in elements */
        for (long lane = 0; lane < LANES; lane++) {      /* lanes past the end repeat the last border */
            const double *corner = boxes + box * 4;
            const double x1 = corner[0], y1 = corner[1], x2 = corner[2], y2 = corner[3];
            const double stride_w = (x2 - x1) / (double)pool_size, stride_h = (y2 - y1) / (double)pool_size;
            x[lane] = e < 2 ? x1 : x2;
            y[lane] = e < 2 ? y1 : y2;
            step_x[lane] = e == 0 ? stride_w : e == 2 ? -stride_w : 0.0;
            step_y[lane] = e == 1 ? stride_h : e == 3 ? -stride_h : 0.0;
            base[lane] = (double)((box / K) * H * W * row + e * C);
            if (lane < used - 1 || t0 + LANES < borders) {
                e = e == 3 ? 0 : e + 1;
                box += e == 0;
            }
        }
        vec4 best[NARROW], best_index[NARROW];
        for (long i = 0; i <= pool_size; i++) {
            if (i > 0) {
                x = x + step_x;
                y = y + step_y;
            }
            const mask4 inside = (y >= -1.0) & (y <= (double)H) & (x >= -1.0) & (x <= (double)W);
            vec4 y_low, y_high, x_low, x_high, ly, lx;
            axis8(pick(inside, y, splat(0.0)), H, &y_low, &y_high, &ly);
            axis8(pick(inside, x, splat(0.0)), W, &x_low, &x_high, &lx);
            const vec4 hy = 1.0 - ly, hx = 1.0 - lx;
            const vec4 w0 = hy * hx, w1 = hy * lx, w2 = ly * hx, w3 = ly * lx;
            const mask4 at0 = to_integer((y_low * (double)W + x_low) * (double)row + base);
            const mask4 at1 = to_integer((y_low * (double)W + x_high) * (double)row + base);
            const mask4 at2 = to_integer((y_high * (double)W + x_low) * (double)row + base);
            const mask4 at3 = to_integer((y_high * (double)W + x_high) * (double)row + base);
            for (long c = 0; c < C; c++) {
                double samples[LANES];
                for (long lane = 0; lane < LANES; lane++) {
                    const double *image = features + c;
                    samples[lane] = image[at0[lane]] * w0[lane] + image[at1[lane]] * w1[lane]
                                    + image[at2[lane]] * w2[lane] + image[at3[lane]] * w3[lane];
                }
                const vec4 value = pick(inside, *(const vec4 *)samples, splat(0.0));
                if (i == 0) {
                    best[c] = value;
                    best_index[c] = splat(0.0);
                } else {
                    const mask4 higher = value > best[c];
                    best[c] = pick(higher, value, best[c]);
                    best_index[c] = pick(higher, splat((double)i), best_index[c]);
                }
            }
        }
        for (long lane = 0; lane < used; lane++)
            for (long c = 0; c < C; c++) {
                output[(t0 + lane) * C + c] = best[c][lane];
                argmax_idx[(t0 + lane) * C + c] = (int32_t)best_index[c][lane];
            }
    }
}

/* features [N, H, W, 4C] float64, boxes [N, K, 4] float64 -> output [N, K, 4, C] float64 and
 * argmax_idx [N, K, 4, C] int32.  Returns 0, or 1 where memory for the point table was not there. */
int border_align_forward(const double *features, const double *boxes, long N, long H, long W, long K, long C,
                         long pool_size, double *output, int32_t *argmax_idx)
{
    if (C <= NARROW) {
        narrow_borders(features, boxes, N, H, W, K, C, pool_size, output, argmax_idx);
        return 0;
    }
    const long points = pool_size + 1;
    int64_t *pixel = malloc(sizeof(int64_t) * 4 * points);
    double *weight = malloc(sizeof(double) * 4 * points);
    char *inside = malloc((size_t)points);
    if (pixel == NULL || weight == NULL || inside == NULL) {
        free(pixel); free(weight); free(inside);
        return 1;
    }
    const long row = 4 * C;                           /* elements per pixel */
    for (long n = 0; n < N; n++) {
        const double *image = features + n * H * W * row;
        for (long k = 0; k < K; k++) {
            const double *box = boxes + (n * K + k) * 4;
            const double x1 = box[0], y1 = box[1], x2 = box[2], y2 = box[3];
            const double stride_w = (x2 - x1) / (double)pool_size;
            const double stride_h = (y2 - y1) / (double)pool_size;
            const double start_x[4] = {x1, x1, x2, x2}, start_y[4] = {y1, y1, y2, y2};
            const double step_x[4] = {stride_w, 0.0, -stride_w, 0.0}, step_y[4] = {0.0, stride_h, 0.0, -stride_h};
            for (int e = 0; e < 4; e++) {
                double x = start_x[e], y = start_y[e];
                for (long i = 0; i < points; i++) {
                    if (i > 0) {
                        x = x + step_x[e];
                        y = y + step_y[e];
                    }
                    inside[i] = y >= -1.0 && y <= (double)H && x >= -1.0 && x <= (double)W;
                    if (!inside[i])
                        continue;
                    int64_t y_low, y_high, x_low, x_high;
                    double ly, lx;
                    axis(y, H, &y_low, &y_high, &ly);
                    axis(x, W, &x_low, &x_high, &lx);
                    const double hy = 1.0 - ly, hx = 1.0 - lx;
                    weight[4 * i + 0] = hy * hx;
                    weight[4 * i + 1] = hy * lx;
                    weight[4 * i + 2] = ly * hx;
                    weight[4 * i + 3] = ly * lx;
                    pixel[4 * i + 0] = (y_low * W + x_low) * row + e * C;
                    pixel[4 * i + 1] = (y_low * W + x_high) * row + e * C;
                    pixel[4 * i + 2] = (y_high * W + x_low) * row + e * C;
                    pixel[4 * i + 3] = (y_high * W + x_high) * row + e * C;
                }
                double *best = output + ((n * K + k) * 4 + e) * C;
                int32_t *best_index = argmax_idx + ((n * K + k) * 4 + e) * C;
                for (long i = 0; i < points; i++) {
                    if (inside[i]) {
                        const double *a = image + pixel[4 * i], *b = image + pixel[4 * i + 1];
                        const double *c2 = image + pixel[4 * i + 2], *d = image + pixel[4 * i + 3];
                        const double w0 = weight[4 * i], w1 = weight[4 * i + 1];
                        const double w2 = weight[4 * i + 2], w3 = weight[4 * i + 3];
                        if (i == 0) {
                            for (long c = 0; c < C; c++) {
                                best[c] = a[c] * w0 + b[c] * w1 + c2[c] * w2 + d[c] * w3;
                                best_index[c] = 0;
                            }
                        } else {
                            for (long c = 0; c < C; c++) {
                                const double value = a[c] * w0 + b[c] * w1 + c2[c] * w2 + d[c] * w3;
                                if (value > best[c]) {
                                    best[c] = value;
                                    best_index[c] = (int32_t)i;
                                }
                            }
                        }
                    } else if (i == 0) {
                        for (long c = 0; c < C; c++) {
                            best[c] = 0.0;
                            best_index[c] = 0;
                        }
                    } else {
                        for (long c = 0; c < C; c++) {
                            if (0.0 > best[c]) {
                                best[c] = 0.0;
                                best_index[c] = (int32_t)i;
                            }
                        }
                    }
                }
            }
        }
    }
    free(pixel); free(weight); free(inside);
    return 0;
}
