"""The `mmcv` backend: a built-in name, kernels found by convention in each family's mmcv_emulation, the spec's checks first.
(That it passes the generated suites of every kernel it emulates: tests/test_kernels.py.)"""
from __future__ import annotations

import re
import sys

from types import SimpleNamespace

import numpy as np
import pytest

from gen.core import registry
from gen.core.registry import known_ops
from click.testing import CliRunner

from gen.kernels.carafe import mmcv_emulation as carafe
from gen.core.backend import BUILTIN_NAMES, InvalidArgument, Request, TensorInfo
from harness.backends import load_backend
from harness.backends import mmcv_backend

PARAMS = {"kernel_size": 3, "group_size": 2, "scale_factor": 2}


def backward_request(params=PARAMS, dtype="float16"):
    rng = np.random.default_rng(0)
    k, G, s = params["kernel_size"], params["group_size"], params["scale_factor"]
    inputs = {"input": rng.normal(size=(1, 3, 4, 6)).astype(dtype),
              "mask": rng.uniform(size=(1, 3 * s, 4 * s, G * k * k)).astype(dtype),
              "grad_output": rng.normal(size=(1, 3 * s, 4 * s, 6)).astype(dtype)}
    shapes = {"grad_input": inputs["input"].shape, "grad_mask": inputs["mask"].shape}
    return Request(op="carafe_backward", params=dict(params), inputs=inputs,
                   outputs={name: TensorInfo(shapes[name], np.dtype(dtype), "NHWC") for name in shapes})


def test_mmcv_is_a_builtin_backend():
    assert "mmcv" in BUILTIN_NAMES
    backend = load_backend("mmcv")
    assert backend.name == "mmcv" and "mmcv_emulation" in backend.origin


def test_kernels_are_found_by_op_name():
    assert mmcv_backend.kernel("carafe_forward") is carafe.carafe_forward
    assert mmcv_backend.kernel("carafe_backward") is carafe.carafe_backward


@pytest.mark.parametrize("op, dtype, supported", [
    ("carafe_forward", "float16", True), ("carafe_forward", "float32", True),
    ("carafe_backward", np.dtype("float16"), True),
    ("carafe_forward", "float64", False), ("carafe_forward", "int32", False), ("carafe_forward", "bogus", False),
    ("psamask_forward", "float32", False),          # a spec without an emulation
    ("roi_align_forward", "float32", False),        # no such spec
    ("half", "float32", False),                     # gen.kernels.shared.mmcv_half.half exists, but is no op
    ("carafe", "float32", False), ("carafe.carafe_forward", "float32", False),
    ("../carafe_forward", "float32", False), (None, "float32", False),
])
def test_supports(op, dtype, supported):
    assert load_backend("mmcv").supports(op, dtype) is supported


def test_an_emulation_that_fails_to_import_is_not_taken_for_a_missing_one(monkeypatch):
    def broken(name):
        raise ModuleNotFoundError("No module named 'somedependency'", name="somedependency")
    monkeypatch.setattr(registry.importlib, "import_module", broken)
    for name in [name for name in sys.modules if name.startswith("gen.kernels.carafe.")]:
        monkeypatch.delitem(sys.modules, name)       # not imported yet, as in a fresh process
    with pytest.raises(ModuleNotFoundError):
        mmcv_backend.supports("carafe_forward", "float32")


def test_run_returns_the_emulation_in_the_requested_outputs():
    request = backward_request()
    expected = carafe.carafe_backward(request.inputs, request.params)
    result = load_backend("mmcv").run(request)
    assert set(result) == {"grad_input", "grad_mask"}
    for name, array in result.items():
        assert array.dtype == np.float16 and array.shape == request.outputs[name].shape
        assert np.array_equal(array.view(np.uint16), expected[name].view(np.uint16))


@pytest.mark.parametrize("change, check", [
    ({"kernel_size": 4}, "kernel_size_odd"),
    ({"scale_factor": 0}, "scale_factor_positive"),
])
def test_run_makes_the_specs_checks_first(change, check):
    request = backward_request()
    request.params.update(change)
    with pytest.raises(InvalidArgument, match=check):
        load_backend("mmcv").run(request)


def test_run_refuses_a_kernel_it_has_not(monkeypatch):
    request = SimpleNamespace(op="carafe_forward", params={}, inputs={}, outputs={})
    monkeypatch.setattr(mmcv_backend, "check_request", lambda request: None)
    monkeypatch.setattr(mmcv_backend, "kernel", lambda op, known=False: None)
    with pytest.raises(InvalidArgument, match="no kernel 'carafe_forward'"):
        mmcv_backend.run(request)


def test_opcase_backends_lists_mmcv():
    from harness.cli import main
    result = CliRunner().invoke(main, ["backends"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    at = lines.index("mmcv")
    described = "\n".join(lines[at + 1:at + 2 + len(known_ops())])
    assert re.search(r"^ +carafe_forward +float16 float32$", described, re.M), described
    assert re.search(r"^ +psamask_forward +not supported$", described, re.M), described


def test_gen_calls_its_baseline_without_the_checks_its_plan_made_and_run_still_makes_them(monkeypatch):
    from gen.core.verdict import request_for
    from gen.generate import Generator
    from gen.plan import plan_suite
    spec = registry.spec_for("carafe_forward")
    plan = next(p for p in plan_suite(spec, "boundary") if p.name.startswith("mluops_case"))
    checked = []
    real_check = mmcv_backend.check_request
    monkeypatch.setattr(mmcv_backend, "check_request", lambda request: checked.append(request.op) or real_check(request))
    case = Generator(spec, load_backend("mmcv")).build(plan)
    assert checked == [] and case.criteria                       # thresholds set from the unchecked baseline
    outputs = load_backend("mmcv").run(request_for(case))
    assert checked == ["carafe_forward"]
    unchecked = mmcv_backend.run_checked(request_for(case))
    assert all(np.array_equal(outputs[n].view(np.uint8), unchecked[n].view(np.uint8)) for n in outputs)
    with pytest.raises(registry.UnknownOp):                       # no spec, no kernel looked up
        mmcv_backend.run_checked(SimpleNamespace(op="roi_align_forward", params={}, inputs={}, outputs={}))
