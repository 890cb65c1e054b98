"""border_align_backward: an independent copy of the kernel (written from the kernel's formulas, not from
the reference), with knobs that plant one realistic bug each."""
from __future__ import annotations

import numpy as np

from gen.kernels.shared.planted_bilinear import bilinear_corners
from gen.core.rounding import round_toward_zero
from gen.kernels.shared.planted_fast_path import fast_path, on_inputs
from gen.kernels.shared.planted_counts import counted_in_uint16


def _out_dtype(request, name):
    return np.dtype(request.outputs[name].dtype)


def border_align_backward(grad_output, boxes, argmax_idx, P, H, W, *, stride_divisor="P",
                          channel="border_major", far_start="x2y2", acc=np.float64):
    """border_align_backward: point = start + stride * argmax, its bilinear weights times
    grad_output scatter-added into grad_input[n, y, x, e*C + c].

    Bugs: stride_divisor "P+1" divides the sides by pool_size + 1; channel "channel_major"
    writes channel c*4 + e; far_start "x1y1" starts bottom and right at (x1, y1).  Not a bug:
    acc float32 adds each product, rounded to float32, in float32 in scatter order (as atomics do).
    """
    N, K, _, C = grad_output.shape
    grad_input = np.zeros((N, H, W, 4 * C), dtype=acc)
    if grad_input.size == 0 or grad_output.size == 0:
        return grad_input
    divisor = P if stride_divisor == "P" else P + 1
    e, c = np.arange(4)[:, None], np.arange(C)[None, :]
    chan = np.broadcast_to(e * C + c if channel == "border_major" else c * 4 + e, (K, 4, C))
    for n in range(N):
        x1, y1, x2, y2 = (boxes[n, :, i].astype(np.float64) for i in range(4))
        sx, sy = (x2 - x1) / divisor, (y2 - y1) / divisor
        zero = np.zeros_like(sx)
        far_x, far_y = (x2, y2) if far_start == "x2y2" else (x1, y1)
        start_x = np.stack([x1, x1, far_x, far_x], axis=1)[..., None]        # [K, 4, 1]
        start_y = np.stack([y1, y1, far_y, far_y], axis=1)[..., None]
        step_x = np.stack([sx, zero, -sx, zero], axis=1)[..., None]
        step_y = np.stack([zero, sy, zero, -sy], axis=1)[..., None]
        index = argmax_idx[n].astype(np.float64)                               # [K, 4, C]
        rows, cols, weights = bilinear_corners(start_y + step_y * index, start_x + step_x * index, H, W)
        values = (weights * grad_output[n].astype(np.float64)).astype(acc)
        np.add.at(grad_input[n], (rows, cols, np.broadcast_to(chan, rows.shape)), values)
    return grad_input


def border_align_backward_compute(**bug):
    rounding = bug.pop("rounding", "nearest")

    def compute(request):
        i = request.inputs
        N, H, W, _ = request.outputs["grad_input"].shape
        grad_input = border_align_backward(i["grad_output"], i["boxes"], i["argmax_idx"],
                                           int(request.params["pool_size"]), H, W, **bug)
        if rounding == "toward_zero":
            grad_input = round_toward_zero(grad_input, _out_dtype(request, "grad_input"))
        return {"grad_input": grad_input}
    return compute


CORRECT = {"border_align_backward": border_align_backward_compute()}


def pool_1_clamps_corners(general, map_shape):
    """pool_size 1 samples the box corners only: the fast path reads them as pixels of the map,
    each clamped into it (a box is assumed inside), leaving out the bilinear rule's bounds (points
    past [-1, size] add nothing).  ``map_shape(request)`` is (H, W)."""
    def clamped(request):
        H, W = map_shape(request)
        last = np.array([W - 1, H - 1, W - 1, H - 1], dtype=np.float64).clip(min=0)
        boxes = request.inputs["boxes"]
        return {"boxes": np.clip(boxes.astype(np.float64), 0, last).astype(boxes.dtype)}
    return fast_path(general, on_inputs(general, clamped), lambda request: int(request.params["pool_size"]) == 1)

PLANTED = {
    "border_align_backward": {
        "stride_over_P_plus_1": border_align_backward_compute(stride_divisor="P+1"),
        "channel_c4_plus_e": border_align_backward_compute(channel="channel_major"),
        "round_toward_zero": border_align_backward_compute(rounding="toward_zero"),
        "far_borders_start_x1y1": border_align_backward_compute(far_start="x1y1"),
        "pool_1_clamps_corners": pool_1_clamps_corners(border_align_backward_compute(),
                                                       lambda request: request.outputs["grad_input"].shape[1:3]),
        # K boxes counted in 16 bits: only the first K mod 2^16 boxes scatter their gradient.
        "counts_in_uint16": counted_in_uint16(border_align_backward_compute(),
                                              {"grad_output": 1, "boxes": 1, "argmax_idx": 1}, {}),
    },
}

# Not a bug: float32 atomics, each product added in scatter order (the reference's order is
# another), which every case must pass.
CONTROLS = {
    "border_align_backward": {"float32_scatter_order": border_align_backward_compute(acc=np.float32)},
}
