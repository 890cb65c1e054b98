"""Optional compiled loops: a C source shipped in the package, built on first use with the system compiler.

A reference may hand its hot loop to C when numpy has no fixed-order loop fast enough (carafe's
taps, deform_roi_pool's samples).  The C code must do the same float64 operations in the same
order as the numpy path, so the goldens are the same bits either way; which path ran is never
visible in a case file.

- Built with ``cc`` (or ``gcc``) found on PATH and one fixed argument list, ``-O2 -ffp-contract=off
  -fno-fast-math -shared -fPIC``: no multiply-add is fused into one rounding and nothing is
  reassociated, whatever the compiler's defaults.
- Cached per user under ``$XDG_CACHE_HOME/opcase/native`` (default ``~/.cache/opcase/native``),
  named by the sha256 of the source, of the headers it includes with ``#include "..."`` and of the
  arguments, so an edited source or header is rebuilt and a stale library is never loaded; the
  library is written under a temporary name and renamed into place, so processes building at once
  never load a half-written file.
- Verified before it is loaded: the build records the library's sha256 beside it; a library that
  is not this user's, is writable by others, or whose bytes differ from the record (or has no
  record) is rebuilt, never loaded (``verified``).
- No compiler, a failed build or ``OPCASE_NO_CC=1``: ``load`` returns None and the caller runs numpy.
  Why is logged once per source at debug level (logger ``gen.native``), or printed to stderr with
  ``OPCASE_NATIVE_DEBUG=1``.
- A loop that is faster than numpy only on some CPUs asks ``suits_this_cpu(flag)`` first
  (``OPCASE_NATIVE_ANY_CPU=1`` runs it on any CPU).
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

FLAGS = ("-O2", "-ffp-contract=off", "-fno-fast-math", "-shared", "-fPIC")
_log = logging.getLogger(__name__)
_loaded: dict[Path, ctypes.CDLL | None] = {}


# A confined worker's cache is its own; it reads (never writes) the judge's libraries from here.
DIR_ENV = "OPCASE_NATIVE_DIR"


def cache_dir() -> Path:
    if os.environ.get(DIR_ENV):
        return Path(os.environ[DIR_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "opcase" / "native"


def compiler() -> str | None:
    return shutil.which("cc") or shutil.which("gcc")


def disabled() -> bool:
    return os.environ.get("OPCASE_NO_CC", "") not in ("", "0")


@functools.cache
def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags as Linux lists them in /proc/cpuinfo ("avx2", "avx512f", ...); empty where
    there is no such file.  A loop that is only faster than numpy on some CPUs asks here."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as info:
            for line in info:
                if line.startswith("flags"):
                    return frozenset(line.partition(":")[2].split())
    except OSError:
        pass
    return frozenset()


def suits_this_cpu(flag: str) -> bool:
    """Whether a loop that beats numpy only on CPUs with `flag` should run here: the CPU lists it, or
    OPCASE_NATIVE_ANY_CPU=1 (the tests check the bits of the clone this CPU runs that way)."""
    return flag in cpu_flags() or os.environ.get("OPCASE_NATIVE_ANY_CPU", "") not in ("", "0")


def _note(source: Path, why: str) -> None:
    message = f"opcase: {source.name} not compiled ({why}); using the numpy path"
    _log.debug(message)
    if os.environ.get("OPCASE_NATIVE_DEBUG", "") not in ("", "0"):
        print(message, file=sys.stderr)


_LOCAL_INCLUDE = re.compile(rb'^[ \t]*#[ \t]*include[ \t]*"([^"\n]+)"', re.MULTILINE)


def local_headers(source: Path) -> list[Path]:
    """The headers ``source`` includes by ``#include "name"`` (found beside the file that names them, as
    the compiler finds them), and theirs in turn, each once, in the order they are first named.  A name
    that is no file here is left out: the build then fails and numpy runs."""
    found: list[Path] = []
    pending = [source]
    while pending:
        including = pending.pop(0)
        for name in _LOCAL_INCLUDE.findall(including.read_bytes()):
            header = (including.parent / name.decode(errors="replace")).resolve()
            if header.is_file() and header not in found and header != source.resolve():
                found.append(header)
                pending.append(header)
    return found


def library_path(source: Path) -> Path:
    """The cache's name for ``source``'s library: the sha256 of the source, of every header it includes
    (local_headers: an edited header rebuilds every loop that includes it) and of the arguments."""
    digest = hashlib.sha256(source.read_bytes())
    for header in local_headers(source):
        digest.update(b"\0" + header.name.encode() + b"\0" + header.read_bytes())
    digest.update("\0".join(FLAGS).encode())
    return cache_dir() / f"{source.stem}-{digest.hexdigest()[:32]}.so"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _record_path(target: Path) -> Path:
    return target.with_name(target.name + ".sha256")


def verified(target: Path) -> bool:
    """Whether the cached library is the one this user built: owned by this user, writable by no
    one else, and its bytes those whose sha256 the build recorded beside it (in the judge's cache,
    which no confined worker can open: harness.worker.confine)."""
    record = _record_path(target)
    try:
        for path in (target, record):
            info = path.lstat()
            if not path.is_file() or path.is_symlink() or info.st_uid != os.getuid() or info.st_mode & 0o022:
                return False
        return record.read_text(encoding="ascii").strip() == _sha256(target)
    except (OSError, UnicodeDecodeError):
        return False


def _build(source: Path, cc: str) -> Path:
    """The cached library of `source`, verified, or built now (raises OSError or CalledProcessError):
    a library whose recorded hash is absent or differs is never loaded, it is rebuilt."""
    target = library_path(source)
    if verified(target):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, partial = tempfile.mkstemp(prefix=target.stem + ".", suffix=".so.tmp", dir=target.parent)
    os.close(fd)
    try:
        subprocess.run([cc, *FLAGS, "-o", partial, str(source)], check=True, capture_output=True,
                       timeout=120, stdin=subprocess.DEVNULL)
        os.chmod(partial, 0o755)
        digest = _sha256(Path(partial))
        fd, record = tempfile.mkstemp(prefix=target.stem + ".", suffix=".sha256.tmp", dir=target.parent)
        with os.fdopen(fd, "w", encoding="ascii") as f:
            f.write(digest + "\n")
        os.replace(record, _record_path(target))
        os.replace(partial, target)
    finally:
        if os.path.exists(partial):
            os.unlink(partial)
    return target


def load(source: Path) -> ctypes.CDLL | None:
    """The compiled library of the C file `source`, or None where the numpy path must run (see above)."""
    if disabled():
        return None
    if source in _loaded:
        return _loaded[source]
    library = None
    cc = compiler()
    if cc is None:
        _note(source, "no C compiler (cc, gcc) on PATH")
    else:
        try:
            library = ctypes.CDLL(str(_build(source, cc)))
        except subprocess.CalledProcessError as error:
            _note(source, f"{cc} failed: {error.stderr.decode(errors='replace').strip()[:500]}")
        except (OSError, subprocess.SubprocessError) as error:
            _note(source, f"{type(error).__name__}: {error}")
    _loaded[source] = library
    return library


def address(array) -> int:
    """The address of a numpy array's first element (array.ctypes.data), for a compiled loop's pointer argument.
    A writable array's is taken through the buffer protocol, a few times cheaper than ``array.ctypes.data``
    (which builds an object per call: on a small case, a loop's half a dozen pointers cost more than its
    arithmetic); a read-only array's through ``ctypes.data``."""
    if array.flags.writeable and array.flags.c_contiguous and array.nbytes:
        return ctypes.addressof(ctypes.c_char.from_buffer(array))
    return array.ctypes.data


def function(source: Path, name: str, argtypes: list, restype=None):
    """The C function ``name`` of ``source``'s compiled library with its signature set (once), or None
    where the numpy path must run (see load)."""
    library = load(source)
    if library is None:
        return None
    compiled = getattr(library, name)
    if compiled.argtypes is None:
        compiled.restype, compiled.argtypes = restype, argtypes
    return compiled
