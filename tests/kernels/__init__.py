"""The kernels' test-side records (as PyTorch's OpInfo): one module ``kernels.<op>`` per kernel,
found by convention for every spec in specs/ (gen.core.registry.known_ops), never listed by hand.

A record holds ``OP`` (its kernel's name), ``oracle(inputs, params, out_shapes) -> {output: float64
array}`` (a slow literal-loop implementation written straight from the formulas, against which the
reference is checked) and ``CONFORMANCE`` (paths under tests/conformance/ of the kernel's mlu-ops
case files).  Optionally ``ACCEPTED_BUGS = {planted bug name: why}``: planted bugs the docs'
accuracy rule lets pass, since they fail only cases the reference interface fails as well; and
``mmcv_data() -> [(name, params, inputs, outputs, tolerance)]``: mmcv's own test data for the kernel
(tests/conformance/mmcv/, read with mmcv_array), which every backend claiming the kernel reproduces
within ``tolerance`` (the largest error over the largest output magnitude; 0: exactly); and, where the
kernel's mmcv emulation samples large cases (``<op>_units`` in gen/kernels/<family>/mmcv_emulation*.py), ``SAMPLED_NETWORK_CASE``: the name
of its smallest network case that is sampled, on which tests/test_thresholds_policy.py checks the estimate
against the whole computation.
The other modules here (bilinear, carafe, ...) are what a family's oracles share.
"""
from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

import numpy as np

from gen.core.registry import known_ops

RECORDS_DIR = Path(__file__).resolve().parent
CONFORMANCE_DIR = RECORDS_DIR.parent / "conformance"


class MissingRecord(LookupError):
    """A kernel with a spec and no (or a broken) record: its generic tests fail, never skip."""


def ops() -> list[str]:
    """Every kernel: one per spec."""
    return known_ops()


def record(op: str) -> ModuleType:
    """The record ``kernels.<op>``, checked for what the generic tests read."""
    name = f"{__name__}.{op}"
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name != name:
            raise
        raise MissingRecord(f"kernel {op!r} has a spec and no record: write tests/kernels/{op}.py "
                            f"(OP, oracle, CONFORMANCE; see tests/kernels/__init__.py)") from None
    problems = [what for what, ok in (
        (f"OP is {getattr(module, 'OP', None)!r}, not {op!r}", getattr(module, "OP", None) == op),
        ("no oracle(inputs, params, out_shapes)", callable(getattr(module, "oracle", None))),
        ("CONFORMANCE is not a list of paths", isinstance(getattr(module, "CONFORMANCE", None), list)),
    ) if not ok]
    if problems:
        raise MissingRecord(f"tests/kernels/{op}.py: {'; '.join(problems)}")
    return module


def conformance_files(op: str) -> list[Path]:
    """The record's CONFORMANCE files (each must exist)."""
    paths = [CONFORMANCE_DIR / p for p in record(op).CONFORMANCE]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise MissingRecord(f"tests/kernels/{op}.py: CONFORMANCE names missing files {missing}")
    return paths


def every_conformance_file(under: str) -> list[Path]:
    """Every record's CONFORMANCE files under CONFORMANCE_DIR/``under`` (e.g. "mlu-ops"), sorted: what
    tests count instead of a number that a new kernel would change."""
    root = CONFORMANCE_DIR / under
    return sorted({p for op in ops() for p in conformance_files(op) if p.is_relative_to(root)})


def accepted_bugs(op: str) -> dict[str, str]:
    """{planted bug name: why the docs' rule lets it pass} of the record (empty where none)."""
    return dict(getattr(record(op), "ACCEPTED_BUGS", {}))


def mmcv_array(folder: str, name: str, shape) -> np.ndarray:
    """An NCHW float32 array of mmcv's test data (tests/conformance/mmcv/<folder>/<name>, raw
    little-endian), as the NHWC array opcase's kernels take."""
    array = np.fromfile(CONFORMANCE_DIR / "mmcv" / folder / name, dtype="<f4").reshape(shape)
    return np.ascontiguousarray(array.transpose(0, 2, 3, 1))
