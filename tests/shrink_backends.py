"""carafe_forward backends with a bug that fires only past a threshold, as real kernel bugs do,
for tests/test_shrink.py (loadable by worker processes as `shrink_backends:NAME`).

Each is the reference except where its bug fires, so the smallest case that still fails is
known: the threshold itself.
"""
from __future__ import annotations

import numpy as np

from harness.backends.builtin import reference
from gen.kernels.carafe.planted import carafe_forward

_reference = reference()
# Channels are processed in blocks of this many (three 32-lane vectors); the last, partial
# block is the buggy one.  No network case has a multiple of it: they all fail.
CHANNEL_BLOCK = 96
# Input maps taller than this are processed in row tiles; the last row falls off the last tile.
ROW_TILE = 8
# Windows of more taps than this are accumulated in half precision.
HALF_TAPS = 16


def _writable(array: np.ndarray) -> np.ndarray:
    """The reference's fresh output itself (no second copy of a multi-GB output), or a copy."""
    return array if array.flags.writeable and array.flags.owndata else array.copy()


def channel_tail(request):
    """Never writes the last, partial channel block: wrong when C > 96 and C % 96 != 0."""
    out = dict(_reference.run(request))
    channels = request.inputs["input"].shape[3]
    if channels > CHANNEL_BLOCK and channels % CHANNEL_BLOCK:
        out["output"] = _writable(out["output"])
        out["output"][..., channels // CHANNEL_BLOCK * CHANNEL_BLOCK:] = 0
    return out


def last_row(request):
    """Repeats the row before the last output row: wrong when the input has more than 8 rows."""
    out = dict(_reference.run(request))
    if request.inputs["input"].shape[1] > ROW_TILE:
        out["output"] = _writable(out["output"])
        out["output"][:, -1] = out["output"][:, -2]
    return out


def half_accumulation(request):
    """Accumulates in float16 when the window has more than 16 taps (kernel_size >= 5)."""
    k = int(request.params["kernel_size"])
    if k * k <= HALF_TAPS:
        return _reference.run(request)
    x, mask = request.inputs["input"], request.inputs["mask"]
    acc = carafe_forward(x, mask, k, int(request.params["group_size"]), int(request.params["scale_factor"]),
                         acc=np.float16)
    return {"output": acc.astype(request.outputs["output"].dtype)}
