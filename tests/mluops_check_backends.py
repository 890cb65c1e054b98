"""Backends that refuse calls the way mlu-ops' own code does, not the way a spec says: loadable (also
by worker processes) as `mluops_check_backends:NAME` with tests/ on the path.

`carafe_backward` re-states, in this project's words, what mlu-ops (Cambricon/mlu-ops at 73adc65,
kernels/carafe/carafe.cpp) checks before it launches its backward kernel: first
mluOpSetCarafeDescriptor's parameter checks, then CarafeBackwardParamCheck's, in that function's
order, each with the status it returns.  Past the checks it computes the float64 reference and
rounds it once.  The spec is never consulted, so the suites judge the spec's checks against a
second, independent statement of them: a spec check that mlu-ops does not make shows as a
`wrongly-accepted` case, a limit mlu-ops does not have as `wrongly-rejected`.

One line of CarafeBackwardParamCheck compares input's height and width with themselves: it takes
grad_input's from input_desc, so grad_input's H and W are never checked, against the doc's 3.8(4)
and mlu_op.h (grad_input is [N, H, W, C]).  `carafe_backward` makes the check as intended;
`carafe_backward_as_written` keeps the slip, and the invalid suite's grad_input_hw case catches it.
"""
from __future__ import annotations

import os

import numpy as np

from gen.core.backend import InvalidArgument, NotSupported, Request
from gen.core.registry import spec_for
from gen.core.rounding import round_to

_TENSORS = ("input", "mask", "grad_output", "grad_input", "grad_mask")
# CarafeBackwardParamCheck's only limit (NOT_SUPPORTED past it): the kernel splits its on-chip
# memory in five and one part must hold a kernel window (doc 3.8(7)).
_MAX_KERNEL_SIZE = 137


class _Tensor:
    """What the C function sees of a tensor: its descriptor's dims, dtype and layout."""

    def __init__(self, shape, dtype, layout):
        self.shape, self.dtype, self.layout = tuple(int(d) for d in shape), np.dtype(dtype).name, layout

    @property
    def nhwc(self):
        return self.shape if len(self.shape) == 4 else (None,) * 4


def _descriptors(request: Request) -> dict:
    tensors = {name: _Tensor(a.shape, a.dtype, request.layouts.get(name, "NHWC"))
               for name, a in request.inputs.items()}
    tensors.update({name: _Tensor(o.shape, o.dtype, o.layout) for name, o in request.outputs.items()})
    return tensors


def _bad(message: str):
    raise InvalidArgument(f"MLUOP_STATUS_BAD_PARAM: {message}")


def _set_descriptor(params: dict) -> None:
    """mluOpSetCarafeDescriptor: an odd positive kernel, positive group and scale (dimNb is 4 here)."""
    k, g, s = params["kernel_size"], params["group_size"], params["scale_factor"]
    if not (k >= 1 and (k - 1) % 2 == 0):
        _bad(f"kernel_size {k} is not an odd positive integer")
    if g < 1:
        _bad(f"group_size {g} is not positive")
    if s < 1:
        _bad(f"scale_factor {s} is not positive")


def _shape_checks(t: dict, params: dict, as_written: bool) -> None:
    """CarafeBackwardParamCheck up to the zero-element return, in its order."""
    if any(len(t[n].shape) != 4 for n in _TENSORS):
        _bad("every tensor's dim must be the descriptor's dimNb, 4")
    if any(t[n].layout != "NHWC" for n in _TENSORS):
        _bad("every tensor must be NHWC")
    if len({t[n].shape[0] for n in _TENSORS}) != 1:
        _bad("the five tensors' batch sizes differ")
    _, hi, wi, ci = t["input"].nhwc
    # As written, mlu-ops reads the second pair from input_desc too (see the module's doc).
    gi_h, gi_w = (hi, wi) if as_written else t["grad_input"].shape[1:3]
    if (hi, wi) != (gi_h, gi_w):
        _bad("input's and grad_input's H, W differ")
    if t["mask"].shape[1:3] != t["grad_mask"].shape[1:3]:
        _bad("mask's and grad_mask's H, W differ")
    if t["grad_output"].shape[1:3] != t["mask"].shape[1:3]:
        _bad("grad_output's and mask's H, W differ")
    s = params["scale_factor"]
    if t["grad_output"].shape[1:3] != (hi * s, wi * s):
        _bad("grad_output's H, W are not scale_factor times input's")
    g, k = params["group_size"], params["kernel_size"]
    if ci % g != 0:
        _bad(f"input's {ci} channels are not divisible by group_size {g}")
    if not ci == t["grad_input"].shape[3] == t["grad_output"].shape[3]:
        _bad("input's, grad_input's and grad_output's channels differ")
    if not t["mask"].shape[3] == t["grad_mask"].shape[3] == g * k * k:
        _bad("mask's or grad_mask's channels are not group_size * kernel_size^2")
    if t["input"].dtype not in ("float16", "float32"):
        _bad("input must be half or float")
    if len({t[n].dtype for n in _TENSORS}) != 1:
        _bad("the five tensors' dtypes differ")


def _checked(request: Request, as_written: bool) -> bool:
    """Refuse as mlu-ops does; True when the call returns at once (a zero-element tensor)."""
    if request.op != "carafe_backward":
        raise NotSupported(f"this backend implements carafe_backward only, not {request.op}")
    _set_descriptor(request.params)
    tensors = _descriptors(request)
    _shape_checks(tensors, request.params, as_written)
    if any(not a.flags.c_contiguous for a in request.inputs.values()):
        raise NotSupported("MLUOP_STATUS_NOT_SUPPORTED: a tensor is not contiguous")
    if any(np.prod(tensors[n].shape) == 0 for n in _TENSORS):
        return True
    if request.params["kernel_size"] > _MAX_KERNEL_SIZE:
        raise NotSupported(f"MLUOP_STATUS_NOT_SUPPORTED: kernel_size {request.params['kernel_size']} "
                           f"is over {_MAX_KERNEL_SIZE}")
    return False


def _run(request: Request, as_written: bool) -> dict:
    if _checked(request, as_written):
        # mlu-ops writes nothing then; a Python caller's fresh output buffers are zeros.
        return {name: np.zeros(o.shape, o.dtype) for name, o in request.outputs.items()}
    spec = spec_for(request.op)
    out_shapes = {name: tuple(o.shape) for name, o in request.outputs.items()}
    results = spec.reference_fn(dict(request.inputs), dict(request.params), compute_dtype=np.float64,
                                out_shapes=out_shapes)
    return {name: round_to(results[name], o.dtype, "nearest") for name, o in request.outputs.items()}


def carafe_backward(request: Request) -> dict:
    """mlu-ops' checks as intended, then the float64 reference."""
    return _run(request, as_written=False)


def carafe_backward_as_written(request: Request) -> dict:
    """mlu-ops' checks with the grad_input slip kept, then the float64 reference."""
    return _run(request, as_written=True)


def carafe_backward_one_percent_high(request: Request) -> dict:
    """mlu-ops' checks, then outputs 1 % over the reference: a run whose accuracy fails."""
    outputs = _run(request, as_written=False)
    return {name: (a.astype(np.float64) * 1.01).astype(a.dtype) for name, a in outputs.items()}


# The --report file a run writes, for carafe_backward_watching_report (set by the test).
REPORT_ENV = "OPCASE_TEST_PR_REPORT"


def carafe_backward_watching_report(request: Request) -> dict:
    """carafe_backward, refusing to answer unless the run's report file says, while the run goes
    on, that the run has not finished (a stale report must never stand during a run)."""
    text = open(os.environ[REPORT_ENV], encoding="utf-8").read()
    if "did not finish" not in text:
        raise RuntimeError(f"during the run the report says: {text[:200]!r}")
    return carafe_backward(request)
