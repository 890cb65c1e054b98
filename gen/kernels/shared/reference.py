"""Float64 reference implementations, one small module per operator.

Each reference is ``fn(inputs, params, compute_dtype=np.float64) -> {output: array}``:
vectorized numpy, arithmetic in ``compute_dtype`` (float64 for goldens; the ``lowp``
backend passes float32 to model typical hardware), layouts as the design docs state.
"""
import math

import numpy as np

# The most sample points (each a read of C channels) one call of a sampling reference evaluates:
# 25 times the largest network case (deform_roi_pool's fpn_p2, 41 M).  A parameter or a roi far
# beyond any network's (a case file's pool_size of 1e308, a sampling_ratio of 10^9) would
# otherwise keep the reference looping for years.
MAX_SAMPLE_POINTS = 1 << 30


def check_sample_points(kernel: str, points: float) -> None:
    """Refuse (ValueError) a call that asks for more than MAX_SAMPLE_POINTS sample points."""
    if not (math.isfinite(points) and points <= MAX_SAMPLE_POINTS):
        raise ValueError(f"{kernel}: the call asks for {points:.3g} sample points, over the {MAX_SAMPLE_POINTS} "
                         f"a reference evaluates")


# The most samples per bin the numpy emulations of mmcv's sampling kernels take: they add a bin's
# samples one step at a time, as mmcv's threads do (its roundings in order), a numpy pass per step, so
# that a grid of 30000 x 30000 (a roi of a million pixels on a one-pixel map, sampling_ratio 0) would
# take hours even where the reference's sample points are few enough.  The spec suites' largest
# grid is about 300 steps (deform_roi_pool_forward's, --suite all), and mmcv's CUDA threads take
# about as long per step.
MAX_EMULATED_STEPS = 1 << 16


def check_emulated_steps(kernel: str, steps: float) -> None:
    """Refuse (ValueError) an emulated call whose bins have more than MAX_EMULATED_STEPS samples each."""
    if not (math.isfinite(steps) and steps <= MAX_EMULATED_STEPS):
        raise ValueError(f"{kernel}: a bin of the call has {steps:.3g} samples, over the {MAX_EMULATED_STEPS} "
                         f"the mmcv emulation adds one at a time")


def assemble(blocks, shapes: dict, dtype) -> dict:
    """Whole outputs from a reference's pieces.

    A streaming reference (``<fn>_blocks``) yields ``(output, index, block)``: ``index`` a
    tuple of leading integers and at most one slice, so that each piece is a contiguous run of
    the C-ordered output, and each output's pieces come in order.  What no piece covers is 0
    (empty tensors yield nothing).  The generator writes such pieces straight to disk instead.
    """
    outputs = {name: np.zeros(shape, dtype=dtype) for name, shape in shapes.items()}
    for name, index, block in blocks:
        outputs[name][index] = block
    return outputs


def exact_dtype(source: np.ndarray, compute_dtype) -> np.dtype:
    """For kernels that only move values: a dtype that holds every value of ``source`` exactly
    and is no wider than needed (the source's own, unless ``compute_dtype`` is narrower)."""
    source_dtype, compute_dtype = np.dtype(source.dtype), np.dtype(compute_dtype)
    return source_dtype if np.can_cast(source_dtype, compute_dtype, "safe") else compute_dtype
