"""A backend called in a worker process one call at a time (gen's baseline, explain, shrink): the
judge's process never imports it."""
from __future__ import annotations

from multiprocessing.connection import wait
import multiprocessing.util
import os
import shutil
import time

import numpy as np

from gen.core.backend import Backend, BackendLoadError, InvalidArgument, Request
from harness.backends import load_backend
from harness.judge.worker_process import (CHANNEL_BROKE, LOAD_ERROR, LOADED, STARTUP_ALLOWANCE_S, WorkerProcess,
                                          called_of_frame, make_run_dir, runs_isolated)
from harness.worker import case_job, channel
from harness.worker.calling import OUTPUTS, REJECTED
from harness.worker.channel import ChannelError


class BackendFailed(Exception):
    """A foreign backend's worker died, hung past its timeout, or broke the channel during a call."""


class IsolatedBackend:
    """A foreign backend, called one request at a time in a worker process (as `opcase run` runs
    it): for the commands that make calls of their own (power's mutants, gen's and import's
    dynamic thresholds).  ``run`` returns the outputs as read-only arrays mapped from the sealed
    memory the worker hands over, after checking them against the shapes and dtypes the request
    asks for; the backend's InvalidArgument comes back as InvalidArgument, anything else it
    raises, and a worker that dies or exceeds ``timeout``, as BackendFailed.  A fresh worker
    takes the next call.  ``close`` ends the worker and removes its directory."""

    def __init__(self, backend_spec: str, timeout: float | None = None):
        self.spec, self.timeout = backend_spec, timeout
        self.name, self.origin, self.measures_time = backend_spec, "", False
        self.worker: WorkerProcess | None = None
        self.spawned = 0
        self.busy = False   # a job sent, its frame not yet back: the worker cannot stop on end of jobs
        self.log_dir = make_run_dir()
        self._finalizer = multiprocessing.util.Finalize(self, _close_isolated, (self,), exitpriority=10)
        self._start()   # BackendLoadError now, as load_backend would

    def backend(self) -> Backend:
        return Backend(name=self.spec, origin=self.origin, run=self.run, supports=self.supports)

    def supports(self, op: str, dtype: str) -> bool:
        """The backend's own supports(), asked in its worker (its exception comes back as BackendFailed)."""
        frame = self._ask({"kind": "supports", "op": op, "dtype": dtype}, ())
        if frame.get("kind") != "supports" or not isinstance(frame.get("answer"), bool):
            self._fail("its worker sent frames out of turn; worker replaced")
        if frame.get("message"):
            raise BackendFailed(str(frame["message"]))
        return frame["answer"]

    def _start(self) -> WorkerProcess:
        if self.worker is None:
            self.spawned += 1
            worker = WorkerProcess(self.spec, self.log_dir, self.spawned)
            outcome, detail = worker.await_loaded(worker.born + STARTUP_ALLOWANCE_S)
            if outcome != LOADED:
                worker.kill()
                if outcome == LOAD_ERROR:
                    raise BackendLoadError(detail)
                if outcome == CHANNEL_BROKE:
                    raise BackendLoadError(f"backend {self.spec!r} cannot be loaded: its worker's channel broke "
                                           f"({detail})")
                raise BackendLoadError(f"backend {self.spec!r} cannot be loaded: its worker process "
                                       f"{worker.exit_description()} while loading it")
            self.origin = detail
            self.worker = worker
        return self.worker

    def run(self, request: Request) -> dict:
        fds = []
        try:
            inputs = []
            for name, array in request.inputs.items():
                fds.append(channel.sealed(name, array))
                inputs.append([name, np.asarray(array).dtype.str, [int(n) for n in np.shape(array)]])
            frame = self._ask({"kind": "call", "op": request.op, "params": case_job.params_to_json(request.params),
                               "inputs": inputs, "layouts": dict(request.layouts),
                               "outputs": {n: [np.dtype(o.dtype).str, [int(d) for d in o.shape], o.layout]
                                           for n, o in request.outputs.items()}}, fds)
        finally:
            for fd in fds:
                os.close(fd)
        if frame.get("kind") != "called":
            self._fail("its worker sent frames out of turn; worker replaced")
        wanted = {n: (o.dtype, o.shape) for n, o in request.outputs.items()}
        try:
            called = called_of_frame(self.worker, frame, wanted)
        except ChannelError as exc:
            self._fail(f"its worker's channel broke ({exc}); worker replaced")
        if called.outcome == REJECTED:
            raise InvalidArgument(called.message)
        if called.outcome != OUTPUTS:
            raise BackendFailed(called.message)
        return called.outputs

    def _ask(self, job: dict, fds) -> dict:
        """Send one job, wait (at most the timeout) for its one frame."""
        worker = self._start()
        self.busy = True
        try:
            worker.send(job, fds)
        except OSError as exc:
            self._fail(worker.unreachable(f"cannot reach its worker ({exc})"))
        deadline = time.monotonic() + self.timeout if self.timeout else None
        while True:
            limits = [t for t in (deadline, worker.reader.deadline()) if t is not None]
            wait([worker.results, worker.process.sentinel], max(0.0, min(limits) - time.monotonic()) if limits else None)
            try:
                frames = worker.frames()
            except ChannelError as exc:
                self._fail(f"its worker's channel broke ({exc}); worker replaced")
            if frames:
                break
            if worker.reader.closed or worker.process.exitcode is not None:
                worker.process.join(1)
                self._fail(f"worker {worker.exit_description()}")
            if deadline is not None and time.monotonic() >= deadline:
                worker.dump_stacks()
                self._fail(f"timed out after {self.timeout:g} s (--timeout); worker killed")
        self.busy = False
        if len(frames) > 1:
            self._fail("its worker sent frames out of turn; worker replaced")
        return frames[0]

    def _fail(self, why: str):
        tail = self.worker.output_tail() if self.worker is not None else ""
        self._drop()
        raise BackendFailed(f"backend {self.spec}: {why}" + (f"\noutput of the worker before it ended:\n{tail}"
                                                              if tail else ""))

    def _drop(self) -> None:
        if self.worker is not None:
            self.worker.kill()
            self.worker = None
        self.busy = False

    def close(self) -> None:
        self._finalizer()


def _close_isolated(isolated: IsolatedBackend) -> None:
    if isolated.worker is not None:
        # One left in a call (a signal unwound the wait for it) would not read the end of its jobs:
        # SIGTERM, its grace, then SIGKILL to its group, at once rather than after a polite wait.
        isolated.worker.kill() if isolated.busy else isolated.worker.stop()
        isolated.worker = None
    shutil.rmtree(isolated.log_dir, ignore_errors=True)


def load_apart(backend_spec: str, timeout: float | None = None) -> Backend:
    """load_backend for the commands that call a backend themselves: opcase's own backends load
    here, any other runs in a worker process (IsolatedBackend)."""
    if not runs_isolated(backend_spec):
        return load_backend(backend_spec)
    return IsolatedBackend(backend_spec, timeout).backend()


def check_loads(backend_spec: str, timeout: float | None = None) -> None:
    """BackendLoadError now if ``backend_spec`` cannot be loaded (where load_apart would load it)."""
    if runs_isolated(backend_spec):
        IsolatedBackend(backend_spec, timeout).close()
    else:
        load_backend(backend_spec)
