"""The stress suite: dimensions a spec declares in suites.stress (value regimes, channel tails,
contention, batch, index width), derived into valid, named cases by the generator, and the
bug classes they exist for, each caught by at least two distinct cases."""
from __future__ import annotations


import numpy as np
import pytest
from click.testing import CliRunner

import stress_backends
from conftest import REPO
from gen.core.checks import first_failure
from gen.generate import tensor_infos, channel_tail_entries, channel_tails, interface_params, layout_of, plan_suite, total_bytes
from gen.core.spec import SUITES, SpecError, dims_with_role, load_spec
from gen.core.backend import Backend
from gen.core.casefile import element_count, find, load
from harness.cli import main
from gen.core.verdict import FAILING, PASSED
from harness.judge.runner import run_case

SPECS = sorted((REPO / "specs").glob("*.yaml"))
# The specs that declare a stress suite (it is optional).
STRESSED = [path for path in SPECS if "stress" in load_spec(path).suites]
MAX_SIZE = 64_000_000          # the README's main command: --max-size 64MB


def _line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


# ----------------------------------------------------------------------------- derivation

def test_channel_tails_straddle_every_width_and_pass_the_widest():
    assert channel_tails([16, 64]) == [15, 17, 63, 65, 129]
    assert channel_tails([32]) == [31, 33, 65]


def test_stress_is_a_suite_that_all_includes():
    assert "stress" in SUITES


def test_carafe_forward_stress_cases_are_named_for_select():
    names = [p.name for p in plan_suite(load_spec(REPO / "specs" / "carafe_forward.yaml"), "stress")]
    assert names == [
        # Each regime at the base and at the narrowest channel tail: two shapes.
        "value_subnormal-float16", "value_subnormal_C15-float16", "value_positive-float16", "value_positive-float32",
        "value_positive_C15-float16", "value_positive_C15-float32",
        "value_near_overflow-float16", "value_near_overflow_C15-float16",
        *(f"channel_tail_C{c}-{d}" for c in (15, 17, 63, 65, 129) for d in ("float16", "float32")),
        "contention_taps_one_input-float16", "contention_taps_one_input-float32",
        "batch_N3_H5_W9-float16", "batch_N3_H5_W9-float32", "index_2e24-float16", "index_2e31-float16"]


@pytest.mark.parametrize("path", STRESSED, ids=lambda p: p.stem)
def test_every_stress_case_is_valid_and_crosses_what_it_claims(path):
    spec = load_spec(path)
    conf = spec.suites["stress"]
    plans = plan_suite(spec, "stress")
    assert plans
    for plan in plans:
        lay = layout_of(spec, plan)
        infos = tensor_infos(spec, lay.shapes, lay.dtypes, lay.layouts, plan.omit)
        assert first_failure(spec, infos, interface_params(spec, plan.params)) is None, plan.name
        if plan.name.startswith("value_subnormal"):
            # The narrowest float dtype only: float16 where the kernel has it, else float32's.
            assert plan.dtype == ("float16" if "float16" in spec.dtypes else "float32")
        if plan.name.startswith("value_near_overflow"):
            assert plan.dtype == "float16"
        if plan.name.startswith("channel_tail_"):
            # The entry whose dim or param this case sets to one of its tails, named for it.
            assert any(plan.name.startswith(f"channel_tail_{sized}{size}-")
                       and size in channel_tails(tail["widths"])
                       for tail in channel_tail_entries(conf)
                       for sized, size in [(tail["dim"], plan.dims.get(tail["dim"])) if "dim" in tail else
                                           (tail["param"], plan.params.get(tail["param"]))]), plan.name
        if plan.name.startswith("batch_"):
            # The dims the spec's batch block names, whatever the kernel calls them.
            assert {d: plan.dims[d] for d in conf["batch"]} == conf["batch"]
            assert any(plan.dims.get(d, 0) > 1 for d in dims_with_role(spec, "batch")), plan.dims
        if plan.name.startswith("index_"):
            tensor = conf["index_width"]["tensor"]
            count = element_count(lay.shapes[tensor])
            if plan.name.startswith("index_2e24"):
                assert count > 2**24
            else:
                assert count * np.dtype(lay.dtypes[tensor]).itemsize > 2**31
    for tail in channel_tail_entries(conf):
        sized, where = (tail["dim"], "dims") if "dim" in tail else (tail["param"], "params")
        tails = [getattr(p, where)[sized] for p in plans if p.name.startswith(f"channel_tail_{sized}")]
        assert sorted(set(tails)) == channel_tails(tail["widths"])


def test_index_2e24_cases_fit_the_default_size_where_the_dtype_allows():
    """float16 kernels cross 2^24 elements under 64 MB; a float32-only one (psamask) cannot (69 MB)."""
    for path in STRESSED:
        spec = load_spec(path)
        small = [p for p in plan_suite(spec, "stress") if p.name.startswith("index_2e24")]
        # A spec whose index_width block gives no past_2e24 entry has no such case.
        declared = "past_2e24" in (spec.suites.get("stress", {}).get("index_width") or {})
        assert len(small) == declared, spec.op
        if not small:
            continue
        assert (total_bytes(spec, small[0]) <= MAX_SIZE) == ("float16" in spec.dtypes), spec.op


# ----------------------------------------------------------------------------- spec errors

CARAFE = (REPO / "specs" / "carafe_forward.yaml").read_text()


@pytest.mark.parametrize("old, new, needle, message", [
    ("values: {subnormal: [input], positive", "values: {denormal: [input], positive", "denormal",
     "unknown regime 'denormal'"),
    ("values: {subnormal: [input], positive", "values: {subnormal: [inptu], positive", "subnormal: [inptu]",
     "suites.stress.values.subnormal must be a non-empty list of inputs"),
    ("channel_tail: {dim: C, widths: [16, 64]}", "channel_tail: {dim: C, widths: [16, 1]}", "widths: [16, 1]",
     "whole numbers in [2, 4096]"),
    ("channel_tail: {dim: C, widths: [16, 64]}", "channel_tail: {dim: C, width: [16, 64]}", "width: [16, 64]",
     "unknown key 'width'"),
    ("channel_tail: {dim: C, widths: [16, 64]}", "channel_tail: {dim: K, widths: [16, 64]}", "dim: K",
     "must name one of suites.stress.base's dims (N, H, W, C)"),
    ("channel_tail: {dim: C, widths: [16, 64]}", "channel_tail: {param: kernel_sz, widths: [16, 64]}",
     "param: kernel_sz", "must name one of suites.stress.base's params (kernel_size, group_size, scale_factor)"),
    ("channel_tail: {dim: C, widths: [16, 64]}", "channel_tail: {dim: C, param: group_size, widths: [16, 64]}",
     "param: group_size", "give exactly one of 'dim' and 'param'"),
    ("channel_tail: {dim: C, widths: [16, 64]}", "channel_tail: [{dim: C, widths: [16, 64]}, 3]",
     "channel_tail: [", "must be a mapping or a non-empty list of them"),
    ("    batch: {N: 3, H: 5, W: 9}", "    batch: {N: 3, H: 5, Q: 9}", "Q: 9", "'Q' is not one of"),
    ("    batch: {N: 3, H: 5, W: 9}", "    batch: {N: 3, H: 5, W: 9}\n    not_applicable: {contention: no}",
     "contention: no", "unknown dimension 'contention'"),
    ("    batch: {N: 3, H: 5, W: 9}", "    batch: {N: 3, H: 5, W: 9}\n    not_applicable: {subnormal: ''}",
     "subnormal: ''", "say why, in words"),
    ("      tensor: output\n", "      tensor: outptu\n", "tensor: outptu", "unknown tensor 'outptu'"),
    ("    batch: {N: 3, H: 5, W: 9}", "    batch: {N: -3, H: 5, W: 9}", "batch: {N: -3", "whole numbers >= 0"),
    ("    batch: {N: 3, H: 5, W: 9}", "    batch: {N: 1, H: 5, W: 9}", "batch: {N: 1", "must set a dim of a batch axis (N)"),
    ("    contention:\n      - {name: taps_one_input,", "    contention:\n      - {nmae: taps_one_input,",
     "nmae: taps_one_input", "unknown key 'nmae'"),
])
def test_malformed_stress_block_names_file_and_line(tmp_path, old, new, needle, message):
    assert old in CARAFE
    text = CARAFE.replace(old, new)
    path = tmp_path / "carafe_forward.yaml"
    path.write_text(text)
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert info.value.line == _line_of(text, needle) and message in info.value.message, str(info.value)


@pytest.mark.parametrize("old, new, needle, message", [
    # C = 15 and 17 are no multiples of group_size 4: the first derived case at the narrowest channel
    # tail (a value regime's second shape) breaks a check.
    ("    base: {dims: {N: 1, H: 4, W: 5, C: 8}, params: {kernel_size: 5, group_size: 1,",
     "    base: {dims: {N: 1, H: 4, W: 5, C: 8}, params: {kernel_size: 5, group_size: 4,",
     "values: {subnormal: [input], positive: [input, mask]",
     "case value_subnormal_C15-float16 breaks check 'channels_divisible'"),
    ("past_2e24: {dims: {H: 580, W: 580, C: 2}", "past_2e24: {dims: {H: 500, W: 580, C: 2}", "index_width:",
     "'output' has 14500000 elements, not past 16777216"),
])
def test_derived_case_that_is_no_stress_case_is_refused_at_its_line(tmp_path, old, new, needle, message):
    assert old in CARAFE
    text = CARAFE.replace(old, new)
    path = tmp_path / "carafe_forward.yaml"
    path.write_text(text)
    spec = load_spec(path)
    with pytest.raises(SpecError) as info:
        plan_suite(spec, "stress")
    assert info.value.line == _line_of(text, needle) and message in info.value.message, str(info.value)


def test_spec_error_in_stress_block_exits_2_with_one_line(tmp_path):
    path = tmp_path / "carafe_forward.yaml"
    path.write_text(CARAFE.replace("past_2e24: {dims: {H: 580,", "past_2e24: {dims: {H: 5,"))
    result = CliRunner().invoke(main, ["gen", str(path), "--suite", "stress", "-o", str(tmp_path / "out")])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert f"{path}:{_line_of(path.read_text(), 'index_width:')}" in result.output


# ----------------------------------------------------------------------------- the suite, generated

@pytest.fixture(scope="module")
def stress_dir(tmp_path_factory):
    """Every spec's stress suite as the README's main command writes it (--max-size 64MB)."""
    out = tmp_path_factory.mktemp("stress")
    result = CliRunner().invoke(main, ["gen", *map(str, SPECS), "--suite", "stress", "--max-size", "64MB",
                                       "-o", str(out)])
    assert result.exit_code == 0, result.output
    return out


def test_select_picks_one_dimension(tmp_path):
    result = CliRunner().invoke(main, ["gen", str(REPO / "specs" / "carafe_forward.yaml"), "--suite", "all",
                                       "--select", "channel_tail_C65", "-o", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in tmp_path.rglob("*.opcase")) == [
        "channel_tail_C65-float16.opcase", "channel_tail_C65-float32.opcase"]


@pytest.mark.slow
def test_default_size_leaves_out_only_what_is_over_it(stress_dir):
    written = {f"{p.parent.parent.name}/{p.stem}" for p in find([stress_dir])}
    for path in STRESSED:
        spec = load_spec(path)
        for plan in plan_suite(spec, "stress"):
            assert (f"{spec.op}/{plan.name}" in written) == (total_bytes(spec, plan) <= MAX_SIZE), plan.name


@pytest.mark.slow
def test_reference_passes_every_stress_case_and_goldens_are_finite(stress_dir):
    reference = Backend(name="reference", origin="test", run=stress_backends._reference)
    for path in find([stress_dir]):
        result = run_case(path, reference, "reference")
        assert result.status == PASSED, (path.name, result.status, result.message[:200])
        for name, tensor in load(path).outputs.items():
            assert np.all(np.isfinite(np.asarray(tensor.data, dtype=np.float64))), (path, name)


# Each planted bug, the dimension (case-name prefix) that exists to catch it.
BUG_CLASSES = {
    "flush_subnormal_inputs": "value_subnormal",        # value regimes: flush-to-zero
    "truncated_results": "value_positive",              # value regimes: truncation toward zero
    "channel_tail_16": "channel_tail_",                 # vector tails
    "channel_tail_64": "channel_tail_",
    "float32_index": "index_2e24",                      # index width
    "half_accumulation": "contention_",                 # contention: half-precision atomics
    "batch_as_first": "batch_",                         # batch: n > 0 read as n = 0
}


# The bugs judged on every stress case, not only on their own dimension's: the index bug must fail
# nothing below 2^24 (test_planted_index_bug_fires_only_past_2e24).
JUDGED_EVERYWHERE = {"float32_index"}


@pytest.fixture(scope="module")
def caught(stress_dir):
    """For each planted bug: the stress cases it fails, by name; of its own dimension's cases only,
    unless it is judged everywhere (the others' assertions look at their own dimension alone)."""
    return {bug: _failing_cases(stress_dir, bug, None if bug in JUDGED_EVERYWHERE else BUG_CLASSES[bug])
            for bug in BUG_CLASSES if bug not in STRICT_POLICY_ONLY}


# Bugs the docs' rule accepts where thresholds come from mmcv, which does the same (it accumulates
# in the tensor dtype): judged against the stricter lowp policy instead (`opcase gen --baseline lowp`).
STRICT_POLICY_ONLY = {"half_accumulation"}


@pytest.fixture(scope="module")
def strict_contention_dir(tmp_path_factory):
    """The contention cases with thresholds from lowp, the stricter policy."""
    out = tmp_path_factory.mktemp("stress-lowp")
    result = CliRunner().invoke(main, ["gen", *map(str, SPECS), "--suite", "stress", "--select", "^contention_",
                                       "--baseline", "lowp", "--max-size", "64MB", "-o", str(out)])
    assert result.exit_code == 0, result.output
    return out


def _failing_cases(directory, bug, prefix: str | None = None) -> set:
    """The cases of ``directory`` (those whose name starts with ``prefix``, if given) that ``bug`` fails."""
    backend = Backend(name=bug, origin="test", run=getattr(stress_backends, bug))
    paths = [p for p in find([directory]) if prefix is None or p.name.startswith(prefix)]
    return {f"{r.op}/{r.name}" for r in (run_case(p, backend, bug) for p in paths) if r.status in FAILING}


@pytest.mark.slow
@pytest.mark.parametrize("bug", list(BUG_CLASSES))
def test_each_bug_class_is_caught_by_two_distinct_cases_of_its_dimension(request, caught, bug):
    failing = _failing_cases(request.getfixturevalue("strict_contention_dir"), bug) \
        if bug in STRICT_POLICY_ONLY else caught[bug]
    own = sorted(name for name in failing if name.split("/")[1].startswith(BUG_CLASSES[bug]))
    assert len(own) >= 2, (bug, sorted(failing))


@pytest.mark.slow
def test_planted_index_bug_fires_only_past_2e24(caught):
    """The float32-index backend is right below 2^24 elements: no other case fails it."""
    assert all("/index_2e24" in name for name in caught["float32_index"]), sorted(caught["float32_index"])


@pytest.mark.slow
def test_a_stress_case_has_a_descriptor_that_makes_it_again(stress_dir, tmp_path):
    result = CliRunner().invoke(main, ["gen", "--case", "carafe_forward:stress:batch_N3_H5_W9-float16",
                                       "-o", str(tmp_path)])
    assert result.exit_code == 0, result.output
    made = tmp_path / "carafe_forward" / "stress" / "batch_N3_H5_W9-float16.opcase"
    assert made.read_bytes() == (stress_dir / "carafe_forward" / "stress" / made.name).read_bytes()
