"""Writing planned cases, serially or in worker processes (`opcase gen --jobs N`)."""
from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path


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


@lru_cache(maxsize=None)
def _generator(spec_path: str, baseline: str | None):
    from gen.core.spec import load_spec
    return generator_of(load_spec(spec_path), baseline)


def generator_of(spec, baseline: str | None):
    """A Generator of ``spec`` with the baseline backend its dynamic thresholds need (default: the spec's)."""
    from gen.generate import Generator
    from harness.backends import load_backend
    backend = load_backend(baseline or spec.criteria.baseline) if spec.criteria.mode == "dynamic" else None
    return Generator(spec, backend)


@lru_cache(maxsize=None)
def _plans(spec_path: str, suite: str, count: int | None, seed: int):
    from gen.generate import plan_suite
    return plan_suite(_generator(spec_path, None).spec, suite, count, seed)


def write_task(task: Task) -> int:
    """Write one case; return the bytes it takes on disk (case file and sidecars)."""
    generator = _generator(task.spec_path, task.baseline)
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
    from concurrent.futures import as_completed
    return as_completed(futures)
