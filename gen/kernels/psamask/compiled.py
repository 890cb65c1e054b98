"""psamask's COLLECT (psa_type 0) as a compiled loop (psamask_collect_kernel.c, gen.native).

COLLECT moves each position's mask window as a 2-D block; numpy's path pays a round of Python per
position (H*W of them), the loop pays a memcpy per window row.  Only values move, so both give the
same bits for every dtype (tests/test_compiled_forward_goldens.py checks it); numpy runs where there
is no compiler.
"""
from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np

from gen import native

_SOURCE = Path(__file__).with_name("psamask_collect_kernel.c")


def _loop():
    return native.function(_SOURCE, "psamask_collect", [ctypes.c_void_p] * 2 + [ctypes.c_long] * 6 + [ctypes.c_int], None)


def collect(source: np.ndarray, target: np.ndarray, hm: int, wm: int, backward: bool) -> bool:
    """target (zeros, C-ordered, [N, H, W, H*W] forward or [N, H, W, hm*wm] backward) filled from source;
    False, target untouched, where numpy must run."""
    if source.dtype != target.dtype or not target.flags.c_contiguous or source.ndim != 4 or target.ndim != 4:
        return False
    N, H, W, _ = target.shape
    mask, mapped = (source, target) if not backward else (target, source)
    if (source.shape[:3] != (N, H, W) or mask.shape[3] != hm * wm or mapped.shape[3] != H * W
            or hm < 1 or wm < 1):
        return False              # numpy's path says what is wrong
    function = _loop()
    if function is None:
        return False
    source = np.ascontiguousarray(source)
    function(source.ctypes.data, target.ctypes.data, N, H, W, hm, wm, target.itemsize, int(backward))
    return True
