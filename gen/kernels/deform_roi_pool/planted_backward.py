"""deform_roi_pool_backward: an independent copy of the kernel, one bin at a time (written from
mmcv's CUDA kernel, not from the reference), with knobs that plant one realistic bug each."""
from __future__ import annotations

import numpy as np

from gen.kernels.shared.planted_bilinear import bilinear_corners
from gen.kernels.deform_roi_pool.planted import bin_samples, one_sample_skips_offset
from gen.kernels.shared.planted_counts import counted_in_uint16


def deform_roi_pool_backward(grad_output, features, rois, offset, PH, PW, scale, ratio, gamma, *,
                             divide_by_count=True, offset_factor="gamma_roi", offset_xy=(0, 1),
                             unclamped_derivative=True):
    """mmcv's deform_roi_pool_backward, one bin at a time, sums in float64.

    Bugs: divide_by_count False hands each sample the bin's whole gradient; offset_factor
    "none" leaves out gamma * roi size from grad_offset; offset_xy (1, 0) writes the derivative
    along x to channel 1 and along y to channel 0; unclamped_derivative False takes the
    derivative at the clamped point (y = max(y, 0)) where mmcv takes the sample as computed.
    """
    N, H, W, C = features.shape
    R = rois.shape[0]
    grad_input = np.zeros((N, H, W, C))
    grad_offset = np.zeros((R, 2, PH, PW))
    if grad_output.size == 0 or H == 0 or W == 0:
        return grad_input, grad_offset
    features, grad_output = features.astype(np.float64), grad_output.astype(np.float64)
    for r, batch, ph, pw, y, x, roi_w, roi_h in bin_samples(rois, offset, PH, PW, scale, ratio, gamma):
        if y.size == 0:
            continue
        image, grad_image = features[batch], grad_input[batch]
        y, x = y.reshape(-1), x.reshape(-1)
        rows, cols, weights = bilinear_corners(y, x, H, W)          # [4, S]; weight 0 outside
        g = grad_output[r, ph, pw] / (y.size if divide_by_count else 1)
        np.add.at(grad_image, (rows.reshape(-1), cols.reshape(-1)), weights.reshape(-1, 1) * g)
        if offset is None:
            continue
        inside = (y >= -1) & (y <= H) & (x >= -1) & (x <= W)
        v00, v10, v01, v11 = image[rows, cols]                       # [S, C] each
        if not unclamped_derivative:
            y, x = np.maximum(y, 0.0), np.maximum(x, 0.0)
        dx = (v11 - v01) * (y - rows[0])[:, None] + (v10 - v00) * (rows[2] - y)[:, None]
        dy = (v11 - v10) * (x - cols[0])[:, None] + (v01 - v00) * (cols[1] - x)[:, None]
        factor_w, factor_h = (gamma * roi_w, gamma * roi_h) if offset_factor == "gamma_roi" else (1.0, 1.0)
        grad_offset[r, offset_xy[0], ph, pw] = factor_w * float((dx[inside] @ g).sum())
        grad_offset[r, offset_xy[1], ph, pw] = factor_h * float((dy[inside] @ g).sum())
    return grad_input, grad_offset


def deform_roi_pool_backward_compute(**bug):
    def compute(request):
        p, i = request.params, request.inputs
        grad_input, grad_offset = deform_roi_pool_backward(
            i["grad_output"], i["input"], i["rois"], i.get("offset"), int(p["pooled_height"]),
            int(p["pooled_width"]), float(p["spatial_scale"]), int(p["sampling_ratio"]), float(p["gamma"]), **bug)
        return {"grad_input": grad_input, "grad_offset": grad_offset}
    return compute


CORRECT = {"deform_roi_pool_backward": deform_roi_pool_backward_compute()}

PLANTED = {
    "deform_roi_pool_backward": {
        "grad_not_divided_by_count": deform_roi_pool_backward_compute(divide_by_count=False),
        "grad_offset_without_gamma_roi_size": deform_roi_pool_backward_compute(offset_factor="none"),
        "grad_offset_xy_swapped": deform_roi_pool_backward_compute(offset_xy=(1, 0)),
        "grad_offset_at_clamped_point": deform_roi_pool_backward_compute(unclamped_derivative=False),
        # Its grad_offset comes out 0 as well: the fast path has no offset to differentiate.
        "one_sample_skips_offset": one_sample_skips_offset(deform_roi_pool_backward_compute()),
        # R rois counted in 16 bits: only the first R mod 2^16 rois scatter their gradient.
        "counts_in_uint16": counted_in_uint16(deform_roi_pool_backward_compute(),
                                              {"grad_output": 0, "rois": 0, "offset": 0}, {"grad_offset": 0}),
    },
}
