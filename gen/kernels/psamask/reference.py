"""psamask forward/backward (design doc 001; README.md beside this file).

The index map, for position (h, w) and mask entry (hidx, widx):
    fh = h + hidx - half_h,  fw = w + widx - half_w,  half = (mask - 1) // 2
    COLLECT:     y[n, h,  w,  fh*W + fw] = x[n, h, w, hidx*wm + widx]
    DISTRIBUTE:  y[n, fh, fw, h*W + w]   = x[n, h, w, hidx*wm + widx]
for (fh, fw) inside the map; everything else in y is 0.  Backward reads the same map
the other way.

Per position (h, w) the valid mask entries form one rectangle, and so do their targets:
each position moves as one 2-D block copy (the H*W channel row of y seen as an H x W
image).  Positions are looped over, never elements.  COLLECT writes each block into
y[n, h, w]; DISTRIBUTE is COLLECT's (H*W) x (H*W) matrix transposed, which it does one map
row at a time through a cache-sized scratch (a transpose read straight through y's other
pair of axes touches a new cache line per element: 2-3x slower at network scale).

The kernel only moves values, so the result is exact in the input's own dtype: the
reference keeps that dtype unless ``compute_dtype`` is narrower, which halves the memory
traffic of a float64 golden at network scale without changing a single value.
"""
from __future__ import annotations

import numpy as np

from gen.kernels.psamask import compiled
from gen.kernels.shared.reference import exact_dtype

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


def _distribute_steps(N: int, H: int, W: int, hm: int, dtype):
    """DISTRIBUTE works one (image n, map row h) at a time through a scratch rows[fh, fw, w]:
    position (h, w)'s window lands in column w, and rows[fh] is then what y[n, fh, :, h, :]
    holds, whole W-rows.  Yields (n, h, mask rows, map rows, rows).

    The scratch starts zeroed, and column w is only ever written in w's own window columns,
    so what lies outside every window stays 0.  Its rows are padded off the power-of-two
    lengths a map's W often has: the column writes go down rows 2**k bytes apart otherwise,
    which share one cache set (measured: 2.3x slower at cityscapes' 64 x 128 map)."""
    rows = np.zeros((H, W, W + 16), dtype)[..., :W]
    for n in range(N):
        for h, mrows, frows in _row_windows(H, hm):
            yield n, h, mrows, frows, rows


def forward(inputs, params, compute_dtype=np.float64, out_shapes=None):
    psa_type, hm, wm = _params(params)
    x = inputs["x"]
    N, H, W, _ = x.shape
    y = np.zeros((N, H, W, H * W), dtype=exact_dtype(x, compute_dtype))
    if y.size == 0:
        return {"y": y}
    move = compiled.collect if psa_type == COLLECT else compiled.distribute
    if move(x.astype(y.dtype, copy=False), y, hm, wm, backward=False):
        return {"y": y}
    x5 = x.reshape(N, H, W, hm, wm)
    y5 = y.reshape(N, H, W, H, W)
    if psa_type == COLLECT:
        for h, w, mrows, mcols, frows, fcols in _position_windows(H, W, hm, wm):
            y5[:, h, w, frows, fcols] = x5[:, h, w, mrows, mcols]
        return {"y": y}
    # DISTRIBUTE is COLLECT's (H*W) x (H*W) matrix transposed: the transpose happens in the
    # cache-sized scratch, and y is written in whole W-rows.  Transposing straight into y
    # would write down rows H*W apart, which share one cache set (2-3x slower at network scale).
    columns = list(_row_windows(W, wm))
    for n, h, mrows, frows, rows in _distribute_steps(N, H, W, hm, y.dtype):
        for w, mcols, fcols in columns:
            rows[frows, fcols, w] = x5[n, h, w, mrows, mcols]
        y5[n, frows, :, h, :] = rows[frows]
    return {"y": y}


def backward(inputs, params, compute_dtype=np.float64, out_shapes=None):
    psa_type, hm, wm = _params(params)
    dy = inputs["dy"]
    N, H, W, _ = dy.shape
    dx = np.zeros((N, H, W, hm * wm), dtype=exact_dtype(dy, compute_dtype))
    if dx.size == 0 or dy.size == 0:
        return {"dx": dx}
    move = compiled.collect if psa_type == COLLECT else compiled.distribute
    if move(dy.astype(dx.dtype, copy=False), dx, hm, wm, backward=True):
        return {"dx": dx}
    dx5 = dx.reshape(N, H, W, hm, wm)
    dy5 = dy.reshape(N, H, W, H, W)
    if psa_type == COLLECT:
        for h, w, mrows, mcols, frows, fcols in _position_windows(H, W, hm, wm):
            dx5[:, h, w, mrows, mcols] = dy5[:, h, w, frows, fcols]
        return {"dx": dx}
    # Forward's DISTRIBUTE run backwards: read whole W-rows dy[fh, :, h, :] into the scratch,
    # then cut each position's window out of its column.
    columns = list(_row_windows(W, wm))
    for n, h, mrows, frows, rows in _distribute_steps(N, H, W, hm, dx.dtype):
        rows[frows] = dy5[n, frows, :, h, :]
        for w, mcols, fcols in columns:
            dx5[n, h, w, mrows, mcols] = rows[frows, fcols, w]
    return {"dx": dx}
