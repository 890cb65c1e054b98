"""What a spec, a case file or an mlu-ops file can make opcase do: no foreign code, no path
outside its place, no resource bomb, and every bad input one clear line with exit status 2
(README: What a spec and a case file can do)."""
from __future__ import annotations

import errno
import json
import os
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from conftest import REPO
from gen.core.expr import ExprError, evaluate
from gen.generate import Generator, plan_suite
from gen.core.registry import UnknownOp, spec_for
from gen.core.spec import TRUST_ENV, SpecError, load_spec
from gen.core import casefile
from gen.core.casefile import CaseFileError, find, load
from harness.cli import main

PSAMASK = (REPO / "specs" / "psamask_forward.yaml").read_text()
CARAFE = (REPO / "specs" / "carafe_forward.yaml").read_text()


def _run(*args):
    return CliRunner().invoke(main, list(map(str, args)))


def _spec(tmp_path, text, old=None, new=None, name="hostile.yaml") -> Path:
    if old is not None:
        assert old in text, old
        text = text.replace(old, new, 1)
    path = tmp_path / name
    path.write_text(text)
    return path


def _line_of(path: Path, needle: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if needle in line)


def _one_line_error(result, path: Path, needle: str, message: str) -> None:
    """Exit 2, no traceback, one 'Error: FILE:LINE: ...' line naming the line of ``needle``."""
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"Error: {path}:{_line_of(path, needle)}: "), result.output
    assert message in lines[0], result.output


MAP_1X1 = "{name: map_1x1,"


# ----------------------------------------------------------------------------- 5: no foreign code

def test_spec_baseline_cannot_name_a_program(tmp_path):
    path = _spec(tmp_path, CARAFE, "baseline: mmcv}", "baseline: \"exec:touch pwned\"}")
    with pytest.raises(SpecError, match="is not a built-in backend") as err:
        load_spec(path)
    assert err.value.line == _line_of(path, "exec:touch")
    path = _spec(tmp_path, CARAFE, "baseline: mmcv}", "baseline: \"os:system\"}")
    with pytest.raises(SpecError, match="is not a built-in backend"):
        load_spec(path)


def test_spec_reference_only_from_own_package_unless_trusted(tmp_path, monkeypatch):
    monkeypatch.delenv(TRUST_ENV, raising=False)
    path = _spec(tmp_path, PSAMASK, "reference: gen.kernels.psamask.reference:forward", "reference: subprocess:getoutput")
    with pytest.raises(SpecError, match=f"{TRUST_ENV}=1") as err:
        load_spec(path)
    assert err.value.line == _line_of(path, "subprocess:getoutput")
    monkeypatch.setenv(TRUST_ENV, "1")
    assert load_spec(path).reference_fn.__name__ == "getoutput"


def test_spec_value_fn_must_be_defined_in_own_package(tmp_path, monkeypatch):
    monkeypatch.delenv(TRUST_ENV, raising=False)
    # as_strided is imported by gen.kernels.carafe.reference, not defined there: it reads any memory it is told to
    path = _spec(tmp_path, CARAFE, 'fn: "gen.kernels.carafe.reference:softmax_masks", std: 1.0}',
                 'fn: "gen.kernels.carafe.reference:as_strided", std: 1.0}')
    with pytest.raises(SpecError, match="not a function defined in gen.kernels.carafe.reference"):
        load_spec(path)
    path = _spec(tmp_path, CARAFE, 'fn: "gen.kernels.carafe.reference:softmax_masks", std: 1.0}', 'fn: "os:system", std: 1.0}')
    with pytest.raises(SpecError, match="may name functions of gen.kernels only"):
        load_spec(path)


# ----------------------------------------------------------------------------- 6: names and paths

@pytest.mark.parametrize("old, new, needle", [
    ("op: psamask_forward", "op: ../../escaped", "op: ../../escaped"),
    ("{name: mask_1x1,", "{name: ../../../escaped,", "../../../escaped"),
    ("id: psa_type_known", "id: ../escaped", "id: ../escaped"),
    ("{name: mask_1x1,", "{name: \"/tmp/abs\",", "/tmp/abs"),
    ("  y: {dtype: T, layout: NHWC, shape: [N, H, W, H * W]}", "  ../y: {dtype: T, layout: NHWC, shape: [N, H, W, H * W]}",
     "../y:"),
])
def test_spec_names_must_be_plain_file_names(tmp_path, old, new, needle):
    path = _spec(tmp_path, PSAMASK, old, new)
    out = tmp_path / "deep" / "out"
    result = _run("gen", path, "--suite", "boundary,invalid", "-o", out)
    _one_line_error(result, path, needle, "is not a plain name")
    assert not any(p.is_file() for p in tmp_path.rglob("*.opcase"))


def _tiny_case(tmp_path, **changes) -> Path:
    spec = spec_for("psamask_forward")
    plan = next(p for p in plan_suite(spec, "boundary") if p.name.startswith("mask_1x1"))
    case = Generator(spec).build(plan)
    for key, value in changes.items():
        setattr(case, key, value)
    return casefile.save(case, tmp_path / "src" / "tiny.opcase")


@pytest.mark.parametrize("field", ["op", "suite", "name"])
def test_case_file_names_must_be_plain(tmp_path, field):
    source = _tiny_case(tmp_path, **{field: "../../escaped"})
    with pytest.raises(CaseFileError, match="is not a plain name"):
        load(source)
    out = tmp_path / "a" / "b" / "out"
    result = _run("export", source, "-o", out)
    assert result.exit_code == 1 and "is not a plain name" in result.output, result.output
    assert not list(tmp_path.rglob("*.pb"))


def test_export_refuses_colliding_targets(tmp_path):
    first = _tiny_case(tmp_path / "one")
    second = _tiny_case(tmp_path / "two")
    result = _run("export", first, second, "-o", tmp_path / "out")
    assert result.exit_code == 1, result.output
    assert "0 skipped, 1 error" in result.output and f"was exported from {first} already" in result.output


def test_export_does_not_follow_a_symlink_out_of_o(tmp_path):
    source = _tiny_case(tmp_path)
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    out.mkdir()
    elsewhere.mkdir()
    (out / "psamask_forward").symlink_to(elsewhere)
    result = _run("export", source, "-o", out)
    assert result.exit_code == 1 and "outside" in result.output, result.output
    assert not list(elsewhere.rglob("*"))


def test_case_op_never_locates_a_spec_outside_the_specs_directory(tmp_path, monkeypatch):
    specs = tmp_path / "specs"
    specs.mkdir()
    (tmp_path / "outside.yaml").write_text(PSAMASK)
    monkeypatch.setenv("OPCASE_SPECS", str(specs))
    spec_for.cache_clear()
    try:
        with pytest.raises(UnknownOp):
            spec_for("../outside")
    finally:
        spec_for.cache_clear()


PROTOTXT = """op_name: "psamask_forward"
input {{
    id: "input"
    shape: {{ dims: 1 dims: 3 dims: 4 dims: 9 }}
    layout: LAYOUT_NHWC
    dtype: DTYPE_FLOAT
    {source}
}}
output {{
    id: "output"
    shape: {{ dims: 1 dims: 3 dims: 4 dims: 12 }}
    layout: LAYOUT_NHWC
    dtype: DTYPE_FLOAT
}}
psamask_forward_param: {{ h_mask: 3 w_mask: 3 psa_type: 0 }}
test_param: {{ error_func: DIFF3 error_threshold: 0.0 baseline_device: CPU }}
"""
RANDOM = "random_data: { seed: 23 upper_bound: 1 lower_bound: -1 distribution: UNIFORM }"


def _mluops(path: Path, source: str = RANDOM, dims: str = "dims: 1 dims: 3 dims: 4 dims: 9") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(PROTOTXT.format(source=source).replace("dims: 1 dims: 3 dims: 4 dims: 9", dims))
    return path


@pytest.mark.parametrize("how", ["dotdot", "symlink"])
def test_import_never_reads_data_outside_the_case_directory(tmp_path, how):
    secret = tmp_path / "secret.bin"
    np.arange(108, dtype=np.float32).tofile(secret)
    cases = tmp_path / "cases"
    if how == "symlink":
        cases.mkdir()
        (cases / "data.bin").symlink_to(secret)
    _mluops(cases / "case_0.prototxt", f'path: "{"../secret.bin" if how == "dotdot" else "data.bin"}"')
    result = _run("import", cases, "-o", tmp_path / "out")
    assert result.exit_code == 1, result.output
    assert "leads out of the case file's directory" in result.output
    assert not find([tmp_path / "out"])


def test_each_keys_in_case_names_cannot_lead_out_of_o(tmp_path):
    path = _spec(tmp_path, PSAMASK, "params: {h_mask: 1, w_mask: 1}, each: {psa_type: [0, 1]}}",
                 'params: {h_mask: 1, w_mask: 1}, each: {psa_type: [0, 1], "/../../../../escaped/": [1]}}')
    out = tmp_path / "a" / "b" / "c" / "out"
    result = _run("gen", path, "--suite", "boundary", "--select", "mask_1x1", "-o", out)
    assert result.exit_code == 0, result.output
    written = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*.opcase"))
    assert len(written) == 2 and all(p.parts[:4] == ("a", "b", "c", "out") for p in written), written


# ----------------------------------------------------------------------------- 7: resource bombs

@pytest.mark.parametrize("text", ["10 ** 10 ** 10", "2 ** 99999999", "'a' * 10 ** 9", "[0] * 10 ** 9",
                                  "x.shape * 10 ** 9", "(1, 2) * 99999999"])
def test_expression_bombs_are_refused_at_once(text):
    started = time.monotonic()
    with pytest.raises(ExprError):
        evaluate(text, {"x": casefile.Tensor("x", (2, 3), np.dtype("float32"), "ARRAY")})
    assert time.monotonic() - started < 1


def test_expression_arithmetic_still_works():
    assert evaluate("2 ** 10 * 3 - (-2) ** 3", {}) == 3080
    assert evaluate("N * H * W", {"N": 2, "H": 3, "W": 4}) == 24


def test_yaml_alias_bomb_is_refused(tmp_path):
    bomb = "".join(f"x{i}: &x{i} [{', '.join([f'*x{i - 1}'] * 9)}]\n" for i in range(1, 10))
    path = _spec(tmp_path, "x0: &x0 [lol]\n" + bomb + PSAMASK)
    started = time.monotonic()
    with pytest.raises(SpecError, match="YAML aliases") as err:
        load_spec(path)
    assert err.value.line == 2 and time.monotonic() - started < 1


def test_each_cross_product_is_bounded(tmp_path):
    each = ", ".join(f"k{i}: [{', '.join(map(str, range(10)))}]" for i in range(10))
    path = _spec(tmp_path, PSAMASK, "each: {psa_type: [0, 1]}}", f"each: {{psa_type: [0, 1], {each}}}}}")
    with pytest.raises(SpecError, match="make over 1000 cases") as err:
        load_spec(path)
    assert err.value.line == _line_of(path, "k9: [")


def test_huge_shape_is_refused_without_max_size(tmp_path):
    path = _spec(tmp_path, PSAMASK, "dims: {N: 3, H: 1, W: 1}", "dims: {N: 3000000000000, H: 1, W: 1}")
    result = _run("gen", path, "--suite", "boundary", "--select", "map_1x1", "-o", tmp_path / "out")
    assert result.exit_code == 2 and "--max-size" in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_case_built_in_memory_must_fit_in_memory(tmp_path, monkeypatch):
    from harness.cli import interop
    from harness.cli.commands import gen as gen_command
    for module in (casefile, interop, gen_command):   # each reads it under its own name
        monkeypatch.setattr(module, "physical_memory", lambda: 10_000)
    path = REPO / "specs" / "psamask_forward.yaml"
    result = _run("gen", path, "--suite", "boundary", "--select", "mask_even_4x6", "-o", tmp_path / "out")
    assert result.exit_code == 2, result.output
    assert "psamask_forward/boundary/mask_even_4x6-psa_type0-float32: its tensors take 0.0 MB, it is built in " \
           "memory and this machine has 0.0 MB" in result.output
    assert not (tmp_path / "out").exists()
    small = _run("gen", path, "--suite", "boundary", "--select", "map_1x1", "-o", tmp_path / "out")
    assert small.exit_code == 0, small.output
    _mluops(tmp_path / "in" / "case_0.prototxt", dims="dims: 10 dims: 30 dims: 40 dims: 9")
    result = _run("import", tmp_path / "in", "-o", tmp_path / "imported")
    assert result.exit_code == 1 and "more than this machine's 0.0 MB of memory" in result.output, result.output


def test_element_count_that_wraps_int64_is_not_small(tmp_path):
    # x has 2**32 * 2**32 * 9 elements, y 2**32 * 2**32 * 2**32: int64 products wrap to 0.
    path = _spec(tmp_path, PSAMASK, "dims: {N: 3, H: 1, W: 1}", "dims: {N: 4294967296, H: 4294967296, W: 1}")
    result = _run("gen", path, "--suite", "boundary", "--select", "map_1x1", "--max-size", "1MB",
                  "-o", tmp_path / "out", "-v")
    assert result.exit_code == 5, result.output   # nothing written: not a success
    assert "skipped (over --max-size): psamask_forward/boundary/map_1x1-psa_type0-float32" in result.output
    assert "wrote 0 cases" in result.output


def test_import_max_size_and_free_space(tmp_path):
    huge = "dims: 2147483647 dims: 3 dims: 12 dims: 9"
    _mluops(tmp_path / "in" / "big.prototxt", dims=huge)
    _mluops(tmp_path / "in" / "small.prototxt")
    result = _run("import", tmp_path / "in", "--max-size", "1MB", "-o", tmp_path / "out")
    assert result.exit_code == 0, result.output
    assert "over --max-size" in result.output and result.output.strip().endswith("1 written, 1 skipped, 0 error")
    result = _run("import", tmp_path / "in", "-o", tmp_path / "out2")
    assert result.exit_code == 1 and "give --max-size" in result.output, result.output
    assert result.output.strip().endswith("1 written, 0 skipped, 1 error")


def test_import_full_disk_is_an_error_and_leaves_no_temporary_file(tmp_path, monkeypatch):
    from harness.mluops import reader
    monkeypatch.setitem(reader.load_mluops.__kwdefaults__, "large_tensor_bytes", 16)   # draw the input to a file

    def disk_full(fd, offset, length):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(os, "posix_fallocate", disk_full)
    _mluops(tmp_path / "in" / "case_0.prototxt")
    out = tmp_path / "out"
    result = _run("import", tmp_path / "in", "-o", out)
    assert result.exit_code == 1 and "No space left on device" in result.output, result.output
    assert [p for p in out.rglob("*")] == []


# ----------------------------------------------------------------------------- 8: errors, not tracebacks

@pytest.mark.parametrize("shape, error", [
    ('shape: [N, H, W, "N.shape"]', "AttributeError"),
    ('shape: [N, H, W, "\'abc\'"]', "a dimension must be a number"),
    ('shape: [N, H, W, "1e400"]', "a dimension must be finite"),
    ('shape: [N, H, W, "float(\'nan\')"]', "a dimension must be finite"),
])
def test_expression_errors_are_spec_errors_with_file_and_line(tmp_path, shape, error):
    path = _spec(tmp_path, PSAMASK, "shape: [N, H, W, H * W]", shape)
    result = _run("gen", path, "--suite", "boundary", "--select", "map_1x1", "-o", tmp_path / "out")
    _one_line_error(result, path, MAP_1X1, f"shape of 'y': ")   # the case whose shape it is
    assert error in result.output


def test_dunder_names_are_refused_at_load(tmp_path):
    path = _spec(tmp_path, PSAMASK, 'require: "psa_type in (0, 1)"', 'require: "__builtins__[\'open\'] == 1"')
    result = _run("gen", path, "-o", tmp_path / "out")
    _one_line_error(result, path, "__builtins__", "names may not start with _")


def test_random_where_and_sampler_errors_are_spec_errors(tmp_path):
    path = _spec(tmp_path, PSAMASK, "    max_elements: 1000000", "    max_elements: 1000000\n    where: [\"N.shape\"]")
    result = _run("gen", path, "--suite", "random", "-o", tmp_path / "out")
    _one_line_error(result, path, "where: [", "suites.random.where: expression 'N.shape': AttributeError")
    path = _spec(tmp_path, PSAMASK, "N: {min: 1, max: 3}", "N: {min: 3, max: 1}")
    result = _run("gen", path, "--suite", "random", "-o", tmp_path / "out")
    _one_line_error(result, path, "N: {min: 3, max: 1}", "min 3 is above max 1")


@pytest.mark.parametrize("value", ["inf", "nan"])
def test_timeout_must_be_finite(tmp_path, value):
    result = _run("run", REPO / "cases" / "psamask_forward", "--backend", "reference", "--timeout", value)
    assert result.exit_code == 2 and "Invalid value for '--timeout'" in result.output, result.output


@pytest.mark.parametrize("command", ["gen", "import"])
@pytest.mark.parametrize("value", ["1.2.3", "1e400", "12XB", "-5"])
def test_max_size_must_be_a_size(tmp_path, command, value):
    source = REPO / "specs" / "psamask_forward.yaml" if command == "gen" else _mluops(tmp_path / "c.prototxt")
    result = _run(command, source, "--max-size", value, "-o", tmp_path / "out")
    assert result.exit_code == 2 and "Invalid value for '--max-size'" in result.output, result.output


@pytest.mark.parametrize("old, new, needle, message", [
    ("violate: {shape: {y: [2, 5, 6, 31]}}", "violate: {shape: {y: [2, 5, \"six\", 31]}}", "\"six\"",
     "violate.shape.y must be a list of whole numbers"),
    ("violate: {dtype: {y: float16}}", "violate: {dtype: {y: complex999}}", "complex999",
     "violate.dtype.y must be one of"),
    ("{name: map_1x1,", "{name: map_1x1, dtype: float99,", "float99", "dtype 'float99' is not one of"),
])
def test_values_that_become_numpy_arguments_are_checked_at_load(tmp_path, old, new, needle, message):
    path = _spec(tmp_path, PSAMASK, old, new)
    result = _run("gen", path, "-o", tmp_path / "out")
    _one_line_error(result, path, needle, message)


# ----------------------------------------------------------------------------- 10: every case kept

def test_import_keeps_cases_that_share_a_file_name(tmp_path):
    _mluops(tmp_path / "in" / "a" / "case_0.prototxt")
    _mluops(tmp_path / "in" / "b" / "case_0.prototxt", RANDOM.replace("seed: 23", "seed: 24"))
    result = _run("import", tmp_path / "in", "-o", tmp_path / "out")
    assert result.exit_code == 0 and result.output.strip().endswith("2 written, 0 skipped, 0 error"), result.output
    cases = {load(p).name: load(p) for p in find([tmp_path / "out"])}
    assert sorted(cases) == ["a__case_0", "b__case_0"]
    assert not np.array_equal(cases["a__case_0"].inputs["x"].data, cases["b__case_0"].inputs["x"].data)


def test_import_one_malformed_file_costs_only_itself(tmp_path):
    _mluops(tmp_path / "in" / "a_good.prototxt")
    # 2**31-1 * 2**31-1 * 12 * 9 floats (it stopped the whole import with a traceback)
    _mluops(tmp_path / "in" / "b_bad.prototxt", dims="dims: 2147483647 dims: 2147483647 dims: 12 dims: 9")
    (tmp_path / "in" / "c_garbage.pb").write_bytes(b"\xff" * 40)
    _mluops(tmp_path / "in" / "d_good.prototxt")
    result = _run("import", tmp_path / "in", "-o", tmp_path / "out")
    assert result.exit_code == 1, result.output
    assert result.output.strip().endswith("2 written, 0 skipped, 2 error"), result.output
    assert sorted(load(p).name for p in find([tmp_path / "out"])) == ["a_good", "d_good"]


def test_gen_refuses_an_out_dir_holding_another_spec_version(tmp_path):
    out = tmp_path / "out"
    first = _run("gen", REPO / "specs" / "psamask_forward.yaml", "--suite", "boundary", "--select", "map_1x1",
                 "-o", out)
    assert first.exit_code == 0, first.output
    edited = _spec(tmp_path, PSAMASK, "count: 20", "count: 21", name="psamask_forward.yaml")
    result = _run("gen", edited, "--suite", "boundary", "--select", "map_1x1", "-o", out)
    assert result.exit_code == 2 and "holds cases of another spec version" in result.output, result.output
    again = _run("gen", REPO / "specs" / "psamask_forward.yaml", "--suite", "boundary", "--select", "map_1x1",
                 "-o", out)
    assert again.exit_code == 0, again.output


def test_run_warns_about_cases_of_several_spec_versions(tmp_path):
    _tiny_case(tmp_path / "mixed", name="one")
    _tiny_case(tmp_path / "mixed" / "more", name="two", spec_sha256="0" * 64)
    result = CliRunner().invoke(main, ["run", str(tmp_path / "mixed"), "--backend", "reference"])
    assert result.exit_code == 0, result.output
    assert "warning: the psamask_forward cases come from 2 versions" in result.stderr
    same = CliRunner().invoke(main, ["run", str(tmp_path / "mixed" / "more"), "--backend", "reference"])
    assert same.exit_code == 0 and "versions" not in same.stderr



# ----------------------------------------------------------------------------- issue 19: inputs that got through

@pytest.mark.parametrize("text", ["'%01000000000d' % 0", "b'%0999999999d' % 0", "(2 ** 4000) * (2 ** 4000)",
                                  "-" * 50_000 + "1", "+".join(["1"] * 30_000), "-" * 500 + "1",
                                  "(" * 90 + "1" + ")" * 90 + " + " + "+".join(["1"] * 200)])
def test_expressions_that_build_large_objects_or_nest_deep_are_refused(text):
    started = time.monotonic()
    with pytest.raises(ExprError, match="not allowed|too large|characters, over|nested"):
        evaluate(text, {})
    assert time.monotonic() - started < 1
    assert evaluate("7 % 3 + 2 ** 4096 % 5", {}) == 1 + 2 ** 4096 % 5   # integer % still works


@pytest.mark.parametrize("yaml_text", ["[" * 400 + "]" * 400, "".join("\n" + "  " * (i + 1) + "-" for i in range(400))])
def test_yaml_nested_past_the_limit_is_a_spec_error(tmp_path, yaml_text):
    path = _spec(tmp_path, PSAMASK.replace("summary:", f"nested: {yaml_text}\nsummary:", 1))
    result = _run("gen", path, "--suite", "boundary", "-o", tmp_path / "out")
    assert result.exit_code == 2 and "nested over 64 levels deep" in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)


@pytest.mark.parametrize("where", ["shape", "require"])
def test_deep_expression_in_a_spec_is_a_spec_error_with_its_line(tmp_path, where):
    deep = "-" * 50_000 + "1"
    if where == "shape":
        path = _spec(tmp_path, PSAMASK, "shape: [N, H, W, h_mask * w_mask]", f"shape: [N, H, W, {deep}]")
    else:
        path = _spec(tmp_path, PSAMASK, 'require: "x.dtype == y.dtype"', f'require: "{deep}"')
    _one_line_error(_run("gen", path, "--suite", "boundary", "-o", tmp_path / "out"), path, "-----",
                    "characters, over the limit")


@pytest.mark.parametrize("require, message", [
    ("x.dtype.shape == 1", ".shape applies to a tensor's name only"),
    ("psa_type.ndim == 1", "psa_type is no tensor"),
    ("x.shape[0] // (x.shape[0] - x.shape[0]) == 0", "cannot be evaluated on a call that meets every check before it"),
])
def test_a_check_that_raises_is_a_spec_error_not_a_failing_check(tmp_path, require, message):
    path = _spec(tmp_path, PSAMASK, 'require: "x.dtype == y.dtype"', f'require: "{require}"')
    for suite in ("random", "boundary"):
        result = _run("gen", path, "--suite", suite, "-o", tmp_path / "out")
        assert result.exit_code == 2, result.output
        line = result.output.strip().splitlines()
        assert len(line) == 1 and line[0].startswith(f"Error: {path}:") and message in line[0], result.output
        assert "dtype_match" in line[0], result.output


@pytest.mark.parametrize("special", ["/dev/zero", "fifo"])
def test_only_regular_files_are_case_files(tmp_path, special):
    if special == "fifo":
        special = tmp_path / "blocked.opcase"
        os.mkfifo(special)
        inside = tmp_path / "dir"
        inside.mkdir()
        os.mkfifo(inside / "also.opcase")
        _tiny_case(inside)
        # In a directory a FIFO named like a case is not one: the run judges the real case.
        result = CliRunner().invoke(main, ["run", str(inside), "--backend", "reference"])
        assert result.exit_code == 0 and "1 cases: 1 passed" in result.output, result.output
    started = time.monotonic()
    for command in (["run", str(special), "--backend", "reference"], ["show", str(special)]):
        result = CliRunner().invoke(main, command)
        assert result.exit_code == 2, result.output
        assert "regular file" in result.output and len(result.output.strip().splitlines()) == 1, result.output
    assert time.monotonic() - started < 10
    with pytest.raises(CaseFileError, match="not a regular file"):
        load(special)


def test_a_case_file_over_the_size_limit_is_refused_before_reading(tmp_path, monkeypatch):
    case = _tiny_case(tmp_path)
    monkeypatch.setattr(casefile, "MAX_CASE_FILE_BYTES", case.stat().st_size - 1)
    read = []
    monkeypatch.setattr(casefile.os, "read", lambda *a: read.append(a) or b"")
    with pytest.raises(CaseFileError, match="bytes, over the limit of"):
        load(case)
    assert not read


def test_overlapping_paths_count_each_case_once():
    paths = [REPO / "cases" / "psamask_forward", REPO / "cases" / "psamask_forward" / "random",
             *sorted((REPO / "cases" / "psamask_forward" / "random").glob("*.opcase"))[:1]]
    alone = len(find([paths[0]]))
    assert len(find(paths)) == alone
    result = CliRunner().invoke(main, ["run", *map(str, paths), "--backend", "reference"])
    assert result.exit_code == 0 and f"{alone} cases: {alone} passed" in result.output, result.output


@pytest.mark.parametrize("option", ["--json", "--junit", "--html"])
def test_results_files_cannot_be_a_case_file_of_the_run(tmp_path, option):
    case = _tiny_case(tmp_path)
    before = case.read_bytes()
    for target in (case, tmp_path / "src"):   # the file itself; a file under a directory of PATHS
        result = CliRunner().invoke(main, ["run", str(target), "--backend", "reference", option, str(case)])
        assert result.exit_code == 2 and "is a case file" in result.output, result.output
        assert case.read_bytes() == before


def test_results_file_cannot_be_the_rerun_failed_file(tmp_path):
    case = _tiny_case(tmp_path)
    results = tmp_path / "results.json"
    assert CliRunner().invoke(main, ["run", str(case), "--backend", "reference", "--json", str(results)]).exit_code == 0
    before = results.read_bytes()
    result = CliRunner().invoke(main, ["run", str(case), "--backend", "reference", "--rerun-failed", str(results),
                                       "--json", str(results)])
    assert result.exit_code == 2 and "--json and --rerun-failed name the same file" in result.output, result.output
    assert results.read_bytes() == before


@pytest.mark.parametrize("failing", ["--junit", "--html", "--json"])
def test_a_full_disk_at_the_final_write_is_one_line_and_leaves_results_incomplete(tmp_path, monkeypatch, failing):
    case = _tiny_case(tmp_path)
    paths = {"--json": tmp_path / "r.json", "--junit": tmp_path / "r.xml", "--html": tmp_path / "r.html"}
    real_write = casefile.atomic_write
    starts = []

    def full_disk(path, text):
        if Path(path) == paths[failing]:
            starts.append(path)
            if len(starts) > 1:   # the incomplete marker at the start fits; the results do not
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_write(path, text)

    from harness.cli.commands import run as run_command
    monkeypatch.setattr(run_command, "atomic_write", full_disk)   # the name the run command writes with
    args = ["run", str(case), "--backend", "reference"] + [str(x) for kv in paths.items() for x in kv]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 3, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error")]
    assert errors == [f"Error: {failing}: cannot write {paths[failing]}: No space left on device; the results "
                      f"files say that the run did not finish"], result.stderr
    assert '"complete": false' in paths["--json"].read_text()
    assert 'type="incomplete"' in paths["--junit"].read_text()
    assert "INCOMPLETE" in paths["--html"].read_text()


def test_a_full_tmpfs_at_the_final_write(tmp_path):
    tiny = tmp_path / "tiny"
    tiny.mkdir()
    if os.geteuid() != 0 or os.system(f"mount -t tmpfs -o size=12k tmpfs {tiny} 2>/dev/null") != 0:
        pytest.skip("needs root to mount a small tmpfs (the test above fakes the full disk)")
    try:
        result = CliRunner().invoke(main, ["run", str(REPO / "cases" / "psamask_forward"), "--backend", "reference",
                                           "--junit", str(tiny / "j.xml"), "--html", str(tiny / "r.html")])
        assert result.exit_code == 3 and "No space left on device" in result.stderr, result.output
        assert 'type="incomplete"' in (tiny / "j.xml").read_text()
        assert "INCOMPLETE" in (tiny / "r.html").read_text()
    finally:
        os.system(f"umount {tiny}")


def test_gen_that_writes_no_case_exits_5(tmp_path):
    result = _run("gen", REPO / "specs" / "psamask_forward.yaml", "--select", "no_such_case", "-o", tmp_path / "out")
    assert result.exit_code == 5 and "no case written" in result.stderr, result.output
    result = _run("gen", REPO / "specs" / "psamask_forward.yaml", "--suite", "network", "--max-size", "1", "-o",
                  tmp_path / "out")
    assert result.exit_code == 5 and "over --max-size" in result.stderr, result.output


def test_gen_count_beyond_the_limit_is_refused_before_any_work(tmp_path):
    started = time.monotonic()
    result = _run("gen", REPO / "specs" / "psamask_forward.yaml", "--suite", "random", "--count", "10" + "0" * 12,
                  "-o", tmp_path / "out")
    assert result.exit_code == 2 and "--count" in result.output, result.output
    assert time.monotonic() - started < 5 and not (tmp_path / "out").exists()


def test_a_second_import_does_not_replace_a_case_silently(tmp_path):
    _mluops(tmp_path / "in" / "case_0.prototxt")
    first = _run("import", tmp_path / "in", "-o", tmp_path / "out")
    assert first.exit_code == 0, first.output
    [case] = find([tmp_path / "out"])
    before = case.read_bytes()
    _mluops(tmp_path / "in" / "case_0.prototxt", RANDOM.replace("seed: 23", "seed: 24"))
    second = _run("import", tmp_path / "in", "-o", tmp_path / "out")
    assert second.exit_code == 1 and "exists already" in second.output, second.output
    assert second.output.strip().endswith("0 written, 0 skipped, 1 error"), second.output
    assert case.read_bytes() == before


def test_gen_refuses_an_out_dir_holding_cases_of_another_seed(tmp_path):
    out = tmp_path / "out"
    args = [REPO / "specs" / "psamask_forward.yaml", "--suite", "random", "--count", "2", "-o", out]
    assert _run("gen", *args).exit_code == 0
    other = _run("gen", *args, "--seed", "7")
    assert other.exit_code == 2 and "made with another --seed than 7" in other.output, other.output
    assert len(other.output.strip().splitlines()) == 1
    again = _run("gen", *args)
    assert again.exit_code == 0, again.output
    assert len(find([out])) == 2


def test_run_says_when_cases_record_another_spec_version_than_it_loads(tmp_path):
    case = _tiny_case(tmp_path, spec_sha256="ab" * 32)
    result = CliRunner().invoke(main, ["run", str(case), "--backend", "reference"])
    assert result.exit_code == 0, result.output
    assert "warning: psamask_forward cases record spec sha256 abababababab, not that of the spec this run loads" \
        in result.stderr, result.stderr
    current = _tiny_case(tmp_path / "current")
    assert "warning" not in CliRunner().invoke(main, ["run", str(current), "--backend", "reference"]).stderr


@pytest.mark.parametrize("value", ["3e6", "1e10"])
def test_timeout_beyond_what_os_timers_hold_is_a_usage_error(tmp_path, monkeypatch, value):
    case = _tiny_case(tmp_path)
    for command in (["run", str(case), "--backend", "reference", "--timeout", value],
                    ["shrink", str(case), "--backend", "reference", "--timeout", value]):
        result = CliRunner().invoke(main, command)
        assert result.exit_code == 2 and "over the longest timeout" in result.output, result.output
        assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    monkeypatch.setenv("OPCASE_EXEC_TIMEOUT", value)
    result = CliRunner().invoke(main, ["run", str(case), "--backend", "exec:true"])
    assert result.exit_code == 2 and "OPCASE_EXEC_TIMEOUT" in result.output, result.output


@pytest.mark.parametrize("special", ["/dev/zero", "fifo"])
def test_import_reads_only_regular_files(tmp_path, special):
    if special == "fifo":
        special = tmp_path / "case_0.prototxt"
        os.mkfifo(special)
    started = time.monotonic()
    result = _run("import", special, "-o", tmp_path / "out")
    assert result.exit_code == 1 and "not a regular file" in result.output, result.output
    assert time.monotonic() - started < 10


@pytest.mark.parametrize("kernel", ["border_align pool_size", "deform_roi_pool sampling_ratio",
                                    "deform_roi_pool adaptive roi"])
def test_a_call_far_beyond_any_network_cannot_keep_the_reference_sampling(kernel):
    """The long fuzz run's hang: a case file's pool_size of 1e308 kept the reference looping."""
    from gen.kernels.border_align import reference as border_align
    from gen.kernels.deform_roi_pool import reference as deform_roi_pool
    started = time.monotonic()
    with pytest.raises(ValueError, match="sample points"):
        if kernel.startswith("border_align"):
            border_align.forward({"input": np.zeros((1, 4, 5, 16)), "boxes": np.zeros((1, 2, 4))},
                                 {"pool_size": 10 ** 308})
        else:
            huge = kernel.endswith("roi")
            rois = np.array([[0, 0, 0, 1e30 if huge else 3, 3]])
            deform_roi_pool.forward({"input": np.zeros((1, 4, 4, 2)), "rois": rois},
                                    {"pooled_height": 2, "pooled_width": 2, "sampling_ratio": 0 if huge else 10 ** 9,
                                     "spatial_scale": 1.0, "gamma": 0.1})
    assert time.monotonic() - started < 1
