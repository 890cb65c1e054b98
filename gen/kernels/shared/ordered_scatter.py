"""Scatter-adds of whole rows in a fixed order, bit for bit what np.add.at would give, without it.

    target[rows[e]] += scale[e] * source[source_rows[e]]      for e = 0, 1, 2, ... in turn

np.add.at does this one element at a time.  Here the entries are grouped by target row (a
stable sort keeps each row's entries in their order) and the rows are summed "rank by rank":
step r adds the r-th entry of every row that has more than r, as one whole-array operation.
Rows are laid out longest first, so the rows still receiving at step r are a prefix of the
accumulator and each step is a contiguous add; the rows are taken a cache-sized block at a
time, all steps of a block before the next.  When few rows are left receiving (a long tail: a few
rows with thousands of entries each), each of them is finished on its own instead, its remaining
products summed by np.add.accumulate, which adds them one after another from the row's value: the
same additions in the same order, without a step of Python per entry.  Every target element takes the same additions
in the same order, from its own starting value, as under np.add.at: the same bits, signed zeros
included (the product is ``scale * source`` and the sum ``target + product``, operands in
np.add.at's order).  One exception: where two NaNs meet, which NaN comes out (its sign and
payload) is up to numpy's SIMD loop, as in every element-wise numpy operation (AVX-512 and the
SSE baseline choose differently), while np.add.at's scalar loop keeps the target's.
"""
from __future__ import annotations

import numpy as np

# Rows [rows, C] of one step's products computed at once: small enough to stay in cache.
_BLOCK_ELEMENTS = 1 << 15
# At most this many rows still receiving: each is finished alone (_finish_row), in chunks of about
# _TAIL_ELEMENTS products.
_FEW_ROWS = 4
_TAIL_ELEMENTS = 1 << 16


def add_rows_in_order(target: np.ndarray, rows: np.ndarray, scale: np.ndarray, source: np.ndarray,
                      source_rows: np.ndarray) -> None:
    """In place: for each entry e in order, target[rows[e]] += scale[e] * source[source_rows[e]].

    target [T, C] and source [S, C] share C; rows, scale and source_rows are 1-D, one per entry."""
    if rows.size == 0:
        return
    order = np.argsort(rows, kind="stable")
    sorted_rows = rows[order]
    starts = np.flatnonzero(np.concatenate(([True], sorted_rows[1:] != sorted_rows[:-1])))
    lengths = np.diff(np.append(starts, rows.size))
    longest_first = np.argsort(-lengths, kind="stable")
    starts, lengths = starts[longest_first], lengths[longest_first]
    receiving = sorted_rows[starts]
    block = max(1, _BLOCK_ELEMENTS // max(1, target.shape[1]))
    buffer = np.empty((block, target.shape[1]), dtype=target.dtype)
    # Block by block of receiving rows, so that a block's sums stay in cache through all its steps.
    for first in range(0, receiving.size, block):
        last = min(receiving.size, first + block)
        total = target[receiving[first:last]]
        ascending = lengths[first:last][::-1]
        for rank in range(int(lengths[first])):
            count = ascending.size - int(np.searchsorted(ascending, rank, side="right"))   # rows with > rank entries
            if count <= _FEW_ROWS:
                for row in range(count):
                    begin = starts[first + row]
                    _finish_row(total[row], order[begin + rank:begin + lengths[first + row]], scale, source,
                                source_rows)
                break
            entries = order[starts[first:first + count] + rank]
            product = buffer[:count]
            source.take(source_rows[entries], axis=0, out=product)
            np.multiply(scale[entries, None], product, out=product)
            np.add(total[:count], product, out=total[:count])
        target[receiving[first:last]] = total


def _finish_row(total: np.ndarray, entries: np.ndarray, scale: np.ndarray, source: np.ndarray,
                source_rows: np.ndarray) -> None:
    """In place: total += scale[e] * source[source_rows[e]] for each e of ``entries`` in turn.

    Row 0 of each chunk's buffer holds the sum so far and rows 1.. its products (made as the
    steps above make them, in the target's dtype); np.add.accumulate then adds row after row."""
    chunk = max(1, _TAIL_ELEMENTS // max(1, total.size))
    buffer = np.empty((min(chunk, entries.size) + 1, total.size), dtype=total.dtype)
    sums = np.empty_like(buffer)
    for first in range(0, entries.size, chunk):
        part = entries[first:first + chunk]
        products = buffer[1:part.size + 1]
        buffer[0] = total
        source.take(source_rows[part], axis=0, out=products)
        np.multiply(scale[part, None], products, out=products)
        np.add.accumulate(buffer[:part.size + 1], axis=0, out=sums[:part.size + 1])
        total[...] = sums[part.size]
