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
 * has do not matter.
 *
 * The known points are scanned BLOCK at a time: their distances to the point are computed together (from
 * the known points laid out as three coordinate rows, which GCC vectorizes), and only a block holding a
 * distance below the third best goes through the selection, point by point in index order, as before.
 * The distances are the same operations either way; on x86-64 CPUs with AVX2 and FMA the loop is built
 * for them (fmaf is then one instruction, and correctly rounded like the library's), elsewhere for the
 * baseline; three_nn_mmcv_generic_only = 1 runs the baseline build on any CPU, for the tests.  Built with
 * -ffp-contract=off and without fast-math (gen/native.py): nothing fused that is not written fmaf, no
 * flush of subnormals, as numpy's float32 arithmetic.
 */
#include <stdlib.h>

#include "../shared/mmcv_half.h"

#define BLOCK 16                   /* known points per vectorized step (GCC's -O2 vectorizes loops without remainder) */

MMCV_INLINE float distance(float ux, float uy, float uz, float x, float y, float z, int is_half)
{
    const float dx = ux - x, dy = uy - y, dz = uz - z;
    if (!is_half)
        return fmaf(dz, dz, fmaf(dy, dy, dx * dx));
    const float hx = mmcv_round_to_half(dx), hy = mmcv_round_to_half(dy), hz = mmcv_round_to_half(dz);
    float total = mmcv_round_to_half(hx * hx);
    total = mmcv_round_to_half(total + mmcv_round_to_half(hy * hy));
    return mmcv_round_to_half(total + mmcv_round_to_half(hz * hz));
}

/* The three bests of one unknown point so far: distances as doubles (1e40 while a slot is empty). */
typedef struct {
    double best[3];
    int32_t index[3];
} nearest3;

/* Known point m at distance d offered to the bests: it takes the first slot it is strictly below. */
MMCV_INLINE void offer(nearest3 *n, double d, int32_t m)
{
    if (d < n->best[2]) {
        if (d < n->best[0]) {
            n->best[2] = n->best[1]; n->index[2] = n->index[1];
            n->best[1] = n->best[0]; n->index[1] = n->index[0];
            n->best[0] = d; n->index[0] = m;
        } else if (d < n->best[1]) {
            n->best[2] = n->best[1]; n->index[2] = n->index[1];
            n->best[1] = d; n->index[1] = m;
        } else {
            n->best[2] = d; n->index[2] = m;
        }
    }
}

/* The scan of one batch: unknown [N, 3], known as rows kx, ky, kz [M] (float32, T's values). */
#define SCAN_BODY                                                                                          \
    const double none = 1e40;                                                                              \
    for (long n = 0; n < N; n++) {                                                                         \
        const float ux = unknown[3 * n], uy = unknown[3 * n + 1], uz = unknown[3 * n + 2];                 \
        nearest3 bests = {{none, none, none}, {0, 0, 0}};                                                  \
        long m = 0;                                                                                        \
        for (; m + BLOCK <= M; m += BLOCK) {                                                               \
            float d[BLOCK];                                                                                \
            /* the third best as a float: exact (every best is a float's value), 1e40 becomes inf, and   \
             * d < it as floats exactly when d < it as doubles */                                          \
            const float third = (float)bests.best[2];                                                      \
            if (is_half)                                                                                   \
                for (int l = 0; l < BLOCK; l++)                                                            \
                    d[l] = distance(ux, uy, uz, kx[m + l], ky[m + l], kz[m + l], 1);                       \
            else                                                                                           \
                for (int l = 0; l < BLOCK; l++)                                                            \
                    d[l] = distance(ux, uy, uz, kx[m + l], ky[m + l], kz[m + l], 0);                       \
            int below = 0;                                                                                 \
            for (int l = 0; l < BLOCK; l++)                                                                \
                below |= d[l] < third;                                                                     \
            if (below)                                                                                     \
                for (int l = 0; l < BLOCK; l++)                                                            \
                    offer(&bests, d[l], (int32_t)(m + l));                                                 \
        }                                                                                                  \
        for (; m < M; m++)                                                                                 \
            offer(&bests, distance(ux, uy, uz, kx[m], ky[m], kz[m], is_half), (int32_t)m);                 \
        for (int q = 0; q < 3; q++) {                                                                      \
            dist2[3 * n + q] = bests.best[q] < none ? (float)bests.best[q] : INFINITY;                     \
            idx[3 * n + q] = bests.best[q] < none ? bests.index[q] : 0;                                    \
        }                                                                                                  \
    }

typedef void scan_fn(const float *unknown, const float *kx, const float *ky, const float *kz, long N, long M,
                     int is_half, float *dist2, int32_t *idx);

static void scan_generic(const float *unknown, const float *kx, const float *ky, const float *kz, long N, long M,
                         int is_half, float *dist2, int32_t *idx)
{
    SCAN_BODY
}

MMCV_V3 static void scan_v3(const float *unknown, const float *kx, const float *ky, const float *kz, long N, long M,
                            int is_half, float *dist2, int32_t *idx)
{
    SCAN_BODY
}

/* Set to 1 (from Python, by ctypes) to run the baseline x86-64 build on any CPU: the tests check its bits too. */
int three_nn_mmcv_generic_only = 0;

/* unknown [B, N, 3], known [B, M, 3] in float32 (T's values) -> dist2 [B, N, 3] float32 (inf where a
 * slot stays empty), idx [B, N, 3] int32 (0 there).  Returns 0, or -1 when scratch memory could not be had
 * (nothing written then). */
int three_nn_mmcv(const float *unknown, const float *known, long B, long N, long M, int is_half,
                  float *dist2, int32_t *idx)
{
    float *rows = malloc((size_t)(3 * M + 1) * sizeof(float));
    if (rows == NULL)
        return -1;
    float *kx = rows, *ky = rows + M, *kz = rows + 2 * M;
    scan_fn *const scan = mmcv_v3(three_nn_mmcv_generic_only) ? scan_v3 : scan_generic;
    for (long b = 0; b < B; b++) {
        const float *k = known + b * M * 3;
        for (long m = 0; m < M; m++) {
            kx[m] = k[3 * m];
            ky[m] = k[3 * m + 1];
            kz[m] = k[3 * m + 2];
        }
        const float *u = unknown + b * N * 3;
        scan(u, kx, ky, kz, N, M, is_half, dist2 + b * N * 3, idx + b * N * 3);
    }
    free(rows);
    return 0;
}
