"""mmcv 2.2.0's ms_deformable_im2col_gpu_kernel (ms_deform_attn_cuda_kernel.cuh) in float32, bit for bit.

One thread per output element (n, q, m, c) sums, in float, over levels l and then points p:

    h_im = loc_h * spatial_h - 0.5;  w_im = loc_w * spatial_w - 0.5
    if (h_im > -1 && w_im > -1 && h_im < spatial_h && w_im < spatial_w)
      col += ms_deform_attn_im2col_bilinear(...) * weight;

with the bilinear value ``w1 * v1 + w2 * v2 + w3 * v3 + w4 * v4`` (a neighbour outside the map is
v = 0, still multiplied), lh = h_im - h_low, hh = 1 - lh and w1 = hh * hw, w2 = hh * lw, w3 = lh * hw,
w4 = lh * lw.  Where nvcc fuses a multiply and an add (--fmad=true), as gen.kernels.deform_roi_pool.mmcv_emulation
found for the same expressions in the same build:

- the bilinear sum: fma(w4, v4, fma(w3, v3, fma(w2, v2, w1 * v1)));
- the accumulation ``col += val * weight``: fma(val, weight, col);
- ``loc_h * spatial_h - 0.5``: fma(loc_h, (float)spatial_h, -0.5f) (the double 0.5 narrowed to
  float, as deform_roi_pool's ``rois * scale - 0.5`` is taken; no conformance data tells).

Each thread owns its output and nothing is shared (no atomics in the forward), so the result is
deterministic, and this emulation is exact: vectorized over (n, q, m, c), sequential over (l, p).
Only float32: the doc allows float alone (mmcv's half dispatch is outside the kernel's interface).
"""
from __future__ import annotations

import numpy as np

from gen.kernels.ms_deform_attn import compiled_mmcv
from gen.kernels.shared.mmcv_half import F32, canonical_nan, fma32
from gen.kernels.ms_deform_attn.reference import by_rows, level_geometry, readable
from gen.sampled import Units

# Rows (n, q, m) per chunk and levels per group, so that the [rows, levels, P, C] values stay near this many
# elements.
_CHUNK_ELEMENTS = 1 << 20


def ms_deform_attn_forward(inputs: dict, params: dict, out_shapes: dict | None = None) -> dict:
    value = inputs["data_value"]
    if value.dtype != np.dtype(F32):
        raise ValueError(f"ms_deform_attn_forward: the doc's kernel computes in float only, not {value.dtype}")
    value, shapes, starts, loc, attn, out, col = by_rows(inputs, F32)
    if value is None:
        return {"data_col": out}
    N, Q, M, C = out.shape
    if compiled_mmcv.thread_sums(value, shapes, starts, loc, attn, Q, col):
        return {"data_col": canonical_nan(out)}
    rows = N * Q * M
    image, head = np.repeat(np.arange(N), Q * M), np.tile(np.arange(M), N * Q)
    chunk = max(1, _CHUNK_ELEMENTS // max(loc.shape[2] * C, 1))     # a level's values [rows, P, C]
    for first in range(0, rows, chunk):
        part = slice(first, min(first + chunk, rows))
        col[part] = _thread_sums(value, shapes, starts, loc[part], attn[part], image[part], head[part])
    return {"data_col": canonical_nan(out)}


def ms_deform_attn_forward_units(inputs: dict, params: dict, out_shapes: dict | None = None) -> Units:
    """The forward by query: the threads of one (n, q), every head and channel, computed alone (gen.sampled)."""
    value, loc, attn = inputs["data_value"], inputs["data_sampling_loc"], inputs["data_attn_weight"]
    N, _, M, C = value.shape
    Q = loc.shape[1]
    shapes, starts = level_geometry(inputs)
    value = readable(value)

    def values(units):
        units = np.asarray(units, dtype=np.int64)
        n, q = units // Q, units % Q
        rows = len(units) * M
        col = _thread_sums(value, shapes, starts, loc[n, q].reshape(rows, *loc.shape[3:]),
                           attn[n, q].reshape(rows, *attn.shape[3:]), np.repeat(n, M), np.tile(np.arange(M), len(units)))
        return {"data_col": canonical_nan(col.reshape(len(units), M, C))}
    return Units(N * Q, lambda units: {"data_col": (np.asarray(units) // Q, np.asarray(units) % Q)}, values)


def _thread_sums(value, shapes, starts, loc, attn, image, head) -> np.ndarray:
    """The ``col`` of the threads of some rows (n, q, m): [rows, C] float32.

    A group of levels is sampled at once (each level's size broadcast along its axis: the same operations
    element by element), and the sums then go through its levels and points one after another."""
    C = value.shape[3]
    rows, L, P, _ = loc.shape
    col = np.zeros((rows, C), dtype=F32)
    minus_half = F32(-0.5)
    group = max(1, min(L, _CHUNK_ELEMENTS // max(rows * P * C, 1)))
    image, head = image[:, None, None], head[:, None, None]
    for low in range(0, L, group):
        levels = slice(low, min(low + group, L))
        height, width = shapes[levels, 0][None, :, None], shapes[levels, 1][None, :, None]
        h32, w32 = height.astype(F32), width.astype(F32)
        h_im = fma32(loc[:, levels, :, 1], h32, minus_half)
        w_im = fma32(loc[:, levels, :, 0], w32, minus_half)
        inside = (h_im > -1) & (w_im > -1) & (h_im < h32) & (w_im < w32)
        if not inside.any():
            continue
        val = _bilinear(value, starts[levels][None, :, None], height, width, image, head,
                        np.where(inside, h_im, F32(0)), np.where(inside, w_im, F32(0)))
        terms = inside.reshape(rows, -1)
        val, weight = val.reshape(rows, terms.shape[1], C), attn[:, levels, :].reshape(rows, -1, 1)
        for term in np.flatnonzero(terms.any(axis=0)):
            with np.errstate(invalid="ignore", over="ignore"):
                col = np.where(terms[:, term, None], fma32(val[:, term], weight[:, term], col), col)
    return col


def _bilinear(value, start, height, width, image, head, h, w) -> np.ndarray:
    """ms_deform_attn_im2col_bilinear for each point (h, w) over all channels: [..., C] float32 (start, height
    and width broadcast against the points, as image and head index data_value with them)."""
    h_low, w_low = np.floor(h), np.floor(w)
    lh, lw = h - h_low, w - w_low                       # float minus an int converted to float: exact
    hh, hw = F32(1) - lh, F32(1) - lw
    h_low, w_low = h_low.astype(np.int64), w_low.astype(np.int64)
    h_high, w_high = h_low + 1, w_low + 1

    def corner(row, column):
        valid = (row >= 0) & (row <= height - 1) & (column >= 0) & (column <= width - 1)
        keys = np.where(valid, start + row * width + column, 0)
        v = value[image, keys, head].astype(F32, copy=False)
        return np.where(valid[..., None], v, F32(0))

    with np.errstate(invalid="ignore", over="ignore"):
        val = (hh * hw)[..., None] * corner(h_low, w_low)
        val = fma32((hh * lw)[..., None], corner(h_low, w_high), val)
        val = fma32((lh * hw)[..., None], corner(h_high, w_low), val)
        return fma32((lh * lw)[..., None], corner(h_high, w_high), val)
