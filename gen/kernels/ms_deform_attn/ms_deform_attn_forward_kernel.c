/* ms_deform_attn_forward's golden as a compiled loop, bit for bit what gen/kernels/ms_deform_attn/reference.py
 * computes with numpy (float64 throughout).
 *
 * Per row (n, q, m) of data_col, level l and point p (levels outer, points inner, as numpy adds them):
 * x = loc_x * W_l - 0.5, y = loc_y * H_l - 0.5; a point is skipped unless -1 < y < H_l and -1 < x < W_l;
 * otherwise sampled = +0.0, then for the neighbours (y_low, x_low), (y_low, x_high), (y_high, x_low),
 * (y_high, x_high) that lie in the map, sampled += weight * value (weights hy*hx, hy*lx, ly*hx, ly*lx,
 * l = coordinate - floor, h = 1 - l), and data_col += attn * sampled.  numpy also adds +0.0 for every
 * skipped point and missing neighbour; a sum starting from +0.0 is never -0.0, so adding +0.0 changes
 * no bit and the loop leaves those additions out.  The point's geometry is computed once for all C
 * channels, whose rows are contiguous in data_value and data_col.  Which NaN comes out where two meet
 * is the compiler's choice: the caller recomputes with numpy when an output is NaN.  Built with
 * -ffp-contract=off and without fast-math (gen/native.py): nothing fused, nothing reassociated.
 */
#include <math.h>
#include <stdint.h>

/* value [N, K, M, C], loc [N, Q, M, L, P, 2], attn [N, Q, M, L, P] of one type T (float64, or float32 read
 * as it is: widening a float32 to float64 is exact, so reading it in place gives the bits of widening it
 * first, without a float64 copy of data_value); shapes [L, 2] and starts [L] int64 (checked by the
 * caller) -> out [N, Q, M, C] float64, zeros on entry. */
#define DEFINE_FORWARD(NAME, T)                                                                           \
void NAME(const T *value, const int64_t *shapes, const int64_t *starts, const T *loc, const T *attn,     \
          long N, long K, long M, long C, long L, long Q, long P, double *out)                           \
{                                                                                                       \
    for (long n = 0; n < N; n++) {                                                                      \
        for (long q = 0; q < Q; q++) {                                                                  \
            for (long m = 0; m < M; m++) {                                                              \
                const long row = (n * Q + q) * M + m;                                                   \
                double *acc = out + row * C;                                                            \
                const T *row_loc = loc + row * L * P * 2;                                               \
                const T *row_attn = attn + row * L * P;                                                 \
                for (long l = 0; l < L; l++) {                                                          \
                    const long height = (long)shapes[2 * l], width = (long)shapes[2 * l + 1];           \
                    const T *level = value + ((n * K + starts[l]) * M + m) * C;                         \
                    for (long p = 0; p < P; p++) {                                                      \
                        const double x = row_loc[(l * P + p) * 2] * (double)width - 0.5;                \
                        const double y = row_loc[(l * P + p) * 2 + 1] * (double)height - 0.5;           \
                        if (!(y > -1.0 && x > -1.0 && y < (double)height && x < (double)width))         \
                            continue;                                                                   \
                        const double y_low = floor(y), x_low = floor(x);                                \
                        const double ly = y - y_low, lx = x - x_low;                                    \
                        const double hy = 1.0 - ly, hx = 1.0 - lx;                                      \
                        const double weights[4] = {hy * hx, hy * lx, ly * hx, ly * lx};                 \
                        const long r0 = (long)y_low, c0 = (long)x_low;                                  \
                        const T *corner[4];                                                             \
                        double weight[4];                                                               \
                        int count = 0;                                                                  \
                        for (int k = 0; k < 4; k++) {                                                   \
                            const long r = r0 + (k >> 1), c = c0 + (k & 1);                             \
                            if (r >= 0 && r < height && c >= 0 && c < width) {                          \
                                corner[count] = level + (r * width + c) * M * C;                        \
                                weight[count++] = weights[k];                                           \
                            }                                                                           \
                        }                                                                               \
                        const double a = row_attn[l * P + p];                                           \
                        switch (count) {                                                                \
                        case 4:                                                                         \
                            for (long c = 0; c < C; c++) {                                              \
                                double s = 0.0;                                                         \
                                s += weight[0] * corner[0][c];                                          \
                                s += weight[1] * corner[1][c];                                          \
                                s += weight[2] * corner[2][c];                                          \
                                s += weight[3] * corner[3][c];                                          \
                                acc[c] += a * s;                                                        \
                            }                                                                           \
                            break;                                                                      \
                        default:                                                                        \
                            for (long c = 0; c < C; c++) {                                              \
                                double s = 0.0;                                                         \
                                for (int k = 0; k < count; k++)                                         \
                                    s += weight[k] * corner[k][c];                                      \
                                acc[c] += a * s;                                                        \
                            }                                                                           \
                        }                                                                               \
                    }                                                                                   \
                }                                                                                       \
            }                                                                                           \
        }                                                                                               \
    }                                                                                                   \
}

DEFINE_FORWARD(ms_deform_attn_forward, double)
DEFINE_FORWARD(ms_deform_attn_forward_float32, float)
