"""The torch backend against mmcv's own data and, in float64, against the kernels' slow oracles.
(Against mmcv's psamask and carafe data, and on every generated suite: tests/test_kernels.py.)"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import needs

torch = needs.import_or_skip("torch")

from conftest import CONFORMANCE  # noqa: E402
from harness.backends import torch_backend  # noqa: E402  (needs torch)
from gen.core.backend import InvalidArgument  # noqa: E402
# The backend is checked in float64 against the kernels' slow oracles (tests/kernels/), as the references are.
from kernels import record  # noqa: E402


def oracle(op, inputs, params, out_shapes=None):
    """The slow oracle of ``op``'s record."""
    return record(op).oracle(inputs, params, out_shapes)

MMCV_DATA = CONFORMANCE / "mmcv"

BACKEND = torch_backend.make("cpu")


def run(op, params, inputs, outputs, layout="NHWC"):
    """Run one request; `outputs` maps output name -> (shape, dtype)."""
    request = SimpleNamespace(
        op=op,
        params=params,
        inputs=inputs,
        outputs={name: SimpleNamespace(shape=tuple(shape), dtype=np.dtype(dtype), layout=layout)
                 for name, (shape, dtype) in outputs.items()},
    )
    result = BACKEND.run(request)
    for name, (shape, dtype) in outputs.items():
        assert result[name].shape == tuple(shape), name
        assert result[name].dtype == np.dtype(dtype), name
    return result


def nchw_to_nhwc(a):
    return np.ascontiguousarray(a.transpose(0, 2, 3, 1))


def nhwc_to_nchw(a):
    return np.ascontiguousarray(a.transpose(0, 3, 1, 2))


# ------------------------------------------------------------------------------------------
# Conformance against mmcv's own test data
# ------------------------------------------------------------------------------------------


def test_masked_conv_matches_mmcv_data():
    folder = MMCV_DATA / "for_masked_conv2d"
    load = lambda part: np.load(folder / f"masked_conv2d_for_{part}.npy")  # noqa: E731
    feature, mask, weight, bias, expected = (load(p) for p in
                                             ("input", "mask", "weight", "bias", "output"))
    rows, cols = np.nonzero(mask[0] > 0)  # row-major order
    data_col = run("masked_im2col_forward",
                   dict(kernel_h=3, kernel_w=3, pad_h=1, pad_w=1),
                   {"feature": feature.astype(np.float32),
                    "mask_h_idx": rows.astype(np.int32), "mask_w_idx": cols.astype(np.int32)},
                   {"data_col": ((27, len(rows)), "float32")}, layout="ARRAY")["data_col"]
    conv = bias[:, None] + weight.reshape(3, -1) @ data_col
    out = np.zeros((1, 3, 16, 16), np.float32)
    out[0][:, rows, cols] = conv
    np.testing.assert_allclose(out, expected, atol=1e-5)


# ------------------------------------------------------------------------------------------
# Against the loop implementations
# ------------------------------------------------------------------------------------------


@pytest.fixture
def rng():
    return np.random.default_rng(20240611)


# (H, W, h_mask, w_mask): odd, even (asymmetric), bigger than the map, 1x1
PSAMASK_SHAPES = [(4, 5, 3, 3), (5, 4, 2, 4), (3, 4, 7, 9), (4, 3, 1, 1), (3, 3, 5, 5)]


@pytest.mark.parametrize("psa_type", [0, 1])
@pytest.mark.parametrize("height, width, h_mask, w_mask", PSAMASK_SHAPES)
def test_psamask_forward_matches_loops(rng, psa_type, height, width, h_mask, w_mask):
    x = rng.standard_normal((2, height, width, h_mask * w_mask))
    params = dict(psa_type=psa_type, h_mask=h_mask, w_mask=w_mask)
    y = run("psamask_forward", params, {"x": x},
            {"y": ((2, height, width, height * width), "float64")})["y"]
    np.testing.assert_array_equal(y, oracle("psamask_forward", {"x": x}, params)["y"])


@pytest.mark.parametrize("psa_type", [0, 1])
@pytest.mark.parametrize("height, width, h_mask, w_mask", PSAMASK_SHAPES)
def test_psamask_backward_matches_loops(rng, psa_type, height, width, h_mask, w_mask):
    dy = rng.standard_normal((2, height, width, height * width)).astype(np.float32)
    params = dict(psa_type=psa_type, h_mask=h_mask, w_mask=w_mask)
    dx = run("psamask_backward", params, {"dy": dy},
             {"dx": ((2, height, width, h_mask * w_mask), "float32")})["dx"]
    np.testing.assert_array_equal(dx, oracle("psamask_backward", {"dy": dy}, params)["dx"])


# (kernel_h, kernel_w, pad_h, pad_w)
@pytest.mark.parametrize("kernel", [(3, 3, 1, 1), (2, 3, 0, 2), (1, 1, 0, 0), (5, 1, 3, 0)])
@pytest.mark.parametrize("dtype", ["float64", "float16"])
def test_masked_im2col_matches_loops(rng, kernel, dtype):
    feature = rng.standard_normal((1, 3, 5, 6)).astype(dtype)
    # inside, negative and past-the-map indices (mlu-ops' cases use -4 and -1)
    mask_h_idx = np.array([0, 4, 2, -1, -4, 5, 7, 2, 3], np.int32)
    mask_w_idx = np.array([0, 5, 3, 2, -1, 1, 9, -4, 6], np.int32)
    kh, kw, pad_h, pad_w = kernel
    params = dict(kernel_h=kh, kernel_w=kw, pad_h=pad_h, pad_w=pad_w)
    data_col = run("masked_im2col_forward", params,
                   {"feature": feature, "mask_h_idx": mask_h_idx, "mask_w_idx": mask_w_idx},
                   {"data_col": ((3 * kh * kw, len(mask_h_idx)), dtype)}, layout="ARRAY")
    expected = oracle("masked_im2col_forward", {"feature": feature, "mask_h_idx": mask_h_idx,
                                                "mask_w_idx": mask_w_idx}, params)["data_col"]
    np.testing.assert_array_equal(data_col["data_col"], expected)


def test_masked_im2col_passes_nan_and_inf_through():
    feature = np.arange(2 * 3 * 3, dtype=np.float32).reshape(1, 2, 3, 3)
    feature[0, 0, 1, 1] = np.nan
    feature[0, 1, 0, 0] = np.inf
    mask_h_idx = np.array([0, 1, 2, -2], np.int32)
    mask_w_idx = np.array([0, 1, 2, 0], np.int32)
    params = dict(kernel_h=3, kernel_w=3, pad_h=1, pad_w=1)
    data_col = run("masked_im2col_forward", params,
                   {"feature": feature, "mask_h_idx": mask_h_idx, "mask_w_idx": mask_w_idx},
                   {"data_col": ((18, 4), "float32")}, layout="ARRAY")["data_col"]
    expected = oracle("masked_im2col_forward", {"feature": feature, "mask_h_idx": mask_h_idx,
                                                "mask_w_idx": mask_w_idx}, params)["data_col"]
    np.testing.assert_array_equal(data_col, expected)


def test_masked_im2col_with_no_mask_points():
    data_col = run("masked_im2col_forward", dict(kernel_h=3, kernel_w=3, pad_h=1, pad_w=1),
                   {"feature": np.ones((1, 2, 4, 4), np.float32),
                    "mask_h_idx": np.zeros(0, np.int32), "mask_w_idx": np.zeros(0, np.int32)},
                   {"data_col": ((18, 0), "float32")}, layout="ARRAY")["data_col"]
    assert data_col.shape == (18, 0)


# (N, H, W, C, kernel_size, group_size, scale_factor)
CARAFE_SHAPES = [(2, 3, 4, 4, 3, 2, 2), (1, 2, 3, 3, 5, 1, 1), (1, 4, 2, 6, 3, 3, 3),
                 (1, 1, 1, 2, 1, 2, 2)]


def carafe_inputs(rng, n, height, width, channels, k, groups, scale, dtype):
    inp = rng.standard_normal((n, height, width, channels)).astype(dtype)
    mask = rng.standard_normal((n, height * scale, width * scale, groups * k * k)).astype(dtype)
    return inp, mask, dict(kernel_size=k, group_size=groups, scale_factor=scale)


@pytest.mark.parametrize("shape", CARAFE_SHAPES)
def test_carafe_forward_matches_loops(rng, shape):
    inp, mask, params = carafe_inputs(rng, *shape, "float64")
    out = run("carafe_forward", params, {"input": inp, "mask": mask},
              {"output": (mask.shape[:3] + inp.shape[3:], "float64")})["output"]
    expected = oracle("carafe_forward", {"input": inp, "mask": mask}, params)["output"]
    np.testing.assert_allclose(out, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("shape", CARAFE_SHAPES)
def test_carafe_backward_matches_loops(rng, shape):
    inp, mask, params = carafe_inputs(rng, *shape, "float64")
    grad_out = rng.standard_normal(mask.shape[:3] + inp.shape[3:])
    grads = run("carafe_backward", params, {"input": inp, "mask": mask, "grad_output": grad_out},
                {"grad_input": (inp.shape, "float64"), "grad_mask": (mask.shape, "float64")})
    expected = oracle("carafe_backward", {"input": inp, "mask": mask, "grad_output": grad_out}, params)
    np.testing.assert_allclose(grads["grad_input"], expected["grad_input"], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(grads["grad_mask"], expected["grad_mask"], rtol=1e-12, atol=1e-12)


def test_carafe_half_accumulates_in_float32(rng):
    inp, mask, params = carafe_inputs(rng, *CARAFE_SHAPES[0], "float16")
    out = run("carafe_forward", params, {"input": inp, "mask": mask},
              {"output": (mask.shape[:3] + inp.shape[3:], "float16")})["output"]
    expected = oracle("carafe_forward", {"input": inp, "mask": mask}, params)["output"]
    # one rounding to half at the end: within half an ulp of float16 plus float32 noise
    np.testing.assert_allclose(out.astype(np.float64), expected, rtol=2 ** -11, atol=1e-6)


def test_carafe_skips_taps_outside_the_map_even_with_inf_masks():
    inp = np.ones((1, 1, 1, 1), np.float32)
    mask = np.full((1, 1, 1, 9), np.inf, np.float32)
    mask[..., 4] = 2.0  # the centre tap, the only one inside a 1x1 map
    out = run("carafe_forward", dict(kernel_size=3, group_size=1, scale_factor=1),
              {"input": inp, "mask": mask}, {"output": ((1, 1, 1, 1), "float32")})["output"]
    assert out.item() == 2.0


def deform_roi_pool_case(rng, dtype):
    inp = rng.standard_normal((2, 6, 7, 3)).astype(dtype)
    rois = np.array([
        [0, 1.0, 1.0, 4.0, 5.0],     # inside the map
        [1, -3.0, -2.0, 3.0, 2.5],   # crosses the top-left edge
        [0, 4.0, 3.0, 9.5, 8.0],     # crosses the bottom-right edge and beyond
        [1, 2.0, 2.0, 2.2, 2.1],     # tiny: a 1x1 grid with sampling_ratio 0
        [0, 5.0, 4.0, 2.0, 1.0],     # inverted: an empty grid, output 0
        [1, -9.0, -9.0, -4.0, -4.0],  # entirely outside: output 0
    ], dtype)
    offset = (rng.standard_normal((len(rois), 2, 2, 3)) * 2).astype(dtype)
    return inp, rois, offset


@pytest.mark.parametrize("sampling_ratio", [0, 2])
@pytest.mark.parametrize("with_offset", [False, True])
@pytest.mark.parametrize("spatial_scale", [1.0, 0.5])
def test_deform_roi_pool_matches_loops(rng, sampling_ratio, with_offset, spatial_scale):
    inp, rois, offset = deform_roi_pool_case(rng, "float64")
    offset = offset if with_offset else None
    params = dict(pooled_height=2, pooled_width=3, spatial_scale=spatial_scale,
                  sampling_ratio=sampling_ratio, gamma=0.3)
    out = run("deform_roi_pool_forward", params, {"input": inp, "rois": rois, "offset": offset},
              {"output": ((len(rois), 2, 3, 3), "float64")})["output"]
    expected = oracle("deform_roi_pool_forward", {"input": inp, "rois": rois, "offset": offset}, params)["output"]
    np.testing.assert_allclose(out, expected, rtol=1e-12, atol=1e-12)


def test_deform_roi_pool_without_offset_key_and_in_half(rng):
    inp, rois, _ = deform_roi_pool_case(rng, "float16")
    params = dict(pooled_height=2, pooled_width=3, spatial_scale=1.0, sampling_ratio=0, gamma=0.1)
    out = run("deform_roi_pool_forward", params, {"input": inp, "rois": rois},
              {"output": ((len(rois), 2, 3, 3), "float16")})["output"]
    expected = oracle("deform_roi_pool_forward", {"input": inp, "rois": rois}, params)["output"]
    np.testing.assert_allclose(out.astype(np.float64), expected, rtol=2 ** -10, atol=1e-3)


def test_deform_roi_pool_on_an_empty_map_gives_zeros():
    params = dict(pooled_height=2, pooled_width=2, spatial_scale=1.0, sampling_ratio=0, gamma=0.1)
    out = run("deform_roi_pool_forward", params,
              {"input": np.zeros((1, 0, 0, 4), np.float32),
               "rois": np.array([[0, 0, 0, 3, 3]], np.float32)},
              {"output": ((1, 2, 2, 4), "float32")})["output"]
    np.testing.assert_array_equal(out, 0)


# mmcv's tests/test_ops/test_border_align.py data, NCHW: input [1, 4C=4, H=3, W=4], boxes [1, 12, 4]
BORDER_ALIGN_INPUT = np.array([[[[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12]],
                                [[6, 7, 5, 8], [2, 1, 3, 4], [12, 9, 11, 10]],
                                [[-2, -3, 2, 0], [-4, -5, 1, -1], [-1, -1, -1, -1]],
                                [[0, -1, 2, 1], [-4, -3, -2, -1], [-1, -2, -3, -4]]]], np.float32)
BORDER_ALIGN_BOXES = np.array([[[0, 0, 2, 1], [1, 0, 3, 1], [1, 0, 2, 1], [0, 0, 3, 1],
                                [0, 0, 1, 2], [0, 0, 2, 2], [1, 0, 2, 1], [1, 0, 3, 1],
                                [0, 1, 1, 2], [0, 0, 3, 2], [1, 0, 3, 2], [2, 0, 3, 2]]],
                              np.float32)


@pytest.mark.parametrize("pool_size, expected_nchw", [
    (1, [[[0, 1, 4, 6], [0, 1, 0, 0], [0, 0, 0, 0]],
         [[2, 4, 0, 0], [0, 0, 0, 0], [4, 1, 1, 0]],
         [[0, 0, 0, 0], [0, 0, 3, 3], [0, 2, 1, 3]],
         [[0, 1, 4, 6], [0, 0, 0, 0], [0, 1, 0, 0]]]),
    (2, [[[0, 1, 4, 6], [0, 1, 0, 0], [0, 0, 0, 0]],
         [[2, 4, 0, 0], [0, 0, 0, 0], [4, 1, 1, 0]],
         [[0, 0, 0, 0], [0, 0, 5, 1], [0, 2, 1, 3]],
         [[0, 1, 4, 6], [0, 0, 0, 0], [0, 1, 0, 0]]]),
])
def test_border_align_backward_matches_mmcv_test_data(pool_size, expected_nchw):
    """mmcv's own check: input gradient of border_align with grad_output = ones."""
    argmax_idx = oracle("border_align_forward", {"input": nchw_to_nhwc(BORDER_ALIGN_INPUT), "boxes": BORDER_ALIGN_BOXES},
                        dict(pool_size=pool_size))["argmax_idx"]
    grad_input = run("border_align_backward", dict(pool_size=pool_size),
                     {"grad_output": np.ones(argmax_idx.shape, np.float32),
                      "boxes": BORDER_ALIGN_BOXES, "argmax_idx": argmax_idx},
                     {"grad_input": ((1, 3, 4, 4), "float32")})["grad_input"]
    np.testing.assert_array_equal(grad_input, nchw_to_nhwc(np.array([expected_nchw], np.float32)))


def test_border_align_backward_worked_example():
    """Doc 003 section 1.2 (pool_size 1), given there in mmcv's NCHW layouts.

    Its grad_output is the forward output of mmcv's test data and its argmax_idx that
    forward's argmax. The grad_input it prints is exactly twice what one call of mmcv's
    kernel gives (the loops of OPS.md, mmcv's own test above and this backend agree), as if
    the call had run twice into the same buffer: one call must give half of it.
    """
    grad_output = np.array([[3, 6, 1, 2], [4, 7, -1, 1], [3, 7, 1, 2], [4, 6, -1, 1],
                            [2, 12, -1, -1], [3, 12, -1, 2], [3, 7, 1, 2], [4, 7, -1, 1],
                            [6, 12, -1, -2], [4, 12, -1, 1], [4, 9, -1, 1], [4, 11, -1, 1]],
                           np.float32)
    argmax_idx = np.array([[1, 0, 0, 1], [1, 0, 0, 1], [1, 0, 0, 1], [1, 0, 0, 1],
                           [1, 1, 0, 1], [1, 1, 0, 1], [1, 0, 0, 1], [1, 0, 0, 1],
                           [1, 1, 0, 0], [1, 1, 0, 1], [1, 1, 0, 1], [1, 1, 0, 1]], np.int32)
    printed_nchw = np.array([[[0, 4, 24, 48], [0, 12, 0, 0], [0, 0, 0, 0]],
                             [[24, 56, 0, 0], [0, 0, 0, 0], [96, 18, 22, 0]],
                             [[0, 0, 0, 0], [0, 0, 6, -6], [0, -4, -2, -6]],
                             [[0, -2, 16, 12], [0, 0, 0, 0], [0, -4, 0, 0]]], np.float32)[None]
    forward = oracle("border_align_forward", {"input": nchw_to_nhwc(BORDER_ALIGN_INPUT), "boxes": BORDER_ALIGN_BOXES},
                     dict(pool_size=1))
    np.testing.assert_array_equal(forward["output"][0, :, :, 0], grad_output)
    np.testing.assert_array_equal(forward["argmax_idx"][0, :, :, 0], argmax_idx)
    # mmcv's grad_output [N=1, C=1, K=12, 4] is NHWC [1, 12, 4, 1]
    grad_input = run("border_align_backward", dict(pool_size=1),
                     {"grad_output": grad_output[None, :, :, None],
                      "boxes": BORDER_ALIGN_BOXES, "argmax_idx": argmax_idx[None, :, :, None]},
                     {"grad_input": ((1, 3, 4, 4), "float32")})["grad_input"]
    np.testing.assert_array_equal(grad_input, nchw_to_nhwc(printed_nchw) / 2)


@pytest.mark.parametrize("pool_size", [1, 3, 10])
def test_border_align_backward_matches_loops(rng, pool_size):
    n, box_count, channels, height, width = 2, 5, 3, 6, 7
    corner = rng.uniform(-2.5, 5.0, (n, box_count, 2))
    size = rng.uniform(0.0, 5.0, (n, box_count, 2))
    boxes = np.concatenate([corner, corner + size], axis=-1)  # some cross or leave the map
    grad_out = rng.standard_normal((n, box_count, 4, channels))
    argmax_idx = rng.integers(0, pool_size + 1, (n, box_count, 4, channels), dtype=np.int32)
    grad_input = run("border_align_backward", dict(pool_size=pool_size),
                     {"grad_output": grad_out, "boxes": boxes, "argmax_idx": argmax_idx},
                     {"grad_input": ((n, height, width, 4 * channels), "float64")})["grad_input"]
    expected = oracle("border_align_backward", {"grad_output": grad_out, "boxes": boxes, "argmax_idx": argmax_idx},
                      dict(pool_size=pool_size), {"grad_input": (n, height, width, 4 * channels)})["grad_input"]
    np.testing.assert_allclose(grad_input, expected, rtol=1e-12, atol=1e-12)


def test_border_align_backward_half_returns_half(rng):
    boxes = np.array([[[0.5, 0.5, 3.0, 2.5], [1.0, 0.0, 4.5, 3.5]]], np.float16)
    grad_out = rng.standard_normal((1, 2, 4, 2)).astype(np.float16)
    argmax_idx = rng.integers(0, 3, (1, 2, 4, 2), dtype=np.int32)
    grad_input = run("border_align_backward", dict(pool_size=2),
                     {"grad_output": grad_out, "boxes": boxes, "argmax_idx": argmax_idx},
                     {"grad_input": ((1, 4, 5, 8), "float16")})["grad_input"]
    expected = oracle("border_align_backward", {"grad_output": grad_out, "boxes": boxes, "argmax_idx": argmax_idx},
                      dict(pool_size=2), {"grad_input": (1, 4, 5, 8)})["grad_input"]
    np.testing.assert_allclose(grad_input.astype(np.float64), expected, rtol=2 ** -10, atol=1e-3)


# ------------------------------------------------------------------------------------------
# Interface
# ------------------------------------------------------------------------------------------


def test_supports():
    assert BACKEND.name == "torch"
    assert BACKEND.supports("psamask_forward", "float32")
    assert not BACKEND.supports("psamask_forward", "float16")
    assert BACKEND.supports("carafe_backward", "float16")
    assert BACKEND.supports("border_align_backward", "float64")
    assert not BACKEND.supports("roi_align_forward", "float32")
    assert not BACKEND.supports("carafe_forward", "int32")


@pytest.mark.parametrize("op, params, inputs, outputs", [
    ("carafe_forward", dict(kernel_size=3, group_size=1, scale_factor=2),
     {"input": np.ones((1, 2, 2, 4), np.float32), "mask": np.ones((1, 3, 4, 9), np.float32)},
     {"output": ((1, 4, 4, 4), "float32")}),
    ("carafe_forward", dict(kernel_size=3, group_size=3, scale_factor=1),
     {"input": np.ones((1, 2, 2, 4), np.float32), "mask": np.ones((1, 2, 2, 27), np.float32)},
     {"output": ((1, 2, 2, 4), "float32")}),
    ("psamask_forward", dict(psa_type=0, h_mask=3, w_mask=3),
     {"x": np.ones((1, 2, 2, 8), np.float32)}, {"y": ((1, 2, 2, 4), "float32")}),
    ("deform_roi_pool_forward",
     dict(pooled_height=2, pooled_width=2, spatial_scale=1.0, sampling_ratio=0, gamma=0.1),
     {"input": np.ones((1, 4, 4, 2), np.float32), "rois": np.array([[3, 0, 0, 2, 2]], np.float32)},
     {"output": ((1, 2, 2, 2), "float32")}),
    ("deform_roi_pool_forward",  # sampling_ratio 0 on a roi of absurd size
     dict(pooled_height=2, pooled_width=2, spatial_scale=1.0, sampling_ratio=0, gamma=0.1),
     {"input": np.ones((1, 4, 4, 2), np.float32),
      "rois": np.array([[0, 0, 0, 1e30, 1e30]], np.float32)},
     {"output": ((1, 2, 2, 2), "float32")}),
    ("border_align_backward", dict(pool_size=2),
     {"grad_output": np.ones((1, 2, 4, 1), np.float32), "boxes": np.ones((1, 3, 4), np.float32),
      "argmax_idx": np.zeros((1, 2, 4, 1), np.int32)},
     {"grad_input": ((1, 3, 3, 4), "float32")}),
    ("masked_im2col_forward", dict(kernel_h=3, kernel_w=3, pad_h=1, pad_w=1),
     {"feature": np.ones((2, 1, 3, 3), np.float32),
      "mask_h_idx": np.zeros(1, np.int32), "mask_w_idx": np.zeros(1, np.int32)},
     {"data_col": ((9, 1), "float32")}),
    ("psamask_forward", dict(psa_type=0, h_mask=2, w_mask=2),
     {"x": np.ones((1, 2, 2, 4), np.float32)}, {"y": ((1, 2, 2, 5), "float32")}),
])
def test_inconsistent_requests_raise_invalid_argument(op, params, inputs, outputs):
    with pytest.raises(InvalidArgument):
        run(op, params, inputs, outputs)


@pytest.mark.needs("cuda")
def test_cuda_matches_cpu(rng):
    cuda = torch_backend.make("cuda")
    inp, mask, params = carafe_inputs(rng, *CARAFE_SHAPES[0], "float32")
    request = SimpleNamespace(
        op="carafe_forward", params=params, inputs={"input": inp, "mask": mask},
        outputs={"output": SimpleNamespace(shape=mask.shape[:3] + inp.shape[3:],
                                           dtype=np.dtype("float32"), layout="NHWC")})
    np.testing.assert_allclose(cuda.run(request)["output"], BACKEND.run(request)["output"],
                               rtol=1e-5, atol=1e-6)


def test_device_option_selects_or_refuses_a_device():
    from click.testing import CliRunner

    from harness.cli import main
    suite = str(Path(__file__).resolve().parents[1] / "cases" / "psamask_forward" / "boundary")
    ok = CliRunner().invoke(main, ["run", suite, "--backend", "torch", "--device", "cpu"])
    assert ok.exit_code == 0, ok.output
    if not torch.cuda.is_available():
        refused = CliRunner().invoke(main, ["run", suite, "--backend", "torch", "--device", "cuda"])
        assert refused.exit_code == 2 and "sees no CUDA device" in refused.output
    wrong = CliRunner().invoke(main, ["run", suite, "--backend", "lowp", "--device", "cuda"])
    assert wrong.exit_code == 2 and "--device applies to the torch backend" in wrong.output
