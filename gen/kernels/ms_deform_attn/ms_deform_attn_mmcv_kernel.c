/* mmcv 2.2.0's ms_deformable_im2col_gpu_kernel in float as a compiled loop, bit for bit what
 * gen/kernels/ms_deform_attn/mmcv_emulation.py computes with numpy (the baseline `opcase gen` computes
 * beside the golden for dynamic thresholds).
 *
 * Per row (n, q, m), levels l then points p, each channel its own sum from +0: h_im = fmaf(loc_h,
 * (float)H, -0.5f) (and w_im), skipped unless -1 < h_im < H and -1 < w_im < W; the corners at floor(h_im),
 * floor(h_im) + 1 (and w), a corner outside the map read as 0 and still multiplied; lh = h_im - h_low,
 * hh = 1 - lh (and w), the weights hh*hw, hh*lw, lh*hw, lh*lw in float; the value w1*v1, then
 * fmaf(w2, v2, .), fmaf(w3, v3, .), fmaf(w4, v4, .); the sum fmaf(value, attn, sum).  The operations of
 * the numpy code, element by element; which NaN comes out is left to the caller's canonical NaN.  Built
 * with -ffp-contract=off and without fast-math (gen/native.py): nothing fused that is not written fmaf,
 * no flush of subnormals, as numpy's float32 arithmetic.
 */
#include <math.h>

/* value [N, K, M, C], loc [N*Q*M, L, P, 2], attn [N*Q*M, L, P], shapes [L, 2], starts [L];
 * col [N*Q*M, C], zeroed by the caller, summed into. */
void ms_deform_attn_mmcv(const float *value, long N, long K, long M, long C, const long *shapes,
                         const long *starts, long L, long P, const float *loc, const float *attn, long Q,
                         float *col)
{
    for (long r = 0; r < N * Q * M; r++) {
        const long n = r / (Q * M), m = r % M;
        float *sum = col + r * C;
        for (long l = 0; l < L; l++) {
            const long height = shapes[2 * l], width = shapes[2 * l + 1];
            const float h32 = (float)height, w32 = (float)width;
            for (long p = 0; p < P; p++) {
                const long at = (r * L + l) * P + p;
                const float h_im = fmaf(loc[2 * at + 1], h32, -0.5f), w_im = fmaf(loc[2 * at], w32, -0.5f);
                if (!(h_im > -1 && w_im > -1 && h_im < h32 && w_im < w32))
                    continue;
                const float h_low = floorf(h_im), w_low = floorf(w_im);
                const float lh = h_im - h_low, lw = w_im - w_low, hh = 1.0f - lh, hw = 1.0f - lw;
                const float w1 = hh * hw, w2 = hh * lw, w3 = lh * hw, w4 = lh * lw;
                const long rows[2] = {(long)h_low, (long)h_low + 1}, cols[2] = {(long)w_low, (long)w_low + 1};
                const float *corner[4];
                for (int k = 0; k < 4; k++) {
                    const long row = rows[k >> 1], column = cols[k & 1];
                    const int valid = row >= 0 && row <= height - 1 && column >= 0 && column <= width - 1;
                    corner[k] = valid ? value + ((n * K + starts[l] + row * width + column) * M + m) * C : 0;
                }
                const float weight = attn[at];
                for (long c = 0; c < C; c++) {
                    const float v1 = corner[0] ? corner[0][c] : 0.0f, v2 = corner[1] ? corner[1][c] : 0.0f;
                    const float v3 = corner[2] ? corner[2][c] : 0.0f, v4 = corner[3] ? corner[3][c] : 0.0f;
                    float bilinear = w1 * v1;
                    bilinear = fmaf(w2, v2, bilinear);
                    bilinear = fmaf(w3, v3, bilinear);
                    bilinear = fmaf(w4, v4, bilinear);
                    sum[c] = fmaf(bilinear, weight, sum[c]);
                }
            }
        }
    }
}
