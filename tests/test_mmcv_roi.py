"""The mmcv emulations of deform_roi_pool forward and border_align backward (gen/kernels/<family>/mmcv_emulation*.py) against
mmcv 2.2.0's own CUDA outputs (conformance/mmcv-cuda): deform_roi_pool bit for bit, border_align
(whose atomicAdds have no fixed order) by diff1 / diff2 within 10 % of mmcv's own."""
from __future__ import annotations

import numpy as np
import pytest

import gen
import harness
from gen.kernels.border_align import mmcv_emulation as border_align
from gen.kernels.deform_roi_pool import mmcv_emulation as deform_roi_pool
from gen.kernels.deform_roi_pool.mmcv_emulation import bilinear_corners, deform_roi_pool_forward, to_int
from gen.kernels.border_align.mmcv_emulation import border_align_backward
from conftest import mmcv_cuda_case, mmcv_cuda_case_ids, raw_bits

METRIC_TOLERANCE = 0.10    # the rule for kernels whose sums have no fixed order


def _case_ids(op: str) -> list:
    return [pytest.param(i, id=i) for i in mmcv_cuda_case_ids(op)]


_case = mmcv_cuda_case


def _mismatched_elements(op: str, case_id: str) -> int:
    meta, inputs, outputs = _case(op, case_id)
    actual = deform_roi_pool_forward(inputs, meta["params"])["output"]
    expected = outputs["output"]
    assert (actual.dtype, actual.shape) == (expected.dtype, expected.shape)
    return int(np.count_nonzero(raw_bits(actual) != raw_bits(expected)))


# ----------------------------------------------------------------------------- deform_roi_pool: bit for bit

@pytest.fixture(params=["numpy", "compiled"])
def forward_path(request, monkeypatch):
    """The forward emulation's numpy code (OPCASE_NO_CC=1), or its compiled loop
    (gen.kernels.deform_roi_pool.compiled_mmcv_forward, which answers first where it is built): each is held to
    mmcv's bits on its own."""
    if request.param == "numpy":
        monkeypatch.setenv("OPCASE_NO_CC", "1")
        return request.param
    request.getfixturevalue("fresh_native_cache")
    from gen.kernels.deform_roi_pool import compiled_mmcv_forward
    assert compiled_mmcv_forward._loop() is not None, "a C compiler is on PATH but the forward's loop did not build"
    return request.param


@pytest.mark.parametrize("case_id", _case_ids("deform_roi_pool_forward"))
def test_deform_roi_pool_forward_is_bit_exact(case_id, forward_path):
    meta, inputs, _ = _case("deform_roi_pool_forward", case_id)
    mismatched = _mismatched_elements("deform_roi_pool_forward", case_id)
    assert mismatched == 0, f"{meta['name']}: {mismatched} elements differ from mmcv's bits"


def test_conformance_covers_both_dtypes_and_offsets():
    """The bit-exact test above means something only if the data has both dtypes, with and without offset."""
    kinds = set()
    for param in _case_ids("deform_roi_pool_forward"):
        meta, inputs, _ = _case("deform_roi_pool_forward", param.values[0])
        kinds.add((inputs["input"].dtype.name, "offset" in inputs, meta["params"]["sampling_ratio"] == 0))
    assert {(d, o) for d, o, _ in kinds} == {(d, o) for d in ("float16", "float32") for o in (True, False)}
    assert any(adaptive for _, _, adaptive in kinds)


def test_float32_without_fused_multiply_adds_is_not_bit_exact(monkeypatch):
    """nvcc's fmas show in mmcv's float32 bits: rounding each product separately breaks bit-exactness
    (so the conformance data decides them, and the bit-exact test can fail).  numpy's code: the compiled
    loop, which would answer first, is held to the same bits by tests/test_compiled_mmcv.py's mutants."""
    monkeypatch.setenv("OPCASE_NO_CC", "1")
    monkeypatch.setattr(deform_roi_pool, "mul_add", lambda a, b, c: np.asarray(a) * np.asarray(b) + np.asarray(c))
    float32_cases = [p.values[0] for p in _case_ids("deform_roi_pool_forward")
                     if _case("deform_roi_pool_forward", p.values[0])[1]["input"].dtype == np.float32]
    assert sum(_mismatched_elements("deform_roi_pool_forward", i) for i in float32_cases) > 0


def test_deform_roi_pool_empty_map_gives_zeros():
    """H = 0: nothing to sample (mmcv would read outside the input); zeros in T, the spec's golden."""
    inputs = {"input": np.zeros((1, 0, 4, 3), np.float16), "rois": np.array([[0, 0, 0, 2, 2]], np.float16)}
    params = {"pooled_height": 2, "pooled_width": 2, "spatial_scale": 1.0, "sampling_ratio": 0, "gamma": 0.1}
    output = deform_roi_pool_forward(inputs, params)["output"]
    assert output.dtype == np.float16 and output.shape == (1, 2, 2, 3) and not output.any()


def test_deform_roi_pool_rejects_batch_indices_outside_the_input():
    """mmcv would read outside its input there; numpy would wrap a negative index around silently."""
    params = {"pooled_height": 1, "pooled_width": 1, "spatial_scale": 1.0, "sampling_ratio": 1, "gamma": 0.1}
    for batch in (-1, 2):
        inputs = {"input": np.ones((2, 3, 3, 1), np.float32), "rois": np.array([[batch, 0, 0, 2, 2]], np.float32)}
        with pytest.raises(ValueError, match="batch indices"):
            deform_roi_pool_forward(inputs, params)


def test_half_points_are_compared_with_the_map_size_as_float():
    """at::Half compares as float: y = 2052 lies outside a map of height 2051 (float16(2051) is 2052)."""
    y = np.array([2052.0], np.float16)
    _, _, weights, inside = bilinear_corners(y, np.zeros(1, np.float16), 2051, 4)
    assert not inside[0] and not weights.any()


def test_int_conversion_is_the_gpus():
    """(int) of a float: toward zero, saturated, NaN to 0 (cvt.rzi.s32.f32)."""
    values = np.array([-1.5, 2.999, np.nan, 3e9, -3e9], np.float32)
    assert to_int(values).tolist() == [-1, 2, 0, 2 ** 31 - 1, -2 ** 31]


# ----------------------------------------------------------------------------- border_align: metrics within 10 %

def _metric_ratios(case_id: str, atomic_order=None) -> dict:
    """diff1 and diff2 against the float64 golden: this emulation's over mmcv's."""
    meta, inputs, outputs = _case("border_align_backward", case_id)
    expected = outputs["grad_input"]
    out_shapes = {"grad_input": expected.shape}
    actual = border_align_backward(inputs, meta["params"], out_shapes, atomic_order=atomic_order)["grad_input"]
    assert (actual.dtype, actual.shape) == (expected.dtype, expected.shape)
    golden = gen.golden("border_align_backward", inputs, meta["params"], out_shapes)["grad_input"]
    ours, mmcv = harness.compare(actual, golden, expected.dtype), harness.compare(expected, golden, expected.dtype)
    return {metric: (ours[metric], mmcv[metric]) for metric in ("diff1", "diff2")}


def _within_tolerance(ours: float, mmcv: float) -> bool:
    return abs(ours - mmcv) <= METRIC_TOLERANCE * mmcv


@pytest.mark.parametrize("case_id", _case_ids("border_align_backward"))
def test_border_align_backward_metrics_within_10_percent_of_mmcv(case_id):
    for metric, (ours, mmcv) in _metric_ratios(case_id).items():
        assert _within_tolerance(ours, mmcv), f"case {case_id}: {metric} {ours:.4g}, mmcv's {mmcv:.4g}"


def test_border_align_thread_by_thread_order_breaks_the_rule():
    """The atomicAdd order matters in float16: each thread's four adds in turn (instead of a
    block's w1 adds first) strays more than 10 % on some case, so the test above can fail."""

    def thread_by_thread(threads):
        thread, corner, border = np.ogrid[:threads, :4, :4]
        return ((corner * threads + thread) * 4 + border).ravel()

    assert not all(_within_tolerance(*pair) for p in _case_ids("border_align_backward")
                   for pair in _metric_ratios(p.values[0], thread_by_thread).values())


def _border_align_cases():
    """border_align_backward's conformance inputs, and its boundary and random cases of both dtypes."""
    from gen.core.registry import spec_for
    from gen.generate import Generator, plan_suite
    for p in _case_ids("border_align_backward"):
        meta, inputs, outputs = _case("border_align_backward", p.values[0])
        yield inputs, meta["params"], {"grad_input": outputs["grad_input"].shape}
    spec = spec_for("border_align_backward")
    generator = Generator(spec)
    for plan in plan_suite(spec, "boundary") + plan_suite(spec, "random", 12, seed=2):
        case = generator._with_inputs(plan)
        if case.expect == "ok":
            yield ({n: t.data for n, t in case.inputs.items() if not t.absent}, dict(case.params),
                   {n: tuple(t.shape) for n, t in case.outputs.items()})


def test_border_align_atomic_adds_built_in_order_are_the_permuted_ones():
    """The default emulation lays its atomicAdds out in _atomic_order's order directly, each point
    computed once per argmax value: the same bits as every thread's point computed and the adds
    permuted by _atomic_order's indices; and an argmax outside [0, pool_size] takes that way."""
    compared = 0
    for inputs, params, out_shapes in _border_align_cases():
        fast = border_align_backward(inputs, params, out_shapes)["grad_input"]
        permuted = border_align_backward(inputs, params, out_shapes, atomic_order=border_align._atomic_order)
        assert raw_bits(fast).tobytes() == raw_bits(permuted["grad_input"]).tobytes()
        compared += 1
    assert compared > 20
    inputs, params, out_shapes = next(_border_align_cases())
    wild = {**inputs, "argmax_idx": np.full_like(inputs["argmax_idx"], int(params["pool_size"]) + 3)}
    assert border_align_backward(wild, params, out_shapes)["grad_input"].shape == tuple(out_shapes["grad_input"])


def test_border_align_backward_needs_the_map_size():
    inputs = {"grad_output": np.zeros((1, 1, 4, 1), np.float32), "boxes": np.zeros((1, 1, 4), np.float32),
              "argmax_idx": np.zeros((1, 1, 4, 1), np.int32)}
    with pytest.raises(ValueError, match="out_shapes"):
        border_align_backward(inputs, {"pool_size": 2})
