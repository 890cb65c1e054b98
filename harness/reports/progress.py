"""One progress mechanism for the long commands (gen, run, power, calibrate, explain, shrink):
a click progress bar on a terminal, a plain-log heartbeat (harness.reports.report.Heartbeat) elsewhere,
both weighted by the work each item is planned to take rather than by the count of items.

Why weights: gen hands out its largest cases first, and a bar that counts cases sat near 0 % for
minutes with an ETA of hours on a job of minutes.  An item's weight is its tensors' bytes plus a
fixed cost per item (loading its spec, writing and checksumming its file, judging it), expressed
in bytes, so that a run of many small cases after a few large ones is not promised in seconds.
"""
from __future__ import annotations

import contextlib
import sys
from collections import Counter

import click

from harness.reports.report import Heartbeat

# The fixed cost of one item in bytes of tensors: about what gen writes in the time one small
# case's fixed work takes (spec, plan, file, checksum), tens of milliseconds at some tens of MB/s.
PER_ITEM_BYTES = 1_000_000


def weight_of(size_bytes: float) -> float:
    """The planned work of an item of ``size_bytes`` of tensors."""
    return float(size_bytes) + PER_ITEM_BYTES


@contextlib.contextmanager
def progress(label: str, weights: dict, kernel_of=None, interactive: bool | None = None, counts=None, echo=click.echo,
             bar_label: str = "", show=str):
    """advance(item) per finished item of ``weights`` (item -> planned weight).  On a terminal: a
    bar with an ETA by weight; elsewhere: a Heartbeat line per kernel done (``kernel_of(item)``;
    none without it) and at least every HEARTBEAT_S seconds, its ETA by weight.  ``counts()``:
    what the heartbeat says the items so far did; ``bar_label`` the bar's label (default
    ``label``), ``show(item)`` the item the bar names."""
    interactive = sys.stdout.isatty() if interactive is None else interactive
    total = sum(weights.values())
    if not weights:
        yield lambda item: None
        return
    if interactive:
        with click.progressbar(length=max(int(total), 1), label=bar_label or label, show_pos=False,
                               show_percent=True, show_eta=True,
                               item_show_func=lambda item: show(item) if item is not None else "") as bar:
            yield lambda item: bar.update(int(weights.get(item, 0)), item)
        return
    if kernel_of is None:
        yield lambda item: None
        return
    beat = Heartbeat(label, Counter(kernel_of(item) for item in weights), echo=echo, total_weight=total)
    yield lambda item: beat.tick(kernel_of(item), counts() if counts else "", weights.get(item, 0))
