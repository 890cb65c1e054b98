"""Killing what a worker started: its process group, and every process of its session.

A worker leads a session of its own (harness.worker.confine.worker_entry); an exec: command runs in
a process group of its own inside that session, so that a timeout can kill the command alone.  A
process cannot leave a session except by calling setsid itself, so "every process of the worker's
session" is everything the worker and its commands started, even once the worker is gone (its
orphans keep its session id), even if a signal cut the worker short between starting a command and
recording it.
"""
from __future__ import annotations

import contextlib
import os
import signal
import threading
import time

# The signals that stop a run or a worker (Ctrl-C, CI's cancel, a hang-up, the judge's request).
_STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))

# How long kill_session keeps sweeping for members that were forked while it killed the others.
_SWEEP_S = 2.0


def kill_process_group(pgid: int) -> None:
    """SIGKILL every process in a group; nothing to do when it is gone already."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def session_members(sid: int) -> list[int]:
    """The live processes of session ``sid`` other than its leader (zombies are dead already)."""
    found = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found
    for name in entries:
        if not name.isdigit() or int(name) == sid:
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue   # gone meanwhile
        # pid (comm) state ppid pgrp session ...: comm may hold spaces and parentheses.
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) >= 4 and fields[0] != b"Z" and int(fields[3]) == sid:
            found.append(int(name))
    return found


def kill_session(sid: int) -> None:
    """SIGKILL every process of session ``sid`` but its leader, until none is left (or _SWEEP_S
    passed: one that forks faster than it is killed).  Only for a session this process made (a
    worker's): the caller names it, nothing here guesses."""
    give_up = time.monotonic() + _SWEEP_S
    while True:
        members = session_members(sid)
        if not members:
            return
        for pid in members:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if time.monotonic() >= give_up:
            return
        time.sleep(0.01)   # the killed take a moment to become zombies


# The process groups of the commands this process is running (the exec backend's), so that a
# thread that must end the process (a worker whose judge is gone) kills them even while the main
# thread, which started them, has not got as far as its own cleanup.
_command_groups: set[int] = set()


def note_command_group(pgid: int) -> None:
    """The group ``pgid`` is one of this process's running commands (kill_own_session kills it)."""
    _command_groups.add(pgid)


def forget_command_group(pgid: int) -> None:
    _command_groups.discard(pgid)


def kill_own_session() -> None:
    """In a worker: kill every other process of its session, then its own group (itself included).
    A process that does not lead its session kills only its group: the session is not its own.
    Under Landlock a worker cannot read /proc and finds no members: the judge's sweep of the
    session (harness.judge.worker_process) is then what kills them."""
    for pgid in list(_command_groups):
        kill_process_group(pgid)
    if os.getsid(0) == os.getpid():
        kill_session(os.getpid())
    kill_process_group(0)


@contextlib.contextmanager
def stop_signals_held():
    """Within: a stopping signal waits, and is raised again on the way out.

    Around starting a command: a stop that lands between the fork and the caller holding the new
    process (inside Popen) would unwind past the cleanup that kills the command's group, and the
    command would outlive the run.  Only the main thread can hold them (the only one that gets
    Python's handlers); a signal that is ignored stays ignored."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []

    def hold(signum, frame):
        pending.append(signum)

    previous = {}
    for number in _STOP_SIGNALS:
        if signal.getsignal(number) not in (signal.SIG_IGN, None):
            previous[number] = signal.signal(number, hold)
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        if pending:
            signal.raise_signal(pending[0])   # its own handler now: Stopped, KeyboardInterrupt, ...
