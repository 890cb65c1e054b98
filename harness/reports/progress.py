"""One progress mechanism for the long commands (gen, run, power, calibrate, explain, shrink):
a click progress bar (or, where case lines come in between, one status line rewritten in place)
on a terminal, a plain-log heartbeat elsewhere, both weighted by the work each item is planned to
take rather than by the count of items.

Why weights: gen hands out its largest cases first, and a bar that counts cases sat near 0 % for
minutes with an ETA of hours on a job of minutes.  An item's weight is its tensors' bytes plus a
fixed cost per item (loading its spec, writing and checksumming its file, judging it), expressed
in bytes, so that a run of many small cases after a few large ones is not promised in seconds.
A search whose work is not planned ahead (shrink, the hunt) reports its steps through ``steps``:
the same status line or heartbeat, with elapsed time and no ETA.
"""
from __future__ import annotations

import contextlib
import math
import shutil
import sys
import time
from collections import Counter, defaultdict

import click

# The fixed cost of one item in bytes of tensors: about what gen writes in the time one small
# case's fixed work takes (spec, plan, file, checksum), tens of milliseconds at some tens of MB/s.
PER_ITEM_BYTES = 1_000_000

# A log without a terminal hears from a long command at least this often (seconds).
HEARTBEAT_S = 30.0


def weight_of(size_bytes: float) -> float:
    """The planned work of an item of ``size_bytes`` of tensors."""
    return float(size_bytes) + PER_ITEM_BYTES


def duration_text(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


class Heartbeat:
    """Progress lines for a log without a terminal (CI): one when a kernel's last item is done,
    and one at least every ``every`` seconds (HEARTBEAT_S) in between, with the counts so far, the share of the
    planned work done and an ETA.

    The share and the ETA go by ``total_weight`` units when given (each tick then says its item's
    weight), else by items.  A heartbeat of no planned items (``per_kernel`` empty: a search)
    says how many steps it took and how long, no share and no ETA."""

    def __init__(self, label: str, per_kernel: Counter, echo=click.echo, every: float | None = None,
                 clock=time.monotonic, total_weight: float | None = None, pace: "Pace | None" = None):
        every = HEARTBEAT_S if every is None else every   # read when made, so that a test may set it
        self.pace = pace   # the ETA from what the items took, once they say (else by weight)
        self.label, self.left, self.echo, self.every, self.clock = label, Counter(per_kernel), echo, every, clock
        self.total, self.done = sum(per_kernel.values()), 0
        self.total_weight = float(self.total if total_weight is None else total_weight)
        self.weight_done = 0.0
        self.started = self.last = clock()

    def tick(self, kernel: str, counts: str, weight: float = 1.0) -> None:
        """One more item of ``kernel`` done; ``counts`` says how the items so far went."""
        finished, now = self.advance(kernel, weight)
        if finished or now - self.last >= self.every:
            self.last = now
            self.echo(self.line(now, kernel if finished and kernel else None, counts))

    def advance(self, kernel: str, weight: float = 1.0) -> tuple[bool, float]:
        """Count one more item of ``kernel`` done: (whether it was the kernel's last, now)."""
        self.done += 1
        self.weight_done += weight
        self.left[kernel] -= 1
        return self.total > 0 and self.left[kernel] == 0, self.clock()

    def line(self, now: float, finished: str | None, counts: str) -> str:
        planned = f"/{self.total}" if self.total else ""
        text = f"{self.label} {self.done}{planned}" + (f" ({finished} done)" if finished else "")
        return text + (f": {counts}" if counts else "") + f"; {self.work_text(now)}"

    def work_text(self, now: float) -> str:
        """'42.0 % of the work, 1m10s elapsed, ETA 1m37s' (no share nor ETA without a plan)."""
        elapsed = now - self.started
        text = f"{duration_text(elapsed)} elapsed"
        if self.total_weight > 0 and self.total:
            text = f"{100 * min(self.weight_done / self.total_weight, 1.0):.1f} % of the work, " + text
        if 0 < self.done < self.total and self.weight_done > 0:
            left = max(self.total_weight - self.weight_done, 0.0)
            eta = self.pace.eta(elapsed) if self.pace is not None and self.pace.timed else None
            text += f", ETA {duration_text(elapsed / self.weight_done * left if eta is None else eta)}"
        return text


class Pace:
    """The time left of a plan of items, from the seconds each finished item took.

    Each item has a planned cost (``costs``: item -> units of work, by default its bytes): gen's
    is its kernel family's estimate of the arithmetic its golden and baseline take
    (gen.cost), which bytes alone do not say: on the main command's suites a golden costs
    from 0.01 to several seconds per MB by kernel and suite, and a few small cases take minutes.
    Each item is taken to cost a fixed part (the mean of the small items, under SMALL_BYTES,
    done so far; PRIOR_ITEM_S until SMALL_ITEMS of them are) plus its cost at the rate, in seconds
    per unit, its group (``group_of``: kernel and suite) has shown so far; for a group with no
    item done yet beyond small ones, the rate of its kernel's items (the group's first member; the
    units of work are the kernel's own), else a mean of the groups' rates (``_overall``).  What is
    left is then scaled by how far each group's pace foresaw its own items so far (``drift``: on
    a shared machine the load changes during a run, and with it every case's time).  The seconds are the items' own
    (worker time); the items still running (``running()``: item -> seconds it has run) count as
    done that far, and the ETA scales what is left by the elapsed time per second of items run,
    which is how many ran at once (tests/test_progress.py)."""

    PRIOR_ITEM_S = 0.05     # what a small case costs whatever its size: spec, plan, file, checksum
    SMALL_BYTES = 100_000   # an item this small costs about its fixed part
    SMALL_ITEMS = 5

    def __init__(self, sizes: dict, group_of, costs: dict | None = None, running=None):
        self.sizes, self.group_of = sizes, group_of
        self.costs = sizes if costs is None else costs
        self.running = running or (lambda: {})
        self.left: dict = defaultdict(lambda: [0, 0.0])    # group: [items, cost] not done
        for item in sizes:
            self.left[group_of(item)][0] += 1
            self.left[group_of(item)][1] += self.costs.get(item, 0)
        self.spent: dict = defaultdict(lambda: [0.0, 0.0, 0, 0])  # group: [seconds, cost, items, bytes] done
        self.small: list[float] = []
        self.drifts: list[float] = []   # log(seconds / foreseen) of the items their group's pace foresaw
        self.timed = 0
        self.seconds = 0.0

    def done(self, item, seconds: float) -> None:
        group, cost, size = self.group_of(item), self.costs.get(item, 0), self.sizes.get(item, 0)
        self._note_drift(group, cost, size, seconds)
        for tally, change in ((self.left[group], (-1, -cost)), (self.spent[group], (seconds, cost, 1, size))):
            for index, amount in enumerate(change):
                tally[index] += amount
        self.timed += 1
        self.seconds += seconds
        if size < self.SMALL_BYTES:
            self.small.append(seconds)

    def _note_drift(self, group, cost: float, size: float, seconds: float) -> None:
        """How far the pace of ``group`` so far foresaw an item of it: the machine speeds up or slows
        down as its load changes, which a pace measured earlier does not know."""
        if size < self.SMALL_BYTES or seconds <= 0:
            return
        by_group = self.rates()[0]
        if group in by_group:
            foreseen = self.per_item() + cost * by_group[group]
            if foreseen > 0:
                self.drifts.append(math.log(seconds / foreseen))

    def drift(self) -> float:
        """The factor the items took over what their groups' pace foresaw just before each was
        done (their geometric mean; 1 until SMALL_ITEMS have been foreseen)."""
        if len(self.drifts) < self.SMALL_ITEMS:
            return 1.0
        return math.exp(sum(self.drifts) / len(self.drifts))

    def per_item(self) -> float:
        return sum(self.small) / len(self.small) if len(self.small) >= self.SMALL_ITEMS else self.PRIOR_ITEM_S

    def rates(self) -> tuple[dict, dict, float]:
        """Seconds per unit of cost past the fixed part: by group, by kernel, over all items done
        (a group or kernel whose items done are all small, mostly their fixed part, has none)."""
        fixed, by_group, by_kernel = self.per_item(), {}, defaultdict(lambda: [0.0, 0.0, 0])
        for group, (seconds, cost, items, size) in self.spent.items():
            beyond = max(seconds - fixed * items, 0.0)
            if cost > 0 and size >= self.SMALL_BYTES:
                by_group[group] = beyond / cost
            for index, amount in enumerate((beyond, cost, size)):
                by_kernel[_kernel(group)][index] += amount
        return by_group, {kernel: s / c for kernel, (s, c, b) in by_kernel.items()
                          if c > 0 and b >= self.SMALL_BYTES}, self._overall(by_group, by_kernel)

    def _overall(self, by_group: dict, by_kernel: dict) -> float:
        """The rate of a group whose kernel has shown none: the groups' rates' geometric mean,
        each weighted by the units it has done.  Not the seconds of all items over their units:
        one case far past its plan (a sampled baseline run to its cap by errors that no plan
        foresees) would then set the rate of every kernel with nothing done yet, which it says
        nothing about; in a mean of logarithms it moves the rate by its share of the units only."""
        weights = {group: self.spent[group][1] for group, rate in by_group.items() if rate > 0}
        if weights:
            total = sum(weights.values())
            return math.exp(sum(weight * math.log(by_group[group]) for group, weight in weights.items()) / total)
        return sum(s for s, _, _ in by_kernel.values()) / max(sum(c for _, c, _ in by_kernel.values()), 1e-300)

    def seconds_of(self, group, cost: float, rates=None) -> float:
        by_group, by_kernel, overall = rates or self.rates()
        rate = by_group.get(group, by_kernel.get(_kernel(group), overall))
        return cost * rate

    def seconds_left(self) -> tuple[float, float]:
        """(the items' seconds still to come, the seconds the running items have run)."""
        fixed, rates = self.per_item(), self.rates()
        left = sum(items * fixed + self.seconds_of(group, cost, rates) for group, (items, cost) in self.left.items())
        ran = 0.0
        for item, seconds in self.running().items():
            planned = fixed + self.seconds_of(self.group_of(item), self.costs.get(item, 0), rates)
            # What a running item has left: its plan's rest, or, once past its plan, as much
            # again as it has overrun (its plan was wrong by that much already).
            left += abs(planned - seconds) - planned
            ran += seconds
        return max(left, 0.0) * self.drift(), ran

    def eta(self, elapsed: float) -> float:
        left, ran = self.seconds_left()
        return elapsed / (self.seconds + ran) * left if self.seconds + ran > 0 else 0.0


def _kernel(group):
    """A group's kernel: its first member where it is a tuple (kernel, suite)."""
    return group[0] if isinstance(group, tuple) and group else group


class StatusLine:
    """One line on a terminal, rewritten in place; cleared before any other line is printed."""

    def __init__(self, err: bool = False):
        self.err, self.shown = err, False

    def show(self, text: str) -> None:
        width = max(shutil.get_terminal_size((100, 20)).columns - 1, 20)
        click.echo("\r\x1b[2K" + text[:width], nl=False, err=self.err)
        self.shown = True

    def clear(self) -> None:
        if self.shown:
            click.echo("\r\x1b[2K", nl=False, err=self.err)
            self.shown = False


def _is_terminal(err: bool) -> bool:
    return (sys.stderr if err else sys.stdout).isatty()


@contextlib.contextmanager
def progress(label: str, weights: dict, kernel_of=None, interactive: bool | None = None, counts=None, echo=None,
             bar_label: str = "", show=str, every: float | None = None, err: bool = False, sizes=None,
             group_of=None, costs=None, running=None):
    """advance(item) per finished item of ``weights`` (item -> planned weight).  On a terminal: a
    bar with an ETA by weight; elsewhere: a Heartbeat line per kernel done (``kernel_of(item)``;
    none without it) and at least every ``every`` seconds, its share and ETA by weight.
    ``counts()``: what the heartbeat says the items so far did; ``bar_label`` the bar's label
    (default ``label``), ``show(item)`` the item the bar names; ``err``: on stderr.  With ``sizes``
    (item -> bytes) and ``group_of``, advance(item, seconds) says what the item took, and the
    heartbeat's ETA comes from that pace (Pace), by ``costs`` (item -> units of work) where given
    and with ``running()`` (item -> seconds it has run so far) where the items run in a pool."""
    interactive = _is_terminal(err) if interactive is None else interactive
    total = sum(weights.values())
    if not weights:
        yield lambda item, seconds=None: None
        return
    if interactive:
        with click.progressbar(length=max(int(total), 1), label=bar_label or label, show_pos=False,
                               show_percent=True, show_eta=True, file=sys.stderr if err else None,
                               item_show_func=lambda item: show(item) if item is not None else "") as bar:
            yield lambda item, seconds=None: bar.update(int(weights.get(item, 0)), item)
        return
    group = kernel_of or (lambda item: "")
    echo = echo or (lambda line: click.echo(line, err=err))
    pace = Pace(sizes, group_of, costs, running) if sizes is not None and group_of is not None else None
    beat = Heartbeat(label, Counter(group(item) for item in weights), echo=echo, total_weight=total, every=every,
                     pace=pace)

    def advance(item, seconds: float | None = None) -> None:
        if pace is not None and seconds is not None:
            pace.done(item, seconds)
        beat.tick(group(item), counts() if counts else "", weights.get(item, 0))
    yield advance


@contextlib.contextmanager
def steps(label: str, interactive: bool | None = None, echo=None, every: float | None = None, err: bool = False):
    """step(text) per step of a search whose work is not planned ahead (shrink, the hunt): on a
    terminal ``text`` on a status line; elsewhere a Heartbeat line at least every ``every`` seconds."""
    interactive = _is_terminal(err) if interactive is None else interactive
    if interactive:
        line = StatusLine(err)
        try:
            yield line.show
        finally:
            line.clear()
        return
    beat = Heartbeat(label, Counter(), echo=echo or (lambda text: click.echo(text, err=err)), every=every)
    yield lambda text: beat.tick("", text)
