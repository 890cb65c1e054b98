"""`opcase explain`: which known variant of a kernel a backend's outputs match, element by element.

A *variant* is a computation of the kernel on a case's inputs that some implementation may be:
  - the reference (float64, rounded to nearest even once) and the reference in other arithmetic:
    float32 (the lowp backend; its final cast to half also toward zero or ties away), float16
    throughout, the final cast toward zero, half away from zero or twice (through float32),
    subnormals flushed on input, on output or both;
  - the mmcv emulation (its mmcv_emulation part: mmcv's half arithmetic, FMA and loop orders) and the kernel's own
    variants, found by convention (gen.core.registry.explain_variants: another order of atomic
    adds, say);
  - every generic mutant of `opcase power` (harness.studies.mutants: a tail block zeroed or copied, a row or
    column repeated, batch 0 everywhere, H and W swapped, an int param off by one, ...) and the
    kernel's planted bugs and controls (its planted part).
Each is computed on the case's own inputs, one at a time: of each only its scores and two bits per
element (equal to the backend's bits; within one ulp) are kept, so memory stays near the outputs
three times over (the backend's, the reference's, one variant's) plus two bits per element per
variant, on network cases too (memory_needed; a case over half the machine's memory is refused).

For each output the variants are ranked by the fraction of elements bit-identical to the
backend's, then by diff1 and diff3 of the backend's against the variant's (gen/core/README.md, Accuracy);
variants with the same bits on an output share a rank.  The explanation says when one matches
bit for bit; otherwise which variant explains which elements: greedily, the variant matching
the most elements bit for bit, then the one matching most of the rest, ... and what remains
within one ulp of which variant.
"""
from __future__ import annotations

import dataclasses
import hashlib
import math
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from gen.core.backend import InvalidArgument, NotSupported, Request
from gen.core.casefile import element_count, load, physical_memory
from gen.core.metrics import compare
from gen.core.registry import explain_variants, spec_for
from gen.core.timing import call
from gen.core.verdict import request_for, validate_outputs
from harness.backends import load_backend
from harness.backends.builtin import check_request, reference, run_in_dtype
from harness.judge.workers import BackendFailed, IsolatedBackend, runs_isolated
from harness.reports.progress import progress
from harness.studies.mutants import (CHECKS, GENERIC, PLANTED, Call, Mutant, NotApplicable, controls, flush_subnormal_values,
                             mutants)

REFERENCE = "reference"
# How many variants the text names per output, and how many pieces a partial explanation has.
_SHOWN = 5
_PIECES = 3
# Elements scored at a time (a multiple of 8: the packed bits of the blocks are concatenated).
_BLOCK = 1 << 20
# A piece this close to the largest in size counts as large as it (see _describe).
_NEARLY = 0.98
# A further piece of fewer elements than this (and under 0.1 % of the output) is not named.
_MIN_MATCH = 8
# Cases of at least this many output elements show progress while their variants are computed.
_PROGRESS_ELEMENTS = 1 << 22


@dataclass(frozen=True)
class Variant:
    name: str
    what: str                                     # in words, as the explanation says it
    kind: str                                     # arithmetic, mmcv, kernel, generic, planted, control
    # Outputs in the requested shapes and dtypes, from a harness.studies.mutants.Call whose base is the
    # reference (its outputs computed once per case and shared).
    compute: Callable[[Call], dict]
    # Variants that share a key compute the same thing (a mutant and a control both the mmcv
    # emulation): computed once per case.
    key: object = None


# --------------------------------------------------------------------------- the catalogue

def _reference_in(compute_dtype, rounding: str = "nearest"):
    def compute(call: Call) -> dict:
        return run_in_dtype(call.request, compute_dtype, rounding)
    return compute


def _reference(call: Call) -> dict:
    return call.base()


def _flush_inputs(call: Call) -> dict:
    request = call.request
    flushed = {name: flush_subnormal_values(a) for name, a in request.inputs.items()}
    if all(flushed[n] is a for n, a in request.inputs.items()):
        raise NotApplicable("no subnormal input")
    check_request(request)
    spec = spec_for(request.op)
    return run_in_dtype(dataclasses.replace(request, inputs=flushed), np.float64,
                        skip_checks={c.id for c in spec.checks})


def _flush_outputs(call: Call) -> dict:
    return {name: flush_subnormal_values(np.asarray(a)) for name, a in call.base().items()}


def _zeros(call: Call) -> dict:
    return {name: np.zeros(o.shape, o.dtype) for name, o in call.request.outputs.items()}


def _kernel_variant(function):
    def compute(call: Call) -> dict:
        request = call.request
        check_request(request)
        out_shapes = {name: tuple(o.shape) for name, o in request.outputs.items()}
        produced = function(dict(request.inputs), dict(request.params), out_shapes=out_shapes)
        return {name: np.asarray(produced[name]).astype(o.dtype, copy=False) for name, o in request.outputs.items()}
    return compute


def variants(op: str) -> list[Variant]:
    """Every variant of ``op`` that `opcase explain` compares with, simplest first: variants with the
    same bits on an output are named by the first of them (the reference, then the arithmetic of the
    built-in backends and the controls, other arithmetic, the kernel's own variants, then bugs)."""
    spec = spec_for(op)
    found = [Variant(REFERENCE, "the reference (float64, rounded to nearest even once)", "arithmetic",
                     _reference, key=REFERENCE)]
    found += [_from_mutant(m) for m in controls(spec)]
    found += [
        Variant("float16_arithmetic", "the reference in float16 arithmetic throughout (products and sums "
                "rounded to half)", "arithmetic", _reference_in(np.float16)),
        Variant("round_half_away_from_zero", "the reference, its final cast rounded to nearest with ties away "
                "from zero", "arithmetic", _reference_in(np.float64, "half_away_from_zero")),
        # What a float32 kernel writing half may do when its conversion instruction truncates or
        # rounds ties away (for float32 outputs these are the lowp arithmetic itself).
        Variant("float32_arithmetic_cast_toward_zero", "float32 arithmetic, the final cast to the output dtype "
                "toward zero", "arithmetic", _reference_in(np.float32, "toward_zero")),
        Variant("float32_arithmetic_cast_half_away", "float32 arithmetic, the final cast to the output dtype to "
                "nearest with ties away from zero", "arithmetic", _reference_in(np.float32, "half_away_from_zero")),
        Variant("flush_subnormal_inputs", "the reference on inputs whose subnormals are flushed to zero",
                "arithmetic", _flush_inputs),
        Variant("flush_subnormal_outputs", "the reference, subnormal results flushed to zero", "arithmetic",
                _flush_outputs),
    ]
    for name, function in explain_variants(op).items():
        what = (function.__doc__ or name.replace("_", " ")).strip().splitlines()[0]
        found.append(Variant(name, what, "kernel", _kernel_variant(function)))
    found.append(Variant("left_zero", "0 (left unwritten in a zeroed buffer)", "generic", _zeros))
    found += [_from_mutant(m) for m in mutants(spec, REFERENCE) if m.kind != CHECKS]
    return found


def _from_mutant(m: Mutant) -> Variant:
    return Variant(variant_name(m), _what(m), m.kind, m.apply, key=m.apply)


def variant_name(m: Mutant) -> str:
    """The name of a mutant's or control's variant (planted bugs are prefixed: a kernel's bug may
    share a generic mutant's name)."""
    if m.backend == "mmcv":
        return "mmcv"
    return f"planted:{m.name}" if m.kind == PLANTED else m.name


def _what(m: Mutant) -> str:
    if m.backend == "mmcv":
        return ("the mmcv emulation: accumulation in the tensor dtype, in half with every product "
                "and sum rounded, in float32 with nvcc's FMA contractions, in mmcv's loop and reduction orders")
    return m.what


# --------------------------------------------------------------------------- scoring

def _ordered(array: np.ndarray) -> np.ndarray:
    """Float bits as integers ordered like the values (+0 and -0 both 0): ulps apart is their difference."""
    bits = array.view({2: np.int16, 4: np.int32, 8: np.int64}[array.itemsize]).astype(np.int64)
    magnitude = bits & ((1 << (8 * array.itemsize - 1)) - 1)
    return np.where(bits < 0, -magnitude, magnitude)


def same_bits(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per element: the same bits (any NaN equals any NaN)."""
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    if a.dtype.kind != "f":
        return a == b
    raw = {2: np.uint16, 4: np.uint32, 8: np.uint64}[a.itemsize]
    return (a.view(raw) == b.view(raw)) | (np.isnan(a) & np.isnan(b))


def ulps_apart(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per element: how many representable values apart (0 for -0 against +0; NaN against a number: huge)."""
    if a.dtype.kind != "f":
        return np.abs(a.astype(np.int64) - b.astype(np.int64))
    apart = np.abs(_ordered(np.ascontiguousarray(a)) - _ordered(np.ascontiguousarray(b)))
    nan_a, nan_b = np.isnan(a), np.isnan(b)
    return np.where(nan_a | nan_b, np.where(nan_a & nan_b, 0, np.iinfo(np.int64).max), apart)


@dataclass
class Score:
    """One variant against the backend on one output."""
    names: list                     # the variant and those with the same bits on this output
    identical: int                  # elements bit-identical
    within_ulp: int                 # elements at most one ulp apart
    diff1: float
    diff3: float
    max_ulps: int                   # the largest distance in ulps, -1 where a NaN faces a number
    # Bit per element, packed: identical, and within one ulp (for the explanation's pieces).
    identical_bits: np.ndarray = field(repr=False, default=None)
    within_bits: np.ndarray = field(repr=False, default=None)

    def rank_key(self, size: int):
        bad = lambda v: v if isinstance(v, float) and math.isfinite(v) else math.inf   # noqa: E731
        return (-self.identical / max(size, 1), bad(self.diff1), bad(self.diff3))


def score(actual: np.ndarray, produced: np.ndarray, name: str) -> Score:
    """The variant's outputs ``produced`` against the backend's ``actual``, a block at a time (so that
    the per-element temporaries of a network-scale output stay small)."""
    with np.errstate(all="ignore"):
        metrics = compare(actual, produced, produced.dtype, worst_k=0) if actual.size else {}
    flat_actual, flat_produced = np.ascontiguousarray(actual).reshape(-1), np.ascontiguousarray(produced).reshape(-1)
    identical, within, max_ulps, equal_bits, near_bits = 0, 0, 0, [], []
    for start in range(0, flat_actual.size, _BLOCK):
        a, b = flat_actual[start:start + _BLOCK], flat_produced[start:start + _BLOCK]
        equal, apart = same_bits(a, b), ulps_apart(a, b)
        identical += int(equal.sum())
        within += int((apart <= 1).sum())
        largest = int(apart.max()) if apart.size else 0
        max_ulps = -1 if max_ulps < 0 or largest == np.iinfo(np.int64).max else max(max_ulps, largest)
        equal_bits.append(np.packbits(equal))
        near_bits.append(np.packbits(apart <= 1))
    packed = (lambda parts: np.concatenate(parts) if parts else np.zeros(0, np.uint8))   # noqa: E731
    return Score([name], identical, within, float(metrics.get("diff1", 0.0)), float(metrics.get("diff3", 0.0)),
                 max_ulps, packed(equal_bits), packed(near_bits))


def _digest(array: np.ndarray) -> bytes:
    """Variants with the same bits on an output are merged by this."""
    return hashlib.sha256(np.ascontiguousarray(array).view(np.uint8)).digest() + repr(array.shape).encode()


# --------------------------------------------------------------------------- explaining one case

@dataclass
class OutputExplanation:
    output: str
    size: int
    ranking: list                   # [Score], best first, variants with the same bits merged
    text: str = ""
    pieces: list = field(default_factory=list)   # [{variant(s), elements, region}]

    def doc(self) -> dict:
        return {"output": self.output, "elements": self.size, "explanation": self.text, "pieces": self.pieces,
                "ranking": [{"variants": s.names, "identical": s.identical,
                             "identical_fraction": s.identical / self.size if self.size else 1.0,
                             "within_1_ulp": s.within_ulp, "diff1": _json_number(s.diff1),
                             "diff3": _json_number(s.diff3), "max_ulps": s.max_ulps if s.max_ulps >= 0 else None}
                            for s in self.ranking]}


def _json_number(value: float):
    return value if math.isfinite(value) else str(value)


def computed_variants(request: Request, catalogue: list[Variant]):
    """Yield (variant, its outputs) or (variant, why it cannot be made on this call), one at a time."""
    # Outputs are kept only until the last variant sharing their key has read them.
    computed: dict = {"uses": Counter(_key(v) for v in catalogue)}
    call = Call(request, reference())
    for variant in catalogue:
        try:
            yield variant, _compute(variant, call, computed)
        except NotApplicable as exc:
            yield variant, str(exc)
        except Exception as exc:  # noqa: BLE001 - a variant that cannot be made on this call is left out
            yield variant, f"{type(exc).__name__}: {exc}"[:200]


def explain_outputs(request: Request, produced: dict, catalogue: list[Variant], computed=None) -> tuple[list, dict]:
    """Rank every applicable variant against the backend's outputs on each output:
    ([OutputExplanation] in the request's order, {variant: why it was not applicable}).
    ``computed``: the variants' outputs as computed_variants yields them (by default computed here)."""
    scores: dict[str, dict[bytes, Score]] = {name: {} for name in request.outputs}
    inapplicable: dict[str, str] = {}
    last = [""]   # the variant last computed, as the heartbeat names it
    with progress("explain: variants", _planned_work(request, catalogue), counts=lambda: f"{last[0]} done",
                  err=True) as advance:
        for number, (variant, outputs) in enumerate(computed if computed is not None
                                                    else computed_variants(request, catalogue)):
            last[0] = variant.name
            advance(number)
            if isinstance(outputs, str):
                inapplicable[variant.name] = outputs
                continue
            for name, o in request.outputs.items():
                mine = np.asarray(outputs[name]) if name in outputs else None
                if mine is None or mine.shape != tuple(o.shape) or mine.dtype != np.dtype(o.dtype):
                    inapplicable.setdefault(variant.name, f"no output '{name}' of the requested form")
                    continue
                digest = _digest(mine)
                if digest in scores[name]:
                    scores[name][digest].names.append(variant.name)
                else:
                    scores[name][digest] = score(np.asarray(produced[name]), mine, variant.name)
            del outputs
    found = []
    for name, o in request.outputs.items():
        size = int(np.prod(o.shape))
        ranking = sorted(scores[name].values(), key=lambda s: s.rank_key(size))
        explanation = OutputExplanation(name, size, ranking)
        _describe(explanation, o.shape, o.layout, {v.name: v for v in catalogue})
        found.append(explanation)
    return found, inapplicable


def _planned_work(request: Request, catalogue: list) -> dict:
    """{position in the catalogue: planned work} of a case large enough to show progress (its
    variants take minutes), else {}.  A variant whose key an earlier one computed only compares
    the outputs: an estimated tenth of computing them."""
    if sum(int(np.prod(o.shape)) for o in request.outputs.values()) < _PROGRESS_ELEMENTS:
        return {}
    seen: set = set()
    weights = {}
    for number, variant in enumerate(catalogue):
        weights[number] = 0.1 if _key(variant) in seen else 1.0
        seen.add(_key(variant))
    return weights


def _key(variant: Variant):
    return variant.key if variant.key is not None else variant.name


def _compute(variant: Variant, call: Call, computed: dict) -> dict:
    """A variant's outputs, computed once per key; numpy's warnings about its arithmetic are its own."""
    key = _key(variant)
    if key not in computed:
        with np.errstate(all="ignore"):
            try:
                computed[key] = ("outputs", variant.compute(call))
            except Exception as exc:  # noqa: BLE001 - remembered for the variants sharing the key
                computed[key] = ("raised", exc)
    kind, value = computed[key]
    computed["uses"][key] -= 1
    if not computed["uses"][key]:
        del computed[key]
    if kind == "raised":
        raise value
    if isinstance(value, tuple):   # a backend's (outputs, seconds)
        value = value[0]
    return value


# --------------------------------------------------------------------------- in words

_AXIS_WORDS = {"N": "batch", "H": "row", "W": "column", "C": "channel"}


def _plural(word: str, n: int) -> str:
    return word if n == 1 else ("batches" if word == "batch" else word + "s")


def _axis_names(layout: str, ndim: int) -> list[str]:
    if len(layout) == ndim and len(set(layout)) == ndim:
        return list(layout)
    return [f"axis {i}" for i in range(ndim)]


def region_text(mask: np.ndarray, layout: str) -> str:
    """Where the elements of ``mask`` are, in the layout's words: 'the last 33 channels', 'row H = 4',
    or how many elements when they form no box."""
    count = int(mask.sum())
    if mask.ndim == 0 or count == mask.size:
        return f"all {count:,} elements"
    names = _axis_names(layout, mask.ndim)
    present = [np.flatnonzero(mask.any(axis=tuple(a for a in range(mask.ndim) if a != axis)))
               for axis in range(mask.ndim)]
    box = math.prod(len(p) for p in present)
    if box != count:
        from harness.studies.explain_regions import border_text   # regions that are no box: border slabs, or within a box
        return border_text(mask, names, present, lambda sub: region_text(sub, layout))
    parts = []
    for axis, indices in enumerate(present):
        size, letter = mask.shape[axis], names[axis]
        if len(indices) == size:
            continue
        word = _AXIS_WORDS.get(letter, f"index of {letter}")
        contiguous = indices[-1] - indices[0] + 1 == len(indices)
        if len(indices) == 1:
            last = "the last " if indices[0] == size - 1 else ""
            parts.append(f"{last}{word} {letter} = {indices[0]}")
        elif contiguous and indices[-1] == size - 1 and indices[0] > 0:
            parts.append(f"the last {len(indices)} {_plural(word, len(indices))} ({letter} {indices[0]}..{size - 1})")
        elif contiguous and indices[0] == 0 and len(indices) > 1:
            parts.append(f"the first {len(indices)} {_plural(word, len(indices))} ({letter} 0..{indices[-1]})")
        elif contiguous:
            parts.append(f"{_plural(word, 2)} {letter} {indices[0]}..{indices[-1]}")
        else:
            parts.append(f"{len(indices)} {_plural(word, len(indices))} of {size}")
    return ", ".join(parts) + f" ({count:,} elements)"


def _names(score_: Score, catalogue: dict) -> str:
    first = catalogue[score_.names[0]]
    text = f"{first.what} [{first.name}]"
    others = score_.names[1:]
    if others:
        text += f" (the same bits: {', '.join(others[:3])}{f' and {len(others) - 3} more' if len(others) > 3 else ''})"
    return text


def _percent(part: int, whole: int) -> str:
    if whole == 0 or part == whole:
        return "100 %"
    return f"{min(100 * part / whole, 99.9):.1f} %" if part else "0 %"


def _plain(score_: Score, catalogue: dict) -> bool:
    """Whether a variant is an arithmetic rather than a bug (a mutant or planted bug)."""
    return any(catalogue[name].kind not in (GENERIC, PLANTED) for name in score_.names)


def _describe(e: OutputExplanation, shape, layout: str, catalogue: dict) -> None:
    if not e.ranking:
        e.text = "no variant could be computed on this case"
        return
    best = e.ranking[0]
    if best.identical == e.size:
        e.text = f"matches {_names(best, catalogue)} bit for bit on 100 % of {e.size:,} elements"
        e.pieces = [{"variants": best.names, "elements": e.size, "region": "all", "how": "bit for bit"}]
        return
    unexplained = np.ones(e.size, dtype=bool)
    pieces = []
    for _ in range(_PIECES):
        gains = [(int((np.unpackbits(s.identical_bits, count=e.size).astype(bool) & unexplained).sum()), i)
                 for i, s in enumerate(e.ranking)]
        most = max(g for g, _ in gains)
        # Among the pieces nearly as large as the largest, an arithmetic (the reference, mmcv) before
        # a local bug: 'the reference; the last 33 channels: left 0' rather than 'tail block of 16
        # zeroed; channels 96..127: left 0'.
        gain, index = max(gains, key=lambda g: (g[0] >= _NEARLY * most, _plain(e.ranking[g[1]], catalogue),
                                                g[0], -g[1]))
        if gain == 0 or pieces and gain < max(_MIN_MATCH, 0.001 * e.size):
            break   # a match this small, after the first, is as likely coincidence as a cause
        mask = np.unpackbits(e.ranking[index].identical_bits, count=e.size).astype(bool) & unexplained
        pieces.append((e.ranking[index], mask, "bit for bit"))
        unexplained &= ~mask
        if not unexplained.any():
            break
    if unexplained.any():
        gains = [(int((np.unpackbits(s.within_bits, count=e.size).astype(bool) & unexplained).sum()), i)
                 for i, s in enumerate(e.ranking)]
        gain, index = max(gains, key=lambda g: (g[0], -g[1]))
        if gain:
            mask = np.unpackbits(e.ranking[index].within_bits, count=e.size).astype(bool) & unexplained
            pieces.append((e.ranking[index], mask, "within 1 ulp"))
            unexplained &= ~mask
    # The largest piece is 'elsewhere'; the smaller ones are named by where they are.
    pieces.sort(key=lambda p: -int(p[1].sum()))
    phrases, docs = [], []
    for position, (s, mask, how) in enumerate(pieces):
        where = region_text(mask.reshape(shape), layout)
        docs.append({"variants": s.names, "elements": int(mask.sum()), "region": where, "how": how})
        if position:
            phrases.append(f"{where}: {_names(s, catalogue)}, {how}")
    if pieces:
        s, mask, how = pieces[0]
        lead = f"{_percent(int(mask.sum()), e.size)} of {e.size:,} elements: {_names(s, catalogue)}, {how}"
        phrases.insert(0, lead)
    if unexplained.any():
        n = int(unexplained.sum())
        closest = e.ranking[0]
        where = region_text(unexplained.reshape(shape), layout)
        phrases.append(f"{n:,} element(s) match no variant within 1 ulp ({where}; closest overall: "
                       f"{closest.names[0]}, diff1 {closest.diff1:.3g}, diff3 {closest.diff3:.3g})")
        docs.append({"variants": [], "elements": n, "region": where, "how": "unexplained"})
    tie = _tie(e)
    if tie:
        phrases.append(tie)
    e.text = "; ".join(phrases)
    e.pieces = docs


def _tie(e: OutputExplanation) -> str:
    """When the top variants match as many elements as each other, no one of them is closest."""
    tied = [s for s in e.ranking if s.identical == e.ranking[0].identical]
    if len(tied) < 2:
        return ""
    names = ", ".join(s.names[0] for s in tied[:_SHOWN]) + (f" and {len(tied) - _SHOWN} more" if len(tied) > _SHOWN else "")
    return f"the top {len(tied)} variants tie ({names}: {_percent(tied[0].identical, e.size)} identical each)"


def headline(explanations: list) -> str:
    """One line for a case: each output's explanation (what `opcase run --explain` adds to a report)."""
    return "; ".join(f"{e.output}: {e.text}" for e in explanations)


def ranking_lines(e: OutputExplanation, catalogue: dict, shown: int = _SHOWN) -> list[str]:
    lines = []
    for rank, s in enumerate(e.ranking[:shown], 1):
        ulps = f", max {s.max_ulps} ulp" if s.max_ulps >= 0 else ""
        lines.append(f"    {rank}. {_percent(s.identical, e.size):>7} identical, diff1 {s.diff1:.3g}, "
                     f"diff3 {s.diff3:.3g}{ulps}: {', '.join(s.names)}")
    return lines


# --------------------------------------------------------------------------- a case

def memory_needed(case) -> int:
    """Bytes explaining a case holds at once beyond what computing one variant takes: the backend's
    outputs, the reference's and one variant's, a byte per element while pieces are found, two bits
    per element per variant, and the blocks scores are computed in."""
    elements = sum(element_count(t.shape) for t in case.outputs.values())
    itemsize = max((np.dtype(t.dtype).itemsize for t in case.outputs.values()), default=0)
    return elements * (3 * itemsize + 2) + elements * len(variants(case.op)) // 4 + 64 * _BLOCK


# What the backend's one call came to: outputs, a refusal (InvalidArgument or NotSupported: which one the
# case expects is `opcase run`'s to judge), or no outputs (it raised, declined the kernel, died, hung).
OUTPUTS, REJECTED, RAISED = "outputs", "rejected", "raised"


@dataclass
class BackendCall:
    kind: str                                   # OUTPUTS, REJECTED or RAISED
    message: str = ""
    outputs: dict = field(default_factory=dict)


def backend_outputs(case, backend_spec: str, timeout: float | None = None) -> BackendCall:
    """The backend's outputs for ``case``, computed where `opcase run` computes them: opcase's own
    backends and exec: commands here, every other in a worker process (harness.judge.workers.IsolatedBackend) that
    hands them over as sealed memory, checked against the form the case promises.  Raises
    BackendLoadError when the backend cannot be loaded."""
    isolated = IsolatedBackend(backend_spec, timeout) if runs_isolated(backend_spec) else None
    # An exec: command runs here and its backend enforces the timeout itself, killing just the command.
    backend = isolated.backend() if isolated else load_backend(backend_spec, timeout)
    try:
        if not backend.supports(case.op, case.dtype):
            return BackendCall(RAISED, f"backend {backend.name} does not support {case.op} {case.dtype}")
        produced, _, _ = call(backend, request_for(case))
    except (InvalidArgument, NotSupported) as exc:
        return BackendCall(REJECTED, str(exc))
    except BackendFailed as exc:                   # its worker died, hung or broke the channel
        return BackendCall(RAISED, str(exc))
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - whatever the backend raises is reported
        return BackendCall(RAISED, f"backend raised {type(exc).__name__}: {exc}")
    finally:
        if isolated:
            isolated.close()   # the worker and whatever the backend started go now
    problem = validate_outputs(case, produced)
    return BackendCall(RAISED, problem) if problem else BackendCall(OUTPUTS, outputs=produced)


def explain_case(path: Path, backend_spec: str, timeout: float | None = None) -> dict:
    """Run the backend on one case (as `opcase run` runs it) and explain its outputs: the report of
    one case (README: Explaining a failure).  Raises CaseFileError, BackendLoadError."""
    started = time.monotonic()
    case = load(path)
    key = f"{case.op}/{case.suite}/{case.name}"
    doc = {"case": key, "path": str(path), "backend": backend_spec, "outputs": [], "inapplicable": {}}
    limit = physical_memory()
    if limit is not None and memory_needed(case) > limit // 2:
        doc.update(status="too-large", headline=f"not explained: it would hold about {memory_needed(case) / 1e9:.1f} "
                                                f"GB at once, over half this machine's memory")
        return _timed(doc, started)
    done = backend_outputs(case, backend_spec, timeout)
    doc["status"] = done.kind
    if case.expect != "ok":         # rejected (BAD_PARAM) or not_supported: a refusal is expected
        verdict = "rejected it as expected" if done.kind == REJECTED else \
            "computed it (wrongly accepted)" if done.kind == OUTPUTS else f"did not reject it: {done.message}"
        doc["headline"] = f"an invalid call (breaks '{case.expect_check}'): the backend {verdict}; nothing to " \
                          f"compare element by element"
        return _timed(doc, started)
    if done.kind != OUTPUTS:
        doc["headline"] = f"no outputs to explain: {done.message}"
        return _timed(doc, started)
    catalogue = variants(case.op)
    explanations, inapplicable = explain_outputs(request_for(case), done.outputs, catalogue)
    doc["outputs"] = [e.doc() for e in explanations]
    doc["inapplicable"] = inapplicable
    doc["headline"] = headline(explanations)
    doc["_explanations"] = explanations   # for the terminal; dropped from --json
    doc["_catalogue"] = {v.name: v for v in catalogue}
    return _timed(doc, started)


def _timed(doc: dict, started: float) -> dict:
    doc["seconds"] = round(time.monotonic() - started, 3)
    return doc


def case_lines(doc: dict) -> list[str]:
    """The terminal report of one explained case."""
    lines = [f"{doc['case']}  ({doc['backend']}, {doc['seconds']:.2f} s)"]
    explanations = doc.get("_explanations")
    if not explanations:
        return lines + [f"  {doc['headline']}"]
    for e in explanations:
        lines.append(f"  {e.output}: {e.text}")
        lines += ranking_lines(e, doc["_catalogue"])
    return lines


def json_doc(doc: dict) -> dict:
    return {k: v for k, v in doc.items() if not k.startswith("_")}
