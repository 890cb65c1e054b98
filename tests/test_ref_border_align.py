"""The border_align reference (gen/kernels/border_align/reference.py): doc 003's worked example, mmcv's test data, its
float32 path and value generators.  (Forward and backward against their records' slow loops on every
generated plan: tests/test_kernels.py.)"""
import numpy as np
import pytest

from gen.kernels.border_align import reference as ba
from gen.values import ValueContext


# ----------------------------------------------------------------------------- worked examples

# mmcv's tests/test_ops/test_border_align.py: input [1, 4C, H, W] (C = 1, H = 3, W = 4) with the
# doc's boxes; forward outputs for pool_size 1 and 2, and input gradients for grad_output = ones.
MMCV_INPUT = [[[[1., 2., 3., 4.], [5., 6., 7., 8.], [9., 10., 11., 12.]],
               [[6, 7, 5, 8], [2, 1, 3, 4], [12, 9, 11, 10]],
               [[-2, -3, 2, 0], [-4, -5, 1, -1], [-1, -1, -1, -1]],
               [[0, -1, 2, 1], [-4, -3, -2, -1], [-1, -2, -3, -4]]]]
MMCV_OUTPUT_POOL_2 = [[3, 6, 1, 2], [4, 7, 1, 1], [3, 7, 1, 2], [4, 6, -1, 1], [2, 12, -1, -1], [3, 12, -1, 2],
                      [3, 7, 1, 2], [4, 7, 1, 1], [6, 12, -1, -2], [4, 12, -1, 1], [4, 9, -1, 1], [4, 11, -1, 1]]
MMCV_GRAD_ONES = {
    1: [[[0, 1, 4, 6], [0, 1, 0, 0], [0, 0, 0, 0]], [[2, 4, 0, 0], [0, 0, 0, 0], [4, 1, 1, 0]],
        [[0, 0, 0, 0], [0, 0, 3, 3], [0, 2, 1, 3]], [[0, 1, 4, 6], [0, 0, 0, 0], [0, 1, 0, 0]]],
    2: [[[0, 1, 4, 6], [0, 1, 0, 0], [0, 0, 0, 0]], [[2, 4, 0, 0], [0, 0, 0, 0], [4, 1, 1, 0]],
        [[0, 0, 0, 0], [0, 0, 5, 1], [0, 2, 1, 3]], [[0, 1, 4, 6], [0, 0, 0, 0], [0, 1, 0, 0]]],
}


def _nchw_to_nhwc(values):
    return np.ascontiguousarray(np.array(values, dtype=np.float64).transpose(0, 2, 3, 1))


def _doc_inputs(dtype=np.float32):
    return {name: ba.doc_example(None, None, name).astype(np.int32 if name == "argmax_idx" else dtype)
            for name in ("grad_output", "boxes", "argmax_idx")}


def test_doc_worked_example():
    """Doc 003 section 1.2, pool_size 1.  The doc prints exactly twice the gradient its inputs give:
    mmcv's kernel (one atomicAdd of grad * weight per corner), OPS.md and mmcv's own test data
    (test_mmcv_test_data below) all agree with half of it, so the print accumulated the backward twice."""
    got = ba.backward(_doc_inputs(), {"pool_size": 1}, out_shapes={"grad_input": (1, 3, 4, 4)})["grad_input"]
    doc_print = _nchw_to_nhwc([ba.DOC_EXAMPLE_GRAD_INPUT])
    np.testing.assert_array_equal(2 * got, doc_print)


def test_doc_example_is_the_forward_of_mmcv_test_input():
    """The doc's grad_output and argmax_idx are mmcv's forward output and argmax on mmcv's test input."""
    result = ba.forward({"input": _nchw_to_nhwc(MMCV_INPUT), "boxes": ba.doc_example(None, None, "boxes")},
                        {"pool_size": 1})
    doc = _doc_inputs(np.float64)
    np.testing.assert_array_equal(result["output"], doc["grad_output"])
    np.testing.assert_array_equal(result["argmax_idx"], doc["argmax_idx"])


@pytest.mark.parametrize("pool_size", [1, 2])
def test_mmcv_test_data(pool_size):
    boxes = ba.doc_example(None, None, "boxes")
    result = ba.forward({"input": _nchw_to_nhwc(MMCV_INPUT), "boxes": boxes}, {"pool_size": pool_size})
    if pool_size == 2:
        np.testing.assert_array_equal(result["output"][0, :, :, 0], MMCV_OUTPUT_POOL_2)
    grad = ba.backward({"grad_output": np.ones_like(result["output"]), "boxes": boxes,
                        "argmax_idx": result["argmax_idx"]},
                       {"pool_size": pool_size}, out_shapes={"grad_input": (1, 3, 4, 4)})["grad_input"]
    np.testing.assert_array_equal(grad, _nchw_to_nhwc([MMCV_GRAD_ONES[pool_size]]))


# ----------------------------------------------------------------------------- against slow loops

def _context(N, H, W, C, K, pool_size):
    shapes = {"grad_output": (N, K, 4, C), "boxes": (N, K, 4), "argmax_idx": (N, K, 4, C),
              "grad_input": (N, H, W, 4 * C)}
    return ValueContext(shapes=shapes, dtypes={}, dims={}, params={"pool_size": pool_size}, dtype="float32")


def _case(seed, N, H, W, C, pool_size, box_mode="inside", argmax_mode="forward"):
    rng = np.random.default_rng(seed)
    ctx = _context(N, H, W, C, H * W, pool_size)
    ctx.inputs["grad_output"] = rng.normal(size=ctx.shapes["grad_output"])
    ctx.inputs["boxes"] = ba.boxes(rng, ctx, mode=box_mode)
    ctx.inputs["argmax_idx"] = ba.argmax_indices(rng, ctx, mode=argmax_mode)
    return ctx


def test_backward_needs_the_output_shape():
    with pytest.raises(ValueError, match="out_shapes"):
        ba.backward(_doc_inputs(), {"pool_size": 1})


def test_float32_compute_is_close_but_really_float32():
    ctx = _case(33, 1, 6, 6, 16, 10)
    # Every border sums into a few cells: large sums of float32 products.
    ctx.inputs["argmax_idx"] = np.zeros_like(ctx.inputs["argmax_idx"])
    ctx.inputs["boxes"] = np.tile([[[0.3, 0.3, 4.7, 4.7]]], (1, 36, 1))
    inputs = {name: value.astype(np.int32 if name == "argmax_idx" else np.float32)
              for name, value in ctx.inputs.items()}
    out_shapes = {"grad_input": ctx.shapes["grad_input"]}
    golden = ba.backward(inputs, ctx.params, out_shapes=out_shapes)["grad_input"]
    low = ba.backward(inputs, ctx.params, compute_dtype=np.float32, out_shapes=out_shapes)["grad_input"]
    assert low.dtype == np.float32
    difference = np.abs(low - golden).max() / np.abs(golden).max()
    assert 1e-9 < difference < 1e-5


# ----------------------------------------------------------------------------- value generators

def test_inside_boxes_stay_in_the_map_and_argmax_in_range():
    ctx = _case(34, 2, 7, 10, 5, 10)
    boxes = ctx.inputs["boxes"]
    assert (boxes >= 0).all() and (boxes[..., [0, 2]] <= 9).all() and (boxes[..., [1, 3]] <= 6).all()
    assert (boxes[..., 2] >= boxes[..., 0]).all() and (boxes[..., 3] >= boxes[..., 1]).all()
    argmax = ctx.inputs["argmax_idx"]
    assert argmax.dtype == np.int32 and argmax.min() >= 0 and argmax.max() <= 10
    assert len(np.unique(argmax)) > 5                    # a real forward spreads the maxima along the border
