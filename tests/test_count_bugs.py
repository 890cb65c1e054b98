"""Every kernel with an item axis has a planted bug that keeps its item count in 16 bits
(``counts_in_uint16`` in its family's planted*.py, gen/kernels/shared/planted_counts.py), and that bug
fails two cases of distinct shapes in the committed suite and in the default suites (gen/REACH.md).

The committed suite holds each kernel's two smallest count cases, and each item dim's two smallest within
2.2 MB (cases/README.md, --smallest-counts); on each such dim the bug fails two shapes.
They are the default suites' cases of the same names: the same plan and seed make the same bytes
(tests/test_committed_cases.py regenerates cases/), and the README's main command (--max-size 64MB)
plans them; so one run on the committed files judges both, and the plan says they are in both.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from conftest import REPO, checked_backend
from gen.core.casefile import load
from gen.core.registry import planted_bugs
from gen.core.spec import load_spec
from gen.core.verdict import ERROR, FAILING, PASSED
from gen.generate import plan_suite, total_bytes
from gen.reach import COUNT_PREFIX, count_dim, item_dims
from harness.judge.runner import run_case
from harness.studies.power import case_shape

SPECS = sorted((REPO / "specs").glob("*.yaml"))
COMMITTED = REPO / "cases"
from gen.kernels.shared.planted_counts import COUNT_BUG
DEFAULT_MAX_BYTES = 64 * 10**6      # the README's main command: --max-size 64MB


def _counted(spec) -> list[str]:
    """The item dims of the stress base that its count cases raise (not waived)."""
    conf = spec.suites.get("stress") or {}
    waived = conf.get("not_applicable") or {}
    dims = (conf.get("base") or {}).get("dims") or {}
    return [d for d in item_dims(spec, dims) if f"{COUNT_PREFIX}{d}" not in waived]


def _count_files(op: str) -> list[Path]:
    """The committed cases past 2^16 on some item axis: the stress suite's count cases, and any
    boundary case the spec places there."""
    return sorted(p for p in (COMMITTED / op).rglob("*.opcase")
                  if p.parent.name != "invalid" and _past_16_bits(load(p)))


def _past_16_bits(case) -> bool:
    spec = load_spec(REPO / "specs" / f"{case.op}.yaml")
    for name, t in {**case.inputs, **case.outputs}.items():
        tensor = spec.inputs.get(name) or spec.outputs.get(name)
        if tensor is not None and not t.absent and any(
                role == "item" and n >= 2**16 for n, role in zip(t.shape, tensor.axes)):
            return True
    return False


COUNTED = [p.stem for p in SPECS if _counted(load_spec(p))]


@pytest.mark.parametrize("op", COUNTED)
def test_the_count_bug_fails_two_shapes_in_both_suites(op):
    assert COUNT_BUG in planted_bugs(op), f"{op} has item axes and no planted {COUNT_BUG} (gen/kernels/<family>/planted*.py)"
    files = _count_files(op)
    bug = checked_backend(f"{op}-{COUNT_BUG}", planted_bugs(op)[COUNT_BUG])
    failed = {}
    for path in files:
        result = run_case(path, bug, bug.name)
        assert result.status != ERROR, f"{path.name}: the buggy copy crashed"
        if result.status in FAILING:
            failed[path] = case_shape(load(path))
    assert len(set(failed.values())) >= 2, f"{op}: {COUNT_BUG} fails {len(failed)} committed case(s) of " \
                                           f"{len(set(failed.values()))} shape(s): {[p.name for p in failed]}"
    # On every item dim the committed suite has count cases of (each dim's two smallest within
    # gen.reach.COUNT_CASE_CAP), the bug fails two shapes of that dim's cases.
    by_dim = {}
    for path in files:
        by_dim.setdefault(count_dim(path.stem), []).append(path)
    for dim, paths in by_dim.items():
        if dim is None:
            continue
        assert dim in _counted(load_spec(REPO / "specs" / f"{op}.yaml")), f"{op}: count cases of a waived dim {dim}"
        shapes = {failed[p] for p in paths if p in failed}
        assert len(shapes) >= 2, f"{op}: {COUNT_BUG} fails {len(shapes)} shape(s) of the committed count_{dim} cases"
    # The same cases are in the default suites: planned by the main command, within its --max-size.
    spec = load_spec(REPO / "specs" / f"{op}.yaml")
    for path in failed:
        case = load(path)
        plan = next((p for p in plan_suite(spec, case.suite) if p.name == case.name and p.seed == case.seed), None)
        assert plan is not None, f"{path.name}: no plan of the default suites makes it"
        assert total_bytes(spec, plan) <= DEFAULT_MAX_BYTES


def test_the_count_bugs_act_only_past_16_bits():
    """Below 2^16 items a count bug is the bug-free kernel (the committed random cases pass it), so its
    failures above are the count's; that the reference passes the count cases is test_committed_cases'."""
    for op in COUNTED:
        bug = checked_backend(f"{op}-{COUNT_BUG}", planted_bugs(op)[COUNT_BUG])
        small = sorted((COMMITTED / op / "random").glob("*.opcase"))[:2]
        assert small and all(run_case(p, bug, bug.name).status == PASSED for p in small), op
