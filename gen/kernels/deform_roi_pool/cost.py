"""The work of a deform_roi_pool case beyond its bytes (gen.kernels.shared.cost's units): each
roi's C x PH x PW bins average a grid of bilinear samples, by the golden and the emulated
baseline (the backward scatters each sample's four corners back in mmcv's order, its baseline a
compiled loop).  With sampling_ratio 0 the grid follows each roi's size, which the plan does not
fix: a roi of half the map is assumed."""
from __future__ import annotations

from gen.kernels.shared.cost import COMPILED_OP, emulated, sampled_units

_OPS_PER_SAMPLE = {"deform_roi_pool_forward": 14, "deform_roi_pool_backward": 30}
# The backward's baseline is a compiled loop (compiled_mmcv_backward.py): per thread and sample its four
# adds to grad_input and grad_offset's products, the sample's geometry shared by the channels of a bin
# (computed once per block and bin); measured on the spec's network cases at 0.1x (float32) and 0.2x
# (float16) the numpy emulation's time, which these compiled operations per sample give.
_COMPILED_BASELINE_OPS = {"float32": 20, "float16": 80}


def _cost(op: str, dims: dict, params: dict, dtype: str, baseline: str | None) -> float:
    PH, PW, ratio = int(params["pooled_height"]), int(params["pooled_width"]), int(params["sampling_ratio"])
    H, W, R = int(dims["H"]), int(dims["W"]), int(dims["R"])
    grid_h = ratio if ratio > 0 else max(1, -(-H // (2 * max(PH, 1))))
    grid_w = ratio if ratio > 0 else max(1, -(-W // (2 * max(PW, 1))))
    ops = float(_OPS_PER_SAMPLE[op]) * R * int(dims["C"]) * PH * PW * grid_h * grid_w
    if baseline == "sampled":   # a unit: a roi's C x PH x PW bins
        bins = int(dims["C"]) * PH * PW
        return ops + emulated(ops * sampled_units(R, bins, bins) / max(R, 1), dtype)
    if baseline and op == "deform_roi_pool_backward":
        samples = ops / _OPS_PER_SAMPLE[op]
        return ops + samples * _COMPILED_BASELINE_OPS.get(dtype, _COMPILED_BASELINE_OPS["float32"]) * COMPILED_OP
    return ops + (emulated(ops, dtype) if baseline else 0.0)


def deform_roi_pool_forward(dims: dict, params: dict, dtype: str, baseline: str | None) -> float:
    return _cost("deform_roi_pool_forward", dims, params, dtype, baseline)


def deform_roi_pool_backward(dims: dict, params: dict, dtype: str, baseline: str | None) -> float:
    return _cost("deform_roi_pool_backward", dims, params, dtype, baseline)
