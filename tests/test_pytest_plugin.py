"""The pytest plugin (harness/pytest_plugin.py) end to end: `pytest --opcase cases --opcase-backend B` on the
committed suite with a backend that has a planted bug in every kernel reports exactly the failures that
`opcase run` reports, one item per case named by its descriptor; statuses map to pytest's outcomes."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from importlib.metadata import entry_points

import pytest

from conftest import REPO

CASES = REPO / "cases"
PLANTED = "planted_backends:first_planted"


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests")])}


def _plugin_args() -> list[str]:
    """Load the plugin as the installed entry point does, or by module where this environment's opcase
    was installed before it had one."""
    installed = any(e.value == "harness.pytest_plugin" for e in entry_points(group="pytest11"))
    return [] if installed else ["-p", "harness.pytest_plugin"]


def _pytest(tmp_path, *args) -> tuple[subprocess.CompletedProcess, dict]:
    """Run pytest with the plugin from tmp_path (no project config there); return the process and
    {case key: (test name, outcome)} from its JUnit file."""
    junit = tmp_path / "junit.xml"
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *_plugin_args(),
                           f"--junitxml={junit}", *map(str, args)],
                          cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=600)
    outcomes = {}
    if junit.exists():
        for case in ET.parse(junit).iter("testcase"):
            props = {p.get("name"): p.get("value") for p in case.iter("property")}
            kinds = [child.tag for child in case if child.tag in ("failure", "error", "skipped")]
            if "opcase_case" in props:
                outcomes[props["opcase_case"]] = (case.get("name"), kinds[0] if kinds else "passed", case)
    return done, outcomes


@pytest.mark.slow
def test_planted_bugs_fail_the_same_cases_as_opcase_run(tmp_path):
    results = tmp_path / "run.json"
    run = subprocess.run([sys.executable, "-m", "harness.cli", "run", str(CASES), "--backend", PLANTED,
                          "--json", str(results)], cwd=tmp_path, env=_env(), capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 1, run.stdout[-2000:] + run.stderr[-2000:]
    cases = json.loads(results.read_text())["cases"]
    run_failing = {f"{c['op']}/{c['suite']}/{c['name']}" for c in cases if c["status"] != "passed"}
    assert run_failing and len(run_failing) < len(cases)

    done, outcomes = _pytest(tmp_path, "--opcase", CASES, "--opcase-backend", PLANTED, "-q")
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-2000:]
    assert len(outcomes) == len(cases)
    assert {key for key, (_, outcome, _) in outcomes.items() if outcome == "failure"} == run_failing
    assert {outcome for _, outcome, _ in outcomes.values()} == {"passed", "failure"}
    # Each item is named by its case's descriptor, as `opcase run` gives it.
    by_key = {f"{c['op']}/{c['suite']}/{c['name']}": c for c in cases}
    assert all(name == (by_key[key]["descriptor"] or key) for key, (name, _, _) in outcomes.items())
    # The failure text is opcase's mismatch report, with the metric, the threshold and the REPRO line.
    failed = next(case for key, (_, outcome, case) in outcomes.items()
                  if outcome == "failure" and by_key[key]["status"] == "failed")
    text = failed.find("failure").text
    # (REPRO names the PYTHONPATH the planted backend, found in tests/, needs in a fresh shell.)
    assert "FAIL" in text and "threshold:" in text and re.search(r"REPRO: (PYTHONPATH=\S+ )?opcase run", text), text
    assert f"--backend {PLANTED}" in text


def test_k_selects_cases_by_descriptor(tmp_path):
    done, outcomes = _pytest(tmp_path, "--opcase", CASES, "--opcase-backend", "reference", "-q",
                             "-k", "psamask_forward and invalid")
    assert done.returncode == 0, done.stdout[-3000:]
    assert outcomes and all(key.startswith("psamask_forward/invalid/") for key in outcomes)
    assert {outcome for _, outcome, _ in outcomes.values()} == {"passed"}


def test_declined_cases_skip_and_a_run_that_judged_nothing_exits_5(tmp_path):
    """An exec backend that implements no kernel of the cases: every case skipped, nothing judged."""
    declines = tmp_path / "declines.py"
    declines.write_text("import sys\nif '--list-supported' in sys.argv:\n    print('no_such_kernel')\n"
                        "    sys.exit(0)\nsys.exit(3)\n")
    backend = f"exec:{sys.executable} {declines}"
    done, outcomes = _pytest(tmp_path, "--opcase", CASES / "psamask_forward" / "invalid", "--opcase-backend", backend)
    assert done.returncode == 5, done.stdout[-3000:]
    assert outcomes and {outcome for _, outcome, _ in outcomes.values()} == {"skipped"}
    assert "no case judged" in done.stdout


def _baseline_of(tmp_path, cases, backend, name) -> tuple:
    """A baseline recorded from `opcase run CASES --backend BACKEND` (failing cases included)."""
    results = tmp_path / f"{name}.json"
    subprocess.run([sys.executable, "-m", "harness.cli", "run", str(cases), "--backend", backend,
                    "--json", str(results)], cwd=tmp_path, env=_env(), capture_output=True, timeout=600)
    baseline = tmp_path / f"{name}-baseline.json"
    update = subprocess.run([sys.executable, "-m", "harness.cli", "baseline", "update", str(results), "-o", str(baseline),
                             "--allow-failing"], cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=600)
    assert update.returncode == 0, update.stdout + update.stderr
    return baseline


def _run_compare(tmp_path, cases, backend, baseline) -> tuple[int, set]:
    """`opcase run --compare`'s exit status and the cases it fails."""
    results = tmp_path / "compared.json"
    run = subprocess.run([sys.executable, "-m", "harness.cli", "run", str(cases), "--backend", backend, "--compare",
                          str(baseline), "--json", str(results)], cwd=tmp_path, env=_env(), capture_output=True,
                         text=True, timeout=600)
    failing = {f"{c['op']}/{c['suite']}/{c['name']}" for c in json.loads(results.read_text())["cases"]
               if c["status"] not in ("passed", "skipped", "mistrusted") or c.get("gate") in ("regression", "slowdown")}
    return run.returncode, failing


def test_opcase_compare_gates_exactly_as_run_compare(tmp_path):
    """With --opcase-compare the items that fail and the exit status are `opcase run --compare`'s: failing
    cases the baseline lacks, and those it recorded as failing, fail (no xfail hides them)."""
    kernel = CASES / "psamask_forward"
    baseline = _baseline_of(tmp_path, kernel / "invalid", PLANTED, "partial")   # lacks the other suites
    run_status, run_failing = _run_compare(tmp_path, kernel, PLANTED, baseline)
    assert run_status == 1 and run_failing
    done, outcomes = _pytest(tmp_path, "--opcase", kernel, "--opcase-backend", PLANTED,
                             "--opcase-compare", baseline, "-q", "-rx")
    assert done.returncode == run_status, done.stdout[-3000:]
    assert {key for key, (_, outcome, _) in outcomes.items() if outcome == "failure"} == run_failing
    assert "xfail" not in done.stdout.strip().splitlines()[-1]


def test_a_baseline_sharing_no_case_fails_the_session_as_the_gate_does(tmp_path):
    baseline = _baseline_of(tmp_path, CASES / "psamask_forward" / "invalid", "reference", "other")
    cases = CASES / "psamask_backward" / "invalid"
    run_status, _ = _run_compare(tmp_path, cases, "reference", baseline)
    assert run_status == 1
    done, outcomes = _pytest(tmp_path, "--opcase", cases, "--opcase-backend", "reference", "--opcase-compare", baseline)
    assert outcomes and {outcome for _, outcome, _ in outcomes.values()} == {"passed"}
    assert done.returncode == run_status, done.stdout[-3000:]
    assert "shares no case" in done.stdout


def test_without_opcase_the_plugin_does_nothing(tmp_path):
    (tmp_path / "test_plain.py").write_text("def test_plain():\n    pass\n")
    done, outcomes = _pytest(tmp_path, "-q")
    assert done.returncode == 0 and "1 passed" in done.stdout and not outcomes
    missing_backend = subprocess.run([sys.executable, "-m", "pytest", *_plugin_args(), "--opcase", str(CASES)],
                                     cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=600)
    assert missing_backend.returncode == 4 and "--opcase-backend" in missing_backend.stderr


def test_opcase_timeout_refuses_what_would_mean_no_timeout(tmp_path):
    """inf overflowed the timer (a traceback); nan and 0 meant no timeout at all: each is a usage error."""
    for value in ("inf", "nan", "0", "-1", "1e9"):
        done, outcomes = _pytest(tmp_path, "--opcase", CASES / "psamask_forward" / "invalid", "--opcase-backend",
                                 "reference", f"--opcase-timeout={value}")
        assert done.returncode == 4 and not outcomes, (value, done.stdout[-2000:], done.stderr[-2000:])
        assert "--opcase-timeout" in done.stderr and "Traceback" not in done.stdout + done.stderr, value


def test_an_unloadable_backend_is_one_line_not_a_traceback_per_item(tmp_path):
    (tmp_path / "unloadable.py").write_text("import no_such_module_of_opcase_tests\n")
    env = {**_env(), "PYTHONPATH": os.pathsep.join([_env()["PYTHONPATH"], str(tmp_path)])}
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *_plugin_args(), "--opcase",
                           str(CASES / "psamask_forward"), "--opcase-backend", "unloadable:backend"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    text = done.stdout + done.stderr
    assert done.returncode == 4, text[-3000:]
    assert "no_such_module_of_opcase_tests" in text and "Traceback" not in text and "no case judged" not in text
    assert len(text.splitlines()) < 30, len(text.splitlines())
