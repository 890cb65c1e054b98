"""Every stress dimension reaches every kernel it applies to (README: Stress dimensions), decided
from what the specs say of their tensors (axis roles, dtypes, shapes), never from kernel names:

- channel tails: every axis whose role is `channel` and whose size a dim or param sets is, in
  some stress case, past one block of 64 and partial in blocks of 16 and 64 (C > 64, C % 16 != 0);
- batch: every `batch` axis a dim sets is 2 or more in some stress case;
- index width: some tensor of some stress case is past 2^24 elements, one such case within the README
  main command's --max-size 64MB (`index_width_64MB`, gen/REACH.md), and past 2^31 bytes for a
  kernel whose reference streams its goldens (`fn_blocks`: the only ones a case that size is
  feasible for, README: Which kernels have no case past 2^31 bytes);
- subnormal values: some stress case draws a float input wholly in its dtype's subnormal range.

A spec may say why a dimension its tensors would take does not apply to its arithmetic
(`suites.stress.not_applicable: {subnormal: "why"}`); the reason then stands for the cases.

Contention is not decided here: whether a kernel accumulates long chains is in its arithmetic,
not its tensors' roles; the specs declare it where they do (README: Stress dimensions).
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import yaml

from conftest import REPO
from gen.core.casefile import element_count
from gen.core.spec import dims_with_role, load_spec
from gen.generate import interface_params, layout_of, plan_suite, total_bytes
from gen.reach import COUNT_PREFIX, SPLITS, count_entries, item_dims, selection_outputs

SPECS = sorted((REPO / "specs").glob("*.yaml"))
BLOCK, VECTOR = 64, 16
MAIN_COMMAND_MAX_BYTES = 64 * 10**6     # README: the main command's --max-size 64MB


def _sized_by_case(entry) -> bool:
    """Whether a shape entry can change from case to case (a dim or param, not a literal)."""
    return not isinstance(entry, int)


def missing_dimensions(spec) -> list[str]:
    """The stress dimensions that apply to ``spec``'s tensors and that its stress suite lacks."""
    plans = plan_suite(spec, "stress") if "stress" in spec.suites else []
    layouts = [(plan, layout_of(spec, replace(plan, params=interface_params(spec, plan.params)))) for plan in plans]
    tensors = [*spec.inputs.values(), *spec.outputs.values()]
    missing = []
    for t in tensors:
        for axis, (entry, role) in enumerate(zip(t.shape, t.axes)):
            if not _sized_by_case(entry):
                continue
            extents = [lay.shapes[t.name][axis] for _, lay in layouts]
            if role == "channel" and not any(n > BLOCK and n % VECTOR for n in extents):
                missing.append(f"channel tail: {t.name} axis {axis} ({entry}) never past {BLOCK} with a partial "
                               f"block of {VECTOR} (sizes {sorted(set(extents))})")
            if role == "batch" and not any(n >= 2 for n in extents):
                missing.append(f"batch: {t.name} axis {axis} ({entry}) never 2 or more")
    if any(_sized_by_case(e) for t in tensors for e in t.shape):
        largest = max((element_count(lay.shapes[t.name]) for _, lay in layouts for t in tensors), default=0)
        if largest <= 2**24:
            missing.append(f"index width: no tensor past 2^24 elements (largest {largest})")
        widest = max((element_count(lay.shapes[t.name]) * np.dtype(lay.dtypes[t.name]).itemsize
                      for _, lay in layouts for t in tensors), default=0)
        within = [element_count(lay.shapes[t.name]) for plan, lay in layouts for t in tensors
                  if total_bytes(spec, plan) <= MAIN_COMMAND_MAX_BYTES]
        if largest > 2**24 and max(within, default=0) <= 2**24:
            missing.append(f"index_width_64MB: no case within the main command's --max-size 64MB has a tensor past "
                           f"2^24 elements (largest within it {max(within, default=0)})")
        if spec.reference_blocks_fn is not None and widest <= 2**31:
            missing.append(f"index width: no tensor past 2^31 bytes (widest {widest}), though the reference streams")
    base_dims = dict(((spec.suites.get("stress") or {}).get("base") or {}).get("dims") or {})
    for dim in item_dims(spec, base_dims):
        if not any(plan.dims.get(dim, 0) > 2**16 for plan in plans):
            missing.append(f"{COUNT_PREFIX}{dim}: no stress case past 2^16 items")
    floats = [t.name for t in spec.inputs.values() if t.dtype == "T" or str(t.dtype).startswith("float")]
    if floats and not any(_subnormal_input(spec, plan, floats) for plan in plans):
        missing.append(f"subnormal: no case draws any of {', '.join(floats)} in the subnormal range")
    return missing


def _subnormal_input(spec, plan, floats) -> bool:
    """Whether ``plan`` draws some float input wholly between -tiny and tiny of its dtype."""
    for name in floats:
        dist = plan.values.get(name) or spec.inputs[name].values or {}
        dtype = plan.dtype if spec.inputs[name].dtype == "T" else spec.inputs[name].dtype
        bounds = [dist.get(k) for k in ("low", "high")]
        if dist.get("dist") == "uniform" and all(isinstance(b, (int, float)) for b in bounds) and \
                max(abs(b) for b in bounds) < np.finfo(dtype).tiny:
            return True
    return False


def unexplained(spec) -> list[str]:
    """The missing dimensions for which the spec's suites.stress.not_applicable gives no reason."""
    waived = (spec.suites.get("stress") or {}).get("not_applicable") or {}
    return [m for m in missing_dimensions(spec) if _dimension(m) not in waived]


def _dimension(missing: str) -> str:
    return {"channel tail": "channel_tail", "index width": "index_width"}.get(missing.split(":")[0],
                                                                            missing.split(":")[0])


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.stem)
def test_every_stress_dimension_reaches_the_kernel(path):
    assert unexplained(load_spec(path)) == []


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.stem)
def test_a_dimension_said_not_to_apply_is_missing(path):
    """A reason in not_applicable stands only for a dimension the suite really lacks."""
    spec = load_spec(path)
    waived = (spec.suites.get("stress") or {}).get("not_applicable") or {}
    missing = {_dimension(m) for m in missing_dimensions(spec)}
    assert set(waived) <= missing, f"not_applicable names dimensions the suite has: {set(waived) - missing}"


# ----------------------------------------------------------------------------- the check can fail

def _planted(tmp_path, path, change) -> object:
    """A temporary copy of the spec at ``path`` with ``change`` applied to its suites.stress."""
    doc = yaml.safe_load(path.read_text())
    change(doc["suites"]["stress"])
    copy = tmp_path / path.name
    copy.write_text(yaml.safe_dump(doc, sort_keys=False))
    return load_spec(copy)


def _entries(tails) -> list:
    return tails if isinstance(tails, list) else [tails]


def _first_spec_with(key):
    """Some discovered spec whose stress suite declares ``key`` (whichever sorts first)."""
    return next(p for p in SPECS if key in (load_spec(p).suites.get("stress") or {}))


def test_a_channel_tail_capped_at_64_is_caught(tmp_path):
    def cap(stress):
        for entry in _entries(stress["channel_tail"]):
            entry["widths"] = [16]              # tails 15, 17, 33: never past 64
        for key in ("index_width", "contention"):   # their cases may set channels past 64 themselves
            stress.pop(key, None)
    spec = _planted(tmp_path, _first_spec_with("channel_tail"), cap)
    missing = missing_dimensions(spec)
    assert any(m.startswith("channel tail:") for m in missing), missing


def test_a_missing_index_width_is_caught(tmp_path):
    spec = _planted(tmp_path, _first_spec_with("index_width"), lambda stress: stress.pop("index_width"))
    assert any(m.startswith("index width: no tensor past 2^24") for m in missing_dimensions(spec))


def test_a_missing_2e31_case_is_caught_where_the_reference_streams(tmp_path):
    path = next(p for p in SPECS if load_spec(p).reference_blocks_fn is not None)
    spec = _planted(tmp_path, path, lambda stress: stress["index_width"].pop("past_2e31"))
    assert any(m.startswith("index width: no tensor past 2^31") for m in missing_dimensions(spec))


def test_an_index_width_case_over_64MB_is_caught(tmp_path):
    """A spec whose only case past 2^24 elements is over 64 MB, and that gives no reason, is missing it."""
    path = next(p for p in SPECS if "index_width_64MB" in
                ((load_spec(p).suites.get("stress") or {}).get("not_applicable") or {}))
    def drop(stress):
        stress["not_applicable"].pop("index_width_64MB")
        if not stress["not_applicable"]:
            stress.pop("not_applicable")
    spec = _planted(tmp_path, path, drop)
    assert [m for m in unexplained(spec) if m.startswith("index_width_64MB:")]


def test_missing_subnormal_values_are_caught(tmp_path):
    def drop(stress):
        stress["values"].pop("subnormal")
        if not stress["values"]:
            stress.pop("values")
    spec = _planted(tmp_path, _first_spec_with("values"), drop)
    assert any(m.startswith("subnormal:") for m in missing_dimensions(spec))


def test_a_missing_batch_is_caught(tmp_path):
    def one_image(path):
        spec = load_spec(path)
        base = spec.suites["stress"]["base"]["dims"]
        return all(base.get(d, 1) == 1 for d in dims_with_role(spec, "batch"))
    path = next(p for p in SPECS if "batch" in (load_spec(p).suites.get("stress") or {}) and one_image(p))
    spec = _planted(tmp_path, path, lambda stress: stress.pop("batch"))
    assert any(m.startswith("batch:") for m in missing_dimensions(spec))


def test_a_reason_stands_for_a_missing_dimension_and_only_then(tmp_path):
    def drop(stress):
        stress["values"].pop("subnormal")
        if not stress["values"]:
            stress.pop("values")
        stress["not_applicable"] = {"subnormal": "planted: the test's reason"}
    spec = _planted(tmp_path, _first_spec_with("values"), drop)
    assert any(m.startswith("subnormal:") for m in missing_dimensions(spec)) and not unexplained(spec)


# ----------------------------------------------------------------------------- count reach and ties (gen/REACH.md)

@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.stem)
def test_count_cases_keep_the_other_dims_small(path):
    """A count case is small: its other dims at their smallest, no tensor over 2^22 elements."""
    spec = load_spec(path)
    large = [p.name for p in plan_suite(spec, "stress") if p.name.startswith(COUNT_PREFIX)
             and any(element_count(s) > 2**22 for s in layout_of(spec, replace(p, params=interface_params(
                 spec, p.params))).shapes.values())]
    assert large == []


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.stem)
def test_every_selection_output_meets_ties_across_splits(path):
    """A kernel with a selection output (exact, with near-ties) has tie cases, one longer than the largest split
    along each item axis of an input they draw."""
    spec = load_spec(path)
    if not selection_outputs(spec):
        return
    ties = [p for p in plan_suite(spec, "stress") if p.name.startswith("ties_")]
    assert ties, "a kernel with a selection output has no tie case"
    drawn = {n for p in ties for n, v in p.values.items() if v.get("fn", "").endswith(":tied_items")}
    base_dims = spec.suites["stress"]["base"].get("dims") or {}
    for name in drawn:
        for entry, role in zip(spec.inputs[name].shape, spec.inputs[name].axes):
            if role == "item" and entry in base_dims:
                assert any(p.dims[entry] > max(SPLITS) for p in ties), f"{name}'s {entry} never past {max(SPLITS)}"


def test_a_missing_count_is_caught_and_a_reason_stands_for_it(tmp_path):
    path = next(p for p in SPECS if item_dims(load_spec(p), load_spec(p).suites["stress"]["base"].get("dims") or {}))
    spec = load_spec(path)
    dim = item_dims(spec, spec.suites["stress"]["base"]["dims"])[0]
    waived = _planted(tmp_path, path, lambda stress: stress.setdefault("not_applicable", {}).update(
        {f"{COUNT_PREFIX}{dim}": "a reason"}))
    assert f"{COUNT_PREFIX}{dim}: no stress case past 2^16 items" in missing_dimensions(waived)
    assert not any(m.startswith(f"{COUNT_PREFIX}{dim}") for m in unexplained(waived))
    assert not any(m.startswith(f"{COUNT_PREFIX}{dim}") for m in missing_dimensions(spec))


def test_a_count_no_valid_call_takes_needs_a_reason():
    path = next(p for p in SPECS if item_dims(load_spec(p), load_spec(p).suites["stress"]["base"].get("dims") or {}))
    spec = load_spec(path)
    with pytest.raises(ValueError, match=f"not_applicable.{COUNT_PREFIX}"):
        count_entries(spec, spec.suites["stress"]["base"], {}, lambda dims, params: False)


def test_count_with_sets_the_dims_of_its_count_cases():
    """suites.stress.count_with: a count case of a dim it names has those dims, a dim name standing for its value."""
    path = _first_spec_with("count_with")
    spec = load_spec(path)
    with_dims = spec.suites["stress"]["count_with"]
    cases = {p.name.split("-")[0]: p for p in plan_suite(spec, "stress") if p.name.startswith(COUNT_PREFIX)}
    for dim, dims in with_dims.items():
        raised = [p for name, p in cases.items() if name.startswith(f"{COUNT_PREFIX}{dim}")]
        assert len(raised) == 2, f"count_{dim}: {sorted(cases)}"
        for plan in raised:
            for name, value in dims.items():
                assert plan.dims[name] == (plan.dims[value] if isinstance(value, str) else value), (plan.name, name)


@pytest.mark.parametrize("bad", [
    lambda item, other: {"NOT_A_DIM": {other: 1}},            # not a dim of the base
    lambda item, other: "not a mapping",
    lambda item, other: {item: {other: -1}},                  # not a whole number >= 0
    lambda item, other: {item: {item: 1}},                    # the count itself
    lambda item, other: {item: {other: "NOT_A_DIM"}},         # a name that is no dim
    lambda item, other: {item: {other: [1]}},
], ids=["unknown_dim", "not_a_mapping", "negative", "the_count_itself", "unknown_name", "a_list"])
def test_a_bad_count_with_is_one_clear_line(tmp_path, bad):
    from gen.core.spec import SpecError
    path = _first_spec_with("count_with")
    spec = load_spec(path)
    item = next(iter(spec.suites["stress"]["count_with"]))
    other = next(d for d in spec.suites["stress"]["base"]["dims"] if d != item)
    with pytest.raises(SpecError, match="count_with"):
        _planted(tmp_path, path, lambda stress: stress.update(count_with=bad(item, other)))


def test_count_with_names_only_item_dims():
    path = _first_spec_with("count_with")
    spec = load_spec(path)
    base = spec.suites["stress"]["base"]
    plain = next(d for d in base["dims"] if d not in item_dims(spec, base["dims"]))
    with pytest.raises(ValueError, match=f"count_with.{plain}"):
        count_entries(spec, base, {}, lambda dims, params: True, {plain: {next(iter(base["dims"])): 1}})
