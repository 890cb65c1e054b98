"""Backends for `opcase run --adjoint` (tests/test_adjoint_run.py), loadable by worker processes as
`adjoint_backends:NAME`.  No kernel is named: a backward is a kernel whose op ends in _backward.

``dropped_term``: the float64 reference, except that every backward leaves a term of each gradient out: every
seventh element of it (in C order) keeps 0, as a hand-written backward that misses a term of its sum, on one
lane of seven, does.
"""
from __future__ import annotations

import numpy as np

from gen.core.rounding import round_to
from harness.backends.builtin import check_request, run_in_dtype


def dropped_term(request):
    check_request(request)
    produced = run_in_dtype(request, np.float64)
    if not request.op.endswith("_backward"):
        return produced
    out = {}
    for name, o in request.outputs.items():
        grad = np.array(produced[name], dtype=np.float64, copy=True)
        grad.reshape(-1)[6::7] = 0.0
        out[name] = round_to(grad, o.dtype)
    return out
