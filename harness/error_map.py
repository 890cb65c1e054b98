"""Where a failing output's error sits: small summaries of |actual - golden| for the HTML report.

A heat-map over the tensor's two most telling axes (H x W when its layout names them, else its
last two), summed over every other axis and binned to at most MAX_CELLS x MAX_CELLS cells; a
profile over its channel axis (C); a histogram of the elements' relative errors (diff3's
per-element measure) by decade.  The tensor is read a block at a time, so that a network-scale
output is never copied whole; what comes out is bounded whatever the tensor's size, so that it
can cross a worker's pipe and sit in a report.
"""
from __future__ import annotations

import math

import numpy as np

from harness.casefile import drop_pages
from harness.metrics import _DENOM_OFFSET, small_golden_eps

# Heat-map cells per axis, and channel-profile bins: enough to show where an error sits,
# few enough that a report with many failing cases stays small.
MAX_CELLS = 64
MAX_PROFILE = 128
# Relative-error histogram: one bin per decade from 1e-LOWEST_DECADE up (errors below go to the
# first bin, above to the last); exact matches are counted apart.
LOWEST_DECADE = -10
HIGHEST_DECADE = 2
# Elements read per block.
_BLOCK_ELEMS = 1 << 20
_SIGNIFICANT = 4


def axis_letters(layout: str, ndim: int) -> str:
    """The layout, when it names each of the ``ndim`` axes by a distinct letter (NHWC); else ''."""
    if layout and layout.isalpha() and len(layout) == ndim and len(set(layout.upper())) == ndim:
        return layout
    return ""


def axes_of(layout: str, ndim: int) -> tuple[int | None, int | None, int | None]:
    """(row axis, column axis, channel axis) of a tensor: H, W and C when the layout names each
    of its axes by a distinct letter; otherwise its last two axes and no channel axis."""
    letters = axis_letters(layout, ndim).upper()
    channel = letters.index("C") if "C" in letters else None
    if "H" in letters and "W" in letters:
        return letters.index("H"), letters.index("W"), channel
    if ndim >= 2:
        return ndim - 2, ndim - 1, channel
    return None, (0 if ndim == 1 else None), channel


def _bins(size: int, most: int) -> tuple[int, int]:
    """(elements per bin, number of bins) to cover ``size`` with at most ``most`` bins."""
    per = max(1, math.ceil(size / most))
    return per, max(1, math.ceil(size / per))


def _axis_index(flat: np.ndarray, shape: tuple, axis: int | None) -> np.ndarray | int:
    if axis is None:
        return 0
    stride = int(np.prod(shape[axis + 1:], dtype=np.int64))
    return (flat // stride) % shape[axis]


def _round(values) -> list:
    return [float(f"{v:.{_SIGNIFICANT}g}") for v in values]


def error_map(actual: np.ndarray, golden: np.ndarray, layout: str, dtype) -> dict:
    """The heat-map, channel profile and relative-error histogram of one output (see module doc)."""
    shape = tuple(golden.shape)
    rows, cols, channel = axes_of(layout, len(shape))
    row_bin, n_rows = _bins(shape[rows], MAX_CELLS) if rows is not None else (1, 1)
    col_bin, n_cols = _bins(shape[cols], MAX_CELLS) if cols is not None else (1, 1)
    ch_bin, n_ch = _bins(shape[channel], MAX_PROFILE) if channel is not None else (1, 1)
    heat = np.zeros(n_rows * n_cols)
    nan_inf = np.zeros(n_rows * n_cols, dtype=np.int64)
    profile = np.zeros(n_ch)
    n_decades = HIGHEST_DECADE - LOWEST_DECADE + 1
    histogram = np.zeros(n_decades, dtype=np.int64)
    exact = 0
    eps = small_golden_eps(dtype)
    flat_actual, flat_golden = actual.reshape(-1), golden.reshape(-1)
    for start in range(0, golden.size, _BLOCK_ELEMS):
        stop = min(start + _BLOCK_ELEMS, golden.size)
        a = flat_actual[start:stop].astype(np.float64)
        b = flat_golden[start:stop].astype(np.float64)
        flat = np.arange(start, stop, dtype=np.int64)
        cell = (_axis_index(flat, shape, rows) // row_bin) * n_cols + _axis_index(flat, shape, cols) // col_bin
        finite = np.isfinite(a) & np.isfinite(b)
        # A NaN/Inf where the golden has another (or a finite value), or the other way round.
        mismatch = ~finite & ~((np.isnan(a) & np.isnan(b)) | (a == b))
        err = np.where(finite, np.abs(a - b), 0.0)
        heat += np.bincount(cell, weights=err, minlength=heat.size)
        nan_inf += np.bincount(cell[mismatch], minlength=nan_inf.size)
        if channel is not None:
            profile += np.bincount(_axis_index(flat, shape, channel) // ch_bin, weights=err, minlength=n_ch)
        abs_b = np.abs(b[finite])
        rel = np.where(abs_b < eps, err[finite], err[finite] / (abs_b + _DENOM_OFFSET))
        exact += int(np.count_nonzero(rel == 0))
        decade = np.floor(np.log10(rel[rel > 0])).astype(np.int64)
        histogram += np.bincount(np.clip(decade, LOWEST_DECADE, HIGHEST_DECADE) - LOWEST_DECADE, minlength=n_decades)
        drop_pages(actual, stop, start)
        drop_pages(golden, stop, start)
    axis = _axis_namer(layout, len(shape))
    summed = [axis(i) for i in range(len(shape)) if i not in (rows, cols)]
    return {
        "rows": {"axis": axis(rows), "size": shape[rows] if rows is not None else 1, "bin": row_bin},
        "cols": {"axis": axis(cols), "size": shape[cols] if cols is not None else 1, "bin": col_bin},
        "summed": summed,
        "heat": [_round(heat[r * n_cols:(r + 1) * n_cols]) for r in range(n_rows)],
        "nan_inf_cells": [[int(c // n_cols), int(c % n_cols), int(nan_inf[c])] for c in np.flatnonzero(nan_inf)],
        "profile": None if channel is None else {"axis": axis(channel), "size": shape[channel], "bin": ch_bin,
                                                 "values": _round(profile)},
        "histogram": {"lowest_decade": LOWEST_DECADE, "counts": histogram.tolist(), "exact": exact,
                      "nan_inf": int(nan_inf.sum())},
    }


def _axis_namer(layout: str, ndim: int):
    letters = axis_letters(layout, ndim).lower()
    return lambda i: "" if i is None else (letters[i] if letters else f"axis {i}")
