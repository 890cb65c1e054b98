"""The worker process's own side: its main loop, which takes one job at a time from the judge's
channel, calls the backend (harness.worker.calling), hands the outputs back as sealed memory files,
and stops when the judge goes or asks."""
from __future__ import annotations

import contextlib
import faulthandler
import os
import signal
import socket
import sys
import threading
import time

import numpy as np

from gen.core.backend import BackendLoadError, Request, TensorInfo
from gen.core.timing import TimingPlan
from gen.core.verdict import validate_outputs
from harness.backends import load_backend
from harness.worker import case_job
from harness.worker import channel
from harness.worker.calling import Called, OUTPUTS, RAISED, call_case, judged_call
from harness.worker.process_group import kill_own_session


STACK_SIGNAL = getattr(signal, "SIGUSR1", None)


# How long a worker asked to stop (SIGTERM) gets to kill what it runs before SIGKILL to its group.
STOP_GRACE_S = 1.0


class _StopWorker(BaseException):
    """The parent asked this worker to stop (SIGTERM): unwind, killing what the backend runs."""


def _stop_worker(signum, frame):
    raise _StopWorker()


def _watch_parent(lifeline) -> None:
    """A thread: when opcase is gone (its end of the lifeline closes, even if it was SIGKILLed),
    stop as at SIGTERM, and kill the whole group should the main thread not get there in time."""
    try:
        lifeline.recv()
    except (EOFError, OSError):
        pass
    # To the main thread itself, so that a wait there (on an exec command) is interrupted.
    signal.pthread_kill(threading.main_thread().ident, signal.SIGTERM)
    time.sleep(STOP_GRACE_S)
    kill_own_session()


def worker_main(jobs, results, lifeline, backend_spec: str, log: int, layers: list[str],
                exec_timeout: float | None = None) -> None:
    # Started by harness.worker.confine.worker_entry: leading a session of its own (killing the
    # session takes whatever the backend started; SIGTERM unwinds, the exec backend then kills its
    # command's group, then the worker kills the rest of its session and its group: no process of
    # the backend's outlives the worker), its log open, confined.
    # The handler is set inside the try: a stop that comes while the lifeline thread starts (the
    # judge stopping a worker that is still starting, seen in CI) unwinds quietly, not as a
    # traceback on opcase's terminal.  One before the handler is set ends the worker as SIGTERM does.
    try:
        signal.signal(signal.SIGTERM, _stop_worker)
        threading.Thread(target=_watch_parent, args=(lifeline,), name="opcase-lifeline", daemon=True).start()
        _serve(socket.socket(fileno=os.dup(jobs.fileno())), socket.socket(fileno=os.dup(results.fileno())),
               backend_spec, log, layers, exec_timeout)
    except _StopWorker:
        kill_own_session()


def _serve(jobs: socket.socket, results: socket.socket, backend_spec: str, log: int, layers: list[str],
           exec_timeout: float | None) -> None:
    # Everything the backend prints goes to the log, so that it cannot garble the report and
    # so that its last words can be quoted if it dies.
    os.dup2(log, 1)
    os.dup2(log, 2)
    # Python stacks into the log on a fatal signal, and on STACK_SIGNAL, which the parent sends
    # before killing a worker that timed out: the report then says where the backend was stuck.
    faulthandler.enable(file=sys.stderr, all_threads=True)
    if STACK_SIGNAL is not None:
        faulthandler.register(STACK_SIGNAL, file=sys.stderr, all_threads=True)
    try:
        backend = load_backend(backend_spec, exec_timeout)
    except BackendLoadError as exc:
        channel.send(results, {"kind": "load-error", "message": channel.clip(str(exc))})
        return
    channel.send(results, {"kind": "ready", "origin": channel.clip(backend.origin), "confined": layers})
    while True:
        job, fds = channel.receive(jobs)
        if job is None:
            return
        os.ftruncate(log, 0)
        if job.get("kind") == "case":
            _case_job(backend, job, fds, jobs, results)
            fds = []   # taken over
        elif job.get("kind") == "call":
            _call_job(backend, job, fds, results)
        elif job.get("kind") == "supports":
            try:
                channel.send(results, {"kind": "supports", "answer": bool(backend.supports(job["op"], job["dtype"]))})
            except Exception as exc:  # noqa: BLE001 - a broken supports() is the backend's error
                channel.send(results, {"kind": "supports", "answer": False,
                                       "message": channel.clip(f"backend supports() raised {type(exc).__name__}: {exc}")})
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        sys.stdout.flush()
        sys.stderr.flush()


class _Outbox:
    """Frames to opcase, each output a sealed memory file whose descriptor rides with its frame;
    sent together at ``flush``, so that a case costs opcase one wake-up, not one per frame."""

    def __init__(self, results: socket.socket):
        self.results, self.docs, self.fds = results, [], []

    def add(self, kind: str, fields: dict, outputs: dict | None = None) -> None:
        described, fds = {}, []
        try:
            for name, array in (outputs or {}).items():
                fds.append(channel.sealed(name, array))
                described[name] = channel.describe(array)
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise
        self.fds += fds
        self.docs.append({"kind": kind, **fields, "outputs": described, "fds": len(fds)})

    def flush(self) -> None:
        try:
            channel.send(self.results, self.docs, self.fds)
        finally:
            for fd in self.fds:
                os.close(fd)
            self.docs, self.fds = [], []


def _case_job(backend, job: dict, fds: list[int], jobs: socket.socket, results: socket.socket) -> None:
    """Call the backend on one case (harness.worker.calling.call_case) and hand what it did over: the
    judged call at once under --bitwise (each further call is compared with it as it comes),
    else with the end of the case."""
    outbox = _Outbox(results)
    case = case_job.unpack(job, fds)
    if isinstance(case, str):
        outbox.add("first", {"outcome": RAISED, "message": channel.clip(case), "seconds": 0.0})
        outbox.add("end", {})
        outbox.flush()
        return

    def first(called: Called) -> None:
        outbox.add("first", {"outcome": called.outcome, "message": channel.clip(called.message),
                             "seconds": called.seconds}, called.outputs if called.outcome == OUTPUTS else None)
        if job["bitwise"]:
            outbox.flush()

    def compare(number: int, outputs: dict) -> str:
        outbox.add("repeat", {"call": number}, outputs)
        outbox.flush()
        answer, _ = channel.receive(jobs)
        if answer is None:
            raise _StopWorker()
        return str(answer.get("problem", ""))

    timed = call_case(backend, case, TimingPlan(*job["timing"]), first, compare if job["bitwise"] else None,
                      decoy=job.get("decoy") is not False)
    outbox.add("end", {} if timed is None else {"timing": timed.timing, "problem": channel.clip(timed.problem)})
    outbox.flush()


def _call_job(backend, job: dict, fds: list[int], results: socket.socket) -> None:
    """One call that opcase made up (IsolatedBackend): inputs arrive as sealed memory files."""
    inputs = {}
    for (name, dtype, shape), fd in zip(job["inputs"], fds):
        mapped = channel.map_sealed(os.dup(fd), dtype, shape)
        if isinstance(mapped, str):
            raise SystemExit(f"input {name} {mapped}")   # opcase sent it: cannot happen
        inputs[name] = mapped
    request = Request(op=job["op"], params=case_job.params_from_json(job["params"]), inputs=inputs,
                      outputs={n: TensorInfo(tuple(shape), np.dtype(dtype), layout)
                               for n, (dtype, shape, layout) in job["outputs"].items()},
                      layouts=dict(job["layouts"]))
    called = judged_call(backend, request)
    if called.outcome == OUTPUTS:
        problem = validate_outputs(request, called.outputs)   # a Request's outputs have shapes and dtypes too
        if problem:
            called = Called(RAISED, problem, called.seconds)
    outbox = _Outbox(results)
    outbox.add("called", {"outcome": called.outcome, "message": channel.clip(called.message),
                          "seconds": called.seconds}, called.outputs if called.outcome == OUTPUTS else None)
    outbox.flush()



