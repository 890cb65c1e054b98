"""psamask's index maps as compiled loops (psamask_collect_kernel.c, gen.native): COLLECT (psa_type 0) and
DISTRIBUTE (psa_type 1), forward and backward.

COLLECT moves each position's mask window as a 2-D block; numpy's path pays a round of Python per
position (H*W of them), the loop pays a memcpy per window row.  DISTRIBUTE is the transpose, which numpy
does through a scratch per map row; the loop writes each target row whole and reads across source rows.
Only values move, so both give the same bits for every dtype (tests/test_compiled_forward_goldens.py
checks it); numpy runs where there is no compiler.
"""
from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np

from gen import native

_SOURCE = Path(__file__).with_name("psamask_collect_kernel.c")
_ARGUMENTS = [ctypes.c_void_p] * 2 + [ctypes.c_long] * 6 + [ctypes.c_int]


def _loop(name: str):
    return native.function(_SOURCE, name, _ARGUMENTS, ctypes.c_int)


def _move(name: str, source: np.ndarray, target: np.ndarray, hm: int, wm: int, backward: bool) -> bool:
    if source.dtype != target.dtype or not target.flags.c_contiguous or source.ndim != 4 or target.ndim != 4:
        return False
    N, H, W, _ = target.shape
    mask, mapped = (source, target) if not backward else (target, source)
    if (source.shape[:3] != (N, H, W) or mask.shape[3] != hm * wm or mapped.shape[3] != H * W
            or hm < 1 or wm < 1):
        return False              # numpy's path says what is wrong
    function = _loop(name)
    if function is None:
        return False
    source = np.ascontiguousarray(source)
    return bool(function(native.address(source), native.address(target), N, H, W, hm, wm, target.itemsize,
                         int(backward)))


def collect(source: np.ndarray, target: np.ndarray, hm: int, wm: int, backward: bool) -> bool:
    """target (zeros, C-ordered, [N, H, W, H*W] forward or [N, H, W, hm*wm] backward) filled from source by
    COLLECT's map; False, target untouched, where numpy must run."""
    return _move("psamask_collect", source, target, hm, wm, backward)


def distribute(source: np.ndarray, target: np.ndarray, hm: int, wm: int, backward: bool) -> bool:
    """As collect, by DISTRIBUTE's map; False, target untouched, where numpy must run (no compiler, or an
    element size the loop has no copy for)."""
    return _move("psamask_distribute", source, target, hm, wm, backward)
