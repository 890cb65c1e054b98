"""Drawing input values from a spec's distributions."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gen.spec import resolve_callable
from harness.casefile import drop_pages


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
    for start in range(0, flat.size, DRAW_CHUNK):
        stop = min(start + DRAW_CHUNK, flat.size)
        flat[start:stop] = draw_chunk(stop - start)
        drop_pages(values, stop, start)
    return values


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
        produced = {name: _plain(rng, dist, allocate(shape, dtype))}
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
