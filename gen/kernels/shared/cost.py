"""What the cost functions of the family folders (``cost.py``, gen/kernels/README.md) count in
common: the units of a case's work beyond its bytes, which gen.cost adds.

One unit is one elementary float operation of vectorized numpy on a whole array.  The float64
golden's operations count once.  The baseline's (the mmcv emulation that dynamic thresholds
compare with) count more, because every operation it emulates is an operation and a rounding:
float32's fused multiply-add is computed wider and rounded, float16's every operator is
computed in float32 and rounded to half (gen.kernels.shared.mmcv_half).  A step of a loop that an
emulation runs in Python (one emulated operation on a small array: a tap, a unit of a sample)
costs its calls' overhead whatever the array's size, LOOP_STEP units.  These are ratios between
kinds of work on one CPU, not seconds: the progress (harness.reports.progress.Pace) learns the
seconds per unit from the cases done.
"""
from __future__ import annotations

from gen.sampled import CAPTURE_ELEMENTS, FIRST_UNITS, REL_SE_TARGET

# Units of one emulated operation of the baseline, by dtype: the operation and its rounding; a
# half operator also converts its operands to float32 first.
EMULATED_OP_UNITS = {"float32": 2.0, "float16": 4.0}
# Units of one emulated operation on a small array: some twenty numpy calls (the operation, its
# rounding, their broadcasting) of about a microsecond each, against about a nanosecond per
# element of a vectorized operation.
LOOP_STEP = 20_000.0
# An operation on arrays too large for the cache (a pass that a kernel cannot cut into chunks of
# cache size) waits on memory: about this many units.
OUT_OF_CACHE = 3.0
# Loop steps per unit of a sampled baseline beyond the kernel's own: the unit's comparison with
# the golden (gen.core.metrics.StreamingCompare) and the sample's bookkeeping.
UNIT_STEPS = 5
# Units of one operation of a compiled loop (gen.native) on values it holds in registers: about a
# cycle, where a numpy operation also passes over memory (about a nanosecond an element).
COMPILED_OP = 0.3
# The lanes of a compiled loop over float64 that gen.native's flags vectorize: SSE2's two, the
# x86-64 baseline (gen.native builds with -O2 and no -march).
COMPILED_LANES = 2
# Compiled operations of one fmaf: a libm call computing it in software, since gen.native's
# flags enable no fused instruction (about the double-width trick's twenty operations).
COMPILED_FMA_OPS = 20
# Compiled operations of one rounding to half in float32 (mmcv_half.round_to_half's arithmetic as
# the compiled emulations write it: the exponent's clamp, the shifter's add and subtract, the
# sign's restore, the overflow's test: some fourteen).
COMPILED_HALF_ROUNDING_OPS = 14
def emulated(ops: float, dtype: str) -> float:
    """Units of ``ops`` operations of the emulated baseline in ``dtype``."""
    return ops * EMULATED_OP_UNITS.get(dtype, 1.0)


def blocks(elements: int, block_elements: int) -> int:
    """How many blocks of ``block_elements`` a loop over ``elements`` takes (at least one)."""
    return max(1, -(-int(elements) // max(1, int(block_elements))))


def sampled_units(count: int, smallest: int, per_unit: int, exact: bool = False) -> int:
    """How many of ``count`` output units a sampled baseline (gen.sampled) is planned to compute,
    each unit holding ``per_unit`` elements of all outputs and ``smallest`` of its smallest one.

    The sample doubles from FIRST_UNITS until each metric's relative standard error is at most
    REL_SE_TARGET.  A metric is a ratio of sums of element errors, so with errors of about equal
    size the standard error falls as one over the square root of the elements sampled: about
    1 / REL_SE_TARGET^2 of them (2,500), of the output with the fewest per unit, then suffice.
    A unit of a few elements (a two-channel pixel) needs a thousand units where a network case's
    needs the first 32.  A baseline that is ``exact`` (its family knows the case's arithmetic
    rounds nowhere, so every unit's error is zero) runs to the cap: a ratio of zero has no
    relative standard error to fall below the target (gen.sampled._relative_se), so the sample
    doubles until the golden capture is full.  Errors that are rare or of very unequal size need
    more too, which no plan foresees: the progress sees that while the case runs."""
    needed = -(-int(1 / REL_SE_TARGET ** 2) // max(1, int(smallest)))
    units = FIRST_UNITS
    while units < needed:
        units *= 2
    cap = max(FIRST_UNITS, CAPTURE_ELEMENTS // max(1, int(per_unit)))
    if exact:
        units = cap
    return max(0, min(int(count), units, cap))
