"""References that prove each other (gen/REACH.md): for every forward/backward pair found by convention
(specs <family>_forward and <family>_backward), the backward reference is the forward's adjoint,
<dy, J dx> = <J^T dy, dx>, to float64 rounding, on random and boundary inputs; and the check fails
for a planted sign error and a planted missing term in the backward."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from conftest import REPO
from gen.adjoint import adjoint_inputs_fn, check_identity, family_pairs, pairing
from gen.core.casefile import element_count
from gen.core.spec import load_spec
from gen.generate import draw_inputs, interface_params, layout_of, plan_suite

PAIRS = family_pairs([load_spec(p) for p in sorted((REPO / "specs").glob("*.yaml"))])
TOLERANCE = 1e-12
SMALL = 1 << 16          # boundary cases up to this many elements in their largest tensor (seconds, not minutes)


def _samples(forward, backward):
    """(name, inputs, params): 3 random cases and the small boundary cases of the forward's suites, as the
    backward reference's ``adjoint_inputs(inputs, params)`` moves them where the identity is meant to hold (None:
    the sample is left out), if it has one."""
    moved = adjoint_inputs_fn(backward)
    plans = plan_suite(forward, "random", count=3)[:3]
    plans += [p for p in plan_suite(forward, "boundary") if max(
        element_count(s) for s in layout_of(forward, replace(p, params=interface_params(forward, p.params)))
        .shapes.values()) <= SMALL]
    for plan in plans:
        plan = replace(plan, params=interface_params(forward, plan.params))
        inputs = moved(draw_inputs(forward, plan, layout_of(forward, plan)), plan.params)
        if inputs is not None:
            yield plan.name, inputs, plan.params


def _functions(forward, backward, planted=None):
    def fwd(inputs, params):
        return forward.reference_fn(inputs, params)

    def bwd(inputs, params, out_shapes):
        grads = backward.reference_fn(inputs, params, out_shapes=out_shapes)
        return planted(grads) if planted else grads
    return fwd, bwd


def _errors(family, planted=None, smooth=False):
    forward, backward = PAIRS[family]
    pair = pairing(forward, backward)
    fwd, bwd = _functions(forward, backward, planted)
    found = {}
    for name, inputs, params in _samples(forward, backward):
        try:
            identity = check_identity(fwd, bwd, pair, inputs, params, np.random.default_rng(0), smooth=smooth)
        except (ValueError, FloatingPointError):
            continue          # a boundary call the reference refuses (an invalid extent): nothing to compare
        if identity.finite:
            found[name] = (identity.error, identity.regimes)
    return found


def test_every_pair_is_found():
    assert PAIRS, "no <family>_forward / <family>_backward specs found"


@pytest.mark.parametrize("family", sorted(PAIRS))
def test_the_backward_is_the_forwards_adjoint(family):
    errors = _errors(family)
    assert errors, "no sample with a finite identity"
    bad = {n: e for n, e in errors.items() if not e[0] <= TOLERANCE}
    assert bad == {}


def _sign_error(grads: dict) -> dict:
    """The first gradient negated."""
    first = next(iter(grads))
    return {**grads, first: -np.asarray(grads[first])}


def _missing_term(grads: dict) -> dict:
    """The last entry of each gradient's innermost axis left out (a term of the sum not added)."""
    out = {}
    for name, g in grads.items():
        g = np.array(g, copy=True)
        if g.ndim and g.shape[-1]:
            g[..., -1] = 0
        out[name] = g
    return out


@pytest.mark.parametrize("planted", [_sign_error, _missing_term], ids=["sign_error", "missing_term"])
@pytest.mark.parametrize("family", sorted(PAIRS))
def test_a_planted_backward_bug_breaks_the_identity(family, planted):
    errors = _errors(family, planted)
    assert max(e for e, _ in errors.values()) > 1e-6, errors


@pytest.mark.parametrize("family", sorted(PAIRS))
def test_the_backward_matches_central_differences_where_the_forward_is_smooth(family):
    """Inputs along which the forward is smooth but not linear (a bilinear sample's position): the backward
    against central differences, to O(h^2)."""
    errors = _errors(family, smooth=True)
    smooth = {n: e for n, (e, regimes) in errors.items() if "smooth" in regimes.values()}
    if not smooth:
        pytest.skip("the forward is linear or piecewise linear along every input: the adjoint test is the whole check")
    bad = {n: e for n, e in smooth.items() if not e <= 1e-6}
    assert bad == {}, f"{len(bad)} of {len(smooth)} samples"
