"""`opcase run --html FILE`: one self-contained file that shows where a failing case's error sits.

The browser test loads the report in Debian's headless chromium (installed by .ci/run; skipped
where it is absent), checks that every plot was drawn and that the failing case's section is
there, and saves a screenshot in $OPCASE_TEST_ARTIFACTS (default: the test's temporary directory).
"""
from __future__ import annotations

import json
import os
import re
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

import needs
from conftest import REPO, run_cli
from gen.core.casefile import load
from harness.error_map import MAX_CELLS, error_map
from report_backends import tile_of

# The README's example: a committed case, and a backend that leaves one tile of each output unwritten.
CASE = REPO / "cases" / "carafe_backward" / "boundary" / "scale_5-float32.opcase"
PASSING = REPO / "cases" / "carafe_forward" / "random" / \
    "r001-N1-H3-W3-G4-Cg3-C12-kernel_size5-group_size4-scale_factor1-float32.opcase"
BACKEND = "report_backends:unwritten_tile"


class _Svg(HTMLParser):
    """The report's plots: per svg.plot, its class and attributes, and its cells' rows and columns."""

    def __init__(self):
        super().__init__()
        self.plots: list[dict] = []
        self.sections: list[str] = []
        self.text: list[str] = []
        self.external: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "svg" and "plot" in a.get("class", "").split():
            self.plots.append({"class": a["class"], **a, "cells": set()})
        elif tag == "rect" and a.get("class") == "cell":
            self.plots[-1]["cells"].add((int(a["data-row"]), int(a["data-col"])))
        elif tag == "section":
            self.sections.append(a.get("data-key", ""))
        for name in ("src", "href"):
            if a.get(name) and not a[name].startswith("#"):
                self.external.append(a[name])

    def handle_data(self, data):
        self.text.append(data)


def _parse(path: Path) -> _Svg:
    parser = _Svg()
    parser.feed(path.read_text())
    return parser


def _report(tmp_path, *paths, options=(), backend=BACKEND):
    html = tmp_path / "report.html"
    result = run_cli(*paths, "--backend", backend, "--html", html, *options)
    return result, html


def test_heat_map_shows_the_tile_where_the_bug_was_planted(tmp_path):
    result, html = _report(tmp_path, CASE)
    assert result.exit_code == 1, result.output
    report = _parse(html)
    assert report.sections == ["carafe_backward/boundary/scale_5-float32"]
    case = load(CASE)
    for name, t in case.outputs.items():
        heat = next(p for p in report.plots if "heat-map" in p["class"] and p["data-output"] == name)
        rows, cols = tile_of(t.shape, t.layout)[1:3]      # NHWC: the tile's h and w ranges
        tile = {(r, c) for r in range(*rows.indices(t.shape[1])) for c in range(*cols.indices(t.shape[2]))}
        # The map is 1 x 1 elements per cell here: every hot cell is in the tile, and the tile is
        # hot wherever its golden is not zero there.
        golden_there = {(r, c) for r, c in tile if np.any(t.data[:, r, c, :] != 0)}
        assert heat["cells"] == golden_there and golden_there, name
    text = " ".join(report.text)
    assert f"REPRO: PYTHONPATH={REPO / 'tests'} opcase run {CASE} --backend {BACKEND}" in re.sub(r"\s+", " ", text)
    assert "dynamic, design doc" in text                           # where each threshold came from
    assert "grad_mask[n=0, h=5, w=13, c=11]" in text               # the worst element at its coordinates
    assert {p["class"].split()[1] for p in report.plots} == {"heat-map", "profile", "histogram"}
    assert not report.external                                     # self-contained: nothing to fetch


@pytest.mark.parametrize("backend, status", [("lowp", "passed"), (BACKEND, "failed")])
def test_counts_and_headroom_per_kernel_and_suite(tmp_path, backend, status):
    result, html = _report(tmp_path, CASE, PASSING, options=("--json", tmp_path / "r.json"), backend=backend)
    assert result.exit_code == (0 if status == "passed" else 1)
    # Per kernel/suite: the counts by status, then the tightest metric over its threshold (over 1 fails).
    for case in json.loads((tmp_path / "r.json").read_text())["cases"]:
        ratio, metric = max(((v["actual"] / v["value"], f"{output}.{v['metric']}")
                             for output, vs in case["thresholds"].items() for v in vs), key=lambda rm: rm[0])
        assert case["status"] == status and (ratio <= 1) == (status == "passed")
        count = "<td>1</td>" if status == "passed" else '<td class="bad">1</td>'
        row = (f'<tr><td class=l>{case["op"]}/{case["suite"]}</td>{count}'
               f'<td class="{"ok" if ratio <= 1 else "bad"}">{ratio:.3g}</td><td class=l>{metric} {case["op"]}/')
        assert row in html.read_text(), row


def test_timing_plots_with_repeat(tmp_path):
    result, html = _report(tmp_path, CASE, PASSING, options=("--repeat", "2"))
    assert result.exit_code == 1
    report = _parse(html)
    timing = [p for p in report.plots if "timing" in p["class"]]
    assert sorted(p["data-op"] for p in timing) == ["carafe_backward", "carafe_forward"]
    # Without --repeat, no timing plot.
    _, plain = _report(tmp_path, PASSING)
    assert not [p for p in _parse(plain).plots if "timing" in p["class"]]


def test_headroom_is_the_tightest_metric_over_its_threshold():
    from harness.html_report import headroom
    from gen.core.verdict import CaseResult
    r = CaseResult(path="x", thresholds={"y": [{"metric": "diff1", "value": 1e-3, "actual": 5e-4, "passed": True},
                                              {"metric": "diff2", "value": 1e-3, "actual": 8e-4, "passed": True}],
                                        "z": [{"metric": "diff3_2", "value": 0.0, "actual": 0.0, "passed": True}]})
    assert headroom(r) == pytest.approx((0.8, "y.diff2"))
    r.thresholds["z"][0]["actual"] = 1.0
    assert headroom(r) == (float("inf"), "z.diff3_2")
    assert headroom(CaseResult(path="x")) is None


def test_error_maps_come_back_from_worker_processes(tmp_path):
    result, html = _report(tmp_path, CASE, options=("--jobs", "2"))
    assert result.exit_code == 1
    assert len([p for p in _parse(html).plots if "heat-map" in p["class"]]) == 2


def test_error_map_of_a_large_tensor_is_bounded_and_points_at_the_error(monkeypatch):
    import harness.error_map as em
    monkeypatch.setattr(em, "_BLOCK_ELEMS", 1 << 16)        # many blocks
    golden = np.random.default_rng(0).standard_normal((2, 500, 300, 3)).astype(np.float32)
    actual = golden.copy()
    actual[1, 401, 77, 2] += 10.0
    actual[0, 10, 290, 0] = np.nan
    m = error_map(actual, golden, "NHWC", "float32")
    assert len(m["heat"]) <= MAX_CELLS and all(len(row) <= MAX_CELLS for row in m["heat"])
    assert (m["rows"]["axis"], m["cols"]["axis"], m["summed"]) == ("h", "w", ["n", "c"])
    hot = np.argwhere(np.array(m["heat"]) > 0)
    assert hot.tolist() == [[401 // m["rows"]["bin"], 77 // m["cols"]["bin"]]]
    assert m["nan_inf_cells"] == [[10 // m["rows"]["bin"], 290 // m["cols"]["bin"], 1]]
    assert m["profile"]["values"] == [0.0, 0.0, pytest.approx(10.0, rel=1e-3)]
    assert m["histogram"]["nan_inf"] == 1 and sum(m["histogram"]["counts"]) == 1
    assert m["histogram"]["exact"] == golden.size - 2


def test_error_map_without_named_axes_uses_the_last_two():
    golden = np.ones((4, 6, 8))
    actual = golden.copy()
    actual[3, 5, 1] = 2.0
    m = error_map(actual, golden, "ARRAY", "float64")
    assert (m["rows"]["axis"], m["cols"]["axis"], m["summed"], m["profile"]) == ("axis 1", "axis 2", ["axis 0"], None)
    assert np.argwhere(np.array(m["heat"]) > 0).tolist() == [[5, 1]]


def _chromium() -> str | None:
    return needs.chromium()


@pytest.mark.needs("chromium")
def test_report_renders_in_a_headless_browser(tmp_path):
    result, html = _report(tmp_path, CASE, PASSING, options=("--repeat", "2"))
    assert result.exit_code == 1
    n_plots = len(_parse(html).plots)
    browser = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
               f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run([*browser, "--dump-dom", html.as_uri()], capture_output=True, text=True, timeout=120,
                         check=True).stdout
    # The page's script counted, after load, every plot the browser laid out with a size and shapes.
    assert f'data-plots-total="{n_plots}"' in dom and f'data-plots-rendered="{n_plots}"' in dom, dom[:500]
    assert n_plots >= 5
    assert 'data-key="carafe_backward/boundary/scale_5-float32"' in dom
    artifacts = Path(os.environ.get("OPCASE_TEST_ARTIFACTS", tmp_path))
    artifacts.mkdir(parents=True, exist_ok=True)
    shot = artifacts / "html-report.png"
    subprocess.run([*browser, f"--screenshot={shot}", "--window-size=1280,2000", html.as_uri()],
                   capture_output=True, timeout=120, check=True)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000


@pytest.mark.parametrize("block", [7, 64, 1 << 20])
@pytest.mark.parametrize("shape, layout", [((3, 7, 5, 11), "NWHC"), ((50,), "X"), ((6, 130, 3), "ARRAY"),
                                           ((2, 3, 4, 5), "NCHW"), ((), "")])
def test_error_map_sums_every_element_into_its_cell(monkeypatch, shape, layout, block):
    """Whatever the layout's axis order, rank and block size: each cell holds the sum of |error|
    over the elements whose row and column fall in it (1-D and 0-d tensors: one row)."""
    import harness.error_map as em
    monkeypatch.setattr(em, "_BLOCK_ELEMS", block)
    rng = np.random.default_rng(1)
    golden = rng.standard_normal(shape)
    actual = golden + rng.standard_normal(shape) * (rng.random(shape) < 0.2)
    m = em.error_map(actual, golden, layout, "float64")
    rows, cols, _ = em.axes_of(layout, max(len(shape), 1))
    err = np.abs(actual - golden).reshape(shape or (1,))
    kept = err.sum(axis=tuple(i for i in range(err.ndim) if i not in (rows, cols)))
    kept = (kept.T if rows is not None and rows > cols else kept).reshape(-1, err.shape[cols])
    expected = np.zeros((len(m["heat"]), len(m["heat"][0])))
    for (r, c), value in np.ndenumerate(kept):
        expected[r // m["rows"]["bin"], c // m["cols"]["bin"]] += value
    assert np.allclose(m["heat"], expected, rtol=1e-3)
    assert m["histogram"]["exact"] + sum(m["histogram"]["counts"]) == max(golden.size, 1)
