"""border_align backward (mmcv border_align_backward_cuda_kernel, NCHW)."""
from __future__ import annotations

import torch

from gen.kernels.shared.torch_common import (BilinearCorners, as_4d, as_tensor, check_rank, compute_dtype,
                                                  int_param, nchw_to_nhwc, require)


def border_start_and_stride(boxes, pool_size):
    """Start point and per-step stride of each border as [N, K, 4] tensors, borders in the
    order top, left, bottom, right (border e owns channels e*C .. e*C+C-1 of grad_input)."""
    x1, y1, x2, y2 = boxes.unbind(-1)
    step_w = (x2 - x1) / pool_size
    step_h = (y2 - y1) / pool_size
    zero = torch.zeros_like(step_w)
    # Top and left start at (x1, y1); bottom and right start at (x2, y2) and walk backwards.
    start_x = torch.stack([x1, x1, x2, x2], dim=-1)
    start_y = torch.stack([y1, y1, y2, y2], dim=-1)
    stride_x = torch.stack([step_w, zero, -step_w, zero], dim=-1)
    stride_y = torch.stack([zero, step_h, zero, -step_h], dim=-1)
    return start_x, start_y, stride_x, stride_y


def backward(grad_output, boxes, argmax_idx, pool_size, height, width):
    """mmcv layouts: grad_output [N,C,K,4], boxes [N,K,4], argmax_idx [N,C,K,4]
    -> grad_input [N,4C,H,W]."""
    check_rank("grad_output", grad_output, 4)
    n, channels, box_count, borders = grad_output.shape
    require(borders == 4, f"grad_output's border axis has {borders} entries, not 4")
    require(tuple(boxes.shape) == (n, box_count, 4),
             f"boxes {tuple(boxes.shape)} does not match {(n, box_count, 4)}")
    require(argmax_idx.shape == grad_output.shape,
             f"argmax_idx {tuple(argmax_idx.shape)} does not match grad_output")
    require(pool_size != 0, "pool_size must not be 0")
    grad_input = grad_output.new_zeros(n * 4 * channels * height * width)
    if grad_input.numel() == 0 or grad_output.numel() == 0:
        return grad_input.reshape(n, 4 * channels, height, width)

    start_x, start_y, stride_x, stride_y = border_start_and_stride(boxes, pool_size)
    steps = argmax_idx.to(grad_output.dtype)
    # The maximum sits at start + stride * argmax (one multiplication, as the kernel does).
    x = start_x[:, None] + stride_x[:, None] * steps
    y = start_y[:, None] + stride_y[:, None] * steps
    corners = BilinearCorners(y, x, height, width)

    device = grad_output.device
    batch_idx = torch.arange(n, device=device)[:, None, None, None]
    channel_idx = torch.arange(channels, device=device)[None, :, None, None]
    border_idx = torch.arange(4, device=device)[None, None, None, :]
    plane = (batch_idx * 4 + border_idx) * channels + channel_idx  # NCHW plane of (n, e*C+c)
    inside = corners.inside
    for weight, row, col in ((corners.w1, corners.y_low, corners.x_low),
                             (corners.w2, corners.y_low, corners.x_high),
                             (corners.w3, corners.y_high, corners.x_low),
                             (corners.w4, corners.y_high, corners.x_high)):
        flat = (plane * height + row) * width + col
        grad_input.index_add_(0, flat[inside], (grad_output * weight)[inside])
    return grad_input.reshape(n, 4 * channels, height, width)


def border_align_backward(inputs, params, out_shapes, device):
    dtype = compute_dtype(inputs, "grad_output")
    # NHWC [N,K,4,C] -> mmcv's [N,C,K,4]
    grad_output = as_4d(inputs, "grad_output", device, dtype).permute(0, 3, 1, 2)
    argmax_idx = as_4d(inputs, "argmax_idx", device).permute(0, 3, 1, 2)
    require("grad_input" in out_shapes, "output 'grad_input' is not requested")
    out_shape = tuple(out_shapes["grad_input"])
    require(len(out_shape) == 4, f"grad_input must be 4-D, got {out_shape}")
    grad_input = backward(grad_output, as_tensor(inputs, "boxes", device, dtype), argmax_idx,
                          int_param(params, "pool_size"), out_shape[1], out_shape[2])
    return {"grad_input": nchw_to_nhwc(grad_input)}
