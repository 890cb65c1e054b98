"""masked_im2col forward (design doc 004, OPS.md).

    data_col[(c*kh + i)*kw + j, m] = feature[0, c, mask_h_idx[m] - pad_h + i, mask_w_idx[m] - pad_w + j]

and 0 where that position lies outside the map.  Mask indices may be negative or past
the map.  One vectorized gather per kernel tap (i, j).  A pure copy: the result is exact in
the feature's own dtype, which it keeps (see gen.ops.exact_dtype).
"""
from __future__ import annotations

import numpy as np

from gen.ops import exact_dtype


def forward(inputs, params, compute_dtype=np.float64, out_shapes=None):
    feature = inputs["feature"]
    mh = np.asarray(inputs["mask_h_idx"], dtype=np.int64)
    mw = np.asarray(inputs["mask_w_idx"], dtype=np.int64)
    kh, kw = int(params["kernel_h"]), int(params["kernel_w"])
    pad_h, pad_w = int(params["pad_h"]), int(params["pad_w"])
    _, C, H, W = feature.shape
    M = mh.shape[0]
    cols = np.zeros((C, kh, kw, M), dtype=exact_dtype(feature, compute_dtype))
    if cols.size == 0 or H == 0 or W == 0:
        return {"data_col": cols.reshape(C * kh * kw, M)}
    planes = feature[0].reshape(C, H * W).astype(cols.dtype, copy=False)
    for i in range(kh):
        rows = mh - pad_h + i
        row_inside = (rows >= 0) & (rows < H)
        row_starts = np.clip(rows, 0, H - 1) * W
        for j in range(kw):
            columns = mw - pad_w + j
            outside = ~(row_inside & (columns >= 0) & (columns < W))
            # Gather every tap from a position clamped into the map, then zero the ones that
            # fall outside: one contiguous gather per channel row, no scatter.
            tap = cols[:, i, j, :]
            np.take(planes, row_starts + np.clip(columns, 0, W - 1), axis=1, out=tap, mode="clip")
            if outside.any():
                tap[:, outside] = 0
    return {"data_col": cols.reshape(C * kh * kw, M)}


def mask_positions(rng: np.random.Generator, ctx, outside: float = 0.0, margin: int = 4):
    """Joint draw of mask_h_idx and mask_w_idx the way a masked conv produces them.

    Distinct positions of the H x W map in row-major order (the order ``mask.nonzero()``
    gives); with ``outside`` > 0 that fraction is moved up to ``margin`` cells beyond the
    map on either side, as mlu-ops' own cases do.
    """
    M = int(ctx.shapes["mask_h_idx"][0])
    _, _, H, W = ctx.shapes["feature"]
    cells = H * W
    if M <= cells:
        flat = np.sort(rng.choice(cells, size=M, replace=False))
    else:
        flat = np.sort(rng.integers(0, cells, size=M))
    mh, mw = (flat // W).astype(np.int32), (flat % W).astype(np.int32)
    if outside > 0 and M:
        moved = rng.random(M) < outside
        mh[moved] = rng.choice(np.r_[np.arange(-margin, 0), np.arange(H, H + margin)], size=moved.sum())
        moved = rng.random(M) < outside
        mw[moved] = rng.choice(np.r_[np.arange(-margin, 0), np.arange(W, W + margin)], size=moved.sum())
    return {"mask_h_idx": mh, "mask_w_idx": mw}
