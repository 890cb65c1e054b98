"""Backends that try to reach the goldens or the judge from their worker, for tests/test_confinement.py.

Each returns a case's goldens when its attack works (so a working attack turns its cases green)
and raises, saying what stopped it, when it does not (its cases are then errors).  The test
passes the repository's cases directory and opcase's cache as environment variables, as an
attacker could guess them.
"""
from __future__ import annotations

import ctypes
import os
import signal
from pathlib import Path

import numpy as np

from gen.core.casefile import load

CASES = Path(os.environ.get("OPCASE_TEST_CASES", "/nonexistent"))
JUDGE_CACHE = Path(os.environ.get("OPCASE_TEST_JUDGE_CACHE", "/nonexistent"))


def _goldens_of(path: Path, request) -> dict:
    case = load(path)
    return {name: case.outputs[name].data for name in request.outputs}


def _named(request) -> Path:
    """The case file of the request, found among the committed cases by its shapes and params."""
    for path in sorted(CASES.rglob("*.opcase")):
        case = load(path, verify=False)
        if case.op == request.op and case.params == request.params and all(
                tuple(case.inputs[n].shape) == tuple(a.shape) for n, a in request.inputs.items()):
            return path
    raise RuntimeError(f"no case file found under {CASES}")


def reads_by_path(request):
    return _goldens_of(_named(request), request)


def reads_through_proc(request):
    """The judge's command line names the case files (as `opcase run` was given them)."""
    words = Path(f"/proc/{os.getppid()}/cmdline").read_bytes().split(b"\0")
    for word in words:
        path = Path(word.decode())
        if path.suffix == ".opcase" or path.is_dir():
            global CASES
            CASES = path if path.is_dir() else path.parent
            return _goldens_of(_named(request), request)
    raise RuntimeError("no case path on the judge's command line")


def searches_the_filesystem(request):
    found = []
    for root, _dirs, files in os.walk("/"):
        found += [Path(root, f) for f in files if f.endswith(".opcase")]
        if found:
            break
    if not found:
        raise RuntimeError("no case file found searching from /")
    global CASES
    CASES = found[0].parent.parent.parent
    return _goldens_of(_named(request), request)


def plants_a_library(request):
    """Writes into the judge's cache of compiled libraries (gen.native)."""
    JUDGE_CACHE.mkdir(parents=True, exist_ok=True)
    (JUDGE_CACHE / "planted.so").write_bytes(b"\x7fELF planted")
    raise RuntimeError("planted")


def _judge() -> int:
    """The judge's pid as its own namespace numbers it (the test's wrapper exports it), else the
    parent's: in a PID namespace of its own the worker's parent is its reaper, not the judge."""
    return int(os.environ.get("OPCASE_TEST_JUDGE_PID") or os.getppid())


def signals_the_judge(request):
    os.kill(_judge(), signal.SIGSTOP)
    raise RuntimeError("the judge was stopped")


def reads_the_judges_memory(request):
    with open(f"/proc/{_judge()}/mem", "rb") as memory:
        memory.read(1)
    raise RuntimeError("read the judge's memory")


def ptraces_the_judge(request):
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.ptrace(16, _judge(), None, None) != 0:   # PTRACE_ATTACH
        raise OSError(ctypes.get_errno(), f"ptrace: {os.strerror(ctypes.get_errno())}")
    os.kill(_judge(), signal.SIGKILL)
    raise RuntimeError("attached to the judge")


def leaves_a_daemon(request):
    """Starts a sleeper in a session of its own, which no session sweep finds, then answers as the
    reference does."""
    import subprocess
    subprocess.Popen(["sleep", "600"], start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    from harness.backends.builtin import reference
    return reference().run(request)


def rewrites_the_cases(request):
    """Rewrites the case files under OPCASE_TEST_CASES so that they hold its own outputs (zeros) as
    goldens, checksum included, for the runs after this one; answers zeros."""
    zeros = {name: np.zeros(o.shape, o.dtype) for name, o in request.outputs.items()}
    for path in _case_files():
        rewrite_goldens(path, lambda tensor: np.zeros(tuple(tensor.shape), tensor.dtype).tobytes())
    return zeros


def rewrite_goldens(path: Path, golden_bytes) -> None:
    """Replace each inline output's data of the case file at ``path`` with ``golden_bytes(tensor)``
    and write the envelope's sha256 anew: what anyone who can write the file can do."""
    import hashlib
    from gen.core.proto import opcase_pb2 as pb
    envelope = pb.CaseFile()
    envelope.ParseFromString(path.read_bytes())
    case = pb.Case()
    case.ParseFromString(envelope.case_bytes)
    for tensor in case.outputs:
        if tensor.data:
            tensor.data = golden_bytes(tensor)
    envelope.case_bytes = case.SerializeToString(deterministic=True)
    envelope.case_sha256 = hashlib.sha256(envelope.case_bytes).digest()
    path.write_bytes(envelope.SerializeToString())


def forges_the_ledger(request):
    """Reads the user's case key (OPCASE_KEY_DIR, which the judge's environment names), rewrites the case
    files under OPCASE_TEST_CASES as rewrites_the_cases does and keys them anew with it."""
    from gen.core import case_keys
    from gen.core.casefile import read_checked
    directory = case_keys.key_dir()
    ledger = case_keys.Ledger(directory, (directory / "key").read_bytes())
    for path in _case_files():
        rewrite_goldens(path, lambda tensor: np.zeros(tuple(tensor.shape), tensor.dtype).tobytes())
        ledger.record(path, read_checked(path)[0])
    return {name: np.zeros(o.shape, o.dtype) for name, o in request.outputs.items()}


def _case_files() -> list[Path]:
    """The case files under CASES, an unreadable directory raising (rglob passes over it in silence)."""
    def refuse(error):
        raise error
    found = [Path(root, f) for root, _dirs, files in os.walk(CASES, onerror=refuse) for f in files
             if f.endswith(".opcase")]
    if not found:
        raise RuntimeError(f"no case file under {CASES}")
    return sorted(found)
