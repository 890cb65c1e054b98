"""opcase generator: specs -> suites of cases with float64 goldens.

Public API::

    import gen
    gen.golden("psamask_forward", {"x": x}, {"psa_type": 0, "h_mask": 3, "w_mask": 3})
"""
from __future__ import annotations


def golden(op: str, inputs: dict, params: dict, out_shapes: dict | None = None) -> dict:
    """Float64 reference outputs of ``op`` (no rounding, no parameter checks)."""
    from gen.registry import spec_for
    return spec_for(op).reference_fn(dict(inputs), dict(params), out_shapes=out_shapes)


__all__ = ["golden"]
