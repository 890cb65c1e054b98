"""opcase <-> mlu-ops case files: import (adding goldens and thresholds) and export."""
from __future__ import annotations

import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from gen.core.backend import BackendLoadError, TensorInfo
from gen.core.casefile import (SUFFIX, Case, CaseFileError, Threshold, contained_path, element_count, find, load,
                               physical_memory, save)
from gen.core.checks import first_failure
from gen.core.registry import UnknownOp, spec_for
from gen.core.spec import CHECK_STATUSES, SpecError
from gen.generate import GENERATOR_VERSION, GenerationError, Generator
from harness.judge.workers import load_apart
from harness.mluops import MluopsError, UnsupportedKernel, case_from_mluops, load_mluops, save_mluops
from harness.mluops.writer import SUITE

MLUOPS_SUFFIXES = (".pb", ".prototxt", ".pbtxt")
# What an imported case is judged by: the mlu-ops file's own thresholds (and threshold_use), as
# mluop_gtest judges it, or the docs' rule that `opcase gen` applies.  The other is kept and reported.
FILE_RULE, DOCS_RULE = "file", "docs"
THRESHOLD_RULES = (FILE_RULE, DOCS_RULE)


@dataclass
class Outcome:
    source: Path
    status: str          # written | skipped | error
    message: str
    target: Path | None = None


def find_mluops(paths) -> list[tuple[Path, Path]]:
    """Every mlu-ops case file under ``paths``, each with its path relative to the PATH it was
    found under (a file given by itself: just its name)."""
    found: list[tuple[Path, Path]] = []
    for p in map(Path, paths):
        if p.is_dir():
            found.extend((q, q.relative_to(p)) for q in sorted(p.rglob("*"))
                         if q.is_file() and q.suffix in MLUOPS_SUFFIXES)
        else:
            found.append((p, Path(p.name)))
    return found


def complete_imported(case: Case, baseline_name: str | None, load_baseline=load_apart) -> Case:
    """Goldens and thresholds for an imported case, as for a generated one.

    A call that breaks one of the spec's checks becomes an expected rejection: that is
    what a conforming implementation must do with it.
    """

    spec = spec_for(case.op)
    case.generator_version, case.spec_sha256, case.spec_path = GENERATOR_VERSION, spec.sha256, spec.path.name
    tensors = {n: None if t.absent else TensorInfo(tuple(t.shape), t.dtype.name, t.layout)
               for n, t in (*case.inputs.items(), *case.outputs.items())}
    failed = first_failure(spec, tensors, case.params)
    if failed is not None:
        case.expect, case.expect_check, case.expect_message = CHECK_STATUSES[failed.status], failed.id, failed.message
        return case
    baseline = load_baseline(baseline_name or spec.criteria.baseline) if spec.criteria.mode == "dynamic" else None
    return Generator(spec, baseline).complete(case)


def judge_by(case: Case, mlu, rule: str) -> str:
    """Make ``case`` (completed with the docs' rule) judged by ``rule``: the file's own thresholds
    (FILE_RULE: its outputs with threshold_use 0 are not judged) or the docs' rule (DOCS_RULE); the
    other rule's thresholds stay in the case as informative.  Returns how the case is judged, in words."""
    if case.expect != "ok":
        return ""
    if mlu.threshold_source == "none":
        return "judged by the docs' rule (the file states no thresholds)"
    provenance = f"the mlu-ops file's own ({mlu.threshold_source}, {mlu.path.name})"
    own = {name: [Threshold(metric=metric, value=value, provenance=provenance) for metric, value in pairs]
           for name, pairs in mlu.thresholds.items()}
    docs = case.criteria
    if rule == FILE_RULE:
        case.criteria = {name: own.get(name, []) for name in case.outputs}
        case.informative = {name: thresholds for name, thresholds in docs.items() if thresholds}
        case.not_compared = tuple(name for name in case.outputs if not own.get(name))
        return f"judged by the file's thresholds ({mlu.threshold_source}); the docs' rule reported beside them"
    case.informative = {name: thresholds for name, thresholds in own.items() if thresholds}
    return f"judged by the docs' rule; the file's thresholds ({mlu.threshold_source}) reported beside them"


def import_all(paths, out_dir: Path, baseline: str | None, max_size: int | None = None,
               timeout: float | None = None, rule: str = FILE_RULE) -> list[Outcome]:
    """Import every mlu-ops case file under ``paths`` into ``out_dir``, judged by ``rule``
    (THRESHOLD_RULES); one Outcome per file, so that a bad file costs only itself.  A baseline other
    than opcase's own runs in a worker process (harness.judge.workers.load_apart), loaded once per name and
    replaced when one dies."""
    loaded: dict = {}

    def load_baseline(name: str):
        if name not in loaded:
            loaded[name] = load_apart(name, timeout)
        return loaded[name]
    found = find_mluops(paths)
    # source -> its MluCase read without data, or its Outcome
    headers = {source: _one_file(source, lambda: _header(source)) for source, _ in found}
    names = _case_names(found, headers)
    written: dict[Path, Path] = {}       # target -> source
    outcomes = []
    for source, _ in found:
        header = headers[source]
        if isinstance(header, Outcome):
            outcomes.append(header)
            continue
        outcomes.append(_one_file(source, lambda: import_file(source, names[source], header, out_dir, baseline,
                                                              max_size, written, load_baseline, rule)))
    return outcomes


def _one_file(source: Path, step):
    """``step()``, or the error Outcome of whatever it raised: one file's failure, whatever it
    is, must not stop the others."""
    try:
        return step()
    except SpecError:
        raise                     # an installed spec that cannot say how mlu-ops carries its kernel: no file can
    except Exception as exc:  # noqa: BLE001 - see above; the file is reported as an error
        return Outcome(source, "error", f"{type(exc).__name__}: {exc}")


def _header(source: Path):
    """The file's MluCase without data, or its Outcome when it cannot be imported."""
    try:
        return load_mluops(source, with_data=False)
    except UnsupportedKernel as exc:
        return Outcome(source, "skipped", f"not one of opcase's kernels ({exc.op_name})")
    except MluopsError as exc:
        return Outcome(source, "error", str(exc))


def _case_names(found: list[tuple[Path, Path]], headers: dict) -> dict[Path, str]:
    """Each file's case name: its stem, or, where files of one kernel share a stem (every
    mlu-ops directory has its case_0.prototxt), its path relative to the PATH it was found under."""
    stems: dict[tuple, int] = {}
    for source, _ in found:
        key = (getattr(headers[source], "op", None), source.stem)
        stems[key] = stems.get(key, 0) + 1
    names = {}
    for source, relative in found:
        shared = stems[(getattr(headers[source], "op", None), source.stem)] > 1
        names[source] = _plain("__".join(relative.with_suffix("").parts) if shared else source.stem)
    return names


def _plain(text: str) -> str:
    """``text`` made a plain file name: other characters become '_', leading non-alphanumerics go."""
    return re.sub(r"^[^A-Za-z0-9]+", "", re.sub(r"[^A-Za-z0-9._+=-]", "_", text))


def mluops_case_bytes(mlu) -> int:
    """Bytes of an mlu-ops case's tensors as opcase stores them (exact: Python ints)."""
    tensors = [*mlu.input_tensors.values(), *mlu.outputs.values()]
    return sum(element_count(t.shape) * t.dtype.itemsize for t in tensors if not t.absent)


def import_file(source: Path, name: str, header, out_dir: Path, baseline: str | None, max_size: int | None,
                written: dict[Path, Path], load_baseline=load_apart, rule: str = FILE_RULE) -> Outcome:
    """Import one case (``header``: it read without data) as ``name``, judged by ``rule``; ``written``
    maps the targets of this import so far to their sources, and gains this one's."""

    try:
        target = contained_path(out_dir, header.op, SUITE, f"{name}{SUFFIX}")
    except ValueError as exc:
        return Outcome(source, "error", f"cannot name its case: {exc}")
    if target in written:
        return Outcome(source, "error", f"its case {header.op}/{SUITE}/{name} is also {written[target]}'s; "
                                        f"rename one of them")
    if target.exists():   # an earlier import's, or another file's: never replaced silently
        return Outcome(source, "error", f"{target} exists already (an earlier import?); remove it or give another -o")
    size = mluops_case_bytes(header)
    if max_size is not None and size > max_size:
        return Outcome(source, "skipped", f"over --max-size ({size / 1e6:.1f} MB)")
    memory = physical_memory()
    if memory is not None and size > memory:
        return Outcome(source, "error", f"its tensors take {size / 1e6:.1f} MB, more than this machine's "
                                        f"{memory / 1e6:.1f} MB of memory; give --max-size to skip cases this large")
    free = shutil.disk_usage(out_dir).free
    if size > free:
        return Outcome(source, "error", f"its tensors take {size / 1e6:.1f} MB, {out_dir} has {free / 1e6:.1f} MB "
                                        f"free; give --max-size to skip cases this large")
    with tempfile.TemporaryDirectory(prefix="opcase-import-", dir=out_dir) as scratch:
        try:
            mlu = load_mluops(source, out_dir=scratch)
            case = case_from_mluops(mlu, name)
            complete_imported(case, baseline, load_baseline)
            judged = judge_by(case, mlu, rule)
            save(case, target)
        except (MluopsError, UnknownOp, GenerationError, BackendLoadError) as exc:
            return Outcome(source, "error", str(exc))
        except OSError as exc:
            return Outcome(source, "error", f"cannot write {target}: {exc.strerror or exc}")
    written[target] = source
    return Outcome(source, "written", f"{case.op}, expect {case.expect}" + (f"; {judged}" if judged else ""), target)


def export_file(source: Path, out_dir: Path, text: bool, written: dict[Path, Path]) -> Outcome:
    """Export one case; ``written`` maps the targets of this export so far to their sources."""

    try:
        case = load(source)
    except CaseFileError as exc:
        return Outcome(source, "error", str(exc))
    if case.expect != "ok":
        return Outcome(source, "skipped", "an expected rejection has no mlu-ops form")
    try:
        target = contained_path(out_dir, case.op, case.suite, case.name)
    except ValueError as exc:
        return Outcome(source, "error", str(exc))
    if target in written:
        return Outcome(source, "error", f"{case.op}/{case.suite}/{case.name} was exported from {written[target]} "
                                        f"already; export the two separately")
    try:
        saved = save_mluops(case, target, text=text)
    except ValueError as exc:
        return Outcome(source, "error", str(exc))
    written[target] = source
    return Outcome(source, "written", case.op, saved)


def export_all(paths, out_dir: Path, text: bool) -> list[Outcome]:
    written: dict[Path, Path] = {}
    return [_one_file(p, lambda: export_file(p, out_dir, text, written)) for p in find(paths)]
