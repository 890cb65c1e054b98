"""Killing a process group: what the judge does to a worker and an exec backend to its command."""
from __future__ import annotations

import os
import signal


def kill_process_group(pgid: int) -> None:
    """SIGKILL every process in a group; nothing to do when it is gone already."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
