"""gen's ETA on the main command's own plan, replayed on what each case really took.

The plan is the real one (every spec, every suite, --max-size 64MB), in the order gen hands it to
two workers (largest first); what each case takes is what it took in a traced run of the main
command (tests/bench/gen_main_seconds.tsv, the run in tests/bench/RESULTS.md).  A two-worker pool
is replayed on that record and gen's own estimator (harness.reports.progress.Pace, fed each
case's seconds as gen's _Timing reads them off the pool) is asked for the ETA at every case done.

Issue 36 asks for an ETA within 2x of the time left from the 10 % mark on.  It is not met: a few
cases cost minutes whatever their bytes say (a carafe_backward boundary case of kernel size 35,
12 MB, took 151 s; a carafe_forward stress case 129 s), and neither bytes nor the pace of a kernel
and suite so far foresee them.  That test is a strict xfail until a cost estimate per case exists;
the others keep what Pace gains over estimators that lose what the plan and the pace know.
"""
from __future__ import annotations

import heapq
from collections import Counter
from pathlib import Path

import pytest

from gen.core.spec import load_spec
from gen.generate import plan_suite, total_bytes
from gen.jobs import largest_first
from harness.reports.progress import Heartbeat, Pace, weight_of

REPO = Path(__file__).resolve().parents[1]
RECORD = REPO / "tests" / "bench" / "gen_main_seconds.tsv"
MAIN_MAX_SIZE = 64_000_000
JOBS = 2
group_of = lambda key: key[:2]   # noqa: E731 - (op, suite), as gen groups its tasks


def main_command_plan() -> dict:
    """{(op, suite, name): tensor bytes} of every case the main command writes, in plan order."""
    planned = {}
    for path in sorted((REPO / "specs").glob("*.yaml")):
        spec = load_spec(path)
        for suite in spec.suites:
            for plan in plan_suite(spec, suite, None, 0):
                size = total_bytes(spec, plan)
                if size <= MAIN_MAX_SIZE:
                    planned[(spec.op, suite, plan.name)] = size
    return planned


def recorded_seconds(plan: dict) -> dict:
    """What each planned case took in the traced run; a case the record lacks (a spec changed
    since) costs the mean of its group's recorded cases."""
    seconds = {}
    for line in RECORD.read_text().splitlines():
        if line and not line.startswith("#"):
            op, suite, name, took = line.split("\t")
            seconds[(op, suite, name)] = float(took)
    covered = [key for key in plan if key in seconds]
    assert len(covered) >= 0.9 * len(plan), "the record no longer covers the plan: trace the main command again"
    by_group: dict = {}
    for key in covered:
        by_group.setdefault(group_of(key), []).append(seconds[key])
    mean = sum(seconds[k] for k in covered) / len(covered)
    return {key: seconds.get(key, sum(by_group.get(group_of(key), [mean])) / len(by_group.get(group_of(key), [mean])))
            for key in plan}


def pool(order: list, seconds: dict) -> list:
    """(finish time, key) of each case when JOBS workers take ``order`` in turn, sorted by time."""
    free = [(0.0, worker) for worker in range(JOBS)]
    finished = []
    for key in order:
        now, worker = heapq.heappop(free)
        finished.append((now + seconds[key], key))
        heapq.heappush(free, (now + seconds[key], worker))
    return sorted(finished)


def worst_ratio(order: list, seconds: dict, eta_of) -> float:
    """The largest factor between the ETA and the real time left, at every case done from 10 % of
    the time on (to 95 %).  ``eta_of(key, took, now)`` is told each case done and returns the ETA."""
    events = pool(order, seconds)
    position = {key: number for number, key in enumerate(order)}
    end, finished, worst = events[-1][0], [], 1.0
    for now, key in events:
        freed_by = position[key] - JOBS   # gen's _Timing: the finish that freed a worker for it
        started = finished[freed_by] if 0 <= freed_by < len(finished) else 0.0
        finished.append(now)
        eta = eta_of(key, now - started, now)
        left = end - now
        if now >= 0.1 * end and left > 0.05 * end:
            worst = max(worst, eta / left, left / eta) if eta > 0 else float("inf")
    return worst


def pace_eta(sizes: dict, group):
    pace = Pace(sizes, group)

    def eta(key, took, now):
        pace.done(key, took)
        return pace.eta(now)
    return eta


def weight_eta(plan: dict, weight):
    """The ETA of a Heartbeat by planned weight alone (what gen had before Pace)."""
    beat = Heartbeat("generated", Counter(key[0] for key in plan), echo=lambda line: None, every=1e9,
                     total_weight=sum(weight(size) for size in plan.values()))

    def eta(key, took, now):
        beat.weight_done += weight(plan[key])
        return now / beat.weight_done * (beat.total_weight - beat.weight_done)
    return eta


@pytest.fixture(scope="module")
def main_plan():
    plan = main_command_plan()
    order = largest_first(list(plan), plan)
    return plan, order, recorded_seconds(plan)


@pytest.mark.xfail(strict=True, reason="a golden's cost is not in its bytes: a few cases of minutes that nothing "
                   "in the plan foresees (tests/bench/RESULTS.md, gen's ETA on the main command)")
def test_gen_eta_is_within_2x_from_the_10_percent_mark(main_plan):
    plan, order, seconds = main_plan
    assert worst_ratio(order, seconds, pace_eta(plan, group_of)) <= 2.0


# The worst ratio Pace gave on the record (4.2), with a margin: a regression past it fails.
PACE_WORST = 5.0


@pytest.mark.parametrize("estimator", ["a count of cases", "bytes and a fixed part, by weight"])
def test_pace_does_better_than_estimators_that_lose_what_the_plan_knows(main_plan, estimator):
    plan, order, seconds = main_plan
    other = {"a count of cases": lambda: pace_eta({key: 1 for key in plan}, lambda key: ""),
             "bytes and a fixed part, by weight": lambda: weight_eta(plan, weight_of)}[estimator]()
    pace = worst_ratio(order, seconds, pace_eta(plan, group_of))
    assert pace <= PACE_WORST
    assert worst_ratio(order, seconds, other) > 2 * pace
