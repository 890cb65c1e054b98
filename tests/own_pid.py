"""A test backend's pid as the tests see it.  A confined worker runs in a PID namespace of its own
(harness/worker/pid_namespace.py), where os.getpid() is 2 in every worker; /proc/self/status's NSpid
line lists the pid in each namespace the process is in, that of the procfs's own namespace first."""
from __future__ import annotations

import os


def own_pid() -> int:
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("NSpid:"):
                    return int(line.split()[1])
    except (OSError, IndexError, ValueError):
        pass
    return os.getpid()
