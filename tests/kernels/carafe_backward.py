"""carafe_backward's record: the slow oracle, the forward's taps differentiated one by one."""
from __future__ import annotations

import numpy as np

from kernels import mmcv_array
from kernels.carafe import MMCV_PARAMS, MMCV_TOLERANCE, mmcv_inputs, taps

OP = "carafe_backward"
CONFORMANCE = ["mlu-ops/carafe_backward/case_0.prototxt"]
# The smallest network case whose mmcv baseline is sampled (1024 input pixels; tests/test_thresholds_policy.py).
SAMPLED_NETWORK_CASE = "fpn_h32_c256-float16"


def oracle(inputs, params, out_shapes=None):
    x, mask, grad_out = inputs["input"], inputs["mask"], inputs["grad_output"]
    grad_input, grad_mask = np.zeros(x.shape), np.zeros(mask.shape)
    for n, ho, wo, c, iy, ix, mc in taps(x.shape, params):
        g = float(grad_out[n, ho, wo, c])
        grad_input[n, iy, ix, c] += float(mask[n, ho, wo, mc]) * g
        grad_mask[n, ho, wo, mc] += float(x[n, iy, ix, c]) * g
    return {"grad_input": grad_input, "grad_mask": grad_mask}


def mmcv_data():
    """mmcv's gradients for grad_output = ones."""
    inputs = {**mmcv_inputs(), "grad_output": np.ones((2, 6, 6, 64), np.float32)}
    return [("mmcv_test", MMCV_PARAMS, inputs,
             {"grad_input": mmcv_array("for_carafe", "carafe_feat_grad.bin", (2, 64, 3, 3)),
              "grad_mask": mmcv_array("for_carafe", "carafe_mask_grad.bin", (2, 100, 6, 6))}, MMCV_TOLERANCE)]
