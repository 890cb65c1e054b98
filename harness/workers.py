"""Running cases, in this process or in worker processes that a crash or a hang cannot take down.

In process is the fast path, for opcase's own backends (reference, lowp, exec:, whose command is
a process of its own) and for --in-process: the backend runs here, and an exception it raises is
caught, but a segfault, an exit() or an endless loop ends the run.

In workers (every other backend, --jobs N, --timeout S), each worker is a fresh interpreter
('spawn': no inherited locks, threads or device contexts) in a process group of its own, that
loads the backend by its --backend string and runs whole cases, loading, calling and judging, so
that only small result records cross the pipe.  The backend's code never runs in this process.
A worker that dies (segfault, exit(0), os._exit, the OOM killer) or spends longer than the timeout
on one case (all its repeats included) is killed with its process group; that case becomes an
error carrying the tail of the worker's output, and a fresh worker takes the next case.  A backend
that cannot be loaded, or kills the first worker while loading, is a BackendLoadError, as in process.

SIGTERM and SIGHUP (stop_on_signals) unwind the run like Ctrl-C: every worker is stopped (SIGTERM,
so that it kills its exec command's process group, then SIGKILL to its group), temporary
directories are removed, and `opcase` exits 128 + the signal's number.
"""
from __future__ import annotations

import contextlib
import faulthandler
import multiprocessing
import os
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
from collections import deque
from multiprocessing.connection import wait
from pathlib import Path
from typing import Callable

from gen.core.backend import BackendLoadError
from gen.core.casefile import CaseFileError, read_envelope
from gen.core.descriptor import describe
from gen.core.verdict import ERROR, CaseResult
from harness.backends import load_backend
from harness.runner import RunOptions, new_result, run_case

_CONTEXT = multiprocessing.get_context("spawn")
# How long a fresh worker may take to start and load the backend, on top of --timeout.
_STARTUP_ALLOWANCE_S = 60.0
# How much of a dead worker's output an error message carries.
_TAIL_BYTES = 4000
_TAIL_LINES = 20
_PLUMBING = re.compile(r'File "(<string>|.*[/\\]multiprocessing[/\\].*|.*[/\\]harness[/\\]parallel\.py)"|^Extension modules:')
_STACK_SIGNAL = getattr(signal, "SIGUSR1", None)
# How long a timed-out worker gets to write its stacks before it is killed.
_STACK_GRACE_S = 0.5
# How long a worker asked to stop (SIGTERM) gets to kill what it runs before SIGKILL to its group.
_STOP_GRACE_S = 1.0
# SIGTERM (how CI cancels a job) and SIGHUP (the terminal went away) end a run as Ctrl-C does.
STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))
# Backends whose code is opcase's own, run in process unless --jobs or --timeout ask for workers.
# Every other Python backend runs in a worker, so that whatever it does to its process (C exit(0),
# os._exit, a segfault) cannot end opcase with the wrong status or without a report.
_OWN_BACKENDS = ("reference", "lowp")


def runs_isolated(backend_spec: str) -> bool:
    """Whether a backend runs in a worker process unless --in-process says otherwise."""
    return backend_spec not in _OWN_BACKENDS and not backend_spec.startswith("exec:")


class Stopped(BaseException):
    """SIGTERM or SIGHUP arrived: unwind as Ctrl-C does (every finally runs), then exit 128 + signum.

    A BaseException, so that no ``except Exception`` (the runner's, a backend's) swallows it."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum
        self.name = signal.Signals(signum).name


@contextlib.contextmanager
def stop_on_signals():
    """Within: SIGTERM and SIGHUP raise Stopped in the main thread (once: a second one while the
    first unwinds is ignored, so that the cleanup finishes).  One that is ignored already stays
    ignored: `nohup opcase ...` outlives its terminal."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    watched = [number for number in STOP_SIGNALS if signal.getsignal(number) is not signal.SIG_IGN]

    def ignore(signum, frame):
        pass

    def stop(signum, frame):
        for number in watched:
            signal.signal(number, ignore)
        raise Stopped(signum)

    previous = {number: signal.signal(number, stop) for number in watched}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def kill_process_group(pgid: int) -> None:
    """SIGKILL every process in a group; nothing to do when it is gone already."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_cases(files: list[Path], backend, backend_spec: str, options: RunOptions,
              on_result: Callable[[CaseResult], None], jobs: int | None = None,
              timeout: float | None = None) -> tuple[list[CaseResult], str]:
    """Run every case, calling ``on_result`` as each finishes; return the results in ``files``
    order and the backend's origin.

    In this process when ``backend`` is the loaded backend and neither ``jobs`` nor ``timeout`` is
    set; otherwise in worker processes (``backend`` may be None: not loaded here), which raise
    BackendLoadError here when the backend cannot be loaded.
    """
    if backend is not None and jobs is None and timeout is None:
        results = []
        for path in files:
            results.append(run_guarded(path, backend, backend_spec, options))
            on_result(results[-1])
        return results, backend.origin
    pool = _Pool(files, backend_spec, options, jobs or 1, timeout, on_result)
    return pool.run(), pool.origin


def run_guarded(path: Path, backend, backend_spec: str, options: RunOptions) -> CaseResult:
    """run_case, with a failure of the harness itself reported on the case rather than ending the run."""
    try:
        return run_case(path, backend, backend_spec, options)
    except Exception:  # noqa: BLE001 - the backend's own exceptions are caught inside run_case
        result = new_result(path, backend_spec, options)
        identify_result(result)
        result.status, result.message = ERROR, f"internal error judging this case:\n{traceback.format_exc()}"
        return result


# --------------------------------------------------------------------------- worker side

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
    time.sleep(_STOP_GRACE_S)
    kill_process_group(0)


def _worker_main(conn, lifeline, backend_spec: str, options: RunOptions, log_path: str) -> None:
    # A process group of its own, so that killing the group takes whatever the backend started
    # with it; SIGTERM unwinds (the exec backend then kills its command's group), then the worker
    # kills its group: no process of the backend's outlives the worker.
    os.setpgrp()
    signal.signal(signal.SIGTERM, _stop_worker)
    threading.Thread(target=_watch_parent, args=(lifeline,), name="opcase-lifeline", daemon=True).start()
    try:
        _serve(conn, backend_spec, options, log_path)
    except _StopWorker:
        kill_process_group(0)


def _serve(conn, backend_spec: str, options: RunOptions, log_path: str) -> None:
    # Everything the backend prints goes to the log, so that it cannot garble the report and
    # so that its last words can be quoted if it dies.
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_TRUNC, 0o600)
    os.dup2(log, 1)
    os.dup2(log, 2)
    # Python stacks into the log on a fatal signal, and on _STACK_SIGNAL, which the parent sends
    # before killing a worker that timed out: the report then says where the backend was stuck.
    faulthandler.enable(file=sys.stderr, all_threads=True)
    if _STACK_SIGNAL is not None:
        faulthandler.register(_STACK_SIGNAL, file=sys.stderr, all_threads=True)
    try:
        backend = load_backend(backend_spec)
    except BackendLoadError as exc:
        conn.send(("load-error", str(exc)))
        return
    conn.send(("ready", backend.origin))
    while True:
        try:
            job = conn.recv()
        except EOFError:
            return
        if job is None:
            return
        index, path = job
        os.ftruncate(log, 0)
        result = run_guarded(Path(path), backend, backend_spec, options)
        sys.stdout.flush()
        sys.stderr.flush()
        conn.send(("done", index, result.to_json()))


# --------------------------------------------------------------------------- parent side

class _Worker:
    def __init__(self, backend_spec: str, options: RunOptions, log_dir: str, number: int):
        self.log_path = os.path.join(log_dir, f"worker-{number}.log")
        self.conn, child_conn = _CONTEXT.Pipe()
        # Never written: the worker sees it close when this process ends, however it ends.
        child_lifeline, self.lifeline = _CONTEXT.Pipe(duplex=False)
        self.process = _CONTEXT.Process(target=_worker_main,
                                        args=(child_conn, child_lifeline, backend_spec, options, self.log_path),
                                        name=f"opcase-worker-{number}", daemon=True)
        self.process.start()
        child_conn.close()
        child_lifeline.close()
        self.ready = False
        self.case: int | None = None
        self.assigned = 0.0
        self.deadline: float | None = None
        self.born = time.monotonic()
        self.stop_deadline: float | None = None

    def assign(self, index: int, path: Path, timeout: float | None) -> None:
        self.case = index
        self.assigned = time.monotonic()
        self.deadline = time.monotonic() + timeout if timeout else None
        self.conn.send((index, str(path)))

    def output_tail(self) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(max(0, os.path.getsize(self.log_path) - _TAIL_BYTES))
                text = f.read().decode("utf-8", "replace")
        except OSError:
            return ""
        # The frames of the worker's own plumbing say nothing about the backend.
        lines = [line for line in text.splitlines() if line.strip() and not _PLUMBING.search(line)]
        return "\n".join(lines[-_TAIL_LINES:])

    def exit_description(self) -> str:
        code = self.process.exitcode
        if code is None:
            return "still running"
        if code < 0:
            try:
                return f"killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"killed by signal {-code}"
        return f"exited with status {code}"

    def dump_stacks(self) -> None:
        """Have a stuck worker write where it is to its log (it cannot refuse: a C-level handler)."""
        if _STACK_SIGNAL is None or not self.process.is_alive():
            return
        size = os.path.getsize(self.log_path) if os.path.exists(self.log_path) else 0
        os.kill(self.process.pid, _STACK_SIGNAL)
        give_up = time.monotonic() + _STACK_GRACE_S
        while time.monotonic() < give_up and os.path.getsize(self.log_path) == size:
            time.sleep(0.02)
        time.sleep(0.05)   # let the rest of the dump land

    def ask_to_stop(self) -> None:
        """SIGTERM: the worker unwinds, and a backend waiting on a command kills that command's group."""
        if self.stop_deadline is None and self.process.is_alive():
            self.stop_deadline = time.monotonic() + _STOP_GRACE_S
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.process.pid, signal.SIGTERM)

    def kill(self) -> None:
        """End the worker and everything left in its process group."""
        self.ask_to_stop()
        if self.stop_deadline is not None:
            self.process.join(max(0.0, self.stop_deadline - time.monotonic()))
        kill_process_group(self.process.pid)
        if self.process.is_alive():
            self.process.kill()   # before it made its own group
        self.process.join(5)
        self.conn.close()
        self.lifeline.close()

    def stop(self) -> None:
        try:
            self.conn.send(None)
        except OSError:
            pass
        self.process.join(5)
        self.kill()


class _Pool:
    def __init__(self, files, backend_spec, options, jobs, timeout, on_result):
        self.files, self.backend_spec, self.options = list(files), backend_spec, options
        self.jobs, self.timeout, self.on_result = jobs, timeout, on_result
        self.results: list[CaseResult | None] = [None] * len(self.files)
        self.pending = deque(range(len(self.files)))
        self.workers: list[_Worker] = []
        self.spawned = 0
        self.load_error = ""
        self.origin = ""

    def run(self) -> list[CaseResult]:
        log_dir = tempfile.mkdtemp(prefix="opcase-workers-")
        try:
            self._staff(log_dir)
            self._load_first()
            while self.pending or self._busy():
                self._staff(log_dir)
                self._dispatch()
                self._wait()
            for worker in self.workers:
                worker.stop()
            self.workers = []
        finally:
            for worker in self.workers:   # all at once: each gets the same grace
                worker.ask_to_stop()
            for worker in self.workers:
                worker.kill()
            shutil.rmtree(log_dir, ignore_errors=True)
        return [r for r in self.results if r is not None]

    def _load_first(self) -> None:
        """Wait for the first worker to load the backend: one that cannot be loaded, or that kills
        its worker while loading, raises BackendLoadError before any case is given out."""
        first = self.workers[0]
        give_up = first.born + _STARTUP_ALLOWANCE_S + (self.timeout or 0.0)
        while True:
            try:
                if first.conn.poll(max(0.0, give_up - time.monotonic())):
                    kind, detail = first.conn.recv()
                    if kind == "ready":
                        first.ready, self.origin = True, detail
                        return
                    raise BackendLoadError(detail)
            except (EOFError, OSError):
                first.process.join(5)   # it died; the exit code says how
            if first.process.exitcode is not None or time.monotonic() >= give_up:
                why = (f"its worker process {first.exit_description()}" if first.process.exitcode is not None
                       else f"its worker process did not load it in {give_up - first.born:g} s")
                # One line, as every load error; what the backend printed shows in process.
                raise BackendLoadError(f"backend {self.backend_spec!r} cannot be loaded: {why} while loading it"
                                       + ("; --in-process shows its output" if first.output_tail() else ""))

    def _busy(self) -> int:
        return sum(w.case is not None for w in self.workers)

    def _staff(self, log_dir: str) -> None:
        if self.load_error:
            while self.pending:
                self._error(self.pending.popleft(), f"backend cannot be loaded in a worker process: {self.load_error}")
            return
        # At least one, to load the backend even when there is no case to run.
        while len(self.workers) < max(min(self.jobs, len(self.pending) + self._busy()), not self.spawned):
            self.spawned += 1
            self.workers.append(_Worker(self.backend_spec, self.options, log_dir, self.spawned))

    def _dispatch(self) -> None:
        for worker in self.workers:
            if worker.ready and worker.case is None and self.pending:
                index = self.pending.popleft()
                worker.assign(index, self.files[index], self.timeout)

    def _wait(self) -> None:
        if not self.workers:
            return
        now = time.monotonic()
        limits = [w.deadline if w.ready else w.born + _STARTUP_ALLOWANCE_S + (self.timeout or 0.0)
                  for w in self.workers if w.deadline is not None or not w.ready]
        wait([w.conn for w in self.workers] + [w.process.sentinel for w in self.workers],
             max(0.0, min(limits) - now) if limits else None)
        for worker in list(self.workers):
            self._service(worker)

    def _service(self, worker: _Worker) -> None:
        try:
            while worker.conn.poll():
                message = worker.conn.recv()
                if message[0] == "ready":
                    worker.ready, self.origin = True, message[1]
                elif message[0] == "load-error":
                    self.load_error = message[1]
                else:
                    _, index, doc = message
                    worker.case = worker.deadline = None
                    self._finish(index, CaseResult.from_json(doc))
        except (EOFError, OSError):
            pass   # it died; the exit code says how
        now = time.monotonic()
        if worker.process.exitcode is not None or self.load_error and not worker.ready:
            self._retire(worker, f"worker {worker.exit_description()}")
        elif worker.deadline is not None and now >= worker.deadline:
            worker.dump_stacks()
            self._retire(worker, f"timed out after {self.timeout:g} s (--timeout); worker killed")
        elif not worker.ready and now >= worker.born + _STARTUP_ALLOWANCE_S + (self.timeout or 0.0):
            self._retire(worker, "worker did not finish loading the backend in time; killed")

    def _retire(self, worker: _Worker, why: str) -> None:
        """Kill a worker and charge its case (or, if it never got going, the next one) with ``why``."""
        worker.kill()
        self.workers.remove(worker)
        if self.load_error:
            return
        index = worker.case
        if index is None and not worker.ready and self.pending:
            # Dying before it took a case still costs one, so that a backend that always kills its
            # worker at load time ends the run instead of looping.
            index = self.pending.popleft()
            why = f"{why} while loading the backend"
        if index is None:
            return
        tail = worker.output_tail()
        # The case's wall time: from when the worker got it (or was started, for one it died loading).
        since = worker.assigned if worker.case is not None else worker.born
        self._error(index, why + (f"\noutput of the worker before it ended:\n{tail}" if tail else ""),
                    time.monotonic() - since)

    def _error(self, index: int, message: str, wall_seconds: float = 0.0) -> None:
        result = new_result(self.files[index], self.backend_spec, self.options)
        identify_result(result)
        result.status, result.message, result.wall_seconds = ERROR, message, wall_seconds
        self._finish(index, result)

    def _finish(self, index: int, result: CaseResult) -> None:
        self.results[index] = result
        self.on_result(result)


def identify_result(result: CaseResult) -> None:
    """Fill in op/suite/name/dtype from the case file's header, for a case whose worker died."""
    try:
        msg = read_envelope(Path(result.path))
        result.op, result.suite, result.name, result.dtype = msg.op, msg.suite, msg.name, msg.dtype
        result.descriptor = describe(msg.op, msg.suite, msg.name, msg.seed, msg.note)
    except CaseFileError:
        result.name = Path(result.path).name
