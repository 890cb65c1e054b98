"""The work of a three_nn case beyond its bytes (gen.kernels.shared.cost's units): every
unknown point's distance to every known point, three coordinates each, and the three nearest
kept, three times over.  The float64 golden is a compiled loop (compiled.py, vectorized over
unknown points); the mmcv baseline is a compiled loop too (compiled_mmcv.py), one distance at a
time, whose every operator is rounded as mmcv's T rounds it: float32's two fused multiply-adds
are libm calls, float16's eight roundings to half are some fourteen operations each.  Then the
golden's near-tie pass (reference.idx_near_ties) computes the distances again in numpy, by
chunks of unknown points sized for the cache (a chunk of one point against millions of known
points runs from memory, and so do the compiled loops), with its four-nearest search, and for
each row whose nearest four lie within rounding of each other computes that row's distances
once more, sorts them and steps through its answers in Python.  Its cases are small in bytes
and long in arithmetic: B x N x M distances for a few MB of points."""
from __future__ import annotations

import math

import numpy as np

from gen.kernels.shared.cost import (COMPILED_FMA_OPS, COMPILED_HALF_ROUNDING_OPS, COMPILED_LANES, COMPILED_OP,
                                     LOOP_STEP, OUT_OF_CACHE)

_CHUNK_ELEMENTS = 1 << 18   # the distances' chunk of the near-tie pass (reference._CHUNK_ELEMENTS)

_DISTANCE_OPS = 8        # three differences, three squares, two sums
_KEPT_OPS = 3            # the compiled loops' comparisons with the three kept
# reference.nearest over the near-tie pass's distances: the finite test and its fill, then an
# argmin pass per slot of the nearest four.
_NEAREST_OPS = 2 + 4
# The baseline's compiled operations per distance besides its roundings: three differences, the
# products and sums, the comparisons with the three kept and the conversion to double.
_BASELINE_OPS = {"float32": 8 + 2 * COMPILED_FMA_OPS, "float16": 12 + 8 * COMPILED_HALF_ROUNDING_OPS}
# The share of rows with a near tie is about this many times the dtype's epsilon (measured on
# uniform points, with 32 and with 4096 known points: 12 % of float16 rows, none of float32's).
_TIED_ROWS_PER_EPS = 120
_STEPS_PER_TIED_ROW = 10  # reference._row_answers: each slot's choices, in Python


def three_nn_forward(dims: dict, params: dict, dtype: str, baseline: str | None) -> float:
    rows, M = int(dims["B"]) * int(dims["N"]), int(dims["M"])
    distances = float(rows) * M
    golden = distances * (_DISTANCE_OPS + _KEPT_OPS) * COMPILED_OP / COMPILED_LANES
    tie_pass = distances * (_DISTANCE_OPS + _NEAREST_OPS)
    mmcv = distances * _BASELINE_OPS.get(dtype, _BASELINE_OPS["float32"]) * COMPILED_OP if baseline else 0.0
    if int(dims["B"]) * M > _CHUNK_ELEMENTS:
        # One unknown point's distances overflow a chunk: every pass streams the known points
        # from memory for each unknown point, the compiled loops as much as numpy's.
        golden, tie_pass, mmcv = golden * OUT_OF_CACHE, tie_pass * OUT_OF_CACHE, mmcv * OUT_OF_CACHE
    tied = rows * min(1.0, _TIED_ROWS_PER_EPS * float(np.finfo(dtype).eps)) if M else 0.0
    per_tied_row = M * (_DISTANCE_OPS + math.log2(max(M, 2))) + _STEPS_PER_TIED_ROW * LOOP_STEP   # again, and sorted
    return golden + tie_pass + tied * per_tied_row + mmcv
