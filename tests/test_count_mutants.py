"""The count mutants (harness/studies/count_mutants.py, gen/REACH.md) act on item axes past the 16-bit range only,
found from the spec's axis roles: here on a committed count case whose searched item axis is past 2^16."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from conftest import REPO
from gen.core.casefile import load
from gen.core.registry import spec_for
from gen.core.verdict import request_for
from harness.backends import load_backend
from harness.studies.count_mutants import wrapped
from harness.studies.mutants import Call, NotApplicable, mutants

COMMITTED = REPO / "cases"


def _count_cases() -> list[Path]:
    return sorted(COMMITTED.glob("*/stress/count_*.opcase"))


def test_wrapped_counts():
    assert wrapped(2**16 + 1, signed=False) == 1 and wrapped(2**16 + 1, signed=True) == 1
    assert wrapped(2**15 + 1, signed=False) == 2**15 + 1 and wrapped(2**15 + 1, signed=True) == 0
    assert wrapped(100, signed=True) == 100


@pytest.mark.parametrize("name", ["count_in_int16", "count_in_uint16"])
def test_a_count_mutant_changes_a_count_case_and_leaves_a_small_one_alone(name):
    cases = _count_cases()
    if not cases:
        pytest.skip("no committed count case")
    case = load(cases[0])
    mutant = next(m for m in mutants(spec_for(case.op), "reference") if m.name == name)
    base = load_backend("reference")
    produced = mutant.apply(Call(request_for(case), base))
    right = base.run(request_for(case))
    assert any(not np.array_equal(produced[n], right[n]) for n in right)
    small = next(p for p in sorted((COMMITTED / case.op / "random").glob("*.opcase")))
    with pytest.raises(NotApplicable):
        mutant.apply(Call(request_for(load(small)), base))
