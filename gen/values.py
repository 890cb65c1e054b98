"""Drawing input values from a spec's distributions."""
from __future__ import annotations

import math
from contextlib import nullcontext
from dataclasses import dataclass, field

import numpy as np

from gen.core.backend import TensorInfo
from gen.core.expr import ExprError, evaluate
from gen.core.spec import resolve_callable
from gen.core.casefile import drop_pages
from gen.core.overlap import Background, Prefetched


@dataclass
class ValueContext:
    """What a custom value generator may look at.

    ``shapes``/``dtypes``: every tensor of the case (inputs and outputs) by name;
    ``dims`` and ``params``: the case's sampled dims and op params; ``dtype``: the case's
    floating dtype; ``inputs``: the inputs drawn so far (in spec order).
    """
    shapes: dict
    dtypes: dict
    dims: dict
    params: dict
    dtype: str
    inputs: dict = field(default_factory=dict)


# Values are drawn this many at a time, converted and stored, so that a multi-GB input never
# exists in float64.  The rng consumes its stream in order either way, so the values do not
# depend on this number.
DRAW_CHUNK = 1 << 20
DRAW_CHUNKS_AHEAD = 2


def _plain(rng: np.random.Generator, dist: dict, values: np.ndarray) -> np.ndarray:
    """Fill ``values`` from the distribution, a chunk at a time; the pages of a file-backed
    ``values`` are let go as each chunk is written, so a multi-GB draw never stays resident."""
    kind = dist["dist"]
    if kind == "const":
        draw_chunk = lambda n: dist["value"]  # noqa: E731
    elif kind == "uniform":
        draw_chunk = lambda n: rng.uniform(float(dist["low"]), float(dist["high"]), size=n)  # noqa: E731
    elif kind == "normal":
        draw_chunk = lambda n: rng.normal(float(dist["mean"]), float(dist["std"]), size=n)  # noqa: E731
    elif kind == "randint":
        draw_chunk = lambda n: rng.integers(int(dist["low"]), int(dist["high"]), size=n, endpoint=True)  # noqa: E731
    else:
        raise ValueError(f"unknown distribution {kind!r}")
    flat = values.reshape(-1)
    spans = [(start, min(start + DRAW_CHUNK, flat.size)) for start in range(0, flat.size, DRAW_CHUNK)]
    # The generator draws the next chunk on a thread of its own while this one converts and
    # stores the last: the same draws in the same order, on two cores.
    drawn = ((start, stop, draw_chunk(stop - start)) for start, stop in spans)
    with Prefetched(drawn, DRAW_CHUNKS_AHEAD) if len(spans) > 1 and kind != "const" else nullcontext(drawn) as chunks:
        for start, stop, chunk in chunks:
            flat[start:stop] = chunk
            drop_pages(values, stop, start)
    return values


# The numbers of a plain distribution that may be expressions (specs/README.md: Tensors).
BOUND_KEYS = ("low", "high", "mean", "std", "value")


def bounded(dist: dict, ctx: ValueContext) -> dict:
    """``dist`` with each expression among its numbers evaluated over the case's dims, params and tensors
    (their shape, dtype, ndim): `randint {low: 0, high: "M - 1"}` draws indices below M.  ValueError when one
    cannot be evaluated or is no finite number."""
    if not any(isinstance(dist.get(key), str) for key in BOUND_KEYS):
        return dist
    env = {**ctx.dims, **ctx.params,
           **{n: TensorInfo(tuple(s), ctx.dtypes[n], "") for n, s in ctx.shapes.items() if s is not None}}
    resolved = dict(dist)
    for key in BOUND_KEYS:
        if isinstance(dist.get(key), str):
            try:
                number = evaluate(dist[key], env)
            except ExprError as exc:
                raise ValueError(f"values.{key} {dist[key]!r}: {exc}") from None
            if isinstance(number, bool) or not isinstance(number, (int, float)) or not math.isfinite(number):
                raise ValueError(f"values.{key} {dist[key]!r} is {number!r}, not a finite number")
            resolved[key] = number
    return resolved


def _sprinkle_nonfinite(rng: np.random.Generator, array: np.ndarray, dist: dict) -> None:
    """Overwrite the fractions dist['nan'] / dist['inf'] of the elements (inf with random sign)."""
    flat = array.reshape(-1)
    for key in ("nan", "inf"):
        fraction = float(dist.get(key, 0.0))
        if fraction <= 0 or flat.size == 0:
            continue
        count = max(1, int(round(fraction * flat.size)))
        where = rng.choice(flat.size, size=min(count, flat.size), replace=False)
        if key == "nan":
            flat[where] = np.nan
        else:
            flat[where] = np.where(rng.random(where.size) < 0.5, np.inf, -np.inf)


def draw(rng: np.random.Generator, name: str, dist: dict, ctx: ValueContext, spec_path,
         allocate=np.empty) -> dict:
    """Draw input ``name``; a custom generator may return several inputs at once (a dict).

    ``allocate(shape, dtype)`` (np.empty by default) gives the array a plain distribution is
    drawn into: the generator passes one that maps a file for a multi-GB input."""
    shape, dtype = ctx.shapes[name], np.dtype(ctx.dtypes[name])
    if dist["dist"] == "custom":
        fn = resolve_callable(dist["fn"], spec_path, f"values of {name}")
        kwargs = {k: v for k, v in dist.items() if k not in ("dist", "fn", "nan", "inf")}
        produced = fn(rng, ctx, **kwargs)
        if not isinstance(produced, dict):
            produced = {name: produced}
    else:
        produced = {name: _plain(rng, bounded(dist, ctx), allocate(shape, dtype))}
    result = {}
    for key, array in produced.items():
        wanted = np.dtype(ctx.dtypes[key])
        # An array already of the right dtype and layout is kept as it is: one drawn into a
        # file stays that file's mapping.
        if not (isinstance(array, np.ndarray) and array.dtype == wanted and array.flags.c_contiguous):
            array = np.ascontiguousarray(np.asarray(array).astype(wanted, copy=False))
        if tuple(array.shape) != tuple(ctx.shapes[key]):
            raise ValueError(f"value generator for {key} returned shape {array.shape}, "
                             f"expected {tuple(ctx.shapes[key])}")
        if key == name and array.dtype.kind == "f":
            _sprinkle_nonfinite(rng, array, dist)
        result[key] = array
    return result


# The same bits on every x86-64 machine: numpy's own float64 exp takes a vectorized path
# on CPUs with AVX512F and libm's elsewhere, and the two differ in the last bit, so values
# made with it would make case files differ between machines.  This exp uses only correctly
# rounded IEEE operations (multiply, add, rint, ldexp), whose results do not depend on the
# instruction set: Cody-Waite reduction x = k*ln2 + r, |r| <= ln2/2, and exp(r) by its
# Taylor series to degree 13 (truncation error below 2^-60 relative), then scaling by 2^k.
_LN2_HI = 0.693147180369123816490     # ln 2 with its low 32 bits cleared: k * _LN2_HI is exact
_LN2_LO = 1.90821492927058770002e-10  # ln 2 - _LN2_HI
_INV_LN2 = 1.44269504088896338700
_EXP_TAYLOR = [1.0 / math.factorial(n) for n in range(13, -1, -1)]


# portable_exp splits arrays larger than this in two halves, computed on two threads (elementwise:
# the same bits).
EXP_HALVES_ABOVE = 1 << 20


def portable_exp(x) -> np.ndarray:
    """exp(x) in float64, within 2 ulp of the true value, bit-identical on every machine."""
    x = np.asarray(x, dtype=np.float64)
    if x.size > EXP_HALVES_ABOVE:
        flat = x.reshape(-1)
        out = np.empty(flat.shape)
        middle = flat.size // 2
        first = Background(lambda: out[:middle].__setitem__(Ellipsis, _portable_exp(flat[:middle])))
        try:
            out[middle:] = _portable_exp(flat[middle:])
        finally:
            first.wait()
        first.result()
        return out.reshape(x.shape)
    return _portable_exp(x)


def _portable_exp(x: np.ndarray) -> np.ndarray:
    # Beyond these the result is 0 or inf anyway; the clip keeps k and r in range.
    clipped = np.clip(np.nan_to_num(x), -760.0, 720.0)
    k = np.rint(clipped * _INV_LN2)
    r = (clipped - k * _LN2_HI) - k * _LN2_LO
    p = np.full_like(r, _EXP_TAYLOR[0])
    for coefficient in _EXP_TAYLOR[1:]:
        p = p * r + coefficient
    # ldexp rounds once, also into the subnormal range; split the scaling so that
    # 2^k itself never overflows or underflows on the way.
    k = k.astype(np.int64)
    half = k // 2
    with np.errstate(over="ignore"):
        out = np.ldexp(np.ldexp(p, half), k - half)
    out[np.isnan(x)] = np.nan
    out[x == np.inf] = np.inf
    out[x == -np.inf] = 0.0
    return out


def softmax_groups(logits: np.ndarray, group: int) -> np.ndarray:
    """``logits`` with each run of ``group`` consecutive elements (C order) replaced by its softmax, in place:
    what a predictor's softmax gives (CARAFE's masks, attention weights), with portable_exp so that the
    bits are the same on every machine."""
    if logits.size == 0:
        return logits
    groups = logits.reshape(-1, group)
    groups -= groups.max(axis=1, keepdims=True)
    groups[...] = portable_exp(groups)
    groups /= groups.sum(axis=1, keepdims=True)
    return logits
