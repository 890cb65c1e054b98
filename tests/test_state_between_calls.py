"""The decoy call (harness.worker.decoy): before the warm pass's judged call of a valid case, a call of the
same shapes with other values, from the same buffers, so that state kept between calls shows."""
from __future__ import annotations

import numpy as np

from conftest import REPO
from gen.core.casefile import load
from gen.core.verdict import request_for
from harness.backends.builtin import reference
from harness.worker.decoy import decoy_first, decoy_values

COMMITTED = REPO / "cases"


# That these backends fail every kernel, in worker processes at --jobs 1 and 2, with the bugs only a
# cold call shows: tests/test_cold_pass.py (on a small suite of every kernel).


def test_decoy_is_a_valid_call_with_other_values():
    """On every committed valid case: the decoy passes the spec's checks, has the case's shapes and
    dtypes, changes some input, and the judged call reads the case's values again.  Only a case
    with an empty input (nothing to permute) has no decoy."""
    ref = reference()
    without = []
    for path in sorted(COMMITTED.rglob("*.opcase")):
        case = load(path)
        if case.expect == "rejected":
            continue
        request = request_for(case)
        calls = []

        class Recorder:
            name, measures_time = "recorder", False

            def run(self, r):
                calls.append({n: np.array(a, copy=True) for n, a in r.inputs.items()})
                return ref.run(r)   # raises InvalidArgument if the decoy broke a check
        judged = decoy_first(Recorder(), request)
        for name, a in request.inputs.items():
            np.testing.assert_array_equal(judged.inputs[name], a)
            assert not judged.inputs[name].flags.writeable
        if calls:
            decoy = calls[0]
            assert {n: (d.shape, d.dtype) for n, d in decoy.items()} == \
                {n: (a.shape, a.dtype) for n, a in request.inputs.items()}
            assert any(not np.array_equal(decoy[n], a, equal_nan=True) for n, a in request.inputs.items())
        elif all(a.size for a in request.inputs.values()):
            without.append(path.name)
    assert not without


def test_decoy_values_reverse_the_first_long_axis():
    a = np.arange(12).reshape(1, 3, 4)
    np.testing.assert_array_equal(decoy_values(a), a[:, ::-1, :])
    one = np.ones((1, 1))
    assert decoy_values(one) is one
