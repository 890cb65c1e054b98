"""What a spec, a case file or an mlu-ops file can make opcase do: no foreign code, no path
outside its place, no resource bomb, and every bad input one clear line with exit status 2
(README: What a spec and a case file can do)."""
from __future__ import annotations

import errno
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
    path = _spec(tmp_path, PSAMASK, "reference: gen.ops.psamask:forward", "reference: subprocess:getoutput")
    with pytest.raises(SpecError, match=f"{TRUST_ENV}=1") as err:
        load_spec(path)
    assert err.value.line == _line_of(path, "subprocess:getoutput")
    monkeypatch.setenv(TRUST_ENV, "1")
    assert load_spec(path).reference_fn.__name__ == "getoutput"


def test_spec_value_fn_must_be_defined_in_own_package(tmp_path, monkeypatch):
    monkeypatch.delenv(TRUST_ENV, raising=False)
    # as_strided is imported by gen.ops.carafe, not defined there: it reads any memory it is told to
    path = _spec(tmp_path, CARAFE, 'fn: "gen.ops.carafe:softmax_masks", std: 1.0}',
                 'fn: "gen.ops.carafe:as_strided", std: 1.0}')
    with pytest.raises(SpecError, match="not a function defined in gen.ops.carafe"):
        load_spec(path)
    path = _spec(tmp_path, CARAFE, 'fn: "gen.ops.carafe:softmax_masks", std: 1.0}', 'fn: "os:system", std: 1.0}')
    with pytest.raises(SpecError, match="may name functions of gen.ops only"):
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
    for module in (casefile, interop):   # the gen command reads it from casefile when it runs
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
    assert result.exit_code == 0, result.output
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
    assert same.exit_code == 0 and "warning" not in same.stderr

