"""Writing planned cases, serially or in worker processes (`opcase gen --jobs N`).

Dynamic thresholds need a baseline backend; gen does not load backends itself (that is the
harness's job): the caller hands in ``load_baseline(name) -> Backend`` (the CLI passes
harness.backends.load_backend), which a Task carries to worker processes by reference."""
from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable

from gen.core.backend import Backend
from gen.core.spec import load_spec
from gen.generate import Generator, plan_suite

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


def write_task(task: Task) -> int:
    """Write one case; return the bytes it takes on disk (case file and sidecars)."""
    generator = _generator(task.spec_path, task.baseline, task.load_baseline)
    plan = _plans(task.spec_path, task.suite, task.count, task.seed)[task.index]
    path = generator.write(plan, Path(task.path))
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))


def write_all(tasks: list[Task], jobs: int, on_done=lambda task, size: None) -> None:
    """Write every task, in `jobs` worker processes when jobs > 1; report each as it finishes.

    A failure (spec or generation error) stops the run and is raised here."""
    if jobs <= 1:
        # The caches are keyed by the spec's path: a spec file edited since an earlier call in
        # this process (a script, a test) must be read again, not served from the cache.
        _generator.cache_clear()
        _plans.cache_clear()
        for task in tasks:
            on_done(task, write_task(task))
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
