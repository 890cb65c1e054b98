"""Baselines, and the gate that fails a run when something got worse than the last good one.

A baseline is a JSON file made and changed only by `opcase baseline update RESULTS.json -o
BASELINE.json`, from the results `opcase run --json` writes::

    {"format": "opcase-baseline", "version": 1,
     "cases": {"OP/SUITE/NAME": {"status": "passed", "backend": "reference",
                                 "median_us": 12.5, "timing_source": "harness"}, ...}}

`opcase run ... --compare BASELINE.json` then gives each case a gate verdict:
  regression  passed in the baseline, does not now (whatever it is now): fails the run
  slowdown    median time over mlu-ops' limit (baseline <= 100 us: +5 us, else +4%): fails the run;
              only where both runs timed the case (--repeat) the same way (backend or harness)
  improved    did not pass in the baseline, passes now: reported
  faster      median time under the baseline by more than the same margin: reported
  new         not in the baseline: reported (its own status still counts)
Cases of the baseline that this run did not include (other shards, --filter) are not judged; a
baseline that shares no case with the run compared nothing, and fails the gate.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

from gen.core.verdict import FAILING, PASSED, STATUSES, CaseResult
from gen.core.timing import slowdown_limit_us

BASELINE_FORMAT = "opcase-baseline"
BASELINE_VERSION = 1
REGRESSION, SLOWDOWN, IMPROVED, FASTER, NEW = "regression", "slowdown", "improved", "faster", "new"
GATE_FAILING = frozenset({REGRESSION, SLOWDOWN})


class BaselineError(Exception):
    """A results or baseline file that cannot be used."""


class BaselineRefused(Exception):
    """`baseline update` asked to record failing cases without --allow-failing."""


def _read_json(path, what: str) -> dict:
    path = Path(path)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise BaselineError(f"{path}: cannot read {what} ({exc.strerror})") from None
    except json.JSONDecodeError as exc:
        raise BaselineError(f"{path}: not a JSON {what} ({exc.msg}, line {exc.lineno})") from None
    if not isinstance(doc, dict):
        raise BaselineError(f"{path}: not a {what}")
    return doc


def load_results(path) -> dict:
    """A results document written by `opcase run --json`."""
    doc = _read_json(path, "results file")
    if doc.get("format") == BASELINE_FORMAT:
        raise BaselineError(f"{path}: this is a baseline; give the results of `opcase run --json`")
    if doc.get("complete") is False:
        raise BaselineError(f"{path}: the run that wrote these results did not finish; run it again")
    if not isinstance(doc.get("cases"), list) or not all(isinstance(c, dict) and "status" in c for c in doc["cases"]):
        raise BaselineError(f"{path}: not a results file of `opcase run --json` (no list of cases)")
    return doc


def result_key(case: dict) -> str:
    """OP/SUITE/NAME of a case record (the path, for a case file that could not be read)."""
    return f"{case['op']}/{case.get('suite', '')}/{case.get('name', '')}" if case.get("op") else case.get("path", "")


def load_baseline(path) -> dict[str, dict]:
    doc = _read_json(path, "baseline")
    if doc.get("format") != BASELINE_FORMAT:
        raise BaselineError(f"{path}: not an opcase baseline; make one with "
                            f"`opcase baseline update RESULTS.json -o {Path(path).name}`")
    if doc.get("version") != BASELINE_VERSION:
        raise BaselineError(f"{path}: baseline version {doc.get('version')}, this opcase reads {BASELINE_VERSION}")
    if not isinstance(doc.get("cases"), dict):
        raise BaselineError(f"{path}: baseline has no cases mapping")
    for key, entry in doc["cases"].items():
        problem = _entry_problem(entry)
        if problem:
            raise BaselineError(f"{path}: case {key!r}: {problem}; remake the baseline with `opcase baseline update`")
    return doc["cases"]


def _entry_problem(entry) -> str:
    """What is wrong with a baseline entry (as _entry writes them), or ''."""
    if not isinstance(entry, dict):
        return f"an entry is a mapping, not {type(entry).__name__}"
    if entry.get("status") not in STATUSES:
        return f"status {entry.get('status')!r} is not one of {', '.join(STATUSES)}"
    median = entry.get("median_us")
    if median is not None and (isinstance(median, bool) or not isinstance(median, (int, float))
                               or not math.isfinite(median) or median < 0):
        return f"median_us {median!r} is not a finite number of microseconds >= 0"
    for key in ("backend", "timing_source"):
        if not isinstance(entry.get(key, ""), str):
            return f"{key} {entry[key]!r} is not a string"
    return ""


def _entry(case: dict, backend: str) -> dict:
    entry = {"status": case["status"], "backend": backend}
    timing = case.get("timing")
    if isinstance(timing, dict) and timing.get("median_us") is not None:
        entry["median_us"] = timing["median_us"]
        entry["timing_source"] = timing.get("source", "")
    return entry


def updated_baseline(results: list[dict], existing: dict[str, dict] | None, allow_failing: bool) -> tuple[dict, dict]:
    """The baseline document with ``results`` recorded over ``existing``; and counts of what changed.

    Raises BaselineRefused if any case failed (status or gate) and ``allow_failing`` is false.
    """
    failing = [result_key(c) for doc in results for c in doc["cases"]
               if c["status"] in FAILING or c.get("gate") in GATE_FAILING]
    if failing and not allow_failing:
        shown = ", ".join(failing[:3]) + (f" and {len(failing) - 3} more" if len(failing) > 3 else "")
        raise BaselineRefused(f"refusing to record {len(failing)} failing case(s) in the baseline ({shown}); "
                              f"fix them, or pass --allow-failing to record them as they are")
    cases = dict(existing or {})
    counts = {"added": 0, "changed": 0, "unchanged": 0}
    for doc in results:
        for case in doc["cases"]:
            key, entry = result_key(case), _entry(case, doc.get("backend", ""))
            counts["added" if key not in cases else "unchanged" if cases[key] == entry else "changed"] += 1
            cases[key] = entry
    baseline = {"format": BASELINE_FORMAT, "version": BASELINE_VERSION, "cases": dict(sorted(cases.items()))}
    return baseline, counts


def judge_against(result: CaseResult, entry: dict | None) -> None:
    """Set ``result.gate`` and ``result.gate_message`` from the baseline's record of the case."""
    if entry is None:
        result.gate, result.gate_message = NEW, "not in the baseline"
        return
    was, now = entry.get("status"), result.status
    if was == PASSED and now != PASSED:
        result.gate, result.gate_message = REGRESSION, f"passed in the baseline, now {now}"
        return
    verdict = (IMPROVED, f"{was} in the baseline, now passed") if was != PASSED and now == PASSED else ("", "")
    base_us, timing = entry.get("median_us"), result.timing
    if base_us is not None and timing and timing.get("source") == entry.get("timing_source"):
        now_us, limit = timing["median_us"], slowdown_limit_us(base_us)
        if now_us > limit:
            verdict = (SLOWDOWN, f"median {now_us:.1f} us, baseline {base_us:.1f} us: over the limit {limit:.1f} us")
        elif now_us < base_us - (limit - base_us) and not verdict[0]:
            verdict = (FASTER, f"median {now_us:.1f} us, baseline {base_us:.1f} us")
    result.gate, result.gate_message = verdict


def gate_summary(results: list[CaseResult], baseline_path, baseline: dict[str, dict]) -> dict:
    counts = {g: sum(r.gate == g for r in results) for g in (REGRESSION, SLOWDOWN, IMPROVED, FASTER, NEW)}
    seen = {r.key for r in results}
    backends = sorted({e.get("backend", "") for k, e in baseline.items() if k in seen})
    return {"baseline": str(baseline_path), "baseline_backends": backends, **counts,
            "not_run": sum(k not in seen for k in baseline), "compared": len(seen & baseline.keys()),
            # A baseline that shares no case with the run compared nothing: that is no pass of the gate.
            # (A run with no case at all is the empty run's affair: exit 5, not the gate's.)
            "ok": (not seen or bool(seen & baseline.keys())) and not any(r.gate in GATE_FAILING for r in results)}
