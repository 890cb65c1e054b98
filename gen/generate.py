"""Turning a spec into suites of cases with goldens and thresholds."""
from __future__ import annotations

import hashlib
import itertools
import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from gen.checks import TensorInfo, failures, first_failure
from gen.expr import ExprError, evaluate
from gen.spec import SUITES, Spec, SpecError, line_of
from gen.values import ValueContext, draw
from harness.casefile import Case, SidecarWriter, SpillFile, Tensor, Threshold, drop_pages

GENERATOR_VERSION = "opcase-gen 1"
# Outputs larger than this (bytes, all outputs of a case) are streamed to disk piece by piece.
STREAM_OUTPUT_BYTES = 256 << 20
# In a streamed case, an input drawn from a plain distribution is written straight to its
# sidecar file above this size, and read back memory-mapped, never whole in memory.
SPILL_INPUT_BYTES = 256 << 20
RANDOM_ATTEMPTS = 2000
# mlu-ops' dynamic-threshold floors and caps (ACCURACY.md), per output dtype.
DYNAMIC_FLOOR = {"float16": 9.8e-4, "float32": 1.2e-7, "float64": 1.2e-7}
DYNAMIC_CAP = {"float16": 3e-2, "float32": 3e-3, "float64": 3e-3}


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


# ----------------------------------------------------------------------------- planning

def case_seed(base_seed: int, op: str, suite: str, label: str) -> int:
    """A 63-bit seed fixed by (base seed, op, suite, case label), stable across runs and machines."""
    digest = hashlib.sha256(f"{base_seed}/{op}/{suite}/{label}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def _slug(value) -> str:
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
        label = "-".join([str(entry["name"]), *(f"{k}{_slug(v)}" for k, v in chosen.items()), dtype])
        plans.append(Plan(suite=suite, name=label, dtype=dtype, dims=dims, params=params,
                          seed=case_seed(base_seed, spec.op, suite, label), values=dict(entry.get("values") or {}),
                          omit=tuple(entry.get("omit") or ()), note=str(entry.get("note", "")),
                          zero_golden_ok=bool(entry.get("zero_golden_ok", False)), line=line_of(entry)))
    return plans


def _sample(rng: np.random.Generator, sampler, env: dict):
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
        return evaluate(sampler, env)
    return sampler


def shapes_of(spec: Spec, dims: dict, params: dict) -> dict[str, tuple]:
    env = {**dims, **params}
    shapes = {}
    for t in (*spec.inputs.values(), *spec.outputs.values()):
        try:
            shapes[t.name] = tuple(int(evaluate(d, env)) for d in t.shape)
        except ExprError as exc:
            raise SpecError(spec.path, t.line, f"shape of '{t.name}': {exc}") from None
        except (TypeError, ValueError, OverflowError) as exc:   # a size that is no number: int('a'), int(inf)
            raise SpecError(spec.path, t.line, f"shape of '{t.name}': not a size: {exc}") from None
    return shapes


def _elements(shapes: dict) -> int:
    return sum(int(np.prod(s, dtype=np.int64)) for s in shapes.values())


def _tensor_infos(spec: Spec, shapes, dtypes, layouts, omit=()) -> dict:
    return {name: None if name in omit else TensorInfo(shapes[name], dtypes[name], layouts[name]) for name in shapes}


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
                env[name] = _sample(rng, sampler, env)
            dims = dict(env)
            params = {}
            for name, sampler in (conf.get("params") or {}).items():
                params[name] = env[name] = _sample(rng, sampler, env)
            missing = [p for p in spec.params if p not in params]
            if missing:
                raise SpecError(spec.path, line_of(conf), f"suites.random.params must sample {missing}")
            if not all(evaluate(cond, env) for cond in conf.get("where", []) or []):
                continue
            shapes = shapes_of(spec, dims, params)
            if _elements(shapes) > max_elements:
                continue
            infos = _tensor_infos(spec, shapes, _dtypes_of(spec, dtype), _layouts_of(spec))
            if first_failure(spec, infos, params) is None:
                break
        else:
            raise GenerationError(f"{spec.path}: suites.random: no valid case in {RANDOM_ATTEMPTS} draws; "
                                  f"widen the ranges or max_elements")
        omit = tuple(n for n, t in spec.inputs.items() if t.optional and rng.random() < 0.5)
        shown = "-".join(f"{k}{_slug(v)}" for k, v in {**dims, **params}.items())
        label = f"r{index:03d}-{shown}{'-no_' + '_'.join(omit) if omit else ''}-{dtype}"
        plans.append(Plan(suite="random", name=label, dtype=dtype, dims=dims, params=params,
                          seed=case_seed(base_seed, spec.op, "random", f"r{index}"),
                          values=dict(conf.get("values") or {}), omit=omit, line=line_of(conf)))
    return plans


def plan_invalid(spec: Spec, base_seed: int) -> list[Plan]:
    conf = spec.suites.get("invalid")
    if not conf:
        return []
    base = dict(conf["base"])
    base.setdefault("name", "base")
    dtype = base.get("dtype", spec.dtypes[-1])
    plans = []
    for check in spec.checks:
        if check.violate is None:
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


def plan_suite(spec: Spec, suite: str, count: int | None = None, seed: int = 0) -> list[Plan]:
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


# ----------------------------------------------------------------------------- building

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


_FILLER = {"dist": "randint", "low": 0, "high": 3}


def draw_inputs(spec: Spec, plan: Plan, lay: Layout, allocate=np.empty) -> dict[str, np.ndarray | None]:
    rng = np.random.default_rng(plan.seed)
    random_values = (spec.suites.get("random") or {}).get("values") or {}
    ctx = ValueContext(shapes=lay.shapes, dtypes=lay.dtypes, dims=plan.dims, params=plan.params, dtype=plan.dtype)
    for name, t in spec.inputs.items():
        if name in plan.omit or name in ctx.inputs:
            continue
        dist = plan.values.get(name) or (random_values.get(name) if plan.suite == "random" else None) or t.values
        try:
            ctx.inputs.update(draw(rng, name, dist, ctx, spec.path, allocate))
        except (ValueError, TypeError, KeyError, IndexError) as exc:
            if plan.violation is not None:
                # A broken case may have shapes a realistic generator cannot serve; its values
                # do not matter, the call must be rejected before it reads them.
                ctx.inputs.update(draw(rng, name, _FILLER, ctx, spec.path))
                continue
            raise GenerationError(f"{spec.path}: case {plan.suite}/{plan.name}: drawing '{name}': "
                                  f"{type(exc).__name__}: {exc}") from None
    return {name: (None if name in plan.omit else ctx.inputs[name]) for name in spec.inputs}


def static_thresholds(spec: Spec, dtype: str) -> list[Threshold]:
    out = []
    for metric, value in spec.criteria.static.items():
        threshold = value.get(dtype, value.get("*")) if isinstance(value, dict) else value
        if threshold is None:
            raise SpecError(spec.path, 0, f"criteria.static.{metric} gives no threshold for {dtype}")
        out.append(Threshold(metric=metric, value=float(threshold),
                             provenance=f"static, design doc {spec.doc} (spec {spec.path.name})"))
    return out


def dynamic_threshold(metric: str, baseline_value: float, rate: float, dtype: str, baseline: str,
                      doc: str) -> Threshold:
    floor = DYNAMIC_FLOOR[dtype] * (rate if rate > 10 else 1.0)
    cap = DYNAMIC_CAP[dtype]
    value = max(baseline_value * rate, floor)
    if metric != "diff4":
        value = min(value, cap)
    return Threshold(metric=metric, value=float(value), baseline=baseline, baseline_value=float(baseline_value),
                     rate=float(rate), floor=floor, cap=cap if metric != "diff4" else 0.0,
                     provenance=f"dynamic, design doc {doc}: max({baseline} {metric} x {rate:g}, floor {floor:g})"
                                + (f", cap {cap:g}" if metric != "diff4" else ""))


class Generator:
    """Builds cases of one spec.  ``baseline`` is a loaded harness Backend for dynamic thresholds."""

    def __init__(self, spec: Spec, baseline=None):
        self.spec = spec
        self.baseline = baseline

    def _expect_valid(self, plan: Plan, lay: Layout) -> None:
        infos = _tensor_infos(self.spec, lay.shapes, lay.dtypes, lay.layouts, plan.omit)
        failed = [c.id for c in failures(self.spec, infos, plan.params)]
        if plan.violation is None and failed:
            raise SpecError(self.spec.path, plan.line, f"case {plan.suite}/{plan.name} breaks check(s) {failed}")
        # An invalid case must break its check and no other: then a backend that lacks
        # exactly that check is the one that accepts it, whatever order it checks in.
        if plan.violation is not None and failed != [plan.violation.id]:
            got = f"it breaks {failed}" if failed else "every check still holds"
            raise SpecError(self.spec.path, plan.violation.line,
                            f"check '{plan.violation.id}': its violation does not isolate it ({got})")

    def write(self, plan: Plan, path: Path) -> Path:
        """Build the case of ``plan`` and save it at ``path``.

        Outputs over STREAM_OUTPUT_BYTES, of a reference that can yield its outputs in pieces
        (``<fn>_blocks``), are computed and written piece by piece, so that no golden is ever
        whole in memory, let alone in float64."""
        from harness.casefile import save
        pieces = self.spec.reference_blocks_fn
        lay = layout_of(self.spec, replace(plan, params=interface_params(self.spec, plan.params)))
        output_bytes = sum(int(np.prod(lay.shapes[n], dtype=np.int64)) * np.dtype(lay.dtypes[n]).itemsize
                           for n in self.spec.outputs)
        if plan.violation is not None or pieces is None or output_bytes <= STREAM_OUTPUT_BYTES:
            return save(self.build(plan), path)
        spills: list[SpillFile] = []

        def allocate(shape, dtype):
            if int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize <= SPILL_INPUT_BYTES:
                return np.empty(shape, dtype)
            spills.append(SpillFile(Path(path), shape, dtype))
            return spills[-1].array

        writers = {}
        try:
            case = self._with_inputs(plan, allocate)
            self._seal_spilled(case, spills)
            writers = {n: SidecarWriter(Path(path), t.shape, t.dtype) for n, t in case.outputs.items()}
            self._stream_goldens(case, pieces, writers)
            if not plan.zero_golden_ok and any(w.total and not w.any_nonzero for w in writers.values()):
                raise GenerationError(f"{self.spec.path}:{plan.line}: case {plan.suite}/{plan.name}: a golden "
                                      f"is all zeros; change the case or mark it zero_golden_ok")
            for name, writer in writers.items():
                case.outputs[name].prewritten = writer.finish()
            return save(case, path)
        finally:
            for temporary in [*writers.values(), *spills]:
                temporary.discard()

    @staticmethod
    def _seal_spilled(case: Case, spills: list) -> None:
        """Inputs drawn into files: from now on read-only mappings, saved by moving the file."""
        for spill in spills:
            tensor = next(t for t in case.inputs.values() if t.data is spill.array)
            tensor.data, tensor.prewritten = spill.seal()

    def _stream_goldens(self, case: Case, pieces_fn, writers: dict) -> None:
        from harness.backends.builtin import round_to
        from harness.metrics import StreamingCompare
        present = {n: t.data for n, t in case.inputs.items() if not t.absent}
        out_shapes = {n: tuple(t.shape) for n, t in case.outputs.items()}
        golden = pieces_fn(present, dict(case.params), compute_dtype=np.float64, out_shapes=out_shapes)
        baseline_piece = self._baseline_pieces(case, present, pieces_fn)
        stats = {n: StreamingCompare(t.dtype) for n, t in case.outputs.items()}
        for name, index, block in golden:
            dtype = case.outputs[name].dtype
            writers[name].write(flat_start(index, out_shapes[name]), round_to(block, dtype))
            if baseline_piece is not None:
                stats[name].add(baseline_piece(name, index), block)
            for array in present.values():
                drop_pages(array)   # a mapped input's pages, read for this piece, need not stay
        if baseline_piece is not None:
            case.criteria = self._dynamic_criteria(case, {n: st.result() for n, st in stats.items()})
        else:
            case.criteria = self._criteria(case, None)

    def _baseline_pieces(self, case: Case, present: dict, pieces_fn):
        """f(output, index) -> the baseline's piece matching the golden's, or None for static criteria.

        The built-in lowp baseline is the same reference in float32, run in step with the golden,
        so it too never holds a whole output; any other baseline runs on the whole case first."""
        from harness.backends.builtin import round_to
        from harness.runner import request_for
        if self.spec.criteria.mode != "dynamic":
            return None
        if self.baseline is None:
            raise GenerationError(f"{self.spec.path}: dynamic thresholds need a baseline backend")
        if self.baseline.name == "lowp":
            lowp = pieces_fn(present, dict(case.params), compute_dtype=np.float32,
                             out_shapes={n: tuple(t.shape) for n, t in case.outputs.items()})

            def in_step(name, index):
                low_name, low_index, block = next(lowp)
                if (low_name, low_index) != (name, index):
                    raise GenerationError(f"{self.spec.reference}_blocks yields different pieces in float32")
                return round_to(block, case.outputs[name].dtype)
            return in_step
        outputs = self.baseline.run(request_for(case))
        return lambda name, index: np.asarray(outputs[name])[index]

    def build(self, plan: Plan) -> Case:
        case = self._with_inputs(plan)
        if case.expect == "rejected":
            return case
        self.complete(case)
        self._refuse_trivial(plan, case)
        return case

    def _with_inputs(self, plan: Plan, allocate=np.empty) -> Case:
        """The case of ``plan`` with its inputs drawn and no goldens yet (rejected cases: complete).
        ``allocate``: see gen.values.draw."""
        spec = self.spec
        plan = replace(plan, params=interface_params(spec, plan.params))
        lay = layout_of(spec, plan)
        self._expect_valid(plan, lay)
        inputs = draw_inputs(spec, plan, lay, allocate)
        case = Case(op=spec.op, suite=plan.suite, name=plan.name, params=dict(plan.params),
                    inputs={n: Tensor(n, lay.shapes[n], np.dtype(lay.dtypes[n]), lay.layouts[n], data=a,
                                      absent=a is None) for n, a in inputs.items()},
                    outputs={n: Tensor(n, lay.shapes[n], np.dtype(lay.dtypes[n]), lay.layouts[n])
                             for n in spec.outputs},
                    seed=plan.seed, generator_version=GENERATOR_VERSION, spec_sha256=spec.sha256,
                    spec_path=spec.path.name, note=plan.note, zero_golden_ok=plan.zero_golden_ok, dtype=plan.dtype)
        if plan.violation is not None:
            case.expect = "rejected"
            case.expect_check = plan.violation.id
            case.expect_message = plan.violation.message
        return case

    def complete(self, case: Case) -> Case:
        """Fill in the goldens (rounded once from float64) and the thresholds of a case that has its inputs."""
        from harness.backends.builtin import round_to
        golden64 = self._golden(case)
        for name, t in case.outputs.items():
            t.data = round_to(golden64[name], t.dtype)
        case.criteria = self._criteria(case, golden64)
        return case

    def _golden(self, case: Case) -> dict:
        spec = self.spec
        present = {n: t.data for n, t in case.inputs.items() if not t.absent}
        out_shapes = {n: tuple(t.shape) for n, t in case.outputs.items()}
        results = spec.reference_fn(present, dict(case.params), compute_dtype=np.float64, out_shapes=out_shapes)
        for name, shape in out_shapes.items():
            got = np.shape(results.get(name))
            if name not in results or tuple(got) != tuple(shape):
                raise GenerationError(f"{spec.reference}: output '{name}' has shape {got}, spec says {shape} "
                                      f"(case {case.suite}/{case.name})")
        return results

    def _refuse_trivial(self, plan: Plan, case: Case) -> None:
        """A golden that is all zeros cannot tell a correct kernel from one that writes nothing."""
        if plan.zero_golden_ok:
            return
        for name, t in case.outputs.items():
            if t.data.size and not np.any(t.data):
                raise GenerationError(f"{self.spec.path}:{plan.line}: case {plan.suite}/{plan.name}: golden "
                                      f"'{name}' is all zeros; change the case or mark it zero_golden_ok")

    def _criteria(self, case: Case, golden64: dict | None) -> dict:
        spec = self.spec
        if spec.criteria.mode == "static":
            return {name: static_thresholds(spec, t.dtype.name) for name, t in case.outputs.items()}
        if self.baseline is None:
            raise GenerationError(f"{spec.path}: dynamic thresholds need a baseline backend")
        from harness.metrics import compare
        from harness.runner import request_for
        outputs = self.baseline.run(request_for(case))
        return self._dynamic_criteria(case, {name: compare(np.asarray(outputs[name]), golden64[name], t.dtype)
                                             for name, t in case.outputs.items()})

    def _dynamic_criteria(self, case: Case, baseline_stats: dict) -> dict:
        """Thresholds from the baseline's metrics against the float64 golden, per output."""
        spec = self.spec
        criteria = {}
        for name, t in case.outputs.items():
            stats = baseline_stats[name]
            criteria[name] = [dynamic_threshold(m, float(stats[m] if stats[m] is not None else 0.5), rate,
                                                t.dtype.name, self.baseline.name, spec.doc)
                              for m, rate in zip(spec.criteria.metrics, spec.criteria.rates)]
        return criteria


def interface_params(spec: Spec, params: dict) -> dict:
    """Params as the kernel's C interface receives them: float params are C floats (float32),
    so the golden is computed from exactly the value an implementation sees."""
    return {k: float(np.float32(v)) if k in spec.params and spec.params[k].type == "float" else v
            for k, v in params.items()}


def flat_start(index: tuple, shape) -> int:
    """Flat C-order position of the first element of ``array[index]`` (ints, then at most one slice)."""
    first = [i.start or 0 if isinstance(i, slice) else int(i) for i in index]
    first += [0] * (len(shape) - len(first))
    return int(np.ravel_multi_index(first, shape)) if all(shape) else 0


def total_bytes(spec: Spec, plan: Plan) -> int:
    lay = layout_of(spec, plan)
    return sum(int(np.prod(s, dtype=np.int64)) * np.dtype(lay.dtypes[n]).itemsize for n, s in lay.shapes.items())


def case_path(out_dir: Path, case_or_plan, op: str) -> Path:
    return Path(out_dir) / op / case_or_plan.suite / f"{case_or_plan.name}.opcase"


