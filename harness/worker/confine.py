"""Confining the judged code: every layer this machine offers, each named, none silently absent.

The judge (this process) makes itself not dumpable (prctl PR_SET_DUMPABLE 0): no process of its
user can ptrace it or read /proc/<pid>/mem without CAP_SYS_PTRACE.  A worker, and an exec:
program, confines itself before any of the backend's code runs (``confine_self``), in this order:

- a private HOME, XDG_CACHE_HOME and TMPDIR (a directory of its own, empty);
- no new privileges (PR_SET_NO_NEW_PRIVS: no setuid program gives them back);
- as root: the unprivileged user 65534, where every directory the worker must read is readable
  by others (otherwise this layer is named missing, with why);
- its own user namespace (unshare CLONE_NEWUSER): no capability in the judge's namespace, so no
  ptrace of the judge and no access beyond the plain permission bits;
- Landlock (ruleset, path rules, restrict_self through ctypes): reading and executing only the
  Python installation, the system's libraries, opcase's own packages and the backend's own
  module; writing only its private directory; where the kernel's ABI is 6 or more also no signal
  to a process outside its domain (the judge) and no abstract unix socket outside it.  The cases,
  the results files and opcase's cache are in none of these directories.

What each layer did comes back as a list of "name" and "name: missing (why)" lines, which the
run names in its summary and results ("workers confined: ...").
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import stat
import sys
from pathlib import Path

from harness.worker import pid_namespace

_PR_SET_DUMPABLE, _PR_SET_NO_NEW_PRIVS = 4, 38
_CLONE_NEWUSER = 0x10000000
_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446   # x86-64 and aarch64 alike
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_EXECUTE, _WRITE_FILE, _READ_FILE, _READ_DIR = 1, 2, 4, 8
_FILE_ONLY = _EXECUTE | _WRITE_FILE | _READ_FILE | (1 << 14) | (1 << 15)   # rights a rule on a file may hold
_SCOPE_ABSTRACT_UNIX_SOCKET, _SCOPE_SIGNAL = 1, 2
UNPRIVILEGED_UID = 65534
MISSING = "missing"
_libc = ctypes.CDLL(None, use_errno=True)


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _errno_text() -> str:
    number = ctypes.get_errno()
    return os.strerror(number) if number else "failed"


def landlock_abi() -> int:
    """The kernel's Landlock ABI version, 0 where it has none (or it is disabled)."""
    version = _libc.syscall(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION))
    return max(0, int(version))


def protect_judge() -> str:
    """Make this process not dumpable; the layer's line."""
    if _libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        return f"judge not dumpable: {MISSING} ({_errno_text()})"
    return "judge not dumpable"


def _fs_rights(abi: int) -> int:
    rights = (1 << 13) - 1                  # ABI 1: execute .. make_sym
    if abi >= 2:
        rights |= 1 << 13                   # refer
    if abi >= 3:
        rights |= 1 << 14                   # truncate
    if abi >= 5:
        rights |= 1 << 15                   # ioctl_dev
    return rights


def system_readable() -> list[str]:
    """What any confined program may read and execute: the Python installation, the system's
    libraries and programs, and the few device files a program expects."""
    places = {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable)),
              "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc/ld.so.cache", "/etc/localtime",
              "/etc/passwd", "/etc/group", "/etc/nsswitch.conf", "/dev/null", "/dev/zero", "/dev/urandom",
              "/dev/random", "/sys/devices/system/cpu", "/proc/cpuinfo", "/proc/meminfo"}
    places.update(p for p in sys.path if p and os.path.isdir(p) and "site-packages" in p)
    # Where the user said a backend's imports are found (PYTHONPATH): a backend may import its helpers
    # from there.  Cases kept under such a directory are readable too (harness/GUARANTEES.md).
    places.update(os.path.realpath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and os.path.isdir(p))
    places.update(str(Path(__file__).resolve().parents[2] / package) for package in ("harness", "gen", "specs"))
    return sorted(p for p in places if os.path.exists(p))


def _add_rule(ruleset: int, path: str, rights: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return
    try:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            rights &= _FILE_ONLY
        rule = _PathBeneath(rights, fd)
        if _libc.syscall(_SYS_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(_RULE_PATH_BENEATH),
                         ctypes.byref(rule), ctypes.c_uint32(0)) != 0:
            raise OSError(ctypes.get_errno(), f"landlock_add_rule {path}: {_errno_text()}")
    finally:
        os.close(fd)


def _landlock(readable: list[str], writable: list[str]) -> str:
    abi = landlock_abi()
    if abi < 1:
        return f"Landlock: {MISSING} (the kernel offers none)"
    handled = _fs_rights(abi)
    scoped = _SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL if abi >= 6 else 0
    attr = _RulesetAttr(handled, 0, scoped)
    size = ctypes.sizeof(_RulesetAttr) if abi >= 6 else 16
    ruleset = _libc.syscall(_SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if ruleset < 0:
        return f"Landlock: {MISSING} (landlock_create_ruleset: {_errno_text()})"
    try:
        for path in readable:
            _add_rule(ruleset, path, _EXECUTE | _READ_FILE | _READ_DIR)
        for path in writable:
            _add_rule(ruleset, path, handled)
        if _libc.syscall(_SYS_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0)) != 0:
            return f"Landlock: {MISSING} (landlock_restrict_self: {_errno_text()})"
    except OSError as exc:
        return f"Landlock: {MISSING} ({exc.strerror})"
    finally:
        os.close(ruleset)
    return f"Landlock ABI {abi} (filesystem{', signals, abstract sockets' if scoped else ''})"


def _readable_by_others(path: str) -> bool:
    """Whether every directory above ``path`` lets others through and ``path`` lets them read."""
    current = Path(os.path.realpath(path))
    try:
        if not os.stat(current).st_mode & stat.S_IROTH:
            return False
        for parent in current.parents:
            if not os.stat(parent).st_mode & stat.S_IXOTH:
                return False
    except OSError:
        return False
    return True


def _drop_root(readable: list[str], private_dir: str) -> str:
    if os.geteuid() != 0:
        return ""
    blocked = [p for p in readable if not _readable_by_others(p)]
    if blocked:
        return (f"unprivileged user: {MISSING} (uid {UNPRIVILEGED_UID} could not read {blocked[0]}; "
                f"the user namespace and Landlock below still apply)")
    try:
        os.chown(private_dir, UNPRIVILEGED_UID, UNPRIVILEGED_UID)
        os.setgroups([])
        os.setresgid(UNPRIVILEGED_UID, UNPRIVILEGED_UID, UNPRIVILEGED_UID)
        os.setresuid(UNPRIVILEGED_UID, UNPRIVILEGED_UID, UNPRIVILEGED_UID)
    except OSError as exc:
        return f"unprivileged user: {MISSING} ({exc.strerror})"
    return f"unprivileged user (uid {UNPRIVILEGED_UID})"


def private_home(private_dir: str) -> str:
    """A HOME, cache and temporary directory of the confined program's own (os.environ is set)."""
    for name in ("home", "cache", "tmp"):
        os.makedirs(os.path.join(private_dir, name), mode=0o700, exist_ok=True)
    os.environ.update(HOME=os.path.join(private_dir, "home"), XDG_CACHE_HOME=os.path.join(private_dir, "cache"),
                      TMPDIR=os.path.join(private_dir, "tmp"))
    import tempfile
    tempfile.tempdir = None
    return "private HOME and cache"


def _native_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    path = os.environ.get("OPCASE_NATIVE_DIR") or os.path.join(base, "opcase", "native")
    return path if os.path.isdir(path) else ""


# Directories a backend may also write (and read), as the user grants them: a kernel or profiler
# cache of its own, a test's marks.  Never set by opcase itself (harness/GUARANTEES.md).
WRITABLE_ENV = "OPCASE_WORKER_WRITABLE"


def worker_writable() -> list[str]:
    """The existing directories of WRITABLE_ENV (os.pathsep-separated), resolved."""
    return sorted({os.path.realpath(p) for p in os.environ.get(WRITABLE_ENV, "").split(os.pathsep)
                   if p and os.path.isdir(p)})


def _thread_count() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 0


def confine_self(private_dir: str, readable: list[str], close_outside=None) -> list[str]:
    """Confine this process (and whatever it starts) for good; the layers' lines.  Call it while
    the process has one thread (a user namespace and Landlock need that).  With ``close_outside``
    it also enters a PID namespace of its own (harness.worker.pid_namespace): it returns in a new
    process, PID 2 there, and ``close_outside`` runs in the two that stay behind."""
    # The judge's compiled reference loops (gen.native), to read only: libraries, never a golden.
    native_dir = _native_dir()
    layers = [private_home(private_dir)]
    if native_dir:
        os.environ["OPCASE_NATIVE_DIR"] = native_dir
        readable = [*readable, native_dir]
    if _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        layers.append(f"no new privileges: {MISSING} ({_errno_text()})")
    # Its own /proc/<pid> (descriptors, maps), not the judge's nor any other process's.
    readable = sorted(set(system_readable()) | set(readable) | {f"/proc/{os.getpid()}"})
    dropped = _drop_root(readable, private_dir)
    if dropped:
        layers.append(dropped)
    pid_layer = f"PID namespace: {MISSING} (not asked for)"
    if _libc.unshare(_CLONE_NEWUSER) != 0:
        why = _errno_text()
        threads = _thread_count()
        if threads > 1:   # the kernel refuses a multithreaded process a user namespace (EINVAL)
            why += f"; the worker already ran {threads} threads"
        layers.append(f"user namespace: {MISSING} (unshare: {why})")
        if close_outside is not None:
            pid_layer = f"PID namespace: {MISSING} (needs the user namespace above)"
    else:
        layers.append("user namespace")
        if close_outside is not None:   # needs the user namespace's CAP_SYS_ADMIN
            pid_layer = pid_namespace.enter(_libc, _errno_text, close_outside)
            # Its own /proc/<pid> is now the server's: /proc/self names its pid in the procfs's namespace.
            own = f"/proc/{os.getpid()}"
            with contextlib.suppress(OSError):
                readable = sorted({p for p in readable if p != own} | {f"/proc/{os.readlink('/proc/self')}"})
    layers.append(pid_layer)
    granted = worker_writable()
    if granted:   # the user's own choice (WRITABLE_ENV), so the summary names it
        layers.append(f"writable by the user's leave ({WRITABLE_ENV}): {', '.join(granted)}")
    layers.append(_landlock(readable, [private_dir, "/dev/null", *granted]))
    return layers


def _module_finder_path() -> list[str]:
    return sys.path + ([os.getcwd()] if os.getcwd() not in sys.path else [])


def _find_top_module(module_name: str):
    """The standard library's path finder's spec of ``module_name``'s top-level module on the worker's
    module path (sys.path and the current directory), or None; nothing is imported."""
    import importlib.machinery
    top = module_name.split(".")[0]
    if not top.isidentifier():
        return None
    try:
        return importlib.machinery.PathFinder.find_spec(top, _module_finder_path())
    except (ImportError, ValueError):
        return None


def backend_readable(backend_spec: str) -> list[str]:
    """What a ``module:attr`` backend's own code lives in (the judge asks, in the worker's current
    directory): its top package's directory, or a single-file module's directory (it may import what
    lies beside it), never more."""
    if backend_spec.startswith("exec:"):   # the command's own files: its program, its script
        import shlex
        try:
            words = shlex.split(backend_spec[len("exec:"):])
        except ValueError:
            return []
        return [os.path.realpath(w) for w in words if os.path.isfile(w)]
    from harness.backends import module_and_attr   # the judge's side only: loads no backend
    module_name, is_module, _ = module_and_attr(backend_spec)   # module:attr, or a bare module (its run)
    if not is_module:
        return []   # built-in and plugin backends live in opcase's packages and site-packages
    found = _find_top_module(module_name)
    if found is None or not found.origin:
        return []
    if found.submodule_search_locations:
        return [os.path.realpath(p) for p in found.submodule_search_locations]
    # A single-file backend may import the modules beside it (its helpers, a conftest): its directory.
    # Cases kept under that directory are then readable to it (harness/GUARANTEES.md says so).
    return [os.path.dirname(os.path.realpath(found.origin))]


def readable_within(path: str, backend_spec: str) -> str:
    """The directory the workers of ``backend_spec`` may read that holds ``path`` (the judge asks, of
    its case keys' directory), or ""."""
    real = os.path.realpath(path)
    for place in [*system_readable(), *backend_readable(backend_spec)]:
        if real == place or real.startswith(place.rstrip("/") + "/"):
            return place
    return ""


def _warm_finders(backend_spec: str) -> None:
    """Let the import finders list, while the worker still may, the directories they search for the
    backend's top module: once confined it may open the files it is allowed, not list the current
    directory.  Only the standard library's finder: harness.backends (which parses a backend's name
    in full) loads numpy, whose BLAS threads would make unshare(CLONE_NEWUSER) fail with EINVAL."""
    if not backend_spec.startswith("exec:"):
        _find_top_module(backend_spec.partition(":")[0])


def worker_entry(jobs, results, lifeline, backend_spec: str, log_path: str, private_dir: str,
                 readable: list[str], exec_timeout: float | None = None) -> None:
    """A worker's first code (harness.judge.workers): confine it while it has one thread, before numpy
    (whose BLAS starts threads) or any of the backend's code, then serve."""
    # A session of its own: the judge finds everything the worker started by its session id, even
    # after the worker is gone (harness.worker.process_group.kill_session).
    os.setsid()
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_TRUNC, 0o600)
    _warm_finders(backend_spec)
    def close_outside():   # the keeper's and the reaper's copies: the server alone holds the channel
        for end in (jobs, results, lifeline):
            with contextlib.suppress(OSError):
                end.close()
        os.close(log)
    layers = confine_self(private_dir, readable, close_outside)
    from harness.worker import serve   # only once confined: it loads numpy, whose threads would block unshare
    serve.worker_main(jobs, results, lifeline, backend_spec, log, layers, exec_timeout)


def summary(layers: list[str]) -> str:
    return "workers confined: " + "; ".join(layers) if layers else "workers confined: none"


# What the workers of this process's latest run said (harness.judge.workers), and the judge's own line.
_run_layers: list[str] | None = None
_judge_layer = ""


def protect_judge_once() -> None:
    global _judge_layer
    if not _judge_layer:
        _judge_layer = protect_judge()


def note_run(layers) -> None:
    """Record what a worker of the run under way reported (None: a run starts)."""
    global _run_layers
    if layers is None:
        _run_layers = None
    elif isinstance(layers, list) and all(isinstance(line, str) for line in layers):
        _run_layers = [line[:300] for line in layers[:20]]


def run_summary(backend_spec: str, in_process: bool) -> str:
    """The run's "workers confined: ..." line."""
    if in_process and backend_spec.startswith("exec:"):
        return "workers confined: none (the exec: program ran from this process, unconfined; --jobs 1 confines it)"
    if in_process or _run_layers is None:
        return "workers confined: none (opcase's own backend, run in this process: no foreign code ran)"
    return summary(([_judge_layer] if _judge_layer else []) + _run_layers)
