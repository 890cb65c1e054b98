"""carafe forward and backward (mmcv carafe_naive_{forward,backward}_cuda_kernel, NCHW)."""
from __future__ import annotations

import torch

from gen.kernels.shared.torch_common import (as_4d, check_rank, compute_dtype, int_param, nchw_to_nhwc,
                                                  nhwc_to_nchw, require)


class _CarafeGeometry:
    """Shapes of one carafe call, checked for consistency."""

    def __init__(self, features, masks, kernel_size, group_size, scale_factor):
        check_rank("input", features, 4)
        check_rank("mask", masks, 4)
        require(kernel_size >= 1 and kernel_size % 2 == 1,
                 f"kernel_size must be odd and positive, got {kernel_size}")
        require(group_size >= 1, f"group_size must be >= 1, got {group_size}")
        require(scale_factor >= 1, f"scale_factor must be >= 1, got {scale_factor}")
        self.n, self.channels, self.height, self.width = features.shape
        require(self.channels % group_size == 0,
                 f"channels {self.channels} not divisible by group_size {group_size}")
        self.k, self.groups, self.scale = kernel_size, group_size, scale_factor
        self.radius = (kernel_size - 1) // 2
        self.group_channels = self.channels // group_size
        self.out_height, self.out_width = self.height * scale_factor, self.width * scale_factor
        expected_mask = (self.n, group_size * kernel_size * kernel_size,
                         self.out_height, self.out_width)
        require(tuple(masks.shape) == expected_mask,
                 f"mask (NCHW) {tuple(masks.shape)} does not match {expected_mask}")

    def taps(self):
        """(tap index kh*k+kw, row shift, column shift) of each kernel tap."""
        for kh in range(self.k):
            for kw in range(self.k):
                yield kh * self.k + kw, kh - self.radius, kw - self.radius

    def upsampled_tap(self, grouped, dy, dx):
        """grouped[..., H, W] read at (ho//s + dy, wo//s + dx) for every output pixel.

        Returns the values [..., sH, sW] (clamped reads) and where the read is inside the map.
        """
        device = grouped.device
        rows = torch.arange(self.out_height, device=device) // self.scale + dy
        cols = torch.arange(self.out_width, device=device) // self.scale + dx
        row_ok = (rows >= 0) & (rows < self.height)
        col_ok = (cols >= 0) & (cols < self.width)
        values = grouped[..., rows.clamp(0, self.height - 1)[:, None],
                         cols.clamp(0, self.width - 1)[None, :]]
        return values, row_ok[:, None] & col_ok[None, :]

    def block_sum(self, per_output_pixel):
        """Sum [..., sH, sW] over each s x s block of output pixels sharing ho//s, wo//s."""
        lead = per_output_pixel.shape[:-2]
        blocks = per_output_pixel.reshape(*lead, self.height, self.scale, self.width, self.scale)
        return blocks.sum(dim=(-3, -1))


def _shifted_add_(target, source, dy, dx):
    """target[..., a+dy, b+dx] += source[..., a, b] wherever both are inside the map."""
    height, width = target.shape[-2:]
    a0, a1 = max(0, -dy), min(height, height - dy)
    b0, b1 = max(0, -dx), min(width, width - dx)
    if a0 < a1 and b0 < b1:
        target[..., a0 + dy:a1 + dy, b0 + dx:b1 + dx] += source[..., a0:a1, b0:b1]


def forward(features, masks, kernel_size, group_size, scale_factor):
    """NCHW: features [N,C,H,W], masks [N,G*k*k,sH,sW] -> output [N,C,sH,sW]."""
    geo = _CarafeGeometry(features, masks, kernel_size, group_size, scale_factor)
    out = features.new_zeros(geo.n, geo.groups, geo.group_channels, geo.out_height, geo.out_width)
    if geo.height == 0 or geo.width == 0:
        return out.reshape(geo.n, geo.channels, geo.out_height, geo.out_width)
    grouped = features.reshape(geo.n, geo.groups, geo.group_channels, geo.height, geo.width)
    tap_masks = masks.reshape(geo.n, geo.groups, geo.k * geo.k, geo.out_height, geo.out_width)
    zero = torch.zeros((), dtype=out.dtype, device=out.device)
    for tap, dy, dx in geo.taps():
        values, inside = geo.upsampled_tap(grouped, dy, dx)
        products = values * tap_masks[:, :, tap, None]
        # A tap outside the map is skipped, not multiplied by 0 (the mask may hold inf/nan).
        out += torch.where(inside, products, zero)
    return out.reshape(geo.n, geo.channels, geo.out_height, geo.out_width)


def backward(features, masks, grad_output, kernel_size, group_size, scale_factor):
    """NCHW: returns grad_features [N,C,H,W] and grad_masks [N,G*k*k,sH,sW]."""
    geo = _CarafeGeometry(features, masks, kernel_size, group_size, scale_factor)
    expected_grad = (geo.n, geo.channels, geo.out_height, geo.out_width)
    require(tuple(grad_output.shape) == expected_grad,
             f"grad_output (NCHW) {tuple(grad_output.shape)} does not match {expected_grad}")
    grad_features = features.new_zeros(geo.n, geo.groups, geo.group_channels,
                                       geo.height, geo.width)
    grad_masks = masks.new_zeros(geo.n, geo.groups, geo.k * geo.k,
                                 geo.out_height, geo.out_width)
    if geo.height != 0 and geo.width != 0:
        grouped = features.reshape(geo.n, geo.groups, geo.group_channels, geo.height, geo.width)
        tap_masks = masks.reshape(geo.n, geo.groups, geo.k * geo.k,
                                  geo.out_height, geo.out_width)
        grouped_grad = grad_output.reshape(geo.n, geo.groups, geo.group_channels,
                                           geo.out_height, geo.out_width)
        zero = torch.zeros((), dtype=grad_masks.dtype, device=grad_masks.device)
        for tap, dy, dx in geo.taps():
            values, inside = geo.upsampled_tap(grouped, dy, dx)
            grad_masks[:, :, tap] = torch.where(inside, (values * grouped_grad).sum(dim=2), zero)
            # All s x s output pixels of one block read the same input pixel for this tap:
            # sum the block first, then add it to that pixel (blocks reading outside drop out).
            contributions = geo.block_sum(tap_masks[:, :, tap, None] * grouped_grad)
            _shifted_add_(grad_features, contributions, dy, dx)
    return (grad_features.reshape(geo.n, geo.channels, geo.height, geo.width),
            grad_masks.reshape(geo.n, geo.groups * geo.k * geo.k, geo.out_height, geo.out_width))


def _params(params: dict) -> tuple[int, int, int]:
    return int_param(params, "kernel_size"), int_param(params, "group_size"), int_param(params, "scale_factor")


def carafe_forward(inputs, params, out_shapes, device):
    dtype = compute_dtype(inputs, "input")
    features = nhwc_to_nchw(as_4d(inputs, "input", device, dtype))
    masks = nhwc_to_nchw(as_4d(inputs, "mask", device, dtype))
    return {"output": nchw_to_nhwc(forward(features, masks, *_params(params)))}


def carafe_backward(inputs, params, out_shapes, device):
    dtype = compute_dtype(inputs, "input")
    features = nhwc_to_nchw(as_4d(inputs, "input", device, dtype))
    masks = nhwc_to_nchw(as_4d(inputs, "mask", device, dtype))
    grad_output = nhwc_to_nchw(as_4d(inputs, "grad_output", device, dtype))
    grad_features, grad_masks = backward(features, masks, grad_output, *_params(params))
    return {"grad_input": nchw_to_nhwc(grad_features), "grad_mask": nchw_to_nhwc(grad_masks)}
