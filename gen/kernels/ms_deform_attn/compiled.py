"""ms_deform_attn_forward's float64 golden as a compiled loop (ms_deform_attn_forward_kernel.c, gen.native).

The same operations, in the same order per output element, as gen.kernels.ms_deform_attn.reference.forward's
numpy path: the same bits (tests/test_compiled_forward_goldens.py checks it).  numpy runs where there is
no compiler, for other compute dtypes, and where an output is NaN (which NaN comes out is numpy's
choice).  The loop computes each point's geometry once for all channels, where numpy's path gathers
[rows, P, C] arrays per neighbour.
"""
from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np

from gen import native, widen

_SOURCE = Path(__file__).with_name("ms_deform_attn_forward_kernel.c")
_FLOATS = (np.float16, np.float32, np.float64)


def _loop(name: str = "ms_deform_attn_forward"):
    """The compiled loop `name` (the float64 or the float32-reading one), or None (no compiler, OPCASE_NO_CC)."""
    return native.function(_SOURCE, name, [ctypes.c_void_p] * 5 + [ctypes.c_long] * 7 + [ctypes.c_void_p], None)


def forward(value, shapes, starts, loc, attn, out, compute_dtype) -> bool:
    """out [N, Q, M, C] (float64 zeros) filled by the compiled loop; False, out zeros again, where numpy must
    run.  value [N, K', M, C] (made readable), loc [N, Q, M, L, P, 2], attn [N, Q, M, L, P]; shapes and
    starts [L, 2] / [L] int64, checked against value by the caller."""
    if (np.dtype(compute_dtype) != np.float64 or out.dtype != np.float64 or not out.flags.c_contiguous
            or any(a.dtype not in _FLOATS for a in (value, loc, attn))):
        return False
    # float32 inputs are read as they are (exactly widened in the loop): no float64 copy of data_value.
    in_place = all(a.dtype == np.float32 for a in (value, loc, attn))
    function = _loop("ms_deform_attn_forward_float32" if in_place else "ms_deform_attn_forward")
    if function is None:
        return False
    N, Q, M, C = out.shape
    L, P = attn.shape[3], attn.shape[4]
    if loc.shape != (N, Q, M, L, P, 2) or value.shape[0] != N or value.shape[2:] != (M, C):
        return False
    arrays = [np.ascontiguousarray(a) if in_place else widen.to_float64(np.ascontiguousarray(a))
              for a in (value, loc, attn)]
    geometry = [np.ascontiguousarray(a, dtype=np.int64) for a in (shapes, starts)]
    at = native.address
    function(at(arrays[0]), at(geometry[0]), at(geometry[1]), at(arrays[1]), at(arrays[2]), N, value.shape[1], M, C,
             L, Q, P, at(out))
    if np.isnan(out.min()):
        out[...] = 0
        return False
    return True
