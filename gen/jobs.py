"""Writing planned cases, serially or in worker processes (`opcase gen --jobs N`).

Dynamic thresholds need a baseline backend; gen does not load backends itself (that is the
harness's job): the caller hands in ``load_baseline(name) -> Backend`` (the CLI passes
harness.backends.load_backend), which a Task carries to worker processes by reference."""
from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable

from gen.core.backend import Backend
from gen.core.overlap import Background
from gen.core.spec import SpecError, load_spec
from gen.generate import GenerationError, Generator, input_bytes_in_memory, plan_suite

# The next case's inputs are drawn ahead, while this one is made, if they take at most this
# much memory (inputs drawn into files do not count).
DRAW_AHEAD_BYTES = 1 << 30

# Without --jobs, gen writes in one worker process per usable CPU when the cases to write take at
# least this many bytes (their tensors'); below it, starting workers (a fresh interpreter each,
# about a second) costs more than the second core gives back.
PARALLEL_FROM_BYTES = 64 << 20
# A worker's memory, estimated from its largest case's tensors held in memory: inputs, float64
# goldens (up to 4x a float16 tensor's bytes), the rounded outputs and the baseline's.
WORKER_MEMORY_PER_BYTE = 8

# name -> Backend: how a Generator gets the baseline its dynamic thresholds need.
BaselineLoader = Callable[[str], Backend]


@dataclass(frozen=True)
class Task:
    spec_path: str
    op: str
    suite: str
    name: str
    index: int            # position of the plan in plan_suite(spec, suite, count, seed)
    count: int | None
    seed: int
    baseline: str | None  # --baseline, or None for the spec's
    path: str
    load_baseline: BaselineLoader


@lru_cache(maxsize=None)
def _generator(spec_path: str, baseline: str | None, load_baseline: BaselineLoader):
    return generator_of(load_spec(spec_path), baseline, load_baseline)


def generator_of(spec, baseline: str | None, load_baseline: BaselineLoader) -> Generator:
    """A Generator of ``spec`` with the baseline backend its dynamic thresholds need (default: the spec's)."""
    backend = load_baseline(baseline or spec.criteria.baseline) if spec.criteria.mode == "dynamic" else None
    return Generator(spec, backend)


@lru_cache(maxsize=None)
def _plans(spec_path: str, suite: str, count: int | None, seed: int):
    return plan_suite(load_spec(spec_path), suite, count, seed)


def _generator_and_plan(task: Task):
    return (_generator(task.spec_path, task.baseline, task.load_baseline),
            _plans(task.spec_path, task.suite, task.count, task.seed)[task.index])


def write_task(task: Task, drawn=None) -> int:
    """Write one case (from ``drawn``, its inputs drawn ahead, if given); return the bytes it
    takes on disk (case file and sidecars)."""
    generator, plan = _generator_and_plan(task)
    path = generator.write(plan, Path(task.path), drawn)
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))


def _draw_task(task: Task) -> Background | None:
    """The inputs of ``task``'s case, being drawn on a thread of their own; None where they would
    take more than DRAW_AHEAD_BYTES of memory, or the plan is one to be refused in turn."""
    generator, plan = _generator_and_plan(task)
    try:
        if input_bytes_in_memory(generator.spec, plan) > DRAW_AHEAD_BYTES:
            return None
    except (SpecError, GenerationError):
        return None          # write_task says so, in its turn
    return Background(lambda: generator.draw(plan, Path(task.path)))


def _write_in_turn(tasks: list[Task], on_done) -> None:
    """Each task in turn, the next one's inputs drawn while this one's golden is computed and its
    files written (random draws, numpy and file writes release the GIL: two cores busy); an
    error is raised at the task it belongs to, as one after the other would."""
    ahead = None
    try:
        for position, task in enumerate(tasks):
            drawing, ahead = ahead, None
            drawn = drawing.result() if drawing is not None else None
            if position + 1 < len(tasks):
                ahead = _draw_task(tasks[position + 1])
            on_done(task, write_task(task, drawn))
    finally:
        if ahead is not None:
            ahead.wait()
            try:
                ahead.result().discard()
            except BaseException:  # noqa: BLE001 - a later task's error; the one being raised wins
                pass


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask, as taskset and cgroups' cpusets set it)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def default_jobs(task_count: int, needed_bytes: int, largest_in_memory: int, memory: int | None) -> int:
    """Worker processes for `opcase gen` without --jobs: one per usable CPU for work of
    PARALLEL_FROM_BYTES or more, no more than there are cases, and no more than half the
    machine's ``memory`` holds at WORKER_MEMORY_PER_BYTE times the largest case built in memory."""
    if task_count < 2 or needed_bytes < PARALLEL_FROM_BYTES:
        return 1
    jobs = min(usable_cpus(), task_count)
    if memory is not None and largest_in_memory > 0:
        jobs = min(jobs, max(1, memory // 2 // (WORKER_MEMORY_PER_BYTE * largest_in_memory)))
    return jobs


def largest_first(tasks: list[Task], sizes: dict[Task, int]) -> list[Task]:
    """``tasks`` largest first (by ``sizes``, ties in plan order): in a pool of workers the long
    cases start at once and the short ones fill in around them, instead of one long case
    running alone at the end while the other workers idle."""
    return sorted(tasks, key=lambda task: -sizes[task])


def write_all(tasks: list[Task], jobs: int, on_done=lambda task, size: None) -> None:
    """Write every task, in `jobs` worker processes when jobs > 1; report each as it finishes.

    A failure (spec or generation error) stops the run and is raised here."""
    if jobs <= 1:
        # The caches are keyed by the spec's path: a spec file edited since an earlier call in
        # this process (a script, a test) must be read again, not served from the cache.
        _generator.cache_clear()
        _plans.cache_clear()
        _write_in_turn(tasks, on_done)
        return
    # spawn: a fresh interpreter per worker, independent of whatever the parent imported.
    with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = {pool.submit(write_task, task): task for task in tasks}
        try:
            for future in _as_completed(futures):
                on_done(futures[future], future.result())
        except BaseException:
            for future in futures:
                future.cancel()
            raise


def _as_completed(futures):
    return as_completed(futures)
