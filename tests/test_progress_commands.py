"""Every long command reports progress through harness/reports/progress.py: without a terminal, a
heartbeat line whose share of the work is the planned work done (bytes plus a fixed cost per item,
harness.reports.progress.weight_of), not the count of items done.

HEARTBEAT_S is set to 0 here (the mechanism's own parameter, read when a heartbeat is made), so
that every item done prints a line and the shares can be checked item by item."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from conftest import REPO
import harness.reports.progress as progress_module
import harness.studies.explain as explain_module
from gen.core.casefile import load
from gen.core.spec import load_spec
from gen.core.verdict import request_for
from gen.generate import plan_suite, total_bytes
from harness.backends.builtin import reference
from harness.cli import main
from harness.judge.selection import case_key
from harness.reports.progress import weight_of
from harness.studies.explain import explain_outputs, variants
from test_shrink import OP as SHRUNK_OP   # the kernel tests/shrink_backends.py plants its bugs in

COMMITTED = REPO / "cases"
SHARE = re.compile(r"; (\d+\.\d) % of the work, ")


@pytest.fixture(autouse=True)
def every_item_beats(monkeypatch):
    monkeypatch.setattr(progress_module, "HEARTBEAT_S", 0.0)


def _shares(lines, label: str) -> list[float]:
    return [float(SHARE.search(line).group(1)) for line in lines if line.startswith(label + " ")
            and SHARE.search(line)]


def _cumulative(weights) -> list[float]:
    total, done, shares = sum(weights), 0.0, []
    for w in weights:
        done += w
        shares.append(100 * done / total)
    return shares


def _check_weighted(shown, weights) -> None:
    """The shares shown are those of the planned work, item by item, and not those of a count."""
    expected = _cumulative(weights)
    assert len(shown) == len(expected), (shown, expected)
    assert all(abs(s - e) <= 0.051 for s, e in zip(shown, expected)), (shown, expected)
    counted = [100 * (k + 1) / len(weights) for k in range(len(weights))]
    assert max(abs(s - c) for s, c in zip(shown, counted)) > 2, "the weights do not tell from a count here"


def _mixed_files(n: int = 3) -> list[Path]:
    """The n largest and the n smallest committed case files: weights far apart."""
    files = sorted(COMMITTED.rglob("*.opcase"), key=lambda p: p.stat().st_size)
    return files[-n:] + files[:n]


def test_run_heartbeat_is_weighted_by_each_case_file_bytes():
    files = _mixed_files()
    result = CliRunner().invoke(main, ["run", *map(str, files), "--backend", "reference"])
    lines = result.output.splitlines()
    assert result.exit_code in (0, 1), result.output
    # Each case's line, then its heartbeat: the cases in the order they finished.
    done = [line.split()[1] for line in lines if re.match(r"(PASS|FAIL|ERROR|SKIP|WARN)\S* ", line)]
    size = {case_key(f): f.stat().st_size for f in files}
    _check_weighted(_shares(lines, "ran"), [weight_of(size[key]) for key in done])


def test_calibrate_heartbeat_is_weighted_by_each_case_file_bytes():
    files = _mixed_files()
    result = CliRunner().invoke(main, ["calibrate", *map(str, files), "--backend", "reference"])
    assert result.exit_code in (0, 1), result.output
    shown = _shares(result.output.splitlines(), "calibrating reference")
    assert shown and shown[-1] == 100.0
    # Run in the order given (one at a time): the shares are those of that order's bytes.
    _check_weighted(shown, [weight_of(f.stat().st_size) for f in files])


def test_power_heartbeat_is_weighted_by_each_case_file_bytes():
    # The smallest case and one of about 300 KB: weights apart, and few mutants' runs to wait for.
    files = sorted(COMMITTED.rglob("*.opcase"), key=lambda p: (abs(p.stat().st_size - 300_000), p))[:1]
    files += _mixed_files(1)[1:]
    result = CliRunner().invoke(main, ["power", *map(str, files), "--min-kills", "1"])
    lines = result.output.splitlines()
    shown = _shares(lines, "measuring")
    assert shown and shown[-1] == 100.0, result.output
    # power measures the smallest cases first.
    weights = sorted(weight_of(f.stat().st_size) for f in files)
    _check_weighted(shown, weights)


def test_gen_heartbeat_is_weighted_by_each_case_bytes(tmp_path):
    spec_path = REPO / "specs" / sorted(p.name for p in (REPO / "specs").glob("*.yaml"))[0]
    spec = load_spec(spec_path)
    result = CliRunner().invoke(main, ["gen", str(spec_path), "--suite", "network,boundary", "--max-size", "8MB",
                                       "-j", "1", "-o", str(tmp_path)])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    # -j 1 writes in plan order.
    sizes = [total_bytes(spec, plan) for suite in ("network", "boundary") for plan in plan_suite(spec, suite, None, 0)]
    sizes = [s for s in sizes if s <= 8_000_000]
    _check_weighted(_shares(lines, "generated"), [weight_of(s) for s in sizes])


def test_explain_heartbeat_appears_on_a_large_case_weighted_by_the_variants_to_compute(monkeypatch, capsys):
    """A case over the size that shows progress (set to 0 here) beats on stderr as its variants are
    computed; a variant whose outputs an earlier one computed (same key) weighs a tenth."""
    monkeypatch.setattr(explain_module, "_PROGRESS_ELEMENTS", 0)
    path = sorted(COMMITTED.rglob("*.opcase"), key=lambda p: p.stat().st_size)[0]
    case = load(path)
    request = request_for(case)
    catalogue = variants(case.op)
    explain_outputs(request, reference().run(request), catalogue)
    err = capsys.readouterr().err.splitlines()
    shown = _shares(err, "explain: variants")
    assert len(shown) == len(catalogue) and shown[-1] == 100.0, err
    keys, weights = set(), []
    for v in catalogue:
        key = v.key if v.key is not None else v.name
        weights.append(0.1 if key in keys else 1.0)
        keys.add(key)
    assert all(abs(s - e) <= 0.051 for s, e in zip(shown, _cumulative(weights)))
    assert f"explain: variants 1/{len(catalogue)}: {catalogue[0].name} done; " in err[0]


def test_explain_shows_no_progress_on_a_small_case(capsys):
    path = sorted(COMMITTED.rglob("*.opcase"), key=lambda p: p.stat().st_size)[0]
    request = request_for(load(path))
    explain_outputs(request, reference().run(request), variants(load(path).op))
    assert capsys.readouterr().err == ""


@pytest.mark.slow   # a shrink
def test_shrink_heartbeat_says_each_try_against_its_budget(tmp_path):
    """A search plans no work ahead: its heartbeat says the try against --max-tries and the time."""
    case = COMMITTED / SHRUNK_OP / "boundary" / "wide_channels-float16.opcase"
    result = CliRunner().invoke(main, ["shrink", str(case), "--backend", "shrink_backends:channel_tail",
                                       "--max-tries", "3", "-o", str(tmp_path)])
    assert result.exit_code == 0, result.output
    beats = [line for line in result.output.splitlines() if line.startswith("shrink ")]
    assert beats[0].startswith("shrink 1: running the original case; ") and beats[0].endswith(" elapsed")
    assert any(re.match(r"shrink \d+: try 3 of at most 3: ", line) for line in beats), beats
    assert np.all([" % of the work" not in line and "ETA" not in line for line in beats])
