"""The judge's handle on one worker process: starting it (confined, in a process group of its own,
with its log), sending it a job, reading its frames back, stopping it; and the run directories
workers keep their logs in."""
from __future__ import annotations

from collections import deque
from multiprocessing.connection import wait
from pathlib import Path
import contextlib
import multiprocessing.util
import os
import re
import shutil
import signal
import socket
import tempfile
import time

from gen.core.verdict import CaseResult
from harness.judge.runner import Judgement, RunOptions
from harness.worker import case_job, channel, confine
from harness.worker.calling import Called, OUTCOMES, OUTPUTS
from harness.worker.channel import ChannelError
from harness.worker.process_group import kill_process_group, kill_session
from harness.worker.serve import STACK_SIGNAL, STOP_GRACE_S

# How long the judge waits for a worker it asked to stop before it kills the worker's session.  Longer
# than the worker's own grace, so that a worker unwinds (its backend's cleanup runs) under load too:
# several workers unwinding at once, the cold and the warm pass's.  A worker that exits sooner ends
# the wait at once; whatever it leaves, the judge's sweep of its session kills.
UNWIND_WAIT_S = 5 * STOP_GRACE_S


_CONTEXT = multiprocessing.get_context("spawn")


# How long a fresh worker may take to start and load the backend, on top of --timeout.
STARTUP_ALLOWANCE_S = 60.0


# WorkerProcess.await_loaded's outcomes.
LOADED, LOAD_ERROR, CHANNEL_BROKE, ENDED, LATE = "loaded", "load-error", "channel-broke", "ended", "late"


# How much of a dead worker's output an error message carries.
_TAIL_BYTES = 4000


_TAIL_LINES = 20


_PLUMBING = re.compile(r'File "(<string>|.*[/\\]multiprocessing[/\\].*|.*[/\\]harness[/\\]parallel\.py)"|^Extension modules:')


# How long a timed-out worker gets to write its stacks before it is killed.
_STACK_GRACE_S = 0.5


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


class WorkerProcess:
    def __init__(self, backend_spec: str, log_dir: str, number: int, exec_timeout: float | None = None):
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
                                              self.log_path, private_dir, confine.backend_readable(backend_spec),
                                              exec_timeout),
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
            limits.append(self.born + STARTUP_ALLOWANCE_S)
        return min((t for t in limits if t is not None), default=None)

    def await_loaded(self, give_up: float) -> tuple[str, str]:
        """Wait for the worker's answer to loading its backend, until ``give_up`` (time.monotonic()).

        Returns (LOADED, the backend's origin), having set ``ready`` and noted the worker's confinement;
        or why not: (LOAD_ERROR, the backend's own message), (CHANNEL_BROKE, what broke), (ENDED, "") when
        the worker's channel closed (its process ended, or is ending: joined a moment), (LATE, "") at
        ``give_up``.  Each caller words these its own way; the frames of other kinds are dropped, as
        nothing is sent to a worker before it is ready."""
        while True:
            # The give-up time, or sooner the deadline of a frame half arrived (not wake_up's startup
            # allowance, which a caller's give_up may extend).
            wake = min(t for t in (give_up, self.reader.deadline()) if t is not None)
            wait([self.results, self.process.sentinel], max(0.0, wake - time.monotonic()))
            try:
                frames = self.frames()
            except ChannelError as exc:
                return CHANNEL_BROKE, str(exc)
            origin = None
            for frame in frames:
                if frame.get("kind") == "ready":
                    self.ready, origin = True, str(frame.get("origin", ""))
                    confine.note_run(frame.get("confined"))
                elif frame.get("kind") == "load-error":
                    return LOAD_ERROR, str(frame.get("message", ""))
            if origin is not None:
                return LOADED, origin
            if self.reader.closed:
                self.process.join(5)
                return ENDED, ""
            if time.monotonic() >= give_up:
                return LATE, ""

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
            self.stop_deadline = time.monotonic() + UNWIND_WAIT_S
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.process.pid, signal.SIGTERM)

    def kill(self) -> None:
        """End the worker and everything left in its session: its group, an exec command's group,
        whatever those started, even once the worker is gone (it leads a session of its own)."""
        self.ask_to_stop()
        if self.stop_deadline is not None:
            self.process.join(max(0.0, self.stop_deadline - time.monotonic()))
        kill_process_group(self.process.pid)
        if self.process.is_alive():
            self.process.kill()   # before it made its own session
        self.process.join(5)
        kill_session(self.process.pid)
        self.reader.close()
        for end in (self.jobs, self.results, self.lifeline):
            end.close()

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            self.jobs.shutdown(socket.SHUT_WR)   # end of jobs: the worker returns
        self.process.join(5)
        self.kill()


def map_outputs(worker: WorkerProcess, frame: dict, wanted: dict) -> dict | str:
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


def called_of_frame(worker: WorkerProcess, frame: dict, wanted: dict) -> Called:
    """A frame of a judged call as harness.worker.calling.Called, its outputs mapped here."""
    outcome, message, seconds = frame.get("outcome"), frame.get("message", ""), frame.get("seconds", 0.0)
    if outcome not in OUTCOMES or not isinstance(message, str) or not isinstance(seconds, (int, float)):
        raise ChannelError("a frame of the call is malformed")
    called = Called(outcome, message, float(seconds))
    if outcome == OUTPUTS and wanted:
        mapped = map_outputs(worker, frame, wanted)
        if isinstance(mapped, str):
            return Called("invalid", mapped, float(seconds))
        called.outputs = mapped
    else:
        for fd in worker.reader.take_fds(frame.get("fds", 0) if isinstance(frame.get("fds"), int) else -1):
            os.close(fd)
    return called


def send_case(worker: WorkerProcess, case, options: RunOptions, fds: list[int] | None = None) -> None:
    """A case's job to a worker: its call, inputs as sealed memory files, no path (harness.worker.case_job).
    ``fds``: its inputs sealed already (case_job.seal_inputs), closed here once sent, as are those sealed here."""
    try:
        doc, fds = case_job.pack(case, {"bitwise": options.bitwise, "decoy": options.decoy,
                                        "timing": [options.timing.repeat, options.timing.warmup]}, fds)
        worker.send(doc, fds)
    finally:
        for fd in fds or ():
            os.close(fd)
