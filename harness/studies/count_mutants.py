"""Generic mutants that act on item counts (gen/REACH.md): a kernel that keeps the count of an item
axis (queries, points, rois, boxes, mask positions) in 16 bits.

Which axes are item axes, and which dim sizes each, comes from the spec's axis roles; no kernel is
named.  The mutant computes only the first ``wrapped(n)`` items of each item dim past the 16-bit
range: an input axis no output has (a search over known points) is cut to them before the base
computes (where the call has no shorter form, keys a location indexes, the items past them read as
0), and an output's items past them are left unwritten (0).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from gen.core.registry import spec_for


def wrapped(count: int, signed: bool) -> int:
    """The items a loop over ``count`` runs when the count is kept in 16 bits (none when it wraps negative)."""
    kept = count % 2**16
    if signed and kept >= 2**15:
        kept -= 2**16
    return max(kept, 0)


def item_axes(spec, name: str) -> list[tuple[int, str]]:
    """(axis, dim) for each axis of tensor ``name`` whose role is item and whose size is a plain dim."""
    tensor = spec.inputs.get(name) or spec.outputs.get(name)
    if tensor is None:
        return []
    return [(axis, entry) for axis, (entry, role) in enumerate(zip(tensor.shape, tensor.axes))
            if role == "item" and isinstance(entry, str) and entry.isidentifier()]


def _cut(array: np.ndarray, axis: int, count: int) -> np.ndarray:
    index = [slice(None)] * array.ndim
    index[axis] = slice(0, count)
    return np.ascontiguousarray(array[tuple(index)])


def _zeroed_after(array: np.ndarray, axis: int, count: int) -> np.ndarray:
    index = [slice(None)] * array.ndim
    index[axis] = slice(count, None)
    kept = np.array(array, copy=True)
    kept[tuple(index)] = 0
    return kept


def _searched(spec, request, searched: dict, change) -> dict:
    """The request's inputs with ``change(array, axis, count)`` made along each searched item axis."""
    inputs = dict(request.inputs)
    for name, a in request.inputs.items():
        for axis, dim in item_axes(spec, name):
            if dim in searched and a is not None:
                inputs[name] = change(inputs[name], axis, searched[dim])
    return inputs


def _copy(outputs: dict) -> dict:
    return {name: np.array(a, copy=True) for name, a in outputs.items()}


def count_in_16_bits(signed: bool, not_applicable: type):
    """The mutant's apply(call): harness.studies.mutants.Call in, outputs out (``not_applicable`` raised where no
    count wraps)."""
    def apply(call):
        request = call.request
        spec = spec_for(request.op)
        counts = {}
        for name, a in (*request.inputs.items(), *((n, o) for n, o in request.outputs.items())):
            shape = a.shape
            for axis, dim in item_axes(spec, name):
                if axis < len(shape):
                    counts.setdefault(dim, int(shape[axis]))
        cut = {dim: wrapped(n, signed) for dim, n in counts.items() if wrapped(n, signed) != n}
        if not cut:
            raise not_applicable("no item count past the 16-bit range")
        on_outputs = {dim for name in request.outputs for _, dim in item_axes(spec, name)}
        searched = {dim: k for dim, k in cut.items() if dim not in on_outputs}
        if any(k == 0 for k in searched.values()):
            outputs = {n: np.zeros(o.shape, np.dtype(o.dtype)) for n, o in request.outputs.items()}
        elif searched:
            try:
                outputs = _copy(call.run_base(dataclasses.replace(request, inputs=_searched(spec, request, searched,
                                                                                           _cut))))
            except not_applicable:
                # A call whose other tensors index the items (keys a location points at) has no shorter
                # form: the items past the count are then out of the kernel's bounds, read as 0.
                outputs = _copy(call.run_base(dataclasses.replace(request, inputs=_searched(spec, request, searched,
                                                                                           _zeroed_after))))
        else:
            outputs = _copy(call.base())
        for name, a in outputs.items():
            for axis, dim in item_axes(spec, name):
                if dim in cut and axis < a.ndim:
                    index = [slice(None)] * a.ndim
                    index[axis] = slice(cut[dim], None)
                    a[tuple(index)] = 0
        return outputs
    return apply


def count_mutants(make, not_applicable: type) -> list:
    """The two count mutants, made by ``make(name, what, needs, apply)`` (harness.studies.mutants.Mutant, GENERIC);
    ``not_applicable``: the exception that says a call gives a mutant nothing to change."""
    return [make(f"count_in_{kind}", f"each item count kept in {kind}: only the first count mod 2^16 items "
                 f"computed{' (none where that is 2^15 or more)' if signed else ''}, the rest left at 0",
                 f"an item axis past {2**15 if signed else 2**16 - 1} items", count_in_16_bits(signed, not_applicable))
            for kind, signed in (("int16", True), ("uint16", False))]
