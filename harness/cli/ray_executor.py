"""`opcase gen` and `opcase run` on a Ray cluster (`--executor ray`): one case is one Ray task.

A task does for its case exactly what a local run does (gen.jobs.write_task for gen;
harness.judge.workers.run_cases for run) and returns only the small result record: the case's arrays
move as files on storage every node sees, never through the driver.  For run, the task's process
is the judge on its node: a foreign backend runs in a worker process beneath it (as locally:
harness.judge.workers), which computes the outputs and hands them over as sealed memory on that node;
the task judges them there and sends the driver the record of a process the backend never ran
in (outputs cannot cross nodes as sealed memory, and network-scale ones should not).  Tasks run in the driver's working directory, so that relative
paths (of case files, specs, an exec: command) mean on every node what they mean here, and
results carry the same paths as a local run's.

Failures cost their case only, as with local --jobs: a task whose worker process dies, or that
runs past --timeout (it is cancelled), is an error; a task whose node is lost is submitted once
more (the scheduler places it on a live node) and its result says so; lost again, it is an
error.  Ctrl-C or SIGTERM on the driver cancels every outstanding task.

Ray is imported here only, and only when a command asks for it: without the `ray` extra
nothing else changes.
"""
from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import signal
import socket
import threading
import time
from functools import lru_cache
from pathlib import Path
from typing import Callable
from gen.core.backend import BackendLoadError
from gen.core.verdict import ERROR, CaseResult
from gen.jobs import write_task
from harness.backends import load_backend
from harness.judge.kept_workers import KeptWorkers
from harness.judge.runner import new_result
from harness.judge.workers import identify_result, run_cases, run_guarded, runs_isolated

EXTRA = "opcase[ray]"
# The keys of --resources, as Ray's task options name them.
_AMOUNTS = ("num_cpus", "num_gpus", "memory")
# Ray counts resources in units of 1e-4 (a smaller non-zero amount is its ValueError).
_RESOURCE_RESOLUTION = 1e-4
# How long the driver waits for a task that only loads the backend before the cases are sent.
_LOAD_CHECK_S = 120.0
# How long the driver tries to reach the cluster's address before it gives up.
_CONNECT_TIMEOUT_S = 10.0
# How often the driver looks for newly started tasks (the resolution of --timeout).
_POLL_S = 0.5
# How often the driver checks that a live node can still run the cases (else they would wait forever).
_FEASIBLE_EVERY_S = 10.0
# The driver's environment variables a task takes over, whatever its node was started with:
# opcase's own settings (OPCASE_SPECS, the exec backend's timeout...).
_ENV_PREFIX = "OPCASE_"


class ExecutorError(Exception):
    """Ray is missing, the cluster cannot be reached, or cannot run what was asked: a usage error."""


class TaskLost(Exception):
    """A generation task died with its worker or its node (after Ray's one retry)."""


# --------------------------------------------------------------------------- driver: setup

def parse_resources(text: str | None) -> dict:
    """--resources JSON -> Ray task options, e.g. {"num_gpus": 1} or {"resources": {"npu": 1}}."""
    options = {"num_cpus": 1}
    if text is None:
        return options
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ExecutorError(f"--resources: not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise ExecutorError("--resources: give a JSON object, e.g. '{\"num_gpus\": 1}'")
    for key, value in doc.items():
        if key in _AMOUNTS:
            options[key] = _amount(key, value)
        elif key == "resources" and isinstance(value, dict):
            builtin = sorted(set(value) & {"CPU", "GPU", "memory"})
            if builtin:
                raise ExecutorError(f"--resources: give {builtin} as num_cpus, num_gpus or memory, not in resources")
            options["resources"] = {str(name): _amount(f"resources.{name}", v) for name, v in value.items()}
        else:
            raise ExecutorError(f"--resources: unknown key {key!r}; use {', '.join(_AMOUNTS)} or "
                                f"resources (an object of custom resource amounts)")
    _cpus_needed(options)
    return options


def _amount(key: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ExecutorError(f"--resources: {key} must be a number >= 0, not {value!r}")
    if key != "memory" and 0 < value < _RESOURCE_RESOLUTION:
        raise ExecutorError(f"--resources: {key} {value!r} is below Ray's resolution of {_RESOURCE_RESOLUTION:g}")
    return value


def _cpus_needed(options: dict) -> None:
    """A task that needs no CPU is not held back by any: Ray would start every case at once."""
    if options["num_cpus"] <= 0:
        raise ExecutorError(f"--resources: num_cpus must be at least {_RESOURCE_RESOLUTION:g} (a case's task "
                            f"that needs no CPU would run at once with every other), not {options['num_cpus']!r}")


def import_ray():
    try:
        import ray
    except ImportError:
        raise ExecutorError(f"--executor ray needs Ray, which is not installed: "
                            f"python3 -m pip install '{EXTRA}'") from None
    return ray


@contextlib.contextmanager
def _connected(address: str | None):
    """A connection to the cluster at ``address`` (default: RAY_ADDRESS, or the one started on
    this machine with `ray start`); never a private cluster started on the side."""
    ray = import_ray()
    where = f"at {address}" if address else "(no --address: RAY_ADDRESS, or one started here with `ray start`)"
    _probe(address or os.environ.get("RAY_ADDRESS", ""), where)
    try:
        ray.init(address=address or "auto", log_to_driver=False, logging_level=logging.WARNING)
    except Exception as exc:  # noqa: BLE001 - Ray raises ConnectionError, RuntimeError, ValueError...
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ExecutorError(f"--executor ray: cannot connect to a Ray cluster {where}: {first}") from None
    try:
        yield ray
    finally:
        ray.shutdown()


def _probe(address: str, where: str) -> None:
    """Refuse an address nothing listens on: ray.init would retry it for minutes."""
    host, _, port = address.split("://", 1)[-1].rpartition(":")
    if not host or not port.isdigit():
        return   # "auto", "local" or no address: Ray finds the cluster itself, or says it cannot
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=_CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        raise ExecutorError(f"--executor ray: cannot connect to a Ray cluster {where}: "
                            f"{exc.strerror or exc}") from None


def _check_feasible(ray, options: dict) -> None:
    """Refuse, before any task, what no live node has: Ray would queue such tasks forever."""
    lack = _unmet(ray, options)
    if lack:
        raise ExecutorError(f"--resources: {lack}")


def _unmet(ray, options: dict) -> str:
    """What no live node of the cluster has of ``options``, or ''."""
    wanted = {"CPU": options.get("num_cpus", 0), "GPU": options.get("num_gpus", 0),
              "memory": options.get("memory", 0), **options.get("resources", {})}
    wanted = {name: amount for name, amount in wanted.items() if amount}
    nodes = [node.get("Resources", {}) for node in ray.nodes() if node.get("Alive")]
    if any(all(have.get(name, 0) >= amount for name, amount in wanted.items()) for have in nodes):
        return ""
    return (f"no node of the Ray cluster has {wanted} (its {len(nodes)} live node(s) have: "
            + "; ".join(json.dumps({k: v for k, v in have.items() if not k.startswith("node:")}) for have in nodes)
            + ")")


def _task_environment() -> dict:
    return {"cwd": os.getcwd(), "env": {k: v for k, v in os.environ.items() if k.startswith(_ENV_PREFIX)}}


@contextlib.contextmanager
def _cancelled_on_sigterm():
    """SIGTERM becomes KeyboardInterrupt while tasks are out, so that they are cancelled as on Ctrl-C
    (a handler someone else installed is left alone)."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) != signal.SIG_DFL:
        yield
        return

    def interrupt(signum, frame):
        raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")
    signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _cancel(ray, refs) -> None:
    for ref in refs:
        with contextlib.suppress(Exception):
            ray.cancel(ref, force=True)


# --------------------------------------------------------------------------- task side

def _enter(environment: dict) -> None:
    try:
        os.chdir(environment["cwd"])
    except OSError as exc:
        raise OSError(f"the driver's working directory {environment['cwd']} is not on Ray node "
                      f"{socket.gethostname()} ({exc.strerror}): run opcase from a directory on storage "
                      f"every node sees") from None
    os.environ.update(environment["env"])


@lru_cache(maxsize=None)
def _backend(backend_spec: str, exec_timeout: float | None):
    """opcase's own backends load in the task; any other is loaded only by the local worker."""
    return None if runs_isolated(backend_spec) else load_backend(backend_spec, exec_timeout)


@lru_cache(maxsize=None)
def _kept_workers() -> KeptWorkers:
    """The worker processes this Ray worker's cases share, as the cases of one local run share
    theirs (harness.judge.kept_workers): a task starts none while the last one left some idle.  They
    end with this process (an idle worker also ends when its channel to this process closes)."""
    return KeptWorkers()


def _run_task(environment: dict, path: str, backend_spec: str, options, start_log, key,
              timeout: float | None = None) -> dict:
    """Run and judge one case on whichever node Ray chose; the result record is all that returns."""
    _enter(environment)
    if start_log is not None:
        start_log.started.remote(key)
    try:
        backend = _backend(backend_spec, options.exec_timeout)
        if backend is not None and timeout is None:
            return run_guarded(Path(path), backend, backend_spec, options).to_json()
        results, _ = run_cases([Path(path)], backend, backend_spec, options, lambda result: None, jobs=1,
                               timeout=timeout, kept=_kept_workers())
    except BackendLoadError as exc:
        return _error(Path(path), backend_spec, options,
                      f"backend cannot be loaded in a Ray worker process: {exc}").to_json()
    return results[0].to_json()


def _load_task(environment: dict, backend_spec: str) -> str:
    """Load the backend as a case's task would; '' when it loads, else why not."""
    _enter(environment)
    try:
        load_backend(backend_spec)
    except BackendLoadError as exc:
        return str(exc)
    return ""


def _check_backend_loads(ray, backend_spec: str, resources: dict, environment: dict) -> None:
    """Refuse, before any case, a backend that a Ray worker cannot load (a package missing on the
    nodes): exit 2 with one line, as a local run does, rather than an error per case.  The task
    runs where a case would (same resources) in a worker process used for it alone (max_calls=1),
    so the backend's code stays out of the processes that then run cases.  One that does not
    finish within _LOAD_CHECK_S (no node free) is left to the cases."""
    ref = ray.remote(max_calls=1)(_load_task).options(max_retries=0, **resources).remote(environment, backend_spec)
    ready, _ = ray.wait([ref], num_returns=1, timeout=_LOAD_CHECK_S)
    if not ready:
        _cancel(ray, [ref])
        return
    try:
        problem = ray.get(ref)
    except ray.exceptions.RayError:
        return   # its worker died: the cases will say so, each
    if problem:
        raise ExecutorError(f"--executor ray: backend {backend_spec} cannot be loaded in a Ray worker process: "
                            f"{problem.splitlines()[0] if problem.strip() else problem}")


def _write_task(environment: dict, task) -> int:
    _enter(environment)
    return write_task(task)


class _StartLog:
    """A Ray actor on the driver's node: tasks say when they start, so that --timeout counts from
    there and not from submission (a task may wait for a free node)."""

    def __init__(self):
        self.entries = []

    def started(self, key) -> None:
        self.entries.append(key)

    def drain(self) -> list:
        entries, self.entries = self.entries, []
        return entries


def _error(path: Path, backend_spec: str, options, message: str):
    result = new_result(path, backend_spec, options)
    identify_result(result)
    result.status, result.message = ERROR, message
    return result


# --------------------------------------------------------------------------- driver: gen

def write_all(tasks: list, on_done: Callable, address: str | None, resources: dict) -> None:
    """gen.jobs.write_all on the cluster: every Task is one Ray task; report each as it finishes.

    A failure (spec or generation error) stops the run and is raised here as the task raised it."""
    with _connected(address) as ray:
        _check_feasible(ray, resources)
        # A lost node's writes are simply redone (Ray's one retry): a case file is written whole or not at all.
        remote = ray.remote(_write_task).options(max_retries=1, retry_exceptions=False, **resources)
        environment = _task_environment()
        pending = {remote.remote(environment, task): task for task in tasks}
        next_feasible_check = time.monotonic() + _FEASIBLE_EVERY_S
        with _cancelled_on_sigterm():
            try:
                while pending:
                    # With a timeout, so that a signal's handler gets to run while all tasks are busy.
                    ready, _ = ray.wait(list(pending), num_returns=1, timeout=_POLL_S)
                    for ref in ready:
                        task = pending.pop(ref)
                        on_done(task, _value(ray, ref, task))
                    if time.monotonic() >= next_feasible_check:
                        next_feasible_check = time.monotonic() + _FEASIBLE_EVERY_S
                        lack = _unmet(ray, resources)
                        if lack:
                            raise TaskLost(f"no live Ray node can write the cases any more: {lack}")
            except BaseException:
                _cancel(ray, pending)
                raise


def _value(ray, ref, task):
    try:
        return ray.get(ref)
    except ray.exceptions.RayTaskError as exc:
        raise exc.cause from None   # the generator's own error (SpecError, GenerationError, OSError...)
    except ray.exceptions.RayError as exc:
        raise TaskLost(f"the Ray task writing {task.op}/{task.suite}/{task.name} died: {_first_line(exc)}") from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


# --------------------------------------------------------------------------- driver: run

def run_on_cluster(files: list[Path], backend_spec: str, options, on_result: Callable, address: str | None,
              resources: dict, timeout: float | None = None, notify: Callable[[str], None] = print) -> list:
    """harness.judge.workers.run_cases on the cluster; results in ``files`` order, ``on_result`` as each finishes."""
    with _connected(address) as ray:
        _check_feasible(ray, resources)
        with _cancelled_on_sigterm():
            _check_backend_loads(ray, backend_spec, resources, _task_environment())
        return _Run(ray, files, backend_spec, options, on_result, resources, timeout, notify).run()


class _Run:
    def __init__(self, ray, files, backend_spec, options, on_result, resources, timeout, notify):
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
        self.ray, self.files, self.backend_spec, self.options = ray, list(files), backend_spec, options
        self.on_result, self.timeout, self.notify = on_result, timeout, notify
        self.resources = resources
        self.next_feasible_check = time.monotonic() + _FEASIBLE_EVERY_S
        self.remote = ray.remote(_run_task).options(max_retries=0, **resources)
        self.start_log = None
        if timeout is not None:
            here = ray.get_runtime_context().get_node_id()
            self.start_log = ray.remote(_StartLog).options(
                num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=False)).remote()
        self.environment = _task_environment()
        self.results: list = [None] * len(self.files)
        self.out: dict = {}             # ref -> (index, attempt)
        self.started: dict = {}         # (index, attempt) -> driver time it was seen started
        self.timed_out: set = set()     # (index, attempt) cancelled for --timeout
        self.retried: set[int] = set()

    def run(self) -> list:
        with _cancelled_on_sigterm():
            try:
                for index in range(len(self.files)):
                    self._submit(index, 0)
                while self.out:
                    refs = list(self.out)
                    ready, _ = self.ray.wait(refs, num_returns=1, timeout=_POLL_S)
                    if ready:   # and whatever else has finished meanwhile
                        ready, _ = self.ray.wait(refs, num_returns=len(refs), timeout=0)
                    for ref in ready:
                        self._collect(ref)
                    self._enforce_timeout()
                    self._check_still_feasible()
            except BaseException:
                _cancel(self.ray, self.out)
                raise
        return self.results

    def _submit(self, index: int, attempt: int) -> None:
        ref = self.remote.remote(self.environment, str(self.files[index]), self.backend_spec, self.options,
                                 self.start_log, (index, attempt), self.timeout)
        self.out[ref] = (index, attempt)

    def _collect(self, ref) -> None:
        index, attempt = self.out.pop(ref)
        self.started.pop((index, attempt), None)
        try:
            result = CaseResult.from_json(self.ray.get(ref))
        except self.ray.exceptions.RayError as exc:
            result = self._failed(index, attempt, exc)
            if result is None:
                return
        if index in self.retried and attempt == 1:
            note = "its first Ray node was lost; retried once on another node"
            result.message = f"{result.message}\n{note}" if result.message else note
        self._finish(index, result)

    def _failed(self, index: int, attempt: int, exc: Exception):
        """The error result of a task that returned none, or None when it is submitted again."""
        exceptions = self.ray.exceptions
        if (index, attempt) in self.timed_out:
            # Force-cancelling kills its worker: whatever Ray reports then, the cause is the timeout.
            return self._error(index, f"timed out after {self.timeout:g} s (--timeout); its Ray task was cancelled")
        if isinstance(exc, exceptions.NodeDiedError):
            self.next_feasible_check = 0.0   # was it the last node that could run these cases?
            if attempt == 0:
                self.retried.add(index)
                self.notify(f"ray: the node running {self.files[index]} was lost; retrying it once on another node")
                self._submit(index, 1)
                return None
            return self._error(index, f"its Ray node was lost twice (retried once on another node): {_first_line(exc)}")
        if isinstance(exc, exceptions.RayTaskError):
            return self._error(index, f"internal error in the Ray task judging this case:\n{exc}")
        return self._error(index, f"the Ray worker process running this case died "
                                  f"({type(exc).__name__}): {_first_line(exc)}")

    def _note_started(self) -> None:
        now = time.monotonic()
        outstanding = set(self.out.values())
        for key in self.ray.get(self.start_log.drain.remote()):
            if tuple(key) in outstanding:
                self.started[tuple(key)] = now

    def _enforce_timeout(self) -> None:
        if self.timeout is None:
            return
        self._note_started()
        now = time.monotonic()
        for ref, key in list(self.out.items()):
            since = self.started.get(key)
            if since is not None and now - since >= self.timeout:
                self.started.pop(key)
                self.timed_out.add(key)
                self.ray.cancel(ref, force=True)

    def _check_still_feasible(self) -> None:
        """When no live node can run the cases any more (the last one with the --resources is lost),
        end those outstanding as errors rather than wait for a node that may never come."""
        if time.monotonic() < self.next_feasible_check:
            return
        self.next_feasible_check = time.monotonic() + _FEASIBLE_EVERY_S
        lack = _unmet(self.ray, self.resources)
        if not lack:
            return
        for ref, (index, _attempt) in list(self.out.items()):
            del self.out[ref]
            self.ray.cancel(ref, force=True)
            self._finish(index, self._error(index, f"no live Ray node can run it any more: {lack}"))

    def _finish(self, index: int, result) -> None:
        self.results[index] = result
        self.on_result(result)

    def _error(self, index: int, message: str):
        return _error(self.files[index], self.backend_spec, self.options, message)
