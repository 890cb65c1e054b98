"""Every case judged twice by a backend in worker processes: as a cold call, and as a warm one after a decoy.

The decoy call (harness.worker.decoy) makes state a backend keeps between calls show: a result cached by
shape or by input address, an output buffer not cleared, all hit the judged call that follows a decoy of
the same shapes from the same buffers.  But a judged call that always follows a call of its shapes hides
what only a call with none before it does wrong: the first call of a process (a table built lazily and
read before it is filled), the first call at a shape (a plan made on it), a plan kept from the call
before and refreshed one call late.  No one call can be both, so each case is judged twice, by two sets of
workers side by side (harness.judge.workers._Pool; --jobs N of each), and must pass both:

- the **cold pass**: every case, one call each, no decoy, no timed calls (the first call of each of its
  workers is judged; a case's call follows only other cases' calls, so it is the first at its shapes in
  its worker unless an earlier case has them, and it follows a call of other shapes);
- the **warm pass**, as `opcase run` always judged: each valid case's judged call after its decoy, then
  its timed and --bitwise calls, in workers of its own (whose first call is a decoy), so that nothing a
  cold call left in a worker's state reaches it.

A case's result is the warm pass's, unless the cold pass fails a case the warm one passes: then it is
the cold pass's, its message saying so.  What each pass catches, and what it costs: harness/GUARANTEES.md.
"""
from __future__ import annotations

import dataclasses
from collections import deque

from gen.core.timing import TimingPlan
from gen.core.verdict import FAILING, CaseResult

COLD = "as a cold call (no decoy before it; its worker's first call or one after other cases' calls)"

COLD_PASS, WARM_PASS = "cold", "warm"


def cold_options(options):
    """The cold pass's RunOptions: no decoy, no timed calls, no --bitwise repeats (the warm pass makes them)."""
    return dataclasses.replace(options, decoy=False, bitwise=False, timing=TimingPlan(repeat=0))


def merged(cold: CaseResult, warm: CaseResult) -> CaseResult:
    """One case's result from its two passes: the warm one's unless only the cold one fails."""
    if cold.status in FAILING and warm.status not in FAILING:
        cold.message = f"fails {COLD}, passes after a decoy call: {cold.message}"
        cold.wall_seconds = max(cold.wall_seconds, warm.wall_seconds)
        return cold
    if cold.status in FAILING and (cold.status, cold.message) != (warm.status, warm.message):
        first = cold.message.splitlines()[0] if cold.message else cold.status
        warm.message += f"\nalso {cold.status} {COLD}: {first}"
    warm.wall_seconds = max(cold.wall_seconds, warm.wall_seconds)   # the two passes run side by side
    return warm


class Passes:
    """The two passes' items of a run of ``n`` case files: item k < n is file k's cold call, item n + k
    its warm one.  Each pass's workers go through the files in order, side by side, so a case's result
    comes as soon as both have judged it."""

    def __init__(self, n: int, options):
        self.n = n
        self.options = {COLD_PASS: cold_options(options), WARM_PASS: options}
        self.halves: dict[int, CaseResult] = {}

    def file_of(self, item: int) -> int:
        return item % self.n

    def pass_of(self, item: int) -> str:
        return COLD_PASS if item < self.n else WARM_PASS

    def options_of(self, item: int):
        return self.options[self.pass_of(item)]

    def finish(self, item: int, result: CaseResult) -> CaseResult | None:
        """The case's result once both its passes have one (None before)."""
        other = self.halves.pop(item + self.n if item < self.n else item - self.n, None)
        if other is None:
            self.halves[item] = result
            return None
        return merged(*((result, other) if item < self.n else (other, result)))


class Pending:
    """The items not yet given out, one queue per pass (a worker takes only its own pass's)."""

    def __init__(self, passes: Passes, lead: int | None = None):
        self.passes, self.lead = passes, lead
        self.queues = {COLD_PASS: deque(range(passes.n)), WARM_PASS: deque(range(passes.n, 2 * passes.n))}

    def __len__(self) -> int:
        return sum(map(len, self.queues.values()))

    def __getitem__(self, position: int) -> int:
        """``pending[0]``: the item popleft gives next (the one the judge loads ahead)."""
        if position != 0:
            raise IndexError(position)
        return next(q for q in self.queues.values() if q)[0]

    def count(self, of_pass: str) -> int:
        return len(self.queues[of_pass])

    def next_of(self, of_pass: str, take: bool = True) -> int | None:
        """The next item of a pass (taken out when ``take``), or None."""
        queue = self.queues[of_pass]
        if not queue:
            return None
        return queue.popleft() if take else queue[0]

    def to_give(self, of_pass: str) -> bool:
        """Whether a worker of that pass may be given its next item now: the cold pass, the cheaper one
        (one call, no decoy), is held within ``lead`` files of the warm pass, so that the case file
        both read (SharedLoads) need not be kept long."""
        queue = self.queues[of_pass]
        if not queue:
            return False
        if of_pass != COLD_PASS or self.lead is None:
            return True
        warm = self.queues[WARM_PASS]
        return queue[0] < (warm[0] - self.passes.n if warm else self.passes.n) + self.lead

    def held_back(self, of_pass: str) -> bool:
        """Whether that pass has items left that ``lead`` holds back for now."""
        return bool(self.queues[of_pass]) and not self.to_give(of_pass)

    def popleft(self) -> int:
        """The next item of either pass, the cold one first."""
        return next(q for q in self.queues.values() if q).popleft()

    def appendleft(self, item: int) -> None:
        self.queues[self.passes.pass_of(item)].appendleft(item)


class SharedLoads:
    """Each case file read (and its checksums checked) once for its two items: the Case the first item's
    judgement is made of is kept until the other item's is made, then dropped.  Holding at most ``keep``
    cases (the oldest goes first; Pending's ``lead`` keeps the passes closer than that): a pass that gets
    further ahead of the other costs the other a second read of those files, never unbounded memory.  A Case is only read by the judge (its arrays
    are read-only), so two Judgements can share it."""

    def __init__(self, passes: Passes, keep: int):
        self.passes, self.keep = passes, keep
        self.kept: dict[int, object] = {}   # file number -> its Case, oldest first
        self.read: set[int] = set()         # the files one item of which has been loaded

    def case_of(self, item: int, load):
        """The item's file's Case: the kept one, or ``load(file number)`` (whose error is the caller's)."""
        file = self.passes.file_of(item)
        case = self.kept.pop(file, None)
        if case is not None:
            return case
        case = load(file)
        if file not in self.read:   # the other item comes later: keep it for that one
            self.read.add(file)
            self.kept[file] = case
            while len(self.kept) > self.keep:
                del self.kept[next(iter(self.kept))]
        return case
