"""Each kernel's planted bugs (gen/planted) as backends, loadable by worker processes as
`planted_backends:BUG` (tests/test_explain.py, README: Explaining a failure).

``BUG`` is a planted bug's name; the backend makes the spec's checks, then computes the bug of
the called kernel that has that name, rounded to the output dtypes.  No kernel is named here:
the bugs are found through gen.core.registry.
"""
from __future__ import annotations

from gen.core.backend import InvalidArgument
from gen.core.registry import planted_bugs
from gen.core.rounding import round_to
from harness.backends.builtin import check_request


def __getattr__(bug: str):
    if bug.startswith("__"):
        raise AttributeError(bug)

    def run(request):
        check_request(request)
        compute = planted_bugs(request.op).get(bug)
        if compute is None:
            raise InvalidArgument(f"{request.op} has no planted bug {bug!r}")
        produced = compute(request)
        return {name: round_to(produced[name], o.dtype) for name, o in request.outputs.items()}
    run.__name__ = bug
    return run
