"""What people expect of a test runner, on `opcase run`: a backend is always named, an own module
loads from where it lies, a backend can decline what it does not implement, REPRO lines rerun in a
fresh shell."""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import textwrap

from click.testing import CliRunner

from conftest import REPO
from harness.cli import main

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
    assert fresh.returncode == 1 and fresh.stdout.strip().splitlines()[-1] == "1 cases: 1 failed", fresh.stderr
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
