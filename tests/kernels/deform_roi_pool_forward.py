"""deform_roi_pool_forward's record: the slow oracle of mmcv's kernel (OPS.md, deform_roi_pool), one
output element at a time."""
from __future__ import annotations

import numpy as np

from kernels.bilinear import sample
from kernels.deform_roi_pool import roi_bins

OP = "deform_roi_pool_forward"
CONFORMANCE = ["mlu-ops/deform_roi_pool_forward/case0.prototxt"]
# The smallest network case whose mmcv baseline is sampled (998 rois; tests/test_thresholds_policy.py).
SAMPLED_NETWORK_CASE = "fpn_p2-float32"


def oracle(inputs, params, out_shapes=None):
    """Bin (ph, pw) of roi r: the mean of a grid of bilinear samples over the bin, the bin moved by
    gamma * roi size * offset[r, :, ph, pw] where there is an offset."""
    features, rois, offset = inputs["input"], inputs["rois"], inputs.get("offset")
    PH, PW = params["pooled_height"], params["pooled_width"]
    _, H, W, C = features.shape
    out = np.zeros((len(rois), PH, PW, C))
    if H == 0 or W == 0:
        return {"output": out}
    for r in range(len(rois)):
        batch = int(float(rois[r][0]))
        for b in roi_bins(rois[r], None if offset is None else offset[r], params):
            for c in range(C):
                total = 0.0
                for _, _, y, x in b.samples():
                    total += sample(lambda row, col: float(features[batch, row, col, c]), y, x, H, W)
                out[r, b.ph, b.pw, c] = total / max(b.grid_h * b.grid_w, 1)
    return {"output": out}
