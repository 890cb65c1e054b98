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
import shutil
import sys
import time
from collections import Counter

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
                 clock=time.monotonic, total_weight: float | None = None):
        every = HEARTBEAT_S if every is None else every   # read when made, so that a test may set it
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
            text += f", ETA {duration_text(elapsed / self.weight_done * left)}"
        return text


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
             bar_label: str = "", show=str, every: float | None = None, err: bool = False):
    """advance(item) per finished item of ``weights`` (item -> planned weight).  On a terminal: a
    bar with an ETA by weight; elsewhere: a Heartbeat line per kernel done (``kernel_of(item)``;
    none without it) and at least every ``every`` seconds, its share and ETA by weight.
    ``counts()``: what the heartbeat says the items so far did; ``bar_label`` the bar's label
    (default ``label``), ``show(item)`` the item the bar names; ``err``: on stderr."""
    interactive = _is_terminal(err) if interactive is None else interactive
    total = sum(weights.values())
    if not weights:
        yield lambda item: None
        return
    if interactive:
        with click.progressbar(length=max(int(total), 1), label=bar_label or label, show_pos=False,
                               show_percent=True, show_eta=True, file=sys.stderr if err else None,
                               item_show_func=lambda item: show(item) if item is not None else "") as bar:
            yield lambda item: bar.update(int(weights.get(item, 0)), item)
        return
    group = kernel_of or (lambda item: "")
    echo = echo or (lambda line: click.echo(line, err=err))
    beat = Heartbeat(label, Counter(group(item) for item in weights), echo=echo, total_weight=total, every=every)
    yield lambda item: beat.tick(group(item), counts() if counts else "", weights.get(item, 0))


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
