"""mmcv 2.2.0's border_align_forward_cuda_kernel in T (gen.kernels.shared.mmcv_half), bit for bit.

One thread per (n, c, k) and border e (threadIdx.y).  Each thread takes its border's start
point, (x1, y1) for top and left, (x2, y2) for bottom and right, and its stride, side /
pool_size (a T divided by an int, the int converted to T), with the sign and axis of the
border.  It samples the start (bilinear_interpolate, which returns 0 for a point more than
one pixel outside the map before any arithmetic), then advances pool_size times by
``x += x_stride; y += y_stride`` (repeated addition in T, each sum rounded to T: no multiply,
so nothing for nvcc to fuse) and keeps a sample only when it is strictly greater than the
best so far: ties keep the first index, and a NaN sample never wins (a NaN start stays).

The bilinear sum is gen.kernels.deform_roi_pool.mmcv_emulation's (the same common_cuda_helper.hpp function):
w1*v1 rounded, then one fused multiply-add per further corner in float, two roundings each
in at::Half.  Nothing is shared between threads, so the result is deterministic.
"""
from __future__ import annotations

import numpy as np

from gen.kernels.deform_roi_pool.mmcv_emulation import as_t, bilinear_corners, rounded
from gen.kernels.shared.mmcv_half import F32, ScalarT

BORDERS = 4   # top, left, bottom, right: threadIdx.y


def border_align_forward(inputs: dict, params: dict, out_shapes: dict | None = None) -> dict:
    """input [N, H, W, 4C], boxes [N, K, 4] -> output [N, K, 4, C] in T, argmax_idx [N, K, 4, C] int32."""
    features, boxes = inputs["input"], inputs["boxes"]
    dtype = features.dtype.type
    T = ScalarT(dtype)
    pool_size = int(params["pool_size"])
    N, H, W, C4 = features.shape
    K, C = boxes.shape[1], C4 // BORDERS
    output = np.zeros((N, K, BORDERS, C), dtype=dtype)
    argmax_idx = np.zeros((N, K, BORDERS, C), dtype=np.int32)
    if output.size == 0 or H == 0 or W == 0:
        return {"output": output, "argmax_idx": argmax_idx}

    x, y, step_x, step_y = _border_starts(boxes.astype(dtype, copy=False), pool_size)
    # Border e of channel c is feature channel e*C + c: [N, H*W, 4, C].
    per_border = features.reshape(N, H * W, BORDERS, C)
    best = _sample(T, per_border, y, x, H, W)
    for i in range(1, pool_size + 1):
        x, y = x + step_x, y + step_y                  # at::Half + at::Half: one rounding to T
        value = _sample(T, per_border, y, x, H, W)
        better = value > best                          # strict: the first maximum stays
        np.copyto(best, value, where=better)
        argmax_idx[better] = i
    return {"output": T.result(best), "argmax_idx": argmax_idx}


def _border_starts(boxes, pool_size: int):
    """x, y, x_stride, y_stride [N, K, 4] in T, borders top, left, bottom, right."""
    dtype = boxes.dtype.type
    x1, y1, x2, y2 = (boxes[..., i] for i in range(4))
    # box_width / pool_size: T / int, the int converted to T.
    stride_w = (x2 - x1) / as_t(pool_size, dtype)
    stride_h = (y2 - y1) / as_t(pool_size, dtype)
    zero = np.zeros_like(stride_w)
    x = np.stack([x1, x1, x2, x2], axis=-1)
    y = np.stack([y1, y1, y2, y2], axis=-1)
    step_x = np.stack([stride_w, zero, -stride_w, zero], axis=-1)
    step_y = np.stack([zero, stride_h, zero, -stride_h], axis=-1)
    return x, y, step_x, step_y


def _sample(T: ScalarT, per_border, y, x, H: int, W: int) -> np.ndarray:
    """bilinear_interpolate of border e's channels at the points (y, x) [N, K, 4]: [N, K, 4, C]
    in ScalarT's float32 carrier."""
    N = per_border.shape[0]
    rows, cols, weights, inside = bilinear_corners(y, x, H, W)                # [4 corners, N, K, 4]
    image = np.arange(N)[:, None, None]
    border = np.arange(BORDERS)[None, None, :]
    weights = weights[..., None].astype(F32)

    def corner_values(corner):
        return per_border[image, rows[corner] * W + cols[corner], border].astype(F32, copy=False)

    with np.errstate(invalid="ignore", over="ignore"):          # nan and inf are data here
        value = rounded(T, weights[0] * corner_values(0))
        for corner in range(1, 4):
            value = T.mac(value, weights[corner], corner_values(corner))
    # A point outside returns 0 before any arithmetic (its weights are 0, but 0 * inf is not).
    return np.where(inside[..., None], value, F32(0))
