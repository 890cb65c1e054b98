"""What a run prints when many cases fail or are skipped: one line per failing case past the
first few, and skipped cases counted per kernel and reason.

A run over a large output with a buggy kernel fails hundreds of cases; each one's full report
(every metric, the worst elements by two measures, REPRO, CASE) is some thirty lines, and a log of
thousands hides the few a person reads.  The first FULL_SHOWN failing cases keep their full
report (so does every one with -v, and --json/--html hold everything); each later one is a line:
its worst metric against its threshold, the worst element's coordinates, and its REPRO command.
"""
from __future__ import annotations

import re

from gen.core.verdict import FAILED, CaseResult
from harness.reports.numbers import coordinates, format_number, label_of, verdict_text

# How many failing cases a run reports in full before it goes to one line per case.
FULL_SHOWN = 3


def worst_verdict(r: CaseResult) -> tuple[str, dict] | None:
    """(output, verdict) of the failing threshold furthest over its bound (by the ratio of the
    metric to its threshold), or None when no threshold failed."""
    worst, worst_ratio = None, -1.0
    for output, verdicts in r.thresholds.items():
        for v in verdicts:
            if v["passed"]:
                continue
            actual, bound = v.get("actual"), v.get("value")
            if isinstance(actual, (int, float)) and isinstance(bound, (int, float)) and bound > 0:
                ratio = float(actual) / float(bound)
            else:
                ratio = float("inf")   # judged otherwise (diff4's rule): over by its own rule
            if ratio != ratio:        # NaN metric: as bad as it gets
                ratio = float("inf")
            if worst is None or ratio > worst_ratio:
                worst, worst_ratio = (output, v), ratio
    return worst


def where(r: CaseResult, output: str) -> str:
    """The worst element of ``output`` at its coordinates, or '' when none was recorded."""
    worst = r.worst.get(output, {})
    items = worst.get("worst_abs") or worst.get("worst_nan_inf") or []
    if not items:
        return ""
    w = items[0]
    return (f"at {coordinates(output, w['index'], r.layouts.get(output, ''))} "
            f"(golden {format_number(w['golden'])}, actual {format_number(w['actual'])})")


def short_line(r: CaseResult, label: str = "") -> str:
    """One line for a failing case: label, key, its worst metric against its threshold (or its
    message's first line), where, and the command that reruns it."""
    title = f"{r.op}/{r.suite}/{r.name}" if r.op else r.path
    parts = [f"{label or label_of(r.status):5}", title]
    found = worst_verdict(r) if r.status == FAILED else None
    if found is not None:
        output, v = found
        parts.append(verdict_text(f"{output}.{v['metric']}", v, short=True))
        place = where(r, output)
        if place:
            parts.append(place)
    elif r.message:
        parts.append(f"[{r.status}] {r.message.splitlines()[0]}")
    if r.gate:
        parts.append(f"{{{r.gate}: {r.gate_message}}}")
    if r.repro:
        parts.append(f"REPRO: {r.repro}")
    return "  ".join(parts)


# A note, once, where a run goes from full reports to one line per failing case.
SHORT_NOTE = (f"(more failing cases: one line each from here; -v reports each in full, --json and --html "
              f"hold everything)")


def skip_reason(r: CaseResult) -> str:
    """A skipped case's reason with its dtype left out, so that cases alternating float16 and
    float32 of one kernel declined for one reason count as one group."""
    reason = (r.message.splitlines() or [""])[0]
    if r.dtype:
        reason = re.sub(rf"\b{re.escape(r.dtype)}\b", "DTYPE", reason)
    return reason


def skip_groups(skips: list[CaseResult]) -> list[str]:
    """One line per kernel and reason: how many cases, which dtypes, the reason and the first."""
    groups: dict[tuple[str, str], list[CaseResult]] = {}
    for r in skips:
        groups.setdefault((r.op or "?", skip_reason(r)), []).append(r)
    lines = []
    for (op, reason), members in groups.items():
        if len(members) == 1:
            lines.append(f"{label_of('skipped'):5}  {members[0].key}  [skipped] {(members[0].message.splitlines() or [''])[0]}")
            continue
        dtypes = sorted({m.dtype for m in members if m.dtype})
        shown = reason.replace("DTYPE", "/".join(dtypes)) if "DTYPE" in reason else reason
        lines.append(f"{label_of('skipped'):5}  {op}: {len(members)} cases: {shown} "
                     f"(first {members[0].key}; -v lists each)")
    return lines
