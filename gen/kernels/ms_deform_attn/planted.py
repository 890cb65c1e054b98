"""ms_deform_attn_forward: an independent copy of the kernel (written from the design doc's steps 3-5,
not from the reference), a level and a point at a time over every (n, q, m) row, with knobs that plant one
realistic bug each."""
from __future__ import annotations

import numpy as np

from gen.kernels.shared.planted_fast_path import fast_path, on_inputs
from gen.kernels.shared.planted_counts import counted_in_uint16, keys_bounded_in_uint16

_DTYPES = {"float64": np.float64, "float32": np.float32, "float16": np.float16}


# Rows (n, q, m) per chunk: their samples [rows, L, P, C] stay near this many elements.
_CHUNK_ELEMENTS = 1 << 20


def ms_deform_attn(value, shapes, starts, loc, attn, *, level_offset=True, hw=(0, 1), xy=(0, 1), half=0.5,
                   last_row=True, edge_band=True, weight_per_level=False, head_offset=True, acc="float64"):
    """data_col [N, Q, M, C].

    Bugs: level_offset False reads every level from key 0; hw (1, 0) takes data_spatial_shapes as
    (w, h); xy (1, 0) takes the locations as (y, x); half 0 drops the -0.5 of the half-pixel centres;
    last_row False drops the neighbours on the last row (``h_high < height - 1``); edge_band False skips
    the points within a pixel outside the map (``y >= 0`` for ``y > -1``) and their inside neighbours;
    weight_per_level reads one weight per level (the weight pointer moves by level, not by point);
    head_offset False reads head 0's channels for every head; acc "float32" computes and accumulates in
    float32, "float16" samples in float32 and accumulates data_col in half.

    Every (level, point) of a row is sampled at once, and the samples are then added to data_col one
    after another, levels outer and points inner (np.add.accumulate adds in sequence): the arithmetic of
    a level and a point at a time, without a Python step per point (a count case has 2^16 of them).
    """
    dtype = np.float64 if acc == "float64" else np.float32
    acc_dtype = _DTYPES[acc]
    N, K, M, C = value.shape
    _, Q, _, L, P, _ = loc.shape
    rows = N * Q * M
    col = np.zeros((rows, C), dtype=acc_dtype)
    if col.size == 0 or L == 0 or P == 0 or K == 0:
        return col.reshape(N, Q, M, C)
    value = value.astype(dtype)
    loc = loc.reshape(rows, L, P, 2).astype(dtype)
    attn = attn.reshape(rows, L, P).astype(dtype)
    n = np.repeat(np.arange(N), Q * M)[:, None, None]
    m = (np.tile(np.arange(M), N * Q) if head_offset else np.zeros(rows, dtype=int))[:, None, None]
    # Per level, broadcast over rows and points: [1, L, 1].
    height = np.asarray(shapes[:, hw[0]], dtype=np.int64)[None, :, None]
    width = np.asarray(shapes[:, hw[1]], dtype=np.int64)[None, :, None]
    start = (np.asarray(starts, dtype=np.int64) if level_offset else np.zeros(L, dtype=np.int64))[None, :, None]
    last = height - 1 if last_row else height - 2
    low = dtype(-1) if edge_band else dtype(0)
    chunk = max(1, _CHUNK_ELEMENTS // (L * P * C))
    for first in range(0, rows, chunk):
        part = slice(first, min(first + chunk, rows))
        w = loc[part, :, :, xy[0]] * width.astype(dtype) - dtype(half)
        h = loc[part, :, :, xy[1]] * height.astype(dtype) - dtype(half)
        take = (h > low) & (w > low) & (h < height) & (w < width)
        h0, w0 = np.floor(np.where(take, h, 0)), np.floor(np.where(take, w, 0))
        lh, lw = np.where(take, h, 0) - h0, np.where(take, w, 0) - w0
        sample = np.zeros(take.shape + (C,), dtype=dtype)
        for dy, dx, weight in ((0, 0, (1 - lh) * (1 - lw)), (0, 1, (1 - lh) * lw),
                               (1, 0, lh * (1 - lw)), (1, 1, lh * lw)):
            r, c = h0.astype(np.int64) + dy, w0.astype(np.int64) + dx
            ok = take & (r >= 0) & (r <= last) & (c >= 0) & (c <= width - 1)
            key = np.clip(start + r * width + c, 0, K - 1)
            with np.errstate(invalid="ignore", over="ignore"):
                sample += np.where(ok[..., None], weight[..., None].astype(dtype) * value[n[part], key, m[part]], 0)
        a = attn[part, :, :1] if weight_per_level else attn[part]
        with np.errstate(invalid="ignore", over="ignore"):
            added = np.where(take[..., None], a[..., None] * sample, 0).astype(acc_dtype)
            terms = np.concatenate([col[part, None], added.reshape(len(added), L * P, C)], axis=1)
            col[part] = np.add.accumulate(terms, axis=1)[:, -1]
    return col.reshape(N, Q, M, C)


def ms_deform_attn_compute(**bug):
    def compute(request):
        i = request.inputs
        shapes = np.asarray(i["data_spatial_shapes"], dtype=np.int64).reshape(-1, 2)
        starts = np.asarray(i["data_level_start_index"], dtype=np.int64).reshape(-1)
        out = ms_deform_attn(i["data_value"], shapes, starts, i["data_sampling_loc"], i["data_attn_weight"], **bug)
        return {"data_col": out}
    return compute


CORRECT = {"ms_deform_attn_forward": ms_deform_attn_compute()}


def _one_point_per_head(request) -> bool:
    return request.inputs["data_attn_weight"].shape[-2:] == (1, 1)


def _weights_of_one(request) -> dict:
    # One level, one point: a softmax over it is 1, so the fast path leaves the multiply out.
    return {"data_attn_weight": np.ones_like(request.inputs["data_attn_weight"])}

PLANTED = {
    "ms_deform_attn_forward": {
        "level_start_ignored": ms_deform_attn_compute(level_offset=False),
        "spatial_shapes_hw_swapped": ms_deform_attn_compute(hw=(1, 0)),
        "locations_xy_swapped": ms_deform_attn_compute(xy=(1, 0)),
        "no_half_pixel_offset": ms_deform_attn_compute(half=0.0),
        "last_row_off_by_one": ms_deform_attn_compute(last_row=False),
        "edge_band_skipped": ms_deform_attn_compute(edge_band=False),
        "attn_weight_once_per_level": ms_deform_attn_compute(weight_per_level=True),
        "head_offset_missing": ms_deform_attn_compute(head_offset=False),
        "half_accumulation": ms_deform_attn_compute(acc="float16"),
        "one_point_skips_weight": fast_path(ms_deform_attn_compute(), on_inputs(ms_deform_attn_compute(), _weights_of_one),
                                            _one_point_per_head),
        # num_query, num_levels, num_points and num_keys counted in 16 bits: only the first Q mod 2^16
        # queries are computed, over the first L mod 2^16 levels and P mod 2^16 points of each, and the
        # bounds check of a sample against the keys lets only the first K mod 2^16 be read.
        "counts_in_uint16": counted_in_uint16(counted_in_uint16(counted_in_uint16(
            keys_bounded_in_uint16(ms_deform_attn_compute(), "data_value", 1),
            {"data_sampling_loc": 4, "data_attn_weight": 4}, {}),
            {"data_spatial_shapes": 0, "data_level_start_index": 0, "data_sampling_loc": 3, "data_attn_weight": 3}, {}),
            {"data_sampling_loc": 1, "data_attn_weight": 1}, {"data_col": 1}),
    },
}

CONTROLS = {
    "ms_deform_attn_forward": {"float32_points_in_sequence": ms_deform_attn_compute(acc="float32")},
}
