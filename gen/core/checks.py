"""Evaluating a spec's parameter checks on the tensors and params of a call."""
from __future__ import annotations

from gen.core.backend import TensorInfo
from gen.core.expr import ExprError, evaluate
from gen.core.spec import Check, Spec, SpecError


def check_env(spec: Spec, tensors: dict[str, TensorInfo | None], params: dict) -> dict:
    env = {name: None for name in (*spec.inputs, *spec.outputs)}
    env.update(tensors)
    env.update(params)
    return env


def failures(spec: Spec, tensors: dict[str, TensorInfo | None], params: dict) -> list[Check]:
    """Every check the call violates, in the doc's order."""
    env = check_env(spec, tensors, params)
    return [check for check in spec.checks if not _holds(check, env)]


def _holds(check: Check, env: dict) -> bool:
    try:
        return bool(evaluate(check.require, env))
    except ExprError:
        return False


def first_failure(spec: Spec, tensors: dict[str, TensorInfo | None], params: dict,
                  spec_errors: bool = False) -> Check | None:
    """The first check, in the doc's order, that the call violates; None if all hold.

    A check whose expression cannot even be evaluated (a tensor of the wrong rank
    indexed past its end, say) counts as violated: the call is malformed.  With
    ``spec_errors`` (for a call the spec itself makes valid: the generator's plans) it is
    the spec's error instead, a SpecError at the check's line: every check before it
    holds, so the call is as the spec declares it and the check is what is wrong
    (``x.dtype.shape == 1``).
    """
    env = check_env(spec, tensors, params)
    for check in spec.checks:
        try:
            holds = bool(evaluate(check.require, env))
        except ExprError as exc:
            if spec_errors:
                raise SpecError(spec.path, check.line, f"check '{check.id}' cannot be evaluated on a call that "
                                                       f"meets every check before it: {exc}") from None
            holds = False
        if not holds:
            return check
    return None
