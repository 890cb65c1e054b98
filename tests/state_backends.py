"""Backends that keep state between calls, as kernel engineers' bugs do, for
tests/test_state_between_calls.py (loadable by worker processes as `state_backends:NAME`).

Each is the reference whenever its state does not interfere: a run that never calls it twice
with one shape cannot tell it from the reference.
"""
from __future__ import annotations

import numpy as np

from harness.backends.builtin import reference

_reference = reference()
_cache: dict = {}
_buffers: dict = {}


def _shape_key(request) -> tuple:
    return (request.op, repr(sorted(request.params.items())),
            tuple((n, a.shape, a.dtype.str) for n, a in sorted(request.inputs.items())))


def cache_by_shape(request):
    """Remembers the first result of each op, params and input shapes and returns it again."""
    key = _shape_key(request)
    if key not in _cache:
        _cache[key] = _reference.run(request)
    return {n: a.copy() for n, a in _cache[key].items()}


def cache_by_address(request):
    """Remembers results by op, params, shapes and the addresses of the input buffers."""
    key = _shape_key(request) + tuple(a.__array_interface__["data"][0] for _, a in sorted(request.inputs.items()))
    if key not in _cache:
        _cache[key] = _reference.run(request)
    return {n: a.copy() for n, a in _cache[key].items()}


def uncleared_buffer(request):
    """Adds each float result into an output buffer pooled by shape, zeroed only when allocated."""
    out = {}
    for name, a in _reference.run(request).items():
        key = (request.op, name, a.shape, a.dtype.str)
        if a.dtype.kind != "f":
            out[name] = a
            continue
        buffer = _buffers.setdefault(key, np.zeros(a.shape, a.dtype))
        buffer += a
        out[name] = buffer.copy()
    return out


def stateless(request):
    """The reference, in a worker like the others: the control."""
    return _reference.run(request)


# --------------------------------------------------------------------------- bugs only a cold call shows
# Each returns the reference's outputs corrupted (harness.judge.cold_pass must fail them) on some calls.

def _corrupt(outputs: dict) -> dict:
    """Every output wrong: floats doubled plus one, integers plus one."""
    return {n: (a * 2 + 1 if a.dtype.kind == "f" else a + 1).astype(a.dtype) for n, a in outputs.items()}


_seen: set = set()
_plan: list = [None]


def first_call(request):
    """Wrong on the process's first call that returns outputs (a table built lazily, read before filled)."""
    outputs = _reference.run(request)
    if "process" in _seen:
        return outputs
    _seen.add("process")
    return _corrupt(outputs)


def first_call_per_kernel(request):
    """Wrong on the first call of each kernel in the process that returns outputs."""
    outputs = _reference.run(request)
    if ("op", request.op) in _seen:
        return outputs
    _seen.add(("op", request.op))
    return _corrupt(outputs)


def first_call_at_a_shape(request):
    """Wrong on the first call of each op, params, shapes and dtypes (a plan made on it, used too early)."""
    outputs = _reference.run(request)
    key = ("shape", _shape_key(request))
    if key in _seen:
        return outputs
    _seen.add(key)
    return _corrupt(outputs)


def stale_plan(request):
    """A plan made for the shapes of the call before, refreshed only after this one: wrong on every call
    whose shapes differ from those of the call before it (the first call included)."""
    key = _shape_key(request)
    planned, _plan[0] = _plan[0], key
    outputs = _reference.run(request)
    return outputs if planned == key else _corrupt(outputs)
