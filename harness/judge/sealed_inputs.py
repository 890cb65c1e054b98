"""A case's inputs sealed ahead of the worker that takes them, and once for both its passes.

A worker gets a case's inputs as sealed memory files (harness.worker.case_job), never its file, so the
judge must read the case (checksums included) and copy its inputs into sealed memory before the worker
can start on it.  That copy is the one step of confinement a worker would wait on: the pool
(harness.judge.workers._Pool) makes it when it loads a case, which it does ahead (while its workers start
and import their backend, and while they compute the case before), so that giving the case out is only
sending descriptors.  Sealed memory cannot be written, grown or shrunk by anyone (its seals are checked
where it is mapped, harness.worker.channel.map_sealed), so the cold and the warm pass's workers map the
same copy: each worker still sees only the inputs, read-only, and no path.
"""
from __future__ import annotations

import os

from harness.worker.case_job import seal_inputs

# How many descriptors the kept copies may hold at most, whatever --jobs: well under a process's usual
# limit of 1024 open files, beside the workers' channels and the descriptors in flight.
MOST_KEPT_DESCRIPTORS = 128


class SealedInputs:
    """Each case file's inputs sealed once for its two items (harness.judge.cold_pass.Passes), the other
    item's descriptors kept until it is given out; at most ``keep`` files' kept, and MOST_KEPT_DESCRIPTORS
    descriptors (the oldest closed first: its item seals them again), as cold_pass.SharedLoads keeps their
    cases."""

    def __init__(self, passes, keep: int):
        self.passes, self.keep = passes, keep
        self.kept: dict[int, list[int]] = {}   # file number -> the other item's descriptors, oldest first
        self.sealed: set[int] = set()          # the files whose inputs were sealed once

    def take(self, item: int, case) -> list[int]:
        """The item's inputs, sealed: descriptors the caller owns (and closes once sent)."""
        file = self.passes.file_of(item)
        fds = self.kept.pop(file, None)
        if fds is not None:
            return fds
        fds = seal_inputs(case)
        if file not in self.sealed:   # the other item comes later: the same sealed memory, for it
            self.sealed.add(file)
            self.kept[file] = [os.dup(fd) for fd in fds]
            while len(self.kept) > self.keep or sum(map(len, self.kept.values())) > MOST_KEPT_DESCRIPTORS:
                _close(self.kept.pop(next(iter(self.kept))))
        return fds

    def close(self) -> None:
        while self.kept:
            _close(self.kept.popitem()[1])


def _close(fds: list[int]) -> None:
    for fd in fds:
        os.close(fd)
