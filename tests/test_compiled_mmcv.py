"""The mmcv emulations' compiled loops compute what their numpy code computes, bit for bit: the
baseline's rounding is what dynamic thresholds rest on, so a faster baseline must not move a bit.
OPCASE_NO_CC=1 forces numpy."""
from __future__ import annotations

import time

import numpy as np
import pytest

from gen.kernels.three_nn import compiled_mmcv
from gen.kernels.three_nn.mmcv_emulation import three_nn_forward


@pytest.fixture
def compiled_three_nn(fresh_native_cache):
    assert compiled_mmcv._loop() is not None, "a C compiler is on PATH but three_nn_mmcv_kernel.c did not build"


def _points(rng, shape, dtype, scale: float, specials: int):
    values = rng.standard_normal(shape) * scale
    # Grid points: many exact ties between distances, where the index order decides.
    values[rng.random(shape[:-1]) < 0.3] = rng.integers(-3, 4, size=3)
    flat = values.reshape(-1)
    with np.errstate(over="ignore"):
        flat[rng.integers(0, flat.size, specials)] = rng.choice([np.nan, np.inf, -np.inf, -0.0, 6e4, 3e38, 1e-7],
                                                                specials)
        return values.astype(dtype)


def _both_ways(monkeypatch, inputs):
    monkeypatch.setenv("OPCASE_NO_CC", "1")
    numpy_way = three_nn_forward(inputs, {})
    monkeypatch.delenv("OPCASE_NO_CC")
    assert compiled_mmcv.forward(inputs["unknown"], inputs["known"], inputs["unknown"].dtype == np.float16) is not None
    return numpy_way, three_nn_forward(inputs, {})


@pytest.mark.parametrize("generic", [False, True], ids=["this_cpu", "generic_x86_64"])
@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_three_nn_compiled_emulation_is_numpys_bit_for_bit(compiled_three_nn, monkeypatch, dtype, generic):
    """Both builds of the loop (the one this CPU takes, and the baseline x86-64 one), in whole blocks of known
    points and the remainder, on ties (index order decides) and special values."""
    import ctypes
    from gen import native
    monkeypatch.setattr(ctypes.c_int.in_dll(native.load(compiled_mmcv._SOURCE), "three_nn_mmcv_generic_only"),
                        "value", int(generic))
    rng = np.random.default_rng(37)
    shapes = [(1, 1, 0), (2, 3, 1), (2, 5, 2), (1, 7, 3), (3, 40, 64), (2, 9, 300), (1, 0, 5), (0, 4, 4)]
    compared = 0
    for B, N, M in shapes:
        for scale, specials in ((1.0, 0), (300.0, 3), (1e-3, 2), (2e4, 4)):
            specials = min(specials, B * min(N, M) * 3)
            inputs = {"unknown": _points(rng, (B, N, 3), dtype, scale, specials),
                      "known": _points(rng, (B, M, 3), dtype, scale, specials)}
            numpy_way, compiled_way = _both_ways(monkeypatch, inputs)
            for name in ("dist2", "idx"):
                assert numpy_way[name].dtype == compiled_way[name].dtype, name
                assert numpy_way[name].tobytes() == compiled_way[name].tobytes(), (B, N, M, scale, name)
            compared += 1
    assert compared == len(shapes) * 4


def test_three_nn_emulation_runs_numpy_for_shapes_the_loop_does_not_take(compiled_three_nn):
    unknown = np.zeros((2, 4, 3), np.float16)
    assert compiled_mmcv.forward(unknown, np.zeros((2, 4, 3), np.float32), True) is None     # mixed dtypes
    assert compiled_mmcv.forward(unknown, np.zeros((3, 4, 3), np.float16), True) is None     # batches differ
    assert compiled_mmcv.forward(unknown.astype(np.float64), np.zeros((2, 4, 3)), False) is None


@pytest.fixture
def compiled_ms_deform_attn(fresh_native_cache):
    from gen.kernels.ms_deform_attn import compiled_mmcv as ms_compiled
    assert ms_compiled._loop() is not None, "a C compiler is on PATH but ms_deform_attn_mmcv_kernel.c did not build"


def _ms_deform_attn_inputs(rng, N, Q, M, C, levels, P, specials: int):
    shapes = np.array(levels, dtype=np.int64).reshape(-1, 2)
    areas = shapes[:, 0] * shapes[:, 1]
    starts = np.concatenate([[0], np.cumsum(areas)[:-1]]).astype(np.int64)
    L = len(shapes)
    value = rng.standard_normal((N, int(areas.sum()), M, C)).astype(np.float32)
    loc = rng.uniform(-0.3, 1.3, (N, Q, M, L, P, 2)).astype(np.float32)
    # Points on pixel centres and edges: exact weights, ties of the bounds.
    loc.reshape(-1)[: loc.size // 4] = rng.integers(-1, 5, loc.size // 4) / 4
    attn = rng.uniform(-1, 1, (N, Q, M, L, P)).astype(np.float32)
    for array in (value, loc, attn):
        flat = array.reshape(-1)
        if flat.size:
            flat[rng.integers(0, flat.size, specials)] = rng.choice(
                [np.nan, np.inf, -np.inf, -0.0, 1e-40, 3e38], specials).astype(np.float32)
    return {"data_value": value, "data_spatial_shapes": shapes, "data_level_start_index": starts,
            "data_sampling_loc": loc, "data_attn_weight": attn}


def test_ms_deform_attn_compiled_emulation_is_numpys_bit_for_bit(compiled_ms_deform_attn, monkeypatch):
    from gen.kernels.ms_deform_attn import compiled_mmcv as ms_compiled
    from gen.kernels.ms_deform_attn.mmcv_emulation import ms_deform_attn_forward
    rng = np.random.default_rng(37)
    calls = [(1, 2, 2, 2, [(2, 2), (1, 3)], 2, 0), (2, 5, 3, 7, [(4, 6), (2, 3), (1, 1)], 4, 6),
             (1, 3, 1, 1, [(1, 1)], 1, 0), (2, 4, 2, 16, [(5, 5), (0, 3), (3, 2)], 3, 5),
             (1, 1, 2, 3, [(0, 0)], 2, 0), (1, 0, 2, 3, [(2, 2)], 2, 0)]
    ran = []       # what each call of the loop answered: True where it computed the sums
    original = ms_compiled.thread_sums
    monkeypatch.setattr(ms_compiled, "thread_sums", lambda *a: ran.append(original(*a)) or ran[-1])
    for N, Q, M, C, levels, P, specials in calls:
        inputs = _ms_deform_attn_inputs(rng, N, Q, M, C, levels, P, specials)
        monkeypatch.setenv("OPCASE_NO_CC", "1")
        numpy_way = ms_deform_attn_forward(inputs, {})["data_col"]
        monkeypatch.delenv("OPCASE_NO_CC")
        compiled_way = ms_deform_attn_forward(inputs, {})["data_col"]
        assert numpy_way.dtype == compiled_way.dtype == np.float32
        assert numpy_way.tobytes() == compiled_way.tobytes(), (N, Q, M, C, levels, P)
    assert ran.count(True) == len(calls) - 1 and ran.count(False) == len(calls) - 1, ran   # the last is empty


def _answers(monkeypatch, module, name: str) -> list[bool]:
    """What each call of module.name (a compiled path) answers from now on: True where it computed the outputs,
    False where it handed the call back to numpy."""
    ran, original = [], getattr(module, name)

    def recorded(*args):
        answer = original(*args)
        ran.append(answer is not None)
        return answer
    monkeypatch.setattr(module, name, recorded)
    return ran


@pytest.fixture
def compiled_deform_roi_pool(fresh_native_cache):
    from gen.kernels.deform_roi_pool import compiled_mmcv_backward
    assert compiled_mmcv_backward._loop() is not None, \
        "a C compiler is on PATH but deform_roi_pool_mmcv_kernel.c did not build"


def _deform_roi_pool_inputs(rng, dtype, N, H, W, C, R, PH, PW, with_offset: bool, specials: int,
                            rois_dtype=None):
    """Rois from inverted to twice the map, some on the map's last row and column and outside it; specials
    (NaN, inf, half overflow, -0) in the maps and gradients."""
    x1, y1 = rng.uniform(-4, W + 2, R), rng.uniform(-4, H + 2, R)
    rois = np.stack([rng.integers(0, N, R), x1, y1, x1 + rng.uniform(-3, 2 * W, R),
                     y1 + rng.uniform(-3, 2 * H, R)], 1)
    rois[: R // 3, 1:] = rng.integers(-1, max(H, W) + 2, (R // 3, 4))      # on pixel edges: exact weights
    features = rng.normal(size=(N, H, W, C)) * rng.choice([1.0, 3e3])
    grad_output = rng.normal(size=(R, PH, PW, C)) * rng.choice([1.0, 300.0])
    for array in (features, grad_output):
        flat = array.reshape(-1)
        if flat.size and specials:
            flat[rng.integers(0, flat.size, specials)] = rng.choice([np.nan, np.inf, -np.inf, -0.0, 7e4, 1e-6],
                                                                    specials)
    with np.errstate(over="ignore"):                    # 7e4 is inf in half
        inputs = {"grad_output": grad_output.astype(dtype), "input": features.astype(dtype),
                  "rois": rois.astype(rois_dtype or dtype)}
    if with_offset:
        offset = rng.normal(size=(R, 2, PH, PW)) * rng.choice([0.5, 4.0])
        if offset.size and specials:
            offset.reshape(-1)[rng.integers(0, offset.size, 1)] = np.nan
        inputs["offset"] = offset.astype(dtype)
    return inputs


# (N, H, W, C, R, PH, PW, sampling_ratio, spatial_scale, gamma, specials): several blocks, bins over 512
# (no lane shares its sample), one-pixel maps (every point on the last row), adaptive grids and fixed ones,
# half's rounding of a height past 2048, empty rois, channels and maps.
_DEFORM_ROI_POOL_CALLS = [
    (1, 9, 9, 1, 1, 4, 1, 5, 0.7941938638687134, 0.6350110173225403, 0),     # the doc's mluops_case0
    (2, 13, 17, 24, 20, 3, 4, 0, 0.5, 0.3, 6),
    (2, 7, 5, 3, 9, 2, 2, 2, 1.0, 0.1, 3),
    (1, 1, 1, 4, 5, 2, 3, 0, 1.0, 1.0, 0),
    (1, 1, 6, 2, 4, 3, 1, 3, 0.25, 0.5, 2),
    (3, 5, 4, 1, 7, 23, 25, 1, 1.0, 0.7, 2),
    (1, 2100, 3, 2, 3, 2, 1, 1, 1.0, 0.2, 0),
    (2, 6, 6, 600, 2, 1, 1, 2, 1.0, 0.9, 5),
    (1, 4, 4, 2, 0, 2, 2, 2, 1.0, 0.5, 0),
    (1, 4, 4, 0, 3, 2, 2, 2, 1.0, 0.5, 0),
    (1, 0, 4, 2, 3, 2, 2, 2, 1.0, 0.5, 0),
]


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_deform_roi_pool_backward_compiled_emulation_is_numpys_bit_for_bit(compiled_deform_roi_pool, monkeypatch,
                                                                          dtype):
    from gen.kernels.deform_roi_pool import compiled_mmcv_backward
    from gen.kernels.deform_roi_pool.mmcv_emulation_backward import deform_roi_pool_backward
    rng = np.random.default_rng(37)
    ran = _answers(monkeypatch, compiled_mmcv_backward, "deform_roi_pool_backward")
    reached = {"grad_input": 0, "grad_offset": 0}
    calls = 0
    for N, H, W, C, R, PH, PW, sampling_ratio, scale, gamma, specials in _DEFORM_ROI_POOL_CALLS:
        params = {"pooled_height": PH, "pooled_width": PW, "spatial_scale": scale, "sampling_ratio": sampling_ratio,
                  "gamma": gamma}
        for with_offset, rois_dtype, thread_by_thread in ((False, None, False), (True, None, False),
                                                          (True, None, True), (True, np.float32, False)):
            inputs = _deform_roi_pool_inputs(rng, dtype, N, H, W, C, R, PH, PW, with_offset, specials, rois_dtype)
            with np.errstate(all="ignore"):
                monkeypatch.setenv("OPCASE_NO_CC", "1")
                numpy_way = deform_roi_pool_backward(inputs, params, thread_by_thread=thread_by_thread)
                monkeypatch.delenv("OPCASE_NO_CC")
                compiled_way = deform_roi_pool_backward(inputs, params, thread_by_thread=thread_by_thread)
            for name in ("grad_input", "grad_offset"):
                assert numpy_way[name].dtype == compiled_way[name].dtype == dtype, name
                assert numpy_way[name].tobytes() == compiled_way[name].tobytes(), \
                    (N, H, W, C, R, PH, PW, sampling_ratio, with_offset, rois_dtype, thread_by_thread, name)
                reached[name] += int(np.count_nonzero(compiled_way[name]) > 0)
            calls += 1
    # Under OPCASE_NO_CC the loop answers None; else it computed every call, none handed back to numpy.
    assert ran == [False, True] * calls, ran
    assert reached["grad_input"] >= calls // 2 and reached["grad_offset"] >= calls // 4, reached


def test_deform_roi_pool_backward_emulation_leaves_to_numpy_what_numpy_decides(compiled_deform_roi_pool, monkeypatch):
    """A batch index outside the inputs: numpy's ValueError, whichever way; shapes and dtypes the loop does not
    take and over MAX_SLOTS: numpy's path."""
    from gen.kernels.deform_roi_pool import compiled_mmcv_backward
    from gen.kernels.deform_roi_pool.mmcv_emulation_backward import deform_roi_pool_backward
    rng = np.random.default_rng(5)
    params = {"pooled_height": 2, "pooled_width": 2, "spatial_scale": 1.0, "sampling_ratio": 2, "gamma": 0.1}
    inputs = _deform_roi_pool_inputs(rng, np.float32, 2, 5, 5, 3, 4, 2, 2, True, 0)
    inputs["rois"][2, 0] = 2
    with pytest.raises(ValueError, match="batch indices"):
        deform_roi_pool_backward(inputs, params)
    assert compiled_mmcv_backward.deform_roi_pool_backward(inputs, params, False) is None
    inputs["rois"][2, 0] = 1
    assert compiled_mmcv_backward.deform_roi_pool_backward(inputs, params, False) is not None
    mixed = {**inputs, "grad_output": inputs["grad_output"].astype(np.float16)}
    assert compiled_mmcv_backward.deform_roi_pool_backward(mixed, params, False) is None
    monkeypatch.setattr(compiled_mmcv_backward, "MAX_SLOTS", 4.0 * 512 - 1)    # one block of 2 x 2 steps
    assert compiled_mmcv_backward.deform_roi_pool_backward(inputs, params, False) is None
    monkeypatch.setattr(compiled_mmcv_backward, "MAX_SLOTS", 4.0 * 512)
    assert compiled_mmcv_backward.deform_roi_pool_backward(inputs, params, False) is not None


def _forward_both_ways(monkeypatch, inputs, params, units=None, step_loop: bool = False):
    """mmcv_emulation's forward output (units None) or its units' under OPCASE_NO_CC (numpy's one-grid pass, or
    its step-by-step loop forced) and with the loop; the ValueError's text where one raises."""
    from gen.kernels.deform_roi_pool import mmcv_emulation
    ways = []
    for no_cc in (True, False):
        with monkeypatch.context() as patched:
            if no_cc:
                patched.setenv("OPCASE_NO_CC", "1")
                if step_loop:
                    patched.setattr(mmcv_emulation, "_one_grid", lambda *grid: False)
            try:
                with np.errstate(all="ignore"):
                    if units is None:
                        ways.append(mmcv_emulation.deform_roi_pool_forward(inputs, params)["output"])
                    else:
                        chosen = mmcv_emulation.deform_roi_pool_forward_units(inputs, params).values(units)
                        ways.append(chosen["output"])
            except ValueError as error:
                ways.append(str(error))
    return ways


def _deform_roi_pool_build(monkeypatch, generic: bool):
    """Run the forward's baseline x86-64 build (generic) or the one this CPU takes (x86-64-v3 where it has it)."""
    import ctypes
    from gen import native
    from gen.kernels.deform_roi_pool import compiled_mmcv_forward
    monkeypatch.setattr(ctypes.c_int.in_dll(native.load(compiled_mmcv_forward._SOURCE),
                                            "deform_roi_pool_mmcv_generic_only"), "value", int(generic))


@pytest.mark.parametrize("generic", [False, True], ids=["this_cpu", "generic_x86_64"])
def test_deform_roi_pool_forward_reads_every_half_as_the_scalar_conversion(compiled_deform_roi_pool, monkeypatch,
                                                                          generic):
    """The vectorized half reads (half_row): all 2^16 bit patterns, as mmcv_half_to_float's exact bits (NaN
    payloads kept, signalling ones too), in 16-lane steps and the remainder (65536 - 3 values)."""
    import ctypes
    from gen import native
    from gen.kernels.deform_roi_pool import compiled_mmcv_forward
    _deform_roi_pool_build(monkeypatch, generic)
    convert = native.load(compiled_mmcv_forward._SOURCE).deform_roi_pool_mmcv_half_row
    bits = np.arange(1 << 16, dtype=np.uint32)
    sign, exponent, fraction = (bits & 0x8000) << 16, (bits >> 10) & 0x1F, bits & 0x3FF
    with np.errstate(invalid="ignore"):
        expected = bits.astype(np.uint16).view(np.float16).astype(np.float32).view(np.uint32).copy()
    expected[exponent == 0x1F] = (sign | 0x7F800000 | (fraction << 13))[exponent == 0x1F]
    for first in (0, 3):
        source = np.ascontiguousarray(bits[first:].astype(np.uint16))
        out = np.empty(source.size, np.float32)
        convert(ctypes.c_void_p(source.ctypes.data), ctypes.c_long(source.size), ctypes.c_void_p(out.ctypes.data))
        wrong = np.flatnonzero(out.view(np.uint32) != expected[first:])
        assert not wrong.size, wrong[:5] + first


@pytest.mark.parametrize("generic", [False, True], ids=["this_cpu", "generic_x86_64"])
@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_deform_roi_pool_forward_compiled_emulation_is_numpys_bit_for_bit(compiled_deform_roi_pool, monkeypatch,
                                                                         dtype, generic):
    """The whole call and gen.sampled's units (an order of their own, one repeated), against numpy's one-grid
    pass and its step loop, on the backward's calls: specials in the map and offsets, rois on and past the
    edges and inverted, adaptive grids that differ per roi, one-pixel maps, empty rois, channels and maps;
    on both builds of the loop."""
    from gen.kernels.deform_roi_pool import compiled_mmcv_forward
    _deform_roi_pool_build(monkeypatch, generic)
    rng = np.random.default_rng(41)
    ran = _answers(monkeypatch, compiled_mmcv_forward, "deform_roi_pool_forward")
    calls, reached, empty = 0, 0, 0
    for N, H, W, C, R, PH, PW, sampling_ratio, scale, gamma, specials in _DEFORM_ROI_POOL_CALLS:
        params = {"pooled_height": PH, "pooled_width": PW, "spatial_scale": scale, "sampling_ratio": sampling_ratio,
                  "gamma": gamma}
        units = np.concatenate([rng.permutation(R)[:5], [R - 1]]) if R else None
        variants = ((False, None, False, False), (True, None, False, False), (True, None, True, False),
                    (True, np.float32, False, False), (False, None, False, True), (True, None, True, True))
        for with_offset, rois_dtype, step_loop, by_units in variants:
            if by_units and units is None:
                continue
            inputs = _deform_roi_pool_inputs(rng, dtype, N, H, W, C, R, PH, PW, with_offset, specials, rois_dtype)
            del inputs["grad_output"]
            numpy_way, compiled_way = _forward_both_ways(monkeypatch, inputs, params, units if by_units else None,
                                                         step_loop)
            assert numpy_way.dtype == compiled_way.dtype == dtype and numpy_way.shape == compiled_way.shape
            assert numpy_way.tobytes() == compiled_way.tobytes(), \
                (N, H, W, C, R, PH, PW, sampling_ratio, with_offset, rois_dtype, step_loop, by_units)
            reached += int(np.count_nonzero(compiled_way) > 0)
            empty += int(compiled_way.size == 0 or H * W == 0)      # zeros by the empty-map rule
            calls += 1
    # Under OPCASE_NO_CC the loop answers None; else it computed every call, none handed back to numpy.
    assert ran == [False, True] * calls, ran
    assert reached >= (calls - empty) * 2 // 3 and empty == 16, (reached, empty, calls)


def test_deform_roi_pool_forward_emulation_keeps_numpys_refusals(compiled_deform_roi_pool, monkeypatch):
    """Batch indices outside the inputs (numpy raises), and bins of over MAX_EMULATED_STEPS samples: the largest
    grid_h times the largest grid_w of each chunk of rois as numpy pools them (two rois of 300 x 1 and 1 x 300
    steps pass alone, not together), raised by the loop as by numpy and at once; arrays it does not take."""
    from gen.kernels.deform_roi_pool import compiled_mmcv_forward, mmcv_emulation
    features = (np.arange(12, dtype=np.float32) - 5).reshape(1, 2, 3, 2)
    rois = np.array([[0, 0, 0, 0.5, 299.5], [0, 0, 0, 299.5, 0.5]], np.float32)
    params = {"pooled_height": 1, "pooled_width": 1, "sampling_ratio": 0, "spatial_scale": 1.0, "gamma": 0.1}
    inputs = {"input": features, "rois": rois}
    refused = _forward_both_ways(monkeypatch, inputs, params)
    assert refused[0] == refused[1] and "a bin of the call has 9e+04 samples" in refused[0], refused
    monkeypatch.setattr(mmcv_emulation, "_CHUNK_ELEMENTS", 2)                  # one roi a chunk
    numpy_way, compiled_way = _forward_both_ways(monkeypatch, inputs, params)
    assert numpy_way.tobytes() == compiled_way.tobytes() and np.count_nonzero(compiled_way) == 4
    monkeypatch.setattr(mmcv_emulation, "_CHUNK_ELEMENTS", 4)                  # both rois again
    assert _forward_both_ways(monkeypatch, inputs, params) == refused
    started = time.monotonic()
    huge = _forward_both_ways(monkeypatch, {**inputs, "rois": np.array([[0, 0, 0, 1e6, 1e6]], np.float32)}, params)
    assert huge[0] == huge[1] and "over the" in huge[0] and time.monotonic() - started < 5, huge
    outside = _forward_both_ways(monkeypatch, {**inputs, "rois": np.array([[1, 0, 0, 1, 1]], np.float32)}, params)
    assert outside[0] == outside[1] and "batch indices" in outside[0], outside
    assert compiled_mmcv_forward.deform_roi_pool_forward({**inputs, "rois": rois[:1]}, params, 1 << 20) is not None
    for changed in ({"input": features.astype(np.float64)}, {"rois": rois.astype(np.int64)},
                    {"rois": rois[:, :4]}, {"offset": np.zeros((2, 2, 1, 2), np.float32)},
                    {"offset": np.zeros((2, 2, 1, 1), np.int32)}):
        assert compiled_mmcv_forward.deform_roi_pool_forward({**inputs, **changed}, params, 1 << 20) is None, changed


@pytest.fixture
def compiled_border_align(fresh_native_cache):
    from gen.kernels.border_align import compiled_mmcv_backward
    assert compiled_mmcv_backward._loop() is not None, \
        "a C compiler is on PATH but border_align_backward_mmcv_kernel.c did not build"


def _border_align_inputs(rng, dtype, N, K, C, H, W, pool_size: int, specials: int, boxes_dtype=None):
    """Boxes inside, on and past the map's edges, some of zero size, on pixel edges; argmax_idx in
    [0, pool_size], a few outside it (the emulation's other path); specials in grad_output."""
    x1, y1 = rng.uniform(-3, W + 1, (N, K)), rng.uniform(-3, H + 1, (N, K))
    boxes = np.stack([x1, y1, x1 + rng.uniform(0, W + 2, (N, K)), y1 + rng.uniform(0, H + 2, (N, K))], -1)
    boxes.reshape(-1, 4)[: N * K // 4] = rng.integers(-1, max(H, W) + 2, (N * K // 4, 4))
    boxes.reshape(-1, 4)[N * K // 4: N * K // 3, 2:] = boxes.reshape(-1, 4)[N * K // 4: N * K // 3, :2]   # zero size
    argmax = rng.integers(0, pool_size + 1, (N, K, 4, C)).astype(np.int32)
    grad_output = rng.normal(size=(N, K, 4, C)) * rng.choice([1.0, 500.0])
    flat = grad_output.reshape(-1)
    if flat.size and specials:
        flat[rng.integers(0, flat.size, specials)] = rng.choice([np.nan, np.inf, -np.inf, -0.0, 7e4, 1e-6], specials)
        argmax.reshape(-1)[rng.integers(0, argmax.size, specials)] = rng.choice([-2, -1, pool_size + 1], specials)
    with np.errstate(over="ignore"):
        return {"grad_output": grad_output.astype(dtype), "boxes": boxes.astype(boxes_dtype or dtype),
                "argmax_idx": argmax}


# (N, K, C, H, W, pool_size, specials): several blocks of 128, one-pixel maps, more points than pixels,
# mlu-ops' C = 129, empty boxes, channels and maps.
_BORDER_ALIGN_CALLS = [
    (1, 12, 1, 3, 4, 1, 0), (2, 20, 6, 4, 5, 4, 3), (2, 1, 8, 1, 1, 3, 0), (1, 20, 4, 4, 5, 32, 2),
    (1, 70, 9, 10, 7, 10, 4), (1, 64, 4, 8, 8, 10, 0), (3, 5, 1, 1, 5, 8, 1), (1, 0, 3, 4, 4, 2, 0),
    (1, 3, 0, 4, 4, 2, 0), (1, 3, 2, 0, 4, 2, 0),
]


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_border_align_backward_compiled_emulation_is_numpys_bit_for_bit(compiled_border_align, monkeypatch, dtype):
    from gen.kernels.border_align import compiled_mmcv_backward
    from gen.kernels.border_align.mmcv_emulation import atomic_adds_thread_by_thread, border_align_backward
    rng = np.random.default_rng(37)
    ran = _answers(monkeypatch, compiled_mmcv_backward, "border_align_backward")
    calls, reached = 0, 0
    for N, K, C, H, W, pool_size, specials in _BORDER_ALIGN_CALLS:
        for emulation, boxes_dtype in ((border_align_backward, None), (atomic_adds_thread_by_thread, None),
                                       (border_align_backward, np.float32)):
            inputs = _border_align_inputs(rng, dtype, N, K, C, H, W, pool_size, specials, boxes_dtype)
            arguments = (inputs, {"pool_size": pool_size}, {"grad_input": (N, H, W, 4 * C)})
            with np.errstate(all="ignore"):
                monkeypatch.setenv("OPCASE_NO_CC", "1")
                numpy_way = emulation(*arguments)["grad_input"]
                monkeypatch.delenv("OPCASE_NO_CC")
                compiled_way = emulation(*arguments)["grad_input"]
            assert numpy_way.dtype == compiled_way.dtype == dtype
            assert numpy_way.shape == compiled_way.shape == (N, H, W, 4 * C)
            assert numpy_way.tobytes() == compiled_way.tobytes(), (N, K, C, H, W, pool_size, emulation.__name__)
            reached += int(np.count_nonzero(compiled_way) > 0)
            calls += 1
    assert ran == [False, True] * calls, ran
    assert reached >= calls * 2 // 3, reached


def test_border_align_backward_emulation_leaves_to_numpy_what_the_loop_does_not_take(compiled_border_align):
    from gen.kernels.border_align import compiled_mmcv_backward as loop
    inputs = _border_align_inputs(np.random.default_rng(3), np.float32, 2, 3, 4, 5, 5, 2, 0)
    shape = (2, 5, 5, 16)
    args = (inputs["grad_output"], inputs["boxes"], inputs["argmax_idx"], 2)
    assert loop.border_align_backward(*args, shape, False) is not None
    assert loop.border_align_backward(*args, (2, 5, 5, 18), False) is None                  # 4C: not C's
    assert loop.border_align_backward(*args, (3, 5, 5, 16), False) is None                  # another N
    assert loop.border_align_backward(inputs["grad_output"], inputs["boxes"], inputs["argmax_idx"].astype(np.int64),
                                      2, shape, False) is None
    assert loop.border_align_backward(inputs["grad_output"].astype(np.float64), *args[1:], shape, False) is None


@pytest.fixture
def compiled_carafe(fresh_native_cache):
    from gen.kernels.carafe import compiled_mmcv as carafe_compiled
    assert carafe_compiled._function("carafe_forward_mmcv", carafe_compiled._FORWARD_ARGTYPES) is not None, \
        "a C compiler is on PATH but carafe_mmcv_kernel.c did not build"


def _carafe_inputs(rng, dtype, N, H, W, C, k, G, s, specials: int):
    """input, mask (uniform [-1, 1]: cancellation, or a few spiked taps) and grad_output at scales where half
    sums overflow; specials (NaN, inf, half overflow, -0, half subnormals) in each."""
    Ho, Wo = H * s, W * s
    arrays = {"input": rng.normal(size=(N, H, W, C)) * rng.choice([1.0, 300.0]),
              "mask": rng.uniform(-1, 1, (N, Ho, Wo, G * k * k)) * rng.choice([1.0, 40.0]),
              "grad_output": rng.normal(size=(N, Ho, Wo, C)) * rng.choice([1.0, 300.0])}
    for array in arrays.values():
        flat = array.reshape(-1)
        if flat.size and specials:
            flat[rng.integers(0, flat.size, specials)] = rng.choice(
                [np.nan, np.inf, -np.inf, -0.0, 7e4, 6e4, 1e-6, -3e-8], specials)
    with np.errstate(over="ignore"):                    # 7e4 is inf in half
        return {name: array.astype(dtype) for name, array in arrays.items()}


# (N, H, W, C, kernel_size, group_size, scale_factor, specials): the docs' mluops_case_0 of the forward and
# the backward, one-pixel and one-row maps (most taps outside), windows wider than the map, k = 1, s = 1 and 4,
# groups of 3, 5 (8 lanes, 3 of them padding), 32, 33 and 70 channels (a last partial step of the warp),
# 4 groups, several images, and empty batches, channels and maps.
_CARAFE_CALLS = [
    (1, 3, 3, 1, 5, 1, 2, 0), (1, 3, 3, 2148, 5, 1, 3, 6), (1, 1, 1, 4, 3, 1, 2, 1), (1, 1, 5, 10, 5, 2, 2, 2),
    (1, 2, 2, 33, 7, 1, 1, 3), (2, 4, 3, 12, 1, 4, 4, 2), (1, 5, 4, 15, 3, 3, 2, 3), (2, 5, 6, 64, 3, 2, 2, 4),
    (1, 4, 4, 70, 5, 1, 3, 3), (1, 6, 5, 128, 3, 4, 2, 5), (0, 4, 4, 8, 3, 2, 2, 0), (1, 4, 4, 0, 3, 2, 2, 0),
    (2, 0, 5, 8, 3, 2, 2, 0),
]


def _carafe_both_ways(monkeypatch, function, inputs, params, units=None):
    """function's outputs (the whole kernel, or units' values) under OPCASE_NO_CC and with the loop; the
    exception's type where one raises."""
    from gen.kernels.carafe import mmcv_emulation
    ways = []
    for no_cc in (True, False):
        if no_cc:
            monkeypatch.setenv("OPCASE_NO_CC", "1")
        try:
            with np.errstate(all="ignore"):
                if units is None:
                    ways.append(getattr(mmcv_emulation, function)(inputs, params))
                else:
                    ways.append(getattr(mmcv_emulation, function + "_units")(inputs, params).values(units))
        except ValueError as error:
            ways.append(type(error))
        monkeypatch.delenv("OPCASE_NO_CC", raising=False)
    return ways


@pytest.mark.parametrize("generic", [False, True], ids=["this_cpu", "generic_x86_64"])
@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_carafe_compiled_emulation_is_numpys_bit_for_bit(compiled_carafe, monkeypatch, dtype, generic):
    """Both directions, whole and by units (in an order of their own, one repeated), on both builds of the loop
    (x86-64-v3 where this CPU has it, and the baseline one forced)."""
    import ctypes
    from gen import native
    from gen.kernels.carafe import compiled_mmcv as carafe_compiled
    monkeypatch.setattr(ctypes.c_int.in_dll(native.load(carafe_compiled._SOURCE), "carafe_mmcv_generic_only"),
                        "value", int(generic))
    rng = np.random.default_rng(37)
    ran = {name: _answers(monkeypatch, carafe_compiled, name) for name in ("forward", "backward")}
    calls, reached, raised = 0, 0, 0
    for N, H, W, C, k, G, s, specials in _CARAFE_CALLS:
        inputs = _carafe_inputs(rng, dtype, N, H, W, C, k, G, s, specials)
        params = {"kernel_size": k, "group_size": G, "scale_factor": s}
        units = rng.permutation(N * H * W)[:7]
        units = np.concatenate([units, units[:1]])
        for function, whole in (("carafe_forward", True), ("carafe_backward", True),
                                ("carafe_forward", False), ("carafe_backward", False)):
            numpy_way, compiled_way = _carafe_both_ways(monkeypatch, function, inputs, params, None if whole else units)
            if numpy_way is ValueError:     # the forward's units of an empty map (numpy's reshape of no blocks)
                assert compiled_way is ValueError and not whole and N * H * W == 0, (N, H, W, C, function)
                raised += 1
                continue
            assert numpy_way.keys() == compiled_way.keys()
            for name in numpy_way:
                assert numpy_way[name].dtype == compiled_way[name].dtype == dtype, name
                assert numpy_way[name].shape == compiled_way[name].shape, name
                assert numpy_way[name].tobytes() == compiled_way[name].tobytes(), (N, H, W, C, k, G, s, function,
                                                                                   whole, name)
                reached += int(np.count_nonzero(compiled_way[name]) > 0)
            calls += 1
    # Under OPCASE_NO_CC the loop answers None; else it computed every call but the 2 it leaves numpy to raise.
    answers = [pair for name in ran for pair in zip(ran[name][::2], ran[name][1::2])]
    assert len(answers) == calls + raised and not any(no_cc for no_cc, _ in answers), ran
    assert sum(loop for _, loop in answers) == calls, ran
    assert reached >= calls and raised == 2, (reached, raised)


def test_carafe_emulation_leaves_to_numpy_what_the_loop_does_not_take(compiled_carafe):
    """Mixed dtypes, float64, a mask or gradient of another shape, channels no multiple of the groups (numpy's
    ValueError), pixels outside the map and non-contiguous maps for units: numpy's path."""
    from gen.kernels.carafe import compiled_mmcv as loop
    from gen.kernels.carafe.mmcv_emulation import carafe_forward
    inputs = _carafe_inputs(np.random.default_rng(3), np.float32, 1, 4, 5, 6, 3, 2, 2, 0)
    assert loop.forward(inputs, 3, 2, 2) is not None and loop.backward(inputs, 3, 2, 2) is not None
    assert loop.forward(inputs, 3, 2, 2, np.array([0, 19])) is not None
    assert loop.forward({**inputs, "mask": inputs["mask"].astype(np.float16)}, 3, 2, 2) is None
    assert loop.forward({name: a.astype(np.float64) for name, a in inputs.items()}, 3, 2, 2) is None
    assert loop.forward(inputs, 3, 1, 2) is None and loop.forward(inputs, 5, 2, 2) is None        # mask's channels
    assert loop.backward({**inputs, "grad_output": inputs["grad_output"][:, :-1]}, 3, 2, 2) is None
    assert loop.forward(inputs, 3, 4, 2) is None and loop.forward(inputs, 3, 0, 2) is None
    with pytest.raises(ValueError):
        carafe_forward({**inputs, "mask": np.zeros((1, 8, 10, 36), np.float32)}, {"kernel_size": 3, "group_size": 4,
                                                                                   "scale_factor": 2})
    assert loop.forward(inputs, 3, 2, 2, np.array([0, 20])) is None
    assert loop.forward(inputs, 3, 2, 2, np.array([-1])) is None
    assert loop.forward(inputs, 3, 2, 2, np.array([0.0])) is None
    strided = {**inputs, "input": np.asfortranarray(inputs["input"])}
    assert loop.forward(strided, 3, 2, 2, np.array([0])) is None and loop.forward(strided, 3, 2, 2) is not None
