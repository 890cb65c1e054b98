"""deform_roi_pool backward's float64 golden as one compiled call (deform_roi_pool_kernel.c, gen.native).

The call takes the rois, offsets and grad_output as they come and does all of
gen.kernels.deform_roi_pool.reference_backward's work in C: each bin's geometry (bin_geometry's float64
operations), grad_output / count, both scatter-adds in the reference's order and grad_offset's last
product, so a small case costs a few microseconds, not numpy's fixed cost per array operation.  The
same operations in the same order: the same bits (tests/test_native_goldens.py checks it on random
calls).  numpy's path runs where there is no compiler, for other compute dtypes and inputs the loop
does not take, and where a sum is NaN (which NaN comes out is numpy's choice).

grad_input is not scanned for a NaN where none can be there: each of its elements sums at most
4 x samples terms w * g with |w| <= 1, so with every g finite and that many times the largest |g|
below 1e300 no partial sum overflows (the C loop decides, and scans where it cannot).
"""
from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np

from gen import native, widen
from gen.kernels.deform_roi_pool import reference
from gen.kernels.shared.reference import MAX_SAMPLE_POINTS, check_sample_points

_SOURCE = Path(reference.__file__).with_name("deform_roi_pool_kernel.c")
_FLOATS = (np.float16, np.float32, np.float64)
_P, _L, _D = ctypes.c_void_p, ctypes.c_long, ctypes.c_double
_ARGTYPES = [_P, _P, _L, _L, _L, _L, _P, _L, _P, _L, _L, _D, _D, _L, _L, _D, _P, _P, _P, _P]
# The C loop's statuses besides 0 (done).
_NUMPY_DECIDES, _OVER_THE_LIMIT = 1, 2


def _loop(itemsize: int):
    """deform_roi_pool_backward_f16/f32/f64 of the compiled library, or None (no compiler, OPCASE_NO_CC)."""
    return native.function(_SOURCE, f"deform_roi_pool_backward_f{itemsize * 8}", _ARGTYPES,
                           ctypes.c_int)


def _takes(grad_output, features, rois, offset, PH: int, PW: int) -> bool:
    """Whether the loop takes these arrays: float maps, the shapes the reference reads, numbers for rois."""
    if features.ndim != 4 or features.dtype not in _FLOATS or grad_output.dtype not in _FLOATS:
        return False
    N, H, W, C = features.shape
    R = rois.shape[0] if rois.ndim == 2 else -1
    if rois.shape != (R, 5) or grad_output.shape != (R, PH, PW, C) or rois.dtype.kind not in "fiu":
        return False
    return offset is None or (offset.shape == (R, 2, PH, PW) and offset.dtype.kind in "fiu")


def backward(inputs, params, compute_dtype) -> dict | None:
    """{grad_input, grad_offset} as reference_backward.backward computes them, or None where numpy's path
    must run.  An adaptive grid over the sample limit raises its ValueError, as bin_geometry does."""
    if np.dtype(compute_dtype) != np.float64:
        return None
    grad_output, features = np.asarray(inputs["grad_output"]), np.asarray(inputs["input"])
    rois, offset = np.asarray(inputs["rois"]), inputs.get("offset")
    offset = None if offset is None else np.asarray(offset)
    PH, PW = int(params["pooled_height"]), int(params["pooled_width"])
    if not _takes(grad_output, features, rois, offset, PH, PW):
        return None
    N, H, W, C = features.shape
    R = rois.shape[0]
    if grad_output.size == 0 or H == 0 or W == 0:
        return None                     # the reference's own early answer
    sampling_ratio = int(params["sampling_ratio"])
    if sampling_ratio > 0:
        check_sample_points("deform_roi_pool", float(R) * PH * PW * float(sampling_ratio) ** 2)
    if grad_output.dtype != features.dtype:         # one pixel type per loop: both read as float64
        grad_output, features = widen.to_float64(grad_output), widen.to_float64(features)
    function = _loop(features.dtype.itemsize)
    if function is None:
        return None
    pixels, grads = np.ascontiguousarray(features), np.ascontiguousarray(grad_output)
    corners = np.ascontiguousarray(rois, dtype=np.float64)
    shifts = None if offset is None else np.ascontiguousarray(offset, dtype=np.float64)
    grad_input = np.zeros((N, H, W, C))
    grad_offset = np.zeros((R, 2, PH, PW))
    points = ctypes.c_double(0.0)
    work = np.empty(3 * C)
    status = function(native.address(pixels), native.address(grads), N, H, W, C, native.address(corners), R,
                      None if shifts is None else native.address(shifts), PH, PW, float(params["spatial_scale"]),
                      float(params["gamma"]), sampling_ratio, reference.samples_per_chunk(C),
                      float(MAX_SAMPLE_POINTS), native.address(grad_input), native.address(grad_offset),
                      ctypes.addressof(points), native.address(work))
    if status == _OVER_THE_LIMIT:
        check_sample_points("deform_roi_pool", points.value)
    if status != 0:
        return None
    return {"grad_input": grad_input, "grad_offset": grad_offset}
