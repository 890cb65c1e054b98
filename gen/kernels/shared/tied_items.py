"""A value generator for the tie cases of the stress suite (gen/reach.py, gen/REACH.md): small
integers, exact in every float dtype and order of computation, with the first item of each item axis
copied far along it, so that a selection meets exact ties between items that a split search puts in
different segments."""
from __future__ import annotations

import numpy as np

from gen.reach import TIE_HIGH, TIE_LOW, tie_positions


def tied_items(rng: np.random.Generator, ctx, tensor: str, item_axes=(), **_) -> np.ndarray:
    """Small integers for input ``tensor``, with the first item of each of its ``item_axes`` copied to
    the positions tie_positions names along it (a custom value generator: ``gen.kernels.shared.tied_items:tied_items``)."""
    shape = tuple(ctx.shapes[tensor])
    values = rng.integers(TIE_LOW, TIE_HIGH, size=shape, endpoint=True).astype(np.float64)
    for axis in item_axes:
        source = np.take(values, [0], axis=axis)
        for place in tie_positions(shape[axis]):
            index = [slice(None)] * len(shape)
            index[axis] = slice(place, place + 1)
            values[tuple(index)] = source
    return values
