"""Planted bugs of the fast-path kind: a kernel that special-cases some parameter values and
skips work there, right wherever the skipped work changes nothing (softmax masks of one tap are
exactly 1, boxes inside the map need no bounds handling) and wrong elsewhere.  The suites'
`fast_path` cases (specs/README.md) exist to kill them."""
from __future__ import annotations

from dataclasses import replace
from typing import Callable


def fast_path(general: Callable, fast: Callable, when: Callable) -> Callable:
    """A compute that takes ``fast(request)`` where ``when(request)`` holds, ``general`` elsewhere."""
    def compute(request):
        return (fast if when(request) else general)(request)
    return compute


def on_inputs(compute: Callable, change: Callable) -> Callable:
    """``compute`` on the inputs as the fast path assumes them: ``change(request)`` gives the
    inputs it replaces ({name: array}), what the skipped work amounts to."""
    def run(request):
        return compute(replace(request, inputs={**request.inputs, **change(request)}))
    return run
