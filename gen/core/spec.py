"""Operator specs: the YAML transcription of a design doc, loaded and validated.

Every error names the spec file and the line of the offending entry.  The format is
documented in specs/README.md.
"""
from __future__ import annotations

import collections.abc
import hashlib
import importlib
import inspect
import math
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from gen.core import waivers
from gen.core.backend import BUILTIN_NAMES
from gen.core.casefile import METRICS
from gen.core.expr import ExprError, attribute_owners, compile_expr
from gen.core.casefile import PLAIN_NAME_RULE, is_plain_name
from gen.core.safe_regex import regex_problem

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
REACHABLE_DIMENSIONS = ("channel_tail", "batch", "index_width", "subnormal")
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
# The deepest nesting of mappings and lists in a spec (the committed specs nest 7 deep); PyYAML
# builds nested nodes by recursion, which a few hundred levels take past Python's stack limit.
MAX_YAML_DEPTH = 64


class SpecError(Exception):
    def __init__(self, path, line: int | None, message: str):
        self.path, self.line, self.message = str(path), line, message
        where = f"{path}:{line}" if line else str(path)
        super().__init__(f"{where}: {message}")

    def __reduce__(self):
        # Rebuilt from its parts when it crosses from a worker process (`opcase gen --jobs`).
        return SpecError, (self.path, self.line, self.message)


# ----------------------------------------------------------------------------- YAML with lines

class _LDict(dict):
    """A mapping that remembers the line of itself and of each key (1-based)."""
    line: int = 0
    key_lines: dict

    def line_of(self, key) -> int:
        return self.key_lines.get(key, self.line)


class _LList(list):
    line: int = 0
    item_lines: list


class _WithLines:
    """Constructors that record each mapping's and sequence's lines (a mixin of both loaders)."""

    def construct_mapping(self, node, deep=False):
        # Duplicate keys silently override in PyYAML; in a spec they are always a mistake.
        seen = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, collections.abc.Hashable):
                raise yaml.constructor.ConstructorError(None, None, "a mapping key must be a plain value, "
                                                        f"not a {type(key).__name__}", key_node.start_mark)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (first on line {seen[key]})", key_node.start_mark)
            seen[key] = key_node.start_mark.line + 1
        result = _LDict(super().construct_mapping(node, deep=True))
        result.line = node.start_mark.line + 1
        result.key_lines = seen
        return result

    def construct_sequence(self, node, deep=False):
        result = _LList(super().construct_sequence(node, deep=True))
        result.line = node.start_mark.line + 1
        result.item_lines = [item.start_mark.line + 1 for item in node.value]
        return result


def _resolve_yaml12_floats(loader) -> None:
    """Read `3e-3`, `1e5` and `2.5E+4` as numbers, as YAML 1.2 does: PyYAML's YAML 1.1 wants a dot and
    a signed exponent and reads them as strings, which a threshold or rate then refuses as no number."""
    pattern = re.compile(r"^[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)[eE][-+]?[0-9]+$")
    loader.add_implicit_resolver("tag:yaml.org,2002:float", pattern, list("-+0123456789."))


class _LineLoader(_WithLines, yaml.SafeLoader):
    """The pure-Python loader: where libyaml is missing, and for the exact message on an alias or
    on nesting past MAX_YAML_DEPTH."""
    depth = 0

    def compose_node(self, parent, index):
        # An alias can expand exponentially (a 'billion laughs' of a few lines); specs need none.
        if self.check_event(yaml.events.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(None, None, f"YAML aliases (*{event.anchor}) are not allowed in a spec",
                                              event.start_mark)
        if self.depth >= MAX_YAML_DEPTH:
            raise yaml.composer.ComposerError(None, None, f"nested over {MAX_YAML_DEPTH} levels deep",
                                              self.peek_event().start_mark)
        self.depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


# libyaml's parser (about 10x faster), where PyYAML was built with it; its composer is C, so
# aliases are found afterwards, in the node graph, before anything is constructed.
_CLineLoader = type("_CLineLoader", (_WithLines, yaml.CSafeLoader), {}) if yaml.__with_libyaml__ else None

for _loader in (_LineLoader, _CLineLoader):
    if _loader is not None:
        _resolve_yaml12_floats(_loader)
        _loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _loader.construct_mapping)
        _loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _loader.construct_sequence)


def _shares_a_node(root) -> bool:
    """Whether a composed document reaches one node twice (what an alias, *name, makes), or nests
    past MAX_YAML_DEPTH (constructing it would recurse past Python's stack)."""
    seen, stack = set(), [(root, 1)]
    while stack:
        node, depth = stack.pop()
        if id(node) in seen or depth > MAX_YAML_DEPTH:
            return True
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            stack += [(part, depth + 1) for pair in node.value for part in pair]
        elif isinstance(node, yaml.SequenceNode):
            stack += [(item, depth + 1) for item in node.value]
    return False


def _parse_yaml(text: bytes):
    """The document of ``text`` with lines recorded (yaml.YAMLError as PyYAML raises it)."""
    if _CLineLoader is None:
        return yaml.load(text, Loader=_LineLoader)  # noqa: S506 - SafeLoader subclass
    loader = _CLineLoader(text)
    try:
        node = loader.get_single_node()
        if node is not None and _shares_a_node(node):
            return yaml.load(text, Loader=_LineLoader)  # noqa: S506 - raises the alias's or depth's own error
        return loader.construct_document(node) if node is not None else None
    finally:
        loader.dispose()


def line_of(obj, key=None) -> int:
    if key is not None and isinstance(obj, _LDict):
        return obj.line_of(key)
    return getattr(obj, "line", 0)


# ----------------------------------------------------------------------------- model

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


# ----------------------------------------------------------------------------- validation

class _Validator:
    def __init__(self, path: Path):
        self.path = path

    def fail(self, node, key, message):
        raise SpecError(self.path, line_of(node, key), message)

    def mapping(self, node, key, where) -> _LDict:
        value = node.get(key) if isinstance(node, dict) else None
        if not isinstance(value, dict):
            self.fail(node, key, f"{where}: '{key}' must be a mapping")
        return value

    def optional_mapping(self, node, key, where) -> dict:
        """node[key] when it is a mapping, {} when it is absent or empty; anything else is refused."""
        value = node.get(key)
        if value is None:
            return {}
        if not isinstance(value, dict):
            self.fail(node, key, f"{where}: '{key}' must be a mapping")
        return value

    def optional_list(self, node, key, where) -> list:
        """node[key] when it is a list, [] when it is absent or empty; anything else is refused."""
        value = node.get(key)
        if value is None:
            return []
        if not isinstance(value, list):
            self.fail(node, key, f"{where}: '{key}' must be a list")
        return value

    def require_keys(self, node, keys, where):
        for key in keys:
            if key not in node:
                self.fail(node, None, f"{where}: missing '{key}'")

    def allow_keys(self, node, keys, where):
        for key in node:
            if key not in keys:
                self.fail(node, key, f"{where}: unknown key '{key}' (allowed: {', '.join(keys)})")

    def plain_name(self, node, key, name, where):
        name = str(name)          # YAML reads `name: 2020` as a number; it is used as str(...)
        if not is_plain_name(name):
            self.fail(node, key, f"{where}: {name!r} is not a plain name ({PLAIN_NAME_RULE}): "
                                 f"it becomes part of file names")

    def expr(self, node, key, text, where):
        if isinstance(text, bool) or not isinstance(text, (str, int, float)):
            self.fail(node, key, f"{where}: expected an expression, got {type(text).__name__}")
        try:
            compile_expr(str(text))
        except ExprError as exc:
            self.fail(node, key, f"{where}: {exc}")


def _tensor(v: _Validator, parent, name, node, kind, dtypes) -> TensorSpec:
    where = f"{kind} '{name}'"
    v.plain_name(parent, name, name, f"{kind} name")   # it names the tensor's sidecar file
    if not isinstance(node, dict):
        v.fail(node, None, f"{where} must be a mapping")
    keys = ["dtype", "layout", "shape", "values", "optional", "doc", "axes", "waivers"] if kind == "input" else \
        ["dtype", "layout", "shape", "doc", "axes", "with_input", "waivers"]
    v.allow_keys(node, keys, where)
    v.require_keys(node, ["dtype", "layout", "shape"], where)
    dtype = str(node["dtype"])
    if dtype != "T" and dtype not in TENSOR_DTYPES:
        v.fail(node, "dtype", f"{where}: dtype {dtype!r} is not one of T, {', '.join(TENSOR_DTYPES)}")
    shape = node["shape"]
    if not isinstance(shape, list):
        v.fail(node, "shape", f"{where}: shape must be a list of expressions")
    for i, dim in enumerate(shape):
        v.expr(shape, None, dim, f"{where} shape[{i}]")
    values = node.get("values", {"dist": "uniform", "low": -1.0, "high": 1.0})
    if kind == "input":
        _values(v, node, "values", values, where)
    return TensorSpec(name=name, dtype=dtype, layout=str(node["layout"]), shape=list(shape), values=values,
                      optional=bool(node.get("optional", False)), line=line_of(node),
                      axes=_axes(v, node, where, str(node["layout"]), len(shape)),
                      with_input=str(node.get("with_input") or ""))


def _tied_outputs(v: _Validator, node, inputs: dict, outputs: dict) -> None:
    """An output's `with_input` names an optional input: the call that leaves the input out has no such
    output either (deform_roi_pool_backward without offset: no grad_offset, mlu-ops' 3-input form)."""
    for name, tensor in outputs.items():
        if tensor.with_input and not (tensor.with_input in inputs and inputs[tensor.with_input].optional):
            v.fail(node[name], "with_input", f"output '{name}': with_input must name an optional input, not "
                                             f"{tensor.with_input!r}")


def absent_tensors(spec, omit) -> tuple:
    """The tensors a call that leaves out the optional inputs ``omit`` lacks: those inputs, and the outputs
    that go with them (`with_input`)."""
    omit = tuple(omit)
    return omit + tuple(n for n, t in spec.outputs.items() if t.with_input and t.with_input in omit)


def _axes(v: _Validator, node, where, layout: str, rank: int) -> tuple:
    """The role of each axis: the tensor's `axes`, else its layout's letters (NHWC: batch, height,
    width, channel); a layout without them (ARRAY) must give `axes`."""
    axes = node.get("axes")
    if axes is None:
        if len(layout) == rank and len(set(layout)) == rank and all(c in LETTER_ROLES for c in layout):
            return tuple(LETTER_ROLES[c] for c in layout)
        v.fail(node, "layout", f"{where}: layout {layout!r} names no axis roles: give 'axes', a role per axis "
                               f"({', '.join(AXIS_ROLES)})")
    if not isinstance(axes, list) or len(axes) != rank or any(a not in AXIS_ROLES for a in axes):
        v.fail(node, "axes", f"{where}: axes must list one role per axis ({rank}), each one of {', '.join(AXIS_ROLES)}")
    return tuple(axes)


def dims_with_role(spec, role: str) -> set:
    """The dims that size an axis of ``role`` in some tensor (an axis whose shape entry is a bare dim)."""
    return {str(entry) for t in (*spec.inputs.values(), *spec.outputs.values())
            for entry, axis_role in zip(t.shape, t.axes)
            if axis_role == role and isinstance(entry, str) and entry.isidentifier() and entry not in spec.params}


def _values(v: _Validator, parent, key, node, where):
    if not isinstance(node, dict):
        v.fail(parent, key, f"{where}: values must be a mapping")
    dist = node.get("dist")
    if dist not in DISTRIBUTIONS:
        v.fail(node, "dist", f"{where}: values.dist must be one of {', '.join(DISTRIBUTIONS)}, got {dist!r}")
    needs = {"uniform": ("low", "high"), "normal": ("mean", "std"), "randint": ("low", "high"),
             "const": ("value",), "custom": ("fn",)}[dist]
    v.require_keys(node, needs, f"{where} values")
    for frac in ("nan", "inf"):
        if frac in node and not (isinstance(node[frac], (int, float)) and 0 <= node[frac] <= 1):
            v.fail(node, frac, f"{where}: values.{frac} is a fraction in [0, 1]")
    if dist == "custom":
        resolve_callable(node["fn"], v.path, f"{where} values.fn", line_of(node, "fn"))
    else:
        _value_bounds(v, node, needs, where)


def _value_bounds(v: _Validator, node, keys, where) -> None:
    """A plain distribution's numbers (low, high, mean, std, value): numbers, or expressions over the case's
    dims, params and tensors' shapes (`high: "M - 1"`, `high: "feature.shape[2] - 1"`), drawn per case."""
    for key in keys:
        bound = node[key]
        if isinstance(bound, str):
            v.expr(node, key, bound, f"{where} values.{key}")
        elif isinstance(bound, bool) or not isinstance(bound, (int, float)):
            v.fail(node, key, f"{where}: values.{key} must be a number or an expression, got {type(bound).__name__}")


def _check(v: _Validator, node, inputs, outputs, params) -> Check:
    if not isinstance(node, dict):
        v.fail(node, None, "each check must be a mapping")
    v.allow_keys(node, ["id", "doc", "message", "require", "violate", "untestable", "status", "waivers"], "check")
    v.require_keys(node, ["id", "doc", "message", "require"], "check")
    v.plain_name(node, "id", node["id"], "check id")
    where = f"check '{node['id']}'"
    v.expr(node, "require", node["require"], where)
    not_tensors = sorted(attribute_owners(node["require"]) - set(inputs) - set(outputs))
    if not_tensors:
        v.fail(node, "require", f"{where}: {', '.join(not_tensors)} is no tensor: only a tensor has .shape, .dtype, "
                                f".layout, .ndim and .size")
    violate = node.get("violate")
    untestable = str(node.get("untestable", ""))
    if violate is None and not untestable:
        v.fail(node, None, f"{where}: give 'violate' (how the invalid suite breaks it) or 'untestable' (why not)")
    if violate is not None:
        if not isinstance(violate, dict):
            v.fail(node, "violate", f"{where}: violate must be a mapping")
        v.allow_keys(violate, ["params", "dims", "dtype", "layout", "shape", "values"], f"{where} violate")
        for section in violate:
            v.optional_mapping(violate, section, f"{where} violate")
        tensors = {**inputs, **outputs}
        for section in ("dtype", "layout", "shape", "values"):
            for tname in violate.get(section, {}) or {}:
                if tname not in tensors:
                    v.fail(violate[section], tname, f"{where}: violate.{section} names unknown tensor '{tname}'")
        for tname, dtype in (violate.get("dtype") or {}).items():
            if dtype not in TENSOR_DTYPES:
                v.fail(violate["dtype"], tname, f"{where}: violate.dtype.{tname} must be one of "
                                                f"{', '.join(TENSOR_DTYPES)}")
        for tname, shape in (violate.get("shape") or {}).items():
            if not isinstance(shape, list) or any(isinstance(d, bool) or not isinstance(d, int) or d < 0
                                                  for d in shape):
                v.fail(violate["shape"], tname, f"{where}: violate.shape.{tname} must be a list of whole numbers >= 0")
        for pname in violate.get("params", {}) or {}:
            if pname not in params:
                v.fail(violate["params"], pname, f"{where}: violate.params names unknown param '{pname}'")
    return Check(id=str(node["id"]), doc=str(node["doc"]), message=str(node["message"]),
                 require=str(node["require"]), violate=violate, untestable=untestable, line=line_of(node),
                 status=_check_status(v, node, where))


CHECK_STATUSES = {"bad_param": "rejected", "not_supported": "not_supported"}   # status -> the case's expect


def _check_status(v: _Validator, node, where) -> str:
    """A check's `status`: what mlu-ops returns when it fails (bad_param, the default, or not_supported)."""
    status = node.get("status", "bad_param")
    if not isinstance(status, str) or status not in CHECK_STATUSES:
        v.fail(node, "status", f"{where}: status must be one of {', '.join(CHECK_STATUSES)}, got {status!r}")
    return status


def _criteria(v: _Validator, node) -> Criteria:
    if not isinstance(node, dict) or len(node) != 1 or next(iter(node)) not in ("static", "dynamic"):
        v.fail(node, None, "criteria must hold exactly one of 'static' or 'dynamic'")
    mode = next(iter(node))
    body = node[mode]
    if mode == "static":
        if not isinstance(body, dict) or not body:
            v.fail(node, mode, "criteria.static maps metrics to thresholds")
        for metric, value in body.items():
            if metric not in METRICS:
                v.fail(body, metric, f"criteria.static: unknown metric '{metric}' (known: {', '.join(METRICS)})")
            per_dtype = value if isinstance(value, dict) else {"*": value}
            for dt, threshold in per_dtype.items():
                if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or threshold < 0:
                    v.fail(body, metric, f"criteria.static.{metric}: threshold must be a number >= 0")
        return Criteria(mode="static", static=dict(body))
    if not isinstance(body, dict):
        v.fail(node, mode, "criteria.dynamic must be a mapping")
    v.allow_keys(body, ["metrics", "rates", "baseline"], "criteria.dynamic")
    v.require_keys(body, ["metrics", "rates"], "criteria.dynamic")
    metrics, rates = body["metrics"], body["rates"]
    if not isinstance(metrics, list) or not isinstance(rates, list) or len(metrics) != len(rates):
        v.fail(body, "rates", "criteria.dynamic: metrics and rates are lists of equal length")
    for metric in metrics:
        if metric not in METRICS:
            v.fail(body, "metrics", f"criteria.dynamic: unknown metric '{metric}'")
    for rate in rates:
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or rate <= 0:
            v.fail(body, "rates", "criteria.dynamic: rates must be positive numbers")
    baseline = body.get("baseline", "lowp")
    if baseline not in BUILTIN_NAMES:
        v.fail(body, "baseline", f"criteria.dynamic.baseline: {baseline!r} is not a built-in backend "
                                 f"({', '.join(BUILTIN_NAMES)}); give any other with `opcase gen --baseline`")
    return Criteria(mode="dynamic", metrics=list(metrics), rates=[float(r) for r in rates], baseline=baseline)


_ENTRY_KEYS = ["name", "note", "dims", "params", "each", "values", "omit", "zero_golden_ok", "dtype"]


def _entry(v: _Validator, node, where, spec_inputs, need_name=True, keys=_ENTRY_KEYS):
    if not isinstance(node, dict):
        v.fail(node, None, f"{where}: each case must be a mapping")
    v.allow_keys(node, keys, where)
    if need_name:
        v.require_keys(node, ["name"], where)
        v.plain_name(node, "name", node["name"], f"{where} name")
    for section in ("dims", "params", "each", "values"):
        if section in node and not isinstance(node[section], dict):
            v.fail(node, section, f"{where}: {section} must be a mapping")
    for tname, dist in (node.get("values") or {}).items():
        if tname not in spec_inputs:
            v.fail(node["values"], tname, f"{where}: values names unknown input '{tname}'")
        _values(v, node["values"], tname, dist, f"{where} values.{tname}")
    for tname in v.optional_list(node, "omit", where):
        if not isinstance(tname, str) or tname not in spec_inputs or not spec_inputs[tname].optional:
            v.fail(node, "omit", f"{where}: only optional inputs can be omitted, not '{tname}'")
    # each's lists first: the dtypes below may come from one.
    cases = 1
    for key, choices in (node.get("each") or {}).items():
        if not isinstance(choices, list) or not choices:
            v.fail(node["each"], key, f"{where}: each.{key} must be a non-empty list")
        cases *= len(choices)
        if cases > MAX_CASES_PER_ENTRY:
            v.fail(node, "each", f"{where}: its each lists make over {MAX_CASES_PER_ENTRY} cases")
    for dtype in [node["dtype"]] if "dtype" in node else (node.get("each") or {}).get("dtype") or []:
        if dtype not in FLOAT_DTYPES:
            v.fail(node, "dtype" if "dtype" in node else "each", f"{where}: dtype {dtype!r} is not one of "
                                                                 f"{', '.join(FLOAT_DTYPES)}")


def _sampler_range(v: _Validator, sampler, where):
    low, high = sampler["min"], sampler["max"]
    for bound in (low, high):
        if isinstance(bound, bool) or not isinstance(bound, (int, float)) or not math.isfinite(bound):
            v.fail(sampler, None, f"{where}: min and max must be finite numbers")
    if low > high:
        v.fail(sampler, None, f"{where}: min {low} is above max {high}")
    if isinstance(low, int) and isinstance(high, int) and not -2**63 <= low <= high < 2**63:
        v.fail(sampler, None, f"{where}: min and max must fit in 64 bits")
    if sampler.get("log") and not low > 0:
        v.fail(sampler, None, f"{where}: a log sampler needs min > 0")


def _suites(v: _Validator, node, spec_inputs, spec_outputs=(), op: str = "", spec_params=()):
    if not isinstance(node, dict):
        v.fail(node, None, "suites must be a mapping")
    v.allow_keys(node, list(SUITES), "suites")
    random = node.get("random")
    if random is not None:
        if not isinstance(random, dict):
            v.fail(node, "random", "suites.random must be a mapping")
        v.allow_keys(random, ["count", "dims", "params", "where", "max_elements", "values"], "suites.random")
        for key, most in (("count", MAX_RANDOM_COUNT), ("max_elements", None)):
            number = random.get(key, 0)
            if isinstance(number, bool) or not isinstance(number, int) or number < 0 or most and number > most:
                v.fail(random, key, f"suites.random.{key} must be a whole number >= 0"
                                    + (f" and <= {most}" if most else ""))
        for section in ("dims", "params"):
            for name, sampler in v.optional_mapping(random, section, "suites.random").items():
                if isinstance(sampler, dict):
                    v.allow_keys(sampler, ["min", "max", "log"], f"suites.random.{section}.{name}")
                    v.require_keys(sampler, ["min", "max"], f"suites.random.{section}.{name}")
                    _sampler_range(v, sampler, f"suites.random.{section}.{name}")
                elif isinstance(sampler, str):
                    v.expr(random[section], name, sampler, f"suites.random.{section}.{name}")
                elif isinstance(sampler, list) and not sampler:
                    # A list is a choice among its values: an empty one has nothing to draw.
                    v.fail(random[section], name, f"suites.random.{section}.{name}: a list of choices must not be empty")
        for i, cond in enumerate(v.optional_list(random, "where", "suites.random")):
            v.expr(random["where"], None, cond, f"suites.random.where[{i}]")
        for tname, dist in v.optional_mapping(random, "values", "suites.random").items():
            if tname not in spec_inputs:
                v.fail(random["values"], tname, f"suites.random: values names unknown input '{tname}'")
            _values(v, random["values"], tname, dist, f"suites.random values.{tname}")
    network = node.get("network")
    if network is not None:
        v.mapping(node, "network", "suites")
        v.allow_keys(network, ["derivation", "cases"], "suites.network")
        v.require_keys(network, ["cases"], "suites.network")
        for case in v.optional_list(network, "cases", "suites.network"):
            _entry(v, case, "suites.network case", spec_inputs)
    boundary = node.get("boundary")
    if boundary is not None:
        if not isinstance(boundary, list):
            v.fail(node, "boundary", "suites.boundary must be a list of cases")
        for case in boundary:
            _entry(v, case, "suites.boundary case", spec_inputs)
    invalid = node.get("invalid")
    if invalid is not None:
        v.mapping(node, "invalid", "suites")
        v.allow_keys(invalid, ["base", "dtypes"], "suites.invalid")
        v.require_keys(invalid, ["base"], "suites.invalid")
        _entry(v, invalid["base"], "suites.invalid.base", spec_inputs, need_name=False)
        _invalid_dtypes(v, invalid)
    stress = node.get("stress")
    if stress is not None:
        _stress(v, node, stress, spec_inputs, spec_outputs)
    fast_path = node.get("fast_path")
    if fast_path is not None:
        _fast_path(v, node, fast_path, spec_inputs, spec_params)
    if node.get("hunt") is not None:
        _hunt(v, node, node["hunt"], op)
    return node


def _fast_path(v: _Validator, suites, node, spec_inputs, spec_params) -> None:
    """suites.fast_path: the parameter values an implementation typically special-cases, each
    with why, made at two or more shapes from a base whose values make the skipped work matter."""
    if not isinstance(node, dict):
        v.fail(suites, "fast_path", "suites.fast_path must be a mapping")
    v.allow_keys(node, ["base", "shapes", "paths"], "suites.fast_path")
    v.require_keys(node, ["base", "shapes", "paths"], "suites.fast_path")
    _entry(v, node["base"], "suites.fast_path.base", spec_inputs, need_name=False)
    if "each" in node["base"]:
        v.fail(node["base"], "each", "suites.fast_path.base: one case, no 'each'")
    _fast_path_shapes(v, node, "suites.fast_path")
    paths = node["paths"]
    if not isinstance(paths, list) or not paths:
        v.fail(node, "paths", "suites.fast_path.paths must be a non-empty list of fast paths")
    names, planned = set(), 0
    for path in paths:
        where = "suites.fast_path path"
        _entry(v, path, where, spec_inputs, keys=["name", "why", "params", "dims", "values", "omit", "each", "shapes"])
        v.require_keys(path, ["why"], where)
        if path["name"] in names:
            v.fail(path, "name", f"{where}: name '{path['name']}' is given twice")
        names.add(path["name"])
        if not isinstance(path["why"], str) or not path["why"].strip():
            v.fail(path, "why", f"{where} {path['name']}: why must say what an implementation skips there")
        if not path.get("params") and not path.get("omit") and not path.get("dims"):
            v.fail(path, None, f"{where} {path['name']}: params, dims or omit must set what is special-cased")
        for name in path.get("params") or {}:
            if name not in spec_params:
                v.fail(path["params"], name, f"{where} {path['name']}: unknown param '{name}' "
                                             f"(known: {', '.join(spec_params)})")
        if "shapes" in path:
            _fast_path_shapes(v, path, f"{where} {path['name']}")
        planned += math.prod(len(c) for c in (path.get("each") or {}).values()) * len(path.get("shapes", node["shapes"]))
        if planned > MAX_FAST_PATH_CASES:
            v.fail(path, None, f"{where} {path['name']}: suites.fast_path plans over {MAX_FAST_PATH_CASES} cases "
                               f"(its paths' each lists times their shapes)")


def _fast_path_shapes(v: _Validator, node, where) -> None:
    """A fast path is met at two shapes or more, so that no kill of its bug rests on one case shape."""
    shapes = node["shapes"]
    if not isinstance(shapes, list) or len(shapes) < 2 or any(
            not isinstance(s, dict) or not s or any(isinstance(n, bool) or not isinstance(n, int) or n < 0
                                                     for n in s.values()) for s in shapes):
        v.fail(node, "shapes", f"{where}: shapes must be a list of two or more mappings of dims to whole numbers")
    if len({tuple(sorted(s.items())) for s in shapes}) < len(shapes):
        v.fail(node, "shapes", f"{where}: shapes must differ from each other")


def _hunt(v: _Validator, suites, node, op: str) -> None:
    """suites.hunt: the cases `opcase power --hunt` found, each an explicit descriptor of this kernel
    and the bugs it kills (README: Measuring a suite's power)."""
    from gen.core.descriptor import DescriptorError, Explicit, parse  # lazily: it imports this module

    if not isinstance(node, list):
        v.fail(suites, "hunt", "suites.hunt must be a list of {case: DESCRIPTOR, kills: [NAME, ...]}")
    seen = set()
    for entry in node:
        if not isinstance(entry, dict):
            v.fail(entry, None, "suites.hunt: each entry is {case: DESCRIPTOR, kills: [NAME, ...]}")
        v.allow_keys(entry, ["case", "kills"], "suites.hunt entry")
        v.require_keys(entry, ["case", "kills"], "suites.hunt entry")
        text = entry["case"]
        try:
            parsed = parse(text) if isinstance(text, str) else None
        except DescriptorError as exc:
            v.fail(entry, "case", f"suites.hunt: {exc}")
        if not isinstance(parsed, Explicit):
            v.fail(entry, "case", "suites.hunt: case must be an explicit descriptor "
                                  "(OP:DTYPE:DIMS:PARAMS:seed=S[:...], README: Descriptors and shrinking)")
        if parsed.op != op:
            v.fail(entry, "case", f"suites.hunt: case {text!r} is for {parsed.op}, not {op}")
        if text in seen:
            v.fail(entry, "case", f"suites.hunt: case {text!r} is listed twice")
        seen.add(text)
        kills = entry["kills"]
        if not isinstance(kills, list) or not kills or not all(isinstance(k, str) and k for k in kills):
            v.fail(entry, "kills", "suites.hunt: kills must be a non-empty list of mutant names")


def _invalid_dtypes(v: _Validator, invalid) -> None:
    """suites.invalid.dtypes: the dtypes each check's invalid case is made in (default: the base's `dtype`,
    else the spec's last dtype), so a check a backend makes in one dtype only is caught."""
    dtypes = invalid.get("dtypes")
    if dtypes is None:
        return
    if "dtype" in invalid["base"]:
        v.fail(invalid, "dtypes", "suites.invalid: give either dtypes or base.dtype, not both")
    if not isinstance(dtypes, list) or not dtypes or len(set(dtypes)) != len(dtypes) or any(
            d not in FLOAT_DTYPES for d in dtypes):
        v.fail(invalid, "dtypes", f"suites.invalid.dtypes must be a list of distinct dtypes of "
                                  f"{', '.join(FLOAT_DTYPES)}")


def _stress(v: _Validator, suites, node, spec_inputs, spec_outputs):
    """suites.stress: a small valid base case and the stress dimensions derived from it."""
    if not isinstance(node, dict):
        v.fail(suites, "stress", "suites.stress must be a mapping")
    v.allow_keys(node, ["base", *STRESS_DIMENSIONS, "not_applicable"], "suites.stress")
    v.require_keys(node, ["base"], "suites.stress")
    _entry(v, node["base"], "suites.stress.base", spec_inputs, need_name=False)
    if "each" in node["base"]:
        v.fail(node["base"], "each", "suites.stress.base: one case, no 'each'")
    regimes = node.get("values")
    if regimes is not None:
        if not isinstance(regimes, dict) or not regimes:
            v.fail(node, "values", "suites.stress.values maps regimes to the inputs they apply to")
        for regime, names in regimes.items():
            if regime not in VALUE_REGIMES:
                v.fail(regimes, regime, f"suites.stress.values: unknown regime '{regime}' "
                                        f"(known: {', '.join(VALUE_REGIMES)})")
            if not isinstance(names, list) or not names or any(not isinstance(n, str) or n not in spec_inputs
                                                                   for n in names):
                v.fail(regimes, regime, f"suites.stress.values.{regime} must be a non-empty list of inputs "
                                        f"(known: {', '.join(spec_inputs)})")
    tail = node.get("channel_tail")
    if tail is not None:
        for entry in tail if isinstance(tail, list) and tail else [tail]:
            _channel_tail(v, node, entry)
    contention = node.get("contention")
    if contention is not None:
        if not isinstance(contention, list) or not contention:
            v.fail(node, "contention", "suites.stress.contention must be a non-empty list of cases")
        for case in contention:
            _entry(v, case, "suites.stress.contention case", spec_inputs)
    batch = node.get("batch")
    if batch is not None:
        if not isinstance(batch, dict) or not batch or any(
                isinstance(n, bool) or not isinstance(n, int) or n < 0 for n in batch.values()):
            v.fail(node, "batch", "suites.stress.batch maps dims to whole numbers >= 0")
        for name in batch:
            if not isinstance(name, str) or name not in (node["base"].get("dims") or {}):
                v.fail(batch, name, f"suites.stress.batch: '{name}' is not one of suites.stress.base's dims")
        _batch_sets_a_batch(v, node, batch, spec_inputs, spec_outputs)
    waived = node.get("not_applicable")
    if waived is not None:
        if not isinstance(waived, dict) or not waived:
            v.fail(node, "not_applicable", "suites.stress.not_applicable maps dimensions to why they do not apply")
        for name, why in waived.items():
            if name not in REACHABLE_DIMENSIONS and not str(name).startswith("count_"):
                v.fail(waived, name, f"suites.stress.not_applicable: unknown dimension '{name}' "
                                     f"(known: {', '.join(REACHABLE_DIMENSIONS)})")
            if not isinstance(why, str) or not why.strip():
                v.fail(waived, name, f"suites.stress.not_applicable.{name}: say why, in words")
    index_width = node.get("index_width")
    if index_width is not None:
        if not isinstance(index_width, dict):
            v.fail(node, "index_width", "suites.stress.index_width must be a mapping")
        v.allow_keys(index_width, ["tensor", *INDEX_LIMITS], "suites.stress.index_width")
        v.require_keys(index_width, ["tensor"], "suites.stress.index_width")
        if not isinstance(index_width["tensor"], str) or index_width["tensor"] not in (*spec_inputs, *spec_outputs):
            v.fail(index_width, "tensor", f"suites.stress.index_width.tensor: unknown tensor "
                                          f"{index_width['tensor']!r}")
        for limit in INDEX_LIMITS:
            if limit in index_width:
                _entry(v, index_width[limit], f"suites.stress.index_width.{limit}", spec_inputs, need_name=False)



def _channel_tail(v: _Validator, stress, tail) -> None:
    """One suites.stress.channel_tail entry: the base's `dim` or int `param` that sizes a channel
    axis, and the vector widths whose partial blocks it must leave."""
    if not isinstance(tail, dict):
        v.fail(stress, "channel_tail", "suites.stress.channel_tail must be a mapping or a non-empty list of them")
    v.allow_keys(tail, ["dim", "param", "widths"], "suites.stress.channel_tail")
    if ("dim" in tail) == ("param" in tail):
        v.fail(tail, None, "suites.stress.channel_tail: give exactly one of 'dim' and 'param'")
    v.require_keys(tail, ["widths"], "suites.stress.channel_tail")
    key = "dim" if "dim" in tail else "param"
    known = stress["base"].get(f"{key}s") or {}
    if not isinstance(tail[key], str) or tail[key] not in known:
        v.fail(tail, key, f"suites.stress.channel_tail.{key} must name one of suites.stress.base's {key}s "
                          f"({', '.join(map(str, known))})")
    widths = tail["widths"]
    if not isinstance(widths, list) or not widths or any(
            isinstance(w, bool) or not isinstance(w, int) or not 2 <= w <= 4096 for w in widths):
        v.fail(tail, "widths", "suites.stress.channel_tail.widths must be a list of whole numbers in [2, 4096]")

def _batch_sets_a_batch(v: _Validator, stress, batch: dict, spec_inputs, spec_outputs) -> None:
    """suites.stress.batch makes a batch of several: it sets a dim of an axis whose role is batch to 2 or more."""
    tensors = [*spec_inputs.values(), *dict(spec_outputs).values()]
    dims = sorted({str(entry) for t in tensors for entry, role in zip(t.shape, t.axes) if role == "batch"})
    if not any(batch.get(name, 0) >= 2 for name in dims):
        v.fail(stress, "batch", f"suites.stress.batch must set a dim of a batch axis ({', '.join(dims) or 'none'}) "
                                f"to 2 or more")


# The statuses a deviation may record (gen.core.verdict's failing ones; spec.py cannot import it).
DEVIATION_STATUSES = ("failed", "wrongly-accepted", "wrongly-rejected", "error")
MAX_DEVIATION_PATTERN = 200


def _deviations(v: _Validator, raw) -> list:
    """The spec's `deviations:` list: each {backend, cases, status, reason} (specs/README.md)."""
    found = []
    for node in v.optional_list(raw, "deviations", "spec"):
        if not isinstance(node, dict):
            v.fail(raw, "deviations", "each deviation must be a mapping")
        v.allow_keys(node, ["backend", "cases", "status", "reason"], "deviation")
        v.require_keys(node, ["backend", "cases", "status", "reason"], "deviation")
        if not isinstance(node["backend"], str) or not node["backend"]:
            v.fail(node, "backend", "deviation: backend must name a backend (as --backend does)")
        pattern = node["cases"]
        if not isinstance(pattern, str) or not pattern or len(pattern) > MAX_DEVIATION_PATTERN:
            v.fail(node, "cases", f"deviation: cases is a regex over SUITE/NAME of at most {MAX_DEVIATION_PATTERN} "
                                  f"characters")
        try:
            re.compile(pattern)
        except re.error as exc:
            v.fail(node, "cases", f"deviation: cases {pattern!r} is no regex ({exc})")
        problem = regex_problem(pattern)   # matching it cannot hang
        if problem:
            v.fail(node, "cases", f"deviation: cases {pattern!r}: {problem}")
        if node["status"] not in DEVIATION_STATUSES:
            v.fail(node, "status", f"deviation: status must be one of {', '.join(DEVIATION_STATUSES)}")
        if not isinstance(node["reason"], str) or len(node["reason"].split()) < 3:
            v.fail(node, "reason", "deviation: reason says why, in words (the doc, the implementation, the cases)")
        found.append(Deviation(backend=str(node["backend"]), cases=pattern, status=node["status"],
                               reason=" ".join(node["reason"].split()), line=line_of(node)))
    return found


def _field_name(v: _Validator, node, key, where) -> str:
    value = node.get(key)
    if not isinstance(value, str) or not value.isidentifier():
        v.fail(node, key, f"{where}: '{key}' must be an identifier")
    return value


def _mluops(v: _Validator, raw, inputs: dict, outputs: dict) -> MluopsMapping | None:
    """The spec's `mluops:` block, or None where the spec has none (mlu-ops cannot carry the kernel)."""
    if raw.get("mluops") is None:
        return None
    node = v.mapping(raw, "mluops", "spec")
    v.allow_keys(node, ["op_type", "param_field", "inputs", "outputs", "fixed"], "mluops")
    v.require_keys(node, ["inputs", "outputs"], "mluops")
    op_type = _field_name(v, node, "op_type", "mluops") if node.get("op_type") is not None else None
    param_field = _field_name(v, node, "param_field", "mluops") if node.get("param_field") is not None else None
    order = {}
    for kind, tensors in (("inputs", inputs), ("outputs", outputs)):
        names = node[kind]
        if not isinstance(names, list) or sorted(map(str, names)) != sorted(tensors):
            v.fail(node, kind, f"mluops.{kind} must list each of the spec's {kind} once, in mlu-ops' "
                               f"positional order ({', '.join(tensors)})")
        order[kind] = tuple(map(str, names))
    optional = [n for n in order["inputs"] if inputs[n].optional]
    if optional and order["inputs"][-len(optional):] != tuple(optional):
        v.fail(node, "inputs", "mluops.inputs: optional inputs come last (a case leaves them out from the end)")
    tied = [n for n in order["outputs"] if outputs[n].with_input]
    if tied and order["outputs"][-len(tied):] != tuple(tied):
        v.fail(node, "outputs", "mluops.outputs: outputs that go with optional inputs come last")
    fixed = v.optional_mapping(node, "fixed", "mluops")
    for name, value in fixed.items():
        if not str(name).isidentifier() or isinstance(value, bool) or not isinstance(value, int):
            v.fail(fixed, name, f"mluops.fixed: {name!r} must be an identifier with an integer value")
    if fixed and param_field is None:
        v.fail(node, "fixed", "mluops.fixed needs a param_field to put its fields in")
    return MluopsMapping(op_type=op_type, param_field=param_field, inputs=order["inputs"],
                         outputs=order["outputs"], fixed=tuple((str(k), int(x)) for k, x in fixed.items()))


def _output_criteria(v: _Validator, raw, outputs: dict, path) -> dict:
    """``output_criteria: {OUTPUT: {exact: {undetermined: FN}}}``: outputs judged exactly (integer ones:
    indices, argmax, counts), with the function that finds where the golden is not determined."""
    found = {}
    for name, node in v.optional_mapping(raw, "output_criteria", "spec").items():
        if name not in outputs:
            v.fail(raw["output_criteria"], name, f"output_criteria: '{name}' is no output of the spec")
        if not isinstance(node, dict) or list(node) != ["exact"]:
            v.fail(raw["output_criteria"], name, f"output_criteria.{name}: give exactly one criterion, 'exact'")
        body = node["exact"]
        if body is True:
            body = {}
        if not isinstance(body, dict):
            v.fail(node, "exact", f"output_criteria.{name}.exact: true, or a mapping with 'undetermined'")
        v.allow_keys(body, ["undetermined"], f"output_criteria.{name}.exact")
        dtype = outputs[name].dtype
        if dtype == "T" or dtype in FLOAT_DTYPES:
            v.fail(raw["output_criteria"], name, f"output_criteria.{name}: exact judges integer outputs; "
                                                 f"'{name}' is {dtype}")
        undetermined = body.get("undetermined", "")
        if undetermined:
            resolve_callable(str(undetermined), path, f"output_criteria.{name}.exact.undetermined",
                             line_of(body, "undetermined"))
        found[name] = OutputCriterion(exact=True, undetermined=str(undetermined))
    return found


_TOP_KEYS = ["op", "doc", "summary", "reference", "dtypes", "params", "inputs", "outputs", "checks",
             "criteria", "output_criteria", "suites", "theory_ops", "nondeterministic_sums", "mluops",
             "deviations", "waivers"]


def load_spec(path) -> Spec:
    """Load and validate one spec file.  Raises SpecError naming the file and line.

    A file already loaded in this process with the same bytes is not parsed again (gen reads
    each spec for the plan, the generator and each case's plans): the Spec made then is given,
    shared as spec_for's are (read-only)."""
    path = Path(path)
    try:
        text = path.read_bytes()
    except OSError as exc:
        raise SpecError(path, None, f"cannot read spec ({exc.strerror})") from None
    key = (str(path), hashlib.sha256(text).hexdigest())
    if key not in _LOADED:
        _LOADED[key] = _parsed_spec(path, text)
    return _LOADED[key]


# Specs loaded in this process, by path and content hash (load_spec).
_LOADED: dict[tuple[str, str], "Spec"] = {}


def _parsed_spec(path: Path, text: bytes) -> Spec:
    try:
        raw = _parse_yaml(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        problem = getattr(exc, "problem", None) or str(exc)
        raise SpecError(path, mark.line + 1 if mark else None, f"YAML error: {problem}") from None
    v = _Validator(path)
    if not isinstance(raw, dict):
        raise SpecError(path, 1, "a spec is a YAML mapping")
    v.allow_keys(raw, _TOP_KEYS, "spec")
    # params may be left out: a kernel without any (a point-cloud op) has nothing to say there.
    v.require_keys(raw, ["op", "doc", "reference", "dtypes", "inputs", "outputs", "checks",
                         "criteria", "suites"], "spec")
    v.plain_name(raw, "op", raw["op"], "op")
    for node, message in waivers.problems(raw):   # audit waivers (gen/core/waivers.py)
        v.fail(node, "waivers", message)
    dtypes = raw["dtypes"]
    if not isinstance(dtypes, list) or not dtypes or any(d not in FLOAT_DTYPES for d in dtypes):
        v.fail(raw, "dtypes", f"dtypes must be a non-empty list of {', '.join(FLOAT_DTYPES)}")
    params = {}
    for name, pnode in v.optional_mapping(raw, "params", "spec").items():
        ptype = pnode.get("type") if isinstance(pnode, dict) else None
        if ptype not in ("int", "float", "bool"):
            v.fail(raw["params"], name, f"param '{name}': type must be int, float or bool")
        params[name] = ParamSpec(name=name, type=ptype, doc=str(pnode.get("doc", "")))
    inputs = {n: _tensor(v, raw["inputs"], n, t, "input", dtypes)
              for n, t in v.mapping(raw, "inputs", "spec").items()}
    outputs = {n: _tensor(v, raw["outputs"], n, t, "output", dtypes)
               for n, t in v.mapping(raw, "outputs", "spec").items()}
    _tied_outputs(v, raw["outputs"], inputs, outputs)
    clash = set(inputs) & set(outputs) | (set(inputs) | set(outputs)) & set(params)
    if clash:
        v.fail(raw, "outputs", f"names used twice among inputs, outputs and params: {sorted(clash)}")
    if not isinstance(raw["checks"], list):
        v.fail(raw, "checks", "checks must be a list")
    checks = [_check(v, c, inputs, outputs, params) for c in raw["checks"]]
    ids = [c.id for c in checks]
    dup = {i for i in ids if ids.count(i) > 1}
    if dup:
        v.fail(raw, "checks", f"check ids must be unique: {sorted(dup)}")
    criteria = _criteria(v, raw["criteria"])
    output_criteria = _output_criteria(v, raw, outputs, path)
    if criteria.mode == "dynamic":
        # The docs' dynamic rule scales a baseline's float error; an index output has no such error,
        # so it is judged exactly (output_criteria) beside the dynamic thresholds of the others.
        for name, tensor in outputs.items():
            if tensor.dtype != "T" and tensor.dtype not in FLOAT_DTYPES and name not in output_criteria:
                v.fail(raw["outputs"], name, f"output '{name}' is {tensor.dtype}: dynamic criteria judge floating "
                                             f"outputs only; judge it exactly (output_criteria) or the kernel "
                                             f"with static criteria")
    suites = _suites(v, raw["suites"], inputs, outputs, str(raw["op"]), params)
    resolve_callable(raw["reference"], path, "reference", line_of(raw, "reference"))
    nondeterministic_sums = raw.get("nondeterministic_sums", False)
    if not isinstance(nondeterministic_sums, bool):
        v.fail(raw, "nondeterministic_sums", "nondeterministic_sums must be true or false")
    return Spec(op=str(raw["op"]), path=path, sha256=hashlib.sha256(text).hexdigest(), doc=str(raw["doc"]),
                summary=str(raw.get("summary", "")), reference=str(raw["reference"]), dtypes=list(dtypes),
                params=params, inputs=inputs, outputs=outputs, checks=checks, criteria=criteria,
                suites=suites, theory_ops=str(raw.get("theory_ops", "")),
                nondeterministic_sums=nondeterministic_sums, mluops=_mluops(v, raw, inputs, outputs),
                output_criteria=output_criteria, raw=raw, deviations=_deviations(v, raw))
