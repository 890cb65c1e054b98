"""carafe_forward's record: the slow oracle of OPS.md's CARAFE formula."""
from __future__ import annotations

import numpy as np

from kernels import mmcv_array
from kernels.carafe import MMCV_PARAMS, MMCV_TOLERANCE, mmcv_inputs, taps

OP = "carafe_forward"
CONFORMANCE = ["mlu-ops/carafe_forward/case_0.prototxt"]
# The smallest network case whose mmcv baseline is sampled (1024 input pixels; tests/test_thresholds_policy.py).
SAMPLED_NETWORK_CASE = "fpn_h32_c256-float16"

# Planted bugs the docs' rule accepts: each fails only cases that mmcv itself fails
# (subnormal_half-float16, where mmcv's half products underflow: diff1 about 0.3 against the cap
# 3e-2), and the stricter lowp policy (`--baseline lowp`) catches it.
ACCEPTED_BUGS = {
    "half_accumulation": "mmcv's CARAFEForward accumulates the taps in at::Half: this is the reference "
                         "interface's own arithmetic, whose error (kernel_35_full_window-float16: diff1 4.6e-3 "
                         "over 1225 taps) sets the docs' threshold; lowp's float32 threshold there (1.7e-3) fails it",
    "round_toward_zero": "truncating the result instead of rounding it at most doubles the final rounding error, "
                         "well within 10x mmcv's own half error; carafe's doc judges diff1 and diff2 only, not "
                         "diff4's bias (border_align_backward's does, and catches truncation there); with lowp "
                         "it fails subnormal_half only, which mmcv fails too",
}


def oracle(inputs, params, out_shapes=None):
    x, mask = inputs["input"], inputs["mask"]
    N, H, W, C = x.shape
    s = params["scale_factor"]
    out = np.zeros((N, s * H, s * W, C))
    for n, ho, wo, c, iy, ix, mc in taps(x.shape, params):
        out[n, ho, wo, c] += float(x[n, iy, ix, c]) * float(mask[n, ho, wo, mc])
    return {"output": out}


def mmcv_data():
    return [("mmcv_test", MMCV_PARAMS, mmcv_inputs(),
             {"output": mmcv_array("for_carafe", "carafe_output.bin", (2, 64, 6, 6))}, MMCV_TOLERANCE)]
