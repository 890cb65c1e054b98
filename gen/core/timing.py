"""Timing a backend: repeated calls, their median and spread, and mlu-ops' slowdown rule.

Who measures: a backend whose ``measures_time`` is True returns ``(outputs, seconds)`` from
``run``, ``seconds`` being its own kernel (device) time for that call; for any other backend
the harness times the ``run`` call with ``time.perf_counter``.  The result records which.
"""
from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass

# mlu-ops' performance gate against a stored baseline (gen/core/README.md, Accuracy): a baseline at or under
# 100 us may grow by 5 us, a longer one by 4%.
SMALL_BASELINE_US = 100.0
SMALL_SLACK_US = 5.0
LARGE_SLACK_FRACTION = 0.04
# The longest timeout (seconds) a run accepts: the OS's waits take at most 2^31 - 1 ms (poll's
# int milliseconds: 24.8 days), and a worker's deadline adds its start-up allowance to the
# timeout.  Ten days is far past any case and well inside that.
MAX_TIMEOUT_S = 864_000.0


class BackendProtocolError(Exception):
    """A backend broke the calling convention (e.g. measures_time without a time)."""


def call(backend, request) -> tuple[object, float, str]:
    """One call of ``backend.run``: (outputs, seconds, source) where source is 'backend' or 'harness'."""
    start = time.perf_counter()
    returned = backend.run(request)
    elapsed = time.perf_counter() - start
    if not backend.measures_time:
        return returned, elapsed, "harness"
    if not (isinstance(returned, tuple) and len(returned) == 2):
        raise BackendProtocolError(f"backend {backend.name} declares measures_time, so run() must return "
                                   f"(outputs, seconds); it returned {type(returned).__name__}")
    outputs, seconds = returned
    try:
        seconds = float(seconds)
    except (TypeError, ValueError):
        raise BackendProtocolError(f"backend {backend.name}: reported time {seconds!r} is not a number") from None
    if not (seconds >= 0.0 and seconds != math.inf):   # refuses NaN too; inf is no time a call took
        raise BackendProtocolError(f"backend {backend.name}: reported time {seconds!r} is not a finite duration")
    return outputs, seconds, "backend"


@dataclass(frozen=True)
class TimingPlan:
    """``repeat`` timed calls after ``warmup`` untimed ones; repeat 0 means no timing phase."""
    repeat: int = 0
    warmup: int = 1


def summarize(samples: list[float], source: str, plan: TimingPlan) -> dict:
    """Median and spread of per-call times, in microseconds (the unit of the slowdown rule)."""
    us = sorted(s * 1e6 for s in samples)
    median = statistics.median(us)
    return {"source": source, "repeat": plan.repeat, "warmup": plan.warmup,
            "median_us": median, "min_us": us[0], "max_us": us[-1],
            # (max - min) / median: how far one sample may be from another, relative to the typical one.
            "spread_pct": 100.0 * (us[-1] - us[0]) / median if median > 0 else 0.0}


def slowdown_limit_us(baseline_us: float) -> float:
    """The slowest time that still counts as unchanged against ``baseline_us`` (mlu-ops' rule)."""
    if baseline_us <= SMALL_BASELINE_US:
        return baseline_us + SMALL_SLACK_US
    return baseline_us * (1.0 + LARGE_SLACK_FRACTION)


def is_slowdown(baseline_us: float, now_us: float) -> bool:
    return now_us > slowdown_limit_us(baseline_us)
