"""The `opcase` command end to end: generate, run, show, and every way input can be bad."""
from __future__ import annotations

import json
import re
import shutil

import pytest
from click.testing import CliRunner

from conftest import REPO
from harness.cli import main

SPEC = str(REPO / "specs" / "masked_im2col_forward.yaml")


@pytest.fixture(scope="module")
def suite_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("cli")
    result = CliRunner().invoke(main, ["gen", SPEC, "--suite", "all", "--count", "4", "-o", str(out)])
    assert result.exit_code == 0, result.output
    return out


def _run(*args):
    return CliRunner().invoke(main, list(map(str, args)))


def test_gen_reports_counts_and_is_deterministic(suite_dir, tmp_path):
    again = _run("gen", SPEC, "--suite", "all", "--count", "4", "-o", tmp_path)
    assert again.exit_code == 0 and "masked_im2col_forward: 4 network, 4 random, 24 boundary, 10 invalid" in again.output
    for path in sorted(suite_dir.rglob("*.opcase")):
        twin = tmp_path / path.relative_to(suite_dir)
        assert twin.read_bytes() == path.read_bytes(), path.name


@pytest.mark.slow   # a whole spec generated again in two processes
def test_gen_jobs_writes_the_same_bytes(suite_dir, tmp_path):
    result = _run("gen", SPEC, "--suite", "all", "--count", "4", "--jobs", "2", "-o", tmp_path)
    assert result.exit_code == 0, result.output
    files = sorted(p.relative_to(suite_dir) for p in suite_dir.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    assert all((tmp_path / f).read_bytes() == (suite_dir / f).read_bytes() for f in files)


def test_gen_select_and_max_size(tmp_path):
    result = _run("gen", SPEC, "--suite", "boundary,network", "--select", "k3|map_1x1", "--max-size", "1MB",
                  "-o", tmp_path)
    assert result.exit_code == 0, result.output
    names = sorted(p.stem for p in tmp_path.rglob("*.opcase"))
    assert names == ["map_1x1-float16", "map_1x1-float32"]
    # One counted line per kernel; -v lists each case.
    assert re.search(r"^skipped \(over --max-size\): \d+ masked_im2col_forward case\(s\), [0-9.]+ MB to [0-9.]+ MB "
                     r"\(-v lists them\)$", result.output, re.M), result.output
    listed = _run("gen", SPEC, "--suite", "boundary,network", "--select", "k3|map_1x1", "--max-size", "1MB",
                  "-o", tmp_path, "-v")
    assert "skipped (over --max-size): masked_im2col_forward/network/retinanet_k3_p1-float16" in listed.output


def test_reference_passes_everything_and_writes_json(suite_dir, tmp_path):
    report = tmp_path / "r.json"
    result = _run("run", suite_dir, "--backend", "reference", "--json", report)
    assert result.exit_code == 0, result.output
    doc = json.loads(report.read_text())
    assert doc["summary"]["counts"]["passed"] == doc["summary"]["total"] > 40
    first = doc["cases"][0]
    assert {"path", "op", "suite", "status", "metrics", "thresholds"} <= set(first)


@pytest.mark.parametrize("backend, status, text", [
    ("bad_backends:wrong_shape", "error", "has shape"),
    ("bad_backends:wrong_dtype", "error", "has dtype float64"),
    ("bad_backends:raises", "error", "RuntimeError: device lost"),
    ("bad_backends:returns_list", "error", "expected a dict"),
    ("bad_backends:extra_output", "error", "not asked for"),
])
def test_misbehaving_backend_errors_each_case_and_run_goes_on(suite_dir, tmp_path, backend, status, text):
    report = tmp_path / "r.json"
    result = _run("run", suite_dir / "masked_im2col_forward" / "boundary", "--backend", backend, "--json", report)
    assert result.exit_code == 1
    doc = json.loads(report.read_text())
    valid = [c for c in doc["cases"]]
    assert len(valid) == 24 and all(c["status"] == status and text in c["message"] for c in valid)
    assert "Traceback (most recent call last)" not in result.output.split("backend raised")[0]


def test_backend_without_checks_is_wrongly_accepted(suite_dir):
    result = _run("run", suite_dir / "masked_im2col_forward" / "invalid", "--backend", "bad_backends:accepts_everything")
    assert result.exit_code == 1
    # Some broken calls make the unchecked computation crash instead: both fail the run.
    counts = result.output.strip().splitlines()[-1]
    assert counts.startswith("10 cases:") and "wrongly-accepted" in counts and "passed" not in counts


def test_object_backend(suite_dir):
    assert _run("run", suite_dir / "masked_im2col_forward" / "random", "--backend",
                "bad_backends:object_backend").exit_code == 0


def test_corrupt_case_is_an_error_and_others_still_run(suite_dir, tmp_path):
    copy = tmp_path / "s"
    shutil.copytree(suite_dir / "masked_im2col_forward" / "random", copy)
    victim = sorted(copy.glob("*.opcase"))[0]
    victim.write_bytes(victim.read_bytes()[:-7])
    result = _run("run", copy, "--backend", "reference")
    assert result.exit_code == 1
    assert "1 error" in result.output and "3 passed" in result.output
    assert "truncated" in result.output


@pytest.mark.parametrize("args, text", [
    (["run", "/nonexistent/dir", "--backend", "reference"], "no such file or directory"),
    (["run", REPO / "specs", "--backend", "reference"], "no .opcase files"),
    (["run", REPO / "cases", "--backend", "nosuch"], "unknown backend 'nosuch'"),
    (["run", REPO / "cases", "--backend", "nosuchmodule:fn"], "cannot import nosuchmodule"),
    (["gen", REPO / "specs" / "nope.yaml", "-o", "/tmp/x"], "cannot read spec"),
    (["gen", SPEC, "--suite", "nightly", "-o", "/tmp/x"], "unknown suite"),
    (["gen", SPEC, "--max-size", "lots", "-o", "/tmp/x"], "is not a size"),
])
def test_usage_errors_exit_2_without_traceback(args, text):
    result = _run(*args)
    assert result.exit_code == 2, result.output
    assert text in result.output and "Traceback" not in result.output


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_spec_error_found_while_generating_exits_2(tmp_path, jobs):
    bad = tmp_path / "bad.yaml"
    bad.write_text((REPO / "specs" / "psamask_forward.yaml").read_text()
                   .replace("params: {h_mask: 1, w_mask: 1}, each: {psa_type: [0, 1]}",
                            "params: {h_mask: 1, w_mask: 1}, each: {psa_type: [0, 7]}"))
    result = _run("gen", bad, "--suite", "boundary", "--jobs", jobs, "-o", tmp_path / "o")
    assert result.exit_code == 2, result.output
    assert f"{bad}:" in result.output and "breaks check(s) ['psa_type_known']" in result.output
    assert "Traceback" not in result.output


def test_malformed_spec_exit_2_names_file_and_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text((REPO / "specs" / "psamask_forward.yaml").read_text().replace("type: int,", "type: long,", 1))
    result = _run("gen", bad, "-o", tmp_path / "o")
    assert result.exit_code == 2
    assert f"{bad}:" in result.output and "type must be int" in result.output


def test_show_prints_case_and_rerun_command(suite_dir):
    path = next((suite_dir / "masked_im2col_forward" / "invalid").glob("batch_one-*.opcase"))
    result = _run("show", path)
    assert result.exit_code == 0
    assert "expect: rejected (check batch_one" in result.output
    assert "feature: float32[2, 3, 7, 8] NCHW" in result.output
    assert f"rerun: opcase run {path} --backend reference" in result.output
