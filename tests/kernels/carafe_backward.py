"""carafe_backward's record: the slow oracle, the forward's taps differentiated one by one."""
from __future__ import annotations

import numpy as np

from kernels.carafe import taps

OP = "carafe_backward"
CONFORMANCE = ["mlu-ops/carafe_backward/case_0.prototxt"]


def oracle(inputs, params, out_shapes=None):
    x, mask, grad_out = inputs["input"], inputs["mask"], inputs["grad_output"]
    grad_input, grad_mask = np.zeros(x.shape), np.zeros(mask.shape)
    for n, ho, wo, c, iy, ix, mc in taps(x.shape, params):
        g = float(grad_out[n, ho, wo, c])
        grad_input[n, iy, ix, c] += float(mask[n, ho, wo, mc]) * g
        grad_mask[n, ho, wo, mc] += float(x[n, iy, ix, c]) * g
    return {"grad_input": grad_input, "grad_mask": grad_mask}
