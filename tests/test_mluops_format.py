"""mlu-ops case files: mlu-ops' own cases read into opcase, opcase cases written and read back."""
from __future__ import annotations

import os
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

import kernels
from conftest import CONFORMANCE
from gen.core import casefile
from harness.mluops import (MluopsFormatError, UnsupportedKernel, case_from_mluops, load_mluops, read_node,
                            save_mluops)
from harness.mluops import mluops_case_pb2 as pb
from harness.mluops import random_data as rd
from harness.mluops.reader import mluops_float_to_half

MLUOPS = CONFORMANCE / "mlu-ops"
# libstdc++'s first uniform_real_distribution<float>(-1, 1) values for seed 23 (see test_mluops_random).
SEED_23_MINUS1_1 = np.array([0xBF7FE868, 0xBF7302D1, 0xBE77F788, 0x3DC88300, 0xBEFC441A], np.uint32)


@pytest.fixture(scope="module")
def conformance() -> Path:
    return MLUOPS


def _spec(tensor):
    return tensor.shape, tensor.dtype.name, tensor.layout


def _uniform(seed, lower, upper):
    return rd.RandomRecipe(rd.UNIFORM, seed, lower=lower, upper=upper)


# --------------------------------------------------------------------------- mlu-ops' own cases

def test_every_conformance_file_parses(conformance):
    files = sorted(conformance.rglob("*.prototxt"))
    # As many as the kernels' records name (a new kernel's files count without editing this test).
    assert files and files == kernels.every_conformance_file("mlu-ops")
    for f in files:
        assert read_node(f).op_name == f.parent.name


def test_a_kernel_without_a_spec_is_unsupported(conformance, tmp_path):
    # mlu-ops has kernels opcase has no spec for: such a case is named as one, not misread.
    text = (conformance / "psamask_forward/case_0.prototxt").read_text()
    case = tmp_path / "roi_align.prototxt"
    case.write_text(text.replace('op_name: "psamask_forward"', 'op_name: "roi_align_forward"'))
    with pytest.raises(UnsupportedKernel, match="roi_align_forward") as info:
        load_mluops(case)
    assert info.value.op_name == "roi_align_forward"


def test_psamask_forward(conformance):
    mlu = load_mluops(conformance / "psamask_forward/case_0.prototxt")
    assert mlu.op == "psamask_forward"
    assert mlu.params == {"psa_type": 0, "h_mask": 29, "w_mask": 22}
    x = mlu.input_tensors["x"]
    assert _spec(x) == ((123, 3, 12, 638), "float32", "NHWC")
    assert x.random == _uniform(23, -1.0, 1.0)
    np.testing.assert_array_equal(mlu.inputs["x"].reshape(-1)[:5].view(np.uint32), SEED_23_MINUS1_1)
    assert _spec(mlu.outputs["y"]) == ((123, 3, 12, 36), "float32", "NHWC")
    assert mlu.thresholds == {"y": [("diff3", 0.0)]} and mlu.threshold_source == "test_param"
    assert mlu.baseline_device == "CPU" and mlu.goldens == {}


def test_psamask_backward_header_and_partial_draw(conformance):
    # The 1 GiB input is not drawn here: only its recipe, checked on its first values.
    mlu = load_mluops(conformance / "psamask_backward/case_0.prototxt", with_data=False)
    assert mlu.op == "psamask_backward"
    assert mlu.params == {"psa_type": 0, "h_mask": 32, "w_mask": 32}
    dy = mlu.input_tensors["dy"]
    assert _spec(dy) == ((16, 128, 32, 4096), "float32", "NHWC") and dy.data is None
    assert _spec(mlu.outputs["dx"]) == ((16, 128, 32, 1024), "float32", "NHWC")
    assert mlu.thresholds == {"dx": [("diff3", 0.0)]}
    head = rd.draw(dy.random, dy.dtype, 4096)
    np.testing.assert_array_equal(head[:5].view(np.uint32), SEED_23_MINUS1_1)
    # psamask_forward's input has the same recipe, so the same leading values.
    forward = load_mluops(conformance / "psamask_forward/case_0.prototxt").inputs["x"].reshape(-1)
    np.testing.assert_array_equal(head.view(np.uint32), forward[:4096].view(np.uint32))


@pytest.mark.slow
def test_psamask_backward_full_draw_stays_small_in_memory(conformance, tmp_path):
    tracemalloc.start()
    try:
        mlu = load_mluops(conformance / "psamask_backward/case_0.prototxt", out_dir=tmp_path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    dy = mlu.inputs["dy"]
    assert isinstance(dy, np.memmap) and dy.shape == (16, 128, 32, 4096) and not dy.flags.writeable
    assert peak < 400 << 20, f"peak {peak >> 20} MiB while drawing a 1 GiB tensor"
    flat = dy.reshape(-1)
    np.testing.assert_array_equal(flat[:5].view(np.uint32), SEED_23_MINUS1_1)
    tail = rd.uniform_floats(mlu.input_tensors["dy"].random, flat.size - 7, 7)
    np.testing.assert_array_equal(flat[-7:].view(np.uint32), tail.view(np.uint32))
    assert -1 <= flat.min() and flat.max() < 1


@pytest.mark.parametrize("case_file,kernel,pad,rows,dtype", [
    ("case_0.prototxt", (4, 4), (1, 1), 128, "float32"),
    ("case_1.prototxt", (14, 14), (1, 1), 1568, "float32"),
    ("case_2.prototxt", (4, 4), (1, 1), 128, "float16"),
])
def test_masked_im2col_forward(conformance, case_file, kernel, pad, rows, dtype):
    mlu = load_mluops(conformance / "masked_im2col_forward" / case_file)
    assert mlu.params == {"kernel_h": kernel[0], "kernel_w": kernel[1], "pad_h": pad[0], "pad_w": pad[1]}
    assert _spec(mlu.input_tensors["feature"]) == ((1, 8, 8, 8), dtype, "NCHW")
    assert mlu.input_tensors["feature"].random == _uniform(23, 1.0, 10.0)
    assert mlu.inputs["mask_h_idx"].tolist() == [-4, -1, -1, -1, 3, 3, 2, 7, 7, 7]
    assert mlu.inputs["mask_w_idx"].tolist() == [-4, -1, 1, 7, -1, 3, 7, -1, 4, 7]
    assert mlu.inputs["mask_h_idx"].dtype == np.int32
    assert _spec(mlu.outputs["data_col"]) == ((rows, 10), dtype, "ARRAY")
    assert mlu.thresholds == {"data_col": [("diff3", 0.0)]}
    floats = rd.draw_floats(_uniform(23, 1.0, 10.0), 512)
    expected = floats if dtype == "float32" else rd.float32_to_float16_ties_away(floats)
    np.testing.assert_array_equal(mlu.inputs["feature"].reshape(-1), expected)


def test_carafe_forward(conformance):
    mlu = load_mluops(conformance / "carafe_forward/case_0.prototxt")
    assert mlu.params == {"kernel_size": 5, "group_size": 1, "scale_factor": 2}
    assert _spec(mlu.input_tensors["input"]) == ((1, 3, 3, 1), "float32", "NHWC")
    assert _spec(mlu.input_tensors["mask"]) == ((1, 6, 6, 25), "float32", "NHWC")
    assert _spec(mlu.outputs["output"]) == ((1, 6, 6, 1), "float32", "NHWC")
    np.testing.assert_array_equal(mlu.inputs["input"].reshape(-1)[:5].view(np.uint32), SEED_23_MINUS1_1)
    # Two tensors with the same recipe get the same values (each draw has its own engine).
    np.testing.assert_array_equal(mlu.inputs["mask"].reshape(-1)[:9], mlu.inputs["input"].reshape(-1))
    assert mlu.thresholds == {"output": [("diff1", 0.003), ("diff2", 0.003)]}


def test_carafe_backward(conformance):
    mlu = load_mluops(conformance / "carafe_backward/case_0.prototxt")
    assert mlu.params == {"kernel_size": 5, "group_size": 1, "scale_factor": 3}
    assert [_spec(t) for t in mlu.input_tensors.values()] == [
        ((1, 3, 3, 2148), "float32", "NHWC"), ((1, 9, 9, 25), "float32", "NHWC"), ((1, 9, 9, 2148), "float32", "NHWC")]
    assert list(mlu.input_tensors) == ["input", "mask", "grad_output"]
    assert [_spec(t) for t in mlu.outputs.values()] == [((1, 3, 3, 2148), "float32", "NHWC"),
                                                         ((1, 9, 9, 25), "float32", "NHWC")]
    assert list(mlu.outputs) == ["grad_input", "grad_mask"]
    assert all(0 <= a.min() and a.max() < 1 for a in mlu.inputs.values())
    assert mlu.thresholds["grad_mask"] == [("diff1", 0.003), ("diff2", 0.003)]


def test_deform_roi_pool_forward(conformance):
    mlu = load_mluops(conformance / "deform_roi_pool_forward/case0.prototxt")
    assert mlu.params == {"pooled_height": 7, "pooled_width": 7, "spatial_scale": 1.0, "sampling_ratio": 2,
                          "gamma": 1.0}
    assert _spec(mlu.input_tensors["input"]) == ((2, 256, 200, 304), "float32", "NHWC")
    assert mlu.input_tensors["input"].random == _uniform(233, 0.0, 10.0)
    assert mlu.input_tensors["rois"].source == "value_h"
    assert mlu.inputs["rois"].tolist() == [[0.0, 0.0, 0.0, 2.0, 2.0]]
    assert _spec(mlu.input_tensors["offset"]) == ((1, 2, 7, 7), "float32", "ARRAY")
    assert _spec(mlu.outputs["output"]) == ((1, 7, 7, 304), "float32", "NHWC")
    assert mlu.input_tensors["input"].mlu_id == "input1"


def test_border_align_backward(conformance):
    mlu = load_mluops(conformance / "border_align_backward/border_align_backward_1.prototxt")
    assert mlu.params == {"pool_size": 10}
    assert _spec(mlu.input_tensors["grad_output"]) == ((1, 70, 4, 129), "float32", "NHWC")
    assert _spec(mlu.input_tensors["boxes"]) == ((1, 70, 4), "float32", "ARRAY")
    assert _spec(mlu.input_tensors["argmax_idx"]) == ((1, 70, 4, 129), "int32", "NHWC")
    assert (mlu.inputs["argmax_idx"] == 0).all()      # floor of uniform [0, 1)
    assert mlu.inputs["grad_output"].max() < 1000
    assert _spec(mlu.outputs["grad_input"]) == ((1, 10, 7, 516), "float32", "NHWC")


def test_case_from_mluops(conformance):
    mlu = load_mluops(conformance / "masked_im2col_forward/case_2.prototxt")
    case = case_from_mluops(mlu, "masked_im2col_case_2")
    assert (case.op, case.suite, case.name, case.dtype) == ("masked_im2col_forward", "mluops",
                                                            "masked_im2col_case_2", "float16")
    assert case.params == mlu.params and case.expect == "ok" and case.criteria == {}
    assert list(case.inputs) == ["feature", "mask_h_idx", "mask_w_idx"]
    assert case.inputs["feature"].layout == "NCHW" and case.inputs["feature"].data is mlu.inputs["feature"]
    out = case.outputs["data_col"]
    assert (out.shape, out.dtype, out.layout, out.data) == ((128, 10), np.float16, "ARRAY", None)


def test_imported_case_saves_as_opcase_case(conformance, tmp_path):
    case = case_from_mluops(load_mluops(conformance / "carafe_forward/case_0.prototxt"), "carafe_0")
    back = casefile.load(casefile.save(case, tmp_path / "carafe_0"))
    np.testing.assert_array_equal(back.inputs["mask"].data, case.inputs["mask"].data)


# --------------------------------------------------------------------------- round trips

def _special_float32(shape):
    bits = np.array([0x7FC00001, 0xFFC12345, 0x7F800001, 0x7F800000, 0xFF800000, 0x80000000, 0x00000001,
                     0x3F800000, 0xC0490FDB], np.uint32)
    return np.resize(bits, int(np.prod(shape))).view(np.float32).reshape(shape)


def _special_float16(shape):
    bits = np.array([0x7E01, 0xFE00, 0x7C01, 0x7C00, 0xFC00, 0x8000, 0x0001, 0x3C00, 0xBBFF], np.uint16)
    return np.resize(bits, int(np.prod(shape))).view(np.float16).reshape(shape)


def read_tensor(name, data, layout):
    return casefile.Tensor(name=name, shape=data.shape, dtype=data.dtype, layout=layout, data=data)


def _carafe_case(dtype_data):
    inputs = {"input": read_tensor("input", dtype_data((1, 3, 3, 4)), "NHWC"),
              "mask": read_tensor("mask", dtype_data((1, 6, 6, 25)), "NHWC")}
    outputs = {"output": read_tensor("output", dtype_data((1, 6, 6, 4)), "NHWC")}
    criteria = {"output": [casefile.Threshold("diff1", 3e-3, "test"), casefile.Threshold("diff2", 2e-3, "test")]}
    return casefile.Case(op="carafe_forward", suite="t", name="c", params={"kernel_size": 5, "group_size": 1,
                                                                         "scale_factor": 2},
                         inputs=inputs, outputs=outputs, criteria=criteria)


def _masked_im2col_case():
    idx = np.array([-4, -1, 0, 7, 2**31 - 1, -2**31], np.int32)
    inputs = {"feature": read_tensor("feature", _special_float32((1, 2, 4, 4)), "NCHW"),
              "mask_h_idx": read_tensor("mask_h_idx", idx, "ARRAY"),
              "mask_w_idx": read_tensor("mask_w_idx", idx[::-1].copy(), "ARRAY")}
    outputs = {"data_col": casefile.Tensor("data_col", (18, 6), np.dtype(np.float32), "ARRAY")}
    return casefile.Case(op="masked_im2col_forward", suite="t", name="m",
                         params={"kernel_h": 3, "kernel_w": 3, "pad_h": 1, "pad_w": 1},
                         inputs=inputs, outputs=outputs)


def _assert_bitwise_equal(a, b):
    assert a.dtype == b.dtype and a.shape == b.shape
    np.testing.assert_array_equal(np.ascontiguousarray(a).view(np.uint8), np.ascontiguousarray(b).view(np.uint8))


@pytest.mark.parametrize("text", [False, True])
@pytest.mark.parametrize("path_threshold_bytes", [0, 1 << 20])
@pytest.mark.parametrize("make_case", [lambda: _carafe_case(_special_float16), lambda: _carafe_case(_special_float32),
                                       _masked_im2col_case])
def test_round_trip_is_bitwise(tmp_path, text, path_threshold_bytes, make_case):
    case = make_case()
    path = save_mluops(case, tmp_path / "case", text=text, path_threshold_bytes=path_threshold_bytes)
    assert path.suffix == (".prototxt" if text else ".pb")
    mlu = load_mluops(path)
    assert mlu.op == case.op and mlu.params == case.params
    for name, tensor in case.inputs.items():
        _assert_bitwise_equal(mlu.inputs[name], tensor.data)
        assert mlu.input_tensors[name].layout == tensor.layout
    for name, tensor in case.outputs.items():
        assert mlu.outputs[name].shape == tensor.shape and mlu.outputs[name].dtype == tensor.dtype
        if tensor.data is not None:
            _assert_bitwise_equal(mlu.goldens[name], tensor.data)
    expected_device = "GENERATOR_CPU" if all(t.data is not None for t in case.outputs.values()) else "CPU"
    assert mlu.baseline_device == expected_device
    back = case_from_mluops(mlu, case.name)
    for name, tensor in case.inputs.items():
        _assert_bitwise_equal(back.inputs[name].data, tensor.data)


def test_written_thresholds_are_per_output(tmp_path):
    case = _carafe_case(_special_float32)
    node = read_node(save_mluops(case, tmp_path / "case"))
    assert [pb.EvaluationCriterion.Name(c) for c in node.evaluation_criterion] == ["DIFF1", "DIFF2"]
    assert list(node.output[0].thresholds.evaluation_threshold) == [3e-3, 2e-3]
    assert node.device == pb.GENERATOR_CPU and not node.HasField("test_param")
    assert node.carafe_param.dimnb == 4
    mlu = load_mluops(tmp_path / "case.pb")
    assert mlu.threshold_source == "per_output" and mlu.thresholds == {"output": [("diff1", 3e-3), ("diff2", 2e-3)]}


def test_large_tensor_goes_to_a_data_file(tmp_path):
    case = _carafe_case(_special_float32)
    save_mluops(case, tmp_path / "case", path_threshold_bytes=200)
    node = read_node(tmp_path / "case.pb")
    assert node.input[0].value_i and not node.input[0].HasField("path")       # 144 bytes
    assert node.input[1].path == "case.in.mask.bin" and not node.input[1].value_i
    assert (tmp_path / "case.in.mask.bin").stat().st_size == 1 * 6 * 6 * 25 * 4
    assert node.output[0].path == "case.out.output.bin"


def test_absent_optional_input_round_trips(tmp_path):
    inputs = {"input": read_tensor("input", np.ones((1, 4, 4, 3), np.float32), "NHWC"),
              "rois": read_tensor("rois", np.array([[0, 0, 0, 2, 2]], np.float32), "ARRAY"),
              "offset": casefile.Tensor("offset", (1, 2, 2, 2), np.dtype(np.float32), "ARRAY", absent=True)}
    outputs = {"output": casefile.Tensor("output", (1, 2, 2, 3), np.dtype(np.float32), "NHWC")}
    case = casefile.Case(op="deform_roi_pool_forward", suite="t", name="d",
                         params={"pooled_height": 2, "pooled_width": 2, "spatial_scale": 0.5,
                                 "sampling_ratio": 1, "gamma": 0.25}, inputs=inputs, outputs=outputs)
    mlu = load_mluops(save_mluops(case, tmp_path / "d", text=True))
    assert len(read_node(tmp_path / "d.prototxt").input) == 2
    offset = mlu.input_tensors["offset"]
    assert offset.absent and offset.shape == (1, 2, 2, 2) and "offset" not in mlu.inputs
    assert mlu.params["spatial_scale"] == 0.5 and mlu.params["gamma"] == 0.25
    assert case_from_mluops(mlu, "d").inputs["offset"].absent


def test_rejected_case_cannot_be_written(tmp_path):
    case = _masked_im2col_case()
    case.expect = "rejected"
    with pytest.raises(ValueError, match="rejection"):
        save_mluops(case, tmp_path / "case")


# --------------------------------------------------------------------------- value decoding

def test_value_f_half_follows_mluop_gtest_cast():
    values = np.array([1.0, -2.0, 65536.0, 65520.0, 1e-30, 0.0, np.nan, 1 + 2.0**-11, 2.0**-24 * 1.5], np.float32)
    bits = mluops_float_to_half(values).view(np.uint16)
    assert [f"{b:04x}" for b in bits] == ["3c00", "c000", "7bff", "7c00", "0001", "0000", "7e00", "3c00", "0002"]


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


PSAMASK_HEADER = 'op_name: "psamask_forward"\npsamask_forward_param { h_mask: 1 w_mask: 2 psa_type: 0 }\n' \
                 'output { id: "y" shape { dims: 1 dims: 1 dims: 2 dims: 2 } layout: LAYOUT_NHWC dtype: DTYPE_FLOAT }\n'


def test_value_sources_decode_like_mluop_gtest(tmp_path):
    text = PSAMASK_HEADER + 'input { id: "x" shape { dims: 1 dims: 1 dims: 2 dims: 2 } layout: LAYOUT_NHWC ' \
        'dtype: DTYPE_FLOAT value_h: "40000000" value_h: "bf800000" value_h: "7fc00001" value_h: "0" }\n'
    mlu = load_mluops(_write(tmp_path, "h.prototxt", text))
    assert mlu.inputs["x"].view(np.uint32).reshape(-1).tolist() == [0x40000000, 0xBF800000, 0x7FC00001, 0]
    text = text.replace('value_h: "40000000" value_h: "bf800000" value_h: "7fc00001" value_h: "0"',
                        "value_f: 0.5 value_f: -1 value_f: 3 value_f: 1e-3")
    mlu = load_mluops(_write(tmp_path, "f.prototxt", text))
    assert mlu.inputs["x"].reshape(-1).tolist() == [0.5, -1.0, 3.0, float(np.float32(1e-3))]


@pytest.mark.parametrize("body,message", [
    ('op_name: "psamask_forward" input {', "psamask_forward|Expected|expected"),
    ('op_name: "psamask_forward"\npsamask_forward_param { h_mask: 1 }', "missing required"),
    (PSAMASK_HEADER, "takes 1 inputs"),
    (PSAMASK_HEADER + 'input { id: "x" shape { dims: 1 dims: 1 dims: 2 dims: 2 } layout: LAYOUT_NHWC '
     'dtype: DTYPE_FLOAT value_i: 1 }', "value_i holds 1 values, the shape has 4"),
    (PSAMASK_HEADER + 'input { id: "x" shape { dims: 1 dims: 1 dims: 2 dims: 2 } layout: LAYOUT_NHWC '
     'dtype: DTYPE_FLOAT value_h: "3F800000" value_h: "0" value_h: "0" value_h: "0" }', "lower-case hex"),
    (PSAMASK_HEADER + 'input { id: "x" shape { dims: 1 dims: 1 dims: 2 dims: 2 } layout: LAYOUT_NHWC '
     'dtype: DTYPE_FLOAT }', "no values, path or random_data"),
    (PSAMASK_HEADER + 'input { id: "x" shape { dims: 1 dims: 1 dims: 2 dims: 2 } layout: LAYOUT_NHWC '
     'dtype: DTYPE_FLOAT path: "missing.bin" }', "missing.bin"),
    (PSAMASK_HEADER + 'input { id: "x" shape { dims: 1 dims: 1 dims: 2 dims: 2 } layout: LAYOUT_NHWC '
     'dtype: DTYPE_FLOAT random_data { seed: 1 lower_bound: 0 distribution: UNIFORM } }', "no upper_bound"),
    (PSAMASK_HEADER + 'input { id: "x" shape { dims: 1 dims: 1 dims: 2 dims: 2 } layout: LAYOUT_NHWC '
     'dtype: DTYPE_BOOL random_data { seed: 1 lower_bound: 0 upper_bound: 1 distribution: UNIFORM } }', "bool"),
    (PSAMASK_HEADER + 'input { id: "x" shape { dims: 4 } layout: LAYOUT_NHWC dtype: DTYPE_FLOAT '
     'value_i: 1 value_i: 1 value_i: 1 value_i: 1 } latency_typo: 3', "latency_typo"),
])
def test_malformed_text_is_a_format_error(tmp_path, body, message):
    path = _write(tmp_path, "bad.prototxt", body)
    with pytest.raises(MluopsFormatError, match=message) as info:
        load_mluops(path)
    assert str(path) in str(info.value)


def test_unknown_kernel_with_unknown_params_is_unsupported(tmp_path):
    path = _write(tmp_path, "roi.prototxt", 'op_name: "roi_align_rotated_forward"\n'
                                            'roi_align_rotated_forward_param { pooled_height: 2 }\n')
    with pytest.raises(UnsupportedKernel, match="roi_align_rotated_forward"):
        load_mluops(path)


def test_truncated_binary_is_a_format_error(tmp_path):
    path = save_mluops(_masked_im2col_case(), tmp_path / "case")
    raw = path.read_bytes()
    for cut in (len(raw) - 3, len(raw) // 2, 7):
        path.write_bytes(raw[:cut])
        with pytest.raises(MluopsFormatError, match=str(path)):
            load_mluops(path)


def test_binary_dtype_outside_the_schema_is_a_format_error(tmp_path):
    node = read_node(save_mluops(_masked_im2col_case(), tmp_path / "case"))
    node.input[0].ClearField("dtype")
    # dtype (field 4, varint) 21 is DTYPE_FLOAT8_E4M3FN in mlu-ops, unknown to opcase's enum.
    node.input[0].CopyFrom(pb.Tensor.FromString(node.input[0].SerializePartialToString() + b"\x20\x15"))
    (tmp_path / "bad.pb").write_bytes(node.SerializePartialToString())
    with pytest.raises(MluopsFormatError, match=r"input\[0\]\.dtype = 21"):
        load_mluops(tmp_path / "bad.pb")


def test_data_file_of_wrong_size_is_a_format_error(tmp_path):
    path = save_mluops(_masked_im2col_case(), tmp_path / "case", path_threshold_bytes=0)
    (tmp_path / "case.in.feature.bin").write_bytes(b"\0" * 12)
    with pytest.raises(MluopsFormatError, match="has 12 bytes"):
        load_mluops(path)


def test_binary_case_under_another_suffix_is_recognised(tmp_path):
    path = save_mluops(_masked_im2col_case(), tmp_path / "case")
    renamed = path.rename(tmp_path / "case.bin")
    assert load_mluops(renamed).op == "masked_im2col_forward"


@pytest.mark.parametrize("command", ["import", "export"])
def test_a_spec_whose_mluops_block_the_proto_lacks_is_one_line_exit_2(tmp_path, command):
    import subprocess
    import sys

    from conftest import REPO
    specs = tmp_path / "specs"
    specs.mkdir()
    text = (REPO / "specs" / "psamask_forward.yaml").read_text()
    (specs / "psamask_forward.yaml").write_text(text.replace("op_type: PSAMASK_FORWARD", "op_type: PSAMASK_FORWARDX"))
    source = CONFORMANCE / "mlu-ops" / "psamask_forward" if command == "import" else REPO / "cases" / "psamask_forward"
    done = subprocess.run([sys.executable, "-m", "harness.cli", command, str(source), "-o", str(tmp_path / "out")],
                          capture_output=True, text=True, env={**os.environ, "OPCASE_SPECS": str(specs)}, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.strip().splitlines() == [f"Error: {specs / 'psamask_forward.yaml'}:12: mluops.op_type "
                                                f"'PSAMASK_FORWARDX' is no OpType of mluops_case.proto"]
