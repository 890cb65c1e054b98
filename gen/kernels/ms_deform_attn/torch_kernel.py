"""ms_deform_attn_forward after mmcv's multi_scale_deformable_attn_pytorch: each level's map sampled with
F.grid_sample (bilinear, zero padding, align_corners=False: the kernel's loc * size - 0.5), weighted by the
attention weights and summed over levels and points.  Unlike mmcv's pytorch version, which drops the
kernel's skip test, a point more than a pixel outside its level contributes nothing even where its weight
is nan or inf (the CUDA kernel never reads it), and the level starts are data_level_start_index's, not
running sums of the shapes."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from gen.kernels.shared.torch_common import as_tensor, check_rank, compute_dtype, require


def ms_deform_attn_forward(inputs, params, out_shapes, device):
    dtype = compute_dtype(inputs, "data_value")
    value = as_tensor(inputs, "data_value", device, dtype)
    loc = as_tensor(inputs, "data_sampling_loc", device, dtype)
    attn = as_tensor(inputs, "data_attn_weight", device, dtype)
    shapes = as_tensor(inputs, "data_spatial_shapes", device).long()
    starts = as_tensor(inputs, "data_level_start_index", device).long()
    check_rank("data_value", value, 4)
    check_rank("data_sampling_loc", loc, 6)
    N, K, M, C = value.shape
    _, Q, _, L, P, _ = loc.shape
    require(tuple(shapes.shape) == (L, 2) and tuple(starts.shape) == (L,),
            "data_spatial_shapes must be [L, 2] and data_level_start_index [L]")
    out = value.new_zeros(N * M, C, Q)
    for level in range(L):
        height, width, start = int(shapes[level, 0]), int(shapes[level, 1]), int(starts[level])
        if height * width == 0:
            continue           # no neighbour inside: finite weights add nothing
        require(0 <= start and start + height * width <= K, f"level {level} lies outside data_value's {K} keys")
        # [N, H*W, M, C] -> [N*M, C, H, W]
        level_map = value[:, start:start + height * width].permute(0, 2, 3, 1).reshape(N * M, C, height, width)
        # [N, Q, M, P, 2] -> [N*M, Q, P, 2], in grid_sample's [-1, 1]
        points = loc[:, :, :, level].permute(0, 2, 1, 3, 4).reshape(N * M, Q, P, 2)
        sampled = F.grid_sample(level_map, 2 * points - 1, mode="bilinear", padding_mode="zeros",
                                align_corners=False)                       # [N*M, C, Q, P]
        x = points[..., 0] * width - 0.5
        y = points[..., 1] * height - 0.5
        inside = (y > -1) & (x > -1) & (y < height) & (x < width)          # [N*M, Q, P]
        weights = attn[:, :, :, level].permute(0, 2, 1, 3).reshape(N * M, 1, Q, P)
        weighted = torch.where(inside[:, None], sampled * weights, torch.zeros((), dtype=dtype, device=device))
        out += weighted.sum(dim=-1)
    return {"data_col": out.reshape(N, M, C, Q).permute(0, 3, 1, 2).contiguous()}
