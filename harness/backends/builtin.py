"""The built-in backends that come from the specs themselves.

``reference``: every parameter check of the spec (the doc's order), then the float64
reference, rounded once to the output dtype.  It defines correct.

``lowp``: the same kernels computed the way typical hardware does: float32 arithmetic
for float cases; half inputs promoted to float32, accumulated in float32 and rounded to
half once at the end for half cases.  It makes no parameter checks of its own beyond
the spec's (it is a baseline for accuracy, not an implementation of the interface) and
is the stricter baseline of dynamic thresholds (the specs take mmcv, the docs' reference).
"""
from __future__ import annotations

import functools

import numpy as np

from gen.core.backend import Backend, InvalidArgument, Request, TensorInfo
from gen.core.checks import failures, first_failure, refusal
from gen.core.registry import known_ops, spec_for
from gen.core.rounding import round_to


@functools.lru_cache(maxsize=64)
def _checked_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype the checks see of a tensor of ``dtype``: np.dtype(dtype.name), as a TensorInfo of the name
    holds it; remembered, since numpy computes dtype.name in Python at every read."""
    return np.dtype(dtype.name)


# Arrays whose .shape is numpy's own, a tuple of Python ints (what TensorInfo.exactly takes).
_PLAIN_ARRAYS = (np.ndarray, np.memmap)


def _input_info(array, layout: str) -> TensorInfo:
    if type(array) in _PLAIN_ARRAYS:
        return TensorInfo.exactly(array.shape, _checked_dtype(array.dtype), layout)
    return TensorInfo(tuple(array.shape), _checked_dtype(array.dtype), layout)


def _output_info(output) -> TensorInfo:
    if type(output) is TensorInfo:
        return TensorInfo.exactly(output.shape, _checked_dtype(output.dtype), output.layout)
    return TensorInfo(tuple(output.shape), _checked_dtype(np.dtype(output.dtype)), output.layout)


def request_tensors(spec, request: Request) -> dict:
    """What the spec's checks see of a call: each tensor's shape, dtype (by its name) and layout."""
    layouts = request.layouts
    tensors = {name: _input_info(a, layouts.get(name, spec.inputs[name].layout))
               for name, a in request.inputs.items() if name in spec.inputs}
    tensors.update({name: _output_info(o) for name, o in request.outputs.items()})
    return tensors


def check_request(request: Request, skip_checks=()):
    """Apply the spec's parameter checks in the doc's order; raise InvalidArgument on the first
    that fails (NotSupported where the check's status is not_supported).  Returns the spec.  ``skip_checks``: ids of checks left out (`opcase power`'s
    planted missing check)."""

    spec = spec_for(request.op)
    tensors = request_tensors(spec, request)
    if not skip_checks:
        failed = first_failure(spec, tensors, request.params)
    else:
        failed = next((c for c in failures(spec, tensors, request.params) if c.id not in skip_checks), None)
    if failed is not None:
        raise refusal(failed)(f"{failed.id} (doc {failed.doc}): {failed.message}")
    return spec


def run_in_dtype(request: Request, compute_dtype, rounding: str = "nearest", skip_checks=()) -> dict:
    """The spec's checks (all but ``skip_checks``), the reference in ``compute_dtype``, each output
    rounded to its dtype as ``rounding`` says."""
    spec = check_request(request, skip_checks)
    out_shapes = {name: tuple(o.shape) for name, o in request.outputs.items()}
    pieces = spec.reference_blocks_fn
    if pieces is not None:
        # Round piece by piece straight into the outputs: a network-scale output then never
        # exists in the compute dtype as a whole.
        outputs = {name: np.zeros(o.shape, o.dtype) for name, o in request.outputs.items()}
        for name, index, block in pieces(dict(request.inputs), dict(request.params), compute_dtype=compute_dtype,
                                         out_shapes=out_shapes):
            outputs[name][index] = round_to(block, request.outputs[name].dtype, rounding)
        return outputs
    results = spec.reference_fn(dict(request.inputs), dict(request.params), compute_dtype=compute_dtype, out_shapes=out_shapes)
    return {name: round_to(results[name], o.dtype, rounding) for name, o in request.outputs.items()}


def supports_from_spec(op: str, dtype: str) -> bool:
    return op in known_ops() and (not dtype or dtype in spec_for(op).dtypes)


def reference() -> Backend:
    return Backend(name="reference", origin="built-in: spec checks + float64 reference (gen/kernels/*/reference*.py)",
                   run=lambda request: run_in_dtype(request, np.float64), supports=supports_from_spec)


def lowp() -> Backend:
    return Backend(name="lowp", origin="built-in: float32 arithmetic, result rounded to the output dtype",
                   run=lambda request: run_in_dtype(request, np.float32), supports=supports_from_spec)
