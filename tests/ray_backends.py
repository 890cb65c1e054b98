"""Backends for tests/test_ray_cluster.py, loaded by Ray workers as `ray_backends:NAME`.

Each leaves a mark (a file named after its process id) in $OPCASE_TEST_MARKS when it starts a
call, so that a test can tell which worker processes are running cases, and on which node.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

from harness.backends.builtin import reference
from own_pid import own_pid

_reference = reference()
MARKS_ENV = "OPCASE_TEST_MARKS"   # OPCASE_*: the Ray executor passes it on to its tasks


def _mark() -> None:
    Path(os.environ[MARKS_ENV], str(own_pid())).touch()


def slow(request):
    """The reference, after two seconds: long enough to kill a node under a running case."""
    _mark()
    time.sleep(2)
    return _reference.run(request)


def hangs(request):
    """Never returns."""
    _mark()
    time.sleep(600)
    return _reference.run(request)
