"""Reading an `exec:` program's response file without trusting what it left there.

The program chooses what sits at the response's path: a FIFO that nobody writes blocks a plain
``read_bytes()`` for ever (past ``--timeout``, which bounds the program, not the judge's read), and a
symlink to /dev/zero never ends.  The judge opens it without following a link and without blocking,
reads only a regular file, and reads at most the bytes a response to the request can need.
"""
from __future__ import annotations

import os
import stat

import numpy as np

# Bytes a response may hold besides its outputs' data (names, shapes, dtypes, a message).
RESPONSE_OVERHEAD_BYTES = 1 << 20


class ResponseFileError(Exception):
    """The response file is not a regular file, or is larger than any response to the request."""


def response_limit(request) -> int:
    """The most bytes a response to ``request`` can take: its outputs inline, and the overhead."""
    data = sum(int(np.prod([int(s) for s in spec.shape], dtype=object)) * np.dtype(spec.dtype).itemsize
               for spec in request.outputs.values())
    return data + RESPONSE_OVERHEAD_BYTES


def read_response_bytes(path, limit: int) -> bytes:
    """The bytes of the regular file at ``path`` (not a link), at most ``limit`` of them."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise ResponseFileError(f"response {os.path.basename(path)} cannot be opened as a plain file "
                                f"({exc.strerror}; a symbolic link is not followed)") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ResponseFileError(f"response {os.path.basename(path)} is not a regular file "
                                    f"(a FIFO, device or socket is refused)")
        if info.st_size > limit:
            raise ResponseFileError(f"response {os.path.basename(path)} has {info.st_size} bytes, more than any "
                                    f"response to this request ({limit})")
        chunks, total = [], 0
        while total <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > limit:
            raise ResponseFileError(f"response {os.path.basename(path)} grew past {limit} bytes while read")
        return b"".join(chunks)
    finally:
        os.close(fd)
