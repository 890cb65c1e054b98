"""three_nn's test-side helpers: the planted copy's search in its first, plain form, the oracle
that tests/test_three_nn_planted.py holds the faster block search to, and the bench's "old"."""
from __future__ import annotations

import numpy as np

from gen.kernels.three_nn import planted


def sorted_nearest_three(u, points, order, tie):
    """gen/kernels/three_nn/planted.py's ``_nearest_three`` as it was before its block search: each
    row's whole row of distances sorted (a stable argsort), the first three taken; inf (and any index)
    in the slots past M.  The block search must give exactly these bits."""
    with np.errstate(invalid="ignore", over="ignore"):
        if order == "expanded":
            d = ((u * u).sum(axis=1)[:, None] - 2.0 * (u @ points.T)) + (points * points).sum(axis=1)[None, :]
            d = np.maximum(d, 0.0)
        else:
            s = (u[:, None, :] - points[None, :, :]) ** 2
            d = s[..., 0] + (s[..., 1] + s[..., 2]) if order == "yz_first" else (s[..., 0] + s[..., 1]) + s[..., 2]
    d = np.where(d.astype(np.float64) < 1e40, d.astype(np.float64), np.inf)
    scan = d[:, ::-1] if tie == "last" else d
    first = np.argsort(scan, axis=1, kind="stable")[:, :3]
    if tie == "last":
        first = len(points) - 1 - first
    found = np.full((len(u), 3), np.inf)
    idx = np.zeros((len(u), 3), dtype=np.int64)
    found[:, :first.shape[1]] = np.take_along_axis(d, first, axis=1)
    idx[:, :first.shape[1]] = first
    return found, idx


def sorted_three_nn(unknown, known, **knobs):
    """The planted copy (its knobs) with its first search in the block search's place."""
    block_search = planted._nearest_three
    planted._nearest_three = sorted_nearest_three
    try:
        return planted.three_nn(unknown, known, **knobs)
    finally:
        planted._nearest_three = block_search
