"""`opcase run --repeat N --bitwise`: repeated calls must agree with the judged one, bit for bit,
or only in their verdict where the kernel's spec declares nondeterministic_sums."""
from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

import report_backends
from conftest import REPO, run_cli
from gen.core.spec import SpecError, load_spec
from gen.core.casefile import load, save
from harness.judge.determinism import first_difference

# A committed case with dynamic thresholds: last-bit noise stays within them.
CASE = REPO / "cases" / "carafe_forward" / "random" / \
    "r001-N1-H3-W3-G4-Cg3-C12-kernel_size5-group_size4-scale_factor1-float32.opcase"


@pytest.fixture(autouse=True)
def fresh_call_count():
    """The noisy backends count their calls: each test starts at call 1 (the judged call is clean)."""
    report_backends.restart()


@pytest.fixture
def atomic_case(tmp_path):
    """CASE as a kernel whose spec declares nondeterministic_sums would have it."""
    path = tmp_path / "atomic" / CASE.name
    path.parent.mkdir()
    save(replace(load(CASE), nondeterministic_sums=True), path)
    return path


def _run(tmp_path, case, backend, *options):
    report = tmp_path / "results.json"
    result = run_cli(case, "--backend", f"report_backends:{backend}", "--json", report, *options)
    doc = json.loads(report.read_text())["cases"][0] if report.exists() else None
    return result, doc


def test_bitwise_reports_noise_on_every_other_call_with_the_first_differing_element(tmp_path):
    result, doc = _run(tmp_path, CASE, "noise_every_other_call", "--repeat", "3", "--bitwise")
    assert result.exit_code == 1, result.output
    assert doc["status"] == "nondeterministic"
    golden = np.ascontiguousarray(load(CASE).outputs["output"].data).reshape(-1)
    first = report_backends.reference_outputs(CASE)["output"].reshape(-1)
    noisy = np.nextafter(first[0], np.float32(np.inf))
    # Call 1 (judged) is clean, call 2 the first noisy one; every element moved, the first is reported.
    assert doc["message"].startswith("call 2 returned other bits than the judged call 1: output[n=0, h=0, w=0, c=0]")
    assert f"0x{noisy.view(np.uint32):08x}" in doc["message"] and f"0x{first[0].view(np.uint32):08x}" in doc["message"]
    assert f"{golden.size} of {golden.size} elements differ" in doc["message"]
    assert doc["determinism"] == {"mode": "bitwise", "calls": 5, "agree": False, "call": 2, "output": "output",
                                  "index": [0, 0, 0, 0], "first": repr(first[0].item()), "now": repr(noisy.item()),
                                  "n_differ": golden.size}
    assert "FAIL " in result.output and "[nondeterministic]" in result.output
    assert "--repeat 3 --warmup 1 --bitwise" in doc["repro"]


def test_a_backend_that_overwrites_one_output_buffer_is_still_caught(tmp_path):
    """The judged call's outputs are kept as a copy: comparing a buffer with itself proves nothing."""
    result, doc = _run(tmp_path, CASE, "noise_in_a_reused_buffer", "--repeat", "2", "--bitwise")
    assert result.exit_code == 1, result.output
    assert doc["status"] == "nondeterministic" and doc["determinism"]["call"] == 2


def test_the_same_backend_passes_without_bitwise(tmp_path):
    """Without --bitwise the repeated calls' outputs are only timed: the noise goes unseen."""
    result, doc = _run(tmp_path, CASE, "noise_every_other_call", "--repeat", "3")
    assert result.exit_code == 0, result.output
    assert doc["status"] == "passed" and doc["determinism"] is None


def test_a_deterministic_backend_passes_bitwise(tmp_path):
    result, doc = _run(tmp_path, CASE, "deterministic", "--repeat", "3", "--warmup", "2", "--bitwise")
    assert result.exit_code == 0, result.output
    assert doc["status"] == "passed"
    assert doc["determinism"] == {"mode": "bitwise", "calls": 6, "agree": True}


def test_nondeterministic_sums_accept_noise_that_keeps_the_verdict(tmp_path, atomic_case):
    result, doc = _run(tmp_path, atomic_case, "noise_every_other_call", "--repeat", "3", "--bitwise")
    assert result.exit_code == 0, result.output
    assert doc["status"] == "passed"
    assert doc["determinism"] == {"mode": "verdict", "calls": 5, "agree": True}


def test_nondeterministic_sums_still_catch_a_verdict_that_changes(tmp_path, atomic_case):
    result, doc = _run(tmp_path, atomic_case, "wrong_every_other_call", "--repeat", "2", "--bitwise")
    assert result.exit_code == 1, result.output
    assert doc["status"] == "nondeterministic"
    assert doc["message"].startswith("call 2 got another verdict than the judged call 1")
    assert "output: diff1 failed" in doc["message"]
    assert doc["determinism"]["mode"] == "verdict" and doc["determinism"]["call"] == 2


def test_a_failing_case_stays_failed_and_says_it_is_also_nondeterministic(tmp_path):
    report_backends.restart(first=1)     # after the decoy (call 1), the judged call is the wrong one
    result, doc = _run(tmp_path, CASE, "wrong_every_other_call", "--repeat", "2", "--bitwise")
    assert result.exit_code == 1
    assert doc["status"] == "failed"
    assert "\nalso not deterministic: call 2 returned other bits" in doc["message"]


def test_a_repeated_call_of_the_wrong_form_is_an_error(tmp_path):
    result, doc = _run(tmp_path, CASE, "wrong_shape_on_call_3", "--repeat", "3", "--bitwise")
    assert result.exit_code == 1
    assert doc["status"] == "error"
    assert "call 3: output 'output' has shape [1]" in doc["message"]


def test_the_verdict_crosses_from_worker_processes(tmp_path):
    result, doc = _run(tmp_path, CASE, "noise_every_other_call", "--repeat", "2", "--bitwise", "--jobs", "2")
    assert result.exit_code == 1, result.output
    assert doc["status"] == "nondeterministic" and doc["determinism"]["call"] == 2
    report_backends.restart(first=1)     # the worker's judged call (after its decoy) is the wrong one
    result, doc = _run(tmp_path, CASE, "wrong_every_other_call", "--repeat", "2", "--bitwise", "--jobs", "1")
    assert doc["status"] == "failed" and "also not deterministic" in doc["message"]


def test_bitwise_needs_repeat(tmp_path):
    result = run_cli(CASE, "--backend", "reference", "--bitwise")
    assert result.exit_code == 2
    assert "--bitwise compares repeated calls: give --repeat N too" in result.output


def test_first_difference_sees_nan_payloads_and_signed_zeros():
    quiet = np.array([1.0, np.nan, 0.0], dtype=np.float32)
    other_payload = quiet.copy()
    other_payload.view(np.uint32)[1] |= 1
    assert first_difference(quiet, quiet.copy()) is None
    assert first_difference(quiet, other_payload) == (1, 1)
    negative_zero = quiet.copy()
    negative_zero[2] = -0.0
    assert first_difference(quiet, negative_zero) == (2, 1)
    assert first_difference(np.zeros(3, np.float16), np.array([0, 0, 1], np.float16)) == (2, 1)


def test_first_difference_counts_across_blocks(monkeypatch):
    import harness.judge.determinism as determinism
    monkeypatch.setattr(determinism, "_BLOCK_ELEMS", 4)
    a = np.arange(10, dtype=np.float64)
    b = a.copy()
    b[[5, 9]] += 1
    assert first_difference(a, b) == (5, 2)


def test_border_align_backward_declares_nondeterministic_sums_and_its_cases_carry_it(tmp_path):
    from gen.generate import Generator, plan_suite
    from harness.backends import load_backend
    spec = load_spec(REPO / "specs" / "border_align_backward.yaml")
    assert spec.nondeterministic_sums
    plan = plan_suite(spec, "boundary", None, 0)[0]
    path = Generator(spec, load_backend(spec.criteria.baseline)).write(plan, tmp_path / "one.opcase")
    assert load(path).nondeterministic_sums
    assert not load(CASE).nondeterministic_sums


def test_spec_flag_must_be_a_boolean(tmp_path):
    text = (REPO / "specs" / "border_align_backward.yaml").read_text()
    bad = tmp_path / "bad.yaml"
    bad.write_text(text.replace("nondeterministic_sums: true", "nondeterministic_sums: sometimes"))
    with pytest.raises(SpecError) as caught:
        load_spec(bad)
    line = next(i for i, l in enumerate(bad.read_text().splitlines(), 1) if l.startswith("nondeterministic_sums"))
    assert str(caught.value) == f"{bad}:{line}: nondeterministic_sums must be true or false"
