"""PyTorch implementation of the kernels: a backend under test and a GPU-style baseline.

Each kernel is its family's ``torch_kernel`` part, found by convention (gen.core.registry.kernel_function);
this module names none. The kernels are written independently of the numpy reference, in mmcv's NCHW
formulation (gen/kernels/shared/torch_common.py says how).
"""

from __future__ import annotations

import numpy as np
import torch

from gen.core.registry import TORCH_KERNEL, kernel_function, kernel_module, spec_for
from gen.core.spec import absent_tensors
from gen.core.backend import InvalidArgument


def supported_dtypes(op: str) -> tuple[str, ...]:
    """The dtypes the torch kernel of ``op`` runs: its module's DTYPES entry where it has one, else
    the spec's dtypes and float64 (a baseline in double precision); () without a kernel."""
    module = kernel_module(TORCH_KERNEL, op)
    if not callable(getattr(module, op, None)):
        return ()
    declared = getattr(module, "DTYPES", {}).get(op)
    return tuple(declared) if declared is not None else (*spec_for(op).dtypes, "float64")


def require(condition: bool, message: str) -> None:
    if not condition:
        raise InvalidArgument(message)


class TorchBackend:
    """Runs requests of the harness with the torch kernels on one device."""

    name = "torch"

    def __init__(self, device="cpu"):
        self.device = torch.device(device)
        if self.device.type == "cuda" and not torch.cuda.is_available():
            raise RuntimeError("this PyTorch sees no CUDA device")

    def supports(self, op: str, dtype: str) -> bool:
        try:
            name = np.dtype(dtype).name
        except TypeError:
            return False
        return name in supported_dtypes(op)

    def run(self, request) -> dict:
        kernel = kernel_function(TORCH_KERNEL, request.op)
        require(kernel is not None, f"torch backend has no kernel {request.op!r}")
        out_shapes = {name: tuple(spec.shape) for name, spec in request.outputs.items()}
        with torch.no_grad():
            results = kernel(dict(request.inputs or {}), dict(request.params or {}), out_shapes, self.device)
        # An output that goes with an omitted optional input (the spec's with_input) is not requested: a
        # kernel that still computes it (deform_roi_pool_backward's zero grad_offset) does not return it.
        absent = set(absent_tensors(spec_for(request.op), [n for n in spec_for(request.op).inputs
                                                              if n not in request.inputs]))
        return {name: self._output(request, name, tensor) for name, tensor in results.items() if name not in absent}

    @staticmethod
    def _output(request, name, tensor):
        require(name in request.outputs, f"{request.op}: output {name!r} is not requested")
        spec = request.outputs[name]
        require(tuple(tensor.shape) == tuple(spec.shape),
                f"{request.op}: computed {name} shape {tuple(tensor.shape)} differs from the requested "
                f"{tuple(spec.shape)}")
        return tensor.detach().cpu().contiguous().numpy().astype(spec.dtype, copy=False)


def make(device="cpu") -> TorchBackend:
    return TorchBackend(device)
