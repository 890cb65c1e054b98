"""`opcase power` and reach (gen/REACH.md): the generic count mutants and the planted count and tie bugs
are killed by the committed count and tie cases (the default suites' cases of the same names,
tests/test_count_bugs.py), each by two case shapes; and power reports a mutant of a backward reference
that the goldens pass and only the adjoint identity catches."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from click.testing import CliRunner

from conftest import REPO
from gen.adjoint import family_pairs
from gen.adjoint_reference import reference_identity_error
from gen.core.spec import load_spec
from harness.backends import load_backend
from harness.cli import main
from harness.studies import power, power_identity
from harness.studies.mutants import mutants as all_mutants

COMMITTED = REPO / "cases"
SPECS = sorted((REPO / "specs").glob("*.yaml"))
COUNT_MUTANTS = ("count_in_int16", "count_in_uint16")
# The planted bugs of counts and of ties across splits (gen/kernels/*/planted*.py).
REACH_BUGS = ("counts_in_uint16", "ties_across_segments_256")


def _reach_cases() -> list:
    return sorted(p for p in COMMITTED.glob("*/stress/*.opcase") if p.name.startswith(("count_", "ties_")))


@pytest.fixture(scope="module")
def reach_report():
    """power's report on the committed count and tie cases, with only the mutants that act on counts and
    ties (every other mutant is judged by tests/test_power.py; leaving them out keeps this fast)."""
    def reach_only(spec, base_name):
        return [m for m in all_mutants(spec, base_name) if m.name in COUNT_MUTANTS + REACH_BUGS]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(power, "mutants", reach_only)
        mp.setattr(power, "controls", lambda spec: [])
        doc = power.measure(_reach_cases(), load_backend("reference"), "reference")
    print("\n".join(power.table_lines(doc, kills=True)))   # the measure, with -s
    return doc


def test_count_and_tie_mutants_are_killed_by_two_shapes(reach_report):
    entries = {(m["kernel"], m["name"]): m for m in reach_report["mutants"]}
    kernels = {p.parent.parent.name for p in _reach_cases() if p.name.startswith("count_")}
    assert kernels, "no committed count case"
    for kernel in kernels:
        for name in COUNT_MUTANTS:
            m = entries[(kernel, name)]
            assert m["verdict"] == "killed" and m["failing_shapes"] >= 2, (kernel, m)
    reach_bugs = [m for m in reach_report["mutants"] if m["kind"] == "planted"]
    assert {m["name"] for m in reach_bugs} == set(REACH_BUGS)
    assert all(m["verdict"] == "killed" and m["failing_shapes"] >= 2 for m in reach_bugs), reach_bugs


def test_power_reports_a_backward_mutant_only_the_identity_catches(tmp_path):
    pairs = family_pairs([load_spec(p) for p in SPECS])
    assert pairs
    _, backward = next(iter(pairs.values()))
    suite = tmp_path / "suite" / backward.op / "random"
    suite.mkdir(parents=True)
    for path in sorted((COMMITTED / backward.op / "random").glob("*.opcase"))[:2]:
        shutil.copy(path, suite)
    report = tmp_path / "power.json"
    result = CliRunner().invoke(main, ["power", str(tmp_path / "suite"), "--json", str(report)])
    doc = json.loads(report.read_text())
    entry = next(m for m in doc["identity"] if m["name"] == "backward_reference_in_float32")
    assert entry["cases_verdict"] in ("survived", "n/a") and entry["failing"] == 0, entry
    assert entry["by_identity"] and entry["identity_error"] > power_identity.IDENTITY_TOLERANCE, entry
    assert doc["summary"]["identity_only"] >= 1
    assert f"IDENTITY  {backward.op}  backward_reference_in_float32:" in result.output, result.output


def test_the_identity_tier_passes_a_float64_backward():
    """The same check on the backward reference in float64 holds: what catches the mutant is its float32."""
    for _, backward in family_pairs([load_spec(p) for p in SPECS]).values():
        assert reference_identity_error(backward.op, np.float32)[0] > power_identity.IDENTITY_TOLERANCE
        error, samples = reference_identity_error(backward.op, np.float64)
        assert samples >= 1 and error <= power_identity.IDENTITY_TOLERANCE, (backward.op, error)
