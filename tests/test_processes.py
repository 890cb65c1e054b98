"""No process outlives a run, and no run that was cut short looks finished.

A backend that ends its process (C exit(0), os._exit, a segfault, SIGKILL) makes its case an error
and the run exit 1, with results files written whole; a run stopped by SIGTERM or SIGHUP kills its
workers, their commands and whatever those started, removes its temporary directories and leaves
its results files saying that it did not finish, which `baseline update` and `--rerun-failed`
refuse.  Every process a run starts carries a marker in its environment; /proc is scanned for it.
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from conftest import REPO, run_cli
from harness.backends import wrap_backend
from harness.backends.exec_backend import ExecBackend
from harness.judge.runner import run_case

TESTS = REPO / "tests"
OPCASE = [sys.executable, "-c", "import sys; from harness.cli import main; sys.argv[0] = 'opcase'; main()"]
BOUNDARY = REPO / "cases" / "psamask_forward" / "boundary"
ONE_CASE = BOUNDARY / "map_1x1-psa_type0-float32.opcase"
TWO_CASES = [ONE_CASE, BOUNDARY / "map_1x1-psa_type1-float32.opcase"]
MARKER = "OPCASE_TEST_MARKER"
SLEEP_600 = "exec:sh -c 'sleep 600'"
# Sleeps in the calls only: its `--list-supported` fails at once (every kernel is tried).
CALLS_SLEEP_600 = """exec:sh -c '[ "$0" = --list-supported ] && exit 1; sleep 600'"""
STALE_JSON = json.dumps({"complete": True, "backend": "ending_backends:x", "summary": {"ok": True}, "cases": []})
STALE_JUNIT = '<testsuites name="stale" tests="0" failures="0" errors="0" skipped="0" />\n'


@pytest.fixture
def marker():
    """A marker of the test's own; whatever carries it is killed when the test ends, so that a
    failing test leaves no process behind (a passing one left none: it checks leftovers)."""
    value = uuid.uuid4().hex
    yield value
    for line in marked(value):
        with contextlib.suppress(OSError):
            os.kill(int(line.partition(":")[0]), signal.SIGKILL)


def default_signals() -> None:
    """In the child, before opcase starts: the dispositions and mask a login shell gives, whatever
    the test run inherited (under nohup SIGHUP is ignored, and an ignored signal stays ignored
    across exec), so that a test that sends a signal sees what opcase makes of it."""
    for signum in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM, signal.SIGQUIT, signal.SIGPIPE):
        signal.signal(signum, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, [])


def environment(marker: str, tmpdir: Path) -> dict:
    """opcase's environment: the test backends importable, a marker, and a TMPDIR of its own."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
            MARKER: marker, "TMPDIR": str(tmpdir)}


@contextlib.contextmanager
def start(args, marker: str, tmpdir: Path, prefix=()):
    """opcase running; killed on the way out if a failing test left it running."""
    proc = subprocess.Popen([*prefix, *OPCASE, *map(str, args)], cwd=REPO, env=environment(marker, tmpdir),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=default_signals)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


def opcase(args, marker: str, tmpdir: Path, prefix=(), timeout=120) -> subprocess.CompletedProcess:
    with start(args, marker, tmpdir, prefix) as proc:
        stdout, stderr = proc.communicate(timeout=timeout)
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def marked(marker: str) -> list[str]:
    """'PID: COMMAND LINE' of every live process whose environment carries the marker."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if f"{MARKER}={marker}".encode() in (entry / "environ").read_bytes().split(b"\0"):
                command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                found.append(f"{entry.name}: {command}")
        except OSError:
            pass   # gone meanwhile, or a zombie
    return found


def leftovers(marker: str, within: float = 3.0) -> list[str]:
    """The marked processes still alive after ``within`` seconds (killed ones take a moment to go)."""
    give_up = time.monotonic() + within
    while marked(marker) and time.monotonic() < give_up:
        time.sleep(0.05)
    return marked(marker)


def wait_for_sleepers(marker: str, count: int, proc: subprocess.Popen, within: float = 60.0) -> None:
    give_up = time.monotonic() + within
    while sum(": sleep 600" in p for p in marked(marker)) < count:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < give_up, marked(marker)
        time.sleep(0.05)


def stale_results(tmp_path: Path) -> tuple[Path, Path]:
    report, junit = tmp_path / "results.json", tmp_path / "junit.xml"
    report.write_text(STALE_JSON)
    junit.write_text(STALE_JUNIT)
    return report, junit


def assert_marked_incomplete(report: Path, junit: Path) -> None:
    doc = json.loads(report.read_text())
    assert doc["complete"] is False and doc["summary"]["ok"] is False and doc["cases"] == []
    root = ET.parse(junit).getroot()
    assert root.get("errors") == "1"
    assert root.find("testsuite/testcase/error").get("type") == "incomplete"


# --------------------------------------------------------------------------- item 2: a backend ends its process

@pytest.mark.parametrize("backend, says", [
    ("c_exit_0", "worker exited with status 0"),
    ("os_exit_0", "worker exited with status 0"),
    ("segfault", "worker killed by SIGSEGV"),
    ("sigkill", "worker killed by SIGKILL"),
])
def test_a_backend_that_ends_its_process_is_an_error_with_fresh_results(tmp_path, marker, backend, says):
    report, junit = stale_results(tmp_path)
    done = opcase(["run", ONE_CASE, "--backend", f"ending_backends:{backend}", "--json", report, "--junit", junit],
                  marker, tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1] == "1 cases: 1 error"
    doc = json.loads(report.read_text())
    assert doc["complete"] is True and doc["summary"]["ok"] is False
    assert [(c["status"], c["message"].splitlines()[0]) for c in doc["cases"]] == [("error", says)]
    assert doc["run"]["in_process"] is False
    root = ET.parse(junit).getroot()
    assert root.get("errors") == "1" and root.find("testsuite/testcase/error").get("message") == says


def test_a_backend_that_exits_while_loading_cannot_be_loaded(tmp_path, marker):
    report, junit = stale_results(tmp_path)
    done = opcase(["run", ONE_CASE, "--backend", "exits_while_loading:run", "--json", report, "--junit", junit],
                  marker, tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.splitlines() == ["Error: backend 'exits_while_loading:run' cannot be loaded: its worker "
                                        "process exited with status 0 while loading it; its last output: "
                                        "initialising the device"]
    assert_marked_incomplete(report, junit)


def test_a_foreign_backend_cannot_run_in_the_judges_process():
    """--in-process is gone: the code being judged never shares a process with the judge."""
    result = run_cli(ONE_CASE, "--backend", "ending_backends:c_exit_0", "--in-process")
    assert result.exit_code == 2 and "No such option '--in-process'" in result.output


def test_a_killed_run_leaves_results_that_are_refused_and_a_directory_the_next_run_removes(tmp_path, marker):
    """SIGKILL runs no cleanup: the results files say the run did not finish, and its workers'
    directory goes at the next run, whatever backend that one runs."""
    report, junit = stale_results(tmp_path)
    with start(["run", ONE_CASE, "--backend", "ending_backends:starts_helper_and_hangs", "--json", report,
                "--junit", junit], marker, tmp_path) as proc:
        give_up = time.monotonic() + 60
        while not list(tmp_path.glob("opcase-workers-*/worker-1.log")) and time.monotonic() < give_up:
            time.sleep(0.1)
        time.sleep(1.0)
        proc.kill()
        proc.wait(30)
    assert list(tmp_path.glob("opcase-workers-*"))
    assert_marked_incomplete(report, junit)
    for args in (["baseline", "update", report, "-o", tmp_path / "baseline.json"],
                 ["run", "--rerun-failed", report, "--backend", "reference"]):
        done = opcase(args, marker, tmp_path)
        assert done.returncode == 2, done.stdout + done.stderr
        assert done.stderr.splitlines() == [f"Error: {'--rerun-failed: ' if args[0] == 'run' else ''}{report}: "
                                            f"the run that wrote these results did not finish; run it again"]
    assert not (tmp_path / "baseline.json").exists()
    done = opcase(["run", ONE_CASE, "--backend", "reference"], marker, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert list(tmp_path.glob("opcase-workers-*")) == []
    give_up = time.monotonic() + 10
    while leftovers(marker) and time.monotonic() < give_up:   # the workers follow their parent
        time.sleep(0.1)
    assert leftovers(marker) == []


def test_a_finished_run_replaces_stale_results_with_complete_ones(tmp_path, marker):
    report, junit = stale_results(tmp_path)
    done = opcase(["run", ONE_CASE, "--backend", "reference", "--json", report, "--junit", junit], marker, tmp_path)
    assert done.returncode == 0, done.stderr
    doc = json.loads(report.read_text())
    assert doc["complete"] is True and doc["run"]["in_process"] is True and len(doc["cases"]) == 1
    assert ET.parse(junit).getroot().get("tests") == "1"


# --------------------------------------------------------------------------- item 9: no process outlives a run

def test_an_exec_call_kills_what_its_command_left_running(monkeypatch, marker):
    monkeypatch.setenv(MARKER, marker)
    backend = ExecBackend(["sh", "-c", "sleep 600 & exit 3"])
    result = run_case(ONE_CASE, wrap_backend("daemon", "test", backend), "daemon")
    assert result.status == "error" and "exited with status 3" in result.message
    assert leftovers(marker) == []


def test_a_timeout_kills_the_workers_process_group(tmp_path, marker):
    report = tmp_path / "results.json"
    done = opcase(["run", ONE_CASE, "--backend", "ending_backends:starts_helper_and_hangs", "--timeout", "2",
                   "--json", report], marker, tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert json.loads(report.read_text())["cases"][0]["message"].startswith("timed out after 2 s (--timeout)")
    assert leftovers(marker) == []
    assert list(tmp_path.glob("opcase-*")) == []


@pytest.mark.slow   # waits out timeout(1)'s 8 s
def test_timeout_command_stopping_an_exec_run_leaves_no_process(tmp_path, marker):
    report, junit = stale_results(tmp_path)
    # timeout(1) sends SIGTERM after 8 s: time for opcase to start (on a busy machine) and run the command.
    done = opcase(["run", ONE_CASE, "--backend", SLEEP_600, "--json", report, "--junit", junit],
                  marker, tmp_path, prefix=["timeout", "8"])
    assert leftovers(marker) == []
    assert done.returncode == 124, done.stdout + done.stderr   # timeout(1): the command timed out
    assert done.stderr.splitlines()[-1:] == ["opcase run: stopped by SIGTERM before it finished"]
    assert list(tmp_path.glob("opcase-*")) == []
    assert_marked_incomplete(report, junit)


@pytest.mark.parametrize("backend, options, sleepers, signum", [
    ("ending_backends:starts_helper_and_hangs", ["--jobs", "2"], 2, signal.SIGTERM),
    (CALLS_SLEEP_600, ["--jobs", "2"], 2, signal.SIGTERM),
    ("ending_backends:starts_helper_and_hangs", [], 1, signal.SIGHUP),
    (CALLS_SLEEP_600, [], 1, signal.SIGHUP),
], ids=["python-jobs-TERM", "exec-jobs-TERM", "python-HUP", "exec-HUP"])
def test_a_signal_to_a_run_leaves_no_process(tmp_path, marker, backend, options, sleepers, signum):
    report, junit = stale_results(tmp_path)
    with start(["run", *TWO_CASES, "--backend", backend, *options, "--json", report, "--junit", junit],
               marker, tmp_path) as proc:
        wait_for_sleepers(marker, sleepers, proc)
        proc.send_signal(signum)
        stdout, stderr = proc.communicate(timeout=30)
    assert leftovers(marker) == []
    assert proc.returncode == 128 + signum, stdout + stderr
    assert stderr.splitlines()[-1:] == [f"opcase run: stopped by {signum.name} before it finished"]
    assert list(tmp_path.glob("opcase-*")) == []
    assert_marked_incomplete(report, junit)


def test_nohup_keeps_a_run_going_when_its_terminal_hangs_up(tmp_path, marker):
    with start(["run", ONE_CASE, "--backend", SLEEP_600], marker, tmp_path, prefix=["nohup"]) as proc:
        wait_for_sleepers(marker, 1, proc)
        proc.send_signal(signal.SIGHUP)
        time.sleep(1)
        assert proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    assert leftovers(marker) == []
    assert proc.returncode == 128 + signal.SIGTERM


@pytest.mark.parametrize("backend", ["ending_backends:starts_helper_and_hangs", CALLS_SLEEP_600])
def test_workers_and_what_they_started_die_with_a_killed_opcase(tmp_path, marker, backend):
    with start(["run", *TWO_CASES, "--backend", backend, "--jobs", "2"], marker, tmp_path) as proc:
        wait_for_sleepers(marker, 2, proc)
        proc.kill()
        proc.communicate(timeout=30)
    assert leftovers(marker, within=10) == []


def parent_of(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_bytes()
    return int(stat[stat.rfind(b")") + 2:].split()[1])


def test_a_worker_killed_outright_takes_its_command_with_it(tmp_path, marker):
    """A worker that dies without unwinding (SIGKILL here; a crash, an OOM kill) leaves its exec
    command orphaned, in a process group of its own: the judge kills it by the worker's session.
    Before, the command (and what it started) outlived the run, in whatever state it was."""
    with start(["run", *TWO_CASES, "--backend", CALLS_SLEEP_600, "--jobs", "2"], marker, tmp_path) as proc:
        wait_for_sleepers(marker, 2, proc)
        sleeper = next(int(p.partition(":")[0]) for p in marked(marker) if p.endswith(": sleep 600 "))
        command = parent_of(sleeper)       # sh -c '...; sleep 600'
        worker = parent_of(command)
        os.kill(worker, signal.SIGKILL)
        give_up = time.monotonic() + 30
        while any(p.startswith((f"{sleeper}:", f"{command}:")) for p in marked(marker)):
            assert proc.poll() is None and time.monotonic() < give_up, marked(marker)
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    assert leftovers(marker) == []
    assert proc.returncode == 128 + signal.SIGTERM


@pytest.mark.slow   # a 1000-case gen started in two processes, then stopped
def test_sigterm_to_gen_jobs_stops_it_without_leftovers(tmp_path, marker):
    out = tmp_path / "out"
    with start(["gen", REPO / "specs" / "carafe_forward.yaml", "--suite", "random", "--count", "1000",
                "--jobs", "2", "-o", out], marker, tmp_path) as proc:
        give_up = time.monotonic() + 60
        while len(list(out.rglob("*.opcase"))) < 4:   # both workers at work
            assert proc.poll() is None and time.monotonic() < give_up, proc.communicate()
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=60)
    assert leftovers(marker) == []
    assert proc.returncode == 128 + signal.SIGTERM, stdout + stderr
    assert stderr.splitlines()[-1:] == ["opcase gen: stopped by SIGTERM before it finished"]
    written = [p.name for p in out.rglob("*") if p.is_file()]
    assert written and not [name for name in written if name.endswith(".tmp")]   # no partial file


def test_a_stop_that_lands_inside_popen_still_kills_the_command(monkeypatch, marker, tmp_path):
    """A SIGTERM between Popen's fork and its return (seen in CI: a worker asked to stop while it
    started its next command, whose `sleep 600` then outlived the run) waits until the exec backend
    holds the command, so that its cleanup kills the command's group."""
    from harness.backends import exec_backend
    from harness.judge.workers import Stopped, stop_on_signals

    monkeypatch.setenv(MARKER, marker)
    real_popen = subprocess.Popen

    def popen_then_stop(*args, **kwargs):
        started = real_popen(*args, **kwargs)
        signal.raise_signal(signal.SIGTERM)   # the command runs; the caller does not hold it yet
        return started

    monkeypatch.setattr(exec_backend.subprocess, "Popen", popen_then_stop)
    log = tmp_path / "log"
    with stop_on_signals(), pytest.raises(Stopped):
        exec_backend._execute(["sh", "-c", "sleep 600"], tmp_path, log, log, None)
    monkeypatch.undo()
    assert leftovers(marker) == []


WORKER_STOPPED_WHILE_STARTING = """
import signal, socket, threading
from multiprocessing import Pipe
from harness.worker import serve

real_start = threading.Thread.start
def start_after_a_stop(thread):
    signal.raise_signal(signal.SIGTERM)   # the judge stops the worker while its lifeline thread starts
    real_start(thread)
threading.Thread.start = start_after_a_stop
jobs, results = socket.socketpair()
lifeline, _ = Pipe(duplex=False)
serve.worker_main(jobs, results, lifeline, "reference", 2, [])
"""


def test_a_worker_stopped_while_it_starts_ends_without_a_traceback():
    """Seen in CI: a worker the judge stopped while it started its lifeline thread printed a
    traceback of its _StopWorker onto opcase's terminal (before its output goes to its log)."""
    done = subprocess.run([sys.executable, "-c", WORKER_STOPPED_WHILE_STARTING], cwd=REPO, capture_output=True,
                          text=True, timeout=60, start_new_session=True)   # it kills its own group
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == -signal.SIGKILL, done.stderr   # its own group's SIGKILL: the stop's end


def test_killing_a_command_does_not_wait_on_a_lock_a_signal_left_taken():
    """A SIGTERM that raises inside Popen.wait between its lock's acquire and its `with` block leaves
    the lock taken (seen once in CI: opcase hung after `timeout 8`); the exec backend's cleanup must
    reap the command without that lock."""
    from harness.backends.exec_backend import _kill_group

    proc = subprocess.Popen(["sh", "-c", "sleep 600"], start_new_session=True)
    try:
        proc._waitpid_lock.acquire()          # what the interrupted wait left behind
        done = threading.Event()
        worker = threading.Thread(target=lambda: (_kill_group(proc), done.set()), daemon=True)
        worker.start()
        assert done.wait(10), "the cleanup waits on Popen's lock: it would hang"
        assert proc.returncode is not None
    finally:   # failing, it would leave the sleeper behind
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
