"""The mmcv emulation of deform_roi_pool_backward keeps its bits: the same atomicAdds in the
same order, each rounded to T, whatever way the emulation is computed (issue 24 made it faster).

The digests below are those of the emulation before that rewrite (per-thread geometry, chunks
sized by the largest grid of all rois), on seeded inputs that reach the map's edges, empty
grids, half overflow and several rois per chunk; a change of order or of a rounding changes them."""
import hashlib

import numpy as np
import pytest

import gen.kernels.deform_roi_pool.mmcv_emulation_backward as emulation


def _inputs(dtype, with_offset: bool):
    rng = np.random.default_rng(24)
    N, H, W, C, R, PH, PW = 2, 13, 17, 24, 20, 3, 4
    x1, y1 = rng.uniform(-6, 2 * W, R), rng.uniform(-6, 2 * H, R)
    rois = np.stack([rng.integers(0, N, R), x1, y1, x1 + rng.uniform(-3, 40, R),
                     y1 + rng.uniform(-3, 40, R)], 1).astype(dtype)
    inputs = {"grad_output": (rng.normal(size=(R, PH, PW, C)) * 300).astype(dtype),
              "input": (rng.normal(size=(N, H, W, C)) * 2e3).astype(dtype), "rois": rois}
    if with_offset:
        inputs["offset"] = rng.normal(size=(R, 2, PH, PW)).astype(dtype)
    params = {"pooled_height": PH, "pooled_width": PW, "spatial_scale": 0.5, "sampling_ratio": 0, "gamma": 0.3}
    return inputs, params


def _digest(outputs) -> str:
    return hashlib.sha256(b"".join(outputs[k].tobytes() for k in sorted(outputs))).hexdigest()[:16]


# (dtype, offset given, thread_by_thread) -> sha256 of the outputs' bytes, first 16 hex digits.
EXPECTED = {
    ("float16", False, False): "171314833a51f9b7",
    ("float16", False, True): "3c6a9e010bf595d4",
    ("float16", True, False): "00ed1dc06552a9bc",
    ("float16", True, True): "c32643bf359b72a5",
    ("float32", False, False): "10721c14f9c6edd6",
    ("float32", False, True): "06dc95026e53723c",
    ("float32", True, False): "8382ac2ebc311e99",
    ("float32", True, True): "97ea890b1387052f",
}


@pytest.mark.parametrize("step_group", [emulation._STEP_GROUP_ELEMENTS, 1])
@pytest.mark.parametrize("chunk_elements", [emulation._CHUNK_ELEMENTS, 1 << 11])
@pytest.mark.parametrize("key", sorted(EXPECTED))
def test_the_emulation_keeps_its_bits(key, chunk_elements, step_group, monkeypatch):
    """Small chunks (one block each) give the same bits as large ones: the adds go block by block;
    and a chunk's sample steps computed all in one pass (step_group large) or one at a time (1)."""
    monkeypatch.setattr(emulation, "_CHUNK_ELEMENTS", chunk_elements)
    monkeypatch.setattr(emulation, "_STEP_GROUP_ELEMENTS", step_group)
    dtype, with_offset, thread_by_thread = key
    inputs, params = _inputs(np.dtype(dtype).type, with_offset)
    with np.errstate(over="ignore"):
        outputs = emulation.deform_roi_pool_backward(inputs, params, thread_by_thread=thread_by_thread)
    assert _digest(outputs) == EXPECTED[key]


def test_chunks_cover_every_block_once_in_order():
    inputs, params = _inputs(np.float32, True)
    geometry = emulation._Geometry(inputs["rois"], inputs["offset"], params, np.float32)
    threads_per_roi = 24 * 3 * 4
    blocks = -(-20 * threads_per_roi // emulation._BLOCK)
    ranges = list(emulation._chunks(geometry, blocks, threads_per_roi))
    assert ranges[0][0] == 0 and ranges[-1][1] == blocks
    assert all(a[1] == b[0] and a[0] < a[1] for a, b in zip(ranges, ranges[1:]))


def test_the_seeded_inputs_reach_what_the_digests_are_for():
    """Several blocks, samples outside the map beside ones inside, non-zero gradients in both outputs."""
    inputs, params = _inputs(np.float16, True)
    with np.errstate(over="ignore"):
        outputs = emulation.deform_roi_pool_backward(inputs, params)
    assert 20 * 24 * 3 * 4 > 8 * emulation._BLOCK
    assert np.count_nonzero(outputs["grad_input"]) and np.count_nonzero(outputs["grad_offset"])
    assert (outputs["grad_input"] == 0).any()      # pixels no sample reaches


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
@pytest.mark.parametrize("with_offset", [False, True])
def test_forward_emulation_one_grid_pass_is_the_step_loop(dtype, with_offset, monkeypatch):
    """The forward's samples for a sampling_ratio (one grid for every roi) computed a group of steps a
    pass, then added step by step: the bits of the step-by-step loop (forced here), groups large or 1.
    numpy's code, not the compiled loop that would answer first (tests/test_compiled_mmcv.py compares those)."""
    import gen.kernels.deform_roi_pool.mmcv_emulation as forward
    inputs, params = _inputs(dtype, with_offset)
    inputs = {name: value for name, value in inputs.items() if name != "grad_output"}
    digests = []
    for sampling_ratio in (1, 3):
        monkeypatch.setenv("OPCASE_NO_CC", "1")
        params = {**params, "sampling_ratio": sampling_ratio}
        with np.errstate(over="ignore", invalid="ignore"):
            for group in (forward._STEP_GROUP_ELEMENTS, 1):
                monkeypatch.setattr(forward, "_STEP_GROUP_ELEMENTS", group)
                digests.append(_digest(forward.deform_roi_pool_forward(inputs, params)))
            monkeypatch.setattr(forward, "_one_grid", lambda *grid: False)
            digests.append(_digest(forward.deform_roi_pool_forward(inputs, params)))
            monkeypatch.undo()
    assert digests[0] == digests[1] == digests[2] and digests[3] == digests[4] == digests[5]
    assert digests[0] != digests[3]
