"""Writing files so that a reader never sees half of one: temporaries beside their target renamed into
place, little-endian bytes of an array, hashing in blocks on a thread of its own, and dropping the
pages of what was written."""
from __future__ import annotations

from pathlib import Path
from typing import Iterator
import hashlib
import math
import mmap
import os
import tempfile

import numpy as np

from gen.core.overlap import Background


# Sidecar digests are computed in blocks so that multi-GB tensors never sit in memory twice.
_HASH_BLOCK = 16 << 20


def element_count(shape) -> int:
    """Elements of a tensor of ``shape``, as an exact Python int (an int64 product can wrap)."""
    return math.prod(int(d) for d in shape)


def le_bytes_view(array: np.ndarray) -> np.ndarray:
    """The array as C-contiguous little-endian, without copying when it already is."""
    array = np.asarray(array)
    if array.dtype.byteorder == ">":
        array = array.astype(array.dtype.newbyteorder("<"))
    return np.ascontiguousarray(array)


def temporary_beside(path: Path) -> tuple[int, str]:
    """(fd, name) of a new hidden temporary file in ``path``'s directory, to be renamed to ``path``
    once whole.  Its mode is what a plain open() would give (0666 less the umask), not
    mkstemp's 0600: a suite generated for a team stays readable by the team."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.fchmod(fd, 0o666 & ~_umask())
    return fd, tmp


def _umask() -> int:
    """The process's umask, read where Linux shows it; setting it to read it back (the only
    portable way) would race with other threads creating files."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write(path: Path, chunks: Iterator[bytes] | bytes | str) -> None:
    """Write to a temporary file beside ``path`` and rename it into place: readers see the old
    file or the whole new one, never a part.  Text is written as UTF-8; missing parent folders
    are made."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(chunks, str):
        chunks = chunks.encode("utf-8")
    fd, tmp = temporary_beside(path)
    try:
        with os.fdopen(fd, "wb") as f:
            if isinstance(chunks, (bytes, bytearray, memoryview)):
                f.write(chunks)
            else:
                for chunk in chunks:
                    f.write(chunk)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def blocks(raw: memoryview) -> Iterator[memoryview]:
    for start in range(0, len(raw), _HASH_BLOCK):
        yield raw[start:start + _HASH_BLOCK]


def hashing(raw: memoryview) -> Background:
    """The sha256 of ``raw``, computed on a thread of its own (hashlib releases the GIL), so that
    writing the same bytes goes on beside it."""
    def digest() -> bytes:
        hashed = hashlib.sha256()
        for block in blocks(raw):
            hashed.update(block)
        return hashed.digest()
    return Background(digest)


def drop_pages(array, upto_element: int | None = None, from_element: int = 0) -> None:
    """Let the OS reclaim the pages of a memory-mapped tensor between two elements (by
    default: all of it up to ``upto_element``).

    Streaming passes over multi-GB tensors call this as they go, so that pages already read
    or written do not stay resident (written ones go to the file first; either kind is read
    back from the file if touched again).  No-op for arrays that are not file mappings.
    """
    mm = getattr(array, "_mmap", None)
    if mm is None or not hasattr(mm, "madvise") or not isinstance(array, np.memmap):
        return
    count = array.size if upto_element is None else min(upto_element, array.size)
    start_in_map = array.offset % mmap.ALLOCATIONGRANULARITY   # where the array begins inside the map
    begin = start_in_map + max(0, from_element) * array.itemsize
    begin -= begin % mmap.PAGESIZE
    end = start_in_map + count * array.itemsize
    end -= end % mmap.PAGESIZE
    if end > begin:
        try:
            mm.madvise(mmap.MADV_DONTNEED, begin, end - begin)
        except (OSError, ValueError):
            pass   # advice only
