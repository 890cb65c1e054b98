"""Where the committed specs live, loading them by operator name, and finding each kernel's parts
by convention.

A kernel ``<op>`` is its spec ``specs/<op>.yaml`` plus its family's folder ``gen/kernels/<family>/``
(family: the op without ``_forward``/``_backward``, so a forward and a backward share one folder).
Each part of a kernel is a module of that folder named after the part: ``<part>_<direction>``
where the part is written per direction, else ``<part>`` (gen/kernels/README.md lists the parts and
what each holds).  Nothing lists kernels: a new kernel is its own files.
"""
from __future__ import annotations

import importlib
import os
import re
import sys
from functools import lru_cache
from pathlib import Path

from gen.core.spec import Spec, load_spec
from gen.core.casefile import is_plain_name


class UnknownOp(LookupError):
    """An operator with no spec."""


def specs_dir() -> Path:
    """OPCASE_SPECS if set; else the specs an installed wheel carries inside the gen package (gen/specs/,
    mapped from the top-level specs/ in pyproject.toml); else, in a clone, the repository's specs/."""
    if os.environ.get("OPCASE_SPECS"):
        return Path(os.environ["OPCASE_SPECS"])
    return _packaged_specs_dir()


@lru_cache(maxsize=None)
def _packaged_specs_dir() -> Path:
    package = Path(__file__).resolve().parent.parent     # gen/
    installed = package / "specs"
    return installed if installed.is_dir() else package.parent / "specs"


def known_ops() -> list[str]:
    folder = specs_dir()
    try:
        info = os.stat(folder)
    except OSError:
        return []
    # Listed again only when the folder changed (a spec added, removed or renamed changes its mtime):
    # every backend call asks, and a listing costs more than a small case's golden.
    return list(_listed_ops(str(folder), info.st_ino, info.st_mtime_ns))


@lru_cache(maxsize=16)
def _listed_ops(folder: str, inode: int, mtime_ns: int) -> tuple[str, ...]:
    return tuple(sorted(p.stem for p in Path(folder).glob("*.yaml")))


@lru_cache(maxsize=None)
def spec_for(op: str) -> Spec:
    # ``op`` may come from a case file: only a plain name, so the path stays in specs_dir().
    path = specs_dir() / f"{op}.yaml" if is_plain_name(op) else None
    if path is None or not path.is_file():
        raise UnknownOp(f"no spec for operator {op!r} in {specs_dir()} (known: {', '.join(known_ops())})")
    return load_spec(path)


def family_of(op: str) -> str:
    return re.sub(r"_(forward|backward)\Z", "", op)


KERNELS_PACKAGE = "gen.kernels"
# The parts a family folder may hold (gen/kernels/README.md): the float64 reference and its value
# generators, the numpy emulation of mmcv's CUDA kernels, the planted bugs, the torch kernels.
REFERENCE, MMCV_EMULATION, PLANTED, TORCH_KERNEL = "reference", "mmcv_emulation", "planted", "torch_kernel"
# The estimate of a case's arithmetic that gen's progress weighs it by (gen.cost).
COST = "cost"


def part_module_names(part: str, op: str) -> list[str]:
    """The modules that may hold ``op``'s ``part``, the more specific first."""
    return list(_part_module_names(part, op))


@lru_cache(maxsize=1024)
def _part_module_names(part: str, op: str) -> tuple[str, ...]:
    # Remembered: a function of the two names only, asked at every backend call.
    family = family_of(op)
    direction = op[len(family) + 1:]
    names = (f"{KERNELS_PACKAGE}.{family}.{part}_{direction}",) if direction else ()
    return names + (f"{KERNELS_PACKAGE}.{family}.{part}",)


# Part modules found absent, not looked for again in this process: every backend call asks, and a failed
# import searches the whole path, which costs more than a small case's golden.
_ABSENT: set[str] = set()


def kernel_module(part: str, op: str, known: bool = False):
    """The module that holds ``op``'s ``part`` (see part_module_names), or None.  Only the specs' op
    names are looked up: a name read from a case file never picks a module itself.  ``known``: the
    caller holds spec_for(op), which took only a plain name with a spec file, so the specs need not
    be listed again (a listing's stat of their folder was a tenth of a small call of the mmcv backend)."""
    if not known and op not in known_ops():
        return None
    names = _part_module_names(part, op)
    for module_name in names:
        if module_name in _ABSENT:
            continue
        try:
            # sys.modules first: import_module's own lookup costs a small call more than the dict's.
            module = sys.modules.get(module_name) or importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            # Absent (the family folder or this part of it) is fine; a module that fails to import is not.
            if exc.name and (module_name == exc.name or module_name.startswith(exc.name + ".")):
                _ABSENT.add(module_name)
                continue
            raise
        # The family-wide module must say it holds this op (a forward's part need not be the backward's).
        if module_name == names[0] or callable(getattr(module, op, None)) or _holds_tables_for(module, op):
            return module
    return None


def _holds_tables_for(module, op: str) -> bool:
    # Planted-bug modules hold tables keyed by op rather than a function named after it.
    return any(isinstance(table, dict) and op in table for table in vars(module).values())


def kernel_function(part: str, op: str, known: bool = False):
    """The function named ``op`` in ``op``'s module of ``part`` (see kernel_module), or None."""
    module = kernel_module(part, op, known)
    function = getattr(module, op, None) if module is not None else None
    return function if callable(function) else None


def _planted_entry(table: str, op: str):
    """``op``'s entry in one table (PLANTED, CORRECT or CONTROLS) of its planted module, or None."""
    module = kernel_module(PLANTED, op)
    return getattr(module, table, {}).get(op) if module else None


def planted_bugs(op: str) -> dict:
    """{bug name: compute} of ``op``'s planted bugs (its planted module; empty where there are none)."""
    return dict(_planted_entry("PLANTED", op) or {})


def bug_free_copy(op: str):
    """The bug-free copy of ``op``'s kernel that its planted bugs are made from (a compute), or None."""
    return _planted_entry("CORRECT", op)


def planted_controls(op: str) -> dict:
    """{name: compute} of ``op``'s kernel-specific controls: variants every case must pass."""
    return dict(_planted_entry("CONTROLS", op) or {})


def explain_variants(op: str) -> dict:
    """{name: function(inputs, params, out_shapes=...) -> {output: array in the output dtype}} of
    ``op``'s own variants for `opcase explain` (another accumulation order its spec allows, say):
    the VARIANTS table of its mmcv_emulation and planted modules (empty where there is none)."""
    found = {}
    for part in (MMCV_EMULATION, PLANTED):
        module = kernel_module(part, op)
        found.update(getattr(module, "VARIANTS", {}).get(op, {}) if module else {})
    return found
