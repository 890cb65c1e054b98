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

from gen.core.spec_model import FLOAT_DTYPES, SUITES

# The suite of a case made from an explicit descriptor (`opcase gen --case`, `opcase shrink`).
DESCRIBED = "described"
# The suite of the cases `opcase power --hunt` found (suites.hunt in the spec: explicit descriptors).
HUNT = "hunt"
# How an explicit case's note starts; the descriptor follows.
NOTE_PREFIX = "descriptor "
# A random case's name starts with its index: r007-...
RANDOM_NAME = re.compile(r"r(\d{3,})-")
_SEED = re.compile(r"\d{1,19}")


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


def case_seed(base_seed: int, op: str, suite: str, label: str) -> int:
    """A 63-bit seed fixed by (base seed, op, suite, case label), stable across runs and machines."""
    digest = hashlib.sha256(f"{base_seed}/{op}/{suite}/{label}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def describe(op: str, suite: str, name: str, seed: int, note: str) -> str:
    """The descriptor of a case file, from its header; '' when none regenerates it (a case of
    `opcase gen --seed` other than 0, or one not made by opcase gen)."""
    if suite == DESCRIBED:
        text = note[len(NOTE_PREFIX):] if note.startswith(NOTE_PREFIX) else ""
        try:
            return text if isinstance(parse(text), Explicit) else ""
        except DescriptorError:
            return ""
    if suite not in SUITES:
        return ""
    if suite == HUNT:
        return f"{op}:{suite}:{name}"     # its seed is the spec's data, whatever gen's --seed
    label = name
    if suite == "random":
        index = RANDOM_NAME.match(name)
        if not index:
            return ""
        label = f"r{int(index.group(1))}"
    return f"{op}:{suite}:{name}" if case_seed(0, op, suite, label) == seed else ""


def op_of(text: str) -> str:
    parts = parse(text)
    return parts.op if isinstance(parts, Explicit) else parts[0]
