"""Calibration: implementations you trust, judged against a suite, and how close each comes to
the suite's thresholds.

The cases are run and judged exactly as `opcase run` does (harness.judge.workers.run_cases); this
module only reads the results.  A trusted backend should pass every case it covers, so any case
it fails (failed, wrongly-accepted, wrongly-rejected, error) is a *finding*: either the
backend or the threshold is wrong.  Its *headroom* on a case is the largest ratio of a metric
to its threshold over the case's outputs (1.0: exactly at the threshold); per kernel, dtype,
suite and backend the calibration gives the worst and the median of it, and the worst case.
"""
from __future__ import annotations

import math
import statistics
from collections import Counter
from dataclasses import dataclass

from gen.core.metrics import THRESHOLD_METRICS, json_float
from gen.core.registry import UnknownOp, spec_for
from gen.core.spec import SpecError
from gen.core.verdict import (FAILING, MISTRUSTED, SKIPPED, STATUSES, CaseResult,
                              fails_only_by_its_own_error_over_the_cap)

# The metrics whose threshold is a bound on the value.  diff4's threshold is not: `passes`
# ignores its size (the mlu-ops rule only asks whether every error leans one way).
BOUNDED_METRICS = THRESHOLD_METRICS


@dataclass
class BackendRun:
    """One trusted backend's results over the suite, in case order."""
    backend: str          # the --backend value
    origin: str           # where it comes from (gen.core.backend.Backend.origin)
    results: list[CaseResult]


def threshold_ratio(actual, threshold: float) -> float:
    """actual / threshold; a value that is missing or not finite is infinitely far over."""
    if not isinstance(actual, (int, float)) or not math.isfinite(actual):
        return math.inf
    if threshold > 0:
        return actual / threshold
    return 0.0 if actual <= 0 else math.inf


def headroom(result: CaseResult) -> tuple[float, str] | None:
    """(largest metric/threshold over the case's outputs, 'OUTPUT.METRIC' where it is), or None
    when the case applied no bounded threshold (an invalid call, rejected: nothing to measure)."""
    worst = None
    for output, verdicts in result.thresholds.items():
        for v in verdicts:
            if v["metric"] not in BOUNDED_METRICS:
                continue
            ratio = threshold_ratio(v["actual"], v["value"])
            if worst is None or ratio > worst[0]:
                worst = (ratio, f"{output}.{v['metric']}")
    return worst


def _group_key(r: CaseResult) -> tuple[str, str, str]:
    return r.op or "?", r.dtype or "?", r.suite or "?"


def _is_finding(r: CaseResult, backend: str) -> bool:
    """A failing verdict that neither the docs' cap (see fails_only_by_its_own_error_over_the_cap)
    nor a known deviation of the spec explains."""
    if r.status not in FAILING or fails_only_by_its_own_error_over_the_cap(r, backend):
        return False
    deviation = _deviation_of(r, backend)
    return deviation is None or deviation.status != r.status


def _headroom_entry(run: BackendRun, key: tuple[str, str, str], results: list[CaseResult]) -> dict:
    """The headroom of one backend on one kernel/dtype/suite, over its judged cases (passed or
    failing: a finding's ratio is part of the picture; mistrusted cases prove nothing, and the
    cases over the docs' cap are listed apart)."""
    measured = [(h, r) for r in results if r.status not in (SKIPPED, MISTRUSTED)
                and not (fails_only_by_its_own_error_over_the_cap(r, run.backend))
                for h in [headroom(r)] if h is not None]
    counts = Counter(r.status for r in results)
    over_cap = sum(fails_only_by_its_own_error_over_the_cap(r, run.backend) for r in results)
    entry = {"kernel": key[0], "dtype": key[1], "suite": key[2], "backend": run.backend,
             "cases": len(results), "counts": {s: counts[s] for s in STATUSES if counts[s]},
             "findings": sum(_is_finding(r, run.backend) for r in results), "over_cap": over_cap,
             "measured": len(measured), "worst": None, "median": None,
             "worst_case": None, "worst_metric": None, "worst_path": None}
    if measured:
        (worst, metric), case = max(measured, key=lambda m: m[0][0])   # the first of equals
        entry.update(worst=json_float(worst), median=json_float(statistics.median(h[0] for h, _ in measured)),
                     worst_case=case.key, worst_metric=metric, worst_path=case.path)
    return entry


def calibration(runs: list[BackendRun]) -> dict:
    """The calibration report (README: Calibrating thresholds against trusted implementations)."""
    doc = {"backends": [], "headroom": [], "not_covered": [], "findings": [], "over_cap": [], "mistrusted": [],
           "deviations": []}
    for run in runs:
        counts = Counter(r.status for r in run.results)
        groups: dict[tuple[str, str, str], list[CaseResult]] = {}
        for r in run.results:
            groups.setdefault(_group_key(r), []).append(r)
        uncovered: dict[tuple[str, str], list[str]] = {}
        for key, results in sorted(groups.items()):
            if all(r.status == SKIPPED for r in results):
                uncovered.setdefault(key[:2], []).append(key[2])
            else:
                doc["headroom"].append(_headroom_entry(run, key, results))
        for (kernel, dtype), suites in uncovered.items():
            doc["not_covered"].append({"backend": run.backend, "kernel": kernel, "dtype": dtype, "suites": suites,
                                       "cases": sum(len(groups[(kernel, dtype, s)]) for s in suites)})
        seen: dict = {}          # deviation -> whether a case it covers had its status
        for r in run.results:
            deviation = _deviation_of(r, run.backend)
            if deviation is not None:
                seen[deviation] = seen.get(deviation, False) or r.status == deviation.status
            if deviation is not None and r.status == deviation.status:
                doc["deviations"].append({"backend": run.backend, "case": r.key, "path": r.path, "status": r.status,
                                          "reason": deviation.reason, "spec_line": deviation.line})
            elif fails_only_by_its_own_error_over_the_cap(r, run.backend):
                doc["over_cap"].append({"backend": run.backend, "case": r.key, "path": r.path,
                                        "message": r.message.splitlines()[0] if r.message else ""})
            elif r.status in FAILING:
                ratio, metric = headroom(r) or (None, None)
                doc["findings"].append({"backend": run.backend, "case": r.key, "path": r.path, "status": r.status,
                                        "message": r.message.splitlines()[0] if r.message else "",
                                        "headroom": None if ratio is None else json_float(ratio),
                                        "metric": metric, "repro": r.repro})
            elif r.status == MISTRUSTED:
                doc["mistrusted"].append({"backend": run.backend, "case": r.key, "path": r.path, "message": r.message})
        for deviation, happened in seen.items():
            if not happened:      # as a strict xfail: a deviation that no longer happens is stale data
                doc["findings"].append({"backend": run.backend, "case": deviation.cases, "path": "",
                                        "status": "deviation-gone", "headroom": None, "metric": None, "repro": "",
                                        "message": f"the spec's deviation (line {deviation.line}) expects "
                                                   f"{deviation.status} and no case it covers has it: remove it"})
        n_judged = sum(r.status not in (SKIPPED, MISTRUSTED) for r in run.results)
        doc["backends"].append({"backend": run.backend, "origin": run.origin, "cases": len(run.results),
                                "counts": {s: counts[s] for s in STATUSES if counts[s]}, "judged": n_judged,
                                "findings": sum(f["backend"] == run.backend for f in doc["findings"])})
    unjudged = [b["backend"] for b in doc["backends"] if not b["judged"]]
    doc["summary"] = {"backends": len(runs), "findings": len(doc["findings"]),
                      "judged": sum(b["judged"] for b in doc["backends"]), "nothing_judged": unjudged,
                      "ok": bool(runs) and not doc["findings"] and not unjudged}
    return doc


# --------------------------------------------------------------------------- terminal

def _cell(entry: dict | None) -> str:
    """'worst/median' of one backend on one group; '-' nothing measured; 'n/c' not covered;
    '!' marks a group holding findings, '^' one holding cases over the docs' cap (failed by the
    backend that set their thresholds, its own error over the cap: not findings)."""
    if entry is None:
        return "n/c"
    text = "-" if entry["worst"] is None else f"{_ratio_text(entry['worst'])}/{_ratio_text(entry['median'])}"
    return text + ("!" if entry["findings"] else "") + ("^" if entry["over_cap"] else "")


def _ratio_text(value) -> str:
    return value if isinstance(value, str) else f"{value:.3g}"


def _deviation_of(result: CaseResult, backend: str):
    """The spec's known deviation of ``backend`` that covers the result's case, or None."""
    try:
        spec = spec_for(result.op)
    except (UnknownOp, SpecError):
        return None
    return next((d for d in spec.deviations if d.covers(backend, result.suite, result.name)), None)


def table_lines(doc: dict) -> list[str]:
    """Kernel/dtype/suite rows, a worst/median column per backend; then each backend's closest
    case, the findings with their REPRO lines, and what was not covered or is mistrusted."""
    backends = [b["backend"] for b in doc["backends"]]
    by_group: dict[tuple, dict] = {}
    for e in doc["headroom"]:
        by_group.setdefault((e["kernel"], e["dtype"], e["suite"]), {})[e["backend"]] = e
    # Groups of rejections only (invalid calls) have no thresholds: they show as findings or not at all.
    rows = [(key, entries) for key, entries in sorted(by_group.items())
            if any(e["measured"] or e["counts"].keys() & FAILING for e in entries.values())]
    header = ["kernel", "dtype", "suite", *backends]
    cells = [[*key, *(_cell(entries.get(b)) for b in backends)] for key, entries in rows]
    widths = [max(len(row[i]) for row in [header, *cells]) for i in range(len(header))]
    lines = ["metric/threshold per case, worst/median over the group ('!': findings, '^': over the docs' cap, "
             "'n/c': not covered, '-': no threshold applied)"]
    lines += ["  ".join(text.ljust(w) for text, w in zip(row, widths)).rstrip() for row in [header, *cells]]
    for b in backends:
        measured = [e for e in doc["headroom"] if e["backend"] == b and e["worst"] is not None]
        if measured:
            e = max(measured, key=lambda e: math.inf if isinstance(e["worst"], str) else e["worst"])
            lines.append(f"closest to its thresholds: {b} {_ratio_text(e['worst'])} ({e['worst_metric']}) "
                         f"on {e['worst_case']}")
    for f in doc["findings"]:
        ratio = "" if f["headroom"] is None else f"  {f['metric']} at {_ratio_text(f['headroom'])}x its threshold"
        lines.append(f"FINDING  {f['backend']}  {f['status']}  {f['case']}{ratio}  {f['message']}")
        if f["repro"]:
            lines.append(f"  REPRO: {f['repro']}")
    for b in backends:
        gaps = [f"{n['kernel']} {n['dtype']}" for n in doc["not_covered"] if n["backend"] == b]
        if gaps:
            lines.append(f"not covered by {b} (skipped): {', '.join(gaps)}")
        n_over_cap = sum(m["backend"] == b for m in doc["over_cap"])
        if n_over_cap:
            lines.append(f"over the docs' cap for {b}: {n_over_cap} case(s) it fails where it set the thresholds "
                         f"itself and its own error is over the docs' cap (not findings; see --json)")
        for d in (d for d in doc["deviations"] if d["backend"] == b):
            lines.append(f"known deviation  {b}  {d['status']}  {d['case']}: {d['reason']}")
        n_mistrusted = sum(m["backend"] == b for m in doc["mistrusted"])
        if n_mistrusted:
            lines.append(f"mistrusted for {b}: {n_mistrusted} case(s) passed that prove nothing (see --json)")
    s = doc["summary"]
    lines.append(f"{s['findings']} finding(s) over {len(backends)} backend(s), {s['judged']} case verdict(s)"
                 + (f"; judged nothing: {', '.join(s['nothing_judged'])}" if s["nothing_judged"] else ""))
    return lines
