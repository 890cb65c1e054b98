"""What the torch kernels share: argument checks, NHWC <-> NCHW, the dtype a GPU kernel computes
in, and mmcv's bilinear sampling corners.

A kernel ``<op>`` is the function of that name in its family's ``torch_kernel`` part
(``gen/kernels/<family>/torch_kernel[_<direction>].py``):
``<op>(inputs, params, out_shapes, device) -> {output: tensor}``, found by convention
(gen.core.registry.kernel_function).  It follows mmcv's NCHW formulation of the kernel (the index maps
of mmcv's CUDA kernels), converts the design docs' NHWC layouts at the edges and is vectorized;
the backend casts each result to the requested dtype and checks its shape.

Precision follows a GPU kernel with an accumulator type: float32 and float64 inputs are computed
in their own precision, float16 inputs are computed (and accumulated) in float32 and the results
rounded to float16 once at the end.
"""
from __future__ import annotations

import numpy as np
import torch

from gen.core.backend import InvalidArgument


def require(condition: bool, message: str) -> None:
    if not condition:
        raise InvalidArgument(message)


# The type a GPU kernel computes and accumulates in, for each floating input dtype.
COMPUTE_DTYPES = {
    np.dtype("float16"): torch.float32,
    np.dtype("float32"): torch.float32,
    np.dtype("float64"): torch.float64,
}


def compute_dtype(inputs: dict, name: str) -> torch.dtype:
    """The dtype a GPU kernel computes in for the floating input ``name``."""
    array = inputs.get(name)
    require(array is not None, f"input {name!r} is missing")
    require(np.dtype(array.dtype) in COMPUTE_DTYPES, f"input {name!r} must be float16/32/64, got {array.dtype}")
    return COMPUTE_DTYPES[np.dtype(array.dtype)]


def as_tensor(inputs: dict, name: str, device, dtype: torch.dtype | None = None, optional: bool = False):
    """Input ``name`` as a tensor on ``device`` (a copy), in ``dtype`` if given; None for an absent
    optional input."""
    array = inputs.get(name)
    if array is None:
        require(optional, f"input {name!r} is missing")
        return None
    tensor = torch.from_numpy(np.array(array, copy=True, order="C")).to(device)
    return tensor.to(dtype) if dtype is not None else tensor


def as_4d(inputs: dict, name: str, device, dtype: torch.dtype | None = None) -> torch.Tensor:
    tensor = as_tensor(inputs, name, device, dtype)
    check_rank(name, tensor, 4)
    return tensor


def int_param(params: dict, name: str) -> int:
    require(name in params, f"parameter {name!r} is missing")
    return int(params[name])


def float_param(params: dict, name: str) -> float:
    require(name in params, f"parameter {name!r} is missing")
    return float(params[name])


def nhwc_to_nchw(t: torch.Tensor) -> torch.Tensor:
    return t.permute(0, 3, 1, 2)


def nchw_to_nhwc(t: torch.Tensor) -> torch.Tensor:
    return t.permute(0, 2, 3, 1)


def check_rank(name: str, t: torch.Tensor, rank: int) -> None:
    require(t.dim() == rank, f"{name} must be {rank}-D, got shape {tuple(t.shape)}")


# --------------------------------------------------------------------------------------------
# Bilinear sampling shared by deform_roi_pool and border_align (mmcv's bilinear_interpolate
# and bilinear_interpolate_gradient).
# --------------------------------------------------------------------------------------------


class BilinearCorners:
    """The four integer corners and weights of bilinear samples at real points (y, x).

    `inside` is False where the point lies farther than one pixel outside the map: such a
    point has value 0 and receives no gradient. Corner indices are always valid indices
    (clamped) so that they can be used for gathers even where `inside` is False.
    """

    def __init__(self, y: torch.Tensor, x: torch.Tensor, height: int, width: int):
        self.inside = (y >= -1) & (y <= height) & (x >= -1) & (x <= width)
        # Points outside (nan included) contribute nothing: park them at 0 so that every
        # corner index stays valid.
        y = torch.where(self.inside, y, torch.zeros_like(y))
        x = torch.where(self.inside, x, torch.zeros_like(x))
        self.y_low, self.y_high, ly = self._axis(y, height)
        self.x_low, self.x_high, lx = self._axis(x, width)
        hy, hx = 1 - ly, 1 - lx
        self.w1, self.w2, self.w3, self.w4 = hy * hx, hy * lx, ly * hx, ly * lx

    @staticmethod
    def _axis(coord: torch.Tensor, size: int):
        """Low and high neighbour along one axis and the fraction towards the high one."""
        coord = coord.clamp(min=0)
        low = torch.floor(coord).clamp(max=size - 1)
        # From the last row/column on (up to `size` itself) the point snaps onto that row,
        # so both neighbours are the last row and the fraction is 0.
        at_last = low >= size - 1
        high = torch.where(at_last, low, low + 1)
        coord = torch.where(at_last, low, coord)
        return low.long(), high.long(), coord - low
