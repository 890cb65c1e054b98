"""`opcase power` stopped by SIGTERM while its base (in a worker process) is in a call: the judge stops
at once, leaves no process behind, its --json stays the incomplete document it wrote first (never an
"ok": true), and it exits 128 + SIGTERM (harness/EXIT_STATUSES.md)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from conftest import REPO

SLEEPER = '''
import os, time
from harness.backends.builtin import reference
_reference = reference()

def sleeps(request):
    """The reference, except that every call from its third on writes the worker's pid and sleeps."""
    global _calls
    _calls = globals().get("_calls", 0) + 1
    if _calls >= 3:
        with open(os.path.join(os.environ["OPCASE_WORKER_WRITABLE"], "pid"), "w") as f:
            from own_pid import own_pid   # its pid as the test sees it, not its namespace's 2
            f.write(str(own_pid()))
        time.sleep(600)
    return _reference.run(request)
'''


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:   # a zombie is gone but for its parent's wait
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


def test_sigterm_during_a_base_call_stops_power(tmp_path):
    (tmp_path / "sleepy_base.py").write_text(SLEEPER)
    marks = tmp_path / "marks"
    marks.mkdir()
    report = tmp_path / "power.json"
    suite = REPO / "cases" / sorted(p.name for p in (REPO / "cases").iterdir() if p.is_dir())[0] / "random"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, (tmp_path, REPO, REPO / "tests"))),
           "OPCASE_WORKER_WRITABLE": str(marks)}
    process = subprocess.Popen([sys.executable, "-m", "harness.cli", "power", str(suite), "--backend",
                                "sleepy_base:sleeps", "--json", str(report)], cwd=tmp_path, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        give_up = time.monotonic() + 120
        while not (marks / "pid").is_file() and time.monotonic() < give_up and process.poll() is None:
            time.sleep(0.05)
        time.sleep(0.2)
        assert (marks / "pid").is_file(), "the base never reached its sleeping call"
        worker = int((marks / "pid").read_text())
        sent = time.monotonic()
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=30)
        took = time.monotonic() - sent
    finally:
        process.kill()
    assert process.returncode == 128 + signal.SIGTERM, stderr
    assert took < 4, f"took {took:.1f} s to stop"
    assert "Traceback" not in stderr and "SIGTERM" in stderr, stderr
    doc = json.loads(report.read_text())
    assert doc["complete"] is False and doc["summary"]["ok"] is False
    give_up = time.monotonic() + 5
    while _alive(worker) and time.monotonic() < give_up:
        time.sleep(0.05)
    assert not _alive(worker), "the base's worker outlived opcase power"
