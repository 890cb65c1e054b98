"""`opcase run --report mluops-pr FILE`: the "3. Test Report" of an mlu-ops pull request, in the
template's sections, filled from a passing and from a failing run."""
from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner

from conftest import REPO
from harness.cli import main
from mluops_check_backends import REPORT_ENV

# The headings of part 3 of mlu-ops' .github/pull_request_template.md (Cambricon/mlu-ops at 73adc65),
# as (Markdown level, number, title): a report pasted into a PR must have each, in this order.
TEMPLATE_HEADINGS = [
    (2, "3.", "Test Report"),
    (3, "3.1", "Modification Details"),
    (4, "3.1.1", "Accuracy Acceptance Standard"),
    (4, "3.1.2", "Operator Scheme checklist"),
    (3, "3.2", "Accuracy Test"),
    (4, "3.2.1", "Accuracy Test"),
    (4, "3.2.2", "Parameter Check"),
    (3, "3.3", "Performance Test"),
    (3, "3.4", "Summary Analysis"),
]


def _headings(markdown: str) -> list[tuple]:
    """The report's headings outside code blocks, as (level, number, title)."""
    found, fenced = [], False
    for line in markdown.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        match = None if fenced else re.fullmatch(r"(#+) (\S+) (.+)", line)
        if match:
            found.append((len(match[1]), match[2], match[3].strip()))
    return found


def _section(markdown: str, number: str) -> str:
    """The text under heading ``number``, up to the next heading."""
    parts = re.split(r"^#+ (\S+) .*$", markdown, flags=re.M)
    return next(parts[i + 1] for i in range(1, len(parts), 2) if parts[i] == number)


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    """carafe_backward's invalid suite, and boundary cases with NaN/Inf, zero elements and plain values."""
    out = tmp_path_factory.mktemp("pr_cases")
    for suite, select in (("invalid", ".*"), ("boundary", "(zero_batch|nonfinite_input|kernel_1|scale_1)-.*")):
        result = CliRunner().invoke(main, ["gen", str(REPO / "specs" / "carafe_backward.yaml"), "--suite", suite,
                                           "--select", select, "-o", str(out)])
        assert result.exit_code == 0, result.output[-2000:]
    return out


def _run(cases, backend: str, tmp_path, *options):
    report, results = tmp_path / "report.md", tmp_path / "results.json"
    result = CliRunner().invoke(main, ["run", str(cases), "--backend", f"mluops_check_backends:{backend}",
                                       "--report", "mluops-pr", str(report), "--json", str(results), *options])
    return result, report.read_text(), json.loads(results.read_text())["cases"]


def _row(report: str, key: str, output: str) -> list[str]:
    line = next(l for l in report.splitlines() if l.startswith(f"| {key} |") and f"| {output} |" in l)
    return [cell.strip() for cell in line.strip("|").split("|")]


def _check_metrics_against_results(report: str, results: list) -> None:
    """Every judged output has its row; each threshold there is the one the case carried."""
    for r in results:
        for output, verdicts in r["thresholds"].items():
            cells = dict(zip(["case", "dtype", "output", "diff1", "diff2", "diff3", "diff4", "status"],
                             _row(report, f"{r['op']}/{r['suite']}/{r['name']}", output)))
            assert cells["status"] == r["status"]
            for v in verdicts:
                value, slash, threshold, held = cells[v["metric"]].split()   # "VALUE / THRESHOLD ok|OVER"
                assert slash == "/"
                assert float(threshold) == pytest.approx(v["value"], rel=1e-2)
                assert float(value) == pytest.approx(v["actual"], rel=1e-2, abs=1e-300)
                assert held == ("ok" if v["passed"] else "OVER")


def test_passing_run_report(cases, tmp_path):
    result, report, results = _run(cases, "carafe_backward", tmp_path, "--repeat", "1")
    assert result.exit_code == 0, result.output[-2000:]
    assert _headings(report) == TEMPLATE_HEADINGS
    _check_metrics_against_results(report, results)
    assert "- [x] diff1 <= max(mmcv diff1 x 10" in _section(report, "3.1.1")
    checklist = _section(report, "3.2.1")
    assert "- [x] Nan/INF tests: 2 case(s), all passed" in checklist
    assert "- [x] Zero dimensional tensor test/zero element test: 2 case(s), all passed" in checklist
    params = _section(report, "3.2.2")
    assert "kernel_size_max-float32: passed: declined as not supported" in params
    assert "none: each of the 19 illegal call(s) was refused" in params
    assert "(not met)" not in params
    performance = _section(report, "3.3")
    assert performance.count("[Op name               ]: carafe_backward") == sum(r["timing"] is not None for r in results) > 0
    assert "input.shape=[" in performance
    assert "Every judged case passed." in _section(report, "3.4")


def test_failing_run_report(cases, tmp_path):
    result, report, results = _run(cases, "carafe_backward_one_percent_high", tmp_path)
    assert result.exit_code == 1
    assert _headings(report) == TEMPLATE_HEADINGS
    _check_metrics_against_results(report, results)
    assert any(" OVER |" in line for line in _section(report, "3.2.1").splitlines())
    assert "- [ ] Data type test:" in _section(report, "3.2.1")
    assert "No case was timed" in _section(report, "3.3")
    failing = [r for r in results if r["status"] != "passed"]
    summary = _section(report, "3.4")
    assert failing and f"{len(failing)} case(s) failing." in summary
    assert all(f"- {r['op']}/{r['suite']}/{r['name']}: {r['status']}:" in summary for r in failing)


def test_wrongly_accepted_call_in_parameter_check(cases, tmp_path):
    result, report, _ = _run(cases, "carafe_backward_as_written", tmp_path, "--filter", "invalid")
    assert result.exit_code == 1
    assert _headings(report) == TEMPLATE_HEADINGS
    params = _section(report, "3.2.2")
    assert "1 of 19 illegal call(s) accepted:" in params
    assert "invalid/grad_input_hw-float32: accepted a call that breaks check 'grad_input_hw'" in params
    assert params.count("(not met)") == 2


def test_a_stale_report_is_replaced_before_the_first_call(cases, tmp_path, monkeypatch):
    report = tmp_path / "report.md"
    report.write_text("## 3. Test Report\n\nEvery judged case passed.\n")    # an older run's
    monkeypatch.setenv(REPORT_ENV, str(report))
    # The backend reads the report to see it was replaced first: a confined worker may, by the user's leave.
    monkeypatch.setenv("OPCASE_WORKER_WRITABLE", str(tmp_path))
    result = CliRunner().invoke(main, ["run", str(cases / "carafe_backward" / "boundary"), "--filter", "kernel_1-",
                                       "--backend", "mluops_check_backends:carafe_backward_watching_report",
                                       "--report", "mluops-pr", str(report)])
    assert result.exit_code == 0, result.output[-2000:]
    assert _headings(report.read_text()) == TEMPLATE_HEADINGS
    assert "2 case(s), 2 passed." in report.read_text()
