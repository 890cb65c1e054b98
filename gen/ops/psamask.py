"""psamask forward/backward (design doc 001, OPS.md).

The index map, for position (h, w) and mask entry (hidx, widx):
    fh = h + hidx - half_h,  fw = w + widx - half_w,  half = (mask - 1) // 2
    COLLECT:     y[n, h,  w,  fh*W + fw] = x[n, h, w, hidx*wm + widx]
    DISTRIBUTE:  y[n, fh, fw, h*W + w]   = x[n, h, w, hidx*wm + widx]
for (fh, fw) inside the map; everything else in y is 0.  Backward reads the same map
the other way.

Per position (h, w) the valid mask entries form one rectangle, and so do their targets:
each position moves as one 2-D block copy (the H*W channel row of y seen as an H x W
image).  COLLECT writes its block into y[n, h, w]; DISTRIBUTE is the same map read
through y's other pair of axes, a strided view.  Positions are looped over, never elements.

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


def _blocks(H: int, W: int, hm: int, wm: int):
    """Per position (h, w): the mask rows/cols that land inside the map and the map rows/cols they land on."""
    half_h, half_w = (hm - 1) // 2, (wm - 1) // 2
    for h in range(H):
        hidx0, hidx1 = max(0, half_h - h), min(hm, H + half_h - h)
        if hidx0 >= hidx1:
            continue
        mask_rows = slice(hidx0, hidx1)
        map_rows = slice(h + hidx0 - half_h, h + hidx1 - half_h)
        for w in range(W):
            widx0, widx1 = max(0, half_w - w), min(wm, W + half_w - w)
            if widx0 < widx1:
                yield h, w, mask_rows, slice(widx0, widx1), map_rows, slice(w + widx0 - half_w, w + widx1 - half_w)


def forward(inputs, params, compute_dtype=np.float64, out_shapes=None):
    psa_type, hm, wm = _params(params)
    x = inputs["x"]
    N, H, W, _ = x.shape
    y = np.zeros((N, H, W, H * W), dtype=exact_dtype(x, compute_dtype))
    if y.size == 0:
        return {"y": y}
    x5 = x.reshape(N, H, W, hm, wm)
    y5 = y.reshape(N, H, W, H, W)
    for h, w, mrows, mcols, frows, fcols in _blocks(H, W, hm, wm):
        if psa_type == COLLECT:
            y5[:, h, w, frows, fcols] = x5[:, h, w, mrows, mcols]
        else:
            y5[:, frows, fcols, h, w] = x5[:, h, w, mrows, mcols]
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
    for h, w, mrows, mcols, frows, fcols in _blocks(H, W, hm, wm):
        if psa_type == COLLECT:
            dx5[:, h, w, mrows, mcols] = dy5[:, h, w, frows, fcols]
        else:
            dx5[:, h, w, mrows, mcols] = dy5[:, frows, fcols, h, w]
    return {"dx": dx}
