"""The bilinear sampling rule deform_roi_pool and border_align share (mmcv's common CUDA helper).

A point (y, x) of an H x W map more than one pixel outside it, y < -1, y > H, x < -1 or x > W, reads 0 and
receives no gradient.  Otherwise negative coordinates are clamped to 0; the low corner is floor(y)
(floor(x)), and where that is the last row (column) or past it both corners are that row and y is set
to it, else the high corner is the next row.  With ly = y - y_low, hy = 1 - ly (and lx, hx likewise),
the four corners (y_low, x_low), (y_low, x_high), (y_high, x_low), (y_high, x_high) weigh hy*hx, hy*lx,
ly*hx and ly*lx.  So the bands [-1, 0) and (size - 1, size] read the edge value.
"""
from __future__ import annotations

import numpy as np


def bilinear_corners(y: np.ndarray, x: np.ndarray, height: int, width: int):
    """The sampling rule above for arrays of points, in the points' dtype.

    Returns (rows, cols, weights, inside): rows/cols int64 [4, *shape], the corners
    (y_low, x_low), (y_low, x_high), (y_high, x_low), (y_high, x_high), always valid indices;
    weights [4, *shape] = hy*hx, hy*lx, ly*hx, ly*lx, zero where the point lies farther
    than one pixel outside the map (inside is False there).  The map must not be empty.
    """
    inside = (y >= -1) & (y <= height) & (x >= -1) & (x <= width)
    # Points outside are given coordinate 0 so that the index arithmetic stays sane; their weights are zeroed.
    y_low, y_high, ly = _bilinear_axis(np.where(inside, y, 0), height)
    x_low, x_high, lx = _bilinear_axis(np.where(inside, x, 0), width)
    hy, hx = 1 - ly, 1 - lx
    weights = np.stack([hy * hx, hy * lx, ly * hx, ly * lx])
    weights[:, ~inside] = 0
    rows = np.stack([y_low, y_low, y_high, y_high])
    cols = np.stack([x_low, x_high, x_low, x_high])
    return rows, cols, weights, inside


def _bilinear_axis(coord: np.ndarray, size: int):
    """Low and high neighbour along one axis and the fraction towards the high one."""
    coord = np.maximum(coord, 0)
    low = np.floor(coord)
    at_last = low >= size - 1
    # At (or past) the last row the point snaps onto it: low = high = size-1, fraction 0.
    low = np.where(at_last, size - 1, low).astype(coord.dtype)
    coord = np.where(at_last, low, coord)
    high = np.where(at_last, low, low + 1)
    return low.astype(np.int64), high.astype(np.int64), coord - low
