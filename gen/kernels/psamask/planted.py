"""psamask forward and backward: copies of the kernels with knobs that plant one realistic bug
each.  The forward copy is written from the design doc's pseudo-code, a position at a time; the
backward one reuses the reference with its parameters changed."""
from __future__ import annotations

import numpy as np

from gen.kernels.psamask import reference as psamask
from gen.kernels.shared.planted_fast_path import fast_path


def _centre(m):
    return (m - 1) // 2


def _window(H, W, hm, wm, half):
    """Every position (h, w) with the mask rows it sees: (h, w, hidx, its mask columns, the map
    row fh, the map columns), a window of hm x wm around (h, w) whose centre is ``half(m)``."""
    hh, hw = half(hm), half(wm)
    for h in range(H):
        for w in range(W):
            for hidx in range(max(0, hh - h), min(hm, H + hh - h)):
                ws = range(max(0, hw - w), min(wm, W + hw - w))
                yield h, w, hidx, list(ws), h + hidx - hh, [w + widx - hw for widx in ws]


def psamask_forward_variant(half=_centre, swap_types=False, zero_fill=True):
    """A copy of the psamask reference with knobs for realistic bugs."""
    def forward(request):
        x = request.inputs["x"].astype(np.float64)
        p = request.params
        hm, wm = p["h_mask"], p["w_mask"]
        collect = (p["psa_type"] == 0) != swap_types
        N, H, W, _ = x.shape
        y = np.zeros((N, H, W, H * W)) if zero_fill else np.random.default_rng(0).uniform(0.5, 4, (N, H, W, H * W))
        y5, x5 = y.reshape(N, H, W, H, W), x.reshape(N, H, W, hm, wm)
        for h, w, hidx, ws, fh, fws in _window(H, W, hm, wm, half):
            if collect:
                y5[:, h, w, fh, fws] = x5[:, h, w, hidx, ws]
            else:
                y5[:, fh, fws, h, w] = x5[:, h, w, hidx, ws]
        return {"y": y}
    return forward


def psamask_backward_variant(swap_types=False):
    def backward(request):
        dy = request.inputs["dy"].astype(np.float64)
        p = dict(request.params)
        if swap_types:
            p["psa_type"] = 1 - p["psa_type"]
        return psamask.backward({"dy": dy}, p)
    return backward


def psamask_backward_copy(half=_centre):
    """The backward written out a position at a time (the forward's gathers as scatters back)."""
    def backward(request):
        dy = request.inputs["dy"].astype(np.float64)
        p = request.params
        hm, wm = p["h_mask"], p["w_mask"]
        N, H, W, _ = dy.shape
        dx = np.zeros((N, H, W, hm * wm))
        dx5, dy5 = dx.reshape(N, H, W, hm, wm), dy.reshape(N, H, W, H, W)
        for h, w, hidx, ws, fh, fws in _window(H, W, hm, wm, half):
            dx5[:, h, w, hidx, ws] = dy5[:, h, w, fh, fws] if p["psa_type"] == 0 else dy5[:, fh, fws, h, w]
        return {"dx": dx}
    return backward


def _covers_map(request) -> bool:
    p, (_, H, W, _) = request.params, request.outputs["y" if "y" in request.outputs else "dx"].shape
    return p["h_mask"] >= 2 * H - 1 and p["w_mask"] >= 2 * W - 1


def _cover_centre_m_div_2(general, copy):
    """A mask that covers the map from every position needs no clipping: the fast path (a plain
    copy) places the window's centre at m // 2, right for the odd masks it was tried with."""
    return fast_path(general, copy(half=lambda m: m // 2), _covers_map)


CORRECT = {"psamask_forward": psamask_forward_variant(), "psamask_backward": psamask_backward_variant()}

PLANTED = {
    "psamask_forward": {
        "half_mask_m_div_2": psamask_forward_variant(half=lambda m: m // 2),
        "collect_distribute_swapped": psamask_forward_variant(swap_types=True),
        "no_zero_fill": psamask_forward_variant(zero_fill=False),
        "cover_centre_m_div_2": _cover_centre_m_div_2(psamask_forward_variant(), psamask_forward_variant),
    },
    "psamask_backward": {
        "collect_distribute_swapped": psamask_backward_variant(swap_types=True),
        "cover_centre_m_div_2": _cover_centre_m_div_2(psamask_backward_variant(), psamask_backward_copy),
    },
}
