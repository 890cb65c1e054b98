"""psamask forward/backward (design doc 001, OPS.md).

The index map, for position (h, w) and mask entry (hidx, widx):
    fh = h + hidx - half_h,  fw = w + widx - half_w,  half = (mask - 1) // 2
    COLLECT:     y[n, h,  w,  fh*W + fw] = x[n, h, w, hidx*wm + widx]
    DISTRIBUTE:  y[n, fh, fw, h*W + w]   = x[n, h, w, hidx*wm + widx]
for (fh, fw) inside the map; everything else in y is 0.  Backward reads the same map
the other way.  For a fixed (hidx, widx) the map is a shift, so each of the hm*wm mask
entries moves as one strided block: a diagonal view of y pairs h with fh = h + d.
"""
from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import as_strided

COLLECT, DISTRIBUTE = 0, 1


def _valid_range(size: int, shift: int) -> tuple[int, int]:
    """Positions p in [0, size) whose target p + shift is also in [0, size)."""
    return max(0, -shift), min(size, size - shift)


def _shifted_view(y5: np.ndarray, dh: int, dw: int, h0: int, h1: int, w0: int, w1: int, psa_type: int):
    """The elements y5 pairs with source positions h in [h0,h1), w in [w0,w1) for shift (dh, dw).

    y5 is [N, H, W, H, W].  COLLECT addresses y5[n, h, w, h+dh, w+dw]; DISTRIBUTE
    addresses y5[n, h+dh, w+dw, h, w].  Either is a strided view of shape [N, h1-h0, w1-w0].
    """
    sn, s1, s2, s3, s4 = y5.strides
    if psa_type == COLLECT:
        offset = h0 * s1 + w0 * s2 + (h0 + dh) * s3 + (w0 + dw) * s4
    else:
        offset = (h0 + dh) * s1 + (w0 + dw) * s2 + h0 * s3 + w0 * s4
    base = y5.reshape(-1)[offset // y5.itemsize:] if y5.size else y5.reshape(-1)
    return as_strided(base, shape=(y5.shape[0], h1 - h0, w1 - w0), strides=(sn, s1 + s3, s2 + s4),
                      writeable=True)


def _moves(H: int, W: int, hm: int, wm: int):
    """Each mask entry (hidx, widx) with the source window it moves: (hidx, widx, dh, dw, h0, h1, w0, w1)."""
    half_h, half_w = (hm - 1) // 2, (wm - 1) // 2
    for hidx in range(hm):
        dh = hidx - half_h
        h0, h1 = _valid_range(H, dh)
        if h0 >= h1:
            continue
        for widx in range(wm):
            dw = widx - half_w
            w0, w1 = _valid_range(W, dw)
            if w0 < w1:
                yield hidx, widx, dh, dw, h0, h1, w0, w1


def _params(params):
    psa_type = int(params["psa_type"])
    if psa_type not in (COLLECT, DISTRIBUTE):
        raise ValueError(f"psa_type must be 0 or 1, got {psa_type}")
    return psa_type, int(params["h_mask"]), int(params["w_mask"])


def forward(inputs, params, compute_dtype=np.float64, out_shapes=None):
    psa_type, hm, wm = _params(params)
    x = inputs["x"]
    N, H, W, _ = x.shape
    y = np.zeros((N, H, W, H * W), dtype=compute_dtype)
    if y.size == 0:
        return {"y": y}
    x5 = x.reshape(N, H, W, hm, wm)
    y5 = y.reshape(N, H, W, H, W)
    for hidx, widx, dh, dw, h0, h1, w0, w1 in _moves(H, W, hm, wm):
        _shifted_view(y5, dh, dw, h0, h1, w0, w1, psa_type)[...] = x5[:, h0:h1, w0:w1, hidx, widx]
    return {"y": y}


def backward(inputs, params, compute_dtype=np.float64, out_shapes=None):
    psa_type, hm, wm = _params(params)
    dy = np.ascontiguousarray(inputs["dy"])
    N, H, W, _ = dy.shape
    dx = np.zeros((N, H, W, hm * wm), dtype=compute_dtype)
    if dx.size == 0 or dy.size == 0:
        return {"dx": dx}
    dx5 = dx.reshape(N, H, W, hm, wm)
    dy5 = dy.reshape(N, H, W, H, W)
    for hidx, widx, dh, dw, h0, h1, w0, w1 in _moves(H, W, hm, wm):
        dx5[:, h0:h1, w0:w1, hidx, widx] = _shifted_view(dy5, dh, dw, h0, h1, w0, w1, psa_type)
    return {"dx": dx}
