"""A run as one self-contained HTML file (`opcase run --html FILE`): nothing to fetch to view it.

Per kernel and suite: counts by status and the worst headroom (a metric over its threshold; over
1 fails).  Per failing case: its message, descriptor and REPRO line; per failing output, each
metric against its threshold and where the threshold came from, a heat-map of where the error
sits (harness.reports.error_map), the channel profile, a histogram of relative errors, and the worst
elements at their coordinates.  With --repeat, each kernel's call times.

The plots are inline SVG written here: a few rectangles and lines need no plotting library (the
runtime stays click, numpy, protobuf, pyyaml), the file holds no script or font from elsewhere,
and a browser draws it as is.  A few lines of script only count the drawn plots into the
body's data-plots-rendered attribute, which the tests read from a headless browser.
"""
from __future__ import annotations

import datetime
import html
import math

from harness.reports.report import (INCOMPLETE_REASON, WORST_SHOWN, coordinates, fails, format_number, relative_text, summary,
                            summary_text, threshold_source)
from gen.core.verdict import FAILED, STATUSES, CaseResult

# Failing cases shown in full (their plots); the rest are listed with their REPRO lines, so that a
from gen.core.verdict import output_fails
# run where everything fails still makes a report a browser opens quickly.
DETAILED_FAILURES = 40
# Cases per kernel in a timing plot.
TIMED_SHOWN = 200
# A sequential palette (light: no error, dark: most), interpolated linearly.
_PALETTE = [(255, 255, 204), (254, 217, 118), (253, 141, 60), (227, 26, 28), (128, 0, 38)]

_STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:1400px}
table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}
th{background:#f3f3f3}td.l,th.l{text-align:left}.bad{color:#b00020;font-weight:600}.ok{color:#1b5e20}
pre,code{background:#f6f6f6;padding:2px 4px;white-space:pre-wrap;word-break:break-all}
section.case{border-top:2px solid #b00020;margin-top:24px}.plots{display:flex;flex-wrap:wrap;gap:24px;align-items:flex-start}
figure{margin:0}figcaption{font-size:12px;color:#555;max-width:360px}svg text{font:11px sans-serif}
"""

_SCRIPT = """
window.addEventListener('load', function () {
  var plots = Array.prototype.filter.call(document.querySelectorAll('svg.plot'),
        function (p) { return !p.closest('details:not([open])'); }), drawn = 0, clipped = 0, overlapping = 0;
  plots.forEach(function (p) { var b = p.getBoundingClientRect();
    if (b.width > 0 && b.height > 0 && p.querySelector('rect,line,circle')) drawn++;
    var boxes = Array.prototype.map.call(p.querySelectorAll('text'), function (t) { return t.getBBox(); });
    var w = p.width.baseVal.value, h = p.height.baseVal.value;
    boxes.forEach(function (a, i) {
      if (a.x < -0.5 || a.y < -0.5 || a.x + a.width > w + 0.5 || a.y + a.height > h + 0.5) clipped++;
      for (var j = i + 1; j < boxes.length; j++) { var c = boxes[j];
        if (a.x < c.x + c.width - 0.5 && c.x < a.x + a.width - 0.5 && a.y < c.y + c.height - 0.5 && c.y < a.y + a.height - 0.5)
          overlapping++; } }); });
  document.body.setAttribute('data-plots-total', plots.length);
  document.body.setAttribute('data-plots-rendered', drawn);
  document.body.setAttribute('data-labels-clipped', clipped);
  document.body.setAttribute('data-labels-overlapping', overlapping);
  document.body.setAttribute('data-page-height', document.documentElement.scrollHeight);
});
"""
# Width of a label in the plots' 11px sans-serif, generously (digits and most letters are narrower).
_CHAR_PX = 7.0


def _text_px(text: str) -> float:
    return _CHAR_PX * len(text)


def _e(value) -> str:
    return html.escape(str(value), quote=True)


def _num(value) -> str:
    return _e(format_number(value))


def _color(fraction: float) -> str:
    fraction = min(max(fraction, 0.0), 1.0) * (len(_PALETTE) - 1)
    i = min(int(fraction), len(_PALETTE) - 2)
    t = fraction - i
    rgb = (round(a + (b - a) * t) for a, b in zip(_PALETTE[i], _PALETTE[i + 1]))
    return "#%02x%02x%02x" % tuple(rgb)


def headroom(r: CaseResult):
    """(metric / threshold, 'output.metric') of the case's tightest threshold, or None without any."""
    worst = None
    for output, verdicts in r.thresholds.items():
        for v in verdicts:
            actual, limit = v.get("actual"), v.get("value")
            if not isinstance(actual, (int, float)) or not isinstance(limit, (int, float)):
                continue
            if math.isnan(actual):
                ratio = math.inf
            elif limit > 0:
                ratio = actual / limit
            else:
                ratio = 0.0 if actual <= 0 else math.inf
            if worst is None or ratio > worst[0]:
                worst = (ratio, f"{output}.{v['metric']}")
    return worst


# --------------------------------------------------------------------------- plots

def heat_map_svg(m: dict, output: str) -> str:
    """|error| summed over the other axes, per (row, column) cell; NaN/Inf mismatches outlined."""
    heat = m["heat"]
    n_rows, n_cols = len(heat), len(heat[0])
    cell = max(3, min(28, 384 // max(n_rows, n_cols)))
    rows, cols = m["rows"], m["cols"]
    peak = max(max(row) for row in heat)
    # Room for the row labels on the left and the colour bar's labels on the right, so none is clipped.
    left = 8 + max(_text_px(f'{rows["axis"]} 0'), _text_px(str(rows["size"] - 1)))
    top = 14
    right = 12 + 12 + 4 + max(_text_px(f"{peak:.3g}"), _text_px("0")) + 4
    map_w, map_h = n_cols * cell, n_rows * cell
    # The colour bar is at least tall enough for its two labels, however few rows the map has.
    bar_h = max(map_h, 30)
    width, height = left + map_w + right, top + max(map_h, bar_h) + 34
    parts = [f'<svg class="plot heat-map" data-output="{_e(output)}" xmlns="http://www.w3.org/2000/svg" '
             f'width="{width:.0f}" height="{height}">',
             f'<rect x="{left}" y="{top}" width="{map_w}" height="{map_h}" fill="{_color(0)}" stroke="#999"/>']
    for r, row in enumerate(heat):
        for c, value in enumerate(row):
            if value > 0:
                parts.append(f'<rect class="cell" data-row="{r}" data-col="{c}" x="{left + c * cell}" '
                             f'y="{top + r * cell}" width="{cell}" height="{cell}" fill="{_color(value / peak)}">'
                             f'<title>{_e(m["rows"]["axis"])} {r * m["rows"]["bin"]}, {_e(m["cols"]["axis"])} '
                             f'{c * m["cols"]["bin"]}: {value:.3g}</title></rect>')
    for r, c, count in m["nan_inf_cells"]:
        parts.append(f'<rect class="nan-inf" x="{left + c * cell + 1}" y="{top + r * cell + 1}" width="{cell - 2}" '
                     f'height="{cell - 2}" fill="none" stroke="#1565c0" stroke-width="2"><title>{count} NaN/Inf '
                     f'mismatches</title></rect>')
    below = top + max(map_h, bar_h)
    first_col, last_col = f'{cols["axis"]} 0', str(cols["size"] - 1)
    parts.append(f'<text x="{left}" y="{below + 14}">{_e(first_col)}</text>')
    # An axis's last index is labelled where it fits beside the first.
    if cols["size"] > 1 and map_w >= _text_px(first_col) + _text_px(last_col) + 6:
        parts.append(f'<text x="{left + map_w}" y="{below + 14}" text-anchor="end">{last_col}</text>')
    parts.append(f'<text x="{left + map_w / 2}" y="{below + 28}" text-anchor="middle">{_e(cols["axis"])} →</text>'
                 f'<text x="{left - 4}" y="{top + 10}" text-anchor="end">{_e(rows["axis"])} 0</text>')
    if rows["size"] > 1 and map_h >= 26:
        parts.append(f'<text x="{left - 4}" y="{top + map_h}" text-anchor="end">{rows["size"] - 1}</text>')
    # The colour bar: 0 at the bottom, the largest cell at the top.
    bar_x = left + map_w + 12
    for i in range(20):
        parts.append(f'<rect x="{bar_x}" y="{top + bar_h * (19 - i) / 20:.1f}" width="12" height="{bar_h / 20 + 0.5:.1f}" '
                     f'fill="{_color(i / 19)}"/>')
    parts.append(f'<text x="{bar_x + 16}" y="{top + 10}">{peak:.3g}</text>'
                 f'<text x="{bar_x + 16}" y="{top + bar_h}">0</text></svg>')
    return "".join(parts)


def _bars_svg(kind: str, values: list, labels: list[str], title: str, color: str, log: bool = False) -> str:
    """A bar chart: one bar per value, labels under as many bars as they fit (always the first and last)."""
    peak_text = _num(max(values) if values else 0)
    width, height, top, bottom = 360, 150, 12, 30
    left = max(44, 8 + _text_px(peak_text))
    step = (width - left - 8) / max(len(values), 1)
    scaled = [math.log10(1 + v) if log else v for v in values]
    peak = max(scaled) if scaled and max(scaled) > 0 else 1.0
    plot_h = height - top - bottom
    parts = [f'<svg class="plot {kind}" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}">',
             f'<line x1="{left}" y1="{top + plot_h}" x2="{width - 8}" y2="{top + plot_h}" stroke="#999"/>']
    for i, (value, s) in enumerate(zip(values, scaled)):
        h = plot_h * s / peak
        parts.append(f'<rect x="{left + i * step:.1f}" y="{top + plot_h - h:.1f}" width="{max(step - 1, 1):.1f}" '
                     f'height="{h:.1f}" fill="{color}"><title>{_e(labels[i])}: {_num(value)}</title></rect>')
    for i, x in _label_positions(labels, left, step, width):
        parts.append(f'<text x="{x:.1f}" y="{height - 16}" text-anchor="middle">{_e(labels[i])}</text>')
    parts.append(f'<text x="{left - 4}" y="{top + 10}" text-anchor="end">{peak_text}</text>'
                 f'<text x="{width / 2}" y="{height - 2}" text-anchor="middle">{_e(title)}</text></svg>')
    return "".join(parts)


def _label_positions(labels: list[str], left: float, step: float, width: float) -> list[tuple[int, float]]:
    """(bar, x) of the labels to draw under the bars: the first, the last, and between them every
    few bars, as many as fit without touching each other or the plot's edges."""
    if not labels:
        return []

    def placed(i):
        half = _text_px(labels[i]) / 2
        # Centred under its bar, but moved in from the plot's edges rather than cut off.
        return min(max(left + (i + 0.5) * step, half + 2), width - half - 2), half

    chosen = [0] + ([len(labels) - 1] if len(labels) > 1 else [])
    widest = max(_text_px(label) for label in labels)
    every = max(1, math.ceil((widest + 8) / step))
    for i in range(every, len(labels) - 1, every):
        chosen.insert(-1, i)
    def right_edge(i):
        x, half = placed(i)
        return x + half

    shown = []
    for i in chosen:
        x, half = placed(i)
        if i == len(labels) - 1:
            # The last bar's label wins over those before it that it would touch.
            while shown and right_edge(shown[-1]) + 6 > x - half:
                shown.pop()
        elif shown and right_edge(shown[-1]) + 6 > x - half:
            continue
        shown.append(i)
    return [(i, placed(i)[0]) for i in shown]


def profile_svg(m: dict) -> str:
    p = m["profile"]
    labels = [f'{p["axis"]} {i * p["bin"]}' + (f'-{min((i + 1) * p["bin"], p["size"]) - 1}' if p["bin"] > 1 else "")
              for i in range(len(p["values"]))]
    return _bars_svg("profile", p["values"], labels, f'|error| summed per {p["axis"]} →', "#e31a1c")


def histogram_svg(m: dict) -> str:
    h = m["histogram"]
    low = h["lowest_decade"]
    labels = [f"1e{low + i}" for i in range(len(h["counts"]))]
    return _bars_svg("histogram", h["counts"], labels, "relative error (decade; bar height log-scaled)", "#fd8d3c",
                     log=True)


def timing_svg(op: str, timed: list[CaseResult]) -> str:
    """Each case's calls: a line from the fastest to the slowest, a dot at the median; log time axis."""
    timed = timed[:TIMED_SHOWN]
    lo = min(r.timing["min_us"] for r in timed)
    hi = max(r.timing["max_us"] for r in timed)
    lo, hi = math.log10(max(lo, 1e-3)), math.log10(max(hi, 1e-3))
    if hi - lo < 1e-9:
        lo, hi = lo - 0.5, hi + 0.5
    left, width, row = 300, 860, 12
    height = 20 + row * len(timed) + 24

    def x(us):
        return left + (width - left - 8) * (math.log10(max(us, 1e-3)) - lo) / (hi - lo)

    parts = [f'<svg class="plot timing" data-op="{_e(op)}" xmlns="http://www.w3.org/2000/svg" width="{width}" '
             f'height="{height}">']
    for i, r in enumerate(timed):
        y = 14 + i * row
        t = r.timing
        label = f"{r.suite}/{r.name}"
        label = label if len(label) <= 48 else label[:47] + "…"
        parts.append(f'<g><title>{_e(r.key)}: median {t["median_us"]:.1f} us, {t["min_us"]:.1f}-{t["max_us"]:.1f} us'
                     f'</title><text x="{left - 6}" y="{y + 4}" text-anchor="end">{_e(label)}</text><line x1="{x(t["min_us"]):.1f}" y1="{y}" x2="{x(t["max_us"]):.1f}" y2="{y}" '
                     f'stroke="#888"/><circle cx="{x(t["median_us"]):.1f}" cy="{y}" r="3" fill="#1565c0"/></g>')
    base = 14 + row * len(timed)
    parts.append(f'<text x="{left}" y="{base + 14}">{10 ** lo:.3g} us</text>'
                 f'<text x="{width - 8}" y="{base + 14}" text-anchor="end">{10 ** hi:.3g} us</text>'
                 f'<text x="{(left + width) / 2}" y="{base + 14}" text-anchor="middle">time per call (log scale): '
                 f'fastest to slowest, dot at the median</text></svg>')
    return "".join(parts)


# --------------------------------------------------------------------------- sections

def _summary_table(results: list[CaseResult]) -> str:
    groups = summary(results)["groups"]
    shown = [s for s in STATUSES if any(s in c for c in groups.values())]
    worst: dict[str, tuple] = {}
    for r in results:
        h = headroom(r)
        group = f"{r.op or '?'}/{r.suite or '?'}"
        if h is not None and (group not in worst or _worse(h, r, worst[group])):
            worst[group] = (*h, r.key, _wrong_elements(r, h[1]))
    rows = ["<table><tr><th class=l>kernel/suite</th>" + "".join(f"<th>{_e(s)}</th>" for s in shown)
            + "<th>worst headroom (metric / threshold)</th><th class=l>where</th></tr>"]
    for group, counts in groups.items():
        cells = "".join(f'<td class="bad">{counts[s]}</td>' if counts.get(s) and s not in ("passed", "skipped")
                        else f"<td>{counts.get(s, 0)}</td>" for s in shown)
        ratio, metric, key, wrong = worst.get(group, (None, "", "", None))
        mark = "" if ratio is None else ("bad" if ratio > 1 else "ok")
        shown_ratio = _num(ratio) if wrong is None else f"{wrong[0]} of {wrong[1]} elements wrong"
        rows.append(f'<tr><td class=l>{_e(group)}</td>{cells}<td class="{mark}">{_e(shown_ratio)}</td>'
                    f'<td class=l>{_e(metric)} {_e(key.split("/", 2)[-1])}</td></tr>')   # the row names op/suite
    return "".join(rows) + "</table>"


def _wrong_elements(r: CaseResult, where: str) -> tuple[int, int] | None:
    """(wrong, all) elements of an output over an exact-match threshold (0: any difference fails),
    whose headroom, a ratio to zero, says only 'inf'; None for any other threshold."""
    output, metric = where.rsplit(".", 1)
    limit = next((v["value"] for v in r.thresholds.get(output, []) if v["metric"] == metric), None)
    m = r.metrics.get(output, {})
    if limit != 0 or not m or not m.get("n_unequal", 0) + m.get("nan_inf_mismatch", 0):
        return None
    return m.get("n_unequal", 0) + m.get("nan_inf_mismatch", 0), m.get("n", 0) + m.get("nan_inf_mismatch", 0)


def _worse(h: tuple, r: CaseResult, current: tuple) -> bool:
    """Whether headroom h of case r is worse than the group's current worst; among exact-match
    failures (both infinite), more wrong elements is worse."""
    if h[0] != current[0]:
        return h[0] > current[0]
    wrong, other = _wrong_elements(r, h[1]), current[3]
    return wrong is not None and (other is None or wrong[0] > other[0])


def _timing_section(results: list[CaseResult]) -> str:
    by_op: dict[str, list[CaseResult]] = {}
    for r in results:
        if r.timing:
            by_op.setdefault(r.op or "?", []).append(r)
    if not by_op:
        return ""
    # Folded: a row per case makes them the longest part of a page; open one to read it.
    parts = ["<h2>Timing</h2>"]
    for op, timed in sorted(by_op.items()):
        more = f" (the first {TIMED_SHOWN} of {len(timed)})" if len(timed) > TIMED_SHOWN else ""
        medians = sorted(r.timing["median_us"] for r in timed)
        parts.append(f"<details><summary>{_e(op)}: {len(timed)} cases{more}, median call "
                     f"{medians[len(medians) // 2]:.1f} us</summary>"
                     f"<figure>{timing_svg(op, timed)}<figcaption>{_e(op)}: {len(timed)} cases{more}, "
                     f"{_e(timed[0].timing['source'])}-measured, {timed[0].timing['repeat']} calls each"
                     f"</figcaption></figure></details>")
    return "".join(parts)


def _worst_table(r: CaseResult, output: str) -> str:
    worst = (r.worst.get(output) or {}).get("worst_abs") or []
    if not worst:
        return ""
    layout = r.layouts.get(output, "")
    rows = ["<table><tr><th class=l>element</th><th>golden</th><th>actual</th><th>abs error</th><th>rel error</th></tr>"]
    for w in worst[:WORST_SHOWN]:
        rows.append(f"<tr><td class=l><code>{_e(coordinates(output, w['index'], layout))}</code></td>"
                    f"<td>{_num(w['golden'])}</td><td>{_num(w['actual'])}</td><td>{_num(w['abs_err'])}</td>"
                    f"<td>{_e(relative_text(w))}</td></tr>")
    return "<h4>worst elements by absolute error</h4>" + "".join(rows) + "</table>"


def _threshold_row(v: dict, verdict: str, style: str) -> str:
    """A metric against its threshold; one judged otherwise (diff4's rule) says how instead of a bound."""
    bound = _num(v["value"]) if not v.get("note") else _e(v["note"])
    return (f'<tr><td class=l>{_e(v["metric"])}</td><td>{_num(v["actual"])}</td><td>{bound}</td>'
            f'<td class="{style}">{verdict}</td><td class=l>{_e(threshold_source(v))}</td></tr>')


def _output_section(r: CaseResult, output: str) -> str:
    m = r.metrics.get(output, {})
    parts = [f"<h3>output {_e(output)} ({_e(r.layouts.get(output) or 'no layout')})</h3>",
             "<table><tr><th class=l>metric</th><th>value</th><th>threshold</th><th></th>"
             "<th class=l>where the threshold came from</th></tr>"]
    for v in r.thresholds.get(output, []):
        parts.append(_threshold_row(v, "ok" if v["passed"] else "FAIL", "ok" if v["passed"] else "bad"))
    for v in r.informative.get(output, []):
        parts.append(_threshold_row(v, "reported", "l"))
    parts.append("</table>")
    if m:
        parts.append(f"<p>{m.get('n_unequal', 0)} of {m.get('n', 0)} finite elements differ; "
                     f"NaN/Inf mismatches: {m.get('nan_inf_mismatch', 0)}</p>")
    emap = r.error_maps.get(output)
    if emap:
        figures = [f'<figure>{heat_map_svg(emap, output)}<figcaption>where the error sits: |actual − golden| '
                   f'summed over {_e(", ".join(emap["summed"]) or "nothing")}, per {_e(emap["rows"]["axis"])} '
                   f'× {_e(emap["cols"]["axis"])} cell ({emap["rows"]["bin"]} × {emap["cols"]["bin"]} '
                   f'elements); blue outline: NaN/Inf mismatches</figcaption></figure>']
        if emap.get("profile"):
            figures.append(f"<figure>{profile_svg(emap)}<figcaption>channel profile</figcaption></figure>")
        hist = emap["histogram"]
        figures.append(f"<figure>{histogram_svg(emap)}<figcaption>relative errors (diff3's per-element measure) by "
                       f"decade; {hist['exact']} elements exact, {hist['nan_inf']} NaN/Inf mismatches"
                       f"</figcaption></figure>")
        parts.append('<div class="plots">' + "".join(figures) + "</div>")
    parts.append(_worst_table(r, output))
    return "".join(parts)


def _case_anchor(index: int) -> str:
    return f"case-{index}"


def _case_section(r: CaseResult, index: int, compact: bool = False) -> str:
    """A failing case's section; ``compact``: past the first DETAILED_FAILURES, its heat maps,
    descriptor and REPRO only (no tables, profile or histogram), so that a page of hundreds of
    failing cases still opens quickly and each still shows where its error sits."""
    parts = [f'<section class="case failing" id="{_case_anchor(index)}" data-key="{_e(r.key)}">'
             f'<h2>{_e(r.key)} <span class="bad">{_e(r.status)}</span></h2>',
             f"<pre>{_e(r.message)}</pre>"]
    descriptor = getattr(r, "descriptor", "")
    if descriptor:
        parts.append(f"<p>descriptor: <code>{_e(descriptor)}</code></p>")
    if r.explanation:
        parts.append(f'<p class="explain">explained (opcase explain): {_e(r.explanation)}</p>')
    if r.gate:
        parts.append(f"<p>baseline: {_e(r.gate)}: {_e(r.gate_message)}</p>")
    if r.repro:
        parts.append(f'<p>REPRO: <code class="repro">{_e(r.repro)}</code></p>')
    if r.status == FAILED and compact:
        parts += [f'<figure>{heat_map_svg(r.error_maps[output], output)}<figcaption>{_e(output)}: where the error '
                  f'sits</figcaption></figure>' for output in r.thresholds
                  if output_fails(r, output) and r.error_maps.get(output)]
    elif r.status == FAILED:
        parts += [_output_section(r, output) for output in r.thresholds if output_fails(r, output)]
    return "".join(parts) + "</section>"


def _failures_section(results: list[CaseResult]) -> str:
    failing = [r for r in results if fails(r)]
    if not failing:
        return "<h2>No failing case</h2>"
    rows = ["<table><tr><th class=l>case</th><th class=l>status</th><th class=l>first line</th></tr>"]
    for i, r in enumerate(failing):
        name = f'<a href="#{_case_anchor(i)}">{_e(r.key)}</a>'
        first = r.message.splitlines()[0] if r.message else ""
        rows.append(f"<tr><td class=l>{name}</td><td class=l>{_e(r.status)}</td><td class=l>{_e(first)}</td></tr>")
    rows.append("</table>")
    if len(failing) > DETAILED_FAILURES:
        rows.append(f"<p>The first {DETAILED_FAILURES} are shown in full; the others with where their error sits "
                    f"and their REPRO lines (rerun one alone for its full report).</p>")
    return (f"<h2>Failing cases ({len(failing)})</h2>" + "".join(rows)
            + "".join(_case_section(r, i) for i, r in enumerate(failing[:DETAILED_FAILURES]))
            + "".join(_case_section(r, i, compact=True) for i, r in enumerate(failing) if i >= DETAILED_FAILURES))


def _totals(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if not line.startswith("  "))


def html_report(results: list[CaseResult], backend: str, gate: dict | None = None, run: dict | None = None) -> str:
    """The whole report as one HTML document."""
    ok = summary(results)["ok"]
    options = ", ".join(f"{k} {v}" for k, v in (run or {}).items() if v not in (None, False, ""))
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return "".join([
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">',
        f"<title>opcase run: {_e(backend)}</title><style>{_STYLE}</style></head><body>",
        f"<h1>opcase run: backend <code>{_e(backend)}</code> "
        f'<span class="{"ok" if ok else "bad"}">{"passed" if ok else "FAILED"}</span></h1>',
        f"<p>{_e(when)}; {_e(options)}</p>",
        # The table below gives the counts per kernel and suite: the text summary's totals and gate only.
        f"<pre>{_e(_totals(summary_text(results, gate)))}</pre>",
        "<h2>Per kernel and suite</h2>", _summary_table(results),
        _timing_section(results),
        _failures_section(results),
        f"<script>{_SCRIPT}</script></body></html>",
    ])


def incomplete_html(backend: str) -> str:
    """The report a run starts with, saying that it did not finish (as incomplete_json does)."""
    return "".join([
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">',
        f"<title>opcase run: {_e(backend)} (incomplete)</title><style>{_STYLE}</style></head><body>",
        f'<h1>opcase run: backend <code>{_e(backend)}</code> <span class="bad">INCOMPLETE</span></h1>',
        f"<p>{_e(INCOMPLETE_REASON)}</p></body></html>",
    ])
