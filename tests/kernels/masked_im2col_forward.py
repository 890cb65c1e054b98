"""masked_im2col_forward's record: the slow oracle of doc 004, 3.2 (the CUDA loop it quotes)."""
from __future__ import annotations

import numpy as np

OP = "masked_im2col_forward"
CONFORMANCE = ["mlu-ops/masked_im2col_forward/case_0.prototxt", "mlu-ops/masked_im2col_forward/case_1.prototxt",
               "mlu-ops/masked_im2col_forward/case_2.prototxt"]


def oracle(inputs, params, out_shapes=None):
    """Column m holds the kernel_h x kernel_w window (top-left at mask point m minus the padding)
    of every channel; positions outside the map are 0."""
    feature, mask_h, mask_w = inputs["feature"], inputs["mask_h_idx"], inputs["mask_w_idx"]
    kh, kw, ph, pw = params["kernel_h"], params["kernel_w"], params["pad_h"], params["pad_w"]
    _, C, H, W = feature.shape
    cols = np.zeros((C * kh * kw, len(mask_h)))
    for m in range(len(mask_h)):
        for c in range(C):
            for i in range(kh):
                for j in range(kw):
                    row, col = int(mask_h[m]) - ph + i, int(mask_w[m]) - pw + j
                    if 0 <= row < H and 0 <= col < W:
                        cols[(c * kh + i) * kw + j, m] = float(feature[0, c, row, col])
    return {"data_col": cols}
