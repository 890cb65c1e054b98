"""Human and machine reports of a run: case lines, mismatch reports, summaries, JSON, progress."""
from __future__ import annotations

from collections import Counter
import json

import click

from gen.core.metrics import json_float
from gen.core.verdict import CaseResult, FAILED, FAILING, MISTRUSTED, PASSED, SKIPPED, STATUSES, output_fails
from harness.judge.gate import GATE_FAILING
from harness.judge.selection import case_key
from harness.reports.numbers import LABEL, coordinates, format_number, label_of, verdict_text
from harness.reports.progress import Heartbeat, StatusLine

# Defined beside this module and re-exported, so that `from harness.reports.report import NAME` keeps working.
__all__ = ["LABEL", "coordinates", "format_number", "label_of", "verdict_text"]


# How many of the worst elements a mismatch report lists, by each measure.
WORST_SHOWN = 10


def fails(r: CaseResult) -> bool:
    """Whether a case fails the run: by its status, or by the baseline gate."""
    return r.status in FAILING or r.gate in GATE_FAILING


def case_line(r: CaseResult) -> str:
    title = f"{r.op}/{r.suite}/{r.name}" if r.op else r.path
    label = LABEL.get(r.status, r.status.upper())
    if r.status not in FAILING and r.gate in GATE_FAILING:
        label = "FAIL"
    parts = [f"{label:5}", title]
    shown = [verdict_text(f"{output}.{v['metric']}", v, short=True)
             for output, verdicts in r.thresholds.items() for v in verdicts]
    if shown:
        parts.append(" ".join(shown))
    reported = [verdict_text(f"{output}.{v['metric']}", v, short=True)
                for output, verdicts in r.informative.items() for v in verdicts]
    if reported or r.not_compared:
        parts.append("{reported, not judged: " + " ".join(reported + [f"{o} (threshold_use 0)" for o in r.not_compared])
                     + "}")
    if r.timing:
        parts.append(f"{r.timing['median_us']:.1f}us±{r.timing['spread_pct']:.0f}%")
    if r.efficiency and r.efficiency.get("io_efficiency") is not None:
        e = r.efficiency
        parts.append(f"io {100 * e['io_efficiency']:.1f}%" + (f" compute {100 * e['compute_efficiency']:.1f}%"
                                                            if e.get("compute_efficiency") is not None else ""))
    if r.status != PASSED or not shown:
        message = _unsaid(r) if shown else r.message
        if message:
            parts.append(f"[{r.status}] {message.splitlines()[0]}")
    if r.gate:
        parts.append(f"{{{r.gate}: {r.gate_message}}}")
    return "  ".join(parts)


def _unsaid(r: CaseResult) -> str:
    """A failed case's message less the metrics its line already shows against their thresholds
    (what is left: NaN/Inf positions, an output with no threshold); other statuses' as it is."""
    if r.status != FAILED:
        return r.message
    first, _, rest = r.message.partition("\n")
    labels = tuple(f"{output}.{v['metric']}" for output, verdicts in r.thresholds.items() for v in verdicts)
    kept = [part for part in first.split("; ")
            if not any(part.startswith((label + "=", label + ":", label + " ")) for label in labels)]
    return "\n".join(x for x in ("; ".join(kept), rest) if x)


def threshold_source(v: dict) -> str:
    text = v.get("provenance") or "no provenance recorded"
    if v.get("baseline"):
        text += f"; {v['baseline']} scored {format_number(float(v.get('baseline_value', 0.0)))}"
    return text


def relative_text(w: dict) -> str:
    """An element's relative error |actual - golden| / |golden| as a person reads it.  diff3's own
    per-element measure (w['rel_err'], what ranks "worst by relative error") counts the absolute
    error where the golden is tiny; shown as "rel", that made an element 100 % wrong read 2.38e-07."""
    golden, abs_err = w.get("golden"), w.get("abs_err")
    if not isinstance(golden, (int, float)) or not isinstance(abs_err, (int, float)):
        return format_number(w.get("rel_err"))
    true_rel = abs_err / abs(golden) if golden else (float("inf") if abs_err else 0.0)
    text = format_number(float(true_rel))
    rel_err = w.get("rel_err")
    if isinstance(rel_err, (int, float)) and rel_err == abs_err and golden and abs(abs(golden) - 1.0) > 1e-3 \
            and true_rel != rel_err:
        text += " (golden tiny: diff3 counts abs)"
    return text


def _elements(output: str, items: list, layout: str, with_errors: bool = True) -> list[str]:
    lines = []
    for w in items[:WORST_SHOWN]:
        line = f"      {coordinates(output, w['index'], layout)}  golden {format_number(w['golden'])}  actual {format_number(w['actual'])}"
        if with_errors:
            line += f"  abs {format_number(w['abs_err'])}  rel {relative_text(w)}"
        lines.append(line)
    return lines


def mismatch_report(r: CaseResult, output: str) -> list[str]:
    """Everything about one failing output: each metric against its threshold and where the
    threshold came from, the worst elements at their coordinates, and the NaN/Inf mismatches."""
    m, layout = r.metrics.get(output, {}), r.layouts.get(output, "")
    lines = [f"  output {output} ({layout or 'no layout'}):"]
    for v in r.thresholds.get(output, []):
        lines.append(f"    {verdict_text(v['metric'], v, spaced=True)}  {'ok  ' if v['passed'] else 'FAIL'}  threshold: {threshold_source(v)}")
    for v in r.informative.get(output, []):
        lines.append(f"    {verdict_text(v['metric'], v, spaced=True)}  reported, not judged: {threshold_source(v)}")
    if not r.thresholds.get(output):
        lines.append("    no threshold stated for this output")
    if m:
        lines.append(f"    {m.get('n_unequal', 0)} of {m.get('n', 0)} finite elements differ "
                     f"({m.get('n_greater', 0)} above the golden, {m.get('n_less', 0)} below); "
                     f"NaN/Inf mismatches: {m.get('nan_inf_mismatch', 0)} "
                     f"(golden holds {m.get('nan_golden', 0)} NaN, {m.get('inf_golden', 0)} Inf)")
    worst = r.worst.get(output, {})
    by_abs, by_rel = worst.get("worst_abs") or [], worst.get("worst_rel") or []
    if by_abs:
        same = [w["flat"] for w in by_abs[:WORST_SHOWN]] == [w["flat"] for w in by_rel[:WORST_SHOWN]]
        lines.append(f"    worst by absolute error{' (and by relative error)' if same else ''}:")
        lines += _elements(output, by_abs, layout)
        if not same and by_rel:
            lines.append("    worst by relative error:")
            lines += _elements(output, by_rel, layout)
    nan_inf = worst.get("worst_nan_inf") or []
    if nan_inf:
        lines.append(f"    NaN/Inf mismatches (first {min(len(nan_inf), WORST_SHOWN)} in order):")
        lines += _elements(output, nan_inf, layout, with_errors=False)
    return lines


def failure_details(r: CaseResult) -> str:
    """The lines that help a person act on a case: what went wrong, where, and how to rerun it."""
    lines = [f"  {line}" for line in r.message.splitlines()[1:]]
    if r.status == FAILED:
        for output in r.thresholds:
            if output_fails(r, output):
                lines += mismatch_report(r, output)
    if r.explanation:
        lines.append(f"  EXPLAIN: {r.explanation}")
    if r.gate:
        lines.append(f"  baseline: {r.gate}: {r.gate_message}")
    if r.repro:
        lines.append(f"  REPRO: {r.repro}")
    if r.descriptor:
        # The case itself in one line: `opcase gen --case` makes the same file anywhere.
        lines.append(f"  CASE:  {r.descriptor}")
    return "\n".join(lines)


def judged(results: list[CaseResult]) -> int:
    """How many cases have a verdict that says something about the backend: not a skipped case
    (never run) nor a mistrusted one (it passed a case that cannot tell a right kernel from a wrong one)."""
    return sum(r.status not in (SKIPPED, MISTRUSTED) for r in results)


def summary(results: list[CaseResult]) -> dict:
    """Counts per status and per kernel/suite; ``ok``: at least one case judged and none fails."""
    counts = Counter(r.status for r in results)
    per_group: dict = {}
    for r in results:
        group = per_group.setdefault(f"{r.op or '?'}/{r.suite or '?'}", Counter())
        group[r.status] += 1
    n_judged = judged(results)
    return {"total": len(results), "counts": {s: counts.get(s, 0) for s in STATUSES},
            "groups": {k: dict(v) for k, v in sorted(per_group.items())}, "judged": n_judged,
            "ok": n_judged > 0 and not any(fails(r) for r in results)}


def summary_text(results: list[CaseResult], gate: dict | None = None) -> str:
    """Per kernel and suite counts, the gate's verdicts, and a last line with the totals."""
    s = summary(results)
    lines = []
    if len(s["groups"]) > 1:
        for group, c in s["groups"].items():
            lines.append(f"  {group}: " + ", ".join(f"{n} {st}" for st, n in sorted(c.items(), key=_status_order)))
    if gate:
        lines.append(f"compared with baseline {gate['baseline']}: {gate['regression']} regressed, "
                     f"{gate['slowdown']} slower, {gate['improved']} improved, {gate['faster']} faster, "
                     f"{gate['new']} new, {gate['not_run']} not run here"
                     + ("" if gate["ok"] else "  -> GATE FAILS"
                        + ("" if gate.get("compared", 1) else ": the baseline shares no case with this run")))
    counts = ", ".join(f"{n} {status}" for status, n in s["counts"].items() if n)
    lines.append(f"{s['total']} cases: {counts or 'none'}")
    return "\n".join(lines)


def attention_lines(results: list[CaseResult], verbose: bool = False) -> list[str]:
    """pytest's "short test summary" of a run: each case that fails or is flagged (mistrusted),
    its line and the command that reruns it; one line each (short_report.short_line) when more
    than short_report.FULL_SHOWN cases fail and not ``verbose``."""
    from harness.reports.short_report import FULL_SHOWN, short_line   # it imports this module: at call time
    listed = [r for r in results if fails(r) or r.status == MISTRUSTED]
    if not verbose and sum(map(fails, listed)) > FULL_SHOWN:
        return [short_line(r, "FAIL" if fails(r) and r.status not in FAILING else "") for r in listed]
    lines = []
    for r in listed:
        lines.append(case_line(r))
        if r.repro:
            lines.append(f"  REPRO: {r.repro}")
    return lines


def _status_order(item) -> int:
    return STATUSES.index(item[0]) if item[0] in STATUSES else len(STATUSES)


def _json_safe(value):
    if isinstance(value, float):
        return json_float(value)
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


# What a results file says until the run that writes it has finished.
INCOMPLETE_REASON = ("the run did not finish: it is still going, or it was stopped or killed before "
                     "writing its results")


def to_json(results: list[CaseResult], backend: str, gate: dict | None = None, run: dict | None = None) -> str:
    """The results document of a finished run ("complete": true)."""
    doc = {"complete": True, "backend": backend, "summary": summary(results), "cases": [r.to_json() for r in results]}
    if gate and not gate["ok"]:
        doc["summary"]["ok"] = False
    if run:
        doc["run"] = run
    if gate:
        doc["gate"] = gate
    return json.dumps(_json_safe(doc), indent=1, sort_keys=False)


def incomplete_json(backend: str) -> str:
    """The results document a run starts with: no cases, not ok, and "complete": false."""
    return json.dumps({"complete": False, "reason": INCOMPLETE_REASON, "backend": backend,
                       "summary": summary([]) | {"ok": False}, "cases": []}, indent=1)


class Progress:
    """What a run prints as cases finish.

    On a terminal: failing and flagged cases, and one line, rewritten in place, with the count so
    far.  Elsewhere (CI logs, pipes): one plain line per case, and a Heartbeat line per kernel
    done and at least every HEARTBEAT_S seconds.  Either way the first short_report.FULL_SHOWN
    failing cases are reported in full and later ones in a line each (all in full with
    ``verbose``); skipped cases are counted per kernel and reason when the run ends (each listed
    with ``verbose``); with ``quiet`` nothing is shown but the summary that follows.
    """

    def __init__(self, total: int, interactive: bool, verbose: bool = False, quiet: bool = False,
                 per_kernel: Counter | None = None, weights: dict | None = None, every: float | None = None):
        self.total, self.interactive, self.verbose, self.quiet = total, interactive, verbose, quiet
        self.done = 0
        self.counts: Counter = Counter()
        self.line = StatusLine()
        self.skips: list[CaseResult] = []   # skipped cases, shown counted per kernel and reason at the end
        self.failing_shown = 0               # failing cases shown so far (the first few in full)
        # harness.reports.progress's heartbeat, by each case's planned work (``weights``: path ->
        # weight_of its bytes) where given; on a terminal it gives the status line its share and ETA.
        self.weights = weights or {}
        self.heartbeat = Heartbeat("ran", per_kernel or Counter(), every=every,
                                   total_weight=sum(self.weights.values()) if self.weights else None)

    def case(self, r: CaseResult) -> None:
        self.done += 1
        self.counts["failing" if fails(r) else r.status] += 1
        if self.interactive:
            self.line.clear()
        if self.quiet:   # the summary alone
            pass
        elif r.status == SKIPPED and not self.verbose and not fails(r):
            self.skips.append(r)   # counted per kernel and reason at the end
        elif fails(r) or (self.verbose and r.status != PASSED):
            self._failing(r)
        elif self.verbose or r.status != PASSED or not self.interactive:
            click.echo(case_line(r))
        kernel, weight = case_key(r.path).split("/")[0], self.weights.get(r.path, 0.0) if self.weights else 1.0
        if self.interactive:
            self.heartbeat.advance(kernel, weight)
            self.line.show(f"[{self.done}/{self.total}] {self._counts()}; "
                           f"{self.heartbeat.work_text(self.heartbeat.clock())}  {r.key}")
        elif self.heartbeat.total and not self.quiet:
            self.heartbeat.tick(kernel, self._counts(), weight)

    def _failing(self, r: CaseResult) -> None:
        """The full report for the first few failing cases (each with -v), then a line per case."""
        from harness.reports.short_report import FULL_SHOWN, SHORT_NOTE, short_line   # it imports this module: at call time
        if not fails(r) or self.verbose or self.failing_shown < FULL_SHOWN:
            click.echo(case_line(r))
            click.echo(failure_details(r))
        else:
            if self.failing_shown == FULL_SHOWN:
                click.echo(SHORT_NOTE)
            click.echo(short_line(r, "FAIL" if r.status not in FAILING else ""))
        self.failing_shown += fails(r)

    def close(self) -> None:
        self.line.clear()
        self._flush_skips()

    def _counts(self) -> str:
        return ", ".join(f"{n} {s}" for s, n in sorted(self.counts.items()))

    def _flush_skips(self) -> None:
        from harness.reports.short_report import skip_groups   # it imports this module: at call time
        for line in skip_groups(self.skips):
            click.echo(line)
        self.skips = []
