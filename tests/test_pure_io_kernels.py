"""psamask and masked_im2col: psamask's backward is its forward's adjoint, and masked_im2col makes
mmcv's masked convolution.  (Against mmcv's psamask data, the slow loops of the docs' pseudo-code,
planted bugs and missing checks: tests/test_kernels.py, for every kernel.)"""
from __future__ import annotations

import numpy as np
import pytest

from conftest import CONFORMANCE
from gen.kernels.masked_im2col import reference as masked_im2col
from gen.kernels.psamask import reference as psamask
from kernels import mmcv_array

MMCV = CONFORMANCE / "mmcv"


# ----------------------------------------------------------------------------- conformance

@pytest.mark.parametrize("psa_type", [0, 1])
def test_psamask_backward_is_the_adjoint_of_forward(psa_type):
    """<forward(x), dy> == <x, backward(dy)>, on mmcv's psamask input."""
    x = mmcv_array("for_psa_mask", "psa_input.bin", (4, 16, 8, 8))
    params = {"psa_type": psa_type, "h_mask": 4, "w_mask": 4}
    y = psamask.forward({"x": x}, params)["y"]
    dy = np.random.default_rng(1).normal(size=y.shape)
    dx = psamask.backward({"dy": dy}, params)["dx"]
    assert np.isclose(np.vdot(y, dy), np.vdot(x.astype(np.float64), dx), rtol=1e-12)


def test_masked_conv_reproduces_mmcv():
    load = lambda n: np.load(MMCV / "for_masked_conv2d" / f"masked_conv2d_for_{n}.npy")  # noqa: E731
    feature, mask, weight, bias, expected = (load(n) for n in ("input", "mask", "weight", "bias", "output"))
    mh, mw = np.nonzero(mask[0] > 0)
    cols = masked_im2col.forward({"feature": feature, "mask_h_idx": mh.astype(np.int32),
                                  "mask_w_idx": mw.astype(np.int32)},
                                 {"kernel_h": 3, "kernel_w": 3, "pad_h": 1, "pad_w": 1})["data_col"]
    out = np.zeros(expected.shape[1:])
    out[:, mh, mw] = bias[:, None] + weight.reshape(weight.shape[0], -1) @ cols
    assert np.abs(out - expected[0]).max() < 1e-5
