"""deform_roi_pool backward: the gradients of the forward (gen.kernels.deform_roi_pool.reference), as mmcv
2.2.0's deform_roi_pool_backward_cuda_kernel and mlu-ops' CPU baseline define them.

Each bin (roi r, ph, pw) has the forward's samples (y, x) and count = grid_h * grid_w; with
g = grad_output[r, ph, pw, :] / count, every sample inside [-1, H] x [-1, W]:
    grad_input[b, corner, :] += g * w_corner             (the forward's bilinear corners and weights)
    grad_offset[r, 0, ph, pw] += gamma * roi_w * sum_c g_c * ((v11 - v01) * (y - y_low) + (v10 - v00) * (y_high - y))
    grad_offset[r, 1, ph, pw] += gamma * roi_h * sum_c g_c * ((v11 - v10) * (x - x_low) + (v01 - v00) * (x_high - x))
with v00 = input[y_low, x_low], v10 = input[y_low, x_high], v01 = input[y_high, x_low],
v11 = input[y_high, x_high] and roi_w, roi_h the roi's size before the offset.  (y, x) is the
sample as computed, NOT clamped: bilinear_interpolate_gradient takes it by value, so in the
clamp band [-1, 0) the derivative is mmcv's extrapolation, not 0; in the snap band (size-1,
size] both corners are the last row and the term is 0.  Samples outside add nothing.

Both sums are scatter-adds: here in float64, sample by sample in (roi, ph, pw, iy, ix) order.
grad_input's takes a sample's four corners in turn, as np.add.at would, batch after batch of
samples (gen.kernels.shared.ordered_scatter: the same bits, without np.add.at's element-by-element loop).
grad_offset's per-bin sums keep the chunks of gen.kernels.deform_roi_pool.reference (each chunk's samples summed
by np.bincount, then added to the bin).  Where a C compiler is at hand, the float64 golden runs
whole as one compiled call (gen.kernels.deform_roi_pool.compiled_backward, deform_roi_pool_kernel.c): the
geometry, both sums sample by sample in the same order and grad_offset's product, the same bits,
several times faster (numpy's path recomputes a NaN).
"""
from __future__ import annotations

import numpy as np

from gen.kernels.shared.bilinear import bilinear_corners
from gen.kernels.deform_roi_pool import compiled_backward
from gen.kernels.deform_roi_pool.reference import Bins, bin_geometry, sample_batches, sample_points, samples_per_chunk
from gen.kernels.shared.ordered_scatter import add_rows_in_order

# Elements [samples, C] per batch of samples: temporaries of a few times this size stay in cache.
_BATCH_ELEMENTS = 1 << 15
# grad_input entries [entries, C] scattered at once (bounds the rows gathered to receive them).
_FLUSH_ELEMENTS = 1 << 23


def roi_sizes(rois, params, dtype) -> tuple[np.ndarray, np.ndarray]:
    """(roi_w, roi_h) [R]: the roi's size in feature cells before any offset, as the forward measures it."""
    scale, half = dtype(params["spatial_scale"]), dtype(0.5)
    rois = np.asarray(rois).astype(dtype)
    roi_w = (rois[:, 3] * scale - half) - (rois[:, 1] * scale - half)
    roi_h = (rois[:, 4] * scale - half) - (rois[:, 2] * scale - half)
    return roi_w, roi_h


def backward(inputs, params, compute_dtype=np.float64, out_shapes=None):
    """grad_output [R, PH, PW, C], input [N, H, W, C], rois [R, 5], offset [R, 2, PH, PW] or None
    -> grad_input [N, H, W, C], grad_offset [R, 2, PH, PW] (0 without an offset)."""
    fast = compiled_backward.backward(inputs, params, compute_dtype)
    if fast is not None:
        return fast
    grad_output, features, rois = inputs["grad_output"], inputs["input"], inputs["rois"]
    offset = inputs.get("offset")
    dtype = np.dtype(compute_dtype).type
    N, H, W, C = features.shape
    R, PH, PW = rois.shape[0], int(params["pooled_height"]), int(params["pooled_width"])
    grad_offset = np.zeros((R, 2, PH * PW), dtype=dtype)
    if grad_output.size == 0 or H == 0 or W == 0:
        # An empty map has no pixel to receive anything (zero H or W succeeds).
        return {"grad_input": np.zeros((N, H, W, C), dtype=dtype), "grad_offset": grad_offset.reshape(R, 2, PH, PW)}

    bins = bin_geometry(rois, offset, params, dtype)
    # grad_output / count; a bin with no samples never uses it (mmcv divides by count 0 there).
    bin_grad = grad_output.reshape(-1, C).astype(dtype) / np.maximum(bins.samples, 1).astype(dtype)[:, None]
    grad_input, offset_x, offset_y = _numpy_sums(features, bins, bin_grad, offset is not None, dtype)
    if offset is not None:
        per_bin_roi = np.repeat(np.arange(R), PH * PW)
        roi_w, roi_h = roi_sizes(rois, params, dtype)
        gamma = dtype(params["gamma"])
        # A bin without samples adds nothing in mmcv (its adds are per sample); its sum here is 0,
        # and 0 times a NaN roi size (the only such bins whose product is not 0) is made 0 again.
        empty = bins.samples == 0
        grad_offset[:, 0] = _nan_to_zero_where(gamma * roi_w[per_bin_roi] * offset_x, empty).reshape(R, PH * PW)
        grad_offset[:, 1] = _nan_to_zero_where(gamma * roi_h[per_bin_roi] * offset_y, empty).reshape(R, PH * PW)
    return {"grad_input": grad_input.reshape(N, H, W, C), "grad_offset": grad_offset.reshape(R, 2, PH, PW)}


def _nan_to_zero_where(values: np.ndarray, where: np.ndarray) -> np.ndarray:
    return np.where(where & np.isnan(values), values.dtype.type(0), values)


def _numpy_sums(features, bins: Bins, bin_grad, with_offset: bool, dtype):
    """(grad_input [N*H*W, C], offset_x, offset_y [bins]): both scatter-adds (the module doc), with numpy."""
    N, H, W, C = features.shape
    grad_input = np.zeros((N * H * W, C), dtype=dtype)
    # The offset terms read four corners per sample: converted once here (the same values; one more
    # input-sized array, 250 MB at the largest network case), faster than at every read.
    pixels = features.reshape(-1, C).astype(dtype, copy=False) if with_offset else None
    total = int(bins.ends[-1]) if bins.ends.size else 0
    offset_terms = np.zeros((2, total), dtype=dtype)        # each sample's sum_c of the x and y terms (0 outside)
    pending = _PendingEntries(grad_input, bin_grad, max(1, _FLUSH_ELEMENTS // C))
    for first, last in sample_batches(bins, max(1, _BATCH_ELEMENTS // C)):
        bin_of, y, x = sample_points(bins, np.arange(first, last), dtype)
        rows, cols, weights, inside = bilinear_corners(y, x, H, W)
        inside_at = np.flatnonzero(inside)
        bin_of, y, x = bin_of[inside], y[inside], x[inside]
        rows, cols, weights = rows[:, inside], cols[:, inside], weights[:, inside]
        targets = (bins.batch[bin_of] * H + rows) * W + cols                    # [4, S]
        # Sample by sample, its four corners in turn.
        pending.add(targets.T.reshape(-1), weights.T.reshape(-1), np.repeat(bin_of, 4))
        if not with_offset:
            continue
        g = bin_grad[bin_of]                                                  # [S, C]
        # Corners (y_low, x_low), (y_low, x_high), (y_high, x_low), (y_high, x_high).
        v00, v10, v01, v11 = pixels.take(targets.reshape(-1), axis=0).reshape(4, -1, C)
        y_low, y_high = rows[0].astype(dtype), rows[2].astype(dtype)
        x_low, x_high = cols[0].astype(dtype), cols[1].astype(dtype)
        for axis, term in enumerate(_offset_terms(g, v00, v10, v01, v11, y - y_low, y_high - y, x - x_low, x_high - x)):
            offset_terms[axis, first + inside_at] = term
    pending.flush()
    offset_x = np.zeros(bins.samples.size, dtype=dtype)
    offset_y = np.zeros(bins.samples.size, dtype=dtype)
    if with_offset:
        step = samples_per_chunk(C)
        for first in range(0, total, step):
            bin_of = np.searchsorted(bins.ends, np.arange(first, min(total, first + step)), side="right")
            offset_x += np.bincount(bin_of, weights=offset_terms[0, first:first + step], minlength=offset_x.size)
            offset_y += np.bincount(bin_of, weights=offset_terms[1, first:first + step], minlength=offset_y.size)
    return grad_input, offset_x, offset_y


class _PendingEntries:
    """grad_input's scatter-add entries (pixel, weight, bin), gathered over batches of samples and
    added in their order (gen.kernels.shared.ordered_scatter) whenever ``limit`` have come: rows of
    grad_input = weight * bin_grad[bin], bit for bit np.add.at's sums, several times faster."""

    def __init__(self, grad_input: np.ndarray, bin_grad: np.ndarray, limit: int):
        self.grad_input, self.bin_grad, self.limit = grad_input, bin_grad, limit
        self.parts, self.count = [], 0

    def add(self, pixels: np.ndarray, weights: np.ndarray, bins: np.ndarray) -> None:
        self.parts.append((pixels, weights, bins))
        self.count += pixels.size
        if self.count >= self.limit:
            self.flush()

    def flush(self) -> None:
        if self.parts:
            pixels, weights, bins = (np.concatenate(column) for column in zip(*self.parts))
            add_rows_in_order(self.grad_input, pixels, weights, self.bin_grad, bins)
        self.parts, self.count = [], 0


def _offset_terms(g, v00, v10, v01, v11, from_low_y, to_high_y, from_low_x, to_high_x):
    """Per sample, sum_c of g * along_x and of g * along_y (the module doc), in place in two buffers:
    along_x = (v11 - v01) * from_low_y + (v10 - v00) * to_high_y, along_y likewise along x."""
    first, second = np.subtract(v11, v01), np.subtract(v10, v00)
    first *= from_low_y[:, None]
    second *= to_high_y[:, None]
    first += second
    along_x = np.multiply(g, first, out=first).sum(axis=1)
    np.subtract(v11, v10, out=first)
    np.subtract(v01, v00, out=second)
    first *= from_low_x[:, None]
    second *= to_high_x[:, None]
    first += second
    return along_x, np.multiply(g, first, out=first).sum(axis=1)


def adjoint_inputs(inputs, params):
    """The inputs the adjoint checks take (gen/adjoint.py, gen/REACH.md: tests/test_adjoint.py, opcase run --adjoint): the rois moved well inside
    the map, or None where the map is too small for that.  mmcv's grad_offset, which the reference follows,
    takes a sample in the clamp band [-1, 0) at its unclamped position (bilinear_interpolate_gradient gets
    it by value), so there it is mmcv's extrapolation, not the forward's derivative (0): the identity holds
    for offset only where every sample lies inside the map, at least a cell from its edges."""
    N, H, W, _ = np.shape(inputs["input"])
    scale = float(params["spatial_scale"])
    if H < 6 or W < 6 or scale <= 0:
        return None
    rois = np.array(inputs["rois"], dtype=np.float64, copy=True)
    if rois.size == 0:
        return None
    rng = np.random.default_rng(0)
    R = rois.shape[0]
    x0, y0 = rng.uniform(2.0, W / 2 - 1.0, R), rng.uniform(2.0, H / 2 - 1.0, R)
    x1, y1 = rng.uniform(W / 2, W - 3.0, R), rng.uniform(H / 2, H - 3.0, R)
    rois[:, 1:] = np.stack([x0, y0, x1, y1], axis=1) / scale
    moved = {**inputs, "rois": rois.astype(np.asarray(inputs["rois"]).dtype)}
    offset = inputs.get("offset")
    if offset is not None:     # a bin moves by gamma * roi size * offset: at most one cell, into the margin
        bound = min(0.05, 1.0 / (abs(float(params["gamma"])) * max(H, W) + 1e-9))
        moved["offset"] = np.clip(offset, -bound, bound).astype(np.asarray(offset).dtype)
    return moved
