"""opcase generator: specs -> suites of cases with float64 goldens.

Public API::

    import gen
    gen.golden("psamask_forward", {"x": x}, {"psa_type": 0, "h_mask": 3, "w_mask": 3})
"""
from __future__ import annotations

import numpy as np

from gen.core.registry import spec_for


def golden(op: str, inputs: dict, params: dict, out_shapes: dict | None = None) -> dict:
    """Float64 reference outputs of ``op`` (no rounding, no parameter checks)."""
    outputs = spec_for(op).reference_fn(dict(inputs), dict(params), out_shapes=out_shapes)
    # Pure-IO references keep exact values in the input's dtype; the API promises float64.
    return {name: np.asarray(a).astype(np.float64, copy=False) for name, a in outputs.items()}


__all__ = ["golden"]
