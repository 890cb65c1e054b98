/* border_align's backward golden as a compiled loop, bit for bit what gen/kernels/border_align/reference.py's backward
 * computes with numpy (float64 throughout).
 *
 * Geometry, per box and border e (top, left, bottom, right) and point index i (the argmax, as a double):
 *   stride_w = (x2 - x1) / pool_size,  stride_h = (y2 - y1) / pool_size
 *   x = start_x + step_x * i,  y = start_y + step_y * i      (start and step as _border_lines lays them out)
 * then the shared bilinear sampling as gen/kernels/shared/bilinear.py does it: a point outside [-1, H] x [-1, W]
 * adds nothing; otherwise each axis is clamped at 0, snapped onto the last row (column) at or past it,
 * and split into low, high and the fraction l; the weights are hy*hx, hy*lx, ly*hx, ly*lx with
 * h = 1 - l.  Each operation is the one numpy does, in the same order, each rounded on its own.
 *
 * Sums: numpy scatters, per image n, border e and block of channels, the products
 * grad_output[n, k, e, c] * weight[q] in the order (corner q outer, box k, channel c inner) into zeros
 * with np.bincount, which adds them one by one.  Every element of grad_input therefore takes its
 * additions in the order (q, k) from +0; this loop adds them in that order too, into a block of
 * channels of all pixels laid out contiguously ([H*W + 1, width], the last row a dump for points
 * outside the map, as numpy's), then copies the block into grad_input.  Channels are independent
 * sums, so the blocking changes no bit.
 *
 * A point's four corners and weights are tabled once per (box, border, index) when every index lies in
 * [0, pool_size] and the table is no larger than the channels it serves (pool_size < C); otherwise they
 * are computed per element, by the same function.
 *
 * Equal operations give equal bits, except which NaN comes out where two meet (the compiler may swap
 * the operands of an addition): the caller recomputes with numpy when an output is NaN.  Built with
 * -ffp-contract=off and without fast-math (gen/native.py): nothing fused, nothing reassociated.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int64_t pixel[4];   /* row * W + col of the corners (y_low, x_low), (y_low, x_high), (y_high, x_low),
                           (y_high, x_high); H * W (the dump row) where the point adds nothing */
    double weight[4];
} point;

/* One axis of bilinear_corners: low and high neighbour and the fraction towards the high one. */
static void axis(double coord, long size, int64_t *low, int64_t *high, double *fraction)
{
    double c = coord < 0.0 ? 0.0 : coord;           /* np.maximum(coord, 0); coord is not NaN here */
    /* floor(c): c lies in [0, size] here, where truncation is floor, exactly (and needs no libm call) */
    double lo = (double)(int64_t)c;
    if (lo >= (double)(size - 1)) {                 /* at or past the last row: snap onto it */
        lo = (double)(size - 1);
        c = lo;
        *high = (int64_t)lo;
    } else {
        *high = (int64_t)(lo + 1.0);
    }
    *low = (int64_t)lo;
    *fraction = c - lo;
}

/* Border e of box `box` ([x1, y1, x2, y2]) as a line: its first point and the step between points. */
typedef struct {
    double start_x, start_y, step_x, step_y;
} line;

static line border_line(const double *box, int e, long pool_size)
{
    const double x1 = box[0], y1 = box[1], x2 = box[2], y2 = box[3];
    const double stride_w = (x2 - x1) / (double)pool_size;
    const double stride_h = (y2 - y1) / (double)pool_size;
    const double start_x[4] = {x1, x1, x2, x2}, start_y[4] = {y1, y1, y2, y2};
    const double step_x[4] = {stride_w, 0.0, -stride_w, 0.0}, step_y[4] = {0.0, stride_h, 0.0, -stride_h};
    return (line){start_x[e], start_y[e], step_x[e], step_y[e]};
}

/* The corners and weights of the point of index `index` on border line b. */
static void locate_on(const line *b, double index, long H, long W, point *p)
{
    const double x = b->start_x + b->step_x * index;
    const double y = b->start_y + b->step_y * index;
    if (!(y >= -1.0 && y <= (double)H && x >= -1.0 && x <= (double)W)) {
        for (int q = 0; q < 4; q++) {
            p->pixel[q] = H * W;
            p->weight[q] = 0.0;
        }
        return;
    }
    int64_t y_low, y_high, x_low, x_high;
    double ly, lx;
    axis(y, H, &y_low, &y_high, &ly);
    axis(x, W, &x_low, &x_high, &lx);
    const double hy = 1.0 - ly, hx = 1.0 - lx;
    p->weight[0] = hy * hx;
    p->weight[1] = hy * lx;
    p->weight[2] = ly * hx;
    p->weight[3] = ly * lx;
    p->pixel[0] = y_low * W + x_low;
    p->pixel[1] = y_low * W + x_high;
    p->pixel[2] = y_high * W + x_low;
    p->pixel[3] = y_high * W + x_high;
}

/* The corners and weights of border e's point of index `index` of box `box`. */
static void locate(const double *box, int e, double index, long pool_size, long H, long W, point *p)
{
    const line b = border_line(box, e, pool_size);
    locate_on(&b, index, H, W, p);
}

/* Corner q's additions of boxes 0..K-1 to channels c0..c0+width of `sums` [H*W + 1, width], from the tabled
 * points (corner q's pixel and weight of each box's points, `points` a box). */
static void add_tabled(double *restrict sums, long width, const int64_t *restrict pixel,
                       const double *restrict weight, long points, const double *restrict grad_output,
                       const int32_t *restrict argmax_idx, long K, long box_stride)
{
    for (long k = 0; k < K; k++) {
        const double *gradient = grad_output + k * box_stride;
        const int32_t *index = argmax_idx + k * box_stride;
        const int64_t *box_pixel = pixel + k * points;
        const double *box_weight = weight + k * points;
        for (long c = 0; c < width; c++) {
            const int32_t i = index[c];
            sums[box_pixel[i] * width + c] += gradient[c] * box_weight[i];
        }
    }
}

/* The same additions with every point located on the spot (any index, any pool_size). */
static void add_located(double *restrict sums, long width, int q, const double *boxes, int e, long pool_size,
                        long H, long W, const double *restrict grad_output, const int32_t *restrict argmax_idx,
                        long K, long box_stride)
{
    for (long k = 0; k < K; k++) {
        const double *gradient = grad_output + k * box_stride;
        const int32_t *index = argmax_idx + k * box_stride;
        for (long c = 0; c < width; c++) {
            point p;
            locate(boxes + k * 4, e, (double)index[c], pool_size, H, W, &p);
            sums[p.pixel[q] * width + c] += gradient[c] * p.weight[q];
        }
    }
}

/* grad_input [N, H, W, 4C] from grad_output [N, K, 4, C], boxes [N, K, 4] (both float64) and argmax_idx
 * [N, K, 4, C] (int32), `block` channels at a time.  Returns 0, or -1 when scratch memory could not be
 * had (nothing was written then). */
int border_align_backward(const double *grad_output, const double *boxes, const int32_t *argmax_idx,
                          long N, long K, long C, long H, long W, long pool_size, long block,
                          double *grad_input)
{
    const long points = pool_size + 1, pixels = H * W, row = 4 * C;
    int tabled = pool_size < C;
    for (long j = 0; tabled && j < N * K * 4 * C; j++)
        tabled = argmax_idx[j] >= 0 && argmax_idx[j] <= pool_size;
    const long tabled_points = tabled ? K * points : 0;
    int64_t *pixel = malloc((size_t)(4 * tabled_points + 1) * sizeof(int64_t));
    double *weight = malloc((size_t)(4 * tabled_points + 1) * sizeof(double));
    double *sums = malloc((size_t)((pixels + 1) * (block < C ? block : C)) * sizeof(double));
    if (pixel == NULL || weight == NULL || sums == NULL) {
        free(pixel);
        free(weight);
        free(sums);
        return -1;
    }
    for (long n = 0; n < N; n++) {
        const double *image_boxes = boxes + n * K * 4;
        double *image = grad_input + n * pixels * row;
        for (int e = 0; e < 4; e++) {
            /* Corner q's pixels and weights of all K * points points, q = 0..3 one after the other. */
            for (long k = 0; tabled && k < K; k++) {
                const line b = border_line(image_boxes + k * 4, e, pool_size);
                for (long i = 0; i < points; i++) {
                    const long j = k * points + i;
                    point p;
                    locate_on(&b, (double)i, H, W, &p);
                    for (int q = 0; q < 4; q++) {
                        pixel[q * tabled_points + j] = p.pixel[q];
                        weight[q * tabled_points + j] = p.weight[q];
                    }
                }
            }
            for (long c0 = 0; c0 < C; c0 += block) {
                const long width = c0 + block < C ? block : C - c0;
                const long first = (n * K * 4 + e) * C + c0;     /* grad_output[n, 0, e, c0] */
                memset(sums, 0, (size_t)((pixels + 1) * width) * sizeof(double));
                for (int q = 0; q < 4; q++) {
                    if (tabled)
                        add_tabled(sums, width, pixel + q * tabled_points, weight + q * tabled_points, points,
                                   grad_output + first, argmax_idx + first, K, row);
                    else
                        add_located(sums, width, q, image_boxes, e, pool_size, H, W, grad_output + first,
                                    argmax_idx + first, K, row);
                }
                for (long p = 0; p < pixels; p++)
                    memcpy(image + p * row + e * C + c0, sums + p * width, (size_t)width * sizeof(double));
            }
        }
    }
    free(pixel);
    free(weight);
    free(sums);
    return 0;
}
