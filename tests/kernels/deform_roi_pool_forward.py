"""deform_roi_pool_forward's record: the slow oracle of mmcv's kernel (OPS.md, deform_roi_pool), one
output element at a time."""
from __future__ import annotations

import math

import numpy as np

from kernels.bilinear import sample

OP = "deform_roi_pool_forward"
CONFORMANCE = ["mlu-ops/deform_roi_pool_forward/case0.prototxt"]


def oracle(inputs, params, out_shapes=None):
    """Bin (ph, pw) of roi r: the mean of a grid of bilinear samples over the bin, the bin moved by
    gamma * roi size * offset[r, :, ph, pw] where there is an offset."""
    features, rois, offset = inputs["input"], inputs["rois"], inputs.get("offset")
    PH, PW = params["pooled_height"], params["pooled_width"]
    scale, ratio, gamma = params["spatial_scale"], params["sampling_ratio"], params["gamma"]
    _, H, W, C = features.shape
    out = np.zeros((len(rois), PH, PW, C))
    if H == 0 or W == 0:
        return {"output": out}
    for r in range(len(rois)):
        batch, x1, y1, x2, y2 = (float(v) for v in rois[r])
        start_w, start_h = x1 * scale - 0.5, y1 * scale - 0.5
        roi_w, roi_h = (x2 * scale - 0.5) - start_w, (y2 * scale - 0.5) - start_h
        bin_h, bin_w = roi_h / PH, roi_w / PW
        grid_h = ratio if ratio > 0 else math.ceil(roi_h / PH)
        grid_w = ratio if ratio > 0 else math.ceil(roi_w / PW)
        for ph in range(PH):
            for pw in range(PW):
                sh, sw = start_h, start_w
                if offset is not None:
                    sw += gamma * roi_w * float(offset[r, 0, ph, pw])
                    sh += gamma * roi_h * float(offset[r, 1, ph, pw])
                for c in range(C):
                    total = 0.0
                    for iy in range(grid_h):
                        y = sh + ph * bin_h + (iy + 0.5) * bin_h / grid_h
                        for ix in range(grid_w):
                            x = sw + pw * bin_w + (ix + 0.5) * bin_w / grid_w
                            total += sample(lambda row, col: float(features[int(batch), row, col, c]), y, x, H, W)
                    out[r, ph, pw, c] = total / max(grid_h * grid_w, 1)
    return {"output": out}
