"""A backend with a planted bug in every kernel that has some (gen/planted), for tests that compare two
ways of judging it (loadable by worker processes as `planted_backends:first_planted`).

Each kernel runs its first planted bug, by name, after the spec's checks; a kernel without planted bugs
runs the float64 reference, so its cases pass."""
from __future__ import annotations

import numpy as np

from gen.core.registry import planted_bugs
from gen.core.rounding import round_to
from harness.backends.builtin import check_request, run_in_dtype


def first_planted(request):
    bugs = planted_bugs(request.op)
    if not bugs:
        return run_in_dtype(request, np.float64)
    check_request(request)
    produced = bugs[sorted(bugs)[0]](request)
    return {name: round_to(produced[name], o.dtype) for name, o in request.outputs.items()}
