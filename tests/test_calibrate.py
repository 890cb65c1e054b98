"""`opcase calibrate`: trusted backends judged against a suite, their headroom, and findings."""
from __future__ import annotations

import json
from collections import Counter
import math
import statistics
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from gen.kernels.deform_roi_pool.planted import deform_roi_pool_compute
from conftest import REPO, checked_backend
from harness.studies.calibrate import headroom, threshold_ratio
from gen.core.casefile import find, load, save
from harness.cli import main
from gen.core.verdict import CaseResult, FAILING

COMMITTED = REPO / "cases"

# A trusted implementation that is wrong: deform_roi_pool without mmcv's half-pixel alignment
# (loadable as --backend test_calibrate:no_half_pixel_alignment: pytest puts tests/ on sys.path).
no_half_pixel_alignment = checked_backend("no-half-pixel-alignment", deform_roi_pool_compute(align=False))


def _calibrate(*args):
    return CliRunner().invoke(main, ["calibrate", *map(str, args)])


def _calibration(tmp_path: Path, *args):
    """(exit code, output, JSON document) of `opcase calibrate ARGS --json ...`."""
    report = tmp_path / "calibration.json"
    result = _calibrate(*args, "--json", report)
    doc = json.loads(report.read_text()) if report.exists() else None
    return result.exit_code, result.output, doc


def _committed_groups(pattern: str = "") -> set:
    """(kernel, dtype, suite) of every committed case with a threshold, whose key contains ``pattern``."""
    groups = set()
    for path in find([COMMITTED]):
        case = load(path)
        if pattern in f"{case.op}/{case.suite}/{case.name}" and any(case.criteria.values()):
            groups.add((case.op, case.dtype, case.suite))
    return groups


# --------------------------------------------------------------------------- trusted backends

TRUSTED = ["reference", "lowp", pytest.param("torch", marks=pytest.mark.needs("torch")), "mmcv"]


# slow: calibrates the whole committed suite (9-19 s each in the quick loop at c438e2b)
@pytest.mark.slow
@pytest.mark.parametrize("backend", TRUSTED)
def test_trusted_backend_has_no_findings_on_the_committed_suite(tmp_path, backend):
    code, output, doc = _calibration(tmp_path, COMMITTED, "--backend", backend)
    assert doc["findings"] == [], output
    assert code == 0, output
    [run] = doc["backends"]
    assert run["backend"] == backend and run["cases"] == len(find([COMMITTED])) and run["findings"] == 0
    # Every kernel/dtype/suite it covers was measured against thresholds, each within them.
    covered = {(n["kernel"], n["dtype"]) for n in doc["not_covered"]}
    measured = {(e["kernel"], e["dtype"], e["suite"]) for e in doc["headroom"] if e["measured"]}
    # A group whose every case the baseline fails over the docs' cap (listed apart below) has no headroom.
    over_cap_in = Counter("/".join(o["case"].split("/")[:2]) for o in doc["over_cap"])
    all_over_cap = {(e["kernel"], e["dtype"], e["suite"]) for e in doc["headroom"]
                    if not e["measured"] and e["cases"] == over_cap_in[f"{e['kernel']}/{e['suite']}"]}
    assert measured == {g for g in _committed_groups() if g[:2] not in covered and g not in all_over_cap}
    assert all(0 <= e["median"] <= e["worst"] <= 1 for e in doc["headroom"] if e["measured"])
    # Where the docs' cap is below the reference interface's own error, it fails: listed apart.
    # (deform_roi_pool_backward: grad_offset jumps where a sample crosses a pixel boundary, which half's
    # rounding moves; and where its golden is all zeros, mmcv's rounding residue is an infinite relative error.)
    over_cap = [o["case"] for o in doc["over_cap"]]
    if backend == "mmcv":
        assert "carafe_forward/boundary/subnormal_half-float16" in over_cap
    else:
        assert over_cap == []


def test_only_the_thresholds_own_baseline_is_excused_by_the_cap():
    """A case fails its own baseline (mmcv) only where that baseline's error is over the cap; the
    same failure by any other backend is a finding."""
    from harness.studies.calibrate import BackendRun, calibration

    failing = {"metric": "diff1", "value": 0.03, "baseline": "mmcv", "baseline_value": 0.32, "cap": 0.03,
               "actual": 0.31, "passed": False}
    case = CaseResult(path="x.opcase", op="carafe_forward", suite="boundary", name="x-float16", dtype="float16",
                      status="failed", thresholds={"output": [failing]})
    for backend, over_cap in (("mmcv", 1), ("lowp", 0)):
        doc = calibration([BackendRun(backend, "test", [case])])
        assert (len(doc["over_cap"]), len(doc["findings"])) == (over_cap, 1 - over_cap)
    under_cap = {**failing, "baseline_value": 0.002}
    doc = calibration([BackendRun("mmcv", "test", [replace(case, thresholds={"output": [under_cap]})])])
    assert len(doc["findings"]) == 1


def test_table_marks_findings_apart_from_cases_over_the_cap():
    """'!' only where a group holds findings; a failure the docs' cap excuses is marked '^'."""
    from harness.studies.calibrate import BackendRun, calibration, table_lines

    failing = {"metric": "diff1", "value": 0.03, "baseline": "mmcv", "baseline_value": 0.32, "cap": 0.03,
               "actual": 0.31, "passed": False}
    case = CaseResult(path="x.opcase", op="carafe_forward", suite="boundary", name="x-float16", dtype="float16",
                      status="failed", thresholds={"output": [failing]})
    rows = {b: next(line for line in table_lines(calibration([BackendRun(b, "test", [case])]))
                    if line.startswith("carafe_forward")) for b in ("mmcv", "lowp")}
    assert rows["mmcv"].endswith("^") and "!" not in rows["mmcv"]
    assert rows["lowp"].endswith("!") and "^" not in rows["lowp"]


def test_several_backends_in_one_calibration(tmp_path):
    code, output, doc = _calibration(tmp_path, COMMITTED, "--filter", "psamask_forward|carafe_forward/random",
                                     "--backend", "reference", "--backend", "lowp", "--backend", "reference")
    assert code == 0, output
    assert [b["backend"] for b in doc["backends"]] == ["reference", "lowp"]   # each once, in order
    assert {e["backend"] for e in doc["headroom"]} == {"reference", "lowp"}
    # The terminal table: a row per measured group, a worst/median column per backend.
    lines = output.splitlines()
    header = next(line for line in lines if line.startswith("kernel"))
    assert header.split() == ["kernel", "dtype", "suite", "reference", "lowp"]
    assert any(line.split()[:3] == ["carafe_forward", "float32", "random"] for line in lines)
    assert lines[-1].startswith("0 finding(s) over 2 backend(s)")


# --------------------------------------------------------------------------- headroom

def test_headroom_is_worst_and_median_of_metric_over_threshold_from_the_run(tmp_path):
    """The figures are the run's own verdicts (`opcase run --json`), divided and summarised."""
    selection = "carafe_forward/boundary"
    code, output, doc = _calibration(tmp_path, COMMITTED, "--filter", selection, "--backend", "lowp")
    assert code == 0, output
    run_json = tmp_path / "run.json"
    assert CliRunner().invoke(main, ["run", str(COMMITTED), "--filter", selection, "--backend", "lowp",
                                     "--json", str(run_json)]).exit_code == 0
    per_group: dict = {}
    for case in json.loads(run_json.read_text())["cases"]:
        ratios = [(v["actual"] / v["value"], case) for verdicts in case["thresholds"].values()
                  for v in verdicts if v["metric"] != "diff4"]
        if ratios:
            per_group.setdefault((case["dtype"], case["suite"]), []).append(max(ratios, key=lambda r: r[0]))
    assert {(e["dtype"], e["suite"]) for e in doc["headroom"]} == set(per_group)
    for e in doc["headroom"]:
        ratios = per_group[(e["dtype"], e["suite"])]
        worst, worst_case = max(ratios, key=lambda r: r[0])
        assert e["measured"] == len(ratios)
        assert e["worst"] == pytest.approx(worst, rel=1e-12) and 0 < e["worst"] < 1
        assert e["median"] == pytest.approx(statistics.median(r for r, _ in ratios), rel=1e-12)
        assert e["worst_case"] == f"carafe_forward/boundary/{worst_case['name']}"
        assert Path(e["worst_path"]).name == f"{worst_case['name']}.opcase"


def _result(*verdicts) -> CaseResult:
    return CaseResult(path="x", status="passed",
                      thresholds={"y": [{"metric": m, "value": t, "actual": a, "passed": True} for m, t, a in verdicts]})


def test_headroom_of_a_case():
    assert headroom(_result(("diff1", 0.01, 0.002), ("diff2", 0.01, 0.005), ("diff4", 0.5, 0.9))) == (0.5, "y.diff2")
    # diff4's threshold bounds nothing (passes() ignores its size); no bounded threshold: nothing to measure.
    assert headroom(_result(("diff4", 0.1, 1.0))) is None
    assert headroom(CaseResult(path="x", status="passed", message="rejected as expected")) is None
    assert threshold_ratio(math.nan, 0.01) == math.inf and threshold_ratio(None, 0.01) == math.inf
    assert threshold_ratio(0.0, 0.0) == 0.0 and threshold_ratio(1e-30, 0.0) == math.inf


# --------------------------------------------------------------------------- findings

def test_planted_bug_in_a_trusted_backend_is_a_finding(tmp_path):
    spec = "test_calibrate:no_half_pixel_alignment"
    code, output, doc = _calibration(tmp_path, COMMITTED / "deform_roi_pool_forward", "--filter", "random|boundary",
                                     "--backend", "reference", "--backend", spec)
    assert code == 1, output
    assert doc["findings"] and {f["backend"] for f in doc["findings"]} == {spec}
    assert doc["summary"]["findings"] == len(doc["findings"]) and not doc["summary"]["ok"]
    for f in doc["findings"]:
        assert f["status"] == "failed" and f["headroom"] > 1 and f["metric"].startswith("output.diff")
        # test_calibrate is found in tests/ (a path pytest added): a fresh shell needs it as PYTHONPATH.
        assert f["repro"] == f"PYTHONPATH={REPO / 'tests'} opcase run {f['path']} --backend {spec}"
        assert f"FINDING  {spec}  failed  {f['case']}" in output and f"REPRO: {f['repro']}" in output
    worst = max(e["worst"] for e in doc["headroom"] if e["backend"] == spec)
    assert worst == max(f["headroom"] for f in doc["findings"])


@pytest.mark.parametrize("backend, statuses", [
    ("run_backends:one_wrong_element", {"failed"}),
    ("run_backends:rejects_everything", {"wrongly-rejected"}),
    ("run_backends:no_checks", {"wrongly-accepted", "error"}),
    ("bad_backends:wrong_dtype", {"error"}),
])
def test_every_failing_status_is_a_finding(tmp_path, backend, statuses):
    selection = "invalid" if backend.endswith("no_checks") else "random|boundary"
    code, output, doc = _calibration(tmp_path, COMMITTED / "masked_im2col_forward", "--filter", selection,
                                     "--backend", backend)
    assert code == 1, output
    assert {f["status"] for f in doc["findings"]} <= statuses and doc["findings"]
    counts = doc["backends"][0]["counts"]
    assert doc["backends"][0]["findings"] == len(doc["findings"]) == sum(counts.get(s, 0) for s in FAILING)


def test_unsupported_kernel_is_not_covered_not_a_finding(tmp_path):
    # mmcv emulates carafe but not psamask: psamask's cases are skipped.
    code, output, doc = _calibration(tmp_path, COMMITTED, "--filter", "psamask_forward|carafe_forward/random",
                                     "--backend", "mmcv")
    assert code == 0, output
    assert doc["findings"] == []
    assert doc["not_covered"] == [{"backend": "mmcv", "kernel": "psamask_forward", "dtype": "float32",
                                   "suites": sorted({p.parent.name for p in find([COMMITTED / "psamask_forward"])}),
                                   "cases": len(find([COMMITTED / "psamask_forward"]))}]
    assert {e["kernel"] for e in doc["headroom"]} == {"carafe_forward"}
    assert "not covered by mmcv (skipped): psamask_forward float32" in output


def test_backend_that_judges_nothing_exits_5(tmp_path):
    code, output, doc = _calibration(tmp_path, COMMITTED / "psamask_forward", "--backend", "reference",
                                     "--backend", "mmcv")
    assert code == 5, output
    assert doc["summary"]["nothing_judged"] == ["mmcv"] and doc["findings"] == [] and not doc["summary"]["ok"]
    assert "mmcv judged no case" in output


def test_mistrusted_cases_are_listed_apart(tmp_path):
    source = next(p for p in find([COMMITTED / "psamask_forward" / "random"]))
    case = load(source)
    # Thresholds so loose that an all-zero output passes: the case cannot catch a zeroing bug.
    loose = {n: [replace(th, value=1e9) for th in ths] for n, ths in case.criteria.items()}
    suite = tmp_path / "suite"
    save(replace(case, criteria=loose, name="loose"), suite / "loose.opcase")
    save(case, suite / source.name)
    code, output, doc = _calibration(tmp_path, suite, "--backend", "reference")
    assert code == 0, output
    assert [m["case"] for m in doc["mistrusted"]] == ["psamask_forward/random/loose"]
    assert "all-zero 'y' would pass" in doc["mistrusted"][0]["message"]
    assert doc["findings"] == [] and doc["headroom"][0]["measured"] == 1   # the mistrusted one is not measured
    assert "mistrusted for reference: 1 case(s)" in output


def test_jobs_give_the_same_calibration(tmp_path):
    args = (COMMITTED / "border_align_backward", "--filter", "random", "--backend", "lowp")
    _, _, alone = _calibration(tmp_path, *args)
    code, output, pooled = _calibration(tmp_path, *args, "--jobs", "2")
    assert code == 0, output
    assert pooled["headroom"] == alone["headroom"] and pooled["summary"] == alone["summary"]


# --------------------------------------------------------------------------- JSON and usage

def test_json_structure(tmp_path):
    code, output, doc = _calibration(tmp_path, COMMITTED / "masked_im2col_forward", "--backend", "reference",
                                     "--backend", "run_backends:one_wrong_element")
    assert code == 1, output
    assert set(doc) == {"backends", "headroom", "not_covered", "findings", "over_cap", "mistrusted", "deviations",
                         "summary"}
    for b in doc["backends"]:
        assert set(b) == {"backend", "origin", "cases", "counts", "judged", "findings"}
    for e in doc["headroom"]:
        assert set(e) == {"kernel", "dtype", "suite", "backend", "cases", "counts", "findings", "over_cap", "measured",
                          "worst", "median", "worst_case", "worst_metric", "worst_path"}
        assert sum(e["counts"].values()) == e["cases"]
        assert e["findings"] == sum(f["backend"] == e["backend"] and f["case"].startswith(f"{e['kernel']}/{e['suite']}/")
                                    and f["case"].endswith(e["dtype"]) for f in doc["findings"])
    for f in doc["findings"]:
        assert set(f) == {"backend", "case", "path", "status", "message", "headroom", "metric", "repro"}
    assert doc["summary"] == {"backends": 2, "findings": len(doc["findings"]),
                              "judged": sum(b["judged"] for b in doc["backends"]), "nothing_judged": [], "ok": False}
    # Groups of invalid calls have verdicts but no thresholds: present, with nothing measured.
    invalid = [e for e in doc["headroom"] if e["suite"] == "invalid"]
    assert invalid and all(e["measured"] == 0 and e["worst"] is None for e in invalid)


def test_usage_errors_exit_2_in_one_line(tmp_path):
    (tmp_path / "file").write_text("")
    for args, text in [
        ([COMMITTED], "Missing option '--backend'"),
        ([COMMITTED, "--backend", "no-such-backend"], "unknown backend 'no-such-backend'"),
        ([tmp_path / "nowhere", "--backend", "reference"], "no such file or directory"),
        ([COMMITTED, "--backend", "reference", "--filter", "no-such-case"], "no case matches --filter"),
        ([COMMITTED, "--backend", "reference", "--json", tmp_path], "is a directory"),
        ([COMMITTED, "--backend", "reference", "--json", tmp_path / "file" / "c.json"], "is not a directory"),
        (["--backend", "reference"], "Missing argument 'PATHS...'"),
    ]:
        result = _calibrate(*args)
        assert result.exit_code == 2, (args, result.output)
        assert text in result.output and "Traceback" not in result.output, (args, result.output)
