"""The bilinear sampling rule (gen/kernels/shared/bilinear.py states it), shared by the planted copies of deform_roi_pool and
border_align (with its own planted bug)."""
from __future__ import annotations

import numpy as np


def bilinear_corners(y, x, H, W, *, zero_beyond_last=False):
    """That bilinear rule for arrays of points: (rows, cols, weights) each [4, *shape].

    Points with y < -1 or y > H (x likewise) get weight 0.  Bug zero_beyond_last: the
    zero region starts at y > H-1 (x > W-1), so the band (size-1, size] reads 0 instead
    of the edge value.
    """
    y, x = np.asarray(y, dtype=np.float64), np.asarray(x, dtype=np.float64)
    y_max, x_max = (H - 1, W - 1) if zero_beyond_last else (H, W)
    inside = (y >= -1) & (y <= y_max) & (x >= -1) & (x <= x_max)

    def axis(c, size):
        c = np.maximum(np.where(inside, c, 0.0), 0.0)
        low = np.floor(c)
        last = low >= size - 1
        low = np.where(last, size - 1, low)
        high = np.where(last, size - 1, low + 1)
        c = np.where(last, low, c)
        return low.astype(np.int64), high.astype(np.int64), c - low

    y_low, y_high, ly = axis(y, H)
    x_low, x_high, lx = axis(x, W)
    hy, hx = 1 - ly, 1 - lx
    weights = np.stack([hy * hx, hy * lx, ly * hx, ly * lx]) * inside
    rows = np.stack([y_low, y_low, y_high, y_high])
    cols = np.stack([x_low, x_high, x_low, x_high])
    return rows, cols, weights


