"""JUnit XML of a run, in the shape Jenkins, GitLab, GitHub Actions reporters and Azure read.

One <testsuite> per kernel and suite, one <testcase> per case with classname "OP.SUITE" (so CI
views group by kernel, then suite) and name the case's name.  How a status maps:

  failed, wrongly-accepted, wrongly-rejected  <failure type=STATUS>, the mismatch report as text
  error                                       <error>, the backend's message and output tail
  skipped                                     <skipped>
  mistrusted                                  <skipped message="mistrusted: ...">: flagged, not failed
  a gate regression or slowdown               <failure type=regression|slowdown>

A testcase's `time` is the case's wall time (loading, calling, judging, repeats), a <testsuite>'s
the sum of its cases', <testsuites>' the run's wall time when given (cases in parallel overlap); the kernel's
own time is the property kernel_seconds.  Each case's properties: its status, every metric with
its threshold and the threshold's provenance, timing and efficiency when measured, the gate
verdict, REPRO, and the case's one-line descriptor (`opcase gen --case` makes the case from it).
They sit in their <testsuite>'s <properties>, named CASE/PROPERTY (CASE the testcase's name):
the published JUnit schemas (Jenkins' junit-10.xsd, Ant's) allow properties only there, and
strict validators reject them inside a <testcase>.
"""
from __future__ import annotations

import os
import re
import xml.etree.ElementTree as ET
from collections import defaultdict

from harness.judge.gate import GATE_FAILING
from harness.reports.report import INCOMPLETE_REASON, case_line, failure_details
from gen.core.verdict import ERROR, FAILING, MISTRUSTED, SKIPPED, CaseResult

# XML 1.0 cannot hold most control characters, which backend messages sometimes do.
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _clean(text) -> str:
    return _NOT_XML.sub("?", str(text))


def _value(value) -> str:
    if isinstance(value, float):
        return repr(value)
    return _clean("" if value is None else value)


def _properties(r: CaseResult, backend: str) -> list[tuple[str, str]]:
    props = [("status", r.status), ("backend", backend), ("path", os.path.abspath(r.path) if r.path else r.path), ("dtype", r.dtype),
             ("kernel_seconds", _value(float(r.seconds)))]
    for output, verdicts in r.thresholds.items():
        for v in verdicts:
            name = f"{output}.{v['metric']}"
            props += [(name, _value(v["actual"])), (f"{name}.threshold", _value(v["value"])),
                      (f"{name}.passed", str(bool(v["passed"])).lower()),
                      (f"{name}.provenance", _value(v.get("provenance", "")))]
        m = r.metrics.get(output, {})
        if m:
            props.append((f"{output}.nan_inf_mismatch", _value(m.get("nan_inf_mismatch", 0))))
    if r.timing:
        props += [(f"timing.{k}", _value(v)) for k, v in r.timing.items()]
    if r.efficiency:
        props += [(f"efficiency.{k}", _value(v)) for k, v in r.efficiency.items() if v not in (None, "")]
    if r.gate:
        props += [("gate", r.gate), ("gate.message", r.gate_message)]
    if r.repro:
        props.append(("repro", r.repro))
    if r.descriptor:
        props.append(("descriptor", r.descriptor))
    return props


def _testcase(parent: ET.Element, props: ET.Element, r: CaseResult, backend: str) -> str:
    """Append r's <testcase> to ``parent`` and its properties to ``props`` (its suite's); return
    which count it adds to ('failures', 'errors', 'skipped' or '')."""
    name = _clean(r.name or r.path)
    case = ET.SubElement(parent, "testcase", classname=_clean(f"{r.op or 'unreadable'}.{r.suite or 'case'}"),
                         name=name, time=f"{r.wall_seconds:.6f}")
    for key, value in _properties(r, backend):
        ET.SubElement(props, "property", name=f"{name}/{_clean(key)}", value=_clean(value))
    first_line = (r.message.splitlines() or [""])[0]
    text = _clean(case_line(r) + "\n" + failure_details(r))
    if r.status == ERROR:
        ET.SubElement(case, "error", message=_clean(first_line), type=r.status).text = text
        return "errors"
    if r.status in FAILING:
        ET.SubElement(case, "failure", message=_clean(first_line), type=r.status).text = text
        return "failures"
    if r.gate in GATE_FAILING:
        ET.SubElement(case, "failure", message=_clean(f"{r.gate}: {r.gate_message}"), type=r.gate).text = text
        return "failures"
    if r.status == SKIPPED:
        ET.SubElement(case, "skipped", message=_clean(first_line))
        return "skipped"
    if r.status == MISTRUSTED:
        ET.SubElement(case, "skipped", message=_clean(f"mistrusted: {first_line}"))
        return "skipped"
    return ""


def incomplete_junit_xml(backend: str) -> str:
    """The JUnit XML a run starts with: one errored testcase saying that the run did not finish."""
    root = ET.Element("testsuites", name=_clean(f"opcase run --backend {backend}"),
                      tests="1", failures="0", errors="1", time="0")
    suite = ET.SubElement(root, "testsuite", name="opcase.run", tests="1", failures="0", errors="1",
                          skipped="0", time="0")
    case = ET.SubElement(suite, "testcase", classname="opcase.run", name="run did not finish", time="0")
    ET.SubElement(case, "error", message=INCOMPLETE_REASON, type="incomplete").text = INCOMPLETE_REASON
    return _document(root)


def junit_xml(results: list[CaseResult], backend: str, wall_seconds: float | None = None) -> str:
    """The document of a finished run.  ``wall_seconds``: the run's own wall time, the <testsuites>
    time (with --jobs the cases overlap, and the sum of their times exceeds the run's)."""
    root = ET.Element("testsuites", name=_clean(f"opcase run --backend {backend}"))
    groups: dict[tuple, list[CaseResult]] = defaultdict(list)
    for r in results:
        groups[(r.op or "unreadable", r.suite or "case")].append(r)
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    total_time = 0.0
    for (op, suite), members in sorted(groups.items()):
        suite_el = ET.SubElement(root, "testsuite", name=_clean(f"{op}.{suite}"))
        props = ET.SubElement(suite_el, "properties")
        counts = {"tests": len(members), "failures": 0, "errors": 0, "skipped": 0}
        for r in members:
            kind = _testcase(suite_el, props, r, backend)
            if kind:
                counts[kind] += 1
        seconds = sum(r.wall_seconds for r in members)
        suite_el.attrib.update({k: str(v) for k, v in counts.items()}, time=f"{seconds:.6f}")
        for k in totals:
            totals[k] += counts[k]
        total_time += seconds
    # <testsuites> has no skipped attribute in the schemas: the skipped count is per <testsuite>.
    root.attrib.update({k: str(v) for k, v in totals.items() if k != "skipped"}, time=f"{total_time if wall_seconds is None else wall_seconds:.6f}")
    return _document(root)


def _document(root: ET.Element) -> str:
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
