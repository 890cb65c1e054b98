"""three_nn_forward's float64 golden as a compiled loop (three_nn_forward_kernel.c, gen.native).

The same distances, computed by the same operations in the same order, and the same selection as
gen.kernels.three_nn.reference.forward's numpy path: the same bits (tests/test_compiled_forward_goldens.py
checks it).  numpy runs where there is no compiler and for other compute dtypes.  The loop takes eight
unknown points at once, one per vector lane, and fills their slots with selects, not branches (the C
file says why), where numpy's path builds and searches [rows, M] arrays.
"""
from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np

from gen import native, widen

_SOURCE = Path(__file__).with_name("three_nn_forward_kernel.c")
_FLOATS = (np.float16, np.float32, np.float64)


def _loop():
    """three_nn_forward of the compiled library, or None (no compiler, OPCASE_NO_CC)."""
    return native.function(_SOURCE, "three_nn_forward", [ctypes.c_void_p] * 2 + [ctypes.c_long] * 3 + [ctypes.c_void_p] * 2, ctypes.c_int)


def forward(unknown: np.ndarray, known: np.ndarray, compute_dtype):
    """(dist2 [B, N, 3] float64, idx [B, N, 3] int32) from the compiled loop, or None where numpy must run."""
    if (np.dtype(compute_dtype) != np.float64 or unknown.ndim != 3 or known.ndim != 3
            or unknown.shape[2] != 3 or known.shape[2] != 3 or known.shape[0] != unknown.shape[0]
            or unknown.dtype not in _FLOATS or known.dtype not in _FLOATS or known.shape[1] >= 1 << 31):
        return None
    function = _loop()
    if function is None:
        return None
    B, N, _ = unknown.shape
    M = known.shape[1]
    points = widen.to_float64(np.ascontiguousarray(unknown))
    references = widen.to_float64(np.ascontiguousarray(known))
    dist2 = np.empty((B, N, 3))
    idx = np.empty((B, N, 3), dtype=np.int32)
    at = native.address
    if function(at(points), at(references), B, N, M, at(dist2), at(idx)) != 0:
        return None
    return dist2, idx
