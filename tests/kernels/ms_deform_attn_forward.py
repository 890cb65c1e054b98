"""ms_deform_attn_forward's record: the slow oracle of the design doc's formula (3.1, steps 3-5), one output
element, level and point at a time, in plain float64."""
from __future__ import annotations

import math

import numpy as np

OP = "ms_deform_attn_forward"
CONFORMANCE = ["mlu-ops/ms_deform_attn_forward/case_0.prototxt"]
# The smallest network case with more units (900 queries) than gen.sampled takes first: its mmcv estimate
# is checked against the whole computation (tests/test_thresholds_policy.py).
SAMPLED_NETWORK_CASE = "single_scale_decoder-float32"


def _bilinear(read, h, w, height, width):
    """Doc 3.1 step 4: the four neighbours (floor + 0/1 per axis) with weights hh*hw, hh*lw, lh*hw, lh*lw;
    a neighbour outside the map reads 0 and adds nothing."""
    h_low, w_low = math.floor(h), math.floor(w)
    lh, lw = h - h_low, w - w_low
    total = 0.0
    for row, col, weight in ((h_low, w_low, (1 - lh) * (1 - lw)), (h_low, w_low + 1, (1 - lh) * lw),
                             (h_low + 1, w_low, lh * (1 - lw)), (h_low + 1, w_low + 1, lh * lw)):
        if 0 <= row <= height - 1 and 0 <= col <= width - 1:
            total += weight * read(row, col)
    return total


def oracle(inputs, params, out_shapes=None):
    value, shapes = inputs["data_value"], inputs["data_spatial_shapes"]
    starts, loc, attn = inputs["data_level_start_index"], inputs["data_sampling_loc"], inputs["data_attn_weight"]
    N, _, M, C = value.shape
    _, Q, _, L, P, _ = loc.shape
    out = np.zeros((N, Q, M, C))
    for n in range(N):
        for q in range(Q):
            for m in range(M):
                for c in range(C):
                    total = 0.0
                    for level in range(L):
                        height, width, start = int(shapes[level][0]), int(shapes[level][1]), int(starts[level])
                        for p in range(P):
                            # Doc 3.1 step 3: normalized (x, y) to map coordinates, half-pixel centres.
                            w = float(loc[n, q, m, level, p, 0]) * width - 0.5
                            h = float(loc[n, q, m, level, p, 1]) * height - 0.5
                            if not (h > -1 and w > -1 and h < height and w < width):
                                continue      # no neighbour can be inside: the point is skipped
                            read = lambda row, col: float(value[n, start + row * width + col, m, c])  # noqa: E731
                            total += float(attn[n, q, m, level, p]) * _bilinear(read, h, w, height, width)
                    out[n, q, m, c] = total
    return {"data_col": out}
