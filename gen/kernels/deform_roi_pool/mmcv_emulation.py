"""mmcv 2.2.0's deform_roi_pool_forward_cuda_kernel, bit for bit, and the bilinear
sampling of common_cuda_helper.hpp that border_align shares.

Every value is in the tensor dtype ``T`` (gen.kernels.shared.mmcv_half says what that means for at::Half
and float).  The places where the float32 kernel fuses a multiply and an add, found by
matching mmcv's outputs bit for bit (each alternative breaks some conformance case):

- the offset shift ``roi_start_w += gamma * roi_width * offset``: fma(gamma*roi_width, offset, start);
- the bin start ``roi_start_h + ph * bin_size_h``: fma(ph, bin_size_h, start);
- the bilinear sum ``w1*v1 + w2*v2 + w3*v3 + w4*v4``: fma(w4, v4, fma(w3, v3, fma(w2, v2, w1*v1)));
- ``rois * spatial_scale - 0.5``: taken as fma(rois, scale, -0.5) too (the double 0.5 is
  narrowed to float, so the expression is a float multiply-add); the conformance data cannot
  tell, since every spatial_scale in it is a power of two and the product is exact.

Each output element (roi, ph, pw, c) is one thread: it sums its bin's samples in (iy, ix)
order, one rounding per addition, and divides by the sample count at the end.  Nothing is
shared between threads, so the result is deterministic and so is this emulation.

gen.kernels.deform_roi_pool.compiled_mmcv_forward computes the forward in one C call where a compiler is
at hand (the whole call and so gen.sampled's units, which are calls on a few rois); the numpy code below
is the fallback and the definition both are tested against.
"""
from __future__ import annotations

import numpy as np

from gen.core.overlap import ordered_map
from gen.kernels.deform_roi_pool import compiled_mmcv_forward
from gen.kernels.shared.mmcv_half import F32, ScalarT, round_to_half
from gen.kernels.shared.reference import check_emulated_steps
from gen.sampled import Units

# Rois per chunk are chosen so that the per-sample values [rois, PH, PW, C] stay near this size.
_CHUNK_ELEMENTS = 1 << 20


def mul_add(a, b, c):
    """``a * b + c`` in T as nvcc compiles it (ScalarT.mac) for values held in T itself
    rather than in ScalarT's float32 carrier: the small per-bin coordinate arrays."""
    dtype = np.asarray(c).dtype
    # Broadcast first: fma32 sizes its result by the product alone.
    a, b, c = np.broadcast_arrays(a, b, c)
    return ScalarT(dtype).mac(c, a, b).astype(dtype, copy=False)


def rounded(T: ScalarT, carrier: np.ndarray) -> np.ndarray:
    """A float32 result of one operation rounded to T, kept in the carrier."""
    return round_to_half(carrier) if T.is_half else carrier


def as_t(x, dtype) -> np.ndarray:
    """``static_cast<T>`` of an int: through float (at::Half has only a float constructor)."""
    return np.asarray(x).astype(F32).astype(dtype)


def to_int(x) -> np.ndarray:
    """``(int)x`` of a float as the GPU converts it (cvt.rzi.s32.f32): toward zero, saturated
    to int32, NaN to 0.  Returned as int64 so that index arithmetic cannot overflow."""
    x = np.asarray(x, F32).astype(np.float64)    # float64: int32's bounds are exact there
    clipped = np.clip(np.trunc(x), -2.0 ** 31, 2.0 ** 31 - 1)
    return np.where(np.isnan(x), 0, clipped).astype(np.int64)


def bilinear_corners(y, x, height: int, width: int):
    """bilinear_interpolate / bilinear_interpolate_gradient for arrays of points in T.

    Returns (rows, cols, weights, inside): rows, cols int64 [4, *shape], the corners
    (y_low, x_low), (y_low, x_high), (y_high, x_low), (y_high, x_high); weights in T
    [4, *shape] = hy*hx, hy*lx, ly*hx, ly*lx; inside False where mmcv returns 0 (the point
    is more than one pixel outside the map), and there rows, cols are 0 and weights 0.
    The map must not be empty.
    """
    dtype = np.asarray(y).dtype.type
    # at::Half compares as float: float16(height) would round a height above 2048.
    y32, x32 = np.asarray(y, F32), np.asarray(x, F32)
    inside = ~((y32 < -1) | (y32 > F32(height)) | (x32 < -1) | (x32 > F32(width)))
    y_low, y_high, ly = _bilinear_axis(np.where(inside, y, dtype(0)), height)
    x_low, x_high, lx = _bilinear_axis(np.where(inside, x, dtype(0)), width)
    one = dtype(1)
    hy, hx = one - ly, one - lx
    weights = np.stack([hy * hx, hy * lx, ly * hx, ly * lx])
    weights[:, ~inside] = 0
    return np.stack([y_low, y_low, y_high, y_high]), np.stack([x_low, x_high, x_low, x_high]), weights, inside


def _bilinear_axis(coord, size: int):
    """One axis of bilinear_interpolate: ``if (y <= 0) y = 0; y_low = (int)y;`` and the snap
    onto the last row (``y = (T)y_low``); returns y_low, y_high and ly = y - y_low in T."""
    dtype = coord.dtype.type
    coord = np.where(coord <= 0, dtype(0), coord)
    low = to_int(coord)
    at_last = low >= size - 1
    low = np.where(at_last, size - 1, low)
    coord = np.where(at_last, as_t(low, dtype), coord)
    high = np.where(at_last, low, low + 1)
    return low, high, coord - as_t(low, dtype)


def deform_roi_pool_forward(inputs: dict, params: dict, out_shapes: dict | None = None) -> dict:
    """input [N, H, W, C], rois [R, 5], offset [R, 2, PH, PW] (optional) -> output [R, PH, PW, C], all in T."""
    fast = compiled_mmcv_forward.deform_roi_pool_forward(inputs, params, _CHUNK_ELEMENTS)
    if fast is not None:
        return fast
    features, rois, offset = inputs["input"], inputs["rois"], inputs.get("offset")
    dtype = features.dtype.type
    PH, PW = int(params["pooled_height"]), int(params["pooled_width"])
    N, H, W, C = features.shape
    R = rois.shape[0]
    output = np.zeros((R, PH, PW, C), dtype=dtype)
    if output.size == 0 or H == 0 or W == 0:
        # An empty map: the kernel would read outside the input; the doc's answer is 0.
        return {"output": output}
    batch = to_int(rois[:, 0])
    if np.any((batch < 0) | (batch >= N)):
        # mmcv would read outside its input: nothing to emulate.
        raise ValueError(f"deform_roi_pool_forward: rois[:, 0] holds batch indices outside [0, {N})")
    chunk = max(1, _CHUNK_ELEMENTS // (PH * PW * C))

    def pooled(first):
        part = slice(first, first + chunk)
        return part, _pool(features, rois[part], batch[part], None if offset is None else offset[part], params)
    # Each roi is one thread's bins, alone: chunks of rois computed on two threads are the same values.
    for part, values in ordered_map(pooled, range(0, R, chunk)):
        output[part] = values
    return {"output": ScalarT(dtype).result(output)}


def deform_roi_pool_forward_units(inputs: dict, params: dict, out_shapes: dict | None = None) -> Units:
    """The forward by roi: each roi's bins are one thread's each, computed alone (gen.sampled)."""
    def values(units):
        chosen = {**inputs, "rois": inputs["rois"][units]}
        if inputs.get("offset") is not None:
            chosen["offset"] = inputs["offset"][units]
        return deform_roi_pool_forward(chosen, params)
    return Units(inputs["rois"].shape[0], lambda units: {"output": (np.asarray(units),)}, values)


def _pool(features, rois, batch, offset, params) -> np.ndarray:
    """The forward for a few rois (their images: batch): [R, PH, PW, C] in T.

    The per-bin coordinates [R, PH, PW] are held in T itself; the per-channel values
    [R, PH, PW, C], the bulk of the work, in ScalarT's float32 carrier (float32 operations
    and a rounding each ran 15-25 % faster than numpy's float16 operators)."""
    dtype = features.dtype.type
    T = ScalarT(dtype)
    _, H, W, C = features.shape
    PH, PW = int(params["pooled_height"]), int(params["pooled_width"])
    sampling_ratio = int(params["sampling_ratio"])
    # The launcher's static_cast<scalar_t>(float): params hold float32 values.
    scale, gamma = as_t(params["spatial_scale"], dtype), as_t(params["gamma"], dtype)
    minus_half = dtype(-0.5)
    R = rois.shape[0]

    start_w, start_h = mul_add(rois[:, 1], scale, minus_half), mul_add(rois[:, 2], scale, minus_half)
    roi_w = mul_add(rois[:, 3], scale, minus_half) - start_w
    roi_h = mul_add(rois[:, 4], scale, minus_half) - start_h
    bin_h, bin_w = roi_h / as_t(PH, dtype), roi_w / as_t(PW, dtype)
    if sampling_ratio > 0:
        grid_h = grid_w = np.full(R, sampling_ratio, dtype=np.int64)
    else:
        # static_cast<int>(ceilf(roi_height / pooled_height)): the same T quotient as bin_size_h.
        grid_h, grid_w = to_int(np.ceil(bin_h.astype(F32))), to_int(np.ceil(bin_w.astype(F32)))
    # max(h * w, 1) of the ints: two negative grids (an inverted roi) give a positive count
    # and no samples, so 0 either way.
    count = as_t(np.maximum(grid_h * grid_w, 1), dtype)

    start_h = np.broadcast_to(start_h[:, None, None], (R, PH, PW))
    start_w = np.broadcast_to(start_w[:, None, None], (R, PH, PW))
    if offset is not None:
        start_w = mul_add((gamma * roi_w)[:, None, None], offset[:, 0], start_w)
        start_h = mul_add((gamma * roi_h)[:, None, None], offset[:, 1], start_h)
    bin_y0 = mul_add(as_t(np.arange(PH), dtype)[None, :, None], bin_h[:, None, None], start_h)
    bin_x0 = mul_add(as_t(np.arange(PW), dtype)[None, None, :], bin_w[:, None, None], start_w)

    total = np.zeros((R, PH, PW, C), dtype=F32)
    steps_h, steps_w = int(grid_h.max(initial=0)), int(grid_w.max(initial=0))
    check_emulated_steps("deform_roi_pool_forward", float(max(steps_h, 0)) * max(steps_w, 0))
    if _one_grid(grid_h, grid_w, steps_h, steps_w):
        # One grid for all (a sampling_ratio): every roi has every sample, and a few steps' samples
        # are computed in one pass, then added step by step as below.
        _add_uniform_samples(T, features, batch, (bin_y0, bin_x0), (bin_h, bin_w), (grid_h, grid_w),
                             (steps_h, steps_w), total)
        return rounded(T, total / count[:, None, None, None].astype(F32)).astype(dtype)
    for iy in range(steps_h):
        for ix in range(steps_w):
            # Rois whose grid has this sample (adaptive grids differ per roi).
            active = np.flatnonzero((iy < grid_h) & (ix < grid_w))
            if active.size == 0:
                continue
            step_y = as_t(iy + 0.5, dtype) * bin_h[active] / as_t(grid_h[active], dtype)
            step_x = as_t(ix + 0.5, dtype) * bin_w[active] / as_t(grid_w[active], dtype)
            y = bin_y0[active] + step_y[:, None, None]
            x = bin_x0[active] + step_x[:, None, None]
            total[active] = T.add(total[active], _sample(T, features, batch[active], y, x))
    return rounded(T, total / count[:, None, None, None].astype(F32)).astype(dtype)


def _one_grid(grid_h, grid_w, steps_h: int, steps_w: int) -> bool:
    """Whether every roi's grid is steps_h x steps_w (tests force the step-by-step loop by answering False)."""
    return grid_h.size > 0 and bool(np.all(grid_h == steps_h)) and bool(np.all(grid_w == steps_w))


# Samples [steps, R, PH, PW, C] computed in one pass of _add_uniform_samples: about this many elements.
_STEP_GROUP_ELEMENTS = 1 << 18


def _add_uniform_samples(T: ScalarT, features, batch, bin_start, bin_size, grid, steps, total) -> None:
    """total += each sample (iy, ix) in turn, in T, where every roi's grid is steps (the loop of _pool
    with every roi active): the samples of a group of steps by one pass of elementwise operations
    (the same operations on each element), the additions one step after the other."""
    dtype = features.dtype.type
    (bin_y0, bin_x0), (bin_h, bin_w), (grid_h, grid_w), (steps_h, steps_w) = bin_start, bin_size, grid, steps
    group = max(1, _STEP_GROUP_ELEMENTS // max(1, total.size))
    for first in range(0, steps_h * steps_w, group):
        step = np.arange(first, min(steps_h * steps_w, first + group))
        iy, ix = (step // steps_w)[:, None], (step % steps_w)[:, None]
        step_y = as_t(iy + 0.5, dtype) * bin_h / as_t(grid_h, dtype)
        step_x = as_t(ix + 0.5, dtype) * bin_w / as_t(grid_w, dtype)
        samples = _sample(T, features, batch, bin_y0 + step_y[:, :, None, None], bin_x0 + step_x[:, :, None, None])
        for sample in samples:
            total[...] = T.add(total, sample)


def _sample(T: ScalarT, features, batch, y, x) -> np.ndarray:
    """bilinear_interpolate of image batch[r] at the points y, x [..., R, PH, PW] (in T):
    [..., R, PH, PW, C] in the float32 carrier."""
    _, H, W, _ = features.shape
    rows, cols, weights, inside = bilinear_corners(y, x, H, W)
    weights = weights[..., None].astype(F32)
    image = batch[:, None, None]

    def corner_values(corner):
        return features[image, rows[corner], cols[corner]].astype(F32, copy=False)

    value = rounded(T, weights[0] * corner_values(0))
    for corner in range(1, 4):
        value = T.mac(value, weights[corner], corner_values(corner))
    # Outside points return 0 before any arithmetic; their weights are 0 already, but 0 * inf is not.
    return np.where(inside[..., None], value, F32(0))
