"""Running a producer on a thread of its own, a few items ahead of its consumer.

`opcase gen`'s stages (drawing values, computing a golden piece by piece, rounding, hashing and
writing) are numpy loops, hashlib and file writes, which all release the GIL: run on two threads,
one stage's work goes on while the other's does, on two cores.  Each item is made exactly as
it would be in one thread, in the same order, so the results are the same bits."""
from __future__ import annotations

import collections
import contextvars
import itertools
import queue
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterable, Iterator

_DONE, _FAILED, _ITEM = range(3)
_NOTHING = object()
# False: everything runs in the caller's thread, one stage after the other (the tests compare
# the two ways's files byte for byte).
ENABLED = True


class Prefetched:
    """Iterates ``iterable`` on a thread of its own, at most ``depth`` items ahead of the consumer.

    Use it as a context manager: leaving the block early (the consumer raised) stops the producer
    after the item it is making and waits for it, so nothing runs on after generation fails.  The
    producer's exception is raised in the consumer, at the item it failed to make.  The thread
    runs in a copy of the caller's context (numpy's error state is a context variable)."""

    def __init__(self, iterable: Iterable, depth: int = 2):
        self._queue: queue.Queue = queue.Queue(maxsize=max(1, depth))
        self._stop = threading.Event()
        self._iterable = iterable
        self._thread = None
        if not ENABLED:
            return
        context = contextvars.copy_context()
        self._thread = threading.Thread(target=context.run, args=(self._produce,), name="prefetch", daemon=True)
        self._thread.start()

    def _produce(self) -> None:
        try:
            for item in self._iterable:
                if not self._put((_ITEM, item)):
                    return
            self._put((_DONE, None))
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer, raised there
            self._put((_FAILED, exc))

    def _put(self, entry) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(entry, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def __iter__(self) -> Iterator:
        if self._thread is None:
            yield from self._iterable
            return
        while True:
            kind, item = self._queue.get()
            if kind == _DONE:
                self._thread.join()
                return
            if kind == _FAILED:
                self._thread.join()
                raise item
            yield item

    def close(self) -> None:
        """Stop the producer (after the item it is making) and wait for it."""
        if self._thread is None:
            return
        self._stop.set()
        while self._thread.is_alive():
            try:
                self._queue.get(timeout=0.05)
            except queue.Empty:
                pass
        self._thread.join()

    def __enter__(self) -> "Prefetched":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Background:
    """``fn()`` on a thread of its own; ``result()`` waits for it and returns its value or raises its
    exception (in a copy of the caller's context, as Prefetched)."""

    def __init__(self, fn):
        self._value = None
        self._failure: BaseException | None = None
        self._thread = None
        if not ENABLED:
            self._run(fn)
            return
        context = contextvars.copy_context()
        self._thread = threading.Thread(target=context.run, args=(self._run, fn), name="background", daemon=True)
        self._thread.start()

    def _run(self, fn) -> None:
        try:
            self._value = fn()
        except BaseException as exc:  # noqa: BLE001 - raised by result()
            self._failure = exc

    def result(self):
        self.wait()
        if self._failure is not None:
            raise self._failure
        return self._value

    def wait(self) -> None:
        """Wait for it, whatever it gave (cleaning up after a failure elsewhere)."""
        if self._thread is not None:
            self._thread.join()


def ordered_map(fn: Callable, items: Iterable, workers: int = 2, ahead: int = 3) -> Iterator:
    """fn(item) for each item, in order, computed on ``workers`` threads, at most ``ahead`` items
    at a time: for independent pieces of work whose results are used one after the other (a
    kernel emulation's chunks of atomicAdds, computed apart and applied in their order).  Leaving
    early cancels what has not started and waits for what has."""
    if not ENABLED:
        yield from map(fn, items)
        return
    items = iter(items)
    first = next(items, _NOTHING)
    second = next(items, _NOTHING)
    if second is _NOTHING:
        # One item (a small case's one chunk): nothing to overlap, and a pool's threads cost
        # more than such an item's work.
        if first is not _NOTHING:
            yield fn(first)
        return
    items = itertools.chain((first, second), items)
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="ordered-map")
    pending: collections.deque = collections.deque()
    try:
        for item in items:
            pending.append(pool.submit(contextvars.copy_context().run, fn, item))
            if len(pending) >= ahead:
                break
        while pending:
            result = pending.popleft().result()
            for item in items:
                pending.append(pool.submit(contextvars.copy_context().run, fn, item))
                break
            yield result
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
