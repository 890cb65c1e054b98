"""The compiled loops of three_nn_forward, border_align_forward, ms_deform_attn_forward and psamask
(gen/native.py; the C files beside each family's reference.py) give the numpy path's bits, and
really run where they apply.

Each random call runs twice: with OPCASE_NO_CC=1 (numpy) and with the C loop, built in a cache of
this test session's own; outputs are compared byte for byte (NaN payloads and signed zeros included).
"""
import numpy as np
import pytest

from gen.kernels.border_align import compiled_forward as border_align_compiled_forward
from gen.kernels.border_align import reference as border_align
from gen.kernels.ms_deform_attn import compiled as ms_deform_attn_compiled_forward
from gen.kernels.ms_deform_attn import reference as ms_deform_attn_forward
from gen.kernels.psamask import compiled as psamask_compiled
from gen.kernels.psamask import reference as psamask
from gen.kernels.three_nn import compiled as three_nn_compiled_forward
from gen.kernels.three_nn import reference as three_nn_forward


@pytest.fixture
def fresh_cache(fresh_native_cache):
    """The compiled forward loops built afresh (conftest.fresh_native_cache)."""


def _both(monkeypatch, call):
    monkeypatch.setenv("OPCASE_NO_CC", "1")
    with np.errstate(all="ignore"):
        reference = call()
    monkeypatch.delenv("OPCASE_NO_CC")
    with np.errstate(all="ignore"):
        fast = call()
    return reference, fast


def _points(rng, trial):
    """unknown / known of a random three_nn call: few and many known points (past one block), integer
    coordinates now and then (exact ties, index order decides), NaN, inf and huge coordinates."""
    B, N = int(rng.integers(1, 4)), int(rng.integers(1, 30))
    M = int(rng.choice([1, 2, 3, 7, 64, 511, 512, 513, 1300]))
    unknown, known = rng.uniform(-3, 3, (B, N, 3)), rng.uniform(-3, 3, (B, M, 3))
    if trial % 3 == 0:
        unknown, known = np.round(unknown), np.round(known)
    if trial % 5 == 1:
        known[rng.random(known.shape) < 0.05] = rng.choice([np.nan, np.inf, -np.inf, 1e200, -0.0])
    if trial % 7 == 2:
        unknown[rng.random(unknown.shape) < 0.1] = rng.choice([np.nan, -0.0, 1e160])
    dtype = (np.float16, np.float32, np.float64)[trial % 3]
    with np.errstate(over="ignore"):
        return {"unknown": unknown.astype(dtype), "known": known.astype(dtype)}


@pytest.mark.parametrize("seed", range(2))
def test_three_nn_compiled_is_numpy_bit_for_bit(fresh_cache, monkeypatch, seed):
    rng = np.random.default_rng(700 + seed)
    for trial in range(40):
        inputs = _points(rng, trial)
        assert three_nn_compiled_forward.forward(inputs["unknown"], inputs["known"], np.float64) is not None
        reference, fast = _both(monkeypatch, lambda: three_nn_forward.forward(inputs, {}))
        for name in ("dist2", "idx"):
            assert reference[name].dtype == fast[name].dtype, name
            assert reference[name].tobytes() == fast[name].tobytes(), (trial, name)


def test_three_nn_runs_numpy_for_other_dtypes(fresh_cache):
    inputs = _points(np.random.default_rng(1), 1)
    assert three_nn_compiled_forward.forward(inputs["unknown"], inputs["known"], np.float32) is None


def _border_call(rng, trial):
    """A random border_align forward call: maps from 1 x 1 up, boxes inside, on the edge bands, past the map,
    zero-size and on the quarter grid (exact ties), inf in the features now and then, float16/32/64."""
    N, H, W = int(rng.integers(1, 4)), int(rng.integers(1, 9)), int(rng.integers(1, 9))
    C, K, pool_size = int(rng.choice([1, 3, 8, 17])), int(rng.integers(1, 20)), int(rng.choice([1, 2, 5, 10, 33]))
    features = rng.standard_normal((N, H, W, 4 * C))
    if trial % 4 == 0:
        features = np.round(features)
    if trial % 5 == 0:
        features[rng.random(features.shape) < 0.05] = np.inf
    boxes = rng.uniform(-3, max(H, W) + 3, (N, K, 4))
    if trial % 3 == 0:
        boxes = np.round(boxes * 4) / 4
    if trial % 7 == 0:
        boxes[..., 2] = boxes[..., 0]
    if trial % 8 == 3:        # signed zeros and the bands' edges: floor's sign and the snapping rule
        boxes = rng.choice([-0.0, 0.0, -1.0, -0.5, 0.5, H - 1.0, float(H), W - 1.0, float(W), -1e-300], boxes.shape)
    dtype = (np.float16, np.float32, np.float64)[trial % 3]
    return {"input": features.astype(dtype), "boxes": boxes.astype(dtype)}, {"pool_size": pool_size}


@pytest.mark.parametrize("seed", range(2))
def test_border_align_forward_compiled_is_numpy_bit_for_bit(fresh_cache, monkeypatch, seed):
    rng = np.random.default_rng(800 + seed)
    ran_compiled = 0
    for trial in range(60):
        inputs, params = _border_call(rng, trial)
        ran_compiled += border_align_compiled_forward.forward(
            inputs["input"], inputs["boxes"], params["pool_size"], np.float64) is not None
        reference, fast = _both(monkeypatch, lambda: border_align.forward(inputs, params))
        for name in ("output", "argmax_idx"):
            assert reference[name].tobytes() == fast[name].tobytes(), (trial, name)
    assert ran_compiled >= 45


def test_border_align_forward_narrow_loop_keeps_signed_zeros(fresh_cache, monkeypatch):
    """The loop for few channels (borders in vector lanes, up to 16 channels; 17 takes the other loop) on
    features of signed zeros and halves and boxes on the grid, -0 included, short borders: floor(-0.0) is
    -0.0 there as in numpy, so no weight comes out -0 where numpy's is +0 (which flips a zero sample)."""
    rng = np.random.default_rng(900)
    for trial in range(60):
        N, H, W, C = 1, int(rng.integers(1, 5)), int(rng.integers(1, 5)), (1, 2, 4, 15, 16, 17)[trial % 6]
        dtype = (np.float32, np.float64)[trial % 2]
        features = rng.choice([-0.0, 0.0, 1.0, -2.5, 0.5], (N, H, W, 4 * C))
        boxes = rng.choice([-0.0, 0.0, 1.0, 0.5, H - 1.0, W - 1.0], (N, int(rng.integers(1, 12)), 4))
        inputs, params = {"input": features.astype(dtype), "boxes": boxes.astype(dtype)}, {"pool_size": 1 + trial % 2}
        reference, fast = _both(monkeypatch, lambda: border_align.forward(inputs, params))
        for name in ("output", "argmax_idx"):
            assert reference[name].tobytes() == fast[name].tobytes(), (trial, name, C)


def test_border_align_forward_nan_comes_from_numpy(fresh_cache):
    """A NaN feature: the loop hands the call back to numpy (which NaN comes out is numpy's choice)."""
    inputs, params = _border_call(np.random.default_rng(2), 1)
    inputs["input"][...] = np.nan
    assert border_align_compiled_forward.forward(inputs["input"], inputs["boxes"], 2, np.float64) is None


def _attention_call(rng, trial):
    """A random ms_deform_attn call: levels from 1 x 1 (and an empty one now and then), locations around
    and past the levels' edges and on their critical values, raw (negative) weights, inf in the values."""
    N, M, C, Q, P = (int(rng.integers(1, n)) for n in (3, 4, 12, 6, 5))
    shapes = rng.integers(1, 7, (int(rng.integers(1, 5)), 2))
    if trial % 6 == 5:
        shapes[0, 0] = 0
    L = len(shapes)
    areas = shapes[:, 0] * shapes[:, 1]
    value = rng.standard_normal((N, int(areas.sum()), M, C))
    if trial % 5 == 4:
        value[rng.random(value.shape) < 0.03] = np.inf
    loc = rng.uniform(-0.4, 1.4, (N, Q, M, L, P, 2))
    if trial % 4 == 1:
        loc = np.round(loc * 8) / 8
    attn = rng.uniform(-1, 1, (N, Q, M, L, P))
    dtype = (np.float16, np.float32, np.float64)[trial % 3]
    return {"data_value": value.astype(dtype), "data_spatial_shapes": shapes.astype(np.int32),
            "data_level_start_index": np.concatenate([[0], np.cumsum(areas)[:-1]]).astype(np.int32),
            "data_sampling_loc": loc.astype(dtype), "data_attn_weight": attn.astype(dtype)}


@pytest.mark.parametrize("seed", range(2))
def test_ms_deform_attn_compiled_is_numpy_bit_for_bit(fresh_cache, monkeypatch, seed):
    rng = np.random.default_rng(900 + seed)
    ran_compiled = 0
    for trial in range(40):
        inputs = _attention_call(rng, trial)
        value, shapes, starts, loc, attn, out, _ = ms_deform_attn_forward.by_rows(inputs, np.float64)
        ran_compiled += ms_deform_attn_compiled_forward.forward(
            value, shapes, starts, inputs["data_sampling_loc"], inputs["data_attn_weight"], out, np.float64)
        reference, fast = _both(monkeypatch, lambda: ms_deform_attn_forward.forward(inputs, {"im2col_step": 64}))
        assert reference["data_col"].tobytes() == fast["data_col"].tobytes(), trial
    assert ran_compiled >= 30


def test_ms_deform_attn_numpy_in_level_groups_and_row_chunks_is_compiled_bit_for_bit(fresh_cache, monkeypatch):
    """numpy's path samples a group of levels at once and adds the terms in sequence: with groups and chunks
    of a few elements (a count case's 2^16 levels in groups), the bits are still the loop's; and 100 levels
    of 1 x 1 (past the few whose geometry is checked on Python ints) take the numpy checks."""
    monkeypatch.setattr(ms_deform_attn_forward, "_CHUNK_ELEMENTS", 7)
    rng = np.random.default_rng(950)
    calls = [_attention_call(rng, trial) for trial in range(12)]
    many = {"data_value": rng.standard_normal((1, 100, 1, 2)), "data_spatial_shapes": np.ones((100, 2), np.int32),
            "data_level_start_index": np.arange(100, dtype=np.int32),
            "data_sampling_loc": rng.uniform(-0.4, 1.4, (1, 2, 1, 100, 3, 2)), "data_attn_weight": rng.uniform(-1, 1, (1, 2, 1, 100, 3))}
    for trial, inputs in enumerate([*calls, many]):
        reference, fast = _both(monkeypatch, lambda: ms_deform_attn_forward.forward(inputs, {"im2col_step": 64}))
        assert reference["data_col"].tobytes() == fast["data_col"].tobytes(), trial
    wrong = {**many, "data_level_start_index": np.arange(100, dtype=np.int32) * 2}
    with pytest.raises(ValueError, match="running sum"):
        ms_deform_attn_forward.forward(wrong, {})


def test_ms_deform_attn_refuses_levels_that_disagree(fresh_cache):
    """A call whose locations have more levels than data_spatial_shapes (the checks refuse it; a mutant's
    transformed call skips them) is one clear ValueError, never a compiled loop past the shapes' end."""
    inputs = _attention_call(np.random.default_rng(951), 0)
    cut = {**inputs, "data_spatial_shapes": inputs["data_spatial_shapes"][:0],
           "data_level_start_index": inputs["data_level_start_index"][:0], "data_value": inputs["data_value"][:, :0]}
    with pytest.raises(ValueError, match="levels in data_spatial_shapes"):
        ms_deform_attn_forward.forward(cut, {})


@pytest.mark.parametrize("psa_type", [0, 1])
@pytest.mark.parametrize("direction", ["forward", "backward"])
def test_psamask_compiled_is_numpy_bit_for_bit(fresh_cache, monkeypatch, direction, psa_type):
    """COLLECT's block copies and DISTRIBUTE's transposes in C and in numpy: the same bytes, masks smaller
    and larger than the map, even and odd, float16/32/64."""
    rng = np.random.default_rng(1000 + psa_type)
    for trial in range(60):
        N, H, W = int(rng.integers(1, 3)), int(rng.integers(1, 9)), int(rng.integers(1, 9))
        hm, wm = int(rng.integers(1, 2 * H + 2)), int(rng.integers(1, 2 * W + 2))
        dtype = (np.float16, np.float32, np.float64)[trial % 3]
        channels = hm * wm if direction == "forward" else H * W
        inputs = {"x" if direction == "forward" else "dy": rng.standard_normal((N, H, W, channels)).astype(dtype)}
        params = {"psa_type": psa_type, "h_mask": hm, "w_mask": wm}
        reference, fast = _both(monkeypatch, lambda: getattr(psamask, direction)(inputs, params))
        name = "y" if direction == "forward" else "dx"
        assert reference[name].dtype == fast[name].dtype and reference[name].tobytes() == fast[name].tobytes()
        target = np.zeros_like(fast[name])
        move = psamask_compiled.collect if psa_type == 0 else psamask_compiled.distribute
        assert move(next(iter(inputs.values())), target, hm, wm, direction == "backward")
        assert target.tobytes() == reference[name].tobytes()
