"""One-line case descriptors: `opcase gen --case` makes a case byte for byte from its descriptor
alone, and REPRO lines and JUnit properties carry it."""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from conftest import REPO, case_properties
from gen.core.descriptor import DESCRIBED, DescriptorError, describe, parse
from harness.backends import load_backend
from gen.descriptor import explicit_of, plan_of, values_ref, write_described
from gen.core.registry import spec_for
from gen.core.casefile import find, load
from harness.cli import main

CASES = REPO / "cases"
EXAMPLE = "carafe_forward:float16:N=1,H=5,W=7,C=28:kernel_size=11,group_size=4,scale_factor=2:seed=17"


def _files_of(case_file: Path) -> dict[str, bytes]:
    """The case file and its sidecars, by name."""
    return {p.name: p.read_bytes() for p in sorted(case_file.parent.glob(case_file.name + "*"))}


def _descriptor_of(path: Path) -> str:
    case = load(path)
    return describe(case.op, case.suite, case.name, case.seed, case.note)


@pytest.mark.slow
def test_every_committed_case_regenerates_from_its_descriptor(tmp_path):
    committed = find([CASES])
    assert len(committed) > 300
    differ = []
    for path in committed:
        descriptor = _descriptor_of(path)
        assert descriptor, f"{path}: no descriptor"
        made = write_described(descriptor, tmp_path, load_backend)
        assert made.relative_to(tmp_path) == path.relative_to(CASES), descriptor
        if _files_of(made) != _files_of(path):
            differ.append(descriptor)
    assert not differ, f"{len(differ)} case(s) differ from what their descriptor makes, e.g. {differ[:3]}"


def test_named_network_case_is_what_gen_writes(tmp_path):
    spec = REPO / "specs" / "carafe_forward.yaml"
    whole = CliRunner().invoke(main, ["gen", str(spec), "--suite", "network", "--select", "^fpn_h32_c256-float16$",
                                      "-o", str(tmp_path / "suite")])
    assert whole.exit_code == 0, whole.output
    one = CliRunner().invoke(main, ["gen", "--case", "carafe_forward:network:fpn_h32_c256-float16",
                                    "-o", str(tmp_path / "one")])
    assert one.exit_code == 0, one.output
    relative = Path("carafe_forward/network/fpn_h32_c256-float16.opcase")
    made = tmp_path / "one" / relative
    assert _files_of(made) == _files_of(tmp_path / "suite" / relative)
    assert len(_files_of(made)) > 1, "a network case this size has sidecars; they must match too"
    assert _descriptor_of(made) == "carafe_forward:network:fpn_h32_c256-float16"


def test_the_issues_example_descriptor_makes_its_case_and_names_itself(tmp_path):
    result = CliRunner().invoke(main, ["gen", "--case", EXAMPLE, "-o", str(tmp_path / "a")])
    assert result.exit_code == 0, result.output
    made = next((tmp_path / "a").rglob("*.opcase"))
    case = load(made)
    assert (case.suite, case.dtype, case.seed) == (DESCRIBED, "float16", 17)
    assert case.params == {"kernel_size": 11, "group_size": 4, "scale_factor": 2}
    assert case.inputs["input"].shape == (1, 5, 7, 28) and case.inputs["mask"].shape == (1, 10, 14, 4 * 11 * 11)
    assert _descriptor_of(made) == EXAMPLE
    again = write_described(EXAMPLE, tmp_path / "b", load_backend)
    assert again.relative_to(tmp_path / "b") == made.relative_to(tmp_path / "a")
    assert _files_of(again) == _files_of(made)


@pytest.mark.parametrize("named", ["carafe_forward:boundary:raw_masks-float32",
                                   "carafe_forward:random:r002-N1-H4-W9-G4-Cg16-C64-kernel_size1-group_size4-scale_factor2-float16",
                                   "carafe_forward:invalid:channels_divisible-float32"])
def test_explicit_form_of_a_case_draws_the_same_tensors(tmp_path, named):
    """A case's shapes, params, seed and value distributions, written out: the same data,
    whatever suite the spec put it in (the value distributions of a boundary case included)."""
    spec = spec_for("carafe_forward")
    plan = plan_of(spec, named)
    explicit = explicit_of(spec, plan, values_ref(plan)).text()
    assert isinstance(parse(explicit), type(parse(EXAMPLE)))
    a = load(write_described(named, tmp_path / "named", load_backend))
    b = load(write_described(explicit, tmp_path / "explicit", load_backend))
    assert b.suite == DESCRIBED and (b.expect, b.expect_check) == (a.expect, a.expect_check)
    for kind in ("inputs", "outputs"):
        for name, t in getattr(a, kind).items():
            u = getattr(b, kind)[name]
            assert (t.shape, t.dtype) == (u.shape, u.dtype)
            assert (t.data is None and u.data is None) or np.array_equal(t.data, u.data, equal_nan=True), (kind, name)


def test_a_descriptor_is_the_case_it_names_even_for_gen_seed(tmp_path):
    """A case of `gen --seed 5` is not the one its name gives with seed 0: it has no descriptor,
    rather than a wrong one."""
    result = CliRunner().invoke(main, ["gen", str(REPO / "specs" / "carafe_forward.yaml"), "--suite", "boundary",
                                       "--select", "^map_1x1-float32$", "--seed", "5", "-o", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert _descriptor_of(next(tmp_path.rglob("*.opcase"))) == ""
    assert _descriptor_of(CASES / "carafe_forward/boundary/map_1x1-float32.opcase") == \
        "carafe_forward:boundary:map_1x1-float32"


def test_repro_and_junit_carry_the_descriptor(tmp_path):
    path = CASES / "carafe_forward/boundary/raw_masks-float32.opcase"
    junit = tmp_path / "junit.xml"
    result = CliRunner().invoke(main, ["run", str(path), "--backend", "run_backends:one_wrong_element",
                                       "--junit", str(junit)])
    assert result.exit_code == 1, result.output
    lines = result.output.splitlines()
    repro = next(i for i, line in enumerate(lines) if "REPRO: " in line)
    assert lines[repro + 1].split() == ["CASE:", "carafe_forward:boundary:raw_masks-float32"]
    root = ET.parse(junit).getroot()
    props = case_properties(root, root.find("./testsuite/testcase"))
    assert props["descriptor"] == "carafe_forward:boundary:raw_masks-float32"
    assert str(path) in props["repro"]


@pytest.mark.parametrize("descriptor, says", [
    ("nosuchop:boundary:x", "no spec for operator 'nosuchop'"),
    ("carafe_forward:boundary:no_such_case", "has no boundary case named 'no_such_case'"),
    ("carafe_forward:float64:N=1,H=1,W=1,C=1:kernel_size=1,group_size=1,scale_factor=1:seed=1", "dtype float64 is not one of"),
    ("carafe_forward:double:N=1,H=1,W=1,C=1:kernel_size=1,group_size=1,scale_factor=1:seed=1", "expected OP:SUITE:NAME"),
    ("carafe_forward:float32:N=1,H=1,W=1,C=1:kernel_size=1,group_size=1,scale_factor=1", "seed=S"),
    ("carafe_forward:float32:N=1,H=1,W=1,C=1:kernel_size=1,group_size=1,scale_factor=1,tile=3:seed=1", "unknown ['tile']"),
    ("carafe_forward:float32:N=1,H=1,W=1,C=1:kernel_size=1,group_size=1:seed=1", "missing ['scale_factor']"),
    ("carafe_forward:float32:N=1,H=1,W=1,C=1:kernel_size=x,group_size=1,scale_factor=1:seed=1", "not a number"),
    ("carafe_forward:float32:N=1,H=1,W=1,C=1:kernel_size=4,group_size=1,scale_factor=1:seed=1", "kernel_size_odd"),
    ("carafe_forward:float32:N=1,H=1,W=1,C=1:kernel_size=1,group_size=1,scale_factor=1:seed=1:violate=nope", "violate=nope"),
    ("carafe_forward:float32:N=1,H=1,W=1,C=1:kernel_size=1,group_size=1,scale_factor=1:seed=1:colour=red", "unknown or repeated"),
])
def test_a_bad_descriptor_is_one_line_and_exit_2(tmp_path, descriptor, says):
    result = CliRunner().invoke(main, ["gen", "--case", descriptor, "-o", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert says in result.output and len(result.output.strip().splitlines()) == 1, result.output
    assert not list(tmp_path.rglob("*.opcase"))


def test_gen_without_specs_or_case_is_an_input_error(tmp_path):
    result = CliRunner().invoke(main, ["gen", "-o", str(tmp_path)])
    assert result.exit_code == 2 and "--case" in result.output


def test_parse_refuses_what_is_no_descriptor():
    for text in ("", "carafe_forward", "carafe_forward:network:", "a:b:c:d"):
        with pytest.raises(DescriptorError):
            parse(text)


def test_case_refuses_the_options_of_a_whole_suite(tmp_path):
    result = CliRunner().invoke(main, ["gen", "--case", "carafe_forward:boundary:map_1x1-float32", "--seed", "3",
                                       "--max-size", "1MB", "-o", str(tmp_path)])
    assert result.exit_code == 2 and "it takes no --seed, --max-size" in result.output, result.output
    assert not list(tmp_path.rglob("*.opcase"))


def test_a_case_whose_worker_died_still_carries_its_descriptor(tmp_path):
    """The crash that most needs a bug report: its result is made from the case file's header."""
    path = next((CASES / "psamask_forward" / "boundary").glob("*psa_type0*float32.opcase"))
    json_path = tmp_path / "results.json"
    result = CliRunner().invoke(main, ["run", str(path), "--backend", "run_backends:crashes_on_collect",
                                       "--jobs", "1", "--json", str(json_path)])
    assert result.exit_code == 1, result.output
    (case,) = json.loads(json_path.read_text())["cases"]
    assert case["status"] == "error" and case["descriptor"] == f"psamask_forward:boundary:{path.stem}"
    assert f"CASE:  psamask_forward:boundary:{path.stem}" in result.output
