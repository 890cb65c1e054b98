"""From a descriptor (gen.core.descriptor: the one-line grammar) to the plan and the case file it
stands for."""
from __future__ import annotations

import hashlib
import shutil

from dataclasses import replace

from gen.core.descriptor import DESCRIBED, HUNT, NOTE_PREFIX, RANDOM_NAME, DescriptorError, Explicit, op_of, parse
from gen.core.registry import UnknownOp, spec_for
from gen.core.spec import SUITES, Spec, SpecError, line_of, load_spec
from gen.core.casefile import physical_memory
from gen.generate import Plan, builds_in_memory, case_path, input_bytes_in_memory, plan_suite, slug, total_bytes
from gen.jobs import generator_of

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


def spec_of(text: str, spec_paths=()) -> Spec:
    """The spec a descriptor is for: among ``spec_paths`` the one of its op, else the installed one."""
    op = op_of(text)
    for path in spec_paths:
        spec = load_spec(path)
        if spec.op == op:
            return spec
    if spec_paths:
        raise DescriptorError(f"descriptor {text!r}: none of the specs given is for {op}")
    try:
        return spec_for(op)
    except UnknownOp as exc:
        raise DescriptorError(str(exc)) from None


def write_described(text: str, out_dir, load_baseline, baseline: str | None = None, spec_paths=()):
    """Write the case of descriptor ``text`` under ``out_dir`` as `opcase gen` lays cases out;
    return its path.  ``baseline``: the backend for dynamic thresholds (default: the spec's),
    loaded with ``load_baseline`` (gen.jobs.BaselineLoader)."""
    spec = spec_of(text, spec_paths)
    plan = plan_of(spec, text)
    _refuse_past_memory(text, spec, plan, out_dir)
    return generator_of(spec, baseline, load_baseline).write(plan, case_path(out_dir, plan, spec.op))


def _refuse_past_memory(text: str, spec: Spec, plan: Plan, out_dir) -> None:
    """A descriptor names any dims: refuse, before numpy allocates, a case whose tensors held in
    memory while it is built would take over half the machine's memory (numpy's MemoryError, or the
    OOM killer, otherwise)."""
    held = total_bytes(spec, plan) if builds_in_memory(spec, plan) else input_bytes_in_memory(spec, plan)
    memory = physical_memory()
    if memory is not None and held > memory // 2:
        raise DescriptorError(f"descriptor {text!r}: building the case holds {held / 2**30:.1f} GiB in memory, "
                              f"over half of this machine's {memory / 2**30:.1f} GiB")
    try:
        free = shutil.disk_usage(out_dir).free
    except OSError:
        return   # the write itself then says what is wrong with the folder
    if total_bytes(spec, plan) > free:
        raise DescriptorError(f"descriptor {text!r}: the case takes {total_bytes(spec, plan) / 2**30:.1f} GiB, "
                              f"over the {free / 2**30:.1f} GiB free under {out_dir}")
