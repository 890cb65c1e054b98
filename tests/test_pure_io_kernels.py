"""psamask and masked_im2col: the references against mmcv's data and against slow loops
written from the design docs' pseudo-code, and the generated suites against planted bugs."""
from __future__ import annotations

import numpy as np
import pytest

from conftest import CONFORMANCE, assert_each_missing_check_caught, checked_backend, run_dir, statuses
from gen.ops import masked_im2col, psamask
from gen.core.registry import bug_free_copy, planted_bugs
from gen.core.verdict import FAILING

MMCV = CONFORMANCE / "mmcv"


def _raw(path, shape):
    return np.fromfile(path, dtype="<f4").reshape(shape)


# ----------------------------------------------------------------------------- slow references

def _slow_psamask_map(N, H, W, hm, wm):
    """Doc 001, 3.1.1 / 3.1.2 pseudo-code: every (n, h, w, mask entry, map position) it moves."""
    half_h, half_w = (hm - 1) // 2, (wm - 1) // 2
    for n in range(N):
        for h in range(H):
            for w in range(W):
                for hidx in range(max(0, half_h - h), min(hm, H + half_h - h)):
                    for widx in range(max(0, half_w - w), min(wm, W + half_w - w)):
                        yield n, h, w, hidx * wm + widx, h + hidx - half_h, w + widx - half_w


def slow_psamask_forward(x, psa_type, hm, wm):
    """Element by element."""
    N, H, W, _ = x.shape
    y = np.zeros((N, H, W, H * W))
    for n, h, w, entry, fh, fw in _slow_psamask_map(N, H, W, hm, wm):
        if psa_type == 0:
            y[n, h, w, fh * W + fw] = x[n, h, w, entry]
        else:
            y[n, fh, fw, h * W + w] = x[n, h, w, entry]
    return y


def slow_psamask_backward(dy, psa_type, hm, wm):
    N, H, W, _ = dy.shape
    dx = np.zeros((N, H, W, hm * wm))
    for n, h, w, entry, fh, fw in _slow_psamask_map(N, H, W, hm, wm):
        dx[n, h, w, entry] = dy[n, h, w, fh * W + fw] if psa_type == 0 else dy[n, fh, fw, h * W + w]
    return dx


def slow_masked_im2col(feature, mh, mw, kh, kw, ph, pw):
    """Doc 004, 3.2 (the CUDA loop it quotes)."""
    _, C, H, W = feature.shape
    cols = np.zeros((C * kh * kw, len(mh)))
    for m in range(len(mh)):
        for c in range(C):
            for i in range(kh):
                for j in range(kw):
                    hi, wi = mh[m] - ph + i, mw[m] - pw + j
                    if 0 <= hi < H and 0 <= wi < W:
                        cols[(c * kh + i) * kw + j, m] = feature[0, c, hi, wi]
    return cols


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


# ----------------------------------------------------------------------------- vs slow loops

@pytest.mark.parametrize("shape, hm, wm", [((2, 5, 6), 3, 3), ((1, 6, 5), 2, 2), ((2, 7, 4), 4, 6),
                                           ((1, 3, 4), 15, 13), ((3, 1, 1), 3, 3), ((1, 1, 9), 1, 4)])
@pytest.mark.parametrize("psa_type", [0, 1])
def test_psamask_matches_slow_loops(shape, hm, wm, psa_type):
    rng = np.random.default_rng(hm * 100 + wm)
    N, H, W = shape
    params = {"psa_type": psa_type, "h_mask": hm, "w_mask": wm}
    x = rng.normal(size=(N, H, W, hm * wm))
    assert np.array_equal(psamask.forward({"x": x}, params)["y"], slow_psamask_forward(x, psa_type, hm, wm))
    dy = rng.normal(size=(N, H, W, H * W))
    assert np.array_equal(psamask.backward({"dy": dy}, params)["dx"], slow_psamask_backward(dy, psa_type, hm, wm))


@pytest.mark.parametrize("C, H, W, kh, kw, ph, pw", [(3, 6, 7, 3, 3, 1, 1), (2, 3, 4, 7, 9, 3, 4),
                                                     (4, 1, 1, 3, 3, 1, 1), (3, 9, 11, 3, 5, 1, 2),
                                                     (2, 8, 8, 2, 3, 4, 5), (5, 6, 6, 1, 1, 1, 1)])
def test_masked_im2col_matches_slow_loop(C, H, W, kh, kw, ph, pw):
    rng = np.random.default_rng(C * 7 + H)
    feature = rng.normal(size=(1, C, H, W))
    mh = rng.integers(-4, H + 4, size=17).astype(np.int32)
    mw = rng.integers(-4, W + 4, size=17).astype(np.int32)
    got = masked_im2col.forward({"feature": feature, "mask_h_idx": mh, "mask_w_idx": mw},
                                {"kernel_h": kh, "kernel_w": kw, "pad_h": ph, "pad_w": pw})["data_col"]
    assert np.array_equal(got, slow_masked_im2col(feature, mh, mw, kh, kw, ph, pw))


# ----------------------------------------------------------------------------- planted bugs

def _fails(results) -> bool:
    return any(r.status in FAILING for r in results)


def test_correct_copies_pass(suites):
    for op in ("psamask_forward", "masked_im2col_forward"):
        fn = bug_free_copy(op)
        results = run_dir(suites(op), checked_backend("copy", fn))
        assert not _fails(results), statuses(results)


@pytest.mark.parametrize("op, bug, fn", [(op, bug, fn) for op in ("psamask_forward", "psamask_backward",
                                                                    "masked_im2col_forward")
                                            for bug, fn in planted_bugs(op).items()])
def test_suites_catch_planted_bug(suites, op, bug, fn):
    results = run_dir(suites(op), checked_backend(bug, fn))
    failing = [r for r in results if r.status == "failed"]
    assert failing, f"{op}: planted bug '{bug}' passed every case: {statuses(results)}"


@pytest.mark.parametrize("op", ["psamask_forward", "psamask_backward", "masked_im2col_forward"])
def test_every_missing_check_is_caught(suites, op):
    assert_each_missing_check_caught(suites(op) / "invalid", op)
