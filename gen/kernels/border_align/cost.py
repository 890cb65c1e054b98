"""The work of a border_align case beyond its bytes (gen.kernels.shared.cost's units): each of
the 4 x C outputs of each box pools pool_size + 1 bilinear samples along its border, by the
golden and the emulated baseline (the backward scatters each sample's four corners back, its
baseline a compiled loop).  The forward's golden also samples every border again under each
placement of its points a right kernel may use (reference_forward.argmax_near_ties: seven passes,
one in the case's dtype), to find where argmax_idx is not determined."""
from __future__ import annotations

from gen.kernels.shared.cost import COMPILED_OP, emulated

_TIE_PASSES_FLOAT64 = 6
_OPS_PER_SAMPLE = {"border_align_forward": 14, "border_align_backward": 20}   # weights, four corners, the max or the adds
# The backward's baseline is a compiled loop (compiled_mmcv_backward.py): per thread and border its four
# products and adds, each point's geometry shared by the channels; measured on the spec's network cases at
# 0.2-0.3x the numpy emulation's time, which these compiled operations per sample give.
_COMPILED_BASELINE_OPS = {"float32": 30, "float16": 60}


def _cost(op: str, dims: dict, params: dict, dtype: str, baseline: str | None) -> float:
    samples = int(dims["N"]) * int(dims["K"]) * 4 * int(dims["C"]) * (int(params["pool_size"]) + 1)
    ops = float(_OPS_PER_SAMPLE[op]) * samples
    if baseline and op == "border_align_backward":
        total = ops + samples * _COMPILED_BASELINE_OPS.get(dtype, _COMPILED_BASELINE_OPS["float32"]) * COMPILED_OP
    else:
        total = ops + (emulated(ops, dtype) if baseline else 0.0)
    if op == "border_align_forward":
        total += _TIE_PASSES_FLOAT64 * ops + emulated(ops, dtype)
    return total


def border_align_forward(dims: dict, params: dict, dtype: str, baseline: str | None) -> float:
    return _cost("border_align_forward", dims, params, dtype, baseline)


def border_align_backward(dims: dict, params: dict, dtype: str, baseline: str | None) -> float:
    return _cost("border_align_backward", dims, params, dtype, baseline)
