"""border_align_forward beyond the generic tests (tests/test_kernels.py): the docs' worked examples, nan
and inf next to parked corners, the mmcv emulation's float16 arithmetic, how many bugs are planted, and
mlu-ops' own case file as the spec reads it."""
from __future__ import annotations

import numpy as np
import pytest

from conftest import REPO
from gen import golden
from gen.core.casefile import load
from gen.kernels.border_align.mmcv_emulation_forward import border_align_forward as mmcv_forward
from gen.kernels.border_align import reference as border_align
from gen.kernels.border_align import reference_forward as values
from gen.core.registry import planted_bugs, planted_controls
from harness.backends import load_backend
from harness.mluops import case_from_mluops, load_mluops
from kernels import record
from kernels.bilinear import sample
from test_ref_border_align import MMCV_INPUT, MMCV_OUTPUT_POOL_2

OP = "border_align_forward"


RECORD = record(OP)


@pytest.fixture(scope="module")
def cases(suites):
    """The random, boundary and invalid suites the generic tests share (conftest.suites)."""
    return suites(OP)


def _valid(directory):
    return [load(p) for p in sorted(directory.rglob("*.opcase")) if "invalid" not in p.parts]


# ----------------------------------------------------------------------------- the docs

def _doc_inputs(dtype):
    return {"input": values.doc_example(None, None, "input").astype(dtype),
            "boxes": values.doc_example(None, None, "boxes").astype(dtype)}


def _implementations():
    """name -> (inputs, params, dtype) -> outputs, for every implementation of the kernel in the project."""
    def torch(inputs, params, dtype):
        return _torch_run(load_backend("torch"), inputs, params,
                          {"output": (1, 12, 4, 1), "argmax_idx": (1, 12, 4, 1)}, dtype)
    return {"reference": lambda inputs, params, dtype: border_align.forward(inputs, params),
            "oracle": lambda inputs, params, dtype: RECORD.oracle(inputs, params),
            "mmcv": lambda inputs, params, dtype: mmcv_forward(inputs, params),
            "torch": torch}


@pytest.mark.parametrize("implementation", ["reference", "oracle", "mmcv",
                                            pytest.param("torch", marks=pytest.mark.needs("torch"))])
@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_doc_worked_example_and_mmcv_test_data(dtype, implementation):
    """Doc 1.2 (pool_size 1) prints the forward output that is the backward example's grad_output
    (and its argmax_idx); mmcv's test_border_align expects MMCV_OUTPUT_POOL_2 for pool_size 2.
    Every sample is exact there, so the reference, the oracle, mmcv and torch all give them."""
    inputs = _doc_inputs(dtype)
    np.testing.assert_array_equal(inputs["input"][0].transpose(2, 0, 1), np.array(MMCV_INPUT)[0])
    run = _implementations()[implementation]
    for pool_size, expected in ((1, border_align.DOC_EXAMPLE_GRAD_OUTPUT), (2, MMCV_OUTPUT_POOL_2)):
        result = run(inputs, {"pool_size": pool_size}, dtype)
        np.testing.assert_array_equal(result["output"][0, :, :, 0], expected, err_msg=f"P={pool_size}")
        if pool_size == 1:
            assert result["argmax_idx"][0, :, :, 0].tolist() == border_align.DOC_EXAMPLE_ARGMAX


def _torch_run(backend, inputs, params, out_shapes, dtype):
    from gen.core.backend import Request, TensorInfo
    outputs = {"output": TensorInfo(shape=out_shapes["output"], dtype=np.dtype(dtype), layout="NHWC"),
               "argmax_idx": TensorInfo(shape=out_shapes["argmax_idx"], dtype=np.dtype(np.int32), layout="NHWC")}
    return backend.run(Request(op=OP, inputs=inputs, params=params, outputs=outputs))


def test_oracle_reads_zero_outside_even_next_to_nan_and_inf():
    """A point more than a pixel outside reads 0 before any arithmetic (mmcv returns early); the
    oracle and mmcv agree on it where a parked corner holds inf or nan."""
    features = np.full((1, 2, 2, 4), np.inf, dtype=np.float32)
    features[..., 1] = np.nan
    boxes = np.array([[[-3.0, -3.0, -2.0, -2.0]]], dtype=np.float32)          # every point outside
    for result in (RECORD.oracle({"input": features, "boxes": boxes}, {"pool_size": 2}),
                   mmcv_forward({"input": features, "boxes": boxes}, {"pool_size": 2}),
                   golden(OP, {"input": features, "boxes": boxes}, {"pool_size": 2})):
        # +0.0, as mmcv's early return gives (not 0 * inf = NaN, nor -0.0 from 0 * a negative corner).
        assert (result["output"] == 0).all() and not np.signbit(result["output"]).any()
        assert (result["argmax_idx"] == 0).all()


# ----------------------------------------------------------------------------- mmcv's arithmetic

def test_mmcv_float16_walks_the_border_in_half():
    """mmcv adds the stride in at::Half (x += x_stride): along a wide map the points drift from
    the float64 ones, so the float16 emulation is not the reference rounded to half, but the
    float64 samples at the half-walked points, to half's rounding of the sums."""
    rng = np.random.default_rng(1)
    H, W, P = 2, 300, 40
    features = rng.normal(size=(1, H, W, 4)).astype(np.float16)
    boxes = np.array([[[0.3, 0.0, 290.1, 0.0]]], dtype=np.float16)            # the top border walks along x
    emulated = mmcv_forward({"input": features, "boxes": boxes}, {"pool_size": P})
    golden = border_align.forward({"input": features, "boxes": boxes}, {"pool_size": P})
    assert emulated["output"].dtype == np.float16
    assert emulated["output"][0, 0, 0, 0] != np.float16(golden["output"][0, 0, 0, 0])
    x, stride = boxes[0, 0, 0], (boxes[0, 0, 2] - boxes[0, 0, 0]) / np.float16(P)
    samples = []
    for _ in range(P + 1):
        samples.append(sample(lambda row, col: float(features[0, row, col, 0]), 0.0, float(x), H, W))
        x = np.float16(x + stride)
    assert int(emulated["argmax_idx"][0, 0, 0, 0]) == int(np.argmax(samples))
    assert abs(float(emulated["output"][0, 0, 0, 0]) - max(samples)) <= 2e-3 * abs(max(samples))


def test_mmcv_float32_agrees_with_float32_arithmetic_elsewhere(cases):
    """On the float32 cases mmcv's output is within a few float32 ulps of the golden."""
    for case in _valid(cases):
        if case.dtype != "float32" or "nan" in case.name:
            continue
        inputs = {name: t.data for name, t in case.inputs.items()}
        emulated = mmcv_forward(inputs, dict(case.params))["output"].astype(np.float64)
        golden = border_align.forward(inputs, dict(case.params))["output"]
        assert np.abs(emulated - golden).max() <= 1e-5 * max(1.0, np.abs(golden).max()), case.name


# ----------------------------------------------------------------------------- planted bugs

def test_at_least_four_planted_bugs():
    assert len(planted_bugs(OP)) >= 4 and len(planted_controls(OP)) >= 1


# ----------------------------------------------------------------------------- mlu-ops

def test_mluops_conformance_file_reads_as_the_spec_says():
    for path in RECORD.CONFORMANCE:
        mlu = load_mluops(REPO / "tests/conformance" / path)
        assert mlu.op == OP and mlu.params == {"pool_size": 10}
        assert list(mlu.inputs) == ["input", "boxes"] and list(mlu.outputs) == ["output", "argmax_idx"]
        assert mlu.inputs["input"].shape == (1, 10, 7, 516) and mlu.inputs["boxes"].shape == (1, 70, 4)
        assert mlu.outputs["argmax_idx"].shape == (1, 70, 4, 129) and mlu.outputs["argmax_idx"].dtype == np.int32
        case = case_from_mluops(mlu, "border_align_forward_0")
        inputs = {n: t.data for n, t in case.inputs.items()}
        reference, expected = border_align.forward(inputs, case.params), RECORD.oracle(inputs, case.params)
        for name in ("output", "argmax_idx"):
            np.testing.assert_array_equal(reference[name], expected[name])
        assert len(set(reference["argmax_idx"].ravel().tolist())) == 11       # every index of pool_size 10
