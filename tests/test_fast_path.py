"""The fast_path suite: every spec names the parameter values an implementation special-cases
(suites.fast_path, specs/README.md), and each is made at two case shapes or more, in every dtype,
as a valid call.  That its cases kill the kernels' planted fast-path bugs is tests/test_kernels.py's
test_planted_bug_fails_the_suite (its suites hold the fast_path cases)."""
from __future__ import annotations

import pytest

from conftest import REPO
from gen.core.checks import first_failure
from gen.core.spec import SUITES, load_spec
from gen.generate import interface_params, layout_of, plan_suite, tensor_infos

SPECS = sorted((REPO / "specs").glob("*.yaml"))


def test_fast_path_is_a_suite_that_all_includes():
    assert "fast_path" in SUITES


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.stem)
def test_every_kernel_names_its_fast_paths(path):
    """A kernel with parameters or optional inputs says which of their values an implementation
    typically special-cases; none without either could have one."""
    spec = load_spec(path)
    if not spec.params and not any(t.optional for t in spec.inputs.values()):
        pytest.skip(f"{spec.op} has no parameter and no optional input to special-case")
    assert spec.suites.get("fast_path", {}).get("paths"), f"{spec.op}: suites.fast_path names no fast path"


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.stem)
def test_each_fast_path_is_made_at_two_shapes_in_every_dtype(path):
    spec = load_spec(path)
    conf = spec.suites.get("fast_path")
    if not conf:
        pytest.skip(f"{spec.op} has no fast_path suite")
    plans = plan_suite(spec, "fast_path")
    for fast in conf["paths"]:
        mine = [p for p in plans if p.name.startswith(f"{fast['name']}-")]
        shapes = set()
        for plan in mine:
            assert {k: plan.params[k] for k in fast.get("params") or {} if k not in (fast.get("each") or {})} == \
                {k: v for k, v in (fast.get("params") or {}).items() if k not in (fast.get("each") or {})}, plan.name
            assert set(fast.get("omit") or ()) <= set(plan.omit), plan.name
            assert plan.note.startswith("fast path: ") and fast["why"] in plan.note
            lay = layout_of(spec, plan)
            infos = tensor_infos(spec, lay.shapes, lay.dtypes, lay.layouts, plan.omit)
            assert first_failure(spec, infos, interface_params(spec, plan.params)) is None, plan.name
            shapes.add(tuple(sorted(lay.shapes.items())))
        assert len(shapes) >= 2, (fast["name"], shapes)
        assert {p.dtype for p in mine} == set(spec.dtypes), fast["name"]
