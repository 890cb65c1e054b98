"""Bilinear sampling as OPS.md's "Shared: bilinear sampling" (mmcv's bilinear_interpolate) states it,
for one point at a time: the slow oracles of the kernels that sample a map (deform_roi_pool, border_align)."""
from __future__ import annotations

import math


def corners(y: float, x: float, H: int, W: int) -> list[tuple[float, int, int]]:
    """[(weight, row, col)] of the four corners of point (y, x) in an H x W map, or [] where the
    point gives 0 (and no gradient)."""
    if y < -1.0 or y > H or x < -1.0 or x > W:
        return []
    y, x = max(y, 0.0), max(x, 0.0)
    y_low, x_low = int(math.floor(y)), int(math.floor(x))
    if y_low >= H - 1:
        y_low = y_high = H - 1
        y = float(y_low)
    else:
        y_high = y_low + 1
    if x_low >= W - 1:
        x_low = x_high = W - 1
        x = float(x_low)
    else:
        x_high = x_low + 1
    ly, lx = y - y_low, x - x_low
    hy, hx = 1 - ly, 1 - lx
    return [(hy * hx, y_low, x_low), (hy * lx, y_low, x_high), (ly * hx, y_high, x_low), (ly * lx, y_high, x_high)]


def sample(value_at, y: float, x: float, H: int, W: int) -> float:
    """The map ``value_at(row, col) -> float`` sampled at (y, x)."""
    total = 0.0
    for weight, row, col in corners(y, x, H, W):
        total += weight * value_at(row, col)
    return total
