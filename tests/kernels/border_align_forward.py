"""border_align_forward: the test-side record (see the kernel contract)."""
from __future__ import annotations

import math

import numpy as np

OP = "border_align_forward"

CONFORMANCE = ["mlu-ops/border_align_forward/border_align_forward_0.prototxt"]


def _sample(features, n, channel, H, W, y, x):
    """mmcv's bilinear_interpolate of features[n, :, :, channel] at (y, x), one point, in Python floats."""
    if y < -1.0 or y > H or x < -1.0 or x > W:
        return 0.0                                   # before any arithmetic: nan/inf pixels do not leak
    y, x = max(y, 0.0), max(x, 0.0)
    y_low, x_low = int(math.floor(y)), int(math.floor(x))
    if y_low >= H - 1:
        y_low = y_high = H - 1
        y = float(y_low)
    else:
        y_high = y_low + 1
    if x_low >= W - 1:
        x_low = x_high = W - 1
        x = float(x_low)
    else:
        x_high = x_low + 1
    ly, lx = y - y_low, x - x_low
    hy, hx = 1.0 - ly, 1.0 - lx

    def pixel(row, col):
        return float(features[n, row, col, channel])

    return (hy * hx * pixel(y_low, x_low) + hy * lx * pixel(y_low, x_high)
            + ly * hx * pixel(y_high, x_low) + ly * lx * pixel(y_high, x_high))


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
            x1, y1, x2, y2 = (float(v) for v in boxes[n, k])
            width, height = x2 - x1, y2 - y1
            walks = [(x1, y1, width / pool_size, 0.0), (x1, y1, 0.0, height / pool_size),
                     (x2, y2, -(width / pool_size), 0.0), (x2, y2, 0.0, -(height / pool_size))]
            for e, (start_x, start_y, step_x, step_y) in enumerate(walks):
                for c in range(C):
                    x, y = start_x, start_y
                    best, best_index = _sample(features, n, e * C + c, H, W, y, x), 0
                    for i in range(1, pool_size + 1):
                        x, y = x + step_x, y + step_y
                        value = _sample(features, n, e * C + c, H, W, y, x)
                        if value > best:
                            best, best_index = value, i
                    output[n, k, e, c], argmax_idx[n, k, e, c] = best, best_index
    return {"output": output, "argmax_idx": argmax_idx}
