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

from gen.core.casefile import drop_pages
from gen.core.metrics import DENOM_OFFSET, small_golden_eps

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


def _bin_size(size: int, most: int) -> int:
    """Elements per bin, to cover ``size`` with at most ``most`` bins."""
    return max(1, math.ceil(size / most))


def _round(values) -> list:
    return [float(f"{v:.{_SIGNIFICANT}g}") for v in values]


def _blocks(shape: tuple):
    """(prefix, axis, start, stop, flat_start): the tensor as contiguous pieces of about
    _BLOCK_ELEMS elements, each ``array[prefix + (slice(start, stop),)]`` with every later axis whole."""
    inner = [int(np.prod(shape[a + 1:], dtype=np.int64)) for a in range(len(shape))]
    axis = next(a for a in range(len(shape)) if inner[a] <= _BLOCK_ELEMS)
    step = max(1, _BLOCK_ELEMS // inner[axis])
    for prefix in np.ndindex(*shape[:axis]):
        base = sum(i * inner[a] for a, i in enumerate(prefix))
        for start in range(0, shape[axis], step):
            yield prefix, axis, start, min(start + step, shape[axis]), base + start * inner[axis]


class _Binned:
    """A sum over every axis of a tensor but ``keep`` (one or two), binned along those: filled a block at a time."""

    def __init__(self, shape: tuple, keep: tuple, bins: tuple, dtype=np.float64):
        self.shape, self.keep, self.bins = shape, keep, bins
        self.total = np.zeros(tuple(max(1, math.ceil(shape[a] / b)) for a, b in zip(keep, bins)), dtype)

    def add(self, values: np.ndarray, prefix: tuple, axis: int, start: int) -> None:
        """Add a block's per-element ``values`` (shape: the block's, axes ``axis`` onwards)."""
        inside = [a for a in sorted(self.keep) if a >= axis]
        values = values.sum(axis=tuple(a - axis for a in range(axis, len(self.shape)) if a not in self.keep))
        where = {}
        for position, a in enumerate(inside):
            bin_size = self.bins[self.keep.index(a)]
            offset = start if a == axis else 0
            coords = np.arange(offset, offset + values.shape[position]) // bin_size
            firsts = np.flatnonzero(np.diff(coords, prepend=-1))
            values = np.add.reduceat(values, firsts, axis=position)
            where[a] = coords[firsts]
        for a in self.keep:
            if a < axis:   # an axis before the block's: one coordinate for all of it
                where[a] = np.array([prefix[a] // self.bins[self.keep.index(a)]])
        # The block's kept axes in keep's order (rows before columns, whatever the layout's order).
        values = np.transpose(values, [inside.index(a) for a in self.keep if a >= axis])
        values = values.reshape([len(where[a]) for a in self.keep])
        self.total[np.ix_(*(where[a] for a in self.keep))] += values


def error_map(actual: np.ndarray, golden: np.ndarray, layout: str, dtype) -> dict:
    """The heat-map, channel profile and relative-error histogram of one output (see module doc)."""
    if golden.ndim == 0:
        actual, golden = actual.reshape(1), golden.reshape(1)
    shape = tuple(golden.shape)
    rows, cols, channel = axes_of(layout, len(shape))
    keep = tuple(a for a in (rows, cols) if a is not None)
    bins = tuple(_bin_size(shape[a], MAX_CELLS) for a in keep)
    heat = _Binned(shape, keep, bins)
    nan_inf = _Binned(shape, keep, bins, np.int64)
    profile = _Binned(shape, (channel,), (_bin_size(shape[channel], MAX_PROFILE),)) if channel is not None else None
    n_decades = HIGHEST_DECADE - LOWEST_DECADE + 1
    histogram = np.zeros(n_decades, dtype=np.int64)
    exact = 0
    eps = small_golden_eps(dtype)
    for prefix, axis, start, stop, flat_start in _blocks(shape):
        index = prefix + (slice(start, stop),)
        a, b = actual[index].astype(np.float64), golden[index].astype(np.float64)
        err = np.abs(a - b)
        finite = np.isfinite(err)          # both finite (inf - inf and anything with NaN is NaN)
        n_finite = err.size
        if not finite.all():
            n_finite = int(np.count_nonzero(finite))
            # A NaN/Inf where the golden has another (or a finite value), or the other way round.
            mismatch = ~finite & ~((np.isnan(a) & np.isnan(b)) | (a == b))
            nan_inf.add(mismatch.astype(np.int64), prefix, axis, start)
            err[~finite] = 0.0
        heat.add(err, prefix, axis, start)
        if profile is not None:
            profile.add(err, prefix, axis, start)
        wrong = np.flatnonzero(err)
        exact += n_finite - wrong.size
        wrong_err, golden_size = err.reshape(-1)[wrong], np.abs(b.reshape(-1)[wrong])
        rel = np.where(golden_size < eps, wrong_err, wrong_err / (golden_size + DENOM_OFFSET))
        decade = np.floor(np.log10(rel)).astype(np.int64)
        histogram += np.bincount(np.clip(decade, LOWEST_DECADE, HIGHEST_DECADE) - LOWEST_DECADE, minlength=n_decades)
        flat_stop = flat_start + a.size
        drop_pages(actual, flat_stop, flat_start)
        drop_pages(golden, flat_stop, flat_start)
    cells = heat.total.reshape(-1, heat.total.shape[-1])          # a 1-D tensor's map: one row
    bad = nan_inf.total.reshape(cells.shape)
    axis_name = _axis_namer(layout, len(shape))
    return {
        "rows": {"axis": axis_name(rows), "size": shape[rows] if rows is not None else 1,
                 "bin": bins[0] if rows is not None else 1},
        "cols": {"axis": axis_name(cols), "size": shape[cols], "bin": bins[-1]},
        "summed": [axis_name(i) for i in range(len(shape)) if i not in keep],
        "heat": [_round(row) for row in cells],
        "nan_inf_cells": [[int(r), int(c), int(bad[r, c])] for r, c in np.argwhere(bad)],
        "profile": None if profile is None else {"axis": axis_name(channel), "size": shape[channel],
                                                 "bin": profile.bins[0], "values": _round(profile.total)},
        "histogram": {"lowest_decade": LOWEST_DECADE, "counts": histogram.tolist(), "exact": exact,
                      "nan_inf": int(bad.sum())},
    }


def _axis_namer(layout: str, ndim: int):
    letters = axis_letters(layout, ndim).lower()
    return lambda i: "" if i is None else (letters[i] if letters else f"axis {i}")
