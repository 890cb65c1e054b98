/* three_nn_forward's golden as a compiled loop, bit for bit what gen/kernels/three_nn/reference.py computes with
 * numpy (float64 throughout).
 *
 * Distance: ((xu - xk)^2 + (yu - yk)^2) + (zu - zk)^2, each subtraction, square and addition rounded on
 * its own, as squared_distances does.  Selection, as mmcv's kernel and `nearest` do: the known points in
 * index order, one taking a slot only when strictly nearer than the point there, the slots starting at
 * "no distance" (a distance must be below 1e40: NaN never enters); slots left empty keep inf and index 0.
 *
 * Blocked: the known points of a batch are laid out once per call as three coordinate arrays, and each
 * unknown point's distances to a block of them are computed in one element-wise loop into a small
 * buffer that stays in L1; the scan then only branches where a distance beats the third slot.  Built
 * with -ffp-contract=off and without fast-math (gen/native.py): nothing fused, nothing reassociated.
 */
#include <stdint.h>
#include <stdlib.h>

/* Vectorising an element-wise loop (each lane the operations of one pair, in order) changes no bit, so
 * the vectoriser is switched on here.  With GCC 12 it takes the layout loop but not yet the distance
 * loop (-fopt-info-vec: "no vectype"), which runs scalar. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("tree-vectorize")
#endif

#define BLOCK 512

/* unknown [B, N, 3], known [B, M, 3] float64 -> dist2 [B, N, 3] float64, idx [B, N, 3] int32.
 * Returns 0, or 1 where memory for the coordinate arrays was not there. */
int three_nn_forward(const double *unknown, const double *known, long B, long N, long M,
                     double *dist2, int32_t *idx)
{
    double *coordinates = malloc(sizeof(double) * (3 * (size_t)(M > 0 ? M : 1) + BLOCK));
    if (coordinates == NULL)
        return 1;
    double *kx = coordinates, *ky = kx + M, *kz = ky + M, *d = kz + M;
    const double none = 1e40;
    for (long b = 0; b < B; b++) {
        const double *k = known + b * M * 3;
        for (long m = 0; m < M; m++) {
            kx[m] = k[3 * m];
            ky[m] = k[3 * m + 1];
            kz[m] = k[3 * m + 2];
        }
        for (long n = 0; n < N; n++) {
            const double *u = unknown + (b * N + n) * 3;
            const double ux = u[0], uy = u[1], uz = u[2];
            double best1 = none, best2 = none, best3 = none;
            int32_t index1 = 0, index2 = 0, index3 = 0;
            for (long start = 0; start < M; start += BLOCK) {
                const long count = M - start < BLOCK ? M - start : BLOCK;
                const double *bx = kx + start, *by = ky + start, *bz = kz + start;
                for (long j = 0; j < count; j++) {
                    const double dx = ux - bx[j], dy = uy - by[j], dz = uz - bz[j];
                    d[j] = (dx * dx + dy * dy) + dz * dz;
                }
                for (long j = 0; j < count; j++) {
                    const double value = d[j];
                    if (!(value < best3))
                        continue;
                    const int32_t m = (int32_t)(start + j);
                    if (value < best1) {
                        best3 = best2; index3 = index2;
                        best2 = best1; index2 = index1;
                        best1 = value; index1 = m;
                    } else if (value < best2) {
                        best3 = best2; index3 = index2;
                        best2 = value; index2 = m;
                    } else {
                        best3 = value; index3 = m;
                    }
                }
            }
            double *out = dist2 + (b * N + n) * 3;
            int32_t *out_index = idx + (b * N + n) * 3;
            out[0] = best1 < none ? best1 : 1.0 / 0.0;
            out[1] = best2 < none ? best2 : 1.0 / 0.0;
            out[2] = best3 < none ? best3 : 1.0 / 0.0;
            out_index[0] = best1 < none ? index1 : 0;
            out_index[1] = best2 < none ? index2 : 0;
            out_index[2] = best3 < none ? index3 : 0;
        }
    }
    free(coordinates);
    return 0;
}
