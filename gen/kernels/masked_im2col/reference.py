"""masked_im2col forward (design doc 004; README.md beside this file).

    data_col[(c*kh + i)*kw + j, m] = feature[0, c, mask_h_idx[m] - pad_h + i, mask_w_idx[m] - pad_w + j]

and 0 where that position lies outside the map.  Mask indices may be negative or past
the map.  A pure copy: the result is exact in the feature's own dtype, which it keeps
(see gen.kernels.shared.reference.exact_dtype).
"""
from __future__ import annotations

import numpy as np

from gen.kernels.shared.reference import exact_dtype


def forward(inputs, params, compute_dtype=np.float64, out_shapes=None):
    feature = inputs["feature"]
    mh = np.asarray(inputs["mask_h_idx"], dtype=np.intp)
    mw = np.asarray(inputs["mask_w_idx"], dtype=np.intp)
    kh, kw = int(params["kernel_h"]), int(params["kernel_w"])
    pad_h, pad_w = int(params["pad_h"]), int(params["pad_w"])
    _, C, H, W = feature.shape
    M = mh.shape[0]
    dtype = exact_dtype(feature, compute_dtype)
    if C * kh * kw * M == 0 or H == 0 or W == 0:
        return {"data_col": np.zeros((C * kh * kw, M), dtype)}
    rows = (mh - pad_h) + np.arange(kh)[:, None]          # (kh, M)
    columns = (mw - pad_w) + np.arange(kw)[:, None]       # (kw, M)
    # Inside the map: 0 <= index < size, one comparison as unsigned (a negative index wraps past any size).
    inside = (rows.view(np.uintp) < H)[:, None] & (columns.view(np.uintp) < W)[None]
    # Every tap of every position in one gather per channel row, whatever the kernel size (at
    # the doc's small shapes the cost is the number of numpy calls, not the bytes).  A tap
    # outside the map reads a zero column appended to the feature planes.
    taps = np.where(inside, (rows * W)[:, None] + columns[None], H * W)
    planes = np.zeros((C, H * W + 1), dtype)
    planes[:, :-1] = feature[0].reshape(C, H * W)
    cols = np.empty((C * kh * kw, M), dtype)
    np.take(planes, taps.reshape(-1), axis=1, out=cols.reshape(C, kh * kw * M), mode="clip")
    return {"data_col": cols}


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
