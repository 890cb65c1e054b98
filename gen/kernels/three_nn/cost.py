"""The work of a three_nn case beyond its bytes (gen.kernels.shared.cost's units): every
unknown point's distance to every known point, three coordinates each, and the three nearest
kept, by the golden and the emulated baseline.  Its cases are small in bytes and long in
arithmetic: B x N x M distances for a few MB of points."""
from __future__ import annotations

from gen.kernels.shared.cost import emulated

_OPS_PER_DISTANCE = 12   # three differences, three squares, two sums, the comparisons with the three kept


def three_nn_forward(dims: dict, params: dict, dtype: str, baseline: str | None) -> float:
    ops = float(_OPS_PER_DISTANCE) * int(dims["B"]) * int(dims["N"]) * int(dims["M"])
    return ops + (emulated(ops, dtype) if baseline else 0.0)
