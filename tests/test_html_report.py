"""`opcase run --html FILE`: one self-contained file that shows where a failing case's error sits.

The browser test loads the report in Debian's headless chromium (installed by .ci/run; skipped
where it is absent), checks that every plot was drawn and that the failing case's section is
there, and saves a screenshot in $OPCASE_TEST_ARTIFACTS (default: the test's temporary directory).
"""
from __future__ import annotations

import json
import os
import re
import struct
import subprocess
import zlib
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import needs
from conftest import CONFORMANCE, REPO, run_cli
from gen.core.casefile import load
from harness.cli import main
from harness.reports.error_map import MAX_CELLS, error_map
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
               f'<td class="{"ok" if ratio <= 1 else "bad"}">{ratio:.3g}</td><td class=l>{metric} {case["name"]}</td>')
        assert row in html.read_text(), row


def test_an_exact_match_failure_counts_its_wrong_elements(tmp_path):
    """A pure-IO kernel's threshold is 0: its headroom would be a ratio to zero ('inf'); the summary says
    how many elements are wrong instead."""
    case = next((REPO / "cases" / "psamask_forward" / "random").glob("*.opcase"))
    result, html = _report(tmp_path, case, options=("--json", tmp_path / "r.json"),
                           backend="run_backends:one_wrong_element")
    assert result.exit_code == 1
    doc = json.loads((tmp_path / "r.json").read_text())["cases"][0]
    n = doc["metrics"]["y"]["n"]
    row = re.search(r"<tr><td class=l>psamask_forward/random</td>.*?</tr>", html.read_text())[0]
    assert f">1 of {n} elements wrong</td>" in row and ">inf<" not in row, row


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
    from harness.reports.html_report import headroom
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
    import harness.reports.error_map as em
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


def _browser(tmp_path) -> list[str]:
    return [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
            f"--user-data-dir={tmp_path / 'profile'}"]


def _rendered(tmp_path, html: Path) -> tuple[str, dict]:
    """The DOM after load, and the attributes the page's script set on its body: plots drawn, plot labels
    clipped by their plot's edges or overlapping another, the page's height."""
    dom = subprocess.run([*_browser(tmp_path), "--dump-dom", html.as_uri()], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    body = re.search(r"<body([^>]*)>", dom)[1]
    return dom, {k: int(v) for k, v in re.findall(r'data-([a-z-]+)="(\d+)"', body)}


def _screenshot(tmp_path, html: Path, name: str, height: int) -> Path:
    """A screenshot in $OPCASE_TEST_ARTIFACTS, checked: a PNG of the window's size that is not blank."""
    artifacts = Path(os.environ.get("OPCASE_TEST_ARTIFACTS", tmp_path))
    artifacts.mkdir(parents=True, exist_ok=True)
    shot = artifacts / name
    subprocess.run([*_browser(tmp_path), f"--screenshot={shot}", f"--window-size=1280,{height}", html.as_uri()],
                   capture_output=True, timeout=120, check=True)
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", data[16:24]) == (1280, height)
    pixels = zlib.decompress(b"".join(data[i + 8:i + 8 + n] for i, n in _png_chunks(data, b"IDAT")))
    # A blank page's scanlines filter to a handful of byte values; a page with text and plots to many.
    assert len(set(pixels)) > 64 and len(data) > 20_000, (len(set(pixels)), len(data))
    return shot


def _png_chunks(data: bytes, kind: bytes):
    i = 8
    while i < len(data):
        (n,) = struct.unpack(">I", data[i:i + 4])
        if data[i + 4:i + 8] == kind:
            yield i, n
        i += 12 + n


@pytest.mark.slow   # a run with --repeat, then chromium
@pytest.mark.needs("chromium")
def test_report_renders_in_a_headless_browser(tmp_path):
    result, html = _report(tmp_path, CASE, PASSING, options=("--repeat", "2"))
    assert result.exit_code == 1
    plots = _parse(html).plots
    folded = [p for p in plots if "timing" in p["class"]]    # in closed <details>: not laid out until opened
    dom, body = _rendered(tmp_path, html)
    # The page's script counted, after load, every plot the browser laid out with a size and shapes.
    assert folded and body["plots-total"] == body["plots-rendered"] == len(plots) - len(folded) >= 5, body
    assert (body["labels-clipped"], body["labels-overlapping"]) == (0, 0), body
    assert 'data-key="carafe_backward/boundary/scale_5-float32"' in dom
    _screenshot(tmp_path, html, "html-report.png", 2000)


@pytest.mark.needs("chromium")
def test_labels_fit_with_wide_channels_and_large_errors(tmp_path):
    """mlu-ops' carafe_backward case: 2148 channels (profile labels like `c 2142-2147`) and errors in the
    thousands on the colour bar; no label leaves its plot or touches another."""
    imported = tmp_path / "imported"
    assert CliRunner().invoke(main, ["import", str(CONFORMANCE / "mlu-ops" / "carafe_backward"), "-o",
                                     str(imported)]).exit_code == 0
    result, html = _report(tmp_path, imported)
    assert result.exit_code == 1
    _, body = _rendered(tmp_path, html)
    assert body["plots-rendered"] >= 6 and (body["labels-clipped"], body["labels-overlapping"]) == (0, 0), body


@pytest.mark.slow   # the whole committed suite run twice, then rendered
@pytest.mark.needs("chromium")
def test_a_passing_run_makes_a_short_page(tmp_path):
    """Counts per kernel and suite, the timing folded: a passing run of the whole committed suite with
    --repeat is a page of its summary rows (one per kernel and suite), not of plots (unfolded, the
    timing made it 6450 px when 27 rows took 2005)."""
    result, html = _report(tmp_path, REPO / "cases", backend="reference", options=("--repeat", "2"))
    assert result.exit_code == 0
    _, body = _rendered(tmp_path, html)
    rows = len({(p.parts[-3], p.parts[-2]) for p in (REPO / "cases").rglob("*.opcase")})
    assert body["page-height"] <= 1200 + 40 * rows, (rows, body)
    _screenshot(tmp_path, html, "html-report-passing.png", 1400)


@pytest.mark.parametrize("block", [7, 64, 1 << 20])
@pytest.mark.parametrize("shape, layout", [((3, 7, 5, 11), "NWHC"), ((50,), "X"), ((6, 130, 3), "ARRAY"),
                                           ((2, 3, 4, 5), "NCHW"), ((), "")])
def test_error_map_sums_every_element_into_its_cell(monkeypatch, shape, layout, block):
    """Whatever the layout's axis order, rank and block size: each cell holds the sum of |error|
    over the elements whose row and column fall in it (1-D and 0-d tensors: one row)."""
    import harness.reports.error_map as em
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
