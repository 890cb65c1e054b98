"""masked_im2col_forward: a copy of the kernel written from the design doc's pseudo-code, with
knobs that plant one realistic bug each."""
from __future__ import annotations

import numpy as np

from gen.kernels.shared.planted_fast_path import fast_path
from gen.kernels.shared.planted_counts import counted_in_uint16


def masked_im2col_variant(pad_sign=1, clamp=False, zero_fill=True):
    def forward(request):
        f = request.inputs["feature"].astype(np.float64)
        p = request.params
        kh, kw, ph, pw = p["kernel_h"], p["kernel_w"], pad_sign * p["pad_h"], pad_sign * p["pad_w"]
        mh, mw = request.inputs["mask_h_idx"], request.inputs["mask_w_idx"]
        _, C, H, W = f.shape
        shape = (C, kh, kw, len(mh))
        cols = np.zeros(shape) if zero_fill else np.random.default_rng(0).uniform(0.5, 4, shape)
        for i in range(kh):
            for j in range(kw):
                r, c = mh - ph + i, mw - pw + j
                inside = (r >= 0) & (r < H) & (c >= 0) & (c < W)
                if clamp:
                    cols[:, i, j, :] = f[0][:, np.clip(r, 0, H - 1), np.clip(c, 0, W - 1)]
                else:
                    cols[:, i, j, inside] = f[0][:, r[inside], c[inside]]
        return {"data_col": cols.reshape(C * kh * kw, len(mh))}
    return forward


CORRECT = {"masked_im2col_forward": masked_im2col_variant()}


def _plain_gather(request) -> bool:
    p = request.params
    return (p["kernel_h"], p["kernel_w"], p["pad_h"], p["pad_w"]) == (1, 1, 0, 0)

PLANTED = {
    "masked_im2col_forward": {
        "pad_sign_flipped": masked_im2col_variant(pad_sign=-1),
        "out_of_map_taps_clamped": masked_im2col_variant(clamp=True),
        "no_zero_fill": masked_im2col_variant(zero_fill=False),
        # A 1x1 window without padding is a gather of the masked cells: the fast path skips the
        # bounds test, as if every mask position were on the map, and reads the nearest edge cell.
        "gather_skips_bounds": fast_path(masked_im2col_variant(), masked_im2col_variant(clamp=True), _plain_gather),
        # mask_cnt counted in 16 bits: only the first M mod 2^16 columns are filled.
        "counts_in_uint16": counted_in_uint16(masked_im2col_variant(), {"mask_h_idx": 0, "mask_w_idx": 0},
                                              {"data_col": 1}),
    },
}
