"""How the reports write numbers, positions and a verdict's words: shared by the case lines, the
short failure lines and the mismatch reports."""
from __future__ import annotations

from harness.reports.error_map import axis_letters


LABEL = {"passed": "PASS", "failed": "FAIL", "wrongly-accepted": "FAIL", "wrongly-rejected": "FAIL",
          "error": "ERROR", "skipped": "SKIP", "mistrusted": "WARN", "nondeterministic": "FAIL"}


def format_number(value) -> str:
    """A metric, threshold or value as reports show it: 3 significant digits, "-" for none."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)


def label_of(status: str) -> str:
    """The word a case line starts with for ``status`` (PASS, FAIL, SKIP, ...)."""
    return LABEL.get(status, status.upper())


def verdict_text(label: str, v: dict, short: bool = False, spaced: bool = False) -> str:
    """``diff1=0.0625>8.28e-07``: a metric against its threshold; a metric judged otherwise (diff4's
    rule, metrics.judgement) shows how instead, so that no line says a value is within a bound it is over."""
    value = format_number(v["actual"])
    note = v.get("note", "")
    equals, below, over = (" = ", " <= ", " > ") if spaced else ("=", "<=", ">")
    if not note:
        return f"{label}{equals}{value}{below if v['passed'] else over}{format_number(v['value'])}"
    if short:
        note = "not judged" if note.startswith("not judged") else "two-sided" if v["passed"] else "one-sided"
    return f"{label}{equals}{value} ({note})"


def coordinates(output: str, index, layout: str) -> str:
    """``y[n=0, h=3, w=2, c=17]`` when the layout names each axis, else ``y[0, 3, 2, 17]``."""
    index = list(index)
    letters = axis_letters(layout, len(index))
    if letters:
        return f"{output}[{', '.join(f'{axis.lower()}={i}' for axis, i in zip(letters, index))}]"
    return f"{output}[{', '.join(map(str, index))}]"
