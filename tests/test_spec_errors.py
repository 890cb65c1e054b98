"""A malformed spec is refused with the file, the line and what is wrong."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from gen.generate import Generator, plan_suite
from gen.core.spec import SpecError, load_spec

GOOD = (Path(__file__).resolve().parents[1] / "specs" / "psamask_forward.yaml").read_text()


def _write(tmp_path, text) -> Path:
    path = tmp_path / "broken.yaml"
    path.write_text(text)
    return path


def _line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


@pytest.mark.parametrize("old, new, needle, message", [
    ("    shape: [N, H, W, h_mask * w_mask]", "    shape: [N, H, W, h_mask * * w_mask]", "h_mask * * w_mask",
     "cannot parse expression"),
    ("    require: \"x.dtype == y.dtype\"", "    require: \"__import__('os').system('true')\"", "__import__",
     "only these functions"),
    ("  y: {dtype: T, layout: NHWC, shape: [N, H, W, H * W]}", "  y: {dtype: float8, layout: NHWC, shape: [N]}",
     "float8", "dtype 'float8'"),
    ("  psa_type: {type: int,", "  psa_type: {type: integer,", "type: integer", "type must be int"),
    ("criteria:\n  static: {diff3_2: 0}", "criteria:\n  static: {diff9: 0}", "diff9", "unknown metric 'diff9'"),
    ("criteria:\n  static: {diff3_2: 0}", "criteria:\n  static: {diff3_2: 0}\noutput_criteria:\n  y: {exact: true}",
     "y: {exact: true}", "exact judges integer outputs"),
    ("criteria:\n  static: {diff3_2: 0}", "criteria:\n  static: {diff3_2: 0}\noutput_criteria:\n  z: {exact: true}",
     "z: {exact: true}", "'z' is no output"),
    ("criteria:\n  static: {diff3_2: 0}", "criteria:\n  static: {diff3_2: 0}\noutput_criteria:\n  y: {close: true}",
     "y: {close: true}", "exactly one criterion, 'exact'"),
    ("    violate: {params: {psa_type: 2}}\n", "", "id: psa_type_known", "give 'violate'"),
    ("    violate: {layout: {x: NCHW}}", "    violate: {layout: {z: NCHW}}", "z: NCHW", "unknown tensor 'z'"),
    ("  random:\n    count: 20", "  random:\n    count: 20\n    cuont: 3", "cuont", "unknown key 'cuont'"),
    ("  h_mask: {type: int, doc: mask height}", "  h_mask: {type: int, doc: mask height}\n  h_mask: {type: int}",
     "h_mask: {type: int}", "duplicate key 'h_mask'"),
    ("    values: {dist: uniform, low: 0.5, high: 4.0}", "    values: {dist: gamma, low: 0.5}", "dist: gamma",
     "values.dist must be one of"),
    ("op: psamask_forward", "op: psamask_forward\n  bad indent: [", "bad indent", "YAML error"),
    # found by the long spec fuzz run (an empty choice list drew from nothing: numpy's ValueError)
    ("params: {psa_type: [0, 1],", "params: {psa_type: [],", "psa_type: []", "a list of choices must not be empty"),
])
def test_malformed_spec_names_file_and_line(tmp_path, old, new, needle, message):
    assert old in GOOD
    text = GOOD.replace(old, new, 1)
    path = _write(tmp_path, text)
    with pytest.raises(SpecError) as err:
        load_spec(path)
    assert message in err.value.message
    assert err.value.path == str(path)
    expected_line = _line_of(text, needle)
    assert err.value.line is not None and abs(err.value.line - expected_line) <= 1, (str(err.value), expected_line)


FAST_1X1 = '{name: mask_1x1, why: "one tap: the output is the input on the diagonal'
FAST_SHAPES = "    shapes: [{N: 1, H: 4, W: 5}, {N: 2, H: 3, W: 4}]"


@pytest.mark.parametrize("old, new, needle, message", [
    (FAST_1X1, '{name: mask_1x1, whi: "one tap: the output is the input on the diagonal', "whi:", "unknown key 'whi'"),
    (FAST_1X1, '{name: mask_1x1, why: "  ", note: "one tap: the output is the input on the diagonal', "why: \"  \"",
     "unknown key 'note'"),
    (FAST_1X1 + ', zeros elsewhere, which a kernel may write as a copy"',
     "{name: mask_1x1", "{name: mask_1x1, params", "missing 'why'"),
    (FAST_SHAPES, "    shapes: [{N: 1, H: 4, W: 5}]", FAST_SHAPES[:20], "two or more"),
    (FAST_SHAPES, "    shapes: [{N: 1, H: 4, W: 5}, {N: 1, H: 4, W: 5}]", FAST_SHAPES[:20], "must differ"),
    ("params: {h_mask: 1, w_mask: 1}, each: {psa_type: [0, 1]}}\n      - {name: mask_covers",
     "params: {h_mask: 1, w_mosk: 1}, each: {psa_type: [0, 1]}}\n      - {name: mask_covers", "w_mosk", "unknown param 'w_mosk'"),
    ("  fast_path:\n    base:", "  fast_path:\n    speed: 1\n    base:", "speed: 1", "unknown key 'speed'"),
])
def test_fast_path_errors_name_file_and_line(tmp_path, old, new, needle, message):
    assert old in GOOD
    text = GOOD.replace(old, new, 1)
    with pytest.raises(SpecError) as err:
        load_spec(_write(tmp_path, text))
    assert message in err.value.message
    assert err.value.line == _line_of(text, needle), str(err.value)


def test_fast_path_that_breaks_a_check_is_refused_at_its_line(tmp_path):
    text = GOOD.replace("params: {h_mask: 8, w_mask: 10}, each: {psa_type: [0, 1]}",
                        "params: {h_mask: 8, w_mask: 10}, each: {psa_type: [0, 3]}", 1)
    spec = load_spec(_write(tmp_path, text))
    with pytest.raises(SpecError, match=r"suites.fast_path: case mask_covers_map_even-N1-H4-W5-psa_type3-.* breaks check 'psa_type_known'") as err:
        plan_suite(spec, "fast_path")
    assert err.value.line == _line_of(text, "name: mask_covers_map_even")


def test_violation_that_breaks_other_checks_is_refused(tmp_path):
    text = GOOD.replace("violate: {shape: {y: [2, 5, 6, 31]}}", "violate: {shape: {y: [2, 5, 7, 31]}}")
    spec = load_spec(_write(tmp_path, text))
    generator = Generator(spec)
    with pytest.raises(SpecError, match=r"check 'y_channels': its violation does not isolate it") as err:
        for plan in plan_suite(spec, "invalid"):
            generator.build(plan)
    assert err.value.line == _line_of(text, "id: y_channels")


def test_boundary_case_that_breaks_a_check_is_refused(tmp_path):
    text = GOOD.replace("params: {h_mask: 1, w_mask: 1}, each: {psa_type: [0, 1]}",
                        "params: {h_mask: 1, w_mask: 1}, each: {psa_type: [0, 7]}")
    spec = load_spec(_write(tmp_path, text))
    generator = Generator(spec)
    with pytest.raises(SpecError, match=r"breaks check\(s\) \['psa_type_known'\]"):
        for plan in plan_suite(spec, "boundary"):
            generator.build(plan)


def test_all_zero_golden_is_refused(tmp_path):
    from gen.generate import GenerationError
    text = GOOD.replace("values: {dist: uniform, low: 0.5, high: 4.0}", "values: {dist: const, value: 0}", 1)
    spec = load_spec(_write(tmp_path, text))
    with pytest.raises(GenerationError, match=re.escape("is all zeros")):
        Generator(spec).build(plan_suite(spec, "boundary")[0])


@pytest.mark.parametrize("values, message", [
    ("{dist: const, value: 2.5}", "golden 'y' is constant (2.5)"),
    # y's thresholds are diff3_2 = 0; with a threshold above the largest golden an all-zero y would pass.
    ("{dist: uniform, low: 1.0e-6, high: 2.0e-6}", "an all-zero 'y' would pass"),
])
def test_case_that_run_would_mistrust_is_refused_at_its_line(tmp_path, values, message):
    from gen.generate import GenerationError
    text = GOOD.replace("values: {dist: uniform, low: 0.5, high: 4.0}", f"values: {values}", 1)
    if "all-zero" in message:
        text = text.replace("static: {diff3_2: 0}", "static: {diff3_2: 1.0e-3}")
    spec = load_spec(_write(tmp_path, text))
    # A mask that covers the whole map: every element of y is a copy of x.
    plan = next(p for p in plan_suite(spec, "boundary") if p.name.startswith("mask_exact_cover"))
    with pytest.raises(GenerationError) as info:
        Generator(spec).build(plan)
    assert f"{spec.path}:{plan.line}: case boundary/{plan.name}: `opcase run` would mistrust it" in str(info.value)
    assert message in str(info.value)


def test_committed_specs_load():
    for path in sorted((Path(__file__).resolve().parents[1] / "specs").glob("*.yaml")):
        assert load_spec(path).op == path.stem


@pytest.mark.parametrize("edits, needle, message", [
    ([("  y: {dtype: T,", "  y: {dtype: int32,"), ("  static: {diff3_2: 0}", "  dynamic: {metrics: [diff1], rates: [10]}")],
     "y: {dtype: int32", "dynamic criteria judge floating"),
    ([("  outputs: [y]", "  outputs: [y, y]")], "outputs: [y, y]", "mluops.outputs must list each"),
    ([("  inputs: [x]", "  inputs: []")], "inputs: []", "mluops.inputs must list each"),
    ([("  y: {dtype: T, layout: NHWC,", "  y: {dtype: T, layout: ARRAY,")], "y: {dtype: T, layout: ARRAY",
     "layout 'ARRAY' names no axis roles: give 'axes'"),
    ([("  y: {dtype: T, layout: NHWC,", "  y: {dtype: T, axes: [batch, height], layout: NHWC,")], "axes: [batch, height]",
     "axes must list one role per axis (4)"),
    ([("  y: {dtype: T, layout: NHWC,", "  y: {dtype: T, axes: [batch, height, width, chanel], layout: NHWC,")],
     "chanel", "each one of batch, height"),
])
def test_spec_edits_refused_with_file_and_line(tmp_path, edits, needle, message):
    text = GOOD
    for old, new in edits:
        assert old in text
        text = text.replace(old, new, 1)
    with pytest.raises(SpecError) as info:
        load_spec(_write(tmp_path, text))
    assert info.value.line == _line_of(text, needle)
    assert message in info.value.message


def test_exponent_numbers_are_numbers_as_in_yaml_1_2(tmp_path):
    """`3e-3` (no dot, an exponent) is a number, as YAML 1.2 reads it; PyYAML's YAML 1.1 made it a
    string, which the threshold check then blamed.  A quoted one is still a string, refused at its line."""
    text = GOOD.replace("static: {diff3_2: 0}", "static: {diff1: 3e-3, diff2: 1E5, diff3_2: 2.5e+1}")
    assert load_spec(_write(tmp_path, text)).criteria.static == {"diff1": 0.003, "diff2": 100000.0, "diff3_2": 25.0}
    text = GOOD.replace("static: {diff3_2: 0}", "static: {diff3_2: '3e-3'}")
    with pytest.raises(SpecError, match="threshold must be a number") as info:
        load_spec(_write(tmp_path, text))
    assert info.value.line == _line_of(text, "'3e-3'")


CARAFE = (Path(__file__).resolve().parents[1] / "specs" / "carafe_forward.yaml").read_text()
CARAFE_INVALID = "    base: {dims: {N: 2, H: 4, W: 5, C: 8}, params: {kernel_size: 3, group_size: 2, scale_factor: 2}}\n"


def test_invalid_cases_are_made_in_the_dtypes_the_suite_names(tmp_path):
    assert CARAFE_INVALID in CARAFE
    default = [p.dtype for p in plan_suite(load_spec(_write(tmp_path, CARAFE)), "invalid")]
    assert set(default) == {"float32"}
    text = CARAFE.replace(CARAFE_INVALID, CARAFE_INVALID + "    dtypes: [float16, float32]\n")
    plans = plan_suite(load_spec(_write(tmp_path, text)), "invalid")
    assert [p.name for p in plans[:2]] == [f"{plans[0].violation.id}-float16", f"{plans[0].violation.id}-float32"]
    # dtype_match sets y to float16: a float16 case of it would break nothing, so it is made in float32 only.
    assert [p.name for p in plans if p.violation.id == "dtype_match"] == ["dtype_match-float32"]
    assert len(plans) == 2 * len(default) - 1
    generator = Generator(load_spec(_write(tmp_path, text)))
    assert {generator.build(p).expect for p in plans} == {"rejected", "not_supported"}


@pytest.mark.parametrize("dtypes, message", [
    ("[float8]", "suites.invalid.dtypes must be a list of distinct dtypes"),
    ("[float32, float32]", "suites.invalid.dtypes must be a list of distinct dtypes"),
])
def test_invalid_dtypes_refused_at_their_line(tmp_path, dtypes, message):
    text = CARAFE.replace(CARAFE_INVALID, CARAFE_INVALID + f"    dtypes: {dtypes}\n")
    with pytest.raises(SpecError) as info:
        load_spec(_write(tmp_path, text))
    assert info.value.line == _line_of(text, f"dtypes: {dtypes}") and message in info.value.message


def test_value_bounds_may_follow_the_dims_and_other_tensors(tmp_path):
    """`randint {low: 0, high: "H * W - 1"}`: every value below the case's own H * W, whatever its dims."""
    import numpy as np
    from gen.generate import draw_inputs, layout_of
    text = GOOD.replace("values: {dist: uniform, low: 0.5, high: 4.0}",
                        'values: {dist: randint, low: "y.shape[3] - H * W", high: "H * W - 1"}', 1)
    spec = load_spec(_write(tmp_path, text))
    plans = plan_suite(spec, "random", 8)
    assert len({p.dims["H"] * p.dims["W"] for p in plans}) > 1
    for plan in plans:
        x = draw_inputs(spec, plan, layout_of(spec, plan))["x"]
        top = plan.dims["H"] * plan.dims["W"] - 1
        assert x.size == 0 or (x.min() >= 0 and x.max() <= top and (top < 4 or x.max() > top // 2)), plan.name


def test_value_bound_that_is_no_expression_is_refused_at_its_line(tmp_path):
    for bad, message in (('high: "H * "', "cannot parse expression"), ("high: [1]", "must be a number or an expression")):
        text = GOOD.replace("values: {dist: uniform, low: 0.5, high: 4.0}", f"values: {{dist: uniform, low: 0, {bad}}}", 1)
        with pytest.raises(SpecError) as info:
            load_spec(_write(tmp_path, text))
        assert info.value.line == _line_of(text, bad) and message in info.value.message, str(info.value)


def test_an_output_goes_only_with_an_optional_input(tmp_path):
    text = GOOD.replace("  y: {dtype: T, layout: NHWC,", "  y: {dtype: T, with_input: x, layout: NHWC,")
    with pytest.raises(SpecError) as info:
        load_spec(_write(tmp_path, text))
    assert info.value.line == _line_of(text, "with_input: x") and "with_input must name an optional input" in \
        info.value.message


def test_a_spec_may_leave_params_out(tmp_path):
    """A kernel without parameters (a point-cloud op) leaves `params` out; once it had to write
    `params: {}` or be refused with "missing 'params'"."""
    from test_new_kernel import SPEC
    text = SPEC.replace("params: {}\n", "").replace("reference: gen.kernels.synthetic_square.reference:forward",
                                                      "reference: gen.kernels.psamask.reference:forward")
    assert "params:" not in text
    spec = load_spec(_write(tmp_path, text))
    assert spec.params == {}
    assert plan_suite(spec, "boundary")
