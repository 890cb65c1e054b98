"""psamask_backward's record: the slow oracle, forward's moves read the other way (doc 001, 3.1)."""
from __future__ import annotations

import numpy as np

from kernels.psamask import moves

OP = "psamask_backward"
CONFORMANCE = ["mlu-ops/psamask_backward/case_0.prototxt"]


def oracle(inputs, params, out_shapes=None):
    dy = inputs["dy"]
    N, H, W, _ = dy.shape
    dx = np.zeros((N, H, W, params["h_mask"] * params["w_mask"]))
    for n, h, w, entry, row, col in moves(N, H, W, params["h_mask"], params["w_mask"]):
        where = (n, h, w, row * W + col) if params["psa_type"] == 0 else (n, row, col, h * W + w)
        dx[n, h, w, entry] = float(dy[where])
    return {"dx": dx}
