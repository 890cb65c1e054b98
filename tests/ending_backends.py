"""Backends that end or outlive their process, loadable by worker processes as `ending_backends:NAME`.

Each stands for a real way a kernel library takes its process down (a C exit(0) from a fatal-error
path, os._exit, a segfault, the OOM killer's SIGKILL) or leaves a process behind (a helper it
starts and never stops), for the tests of tests/test_processes.py.
"""
from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import time

from harness.backends.builtin import reference

_reference = reference()
# The program a backend leaves running: the tests find it by the marker in its environment.
LINGERING = ["sleep", "600"]


def c_exit_0(request):
    """libc's exit(0): no Python finally or atexit runs, and the status says success."""
    ctypes.CDLL(None).exit(0)


def os_exit_0(request):
    os._exit(0)


def segfault(request):
    ctypes.string_at(0)


def sigkill(request):
    os.kill(os.getpid(), signal.SIGKILL)


def starts_helper_and_hangs(request):
    """Starts a helper process (in its own process group, where a child goes by default) and never returns."""
    subprocess.Popen(LINGERING, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(600)
    return _reference.run(request)
