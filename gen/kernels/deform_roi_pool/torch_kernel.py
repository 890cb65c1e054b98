"""deform_roi_pool forward (mmcv deform_roi_pool_forward_cuda_kernel, NCHW input)."""
from __future__ import annotations

import torch

from gen.kernels.shared.torch_common import (BilinearCorners, as_4d, as_tensor, check_rank, compute_dtype,
                                                  float_param, int_param, nhwc_to_nchw, require)

# Upper bound on the elements of one [samples, channels] block, so that rois with many sample
# points do not need one huge temporary.
SAMPLE_BLOCK_ELEMENTS = 1 << 22
# Rois so large that sampling_ratio 0 asks for more points than this are not computed
# (the index tensors alone would not fit in memory).
_MAX_SAMPLE_POINTS = 1 << 26


class RoiBins:
    """Per roi geometry and per bin sampling origin of deform_roi_pool."""

    def __init__(self, rois, offset, pooled_height, pooled_width, spatial_scale,
                 sampling_ratio, gamma):
        self.batch = rois[:, 0].long()  # truncation, as the kernel's int cast
        start_w = rois[:, 1] * spatial_scale - 0.5
        start_h = rois[:, 2] * spatial_scale - 0.5
        roi_width = (rois[:, 3] * spatial_scale - 0.5) - start_w
        roi_height = (rois[:, 4] * spatial_scale - 0.5) - start_h
        self.bin_h = roi_height / pooled_height
        self.bin_w = roi_width / pooled_width
        if sampling_ratio > 0:
            self.grid_h = torch.full_like(self.batch, sampling_ratio)
            self.grid_w = torch.full_like(self.batch, sampling_ratio)
        else:
            self.grid_h = _adaptive_grid(roi_height / pooled_height)
            self.grid_w = _adaptive_grid(roi_width / pooled_width)
        # Sampling origin of every bin [R, PH, PW]; the offset shifts each bin's roi start.
        start_h = start_h[:, None, None].expand(-1, pooled_height, pooled_width)
        start_w = start_w[:, None, None].expand(-1, pooled_height, pooled_width)
        if offset is not None:
            start_w = start_w + gamma * roi_width[:, None, None] * offset[:, 0]
            start_h = start_h + gamma * roi_height[:, None, None] * offset[:, 1]
        ph = torch.arange(pooled_height, device=rois.device, dtype=rois.dtype)[None, :, None]
        pw = torch.arange(pooled_width, device=rois.device, dtype=rois.dtype)[None, None, :]
        self.origin_h = (start_h + ph * self.bin_h[:, None, None]).reshape(-1)
        self.origin_w = (start_w + pw * self.bin_w[:, None, None]).reshape(-1)
        self.bins_per_roi = pooled_height * pooled_width


def _adaptive_grid(bin_size: torch.Tensor) -> torch.Tensor:
    """Sample points per bin along one axis when sampling_ratio <= 0: ceil(bin size)."""
    require(bool(torch.isfinite(bin_size).all()),
             "a roi has a non-finite size: its sampling grid cannot be computed")
    # A negative grid (inverted roi) samples nothing, exactly like a zero grid. The upper
    # clamp only keeps absurd sizes from overflowing; the sample count check rejects them.
    return torch.ceil(bin_size.clamp(0, _MAX_SAMPLE_POINTS)).long()


def sample_points(bins: RoiBins):
    """Flat list of all sample points: the bin and the roi each belongs to and its (iy, ix)."""
    device = bins.batch.device
    roi_count = bins.batch.shape[0]
    bin_roi = torch.arange(roi_count, device=device).repeat_interleave(bins.bins_per_roi)
    total = int((bins.grid_h.double() * bins.grid_w.double()).sum()) * bins.bins_per_roi
    require(total <= _MAX_SAMPLE_POINTS,
             f"the rois need {total} sample points, more than this backend computes"
             f" ({_MAX_SAMPLE_POINTS})")
    samples_per_bin = (bins.grid_h * bins.grid_w)[bin_roi]
    sample_bin = torch.arange(bin_roi.shape[0], device=device).repeat_interleave(samples_per_bin)
    first_sample = torch.cumsum(samples_per_bin, 0) - samples_per_bin
    index_in_bin = torch.arange(sample_bin.shape[0], device=device) - first_sample[sample_bin]
    sample_roi = bin_roi[sample_bin]
    grid_w = bins.grid_w[sample_roi]
    return sample_bin, sample_roi, index_in_bin // grid_w, index_in_bin % grid_w


def sample_blocks(bins: RoiBins, channels: int, dtype):
    """Every sample point, in blocks of about SAMPLE_BLOCK_ELEMENTS [samples, channels] elements:
    (bin, roi, y, x) of each sample of the block."""
    sample_bin, sample_roi, iy, ix = sample_points(bins)
    block = max(1, SAMPLE_BLOCK_ELEMENTS // max(channels, 1))
    for begin in range(0, sample_bin.shape[0], block):
        part = slice(begin, begin + block)
        b, r = sample_bin[part], sample_roi[part]
        y = bins.origin_h[b] + (iy[part].to(dtype) + 0.5) * bins.bin_h[r] / bins.grid_h[r]
        x = bins.origin_w[b] + (ix[part].to(dtype) + 0.5) * bins.bin_w[r] / bins.grid_w[r]
        yield b, r, y, x


def forward(features, rois, offset, pooled_height, pooled_width,
                            spatial_scale, sampling_ratio, gamma):
    """NCHW features [B,C,H,W], rois [R,5], offset [R,2,PH,PW] or None -> [R,PH,PW,C]."""
    check_rank("input", features, 4)
    require(rois.dim() == 2 and rois.shape[1] == 5,
             f"rois must be [R,5], got {tuple(rois.shape)}")
    require(pooled_height >= 1 and pooled_width >= 1,
             f"pooled size must be positive, got {pooled_height}x{pooled_width}")
    roi_count = rois.shape[0]
    if offset is not None:
        expected = (roi_count, 2, pooled_height, pooled_width)
        require(tuple(offset.shape) == expected,
                 f"offset {tuple(offset.shape)} does not match {expected}")
    batch, channels, height, width = features.shape
    # Per-bin accumulator, already in the output's [R, PH, PW, C] order.
    pooled = features.new_zeros(roi_count * pooled_height * pooled_width, channels)
    if roi_count == 0 or height == 0 or width == 0:  # no pixel to sample: all samples are 0
        return pooled.reshape(roi_count, pooled_height, pooled_width, channels)

    bins = RoiBins(rois, offset, pooled_height, pooled_width, spatial_scale,
                    sampling_ratio, gamma)
    require(bool(((bins.batch >= 0) & (bins.batch < batch)).all()),
             f"a roi's batch index lies outside [0, {batch})")
    for b, r, y, x in sample_blocks(bins, channels, rois.dtype):
        corners = BilinearCorners(y, x, height, width)
        image = bins.batch[r]
        values = (corners.w1[:, None] * features[image, :, corners.y_low, corners.x_low]
                  + corners.w2[:, None] * features[image, :, corners.y_low, corners.x_high]
                  + corners.w3[:, None] * features[image, :, corners.y_high, corners.x_low]
                  + corners.w4[:, None] * features[image, :, corners.y_high, corners.x_high])
        values = torch.where(corners.inside[:, None], values, torch.zeros_like(values))
        pooled.index_add_(0, b, values)
    samples_per_roi = (bins.grid_h * bins.grid_w).clamp(min=1).to(pooled.dtype)
    pooled /= samples_per_roi.repeat_interleave(bins.bins_per_roi)[:, None]
    return pooled.reshape(roi_count, pooled_height, pooled_width, channels)


def deform_roi_pool_forward(inputs, params, out_shapes, device):
    dtype = compute_dtype(inputs, "input")
    output = forward(nhwc_to_nchw(as_4d(inputs, "input", device, dtype)), as_tensor(inputs, "rois", device, dtype),
                     as_tensor(inputs, "offset", device, dtype, optional=True),
                     int_param(params, "pooled_height"), int_param(params, "pooled_width"),
                     float_param(params, "spatial_scale"), int_param(params, "sampling_ratio"),
                     float_param(params, "gamma"))
    return {"output": output}
