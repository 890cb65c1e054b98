"""Human and machine reports of a run."""
from __future__ import annotations

import json
import os
import tempfile
from collections import Counter
from pathlib import Path

from harness.runner import FAILING, STATUSES, CaseResult

_LABEL = {"passed": "PASS", "failed": "FAIL", "wrongly-accepted": "FAIL", "wrongly-rejected": "FAIL",
          "error": "ERROR", "skipped": "SKIP", "mistrusted": "WARN"}


def _fmt(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)


def case_line(r: CaseResult) -> str:
    title = f"{r.op}/{r.suite}/{r.name}" if r.op else r.path
    parts = [f"{_LABEL.get(r.status, r.status.upper()):5}", title]
    shown = []
    for output, verdicts in r.thresholds.items():
        for v in verdicts:
            shown.append(f"{output}.{v['metric']}={_fmt(v['actual'])}{'<=' if v['passed'] else '>'}{_fmt(v['value'])}")
    if shown:
        parts.append(" ".join(shown))
    if r.status != "passed" or not shown:
        if r.message:
            parts.append(f"[{r.status}] {r.message.splitlines()[0]}")
    return "  ".join(parts)


def failure_details(r: CaseResult) -> str:
    """The lines that help a person act on a failing case."""
    lines = [f"  {line}" for line in r.message.splitlines()[1:]]
    for output, worst in r.worst.items():
        items = worst.get("worst_abs") or []
        if r.status == "failed" and items:
            lines.append(f"  worst |error| of {output}:")
            for w in items[:5]:
                lines.append(f"    {output}{w['index']}: golden {_fmt(w['golden'])} actual {_fmt(w['actual'])} "
                             f"abs {_fmt(w['abs_err'])} rel {_fmt(w['rel_err'])}")
        nan_items = worst.get("worst_nan_inf") or []
        if r.status == "failed" and nan_items:
            lines.append(f"  NaN/Inf mismatches of {output}:")
            for w in nan_items[:5]:
                lines.append(f"    {output}{w['index']}: golden {w['golden']} actual {w['actual']}")
    if r.repro:
        lines.append(f"  REPRO: {r.repro}")
    return "\n".join(lines)


def summary(results: list[CaseResult]) -> dict:
    counts = Counter(r.status for r in results)
    per_group: dict = {}
    for r in results:
        group = per_group.setdefault(f"{r.op or '?'}/{r.suite or '?'}", Counter())
        group[r.status] += 1
    return {"total": len(results), "counts": {s: counts.get(s, 0) for s in STATUSES},
            "groups": {k: dict(v) for k, v in sorted(per_group.items())},
            "ok": not any(r.status in FAILING for r in results)}


def summary_text(results: list[CaseResult]) -> str:
    s = summary(results)
    counts = ", ".join(f"{n} {status}" for status, n in s["counts"].items() if n)
    lines = [f"{s['total']} cases: {counts or 'none'}"]
    if len(s["groups"]) > 1:
        for group, c in s["groups"].items():
            lines.append(f"  {group}: " + ", ".join(f"{n} {st}" for st, n in c.items()))
    return "\n".join(lines)


def write_atomic(path: str | os.PathLike, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _json_safe(value):
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return str(value)
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def to_json(results: list[CaseResult], backend: str) -> str:
    doc = {"backend": backend, "summary": summary(results), "cases": [r.to_json() for r in results]}
    return json.dumps(_json_safe(doc), indent=1, sort_keys=False)
