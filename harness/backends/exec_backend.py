"""The exec backend: an implementation in any language, run as a separate program for each call.

    opcase run CASES --backend exec:'./my_kernels --device 0'

For every call the harness makes a fresh temporary directory and writes into it

    request.pb                 a serialized ``opcase.Case`` (gen/core/proto/opcase.proto), plain,
                               with no CaseFile envelope: op, params, inputs (data inline, or for a
                               tensor over 1 MiB a ``sidecar`` whose ``path`` names a raw
                               little-endian C-order file in the same directory), and the outputs'
                               name, shape, dtype and layout with no data.  No golden, no criteria,
                               no expected outcome, no case name.
    request.pb.in.<input>      those sidecar files

then runs ``COMMAND ... REQUEST RESPONSE`` (the two absolute paths appended as the last two
arguments) from the directory opcase was started in, with TMPDIR set to that temporary directory,
stdin from /dev/null and stdout and stderr captured.  The command writes a serialized
``opcase.Response`` to RESPONSE and exits 0:

  * ``outputs``: every requested output with exactly the requested name, shape and dtype; its
    bytes inline in ``data`` or in a sidecar file beside RESPONSE (``sidecar.path`` a bare file
    name, ``sidecar.length`` its size; ``sidecar.sha256`` is checked when set);
  * or ``rejected: true`` with a ``message``: the call breaks a parameter check (BAD_PARAM), or,
    with ``not_supported: true`` too, is declined as not supported (mlu-ops' NOT_SUPPORTED);
  * ``kernel_seconds`` (optional): the kernel's own time for the call; unset, the harness
    records the command's wall time (process start and file IO included).

Anything else is an error for that case, quoting the last lines of the command's output: a
non-zero exit status, death by a signal, a response missing or unparsable, an output missing,
extra, duplicated or of the wrong shape, dtype or byte count, and running past the timeout
(``opcase run --timeout S``, or the environment variable OPCASE_EXEC_TIMEOUT).  The command
runs in its own process group, which is killed after every call, however it ended: nothing it
started outlives the call.  The run goes on with the next case.

Which kernels the command implements: the harness runs ``COMMAND ... --list-supported`` once.
If that exits 0, each line of its stdout names a supported kernel, optionally followed by the
dtype variants it handles (``psamask_forward float32``; no dtype means every one; ``#`` starts a
comment); cases of anything not listed are *skipped*.  A command that exits non-zero (it does
not know the option), crashes or times out there is taken to support everything.  `opcase run`
warns, before the run, of a line that names no known kernel or no dtype, and of a list that
names no kernel at all.
"""
from __future__ import annotations

import hashlib
import math
import os
import re
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
from google.protobuf.message import DecodeError

from gen.core.backend import BackendLoadError, InvalidArgument, NotSupported, Request
from gen.core.casefile import DEFAULT_SIDECAR_BYTES, le_bytes_view, value_to_pb, write_sidecar
from harness.worker.process_group import (forget_command_group, kill_process_group, note_command_group,
                                          stop_signals_held)
from gen.core.proto import opcase_pb2 as pb
from gen.core.timing import MAX_TIMEOUT_S, BackendProtocolError
from harness.backends.exec_response_file import ResponseFileError, read_response_bytes, response_limit

PREFIX = "exec:"
TIMEOUT_ENV = "OPCASE_EXEC_TIMEOUT"
LIST_OPTION = "--list-supported"
REQUEST_NAME, RESPONSE_NAME, OUTPUT_LOG = "request.pb", "response.pb", "output.log"
# How long `COMMAND --list-supported` may take when no timeout is set.
PROBE_TIMEOUT_S = 60.0
# How much of the command's output an error quotes.
TAIL_BYTES, TAIL_LINES = 4000, 20

_DTYPES = {"float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool"}
_SAFE_NAME = re.compile(r"[A-Za-z0-9_.+-]+")


class ExecError(BackendProtocolError):
    """The command failed, or broke the protocol; the runner reports the message as it is."""


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    text = f"exited with status {code}"
    if code > 128:   # how a shell reports a child killed by a signal
        try:
            text += f" (a shell's code for {signal.Signals(code - 128).name})"
        except ValueError:
            pass
    return text


def _tail(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(max(0, path.stat().st_size - TAIL_BYTES))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    lines = [line for line in text.splitlines() if line.strip()]
    return "\n".join(lines[-TAIL_LINES:])


def _execute(argv: list[str], directory: Path, stdout_path: Path, stderr_path: Path,
             timeout: float | None) -> tuple[int | None, float]:
    """Run argv to completion, then kill its process group; (exit status or None at the timeout, wall time)."""
    env = dict(os.environ, TMPDIR=str(directory))
    with open(stdout_path, "wb") as out, open(stderr_path, "ab" if stderr_path == stdout_path else "wb") as err:
        start = time.perf_counter()
        proc = None
        try:
            with stop_signals_held():   # a stop inside Popen, after its fork, would lose the command
                try:
                    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out,
                                            stderr=subprocess.STDOUT if stderr_path == stdout_path else err,
                                            env=env, **_grouping())
                except OSError as exc:
                    raise ExecError(f"cannot start {shlex.join(argv[:1])}: {exc.strerror or exc}") from None
                note_command_group(proc.pid)
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            code = None
        finally:
            # The command's process group goes with the call, however it ended: a daemon it left
            # behind, and at a timeout, Ctrl-C or SIGTERM the command itself (its own group gets no
            # signal from the terminal or from whoever stopped opcase).  In a worker it stays in the
            # worker's session, which the judge kills whole when the worker goes, should the
            # worker's own unwinding not get here (harness.worker.process_group).
            wall = time.perf_counter() - start
            if proc is not None:
                _kill_group(proc)
                forget_command_group(proc.pid)
        return code, wall


def _grouping() -> dict:
    """Where the command runs: in a worker (it leads a session of its own) a process group of its
    own in the worker's session, which the worker and the judge kill whole when the worker goes;
    anywhere else (opcase's own process, in a terminal's session) a session of its own, so that no
    controlling terminal stops it on a read or a write."""
    return {"process_group": 0} if os.getsid(0) == os.getpid() else {"start_new_session": True}


def _kill_group(proc: subprocess.Popen) -> None:
    kill_process_group(proc.pid)
    if proc.returncode is not None:
        return
    # Reaped with os.waitpid, not Popen.wait: a SIGTERM/SIGHUP that stops opcase raises (Stopped)
    # inside the Popen.wait it interrupts, and if that lands between its lock's acquire and the
    # `with` block, the lock stays taken and a second Popen.wait would hang forever.
    try:
        _, status = os.waitpid(proc.pid, 0)
    except ChildProcessError:       # reaped already, by the wait the signal interrupted
        return
    proc.returncode = os.waitstatus_to_exitcode(status)


# --------------------------------------------------------------------------- request

def _sidecar_name(base: str, io: str, name: str, index: int) -> str:
    return f"{base}.{io}.{name}" if _SAFE_NAME.fullmatch(name) and name not in (".", "..") else f"{base}.{io}.{index}"


def write_request(request: Request, directory: Path, sidecar_bytes: int = DEFAULT_SIDECAR_BYTES) -> Path:
    """Write the request (and its sidecars) into ``directory``; return the request's path."""
    msg = pb.Case(op=request.op)
    for key, value in sorted(request.params.items()):
        msg.params[key].CopyFrom(value_to_pb(value))
    names = list(request.layouts) + [n for n in request.inputs if n not in request.layouts]
    for index, name in enumerate(names):
        layout = request.layouts.get(name, "")
        if name not in request.inputs:
            msg.inputs.add(name=name, layout=layout, absent=True)
            continue
        array = np.asarray(request.inputs[name])
        t = msg.inputs.add(name=name, shape=[int(s) for s in array.shape], dtype=array.dtype.name, layout=layout)
        if array.nbytes > sidecar_bytes:
            t.sidecar.CopyFrom(write_sidecar(directory / _sidecar_name(REQUEST_NAME, "in", name, index), array))
        else:
            t.data = le_bytes_view(array).tobytes()
    for name, spec in request.outputs.items():
        msg.outputs.add(name=name, shape=[int(s) for s in spec.shape], dtype=np.dtype(spec.dtype).name,
                        layout=spec.layout)
    path = directory / REQUEST_NAME
    path.write_bytes(msg.SerializeToString(deterministic=True))
    return path


# --------------------------------------------------------------------------- response

def read_response(path: Path, request: Request) -> tuple[dict | None, pb.Response]:
    """Parse and check RESPONSE: (outputs, message), outputs None when rejected.

    Raises ExecError (without the command's output: the caller adds it) when it is unusable.
    """
    if not os.path.lexists(path):
        raise ExecError(f"wrote no response (expected an opcase.Response at the last argument, {path.name})")
    try:   # never blocks on a FIFO, never follows a link to /dev/zero, never reads past the bound
        raw = read_response_bytes(path, response_limit(request))
    except ResponseFileError as exc:
        raise ExecError(str(exc)) from None
    msg = pb.Response()
    try:
        msg.ParseFromString(raw)
    except DecodeError:
        raise ExecError(f"response is not an opcase.Response message ({len(raw)} bytes, "
                        f"starting {raw[:16].hex(' ') or 'empty'})") from None
    if msg.rejected:
        return None, msg
    outputs: dict[str, np.ndarray] = {}
    for t in msg.outputs:
        if t.name in outputs:
            raise ExecError(f"response holds output {t.name!r} twice")
        if t.name not in request.outputs:
            raise ExecError(f"response holds output {t.name!r}, which was not asked for "
                            f"(asked: {', '.join(request.outputs)})")
        outputs[t.name] = _output_array(path.parent, t, request.outputs[t.name])
    missing = [n for n in request.outputs if n not in outputs]
    if missing:
        raise ExecError(f"response lacks output(s) {', '.join(map(repr, missing))} and does not reject the call"
                        + (f" (message: {msg.message})" if msg.message else ""))
    if msg.HasField("kernel_seconds") and not (math.isfinite(msg.kernel_seconds) and msg.kernel_seconds >= 0):
        raise ExecError(f"response's kernel_seconds {msg.kernel_seconds!r} is not a duration")
    return outputs, msg


def _output_array(directory: Path, t: pb.Tensor, spec) -> np.ndarray:
    where = f"output {t.name!r}"
    want_dtype, want_shape = np.dtype(spec.dtype), tuple(int(s) for s in spec.shape)
    if t.dtype != want_dtype.name:
        raise ExecError(f"{where} has dtype {t.dtype!r}, expected {want_dtype.name!r}")
    if tuple(t.shape) != want_shape:
        raise ExecError(f"{where} has shape {list(t.shape)}, expected {list(want_shape)}")
    dtype = want_dtype.newbyteorder("<")
    expected = int(np.prod(want_shape, dtype=np.int64)) * dtype.itemsize
    storage = t.WhichOneof("storage")
    if storage == "sidecar":
        name = t.sidecar.path
        if not name or name in (".", "..") or "/" in name or os.sep in name:
            raise ExecError(f"{where}: sidecar path {name!r} must be a bare file name beside the response")
        side = directory / name
        try:
            size = side.stat().st_size
        except OSError as exc:
            raise ExecError(f"{where}: sidecar {name!r} cannot be read ({exc.strerror})") from None
        if size != expected or t.sidecar.length != expected:
            raise ExecError(f"{where}: sidecar {name!r} has {size} bytes and records {t.sidecar.length}; "
                            f"shape {list(want_shape)} of {want_dtype.name} needs {expected}")
        data = np.fromfile(side, dtype=dtype, count=int(np.prod(want_shape, dtype=np.int64)))
        if t.sidecar.sha256 and hashlib.sha256(memoryview(data).cast("B")).digest() != t.sidecar.sha256:
            raise ExecError(f"{where}: sidecar {name!r} does not match its sha256")
        return data.reshape(want_shape)
    raw = t.data if storage == "data" else b""
    if len(raw) != expected:
        raise ExecError(f"{where} has {len(raw)} bytes, shape {list(want_shape)} of {want_dtype.name} "
                        f"needs {expected}")
    return np.frombuffer(raw, dtype=dtype).reshape(want_shape)


# --------------------------------------------------------------------------- the backend

class ExecBackend:
    """``exec:COMMAND``: runs COMMAND once per call (module docstring: the protocol)."""

    measures_time = True    # run() returns (outputs, seconds): kernel_seconds, else the command's wall time

    def __init__(self, command: str | list[str], timeout: float | None = None,
                 sidecar_bytes: int = DEFAULT_SIDECAR_BYTES):
        self.argv = shlex.split(command) if isinstance(command, str) else list(command)
        if not self.argv:
            raise BackendLoadError("backend 'exec:': give a command, e.g. exec:'./my_kernels --device 0'")
        program = self.argv[0]
        if shutil.which(program) is None:
            raise BackendLoadError(f"backend exec:{shlex.join(self.argv)}: {program!r} is not an executable "
                                   f"file or a command on PATH")
        self.command = shlex.join(self.argv)
        self.name = f"exec:{self.command}"
        self.origin = f"exec: runs `{self.command} REQUEST RESPONSE` per case (opcase.Case in, opcase.Response out)"
        self.timeout = timeout
        self.sidecar_bytes = sidecar_bytes
        self.probe_note = ""
        self._supported: dict[str, set[str]] | None = None
        self._probed = False
        self.declarations: list[tuple[int, str, list[str]]] = []   # (line number, kernel, dtypes) declared

    # ------------------------------------------------------------------ supports
    def supported(self) -> dict[str, set[str]] | None:
        """What `COMMAND --list-supported` declared: op -> dtypes (empty: all); None: everything."""
        if not self._probed:
            self._probed = True
            self._supported = self._probe()
        return self._supported

    def _probe(self) -> dict[str, set[str]] | None:
        with tempfile.TemporaryDirectory(prefix="opcase-exec-") as tmp:
            directory = Path(tmp)
            out, err = directory / "stdout", directory / "stderr"
            code, _ = _execute(self.argv + [LIST_OPTION], directory, out, err,
                               min(self.timeout or PROBE_TIMEOUT_S, PROBE_TIMEOUT_S))
            if code != 0:
                why = "timed out" if code is None else _describe_exit(code)
                self.probe_note = f"`{self.command} {LIST_OPTION}` {why}: every kernel is tried"
                return None
            table: dict[str, set[str]] = {}
            self.declarations = []
            for number, line in enumerate(out.read_text("utf-8", "replace").splitlines(), 1):
                words = line.split("#", 1)[0].split()
                if words:
                    table.setdefault(words[0], set()).update(words[1:])
                    self.declarations.append((number, words[0], words[1:]))
            self.probe_note = f"kernels from `{self.command} {LIST_OPTION}`"
            return table

    def declaration_warnings(self, known_ops) -> list[str]:
        """One line per `--list-supported` line that names a kernel not in ``known_ops`` or a dtype no
        tensor can have (a typo there silently skips that kernel's cases), or one line when the
        command declared no kernel at all (every case would be skipped)."""
        if self.supported() is None:
            return []
        where = f"`{self.command} {LIST_OPTION}`"
        if not self.declarations:
            return [f"warning: {where} exited 0 and named no kernel: every case is skipped"]
        known, lines = set(known_ops), []
        for number, op, dtypes in self.declarations:
            if op not in known:
                lines.append(f"warning: {where} line {number}: {op!r} is not a known kernel "
                             f"(known: {', '.join(sorted(known))})")
            unknown = [d for d in dtypes if d not in _DTYPES]
            if unknown:
                lines.append(f"warning: {where} line {number}: {', '.join(map(repr, unknown))} "
                             f"{'is not a dtype' if len(unknown) == 1 else 'are not dtypes'} "
                             f"(dtypes: {', '.join(sorted(_DTYPES))})")
        return lines

    def supports(self, op: str, dtype: str) -> bool:
        table = self.supported()
        if table is None:
            return True
        if op not in table:
            return False
        return not table[op] or not dtype or dtype in table[op]

    # ------------------------------------------------------------------ run
    def run(self, request: Request):
        with tempfile.TemporaryDirectory(prefix="opcase-exec-", ignore_cleanup_errors=True) as tmp:
            directory = Path(tmp)
            request_path = write_request(request, directory, self.sidecar_bytes)
            response_path = directory / RESPONSE_NAME
            log = directory / OUTPUT_LOG
            code, wall = _execute(self.argv + [str(request_path), str(response_path)], directory, log, log,
                                  self.timeout)
            if code is None:
                raise self._error(f"timed out after {self.timeout:g} s; the command and its children were killed",
                                  log)
            if code != 0:
                raise self._error(_describe_exit(code), log)
            try:
                outputs, msg = read_response(response_path, request)
            except ExecError as exc:
                raise self._error(str(exc), log) from None
            if outputs is None:
                refusal = NotSupported if msg.not_supported else InvalidArgument
                raise refusal(msg.message or "rejected (the response gives no message)")
            seconds = msg.kernel_seconds if msg.HasField("kernel_seconds") else wall
            # Copies: the directory and its files go when this returns.
            return {name: np.array(array) for name, array in outputs.items()}, seconds

    def _error(self, what: str, log: Path) -> ExecError:
        tail = _tail(log)
        return ExecError(f"{self.name}: {what}" + (f"\noutput of the command (last lines):\n{tail}" if tail
                                                   else "\n(the command printed nothing)"))


def from_spec(spec: str, timeout: float | None = None) -> ExecBackend:
    """``exec:COMMAND ...`` as given to --backend, with ``timeout`` seconds a call (the caller's
    --timeout); with none, the user's OPCASE_EXEC_TIMEOUT if set."""
    command = spec[len(PREFIX):]
    text = "" if timeout is not None else os.environ.get(TIMEOUT_ENV, "").strip()
    if text:
        try:
            timeout = float(text)
        except ValueError:
            timeout = -1.0
        if not (math.isfinite(timeout) and 0 < timeout <= MAX_TIMEOUT_S):
            raise BackendLoadError(f"{TIMEOUT_ENV}={text!r}: give a positive number of seconds, "
                                   f"at most {MAX_TIMEOUT_S:g}")
    try:
        return ExecBackend(command, timeout=timeout)
    except ValueError as exc:   # shlex: unbalanced quotes
        raise BackendLoadError(f"backend {spec!r}: {exc}") from None
