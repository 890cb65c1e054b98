"""The deform_roi_pool reference (gen/kernels/deform_roi_pool/reference.py) against its record's slow loops
(tests/kernels/deform_roi_pool_forward.py) where it must give zeros or split its work, and its value
generators.  (Against the slow loops on every generated plan: tests/test_kernels.py.)"""
import numpy as np

from gen.kernels.deform_roi_pool import reference as drp
from gen.values import ValueContext
from kernels.deform_roi_pool_forward import oracle as slow_forward


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
    expected = slow_forward(inputs, params)["output"]
    np.testing.assert_allclose(got, expected, **(tolerance or {"rtol": 1e-12, "atol": 1e-12}))
    return got


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


def test_a_nan_roi_with_an_adaptive_grid_has_no_samples_forward_and_backward():
    """sampling_ratio 0 takes the grid from ceil(roi / pooled): NaN for a NaN roi, which CUDA's
    float-to-int conversion makes 0 (no samples).  Its bins are 0 and add nothing to grad_input;
    the other rois are untouched."""
    from gen.kernels.deform_roi_pool.reference_backward import backward
    params = _params(2, 2, 0.5, 0, 0.1)
    features, rois, offset = _case(23, 1, 8, 8, 3, 4, params)
    clean = drp.forward({"input": features, "rois": rois, "offset": offset}, params)["output"]
    rois = rois.copy()
    rois[1, 3] = np.nan
    with np.errstate(invalid="raise"):
        got = drp.forward({"input": features, "rois": rois, "offset": offset}, params)["output"]
    assert not got[1].any() and np.array_equal(np.delete(got, 1, 0), np.delete(clean, 1, 0))
    grad_output = np.random.default_rng(1).normal(size=got.shape)
    inputs = {"grad_output": grad_output, "input": features, "rois": rois, "offset": offset}
    grads = backward(inputs, params)
    others = backward({**inputs, "rois": np.delete(rois, 1, 0), "offset": np.delete(offset, 1, 0),
                       "grad_output": np.delete(grad_output, 1, 0)}, params)
    np.testing.assert_array_equal(grads["grad_input"], others["grad_input"])
    assert not grads["grad_offset"][1].any()          # nothing added, as in mmcv
    np.testing.assert_array_equal(np.delete(grads["grad_offset"], 1, 0), others["grad_offset"])
