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

import numpy as np

from harness.backend import Backend, InvalidArgument, Request


def round_to(array: np.ndarray, dtype) -> np.ndarray:
    """Round a float64 result once to the output dtype (nearest, ties to even)."""
    dtype = np.dtype(dtype)
    array = np.asarray(array)
    if dtype.kind in "iu":
        return np.rint(array).astype(dtype)
    return array.astype(dtype, copy=False)


def request_tensors(spec, request: Request) -> dict:
    """What the spec's checks see of a call: each tensor's shape, dtype name and layout."""
    from gen.checks import TensorInfo

    tensors = {name: TensorInfo(tuple(a.shape), a.dtype.name, request.layouts.get(name, spec.inputs[name].layout))
               for name, a in request.inputs.items() if name in spec.inputs}
    tensors.update({name: TensorInfo(tuple(o.shape), np.dtype(o.dtype).name, o.layout)
                    for name, o in request.outputs.items()})
    return tensors


def check_request(request: Request):
    """Apply the spec's parameter checks in the doc's order; raise InvalidArgument on the first
    that fails.  Returns the spec."""
    from gen.checks import first_failure
    from gen.registry import spec_for

    spec = spec_for(request.op)
    failed = first_failure(spec, request_tensors(spec, request), request.params)
    if failed is not None:
        raise InvalidArgument(f"{failed.id} (doc {failed.doc}): {failed.message}")
    return spec


def _call(request: Request, compute_dtype) -> dict:
    spec = check_request(request)
    out_shapes = {name: tuple(o.shape) for name, o in request.outputs.items()}
    pieces = spec.reference_blocks_fn
    if pieces is not None:
        # Round piece by piece straight into the outputs: a network-scale output then never
        # exists in the compute dtype as a whole.
        outputs = {name: np.zeros(o.shape, o.dtype) for name, o in request.outputs.items()}
        for name, index, block in pieces(dict(request.inputs), dict(request.params), compute_dtype=compute_dtype,
                                         out_shapes=out_shapes):
            outputs[name][index] = round_to(block, request.outputs[name].dtype)
        return outputs
    results = spec.reference_fn(dict(request.inputs), dict(request.params), compute_dtype=compute_dtype, out_shapes=out_shapes)
    return {name: round_to(results[name], o.dtype) for name, o in request.outputs.items()}


def supports_from_spec(op: str, dtype: str) -> bool:
    from gen.registry import spec_for, known_ops
    return op in known_ops() and (not dtype or dtype in spec_for(op).dtypes)


def reference() -> Backend:
    return Backend(name="reference", origin="built-in: spec checks + float64 reference (gen.ops)",
                   run=lambda request: _call(request, np.float64), supports=supports_from_spec)


def lowp() -> Backend:
    return Backend(name="lowp", origin="built-in: float32 arithmetic, result rounded to the output dtype",
                   run=lambda request: _call(request, np.float32), supports=supports_from_spec)
