"""carafe's mmcv emulation as compiled loops (carafe_mmcv_kernel.c, gen.native).

The operations of gen.kernels.carafe.mmcv_emulation, element by element, each sum in its order: the same
bits, NaNs the GPU's canonical one as the emulation's are (tests/test_compiled_mmcv.py compares the
two on random and boundary inputs of both dtypes).  numpy's way costs a few numpy calls per tap and block
(0.5 ms on the doc's 3 x 3 mluops_case_0, over 200x mlu-ops' CPU loop); the loop is one call, for the
whole kernel or for the units gen.sampled asks for.  numpy runs where there is no compiler (or
OPCASE_NO_CC) and for inputs the loop does not take, so that their errors stay numpy's.
"""
from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np

from gen import native

_SOURCE = Path(__file__).with_name("carafe_mmcv_kernel.c")
_P, _L, _I = ctypes.c_void_p, ctypes.c_long, ctypes.c_int
_FORWARD_ARGTYPES = [_P, _P, _L, _L, _L, _L, _L, _L, _L, _I, _P, _L, _P]
_BACKWARD_ARGTYPES = [_P, _P, _P, _L, _L, _L, _L, _L, _L, _L, _I, _P, _L, _P, _P]
_T = (np.dtype(np.float16), np.dtype(np.float32))


def _function(name: str, argtypes: list):
    """The compiled library's `name`, or None (no compiler, OPCASE_NO_CC)."""
    return native.function(_SOURCE, name, argtypes, ctypes.c_int)


def _shapes(arrays: dict, names: tuple, k: int, G: int, s: int):
    """(N, H, W, C) where the loop takes these arrays (ndarrays of one T, input [N, H, W, C], mask
    [N, Hs, Ws, G k k], grad_output [N, Hs, Ws, C], C a multiple of G >= 1); else None: numpy runs and
    raises or decides.  (Plain loops: this runs once per call of a kernel of a few microseconds.)"""
    image = arrays.get("input")
    if not isinstance(image, np.ndarray) or image.ndim != 4 or image.dtype not in _T or min(k, G, s) < 1:
        return None
    N, H, W, C = image.shape
    if C % G:
        return None
    for name in names[1:]:
        value = arrays.get(name)
        wanted = (N, H * s, W * s, G * k * k if name == "mask" else C)
        if not isinstance(value, np.ndarray) or value.dtype != image.dtype or value.shape != wanted:
            return None
    return N, H, W, C


def _units(units, N: int, H: int, W: int):
    """The input pixels as the C loop reads them (int64, in [0, N H W)), or None where numpy must index."""
    units = np.asarray(units)
    if units.ndim != 1 or units.dtype.kind not in "iu" or (units.size and not (0 <= units.min() and
                                                                               units.max() < N * H * W)):
        return None
    return np.ascontiguousarray(units, dtype=np.int64)


def forward(inputs: dict, k: int, G: int, s: int, units=None):
    """mmcv_emulation.carafe_forward's output (units None: [N, Hs, Ws, C]) or its units' ([units, s, s, C])
    in T with the GPU's NaN, or None where numpy must run."""
    shape = _shapes(inputs, ("input", "mask"), k, G, s)
    function = _function("carafe_forward_mmcv", _FORWARD_ARGTYPES) if shape is not None else None
    if function is None:
        return None
    N, H, W, C = shape
    image, mask = inputs["input"], inputs["mask"]
    if units is not None:
        units = _units(units, N, H, W)
        # A unit reads a few pixels of what may be a map of many GB: only a contiguous one is taken as it is.
        # No units: numpy's reshape of its empty list of blocks raises, and still does.
        if units is None or not (image.flags.c_contiguous and mask.flags.c_contiguous) or not units.size:
            return None
    image, mask = np.ascontiguousarray(image), np.ascontiguousarray(mask)
    if units is None:
        out = np.empty((N, H * s, W * s, C), image.dtype)
        count, pointer = N * H * W, None
    else:
        out = np.empty((units.size, s, s, C), image.dtype)
        count, pointer = units.size, native.address(units)
    status = function(native.address(image), native.address(mask), N, H, W, C, G, k, s, int(image.dtype == _T[0]),
                      pointer, count, native.address(out))
    return out if status == 0 else None


def backward(inputs: dict, k: int, G: int, s: int, units=None):
    """mmcv_emulation.carafe_backward's (grad_input, grad_mask) (units None: [N, H, W, C] and [N, Hs, Ws, G k k])
    or its units' ([units, C] and [units, s, s, G k k]) in T with the GPU's NaN, or None where numpy must run."""
    names = ("input", "mask", "grad_output")
    shape = _shapes(inputs, names, k, G, s)
    function = _function("carafe_backward_mmcv", _BACKWARD_ARGTYPES) if shape is not None else None
    if function is None:
        return None
    N, H, W, C = shape
    arrays = [inputs[name] for name in names]
    if units is not None:
        units = _units(units, N, H, W)
        if units is None or not all(a.flags.c_contiguous for a in arrays):    # as forward's
            return None
    image, mask, grad_output = (np.ascontiguousarray(a) for a in arrays)
    if units is None:
        grad_input, grad_mask = np.empty((N, H, W, C), image.dtype), np.empty(mask.shape, image.dtype)
        count, pointer = N * H * W, None
    else:
        grad_input = np.empty((units.size, C), image.dtype)
        grad_mask = np.empty((units.size, s, s, G * k * k), image.dtype)
        count, pointer = units.size, native.address(units)
    status = function(native.address(image), native.address(mask), native.address(grad_output), N, H, W, C, G, k, s,
                      int(image.dtype == _T[0]), pointer, count, native.address(grad_input), native.address(grad_mask))
    return (grad_input, grad_mask) if status == 0 else None
