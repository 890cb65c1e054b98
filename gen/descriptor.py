"""One-line case descriptors: everything that fixes a case's bytes, in a line a bug report can quote.

Two forms (fields separated by ':'):

  named     OP:SUITE:NAME                  a case `opcase gen` makes with its default --seed 0, by the
                                           name it has in its suite, e.g. carafe_forward:network:fpn_h32_c256-float32
  explicit  OP:DTYPE:DIMS:PARAMS:seed=S[:omit=A+B][:values=SUITE[/NAME]][:violate=CHECK]
                                           any shapes and params, e.g.
                                           carafe_forward:float16:N=1,H=5,W=7,C=28:kernel_size=11,group_size=4,scale_factor=2:seed=17

An explicit case draws its inputs with seed S from the spec's value distributions, or from those
of the case values= names (values=random: the random suite's); omit= leaves optional inputs out;
violate= makes it an invalid case that breaks CHECK (with that check's shape, dtype and layout
overrides).  Its suite is `described` and its name is made from the descriptor, which the case's
note records, so that the file itself says how to make it again.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from gen.core.spec import FLOAT_DTYPES, SUITES, Spec

# The suite of a case made from an explicit descriptor (`opcase gen --case`, `opcase shrink`).
DESCRIBED = "described"
# How an explicit case's note starts; the descriptor follows.
NOTE_PREFIX = "descriptor "
_RANDOM_NAME = re.compile(r"r(\d{3,})-")
_SEED = re.compile(r"\d{1,19}")
_LONGEST_NAME = 150


class DescriptorError(ValueError):
    """A descriptor that names no case of its spec: one line saying which part is wrong."""


@dataclass(frozen=True)
class Explicit:
    """The parts of an explicit descriptor."""
    op: str
    dtype: str
    dims: dict
    params: dict
    seed: int
    omit: tuple = ()
    values: str = ""        # SUITE or SUITE/NAME whose value distributions the case uses; "": the spec's
    violate: str = ""       # the check an invalid case breaks; "": a valid case

    def text(self) -> str:
        fields = [self.op, self.dtype, _pairs(self.dims), _pairs(self.params), f"seed={self.seed}"]
        if self.omit:
            fields.append("omit=" + "+".join(self.omit))
        if self.values:
            fields.append(f"values={self.values}")
        if self.violate:
            fields.append(f"violate={self.violate}")
        return ":".join(fields)


def _format(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value) if isinstance(value, float) else str(value)


def _pairs(mapping: dict) -> str:
    return ",".join(f"{k}={_format(v)}" for k, v in mapping.items())


def _number(text: str, where: str):
    if text in ("true", "false"):
        return text == "true"
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        raise DescriptorError(f"{where}: {text!r} is not a number, true or false") from None


def _parse_pairs(text: str, where: str) -> dict:
    out = {}
    for item in filter(None, text.split(",")):
        key, eq, value = item.partition("=")
        if not eq or not key.isidentifier():
            raise DescriptorError(f"{where}: {item!r} is not NAME=VALUE")
        if key in out:
            raise DescriptorError(f"{where}: {key} given twice")
        out[key] = _number(value, f"{where} {key}")
    return out


def parse(text: str) -> tuple[str, str, str] | Explicit:
    """A descriptor's parts: (op, suite, name) for the named form, an Explicit for the other."""
    fields = text.strip().split(":")
    if len(fields) == 3 and fields[1] in SUITES:
        op, suite, name = fields
        if not name:
            raise DescriptorError(f"descriptor {text!r}: no case name after {op}:{suite}:")
        return op, suite, name
    if len(fields) < 5 or fields[1] not in FLOAT_DTYPES:
        raise DescriptorError(f"descriptor {text!r}: expected OP:SUITE:NAME (SUITE one of {', '.join(SUITES)}) "
                              f"or OP:DTYPE:DIMS:PARAMS:seed=S[:omit=..][:values=..][:violate=..]")
    op, dtype, dims, params, *rest = fields
    extra = {}
    for item in rest:
        key, eq, value = item.partition("=")
        if not eq or key not in ("seed", "omit", "values", "violate") or key in extra:
            raise DescriptorError(f"descriptor {text!r}: unknown or repeated field {item!r} "
                                  f"(known: seed=, omit=, values=, violate=)")
        extra[key] = value
    if not _SEED.fullmatch(extra.get("seed", "")) or int(extra["seed"]) >= 2**63:
        raise DescriptorError(f"descriptor {text!r}: seed=S, S an integer in [0, 2^63), is required")
    return Explicit(op=op, dtype=dtype, dims=_parse_pairs(dims, "dims"), params=_parse_pairs(params, "params"),
                    seed=int(extra["seed"]), omit=tuple(filter(None, extra.get("omit", "").split("+"))),
                    values=extra.get("values", ""), violate=extra.get("violate", ""))


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
    from gen.generate import plan_suite
    count = None
    if suite == "random":
        index = _RANDOM_NAME.match(name)
        if not index:
            raise DescriptorError(f"{spec.op}:random:{name}: a random case's name starts rNNN-")
        count = int(index.group(1)) + 1
    plans = [p for p in plan_suite(spec, suite, count, 0) if p.name == name]
    if not plans:
        raise DescriptorError(f"{spec.op} has no {suite} case named {name!r} (`opcase gen --suite {suite}` "
                              f"lists the names it writes)")
    return plans[0]


def _explicit_plan(spec: Spec, d: Explicit):
    from gen.generate import Plan
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
    from gen.generate import slug
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
    if plan.suite == DESCRIBED:
        parsed = parse(plan.note[len(NOTE_PREFIX):])
        return parsed.values
    if plan.suite == "random":
        return "random"
    return f"{plan.suite}/{plan.name}" if plan.values else ""


def describe(op: str, suite: str, name: str, seed: int, note: str) -> str:
    """The descriptor of a case file, from its header; '' when none regenerates it (a case of
    `opcase gen --seed` other than 0, or one not made by opcase gen)."""
    from gen.generate import case_seed
    if suite == DESCRIBED:
        text = note[len(NOTE_PREFIX):] if note.startswith(NOTE_PREFIX) else ""
        try:
            return text if isinstance(parse(text), Explicit) else ""
        except DescriptorError:
            return ""
    if suite not in SUITES:
        return ""
    label = name
    if suite == "random":
        index = _RANDOM_NAME.match(name)
        if not index:
            return ""
        label = f"r{int(index.group(1))}"
    return f"{op}:{suite}:{name}" if case_seed(0, op, suite, label) == seed else ""


def op_of(text: str) -> str:
    parts = parse(text)
    return parts.op if isinstance(parts, Explicit) else parts[0]


def spec_of(text: str, spec_paths=()) -> Spec:
    """The spec a descriptor is for: among ``spec_paths`` the one of its op, else the installed one."""
    from gen.core.registry import UnknownOp, spec_for
    from gen.core.spec import load_spec
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


def write_described(text: str, out_dir, baseline: str | None = None, spec_paths=()):
    """Write the case of descriptor ``text`` under ``out_dir`` as `opcase gen` lays cases out;
    return its path.  ``baseline``: the backend for dynamic thresholds (default: the spec's)."""
    from gen.generate import case_path
    from gen.parallel import generator_of
    spec = spec_of(text, spec_paths)
    plan = plan_of(spec, text)
    return generator_of(spec, baseline).write(plan, case_path(out_dir, plan, spec.op))
