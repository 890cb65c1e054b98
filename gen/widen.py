"""float16 and float32 arrays widened to float64 by a compiled loop (gen/widen.c), numpy's bits.

numpy widens float16 one element at a time in software (6-8 ns an element here, as long as a float64
golden's multiply-adds on that element); F16C does it in a fraction of that.  Widening is exact, so
the values are numpy's; NaNs keep numpy's payload too (see widen.c).  Without a C compiler, or with
OPCASE_NO_CC=1, numpy widens (gen/native.py).
"""
from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np

from gen import native

_SOURCE = Path(__file__).with_name("widen.c")
# Below this many elements numpy's own cast costs less than calling the compiled loop (microseconds).
_SMALL = 4096


def _compiled(name: str = "widen_to_double"):
    library = native.load(_SOURCE)
    if library is None:
        return None
    function = getattr(library, name)
    if function.argtypes is None:
        function.restype = None
        longs = 1 if name == "widen_to_double" else 6       # after (source, itemsize, target)
        function.argtypes = [ctypes.c_void_p, ctypes.c_long, ctypes.c_void_p] + [ctypes.c_long] * longs
    return function


def _address(array: np.ndarray) -> int:
    return array.__array_interface__["data"][0]


def to_float64(source: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """`source` as a C-ordered float64 array: `out` (C-ordered float64, source's shape) where given, else a
    new array, or `source` itself where it is one already."""
    if out is None:
        if source.dtype == np.float64 and source.flags.c_contiguous:
            return source
        out = np.empty(source.shape, dtype=np.float64)
    assert out.dtype == np.float64 and out.flags.c_contiguous and out.shape == source.shape
    compiled = (source.size >= _SMALL and source.dtype in (np.float16, np.float32) and source.flags.c_contiguous)
    function = _compiled() if compiled else None
    if function is None:
        np.copyto(out, source)
    else:
        function(_address(source), source.itemsize, _address(out), source.size)
    return out


def blocked_layout(rows: int, pixels: int, C: int, B: int) -> tuple[int, int]:
    """(row, block) strides in elements of to_float64_blocked's layout: rows and blocks a little more than
    their size apart where that is a multiple of 4 KB, so that they do not all meet on the same L1 sets."""
    def spread(n: int) -> int:
        return n + 8 if n % 512 == 0 else n
    row = spread(pixels * B)
    return row, spread(rows * row)


def to_float64_blocked(source: np.ndarray, B: int, buffer: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """([rows, pixels, C] `source` widened to float64 in blocks of B channels (B divides C): a view
    [C/B, rows, pixels, B] of the flat buffer, and that buffer (`buffer` where large enough, else a new one).

    A compiled loop that reads a window of pixels a few channels at a time finds them close together in
    this layout: in an image's own layout a window's pixels are C elements apart (2 KB at C = 256), so a
    window of 10 x 10 pixels spans 60-odd pages and meets on few L1 sets."""
    rows, pixels, C = source.shape
    row, block = blocked_layout(rows, pixels, C, B)
    size = (C // B) * block if source.size else 1
    if buffer is None or buffer.size < size:
        buffer = np.empty(size, dtype=np.float64)
    view = np.lib.stride_tricks.as_strided(buffer, shape=(C // B, rows, pixels, B),
                                           strides=(block * 8, row * 8, B * 8, 8))
    function = _compiled("widen_to_double_blocked") if source.flags.c_contiguous else None
    if function is None or source.dtype not in (np.float16, np.float32, np.float64):
        np.copyto(view, source.reshape(rows, pixels, C // B, B).transpose(2, 0, 1, 3))
    else:
        function(_address(source), source.itemsize, _address(buffer), rows, pixels, C, B, row, block)
    return view, buffer
