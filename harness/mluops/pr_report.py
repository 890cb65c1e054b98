"""`opcase run --report mluops-pr FILE`: the "3. Test Report" part of an mlu-ops pull request,
filled from a run's results, in Markdown a contributor pastes into the PR.

It follows the headings of mlu-ops' pull-request template (.github/pull_request_template.md in
Cambricon/mlu-ops) so that each part lands where reviewers look for it; the text under them is
opcase's.  Everything comes from the run's CaseResults, as the JSON and JUnit writers have them:
the thresholds each case carried (the accuracy standard that applied), each output's diff1..diff4
against them, the invalid cases and what the backend answered, the NaN/Inf and zero-element cases,
and the kernel times of a --repeat run.  Only the timed cases' files are read again, for their
tensors' shapes.  What a run cannot observe (the hardware, the job types) is left for the
contributor to fill in and says so.  A box is ticked only where cases of that kind ran and every
one passed.
"""
from __future__ import annotations

from collections import Counter, defaultdict

from gen.core.casefile import read_envelope
from gen.core.verdict import FAILING, WRONGLY_ACCEPTED, CaseResult
from harness.reports.report import INCOMPLETE_REASON, fails, judged

KIND = "mluops-pr"
HEADINGS = ("## 3. Test Report", "### 3.1 Modification Details", "#### 3.1.1 Accuracy Acceptance Standard",
            "#### 3.1.2 Operator Scheme checklist", "### 3.2 Accuracy Test", "#### 3.2.1 Accuracy Test",
            "#### 3.2.2 Parameter Check", "### 3.3 Performance Test", "### 3.4 Summary Analysis")
_METRICS = ("diff1", "diff2", "diff3", "diff4")
_MESSAGE_CHARS = 300     # a backend's message is quoted, cut to this many characters


def _line(text) -> str:
    """One line of untrusted text (a backend's message), safe in a table cell or a code block."""
    first = (str(text).strip().splitlines() or [""])[0]
    if len(first) > _MESSAGE_CHARS:
        first = first[:_MESSAGE_CHARS] + " ..."
    return first.replace("`", "'").replace("|", "/")


def _num(value) -> str:
    return "-" if value is None else f"{value:.3g}"


def _box(done: bool) -> str:
    return "[x]" if done else "[ ]"


def _is_parameter_check(r: CaseResult) -> bool:
    """An invalid case: one the spec makes to break a parameter check (its suite, or a hunt case
    whose descriptor names the check it violates)."""
    return r.suite == "invalid" or "violate=" in r.descriptor or r.status == WRONGLY_ACCEPTED


def _judged(r: CaseResult) -> bool:
    return bool(r.metrics)


def _nonfinite(r: CaseResult) -> bool:
    return any((m.get("nan_golden") or 0) + (m.get("inf_golden") or 0) > 0 for m in r.metrics.values())


def _zero_element(r: CaseResult) -> bool:
    return any(m.get("n") == 0 and not (m.get("nan_golden") or m.get("inf_golden")) for m in r.metrics.values())


# --------------------------------------------------------------------------- 3.1 accuracy standard

def _standard_lines(results: list[CaseResult]) -> list[str]:
    """The thresholds that applied, per kernel: each distinct rule once, with the dtypes it held for."""
    rules: dict[str, dict[tuple, set]] = defaultdict(lambda: defaultdict(set))
    for r in results:
        for verdicts in r.thresholds.values():
            for t in verdicts:
                rules[r.op][_rule(t)].add(r.dtype or "-")
    if not rules:
        return ["No case of this run was judged against a threshold: no accuracy standard applied."]
    lines = ["The thresholds the cases carried (opcase sets them when it makes a case; the design doc's "
             "1.5 names the metrics):", ""]
    for op in sorted(rules):
        lines.append(f"- `{op}`")
        for kind in ("static", "dynamic", "exact"):
            entries = sorted((rule, sorted(dtypes)) for rule, dtypes in rules[op].items() if rule[0] == kind)
            if entries:
                lines.append(f"  - {kind} threshold" if kind != "exact" else "  - exact (integer outputs)")
                lines += [f"    - [x] {_rule_text(rule)} ({', '.join(dtypes)})" for rule, dtypes in entries]
    return lines


def _rule(t: dict) -> tuple:
    metric = t.get("metric", "")
    if metric == "exact":
        return ("exact", metric)
    if t.get("rate") is not None and t.get("baseline"):
        return ("dynamic", metric, t["baseline"], t["rate"], t.get("floor"), t.get("cap"))
    return ("static", metric, t.get("value"))


def _rule_text(rule: tuple) -> str:
    if rule[0] == "exact":
        return "every element equals the golden (differing elements <= 0)"
    if rule[0] == "dynamic":
        _, metric, baseline, rate, floor, cap = rule
        cap_text = f", at most {_num(cap)}" if cap else ""
        return f"{metric} <= max({baseline} {metric} x {rate:g}, {_num(floor)}){cap_text}"
    _, metric, value = rule
    return f"{metric} <= {_num(value)}"


# --------------------------------------------------------------------------- 3.2.1 accuracy test

def _checklist(results: list[CaseResult]) -> list[str]:
    judged = [r for r in results if _judged(r)]

    def item(label: str, cases: list[CaseResult], detail: str = "") -> str:
        failing = sum(r.status in FAILING for r in cases)
        if not cases:
            return f"- [ ] {label}: no such case in this run"
        state = f"{len(cases)} case(s), all passed" if not failing else f"{failing} of {len(cases)} case(s) failing"
        return f"- {_box(not failing)} {label}: {state}{detail}"

    dtypes = sorted({r.dtype for r in judged if r.dtype})
    layouts = sorted({layout for r in judged for layout in r.layouts.values()})
    sizes = [r for r in judged if r.suite in ("random", "stress", "network")]
    repeated = [r for r in results if r.determinism]
    return [
        "Ticked only where cases of that kind ran and every one passed:", "",
        item("Data type test", judged, f" ({', '.join(dtypes)})" if dtypes else ""),
        item("Layout test", judged, f" ({', '.join(layouts)})" if layouts else ""),
        item("Different size/integer remainder end segment/alignment misalignment test", sizes,
             " (the random, stress and network suites)"),
        item("Zero dimensional tensor test/zero element test", [r for r in judged if _zero_element(r)]),
        item("stability test", repeated, " (repeated calls compared, --bitwise)"),
        item("Nan/INF tests", [r for r in judged if _nonfinite(r)]),
        "- [ ] Multiple platform test, gen_case, memory leak, code coverage and I/O efficiency checks: "
        "not observed by this run",
    ]


def _case_table(results: list[CaseResult]) -> list[str]:
    """Per judged case and output: each metric's value against its threshold."""
    rows = []
    for r in results:
        for output in r.metrics:
            limits = {t["metric"]: t for t in r.thresholds.get(output, [])}
            cells = [_metric_cell(r.metrics[output].get(m), limits.get(m)) for m in _METRICS]
            rows.append(f"| {_line(r.key)} | {r.dtype or '-'} | {_line(output)} | " + " | ".join(cells)
                        + f" | {r.status} |")
    if not rows:
        return ["No case compared outputs with goldens."]
    header = "| case | dtype | output | " + " | ".join(_METRICS) + " | status |"
    return ["Each metric as measured, against its threshold where the case judges it (value / threshold, "
            "and whether it held):", "", header, "|" + " --- |" * (len(_METRICS) + 4), *rows]


def _metric_cell(value, threshold: dict | None) -> str:
    if threshold is None:
        return _num(value)
    held = "ok" if threshold.get("passed") else "OVER"
    return f"{_num(value)} / {_num(threshold.get('value'))} {held}"


# --------------------------------------------------------------------------- 3.2.2 parameter check

def _parameter_check(results: list[CaseResult]) -> list[str]:
    checks = [r for r in results if _is_parameter_check(r)]
    accepted = [r for r in checks if r.status == WRONGLY_ACCEPTED]
    point1 = [f"{r.key}: {r.status}: {_line(r.message)}" for r in checks] or \
        ["no parameter-check case in this run"]
    if not checks:
        point2 = ["no illegal call was made"]
    elif accepted:
        point2 = [f"{len(accepted)} of {len(checks)} illegal call(s) accepted:"] + \
            [f"{r.key}: {_line(r.message)}" for r in accepted]
    else:
        point2 = [f"none: each of the {len(checks)} illegal call(s) was refused"]
    refused_right = bool(checks) and not any(r.status in FAILING for r in checks)
    return ["Test Point-1: the parameter checks of the design doc, one invalid case each, and what the "
            f"backend returned.  Acceptance: the call is refused with the status the check names "
            f"({'met' if refused_right else 'not met'}).",
            "```text", *point1, "```", "",
            "Test Point-2: whether an illegal parameter gets through.  Acceptance: none does "
            f"({'met' if checks and not accepted else 'not met'}).",
            "```text", *point2, "```"]


# --------------------------------------------------------------------------- 3.3 performance

def _performance(results: list[CaseResult]) -> list[str]:
    timed = [r for r in results if r.timing]
    if not timed:
        return ["No case was timed: run with `--repeat N` (and a backend that reports its own kernel time) "
                "to fill this block."]
    lines = ["```text"]
    for i, r in enumerate(timed):
        t = r.timing
        label, source = (("Kernel time (backend) ", "as the backend reported it") if t.get("source") == "backend"
                         else ("Call time (opcase)    ", "measured around the call: not the kernel's own time"))
        lines += [f"----------- case{i} -----------", f"[Op name               ]: {r.op}",
                  f"[Case                  ]: {_line(r.key)}", f"[Shape                 ]: {_shapes(r)}",
                  f"[Data type             ]: {r.dtype or '-'}",
                  f"[{label}]: {t['median_us']:.3f} (us), median of {t['repeat']}, "
                  f"spread {t['spread_pct']:.1f} %, {source}"]
        if r.efficiency:
            lines += [f"[IO efficiency         ]: {_num(r.efficiency.get('io_efficiency'))}",
                      f"[Compute efficiency    ]: {_num(r.efficiency.get('compute_efficiency'))}"]
        lines.append("")
    return lines + ["```"]


def _shapes(r: CaseResult) -> str:
    """The tensors' shapes, from the case file's envelope (its tensors' data is not read)."""
    try:
        msg = read_envelope(r.path)
    except Exception as exc:   # the file moved or changed since the run: the report still gets written
        return f"unknown ({type(exc).__name__})"
    return ", ".join(f"{t.name}.shape=[{','.join(str(d) for d in t.shape)}]"
                     for t in list(msg.inputs) + list(msg.outputs) if not t.absent)


# --------------------------------------------------------------------------- the report

def _summary(results: list[CaseResult], backend: str) -> list[str]:
    counts = Counter(r.status for r in results)
    failing = [r for r in results if fails(r)]
    verdict = ("Nothing was judged: this is not a pass." if not judged(results) else
               f"{len(failing)} case(s) failing." if failing else "Every judged case passed.")
    lines = [f"Backend `{_line(backend)}`: {len(results)} case(s), "
             + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) + f".  {verdict}"]
    if failing:
        lines += ["", "Failing cases:", ""] + [f"- {_line(r.key)}: {r.status}: {_line(r.message)}" for r in failing]
    return lines


def pr_report(results: list[CaseResult], backend: str, run: dict | None = None) -> str:
    """The report of a finished run."""
    run = run or {}
    intro = [f"Made by `opcase run` with backend `{_line(backend)}` ({len(results)} case(s)"
             + (f", {run['not_run']} not run" if run.get("not_run") else "") + ")."]
    parts = [
        (HEADINGS[0], intro), (HEADINGS[1], []), (HEADINGS[2], _standard_lines(results)),
        (HEADINGS[3], ["The hardware and job types are the implementation's, which a run does not observe: "
                       "fill them in.", "", "- Supported hardware: ", "- Job types: "]),
        (HEADINGS[4], []), (HEADINGS[5], _checklist(results) + [""] + _case_table(results)),
        (HEADINGS[6], _parameter_check(results)), (HEADINGS[7], _performance(results)),
        (HEADINGS[8], _summary(results, backend)),
    ]
    return "\n".join(_section(heading, body) for heading, body in parts).rstrip("\n") + "\n"


def _section(heading: str, body: list[str]) -> str:
    return heading + "\n\n" + ("\n".join(body) + "\n" if body else "")


def incomplete_pr_report(backend: str) -> str:
    """What the report file says until the run has finished: no results, and why."""
    return f"{HEADINGS[0]}\n\nNo results for backend `{_line(backend)}`: {INCOMPLETE_REASON}.\n"
