"""Where elements are, when they form no box: explain's words for border bugs and the like.

A kernel wrong at the top and left borders is wrong on rows 0..3 of every column and on columns
0..3 of every row: an L, not a box, which a count of "scattered elements" hides.  Such a set is
described as the union of whole slabs along the tensor's axes (each slab a run of indices of one
axis, every other axis whole: border rows, a channel range, a batch index, a tail block); what
is left over, or a set with no whole slab at all, is placed within its bounding box.
"""
from __future__ import annotations

import re

import numpy as np

_COUNT = re.compile(r" \([\d,]+ elements\)$")


def _runs(indices: np.ndarray) -> list[tuple[int, int]]:
    """Contiguous runs (first, last) of sorted indices."""
    if not len(indices):
        return []
    breaks = np.flatnonzero(np.diff(indices) != 1)
    starts = np.concatenate(([indices[0]], indices[breaks + 1]))
    ends = np.concatenate((indices[breaks], [indices[-1]]))
    return list(zip(starts.tolist(), ends.tolist()))


def _without_count(text: str) -> str:
    return _COUNT.sub("", text)


def whole_slabs(mask: np.ndarray) -> list[tuple[int, int, int]]:
    """(axis, first, last) of each run of indices along an axis whose slab lies wholly in ``mask``
    (for axes the mask does not span whole)."""
    slabs = []
    for axis in range(mask.ndim):
        others = tuple(a for a in range(mask.ndim) if a != axis)
        full = np.flatnonzero(mask.all(axis=others)) if others else np.flatnonzero(mask)
        if 0 < len(full) < mask.shape[axis]:
            slabs += [(axis, first, last) for first, last in _runs(full)]
    return slabs


def _slab_mask(shape, axis: int, first: int, last: int) -> np.ndarray:
    slab = np.zeros(shape, dtype=bool)
    index = [slice(None)] * len(shape)
    index[axis] = slice(first, last + 1)
    slab[tuple(index)] = True
    return slab


def border_text(mask: np.ndarray, names: list, present: list, describe) -> str:
    """``mask`` (no box) in words: its whole slabs joined by 'and', plus the elements outside them
    placed within their bounding box.  ``present``: per axis, the indices the mask touches;
    ``describe``: explain's region_text for a box-shaped mask."""
    count = int(mask.sum())
    covered = np.zeros(mask.shape, dtype=bool)
    parts = []
    for axis, first, last in whole_slabs(mask):
        slab = _slab_mask(mask.shape, axis, first, last)
        covered |= slab
        parts.append(_without_count(describe(slab)))
    rest = mask & ~covered
    left = int(rest.sum())
    if not parts:   # no whole slab: where they are, at most their bounding box
        within = _within(mask, describe)
        return f"{count:,} scattered elements" if within.endswith("whole tensor") else f"{count:,} elements {within}"
    if left:
        more = " more" if parts else ""
        parts.append(f"1{more} element at {_without_count(describe(rest))}" if left == 1 else
                     f"{left:,}{more} elements {_within(rest, describe)}")
    return " and ".join(parts) + f" ({count:,} elements)"


def _within(mask: np.ndarray, describe) -> str:
    """'within rows H 2..5, columns W 0..3', or 'scattered over the whole tensor'."""
    box = np.zeros(mask.shape, dtype=bool)
    spans = []
    for axis in range(mask.ndim):
        others = tuple(a for a in range(mask.ndim) if a != axis)
        touched = np.flatnonzero(mask.any(axis=others)) if others else np.flatnonzero(mask)
        spans.append(slice(int(touched[0]), int(touched[-1]) + 1))
    box[tuple(spans)] = True
    if box.all():
        return "scattered over the whole tensor"
    return f"scattered within {_without_count(describe(box))}"
