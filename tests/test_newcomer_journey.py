"""A newcomer's journey, scripted: a buggy backend of the test's own (wrong on the first rows and
columns of its output, as a border bug is) over a committed suite where most cases fail.

What a person sees: the first few failing cases in full, then at most three lines per case;
REPRO lines (terminal, HTML, JUnit) that rerun their case from another directory with the same
status; a --fresh failure kept, its REPRO and CASE lines rerunning it; and explain naming the
border region, and on the reference naming no bug.
"""
from __future__ import annotations

import html
import json
import os
import re
import shlex
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from conftest import REPO
from harness.reports.short_report import FULL_SHOWN, SHORT_NOTE

CASES = REPO / "cases"
BIN = Path(sys.executable).parent
BORDER_BACKEND = textwrap.dedent('''
    import numpy as np
    from harness.backends.builtin import reference

    _reference = reference()


    def run(request):
        """The reference, but the first two rows and columns of every output map are off by one."""
        out = {name: np.array(array) for name, array in _reference.run(request).items()}
        for array in out.values():
            if array.ndim == 4:
                array[:, :2] += 1
                array[:, :, :2] += 1
        return out
''')

pytestmark = pytest.mark.skipif(not (BIN / "opcase").exists(), reason=f"no opcase command beside {sys.executable}: "
                                "REPRO lines call `opcase` (pip install -e . in this environment)")


def _env() -> dict:
    env = {**os.environ, "PATH": os.pathsep.join([str(BIN), os.environ.get("PATH", "")])}
    env.pop("OPCASE_BACKEND", None)
    env.pop("PYTHONPATH", None)   # REPRO lines must carry what they need
    return env


def _shell(command: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(command, shell=True, capture_output=True, text=True, cwd=cwd, env=_env(), timeout=300)


def _opcase(args, cwd: Path) -> subprocess.CompletedProcess:
    return _shell(" ".join(["opcase", *map(shlex.quote, map(str, args))]), cwd)


def _status_of(done: subprocess.CompletedProcess) -> str:
    return done.stdout.strip().splitlines()[-1]


@pytest.fixture
def workdir(tmp_path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    (work / "mykernels.py").write_text(BORDER_BACKEND)
    return work


@pytest.mark.slow   # a failing run, then each repro line in a fresh shell
def test_a_run_with_many_failures_reads_short_and_its_repro_lines_rerun_anywhere(workdir, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = _opcase(["run", CASES / "carafe_forward", "--backend", "mykernels", "--json", "r.json",
                    "--junit", "j.xml", "--html", "h.html"], workdir)
    assert done.returncode == 1, done.stderr
    out = done.stdout.splitlines()
    results = json.loads((workdir / "r.json").read_text())["cases"]
    failing = [c for c in results if c["status"] in ("failed", "error", "wrongly-accepted", "wrongly-rejected")]
    assert len(failing) > 3 * FULL_SHOWN
    # Past the first few: at most three lines per failing case (its line, its line again in the
    # closing list), and the summary.
    past = out[out.index(SHORT_NOTE) + 1:]
    summary = [line for line in past if line.startswith("  ") and ": " in line and "REPRO" not in line]
    assert len(past) - len(summary) - 2 <= 3 * (len(failing) - FULL_SHOWN), "\n".join(past)
    # Every REPRO line of every artifact names its case by an absolute path.
    terminal = {m for line in out for m in re.findall(r"REPRO: (.+?opcase run \S+ --backend \S+)", line)}
    page = {html.unescape(m) for m in re.findall(r'<code class="repro">(.*?)</code>', (workdir / "h.html").read_text())}
    junit = {p.get("value") for p in ET.parse(workdir / "j.xml").getroot().iter("property")
             if p.get("name", "").endswith("/repro")}
    by_case = {c["repro"] for c in failing}
    # (JUnit carries every case's, passing ones too.)
    assert terminal == page == by_case and by_case <= junit, (terminal ^ by_case, page ^ by_case, by_case - junit)
    for command in junit:
        case = Path(shlex.split(command)[shlex.split(command).index("run") + 1])
        assert case.is_absolute() and case.is_file(), command
    # Some of them, rerun from another directory: the same status.
    for case in failing[:2] + failing[-1:]:
        again = _shell(case["repro"], elsewhere)
        assert again.returncode == 1 and _status_of(again) == f"1 cases: 1 {case['status']}", again.stdout + again.stderr
    # -q: the summary alone.
    quiet = _opcase(["run", CASES / "carafe_forward", "--backend", "mykernels", "-q"], workdir)
    assert quiet.returncode == 1 and not [line for line in quiet.stdout.splitlines() if "REPRO" in line]


@pytest.mark.slow   # about 40 s on a loaded 2-core machine: gen of the fresh case and four runs
def test_a_fresh_failure_is_kept_and_its_repro_and_case_lines_rerun_it(workdir, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = _opcase(["run", CASES / "carafe_forward" / "random", "--backend", "mykernels", "--fresh", "1",
                    "--fresh-seed", "7", "--keep-fresh", "kept", "--json", "r.json"], workdir)
    assert done.returncode == 1, done.stderr
    fresh = [c for c in json.loads((workdir / "r.json").read_text())["cases"] if c["suite"] == "fresh"]
    assert fresh and fresh[0]["status"] == "failed"
    kept = Path(fresh[0]["path"])
    assert kept.is_file() and (workdir / "kept") in kept.parents
    assert f"fresh: kept 1 failing case(s) under {workdir / 'kept'}" in done.stdout
    again = _shell(fresh[0]["repro"], elsewhere)
    assert again.returncode == 1 and _status_of(again) == "1 cases: 1 failed", again.stdout + again.stderr
    descriptor = fresh[0]["descriptor"]
    assert descriptor and f"CASE:  {descriptor}" in done.stdout
    made = _opcase(["gen", "--case", descriptor, "-o", elsewhere / "made"], elsewhere)
    assert made.returncode == 0, made.stderr
    rerun = _opcase(["run", elsewhere / "made", "--backend", "mykernels"], workdir)
    assert rerun.returncode == 1 and _status_of(rerun) == "1 cases: 1 failed"


def test_explain_names_the_border_region_and_no_bug_on_the_reference(workdir):
    case = CASES / "carafe_forward" / "stress" / "batch_N3_H5_W9-float32.opcase"
    bug = _opcase(["explain", case, "--backend", "mykernels"], workdir)
    assert bug.returncode == 0, bug.stdout + bug.stderr
    assert "the first 2 rows (H 0..1) and the first 2 columns (W 0..1)" in bug.stdout, bug.stdout
    assert "scattered" not in bug.stdout
    right = _opcase(["explain", case, "--backend", "reference"], workdir)
    assert right.returncode == 0, right.stdout + right.stderr
    assert "bit for bit on 100 %" in right.stdout and "[reference]" in right.stdout, right.stdout
    # The explanation itself (not the ranking beneath it, which lists every variant's score): the
    # reference, nothing else, no piece matched by a bug, no tie.
    headline = next(line for line in right.stdout.splitlines() if line.startswith("  output: "))
    assert headline.startswith("  output: matches the reference ") and ";" not in headline, headline
    assert "tie" not in headline
