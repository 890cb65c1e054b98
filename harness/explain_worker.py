"""The backend's outputs for one case, computed where `opcase run` would compute them (`opcase explain`).

``backend_outputs`` is the one place `opcase explain` (and `opcase run --explain`) gets a backend's
outputs: opcase's own backends (reference, lowp) and exec: commands (a process of their own) run
in this process, as in `opcase run`; every other backend runs in a fresh interpreter
(``python -m harness.explain_worker``) in a process group of its own, which saves each output as a
.npy file in a temporary directory and a status file beside them.  This process reads them back
with ``allow_pickle=False`` and checks their form against the case: the backend's code never runs
here, and what it hands over is data.  A worker that dies or outlives ``timeout`` is killed with
its process group; what it printed last is quoted.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from gen.core.backend import BackendLoadError, InvalidArgument
from gen.core.casefile import CaseFileError, load
from gen.core.timing import call
from gen.core.verdict import request_for, validate_outputs
from harness.backends import load_backend
from harness.backends.exec_backend import TIMEOUT_ENV
from harness.workers import kill_process_group, runs_isolated

# What a call came to: outputs, a rejection (InvalidArgument), an exception, unsupported, or the
# worker ended without saying.
OUTPUTS, REJECTED, RAISED, UNSUPPORTED = "outputs", "rejected", "raised", "unsupported"
_STATUS_FILE = "status.json"
_LOADED_FILE = "loaded"
_POLL_S = 0.05
_TAIL_BYTES = 3000
# How long a worker may take to start and load the backend, on top of the timeout.
_STARTUP_ALLOWANCE_S = 60.0


@dataclass
class BackendCall:
    """What the backend did with one case."""
    kind: str                                   # OUTPUTS, REJECTED, RAISED or UNSUPPORTED
    message: str = ""
    outputs: dict = field(default_factory=dict)


def backend_outputs(path: Path, backend_spec: str, timeout: float | None = None) -> BackendCall:
    """The backend's outputs for the case at ``path`` (or why there are none), computed as `opcase run`
    computes them: in a worker process for every backend but opcase's own and exec: commands.
    Raises BackendLoadError when the backend cannot be loaded."""
    if runs_isolated(backend_spec):
        return _in_worker(path, backend_spec, timeout)
    previous = os.environ.get(TIMEOUT_ENV)
    if timeout is not None and backend_spec.startswith("exec:"):
        os.environ[TIMEOUT_ENV] = repr(timeout)   # the exec backend kills its own command
    try:
        return call_backend(load(path), load_backend(backend_spec))
    finally:
        if previous is None:
            os.environ.pop(TIMEOUT_ENV, None)
        else:
            os.environ[TIMEOUT_ENV] = previous


def call_backend(case, backend) -> BackendCall:
    """One call of a loaded backend on a loaded case, its outputs checked for the promised form."""
    if not backend.supports(case.op, case.dtype):
        return BackendCall(UNSUPPORTED, f"backend {backend.name} does not support {case.op} {case.dtype}")
    try:
        produced, _, _ = call(backend, request_for(case))
    except InvalidArgument as exc:
        return BackendCall(REJECTED, str(exc))
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - whatever the backend raises is reported
        return BackendCall(RAISED, f"backend raised {type(exc).__name__}: {exc}")
    problem = validate_outputs(case, produced)
    if problem:
        return BackendCall(RAISED, problem)
    return BackendCall(OUTPUTS, outputs=produced)


def _in_worker(path: Path, backend_spec: str, timeout: float | None) -> BackendCall:
    case = load(path)   # the parent's own copy: the form the outputs must have
    with tempfile.TemporaryDirectory(prefix="opcase-explain-") as scratch:
        log_path = Path(scratch) / "worker.log"
        with open(log_path, "wb") as log:
            # The worker imports what this process can (its sys.path), as run's spawned workers do.
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
            # A lifeline: the worker sees its end close when this process ends, however it ends.
            lifeline, keep = os.pipe()
            command = [sys.executable, "-m", "harness.explain_worker", str(path), backend_spec, scratch, str(lifeline)]
            try:
                worker = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                          start_new_session=True, env=env, pass_fds=(lifeline,))
            finally:
                os.close(lifeline)
        try:
            code = _wait(worker, Path(scratch) / _LOADED_FILE, timeout)
        except BaseException:
            kill_process_group(worker.pid)
            worker.wait()
            raise
        finally:
            os.close(keep)
        kill_process_group(worker.pid)   # whatever the backend started goes with its worker
        worker.wait()
        tail = _tail(log_path)
        status_path = Path(scratch) / _STATUS_FILE
        if code is None:
            return BackendCall(RAISED, f"timed out after {timeout:g} s (--timeout); worker killed" + tail)
        if not status_path.is_file():
            why = f"killed by {signal.Signals(-code).name}" if code < 0 and -code in signal.valid_signals() \
                else f"exited with status {code}"
            return BackendCall(RAISED, f"the worker process {why} before it handed over the outputs" + tail)
        status = json.loads(status_path.read_text())
        if status["kind"] == "load-error":
            raise BackendLoadError(status["message"])
        if status["kind"] != OUTPUTS:
            return BackendCall(status["kind"], status["message"])
        produced = {name: np.load(Path(scratch) / f"{index}.npy", allow_pickle=False)
                    for index, name in enumerate(case.outputs)}
    problem = validate_outputs(case, produced)
    return BackendCall(RAISED, problem) if problem else BackendCall(OUTPUTS, outputs=produced)


def _wait(worker: subprocess.Popen, loaded: Path, timeout: float | None) -> int | None:
    """The worker's exit status, or None when it loaded the backend and then outlived ``timeout``
    (or did not load it within the startup allowance plus ``timeout``)."""
    if timeout is None:
        return worker.wait()
    started = time.monotonic()
    deadline = started + _STARTUP_ALLOWANCE_S + timeout
    while True:
        try:
            return worker.wait(_POLL_S)
        except subprocess.TimeoutExpired:
            pass
        now = time.monotonic()
        if loaded.exists():
            deadline = min(deadline, loaded.stat().st_mtime - time.time() + now + timeout)
        if now >= deadline:
            return None


def _tail(log_path: Path) -> str:
    try:
        data = log_path.read_bytes()[-_TAIL_BYTES:].decode("utf-8", "replace").strip()
    except OSError:
        return ""
    return f"\noutput of the worker:\n{data}" if data else ""


def _watch_parent(lifeline: int) -> None:
    """A thread: when opcase is gone (its end of the lifeline closes, even if it was SIGKILLed), the
    worker's whole process group goes too."""
    try:
        os.read(lifeline, 1)
    except OSError:
        pass
    kill_process_group(0)


def _serve(path: str, backend_spec: str, scratch: str, lifeline: str) -> None:
    """The worker: load the backend and the case, call it once, save the outputs, then the status."""
    threading.Thread(target=_watch_parent, args=(int(lifeline),), name="opcase-lifeline", daemon=True).start()
    directory = Path(scratch)
    try:
        backend = load_backend(backend_spec)
    except BackendLoadError as exc:
        status = {"kind": "load-error", "message": str(exc)}
    else:
        (directory / _LOADED_FILE).touch()   # the timeout runs from here
        try:
            case = load(Path(path))
        except CaseFileError as exc:
            status = {"kind": RAISED, "message": str(exc)}
        else:
            done = call_backend(case, backend)
            status = {"kind": done.kind, "message": done.message}
            for index, name in enumerate(case.outputs if done.kind == OUTPUTS else ()):
                np.save(directory / f"{index}.npy", np.asarray(done.outputs[name]), allow_pickle=False)
    sys.stdout.flush()
    # The status last: its presence says that every output file is whole.
    (directory / (_STATUS_FILE + ".part")).write_text(json.dumps(status))
    os.replace(directory / (_STATUS_FILE + ".part"), directory / _STATUS_FILE)


if __name__ == "__main__":
    _serve(*sys.argv[1:5])
