"""Scratch buffers kept from one golden to the next, within a bound.

A compiled loop reads its rows widened to float64 in a buffer of its own (carafe's 8-64 MB per chunk).
A fresh buffer per call costs as much in the kernel's page zeroing (first touch of every page) as the
widening itself: profiled, a fifth of carafe_backward's golden at its network shapes.  So the buffers a
call used are handed back here when it is done and the next call (the next chunk, the next case of the
suite) takes them again.  What is kept is bounded: at most ``KEEP_BYTES`` in all, the rest freed as
before.  A buffer is scratch only: every element a loop reads is written by that call first, so what
a previous call left there changes nothing.
"""
from __future__ import annotations

import threading

import numpy as np

# The most bytes kept between calls: two threads' worth of carafe's largest chunk buffers.
KEEP_BYTES = 320 << 20

_lock = threading.Lock()
_free: dict[str, list[np.ndarray]] = {}


def take(name: str, size: int) -> np.ndarray:
    """A flat float64 buffer of at least ``size`` elements: a kept one of that name where one is large
    enough (the smallest such), else a new one."""
    with _lock:
        kept = _free.get(name, [])             # largest first
        fits = [i for i, b in enumerate(kept) if b.size >= size]
        if fits:
            return kept.pop(fits[-1])
    return np.empty(max(1, size), dtype=np.float64)


def give(name: str, buffer: np.ndarray) -> None:
    """Hand ``buffer`` back for a later take; dropped (freed) where the kept bytes would pass KEEP_BYTES,
    after the smaller kept buffers of its name, which it replaces where it is larger."""
    with _lock:
        kept = _free.setdefault(name, [])
        kept.append(buffer)
        kept.sort(key=lambda b: -b.size)
        while _kept_bytes() > KEEP_BYTES and any(_free.values()):
            smallest_name = min((n for n in _free if _free[n]), key=lambda n: _free[n][-1].nbytes)
            _free[smallest_name].pop()


def _kept_bytes() -> int:
    return sum(b.nbytes for kept in _free.values() for b in kept)


def release_all() -> None:
    """Free every kept buffer (the tests' way back to a clean process)."""
    with _lock:
        _free.clear()
