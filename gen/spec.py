"""Operator specs: the YAML transcription of a design doc, loaded and validated.

Every error names the spec file and the line of the offending entry.  The format is
documented in specs/README.md.
"""
from __future__ import annotations

import collections.abc
import hashlib
import importlib
import sys
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from gen.expr import ExprError, compile_expr

METRICS = ("diff1", "diff2", "diff3", "diff3_2", "diff4")
FLOAT_DTYPES = ("float16", "float32", "float64")
TENSOR_DTYPES = FLOAT_DTYPES + ("int32", "int64", "uint8", "bool")
DISTRIBUTIONS = ("uniform", "normal", "randint", "const", "custom")
SUITES = ("network", "random", "boundary", "invalid")


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


class _LineLoader(yaml.SafeLoader):
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


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _LineLoader.construct_mapping)
_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _LineLoader.construct_sequence)


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


@dataclass
class Criteria:
    mode: str                                   # static | dynamic
    static: dict = field(default_factory=dict)  # metric -> threshold, per dtype allowed: {float16: .., float32: ..}
    metrics: list = field(default_factory=list) # dynamic: the metrics judged
    rates: list = field(default_factory=list)   # dynamic: one rate per metric
    baseline: str = "lowp"


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
    raw: dict = field(default_factory=dict, repr=False)

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


def resolve_callable(dotted: str, path, what: str, line: int = 0):
    module_name, _, attr = str(dotted).partition(":")
    if not attr:
        raise SpecError(path, line, f"{what} {dotted!r} must be 'module:function'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise SpecError(path, line, f"{what} {dotted!r}: cannot import {module_name} ({exc})") from None
    try:
        return getattr(module, attr)
    except AttributeError:
        raise SpecError(path, line, f"{what} {dotted!r}: {module_name} has no {attr}") from None


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

    def expr(self, node, key, text, where):
        if isinstance(text, bool) or not isinstance(text, (str, int, float)):
            self.fail(node, key, f"{where}: expected an expression, got {type(text).__name__}")
        try:
            compile_expr(str(text))
        except ExprError as exc:
            self.fail(node, key, f"{where}: {exc}")


def _tensor(v: _Validator, name, node, kind, dtypes) -> TensorSpec:
    where = f"{kind} '{name}'"
    if not isinstance(node, dict):
        v.fail(node, None, f"{where} must be a mapping")
    keys = ["dtype", "layout", "shape", "values", "optional", "doc"] if kind == "input" else \
        ["dtype", "layout", "shape", "doc"]
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
                      optional=bool(node.get("optional", False)), line=line_of(node))


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


def _check(v: _Validator, node, inputs, outputs, params) -> Check:
    if not isinstance(node, dict):
        v.fail(node, None, "each check must be a mapping")
    v.allow_keys(node, ["id", "doc", "message", "require", "violate", "untestable"], "check")
    v.require_keys(node, ["id", "doc", "message", "require"], "check")
    where = f"check '{node['id']}'"
    v.expr(node, "require", node["require"], where)
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
        for pname in violate.get("params", {}) or {}:
            if pname not in params:
                v.fail(violate["params"], pname, f"{where}: violate.params names unknown param '{pname}'")
    return Check(id=str(node["id"]), doc=str(node["doc"]), message=str(node["message"]),
                 require=str(node["require"]), violate=violate, untestable=untestable, line=line_of(node))


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
    return Criteria(mode="dynamic", metrics=list(metrics), rates=[float(r) for r in rates],
                    baseline=str(body.get("baseline", "lowp")))


_ENTRY_KEYS = ["name", "note", "dims", "params", "each", "values", "omit", "zero_golden_ok", "dtype"]


def _entry(v: _Validator, node, where, spec_inputs, need_name=True):
    if not isinstance(node, dict):
        v.fail(node, None, f"{where}: each case must be a mapping")
    v.allow_keys(node, _ENTRY_KEYS, where)
    if need_name:
        v.require_keys(node, ["name"], where)
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
    for key, choices in (node.get("each") or {}).items():
        if not isinstance(choices, list) or not choices:
            v.fail(node["each"], key, f"{where}: each.{key} must be a non-empty list")


def _suites(v: _Validator, node, spec_inputs):
    if not isinstance(node, dict):
        v.fail(node, None, "suites must be a mapping")
    v.allow_keys(node, list(SUITES), "suites")
    random = node.get("random")
    if random is not None:
        if not isinstance(random, dict):
            v.fail(node, "random", "suites.random must be a mapping")
        v.allow_keys(random, ["count", "dims", "params", "where", "max_elements", "values"], "suites.random")
        for section in ("dims", "params"):
            for name, sampler in v.optional_mapping(random, section, "suites.random").items():
                if isinstance(sampler, dict):
                    v.allow_keys(sampler, ["min", "max", "log"], f"suites.random.{section}.{name}")
                    v.require_keys(sampler, ["min", "max"], f"suites.random.{section}.{name}")
                elif isinstance(sampler, str):
                    v.expr(random[section], name, sampler, f"suites.random.{section}.{name}")
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
        v.allow_keys(invalid, ["base"], "suites.invalid")
        v.require_keys(invalid, ["base"], "suites.invalid")
        _entry(v, invalid["base"], "suites.invalid.base", spec_inputs, need_name=False)
    return node


_TOP_KEYS = ["op", "doc", "summary", "reference", "dtypes", "params", "inputs", "outputs", "checks",
             "criteria", "suites", "theory_ops"]


def load_spec(path) -> Spec:
    """Load and validate one spec file.  Raises SpecError naming the file and line."""
    path = Path(path)
    try:
        text = path.read_bytes()
    except OSError as exc:
        raise SpecError(path, None, f"cannot read spec ({exc.strerror})") from None
    try:
        raw = yaml.load(text, Loader=_LineLoader)  # noqa: S506 - SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        problem = getattr(exc, "problem", None) or str(exc)
        raise SpecError(path, mark.line + 1 if mark else None, f"YAML error: {problem}") from None
    v = _Validator(path)
    if not isinstance(raw, dict):
        raise SpecError(path, 1, "a spec is a YAML mapping")
    v.allow_keys(raw, _TOP_KEYS, "spec")
    v.require_keys(raw, ["op", "doc", "reference", "dtypes", "params", "inputs", "outputs", "checks",
                         "criteria", "suites"], "spec")
    dtypes = raw["dtypes"]
    if not isinstance(dtypes, list) or not dtypes or any(d not in FLOAT_DTYPES for d in dtypes):
        v.fail(raw, "dtypes", f"dtypes must be a non-empty list of {', '.join(FLOAT_DTYPES)}")
    params = {}
    for name, pnode in v.mapping(raw, "params", "spec").items():
        ptype = pnode.get("type") if isinstance(pnode, dict) else None
        if ptype not in ("int", "float", "bool"):
            v.fail(raw["params"], name, f"param '{name}': type must be int, float or bool")
        params[name] = ParamSpec(name=name, type=ptype, doc=str(pnode.get("doc", "")))
    inputs = {n: _tensor(v, n, t, "input", dtypes) for n, t in v.mapping(raw, "inputs", "spec").items()}
    outputs = {n: _tensor(v, n, t, "output", dtypes) for n, t in v.mapping(raw, "outputs", "spec").items()}
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
    suites = _suites(v, raw["suites"], inputs)
    resolve_callable(raw["reference"], path, "reference", line_of(raw, "reference"))
    return Spec(op=str(raw["op"]), path=path, sha256=hashlib.sha256(text).hexdigest(), doc=str(raw["doc"]),
                summary=str(raw.get("summary", "")), reference=str(raw["reference"]), dtypes=list(dtypes),
                params=params, inputs=inputs, outputs=outputs, checks=checks, criteria=criteria,
                suites=suites, theory_ops=str(raw.get("theory_ops", "")), raw=raw)
