"""ms_deform_attn_forward's mmcv emulation as a compiled loop (ms_deform_attn_mmcv_kernel.c, gen.native).

The operations of gen.kernels.ms_deform_attn.mmcv_emulation, element by element and in its order: the
same bits once NaNs are the GPU's canonical one, as the emulation's outputs are (tests/test_compiled_mmcv.py
compares the two on random and special values).  numpy's way was some 30 numpy calls per level and point
(500x mlu-ops' CPU loop on the doc's small case); the loop is one call.  numpy runs where there is no
compiler (or OPCASE_NO_CC).
"""
from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np

from gen import native

_SOURCE = Path(__file__).with_name("ms_deform_attn_mmcv_kernel.c")


def _loop():
    """ms_deform_attn_mmcv of the compiled library, or None (no compiler, OPCASE_NO_CC)."""
    return native.function(_SOURCE, "ms_deform_attn_mmcv",
                           [ctypes.c_void_p] + [ctypes.c_long] * 4 + [ctypes.c_void_p] * 2 + [ctypes.c_long] * 2
                           + [ctypes.c_void_p] * 2 + [ctypes.c_long, ctypes.c_void_p])


def thread_sums(value, shapes, starts, loc, attn, Q: int, col) -> bool:
    """Sums every row's col (out's [rows, C] view, zeros) in place; False where numpy must run.
    value [N, K, M, C] float32 (readable), shapes [L, 2] and starts [L] int64, loc [rows, L, P, 2],
    attn [rows, L, P]."""
    function = _loop()
    if function is None or not col.flags.c_contiguous or col.dtype != np.float32:
        return False
    N, K, M, C = value.shape
    _, L, P, _ = loc.shape
    value = np.ascontiguousarray(value, dtype=np.float32)
    loc = np.ascontiguousarray(loc, dtype=np.float32)
    attn = np.ascontiguousarray(attn, dtype=np.float32)
    shapes = np.ascontiguousarray(shapes, dtype=np.int64)
    starts = np.ascontiguousarray(starts, dtype=np.int64)
    at = native.address
    function(at(value), N, K, M, C, at(shapes), at(starts), L, P, at(loc), at(attn), Q, at(col))
    return True
