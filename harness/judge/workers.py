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

Each case is given out twice, to two sets of --jobs workers side by side: cold (no decoy call) and
warm (after its decoy); its result is both passes' (harness.judge.cold_pass).

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
import os
import shutil
import signal
import threading
import time
import traceback

import numpy as np

from gen.core.backend import BackendLoadError
from gen.core import case_keys
from gen.core.casefile import CaseFileError, CaseRewritten, load, read_envelope
from gen.core.descriptor import describe
from gen.core.verdict import CaseResult, ERROR
from harness.judge.cold_pass import COLD_PASS, WARM_PASS, Passes, Pending, SharedLoads
from harness.judge.kept_workers import KeptWorkers
from harness.judge.isolated import BackendFailed, IsolatedBackend, check_loads, load_apart
from harness.judge.runner import Judgement, RunOptions, new_result, run_case
from harness.judge.sealed_inputs import SealedInputs
from harness.judge.worker_process import (CHANNEL_BROKE, ENDED, LOAD_ERROR, LOADED, STARTUP_ALLOWANCE_S,
                                          WorkerProcess, called_of_frame, make_run_dir, map_outputs,
                                          remove_stale, runs_isolated, send_case)
from harness.worker.calling import Called, RAISED, Timed
from harness.worker.channel import ChannelError

# Defined beside this module and re-exported: what a run, gen and the commands ask of worker processes.
__all__ = ["BackendFailed", "IsolatedBackend", "check_loads", "load_apart", "runs_isolated"]


# SIGTERM (how CI cancels a job) and SIGHUP (the terminal went away) end a run as Ctrl-C does.
STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))


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
              timeout: float | None = None, kept: KeptWorkers | None = None) -> tuple[list[CaseResult], str]:
    """Run every case, calling ``on_result`` as each finishes; return the results in ``files``
    order and the backend's origin.  ``kept``: in workers, take the idle workers a run before left
    there and leave this run's there (harness.judge.kept_workers), rather than start and stop them.

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
    pool = _Pool(files, backend_spec, options, jobs or 1, timeout, on_result, kept)
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


class _Pool:
    def __init__(self, files, backend_spec, options: RunOptions, jobs, timeout, on_result, kept=None):
        # Absolute: a backend that changes its worker's directory must not change which file it reads.
        self.files = [Path(f).absolute() for f in files]
        self.shown = list(files)   # as the user named them, for the results
        self.backend_spec, self.options = backend_spec, options
        self.jobs, self.timeout, self.on_result = jobs, timeout, on_result
        self.results: list[CaseResult | None] = [None] * len(self.files)
        # Each case twice, by two sets of workers: cold, then warm after a decoy (harness.judge.cold_pass).
        # Items, not files, go through the pool: self.passes says whose, of which pass.
        self.passes = Passes(len(self.files), options)
        # A case's file read once for both its passes, kept while the passes' items of it are in flight:
        # the cold pass is given out at most `lead` files ahead of the warm one (each pass's workers hold a
        # case under way and one queued; the judge loads one ahead).
        lead = 2 * jobs + 1
        self.pending = Pending(self.passes, lead)
        self.loads = SharedLoads(self.passes, keep=2 * lead)
        # Its inputs sealed when it is loaded (ahead of the worker that takes it), once for both passes.
        self.sealed = SealedInputs(self.passes, keep=2 * lead)
        self.inputs: dict[int, list[int]] = {}   # item -> its inputs' descriptors, until it is sent
        self.workers: list[WorkerProcess] = []
        self.judging: deque = deque()   # (index, judgement, called, timed) whose calls are over
        self.spawned = 0
        self.load_error = ""
        self.origin = ""
        self.kept: KeptWorkers | None = kept
        # The next pending case, loaded (checksums checked) while the workers start or compute, so
        # that a worker is not kept waiting on the judge's reading of a large case.
        self.ahead: tuple[int, tuple] | None = None

    def run(self) -> list[CaseResult]:
        log_dir = self.kept.run_dir() if self.kept else make_run_dir()
        if self.kept:
            self.workers = self.kept.take(self.backend_spec, self.options.exec_timeout)
            self.spawned, self.origin = self.kept.spawned, self.kept.origin
        self.spawned_before = self.spawned
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
            if self.kept:
                self.workers = self.kept.give_back(self.workers, self.origin)
            for worker in self.workers:
                worker.stop()
            self.workers = []
        finally:
            for worker in self.workers:   # all at once: each gets the same grace
                worker.ask_to_stop()
            for worker in self.workers:
                worker.kill()
            if self.kept:
                self.kept.spawned = self.spawned
            else:
                shutil.rmtree(log_dir, ignore_errors=True)
            self._close_inputs()
        return [r for r in self.results if r is not None]

    def _load_first(self) -> None:
        """Wait for the first worker to load the backend: one that cannot be loaded, or that kills
        its worker while loading, raises BackendLoadError before any case is given out."""
        first = self.workers[0]
        if first.ready:   # kept from a run before (harness.judge.kept_workers)
            return
        give_up = first.born + STARTUP_ALLOWANCE_S + (self.timeout or 0.0)
        self._load_ahead()   # while the worker imports the backend
        outcome, detail = first.await_loaded(give_up)
        if outcome == LOADED:
            self.origin = detail
            return
        if outcome == LOAD_ERROR:
            raise BackendLoadError(detail)
        if outcome == CHANNEL_BROKE:
            raise BackendLoadError(f"backend {self.backend_spec!r} cannot be loaded: its worker's channel "
                                   f"broke while loading it ({detail})")
        why = (f"its worker process {first.exit_description()}" if first.process.exitcode is not None
               else "its worker process closed its channel" if outcome == ENDED
               else f"its worker process did not load it in {give_up - first.born:g} s")
        # One line, as every load error; what it printed is in the worker's log.
        tail = first.output_tail()
        raise BackendLoadError(f"backend {self.backend_spec!r} cannot be loaded: {why} while loading it"
                               + (f"; its last output: {tail.splitlines()[-1][:200]}" if tail else ""))

    def _busy(self, of_pass: str | None = None) -> int:
        return sum(w.case is not None for w in self.workers if of_pass in (None, w.of_pass))

    def _staff(self, log_dir: str) -> None:
        if self.load_error:
            while self.pending:
                self._error(self.pending.popleft(), f"backend cannot be loaded in a worker process: {self.load_error}")
            return
        # At least one, to load the backend even when there is no case to run; --jobs of each pass.
        for of_pass in (COLD_PASS, WARM_PASS):
            staff = [w for w in self.workers if w.of_pass == of_pass]
            while len(staff) < max(min(self.jobs, self.pending.count(of_pass) + self._busy(of_pass)),
                                   self.spawned == self.spawned_before and not self.workers):
                self.spawned += 1
                staff.append(WorkerProcess(self.backend_spec, log_dir, self.spawned,
                                           self.options.exec_timeout))
                staff[-1].of_pass = of_pass
                self.workers.append(staff[-1])

    def _dispatch(self) -> None:
        # One case under way and, unless --bitwise (whose worker waits for answers on its channel)
        # or --timeout (whose clock starts when a case does), the next one queued in its channel.
        # A second case is queued only once every worker has one (a worker still starting gets its own),
        # leaving out the cold pass's while it is held near the warm one (Pending.held_back).
        deepest = 1 if self.options.bitwise or self.timeout else 2
        for depth in range(1, deepest + 1):
            if depth > 1 and not all(w.ready and w.case is not None for w in self.workers
                                     if not self.pending.held_back(w.of_pass)):
                return
            self._give_out(depth)

    def _give_out(self, depth: int) -> None:
        for worker in list(self.workers):
            while worker.ready and self.pending.to_give(worker.of_pass) \
                    and (worker.case is not None) + len(worker.queued) < depth:
                index = self.pending.next_of(worker.of_pass)
                # The judge loads the case; the worker gets its call only (harness.worker.case_job).
                judgement, settled = self._judgement(index)
                if judgement is None:
                    self._finish(index, settled)
                    continue
                try:
                    send_case(worker, judgement.case, judgement.options, self.inputs.pop(index, None))
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

    def _start_next(self, worker: WorkerProcess) -> None:
        """The worker's next queued case is now the one under way."""
        worker.case, worker.judgement, worker.settled = worker.queued.popleft()
        worker.called = None
        worker.assigned = time.monotonic()
        worker.deadline = worker.assigned + self.timeout if self.timeout else None

    def _load_ahead(self) -> None:
        if self.pending and (self.ahead is None or self.ahead[0] != self.pending[0]):
            self.ahead = (self.pending[0], self._load_judgement(self.pending[0]))

    def _judgement(self, index: int) -> tuple[Judgement | None, CaseResult | None]:
        """The case's Judgement, or its result already when it cannot be judged (the worker's
        frames for it are then read and dropped)."""
        if self.ahead is not None and self.ahead[0] == index:
            loaded, self.ahead = self.ahead[1], None
            return loaded
        return self._load_judgement(index)

    def _load_judgement(self, index: int) -> tuple[Judgement | None, CaseResult | None]:
        options, path = self.passes.options_of(index), self.files[self.passes.file_of(index)]
        result = new_result(self.shown[self.passes.file_of(index)], self.backend_spec, options)
        try:
            case = self.loads.case_of(index, lambda file: load(self.files[file], keyed=True))
        except CaseFileError as exc:
            result.status, result.message, result.name = ERROR, str(exc), Path(path).name
            if isinstance(exc, CaseRewritten):
                result.keyed, result.op, result.suite = case_keys.REFUSED, exc.op, exc.suite
                result.name = exc.name or result.name
            return None, result
        except Exception:  # noqa: BLE001 - the harness's own failure costs only this case
            return None, _internal_error(self.shown[self.passes.file_of(index)], self.backend_spec, options)
        judgement = Judgement(case, result, options)
        if judgement.refusal:
            return None, result
        try:
            fds = self.sealed.take(index, case)
        except Exception:  # noqa: BLE001 - no memory for the copy (ENOMEM, EMFILE): it costs only this case
            return None, _internal_error(self.shown[self.passes.file_of(index)], self.backend_spec, options)
        for fd in self.inputs.pop(index, []):   # loaded again (sent back to pending): the newer copy goes
            os.close(fd)
        self.inputs[index] = fds
        return judgement, None

    def _close_inputs(self) -> None:
        for fds in self.inputs.values():
            for fd in fds:
                os.close(fd)
        self.inputs.clear()
        self.sealed.close()

    def _wait(self) -> None:
        if not self.workers:
            return
        if not self.timeout:   # under --timeout the judge keeps watching the clock instead
            self._load_ahead()
        limits = [t for t in (w.wake_up() for w in self.workers) if t is not None]
        wait([w.results for w in self.workers] + [w.process.sentinel for w in self.workers],
             max(0.0, min(limits) - time.monotonic()) if limits else None)
        for worker in list(self.workers):
            self._service(worker)

    def _service(self, worker: WorkerProcess) -> None:
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
                self._finish(index, self._internal_error_of(index))
            return
        now = time.monotonic()
        if worker.process.exitcode is not None or worker.reader.closed or self.load_error and not worker.ready:
            worker.process.join(1)
            self._retire(worker, f"worker {worker.exit_description()}")
        elif worker.deadline is not None and now >= worker.deadline:
            worker.dump_stacks()
            self._retire(worker, f"timed out after {self.timeout:g} s (--timeout); worker killed")
        elif not worker.ready and now >= worker.born + STARTUP_ALLOWANCE_S + (self.timeout or 0.0):
            self._retire(worker, "worker did not finish loading the backend in time; killed")

    def _take(self, worker: WorkerProcess, frame: dict) -> None:
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
            worker.called = called_of_frame(worker, frame, wanted if judgement.case.expect == "ok" else {})
            if judgement.options.bitwise:   # repeats are compared with the judged call: judge it now
                judgement.first(worker.called, copy_outputs=False)
        elif kind == "repeat":
            if judgement.check is None and judgement.options.bitwise and judgement.goes_on():
                raise ChannelError("repeated calls came before the judged call was judged")
            mapped = map_outputs(worker, frame, wanted)
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
            if not judgement.options.bitwise:
                judgement.first(called, copy_outputs=False)
            result = judgement.end(timed)
        except Exception:  # noqa: BLE001 - the harness's own failure costs only this case
            result = self._internal_error_of(index)
        result.wall_seconds = time.monotonic() - started
        self._finish(index, result)

    def _retire(self, worker: WorkerProcess, why: str) -> None:
        """Kill a worker and charge its case (or, if it never got going, the next one) with ``why``."""
        worker.kill()
        self.workers.remove(worker)
        while worker.queued:   # sent, never started: another worker takes them
            self.pending.appendleft(worker.queued.pop()[0])
        if self.load_error or not why:
            return
        index = worker.case
        if index is None and not worker.ready and self.pending.next_of(worker.of_pass, take=False) is not None:
            # Dying before it took a case still costs one, so that a backend that always kills its
            # worker at load time ends the run instead of looping.
            index = self.pending.next_of(worker.of_pass)
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

    def _internal_error_of(self, index: int) -> CaseResult:
        return _internal_error(self.shown[self.passes.file_of(index)], self.backend_spec,
                               self.passes.options_of(index))

    def _error(self, index: int, message: str, wall_seconds: float = 0.0) -> None:
        result = new_result(self.shown[self.passes.file_of(index)], self.backend_spec, self.passes.options_of(index))
        identify_result(result)
        result.status, result.message, result.wall_seconds = ERROR, message, wall_seconds
        self._finish(index, result)

    def _finish(self, index: int, result: CaseResult) -> None:
        """One pass's result of a case; the case's, once its other pass has one too."""
        case_result = self.passes.finish(index, result)
        if case_result is not None:
            self.results[self.passes.file_of(index)] = case_result
            self.on_result(case_result)


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
