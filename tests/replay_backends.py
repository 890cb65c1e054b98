"""Backends that have seen the stored cases, for `opcase run --fresh` (tests/test_unseen_cases.py).

Each keeps a table, keyed by a hash of a call (kernel, params, inputs), of what the stored cases
under $OPCASE_TEST_SEEN expect: their goldens, or a rejection.  They answer what they have seen
and nothing else, as a backend tuned to (or cheating on) a committed suite would.
"""
from __future__ import annotations

import hashlib
import os
from functools import lru_cache

import numpy as np

from gen.core.backend import InvalidArgument
from gen.core.casefile import find, load

SEEN_ENV = "OPCASE_TEST_SEEN"


def _call_hash(op: str, params: dict, inputs: dict) -> str:
    digest = hashlib.sha256(op.encode())
    digest.update(repr(sorted(params.items())).encode())
    for name in sorted(inputs):
        array = np.ascontiguousarray(inputs[name])
        digest.update(f"{name}{array.dtype.str}{array.shape}".encode())
        digest.update(array.tobytes())
    return digest.hexdigest()


@lru_cache(maxsize=None)
def _seen() -> dict:
    """Every stored case under $OPCASE_TEST_SEEN, read from disk: call hash -> goldens or None (rejected)."""
    table = {}
    for path in find([os.environ[SEEN_ENV]]):
        case = load(path)
        inputs = {n: t.data for n, t in case.inputs.items() if not t.absent}
        table[_call_hash(case.op, case.params, inputs)] = None if case.expect == "rejected" else \
            {n: np.array(t.data) for n, t in case.outputs.items()}
    return table


def replay(request):
    """The stored golden of a call it has seen (a rejection where the case expects one); zeros else."""
    key = _call_hash(request.op, request.params, request.inputs)
    if key in _seen():
        if _seen()[key] is None:
            raise InvalidArgument("seen: rejected")
        return _seen()[key]
    return {name: np.zeros(info.shape, info.dtype) for name, info in request.outputs.items()}
