"""border_align_backward's record: the slow oracle of mmcv's kernel, one gradient element at a time."""
from __future__ import annotations

import numpy as np

from kernels.bilinear import corners
from kernels.border_align import border_start_and_stride

OP = "border_align_backward"
CONFORMANCE = ["mlu-ops/border_align_backward/border_align_backward_1.prototxt"]


def oracle(inputs, params, out_shapes):
    """grad_output[n, k, e, c] flows to the four corners of the point argmax_idx[n, k, e, c] of
    border e of box k, in channel e * C + c of the map (whose H, W only out_shapes knows)."""
    grad_output, boxes, argmax = inputs["grad_output"], inputs["boxes"], inputs["argmax_idx"]
    pool_size = params["pool_size"]
    N, K, _, C = grad_output.shape
    _, H, W, _ = out_shapes["grad_input"]
    grad_input = np.zeros((N, H, W, 4 * C))
    for n in range(N):
        for k in range(K):
            for e in range(4):
                x0, y0, dx, dy = border_start_and_stride(boxes[n, k], e, pool_size)
                for c in range(C):
                    x, y = x0 + dx * float(argmax[n, k, e, c]), y0 + dy * float(argmax[n, k, e, c])
                    g = float(grad_output[n, k, e, c])
                    for weight, row, col in corners(y, x, H, W):
                        grad_input[n, row, col, e * C + c] += g * weight
    return {"grad_input": grad_input}
