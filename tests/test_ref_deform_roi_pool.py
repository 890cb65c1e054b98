"""The deform_roi_pool reference (gen/ops/deform_roi_pool.py) against a slow loop implementation."""
import math

import numpy as np
import pytest

from gen.ops import deform_roi_pool as drp
from gen.values import ValueContext


# ----------------------------------------------------------------------------- slow loops (mmcv's kernel, literally)

def slow_bilinear_corners(y, x, H, W):
    """OPS.md 'Shared: bilinear sampling' for one point: [(weight, row, col)] of its four
    corners, or [] where the point gives 0 (and no gradient)."""
    if y < -1.0 or y > H or x < -1.0 or x > W:
        return []
    y, x = max(y, 0.0), max(x, 0.0)
    y_low, x_low = int(math.floor(y)), int(math.floor(x))
    if y_low >= H - 1:
        y_low = y_high = H - 1
        y = float(y_low)
    else:
        y_high = y_low + 1
    if x_low >= W - 1:
        x_low = x_high = W - 1
        x = float(x_low)
    else:
        x_high = x_low + 1
    ly, lx = y - y_low, x - x_low
    hy, hx = 1 - ly, 1 - lx
    return [(hy * hx, y_low, x_low), (hy * lx, y_low, x_high), (ly * hx, y_high, x_low), (ly * lx, y_high, x_high)]


def slow_bilinear(image, H, W, y, x):
    """image [H, W, C] sampled at (y, x)."""
    total = np.zeros(image.shape[-1])
    for weight, row, col in slow_bilinear_corners(y, x, H, W):
        total = total + weight * image[row, col]
    return total


def slow_forward(features, rois, offset, PH, PW, scale, ratio, gamma):
    _, H, W, C = features.shape
    out = np.zeros((len(rois), PH, PW, C))
    if H == 0 or W == 0:
        return out
    for r, (batch, x1, y1, x2, y2) in enumerate(np.asarray(rois, dtype=np.float64)):
        image = features[int(batch)].astype(np.float64)
        start_w, start_h = x1 * scale - 0.5, y1 * scale - 0.5
        roi_w, roi_h = (x2 * scale - 0.5) - start_w, (y2 * scale - 0.5) - start_h
        bin_h, bin_w = roi_h / PH, roi_w / PW
        grid_h = ratio if ratio > 0 else math.ceil(roi_h / PH)
        grid_w = ratio if ratio > 0 else math.ceil(roi_w / PW)
        for ph in range(PH):
            for pw in range(PW):
                sh, sw = start_h, start_w
                if offset is not None:
                    sw += gamma * roi_w * float(offset[r, 0, ph, pw])
                    sh += gamma * roi_h * float(offset[r, 1, ph, pw])
                total = np.zeros(C)
                for iy in range(grid_h):
                    y = sh + ph * bin_h + (iy + 0.5) * bin_h / grid_h
                    for ix in range(grid_w):
                        x = sw + pw * bin_w + (ix + 0.5) * bin_w / grid_w
                        total += slow_bilinear(image, H, W, y, x)
                out[r, ph, pw] = total / max(grid_h * grid_w, 1)
    return out


# ----------------------------------------------------------------------------- helpers

def _params(PH, PW, scale, ratio, gamma):
    return {"pooled_height": PH, "pooled_width": PW, "spatial_scale": scale, "sampling_ratio": ratio, "gamma": gamma}


def _context(B, H, W, C, R, params):
    shapes = {"input": (B, H, W, C), "rois": (R, 5), "offset": (R, 2, params["pooled_height"], params["pooled_width"]),
              "output": (R, params["pooled_height"], params["pooled_width"], C)}
    return ValueContext(shapes=shapes, dtypes={}, dims={}, params=params, dtype="float32")


def _case(seed, B, H, W, C, R, params, roi_mode="proposals", offset_mode="learned", offset_std=0.3):
    rng = np.random.default_rng(seed)
    ctx = _context(B, H, W, C, R, params)
    features = rng.normal(size=ctx.shapes["input"])
    ctx.inputs["input"] = features
    rois = drp.proposals(rng, ctx, mode=roi_mode)
    ctx.inputs["rois"] = rois
    offset = drp.offsets(rng, ctx, mode=offset_mode, std=offset_std)
    return features, rois, offset


def _check(features, rois, offset, params, **tolerance):
    inputs = {"input": features, "rois": rois}
    if offset is not None:
        inputs["offset"] = offset
    got = drp.forward(inputs, params)["output"]
    expected = slow_forward(features, rois, offset, params["pooled_height"], params["pooled_width"],
                            params["spatial_scale"], params["sampling_ratio"], params["gamma"])
    np.testing.assert_allclose(got, expected, **(tolerance or {"rtol": 1e-12, "atol": 1e-12}))
    return got


ROI_MODES = ["proposals", "across", "edge", "degenerate", "large", "outside"]


@pytest.mark.parametrize("roi_mode", ROI_MODES)
@pytest.mark.parametrize("ratio", [0, 2])
@pytest.mark.parametrize("with_offset", [False, True])
def test_forward_matches_slow_loops(roi_mode, ratio, with_offset):
    params = _params(3, 2, 0.5, ratio, 0.4)
    features, rois, offset = _case(10 + ratio, 2, 7, 9, 3, 6, params, roi_mode)
    _check(features, rois, offset if with_offset else None, params)


def test_uneven_pooling_and_scale_1():
    params = _params(1, 5, 1.0, 3, 1.0)
    features, rois, offset = _case(20, 1, 5, 6, 4, 4, params, "across")
    _check(features, rois, offset, params)


def test_offsets_that_push_samples_off_the_map_give_zero_bins():
    params = _params(4, 4, 0.25, 2, 0.1)
    features, rois, offset = _case(21, 2, 10, 12, 3, 8, params, "proposals", "off_map", offset_std=0.1)
    got = _check(features, rois, offset, params)
    pushed = np.abs(offset).max(axis=1) > 1.0                  # learned offsets are N(0, 0.1)
    assert pushed.any() and not got[pushed].any()
    assert got[~pushed].any()


def test_outside_rois_give_zero():
    params = _params(2, 2, 0.5, 0, 0.1)
    features, rois, offset = _case(22, 1, 6, 6, 2, 10, params, "outside")
    assert not _check(features, rois, offset, params).any()


def test_chunks_may_split_a_bin(monkeypatch):
    monkeypatch.setattr(drp, "_CHUNK_ELEMENTS", 4 * 3 * 5)    # 5 samples per chunk
    params = _params(2, 3, 0.5, 0, 0.1)
    features, rois, offset = _case(23, 2, 8, 8, 3, 5, params, "large")
    _check(features, rois, offset, params)


def test_zero_map_succeeds_with_zero_output():
    params = _params(2, 2, 1.0, 2, 0.1)
    rois = np.array([[0, 0.0, 0.0, 3.0, 3.0]])
    got = drp.forward({"input": np.zeros((1, 0, 5, 3)), "rois": rois}, params)["output"]
    assert got.shape == (1, 2, 2, 3) and not got.any()


def test_float32_compute_is_close_but_really_float32():
    params = _params(7, 7, 0.25, 0, 0.1)
    features, rois, offset = _case(24, 1, 40, 40, 8, 6, params, "large")
    features = features.astype(np.float32)
    rois, offset = rois.astype(np.float32), offset.astype(np.float32)
    inputs = {"input": features, "rois": rois, "offset": offset}
    golden = drp.forward(inputs, params)["output"]
    low = drp.forward(inputs, params, compute_dtype=np.float32)["output"]
    assert low.dtype == np.float32
    difference = np.abs(low - golden).max() / np.abs(golden).max()
    assert 1e-9 < difference < 1e-4


# ----------------------------------------------------------------------------- value generators

def test_proposals_have_valid_batches_and_lie_in_the_image():
    params = _params(7, 7, 0.25, 0, 0.1)
    ctx = _context(2, 200, 304, 1, 500, params)
    rois = drp.proposals(np.random.default_rng(25), ctx)
    assert set(np.unique(rois[:, 0])) <= {0.0, 1.0} and (np.diff(rois[:, 0]) >= 0).all()
    assert (rois[:, 1] >= 0).all() and (rois[:, 3] <= 304 / 0.25).all()
    assert (rois[:, 2] >= 0).all() and (rois[:, 4] <= 200 / 0.25).all()
    assert (rois[:, 3] > rois[:, 1]).all() and (rois[:, 4] > rois[:, 2]).all()
    side = np.sqrt((rois[:, 3] - rois[:, 1]) * (rois[:, 4] - rois[:, 2]))
    assert np.median(side) < 112                                 # FPN level 0 (stride 4) takes rois below 112 px


def test_degenerate_rois_include_zero_size_and_inverted():
    ctx = _context(1, 8, 8, 1, 200, _params(2, 2, 1.0, 0, 0.1))
    rois = drp.proposals(np.random.default_rng(26), ctx, mode="degenerate")
    width, height = rois[:, 3] - rois[:, 1], rois[:, 4] - rois[:, 2]
    assert (width == 0).any() and (height == 0).any() and (width < 0).any()
