"""psamask forward/backward (design doc 001, OPS.md).

The index map, for position (h, w) and mask entry (hidx, widx):
    fh = h + hidx - half_h,  fw = w + widx - half_w,  half = (mask - 1) // 2
    COLLECT:     y[n, h,  w,  fh*W + fw] = x[n, h, w, hidx*wm + widx]
    DISTRIBUTE:  y[n, fh, fw, h*W + w]   = x[n, h, w, hidx*wm + widx]
for (fh, fw) inside the map; everything else in y is 0.  Backward reads the same map
the other way.

Per position (h, w) the valid mask entries form one rectangle, and so do their targets:
each position moves as one 2-D block copy (the H*W channel row of y seen as an H x W
image).  Positions are looped over, never elements.  COLLECT writes each block into
y[n, h, w]; DISTRIBUTE is COLLECT's (H*W) x (H*W) matrix transposed, which it does one
W x W tile at a time through a cache-sized scratch (a transpose read straight through y's
other pair of axes touches a new cache line per element: 3x slower at network scale).

The kernel only moves values, so the result is exact in the input's own dtype: the
reference keeps that dtype unless ``compute_dtype`` is narrower, which halves the memory
traffic of a float64 golden at network scale without changing a single value.
"""
from __future__ import annotations

import numpy as np

from gen.ops import exact_dtype

COLLECT, DISTRIBUTE = 0, 1


def _params(params):
    psa_type = int(params["psa_type"])
    if psa_type not in (COLLECT, DISTRIBUTE):
        raise ValueError(f"psa_type must be 0 or 1, got {psa_type}")
    return psa_type, int(params["h_mask"]), int(params["w_mask"])


def _row_windows(H: int, hm: int):
    """Per map row h (or column, with W and wm): the mask rows that land inside the map and the map rows they land on."""
    half = (hm - 1) // 2
    for h in range(H):
        lo, hi = max(0, half - h), min(hm, H + half - h)
        if lo < hi:
            yield h, slice(lo, hi), slice(h + lo - half, h + hi - half)


def _position_windows(H: int, W: int, hm: int, wm: int):
    """Per position (h, w): (h, w, mask rows, mask cols, map rows, map cols) of its window."""
    columns = list(_row_windows(W, wm))
    for h, mrows, frows in _row_windows(H, hm):
        for w, mcols, fcols in columns:
            yield h, w, mrows, mcols, frows, fcols


def _scratch(shape, dtype) -> np.ndarray:
    """A zeroed array whose rows are padded off the power-of-two strides a map's H*W or W often
    has: the DISTRIBUTE transposes read or write down its columns, and rows 2**k bytes apart
    share one cache set (measured: 2.3x slower at cityscapes' 64 x 128 map)."""
    *rows, width = shape
    return np.zeros((*rows, width + 32), dtype)[..., :width]


def _distribute_steps(N: int, H: int, W: int, hm: int, dtype):
    """DISTRIBUTE works one (image n, map row h) at a time through two padded scratches:
    z[w, fh, fw], the COLLECT rows of h's W positions, and rows[fh, fw, w], the same transposed,
    whose W-rows are what y[n, fh, fw, h, :] holds.  Yields (n, h, mask rows, map rows, z, rows)."""
    z = _scratch((W, H * W), dtype).reshape(W, H, W)
    rows = _scratch((H, W, W), dtype)
    for n in range(N):
        for h, mrows, frows in _row_windows(H, hm):
            yield n, h, mrows, frows, z, rows


def forward(inputs, params, compute_dtype=np.float64, out_shapes=None):
    psa_type, hm, wm = _params(params)
    x = inputs["x"]
    N, H, W, _ = x.shape
    y = np.zeros((N, H, W, H * W), dtype=exact_dtype(x, compute_dtype))
    if y.size == 0:
        return {"y": y}
    x5 = x.reshape(N, H, W, hm, wm)
    y5 = y.reshape(N, H, W, H, W)
    if psa_type == COLLECT:
        for h, w, mrows, mcols, frows, fcols in _position_windows(H, W, hm, wm):
            y5[:, h, w, frows, fcols] = x5[:, h, w, mrows, mcols]
        return {"y": y}
    # DISTRIBUTE is COLLECT's (H*W) x (H*W) matrix transposed: collect, transpose in the
    # scratch, write whole W-rows.  Transposing straight into y would write down rows H*W
    # apart, which share one cache set (2-3x slower at network scale).
    columns = list(_row_windows(W, wm))
    for n, h, mrows, frows, z, rows in _distribute_steps(N, H, W, hm, y.dtype):
        # z[w] is only ever written in w's own window columns, so the rest stays 0 from the start.
        for w, mcols, fcols in columns:
            z[w, frows, fcols] = x5[n, h, w, mrows, mcols]
        for fh in range(frows.start, frows.stop):
            np.copyto(rows[fh], z[:, fh, :].T)
        y5[n, frows, :, h, :] = rows[frows]
    return {"y": y}


def backward(inputs, params, compute_dtype=np.float64, out_shapes=None):
    psa_type, hm, wm = _params(params)
    dy = inputs["dy"]
    N, H, W, _ = dy.shape
    dx = np.zeros((N, H, W, hm * wm), dtype=exact_dtype(dy, compute_dtype))
    if dx.size == 0 or dy.size == 0:
        return {"dx": dx}
    dx5 = dx.reshape(N, H, W, hm, wm)
    dy5 = dy.reshape(N, H, W, H, W)
    if psa_type == COLLECT:
        for h, w, mrows, mcols, frows, fcols in _position_windows(H, W, hm, wm):
            dx5[:, h, w, mrows, mcols] = dy5[:, h, w, frows, fcols]
        return {"dx": dx}
    # Forward's DISTRIBUTE run backwards: read whole W-rows dy[fh, :, h, :], transpose in the
    # scratch, cut each position's window out of z.
    columns = list(_row_windows(W, wm))
    for n, h, mrows, frows, z, rows in _distribute_steps(N, H, W, hm, dx.dtype):
        rows[frows] = dy5[n, frows, :, h, :]
        for fh in range(frows.start, frows.stop):
            np.copyto(z[:, fh, :], rows[fh].T)
        for w, mcols, fcols in columns:
            dx5[n, h, w, mrows, mcols] = z[w, frows, fcols]
    return {"dx": dx}
