"""The baseline gate, `opcase baseline update`, timing, efficiency and --rerun-failed."""
from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from conftest import pure_io_suite
from gen.core.casefile import find, load
from harness.cli import main
from gen.core.timing import is_slowdown, slowdown_limit_us


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    return pure_io_suite(tmp_path_factory, "gate")


def _cli(*args):
    return CliRunner().invoke(main, list(map(str, args)))


def _baseline(suite, tmp_path, backend="reference", *extra, allow_failing=False):
    results, baseline = tmp_path / f"{backend.replace(':', '_')}.json", tmp_path / "baseline.json"
    _cli("run", suite, "--backend", backend, "--json", results, *extra)
    made = _cli("baseline", "update", results, "-o", baseline, *(["--allow-failing"] if allow_failing else []))
    assert made.exit_code == 0, made.output
    return baseline


def _cases(report) -> dict:
    return {f"{c['op']}/{c['suite']}/{c['name']}": c for c in json.loads(report.read_text())["cases"]}


def test_unchanged_backend_passes_the_gate(suite, tmp_path):
    baseline = _baseline(suite, tmp_path)
    doc = json.loads(baseline.read_text())
    assert doc["format"] == "opcase-baseline" and {e["status"] for e in doc["cases"].values()} == {"passed"}
    result = _cli("run", "--backend", "reference", suite, "--compare", baseline)
    assert result.exit_code == 0, result.output
    assert "0 regressed, 0 slower, 0 improved" in result.output


def test_planted_regression_fails_the_gate_and_improvement_is_reported(suite, tmp_path):
    baseline = _baseline(suite, tmp_path)
    report = tmp_path / "now.json"
    result = _cli("run", suite, "--backend", "run_backends:mixed", "--compare", baseline, "--json", report)
    assert result.exit_code == 1
    doc = json.loads(report.read_text())
    regressed = {k for k, c in _cases(report).items() if c["gate"] == "regression"}
    # Every case that no longer passes regressed, including the skipped ones (not failing by themselves).
    assert regressed == {k for k, c in _cases(report).items() if c["status"] != "passed"}
    assert any(c["status"] == "skipped" for k, c in _cases(report).items() if k in regressed)
    assert doc["gate"]["regression"] == len(regressed) and not doc["gate"]["ok"]
    assert "-> GATE FAILS" in result.output and "{regression: passed in the baseline, now failed}" in result.output

    # The other way round: a baseline of the broken backend, then the fixed one.
    refused = _cli("baseline", "update", report, "-o", tmp_path / "b2.json")
    assert refused.exit_code == 1 and "refusing to record" in refused.output
    assert not (tmp_path / "b2.json").exists()
    allowed = _cli("baseline", "update", report, "-o", tmp_path / "b2.json", "--allow-failing")
    assert allowed.exit_code == 0, allowed.output
    fixed = _cli("run", "--backend", "reference", suite, "--compare", tmp_path / "b2.json")
    assert fixed.exit_code == 0, fixed.output
    assert f"{len(regressed)} improved" in fixed.output


def test_skipped_only_regression_still_fails(suite, tmp_path):
    baseline = _baseline(suite, tmp_path)
    result = _cli("run", suite / "masked_im2col_forward" / "random", "--backend", "run_backends:no_half",
                  "--compare", baseline)
    assert result.exit_code == 1
    assert "{regression: passed in the baseline, now skipped}" in result.output


def test_baseline_update_merges_and_only_changes_what_it_is_given(suite, tmp_path):
    baseline = _baseline(suite, tmp_path)
    before = json.loads(baseline.read_text())["cases"]
    part = tmp_path / "part.json"
    _cli("run", "--backend", "reference", suite / "psamask_forward" / "invalid", "--json", part)
    again = _cli("baseline", "update", part, "-o", baseline)
    assert "8 unchanged" in again.output and json.loads(baseline.read_text())["cases"] == before
    # A results file is not a baseline, and the gate says so.
    result = _cli("run", "--backend", "reference", suite, "--compare", part)
    assert result.exit_code == 2 and "opcase baseline update" in result.output


@pytest.mark.parametrize("base, now, slower", [(50, 54, False), (50, 56, True), (1000, 1030, False),
                                               (1000, 1050, True)])
def test_slowdown_rule(suite, tmp_path, base, now, slower):
    assert is_slowdown(base, now) == slower
    baseline = _baseline(suite / "psamask_forward" / "random", tmp_path, f"run_backends:timed_{base}us",
                         "--repeat", "3")
    report = tmp_path / "now.json"
    result = _cli("run", suite / "psamask_forward" / "random", "--backend", f"run_backends:timed_{now}us",
                  "--repeat", "3", "--compare", baseline, "--json", report)
    assert result.exit_code == (1 if slower else 0), result.output
    cases = _cases(report).values()
    assert {c["gate"] for c in cases} == {"slowdown" if slower else ""}
    assert all(c["timing"]["median_us"] == pytest.approx(now) for c in cases)
    if slower:
        assert f"over the limit {slowdown_limit_us(base):.1f} us" in result.output


def test_harness_timing_is_recorded_with_median_and_spread(suite, tmp_path):
    report = tmp_path / "r.json"
    result = _cli("run", "--backend", "reference", suite / "psamask_forward" / "invalid", suite / "psamask_forward" / "random",
                  "--repeat", "4", "--warmup", "2", "--json", report)
    assert result.exit_code == 0, result.output
    for case in _cases(report).values():
        if case["suite"] == "invalid":
            assert case["timing"] is None   # a rejected call is not timed
            continue
        t = case["timing"]
        assert t["source"] == "harness" and t["repeat"] == 4 and t["warmup"] == 2
        assert 0 < t["min_us"] <= t["median_us"] <= t["max_us"] and t["spread_pct"] >= 0
        assert case["seconds"] == pytest.approx(t["median_us"] * 1e-6)


def test_device_profile_gives_io_and_compute_efficiency(suite, tmp_path):
    profile = tmp_path / "device.yaml"
    profile.write_text("name: toy\nmemory_bandwidth: 1 GB/s\npeak_ops:\n  float32: 2e9\n")
    report = tmp_path / "r.json"
    result = _cli("run", suite / "psamask_forward" / "random", "--backend", "run_backends:timed_50us",
                  "--repeat", "2", "--device-profile", profile, "--json", report)
    assert result.exit_code == 0, result.output
    for path in find([suite / "psamask_forward" / "random"]):
        case = load(path)
        x, y = case.inputs["x"], case.outputs["y"]
        e = _cases(report)[f"psamask_forward/random/{case.name}"]["efficiency"]
        # ACCURACY.md: theory io = every input and output once; psamask_forward ops = output elements.
        assert e["theory_io_bytes"] == x.data.nbytes + y.data.nbytes
        assert e["theory_ops"] == y.data.size
        assert e["io_efficiency"] == pytest.approx(e["theory_io_bytes"] / (50e-6 * 1e9))
        assert e["compute_efficiency"] == pytest.approx(y.data.size / (50e-6 * 2e9))
        assert e["bound"] == ("io" if e["io_efficiency"] > e["compute_efficiency"] else "compute")
    assert "io " in result.output and "compute " in result.output


def test_theory_ops_of_every_spec_evaluate(suite):
    from harness.judge.efficiency import theory_ops
    for path in find([suite]):
        case = load(path)
        if case.expect == "ok":
            ops, why = theory_ops(case)
            assert ops is not None and ops >= 0, why
    case = load(next(p for p in find([suite]) if "masked_im2col_forward/random" in str(p)))
    assert theory_ops(case)[0] == np.prod(case.outputs["data_col"].shape)


def test_rerun_failed_runs_only_the_failures(suite, tmp_path):
    first = tmp_path / "first.json"
    _cli("run", suite, "--backend", "run_backends:mixed", "--json", first)
    failing = {k for k, c in _cases(first).items() if c["status"] in ("failed", "error")}
    assert failing
    again = tmp_path / "again.json"
    result = _cli("run", "--backend", "reference", "--rerun-failed", first, "--json", again)   # fixed: the reference
    assert result.exit_code == 0, result.output
    assert set(_cases(again)) == failing
    # With PATHS it selects among them; nothing failed in this results file, so nothing runs:
    # a run that judged nothing (5), unless --allow-empty.
    none = _cli("run", "--backend", "reference", suite, "--rerun-failed", again)
    assert none.exit_code == 5 and "0 cases: none" in none.output
    assert _cli("run", "--backend", "reference", suite, "--rerun-failed", again, "--allow-empty").exit_code == 0


def _edited_baseline(suite, tmp_path, edit) -> Path:
    baseline = _baseline(suite, tmp_path)
    doc = json.loads(baseline.read_text())
    doc["cases"] = edit(doc["cases"])
    baseline.write_text(json.dumps(doc))
    return baseline


def test_a_baseline_sharing_no_case_with_the_run_is_not_green(suite, tmp_path):
    baseline = _edited_baseline(suite, tmp_path, lambda cases: {"other_op/random/r000": next(iter(cases.values()))})
    results = tmp_path / "gated.json"
    result = _cli("run", suite, "--backend", "reference", "--compare", baseline, "--json", results)
    assert result.exit_code == 1 and "the baseline shares no case with this run" in result.output, result.output
    doc = json.loads(results.read_text())
    assert doc["gate"]["compared"] == 0 and not doc["gate"]["ok"] and not doc["summary"]["ok"]
    (tmp_path / "same").mkdir()
    assert _cli("run", suite, "--backend", "reference", "--compare", _baseline(suite, tmp_path / "same")).exit_code == 0


@pytest.mark.parametrize("entry, message", [
    (5, "an entry is a mapping"),
    ({"status": None}, "status None is not one of"),
    ({"status": "passed", "median_us": "fast"}, "median_us 'fast' is not a finite number"),
    ({"status": "passed", "median_us": float("inf")}, "median_us inf is not a finite number"),
    ({"status": "passed", "median_us": float("nan")}, "median_us nan is not a finite number"),
    ({"status": "passed", "median_us": 3.0, "timing_source": 7}, "timing_source 7 is not a string"),
])
def test_a_malformed_baseline_entry_is_one_line_exit_2(suite, tmp_path, entry, message):
    baseline = _edited_baseline(suite, tmp_path, lambda cases: {key: entry for key in cases})
    result = _cli("run", suite, "--backend", "reference", "--compare", baseline, "--repeat", "1")
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert len(result.output.strip().splitlines()) == 1 and message in result.output, result.output
