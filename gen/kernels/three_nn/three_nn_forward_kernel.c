/* three_nn_forward's golden as a compiled loop, bit for bit what gen/kernels/three_nn/reference.py computes with
 * numpy (float64 throughout).
 *
 * Distance: ((xu - xk)^2 + (yu - yk)^2) + (zu - zk)^2, each subtraction, square and addition rounded on
 * its own, as squared_distances does.  Selection, as mmcv's kernel and `nearest` do: the known points in
 * index order, one taking a slot only when strictly nearer than the point there, the slots starting at
 * "no distance" (a distance must be below 1e40: NaN never enters); slots left empty keep inf and index 0.
 *
 * Eight unknown points at once, one per vector lane: each known point's distance to all eight is one
 * vector expression (each lane the operations of one pair, in order), and each lane's slots take it by
 * selects instead of branches.  A lane takes exactly what the scan in index order takes: where d < best3
 * it goes before best1, before best2 or into the third slot, and elsewhere nothing changes; as the slots
 * stay sorted (best1 <= best2 <= best3, never NaN), d < best1 implies the other two tests.  Branches on
 * the distances would mispredict about once per slot taken (3 ln(M / 3) + 3 times per point on random
 * points), which cost more than the arithmetic.  Built with -ffp-contract=off and without fast-math
 * (gen/native.py): nothing fused, nothing reassociated; target_clones picks AVX-512, AVX2 or SSE2 at
 * load time, the same bits at different speeds.
 */
#include <stdint.h>
#include <stdlib.h>

typedef double vec8 __attribute__((vector_size(64)));
typedef long long mask8 __attribute__((vector_size(64)));

#if defined(__x86_64__) && defined(__GNUC__)
#define CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define CLONES
#endif

#define LANES 8
#define INLINE static inline __attribute__((always_inline))

/* Lane by lane: `when` (all ones or zeros) ? a : b, on the bits. */
INLINE mask8 pick(mask8 when, mask8 a, mask8 b) { return (when & a) | (~when & b); }
INLINE vec8 pick_value(mask8 when, vec8 a, vec8 b) { return (vec8)pick(when, (mask8)a, (mask8)b); }

/* unknown [B, N, 3], known [B, M, 3] float64 -> dist2 [B, N, 3] float64, idx [B, N, 3] int32.
 * Returns 0, or 1 where memory for the coordinate arrays was not there. */
CLONES int three_nn_forward(const double *unknown, const double *known, long B, long N, long M,
                            double *dist2, int32_t *idx)
{
    double *coordinates = malloc(sizeof(double) * 3 * (size_t)(M > 0 ? M : 1));
    if (coordinates == NULL)
        return 1;
    double *kx = coordinates, *ky = kx + M, *kz = ky + M;
    const double none = 1e40;
    for (long b = 0; b < B; b++) {
        const double *k = known + b * M * 3;
        for (long m = 0; m < M; m++) {
            kx[m] = k[3 * m];
            ky[m] = k[3 * m + 1];
            kz[m] = k[3 * m + 2];
        }
        for (long n0 = 0; n0 < N; n0 += LANES) {
            const long lanes = N - n0 < LANES ? N - n0 : LANES;
            vec8 ux, uy, uz;
            for (long lane = 0; lane < LANES; lane++) {       /* lanes past N repeat the last point */
                const double *u = unknown + (b * N + n0 + (lane < lanes ? lane : lanes - 1)) * 3;
                ux[lane] = u[0];
                uy[lane] = u[1];
                uz[lane] = u[2];
            }
            vec8 best1 = (vec8){0} + none, best2 = best1, best3 = best1;
            mask8 index1 = (mask8){0}, index2 = index1, index3 = index1;
            for (long m = 0; m < M; m++) {
                const vec8 dx = ux - kx[m], dy = uy - ky[m], dz = uz - kz[m];
                const vec8 d = (dx * dx + dy * dy) + dz * dz;
                const mask8 before1 = d < best1, before2 = d < best2, before3 = d < best3;
                const mask8 here = (mask8){0} + m;
                best3 = pick_value(before2, best2, pick_value(before3, d, best3));
                index3 = pick(before2, index2, pick(before3, here, index3));
                best2 = pick_value(before1, best1, pick_value(before2, d, best2));
                index2 = pick(before1, index1, pick(before2, here, index2));
                best1 = pick_value(before1, d, best1);
                index1 = pick(before1, here, index1);
            }
            for (long lane = 0; lane < lanes; lane++) {
                double *out = dist2 + (b * N + n0 + lane) * 3;
                int32_t *out_index = idx + (b * N + n0 + lane) * 3;
                const double best[3] = {best1[lane], best2[lane], best3[lane]};
                const long index[3] = {index1[lane], index2[lane], index3[lane]};
                for (int q = 0; q < 3; q++) {
                    out[q] = best[q] < none ? best[q] : 1.0 / 0.0;
                    out_index[q] = best[q] < none ? (int32_t)index[q] : 0;
                }
            }
        }
    }
    free(coordinates);
    return 0;
}
