"""Evaluating a spec's parameter checks on the tensors and params of a call."""
from __future__ import annotations

from operator import attrgetter

from gen.core.backend import REFUSALS, TensorInfo
from gen.core.expr import ExprError, evaluate, falsy, first_false
from gen.core.spec import CHECK_STATUSES, Check, Spec, SpecError


def check_env(spec: Spec, tensors: dict[str, TensorInfo | None], params: dict) -> dict:
    env = {name: None for name in (*spec.inputs, *spec.outputs)}
    env.update(tensors)
    env.update(params)
    return env


def failures(spec: Spec, tensors: dict[str, TensorInfo | None], params: dict) -> list[Check]:
    """Every check the call violates, in the doc's order."""
    env = check_env(spec, tensors, params)
    checks = spec.checks
    failed = falsy(_requires(checks), env)
    if failed is not None:
        return [check for check, fails in zip(checks, failed) if fails]
    # A check raised (the call is malformed): which ones fail, one at a time.
    return [check for check in checks if not _holds(check, env)]


# The checks' expressions, the key of their code compiled together (gen.core.expr): read from the
# checks at every call, so that a spec whose checks are replaced or edited is never judged by old code.
_REQUIRE = attrgetter("require")


def _requires(checks) -> tuple:
    return tuple(map(_REQUIRE, checks))


def _holds(check: Check, env: dict) -> bool:
    try:
        return bool(evaluate(check.require, env))
    except ExprError:
        return False


def refusal(check: Check) -> type[Exception]:
    """What a backend raises when ``check`` fails: InvalidArgument (BAD_PARAM), or NotSupported where the
    check's status is not_supported."""
    return REFUSALS[CHECK_STATUSES[check.status]]


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
    checks = spec.checks
    index = first_false(_requires(checks), env)
    if index is not None:
        return checks[index] if index < len(checks) else None
    # A check raised: the loop finds the same first failure and says why it cannot be evaluated.
    for check in checks:
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
