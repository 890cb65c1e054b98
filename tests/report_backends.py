"""Backends for the determinism and HTML-report tests, loadable (also by worker processes) as
`report_backends:NAME` with tests/ on the path.  Each is the reference with one planted fault."""
from __future__ import annotations

import itertools
import os

import numpy as np

from harness.backends.builtin import reference
from gen.core.casefile import load
from harness.reports.error_map import axes_of
from gen.core.verdict import request_for

_reference = reference()
# Where the call count starts: set by restart(), and read by a worker process that imports this
# module afresh (a backend may run in one), so that both count alike.
_FIRST_CALL = "OPCASE_TEST_FIRST_CALL"
_calls = itertools.count(int(os.environ.get(_FIRST_CALL, "0")))


def restart(first: int = 0) -> None:
    """Count calls from ``first`` again, here and in worker processes started from now on:
    odd-numbered calls are the clean ones.  A run's first call of a case is its decoy (harness.worker.decoy),
    not judged: from 0, the judged call is call 1."""
    global _calls
    os.environ[_FIRST_CALL] = str(first)
    _calls = itertools.count(first)


def reference_outputs(path) -> dict:
    """What the reference returns for the case at ``path`` (what the clean calls return)."""
    return _reference.run(request_for(load(path)))


def deterministic(request):
    """The reference, counting its calls like the others (the same bits every time)."""
    next(_calls)
    return _reference.run(request)


_buffers: dict = {}


def noise_in_a_reused_buffer(request):
    """noise_every_other_call, returned in one buffer per output that every call overwrites."""
    out = noise_every_other_call(request)
    for name, array in out.items():
        buffer = _buffers.setdefault((name, array.shape, array.dtype.str), np.empty_like(array))
        buffer[...] = array
        out[name] = buffer
    return out


def wrong_shape_on_call_3(request):
    """The reference, but its third call returns outputs of one element."""
    out = dict(_reference.run(request))
    if next(_calls) == 3:
        out = {name: np.zeros(1, array.dtype) for name, array in out.items()}
    return out


def _noisy(request, scale: float):
    """The reference on odd calls; on even ones every float output moved by ``scale`` relative
    (at least one ulp): what a kernel that sums with atomics in another order does to its last bits."""
    out = dict(_reference.run(request))
    if next(_calls) % 2 == 0:
        for name, array in out.items():
            if array.dtype.kind == "f" and array.size:
                moved = array + (scale * np.abs(array)).astype(array.dtype)
                out[name] = np.where(moved == array, np.nextafter(array, np.inf), moved).astype(array.dtype)
    return out


def noise_every_other_call(request):
    """Last-bit noise on every other call: the verdict never changes, the bits do."""
    return _noisy(request, 0.0)


def wrong_every_other_call(request):
    """Every other call 10% off everywhere: the verdict changes from call to call."""
    return _noisy(request, 0.1)


def tile_of(shape, layout) -> tuple:
    """Where `unwritten_tile` plants its fault: a quarter-size tile of rows and columns (H and W
    when the layout names them) starting a quarter down and half across; every other axis whole."""
    rows, cols, _ = axes_of(layout, len(shape))
    index = [slice(None)] * len(shape)
    for axis, start in ((rows, shape[rows] // 4 if rows is not None else 0), (cols, shape[cols] // 2)):
        index[axis] = slice(start, start + max(1, shape[axis] // 4))
    return tuple(index)


def unwritten_tile(request):
    """A tiling bug: one tile of every output is never written (left zero)."""
    out = dict(_reference.run(request))
    for name, array in out.items():
        if array.ndim >= 2 and array.size:
            array = array.copy()
            array[tile_of(array.shape, request.outputs[name].layout)] = 0
            out[name] = array
    return out
