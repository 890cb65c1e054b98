"""`opcase run --fresh N`: cases no backend can have seen.

A backend may have seen the stored cases: it can keep a table of their outputs keyed by a hash
of the inputs, or read the .opcase files and return their goldens.  Fresh cases are drawn when
the run starts, N per kernel present among the run's cases, from the installed spec as its
random suite draws them (shapes, params and values), with a base seed drawn then and printed;
their goldens and thresholds are computed then (dynamic thresholds with the spec's baseline,
always a built-in backend), into a temporary directory the run removes, and they are judged
like the stored ones.  A backend that only replays what it has seen fails them.

Each fresh case has an explicit descriptor (its shapes, params, seed and the random suite's
values), which `opcase gen --case` turns into the same tensors.  A failing one is kept: copied
(with its sidecars) out of the temporary directory into --keep-fresh DIR, else the results
files' directory, else the current one, and its REPRO line names the kept file, so that
`opcase run`, `shrink` and `explain` take it after the run.
"""
from __future__ import annotations

import os
import secrets
import shutil
from dataclasses import dataclass, field, replace
from pathlib import Path

from gen.core.casefile import key_copy
from gen.core.registry import spec_for
from gen.descriptor import explicit_of
from gen.generate import case_path, plan_suite
from gen.jobs import generator_of
from harness.backends import load_backend

# The suite fresh cases are filed under (OP/fresh/NAME), so that every report names them.
FRESH_SUITE = "fresh"
# Seeds are drawn below 2**63, as case seeds are.
SEED_BITS = 63


@dataclass
class Fresh:
    count: int                # cases per kernel
    seed: int                 # the base seed they were drawn with (--fresh-seed)
    kernels: list[str]        # those that got cases
    without: list[str]        # kernels whose spec has no random suite to draw from
    files: list[Path]
    descriptors: dict = field(default_factory=dict)   # file -> its explicit descriptor
    where: Path | None = None                          # the temporary directory they are written to
    kept: list = field(default_factory=list)           # the failing ones kept after the run (fresh_kept)


def draw_seed() -> int:
    """A seed nobody saw before the run: from the OS's randomness."""
    return secrets.randbits(SEED_BITS)


def write_fresh(ops, count: int, seed: int, out_dir: Path, files: list | None = None) -> Fresh:
    """``count`` cases of each kernel in ``ops``, drawn with base seed ``seed`` from its installed
    spec's random suite, built with goldens and thresholds under ``out_dir``, each appended to
    ``files`` once written (what to clean up if a later one fails).  Raises SpecError, UnknownOp,
    GenerationError or BackendLoadError."""
    kernels, without, descriptors = [], [], {}
    files = [] if files is None else files
    for op in sorted(ops):
        spec = spec_for(op)
        plans = plan_suite(spec, "random", count, seed) if spec.suites.get("random") else []
        if not plans:
            without.append(op)
            continue
        generator = generator_of(spec, None, load_backend)
        for plan in plans:
            descriptor = explicit_of(spec, plan, "random").text()
            plan = replace(plan, suite=FRESH_SUITE)   # its values stay the random suite's (plan.values)
            files.append(generator.write(plan, case_path(out_dir, plan, op)))
            descriptors[files[-1]] = descriptor
        kernels.append(op)
    return Fresh(count, seed, kernels, without, files, descriptors, out_dir)


def is_fresh(path, fresh: Fresh | None) -> bool:
    return fresh is not None and Path(path) in fresh.files


def keep(path, fresh: Fresh, keep_dir: Path) -> Path:
    """Copy the fresh case ``path`` and its sidecars under ``keep_dir`` (OP/fresh/NAME, as in the
    temporary directory), each file whole or not at all; the kept case's absolute path.  Raises
    OSError."""
    source = Path(path)
    target = (Path(keep_dir) / source.relative_to(fresh.where)).absolute()
    target.parent.mkdir(parents=True, exist_ok=True)
    for part in [source, *sorted(source.parent.glob(source.name + ".*"))]:
        partial = target.parent / f".{part.name}.partial"
        shutil.copyfile(part, partial)
        os.replace(partial, target.parent / part.name)
    key_copy(source, target)   # judged from the keyed original: the copy is opcase's too
    return target
