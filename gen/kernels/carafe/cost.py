"""The work of a carafe case beyond its bytes, in gen.kernels.shared.cost's units: the golden's
multiply-adds, the mmcv emulation's (whole: blocks of pixels, a Python step per tap and block;
sampled: a Python step per tap and unit, which makes a large window on a small map cost
minutes where its bytes say milliseconds)."""
from __future__ import annotations

from gen.kernels.shared.cost import LOOP_STEP, UNIT_STEPS, blocks, emulated, sampled_units

_BLOCK_ELEMENTS = 1 << 16   # the emulation's block of output elements (mmcv_emulation._BLOCK_ELEMENTS)


def _shape(dims: dict, params: dict):
    N, H, W, C = (int(dims[d]) for d in ("N", "H", "W", "C"))
    k, s = int(params["kernel_size"]), int(params["scale_factor"])
    taps = min(k, H) * min(k, W)   # the taps of a window that can fall inside the map
    return N, H, W, C, s, taps


def carafe_forward(dims: dict, params: dict, dtype: str, baseline: str | None) -> float:
    N, H, W, C, s, taps = _shape(dims, params)
    outputs = N * H * W * s * s * C
    ops = 2.0 * outputs * taps
    if baseline == "whole":
        return ops + emulated(ops, dtype) + blocks(outputs, _BLOCK_ELEMENTS) * taps * LOOP_STEP
    if baseline == "sampled":   # a unit: an input pixel's s x s output pixels
        # One tap: its softmax mask (reference.softmax_masks) is 1 exactly, so the output copies
        # the input in any dtype and the sample, finding no error, runs to its cap.
        units = sampled_units(N * H * W, s * s * C, s * s * C, exact=taps == 1)
        return ops + units * (emulated(ops / max(1, N * H * W), dtype) + (taps + UNIT_STEPS) * LOOP_STEP)
    return ops


def carafe_backward(dims: dict, params: dict, dtype: str, baseline: str | None) -> float:
    N, H, W, C, s, taps = _shape(dims, params)
    outputs = N * H * W * s * s * C     # grad_output's elements: each meets every tap twice
    ops = 4.0 * outputs * taps
    if baseline == "whole":
        return ops + emulated(ops, dtype) + 2 * blocks(outputs, _BLOCK_ELEMENTS) * taps * LOOP_STEP
    if baseline == "sampled":   # a unit: an input pixel's grad_input and its output pixels' grad_mask
        mask = s * s * int(params["group_size"]) * int(params["kernel_size"]) ** 2
        units = sampled_units(N * H * W, min(C, mask), C + mask)
        return ops + units * (emulated(ops / max(1, N * H * W), dtype) + (taps + UNIT_STEPS) * LOOP_STEP)
    return ops
