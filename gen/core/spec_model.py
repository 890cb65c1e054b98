"""What a loaded spec is: its constants (dtypes, suites, stress dimensions, axis roles, limits), its
error, its model (tensors, params, checks, criteria, the mlu-ops mapping, deviations) and the rule
for which code a spec may name."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
import importlib
import inspect
import os
import re
import sys


FLOAT_DTYPES = ("float16", "float32", "float64")


TENSOR_DTYPES = FLOAT_DTYPES + ("int32", "int64", "uint8", "bool")


DISTRIBUTIONS = ("uniform", "normal", "randint", "const", "custom")


SUITES = ("network", "random", "boundary", "invalid", "stress", "fast_path", "hunt")


# The stress dimensions a spec's suites.stress may declare (specs/README.md, README: Stress dimensions).
STRESS_DIMENSIONS = ("values", "channel_tail", "contention", "batch", "index_width")


# Value regimes: float16 only where the regime is about float16's range.
VALUE_REGIMES = ("subnormal", "positive", "near_overflow")


# suites.stress.index_width: a case past 2^24 elements in its tensor, and one past 2^31 bytes.
INDEX_LIMITS = ("past_2e24", "past_2e31")


# suites.stress.not_applicable: a dimension the kernel's tensors would take but its arithmetic does
# not allow, with why (tests/test_stress_reach.py accepts the reason in place of the cases).
# index_width_64MB: a case past 2^24 elements within the README main command's --max-size 64MB (gen/REACH.md).
REACHABLE_DIMENSIONS = ("channel_tail", "batch", "index_width", "subnormal", "index_width_64MB")


# Axis roles (specs/README.md, Axis roles): what each axis of a tensor is, for what knows no kernel (the
# generic mutants, the stress suite).  A layout of these letters gives them; any other layout ('ARRAY'),
# or one whose letters say less than the truth, states them in the tensor's `axes`.
AXIS_ROLES = ("batch", "height", "width", "depth", "channel", "item", "component")


LETTER_ROLES = {"N": "batch", "H": "height", "W": "width", "D": "depth", "C": "channel"}


# The package whose functions a spec may name as its reference and value generators; any other
# module only with OPCASE_TRUST_SPEC_CODE=1 (a spec is data: loading one must not run foreign code).
OWN_CODE_PACKAGE = "gen.kernels"


TRUST_ENV = "OPCASE_TRUST_SPEC_CODE"


# Cases one network or boundary entry may expand to (the product of the lengths of its 'each' lists).
MAX_CASES_PER_ENTRY = 1000


MAX_RANDOM_COUNT = 100_000


# Cases suites.fast_path may plan in all (its paths' each lists times their shapes, before dtypes; the
# committed specs plan at most 20): without it a 56 KB spec planned 200,000 cases.
MAX_FAST_PATH_CASES = 1000


class SpecError(Exception):
    def __init__(self, path, line: int | None, message: str):
        self.path, self.line, self.message = str(path), line, message
        where = f"{path}:{line}" if line else str(path)
        super().__init__(f"{where}: {message}")

    def __reduce__(self):
        # Rebuilt from its parts when it crosses from a worker process (`opcase gen --jobs`).
        return SpecError, (self.path, self.line, self.message)


@dataclass
class TensorSpec:
    name: str
    dtype: str            # a concrete dtype, or "T": the case's floating dtype
    layout: str
    shape: list           # expressions over dims and params
    values: dict          # value distribution (inputs only)
    optional: bool = False
    line: int = 0
    axes: tuple = ()      # the role of each axis (AXIS_ROLES)
    with_input: str = ""  # outputs: the optional input it goes with (absent when that input is left out)


@dataclass
class ParamSpec:
    name: str
    type: str             # int | float | bool
    doc: str = ""


@dataclass
class Check:
    id: str
    doc: str
    message: str
    require: str
    violate: dict | None
    untestable: str
    line: int
    # What mlu-ops returns when the check fails: "bad_param" (MLUOP_STATUS_BAD_PARAM: InvalidArgument,
    # the case expects "rejected") or "not_supported" (MLUOP_STATUS_NOT_SUPPORTED: NotSupported).
    status: str = "bad_param"


@dataclass
class Criteria:
    mode: str                                   # static | dynamic
    static: dict = field(default_factory=dict)  # metric -> threshold, per dtype allowed: {float16: .., float32: ..}
    metrics: list = field(default_factory=list) # dynamic: the metrics judged
    rates: list = field(default_factory=list)   # dynamic: one rate per metric
    baseline: str = "lowp"


@dataclass(frozen=True)
class OutputCriterion:
    """How one output is judged instead of by the spec's criteria (``output_criteria:``): ``exact``,
    every element equal to the golden, but where ``undetermined`` (a function of the kernel's own
    package: (inputs, params, dtype, golden) -> {flat index: acceptable answers}) finds the golden
    not determined, near-ties within the compute dtype's rounding."""
    exact: bool
    undetermined: str = ""


@dataclass(frozen=True)
class MluopsMapping:
    """How mlu-ops' case files (harness/mluops) describe the kernel: its Node's OpType, the Node field
    that carries the params, and the tensors in mlu-ops' positional order (mluop_gtest's tensor_desc_[i])."""
    # The OpType name in the vendored mluops_case.proto, or None: Node.op_type is informational
    # (mluop_gtest dispatches on op_name), so a kernel the vendored enum lacks is written without it.
    op_type: str | None
    param_field: str | None            # None: the kernel has no param message
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    fixed: tuple[tuple[str, int], ...] = ()  # constant param-message fields opcase does not model


@dataclass(frozen=True)
class Deviation:
    """A known, documented disagreement of one backend with the suite (as OpInfo's xfails): on the cases
    ``cases`` matches (a regex over SUITE/NAME) that backend has ``status``, for ``reason``."""
    backend: str
    cases: str
    status: str
    reason: str
    line: int

    def covers(self, backend: str, suite: str, name: str) -> bool:
        return backend == self.backend and re.fullmatch(self.cases, f"{suite}/{name}") is not None


@dataclass
class Spec:
    op: str
    path: Path
    sha256: str
    doc: str
    summary: str
    reference: str
    dtypes: list
    params: dict[str, ParamSpec]
    inputs: dict[str, TensorSpec]
    outputs: dict[str, TensorSpec]
    checks: list[Check]
    criteria: Criteria
    suites: dict
    theory_ops: str = ""
    # The kernel may add floats in any order (atomics): repeated calls may differ in their last
    # bits, so `opcase run --bitwise` asks only that their verdicts agree.
    nondeterministic_sums: bool = False
    mluops: MluopsMapping | None = None
    output_criteria: dict = field(default_factory=dict)   # output name -> OutputCriterion
    raw: dict = field(default_factory=dict, repr=False)
    deviations: list = field(default_factory=list)     # Deviation, in spec order

    def resolve(self, dotted: str, what: str):
        return resolve_callable(dotted, self.path, what)

    @property
    def reference_fn(self):
        return self.resolve(self.reference, "reference")

    @property
    def reference_blocks_fn(self):
        """The reference's streaming twin ``<fn>_blocks`` (see specs/README.md), or None."""
        fn = self.reference_fn
        return getattr(sys.modules[fn.__module__], f"{fn.__name__}_blocks", None)


def spec_code_trusted() -> bool:
    return os.environ.get(TRUST_ENV) == "1"


def resolve_callable(dotted: str, path, what: str, line: int = 0):
    """The function a spec names as 'module:function'.  Only functions defined in the project's
    own OWN_CODE_PACKAGE, unless the user trusts the spec's code (TRUST_ENV=1)."""
    module_name, _, attr = str(dotted).partition(":")
    if not attr or not attr.isidentifier() or attr.startswith("_"):
        raise SpecError(path, line, f"{what} {dotted!r} must be 'module:function'")
    own = module_name == OWN_CODE_PACKAGE or module_name.startswith(OWN_CODE_PACKAGE + ".")
    if not own and not spec_code_trusted():
        raise SpecError(path, line, f"{what} {dotted!r}: a spec may name functions of {OWN_CODE_PACKAGE} only; "
                                    f"to let it import {module_name}, set {TRUST_ENV}=1 (README: What a spec "
                                    f"and a case file can do)")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - any import-time failure is the spec's error
        raise SpecError(path, line, f"{what} {dotted!r}: cannot import {module_name} ({exc})") from None
    function = getattr(module, attr, None)
    if function is None:
        raise SpecError(path, line, f"{what} {dotted!r}: {module_name} has no {attr}")
    # Something the module merely imported (numpy's as_strided, say) is not the module's code.
    if own and not (inspect.isfunction(function) and function.__module__ == module.__name__):
        raise SpecError(path, line, f"{what} {dotted!r}: not a function defined in {module_name}")
    return function


def absent_tensors(spec, omit) -> tuple:
    """The tensors a call that leaves out the optional inputs ``omit`` lacks: those inputs, and the outputs
    that go with them (`with_input`)."""
    omit = tuple(omit)
    return omit + tuple(n for n, t in spec.outputs.items() if t.with_input and t.with_input in omit)


def dims_with_role(spec, role: str) -> set:
    """The dims that size an axis of ``role`` in some tensor (an axis whose shape entry is a bare dim)."""
    return {str(entry) for t in (*spec.inputs.values(), *spec.outputs.values())
            for entry, axis_role in zip(t.shape, t.axes)
            if axis_role == role and isinstance(entry, str) and entry.isidentifier() and entry not in spec.params}


CHECK_STATUSES = {"bad_param": "rejected", "not_supported": "not_supported"}   # status -> the case's expect


# The statuses a deviation may record (gen.core.verdict's failing ones; spec.py cannot import it).
DEVIATION_STATUSES = ("failed", "wrongly-accepted", "wrongly-rejected", "error")


MAX_DEVIATION_PATTERN = 200
