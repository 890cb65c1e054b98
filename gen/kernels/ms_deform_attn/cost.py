"""The work of an ms_deform_attn case beyond its bytes (gen.kernels.shared.cost's units): each
query's every head samples every level P times, bilinearly, and adds each sample's C channels
weighted by its attention weight.  The float64 golden and the whole mmcv baseline are compiled
loops (compiled.py, compiled_mmcv.py); a sampled baseline (mmcv_emulation's units: a query's
heads and channels) is numpy, a loop step per level and point of each chunk of units the sample
doubles through (gen.sampled), each on all its units at once."""
from __future__ import annotations

import math

from gen.kernels.shared.cost import COMPILED_OP, LOOP_STEP, emulated, sampled_units
from gen.sampled import FIRST_UNITS

# Per sample: its location, the four corners' indices, weights and bounds tests.
_GEOMETRY_OPS = 20
# Per sample and channel: the doc's count (mlu-ops' getTheoryOps): four corner reads, their
# weighted sum and the attention weight's multiply-add.
_CHANNEL_OPS = 11
_CALLS_PER_SAMPLE_STEP = 12   # mmcv_emulation._thread_sums' and _bilinear's numpy calls per level and point


def ms_deform_attn_forward(dims: dict, params: dict, dtype: str, baseline: str | None) -> float:
    N, M, C, L, Q, P = (int(dims[d]) for d in ("N", "M", "C", "L", "Q", "P"))
    samples = float(N) * Q * M * L * P
    ops = samples * (_GEOMETRY_OPS + _CHANNEL_OPS * C)
    golden = ops * COMPILED_OP
    if baseline == "whole":
        return golden + ops * COMPILED_OP
    if baseline == "sampled":   # a unit: a query's heads and channels
        units = sampled_units(N * Q, M * C, M * C)
        chunks = 1 + max(0, math.ceil(math.log2(max(units, 1) / FIRST_UNITS)))
        per_unit = ops / max(1, N * Q)
        return golden + units * emulated(per_unit, dtype) + chunks * L * P * _CALLS_PER_SAMPLE_STEP * LOOP_STEP
    return golden
