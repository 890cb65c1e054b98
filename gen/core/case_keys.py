"""Keyed case checksums: which case files this user's opcase wrote, and with what content.

A case file's envelope carries the sha256 of its Case bytes, and those bytes carry each sidecar's
sha256.  That catches a truncated or corrupt file, not a rewritten one: whoever rewrites a golden
can write its new sha256 beside it.  So every case file opcase writes is also recorded in a
ledger kept outside every case directory, in the user's key directory ($OPCASE_KEY_DIR, else
$XDG_DATA_HOME/opcase/case-keys, else ~/.local/share/opcase/case-keys): one small entry per
file, an HMAC-SHA256, under a key of 32 random bytes only this user can read, of the file's real
path and its envelope's checksum.  The judge looks each case it runs up:

- keyed: the ledger has the path and the HMAC matches, so the file is as opcase wrote it here;
- refused: the ledger has the path and the HMAC does not match: the file was rewritten after
  opcase wrote it, and the case is an error;
- unkeyed: the ledger has no entry for the path (cases committed to a repository, written by
  another user or on another machine, or moved since): judged as before, and counted.

Case files carry nothing of the user's, so they stay byte-identical on every machine.  Workers
never reach the key directory (Landlock gives them their own module's directory, the Python
installation and a private directory; harness/GUARANTEES.md).  The entry's name is an HMAC of the
path too, so the ledger does not list the paths it knows.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
import hashlib
import hmac
import os
import stat
import tempfile

KEY_DIR_VARIABLE = "OPCASE_KEY_DIR"
KEY_BYTES = 32

KEYED, UNKEYED, REFUSED = "keyed", "unkeyed", "refused"


class KeysUnavailable(Exception):
    """No usable key directory: cases are written and run unkeyed, and the run says why."""


def key_dir() -> Path:
    """Where this user's key and ledger live (not created here)."""
    given = os.environ.get(KEY_DIR_VARIABLE)
    if given:
        if not os.path.isabs(given):
            raise KeysUnavailable(f"${KEY_DIR_VARIABLE} ({given!r}) is not an absolute path")
        return Path(given)
    data = os.environ.get("XDG_DATA_HOME", "")
    if not os.path.isabs(data):   # unset, empty or relative: the XDG rule is to ignore it
        try:
            data = str(Path.home() / ".local" / "share")
        except (KeyError, RuntimeError) as exc:   # no $HOME and no passwd entry
            raise KeysUnavailable(f"no home directory to keep case keys in ({exc}); set ${KEY_DIR_VARIABLE}") from None
    return Path(data) / "opcase" / "case-keys"


def _own_private_directory(directory: Path) -> None:
    """Make ``directory`` (mode 0700) or check that it is a directory of this user's that nobody else
    may write: one another user could write is no place for a key."""
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = os.lstat(directory)
    except OSError as exc:
        raise KeysUnavailable(f"cannot make {directory} ({exc.strerror or exc})") from None
    if not stat.S_ISDIR(info.st_mode):
        raise KeysUnavailable(f"{directory} is not a directory")
    if info.st_uid != os.geteuid() or info.st_mode & 0o022:
        raise KeysUnavailable(f"{directory} is not this user's own directory (owner {info.st_uid}, mode "
                              f"{stat.S_IMODE(info.st_mode):o}): others could write the key")


def _read_key(path: Path) -> bytes | None:
    """The key at ``path``, or None when there is none yet."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise KeysUnavailable(f"cannot read {path} ({exc.strerror or exc})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o077 \
                or info.st_size != KEY_BYTES:
            raise KeysUnavailable(f"{path} is not this user's own {KEY_BYTES}-byte file of mode 0600")
        key = os.read(fd, KEY_BYTES + 1)
    finally:
        os.close(fd)
    if len(key) != KEY_BYTES:
        raise KeysUnavailable(f"{path} changed while it was read")
    return key


def _new_key(path: Path) -> None:
    """Write a fresh key at ``path`` unless another process does first (link() never replaces)."""
    fd, tmp = tempfile.mkstemp(prefix=".key.", dir=path.parent)   # mode 0600
    try:
        os.write(fd, os.urandom(KEY_BYTES))
        os.fsync(fd)
        os.close(fd)
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass                  # another opcase made it meanwhile: that one is the key
    except OSError as exc:
        raise KeysUnavailable(f"cannot write {path} ({exc.strerror or exc})") from None
    finally:
        try:
            os.unlink(tmp)
        except OSError:
            pass


# The ledger's folders this process made or found (record's mkdir at most once each).
_made: set = set()


@dataclass(frozen=True)
class Ledger:
    directory: Path
    key: bytes

    @classmethod
    def open(cls, directory: Path, create: bool) -> "Ledger | None":
        """The ledger in ``directory``; with ``create``, its key made where there is none, else None
        where there is none (nothing was keyed there yet).  Raises KeysUnavailable."""
        path = directory / "key"
        if not create and not os.path.lexists(path):
            return None
        _own_private_directory(directory)
        key = _read_key(path)
        if key is None:
            if not create:
                return None
            _new_key(path)
            key = _read_key(path)
        return cls(directory, key)

    def _tag(self, *parts: bytes) -> bytes:
        return hmac.new(self.key, b"\0".join(parts), hashlib.sha256).digest()

    def _entry(self, real: bytes) -> Path:
        name = self._tag(b"opcase case path", real).hex()
        return self.directory / "ledger" / name[:2] / name

    def record(self, path: Path, case_sha256: bytes) -> None:
        """Record that opcase wrote ``path`` with this envelope checksum.  Raises OSError."""
        real = os.fsencode(os.path.realpath(path))
        entry = self._entry(real)
        if entry.parent not in _made:   # a mkdir that finds the folder there costs as much as the write
            entry.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            _made.add(entry.parent)
        fd, tmp = tempfile.mkstemp(prefix=".entry.", dir=entry.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(self._tag(b"opcase case file", real, case_sha256))
            os.replace(tmp, entry)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise

    def state(self, path: Path, case_sha256: bytes) -> str:
        """KEYED, UNKEYED or REFUSED (the module's docstring) for the file at ``path`` whose envelope's
        checksum, already checked against its bytes, is ``case_sha256``."""
        real = os.fsencode(os.path.realpath(path))
        try:
            with open(self._entry(real), "rb") as f:
                recorded = f.read(KEY_BYTES + 1)
        except FileNotFoundError:
            return UNKEYED
        except OSError:
            # an entry that is there and cannot be read proves nothing either way
            return UNKEYED
        return KEYED if hmac.compare_digest(recorded, self._tag(b"opcase case file", real, case_sha256)) else REFUSED

    def forget(self, path: Path) -> None:
        """Drop ``path``'s entry (a temporary case removed with its directory)."""
        try:
            os.unlink(self._entry(os.fsencode(os.path.realpath(path))))
        except OSError:
            pass


_opened: dict[str, Ledger | KeysUnavailable] = {}


def ledger(create: bool = False) -> Ledger | None:
    """This user's ledger, opened once per key directory per process; None where nothing was keyed
    yet, unless ``create`` (a command writing cases) makes its key.  Raises KeysUnavailable, with the
    reason, where there can be none."""
    directory = key_dir()
    known = _opened.get(str(directory))
    if known is None:
        try:
            known = Ledger.open(directory, create)
        except KeysUnavailable as exc:
            known = exc
        if known is None:
            return None           # not remembered: a gen in this process may make the key later
        _opened[str(directory)] = known
    if isinstance(known, KeysUnavailable):
        raise KeysUnavailable(str(known))
    return known


def ledger_or_none(create: bool = False) -> Ledger | None:
    try:
        return ledger(create)
    except KeysUnavailable:
        return None


def unavailable_reason() -> str:
    """Why cases cannot be keyed here, or "" when they can."""
    try:
        if ledger() is None:
            _could_make(key_dir())
    except KeysUnavailable as exc:
        return str(exc)
    return ""


def _could_make(directory: Path) -> None:
    """Raise KeysUnavailable unless ``directory``'s nearest existing ancestor is a directory this user
    may write, so that a run can say why nothing was keyed without making the key itself."""
    ancestor = directory
    while not os.path.lexists(ancestor) and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not os.path.isdir(ancestor) or not os.access(ancestor, os.W_OK | os.X_OK):
        raise KeysUnavailable(f"cannot make {directory} ({ancestor} is not a directory this user may write)")
