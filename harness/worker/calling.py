"""Calling a backend on one case: what a worker process does, and all it does (no judging here).

This module is the only harness code that runs beside a foreign backend (in a worker process,
harness.judge.workers).  It reads a case's inputs (never its goldens: gen.core.casefile.load with
goldens=False), calls the backend (warm-up, timed calls), and hands what came back to whoever
judges: ``hand_over`` receives the judged call (Called), ``compare`` each further call's outputs
under --bitwise.  Nothing it reports can make a verdict better than the outputs earn: the judge
(harness.judge.runner.Judgement) checks the outputs' form and computes every metric and status itself,
in a process the backend never ran in; what comes from here can only be the backend's own say
(it rejected the call, it raised, its time) or make its case an error.

Calling convention (see gen.core.backend): ``backend.run(request)`` returns a dict of numpy
arrays, one per requested output, in the requested shapes and dtypes; it raises
``InvalidArgument`` to reject a call, and ``NotSupported`` to decline one it does not implement
(the case is then skipped).  A backend whose ``measures_time`` is True returns
``(outputs, seconds)`` instead, ``seconds`` being its own kernel (device) time for that call;
otherwise the harness times ``run`` itself.  The request's input arrays are read-only: a backend
that writes into them (or returns outputs it was not asked for) wrote outside what it was asked
for, and its case is an error.
"""
from __future__ import annotations

import traceback
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from gen.core.backend import Backend, InvalidArgument, NotSupported, Request
from gen.core.casefile import Case
from gen.core.timing import BackendProtocolError, TimingPlan, call, summarize
from gen.core.verdict import request_for, validate_outputs
from harness.worker.decoy import decoy_first

# What the judged call did (Called.outcome).
# SKIPPED: supports() said no to the kernel or dtype (the case is not the backend's to judge);
# DECLINED: the call itself raised NotSupported (a case whose check expects NOT_SUPPORTED passes).
OUTPUTS, REJECTED, RAISED, INVALID, SKIPPED, DECLINED, UNSUPPORTED_RAISED = (
    "outputs", "rejected", "raised", "invalid", "skipped", "declined", "supports-raised")
OUTCOMES = (OUTPUTS, REJECTED, RAISED, INVALID, SKIPPED, DECLINED, UNSUPPORTED_RAISED)


@dataclass
class Called:
    """The judged call: its outcome, the backend's message (or why its outputs are unusable),
    its time, and its outputs (OUTPUTS of a case expected to succeed only)."""
    outcome: str
    message: str = ""
    seconds: float = 0.0
    outputs: dict | None = None


@dataclass
class Timed:
    """The timed calls after the judged one: their summary (gen.core.timing.summarize), or why
    one of them is unusable."""
    timing: dict | None = None
    problem: str = ""


def _tail(text: str, lines: int = 6) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


# --------------------------------------------------------------------------- inputs untouched

def _fingerprints(request: Request) -> dict:
    """CRCs of the call's inputs held in process memory.

    Read-only flags stop numpy writes; these catch a backend that writes through a raw pointer.
    Memory-mapped sidecars need no fingerprint: they are mapped read-only, so such a write faults.
    """
    return {n: zlib.crc32(memoryview(np.ascontiguousarray(a)).cast("B"))
            for n, a in request.inputs.items() if not isinstance(a, np.memmap) and a.size}


def _wrote_inputs(request: Request, before: dict) -> str:
    after = _fingerprints(request)
    changed = sorted(n for n in before if after.get(n) != before[n])
    return f"backend wrote into its input(s) {changed}, which it was only to read" if changed else ""


# --------------------------------------------------------------------------- what the backend raised

_CALLING_FILES = {str(Path(__file__).resolve()),
                  str(Path(__file__).resolve().parents[2] / "gen" / "core" / "timing.py")}


def _backend_traceback(exc: BaseException) -> str:
    """The end of the traceback, from the backend's own frames on (the harness's say nothing)."""
    frames = traceback.extract_tb(exc.__traceback__)
    first = next((i for i, f in enumerate(frames) if str(Path(f.filename).resolve()) not in _CALLING_FILES), 0)
    text = "".join(traceback.format_list(frames[first:]) + traceback.format_exception_only(type(exc), exc))
    return _tail(text, 8)


def _raised(exc: BaseException, what: str) -> str:
    if isinstance(exc, BackendProtocolError):
        return str(exc)
    if isinstance(exc, ValueError) and "read-only" in str(exc):
        return f"backend wrote into its read-only inputs during {what}: {exc}\n{_backend_traceback(exc)}"
    return f"backend raised {type(exc).__name__} during {what}: {exc}\n{_backend_traceback(exc)}"


# --------------------------------------------------------------------------- calling

def judged_call(backend: Backend, request: Request, what: str = "") -> Called:
    """The one call whose outputs are judged: the single place a case's judged call is made
    (``what``: the kernel and dtype, for a declined call's message)."""
    try:
        produced, seconds, _ = call(backend, request)
    except NotSupported as exc:   # it declines the call: skipped, as for supports() False, unless expected
        return Called(DECLINED, f"backend {backend.name} declined {what or request.op}" + (f": {exc}" if str(exc) else ""))
    except InvalidArgument as exc:
        return Called(REJECTED, str(exc))
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - whatever the backend raises is reported
        return Called(RAISED, _raised(exc, "the call"))
    return Called(OUTPUTS, seconds=seconds, outputs=produced)


def _time_calls(backend: Backend, request: Request, plan: TimingPlan, check) -> tuple[dict | None, str]:
    """Warm-up then timed calls: (their timing, '') or (None, why the backend failed one).

    Each call's outputs go to ``check``, outside the timing; it returns why they are unusable,
    or ''.  An exception from the check itself is the harness's: it propagates.
    """
    samples, source = [], "harness"
    for number in range(plan.warmup + plan.repeat):
        try:
            outputs, seconds, source = call(backend, request)
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - a call that fails only when repeated
            return None, _raised(exc, "the timed calls")
        if number >= plan.warmup:
            samples.append(seconds)
        problem = check(number + 2, outputs)
        del outputs
        if problem:
            return None, problem
    return summarize(samples, source, plan), ""


def call_case(backend: Backend, case: Case, plan: TimingPlan, hand_over: Callable[[Called], None],
              compare: Callable[[int, dict], str] | None = None, decoy: bool = True) -> Timed | None:
    """Call ``backend`` on ``case`` as `opcase run` does; ``hand_over`` gets the judged call, made
    after a decoy call (harness.worker.decoy) unless not ``decoy`` (the cold pass, harness.judge.cold_pass).

    Then, when that call returned outputs for a case that expects them and ``plan`` asks for
    timed calls, make them: each one's outputs are checked for form, and go to ``compare``
    (call number, outputs) when given (--bitwise), which says why they disagree or ''.
    Returns the timed calls' Timed, or None when there were none.
    """
    try:
        supported = backend.supports(case.op, case.dtype)
    except Exception as exc:  # noqa: BLE001 - a broken supports() is the backend's error
        hand_over(Called(UNSUPPORTED_RAISED, f"backend supports() raised {type(exc).__name__}: {exc}"))
        return None
    if not supported:
        hand_over(Called(SKIPPED, f"backend {backend.name} does not support {case.op} {case.dtype}"))
        return None
    request = request_for(case)
    if case.expect != "rejected" and decoy:
        request = decoy_first(backend, request)   # state kept between calls shows (harness.worker.decoy)
    before = _fingerprints(request)
    called = judged_call(backend, request, f"{case.op} {case.dtype}")
    if called.outcome == OUTPUTS and case.expect != "ok":
        called.outputs = None   # accepted a call it should have refused: the outputs do not matter
    elif called.outcome == OUTPUTS:
        problem = validate_outputs(case, called.outputs) or _wrote_inputs(request, before)
        if problem:
            called = Called(INVALID, problem, called.seconds)
    hand_over(called)
    if called.outcome != OUTPUTS or case.expect != "ok" or not plan.repeat:
        return None
    del called

    def check(number: int, outputs) -> str:
        problem = validate_outputs(case, outputs)
        if problem:
            return f"call {number}: {problem}"
        return compare(number, outputs) if compare is not None else ""

    timing, problem = _time_calls(backend, request, plan, check)
    return Timed(timing, problem or _wrote_inputs(request, before))
