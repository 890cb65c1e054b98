"""deform_roi_pool_backward, the test-side record: the oracle is mmcv's
deform_roi_pool_backward_cuda_kernel written out as plain loops, in float64 (one thread's work
per (roi, ph, pw, c), every atomicAdd a plain +=)."""
import numpy as np

from kernels.bilinear import corners
from kernels.deform_roi_pool import roi_bins

OP = "deform_roi_pool_backward"

CONFORMANCE = ["mlu-ops/deform_roi_pool_backward/case0.prototxt"]


def oracle(inputs, params, out_shapes=None):
    grad_output = np.asarray(inputs["grad_output"], dtype=np.float64)
    features = np.asarray(inputs["input"], dtype=np.float64)
    rois = np.asarray(inputs["rois"], dtype=np.float64)
    offset = inputs.get("offset")
    PH, PW = int(params["pooled_height"]), int(params["pooled_width"])
    gamma = float(params["gamma"])
    N, H, W, C = features.shape
    R = rois.shape[0]
    grad_input = np.zeros((N, H, W, C))
    grad_offset = np.zeros((R, 2, PH, PW))
    if H == 0 or W == 0:
        return {"grad_input": grad_input, "grad_offset": grad_offset}
    for r in range(R):
        batch = int(rois[r, 0])
        for b in roi_bins(rois[r], None if offset is None else offset[r], params):
            ph, pw, roi_w, roi_h, count = b.ph, b.pw, b.roi_w, b.roi_h, b.grid_h * b.grid_w
            for c in range(C):
                for _, _, y, x in b.samples():
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

