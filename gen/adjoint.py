"""References that prove each other (gen/REACH.md): a forward and a backward found by convention
(specs ``<family>_forward`` and ``<family>_backward``) checked against each other, no golden.

The backward of a map is its adjoint: for directions dx (the forward's inputs that the backward
returns a gradient of) and dy (the forward's outputs it takes a gradient of),
``<dy, J dx> = <J^T dy, dx>``.  ``J dx`` comes from central differences of the forward,
``(F(x + h dx) - F(x - h dx)) / 2h``: exact to float64 rounding where the forward is at most
quadratic along dx (linear maps, bilinear products: the quadratic term cancels) or piecewise
linear without a switch of a selection inside the step (a max's argmax), and accurate to O(h^2)
where it is smooth.  Each input is classified by whether two steps give the same ``J dx``.

Names pair by convention: the backward's output ``grad_<x>`` or ``d<x>`` is the gradient of the
forward's input ``x``; its input ``grad_<y>`` or ``d<y>`` the gradient of the forward's output
``y``; its other inputs are the forward's inputs or outputs of the same name (an argmax).
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Callable

import numpy as np



@dataclass(frozen=True)
class Steps:
    """The steps of the central differences, and how closely two steps must agree (relative) to say
    that J dx is exact along a direction: at float64's rounding by default; a backend computing in
    float32 needs larger steps and looser agreement (harness/adjoint_run.py)."""
    exact: float = 1.0
    exact_agreement: float = 1e-13
    small: float = 1e-3
    piecewise_agreement: float = 1e-10
    smooth: float = 1e-5


FLOAT64_STEPS = Steps()


def family_pairs(specs) -> dict[str, tuple]:
    """family -> (forward spec, backward spec), for every family both of whose specs are given."""
    by_op = {s.op: s for s in specs}
    return {op.removesuffix("_forward"): (s, by_op[op.removesuffix("_forward") + "_backward"])
            for op, s in sorted(by_op.items())
            if op.endswith("_forward") and op.removesuffix("_forward") + "_backward" in by_op}


def gradient_of(name: str, candidates) -> str | None:
    """The tensor among ``candidates`` whose gradient ``name`` is (grad_<x> or d<x>), or None."""
    for prefix in ("grad_", "d"):
        if name.startswith(prefix) and name[len(prefix):] in candidates:
            return name[len(prefix):]
    return None


def adjoint_inputs_fn(backward):
    """``adjoint_inputs(inputs, params) -> inputs or None`` of the backward's reference module, found by name: where
    the backward is by definition no derivative of the forward (mmcv's gradient in a clamp band), it moves the
    inputs to where the identity holds (None: no such inputs for that call).  The identity if there is none."""
    function = backward.reference_fn
    return getattr(sys.modules[function.__module__], "adjoint_inputs", lambda inputs, params: inputs)


@dataclass
class Pairing:
    """How a backward's tensors stand to its forward's."""
    grads_of_inputs: dict          # backward output -> forward input
    grads_of_outputs: dict         # backward input -> forward output
    passed: list                   # backward inputs taken from the forward's inputs or outputs as they are


def pairing(forward, backward) -> Pairing:
    outs = {o: gradient_of(o, forward.inputs) for o in backward.outputs}
    ins = {i: gradient_of(i, forward.outputs) for i in backward.inputs}
    passed = [i for i, g in ins.items() if g is None]
    unknown = [i for i in passed if i not in forward.inputs and i not in forward.outputs]
    if unknown or any(g is None for g in outs.values()):
        raise ValueError(f"{backward.op}: tensors that pair with none of {forward.op}'s: "
                         f"{', '.join(unknown + [o for o, g in outs.items() if g is None])}")
    return Pairing({o: g for o, g in outs.items()}, {i: g for i, g in ins.items() if g is not None}, passed)


@dataclass
class Identity:
    """One check of the identity: its relative error, and per forward input how J dx was had."""
    error: float
    lhs: float
    rhs: float
    regimes: dict = field(default_factory=dict)      # forward input -> exact | piecewise | smooth
    finite: bool = True


def _dot(a, b) -> tuple[float, float]:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    with np.errstate(invalid="ignore", over="ignore"):   # inf x 0 and +inf + -inf of boundary inputs: NaN
        return float(np.sum(a * b)), float(np.sum(np.abs(a * b)))


def _relative(a: np.ndarray, b: np.ndarray) -> float:
    scale = max(float(np.max(np.abs(a), initial=0.0)), float(np.max(np.abs(b), initial=0.0)), 1e-300)
    with np.errstate(invalid="ignore"):   # inf - inf where both are infinite: NaN, which no bound passes
        return float(np.max(np.abs(a - b), initial=0.0)) / scale


def check_identity(forward_fn: Callable, backward_fn: Callable, pair: Pairing, inputs: dict, params: dict,
                   rng: np.random.Generator, smooth: bool = False, steps: Steps = FLOAT64_STEPS) -> Identity:
    """The identity at ``inputs`` (float64) for random directions.  ``forward_fn(inputs, params)`` and
    ``backward_fn(inputs, params, out_shapes)`` give dicts of outputs.  With ``smooth``, only the inputs along which the
    forward is smooth but not exact are moved, and the check is the finite-difference one (O(h^2))."""
    at = {n: (None if a is None else np.asarray(a, np.float64) if np.asarray(a).dtype.kind == "f" else a)
          for n, a in inputs.items()}
    base = forward_fn(at, params)
    selections = [n for n, a in base.items() if np.asarray(a).dtype.kind in "iub"]
    dy = {g: rng.standard_normal(np.shape(base[y])) for g, y in pair.grads_of_outputs.items()}
    back_in = {n: at[n] if n in at else base[n] for n in pair.passed}
    out_shapes = {g: np.shape(at[x]) for g, x in pair.grads_of_inputs.items() if at.get(x) is not None}
    lhs = rhs = lhs_scale = rhs_scale = 0.0
    regimes = {}
    for grad_name, x in pair.grads_of_inputs.items():
        if at.get(x) is None:
            continue
        dx = rng.standard_normal(at[x].shape)
        regime, jdx, switched = _directional(forward_fn, at, params, x, dx, pair, selections, base, steps)
        regimes[x] = regime
        if (regime == "smooth") != smooth:
            continue
        # Where a selection switched within the step there is no derivative: dy is 0 there, on both sides.
        kept = {g: np.where(switched.get(y, False), 0.0, dy[g]) for g, y in pair.grads_of_outputs.items()}
        grads = backward_fn({**back_in, **kept}, params, out_shapes)
        for g, y in pair.grads_of_outputs.items():
            value, scale = _dot(kept[g], jdx[y])
            lhs, lhs_scale = lhs + value, lhs_scale + scale
        value, scale = _dot(grads[grad_name], dx)
        rhs, rhs_scale = rhs + value, rhs_scale + scale
    finite = all(np.isfinite(v) for v in (lhs, rhs, lhs_scale, rhs_scale))
    error = abs(lhs - rhs) / max(lhs_scale, rhs_scale, 1e-300) if finite else float("nan")
    return Identity(error, lhs, rhs, regimes, finite)


def _directional(forward_fn, at, params, x, dx, pair, selections, base, steps):
    """(regime, J dx per forward output, where a selection switched per output): J dx is compared between two
    steps only where no selection switched in either."""
    def central(h):
        plus = forward_fn({**at, x: at[x] + h * dx}, params)
        minus = forward_fn({**at, x: at[x] - h * dx}, params)
        with np.errstate(invalid="ignore"):   # boundary inputs hold inf on purpose: inf - inf is NaN there
            moved = {y: (np.asarray(plus[y], np.float64) - np.asarray(minus[y], np.float64)) / (2 * h)
                     for y in pair.grads_of_outputs.values()}
        switched = {}
        for s in selections:
            changed = (np.asarray(plus[s]) != np.asarray(base[s])) | (np.asarray(minus[s]) != np.asarray(base[s]))
            for y in pair.grads_of_outputs.values():
                if np.shape(base[y]) == changed.shape:
                    switched[y] = switched.get(y, False) | changed
        return moved, switched
    for step, agreement, regime in ((steps.exact, steps.exact_agreement, "exact"),
                                    (steps.small, steps.piecewise_agreement, "piecewise")):
        one, switched = central(step)
        half, switched_half = central(step / 2)
        both = {y: switched.get(y, False) | switched_half.get(y, False) for y in one}
        if all(_relative(np.where(both[y], 0.0, one[y]), np.where(both[y], 0.0, half[y])) <= agreement
               and not np.all(both[y]) for y in one):
            return regime, one, both
    smooth, switched = central(steps.smooth)
    return "smooth", smooth, switched
