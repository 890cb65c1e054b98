"""Every kernel with a selection output (an output judged exactly with recorded near-ties: gen.reach.
selection_outputs) has a planted bug of a tie between splits (its family's planted*.py, named
``ties_across_*``: gen.reach.TIE_BUG_PREFIX), which fails two committed cases of distinct shapes that
the default suites hold too; and `opcase power`'s generic tie mutants (harness/studies/tie_mutants.py)
are killed on the committed suite by two shapes, each kernel by at least one of them (gen/REACH.md).

The committed cases are the default suites' cases of the same names (tests/test_committed_cases.py
regenerates cases/ from the same plans and seeds), so the plan check says the kills hold there too.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO, checked_backend
from gen.core.casefile import load
from gen.core.registry import planted_bugs
from gen.core.spec import load_spec
from gen.core.verdict import ERROR, FAILING, request_for
from gen.generate import plan_suite, total_bytes
from gen.reach import SPLITS, TIE_BUG_PREFIX, selection_outputs, tie_inputs
from harness.backends import load_backend
from harness.judge.runner import run_case
from harness.studies import power
from harness.studies.mutants import Call
from harness.studies.mutants import mutants as all_mutants
from harness.studies import tie_mutants as ties
from harness.studies.tie_mutants import tie_mutants

SPECS = sorted((REPO / "specs").glob("*.yaml"))
COMMITTED = REPO / "cases"
DEFAULT_MAX_BYTES = 64 * 10**6      # the README's main command: --max-size 64MB
SELECTING = [p.stem for p in SPECS if selection_outputs(load_spec(p))]
TIE_MUTANTS = {m.name for m in tie_mutants(lambda name, what, needs, apply: type("M", (), {"name": name}),
                                           Exception)}


def _valid_files(op: str) -> list[Path]:
    return sorted(p for p in (COMMITTED / op).rglob("*.opcase") if p.parent.name != "invalid")


def _tie_bugs(op: str) -> list[str]:
    return [name for name in planted_bugs(op) if name.startswith(TIE_BUG_PREFIX)]


def test_some_kernel_has_a_selection_output():
    assert SELECTING, "no spec has an output judged exactly with recorded near-ties"
    # The harness reads selections and the split size as the generator does (it does not import gen.reach).
    assert [p.stem for p in SPECS if ties.selection_outputs(load_spec(p))] == SELECTING
    assert ties.SEGMENT == min(SPLITS) and all(s % ties.SEGMENT == 0 for s in SPLITS)


@pytest.mark.parametrize("op", SELECTING)
def test_the_tie_bug_fails_two_shapes_in_both_suites(op):
    bugs = _tie_bugs(op)
    assert bugs, f"{op} has a selection output and no planted {TIE_BUG_PREFIX}* bug (gen/kernels/<family>/planted*.py)"
    spec = load_spec(REPO / "specs" / f"{op}.yaml")
    for name in bugs:
        bug = checked_backend(f"{op}-{name}", planted_bugs(op)[name])
        failed, in_default = {}, set()
        # Smallest first, up to two shapes the default suites hold too: what power does (ENOUGH_KILLS).
        for path in sorted(_valid_files(op), key=power.case_bytes):
            result = run_case(path, bug, bug.name)
            assert result.status != ERROR, f"{path.name}: the buggy copy crashed"
            if result.status not in FAILING:
                continue
            case = load(path)
            failed[path] = power.case_shape(case)
            # The same case is the default suites': planned by the main command, within its --max-size.
            plan = next((p for p in plan_suite(spec, case.suite) if p.name == case.name and p.seed == case.seed), None)
            if plan is not None and total_bytes(spec, plan) <= DEFAULT_MAX_BYTES:
                in_default.add(failed[path])
            if len(in_default) >= 2:
                break
        assert len(in_default) >= 2, f"{op}: {name} fails {len(failed)} committed case(s) of " \
                                     f"{len(set(failed.values()))} shape(s), {len(in_default)} of them in the " \
                                     f"default suites: {[p.name for p in failed]}"


@pytest.fixture(scope="module")
def tie_report():
    """power's report on the committed cases of the kernels with a selection output, with only the tie
    mutants and the tie bugs (every other mutant is tests/test_power.py's)."""
    def ties_only(spec, base_name):
        return [m for m in all_mutants(spec, base_name) if m.name in TIE_MUTANTS or m.name.startswith(TIE_BUG_PREFIX)]
    files = [p for op in SELECTING for p in _valid_files(op)]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(power, "mutants", ties_only)
        mp.setattr(power, "controls", lambda spec: [])
        doc = power.measure(files, load_backend("reference"), "reference")
    print("\n".join(power.table_lines(doc, kills=True)))   # the measure, with -s
    return doc


def test_the_tie_mutants_are_killed_by_two_shapes(tie_report):
    generic = [m for m in tie_report["mutants"] if m["name"] in TIE_MUTANTS]
    assert not [m for m in generic if m["verdict"] == "survived"], generic
    for op in SELECTING:
        killed = [m for m in generic if m["kernel"] == op and m["verdict"] == "killed"]
        assert killed, f"{op}: no tie mutant applies (a searched item axis, or SELECTION_CANDIDATES in its reference)"
        assert all(m["failing_shapes"] >= 2 for m in killed), killed
    planted = [m for m in tie_report["mutants"] if m["kind"] == "planted"]
    assert planted and all(m["verdict"] == "killed" and m["failing_shapes"] >= 2 for m in planted), planted



def _continuous(request, spec, rng):
    """The call with every float input a tie case draws as integers (gen.reach.tie_inputs) redrawn normal(0, 1)
    in its dtype: no exact tie is left but by chance (boxes and other built inputs are kept)."""
    names = tie_inputs(spec, (spec.suites.get("stress") or {}).get("base") or {})
    inputs = {n: (rng.standard_normal(a.shape).astype(a.dtype) if n in names else a) for n, a in request.inputs.items()}
    return dataclasses.replace(request, inputs=inputs)


def _changed(mutant, call, selections) -> int:
    """How many selection elements the mutant changes on the call (and it changes nothing else)."""
    produced = mutant.apply(call)
    others = [n for n in produced if n not in selections]
    assert all(np.array_equal(produced[n], call.base()[n], equal_nan=True) for n in others), others
    return sum(int((np.asarray(produced[n]) != np.asarray(call.base()[n])).sum()) for n in selections)


def test_the_tie_mutants_act_on_ties_only(tie_report):
    """On the cases that kill a tie mutant it changes the selection and nothing else.  On the same calls with
    the integer inputs redrawn from a continuous distribution it changes fewer elements: the ties of equal
    values are gone (those of the geometry stay: a one-pixel map samples one value at every point)."""
    reference = load_backend("reference")
    rng = np.random.default_rng(38)
    counts = {}
    for entry in (m for m in tie_report["mutants"] if m["name"] in TIE_MUTANTS and m["verdict"] == "killed"):
        spec = load_spec(REPO / "specs" / f"{entry['kernel']}.yaml")
        mutant = next(m for m in all_mutants(spec, "reference") if m.name == entry["name"])
        selections = set(selection_outputs(spec))
        tied = untied = 0
        for failing in entry["failing_cases"]:
            request = request_for(load(COMMITTED / f"{failing['case']}.opcase"))
            tied += _changed(mutant, Call(request, reference), selections)
            untied += _changed(mutant, Call(_continuous(request, spec, rng), reference), selections)
        counts[entry["kernel"]] = (tied, untied)
    assert set(counts) == set(SELECTING), counts
    print(counts)   # the measure, with -s
    assert all(untied < tied for tied, untied in counts.values()), counts
