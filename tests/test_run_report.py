"""What a person reads: the mismatch report, the REPRO line, JUnit XML and progress output."""
from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET

import click
import numpy as np
import pytest

from conftest import REPO, case_properties, pure_io_suite, run_cli
from gen.core.casefile import find, load
from harness.reports.report import Progress, coordinates
from gen.core.verdict import CaseResult
from run_backends import PLANTED_ERROR, planted_index

TESTS = REPO / "tests"


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    return pure_io_suite(tmp_path_factory, "report")


_run = run_cli


def _case(suite, pattern):
    return next(p for p in find([suite]) if pattern in str(p))


def test_mismatch_report_points_at_the_planted_element(suite, tmp_path):
    path = _case(suite, "psamask_forward/random/r001")
    case = load(path)
    shape, golden = case.outputs["y"].shape, case.outputs["y"].data
    where = planted_index(shape)
    report = tmp_path / "r.json"
    result = _run(path, "--backend", "run_backends:one_wrong_element", "--json", report)
    assert result.exit_code == 1
    doc = json.loads(report.read_text())["cases"][0]
    worst = doc["worst"]["y"]["worst_abs"]
    assert len(worst) == 1 and worst[0]["index"] == list(where)
    assert worst[0]["golden"] == float(golden[where])
    assert worst[0]["actual"] == float(np.float32(golden[where] + PLANTED_ERROR))
    assert doc["metrics"]["y"]["n_unequal"] == 1
    # In the text: the coordinates in y's NHWC layout, the metric against its threshold and the
    # threshold's origin, the NaN/Inf count, and the rerun command.
    n, h, w, c = where
    out = result.output
    assert f"y[n={n}, h={h}, w={w}, c={c}]  golden {golden[where]:.3g}" in out
    assert "diff3_2 = 1.5 > 0  FAIL  threshold: static, design doc 001_" in out
    assert "1 of" in out and "NaN/Inf mismatches: 0" in out
    # run_backends is found in tests/ (a path pytest added): a fresh shell needs it as PYTHONPATH.
    assert f"REPRO: PYTHONPATH={TESTS} opcase run {path} --backend run_backends:one_wrong_element" in out


def test_nan_inf_mismatch_is_counted_and_located(suite, tmp_path):
    path = _case(suite, "masked_im2col_forward/boundary/nonfinite_copied-float32")
    report = tmp_path / "r.json"
    result = _run(path, "--backend", "run_backends:nan_at_planted", "--json", report)
    assert result.exit_code == 1
    doc = json.loads(report.read_text())["cases"][0]
    i, j = planted_index(load(path).outputs["data_col"].shape)
    assert doc["metrics"]["data_col"]["nan_inf_mismatch"] == 1
    assert doc["worst"]["data_col"]["worst_nan_inf"][0]["index"] == [i, j]
    # data_col's layout is ARRAY: plain indices.
    assert "NaN/Inf mismatches (first 1 in order):" in result.output
    assert f"      data_col[{i}, {j}]  golden " in result.output
    assert "[failed] data_col: 1 NaN/Inf positions differ" in result.output


@pytest.mark.slow   # a run, then its repro line in a fresh shell
def test_repro_line_reruns_exactly_that_case_on_its_own(suite):
    failing = _run(suite / "psamask_forward" / "random", "--backend", "run_backends:one_wrong_element", "--jobs", "1")
    repro = next(line.split("REPRO: ", 1)[1] for line in failing.output.splitlines() if "REPRO: " in line)
    assert "--jobs 1" in repro
    # The line carries the PYTHONPATH its backend needs: a fresh shell gets only that (and this
    # checkout, so that the code under test is what runs).
    assignment, *argv = shlex.split(repro)
    assert assignment == f"PYTHONPATH={TESTS}" and argv[0] == "opcase"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([assignment.split("=", 1)[1], str(REPO)])}
    # The installed command when there is one: that is what a person pastes the line into.
    command = [shutil.which("opcase")] if shutil.which("opcase") else [sys.executable, "-m", "harness.cli"]
    rerun = subprocess.run(command + argv[1:], capture_output=True, text=True, env=env, cwd=REPO, timeout=120)
    assert rerun.returncode == 1, rerun.stderr
    assert rerun.stdout.strip().splitlines()[-1] == "1 cases: 1 failed"
    first_failure = next(line for line in failing.output.splitlines() if line.startswith("FAIL"))
    assert first_failure in rerun.stdout


def test_junit_reads_back_with_counts_and_properties(suite, tmp_path):
    junit, report = tmp_path / "r.xml", tmp_path / "r.json"
    result = _run(suite, "--backend", "run_backends:mixed", "--junit", junit, "--json", report)
    assert result.exit_code == 1
    counts = json.loads(report.read_text())["summary"]["counts"]
    root = ET.parse(junit).getroot()
    assert root.tag == "testsuites"
    expected = {"tests": sum(counts.values()),
                "failures": counts["failed"] + counts["wrongly-accepted"] + counts["wrongly-rejected"],
                "errors": counts["error"], "skipped": counts["skipped"] + counts["mistrusted"]}
    totals = {k: int(root.get(k)) for k in ("tests", "failures", "errors")}
    totals["skipped"] = sum(int(suite_el.get("skipped")) for suite_el in root.findall("testsuite"))
    assert totals == expected
    assert expected["failures"] and expected["errors"] and expected["skipped"]
    cases = root.findall("./testsuite/testcase")
    assert len(cases) == expected["tests"]
    for suite_el in root.findall("testsuite"):
        assert {c.get("classname") for c in suite_el.findall("testcase")} == {suite_el.get("name")}
        assert int(suite_el.get("tests")) == len(suite_el.findall("testcase"))
    failed = next(c for c in cases if c.find("failure") is not None)
    assert failed.get("classname") == "psamask_forward." + failed.get("classname").split(".")[1]
    props = case_properties(root, failed)
    assert props["status"] == "failed" and float(props["y.diff3_2"]) == pytest.approx(PLANTED_ERROR, rel=1e-6) and props["y.diff3_2.threshold"] == "0.0"
    assert props["y.diff3_2.provenance"].startswith("static, design doc")
    assert props["repro"].startswith(f"PYTHONPATH={TESTS} opcase run ") and "--backend run_backends:mixed" in props["repro"]
    text = failed.find("failure").text
    assert "worst by absolute error" in text and "REPRO:" in text
    errored = next(c for c in cases if c.find("error") is not None)
    assert "mask 1x1 not implemented" in errored.find("error").get("message")
    skipped = next(c for c in cases if c.find("skipped") is not None)
    assert "does not support" in skipped.find("skipped").get("message")


def test_junit_survives_control_characters(tmp_path):
    from harness.reports.junit import junit_xml
    r = CaseResult(path="x.opcase", op="op", suite="random", name="n", status="error",
                   message="backend raised \x1b[31mred\x00 text")
    root = ET.fromstring(junit_xml([r], "b"))
    assert root.get("errors") == "1" and "red" in root.find(".//error").get("message")


def test_coordinates_follow_the_layout():
    assert coordinates("y", [1, 2, 3, 4], "NHWC") == "y[n=1, h=2, w=3, c=4]"
    assert coordinates("cols", [5, 6], "ARRAY") == "cols[5, 6]"
    assert coordinates("y", [1, 2], "NHWC") == "y[1, 2]"


def test_progress_is_one_updating_line_on_a_terminal_and_plain_elsewhere(capsys, monkeypatch):
    passed = CaseResult(path="a", op="op", suite="s", name="a", status="passed")
    failed = CaseResult(path="b", op="op", suite="s", name="b", status="failed", message="y.diff1=1 > 0",
                        repro="opcase run b --backend x")
    for interactive in (True, False):
        progress = Progress(2, interactive)
        progress.case(passed)
        progress.case(failed)
        progress.close()
        out = capsys.readouterr().out
        if interactive:
            assert "\r" in out and "[2/2]" in out and "PASS" not in out and "FAIL" in out
        else:
            assert "\r" not in out and out.splitlines()[0].startswith("PASS ") and "REPRO: opcase run b" in out


def test_plain_output_when_not_a_terminal(suite):
    result = _run(suite / "psamask_forward" / "invalid", "--backend", "reference")
    assert "\r" not in result.output and result.output.count("\n") >= 8
    assert click.unstyle(result.output) == result.output
