/* mmcv 2.2.0's three_nn_forward_cuda_kernel in T (float or at::Half) as a compiled loop, bit for bit what
 * gen/kernels/three_nn/mmcv_emulation.py computes with numpy (the baseline `opcase gen` computes beside
 * the golden for dynamic thresholds).
 *
 * Values are float32 here whatever T is (a half value is exact in float32).  The distance of a pair:
 * - float: dx, dy, dz each rounded to float, then fmaf(dz, dz, fmaf(dy, dy, dx * dx)) (nvcc's contraction,
 *   which mmcv_emulation.fma32 computes exactly);
 * - at::Half: every operator rounded to half, nothing fused: ((dx*dx + dy*dy) + dz*dz).
 * Rounding to half is mmcv_half.round_to_half's own arithmetic (../shared/mmcv_half.h, which
 * deform_roi_pool's emulation shares).  The selection is the golden's (three_nn_forward_kernel.c,
 * `nearest`): the distance as a double, the known points in index order, a point taking a slot only when
 * strictly below the one there, slots starting at 1e40, so NaN never enters and the NaN bits a distance
 * has do not matter.  Built with
 * -ffp-contract=off and without fast-math (gen/native.py): nothing fused that is not written fmaf, no
 * flush of subnormals, as numpy's float32 arithmetic.
 */
#include "../shared/mmcv_half.h"

MMCV_INLINE float distance(const float *u, const float *k, int is_half)
{
    const float dx = u[0] - k[0], dy = u[1] - k[1], dz = u[2] - k[2];
    if (!is_half)
        return fmaf(dz, dz, fmaf(dy, dy, dx * dx));
    const float hx = mmcv_round_to_half(dx), hy = mmcv_round_to_half(dy), hz = mmcv_round_to_half(dz);
    float total = mmcv_round_to_half(hx * hx);
    total = mmcv_round_to_half(total + mmcv_round_to_half(hy * hy));
    return mmcv_round_to_half(total + mmcv_round_to_half(hz * hz));
}

/* unknown [B, N, 3], known [B, M, 3] in float32 (T's values) -> dist2 [B, N, 3] float32 (inf where a
 * slot stays empty), idx [B, N, 3] int32 (0 there). */
void three_nn_mmcv(const float *unknown, const float *known, long B, long N, long M, int is_half,
                   float *dist2, int32_t *idx)
{
    const double none = 1e40;
    for (long b = 0; b < B; b++) {
        const float *k = known + b * M * 3;
        for (long n = 0; n < N; n++) {
            const float *u = unknown + (b * N + n) * 3;
            double best[3] = {none, none, none};
            int32_t index[3] = {0, 0, 0};
            for (long m = 0; m < M; m++) {
                const double d = distance(u, k + 3 * m, is_half);
                if (d < best[2]) {
                    if (d < best[0]) {
                        best[2] = best[1]; index[2] = index[1];
                        best[1] = best[0]; index[1] = index[0];
                        best[0] = d; index[0] = (int32_t)m;
                    } else if (d < best[1]) {
                        best[2] = best[1]; index[2] = index[1];
                        best[1] = d; index[1] = (int32_t)m;
                    } else {
                        best[2] = d; index[2] = (int32_t)m;
                    }
                }
            }
            for (int q = 0; q < 3; q++) {
                dist2[(b * N + n) * 3 + q] = best[q] < none ? (float)best[q] : INFINITY;
                idx[(b * N + n) * 3 + q] = best[q] < none ? index[q] : 0;
            }
        }
    }
}
