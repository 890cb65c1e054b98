"""psamask_forward's record: the slow oracle of doc 001's pseudo-code (3.1.1 COLLECT, 3.1.2 DISTRIBUTE)."""
from __future__ import annotations

import numpy as np

from kernels import mmcv_array
from kernels.psamask import moves

OP = "psamask_forward"
CONFORMANCE = ["mlu-ops/psamask_forward/case_0.prototxt"]


def oracle(inputs, params, out_shapes=None):
    """Element by element: COLLECT (psa_type 0) writes the mask entry at the map position it
    looks at, DISTRIBUTE (1) at its own position in the map of the position looked at."""
    x = inputs["x"]
    N, H, W, _ = x.shape
    y = np.zeros((N, H, W, H * W))
    for n, h, w, entry, row, col in moves(N, H, W, params["h_mask"], params["w_mask"]):
        if params["psa_type"] == 0:
            y[n, h, w, row * W + col] = float(x[n, h, w, entry])
        else:
            y[n, row, col, h * W + w] = float(x[n, h, w, entry])
    return {"y": y}


def mmcv_data():
    """mmcv's psamask test data: COLLECT and DISTRIBUTE of one input with a 4 x 4 mask, exactly."""
    x = mmcv_array("for_psa_mask", "psa_input.bin", (4, 16, 8, 8))
    return [(f"psa_type{psa_type}", {"psa_type": psa_type, "h_mask": 4, "w_mask": 4}, {"x": x},
             {"y": mmcv_array("for_psa_mask", f"psa_output_{stem}.bin", (4, 64, 8, 8))}, 0.0)
            for psa_type, stem in ((0, "collect"), (1, "distribute"))]
