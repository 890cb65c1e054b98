"""Backends that misbehave in the ways real ones do; used by the CLI tests as `bad_backends:NAME`."""
from __future__ import annotations

import numpy as np

import gen
from harness.backends.builtin import reference

_reference = reference()


def wrong_shape(request):
    out = _reference.run(request)
    return {name: np.zeros(a.shape + (1,), a.dtype) for name, a in out.items()}


def wrong_dtype(request):
    return {name: a.astype(np.float64) for name, a in _reference.run(request).items()}


def raises(request):
    raise RuntimeError("device lost")


def returns_list(request):
    return [np.zeros(1)]


def extra_output(request):
    return {**_reference.run(request), "scratch": np.zeros(3)}


def accepts_everything(request):
    """Computes without checking anything: every invalid case is wrongly accepted."""
    return {name: np.zeros(o.shape, o.dtype) if 0 in o.shape else
            gen.golden(request.op, request.inputs, request.params)[name].astype(o.dtype)
            for name, o in request.outputs.items()}


class ObjectBackend:
    """A backend given as an object with run()."""
    name = "object"

    def run(self, request):
        return _reference.run(request)


object_backend = ObjectBackend()
