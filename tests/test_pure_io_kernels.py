"""psamask and masked_im2col: the references against mmcv's own test data.  (Against the slow
loops of the docs' pseudo-code, planted bugs and missing checks: tests/test_kernels.py, for every
kernel.)"""
from __future__ import annotations

import numpy as np
import pytest

from conftest import CONFORMANCE
from gen.ops import masked_im2col, psamask

MMCV = CONFORMANCE / "mmcv"


def _raw(path, shape):
    return np.fromfile(path, dtype="<f4").reshape(shape)


# ----------------------------------------------------------------------------- conformance

@pytest.mark.parametrize("psa_type, stem", [(0, "collect"), (1, "distribute")])
def test_psamask_reproduces_mmcv_exactly(psa_type, stem):
    x = _raw(MMCV / "for_psa_mask" / "psa_input.bin", (4, 16, 8, 8)).transpose(0, 2, 3, 1)
    expected = _raw(MMCV / "for_psa_mask" / f"psa_output_{stem}.bin", (4, 64, 8, 8))
    y = psamask.forward({"x": x}, {"psa_type": psa_type, "h_mask": 4, "w_mask": 4})["y"]
    assert np.array_equal(y.astype(np.float32).transpose(0, 3, 1, 2), expected)
    # and backward is the adjoint of forward: <forward(x), dy> == <x, backward(dy)>
    dy = np.random.default_rng(1).normal(size=y.shape)
    dx = psamask.backward({"dy": dy}, {"psa_type": psa_type, "h_mask": 4, "w_mask": 4})["dx"]
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
