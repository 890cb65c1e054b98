"""The frames a worker process and opcase exchange: small JSON documents, never pickles.

A frame is MAGIC, the length of its body (4 bytes, little-endian) and the body: one JSON object
of at most MAX_FRAME bytes.  The worker's side runs beside a foreign backend, which can write
anything to the worker's descriptors (a fake length header, junk, half a frame): the reading side
(FrameReader, in opcase) never blocks, refuses a bad magic, an oversized length or a body that is
no JSON object, and gives a started frame FRAME_DEADLINE_S to arrive whole.  Any of those is a
ChannelError: its case is an error and its worker is replaced (harness.judge.workers).  Arrays never
travel in frames: they are files the judge maps read-only (harness.judge.workers).
"""
from __future__ import annotations

import fcntl
import json
import os
import socket
import stat
import struct
import time
from collections import deque

import numpy as np

MAGIC = b"OPCF"
_HEADER = struct.Struct("<4sI")
# Frames carry names, shapes, timings and messages: a megabyte is far more than any needs.
MAX_FRAME = 1 << 20
# How long a frame whose first bytes arrived may take to arrive whole (both ends write a frame
# in one go, so only a forged or broken one is ever this slow).
FRAME_DEADLINE_S = 5.0
# How much of a text field (an exception's message, a traceback) a frame carries.
MAX_TEXT = 16000


class ChannelError(Exception):
    """What came down the channel is no frame of ours."""


def clip(text: str) -> str:
    """``text`` cut to what a frame carries."""
    return text if len(text) <= MAX_TEXT else text[:MAX_TEXT // 2] + "\n[...]\n" + text[-MAX_TEXT // 2:]


def encode(doc: dict) -> bytes:
    body = json.dumps(doc, allow_nan=True, separators=(",", ":")).encode()
    if len(body) > MAX_FRAME:
        raise ChannelError(f"a frame of {len(body)} bytes is over the cap of {MAX_FRAME}")
    return _HEADER.pack(MAGIC, len(body)) + body


def send(sock: socket.socket, doc: dict | list, fds=()) -> None:
    """Write one frame (or a list of frames, in one write) whole, blocking, with ``fds``
    (descriptors passed along, SCM_RIGHTS)."""
    data = b"".join(encode(d) for d in doc) if isinstance(doc, list) else encode(doc)
    sock.setblocking(True)   # whatever the backend set it to
    sent = socket.send_fds(sock, [data], list(fds)) if fds else 0
    if sent < len(data):
        sock.sendall(data[sent:])


def receive(sock: socket.socket) -> tuple[dict | None, list[int]]:
    """One frame from opcase and the descriptors that came with it (the worker's side, blocking);
    (None, []) at end of file or on bytes that are no frame (opcase writes only whole frames:
    then the backend read from the socket)."""
    data, fds, wanted = bytearray(), [], _HEADER.size
    sock.setblocking(True)
    while len(data) < wanted:
        chunk, got, _, _ = socket.recv_fds(sock, wanted - len(data), 64)
        fds += got
        if not chunk:
            return None, fds
        data += chunk
        if wanted == _HEADER.size and len(data) == wanted:
            magic, length = _HEADER.unpack_from(data)
            if magic != MAGIC or length > MAX_FRAME:
                return None, fds
            wanted += length
    try:
        doc = json.loads(bytes(data[_HEADER.size:]))
    except ValueError:
        return None, fds
    return (doc if isinstance(doc, dict) else None), fds


class FrameReader:
    """opcase's side of a worker's channel: reads what has arrived without blocking."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        sock.setblocking(False)
        self.buffer = bytearray()
        self.fds: deque[int] = deque()      # descriptors received, in order, not yet taken
        self.started: float | None = None   # when the frame now arriving began to
        self.closed = False

    def deadline(self) -> float | None:
        """When the frame now arriving must be whole, or None when none is arriving."""
        return self.started + FRAME_DEADLINE_S if self.started is not None else None

    def take_fds(self, count: int) -> list[int]:
        """The next ``count`` descriptors received (ChannelError when fewer came)."""
        if count < 0 or count > len(self.fds):
            raise ChannelError(f"a frame announced {count} file(s), {len(self.fds)} came")
        return [self.fds.popleft() for _ in range(count)]

    def close(self) -> None:
        while self.fds:
            os.close(self.fds.popleft())

    def read(self) -> list[dict]:
        """Every whole frame that has arrived; ChannelError on anything that is no frame of ours,
        or a frame left incomplete past its deadline."""
        while not self.closed:
            try:
                chunk, fds, _, _ = socket.recv_fds(self.sock, 1 << 16, 64)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                self.closed = True
                break
            self.fds.extend(fds)
            if not chunk:
                self.closed = True
                break
            self.buffer += chunk
            if len(self.buffer) > _HEADER.size + MAX_FRAME:
                raise ChannelError(f"over {MAX_FRAME} bytes arrived without a whole frame")
        frames = []
        while len(self.buffer) >= _HEADER.size:
            magic, length = _HEADER.unpack_from(self.buffer)
            if magic != MAGIC:
                raise ChannelError(f"the worker's channel carried bytes that are no frame: {bytes(self.buffer[:16])!r}")
            if length > MAX_FRAME:
                raise ChannelError(f"a frame header announced {length} bytes, over the cap of {MAX_FRAME}")
            if len(self.buffer) < _HEADER.size + length:
                break
            body = bytes(self.buffer[_HEADER.size:_HEADER.size + length])
            del self.buffer[:_HEADER.size + length]
            try:
                doc = json.loads(body)
            except ValueError:
                raise ChannelError("a frame's body is not JSON") from None
            if not isinstance(doc, dict):
                raise ChannelError("a frame's body is not a JSON object")
            frames.append(doc)
        if not self.buffer:
            self.started = None
        elif self.started is None:
            self.started = time.monotonic()
        if self.started is not None and time.monotonic() > self.started + FRAME_DEADLINE_S:
            raise ChannelError(f"a frame stayed incomplete for over {FRAME_DEADLINE_S:g} s "
                               f"({len(self.buffer)} bytes of it arrived)")
        if self.closed and self.buffer:
            raise ChannelError(f"the channel closed inside a frame ({len(self.buffer)} bytes of it arrived)")
        return frames


# --------------------------------------------------------------------------- arrays as sealed memory

# A file whose seals forbid any further write, growth or shrinking: what the judge maps can
# change under it no more (a writer's later ftruncate would fault the judge's mapping, SIGBUS).
_SEALS = fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE
_REQUIRED_SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE


def sealed(name: str, array: np.ndarray) -> int:
    """A sealed in-memory file (memfd) holding ``array``'s bytes in C order: one pass over them."""
    fd = os.memfd_create(f"opcase-{name}", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        with os.fdopen(os.dup(fd), "wb") as f:
            np.ascontiguousarray(array).tofile(f)
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, _SEALS)
    except BaseException:
        os.close(fd)
        raise
    return fd


def describe(array: np.ndarray) -> dict:
    return {"dtype": array.dtype.str, "shape": [int(n) for n in array.shape], "bytes": int(array.nbytes)}


def map_sealed(fd: int, dtype, shape) -> np.ndarray | str:
    """``fd`` mapped read-only as an array of ``dtype`` and ``shape``, or why it cannot be: not a
    sealed regular file of exactly the bytes that shape needs.  Takes ``fd`` over (closes it)."""
    dtype = np.dtype(dtype)
    shape = tuple(int(n) for n in shape)
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return "is not a regular file"
        try:
            seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
        except OSError:
            return "is not sealed memory"
        if seals & _REQUIRED_SEALS != _REQUIRED_SEALS:
            return "is not sealed against writes"
        if info.st_size != expected:
            return f"holds {info.st_size} bytes, shape {list(shape)} of {dtype.name} needs {expected}"
        if expected == 0:
            array = np.zeros(shape, dtype)
            array.flags.writeable = False
            return array
        with os.fdopen(os.dup(fd), "rb") as f:
            return np.memmap(f, dtype=dtype, mode="r", shape=shape)
    finally:
        os.close(fd)
