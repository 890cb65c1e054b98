"""three_nn_forward's mmcv emulation as a compiled loop (three_nn_mmcv_kernel.c, gen.native).

The distances in T by the operations of gen.kernels.three_nn.mmcv_emulation, in its order, and the
golden's selection (which that module's `nearest` also makes): the same bits (tests/test_native_goldens.py
compares the two on random and special values).  A small case's baseline was some 50 numpy calls of a few
elements each (100x mlu-ops' CPU loop on the doc's example), a network case's eight float16 roundings of
[B, rows, M] arrays; the loop is one call.  numpy runs where there is no compiler (or OPCASE_NO_CC) and
for inputs the loop does not take, so that their errors stay numpy's.
"""
from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np

from gen import native

_SOURCE = Path(__file__).with_name("three_nn_mmcv_kernel.c")
_T = (np.dtype(np.float16), np.dtype(np.float32))


def _loop():
    """three_nn_mmcv of the compiled library, or None (no compiler, OPCASE_NO_CC)."""
    return native.function(_SOURCE, "three_nn_mmcv",
                           [ctypes.c_void_p] * 2 + [ctypes.c_long] * 3 + [ctypes.c_int] + [ctypes.c_void_p] * 2,
                           ctypes.c_int)


def forward(unknown: np.ndarray, known: np.ndarray, is_half: bool):
    """(dist2 [B, N, 3] float32 carrier, idx [B, N, 3] int32) from the compiled loop, or None where numpy must run."""
    if (unknown.ndim != 3 or known.ndim != 3 or unknown.shape[2] != 3 or known.shape[2] != 3
            or known.shape[0] != unknown.shape[0] or unknown.dtype not in _T or known.dtype != unknown.dtype
            or known.shape[1] >= 1 << 31):
        return None
    function = _loop()
    if function is None:
        return None
    B, N, _ = unknown.shape
    points = np.ascontiguousarray(unknown, dtype=np.float32)
    references = np.ascontiguousarray(known, dtype=np.float32)
    dist2 = np.empty((B, N, 3), dtype=np.float32)
    idx = np.empty((B, N, 3), dtype=np.int32)
    if function(native.address(points), native.address(references), B, N, known.shape[1], int(is_half),
                native.address(dist2), native.address(idx)) != 0:
        return None                                 # no scratch memory for the loop: numpy's way
    return dist2, idx
