"""Planted bugs (gen/kernels/<family>/planted*.py) as backends, loadable by worker processes as `planted_backends:NAME`.

``first_planted``: in every kernel that has some, its first planted bug, for tests that compare two
ways of judging it; a kernel without planted bugs runs the float64 reference, so its cases pass.

Any other NAME is a planted bug's name (tests/test_explain.py, README: Explaining a failure): the
backend makes the spec's checks, then computes the bug of that name of the called kernel.  No kernel
is named here: the bugs are found through gen.core.registry.
"""
from __future__ import annotations

import numpy as np

from gen.core.backend import InvalidArgument
from gen.core.registry import planted_bugs
from gen.core.rounding import round_to
from harness.backends.builtin import check_request, run_in_dtype


def _rounded(compute, request) -> dict:
    produced = compute(request)
    return {name: round_to(produced[name], o.dtype) for name, o in request.outputs.items()}


def first_planted(request):
    bugs = planted_bugs(request.op)
    if not bugs:
        return run_in_dtype(request, np.float64)
    check_request(request)
    return _rounded(bugs[sorted(bugs)[0]], request)


def __getattr__(bug: str):
    if bug.startswith("__"):
        raise AttributeError(bug)

    def run(request):
        check_request(request)
        compute = planted_bugs(request.op).get(bug)
        if compute is None:
            raise InvalidArgument(f"{request.op} has no planted bug {bug!r}")
        return _rounded(compute, request)
    run.__name__ = bug
    return run
