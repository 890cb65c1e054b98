"""The work of a three_nn case beyond its bytes (gen.kernels.shared.cost's units): every
unknown point's distance to every known point, three coordinates each, and the three nearest
kept, by the golden and the emulated baseline; then the golden's near-tie pass
(reference.idx_near_ties) computes the distances again and, for each row whose nearest four
lie within rounding of each other, steps through that row's answers in Python.  The passes go
by chunks of unknown points sized for the cache; a chunk of one point against millions of known
points runs from memory.  Its cases are
small in bytes and long in arithmetic: B x N x M distances for a few MB of points."""
from __future__ import annotations

import numpy as np

from gen.kernels.shared.cost import LOOP_STEP, OUT_OF_CACHE, emulated

_CHUNK_ELEMENTS = 1 << 18   # the distances' chunk of the reference and the emulation (reference._CHUNK_ELEMENTS)

_OPS_PER_DISTANCE = 12   # three differences, three squares, two sums, the comparisons with the three kept
# The share of rows with a near tie is about this many times the dtype's epsilon (measured on
# uniform points, with 32 and with 4096 known points: 12 % of float16 rows, none of float32's).
_TIED_ROWS_PER_EPS = 120
_STEPS_PER_TIED_ROW = 10  # reference._row_answers: a row's distances again, each slot's choices


def three_nn_forward(dims: dict, params: dict, dtype: str, baseline: str | None) -> float:
    rows = int(dims["B"]) * int(dims["N"])
    ops = float(_OPS_PER_DISTANCE) * rows * int(dims["M"])
    if int(dims["B"]) * int(dims["M"]) > _CHUNK_ELEMENTS:   # one unknown point's distances overflow a chunk
        ops *= OUT_OF_CACHE
    tied = rows * min(1.0, _TIED_ROWS_PER_EPS * float(np.finfo(dtype).eps)) if int(dims["M"]) else 0.0
    return 2 * ops + (emulated(ops, dtype) if baseline else 0.0) + tied * _STEPS_PER_TIED_ROW * LOOP_STEP
