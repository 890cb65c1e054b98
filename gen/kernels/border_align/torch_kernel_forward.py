"""border_align forward (mmcv border_align_forward_cuda_kernel, NCHW).

Every (n, c, k, border) of mmcv's output [N, C, K, 4] at once: the border's start point and
stride, then pool_size + 1 samples of its channel plane, advancing by repeated addition, each
compared with the best so far (strictly greater wins, so equal samples keep the first index).
"""
from __future__ import annotations

import torch

from gen.kernels.border_align.torch_kernel import border_start_and_stride
from gen.kernels.shared.torch_common import (BilinearCorners, as_4d, as_tensor, check_rank, compute_dtype,
                                                  int_param, nhwc_to_nchw, require)

BORDERS = 4   # top, left, bottom, right


def _sample(planes, plane, y, x, height, width):
    """bilinear_interpolate of the flattened NCHW planes at (y, x): plane [N, C, 1, 4] indexes
    the plane of each (n, c, border), y and x [N, 1, K, 4] -> [N, C, K, 4]."""
    corners = BilinearCorners(y, x, height, width)
    value = None
    for weight, row, col in ((corners.w1, corners.y_low, corners.x_low),
                             (corners.w2, corners.y_low, corners.x_high),
                             (corners.w3, corners.y_high, corners.x_low),
                             (corners.w4, corners.y_high, corners.x_high)):
        term = weight * planes[(plane * height + row) * width + col]
        value = term if value is None else value + term
    # A point more than a pixel outside reads 0, whatever its parked corners hold (nan, inf).
    return torch.where(corners.inside, value, torch.zeros_like(value))


def forward(features, boxes, pool_size):
    """mmcv layouts: input [N, 4C, H, W], boxes [N, K, 4] -> output, argmax_idx [N, C, K, 4]."""
    check_rank("input", features, 4)
    n, channels4, height, width = features.shape
    require(channels4 % BORDERS == 0, f"input has {channels4} channels, no multiple of 4")
    require(boxes.dim() == 3 and boxes.shape[0] == n and boxes.shape[2] == 4,
            f"boxes {tuple(boxes.shape)} is not [{n}, K, 4]")
    require(pool_size >= 1, f"pool_size must be >= 1, got {pool_size}")
    channels, box_count = channels4 // BORDERS, boxes.shape[1]
    shape = (n, channels, box_count, BORDERS)
    argmax_idx = torch.zeros(shape, dtype=torch.int32, device=features.device)
    if features.numel() == 0 or boxes.numel() == 0:
        return features.new_zeros(shape), argmax_idx

    device = features.device
    batch_idx = torch.arange(n, device=device)[:, None, None, None]
    channel_idx = torch.arange(channels, device=device)[None, :, None, None]
    border_idx = torch.arange(BORDERS, device=device)[None, None, None, :]
    plane = (batch_idx * BORDERS + border_idx) * channels + channel_idx       # plane of (n, e*C + c)
    planes = features.reshape(-1)

    start_x, start_y, step_x, step_y = (t[:, None] for t in border_start_and_stride(boxes, pool_size))
    x, y = start_x, start_y
    best = _sample(planes, plane, y, x, height, width)
    for i in range(1, pool_size + 1):
        x, y = x + step_x, y + step_y
        value = _sample(planes, plane, y, x, height, width)
        better = value > best
        best = torch.where(better, value, best)
        argmax_idx.masked_fill_(better, i)
    return best, argmax_idx


def border_align_forward(inputs, params, out_shapes, device):
    dtype = compute_dtype(inputs, "input")
    features = nhwc_to_nchw(as_4d(inputs, "input", device, dtype))
    output, argmax_idx = forward(features, as_tensor(inputs, "boxes", device, dtype), int_param(params, "pool_size"))
    # mmcv's [N, C, K, 4] -> NHWC [N, K, 4, C]
    return {"output": output.permute(0, 2, 3, 1), "argmax_idx": argmax_idx.permute(0, 2, 3, 1)}
