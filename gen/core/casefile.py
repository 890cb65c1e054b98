"""Case files: one protobuf ``Case`` per file, in a checksummed envelope.

Layout on disk::

    DIR/<name>.opcase                 CaseFile envelope (format version, Case bytes, sha256)
    DIR/<name>.opcase.<io>.<tensor>   sidecar: raw little-endian tensor bytes, for big tensors

Small tensors are stored inline.  A tensor larger than ``sidecar_bytes`` is written
to a sidecar whose length and sha256 the case records; it is read back
memory-mapped.  Every write goes to a temporary file in the same directory and is
renamed into place, so a reader never sees half a file.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
import hashlib
import math
import os
import re
import stat

from google.protobuf.message import DecodeError
import numpy as np

from gen.core import case_keys
from gen.core.file_writes import atomic_write, blocks, drop_pages, element_count, le_bytes_view, temporary_beside
from gen.core.proto import opcase_pb2 as pb
from gen.core.sidecars import PrewrittenSidecar, SidecarWriter, SpillFile, write_sidecar

# Defined beside this module and re-exported, so that `from gen.core.casefile import NAME` keeps working.
__all__ = ["PrewrittenSidecar", "SidecarWriter", "SpillFile", "atomic_write", "blocks", "drop_pages",
           "element_count", "le_bytes_view", "temporary_beside", "write_sidecar"]


FORMAT_VERSION = 1


SUFFIX = ".opcase"


# The metrics a threshold may name (gen/core/README.md, Accuracy); specs and case files both hold to them.
METRICS = ("diff1", "diff2", "diff3", "diff3_2", "diff4", "exact")


DEFAULT_SIDECAR_BYTES = 1 << 20


# The most bytes a case file (the envelope; tensors over DEFAULT_SIDECAR_BYTES live in sidecars)
# may have: far over any opcase writes, and checked before a byte is read, so that a path to
# a device or a huge file is refused rather than read into memory.
MAX_CASE_FILE_BYTES = 256 << 20


# A case's expected outcome in the file (gen.core.backend names the same three: EXPECT_*).
_EXPECT_CODES = {"ok": pb.OK, "rejected": pb.REJECTED, "not_supported": pb.NOT_SUPPORTED}


_EXPECT_NAMES = {code: name for name, code in _EXPECT_CODES.items()}


_DTYPES = {"float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool"}


class CaseFileError(Exception):
    """A case file that cannot be trusted: unreadable, truncated, tampered or inconsistent."""


# A name read from a spec or a case file (operator, suite, case, tensor) becomes one component
# of a file's path; it must be a plain one: never '.' or '..', no separator, nothing a shell or
# a file system treats specially, short enough for the suffixes added to it.
_PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+=-]{0,159}")


PLAIN_NAME_RULE = "1 to 160 letters, digits and . _ + = -, starting with a letter or digit"


def is_plain_name(name) -> bool:
    return isinstance(name, str) and _PLAIN_NAME.fullmatch(name) is not None


def contained_path(out_dir: Path, *names: str) -> Path:
    """``out_dir``/names..., each a plain file-name component; ValueError otherwise, and if the
    result, symlinks resolved, is not inside ``out_dir``."""
    bad = next((n for n in names if not is_plain_name(n)), None)
    if bad is not None:
        raise ValueError(f"{bad!r} is not a plain file name ({PLAIN_NAME_RULE})")
    path = Path(out_dir).joinpath(*names)
    if not path.resolve().is_relative_to(Path(out_dir).resolve()):
        raise ValueError(f"{path} resolves to {path.resolve()}, outside {out_dir}")
    return path


def physical_memory() -> int | None:
    """Bytes of the machine's memory, or None where the system does not say."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


@dataclass
class Tensor:
    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    layout: str
    data: np.ndarray | None = None   # None: shape-only (rejected cases) or absent optional input
    absent: bool = False             # an optional input left out of the call
    # Bytes already written to a temporary file beside the case (a golden streamed to disk):
    # (that file, its Sidecar record).  save() moves it into place instead of writing data.
    prewritten: tuple | None = None


@dataclass
class Threshold:
    metric: str
    value: float
    provenance: str
    baseline: str = ""
    baseline_value: float = 0.0
    rate: float = 0.0
    floor: float = 0.0
    cap: float = 0.0


@dataclass
class Undetermined:
    """Elements of an exactly judged output where more than one answer is right (a near-tie):
    element ``index[i]`` (flat, C order, ascending) accepts ``acceptable[offsets[i]:offsets[i + 1]]``."""
    index: np.ndarray          # int64 [k]
    offsets: np.ndarray        # int64 [k + 1]
    acceptable: np.ndarray     # int64 [offsets[-1]]

    @classmethod
    def of(cls, answers: dict) -> "Undetermined":
        """From {flat index: acceptable answers}."""
        index = np.array(sorted(answers), dtype=np.int64)
        lists = [sorted(set(int(a) for a in answers[i])) for i in index]
        offsets = np.cumsum([0] + [len(a) for a in lists]).astype(np.int64)
        acceptable = np.array([a for a_list in lists for a in a_list], dtype=np.int64)
        return cls(index, offsets, acceptable)


@dataclass
class Case:
    op: str
    suite: str
    name: str
    params: dict
    inputs: dict[str, Tensor]
    outputs: dict[str, Tensor]
    criteria: dict[str, list[Threshold]] = field(default_factory=dict)
    expect: str = "ok"               # "ok", "rejected" or "not_supported" (gen.core.backend.EXPECT_*)
    expect_check: str = ""
    expect_message: str = ""
    seed: int = 0
    generator_version: str = ""
    spec_sha256: str = ""
    spec_path: str = ""
    note: str = ""
    zero_golden_ok: bool = False
    dtype: str = ""
    nondeterministic_sums: bool = False   # repeated calls need agree only in their verdict (--bitwise)
    undetermined: dict[str, Undetermined] = field(default_factory=dict)   # per exactly judged output
    # Thresholds reported beside the judged ones and never judged (an imported mlu-ops case keeps the rule
    # it was not judged by), and outputs not judged at all (mlu-ops' threshold_use 0).
    informative: dict[str, list[Threshold]] = field(default_factory=dict)
    not_compared: tuple[str, ...] = ()
    key_state: str = ""   # read with load(keyed=True): gen.core.case_keys' KEYED or UNKEYED; never written


def value_to_pb(value) -> pb.Value:
    if isinstance(value, (bool, np.bool_)):
        return pb.Value(b=bool(value))
    if isinstance(value, (int, np.integer)):
        return pb.Value(i=int(value))
    if isinstance(value, (float, np.floating)):
        return pb.Value(f=float(value))
    if isinstance(value, str):
        return pb.Value(s=value)
    raise TypeError(f"parameter value {value!r} has unsupported type {type(value).__name__}")


def _value_from_pb(value: pb.Value):
    kind = value.WhichOneof("kind")
    if kind is None:
        raise CaseFileError("a parameter has no value")
    return getattr(value, kind)


def _tensor_to_pb(t: Tensor, case_path: Path, io: str, sidecar_bytes: int) -> pb.Tensor:
    msg = pb.Tensor(name=t.name, shape=[int(s) for s in t.shape], dtype=np.dtype(t.dtype).name,
                    layout=t.layout, absent=t.absent)
    if t.prewritten is not None:
        temporary, record = t.prewritten
        sidecar_path = case_path.with_name(f"{case_path.name}.{io}.{t.name}")
        os.replace(temporary, sidecar_path)
        msg.sidecar.CopyFrom(pb.Sidecar(path=sidecar_path.name, length=record.length, sha256=record.sha256))
        return msg
    if t.data is None:
        return msg
    if tuple(t.data.shape) != tuple(t.shape) or t.data.dtype != np.dtype(t.dtype):
        raise ValueError(f"tensor {t.name}: data {t.data.dtype}{list(t.data.shape)} does not match "
                         f"declared {np.dtype(t.dtype)}{list(t.shape)}")
    if t.data.nbytes > sidecar_bytes:
        sidecar_path = case_path.with_name(f"{case_path.name}.{io}.{t.name}")
        msg.sidecar.CopyFrom(write_sidecar(sidecar_path, t.data))
    else:
        msg.data = le_bytes_view(t.data).tobytes()
    return msg


def to_proto(case: Case, case_path: Path, sidecar_bytes: int = DEFAULT_SIDECAR_BYTES) -> pb.Case:
    msg = pb.Case(op=case.op, suite=case.suite, name=case.name, expect=_EXPECT_CODES[case.expect],
                  expect_check=case.expect_check, expect_message=case.expect_message, seed=case.seed,
                  generator_version=case.generator_version, spec_sha256=case.spec_sha256,
                  spec_path=case.spec_path, note=case.note, zero_golden_ok=case.zero_golden_ok,
                  dtype=case.dtype, nondeterministic_sums=case.nondeterministic_sums)
    for key, value in case.params.items():
        msg.params[key].CopyFrom(value_to_pb(value))
    for t in case.inputs.values():
        msg.inputs.append(_tensor_to_pb(t, case_path, "in", sidecar_bytes))
    for t in case.outputs.values():
        msg.outputs.append(_tensor_to_pb(t, case_path, "out", sidecar_bytes))
    for output in {**case.criteria, **case.informative, **dict.fromkeys(case.not_compared)}:
        crit = msg.criteria.add(output=output, not_compared=output in case.not_compared)
        for kept, thresholds in ((crit.thresholds, case.criteria.get(output, [])),
                                 (crit.informative, case.informative.get(output, []))):
            for th in thresholds:
                kept.add(metric=th.metric, value=th.value, provenance=th.provenance, baseline=th.baseline,
                         baseline_value=th.baseline_value, rate=th.rate, floor=th.floor, cap=th.cap)
        undetermined = case.undetermined.get(output)
        if undetermined is not None and undetermined.index.size:
            crit.undetermined.index.extend(undetermined.index.tolist())
            crit.undetermined.offsets.extend(undetermined.offsets.tolist())
            crit.undetermined.acceptable.extend(undetermined.acceptable.tolist())
    return msg


def _threshold_from_pb(t) -> Threshold:
    return Threshold(metric=t.metric, value=t.value, provenance=t.provenance, baseline=t.baseline,
                     baseline_value=t.baseline_value, rate=t.rate, floor=t.floor, cap=t.cap)


def save(case: Case, path: str | os.PathLike, sidecar_bytes: int = DEFAULT_SIDECAR_BYTES) -> Path:
    """Write ``case`` to ``path`` (sidecars first, the envelope last, each atomically)."""
    path = Path(path)
    if path.suffix != SUFFIX:
        path = path.with_name(path.name + SUFFIX)
    path.parent.mkdir(parents=True, exist_ok=True)
    # deterministic: the same case always gives the same bytes (params is a protobuf map)
    case_bytes = to_proto(case, path, sidecar_bytes).SerializeToString(deterministic=True)
    envelope = pb.CaseFile(format_version=FORMAT_VERSION, case_bytes=case_bytes,
                           case_sha256=hashlib.sha256(case_bytes).digest())
    atomic_write(path, envelope.SerializeToString())
    _record_written(path, envelope.case_sha256)
    return path


def _record_written(path: Path, case_sha256: bytes) -> None:
    """Key the file just written (gen.core.case_keys); without a ledger it stays unkeyed, which the
    commands that write cases say once (``case_keys.unavailable_reason``)."""
    keys = case_keys.ledger_or_none(create=True)
    if keys is not None:
        try:
            keys.record(path, case_sha256)
        except OSError:
            pass   # a full or read-only key directory: the case is written, unkeyed, and runs as such


def _dtype_of(name: str, where: str) -> np.dtype:
    if name not in _DTYPES:
        raise CaseFileError(f"{where}: unknown dtype {name!r}")
    return np.dtype(name).newbyteorder("<")


def _read_sidecar(case_path: Path, t: pb.Tensor, dtype: np.dtype, shape: tuple[int, ...],
                  verify: bool) -> np.ndarray:
    side = case_path.parent / t.sidecar.path
    where = f"{case_path}: tensor {t.name}: sidecar {side.name}"
    if os.sep in t.sidecar.path or t.sidecar.path in ("", ".", ".."):
        raise CaseFileError(f"{where}: sidecar path must name a file beside the case")
    try:
        info = side.stat()
    except OSError as exc:
        raise CaseFileError(f"{where}: cannot read ({exc.strerror})") from None
    if not stat.S_ISREG(info.st_mode):
        raise CaseFileError(f"{where}: not a regular file")
    size = info.st_size
    expected = element_count(shape) * dtype.itemsize
    if size != t.sidecar.length or size != expected:
        raise CaseFileError(f"{where}: {size} bytes on disk, case records {t.sidecar.length}, "
                            f"shape needs {expected}")
    if size == 0:
        return np.zeros(shape, dtype)
    array = np.memmap(side, dtype=dtype, mode="r", shape=shape)
    if verify:
        digest = hashlib.sha256()
        hashed = 0
        for block in blocks(memoryview(array.reshape(-1).view(np.uint8))):
            digest.update(block)
            # Reading for the digest must not leave a multi-GB tensor resident.
            drop_pages(array, (hashed + len(block)) // dtype.itemsize, hashed // dtype.itemsize)
            hashed += len(block)
        if digest.digest() != t.sidecar.sha256:
            raise CaseFileError(f"{where}: sha256 mismatch (file changed or corrupt)")
    return array


def _tensor_from_pb(case_path: Path, t: pb.Tensor, verify: bool, with_data: bool = True) -> Tensor:
    where = f"{case_path}: tensor {t.name!r}"
    dtype = _dtype_of(t.dtype, where)
    shape = tuple(int(s) for s in t.shape)
    if any(s < 0 for s in shape):
        raise CaseFileError(f"{where}: negative dimension in shape {list(shape)}")
    if math.prod(s for s in shape if s) * dtype.itemsize >= 2**63:
        # numpy refuses such a shape even with no elements (a zero dimension among huge ones)
        raise CaseFileError(f"{where}: shape {list(shape)} is too large for any array")
    storage = t.WhichOneof("storage") if with_data else None
    data = None
    if storage == "data":
        expected = element_count(shape) * dtype.itemsize
        if len(t.data) != expected:
            raise CaseFileError(f"{where}: {len(t.data)} bytes inline, shape {list(shape)} of {dtype.name} "
                                f"needs {expected}")
        data = np.frombuffer(t.data, dtype=dtype).reshape(shape)
    elif storage == "sidecar":
        data = _read_sidecar(case_path, t, dtype, shape, verify)
    return Tensor(name=t.name, shape=shape, dtype=np.dtype(t.dtype), layout=t.layout, data=data,
                  absent=t.absent)


class NotARegularFile(ValueError):
    """A path that is no regular file, or one too large to read."""


def regular_file_bytes(path: Path, limit: int) -> bytes:
    """The bytes of ``path``, a regular file of at most ``limit`` bytes, both checked before a byte
    is read: a FIFO would block, /dev/zero never end.  O_NONBLOCK lets the open of a FIFO return
    at once.  Raises NotARegularFile, or OSError when it cannot be read."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotARegularFile(f"{path}: not a regular file")
        if info.st_size > limit:
            raise NotARegularFile(f"{path}: {info.st_size} bytes, over the limit of {limit} bytes")
        # Its size and one byte more (read(n) allocates n bytes at once): bounded, and a file
        # that grows meanwhile is seen to.
        raw = f.read(info.st_size + 1)
    if len(raw) > info.st_size:
        raise NotARegularFile(f"{path}: grew while being read")
    return raw


def _read_case_file(path: Path) -> bytes:
    try:
        return regular_file_bytes(path, MAX_CASE_FILE_BYTES)
    except NotARegularFile as exc:
        raise CaseFileError(f"{exc} (a case file is a regular file; tensors over 1 MiB live in sidecar "
                            f"files)") from None
    except OSError as exc:
        raise CaseFileError(f"{path}: cannot read ({exc.strerror})") from None


def read_envelope(path: Path) -> pb.Case:
    return read_checked(path)[1]


class CaseRewritten(CaseFileError):
    """A keyed case file whose content is not what opcase wrote there (gen.core.case_keys); with the
    names the file gives (unchecked: for the report's grouping only, each made plain)."""

    def __init__(self, message: str, op: str = "", suite: str = "", name: str = ""):
        super().__init__(message)
        self.op, self.suite, self.name = (n if is_plain_name(n) else "" for n in (op, suite, name))


def read_checked(path: Path) -> tuple[bytes, pb.Case]:
    """(the envelope's checksum, once checked against its bytes; the Case message)."""
    raw = _read_case_file(path)
    envelope = pb.CaseFile()
    try:
        envelope.ParseFromString(raw)
    except DecodeError:
        raise CaseFileError(f"{path}: not an opcase file (corrupt or truncated)") from None
    if envelope.format_version != FORMAT_VERSION:
        raise CaseFileError(f"{path}: format version {envelope.format_version}, this opcase reads "
                            f"{FORMAT_VERSION} (truncated, or written by another version)")
    if hashlib.sha256(envelope.case_bytes).digest() != envelope.case_sha256:
        raise CaseFileError(f"{path}: checksum mismatch (file truncated or modified)")
    msg = pb.Case()
    try:
        msg.ParseFromString(envelope.case_bytes)
    except DecodeError:
        raise CaseFileError(f"{path}: case payload does not parse") from None
    return envelope.case_sha256, msg


def from_proto(msg: pb.Case, path: Path, verify: bool = True, goldens: bool = True) -> Case:
    if msg.expect not in _EXPECT_NAMES:
        raise CaseFileError(f"{path}: case states no expected outcome")
    # These names become parts of paths (export, reports, REPRO lines): plain ones only.
    named = [("op", msg.op), ("suite", msg.suite), ("name", msg.name)]
    named += [("tensor", t.name) for t in (*msg.inputs, *msg.outputs)]
    for what, name in named:
        if not is_plain_name(name):
            raise CaseFileError(f"{path}: {what} {name!r} is not a plain name ({PLAIN_NAME_RULE})")
    criteria: dict[str, list[Threshold]] = {}
    undetermined: dict[str, Undetermined] = {}
    informative: dict[str, list[Threshold]] = {}
    for crit in msg.criteria:
        if crit.thresholds or not (crit.informative or crit.not_compared):
            criteria[crit.output] = [_threshold_from_pb(t) for t in crit.thresholds]
        if crit.informative:
            informative[crit.output] = [_threshold_from_pb(t) for t in crit.informative]
        if crit.HasField("undetermined"):
            undetermined[crit.output] = Undetermined(np.array(crit.undetermined.index, dtype=np.int64),
                                                     np.array(crit.undetermined.offsets, dtype=np.int64),
                                                     np.array(crit.undetermined.acceptable, dtype=np.int64))
    case = Case(
        op=msg.op, suite=msg.suite, name=msg.name,
        params={k: _value_from_pb(v) for k, v in sorted(msg.params.items())},
        inputs={t.name: _tensor_from_pb(path, t, verify) for t in msg.inputs},
        outputs={t.name: _tensor_from_pb(path, t, verify, goldens) for t in msg.outputs},
        criteria=criteria, informative=informative,
        not_compared=tuple(crit.output for crit in msg.criteria if crit.not_compared),
        expect=_EXPECT_NAMES[msg.expect],
        expect_check=msg.expect_check, expect_message=msg.expect_message, seed=msg.seed,
        generator_version=msg.generator_version, spec_sha256=msg.spec_sha256, spec_path=msg.spec_path,
        note=msg.note, zero_golden_ok=msg.zero_golden_ok, dtype=msg.dtype,
        nondeterministic_sums=msg.nondeterministic_sums, undetermined=undetermined,
    )
    _check_complete(case, path)
    _check_undetermined(case, path)
    return case


def _check_complete(case: Case, path: Path) -> None:
    """Every input the call passes carries data (goldens may be missing: a case before
    completion is readable, runner.run_loaded refuses to judge it); every threshold names a
    known metric."""
    missing = [t.name for t in case.inputs.values() if not t.absent and t.data is None]
    if missing:
        raise CaseFileError(f"{path}: input(s) {missing} carry no data (neither inline nor a sidecar)")
    stated = [*case.criteria.values(), *case.informative.values()]
    unknown = sorted({th.metric for thresholds in stated for th in thresholds} - set(METRICS))
    if unknown:
        raise CaseFileError(f"{path}: threshold(s) on unknown metric(s) {unknown} (known: {', '.join(METRICS)})")
    strangers = sorted(set(case.not_compared) - set(case.outputs))
    if strangers:
        raise CaseFileError(f"{path}: not_compared names no output of the case: {strangers}")


def _check_undetermined(case: Case, path: Path) -> None:
    """Undetermined elements: only beside an exact threshold (judged, or reported beside the judged
    ones: an imported mlu-ops case judged by its file's rule keeps the docs' exact one informative),
    inside their output, ascending, each with its slice of acceptable answers (the judge indexes by
    them: nothing may point outside)."""
    for name, u in case.undetermined.items():
        where = f"{path}: criterion of '{name}': undetermined elements"
        stated = [*case.criteria.get(name, []), *case.informative.get(name, [])]
        if name not in case.outputs or not any(th.metric == "exact" for th in stated):
            raise CaseFileError(f"{where} without an exact threshold on an output of that name")
        size = element_count(case.outputs[name].shape)
        if u.index.size and (u.index[0] < 0 or u.index[-1] >= size or np.any(np.diff(u.index) <= 0)):
            raise CaseFileError(f"{where}: indices must ascend within the output's {size} elements")
        if (u.offsets.size != u.index.size + 1 or u.offsets[0] != 0 or np.any(np.diff(u.offsets) < 1)
                or u.offsets[-1] != u.acceptable.size):
            raise CaseFileError(f"{where}: offsets must give each element at least one acceptable answer")


def load(path: str | os.PathLike, verify: bool = True, goldens: bool = True, keyed: bool = False) -> Case:
    """Read a case; raise CaseFileError for anything that does not check out.

    ``verify`` re-hashes sidecars: set it False only for data you have just written, or read
    again.  ``goldens`` False leaves every output's data None (its shape and dtype stay): what
    a process that only calls a backend reads (harness.judge.workers), never the answers.
    ``keyed`` looks the file up in this user's ledger (gen.core.case_keys): the case's ``key_state``
    says what it found, and a file rewritten since opcase wrote it raises CaseRewritten.
    """
    path = Path(path)
    checksum, msg = read_checked(path)
    state = key_state(path, checksum) if keyed else ""
    if state == case_keys.REFUSED:
        raise CaseRewritten(f"{path}: not the file opcase wrote here: its content changed after it was generated "
                            f"(its keyed checksum in {case_keys.key_dir()} does not match); regenerate it",
                            msg.op, msg.suite, msg.name)
    case = from_proto(msg, path, verify, goldens)
    case.key_state = state
    return case


def key_copy(source: Path, target: Path) -> None:
    """Key ``target``, a byte-for-byte copy of ``source`` just made, if ``source`` is keyed."""
    try:
        checksum = read_checked(Path(target))[0]
    except CaseFileError:
        return
    if key_state(Path(source), checksum) == case_keys.KEYED:
        _record_written(Path(target), checksum)


def key_state(path: Path, case_sha256: bytes) -> str:
    """case_keys' KEYED, UNKEYED or REFUSED for a file whose checked envelope checksum is ``case_sha256``;
    UNKEYED where this user has no ledger."""
    keys = case_keys.ledger_or_none()
    return keys.state(path, case_sha256) if keys is not None else case_keys.UNKEYED


def find(paths) -> list[Path]:
    """Every case file under ``paths`` (files or directories), sorted for a stable order; a file
    that several of them reach (``cases cases/x``, a path given twice, a symlink) counts once."""
    found: list[Path] = []
    seen: set[Path] = set()
    for p in map(Path, paths):
        for q in sorted(q for q in p.rglob(f"*{SUFFIX}") if q.is_file()) if p.is_dir() else [p]:
            real = q.resolve()
            if real not in seen:
                seen.add(real)
                found.append(q)
    return found


def recorded_versions(paths) -> dict[str, set[tuple[str, str]]]:
    """Per operator, the (spec sha256, generator version) pairs its cases among ``paths`` record;
    unreadable files are left to whoever reads them."""
    versions: dict[str, set] = {}
    for path in paths:
        try:
            msg = read_envelope(Path(path))
        except CaseFileError:
            continue
        versions.setdefault(msg.op, set()).add((msg.spec_sha256, msg.generator_version))
    return versions


def mixed_versions(versions: dict[str, set]) -> dict[str, int]:
    """Operators of ``versions`` (recorded_versions) whose cases were written from more than one
    spec version or generator, with how many."""
    return {op: len(found) for op, found in versions.items() if len(found) > 1}
