"""What people expect of a test runner, on `opcase run`: a backend is always named, an own module
loads from where it lies, a backend can decline what it does not implement, REPRO lines rerun in a
fresh shell."""
from __future__ import annotations

import itertools
import json
import os
import re
import shlex
import select
import signal
import subprocess
import sys
import textwrap
from collections import Counter

import pytest
from click.testing import CliRunner

from conftest import REPO
from harness.cli import main
from harness.reports.progress import Heartbeat

CASES = REPO / "cases"
PSAMASK = CASES / "psamask_forward" / "random"
IM2COL = CASES / "masked_im2col_forward" / "random"
# `opcase` as its console script starts: the current directory is NOT on sys.path (-P), as it is
# not for the installed command (`python -m` and `python -c` would put it there).
OPCASE = [sys.executable, "-P", "-c", "import sys; sys.argv[0] = 'opcase'; from harness.cli import main; main()"]

OWN_BACKEND = textwrap.dedent('''
    import numpy as np
    from harness import NotSupported
    from harness.backends.builtin import reference

    _reference = reference()


    def wrong(request):
        """psamask only, off by one everywhere; any other kernel is declined."""
        if request.op != "psamask_forward":
            raise NotSupported("only psamask here")
        return {name: array + 1 for name, array in _reference.run(request).items()}


    def right(request):
        return _reference.run(request)


    right.supports = lambda op, dtype: op == "psamask_forward"
''')


def _opcase(*args, cwd, env_path=None):
    """The command in a fresh process, its PYTHONPATH this checkout (and env_path before it)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*([env_path] if env_path else []), str(REPO)])}
    env.pop("OPCASE_BACKEND", None)
    return subprocess.run(OPCASE + [str(a) for a in args], capture_output=True, text=True, cwd=cwd, env=env,
                          timeout=120)


def test_run_needs_a_backend_named(tmp_path, monkeypatch):
    monkeypatch.delenv("OPCASE_BACKEND", raising=False)
    report = tmp_path / "r.json"
    result = CliRunner().invoke(main, ["run", str(PSAMASK), "--json", str(report)])
    assert result.exit_code == 2, result.output
    assert result.output.startswith("Error: give --backend (or set OPCASE_BACKEND)") and "Traceback" not in result.output
    assert not report.exists()
    monkeypatch.setenv("OPCASE_BACKEND", "run_backends:one_wrong_element")
    named = CliRunner().invoke(main, ["run", str(PSAMASK), "--json", str(report)])
    assert named.exit_code == 1, named.output
    assert json.loads(report.read_text())["backend"] == "run_backends:one_wrong_element"
    assert "OPCASE_BACKEND" in CliRunner().invoke(main, ["run", "--help"]).output


@pytest.mark.slow   # runs opcase, then its repro line in a fresh shell
def test_a_module_in_the_current_directory_loads_declines_and_its_repro_reruns_in_a_fresh_shell(tmp_path):
    own = tmp_path / "own"
    own.mkdir()
    (own / "mykernels.py").write_text(OWN_BACKEND)
    report = tmp_path / "r.json"
    done = _opcase("run", PSAMASK, IM2COL, "--backend", "mykernels:wrong", "--json", report, cwd=own)
    assert done.returncode == 1, done.stderr
    cases = json.loads(report.read_text())["cases"]
    assert [c["status"] for c in cases if c["op"] == "psamask_forward"] == ["failed"]
    # NotSupported: skipped with the backend's reason, no traceback.
    declined = [c for c in cases if c["op"] == "masked_im2col_forward"]
    assert declined and all(c["status"] == "skipped" and c["message"] == f"backend mykernels:wrong declined "
                            f"masked_im2col_forward {c['dtype']}: only psamask here" for c in declined), declined
    repro = next(line.split("REPRO: ", 1)[1] for line in done.stdout.splitlines() if "REPRO: " in line)
    assert repro.startswith(f"PYTHONPATH={shlex.quote(str(own))} opcase run ")
    # A fresh shell elsewhere: only what the line says (an `opcase` for this checkout on PATH).
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "opcase"
    shim.write_text(f"#!/bin/sh\nPYTHONPATH=\"$PYTHONPATH:{REPO}\" exec {shlex.join(OPCASE)} \"$@\"\n")
    shim.chmod(0o755)
    fresh = subprocess.run(["/bin/sh", "-c", repro], capture_output=True, text=True, cwd=tmp_path, timeout=120,
                           env={"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "HOME": str(tmp_path)})
    assert fresh.returncode == 1 and "1 cases: 1 failed" in fresh.stdout.splitlines(), fresh.stderr
    # A supports attribute on a plain function: the same skip, before any call.
    declared = _opcase("run", PSAMASK, IM2COL, "--backend", "mykernels:right", cwd=own)
    assert declared.returncode == 0, declared.stderr
    assert declared.stdout.strip().splitlines()[-1] == f"{1 + len(declined)} cases: 1 passed, {len(declined)} skipped"


def test_a_module_nowhere_on_the_path_says_how_to_make_it_importable(tmp_path):
    (tmp_path / "mykernels.py").write_text(OWN_BACKEND)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = _opcase("run", PSAMASK, "--backend", "mykernels:wrong", cwd=elsewhere)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"Error: backend 'mykernels:wrong': cannot import mykernels: no module mykernels on the Python path nor "
        f"in the current directory {elsewhere}; run opcase where it is, give its directory as PYTHONPATH=DIR, or "
        f"pip install its package"]
    assert _opcase("run", PSAMASK, "--backend", "mykernels:wrong", cwd=elsewhere, env_path=str(tmp_path)).returncode == 1


# --------------------------------------------------------------------------- pytest's habits

BOUNDARY = CASES / "psamask_forward" / "boundary"


def _cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_maxfail_and_x_stop_the_run_and_report_what_ran(tmp_path):
    report = tmp_path / "r.json"
    first = _cli("run", BOUNDARY, "--backend", "run_backends:one_wrong_element", "-x", "--json", report)
    assert first.exit_code == 1, first.output
    doc = json.loads(report.read_text())
    assert doc["complete"] is True and [c["status"] for c in doc["cases"]] == ["failed"]
    assert doc["run"]["not_run"] == 23 and doc["run"]["maxfail"] == 1
    assert "stopped after 1 failing case(s) (--maxfail/-x): 23 of 24 case(s) not run" in first.output
    # In worker processes too (they are stopped): failures counted, the cases that finished before the
    # stop kept as they ended.  How many passing ones that is depends on timing: a failing case is
    # settled by whichever of its cold and warm passes fails first, a passing one needs both, so the
    # two failures can come back before the passing cases between them (seen under load).
    two = _cli("run", BOUNDARY, "--backend", "run_backends:mixed", "--maxfail", "2", "--jobs", "2", "--json", report)
    doc = json.loads(report.read_text())
    cases = doc["cases"]
    assert two.exit_code == 1 and sum(c["status"] in ("failed", "error") for c in cases) == 2 <= len(cases) < 24
    assert {c["status"] for c in cases} <= {"failed", "error", "passed", "skipped"}
    assert doc["run"]["not_run"] == 24 - len(cases) and doc["complete"] is True
    assert _cli("run", BOUNDARY, "--backend", "reference", "-x", "--maxfail", "3").exit_code == 2


def test_exclude_leaves_out_what_it_matches(tmp_path):
    report = tmp_path / "r.json"
    done = _cli("run", CASES / "psamask_forward", "--backend", "reference", "--filter", "psamask_forward/",
                "--exclude", "boundary|/r0", "--json", report)
    assert done.exit_code == 0, done.output
    suites = {c["suite"] for c in json.loads(report.read_text())["cases"]}
    committed = {p.parent.name for p in (CASES / "psamask_forward").rglob("*.opcase")}
    assert suites == committed - {"boundary", "random"} and "invalid" in suites
    bad = _cli("run", BOUNDARY, "--backend", "reference", "--exclude", "(")
    assert bad.exit_code == 2 and "--exclude: bad regular expression" in bad.output


def test_rerun_failed_takes_the_union_of_several_results_files(tmp_path):
    shards = []
    for i in (1, 2, 3):
        shards.append(tmp_path / f"shard{i}.json")
        _cli("run", BOUNDARY, "--backend", "run_backends:one_wrong_element", "--shard", f"{i}/3", "--json", shards[-1])
    failed = [sum(c["status"] == "failed" for c in json.loads(s.read_text())["cases"]) for s in shards]
    assert all(failed)
    report = tmp_path / "again.json"
    again = _cli("run", "--backend", "reference", *[a for s in shards for a in ("--rerun-failed", s)],
                 "--json", report)
    assert again.exit_code == 0, again.output
    assert len(json.loads(report.read_text())["cases"]) == sum(failed)
    shards[1].write_text(json.dumps({"complete": False, "cases": []}))
    refused = _cli("run", "--backend", "reference", "--rerun-failed", shards[0], "--rerun-failed", shards[1])
    assert refused.exit_code == 2 and "did not finish" in refused.output


SLOW_AFTER_FIRST = textwrap.dedent('''
    import time
    from harness.backends.builtin import reference

    _reference, _calls = reference(), [0]


    def run(request):
        # The first case takes two calls (the decoy call, then the judged call); every later one hangs.
        _calls[0] += 1
        if _calls[0] > 2:
            time.sleep(600)
        return _reference.run(request)
''')


def test_ctrl_c_exits_130_after_the_partial_summary_leaving_results_incomplete(tmp_path):
    (tmp_path / "slow.py").write_text(SLOW_AFTER_FIRST)
    report = tmp_path / "r.json"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    # Ctrl-C as a terminal sends it: SIGINT handled by default even where pytest itself runs with it
    # ignored (a background job of a non-interactive shell), or Python would never raise KeyboardInterrupt.
    proc = subprocess.Popen(OPCASE + ["run", str(BOUNDARY), "--backend", "slow:run", "--json", str(report)],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        # The first case is done; the second sleeps (bounded: a backend that hangs earlier fails here).
        assert select.select([proc.stdout], [], [], 60)[0], "no line from opcase in 60 s"
        assert proc.stdout.readline().startswith("PASS ")
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr
    assert stdout.strip().splitlines()[-1] == "1 cases: 1 passed (of 24: interrupted)"
    assert stderr.splitlines() == ["opcase run: interrupted (Ctrl-C) before it finished"]   # no "Aborted!"
    assert json.loads(report.read_text())["complete"] is False


# --------------------------------------------------------------------------- logs without a terminal

@pytest.mark.slow   # two kernels' committed suites run in a subprocess
def test_plain_log_collapsed_skips_short_failures_and_the_cases_that_need_attention(tmp_path):
    from harness.reports.short_report import FULL_SHOWN, SHORT_NOTE
    (tmp_path / "mykernels.py").write_text(OWN_BACKEND)
    done = _opcase("run", CASES / "psamask_forward", CASES / "psamask_backward", "--backend", "mykernels:wrong",
                   cwd=tmp_path)
    out = done.stdout.splitlines()
    assert done.returncode == 1, done.stderr
    # The declined kernel's cases, float16 and float32 alike: one counted line per kernel and reason.
    backward_files = list((CASES / "psamask_backward").rglob("*.opcase"))
    dtypes = "/".join(sorted({p.stem.rsplit("-", 1)[-1] for p in backward_files}))
    skip_lines = [line for line in out if line.startswith("SKIP")]
    assert skip_lines == [f"SKIP   psamask_backward: {len(backward_files)} cases: backend "
                          f"mykernels:wrong declined psamask_backward {dtypes}: only psamask here "
                          f"(first psamask_backward/boundary/map_1x1-psa_type0-float32; -v lists each)"]
    # The first few failing cases in full, then a line each that carries its REPRO.
    at = out.index("cases that need attention:")
    failing = [line for line in out[:at] if line.startswith(("FAIL ", "ERROR "))]
    assert len(failing) > FULL_SHOWN and out.index(SHORT_NOTE) < at
    short = out[out.index(SHORT_NOTE) + 1:at]
    assert all(" REPRO: " in line for line in short if line.startswith(("FAIL ", "ERROR ")))
    # pytest's short summary: every failing case once more, a line each with its REPRO.
    listed = list(itertools.takewhile(lambda line: line.startswith(("FAIL ", "ERROR ", "WARN ")), out[at + 1:]))
    assert len(listed) == len(failing)
    assert all(f"  REPRO: PYTHONPATH={tmp_path} opcase run /" in line for line in listed)
    # a heartbeat line per kernel done
    forward, backward = (len(list((CASES / op).rglob("*.opcase"))) for op in ("psamask_forward", "psamask_backward"))
    assert [line.split(":")[0] for line in out if line.startswith("ran ")] == [
        f"ran {forward}/{forward + backward} (psamask_forward done)",
        f"ran {forward + backward}/{forward + backward} (psamask_backward done)"]
    verbose = _opcase("run", CASES / "psamask_backward", "--backend", "mykernels:wrong", "-v", cwd=tmp_path)
    assert sum(line.startswith("SKIP ") for line in verbose.stdout.splitlines()) == backward
    # -q: the summary alone.
    quiet = _opcase("run", CASES / "psamask_forward", CASES / "psamask_backward", "--backend", "mykernels:wrong",
                    "-q", cwd=tmp_path)
    assert quiet.returncode == 1
    assert quiet.stdout.splitlines()[-1] == out[-1] and not any(
        line.startswith(("FAIL", "SKIP", "PASS", "ran ", "  REPRO")) for line in quiet.stdout.splitlines())


def test_heartbeat_every_30_s_and_per_kernel_with_an_eta():
    now, lines = [0.0], []
    beat = Heartbeat("ran", Counter({"a": 3, "b": 1}), echo=lines.append, clock=lambda: now[0])
    now[0] = 10.0
    beat.tick("a", "1 passed")
    assert lines == []
    now[0] = 31.0
    beat.tick("a", "2 passed")
    assert lines == ["ran 2/4: 2 passed; 50.0 % of the work, 31s elapsed, ETA 31s"]
    now[0] = 40.0
    beat.tick("a", "3 passed")
    assert lines[-1] == "ran 3/4 (a done): 3 passed; 75.0 % of the work, 40s elapsed, ETA 13s"
    now[0] = 200.0
    beat.tick("b", "4 passed")
    assert lines[-1] == "ran 4/4 (b done): 4 passed; 100.0 % of the work, 3m20s elapsed"


def test_heartbeat_eta_by_weight_when_the_largest_items_go_first():
    """gen hands out its largest cases first: a count-based ETA would promise ten times too long."""
    now, lines = [0.0], []
    beat = Heartbeat("generated", Counter({"a": 10}), echo=lines.append, every=0, clock=lambda: now[0],
                     total_weight=100)
    now[0] = 90.0
    beat.tick("a", "90 MB written", 90)
    assert lines == ["generated 1/10: 90 MB written; 90.0 % of the work, 1m30s elapsed, ETA 10s"]


def test_gen_resumes_keeping_cases_written_whole(tmp_path):
    spec = REPO / "specs" / "psamask_forward.yaml"
    args = ["gen", spec, "--suite", "random,boundary", "--count", "3", "-o", tmp_path / "out"]
    first = _cli(*args)
    assert first.exit_code == 0, first.output
    files = sorted((tmp_path / "out").rglob("*.opcase*"))
    original = {f: f.read_bytes() for f in files}
    cut = next(f for f in files if f.suffix == ".opcase")
    cut.write_bytes(original[cut][:-9])          # as an interrupted write would leave it
    again = _cli(*args)
    assert again.exit_code == 0, again.output
    n_cases = sum(f.suffix == ".opcase" for f in files)
    assert again.output.splitlines()[-1].endswith(f"to {tmp_path / 'out'}; kept {n_cases - 1} already there whole "
                                                  f"(same spec, suite and seed)")
    assert again.output.splitlines()[-1].startswith("wrote 1 cases ")
    assert {f: f.read_bytes() for f in files} == original
    # Another seed is another suite: nothing kept.
    other = _cli(*args, "--seed", "1")
    assert "kept" not in other.output.splitlines()[-1]


def test_each_commands_summary_is_its_own_first_sentence():
    """`opcase --help` lists the commands from harness.cli.COMMANDS without importing them: each summary
    there must be how its command's own help begins, so that the two cannot drift apart."""
    from harness.cli import COMMANDS, load_command
    for name, (_, summary) in COMMANDS.items():
        command = load_command(name)
        assert command.name == name
        help_text = " ".join((command.help or "").split())
        assert help_text.startswith(summary.rstrip(".")), (name, summary, help_text[:200])
