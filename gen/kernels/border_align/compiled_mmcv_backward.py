"""border_align_backward's mmcv emulation as a compiled loop (border_align_backward_mmcv_kernel.c, gen.native).

The operations of gen.kernels.border_align.mmcv_emulation, element by element, and its atomicAdds in its
order (block by block, then corner, border and lane; or thread by thread): the same bits, NaNs the GPU's
canonical one as the emulation's are (tests/test_compiled_mmcv.py compares the two on random and boundary
inputs of both dtypes).  numpy's way is some forty numpy calls whatever the size (0.3-0.5 ms on the doc's
example, over 100x mlu-ops' CPU loop); the loop is one call.  numpy runs where there is no compiler (or
OPCASE_NO_CC) and for inputs the loop does not take, so that their errors stay numpy's.
"""
from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np

from gen import native

_SOURCE = Path(__file__).with_name("border_align_backward_mmcv_kernel.c")
_P, _L, _I = ctypes.c_void_p, ctypes.c_long, ctypes.c_int
_ARGTYPES = [_P, _P, _P, _L, _L, _L, _L, _L, _L, _I, _I, _P]
_T = (np.dtype(np.float16), np.dtype(np.float32))
BORDERS = 4


def _loop():
    """border_align_backward_mmcv of the compiled library, or None (no compiler, OPCASE_NO_CC)."""
    return native.function(_SOURCE, "border_align_backward_mmcv", _ARGTYPES, ctypes.c_int)


def border_align_backward(grad_output, boxes, argmax_idx, pool_size: int, shape, thread_by_thread: bool):
    """grad_input [N, H, W, 4C] in T with the GPU's NaN, as mmcv_emulation.border_align_backward returns it
    (shape = out_shapes' (N, H, W, 4C)), or None where numpy must run."""
    if not (isinstance(grad_output, np.ndarray) and isinstance(boxes, np.ndarray)
            and isinstance(argmax_idx, np.ndarray)):
        return None
    N, H, W, C4 = shape
    K = boxes.shape[1] if boxes.ndim == 3 else -1
    C = C4 // BORDERS
    if (grad_output.dtype not in _T or boxes.dtype.kind != "f" or argmax_idx.dtype != np.int32
            or C4 != BORDERS * C or min(N, H, W, C4) < 0 or boxes.shape != (N, K, BORDERS)
            or grad_output.shape != (N, K, BORDERS, C) or argmax_idx.shape != (N, K, BORDERS, C)):
        return None
    function = _loop()
    if function is None:
        return None
    grads = np.ascontiguousarray(grad_output)
    corners = np.ascontiguousarray(boxes, dtype=grad_output.dtype)      # boxes.astype(T), as the emulation's
    indices = np.ascontiguousarray(argmax_idx)
    grad_input = np.empty((N, H, W, C4), dtype=grad_output.dtype)
    status = function(native.address(grads), native.address(corners), native.address(indices), N, K, C, H, W, pool_size,
                      int(grad_output.dtype == _T[0]), int(thread_by_thread), native.address(grad_input))
    return grad_input if status == 0 else None
