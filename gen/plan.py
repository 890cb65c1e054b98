"""Planning a spec's suites: which cases each suite holds, their shapes, params, seeds and expected
outcomes (a Plan per case), before any data; and the plans that one-line descriptors and the hunt
suite name.  gen.generate turns a Plan into a case file."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
import hashlib
import itertools
import math
import numbers
import re

import numpy as np

from gen.core.backend import TensorInfo
from gen.core.casefile import contained_path, element_count
from gen.core.checks import first_failure
from gen.core.descriptor import DESCRIBED, DescriptorError, Explicit, HUNT, NOTE_PREFIX, RANDOM_NAME, case_seed, parse
from gen.core.expr import ExprError, evaluate
from gen.core.spec import SUITES, Spec, SpecError, absent_tensors, line_of
from gen.reach import reach_entries


RANDOM_ATTEMPTS = 2000


class GenerationError(Exception):
    """A spec whose suite cannot be generated as written (names the spec and the case)."""


@dataclass
class Plan:
    """A case before it has data: which suite, which shapes, which outcome."""
    suite: str
    name: str
    dtype: str
    dims: dict
    params: dict
    seed: int
    values: dict = field(default_factory=dict)
    omit: tuple = ()
    note: str = ""
    zero_golden_ok: bool = False
    violation: object = None          # the Check an invalid case breaks
    line: int = 0


def slug(value) -> str:
    if isinstance(value, float):
        text = f"{value:g}"
    else:
        text = str(value)
    return re.sub(r"[^A-Za-z0-9.+-]", "_", text)


def _expand(spec: Spec, entry: dict, suite: str, base_seed: int) -> list[Plan]:
    """One spec entry -> cases: the cross product of its 'each' lists and the dtypes."""
    each = dict(entry.get("each") or {})
    if "dtype" not in each:
        each["dtype"] = [entry["dtype"]] if "dtype" in entry else list(spec.dtypes)
    keys = list(each)
    plans = []
    for combo in itertools.product(*(each[k] for k in keys)):
        chosen = dict(zip(keys, combo))
        dtype = chosen.pop("dtype")
        params = {**(entry.get("params") or {}), **{k: v for k, v in chosen.items() if k in spec.params}}
        dims = {**(entry.get("dims") or {}), **{k: v for k, v in chosen.items() if k not in spec.params}}
        label = "-".join([str(entry["name"]), *(f"{slug(k)}{slug(v)}" for k, v in chosen.items()), dtype])
        plans.append(Plan(suite=suite, name=label, dtype=dtype, dims=dims, params=params,
                          seed=case_seed(base_seed, spec.op, suite, label), values=dict(entry.get("values") or {}),
                          omit=tuple(entry.get("omit") or ()), note=str(entry.get("note", "")),
                          zero_golden_ok=bool(entry.get("zero_golden_ok", False)), line=line_of(entry)))
    return plans


def _sample(spec: Spec, node, key, rng: np.random.Generator, sampler, env: dict):
    """A value for ``node[key]`` (a dims or params entry of suites.random)."""
    if isinstance(sampler, dict):
        lo, hi = sampler["min"], sampler["max"]
        if isinstance(lo, int) and isinstance(hi, int):
            return int(rng.integers(lo, hi, endpoint=True))
        if sampler.get("log"):
            return float(math.exp(rng.uniform(math.log(lo), math.log(hi))))
        return float(rng.uniform(lo, hi))
    if isinstance(sampler, list):
        return sampler[int(rng.integers(len(sampler)))]
    if isinstance(sampler, str):
        return _spec_expr(spec, node, key, f"suites.random sampler of {key}", sampler, env)
    return sampler


def shapes_of(spec: Spec, dims: dict, params: dict) -> dict[str, tuple]:
    env = {**dims, **params}
    shapes = {}
    for t in (*spec.inputs.values(), *spec.outputs.values()):
        try:
            shapes[t.name] = tuple(_dimension(evaluate(d, env)) for d in t.shape)
        except ExprError as exc:
            raise SpecError(spec.path, t.line, f"shape of '{t.name}': {exc}") from None
        except (TypeError, ValueError, OverflowError) as exc:   # a size that is no number: int('a'), int(inf)
            raise SpecError(spec.path, t.line, f"shape of '{t.name}': not a size: {exc}") from None
    return shapes


def _dimension(value) -> int:
    """A shape entry as an int (a float is truncated, as int() does); ExprError if it is no number."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ExprError(f"a dimension must be a number, got {value!r}")
    if not math.isfinite(value):
        raise ExprError(f"a dimension must be finite, got {value!r}")
    return int(value)


def _spec_expr(spec: Spec, node, key, what: str, text, env: dict):
    """evaluate() ``what``, with an error as the spec's, at the line of ``node[key]``."""
    try:
        return evaluate(text, env)
    except ExprError as exc:
        raise SpecError(spec.path, line_of(node, key), f"{what}: {exc}") from None


def _elements(shapes: dict) -> int:
    return sum(element_count(s) for s in shapes.values())


def tensor_infos(spec: Spec, shapes, dtypes, layouts, omit=()) -> dict:
    """The call's tensors as its checks see them: None for an omitted input and the outputs that go with it."""
    gone = absent_tensors(spec, omit)
    return {name: None if name in gone else TensorInfo(shapes[name], dtypes[name], layouts[name]) for name in shapes}


def _dtypes_of(spec: Spec, dtype: str) -> dict[str, str]:
    return {t.name: dtype if t.dtype == "T" else t.dtype for t in (*spec.inputs.values(), *spec.outputs.values())}


def _layouts_of(spec: Spec) -> dict[str, str]:
    return {t.name: t.layout for t in (*spec.inputs.values(), *spec.outputs.values())}


def plan_random(spec: Spec, count: int, base_seed: int) -> list[Plan]:
    conf = spec.suites.get("random") or {}
    if not conf:
        return []
    rng = np.random.default_rng(case_seed(base_seed, spec.op, "random", "plan"))
    max_elements = int(conf.get("max_elements", 4_000_000))
    plans = []
    for index in range(count):
        dtype = spec.dtypes[index % len(spec.dtypes)]
        for _ in range(RANDOM_ATTEMPTS):
            env: dict = {}
            for name, sampler in (conf.get("dims") or {}).items():
                env[name] = _sample(spec, conf["dims"], name, rng, sampler, env)
            dims = dict(env)
            params = {}
            for name, sampler in (conf.get("params") or {}).items():
                params[name] = env[name] = _sample(spec, conf["params"], name, rng, sampler, env)
            missing = [p for p in spec.params if p not in params]
            if missing:
                raise SpecError(spec.path, line_of(conf), f"suites.random.params must sample {missing}")
            where = conf.get("where", []) or []
            if not all(_spec_expr(spec, conf, "where", "suites.random.where", cond, env) for cond in where):
                continue
            shapes = shapes_of(spec, dims, params)
            if _elements(shapes) > max_elements:
                continue
            infos = tensor_infos(spec, shapes, _dtypes_of(spec, dtype), _layouts_of(spec))
            if first_failure(spec, infos, params, spec_errors=True) is None:
                break
        else:
            raise GenerationError(f"{spec.path}: suites.random: no valid case in {RANDOM_ATTEMPTS} draws; "
                                  f"widen the ranges or max_elements")
        omit = tuple(n for n, t in spec.inputs.items() if t.optional and rng.random() < 0.5)
        shown = "-".join(f"{slug(k)}{slug(v)}" for k, v in {**dims, **params}.items())
        label = f"r{index:03d}-{shown}{'-no_' + '_'.join(omit) if omit else ''}-{dtype}"
        plans.append(Plan(suite="random", name=label, dtype=dtype, dims=dims, params=params,
                          seed=case_seed(base_seed, spec.op, "random", f"r{index}"),
                          values=dict(conf.get("values") or {}), omit=omit, line=line_of(conf)))
    return plans


def _changes_nothing_in(violate: dict, dtype: str) -> bool:
    """Whether a violation only sets tensors to ``dtype`` (dtype_match's `y: float16`), which in a case of
    that dtype breaks nothing: with several invalid dtypes, its case is made in the others."""
    retyped = violate.get("dtype") or {}
    return bool(retyped) and not any(violate.get(k) for k in ("params", "dims", "layout", "shape", "values")) \
        and all(d == dtype for d in retyped.values())


def plan_invalid(spec: Spec, base_seed: int) -> list[Plan]:
    conf = spec.suites.get("invalid")
    if not conf:
        return []
    base = dict(conf["base"])
    base.setdefault("name", "base")
    dtypes = conf.get("dtypes") or [base.get("dtype", spec.dtypes[-1])]
    plans = []
    for check, dtype in itertools.product(spec.checks, dtypes):
        if check.violate is None or len(dtypes) > 1 and _changes_nothing_in(check.violate, dtype):
            continue
        v = check.violate
        label = f"{check.id}-{dtype}"
        plans.append(Plan(suite="invalid", name=label, dtype=dtype,
                          dims={**(base.get("dims") or {}), **(v.get("dims") or {})},
                          params={**(base.get("params") or {}), **(v.get("params") or {})},
                          seed=case_seed(base_seed, spec.op, "invalid", label),
                          values={**(base.get("values") or {}), **(v.get("values") or {})},
                          omit=tuple(base.get("omit") or ()), note=f"doc {check.doc}: {check.message}",
                          violation=check, line=check.line))
    return plans


# suites.stress.values: each regime's distribution per dtype it means something in (None: every
# dtype).  float16: |x| < 2^-14 is subnormal; 65504 is the largest finite value, 16384 a quarter
# of it.  float32: |x| < 2^-126 (1.18e-38) is subnormal.
STRESS_REGIMES = {
    "subnormal": {"float16": {"dist": "uniform", "low": -6.0e-5, "high": 6.0e-5},
                  "float32": {"dist": "uniform", "low": -1.0e-38, "high": 1.0e-38}},
    "positive": {None: {"dist": "uniform", "low": 0.0, "high": 1.0}},
    "near_overflow": {"float16": {"dist": "uniform", "low": -16384.0, "high": 16384.0}},
}


# Regimes drawn in the spec's narrowest float dtype only: float16's subnormal case is the one a
# flushing half path fails; a kernel without float16 gets float32's (a flushing float path).
NARROWEST_ONLY = ("subnormal",)


def regime_dtypes(regime: str, dtypes) -> list[str]:
    """The dtypes among ``dtypes`` a stress value regime makes cases in."""
    by_dtype = STRESS_REGIMES[regime]
    if None in by_dtype:
        return list(dtypes)
    meaningful = [d for d in by_dtype if d in dtypes]       # by_dtype lists the narrowest first
    return meaningful[:1] if regime in NARROWEST_ONLY else meaningful


# suites.stress.index_width: what each case must cross in its tensor, and how it is measured.
INDEX_WIDTH_LIMITS = {"past_2e24": ("elements", 2**24), "past_2e31": ("bytes", 2**31)}


def channel_tails(widths) -> list[int]:
    """Channel counts one past and one short of each vector width, and one past two blocks of
    the widest: C = w - 1, w + 1 for every w, and 2w + 1 for the largest."""
    widest = max(widths)
    return sorted({c for w in widths for c in (w - 1, w + 1)} | {2 * widest + 1})


def channel_tail_entries(stress: dict) -> list[dict]:
    """suites.stress.channel_tail as a list: one mapping, or a list of them (one per dim or param
    that sizes a channel axis)."""
    tails = stress.get("channel_tail") or []
    return tails if isinstance(tails, list) else [tails]


def plan_stress(spec: Spec, base_seed: int) -> list[Plan]:
    """The stress suite: cases derived from suites.stress's base case, one dimension at a time,
    each checked against the spec's checks before anything is drawn."""
    conf = spec.suites.get("stress")
    if not conf:
        return []
    base = conf["base"]
    derived = []                       # (entry, key of conf it comes from, index-width limit or None)

    def derive(key, name, note, dims=None, params=None, values=None, dtypes=None, extra=None, limit=None):
        entry = {"name": name, "note": note, "dims": {**(base.get("dims") or {}), **(dims or {})},
                 "params": {**(base.get("params") or {}), **(params or {})},
                 "values": {**(base.get("values") or {}), **(values or {})}, "omit": base.get("omit") or ()}
        entry.update(extra or {})
        if dtypes is not None:
            entry["each"] = {"dtype": list(dtypes)}
        derived.append((entry, key, limit))

    tails = channel_tail_entries(conf)
    # A regime is drawn at the base and again at the narrowest channel tail (of the first entry): a
    # bug only the regime shows is then killed by two case shapes, not one (opcase power names kills
    # by one FRAGILE).
    shapes = [{}]
    if tails:
        first = tails[0]
        shapes.append({"dims" if "dim" in first else "params":
                       {first.get("dim", first.get("param")): channel_tails(first["widths"])[0]}})
    for regime, inputs in (conf.get("values") or {}).items():
        for shape in shapes:
            suffix = "".join(f"_{k}{n}" for changed in shape.values() for k, n in changed.items())
            for dtype in regime_dtypes(regime, spec.dtypes):
                dist = STRESS_REGIMES[regime].get(dtype, STRESS_REGIMES[regime].get(None))
                derive("values", f"value_{regime}{suffix}", f"stress: {regime} values in {', '.join(inputs)}",
                       values={name: dict(dist) for name in inputs}, dtypes=[dtype], **shape)
    for tail in tails:
        key = "dims" if "dim" in tail else "params"
        sized = tail.get("dim", tail.get("param"))
        for channels in channel_tails(tail["widths"]):
            derive("channel_tail", f"channel_tail_{sized}{channels}",
                   f"stress: {sized} = {channels}, a partial block of every vector width in {tail['widths']}",
                   **{key: {sized: channels}})
    for entry in conf.get("contention") or []:
        derive("contention", f"contention_{entry['name']}", f"stress: {entry.get('note', 'contention')}",
               dims=entry.get("dims"), params=entry.get("params"), values=entry.get("values"),
               extra={k: entry[k] for k in ("each", "dtype", "omit") if k in entry})
    batch = conf.get("batch")
    if batch:
        derive("batch", "batch_" + "_".join(f"{k}{n}" for k, n in batch.items()),
               "stress: a batch of several, on a map that is not square", dims=batch)
    index_width = conf.get("index_width") or {}
    for limit, (unit, bound) in INDEX_WIDTH_LIMITS.items():
        if limit in index_width:
            entry = index_width[limit]
            derive("index_width", f"index_{limit.removeprefix('past_')}",
                   f"stress: '{index_width['tensor']}' past 2^{bound.bit_length() - 1} {unit}",
                   dims=entry.get("dims"), params=entry.get("params"), values=entry.get("values"),
                   dtypes=[entry.get("dtype", "float16" if "float16" in spec.dtypes else spec.dtypes[0])],
                   limit=limit)
    for key, entries in reach_entries(spec, base, conf, _valid_with(spec)).items():
        for entry in entries:
            derive(key, entry["name"], entry["note"], dims=entry.get("dims"), params=entry.get("params"),
                   values=entry.get("values"))
    plans = []
    for entry, key, limit in derived:
        for plan in _expand(spec, entry, "stress", base_seed):
            plan = replace(plan, line=line_of(conf, key))
            _refuse_invalid_stress(spec, plan, key, index_width.get("tensor"), limit)
            plans.append(plan)
    return plans


def plan_fast_path(spec: Spec, base_seed: int) -> list[Plan]:
    """The fast_path suite: each special-cased parameter setting of suites.fast_path.paths on
    suites.fast_path.base, at every one of its shapes (the path's own, else the suite's), in every
    dtype; each checked against the spec's checks before anything is drawn."""
    conf = spec.suites.get("fast_path")
    if not conf:
        return []
    base = conf["base"]
    plans = []
    for path in conf["paths"]:
        for shape in path.get("shapes") or conf["shapes"]:
            dims = {**(base.get("dims") or {}), **(path.get("dims") or {}), **shape}
            entry = {"name": "-".join([str(path["name"]), *(f"{slug(k)}{slug(n)}" for k, n in shape.items())]),
                     "note": f"fast path: {path['why']}", "dims": dims,
                     "params": {**(base.get("params") or {}), **(path.get("params") or {})},
                     "values": {**(base.get("values") or {}), **(path.get("values") or {})},
                     "omit": path.get("omit", base.get("omit")) or (), "each": path.get("each")}
            for plan in _expand(spec, entry, "fast_path", base_seed):
                plan = replace(plan, line=line_of(path))
                broken, _ = _broken_check(spec, plan)
                if broken is not None:
                    raise SpecError(spec.path, plan.line, f"suites.fast_path: case {plan.name} breaks check "
                                                          f"'{broken.id}'; change the path, its shapes or the base")
                plans.append(plan)
    return plans


def _broken_check(spec: Spec, plan: Plan) -> tuple:
    """(the first check a planned case breaks or None, its Layout)."""
    lay = layout_of(spec, replace(plan, params=interface_params(spec, plan.params)))
    return first_failure(spec, tensor_infos(spec, lay.shapes, lay.dtypes, lay.layouts, plan.omit), plan.params,
                         spec_errors=True), lay


def _valid_with(spec: Spec):
    """valid(dims, params): whether that call passes every check of ``spec``, in every dtype."""
    def valid(dims: dict, params: dict) -> bool:
        return all(_broken_check(spec, Plan(suite="stress", name="reach", dtype=dtype, dims=dims,
                                            params=dict(params), seed=0))[0] is None for dtype in spec.dtypes)
    return valid


def _refuse_invalid_stress(spec: Spec, plan: Plan, key: str, tensor: str | None, limit: str | None) -> None:
    """A derived stress case must be a valid call, and an index-width case must cross its limit."""
    broken, lay = _broken_check(spec, plan)
    if broken is not None:
        raise SpecError(spec.path, plan.line, f"suites.stress.{key}: case {plan.name} breaks check "
                                              f"'{broken.id}'; change suites.stress.base or the {key} entry")
    if limit is None:
        return
    unit, bound = INDEX_WIDTH_LIMITS[limit]
    count = element_count(lay.shapes[tensor])
    size = count if unit == "elements" else count * np.dtype(lay.dtypes[tensor]).itemsize
    if size <= bound:
        raise SpecError(spec.path, plan.line, f"suites.stress.index_width: case {plan.name}: '{tensor}' has "
                                              f"{size} {unit}, not past {bound}")


def plan_suite(spec: Spec, suite: str, count: int | None = None, seed: int = 0) -> list[Plan]:
    if suite == "stress":
        return plan_stress(spec, seed)
    if suite == "fast_path":
        return plan_fast_path(spec, seed)
    if suite == "hunt":
        return hunt_plans(spec)
    if suite == "random":
        conf = spec.suites.get("random") or {}
        return plan_random(spec, count if count is not None else int(conf.get("count", 20)), seed)
    if suite == "invalid":
        return plan_invalid(spec, seed)
    if suite == "network":
        entries = (spec.suites.get("network") or {}).get("cases", [])
    elif suite == "boundary":
        entries = spec.suites.get("boundary") or []
    else:
        raise ValueError(f"unknown suite {suite!r} (known: {', '.join(SUITES)})")
    return [p for entry in entries for p in _expand(spec, entry, suite, seed)]


@dataclass
class Layout:
    """The tensors of a planned case: shapes, dtypes and layouts, after any violation."""
    shapes: dict
    dtypes: dict
    layouts: dict


def layout_of(spec: Spec, plan: Plan) -> Layout:
    _check_params(spec, plan)
    try:
        shapes = shapes_of(spec, plan.dims, plan.params if plan.violation is None else
                           {**plan.params, **_unviolated_params(spec, plan)})
    except SpecError as exc:
        raise SpecError(exc.path, plan.line or exc.line, f"case {plan.name}: {exc.message}") from None
    dtypes, layouts = _dtypes_of(spec, plan.dtype), _layouts_of(spec)
    if plan.violation is not None:
        v = plan.violation.violate
        dtypes.update({k: str(x) for k, x in (v.get("dtype") or {}).items()})
        layouts.update({k: str(x) for k, x in (v.get("layout") or {}).items()})
        shapes.update({k: tuple(int(d) for d in x) for k, x in (v.get("shape") or {}).items()})
    negative = {name: shape for name, shape in shapes.items() if any(d < 0 for d in shape)}
    if negative:
        # No tensor has a negative extent, broken case or not: its dims or params are off.
        raise SpecError(spec.path, plan.line, f"case {plan.name}: tensor shape(s) with a negative extent: "
                        + ", ".join(f"{name} {list(shape)}" for name, shape in negative.items()))
    return Layout(shapes, dtypes, layouts)


# What a value of each declared param type may be: what the reference computes with and a
# case file's Value holds (an int in 64 bits).
_PARAM_TYPES = {
    "int": lambda v: isinstance(v, int) and not isinstance(v, bool) and -2**63 <= v < 2**63,
    "bool": lambda v: isinstance(v, bool),
}


_PARAM_TYPES["float"] = lambda v: isinstance(v, float) and math.isfinite(v) or _PARAM_TYPES["int"](v)


def _check_params(spec: Spec, plan: Plan) -> None:
    """Every declared param has a value of its type (the reference reads them all)."""
    missing = [name for name in spec.params if name not in plan.params]
    if missing:
        raise SpecError(spec.path, plan.line, f"case {plan.name}: no value for param(s) {missing}")
    for name, value in plan.params.items():
        if name in spec.params and not _PARAM_TYPES[spec.params[name].type](value):
            raise SpecError(spec.path, plan.line, f"case {plan.name}: param '{name}' is {value!r}, "
                                                  f"not a value of its type {spec.params[name].type}")


def _unviolated_params(spec: Spec, plan: Plan) -> dict:
    """Tensor shapes of an invalid case follow the base params, not the broken ones,
    so that a broken parameter really disagrees with the tensors it describes."""
    base = (spec.suites.get("invalid") or {}).get("base", {})
    return {k: base.get("params", {}).get(k, plan.params[k]) for k in plan.violation.violate.get("params", {}) or {}}


def interface_params(spec: Spec, params: dict) -> dict:
    """Params as the kernel's C interface receives them: float params are C floats (float32),
    so the golden is computed from exactly the value an implementation sees."""
    return {k: float(np.float32(v)) if k in spec.params and spec.params[k].type == "float" else v
            for k, v in params.items()}


def total_bytes(spec: Spec, plan: Plan) -> int:
    """Bytes of all the case's tensors, exactly (Python ints: no product wraps around)."""
    lay = layout_of(spec, plan)
    return sum(element_count(s) * np.dtype(lay.dtypes[n]).itemsize for n, s in lay.shapes.items())


def case_path(out_dir: Path, case_or_plan, op: str) -> Path:
    """OUT/OP/SUITE/NAME.opcase; GenerationError for a name that cannot be a file name or a
    path that would lead out of OUT."""
    try:
        return contained_path(out_dir, op, case_or_plan.suite, f"{case_or_plan.name}.opcase")
    except ValueError as exc:
        raise GenerationError(f"case {op}/{case_or_plan.suite}/{case_or_plan.name}: {exc}") from None


_LONGEST_NAME = 150


def plan_of(spec: Spec, text: str):
    """The Plan a descriptor stands for; Generator.write(plan, case_path(...)) makes its case."""
    parts = parse(text)
    op = parts.op if isinstance(parts, Explicit) else parts[0]
    if op != spec.op:
        raise DescriptorError(f"descriptor {text!r} is for {op}, not {spec.op}")
    if isinstance(parts, Explicit):
        return _explicit_plan(spec, parts)
    return planned_case(spec, parts[1], parts[2])


def planned_case(spec: Spec, suite: str, name: str):
    """The plan `opcase gen --seed 0` makes for the case ``name`` of ``suite``."""
    count = None
    if suite == "random":
        index = RANDOM_NAME.match(name)
        if not index:
            raise DescriptorError(f"{spec.op}:random:{name}: a random case's name starts rNNN-")
        count = int(index.group(1)) + 1
    plans = [p for p in plan_suite(spec, suite, count, 0) if p.name == name]
    if not plans:
        raise DescriptorError(f"{spec.op} has no {suite} case named {name!r} (`opcase gen --suite {suite}` "
                              f"lists the names it writes)")
    return plans[0]


def _explicit_plan(spec: Spec, d: Explicit):
    if d.dtype not in spec.dtypes:
        raise DescriptorError(f"{spec.op}: dtype {d.dtype} is not one of {', '.join(spec.dtypes)}")
    unknown = sorted(set(d.params) - set(spec.params))
    missing = sorted(set(spec.params) - set(d.params))
    if unknown or missing:
        raise DescriptorError(f"{spec.op}: params " + "; ".join(
            x for x in (unknown and f"unknown {unknown}", missing and f"missing {missing}") if x))
    for name in d.omit:
        if name not in spec.inputs or not spec.inputs[name].optional:
            raise DescriptorError(f"{spec.op}: omit={name}: only optional inputs can be omitted")
    violation = None
    if d.violate:
        violation = next((c for c in spec.checks if c.id == d.violate and c.violate is not None), None)
        if violation is None:
            raise DescriptorError(f"{spec.op}: violate={d.violate}: no check of that id with a 'violate'")
    text = d.text()
    return Plan(suite=DESCRIBED, name=_name_of(d, text), dtype=d.dtype, dims=dict(d.dims), params=dict(d.params),
                seed=d.seed, values=_values_of(spec, d.values), omit=d.omit, note=NOTE_PREFIX + text,
                violation=violation)


def hunt_plans(spec: Spec) -> list:
    """The hunt suite: each case of suites.hunt (an explicit descriptor, found by `opcase power
    --hunt`) planned as that descriptor makes it, in suite `hunt`, its note saying what it kills."""
    plans = []
    for entry in (spec.suites.get(HUNT) or []):
        text = entry["case"]
        try:
            parsed = parse(text)
            if parsed.op != spec.op:
                raise DescriptorError(f"descriptor {text!r} is for {parsed.op}, not {spec.op}")
            plan = _explicit_plan(spec, parsed)
        except DescriptorError as exc:
            raise SpecError(spec.path, line_of(entry, "case"), f"suites.hunt: {exc}") from None
        plans.append(replace(plan, suite=HUNT, line=line_of(entry, "case"),
                             note=f"hunt: kills {', '.join(entry['kills'])}; {NOTE_PREFIX}{text}"))
    return plans


def _values_of(spec: Spec, ref: str) -> dict:
    if not ref:
        return {}
    suite, _, name = ref.partition("/")
    if suite == "random" and not name:
        return dict((spec.suites.get("random") or {}).get("values") or {})
    if suite not in SUITES or not name:
        raise DescriptorError(f"{spec.op}: values={ref}: expected random or SUITE/CASE_NAME")
    return dict(planned_case(spec, suite, name).values)


def _name_of(d: Explicit, text: str) -> str:
    """A file name of the case's shapes and params, with a digest of the whole descriptor so that
    two descriptors never share a file (floats are shown rounded)."""
    shown = "-".join(f"{k}{slug(v)}" for k, v in {**d.dims, **d.params}.items())[:_LONGEST_NAME]
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    return f"{shown}-{d.dtype}-{digest}" if shown else f"{d.dtype}-{digest}"


def explicit_of(spec: Spec, plan, values: str = "") -> Explicit:
    """The explicit descriptor of a plan's shapes, params and seed (``values``: where its
    value distributions come from, as values= names them)."""
    return Explicit(op=spec.op, dtype=plan.dtype, dims=dict(plan.dims), params=dict(plan.params), seed=int(plan.seed),
                    omit=tuple(plan.omit), values=values,
                    violate=plan.violation.id if plan.violation is not None else "")


def values_ref(plan) -> str:
    """How an explicit descriptor names the value distributions of a planned case."""
    if plan.suite in (DESCRIBED, HUNT):        # the descriptor ends its note
        return parse(plan.note.partition(NOTE_PREFIX)[2]).values
    if plan.suite == "random":
        return "random"
    return f"{plan.suite}/{plan.name}" if plan.values else ""
