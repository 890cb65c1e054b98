"""ms_deform_attn_forward (mlu-ops design doc ms_deform_attn_forward, mmcv MultiScaleDeformableAttention).

For batch n, query q, head m and channel c (doc 3.1, the formula without the heads' projection):

    data_col[n, q, m, c] = sum over levels l, points p of
        A[n, q, m, l, p] * bilinear_l(x = loc[n, q, m, l, p, 0] * W_l - 0.5, y = loc[..., 1] * H_l - 0.5)

where level l is the H_l x W_l map data_value[n, start_l : start_l + H_l*W_l, m, c] (row-major,
start_l = data_level_start_index[l], (H_l, W_l) = data_spatial_shapes[l]).  A point with
y <= -1, x <= -1, y >= H_l or x >= W_l is skipped (its weight is never read); otherwise each of
its four neighbours (floor(y) + {0, 1}, floor(x) + {0, 1}) inside the map adds its bilinear
weight times its value, and a neighbour outside adds nothing (zero padding: grid_sample with
align_corners=False).  The doc's data limits, which no check tests: data_value.shape[1] is the
sum of H_l * W_l and the start indices are its running sums; a call that breaks them is refused
here (ValueError), since what a kernel reads then is not defined.
"""
from __future__ import annotations

import itertools

import numpy as np

from gen.kernels.ms_deform_attn import compiled
from gen.kernels.shared.reference import check_sample_points
from gen.values import softmax_groups

# Rows (n, q, m) per chunk and levels per group: their neighbour values [rows, levels, P, C] stay near this
# many elements.
_CHUNK_ELEMENTS = 1 << 20
# Up to this many levels a call's geometry is checked on Python ints (faster for a pyramid's few).
_FEW_LEVELS = 64


def level_geometry(inputs) -> tuple[np.ndarray, np.ndarray]:
    """(shapes [L, 2] int64, starts [L] int64) after checking them against data_value (ValueError)."""
    keys = inputs["data_value"].shape[1]
    shapes = np.asarray(inputs["data_spatial_shapes"], dtype=np.int64).reshape(-1, 2)
    starts = np.asarray(inputs["data_level_start_index"], dtype=np.int64).reshape(-1)
    if len(shapes) > _FEW_LEVELS:
        return _checked_in_numpy(shapes, starts, keys)
    # Checked on Python ints: a handful of levels, and a small case should not pay numpy's per-call cost.
    sizes = shapes.tolist()
    if any(h < 0 or w < 0 for h, w in sizes):
        raise ValueError("ms_deform_attn_forward: data_spatial_shapes holds a negative size")
    areas = [h * w for h, w in sizes]
    if sum(areas) != keys:
        raise ValueError(f"ms_deform_attn_forward: data_value has {keys} keys, data_spatial_shapes sums to "
                         f"{sum(areas)} (doc 1.4: they must agree)")
    if starts.shape != (len(sizes),) or starts.tolist() != list(itertools.accumulate([0] + areas))[:len(areas)]:
        raise ValueError("ms_deform_attn_forward: data_level_start_index is not the running sum of the levels' "
                         "areas (doc 1.4)")
    return shapes, starts


def _checked_in_numpy(shapes: np.ndarray, starts: np.ndarray, keys: int) -> tuple[np.ndarray, np.ndarray]:
    """level_geometry's checks, in numpy: for a call of many levels (a count case has 2^16 of them)."""
    if (shapes < 0).any():
        raise ValueError("ms_deform_attn_forward: data_spatial_shapes holds a negative size")
    areas = shapes[:, 0] * shapes[:, 1]
    if int(areas.sum()) != keys:
        raise ValueError(f"ms_deform_attn_forward: data_value has {keys} keys, data_spatial_shapes sums to "
                         f"{int(areas.sum())} (doc 1.4: they must agree)")
    if starts.shape != areas.shape or not np.array_equal(starts, np.cumsum(areas) - areas):
        raise ValueError("ms_deform_attn_forward: data_level_start_index is not the running sum of the levels' "
                         "areas (doc 1.4)")
    return shapes, starts


def corners(y: np.ndarray, x: np.ndarray, height: int, width: int):
    """The four neighbours of points (y, x) in map coordinates, in the points' dtype.

    Returns (inside, [(key, valid, weight)] * 4): inside False where the point is skipped; key the
    neighbour's row-major position in the level (0 where not valid), valid where the neighbour lies
    in the map, weight its bilinear weight (hy*hx, hy*lx, ly*hx, ly*lx: top-left, top-right,
    bottom-left, bottom-right).  A level of height or width 0 skips no point (y = -0.5 passes the
    test) but has no neighbour inside."""
    inside = (y > -1) & (x > -1) & (y < height) & (x < width)
    y = np.where(inside, y, 0)
    x = np.where(inside, x, 0)
    y_low, x_low = np.floor(y), np.floor(x)
    ly, lx = y - y_low, x - x_low
    hy, hx = 1 - ly, 1 - lx
    y_low, x_low = y_low.astype(np.int64), x_low.astype(np.int64)
    out = []
    for dy, dx, weight in ((0, 0, hy * hx), (0, 1, hy * lx), (1, 0, ly * hx), (1, 1, ly * lx)):
        row, col = y_low + dy, x_low + dx
        valid = inside & (row >= 0) & (row < height) & (col >= 0) & (col < width)
        out.append((np.where(valid, row * width + col, 0), valid, weight))
    return inside, out


def readable(value: np.ndarray) -> np.ndarray:
    """``value`` where key 0 exists: a call with no keys at all (every level empty) reads a zero key,
    never used, instead of indexing past the end."""
    return value if value.shape[1] else np.zeros(value.shape[:1] + (1,) + value.shape[2:], value.dtype)


def by_rows(inputs, out_dtype) -> tuple:
    """The call laid out by rows r = (n, q, m), data_col's order, each reading image n and head m:
    (value made readable, shapes, starts, loc [rows, L, P, 2], attn [rows, L, P], out [N, Q, M, C] of
    zeros, col: out's [rows, C] view).  value and col are None where nothing is summed (an empty
    output, no level or no point): out stays zeros."""
    value = inputs["data_value"]
    loc, attn = inputs["data_sampling_loc"], inputs["data_attn_weight"]
    N, _, M, C = value.shape
    _, Q, _, L, P, _ = loc.shape
    shapes, starts = level_geometry(inputs)
    if len(shapes) != L or attn.shape != loc.shape[:5]:
        # The spec's checks refuse such a call; a caller that skips them (a mutant's transformed call) gets
        # this line, not a compiled loop reading levels past data_spatial_shapes' end.
        raise ValueError(f"ms_deform_attn_forward: {len(shapes)} levels in data_spatial_shapes, {L} in "
                         f"data_sampling_loc, attention weights {attn.shape} for locations {loc.shape}")
    out = np.zeros((N, Q, M, C), dtype=out_dtype)
    if out.size == 0 or L == 0 or P == 0:
        return None, shapes, starts, loc, attn, out, None
    rows = N * Q * M
    return readable(value), shapes, starts, loc.reshape(rows, L, P, 2), attn.reshape(rows, L, P), out, out.reshape(rows, C)


def forward(inputs, params, compute_dtype=np.float64, out_shapes=None):
    compute_dtype = np.dtype(compute_dtype).type
    value, shapes, starts, loc, attn, out, col = by_rows(inputs, compute_dtype)
    if value is None:
        return {"data_col": out}
    N, Q, M, C = out.shape
    rows, L, P = attn.shape
    check_sample_points("ms_deform_attn_forward", float(rows) * L * P)
    if compiled.forward(value, shapes, starts, inputs["data_sampling_loc"], inputs["data_attn_weight"], out,
                        compute_dtype):
        return {"data_col": out}
    # Row r reads data_value's rows (n * K' + key) * M + m of its [N * K' * M, C] view.
    keys = value.shape[1]
    table = value.reshape(-1, C)
    row_base = np.repeat(np.arange(N) * keys * M, Q * M) + np.tile(np.arange(M), N * Q)
    # A group of levels is sampled at once ([rows, levels, P] arrays, each level's size broadcast along its
    # axis), and its terms are then added one after another, levels outer and points inner, as a loop over
    # them adds (np.add.accumulate adds in sequence): a count case's 2^16 levels or points take no Python
    # step each.
    group = max(1, min(L, _CHUNK_ELEMENTS // max(P * C, 1)))
    chunk = max(1, _CHUNK_ELEMENTS // max(group * P * C, 1))
    for first in range(0, rows, chunk):
        part = slice(first, min(first + chunk, rows))
        base = row_base[part, None, None]
        acc = col[part]
        for low in range(0, L, group):
            levels = slice(low, min(low + group, L))
            height, width = shapes[levels, 0][None, :, None], shapes[levels, 1][None, :, None]
            x = loc[part, levels, :, 0].astype(compute_dtype) * width.astype(compute_dtype) - compute_dtype(0.5)
            y = loc[part, levels, :, 1].astype(compute_dtype) * height.astype(compute_dtype) - compute_dtype(0.5)
            inside, neighbours = corners(y, x, height, width)
            sampled = np.zeros(y.shape + (C,), dtype=compute_dtype)
            start = starts[levels][None, :, None]
            for key, valid, weight in neighbours:
                values = np.take(table, base + np.where(valid, start + key, 0) * M, axis=0).astype(compute_dtype)
                with np.errstate(invalid="ignore", over="ignore"):
                    sampled += np.where(valid[..., None], weight[..., None] * values, 0)
            with np.errstate(invalid="ignore", over="ignore"):
                weighted = np.where(inside[..., None], attn[part, levels, :, None].astype(compute_dtype) * sampled, 0)
                terms = np.concatenate([acc[:, None], weighted.reshape(len(acc), -1, C)], axis=1)
                acc[...] = np.add.accumulate(terms, axis=1)[:, -1]
    return {"data_col": out}


# ---------------------------------------------------------------------------- value generators

def _split_area(rng: np.random.Generator, keys: int, levels: int) -> list[int]:
    """``levels`` positive areas summing to ``keys``."""
    if levels == 0:
        if keys:
            raise ValueError(f"levels: no level cannot hold {keys} keys")
        return []
    if keys < levels:
        raise ValueError(f"levels: {keys} keys cannot fill {levels} nonempty levels")
    cuts = np.sort(rng.choice(np.arange(1, keys), size=levels - 1, replace=False)) if levels > 1 else np.array([], int)
    return list(np.diff(np.concatenate([[0], cuts, [keys]])).astype(int))


def _factor(rng: np.random.Generator, area: int) -> tuple[int, int]:
    """A random (height, width) with height * width == area."""
    divisors = [d for d in range(1, int(area ** 0.5) + 1) if area % d == 0]
    d = int(rng.choice(divisors))
    return (d, area // d) if rng.random() < 0.5 else (area // d, d)


def levels(rng: np.random.Generator, ctx, shapes=None):
    """data_spatial_shapes and data_level_start_index drawn jointly, consistent with data_value's K keys
    (doc 1.4): the given ``shapes`` ([[H, W], ...], the network's feature pyramid; their areas must sum
    to K), else L random levels whose areas split K."""
    L = int(ctx.shapes["data_spatial_shapes"][0])
    K = int(ctx.shapes["data_value"][1])
    if shapes is not None:
        hw = np.asarray(shapes, dtype=np.int64).reshape(-1, 2)
        if len(hw) != L or int((hw[:, 0] * hw[:, 1]).sum()) != K:
            raise ValueError(f"levels: shapes {hw.tolist()} are not {L} levels of {K} keys in all")
    else:
        hw = np.array([_factor(rng, a) for a in _split_area(rng, K, L)], dtype=np.int64).reshape(-1, 2)
    starts = np.concatenate([[0], np.cumsum(hw[:, 0] * hw[:, 1])[:-1]]) if L else np.zeros(0, np.int64)
    return {"data_spatial_shapes": hw.astype(np.int32), "data_level_start_index": starts.astype(np.int32)}


def sampling_locations(rng: np.random.Generator, ctx, mode: str = "around", spread: float = 0.0):
    """Normalized (x, y) sampling locations [N, Q, M, L, P, 2] for the levels already drawn.

    ``around``: Deformable DETR's reference point in [0, 1] plus an offset of ``spread`` (normal,
    in normalized units), so some points leave the map; ``border``: each coordinate one of the
    level's critical values, y = loc * H - 0.5 in {-1, -0.5, 0, 0.5, H - 1, H - 0.5, H} and just
    inside/outside them (exact in float32 for power-of-two sizes); ``outside``: every point at
    least a pixel beyond an edge (skipped: data_col is 0); ``same_place``: every point of a case
    at one location (all outputs read the same four pixels)."""
    shape = tuple(ctx.shapes["data_sampling_loc"])
    hw = np.asarray(ctx.inputs["data_spatial_shapes"], dtype=np.float64).reshape(-1, 2)
    size = np.stack([hw[:, 1], hw[:, 0]], axis=-1)[:, None, :]       # (W, H) per level, as (x, y)
    size = np.maximum(size, 1.0)
    if mode == "around":
        loc = rng.uniform(0.0, 1.0, size=shape)
        if spread:
            loc += rng.normal(0.0, float(spread), size=shape)
        return loc
    if mode == "border":
        # In map coordinates: four values from the near edge, three from the far one (H - 1, H - 0.5, H),
        # each exactly on it or 2^-10 to either side ("just inside" and "just outside").
        near = np.array([-1.0, -0.5, 0.0, 0.5])
        far = np.array([-1.0, -0.5, 0.0])
        which = rng.integers(0, len(near) + len(far), size=shape)
        from_far = which >= len(near)
        pixel = np.where(from_far, np.broadcast_to(size, shape) + far[np.maximum(which - len(near), 0)],
                         near[np.minimum(which, len(near) - 1)])
        nudge = rng.choice([0.0, 0.0, 1.0, -1.0], size=shape) * 2.0 ** -10
        loc = (pixel + nudge + 0.5) / size
        return loc
    if mode == "outside":
        side = rng.random(shape) < 0.5
        return np.where(side, rng.uniform(-1.5, -1.0, size=shape) / size * 2,
                        1.0 + rng.uniform(1.0, 1.5, size=shape) / size * 2)
    if mode == "same_place":
        return np.broadcast_to(rng.uniform(0.2, 0.8, size=2), shape).copy()
    raise ValueError(f"sampling_locations: unknown mode {mode!r}")


def attention_weights(rng: np.random.Generator, ctx, std: float = 1.0):
    """Attention weights as Deformable DETR's linear layer and softmax make them: logits ~ N(0, std),
    softmax over the L * P points of each (n, q, m), so each row sums to 1 (doc 1.2)."""
    shape = tuple(ctx.shapes["data_attn_weight"])
    return softmax_groups(rng.normal(0.0, float(std), size=shape), shape[-2] * shape[-1])
