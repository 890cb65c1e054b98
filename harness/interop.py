"""opcase <-> mlu-ops case files: import (adding goldens and thresholds) and export."""
from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from harness.casefile import SUFFIX, Case, find, load, save

MLUOPS_SUFFIXES = (".pb", ".prototxt", ".pbtxt")


@dataclass
class Outcome:
    source: Path
    status: str          # written | skipped | error
    message: str
    target: Path | None = None


def find_mluops(paths) -> list[Path]:
    found: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found.extend(sorted(q for q in p.rglob("*") if q.is_file() and q.suffix in MLUOPS_SUFFIXES))
        else:
            found.append(p)
    return found


def complete_imported(case: Case, baseline_name: str | None) -> Case:
    """Goldens and thresholds for an imported case, as for a generated one.

    A call that breaks one of the spec's checks becomes an expected rejection: that is
    what a conforming implementation must do with it.
    """
    from gen.checks import TensorInfo, first_failure
    from gen.generate import GENERATOR_VERSION, Generator
    from gen.registry import spec_for
    from harness.backend import load_backend

    spec = spec_for(case.op)
    case.generator_version, case.spec_sha256, case.spec_path = GENERATOR_VERSION, spec.sha256, spec.path.name
    tensors = {n: None if t.absent else TensorInfo(tuple(t.shape), t.dtype.name, t.layout)
               for n, t in (*case.inputs.items(), *case.outputs.items())}
    failed = first_failure(spec, tensors, case.params)
    if failed is not None:
        case.expect, case.expect_check, case.expect_message = "rejected", failed.id, failed.message
        return case
    baseline = load_backend(baseline_name or spec.criteria.baseline) if spec.criteria.mode == "dynamic" else None
    return Generator(spec, baseline).complete(case)


def import_file(source: Path, out_dir: Path, baseline: str | None) -> Outcome:
    from gen.generate import GenerationError
    from gen.registry import UnknownOp
    from gen.spec import SpecError
    from harness.backend import BackendLoadError
    from harness.mluops import MluopsError, UnsupportedKernel, case_from_mluops, load_mluops

    with tempfile.TemporaryDirectory(prefix="opcase-import-", dir=out_dir) as scratch:
        try:
            mlu = load_mluops(source, out_dir=scratch)
        except UnsupportedKernel as exc:
            return Outcome(source, "skipped", f"not one of opcase's kernels ({exc.op_name})")
        except MluopsError as exc:
            return Outcome(source, "error", str(exc))
        case = case_from_mluops(mlu, source.stem)
        case.note = f"imported from mlu-ops case {source.name}"
        try:
            complete_imported(case, baseline)
        except (UnknownOp, SpecError, GenerationError, BackendLoadError) as exc:
            return Outcome(source, "error", str(exc))
        target = save(case, out_dir / case.op / case.suite / f"{source.stem}{SUFFIX}")
        return Outcome(source, "written", f"{case.op}, expect {case.expect}", target)


def export_file(source: Path, out_dir: Path, text: bool) -> Outcome:
    from harness.casefile import CaseFileError
    from harness.mluops import save_mluops

    try:
        case = load(source)
    except CaseFileError as exc:
        return Outcome(source, "error", str(exc))
    if case.expect != "ok":
        return Outcome(source, "skipped", "an expected rejection has no mlu-ops form")
    try:
        target = save_mluops(case, out_dir / case.op / case.suite / case.name, text=text)
    except ValueError as exc:
        return Outcome(source, "error", str(exc))
    return Outcome(source, "written", case.op, target)


def export_all(paths, out_dir: Path, text: bool) -> list[Outcome]:
    return [export_file(p, out_dir, text) for p in find(paths)]
