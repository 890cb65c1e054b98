"""The `mmcv` backend: mmcv 2.2.0's CUDA kernels, their float16 and float32 arithmetic
emulated bit for bit in numpy (each family's mmcv_emulation module).

A kernel is found by convention, so the harness names none: op ``<op>`` is the function of that
name in its family's ``mmcv_emulation`` part (gen.core.registry.kernel_function).  The
spec's parameter checks run first, in the doc's order, as in the `reference` backend.
"""
from __future__ import annotations

import numpy as np

from gen.core.registry import MMCV_EMULATION, kernel_function, spec_for
from gen.core.backend import Backend, InvalidArgument, Request
from harness.backends.builtin import check_request

DTYPES = ("float16", "float32")   # mmcv's scalar_t: at::Half or float


def kernel(op: str, known: bool = False):
    """The emulation of ``op`` (a function of inputs and params), or None where there is none
    (``known``: see gen.core.registry.kernel_module)."""
    return kernel_function(MMCV_EMULATION, op, known)


def supports(op: str, dtype: str) -> bool:
    try:
        name = np.dtype(dtype).name
    except TypeError:
        return False
    return name in DTYPES and kernel(op) is not None


def run(request: Request) -> dict:
    check_request(request)
    return run_checked(request)


def run_checked(request: Request) -> dict:
    """run() for a call that meets the spec's checks (Backend.run_checked): the emulation alone."""
    # An op without a spec is refused as check_request refuses it (UnknownOp); one with a spec is a
    # spec's op, so its kernel is looked up without listing the specs again.
    spec_for(request.op)
    function = kernel(request.op, known=True)
    if function is None:
        raise InvalidArgument(f"mmcv backend has no kernel {request.op!r}")
    # Some outputs have dims no input carries (border_align_backward's H and W).
    out_shapes = {name: tuple(o.shape) for name, o in request.outputs.items()}
    results = function(dict(request.inputs), dict(request.params), out_shapes=out_shapes)
    return {name: results[name] for name in request.outputs}


def backend() -> Backend:
    return Backend(name="mmcv", origin=f"built-in: spec checks + numpy emulation of mmcv 2.2.0's CUDA arithmetic "
                                       "in float16/float32, bit for bit where mmcv's order is fixed "
                                       "(gen/kernels/*/mmcv_emulation*.py)",
                   run=run, supports=supports, run_checked=run_checked)
