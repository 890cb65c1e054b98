"""deform_roi_pool_backward, the test-side record: the oracle is mmcv's
deform_roi_pool_backward_cuda_kernel written out as plain loops, in float64 (one thread's work
per (roi, ph, pw, c), every atomicAdd a plain +=)."""
import math

import numpy as np

from kernels.bilinear import corners

OP = "deform_roi_pool_backward"

CONFORMANCE = ["mlu-ops/deform_roi_pool_backward/case0.prototxt"]


def oracle(inputs, params, out_shapes=None):
    grad_output = np.asarray(inputs["grad_output"], dtype=np.float64)
    features = np.asarray(inputs["input"], dtype=np.float64)
    rois = np.asarray(inputs["rois"], dtype=np.float64)
    offset = inputs.get("offset")
    PH, PW = int(params["pooled_height"]), int(params["pooled_width"])
    scale, ratio, gamma = float(params["spatial_scale"]), int(params["sampling_ratio"]), float(params["gamma"])
    N, H, W, C = features.shape
    R = rois.shape[0]
    grad_input = np.zeros((N, H, W, C))
    grad_offset = np.zeros((R, 2, PH, PW))
    if H == 0 or W == 0:
        return {"grad_input": grad_input, "grad_offset": grad_offset}
    for r in range(R):
        batch = int(rois[r, 0])
        start_w, start_h = rois[r, 1] * scale - 0.5, rois[r, 2] * scale - 0.5
        roi_w = (rois[r, 3] * scale - 0.5) - start_w
        roi_h = (rois[r, 4] * scale - 0.5) - start_h
        bin_h, bin_w = roi_h / PH, roi_w / PW
        grid_h = ratio if ratio > 0 else math.ceil(roi_h / PH)
        grid_w = ratio if ratio > 0 else math.ceil(roi_w / PW)
        count = grid_h * grid_w
        for ph in range(PH):
            for pw in range(PW):
                sh, sw = start_h, start_w
                if offset is not None:
                    sw += gamma * roi_w * float(offset[r, 0, ph, pw])
                    sh += gamma * roi_h * float(offset[r, 1, ph, pw])
                for c in range(C):
                    for iy in range(grid_h):
                        y = sh + ph * bin_h + (iy + 0.5) * bin_h / grid_h
                        for ix in range(grid_w):
                            x = sw + pw * bin_w + (ix + 0.5) * bin_w / grid_w
                            found = corners(y, x, H, W)
                            if not found:
                                continue
                            g = grad_output[r, ph, pw, c] / count
                            (w1, y_low, x_low), (w2, _, x_high), (w3, y_high, _), (w4, _, _) = found
                            grad_input[batch, y_low, x_low, c] += g * w1
                            grad_input[batch, y_low, x_high, c] += g * w2
                            grad_input[batch, y_high, x_low, c] += g * w3
                            grad_input[batch, y_high, x_high, c] += g * w4
                            if offset is None:
                                continue
                            v00 = features[batch, y_low, x_low, c]
                            v10 = features[batch, y_low, x_high, c]
                            v01 = features[batch, y_high, x_low, c]
                            v11 = features[batch, y_high, x_high, c]
                            # mmcv's formula, at the sample's unclamped (y, x).
                            grad_offset[r, 0, ph, pw] += gamma * roi_w * g * (
                                v11 * (y - y_low) + v10 * (y_high - y) + v01 * (y_low - y) + v00 * (y - y_high))
                            grad_offset[r, 1, ph, pw] += gamma * roi_h * g * (
                                v11 * (x - x_low) + v01 * (x_high - x) + v10 * (x_low - x) + v00 * (x - x_high))
    return {"grad_input": grad_input, "grad_offset": grad_offset}
