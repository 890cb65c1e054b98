"""deform_roi_pool_forward's mmcv emulation as a compiled loop (deform_roi_pool_mmcv_kernel.c, gen.native).

The operations of gen.kernels.deform_roi_pool.mmcv_emulation's forward, element by element and in its
order: each output element (roi, ph, pw, c) sums its bin's samples in (iy, ix) order with one rounding to
T per addition and divides by the count at the end; the same fusions (ScalarT.mac: fmaf for float, two
roundings for half) and the GPU's canonical NaN (../shared/mmcv_half.h).  tests/test_compiled_mmcv.py
compares the two bit for bit on random and boundary inputs of both dtypes.  numpy's way costs a few
hundred numpy calls per chunk of rois (round_to_half and ScalarT.mac on small arrays: the doc's small
case took 11.7x mlu-ops' CPU loop); the loop is one call.

numpy runs where there is no compiler (or OPCASE_NO_CC), for inputs the loop does not take, and where
it decides: a batch index outside the inputs (numpy raises).  A bin of more samples than numpy's
emulation takes (gen.kernels.shared.reference.check_emulated_steps, per chunk of rois as numpy pools
them) raises its ValueError here as there, before any sample is added.
"""
from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np

from gen import native
from gen.kernels.shared import reference

_SOURCE = Path(__file__).with_name("deform_roi_pool_mmcv_kernel.c")
_P, _L, _D, _I = ctypes.c_void_p, ctypes.c_long, ctypes.c_double, ctypes.c_int
_ARGTYPES = [_P, _L, _L, _L, _L, _P, _L, _P, _L, _L, _D, _D, _L, _I, _L, _D, _P, _P]
_T = (np.dtype(np.float16), np.dtype(np.float32))
_NUMPY_DECIDES, _STEPS_OVER = 1, 2          # the C loop's statuses besides 0


def _loop():
    """deform_roi_pool_forward_mmcv of the compiled library, or None (no compiler, OPCASE_NO_CC)."""
    return native.function(_SOURCE, "deform_roi_pool_forward_mmcv", _ARGTYPES, ctypes.c_int)


def takes(features, rois, offset, PH: int, PW: int) -> bool:
    """Whether the loops take these arrays: a T map [N, H, W, C], float rois [R, 5], float offsets
    [R, 2, PH, PW] or none (the backward's loop asks too, besides its grad_output)."""
    if not (isinstance(features, np.ndarray) and isinstance(rois, np.ndarray)
            and (offset is None or isinstance(offset, np.ndarray))):
        return False
    if features.ndim != 4 or features.dtype not in _T:
        return False
    R = rois.shape[0] if rois.ndim == 2 else -1
    if rois.shape != (R, 5) or rois.dtype.kind != "f":
        return False
    return offset is None or (offset.shape == (R, 2, PH, PW) and offset.dtype.kind == "f")


def ready(inputs: dict, params: dict, loop, also=None) -> tuple | None:
    """(loop(), input, rois, offset, PH, PW) where the loops take these inputs (takes, and also(input, PH, PW)
    where given) and loop() gives a built function; else None: numpy runs."""
    features, rois, offset = inputs["input"], inputs["rois"], inputs.get("offset")
    PH, PW = int(params["pooled_height"]), int(params["pooled_width"])
    if not takes(features, rois, offset, PH, PW) or (also is not None and not also(features, PH, PW)):
        return None
    function = loop()
    return None if function is None else (function, features, rois, offset, PH, PW)


def carriers(features, rois, offset) -> tuple:
    """What the loops read: the map in T (float16 bits or float); rois and offsets, used in float32 (mul_add),
    as float32 (offsets None where there are none)."""
    return (np.ascontiguousarray(features), np.ascontiguousarray(rois, dtype=np.float32),
            None if offset is None else np.ascontiguousarray(offset, dtype=np.float32))


def deform_roi_pool_forward(inputs: dict, params: dict, chunk_elements: int) -> dict | None:
    """{output [R, PH, PW, C]} in T with the GPU's NaN, as mmcv_emulation.deform_roi_pool_forward returns it
    (chunk_elements: its _CHUNK_ELEMENTS, by which it pools rois and so bounds their grids), or None where
    numpy must run.  Raises check_emulated_steps' ValueError where numpy would."""
    arrays = ready(inputs, params, _loop)
    if arrays is None:
        return None
    function, features, rois, offset, PH, PW = arrays
    N, H, W, C = features.shape
    R = rois.shape[0]
    pixels, corners, shifts = carriers(features, rois, offset)
    output = np.empty((R, PH, PW, C), dtype=features.dtype)
    refused = ctypes.c_double(-1.0)
    status = function(native.address(pixels), N, H, W, C, native.address(corners), R,
                      None if shifts is None else native.address(shifts), PH, PW,
                      float(params["spatial_scale"]), float(params["gamma"]), int(params["sampling_ratio"]),
                      int(features.dtype == _T[0]), max(1, chunk_elements // max(1, PH * PW * C)),
                      float(reference.MAX_EMULATED_STEPS), ctypes.byref(refused), native.address(output))
    if status == _STEPS_OVER:
        reference.check_emulated_steps("deform_roi_pool_forward", refused.value)
    return {"output": output} if status == 0 else None
