"""One `opcase gen` at a time per output folder, and what a killed one left there removed.

Two gens with different seeds into one `-o` interleaved their cases (each keeps or rewrites the
other's files by name); a SIGKILLed gen left its hidden temporaries (`.NAME.XXXX.tmp`, beside the
case being written) that no later gen removed.  A gen now holds an exclusive lock on
``OUT/.opcase-gen.lock`` for as long as it runs (the kernel drops it when the process dies, however
it dies) and, once it holds it, removes the temporaries of gens that are gone: with the lock held
no other gen can be writing them.
"""
from __future__ import annotations

import fcntl
import os
import re
from pathlib import Path

LOCK_NAME = ".opcase-gen.lock"
# gen.core.casefile's atomic writes: a hidden file beside the target, ".NAME." + random + ".tmp".
_TEMPORARY = re.compile(r"^\..+\.tmp$")
# OUT/OP/SUITE/NAME: temporaries lie at most this many folders below OUT.
_MAX_DEPTH = 3


class OutDirBusy(Exception):
    """Another gen holds the folder."""


class OutDirLock:
    def __init__(self, fd: int, path: Path):
        self.fd, self.path = fd, path

    def release(self) -> None:
        if self.fd < 0:
            return
        try:
            os.unlink(self.path)   # still ours: we hold the lock on this very file
        except OSError:
            pass
        os.close(self.fd)
        self.fd = -1


def hold_out_dir(out_dir) -> OutDirLock:
    """Lock ``out_dir`` for this gen (OutDirBusy if another holds it); remove stale temporaries."""
    Path(out_dir).mkdir(parents=True, exist_ok=True)   # gen makes it anyway
    path = Path(out_dir) / LOCK_NAME
    for _ in range(10):
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise OutDirBusy(f"-o {out_dir}: another opcase gen is writing into it (it holds {path}); "
                             f"wait for it, or give another folder") from None
        try:
            same = os.stat(path, follow_symlinks=False).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:   # not a file its last holder unlinked as we opened it
            remove_stale_temporaries(Path(out_dir))
            return OutDirLock(fd, path)
        os.close(fd)
    raise OutDirBusy(f"-o {out_dir}: its lock {path} keeps changing hands; try again")


def remove_stale_temporaries(out_dir: Path) -> int:
    """Remove the hidden .tmp files of killed gens under ``out_dir``; how many were removed."""
    removed = 0
    base_depth = len(out_dir.parts)
    for folder, dirs, files in os.walk(out_dir, followlinks=False):
        if len(Path(folder).parts) - base_depth >= _MAX_DEPTH:
            dirs[:] = []
        for name in files:
            target = Path(folder) / name
            if _TEMPORARY.match(name) and target.is_file() and not target.is_symlink():
                try:
                    target.unlink()
                    removed += 1
                except OSError:
                    pass
    return removed
