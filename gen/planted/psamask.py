"""psamask forward and backward: copies of the kernels with knobs that plant one realistic bug
each.  The forward copy is written from the design doc's pseudo-code, a position at a time; the
backward one reuses the reference with its parameters changed."""
from __future__ import annotations

import numpy as np

from gen.ops import psamask


def psamask_forward_variant(half=lambda m: (m - 1) // 2, swap_types=False, zero_fill=True):
    """A copy of the psamask reference with knobs for realistic bugs."""
    def forward(request):
        x = request.inputs["x"].astype(np.float64)
        p = request.params
        hm, wm = p["h_mask"], p["w_mask"]
        collect = (p["psa_type"] == 0) != swap_types
        N, H, W, _ = x.shape
        y = np.zeros((N, H, W, H * W)) if zero_fill else np.random.default_rng(0).uniform(0.5, 4, (N, H, W, H * W))
        y5, x5 = y.reshape(N, H, W, H, W), x.reshape(N, H, W, hm, wm)
        hh, hw = half(hm), half(wm)
        for h in range(H):
            for w in range(W):
                for hidx in range(max(0, hh - h), min(hm, H + hh - h)):
                    fh = h + hidx - hh
                    ws = range(max(0, hw - w), min(wm, W + hw - w))
                    fws = [w + widx - hw for widx in ws]
                    if collect:
                        y5[:, h, w, fh, fws] = x5[:, h, w, hidx, list(ws)]
                    else:
                        y5[:, fh, fws, h, w] = x5[:, h, w, hidx, list(ws)]
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


CORRECT = {"psamask_forward": psamask_forward_variant(), "psamask_backward": psamask_backward_variant()}

PLANTED = {
    "psamask_forward": {
        "half_mask_m_div_2": psamask_forward_variant(half=lambda m: m // 2),
        "collect_distribute_swapped": psamask_forward_variant(swap_types=True),
        "no_zero_fill": psamask_forward_variant(zero_fill=False),
    },
    "psamask_backward": {
        "collect_distribute_swapped": psamask_backward_variant(swap_types=True),
    },
}
