"""carafe_backward's spec refuses what mlu-ops' own code refuses, and nothing else: a backend that
re-states mlu-ops' checks (tests/mluops_check_backends.py) passes every case of the kernel's suites,
and the one slip in mlu-ops' code (grad_input's H, W never compared) is caught by its check's case."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from conftest import REPO
from harness.cli import main

SPEC = REPO / "specs" / "carafe_backward.yaml"
PORT = "mluops_check_backends:carafe_backward"


def _gen(out, *options):
    result = CliRunner().invoke(main, ["gen", str(SPEC), "-o", str(out), *options])
    assert result.exit_code == 0, result.output[-2000:]


def _statuses(directory, backend, tmp_path) -> dict:
    """{suite/name: status} of `opcase run DIRECTORY --backend BACKEND`."""
    report = tmp_path / f"{backend.replace(':', '_')}.json"
    result = CliRunner().invoke(main, ["run", str(directory), "--backend", backend, "--json", str(report)])
    assert report.exists(), result.output[-2000:]
    cases = json.loads(report.read_text())["cases"]
    assert cases, "the run judged nothing"
    return {f"{c['suite']}/{c['name']}": c["status"] for c in cases}


@pytest.fixture(scope="module")
def small_suites(tmp_path_factory):
    """Every suite, sized for test time: the invalid and hunt suites whole, the rest up to 2 MB."""
    out = tmp_path_factory.mktemp("carafe_backward")
    _gen(out, "--suite", "invalid,hunt")
    _gen(out, "--suite", "network,random,boundary,stress,fast_path", "--max-size", "2MB")
    return out


@pytest.mark.slow   # every suite of the kernel made (small_suites), then run
def test_mluops_checks_pass_every_case(small_suites, tmp_path):
    statuses = _statuses(small_suites, PORT, tmp_path)
    suites = {key.split("/")[0] for key in statuses}
    assert {"invalid", "boundary", "random", "stress", "fast_path", "hunt"} <= suites
    # The limits the backward has (kernel_size <= 137) and those it has not (the forward's 45 and 5).
    assert {"invalid/kernel_size_max-float32", "boundary/kernel_137-float16",
            "boundary/past_forward_limits-float16"} <= set(statuses)
    assert {k: s for k, s in statuses.items() if s != "passed"} == {}


@pytest.mark.slow   # every suite of the kernel made (small_suites), then run
def test_mluops_code_as_written_fails_only_grad_input_hw(small_suites, tmp_path):
    statuses = _statuses(small_suites, "mluops_check_backends:carafe_backward_as_written", tmp_path)
    assert {k: s for k, s in statuses.items() if s != "passed"} == {
        "invalid/grad_input_hw-float32": "wrongly-accepted"}


@pytest.mark.slow
def test_mluops_checks_pass_the_boundary_suite_whole(tmp_path):
    # The boundary suite's cases over 2 MB (mluops_case_0, wide_channels, kernel_35_full_window, ...)
    # take most of a minute to make against mmcv's emulation.
    _gen(tmp_path / "cases", "--suite", "boundary")
    statuses = _statuses(tmp_path / "cases", PORT, tmp_path)
    assert len(statuses) >= 40
    assert {k: s for k, s in statuses.items() if s != "passed"} == {}
