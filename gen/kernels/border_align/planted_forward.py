"""border_align_forward: an independent copy of the kernel (written from the kernel's formulas, not from the reference),
with knobs that plant one realistic bug each."""
from __future__ import annotations

import numpy as np

from gen.kernels.shared.planted_bilinear import bilinear_corners
from gen.kernels.border_align.planted import pool_1_clamps_corners
from gen.kernels.shared.planted_counts import counted_in_uint16


def border_align_forward(features, boxes, P, *, tie="first", stride_divisor="P", blocks=(0, 1, 2, 3),
                         best_from="start", zero_beyond_last=False, points="repeated_addition", point_block=0):
    """border_align forward: P+1 bilinear samples along each border of each box, the
    first maximum and its index.

    Bugs: tie "last" keeps the last of equal maxima (>= for >); stride_divisor "P+1" splits the
    sides into pool_size + 1 steps; blocks (0, 3, 2, 1) reads the left border's samples from the
    right border's channel block and back; best_from "zero" starts the maximum at 0 instead of
    the first sample (all-negative borders come out 0); zero_beyond_last (gen.kernels.shared.planted_bilinear)
    reads 0 in the band (size-1, size]; point_block b > 0 takes the points in blocks of b, each block's first
    maximum merged into the running one with >= (a tie between two blocks goes to the later block).  Not a bug: points "multiplication" places point i at
    start + i * stride instead of adding the stride i times.
    """
    N, H, W, C4 = features.shape
    K, C = boxes.shape[1], C4 // 4
    output = np.zeros((N, K, 4, C))
    argmax_idx = np.zeros((N, K, 4, C), dtype=np.int32)
    if output.size == 0 or H == 0 or W == 0:
        return output, argmax_idx
    divisor = P if stride_divisor == "P" else P + 1
    # [H, W, 4, C]: border e's channel block, as the (buggy) kernel addresses it.
    per_border = features.astype(np.float64).reshape(N, H, W, 4, C)[:, :, :, list(blocks)]
    for n in range(N):
        x1, y1, x2, y2 = (boxes[n, :, i].astype(np.float64) for i in range(4))
        sx, sy = (x2 - x1) / divisor, (y2 - y1) / divisor
        zero = np.zeros_like(sx)
        start_x = np.stack([x1, x1, x2, x2], axis=1)                            # [K, 4]
        start_y = np.stack([y1, y1, y2, y2], axis=1)
        step_x = np.stack([sx, zero, -sx, zero], axis=1)
        step_y = np.stack([zero, sy, zero, -sy], axis=1)
        border = np.arange(4)[None, :]
        best = np.zeros((K, 4, C)) if best_from == "zero" else None
        x, y, samples = start_x, start_y, []
        for i in range(P + 1):
            if i and points == "repeated_addition":
                x, y = x + step_x, y + step_y
            elif i:
                x, y = start_x + i * step_x, start_y + i * step_y
            rows, cols, weights = bilinear_corners(y, x, H, W, zero_beyond_last=zero_beyond_last)
            with np.errstate(invalid="ignore"):                                 # 0 * inf: nan is data
                value = (per_border[n][rows, cols, border] * weights[..., None]).sum(axis=0)   # [K, 4, C]
            if best is None and not point_block:
                best = value
                continue
            if point_block:
                samples.append(value)
                continue
            better = value >= best if tie == "last" else value > best
            best = np.where(better, value, best)
            argmax_idx[n][better] = i
        if point_block:
            best, argmax_idx[n] = _first_maximum_in_blocks(samples, point_block)
        output[n] = best
    return output, argmax_idx


def _first_maximum_in_blocks(samples: list, block: int):
    """(largest, its index) of ``samples`` [P+1] of [K, 4, C]: each block's first maximum (``>``: a NaN never
    wins, a NaN start stays), merged into the running one with ``>=``."""
    best = at = None
    for start in range(0, len(samples), block):
        largest, first = samples[start], np.full(samples[start].shape, start)
        for i in range(start + 1, min(start + block, len(samples))):
            better = samples[i] > largest
            largest, first = np.where(better, samples[i], largest), np.where(better, i, first)
        if best is None:
            best, at = largest, first
        else:
            taken = largest >= best
            best, at = np.where(taken, largest, best), np.where(taken, first, at)
    return best, at


def border_align_forward_compute(**bug):
    def compute(request):
        i = request.inputs
        output, argmax_idx = border_align_forward(i["input"], i["boxes"], int(request.params["pool_size"]), **bug)
        return {"output": output, "argmax_idx": argmax_idx}
    return compute


CORRECT = {"border_align_forward": border_align_forward_compute()}

PLANTED = {
    "border_align_forward": {
        "ties_keep_last": border_align_forward_compute(tie="last"),
        "stride_over_P_plus_1": border_align_forward_compute(stride_divisor="P+1"),
        "left_right_blocks_swapped": border_align_forward_compute(blocks=(0, 3, 2, 1)),
        "max_starts_at_zero": border_align_forward_compute(best_from="zero"),
        "band_past_last_reads_zero": border_align_forward_compute(zero_beyond_last=True),
        "pool_1_clamps_corners": pool_1_clamps_corners(border_align_forward_compute(),
                                                       lambda request: request.inputs["input"].shape[1:3]),
        # The points in blocks of 4, merged with >=: a tie between blocks goes to the later block.
        "ties_across_point_blocks_4": border_align_forward_compute(point_block=4),
        # K boxes counted in 16 bits: only the first K mod 2^16 boxes are aligned.
        "counts_in_uint16": counted_in_uint16(border_align_forward_compute(), {"boxes": 1},
                                              {"output": 1, "argmax_idx": 1}),
    },
}

# Not a bug: the points placed by multiplication rather than repeated addition (float64 either
# way, so they differ by a few ulps), which every case must pass.
CONTROLS = {
    "border_align_forward": {"points_by_multiplication": border_align_forward_compute(points="multiplication")},
}
