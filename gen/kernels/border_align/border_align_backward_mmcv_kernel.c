/* mmcv 2.2.0's border_align_backward_cuda_kernel in T (float or at::Half) as a compiled loop, bit for bit
 * what gen/kernels/border_align/mmcv_emulation.py computes with numpy (the baseline `opcase gen` computes
 * beside the golden for dynamic thresholds).
 *
 * Values are float32 here whatever T is (../shared/mmcv_half.h).  One thread per (n, c, k), index
 * (n*C + c)*K + k, and border e (top, left, bottom, right): its point start + stride * (T)argmax as one
 * mmcv_mac (fused for float), the stride (side in T) / (T)pool_size; the bilinear corners and weights of
 * mmcv_bilinear; grad_output * w_i added into grad_input, each add rounded to T; a point more than a pixel
 * outside adds nothing.  The order of the atomicAdds is the emulation's: block after block of 128 threads,
 * within a block corner (w1..w4), then border, then lane; or, thread_by_thread, thread after thread, each
 * its borders, each border its four corners.  NaNs come out as the GPU's canonical one (ScalarT.result).
 */
#include <stdlib.h>

#include "../shared/mmcv_half.h"

#define BLOCK_X 128                         /* the launcher's dim3 block(128, 4) */
#define BORDERS 4

typedef struct {                /* one thread's border: its four adds, or none */
    int inside;
    long target[4];
    float value[4];
} Adds;

typedef struct {                /* a point of a border: its corners' pixels (n*H + row)*W + col and weights */
    int inside;
    long pixel[4];
    float weight[4];
} Point;

/* Point `argmax` of border e of box (n, k): start + stride * (T)argmax, sampled. */
MMCV_INLINE void border_point(const void *boxes, long K, long H, long W, float pool, long n, long k, int e,
                              long argmax, int is_half, Point *p)
{
    const long box = (n * K + k) * 4;
    const float x1 = mmcv_value_of(boxes, box, is_half), y1 = mmcv_value_of(boxes, box + 1, is_half);
    const float x2 = mmcv_value_of(boxes, box + 2, is_half), y2 = mmcv_value_of(boxes, box + 3, is_half);
    const float stride_w = mmcv_in_t(mmcv_in_t(x2 - x1, is_half) / pool, is_half);
    const float stride_h = mmcv_in_t(mmcv_in_t(y2 - y1, is_half) / pool, is_half);
    const float start_x = e < 2 ? x1 : x2, start_y = e < 2 ? y1 : y2;
    const float step_x = e == 0 ? stride_w : e == 2 ? -stride_w : 0.0f;
    const float step_y = e == 1 ? stride_h : e == 3 ? -stride_h : 0.0f;
    const float index = mmcv_int_in_t(argmax, is_half);
    const float x = mmcv_mac(start_x, step_x, index, is_half), y = mmcv_mac(start_y, step_y, index, is_half);
    MmcvBilinear b;
    p->inside = mmcv_bilinear(y, x, H, W, is_half, &b);
    if (!p->inside)
        return;
    const long rows[4] = {b.y_low, b.y_low, b.y_high, b.y_high}, cols[4] = {b.x_low, b.x_high, b.x_low, b.x_high};
    for (int corner = 0; corner < 4; corner++) {
        p->pixel[corner] = (n * H + rows[corner]) * W + cols[corner];
        p->weight[corner] = b.weight[corner];
    }
}

/* grad_output [N, K, 4, C] and boxes [N, K, 4] in T (float, or float16 bits where is_half), argmax_idx
 * [N, K, 4, C] int32 -> grad_input_out [N, H, W, 4C] in T, NaNs canonical.  Returns 1 (nothing written)
 * where there is no memory. */
int border_align_backward_mmcv(const void *grad_output, const void *boxes, const int32_t *argmax, long N, long K,
                               long C, long H, long W, long pool_size, int is_half, int thread_by_thread,
                               void *grad_input_out)
{
    const long input_size = N * H * W * BORDERS * C, threads = N * C * K;
    float *grad_input = calloc(input_size > 0 ? input_size : 1, sizeof(float));
    Adds *adds = malloc(sizeof(Adds) * BORDERS * BLOCK_X);
    if (!grad_input || !adds) {
        free(grad_input);
        free(adds);
        return 1;
    }
    const float pool = mmcv_int_in_t(pool_size, is_half);
    /* A thread's point depends on its channel only through argmax_idx, one of pool_size + 1 values: each
     * (n, k, border, value) point is sampled once, where that is fewer points than the threads'. */
    const long values = pool_size + 1, points = N * K * BORDERS * values;
    Point *table = NULL;
    if (input_size > 0 && pool_size >= 0 && points <= threads * BORDERS) {
        table = malloc(sizeof(Point) * (points > 0 ? points : 1));
        if (!table) {
            free(grad_input);
            free(adds);
            return 1;
        }
        for (long line = 0; line < N * K * BORDERS; line++)
            for (long v = 0; v < values; v++)
                border_point(boxes, K, H, W, pool, line / (K * BORDERS), (line / BORDERS) % K, (int)(line % BORDERS),
                             v, is_half, table + line * values + v);
    }
    for (long first = 0; input_size > 0 && first < threads; first += BLOCK_X) {
        const long lanes = threads - first < BLOCK_X ? threads - first : BLOCK_X;
        for (long lane = 0; lane < lanes; lane++) {
            const long thread = first + lane, k = thread % K, c = (thread / K) % C, n = thread / (K * C);
            for (int e = 0; e < BORDERS; e++) {
                Adds *a = adds + e * BLOCK_X + lane;
                const long at = ((n * K + k) * BORDERS + e) * C + c;     /* grad_output, argmax_idx [N, K, 4, C] */
                const long index = argmax[at];
                Point computed;
                const Point *p = table && index >= 0 && index <= pool_size
                    ? table + ((n * K + k) * BORDERS + e) * values + index : &computed;
                if (p == &computed)
                    border_point(boxes, K, H, W, pool, n, k, e, index, is_half, &computed);
                a->inside = p->inside;
                if (a->inside) {
                    const float g = mmcv_value_of(grad_output, at, is_half);
                    for (int corner = 0; corner < 4; corner++) {
                        a->target[corner] = p->pixel[corner] * (BORDERS * C) + e * C + c;
                        a->value[corner] = mmcv_in_t(g * p->weight[corner], is_half);
                    }
                }
                if (thread_by_thread && a->inside)
                    for (int corner = 0; corner < 4; corner++)
                        mmcv_atomic_add(grad_input + a->target[corner], a->value[corner], is_half);
            }
        }
        if (thread_by_thread)
            continue;
        for (int corner = 0; corner < 4; corner++)
            for (int e = 0; e < BORDERS; e++)
                for (long lane = 0; lane < lanes; lane++) {
                    const Adds *a = adds + e * BLOCK_X + lane;
                    if (a->inside)
                        mmcv_atomic_add(grad_input + a->target[corner], a->value[corner], is_half);
                }
    }
    mmcv_write_result(grad_input, input_size, is_half, grad_input_out);
    free(grad_input);
    free(adds);
    free(table);
    return 0;
}
