"""A planned case's cost: what making it takes, in units of work, for gen's progress.

Its bytes do not say it: on the main command's suites a golden costs from 0.01 to several
seconds per MB by kernel and suite, and a case of 12 MB took minutes (a large window on a small
map, whose sampled baseline steps through every tap in Python).  So a case costs its tensors'
bytes at BYTE_UNITS each (drawing, rounding, writing, checksumming and comparing them), plus
what its kernel family's cost function says its arithmetic takes (the ``cost`` part of
gen/kernels/README.md's contract, in gen.kernels.shared.cost's units), where the family has one.
The units are no seconds: harness.reports.progress.Pace learns the seconds per unit from the
cases done, by kernel and suite.
"""
from __future__ import annotations

import math

from gen.core.casefile import element_count
from gen.core.registry import COST, kernel_function
from gen.core.spec import Spec
from gen.generate import baseline_units_fn
from gen.plan import Plan, layout_of, total_bytes
from gen.sampled import SAMPLE_ABOVE_ELEMENTS

# Units of work per byte of a case's tensors, in gen.kernels.shared.cost's units (about an
# operation per element of each pass over the data: random draws, float64 golden, rounding, the
# file's checksum and the baseline's comparison).
BYTE_UNITS = 10.0


def case_cost(spec: Spec, plan: Plan, baseline: str | None = None) -> float:
    """The units of work of making ``plan``'s case (``baseline``: gen's --baseline, else the spec's)."""
    size = total_bytes(spec, plan)
    arithmetic = kernel_function(COST, spec.op)
    if arithmetic is None or plan.violation is not None:   # an invalid case has no golden
        return BYTE_UNITS * size
    try:
        work = float(arithmetic(dict(plan.dims), dict(plan.params), plan.dtype, _baseline_kind(spec, plan, baseline)))
    except (KeyError, TypeError, ValueError, ArithmeticError):
        # A spec edited past what its family's count reads (a dim renamed): only the ETA is at
        # stake, so the case weighs its bytes; the committed specs' plans are counted (tests/test_cost.py).
        return BYTE_UNITS * size
    return BYTE_UNITS * size + (work if math.isfinite(work) and work > 0 else 0.0)


def _baseline_kind(spec: Spec, plan: Plan, baseline: str | None) -> str | None:
    """How gen computes the case's baseline: None (static thresholds), "whole", or "sampled"
    (gen.sampled: on a sample of output units), as gen.generate.Generator decides it."""
    if spec.criteria.mode != "dynamic":
        return None
    lay = layout_of(spec, plan)
    outputs = sum(element_count(lay.shapes[name]) for name in spec.outputs if name in lay.shapes)
    name = baseline or spec.criteria.baseline
    if outputs > SAMPLE_ABOVE_ELEMENTS and baseline_units_fn(name, spec) is not None:
        return "sampled"
    return "whole"
