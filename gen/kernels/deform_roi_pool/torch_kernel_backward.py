"""deform_roi_pool backward (mmcv deform_roi_pool_backward_cuda_kernel, NCHW input and grad_output).

Every sample of the forward (the same bins and sample points, gen.kernels.deform_roi_pool.torch_kernel)
hands grad_output / count of its bin to its four pixels (index_add_ in place of atomicAdd), and
adds to its bin's grad_offset gamma * roi size * sum over channels of grad_output / count times
the sample's derivative along x and y, taken at the unclamped sample point as mmcv does:
d/dx = (v11 - v01) * (y - y_low) + (v10 - v00) * (y_high - y), d/dy likewise (mlu-ops' grouping
of mmcv's four terms: it is exactly 0 where both corners along y, or x, are one pixel).
"""
from __future__ import annotations

import torch

from gen.kernels.shared.torch_common import (BilinearCorners, as_4d, as_tensor, check_rank, compute_dtype,
                                                  float_param, int_param, nhwc_to_nchw, require)
from gen.kernels.deform_roi_pool.torch_kernel import RoiBins, sample_blocks


def backward(grad_output, features, rois, offset, pooled_height, pooled_width, spatial_scale, sampling_ratio,
             gamma):
    """NCHW grad_output [R,C,PH,PW], NCHW features [B,C,H,W], rois [R,5], offset [R,2,PH,PW] or None
    -> grad_input [B,H,W,C] (NHWC), grad_offset [R,2,PH,PW] (0 without an offset)."""
    check_rank("grad_output", grad_output, 4)
    check_rank("input", features, 4)
    require(rois.dim() == 2 and rois.shape[1] == 5, f"rois must be [R,5], got {tuple(rois.shape)}")
    require(pooled_height >= 1 and pooled_width >= 1,
            f"pooled size must be positive, got {pooled_height}x{pooled_width}")
    batch, channels, height, width = features.shape
    roi_count = rois.shape[0]
    bins_shape = (roi_count, channels, pooled_height, pooled_width)
    require(tuple(grad_output.shape) == bins_shape,
            f"grad_output {tuple(grad_output.shape)} does not match {bins_shape} (NCHW)")
    if offset is not None:
        expected = (roi_count, 2, pooled_height, pooled_width)
        require(tuple(offset.shape) == expected, f"offset {tuple(offset.shape)} does not match {expected}")
    # Accumulators in the outputs' orders: grad_input per pixel [B*H*W, C], grad_offset per bin.
    grad_input = features.new_zeros(batch * height * width, channels)
    bins_count = roi_count * pooled_height * pooled_width
    along_x_sum, along_y_sum = features.new_zeros(bins_count), features.new_zeros(bins_count)
    grad_offset = features.new_zeros(roi_count, 2, pooled_height, pooled_width)
    if roi_count == 0 or height == 0 or width == 0:       # no pixel to receive anything
        return grad_input.reshape(batch, height, width, channels), grad_offset

    bins = RoiBins(rois, offset, pooled_height, pooled_width, spatial_scale, sampling_ratio, gamma)
    require(bool(((bins.batch >= 0) & (bins.batch < batch)).all()),
            f"a roi's batch index lies outside [0, {batch})")
    # grad_output / count per bin, [bins, C] (a bin without samples never uses it).
    count = (bins.grid_h * bins.grid_w).clamp(min=1).to(features.dtype).repeat_interleave(bins.bins_per_roi)
    bin_grad = grad_output.permute(0, 2, 3, 1).reshape(bins_count, channels) / count[:, None]
    for b, r, y, x in sample_blocks(bins, channels, rois.dtype):
        corners = BilinearCorners(y, x, height, width)
        inside = corners.inside[:, None]
        g = torch.where(inside, bin_grad[b], torch.zeros_like(bin_grad[b]))      # [S, C]
        image = bins.batch[r]
        for weight, row, col in ((corners.w1, corners.y_low, corners.x_low),
                                 (corners.w2, corners.y_low, corners.x_high),
                                 (corners.w3, corners.y_high, corners.x_low),
                                 (corners.w4, corners.y_high, corners.x_high)):
            grad_input.index_add_(0, (image * height + row) * width + col, weight[:, None] * g)
        if offset is None:
            continue
        v00 = features[image, :, corners.y_low, corners.x_low]
        v10 = features[image, :, corners.y_low, corners.x_high]
        v01 = features[image, :, corners.y_high, corners.x_low]
        v11 = features[image, :, corners.y_high, corners.x_high]
        y_low, y_high = corners.y_low.to(y.dtype)[:, None], corners.y_high.to(y.dtype)[:, None]
        x_low, x_high = corners.x_low.to(x.dtype)[:, None], corners.x_high.to(x.dtype)[:, None]
        along_x = (v11 - v01) * (y[:, None] - y_low) + (v10 - v00) * (y_high - y[:, None])
        along_y = (v11 - v10) * (x[:, None] - x_low) + (v01 - v00) * (x_high - x[:, None])
        along_x_sum.index_add_(0, b, (g * along_x).sum(dim=1))
        along_y_sum.index_add_(0, b, (g * along_y).sum(dim=1))
    if offset is not None:
        roi_width = (rois[:, 3] * spatial_scale - 0.5) - (rois[:, 1] * spatial_scale - 0.5)
        roi_height = (rois[:, 4] * spatial_scale - 0.5) - (rois[:, 2] * spatial_scale - 0.5)
        per_bin = (roi_count, pooled_height, pooled_width)
        grad_offset[:, 0] = gamma * roi_width[:, None, None] * along_x_sum.reshape(per_bin)
        grad_offset[:, 1] = gamma * roi_height[:, None, None] * along_y_sum.reshape(per_bin)
    return grad_input.reshape(batch, height, width, channels), grad_offset


def deform_roi_pool_backward(inputs, params, out_shapes, device):
    dtype = compute_dtype(inputs, "input")
    grad_input, grad_offset = backward(
        nhwc_to_nchw(as_4d(inputs, "grad_output", device, dtype)), nhwc_to_nchw(as_4d(inputs, "input", device, dtype)),
        as_tensor(inputs, "rois", device, dtype), as_tensor(inputs, "offset", device, dtype, optional=True),
        int_param(params, "pooled_height"), int_param(params, "pooled_width"), float_param(params, "spatial_scale"),
        int_param(params, "sampling_ratio"), float_param(params, "gamma"))
    return {"grad_input": grad_input, "grad_offset": grad_offset}
