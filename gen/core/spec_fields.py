"""Validating a spec's fields other than its suites: tensors and their axes and values, checks,
criteria, deviations, the mlu-ops mapping and per-output criteria (the Validator records the first
problem with its line)."""
from __future__ import annotations

from pathlib import Path
import re

from gen.core.backend import BUILTIN_NAMES
from gen.core.casefile import METRICS, PLAIN_NAME_RULE, is_plain_name
from gen.core.expr import ExprError, attribute_owners, compile_expr
from gen.core.safe_regex import regex_problem
from gen.core.spec_model import (AXIS_ROLES, CHECK_STATUSES, Check, Criteria, DEVIATION_STATUSES, DISTRIBUTIONS,
                                 Deviation, FLOAT_DTYPES, LETTER_ROLES, MAX_DEVIATION_PATTERN, MluopsMapping,
                                 OutputCriterion, SpecError, TENSOR_DTYPES, TensorSpec, resolve_callable)
from gen.core.spec_yaml import LDict, line_of


class Validator:
    def __init__(self, path: Path):
        self.path = path

    def fail(self, node, key, message):
        raise SpecError(self.path, line_of(node, key), message)

    def mapping(self, node, key, where) -> LDict:
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


def read_tensor(v: Validator, parent, name, node, kind, dtypes) -> TensorSpec:
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
        read_values(v, node, "values", values, where)
    return TensorSpec(name=name, dtype=dtype, layout=str(node["layout"]), shape=list(shape), values=values,
                      optional=bool(node.get("optional", False)), line=line_of(node),
                      axes=_axes(v, node, where, str(node["layout"]), len(shape)),
                      with_input=str(node.get("with_input") or ""))


def read_tied_outputs(v: Validator, node, inputs: dict, outputs: dict) -> None:
    """An output's `with_input` names an optional input: the call that leaves the input out has no such
    output either (deform_roi_pool_backward without offset: no grad_offset, mlu-ops' 3-input form)."""
    for name, tensor in outputs.items():
        if tensor.with_input and not (tensor.with_input in inputs and inputs[tensor.with_input].optional):
            v.fail(node[name], "with_input", f"output '{name}': with_input must name an optional input, not "
                                             f"{tensor.with_input!r}")


def _axes(v: Validator, node, where, layout: str, rank: int) -> tuple:
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


def read_values(v: Validator, parent, key, node, where):
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


def _value_bounds(v: Validator, node, keys, where) -> None:
    """A plain distribution's numbers (low, high, mean, std, value): numbers, or expressions over the case's
    dims, params and tensors' shapes (`high: "M - 1"`, `high: "feature.shape[2] - 1"`), drawn per case."""
    for key in keys:
        bound = node[key]
        if isinstance(bound, str):
            v.expr(node, key, bound, f"{where} values.{key}")
        elif isinstance(bound, bool) or not isinstance(bound, (int, float)):
            v.fail(node, key, f"{where}: values.{key} must be a number or an expression, got {type(bound).__name__}")


def read_check(v: Validator, node, inputs, outputs, params) -> Check:
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


def _check_status(v: Validator, node, where) -> str:
    """A check's `status`: what mlu-ops returns when it fails (bad_param, the default, or not_supported)."""
    status = node.get("status", "bad_param")
    if not isinstance(status, str) or status not in CHECK_STATUSES:
        v.fail(node, "status", f"{where}: status must be one of {', '.join(CHECK_STATUSES)}, got {status!r}")
    return status


def read_criteria(v: Validator, node) -> Criteria:
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


def read_deviations(v: Validator, raw) -> list:
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


def _field_name(v: Validator, node, key, where) -> str:
    value = node.get(key)
    if not isinstance(value, str) or not value.isidentifier():
        v.fail(node, key, f"{where}: '{key}' must be an identifier")
    return value


def read_mluops(v: Validator, raw, inputs: dict, outputs: dict) -> MluopsMapping | None:
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


def read_output_criteria(v: Validator, raw, outputs: dict, path) -> dict:
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
