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

/* features [N, H, W, 4C] float64, boxes [N, K, 4] float64 -> output [N, K, 4, C] float64 and
 * argmax_idx [N, K, 4, C] int32.  Returns 0, or 1 where memory for the point table was not there. */
int border_align_forward(const double *features, const double *boxes, long N, long H, long W, long K, long C,
                         long pool_size, double *output, int32_t *argmax_idx)
{
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
