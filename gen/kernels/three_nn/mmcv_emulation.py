"""mmcv 2.2.0's three_nn_forward_cuda_kernel in T (gen.kernels.shared.mmcv_half), bit for bit.

One thread per unknown point (blockIdx.y the batch).  It reads the point's coordinates and scans
known[b] in index order, computing ``T d = (ux - x) * (ux - x) + (uy - y) * (uy - y) + (uz - z) *
(uz - z)`` in T:

- float: each difference rounded, then nvcc's contraction of the sum of products, as it fuses
  deform_roi_pool's bilinear sum (matched bit for bit against mmcv's captures there): the first
  product rounded, each further one fused: fma(dz, dz, fma(dy, dy, dx * dx));
- at::Half: every operator rounds to half, nothing fused: ((dx*dx + dy*dy) + dz*dz), each step
  rounded.

d is compared, as a double, with the three bests (doubles starting at 1e40): a point takes the
first slot it is strictly below, so equal distances keep index order and a NaN or infinite
distance never enters (gen.kernels.three_nn.reference.nearest: the doc's selection, on these
distances).  The bests are written to dist2 as T (1e40 becomes inf), the indices as int.
"""
from __future__ import annotations

import numpy as np

from gen.kernels.shared.mmcv_half import F32, ScalarT, fma32, round_to_half
from gen.kernels.three_nn import compiled_mmcv
from gen.kernels.three_nn.reference import NEIGHBOURS, chunks, nearest


def _distances(unknown, known, is_half: bool) -> np.ndarray:
    """[B, n, M] distances as the kernel computes them, in a float32 carrier (half values exact)."""
    u = unknown.astype(F32)
    k = known.astype(F32)
    with np.errstate(invalid="ignore", over="ignore"):           # nan and inf are data here
        diffs = [u[:, :, axis, None] - k[:, None, :, axis] for axis in range(3)]
        if is_half:                                              # at::Half: each result rounded
            total = None
            for diff in diffs:
                square = round_to_half(round_to_half(diff) ** 2)
                total = square if total is None else round_to_half(total + square)
            return total
        dx, dy, dz = diffs
        return fma32(dz, dz, fma32(dy, dy, dx * dx))


def three_nn_forward(inputs: dict, params: dict, out_shapes: dict | None = None) -> dict:
    """unknown [B, N, 3], known [B, M, 3] in T -> dist2 [B, N, 3] in T, idx [B, N, 3] int32."""
    unknown, known = inputs["unknown"], inputs["known"]
    T = ScalarT(unknown.dtype)
    fast = compiled_mmcv.forward(unknown, known, T.is_half)
    if fast is not None:
        return {"dist2": T.result(fast[0]), "idx": fast[1]}
    B, N = unknown.shape[:2]
    dist2 = np.empty((B, N, NEIGHBOURS), dtype=F32)
    idx = np.empty((B, N, NEIGHBOURS), dtype=np.int32)
    for rows in chunks(unknown, known):
        best, idx[:, rows] = nearest(_distances(unknown[:, rows], known, T.is_half).astype(np.float64))
        dist2[:, rows] = best
    return {"dist2": T.result(dist2), "idx": idx}
