"""Sidecar files: the bytes of a case's large tensors beside its case file, written and hashed as they
are made (whole, piece by piece, or spilled ahead of the case)."""
from __future__ import annotations

from pathlib import Path
import hashlib
import os
import queue
import threading

import numpy as np

from gen.core.file_writes import (atomic_write, blocks, drop_pages, element_count, hashing, le_bytes_view,
                                  temporary_beside)
from gen.core.overlap import Background
from gen.core.proto import opcase_pb2 as pb


def write_sidecar(path: Path, array: np.ndarray) -> pb.Sidecar:
    """Write ``array``'s bytes to ``path`` atomically; return the record the case keeps.  The
    bytes are hashed while they are written."""
    raw = memoryview(le_bytes_view(array)).cast("B")
    digest = hashing(raw)
    try:
        atomic_write(path, blocks(raw))
    finally:
        digest.wait()
    return pb.Sidecar(path=path.name, length=len(raw), sha256=digest.result())


class PrewrittenSidecar:
    """A tensor's bytes written to a temporary file beside ``case_path`` and hashed, both on
    threads of their own, while the caller goes on (with the golden); ``finish()`` waits and
    returns what ``Tensor.prewritten`` takes, ``discard()`` waits and removes the file.  The
    array must not change until then."""

    def __init__(self, case_path: Path, array: np.ndarray):
        self._raw = memoryview(le_bytes_view(array)).cast("B")
        case_path.parent.mkdir(parents=True, exist_ok=True)
        fd, self.path = temporary_beside(case_path)
        self._digest = hashing(self._raw)
        self._written = Background(lambda: self._write(fd))

    def _write(self, fd: int) -> None:
        with os.fdopen(fd, "wb") as f:
            for block in blocks(self._raw):
                f.write(block)

    def finish(self) -> tuple:
        self._written.result()
        return self.path, pb.Sidecar(length=len(self._raw), sha256=self._digest.result())

    def discard(self) -> None:
        self._written.wait()
        self._digest.wait()
        Path(self.path).unlink(missing_ok=True)


class SidecarWriter:
    """Writes a tensor's bytes to a temporary file beside ``case_path`` piece by piece, in order,
    hashing as it goes; ``finish()`` returns what ``Tensor.prewritten`` takes.  Gaps between
    pieces, and the tail, are zeros.

    The file write and the sha256 of each piece run on two threads of the writer's own, each in
    order, while the caller computes the next piece (file writes and hashlib release the GIL); at
    most _PIECES_IN_FLIGHT pieces wait for each.  An error there is raised by the next write() or
    finish()."""

    _PIECES_IN_FLIGHT = 2

    def __init__(self, case_path: Path, shape, dtype):
        self.dtype = np.dtype(dtype).newbyteorder("<")
        self.total = element_count(shape)
        self.written = 0                          # elements
        self.any_nonzero = False
        self._digest = hashlib.sha256()
        case_path.parent.mkdir(parents=True, exist_ok=True)
        fd, self.path = temporary_beside(case_path)
        self._file = os.fdopen(fd, "wb")
        self._failure: BaseException | None = None
        self._queues = [queue.Queue(maxsize=self._PIECES_IN_FLIGHT) for _ in range(2)]
        self._threads = [threading.Thread(target=self._drain, args=(q, step), name="sidecar-writer", daemon=True)
                         for q, step in zip(self._queues, (self._write_piece, self._digest.update))]
        for thread in self._threads:
            thread.start()

    def _write_piece(self, raw: bytes) -> None:
        self._file.write(raw)

    def _drain(self, pending: queue.Queue, step) -> None:
        while (raw := pending.get()) is not None:
            if self._failure is None:
                try:
                    step(raw)
                except BaseException as exc:  # noqa: BLE001 - handed to the caller's next write or finish
                    self._failure = exc

    def _put(self, raw: bytes) -> None:
        if self._failure is not None:
            raise self._failure
        for pending in self._queues:
            pending.put(raw)

    def _stop(self) -> None:
        for pending, thread in zip(self._queues, self._threads):
            if thread.is_alive():
                pending.put(None)
                thread.join()

    def write(self, flat_start: int, piece: np.ndarray) -> None:
        if flat_start < self.written or flat_start + piece.size > self.total:
            raise ValueError(f"piece at element {flat_start} (+{piece.size}) out of order or past "
                             f"the end ({self.written} written of {self.total})")
        self._zeros(flat_start - self.written)
        self._put(le_bytes_view(piece.astype(self.dtype, copy=False)).tobytes())
        self.any_nonzero = self.any_nonzero or bool(np.any(piece))
        self.written = flat_start + piece.size

    def _zeros(self, count: int) -> None:
        block = bytes(min(count, 1 << 20) * self.dtype.itemsize)
        while count > 0:
            n = min(count, len(block) // self.dtype.itemsize)
            self._put(block[:n * self.dtype.itemsize])
            count -= n

    def finish(self) -> tuple:
        self._zeros(self.total - self.written)
        self.written = self.total
        self._stop()
        self._file.close()
        if self._failure is not None:
            raise self._failure
        return self.path, pb.Sidecar(length=self.total * self.dtype.itemsize, sha256=self._digest.digest())

    def discard(self) -> None:
        self._stop()
        self._file.close()
        Path(self.path).unlink(missing_ok=True)


class SpillFile:
    """A tensor written in place in a temporary file beside ``case_path``, memory-mapped: a
    multi-GB input is drawn straight to disk instead of into memory.  ``array`` is writable
    until ``seal()``, which hashes the file and returns (read-only mapped array, what
    ``Tensor.prewritten`` takes)."""

    def __init__(self, case_path: Path, shape, dtype):
        self.dtype = np.dtype(dtype).newbyteorder("<")
        self.shape = tuple(int(s) for s in shape)
        self.length = element_count(self.shape) * self.dtype.itemsize
        if self.length == 0:
            raise ValueError("an empty tensor needs no file")
        case_path.parent.mkdir(parents=True, exist_ok=True)
        fd, self.path = temporary_beside(case_path)
        try:
            # Reserve the blocks now: a full disk is an OSError here, not a SIGBUS on a
            # write through the mapping later.
            os.posix_fallocate(fd, 0, self.length)
        except BaseException:
            os.close(fd)
            Path(self.path).unlink(missing_ok=True)
            raise
        os.close(fd)
        self.array = np.memmap(self.path, dtype=self.dtype, mode="r+", shape=self.shape)
        self._digest: Background | None = None

    def seal(self) -> tuple[np.ndarray, tuple]:
        readonly = self.seal_later()
        return readonly, self.finish()

    def seal_later(self) -> np.ndarray:
        """The read-only mapping now; the file is hashed on a thread of its own meanwhile, and
        ``finish()`` waits for it and returns what ``Tensor.prewritten`` takes."""
        self.array.flush()
        drop_pages(self.array)
        self.array = None
        readonly = np.memmap(self.path, dtype=self.dtype, mode="r", shape=self.shape)
        # A mapping of its own: its pages are let go as they are hashed, not the caller's.
        hashed_map = np.memmap(self.path, dtype=self.dtype, mode="r", shape=self.shape)
        self._digest = Background(lambda: self._hash(hashed_map))
        return readonly

    def _hash(self, mapped: np.memmap) -> bytes:
        digest = hashlib.sha256()
        hashed = 0
        for block in blocks(memoryview(mapped.reshape(-1).view(np.uint8))):
            digest.update(block)
            drop_pages(mapped, (hashed + len(block)) // self.dtype.itemsize, hashed // self.dtype.itemsize)
            hashed += len(block)
        return digest.digest()

    def finish(self) -> tuple:
        return self.path, pb.Sidecar(length=self.length, sha256=self._digest.result())

    def discard(self) -> None:
        self.array = None
        if self._digest is not None:
            self._digest.wait()
        Path(self.path).unlink(missing_ok=True)
