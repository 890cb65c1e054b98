"""masked_im2col forward (mmcv MaskedIm2colForward, NCHW)."""
from __future__ import annotations

import torch

from gen.kernels.shared.torch_common import as_tensor, check_rank, int_param, require


def forward(feature, mask_h_idx, mask_w_idx, kernel_h, kernel_w, pad_h, pad_w):
    """feature [1,C,H,W] -> data_col [C*kh*kw, M]; zero where the tap leaves the map."""
    check_rank("feature", feature, 4)
    require(feature.shape[0] == 1, f"feature batch must be 1, got {feature.shape[0]}")
    require(mask_h_idx.dim() == 1 and mask_w_idx.dim() == 1
             and mask_h_idx.shape == mask_w_idx.shape,
             f"mask_h_idx {tuple(mask_h_idx.shape)} and mask_w_idx {tuple(mask_w_idx.shape)}"
             " must be 1-D of equal length")
    require(kernel_h >= 0 and kernel_w >= 0, "kernel_h and kernel_w must not be negative")
    _, channels, height, width = feature.shape
    count = mask_h_idx.shape[0]
    data_col = feature.new_zeros(channels, kernel_h, kernel_w, count)
    if height == 0 or width == 0 or count == 0:
        return data_col.reshape(channels * kernel_h * kernel_w, count)
    image = feature[0]
    zero = torch.zeros((), dtype=feature.dtype, device=feature.device)
    for i in range(kernel_h):
        rows = mask_h_idx.long() - pad_h + i
        for j in range(kernel_w):
            cols = mask_w_idx.long() - pad_w + j
            inside = (rows >= 0) & (rows < height) & (cols >= 0) & (cols < width)
            # Pure data movement: select, never multiply, so nan/inf pass through untouched.
            values = image[:, rows.clamp(0, height - 1), cols.clamp(0, width - 1)]
            data_col[:, i, j] = torch.where(inside, values, zero)
    return data_col.reshape(channels * kernel_h * kernel_w, count)


def masked_im2col_forward(inputs, params, out_shapes, device):
    # Pure data movement: keep the feature's own dtype.
    data_col = forward(as_tensor(inputs, "feature", device), as_tensor(inputs, "mask_h_idx", device),
                       as_tensor(inputs, "mask_w_idx", device), int_param(params, "kernel_h"),
                       int_param(params, "kernel_w"), int_param(params, "pad_h"), int_param(params, "pad_w"))
    return {"data_col": data_col}
