"""psamask forward and backward (mmcv psamask_{collect,distribute}_{forward,backward}_cuda, NCHW)."""
from __future__ import annotations

import torch

from gen.kernels.shared.torch_common import (as_tensor, check_rank, compute_dtype, int_param, nchw_to_nhwc,
                                                  nhwc_to_nchw, require)

PSA_COLLECT = 0
PSA_DISTRIBUTE = 1

# psamask has no half kernel in the docs (float only).
DTYPES = {"psamask_forward": ("float32", "float64"), "psamask_backward": ("float32", "float64")}


def _psamask_collect_source_channel(height, width, h_mask, w_mask, device):
    """For mmcv's COLLECT output out[n, t, p] (t = fh*W+fw, p = h*W+w): which mask channel
    q = hidx*w_mask+widx of the input x[n, q, p] lands there, and whether any does."""
    half_h, half_w = (h_mask - 1) // 2, (w_mask - 1) // 2
    pos = torch.arange(height * width, device=device)
    target_h, target_w = (pos // width)[:, None], (pos % width)[:, None]  # t along dim 0
    source_h, source_w = (pos // width)[None, :], (pos % width)[None, :]  # p along dim 1
    hidx = target_h - source_h + half_h
    widx = target_w - source_w + half_w
    valid = (hidx >= 0) & (hidx < h_mask) & (widx >= 0) & (widx < w_mask)
    channel = torch.where(valid, hidx * w_mask + widx, 0)
    return channel, valid


def _psamask_collect_target_channel(height, width, h_mask, w_mask, device):
    """For the input x[n, q, p]: which COLLECT output channel t it is copied to, and whether
    that target lies inside the map (the index map of the backward kernels)."""
    half_h, half_w = (h_mask - 1) // 2, (w_mask - 1) // 2
    q = torch.arange(h_mask * w_mask, device=device)
    pos = torch.arange(height * width, device=device)
    fh = (q // w_mask)[:, None] + (pos // width)[None, :] - half_h
    fw = (q % w_mask)[:, None] + (pos % width)[None, :] - half_w
    valid = (fh >= 0) & (fh < height) & (fw >= 0) & (fw < width)
    channel = torch.where(valid, fh * width + fw, 0)
    return channel, valid


def forward(x: torch.Tensor, psa_type: int, h_mask: int, w_mask: int) -> torch.Tensor:
    """x [N,H,W,hm*wm] -> y [N,H,W,H*W]."""
    check_rank("x", x, 4)
    n, height, width, mask_channels = x.shape
    require(mask_channels == h_mask * w_mask,
             f"x has {mask_channels} channels, h_mask*w_mask = {h_mask * w_mask}")
    require(psa_type in (PSA_COLLECT, PSA_DISTRIBUTE), f"psa_type {psa_type} is not 0 or 1")
    x_flat = nhwc_to_nchw(x).reshape(n, mask_channels, height * width)
    channel, valid = _psamask_collect_source_channel(height, width, h_mask, w_mask, x.device)
    if mask_channels == 0:  # nothing to gather from: every output element is 0
        collected = x.new_zeros(n, height * width, height * width)
    else:
        gathered = torch.gather(x_flat, 1, channel.expand(n, -1, -1))
        collected = torch.where(valid, gathered, torch.zeros((), dtype=x.dtype, device=x.device))
    # mmcv's DISTRIBUTE output is its COLLECT output with the two H*W axes swapped.
    out = collected if psa_type == PSA_COLLECT else collected.transpose(1, 2)
    return nchw_to_nhwc(out.reshape(n, height * width, height, width))


def backward(dy: torch.Tensor, psa_type: int, h_mask: int, w_mask: int) -> torch.Tensor:
    """dy [N,H,W,H*W] -> dx [N,H,W,hm*wm]."""
    check_rank("dy", dy, 4)
    n, height, width, hw = dy.shape
    require(hw == height * width, f"dy has {hw} channels, H*W = {height * width}")
    require(psa_type in (PSA_COLLECT, PSA_DISTRIBUTE), f"psa_type {psa_type} is not 0 or 1")
    dy_nchw = nhwc_to_nchw(dy).reshape(n, hw, hw)
    # Bring dy into COLLECT form dy[n, t, p] before reading it through the collect index map.
    dy_collect = dy_nchw if psa_type == PSA_COLLECT else dy_nchw.transpose(1, 2)
    channel, valid = _psamask_collect_target_channel(height, width, h_mask, w_mask, dy.device)
    if hw == 0:
        dx = dy.new_zeros(n, h_mask * w_mask, 0)
    else:
        gathered = torch.gather(dy_collect, 1, channel.expand(n, -1, -1))
        dx = torch.where(valid, gathered, torch.zeros((), dtype=dy.dtype, device=dy.device))
    return nchw_to_nhwc(dx.reshape(n, h_mask * w_mask, height, width))


def _params(params: dict) -> tuple[int, int, int]:
    return int_param(params, "psa_type"), int_param(params, "h_mask"), int_param(params, "w_mask")


def psamask_forward(inputs, params, out_shapes, device):
    x = as_tensor(inputs, "x", device, compute_dtype(inputs, "x"))
    return {"y": forward(x, *_params(params))}


def psamask_backward(inputs, params, out_shapes, device):
    dy = as_tensor(inputs, "dy", device, compute_dtype(inputs, "dy"))
    return {"dx": backward(dy, *_params(params))}
