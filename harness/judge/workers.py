"""Running cases: foreign backends in worker processes, judged in this one.

In process is the path of opcase's own backends (reference, lowp, exec:, whose command is a
process of its own): the call and the judging happen here (harness.judge.runner.run_loaded).

Every other backend runs in workers (also --jobs N, --timeout S): each worker is a fresh
interpreter ('spawn': no inherited locks, threads or device contexts) in a process group of its
own, that loads the backend by its --backend string and *only calls it* (harness.worker.calling): it
reads a case's inputs (never its goldens), calls the backend, and hands each output over as a
sealed in-memory file (harness.worker.channel.sealed: no later write, growth or shrinking) whose
descriptor travels with a small JSON frame.  This process never imports the backend's code,
never unpickles what a worker sends, maps the outputs read-only after checking their size
against the shape and dtype the case asks for, and judges them itself (harness.judge.runner.Judgement).
So a backend that patches numpy, the harness or the judge inside its own process changes only
its own outputs, as any backend may; and what it writes to the worker's descriptors is at worst
no frame (harness.worker.channel.FrameReader refuses it): its case is an error, its worker replaced.

A worker that dies (segfault, exit(0), os._exit, the OOM killer), breaks the channel, or spends
longer than the timeout on one case (all its repeats included) is killed with its process group;
that case becomes an error carrying the tail of the worker's output, and a fresh worker takes the
next case.  A backend that cannot be loaded, or kills the first worker while loading, is a
BackendLoadError, as in process.  Workers get absolute paths only, so a backend that changes
directory, environment or signal handlers changes its own worker's, nothing else.

IsolatedBackend runs single calls the same way, for the commands that call a backend on calls
they make themselves (power's mutants, gen's dynamic thresholds, import --baseline).

SIGTERM and SIGHUP (stop_on_signals) unwind the run like Ctrl-C: every worker is stopped (SIGTERM,
so that it kills its exec command's process group, then SIGKILL to its group), temporary
directories are removed, and `opcase` exits 128 + the signal's number.  The workers' directory
of a run that was SIGKILLed (nothing of it could run) is removed by the next one (remove_stale).
"""
from __future__ import annotations

from collections import deque
from multiprocessing.connection import wait
from pathlib import Path
from typing import Callable
import contextlib
import multiprocessing.util
import os
import re
import shutil
import signal
import socket
import tempfile
import threading
import time
import traceback

import numpy as np

from gen.core.backend import Backend, BackendLoadError, InvalidArgument, Request
from gen.core.casefile import CaseFileError, load, read_envelope
from gen.core.descriptor import describe
from gen.core.verdict import CaseResult, ERROR
from harness.backends import load_backend
from harness.worker import case_job
from harness.judge.runner import Judgement, RunOptions, new_result, run_case
from harness.worker import channel, confine
from harness.worker.calling import Called, OUTCOMES, OUTPUTS, RAISED, REJECTED, Timed
from harness.worker.channel import ChannelError
from harness.worker.process_group import kill_process_group
from harness.worker.serve import STACK_SIGNAL, STOP_GRACE_S

# Defined beside this module and re-exported, so that `from harness.judge.workers import NAME` keeps working.
__all__ = ["STACK_SIGNAL", "STOP_GRACE_S", "kill_process_group"]


_CONTEXT = multiprocessing.get_context("spawn")


# How long a fresh worker may take to start and load the backend, on top of --timeout.
_STARTUP_ALLOWANCE_S = 60.0


# How much of a dead worker's output an error message carries.
_TAIL_BYTES = 4000


_TAIL_LINES = 20


_PLUMBING = re.compile(r'File "(<string>|.*[/\\]multiprocessing[/\\].*|.*[/\\]harness[/\\]parallel\.py)"|^Extension modules:')


# How long a timed-out worker gets to write its stacks before it is killed.
_STACK_GRACE_S = 0.5


# SIGTERM (how CI cancels a job) and SIGHUP (the terminal went away) end a run as Ctrl-C does.
STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))


# Backends whose code is opcase's own, run in process unless --jobs or --timeout ask for workers.
# Every other Python backend runs in a worker: its code never shares a process with the judge.
# mmcv is opcase's numpy emulation of mmcv's kernels (gen/kernels/*/mmcv_emulation*.py), no foreign code either.
_OWN_BACKENDS = ("reference", "lowp", "mmcv")


# The workers' directory of a run: its name carries the run's process id (remove_stale).
_DIR_PREFIX = "opcase-workers-"


def runs_isolated(backend_spec: str) -> bool:
    """Whether a backend's code is foreign: it runs only in worker processes, never in opcase's."""
    return backend_spec not in _OWN_BACKENDS and not backend_spec.startswith("exec:")


def remove_stale() -> None:
    """Remove the workers' directories of runs that are gone (SIGKILLed: none of their cleanup ran).

    A directory is ``opcase-workers-PID-XXXX``; it is stale when no process PID lives any more
    (or, rarely, another owner's process took that number: it then waits for a later run)."""
    base = Path(tempfile.gettempdir())
    try:
        entries = list(base.glob(_DIR_PREFIX + "*"))
    except OSError:
        return
    for entry in entries:
        pid_text = entry.name[len(_DIR_PREFIX):].partition("-")[0]
        if not pid_text.isdigit() or int(pid_text) == os.getpid():
            continue
        try:
            if entry.is_symlink() or not entry.is_dir() or entry.stat().st_uid != os.getuid():
                continue
            os.kill(int(pid_text), 0)
        except ProcessLookupError:
            shutil.rmtree(entry, ignore_errors=True)
        except OSError:
            continue


def make_run_dir() -> str:
    confine.note_run(None)
    confine.protect_judge_once()
    directory = tempfile.mkdtemp(prefix=f"{_DIR_PREFIX}{os.getpid()}-")
    os.chmod(directory, 0o711)   # a worker run as another user reaches its own directory, lists none
    return directory


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


def run_cases(files: list[Path], backend, backend_spec: str, options: RunOptions,
              on_result: Callable[[CaseResult], None], jobs: int | None = None,
              timeout: float | None = None) -> tuple[list[CaseResult], str]:
    """Run every case, calling ``on_result`` as each finishes; return the results in ``files``
    order and the backend's origin.

    In this process when ``backend`` is the loaded backend, it is opcase's own (runs_isolated is
    False) and neither ``jobs`` nor ``timeout`` is set; otherwise in worker processes (``backend``
    is not used, and may be None), which raise BackendLoadError here when the backend cannot be
    loaded.  A foreign backend's code never runs in this process, even when loaded here.
    """
    remove_stale()
    if backend is not None and not runs_isolated(backend_spec) and jobs is None and timeout is None:
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
        return _internal_error(path, backend_spec, options)


def _internal_error(path, backend_spec: str, options: RunOptions) -> CaseResult:
    result = new_result(path, backend_spec, options)
    identify_result(result)
    result.status, result.message = ERROR, f"internal error judging this case:\n{traceback.format_exc()}"
    return result


class _Worker:
    def __init__(self, backend_spec: str, log_dir: str, number: int):
        self.log_path = os.path.join(log_dir, f"worker-{number}.log")
        private_dir = os.path.join(log_dir, f"worker-{number}")   # its HOME, cache and TMPDIR
        os.mkdir(private_dir, 0o700)
        self.confined: list[str] = []
        jobs_here, jobs_there = _CONTEXT.Pipe(duplex=True)        # socket pairs: descriptors can
        results_here, results_there = _CONTEXT.Pipe(duplex=True)  # travel with the frames
        # Never written: the worker sees it close when this process ends, however it ends.
        child_lifeline, self.lifeline = _CONTEXT.Pipe(duplex=False)
        self.process = _CONTEXT.Process(target=confine.worker_entry,
                                        args=(jobs_there, results_there, child_lifeline, backend_spec,
                                              self.log_path, private_dir, confine.backend_readable(backend_spec)),
                                        name=f"opcase-worker-{number}", daemon=True)
        self.process.start()
        for end in (jobs_there, results_there, child_lifeline):
            end.close()
        self.jobs = socket.socket(fileno=os.dup(jobs_here.fileno()))
        self.results = socket.socket(fileno=os.dup(results_here.fileno()))
        jobs_here.close()
        results_here.close()
        self.reader = channel.FrameReader(self.results)
        self.ready = False
        self.case: int | None = None
        self.deadline: float | None = None
        self.born = time.monotonic()
        self.stop_deadline: float | None = None
        self.judgement: Judgement | None = None   # the case under way, judged here
        self.settled: CaseResult | None = None     # or its result, when it cannot be judged
        self.called: Called | None = None          # its judged call, until the timed calls end
        # Cases sent after it, which the worker starts as soon as it is done with the one under
        # way (no wait for this process to wake up): (index, judgement, settled).
        self.queued: deque = deque()
        self.assigned = 0.0   # when the case under way started (its wall time counts from there)

    def send(self, doc: dict, fds=()) -> None:
        channel.send(self.jobs, doc, fds)

    def unreachable(self, otherwise: str) -> str:
        """Why a send to this worker failed: how it ended, once it has (it may have died of the job
        under way, or read a job before the whole of it was sent), or ``otherwise`` if it lives on."""
        self.process.join(STOP_GRACE_S)
        return f"worker {self.exit_description()}" if self.process.exitcode is not None else otherwise

    def frames(self) -> list[dict]:
        """Whole frames that arrived (ChannelError: the channel carries no frames of ours)."""
        return self.reader.read()

    def wake_up(self) -> float | None:
        """When this worker needs looking at, whatever it sends: its case's deadline, the end of
        its loading time, the deadline of a frame half arrived."""
        limits = [self.deadline, self.reader.deadline()]
        if not self.ready:
            limits.append(self.born + _STARTUP_ALLOWANCE_S)
        return min((t for t in limits if t is not None), default=None)

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
        if STACK_SIGNAL is None or not self.process.is_alive():
            return
        size = os.path.getsize(self.log_path) if os.path.exists(self.log_path) else 0
        os.kill(self.process.pid, STACK_SIGNAL)
        give_up = time.monotonic() + _STACK_GRACE_S
        while time.monotonic() < give_up and os.path.getsize(self.log_path) == size:
            time.sleep(0.02)
        time.sleep(0.05)   # let the rest of the dump land

    def ask_to_stop(self) -> None:
        """SIGTERM: the worker unwinds, and a backend waiting on a command kills that command's group."""
        if self.stop_deadline is None and self.process.is_alive():
            self.stop_deadline = time.monotonic() + STOP_GRACE_S
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
        self.reader.close()
        for end in (self.jobs, self.results, self.lifeline):
            end.close()

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            self.jobs.shutdown(socket.SHUT_WR)   # end of jobs: the worker returns
        self.process.join(5)
        self.kill()


def _map_outputs(worker: _Worker, frame: dict, wanted: dict) -> dict | str:
    """The outputs a frame hands over, mapped read-only: ``wanted`` is name -> (dtype, shape) of
    what the case asks for.  A str says why they are unusable (the case is then an error)."""
    described = frame.get("outputs")
    fds = worker.reader.take_fds(frame.get("fds", 0) if isinstance(frame.get("fds"), int) else -1)
    if not isinstance(described, dict) or list(described) != list(wanted)[:len(described)] \
            or len(fds) != len(described):
        for fd in fds:
            os.close(fd)
        if isinstance(described, dict) and set(described) - set(wanted):
            return f"backend returned outputs it was not asked for: {sorted(set(described) - set(wanted))}"
        return "the worker handed over other outputs than the case asks for"
    outputs, problem = {}, ""
    for (name, (dtype, shape)), fd in zip(wanted.items(), fds):
        if problem:
            os.close(fd)
            continue
        mapped = channel.map_sealed(fd, dtype, shape)
        if isinstance(mapped, str):
            problem = f"output '{name}' as handed over {mapped}"
        else:
            outputs[name] = mapped
    return problem or outputs


def _called(worker: _Worker, frame: dict, wanted: dict) -> Called:
    """A frame of a judged call as harness.worker.calling.Called, its outputs mapped here."""
    outcome, message, seconds = frame.get("outcome"), frame.get("message", ""), frame.get("seconds", 0.0)
    if outcome not in OUTCOMES or not isinstance(message, str) or not isinstance(seconds, (int, float)):
        raise ChannelError("a frame of the call is malformed")
    called = Called(outcome, message, float(seconds))
    if outcome == OUTPUTS and wanted:
        mapped = _map_outputs(worker, frame, wanted)
        if isinstance(mapped, str):
            return Called("invalid", mapped, float(seconds))
        called.outputs = mapped
    else:
        for fd in worker.reader.take_fds(frame.get("fds", 0) if isinstance(frame.get("fds"), int) else -1):
            os.close(fd)
    return called


class _Pool:
    def __init__(self, files, backend_spec, options: RunOptions, jobs, timeout, on_result):
        # Absolute: a backend that changes its worker's directory must not change which file it reads.
        self.files = [Path(f).absolute() for f in files]
        self.shown = list(files)   # as the user named them, for the results
        self.backend_spec, self.options = backend_spec, options
        self.jobs, self.timeout, self.on_result = jobs, timeout, on_result
        self.results: list[CaseResult | None] = [None] * len(self.files)
        self.pending = deque(range(len(self.files)))
        self.workers: list[_Worker] = []
        self.judging: deque = deque()   # (index, judgement, called, timed) whose calls are over
        self.spawned = 0
        self.load_error = ""
        self.origin = ""

    def run(self) -> list[CaseResult]:
        log_dir = make_run_dir()
        try:
            self._staff(log_dir)
            self._load_first()
            while self.pending or self._busy() or self.judging:
                self._staff(log_dir)
                self._dispatch()
                if self.judging:
                    self._judge_one()   # while the workers call the next cases
                    continue
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
        while not first.ready:
            wait([first.results, first.process.sentinel], max(0.0, min(give_up, first.wake_up() or give_up)
                                                               - time.monotonic()))
            try:
                for frame in first.frames():
                    if frame.get("kind") == "ready":
                        first.ready, self.origin = True, str(frame.get("origin", ""))
                        confine.note_run(frame.get("confined"))
                    elif frame.get("kind") == "load-error":
                        raise BackendLoadError(str(frame.get("message", "")))
            except ChannelError as exc:
                raise BackendLoadError(f"backend {self.backend_spec!r} cannot be loaded: its worker's channel "
                                       f"broke while loading it ({exc})") from None
            if first.ready:
                return
            if first.process.exitcode is not None and first.reader.closed or time.monotonic() >= give_up:
                first.process.join(5)
                why = (f"its worker process {first.exit_description()}" if first.process.exitcode is not None
                       else f"its worker process did not load it in {give_up - first.born:g} s")
                # One line, as every load error; what it printed is in the worker's log.
                tail = first.output_tail()
                raise BackendLoadError(f"backend {self.backend_spec!r} cannot be loaded: {why} while loading it"
                                       + (f"; its last output: {tail.splitlines()[-1][:200]}" if tail else ""))

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
            self.workers.append(_Worker(self.backend_spec, log_dir, self.spawned))

    def _dispatch(self) -> None:
        # One case under way and, unless --bitwise (whose worker waits for answers on its channel)
        # or --timeout (whose clock starts when a case does), the next one queued in its channel.
        # A second case is queued only once every worker has one (a worker still starting gets its own).
        deepest = 1 if self.options.bitwise or self.timeout else 2
        for depth in range(1, deepest + 1):
            if depth > 1 and not all(w.ready and w.case is not None for w in self.workers):
                return
            self._give_out(depth)

    def _give_out(self, depth: int) -> None:
        for worker in list(self.workers):
            while worker.ready and self.pending and (worker.case is not None) + len(worker.queued) < depth:
                index = self.pending.popleft()
                # The judge loads the case; the worker gets its call only (harness.worker.case_job).
                judgement, settled = self._judgement(index)
                if judgement is None:
                    self._finish(index, settled)
                    continue
                try:
                    _send_case(worker, judgement.case, self.options)
                except OSError:
                    # Its end of the channel is gone (the worker died on the case under way, or its
                    # backend closed it): this case was never sent; the worker's own case is charged.
                    self.pending.appendleft(index)
                    self._retire(worker, worker.unreachable(
                        "the worker's channel was closed under it (by its backend); worker killed"))
                    break
                # The worker starts on the case at once (or after the one under way); this process
                # reads it meanwhile.
                worker.queued.append((index, judgement, None))
                if worker.case is None:
                    self._start_next(worker)

    def _start_next(self, worker: _Worker) -> None:
        """The worker's next queued case is now the one under way."""
        worker.case, worker.judgement, worker.settled = worker.queued.popleft()
        worker.called = None
        worker.assigned = time.monotonic()
        worker.deadline = worker.assigned + self.timeout if self.timeout else None

    def _judgement(self, index: int) -> tuple[Judgement | None, CaseResult | None]:
        """The case's Judgement, or its result already when it cannot be judged (the worker's
        frames for it are then read and dropped)."""
        result = new_result(self.shown[index], self.backend_spec, self.options)
        try:
            case = load(self.files[index])
        except CaseFileError as exc:
            result.status, result.message, result.name = ERROR, str(exc), Path(self.files[index]).name
            return None, result
        except Exception:  # noqa: BLE001 - the harness's own failure costs only this case
            return None, _internal_error(self.shown[index], self.backend_spec, self.options)
        judgement = Judgement(case, result, self.options)
        return (None, result) if judgement.refusal else (judgement, None)

    def _wait(self) -> None:
        if not self.workers:
            return
        limits = [t for t in (w.wake_up() for w in self.workers) if t is not None]
        wait([w.results for w in self.workers] + [w.process.sentinel for w in self.workers],
             max(0.0, min(limits) - time.monotonic()) if limits else None)
        for worker in list(self.workers):
            self._service(worker)

    def _service(self, worker: _Worker) -> None:
        try:
            for frame in worker.frames():
                self._take(worker, frame)
        except ChannelError as exc:
            self._retire(worker, f"the worker's channel broke ({exc}): the backend wrote to it, or the worker "
                                 f"failed; worker replaced")
            return
        except Exception:  # noqa: BLE001 - the harness's own failure costs only this case
            index = worker.case
            worker.case = None
            self._retire(worker, "")
            if index is not None:
                self._finish(index, _internal_error(self.shown[index], self.backend_spec, self.options))
            return
        now = time.monotonic()
        if worker.process.exitcode is not None or worker.reader.closed or self.load_error and not worker.ready:
            worker.process.join(1)
            self._retire(worker, f"worker {worker.exit_description()}")
        elif worker.deadline is not None and now >= worker.deadline:
            worker.dump_stacks()
            self._retire(worker, f"timed out after {self.timeout:g} s (--timeout); worker killed")
        elif not worker.ready and now >= worker.born + _STARTUP_ALLOWANCE_S + (self.timeout or 0.0):
            self._retire(worker, "worker did not finish loading the backend in time; killed")

    def _take(self, worker: _Worker, frame: dict) -> None:
        """One frame from a worker: what its case's calls did."""
        kind = frame.get("kind")
        if kind == "ready" and not worker.ready:
            worker.ready, self.origin = True, str(frame.get("origin", ""))
            return
        if kind == "load-error" and not worker.ready:
            self.load_error = str(frame.get("message", ""))
            return
        judgement = worker.judgement
        if worker.case is None or kind not in ("first", "repeat", "end") \
                or (kind == "first") != (worker.called is None):
            raise ChannelError(f"a frame of kind {str(kind)[:40]!r} came out of turn")
        if judgement is None:   # a case that cannot be judged: its frames are dropped
            fds = frame.get("fds", 0)
            for fd in worker.reader.take_fds(fds if isinstance(fds, int) else -1):
                os.close(fd)
            if kind == "first":
                worker.called = Called(RAISED)
            elif kind == "repeat":
                worker.send({"kind": "go", "problem": "not judged"})
            else:
                self._finish(worker.case, worker.settled)
                worker.case = worker.deadline = worker.settled = worker.called = None
                if worker.queued:
                    self._start_next(worker)
            return
        wanted = {name: (t.dtype, t.shape) for name, t in judgement.case.outputs.items()}
        if kind == "first":
            worker.called = _called(worker, frame, wanted if judgement.case.expect == "ok" else {})
            if self.options.bitwise:   # repeats are compared with the judged call: judge it now
                judgement.first(worker.called, copy_outputs=False)
        elif kind == "repeat":
            if judgement.check is None and self.options.bitwise and judgement.goes_on():
                raise ChannelError("repeated calls came before the judged call was judged")
            mapped = _map_outputs(worker, frame, wanted)
            number = frame.get("call")
            problem = mapped if isinstance(mapped, str) else judgement.repeat(
                number if isinstance(number, int) else 0, mapped)
            del mapped
            worker.send({"kind": "go", "problem": problem})
        else:
            timing, problem = frame.get("timing"), frame.get("problem", "")
            timed = None
            if "timing" in frame or "problem" in frame:
                if not (timing is None or _is_timing(timing)) or not isinstance(problem, str) \
                        or (timing is None and not problem):
                    raise ChannelError("the timed calls' frame is malformed")
                timed = Timed(timing, problem)
            self.judging.append((worker.case, judgement, worker.called, timed, worker.assigned))
            worker.case = worker.deadline = worker.judgement = worker.called = None
            if worker.queued:
                self._start_next(worker)

    def _judge_one(self) -> None:
        index, judgement, called, timed, started = self.judging.popleft()
        try:
            if not self.options.bitwise:
                judgement.first(called, copy_outputs=False)
            result = judgement.end(timed)
        except Exception:  # noqa: BLE001 - the harness's own failure costs only this case
            result = _internal_error(self.shown[index], self.backend_spec, self.options)
        result.wall_seconds = time.monotonic() - started
        self._finish(index, result)

    def _retire(self, worker: _Worker, why: str) -> None:
        """Kill a worker and charge its case (or, if it never got going, the next one) with ``why``."""
        worker.kill()
        self.workers.remove(worker)
        while worker.queued:   # sent, never started: another worker takes them
            self.pending.appendleft(worker.queued.pop()[0])
        if self.load_error or not why:
            return
        index = worker.case
        if index is None and not worker.ready and self.pending:
            # Dying before it took a case still costs one, so that a backend that always kills its
            # worker at load time ends the run instead of looping.
            index = self.pending.popleft()
            why = f"{why} while loading the backend"
        if index is None:
            return
        if worker.settled is not None:   # it could not be judged anyway: say why
            self._finish(index, worker.settled)
            return
        tail = worker.output_tail()
        # The case's wall time: from when the worker got it (or was started, for one it died loading).
        since = worker.assigned if worker.case is not None else worker.born
        self._error(index, why + (f"\noutput of the worker before it ended:\n{tail}" if tail else ""),
                    time.monotonic() - since)

    def _error(self, index: int, message: str, wall_seconds: float = 0.0) -> None:
        result = new_result(self.shown[index], self.backend_spec, self.options)
        identify_result(result)
        result.status, result.message, result.wall_seconds = ERROR, message, wall_seconds
        self._finish(index, result)

    def _finish(self, index: int, result: CaseResult) -> None:
        self.results[index] = result
        self.on_result(result)


def _send_case(worker: _Worker, case, options: RunOptions) -> None:
    """A case's job to a worker: its call, inputs as sealed memory files, no path (harness.worker.case_job)."""
    doc, fds = case_job.pack(case, {"bitwise": options.bitwise,
                                    "timing": [options.timing.repeat, options.timing.warmup]})
    try:
        worker.send(doc, fds)
    finally:
        for fd in fds:
            os.close(fd)


def _is_timing(doc) -> bool:
    """Whether a frame's timing has the form of gen.core.timing.summarize()."""
    numbers = ("median_us", "min_us", "max_us", "spread_pct")
    return isinstance(doc, dict) and all(isinstance(doc.get(k), (int, float)) and np.isfinite(doc[k])
                                         and doc[k] >= 0 for k in numbers)


def identify_result(result: CaseResult) -> None:
    """Fill in op/suite/name/dtype from the case file's header, for a case whose worker died."""
    try:
        msg = read_envelope(Path(result.path))
        result.op, result.suite, result.name, result.dtype = msg.op, msg.suite, msg.name, msg.dtype
        result.descriptor = describe(msg.op, msg.suite, msg.name, msg.seed, msg.note)
    except CaseFileError:
        result.name = Path(result.path).name


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
        self.worker: _Worker | None = None
        self.spawned = 0
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

    def _start(self) -> _Worker:
        if self.worker is None:
            self.spawned += 1
            worker = _Worker(self.spec, self.log_dir, self.spawned)
            give_up = worker.born + _STARTUP_ALLOWANCE_S
            while not worker.ready:
                wait([worker.results, worker.process.sentinel], max(0.0, give_up - time.monotonic()))
                try:
                    for frame in worker.frames():
                        if frame.get("kind") == "ready":
                            worker.ready, self.origin = True, str(frame.get("origin", ""))
                            confine.note_run(frame.get("confined"))
                        elif frame.get("kind") == "load-error":
                            worker.kill()
                            raise BackendLoadError(str(frame.get("message", "")))
                except ChannelError as exc:
                    worker.kill()
                    raise BackendLoadError(f"backend {self.spec!r} cannot be loaded: its worker's channel broke "
                                           f"({exc})") from None
                if not worker.ready and (worker.reader.closed or time.monotonic() >= give_up):
                    worker.kill()
                    raise BackendLoadError(f"backend {self.spec!r} cannot be loaded: its worker process "
                                           f"{worker.exit_description()} while loading it")
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
            called = _called(self.worker, frame, wanted)
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

    def close(self) -> None:
        self._finalizer()


def _close_isolated(isolated: IsolatedBackend) -> None:
    if isolated.worker is not None:
        isolated.worker.stop()
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
