"""three_nn's test-side helpers: the planted copy's search in its first, plain form, the oracle
that tests/test_three_nn_planted.py holds the faster block search to, and the bench's "old"."""
from __future__ import annotations

import numpy as np

_ROWS_ELEMENTS = 1 << 21      # distances sorted at once


def sorted_three_nn(unknown, known, *, tie="first", known_batch="own", last_point=True, distance_dtype=np.float64,
                    sqrt=False, known_layout="points", order="doc"):
    """gen/kernels/three_nn/planted.py's three_nn as it was before its block search (same knobs): each
    query's whole row of distances sorted (a stable argsort), the first three taken.  The planted copy
    must give exactly these bits."""
    B, N, _ = unknown.shape
    M = known.shape[1]
    if known_layout == "xyz_planes":
        known = known.reshape(B, 3, M).transpose(0, 2, 1)
    if not last_point:
        known, M = known[:, :max(0, M - 1)], max(0, M - 1)
    dist2 = np.full((B, N, 3), np.inf)
    idx = np.zeros((B, N, 3), dtype=np.int32)
    if M == 0:
        return dist2, idx
    step = max(1, _ROWS_ELEMENTS // M)
    for b in range(B):
        points = known[0 if known_batch == "first" else b].astype(distance_dtype)
        for start in range(0, N, step):
            u = unknown[b, start:start + step].astype(distance_dtype)
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
                first = M - 1 - first
            found = np.take_along_axis(d, first, axis=1)
            count = min(3, M)
            dist2[b, start:start + step, :count] = found
            idx[b, start:start + step, :count] = np.where(np.isfinite(found), first, 0)
    return (np.sqrt(dist2) if sqrt else dist2), idx
