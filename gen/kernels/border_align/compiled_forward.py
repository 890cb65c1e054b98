"""border_align forward's float64 golden as a compiled loop (border_align_forward_kernel.c, gen.native).

The same operations in the same order as gen.kernels.border_align.reference.forward's numpy path, the same bits
(tests/test_native_goldens.py checks it); numpy runs where there is no compiler, for other compute
dtypes or inputs the loop does not take, and where an output is NaN (which NaN comes out is numpy's
choice).  The loop computes each border's point geometry once for all its channels, where numpy's
path pays per point a round of array calls: a small case costs what its arithmetic costs.  Up to 16
channels it takes four borders at once, one per vector lane, with selects for the clamp, snap and maximum
(the C file says why).
"""
from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np

from gen import native, widen

_SOURCE = Path(__file__).with_name("border_align_forward_kernel.c")
_FLOATS = (np.float16, np.float32, np.float64)


def _loop():
    """border_align_forward of the compiled library, or None (no compiler, OPCASE_NO_CC)."""
    return native.function(_SOURCE, "border_align_forward", [ctypes.c_void_p] * 2 + [ctypes.c_long] * 6 + [ctypes.c_void_p] * 2, ctypes.c_int)


def forward(features: np.ndarray, boxes: np.ndarray, pool_size: int, compute_dtype):
    """(output [N, K, 4, C] float64, argmax_idx int32) from the compiled loop, or None where numpy must run."""
    if np.dtype(compute_dtype) != np.float64 or features.ndim != 4 or boxes.ndim != 3:
        return None
    N, H, W, C4 = features.shape
    K = boxes.shape[1]
    if (C4 % 4 or boxes.shape != (N, K, 4) or features.dtype not in _FLOATS or boxes.dtype not in _FLOATS
            or not 1 <= pool_size < 1 << 30 or H == 0 or W == 0):
        return None
    function = _loop()
    if function is None:
        return None
    image = widen.to_float64(np.ascontiguousarray(features))
    corners = widen.to_float64(np.ascontiguousarray(boxes))
    output = np.empty((N, K, 4, C4 // 4))
    argmax_idx = np.empty(output.shape, dtype=np.int32)
    status = function(native.address(image), native.address(corners), N, H, W, K, C4 // 4, pool_size,
                      native.address(output), native.address(argmax_idx))
    if status != 0 or (output.size and np.isnan(output.min())):
        return None
    return output, argmax_idx
