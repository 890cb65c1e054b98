"""three_nn forward (mmcv three_nn_forward_cuda_kernel, layouts [B, N, 3] / [B, M, 3] as mmcv's).

mmcv scans known in index order per unknown point and lets a point into the first slot it is
strictly nearer than; here every distance of a block of unknown points at once, then three
minima taken in turn: torch.argmin gives the first of equal minima, which is that scan's order
among equal distances.  A distance that is NaN or not below 1e40 (mmcv's starting best) never
enters: its slot keeps inf and index 0.
"""
from __future__ import annotations

import torch

from gen.kernels.shared.torch_common import as_tensor, check_rank, compute_dtype, require

NEIGHBOURS = 3
_BLOCK_ELEMENTS = 1 << 21        # distances computed at once


def forward(unknown, known):
    """unknown [B, N, 3], known [B, M, 3] -> dist2 [B, N, 3] (unknown's dtype), idx [B, N, 3] int32."""
    check_rank("unknown", unknown, 3)
    check_rank("known", known, 3)
    require(unknown.shape[2] == 3 and known.shape[2] == 3,
            f"unknown {tuple(unknown.shape)} and known {tuple(known.shape)} must hold (x, y, z) points")
    require(known.shape[0] == unknown.shape[0], f"known has {known.shape[0]} batches, unknown {unknown.shape[0]}")
    require(unknown.numel() > 0, "unknown must not be empty")
    batches, points = unknown.shape[:2]
    dist2 = torch.full((batches, points, NEIGHBOURS), float("inf"), dtype=unknown.dtype, device=unknown.device)
    idx = torch.zeros((batches, points, NEIGHBOURS), dtype=torch.int32, device=unknown.device)
    if known.shape[1] == 0:
        return dist2, idx
    rows = max(1, _BLOCK_ELEMENTS // (batches * known.shape[1]))
    for start in range(0, points, rows):
        block = slice(start, start + rows)
        diff = unknown[:, block, None, :] - known[:, None, :, :]                 # [B, rows, M, 3]
        square = diff * diff
        d = (square[..., 0] + square[..., 1]) + square[..., 2]
        d = torch.where(d.double() < 1e40, d, torch.full_like(d, float("inf")))  # NaN compares false too
        for slot in range(NEIGHBOURS):
            first = torch.argmin(d, dim=-1, keepdim=True)
            value = torch.gather(d, -1, first)
            found = torch.isfinite(value)
            dist2[:, block, slot] = value[..., 0]
            idx[:, block, slot] = torch.where(found, first, torch.zeros_like(first))[..., 0].to(torch.int32)
            d.scatter_(-1, first, float("inf"))
    return dist2, idx


def three_nn_forward(inputs, params, out_shapes, device):
    dtype = compute_dtype(inputs, "unknown")
    require(inputs.get("known") is not None and inputs["known"].dtype == inputs["unknown"].dtype,
            "known must have unknown's dtype")
    unknown = as_tensor(inputs, "unknown", device, dtype)
    known = as_tensor(inputs, "known", device, dtype)
    for name in ("dist2", "idx"):
        require(tuple(out_shapes.get(name, ())) == tuple(unknown.shape[:2]) + (NEIGHBOURS,),
                f"{name} must be [B, N, 3] for unknown {tuple(unknown.shape)}")
    dist2, idx = forward(unknown, known)
    return {"dist2": dist2, "idx": idx}
