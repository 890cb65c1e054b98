"""A worker cannot reach a golden or its judge: each attack of tests/confine_backends.py ends in
errors, never a green, and the run names the layers that stopped it ("workers confined: ...").

Where this machine lacks a layer the run names it missing; the attacks that only that layer
stops are then skipped, after checking that the run says so.
"""
from __future__ import annotations

import json
import os
import re
import signal

import pytest

from harness.worker import confine
from test_processes import BOUNDARY, REPO, TWO_CASES, leftovers, marker, opcase   # noqa: F401 - marker is a fixture

LANDLOCK = confine.landlock_abi() > 0


# The judge's own pid, for the attacks to aim at (tests/confine_backends.py): sh execs opcase in its place.
_EXPORTING_ITS_PID = ("sh", "-c", 'OPCASE_TEST_JUDGE_PID=$$; export OPCASE_TEST_JUDGE_PID; exec "$@"', "sh")


def _run(tmp_path, marker, backend: str, extra=()):
    report = tmp_path / "report.json"
    os.environ["OPCASE_TEST_CASES"] = str(BOUNDARY)
    os.environ["OPCASE_TEST_JUDGE_CACHE"] = str(tmp_path / "judge-cache" / "opcase" / "native")
    try:
        done = opcase(["run", *TWO_CASES, "--backend", f"confine_backends:{backend}", "--json", report, *extra],
                      marker, tmp_path, prefix=_EXPORTING_ITS_PID, timeout=120)
    finally:
        del os.environ["OPCASE_TEST_CASES"], os.environ["OPCASE_TEST_JUDGE_CACHE"]
    return done, (json.loads(report.read_text()) if report.exists() else None)


def test_the_run_names_every_layer(tmp_path, marker):
    done, doc = _run(tmp_path, marker, "reads_by_path")
    line = next(line for line in done.stdout.splitlines() if line.startswith("workers confined: "))
    assert doc["run"]["workers_confined"] == line
    for layer in ("judge not dumpable", "private HOME and cache", "user namespace", "Landlock", "PID namespace"):
        assert layer in line
    if os.geteuid() == 0:
        assert "unprivileged user" in line
    assert ("Landlock ABI" in line) == LANDLOCK and ("Landlock: missing" in line) == (not LANDLOCK)


# Whether a fresh single-threaded process (as the worker's user: 65534 where a root worker drops to it)
# gets a user namespace here; -S keeps site-packages (and numpy's threads) out of it.
# Exit 0: a user and then a PID namespace; 2: a user namespace only; 1: neither.
_UNSHARE_PROBE = """import ctypes, os, sys
if sys.argv[1] == "nobody":
    os.setgroups([]); os.setgid(65534); os.setuid(65534)
libc = ctypes.CDLL(None, use_errno=True)
sys.exit(1 if libc.unshare(0x10000000) != 0 else 0 if libc.unshare(0x20000000) == 0 else 2)"""


def _namespaces_given(as_nobody: bool) -> set[str]:
    import subprocess
    import sys
    probe = [sys.executable, "-S", "-c", _UNSHARE_PROBE, "nobody" if as_nobody else "self"]
    return {0: {"user", "PID"}, 2: {"user"}}.get(subprocess.run(probe, timeout=30).returncode, set())


def _layers_and_given(done) -> tuple[str, set[str]]:
    """The run's "workers confined" line, and the namespaces this machine gives the worker's user."""
    line = next(line for line in done.stdout.splitlines() if line.startswith("workers confined: "))
    dropped = os.geteuid() == 0 and "unprivileged user: missing" not in line
    return line, _namespaces_given(as_nobody=dropped)


def test_the_worker_takes_a_user_namespace_where_the_machine_gives_one(tmp_path, marker):
    """The worker unshares while it still has one thread: an import that starts numpy's BLAS threads
    first made unshare fail with EINVAL, and the run said 'user namespace: missing' on a machine that
    gives every process one."""
    line, given = _layers_and_given(_run(tmp_path, marker, "reads_by_path")[0])
    if "user" not in given:
        assert "user namespace: missing (unshare: " in line, line
        pytest.skip("no user namespace for the worker's user here: the run says 'user namespace: missing'")
    assert re.search(r"(^|; )user namespace(;|$)", line.removeprefix("workers confined: ")), line


def test_the_worker_enters_a_pid_namespace_where_the_machine_gives_one(tmp_path, marker):
    """PID 2 under a reaper of its own (harness/worker/pid_namespace.py): the judge has no pid there."""
    done, doc = _run(tmp_path, marker, "reads_by_path")
    line, given = _layers_and_given(done)
    if "PID" not in given:
        assert "PID namespace: missing (" in line, line
        pytest.skip("no PID namespace for the worker's user here: the run says 'PID namespace: missing'")
    assert "PID namespace (the worker is PID 2" in line, line
    assert [c["status"] for c in doc["cases"]] == ["error", "error"]   # the attack still fails, as before


def test_a_daemon_in_a_session_of_its_own_dies_with_its_worker(tmp_path, marker):
    """setsid escapes the judge's sweep of the worker's session; the PID namespace holds it: when the
    worker's server ends, the kernel kills what is left in its namespace."""
    done, doc = _run(tmp_path, marker, "leaves_a_daemon")
    assert done.returncode == 0 and [c["status"] for c in doc["cases"]] == ["passed", "passed"], done.stdout
    if "PID namespace (" not in doc["run"]["workers_confined"]:
        pytest.skip("no PID namespace here: a process that calls setsid outlives the run (harness/README.md)")
    assert leftovers(marker) == []


@pytest.mark.parametrize("backend", ["reads_by_path", "reads_through_proc", "searches_the_filesystem"])
def test_a_worker_finds_no_golden(tmp_path, marker, backend):
    done, doc = _run(tmp_path, marker, backend, ["--jobs", "2"])
    if not LANDLOCK:
        pytest.skip("no Landlock here: the run says 'Landlock: missing', and nothing stops a same-user read")
    assert done.returncode == 1, done.stdout + done.stderr
    assert [c["status"] for c in doc["cases"]] == ["error", "error"]
    assert all("Permission denied" in c["message"] or "no case" in c["message"] for c in doc["cases"])


def test_a_worker_cannot_plant_a_library_in_the_judges_cache(tmp_path, marker):
    done, doc = _run(tmp_path, marker, "plants_a_library")
    if not LANDLOCK:
        pytest.skip("no Landlock here: gen.native's recorded hashes are what stands (test_native_goldens)")
    assert [c["status"] for c in doc["cases"]] == ["error", "error"]
    assert not (tmp_path / "judge-cache" / "opcase" / "native" / "planted.so").exists()


@pytest.mark.parametrize("backend", ["signals_the_judge", "reads_the_judges_memory", "ptraces_the_judge"])
def test_a_worker_cannot_reach_its_judge(tmp_path, marker, backend):
    done, doc = _run(tmp_path, marker, backend, ["--timeout", "60"])
    assert done.returncode == 1, done.stdout + done.stderr   # the judge lived to say so
    assert [c["status"] for c in doc["cases"]] == ["error", "error"]
    assert doc["complete"] is True
    # The judge has no pid in the worker's PID namespace (No such process); without one, the user
    # namespace, Landlock's signal scope and the judge's non-dumpability refuse (not permitted, denied).
    pid_namespace = "PID namespace (" in doc["run"]["workers_confined"]
    refusals = ("No such process",) if pid_namespace and backend != "reads_the_judges_memory" else \
        ("Operation not permitted", "Permission denied")
    assert all(any(r in c["message"] for r in refusals) for c in doc["cases"]), [c["message"] for c in doc["cases"]]
