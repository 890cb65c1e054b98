"""deform_roi_pool_backward's mmcv emulation as a compiled loop (deform_roi_pool_mmcv_kernel.c, gen.native).

The operations of gen.kernels.deform_roi_pool.mmcv_emulation_backward, element by element, and its
atomicAdds in its order (block by block, then sample step, corner and lane; or thread by thread): the same
bits once NaNs are the GPU's canonical one, as the emulation's outputs are (tests/test_compiled_mmcv.py
compares the two on random and boundary inputs of both dtypes).  numpy's way costs a few hundred numpy calls
a chunk (about 2 ms on the doc's one-roi case, over 400x mlu-ops' CPU loop); the loop is one call (0.03 ms).
numpy runs where there is no compiler (or OPCASE_NO_CC), for inputs the loop does not take, and where the C
loop says numpy decides: a batch index outside the inputs (numpy raises) or more sample slots than numpy's
arrays could hold.
"""
from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np

from gen import native
from gen.kernels.deform_roi_pool import compiled_mmcv_forward

_SOURCE = Path(__file__).with_name("deform_roi_pool_mmcv_kernel.c")
_P, _L, _D, _I = ctypes.c_void_p, ctypes.c_long, ctypes.c_double, ctypes.c_int
_ARGTYPES = [_P, _P, _L, _L, _L, _L, _P, _L, _P, _L, _L, _D, _D, _L, _I, _I, _D, _P, _P]
_T = (np.dtype(np.float16), np.dtype(np.float32))
# Past this many sample slots (blocks x their largest grid's steps x 512 lanes) numpy runs, as before.
MAX_SLOTS = float(1 << 32)


def _loop():
    """deform_roi_pool_backward_mmcv of the compiled library, or None (no compiler, OPCASE_NO_CC)."""
    return native.function(_SOURCE, "deform_roi_pool_backward_mmcv", _ARGTYPES, ctypes.c_int)


def deform_roi_pool_backward(inputs: dict, params: dict, thread_by_thread: bool) -> dict | None:
    """{grad_input [N, H, W, C], grad_offset [R, 2, PH, PW]} in T with the GPU's NaN, as
    mmcv_emulation_backward.deform_roi_pool_backward returns them, or None where numpy must run: where the
    forward's loop would (compiled_mmcv_forward.ready) or grad_output is no [R, PH, PW, C] array in T."""
    grad_output = inputs["grad_output"]

    def fits(features, PH: int, PW: int) -> bool:
        return (isinstance(grad_output, np.ndarray) and grad_output.dtype == features.dtype
                and grad_output.shape == (inputs["rois"].shape[0], PH, PW, features.shape[3]))
    arrays = compiled_mmcv_forward.ready(inputs, params, _loop, fits)
    if arrays is None:
        return None
    function, features, rois, offset, PH, PW = arrays
    N, H, W, C = features.shape
    R = rois.shape[0]
    # grad_output is read in T, as the map (compiled_mmcv_forward.carriers).
    grads = np.ascontiguousarray(grad_output)
    pixels, corners, shifts = compiled_mmcv_forward.carriers(features, rois, offset)
    grad_input = np.empty((N, H, W, C), dtype=features.dtype)
    grad_offset = np.empty((R, 2, PH, PW), dtype=features.dtype)
    status = function(native.address(grads), native.address(pixels), N, H, W, C, native.address(corners), R,
                      None if shifts is None else native.address(shifts), PH, PW, float(params["spatial_scale"]),
                      float(params["gamma"]), int(params["sampling_ratio"]), int(features.dtype == _T[0]),
                      int(thread_by_thread), MAX_SLOTS, native.address(grad_input), native.address(grad_offset))
    if status != 0:
        return None
    return {"grad_input": grad_input, "grad_offset": grad_offset}
