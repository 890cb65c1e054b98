"""border_align_forward: the test-side record (see the kernel contract)."""
from __future__ import annotations

import numpy as np

from kernels.bilinear import sample
from kernels.border_align import border_start_and_stride

OP = "border_align_forward"

CONFORMANCE = ["mlu-ops/border_align_forward/border_align_forward_0.prototxt"]


def oracle(inputs, params, out_shapes=None):
    """OPS.md / mmcv border_align forward, one output element at a time: border e of box (x1, y1,
    x2, y2) starts at (x1, y1) (top e = 0, left e = 1) or (x2, y2) (bottom e = 2, right e = 3) and
    steps pool_size times by (w/P, 0), (0, h/P), (-w/P, 0), (0, -h/P); the first of the largest
    samples of channel e*C + c wins."""
    features, boxes = inputs["input"], inputs["boxes"]
    pool_size = int(params["pool_size"])
    N, H, W, C4 = features.shape
    K, C = boxes.shape[1], C4 // 4
    output = np.zeros((N, K, 4, C))
    argmax_idx = np.zeros((N, K, 4, C), dtype=np.int32)
    for n in range(N):
        for k in range(K):
            for e in range(4):
                start_x, start_y, step_x, step_y = border_start_and_stride(boxes[n, k], e, pool_size)
                for c in range(C):
                    def pixel(row, col):
                        return float(features[n, row, col, e * C + c])
                    x, y = start_x, start_y
                    best, best_index = sample(pixel, y, x, H, W), 0
                    for i in range(1, pool_size + 1):
                        x, y = x + step_x, y + step_y
                        value = sample(pixel, y, x, H, W)
                        if value > best:
                            best, best_index = value, i
                    output[n, k, e, c], argmax_idx[n, k, e, c] = best, best_index
    return {"output": output, "argmax_idx": argmax_idx}
