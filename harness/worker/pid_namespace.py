"""A worker in a PID namespace of its own: no process outside it has a pid there, so the backend
can neither signal nor ptrace its judge (kill and ptrace answer ESRCH), and when the worker ends the
kernel ends whatever the backend left running inside it.

The process that unshares CLONE_NEWPID stays outside; its next child is the namespace's PID 1,
which must reap orphans and which the kernel shields from every signal it has no handler for.  So
a worker becomes three processes, of which only the last runs anything of the backend's:

- the keeper, the process the judge started: to the judge its pid is the worker's (signals, its
  process group and session).  It forwards the judge's stop and stack signals to the reaper and
  ends as the server ended: the same exit status, or killed by the same signal;
- the reaper, PID 1: forwards those signals to the server and reaps every orphan; once the server
  has ended it hands the server's status to the keeper and exits, which kills what is left inside;
- the server, PID 2: ``enter`` returns in it, and it confines itself further and serves.

The keeper and the reaper run only this module's code, hold none of the channel's descriptors and
import nothing after the fork.
"""
from __future__ import annotations

import contextlib
import os
import signal
import struct

CLONE_NEWPID = 0x20000000

# What the judge sends a worker (harness.judge.worker_process): SIGTERM to stop, SIGUSR1 for its
# stacks; SIGINT and SIGHUP as a terminal would.  One the worker inherited ignored stays ignored.
_FORWARDED = tuple(s for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, getattr(signal, "SIGUSR1", None))
                   if s is not None)
_STATUS = struct.Struct("=i")


def enter(libc, errno_text, close_outside) -> str:
    """Put this process's future children in a new PID namespace and become its PID 2; the layer's
    line.  Returns in the server only (the keeper and the reaper end in os._exit); where unshare is
    refused, returns at once with the layer named missing, one process as before.
    ``close_outside()`` closes, in the keeper and the reaper, what only the server may hold."""
    if libc.unshare(CLONE_NEWPID) != 0:
        return f"PID namespace: missing (unshare: {errno_text()})"
    forwarded = [s for s in _FORWARDED if signal.getsignal(s) is not signal.SIG_IGN]
    # Held across the forks, so that a stop in between waits for the handler that forwards it.
    held = signal.pthread_sigmask(signal.SIG_BLOCK, forwarded)
    status_read, status_write = os.pipe()
    try:
        reaper = os.fork()
    except OSError as exc:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
        os.close(status_read)
        os.close(status_write)
        return f"PID namespace: missing (fork: {exc.strerror})"
    if reaper:
        os.close(status_write)
        close_outside()
        _keep(reaper, status_read, forwarded, held)
    os.close(status_read)
    try:
        server = os.fork()
    except OSError:
        os._exit(70)   # the keeper reports a worker that exited with status 70 before it was ready
    if server == 0:
        os.close(status_write)
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
        return "PID namespace (the worker is PID 2 under a reaper of its own)"
    close_outside()
    _reap(server, status_write, forwarded, held)


def _forward_to(pid: int, forwarded, held) -> None:
    def forward(signum, _frame):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)
    for number in forwarded:
        signal.signal(number, forward)
    signal.pthread_sigmask(signal.SIG_SETMASK, held)


def _reap(server: int, status_write: int, forwarded, held):
    """PID 1: reap until the server has ended, hand its status over, exit (the kernel then kills
    every process left in the namespace)."""
    try:
        _forward_to(server, forwarded, held)
        status = 0
        while True:
            try:
                pid, wait_status = os.wait()
            except ChildProcessError:
                break
            if pid == server:
                status = wait_status
                break
        with contextlib.suppress(OSError):
            os.write(status_write, _STATUS.pack(status))
    finally:
        os._exit(0)


def _keep(reaper: int, status_read: int, forwarded, held):
    """The judge's child: wait for the reaper, then end as the server did."""
    code = 1
    try:
        _forward_to(reaper, forwarded, held)
        try:
            _, status = os.waitpid(reaper, 0)
        except ChildProcessError:
            status = 0
        data = b""
        with contextlib.suppress(OSError):
            data = os.read(status_read, _STATUS.size)
        # No status: the reaper itself was killed (the judge kills the whole group at once).
        if len(data) == _STATUS.size:
            status = _STATUS.unpack(data)[0]
        if os.WIFSIGNALED(status):
            number = os.WTERMSIG(status)
            code = 128 + number
            for each in forwarded:
                signal.signal(each, signal.SIG_DFL)
            if number not in (signal.SIGKILL, signal.SIGSTOP):
                signal.signal(number, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [number])
            os.kill(os.getpid(), number)   # dies of it, as the server did
        elif os.WIFEXITED(status):
            code = os.WEXITSTATUS(status)
    finally:
        os._exit(code)
