"""The adjoint identity between a pair's forward reference and a changed backward reference, in float64,
on the forward's random calls: what `opcase power`'s identity tier (harness/studies/power_identity.py,
gen/REACH.md) judges a mutant of a backward reference by, where the goldens cannot tell it."""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from gen.adjoint import adjoint_inputs_fn, check_identity, family_pairs, pairing
from gen.core.registry import known_ops, spec_for
from gen.generate import draw_inputs, interface_params, layout_of, plan_suite

SAMPLES = 3


def reference_identity_error(backward_op: str, compute_dtype, samples: int = SAMPLES) -> tuple[float | None, int]:
    """(worst relative identity error, samples judged) of ``backward_op``'s reference computed in ``compute_dtype``
    against its forward's reference in float64, on the forward's first random calls as the backward
    reference's adjoint_inputs moves them; (None, 0) when ``backward_op`` is no pair's backward."""
    found = family_pairs([spec_for(o) for o in known_ops()]).get(backward_op.removesuffix("_backward"))
    if not backward_op.endswith("_backward") or found is None:
        return None, 0
    forward, backward = found
    pair, moved = pairing(forward, backward), adjoint_inputs_fn(backward)

    def fwd(inputs, params):
        return forward.reference_fn(inputs, params)

    def bwd(inputs, params, out_shapes):
        grads = backward.reference_fn(inputs, params, compute_dtype=compute_dtype, out_shapes=out_shapes)
        return {g: np.asarray(a, np.float64) for g, a in grads.items()}

    worst, judged = None, 0
    for plan in plan_suite(forward, "random", count=4 * samples)[:4 * samples]:
        if judged == samples:
            break
        plan = replace(plan, params=interface_params(forward, plan.params))
        inputs = moved(draw_inputs(forward, plan, layout_of(forward, plan)), plan.params)
        if inputs is None:
            continue
        with np.errstate(all="ignore"):
            identity = check_identity(fwd, bwd, pair, inputs, plan.params, np.random.default_rng(plan.seed))
        if identity.finite and any(r in ("exact", "piecewise") for r in identity.regimes.values()):
            judged += 1
            worst = identity.error if worst is None else max(worst, identity.error)
    return worst, judged
