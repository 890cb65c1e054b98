"""PyTorch implementation of the seven kernels: a backend under test and a GPU-style baseline.

It is written independently of the numpy reference: it follows mmcv's NCHW formulation of
each kernel (the index maps of mmcv's CUDA kernels) and converts the design docs' NHWC
layouts to and from NCHW at the edges. Everything is vectorized torch code; the only Python
loops run over kernel taps or chunks of sample points.

Precision follows a GPU kernel with an accumulator type: float32 and float64 inputs are
computed in their own precision, float16 inputs are computed (and accumulated) in float32
and the results rounded to float16 once at the end.
"""

from __future__ import annotations

import numpy as np
import torch

from harness.backend import InvalidArgument


PSA_COLLECT = 0
PSA_DISTRIBUTE = 1

# Upper bound on the elements of one [samples, channels] block in deform_roi_pool, so that
# rois with many sample points do not need one huge temporary.
_SAMPLE_BLOCK_ELEMENTS = 1 << 22
# Rois so large that sampling_ratio 0 asks for more points than this are not computed
# (the index tensors alone would not fit in memory).
_MAX_SAMPLE_POINTS = 1 << 26

_FLOAT_DTYPES = ("float16", "float32", "float64")
_SUPPORTED_DTYPES = {
    "psamask_forward": ("float32", "float64"),
    "psamask_backward": ("float32", "float64"),
    "masked_im2col_forward": _FLOAT_DTYPES,
    "carafe_forward": _FLOAT_DTYPES,
    "carafe_backward": _FLOAT_DTYPES,
    "deform_roi_pool_forward": _FLOAT_DTYPES,
    "border_align_backward": _FLOAT_DTYPES,
}


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise InvalidArgument(message)


# The type a GPU kernel computes and accumulates in, for each floating input dtype.
_COMPUTE_DTYPES = {
    np.dtype("float16"): torch.float32,
    np.dtype("float32"): torch.float32,
    np.dtype("float64"): torch.float64,
}


def _nhwc_to_nchw(t: torch.Tensor) -> torch.Tensor:
    return t.permute(0, 3, 1, 2)


def _nchw_to_nhwc(t: torch.Tensor) -> torch.Tensor:
    return t.permute(0, 2, 3, 1)


def _check_rank(name: str, t: torch.Tensor, rank: int) -> None:
    _require(t.dim() == rank, f"{name} must be {rank}-D, got shape {tuple(t.shape)}")


# --------------------------------------------------------------------------------------------
# Bilinear sampling shared by deform_roi_pool and border_align (mmcv's bilinear_interpolate
# and bilinear_interpolate_gradient).
# --------------------------------------------------------------------------------------------


class _BilinearCorners:
    """The four integer corners and weights of bilinear samples at real points (y, x).

    `inside` is False where the point lies farther than one pixel outside the map: such a
    point has value 0 and receives no gradient. Corner indices are always valid indices
    (clamped) so that they can be used for gathers even where `inside` is False.
    """

    def __init__(self, y: torch.Tensor, x: torch.Tensor, height: int, width: int):
        self.inside = (y >= -1) & (y <= height) & (x >= -1) & (x <= width)
        # Points outside (nan included) contribute nothing: park them at 0 so that every
        # corner index stays valid.
        y = torch.where(self.inside, y, torch.zeros_like(y))
        x = torch.where(self.inside, x, torch.zeros_like(x))
        self.y_low, self.y_high, ly = self._axis(y, height)
        self.x_low, self.x_high, lx = self._axis(x, width)
        hy, hx = 1 - ly, 1 - lx
        self.w1, self.w2, self.w3, self.w4 = hy * hx, hy * lx, ly * hx, ly * lx

    @staticmethod
    def _axis(coord: torch.Tensor, size: int):
        """Low and high neighbour along one axis and the fraction towards the high one."""
        coord = coord.clamp(min=0)
        low = torch.floor(coord).clamp(max=size - 1)
        # From the last row/column on (up to `size` itself) the point snaps onto that row,
        # so both neighbours are the last row and the fraction is 0.
        at_last = low >= size - 1
        high = torch.where(at_last, low, low + 1)
        coord = torch.where(at_last, low, coord)
        return low.long(), high.long(), coord - low


# --------------------------------------------------------------------------------------------
# psamask (mmcv psamask_{collect,distribute}_{forward,backward}_cuda, NCHW)
# --------------------------------------------------------------------------------------------


def _psamask_collect_source_channel(height, width, h_mask, w_mask, device):
    """For mmcv's COLLECT output out[n, t, p] (t = fh*W+fw, p = h*W+w): which mask channel
    q = hidx*w_mask+widx of the input x[n, q, p] lands there, and whether any does."""
    half_h, half_w = (h_mask - 1) // 2, (w_mask - 1) // 2
    pos = torch.arange(height * width, device=device)
    target_h, target_w = (pos // width)[:, None], (pos % width)[:, None]  # t along dim 0
    source_h, source_w = (pos // width)[None, :], (pos % width)[None, :]  # p along dim 1
    hidx = target_h - source_h + half_h
    widx = target_w - source_w + half_w
    valid = (hidx >= 0) & (hidx < h_mask) & (widx >= 0) & (widx < w_mask)
    channel = torch.where(valid, hidx * w_mask + widx, 0)
    return channel, valid


def _psamask_collect_target_channel(height, width, h_mask, w_mask, device):
    """For the input x[n, q, p]: which COLLECT output channel t it is copied to, and whether
    that target lies inside the map (the index map of the backward kernels)."""
    half_h, half_w = (h_mask - 1) // 2, (w_mask - 1) // 2
    q = torch.arange(h_mask * w_mask, device=device)
    pos = torch.arange(height * width, device=device)
    fh = (q // w_mask)[:, None] + (pos // width)[None, :] - half_h
    fw = (q % w_mask)[:, None] + (pos % width)[None, :] - half_w
    valid = (fh >= 0) & (fh < height) & (fw >= 0) & (fw < width)
    channel = torch.where(valid, fh * width + fw, 0)
    return channel, valid


def psamask_forward(x: torch.Tensor, psa_type: int, h_mask: int, w_mask: int) -> torch.Tensor:
    """x [N,H,W,hm*wm] -> y [N,H,W,H*W]."""
    _check_rank("x", x, 4)
    n, height, width, mask_channels = x.shape
    _require(mask_channels == h_mask * w_mask,
             f"x has {mask_channels} channels, h_mask*w_mask = {h_mask * w_mask}")
    _require(psa_type in (PSA_COLLECT, PSA_DISTRIBUTE), f"psa_type {psa_type} is not 0 or 1")
    x_flat = _nhwc_to_nchw(x).reshape(n, mask_channels, height * width)
    channel, valid = _psamask_collect_source_channel(height, width, h_mask, w_mask, x.device)
    if mask_channels == 0:  # nothing to gather from: every output element is 0
        collected = x.new_zeros(n, height * width, height * width)
    else:
        gathered = torch.gather(x_flat, 1, channel.expand(n, -1, -1))
        collected = torch.where(valid, gathered, torch.zeros((), dtype=x.dtype, device=x.device))
    # mmcv's DISTRIBUTE output is its COLLECT output with the two H*W axes swapped.
    out = collected if psa_type == PSA_COLLECT else collected.transpose(1, 2)
    return _nchw_to_nhwc(out.reshape(n, height * width, height, width))


def psamask_backward(dy: torch.Tensor, psa_type: int, h_mask: int, w_mask: int) -> torch.Tensor:
    """dy [N,H,W,H*W] -> dx [N,H,W,hm*wm]."""
    _check_rank("dy", dy, 4)
    n, height, width, hw = dy.shape
    _require(hw == height * width, f"dy has {hw} channels, H*W = {height * width}")
    _require(psa_type in (PSA_COLLECT, PSA_DISTRIBUTE), f"psa_type {psa_type} is not 0 or 1")
    dy_nchw = _nhwc_to_nchw(dy).reshape(n, hw, hw)
    # Bring dy into COLLECT form dy[n, t, p] before reading it through the collect index map.
    dy_collect = dy_nchw if psa_type == PSA_COLLECT else dy_nchw.transpose(1, 2)
    channel, valid = _psamask_collect_target_channel(height, width, h_mask, w_mask, dy.device)
    if hw == 0:
        dx = dy.new_zeros(n, h_mask * w_mask, 0)
    else:
        gathered = torch.gather(dy_collect, 1, channel.expand(n, -1, -1))
        dx = torch.where(valid, gathered, torch.zeros((), dtype=dy.dtype, device=dy.device))
    return _nchw_to_nhwc(dx.reshape(n, h_mask * w_mask, height, width))


# --------------------------------------------------------------------------------------------
# masked_im2col (mmcv MaskedIm2colForward, NCHW)
# --------------------------------------------------------------------------------------------


def masked_im2col_forward(feature, mask_h_idx, mask_w_idx, kernel_h, kernel_w, pad_h, pad_w):
    """feature [1,C,H,W] -> data_col [C*kh*kw, M]; zero where the tap leaves the map."""
    _check_rank("feature", feature, 4)
    _require(feature.shape[0] == 1, f"feature batch must be 1, got {feature.shape[0]}")
    _require(mask_h_idx.dim() == 1 and mask_w_idx.dim() == 1
             and mask_h_idx.shape == mask_w_idx.shape,
             f"mask_h_idx {tuple(mask_h_idx.shape)} and mask_w_idx {tuple(mask_w_idx.shape)}"
             " must be 1-D of equal length")
    _require(kernel_h >= 0 and kernel_w >= 0, "kernel_h and kernel_w must not be negative")
    _, channels, height, width = feature.shape
    count = mask_h_idx.shape[0]
    data_col = feature.new_zeros(channels, kernel_h, kernel_w, count)
    if height == 0 or width == 0 or count == 0:
        return data_col.reshape(channels * kernel_h * kernel_w, count)
    image = feature[0]
    zero = torch.zeros((), dtype=feature.dtype, device=feature.device)
    for i in range(kernel_h):
        rows = mask_h_idx.long() - pad_h + i
        for j in range(kernel_w):
            cols = mask_w_idx.long() - pad_w + j
            inside = (rows >= 0) & (rows < height) & (cols >= 0) & (cols < width)
            # Pure data movement: select, never multiply, so nan/inf pass through untouched.
            values = image[:, rows.clamp(0, height - 1), cols.clamp(0, width - 1)]
            data_col[:, i, j] = torch.where(inside, values, zero)
    return data_col.reshape(channels * kernel_h * kernel_w, count)


# --------------------------------------------------------------------------------------------
# carafe (mmcv carafe_naive_{forward,backward}_cuda_kernel, NCHW)
# --------------------------------------------------------------------------------------------


class _CarafeGeometry:
    """Shapes of one carafe call, checked for consistency."""

    def __init__(self, features, masks, kernel_size, group_size, scale_factor):
        _check_rank("input", features, 4)
        _check_rank("mask", masks, 4)
        _require(kernel_size >= 1 and kernel_size % 2 == 1,
                 f"kernel_size must be odd and positive, got {kernel_size}")
        _require(group_size >= 1, f"group_size must be >= 1, got {group_size}")
        _require(scale_factor >= 1, f"scale_factor must be >= 1, got {scale_factor}")
        self.n, self.channels, self.height, self.width = features.shape
        _require(self.channels % group_size == 0,
                 f"channels {self.channels} not divisible by group_size {group_size}")
        self.k, self.groups, self.scale = kernel_size, group_size, scale_factor
        self.radius = (kernel_size - 1) // 2
        self.group_channels = self.channels // group_size
        self.out_height, self.out_width = self.height * scale_factor, self.width * scale_factor
        expected_mask = (self.n, group_size * kernel_size * kernel_size,
                         self.out_height, self.out_width)
        _require(tuple(masks.shape) == expected_mask,
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


def carafe_forward(features, masks, kernel_size, group_size, scale_factor):
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


def carafe_backward(features, masks, grad_output, kernel_size, group_size, scale_factor):
    """NCHW: returns grad_features [N,C,H,W] and grad_masks [N,G*k*k,sH,sW]."""
    geo = _CarafeGeometry(features, masks, kernel_size, group_size, scale_factor)
    expected_grad = (geo.n, geo.channels, geo.out_height, geo.out_width)
    _require(tuple(grad_output.shape) == expected_grad,
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


# --------------------------------------------------------------------------------------------
# deform_roi_pool (mmcv deform_roi_pool_forward_cuda_kernel, NCHW input)
# --------------------------------------------------------------------------------------------


class _RoiBins:
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
    _require(bool(torch.isfinite(bin_size).all()),
             "a roi has a non-finite size: its sampling grid cannot be computed")
    # A negative grid (inverted roi) samples nothing, exactly like a zero grid. The upper
    # clamp only keeps absurd sizes from overflowing; the sample count check rejects them.
    return torch.ceil(bin_size.clamp(0, _MAX_SAMPLE_POINTS)).long()


def _deform_roi_pool_samples(bins: _RoiBins):
    """Flat list of all sample points: the bin and the roi each belongs to and its (iy, ix)."""
    device = bins.batch.device
    roi_count = bins.batch.shape[0]
    bin_roi = torch.arange(roi_count, device=device).repeat_interleave(bins.bins_per_roi)
    total = int((bins.grid_h.double() * bins.grid_w.double()).sum()) * bins.bins_per_roi
    _require(total <= _MAX_SAMPLE_POINTS,
             f"the rois need {total} sample points, more than this backend computes"
             f" ({_MAX_SAMPLE_POINTS})")
    samples_per_bin = (bins.grid_h * bins.grid_w)[bin_roi]
    sample_bin = torch.arange(bin_roi.shape[0], device=device).repeat_interleave(samples_per_bin)
    first_sample = torch.cumsum(samples_per_bin, 0) - samples_per_bin
    index_in_bin = torch.arange(sample_bin.shape[0], device=device) - first_sample[sample_bin]
    sample_roi = bin_roi[sample_bin]
    grid_w = bins.grid_w[sample_roi]
    return sample_bin, sample_roi, index_in_bin // grid_w, index_in_bin % grid_w


def deform_roi_pool_forward(features, rois, offset, pooled_height, pooled_width,
                            spatial_scale, sampling_ratio, gamma):
    """NCHW features [B,C,H,W], rois [R,5], offset [R,2,PH,PW] or None -> [R,PH,PW,C]."""
    _check_rank("input", features, 4)
    _require(rois.dim() == 2 and rois.shape[1] == 5,
             f"rois must be [R,5], got {tuple(rois.shape)}")
    _require(pooled_height >= 1 and pooled_width >= 1,
             f"pooled size must be positive, got {pooled_height}x{pooled_width}")
    roi_count = rois.shape[0]
    if offset is not None:
        expected = (roi_count, 2, pooled_height, pooled_width)
        _require(tuple(offset.shape) == expected,
                 f"offset {tuple(offset.shape)} does not match {expected}")
    batch, channels, height, width = features.shape
    # Per-bin accumulator, already in the output's [R, PH, PW, C] order.
    pooled = features.new_zeros(roi_count * pooled_height * pooled_width, channels)
    if roi_count == 0 or height == 0 or width == 0:  # no pixel to sample: all samples are 0
        return pooled.reshape(roi_count, pooled_height, pooled_width, channels)

    bins = _RoiBins(rois, offset, pooled_height, pooled_width, spatial_scale,
                    sampling_ratio, gamma)
    _require(bool(((bins.batch >= 0) & (bins.batch < batch)).all()),
             f"a roi's batch index lies outside [0, {batch})")
    sample_bin, sample_roi, iy, ix = _deform_roi_pool_samples(bins)
    block = max(1, _SAMPLE_BLOCK_ELEMENTS // max(channels, 1))
    for begin in range(0, sample_bin.shape[0], block):
        part = slice(begin, begin + block)
        b, r = sample_bin[part], sample_roi[part]
        y = bins.origin_h[b] + (iy[part].to(rois.dtype) + 0.5) * bins.bin_h[r] / bins.grid_h[r]
        x = bins.origin_w[b] + (ix[part].to(rois.dtype) + 0.5) * bins.bin_w[r] / bins.grid_w[r]
        corners = _BilinearCorners(y, x, height, width)
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


# --------------------------------------------------------------------------------------------
# border_align backward (mmcv border_align_backward_cuda_kernel, NCHW)
# --------------------------------------------------------------------------------------------


def _border_start_and_stride(boxes, pool_size):
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


def border_align_backward(grad_output, boxes, argmax_idx, pool_size, height, width):
    """mmcv layouts: grad_output [N,C,K,4], boxes [N,K,4], argmax_idx [N,C,K,4]
    -> grad_input [N,4C,H,W]."""
    _check_rank("grad_output", grad_output, 4)
    n, channels, box_count, borders = grad_output.shape
    _require(borders == 4, f"grad_output's border axis has {borders} entries, not 4")
    _require(tuple(boxes.shape) == (n, box_count, 4),
             f"boxes {tuple(boxes.shape)} does not match {(n, box_count, 4)}")
    _require(argmax_idx.shape == grad_output.shape,
             f"argmax_idx {tuple(argmax_idx.shape)} does not match grad_output")
    _require(pool_size != 0, "pool_size must not be 0")
    grad_input = grad_output.new_zeros(n * 4 * channels * height * width)
    if grad_input.numel() == 0 or grad_output.numel() == 0:
        return grad_input.reshape(n, 4 * channels, height, width)

    start_x, start_y, stride_x, stride_y = _border_start_and_stride(boxes, pool_size)
    steps = argmax_idx.to(grad_output.dtype)
    # The maximum sits at start + stride * argmax (one multiplication, as the kernel does).
    x = start_x[:, None] + stride_x[:, None] * steps
    y = start_y[:, None] + stride_y[:, None] * steps
    corners = _BilinearCorners(y, x, height, width)

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


# --------------------------------------------------------------------------------------------
# The backend object
# --------------------------------------------------------------------------------------------


class TorchBackend:
    """Runs requests of the harness with the torch kernels above on one device."""

    name = "torch"

    def __init__(self, device="cpu"):
        self.device = torch.device(device)
        if self.device.type == "cuda" and not torch.cuda.is_available():
            raise RuntimeError("this PyTorch sees no CUDA device")

    def supports(self, op: str, dtype: str) -> bool:
        try:
            name = np.dtype(dtype).name
        except TypeError:
            return False
        return name in _SUPPORTED_DTYPES.get(op, ())

    def run(self, request) -> dict:
        handler = getattr(self, f"_run_{request.op}", None)
        _require(handler is not None and request.op in _SUPPORTED_DTYPES,
                 f"torch backend has no kernel {request.op!r}")
        with torch.no_grad():
            return handler(request)

    # -- helpers -----------------------------------------------------------------------------

    def _input(self, request, name, compute_dtype=None, optional=False):
        array = (request.inputs or {}).get(name)
        if array is None:
            _require(optional, f"{request.op}: input {name!r} is missing")
            return None
        tensor = torch.from_numpy(np.array(array, copy=True, order="C")).to(self.device)
        return tensor.to(compute_dtype) if compute_dtype is not None else tensor

    def _compute_dtype_of(self, request, name):
        array = (request.inputs or {}).get(name)
        _require(array is not None, f"{request.op}: input {name!r} is missing")
        _require(np.dtype(array.dtype) in _COMPUTE_DTYPES,
                 f"{request.op}: input {name!r} must be float16/32/64, got {array.dtype}")
        return _COMPUTE_DTYPES[np.dtype(array.dtype)]

    @staticmethod
    def _param(request, name):
        params = request.params or {}
        _require(name in params, f"{request.op}: parameter {name!r} is missing")
        return params[name]

    def _int_param(self, request, name):
        return int(self._param(request, name))

    def _float_param(self, request, name):
        return float(self._param(request, name))

    @staticmethod
    def _output(request, name, tensor):
        _require(name in request.outputs, f"{request.op}: output {name!r} is not requested")
        spec = request.outputs[name]
        _require(tuple(tensor.shape) == tuple(spec.shape),
                 f"{request.op}: computed {name} shape {tuple(tensor.shape)}"
                 f" differs from the requested {tuple(spec.shape)}")
        return tensor.detach().cpu().contiguous().numpy().astype(spec.dtype, copy=False)

    # -- kernels -----------------------------------------------------------------------------

    def _psamask_params(self, request):
        return (self._int_param(request, "psa_type"), self._int_param(request, "h_mask"),
                self._int_param(request, "w_mask"))

    def _run_psamask_forward(self, request):
        x = self._input(request, "x", self._compute_dtype_of(request, "x"))
        return {"y": self._output(request, "y", psamask_forward(x, *self._psamask_params(request)))}

    def _run_psamask_backward(self, request):
        dy = self._input(request, "dy", self._compute_dtype_of(request, "dy"))
        dx = psamask_backward(dy, *self._psamask_params(request))
        return {"dx": self._output(request, "dx", dx)}

    def _run_masked_im2col_forward(self, request):
        # Pure data movement: keep the feature's own dtype.
        data_col = masked_im2col_forward(
            self._input(request, "feature"),
            self._input(request, "mask_h_idx"), self._input(request, "mask_w_idx"),
            self._int_param(request, "kernel_h"), self._int_param(request, "kernel_w"),
            self._int_param(request, "pad_h"), self._int_param(request, "pad_w"))
        return {"data_col": self._output(request, "data_col", data_col)}

    def _carafe_params(self, request):
        return (self._int_param(request, "kernel_size"), self._int_param(request, "group_size"),
                self._int_param(request, "scale_factor"))

    def _run_carafe_forward(self, request):
        dtype = self._compute_dtype_of(request, "input")
        features = _nhwc_to_nchw(self._check4(request, "input", dtype))
        masks = _nhwc_to_nchw(self._check4(request, "mask", dtype))
        output = carafe_forward(features, masks, *self._carafe_params(request))
        return {"output": self._output(request, "output", _nchw_to_nhwc(output))}

    def _run_carafe_backward(self, request):
        dtype = self._compute_dtype_of(request, "input")
        features = _nhwc_to_nchw(self._check4(request, "input", dtype))
        masks = _nhwc_to_nchw(self._check4(request, "mask", dtype))
        grad_output = _nhwc_to_nchw(self._check4(request, "grad_output", dtype))
        grad_features, grad_masks = carafe_backward(features, masks, grad_output,
                                                    *self._carafe_params(request))
        return {"grad_input": self._output(request, "grad_input", _nchw_to_nhwc(grad_features)),
                "grad_mask": self._output(request, "grad_mask", _nchw_to_nhwc(grad_masks))}

    def _run_deform_roi_pool_forward(self, request):
        dtype = self._compute_dtype_of(request, "input")
        features = _nhwc_to_nchw(self._check4(request, "input", dtype))
        output = deform_roi_pool_forward(
            features, self._input(request, "rois", dtype),
            self._input(request, "offset", dtype, optional=True),
            self._int_param(request, "pooled_height"), self._int_param(request, "pooled_width"),
            self._float_param(request, "spatial_scale"),
            self._int_param(request, "sampling_ratio"), self._float_param(request, "gamma"))
        return {"output": self._output(request, "output", output)}

    def _run_border_align_backward(self, request):
        dtype = self._compute_dtype_of(request, "grad_output")
        # NHWC [N,K,4,C] -> mmcv's [N,C,K,4]
        grad_output = self._check4(request, "grad_output", dtype).permute(0, 3, 1, 2)
        argmax_idx = self._check4(request, "argmax_idx").permute(0, 3, 1, 2)
        _require("grad_input" in request.outputs,
                 f"{request.op}: output 'grad_input' is not requested")
        out_shape = tuple(request.outputs["grad_input"].shape)
        _require(len(out_shape) == 4, f"grad_input must be 4-D, got {out_shape}")
        grad_input = border_align_backward(
            grad_output, self._input(request, "boxes", dtype), argmax_idx,
            self._int_param(request, "pool_size"), out_shape[1], out_shape[2])
        return {"grad_input": self._output(request, "grad_input", _nchw_to_nhwc(grad_input))}

    def _check4(self, request, name, dtype=None):
        tensor = self._input(request, name, dtype)
        _require(tensor.dim() == 4, f"{request.op}: {name} must be 4-D, got {tuple(tensor.shape)}")
        return tensor


def make(device="cpu") -> TorchBackend:
    return TorchBackend(device)


backend = make("cpu")
