"""Backends that attack the judge rather than compute, loadable by worker processes as
`hostile_backends:NAME`, for tests/test_judge_apart.py.

`patches_the_judge` returns zeros and, inside its own module, rewrites what a judge in its
process would use (numpy's reductions, gen.core.verdict, gen.core.metrics, harness.judge.runner) so
that every comparison passes, and reads the golden from its caller's frames when it can.  The
others write to the worker's descriptors (a fake frame header, short junk), or change its
directory, environment and signal handlers; each does so on calls with psa_type 0 only, so
that a run of one such case and one other shows that only the first is charged.
"""
from __future__ import annotations

import os
import signal
import stat
import struct
import sys

import numpy as np

import gen.core.metrics
import gen.core.verdict
import harness.judge.runner
from harness.backends.builtin import reference

_reference = reference()


def _passed(case, produced, result):
    result.status, result.message = "passed", ""


def _no_failures(*args, **kwargs):
    return []


def _perfect(*args, **kwargs):
    return {"nan_inf_mismatch": 0}


# Everything a judge in this process would call to compare outputs with goldens.
gen.core.verdict.judge = _passed
gen.core.verdict.measure = _no_failures
gen.core.verdict.mistrust = lambda case: ""
gen.core.metrics.compare = _perfect
gen.core.metrics.passes = lambda *args, **kwargs: True
harness.judge.runner.judge = _passed
harness.judge.runner.measure = _no_failures
np.abs = np.absolute = lambda x, *args, **kwargs: np.zeros_like(x)
np.isfinite = lambda x, *args, **kwargs: np.ones(np.shape(x), bool)


def _golden_from_frames(request):
    """The goldens, when a caller up the stack holds the case (a judge in this process would)."""
    frame = sys._getframe(1)
    while frame is not None:
        for value in frame.f_locals.values():
            outputs = getattr(value, "outputs", None)
            if isinstance(outputs, dict) and all(getattr(t, "data", None) is not None for t in outputs.values()) \
                    and outputs.keys() == request.outputs.keys() and hasattr(value, "criteria"):
                return {n: np.array(t.data) for n, t in outputs.items()}
        frame = frame.f_back
    return None


def patches_the_judge(request):
    stolen = _golden_from_frames(request)
    if stolen is not None:
        return stolen
    return {name: np.zeros(o.shape, o.dtype) for name, o in request.outputs.items()}


def zeros(request):
    """What patches_the_judge computes, without the attack: the verdicts it deserves."""
    return {name: np.zeros(o.shape, o.dtype) for name, o in request.outputs.items()}


def _channels() -> list[int]:
    """The worker's own descriptors that lead to another process: its sockets and pipes."""
    found = []
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            mode = os.fstat(fd).st_mode
        except OSError:
            continue
        if fd > 2 and (stat.S_ISSOCK(mode) or stat.S_ISFIFO(mode)):
            found.append(fd)
    return found


def _write_everywhere(data: bytes) -> None:
    for fd in _channels():
        try:
            os.set_blocking(fd, False)
            os.write(fd, data)
        except OSError:
            pass


def _attacked(request) -> bool:
    return request.params.get("psa_type") == 0


def fake_header(request):
    """A frame header announcing a body that never comes (it hung `run --jobs --timeout`)."""
    if _attacked(request):
        _write_everywhere(b"OPCF" + struct.pack("<I", 1000) + struct.pack("<Q", 1 << 40))
    return _reference.run(request)


def short_junk(request):
    """A few bytes that are no frame (they crashed the run with UnpicklingError)."""
    if _attacked(request):
        _write_everywhere(b"\x80junk")
    return _reference.run(request)


def changes_its_process(request):
    """Another directory, environment and SIGTERM handler: its worker's, nothing else's."""
    if _attacked(request):
        os.chdir("/")
        os.environ["PYTHONPATH"] = "/nonexistent"
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    return _reference.run(request)


def fails_then_hangs_when_smaller(request):
    """Fails the case it is given first (a planted error), hangs on any smaller one: a shrink whose
    candidates hang must still end at --time.  Each candidate runs in a fresh, confined worker that
    can keep nothing between runs: the first case's input size comes in OPCASE_TEST_FIRST_SIZE."""
    import time
    size = sum(a.size for a in request.inputs.values())
    if size < int(os.environ.get("OPCASE_TEST_FIRST_SIZE", "0")):
        time.sleep(600)
    out = _reference.run(request)
    return {name: array + np.ones((), array.dtype) for name, array in out.items()}
