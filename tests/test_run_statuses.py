"""Every status of `opcase run`, each arising from a real cause, and the exit status it gives."""
from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from conftest import pure_io_suite, run_cli
from harness.backends import load_backend
from gen.core.casefile import find, load, save
from harness.judge.runner import run_case


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    return pure_io_suite(tmp_path_factory, "statuses")


_run = run_cli


def _statuses(report) -> dict:
    return {c["path"]: c["status"] for c in json.loads(report.read_text())["cases"]}


def _one(suite, pattern):
    """The first case file whose path contains ``pattern``."""
    return next(p for p in find([suite]) if pattern in str(p))


def test_reference_passes_and_exits_0(suite):
    result = _run(suite, "--backend", "reference", "--filter", "psamask_forward/(random|invalid)")
    assert result.exit_code == 0, result.output
    assert result.output.strip().splitlines()[-1].endswith("passed") and "failed" not in result.output


def test_planted_bug_fails(suite, tmp_path):
    report = tmp_path / "r.json"
    result = _run(suite / "psamask_forward" / "random", "--backend", "run_backends:one_wrong_element", "--json", report)
    assert result.exit_code == 1
    assert set(_statuses(report).values()) == {"failed"}


def test_invalid_call_run_without_checks_is_wrongly_accepted(suite, tmp_path):
    report = tmp_path / "r.json"
    result = _run(suite / "masked_im2col_forward" / "invalid", "--backend", "run_backends:no_checks", "--json", report)
    assert result.exit_code == 1
    statuses = set(_statuses(report).values())
    # Some broken calls make the unchecked computation crash instead (error); none may pass.
    assert "wrongly-accepted" in statuses and statuses <= {"wrongly-accepted", "error"}


def test_valid_call_rejected_is_wrongly_rejected_and_invalid_one_passes(suite, tmp_path):
    report = tmp_path / "r.json"
    result = _run(suite / "psamask_forward", "--filter", "random|invalid", "--backend",
                  "run_backends:rejects_everything", "--json", report)
    assert result.exit_code == 1
    for path, status in _statuses(report).items():
        assert status == ("passed" if "/invalid/" in path else "wrongly-rejected"), path


def test_backend_that_raises_is_an_error_with_its_traceback(suite):
    result = _run(suite, "--filter", "psamask_forward/boundary/mask_1x1", "--backend", "run_backends:mixed")
    assert result.exit_code == 1
    assert "[error] backend raised RuntimeError during the call: mask 1x1 not implemented" in result.output
    assert 'raise RuntimeError("mask 1x1 not implemented")' in result.output


def test_unsupported_dtype_is_skipped_and_does_not_fail(suite, tmp_path):
    report = tmp_path / "r.json"
    result = _run(suite / "masked_im2col_forward" / "random", "--backend", "run_backends:no_half", "--json", report)
    assert result.exit_code == 0, result.output
    statuses = _statuses(report)
    assert {s for p, s in statuses.items() if p.endswith("float16.opcase")} == {"skipped"}
    assert {s for p, s in statuses.items() if p.endswith("float32.opcase")} == {"passed"}


@pytest.mark.parametrize("backend, text", [
    ("run_backends:writes_input", "read-only inputs"),
    ("run_backends:scribbles_on_input", "wrote into its input(s) ['feature', 'mask_h_idx', 'mask_w_idx']"),
    ("run_backends:says_time_but_returns_dict", "must return (outputs, seconds)"),
])
def test_backend_breaking_the_contract_is_an_error(suite, backend, text):
    path = _one(suite, "masked_im2col_forward/random/r001")
    result = run_case(path, load_backend(backend), backend)
    assert result.status == "error" and text in result.message, result.message
    # The case file's own data is untouched by whatever the backend did.
    assert load(path).inputs["feature"].data.min() >= 0.5


def _rewritten(path, out_dir, **changes):
    """A copy of the case at ``path`` with some of its fields replaced."""
    case = load(path)
    return save(replace(case, **changes), out_dir / path.name)


def test_all_zero_golden_is_mistrusted_not_passed(suite, tmp_path):
    path = _one(suite, "psamask_forward/random/r000")
    case = load(path)
    zero = {n: replace(t, data=np.zeros(t.shape, t.dtype)) for n, t in case.inputs.items()}
    zero_out = {n: replace(t, data=np.zeros(t.shape, t.dtype)) for n, t in case.outputs.items()}
    copy = _rewritten(path, tmp_path, inputs=zero, outputs=zero_out)
    result = _run(copy, "--backend", "reference")
    # Flagged, not failed; and a run of nothing but mistrusted cases judged nothing: 5, not 0.
    assert result.exit_code == 5, result.output
    assert "WARN" in result.output and "[mistrusted] golden 'y' is constant (0)" in result.output
    assert "no case judged: 1 case(s), 1 mistrusted" in result.output


def test_case_that_cannot_catch_a_zeroing_bug_is_mistrusted(suite, tmp_path):
    path = _one(suite, "psamask_forward/random/r000")
    case = load(path)
    loose = {n: [replace(th, value=1e9) for th in ths] for n, ths in case.criteria.items()}
    copy = _rewritten(path, tmp_path, criteria=loose)
    result = run_case(copy, load_backend("reference"), "reference")
    assert result.status == "mistrusted" and "all-zero 'y' would pass" in result.message
    # ... but a case whose zeros fail its thresholds passes.
    assert run_case(path, load_backend("reference"), "reference").status == "passed"


def test_usage_errors_exit_2_in_one_line(suite, tmp_path):
    bad_json = tmp_path / "bad.json"
    bad_json.write_text("{")
    bad_profile = tmp_path / "profile.yaml"
    bad_profile.write_text("name: nothing-else\n")
    for args, text in [
        ([suite, "--shard", "0/3"], "shards are numbered from 1"),
        ([suite, "--filter", "("], "--filter: bad regular expression"),
        ([suite, "--filter", "no-such-case"], "no case matches --filter"),
        ([suite, "--compare", bad_json], "not a JSON baseline"),
        ([suite, "--rerun-failed", tmp_path / "none.json"], "cannot read results file"),
        ([suite, "--device-profile", bad_profile], "a device profile needs memory_bandwidth"),
        ([], "give case files or directories"),
    ]:
        result = _run("--backend", "reference", *args)
        assert result.exit_code == 2, (args, result.output)
        assert text in result.output and "Traceback" not in result.output, (args, result.output)


def test_a_kernel_the_backend_does_not_support_is_skipped_even_where_its_cases_expect_not_supported(tmp_path):
    """A case whose check expects NOT_SUPPORTED passes only when the call itself is declined: a
    backend that claims no such kernel at all (supports() False) proves nothing there."""
    from conftest import REPO
    invalid = REPO / "cases" / "carafe_forward" / "invalid"
    expecting = [p for p in find([invalid]) if load(p, verify=False).expect == "not_supported"]
    assert expecting, "the committed suite has no case that expects not supported"
    report = tmp_path / "r.json"
    result = _run(*expecting, "--backend", "run_backends:only_psamask", "--json", report, "--allow-empty")
    assert result.exit_code == 0, result.output
    assert set(_statuses(report).values()) == {"skipped"}, result.output
