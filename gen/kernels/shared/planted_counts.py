"""Planted bugs of the narrow-count kind (gen/REACH.md): a kernel that keeps the number of its items
(rois, boxes, mask positions, queries) in an unsigned 16-bit integer runs over the first
``count mod 2^16`` of them and never writes the rest of its outputs, which stay as allocated (0).

Each family names its own item tensors and axes in its planted*.py; the helper here only does the
cutting, so that the bug is the family's kernel, cut short, and not a generic transformation.  The
stress suite's count cases (``count_<dim>65537`` and ``65539``) exist to kill these bugs; the
planted bug of this kind is named ``counts_in_uint16`` in every family that has one (tests/test_count_bugs.py).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable

import numpy as np

from gen.core.backend import TensorInfo

UINT16_COUNTS = 2**16


# The name every family gives its planted bug of this kind (the tests find it by this name).
COUNT_BUG = "counts_in_uint16"


def _first(array: np.ndarray, axis: int, kept: int) -> np.ndarray:
    index = [slice(None)] * array.ndim
    index[axis] = slice(0, kept)
    return np.ascontiguousarray(array[tuple(index)])


def _padded(array: np.ndarray, axis: int, length: int) -> np.ndarray:
    """``array`` with zeros after its items along ``axis``, up to ``length`` items."""
    widths = [(0, 0)] * array.ndim
    widths[axis] = (0, length - array.shape[axis])
    return np.pad(array, widths)


def counted_in_uint16(compute: Callable, inputs: dict[str, int], outputs: dict[str, int]) -> Callable:
    """``compute`` as a kernel that keeps its item count in 16 bits: the item axis of each tensor of
    ``inputs`` ({name: axis}) cut to the first count mod 2^16 items before it runs, and each output of
    ``outputs`` ({name: axis}) computed for those items only, the rest left at 0.  An output without an
    item axis (a gradient of the map) is what the kept items alone give."""
    def run(request):
        counts = [request.inputs[name].shape[axis] for name, axis in inputs.items() if name in request.inputs]
        if not counts or counts[0] < UINT16_COUNTS:
            return compute(request)
        kept = counts[0] % UINT16_COUNTS
        cut_inputs = {name: (_first(a, inputs[name], kept) if name in inputs else a)
                      for name, a in request.inputs.items()}
        cut_outputs = {name: (TensorInfo(tuple(kept if axis == outputs[name] else n for axis, n in enumerate(info.shape)),
                                         info.dtype, info.layout) if name in outputs else info)
                       for name, info in request.outputs.items()}
        produced = compute(replace(request, inputs=cut_inputs, outputs=cut_outputs))
        return {name: (_padded(np.asarray(a), outputs[name], request.outputs[name].shape[outputs[name]])
                       if name in outputs else a) for name, a in produced.items()}
    return run


def keys_bounded_in_uint16(compute: Callable, tensor: str, axis: int) -> Callable:
    """``compute`` as a kernel whose bounds check against the key count of ``tensor`` (its item ``axis``)
    holds the count in 16 bits: every key past count mod 2^16 reads as out of range, that is as 0."""
    def run(request):
        value = request.inputs[tensor]
        if value.shape[axis] < UINT16_COUNTS:
            return compute(request)
        index = [slice(None)] * value.ndim
        index[axis] = slice(value.shape[axis] % UINT16_COUNTS, None)
        bounded = np.array(value, copy=True)
        bounded[tuple(index)] = 0
        return compute(replace(request, inputs={**request.inputs, tensor: bounded}))
    return run
