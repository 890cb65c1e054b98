"""Running a backend on cases and judging what comes back.

Calling convention (see gen.core.backend): ``backend.run(request)`` returns a dict of numpy
arrays, one per requested output, in the requested shapes and dtypes; it raises
``InvalidArgument`` to reject a call, and ``NotSupported`` to decline one it does not implement
(the case is then skipped).  A backend whose ``measures_time`` is True returns
``(outputs, seconds)`` instead, ``seconds`` being its own kernel (device) time for that call;
otherwise the harness times ``run`` itself.

The request's input arrays are read-only.  A backend that writes into them (or returns outputs
it was not asked for) wrote outside what it was asked for: the case is an error.

How a case ends: gen.core.verdict.
"""
from __future__ import annotations

import shlex
import time
import traceback
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gen.core.backend import Backend, InvalidArgument, NotSupported, Request
from gen.core.casefile import Case, CaseFileError, load
from gen.core.descriptor import describe
from gen.core.timing import BackendProtocolError, TimingPlan, call, summarize
from harness.backends import import_path_for
from gen.core.verdict import (ERROR, FAILED, MISTRUSTED, NONDETERMINISTIC, PASSED, SKIPPED, WRONGLY_ACCEPTED,
                              WRONGLY_REJECTED, CaseResult, judge, measure, output_fails, request_for,
                              validate_outputs)
from harness.determinism import RepeatCheck
from harness.efficiency import efficiency
from harness.error_map import error_map

@dataclass(frozen=True)
class RunOptions:
    """How each case is run, beyond the backend: timing, efficiency, and what REPRO repeats."""
    timing: TimingPlan = TimingPlan()
    profile: object = None                 # harness.efficiency.DeviceProfile
    repro_options: tuple = ()              # extra `opcase run` arguments that change a case's verdict
    bitwise: bool = False                  # compare every further call's outputs with the judged call's
    error_maps: bool = False               # summarize where each failing output's error sits (--html)


def repro_command(path, backend_spec: str, options=()) -> str:
    """The command that reruns one case, in a fresh shell: with the PYTHONPATH the backend's
    module needs when it is not an installed one."""
    env = import_path_for(backend_spec)
    return " ".join([*([env] if env else []), "opcase", "run", shlex.quote(str(path)),
                     "--backend", shlex.quote(backend_spec),
                     *map(shlex.quote, map(str, options))])


def _tail(text: str, lines: int = 6) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


# --------------------------------------------------------------------------- inputs untouched

def _fingerprints(case: Case) -> dict:
    """CRCs of the inputs held in process memory.

    Read-only flags stop numpy writes; these catch a backend that writes through a raw pointer.
    Memory-mapped sidecars need no fingerprint: they are mapped read-only, so such a write faults.
    """
    return {n: zlib.crc32(memoryview(np.ascontiguousarray(t.data)).cast("B"))
            for n, t in case.inputs.items()
            if t.data is not None and not isinstance(t.data, np.memmap) and t.data.size}


def _changed_inputs(case: Case, before: dict) -> list[str]:
    after = _fingerprints(case)
    return sorted(n for n in before if after.get(n) != before[n])


# --------------------------------------------------------------------------- running

_CALLING_FILES = {str(Path(__file__).resolve()), str(Path(__file__).resolve().with_name("timing.py"))}


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


def _time_calls(backend: Backend, request: Request, plan: TimingPlan, check=None) -> tuple[dict | None, str]:
    """Warm-up then timed calls: (their timing, '') or (None, why the backend failed one).

    Each call's outputs go to ``check`` (if any), outside the timing; it returns why they are
    unusable, or ''.  An exception from the check itself is the harness's: it propagates.
    """
    samples, source = [], "harness"
    for number in range(plan.warmup + plan.repeat):
        try:
            outputs, seconds, source = call(backend, request)
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - a call that fails only when repeated
            return None, _raised(exc, "the timed calls")
        if number >= plan.warmup:
            samples.append(seconds)
        problem = check(outputs) if check is not None else ""
        del outputs
        if problem:
            return None, problem
    return summarize(samples, source, plan), ""


def _validated(case: Case, check: RepeatCheck):
    """``check``, refusing first a repeated call's outputs of the wrong form (the case is then an error)."""
    def take(outputs) -> str:
        problem = validate_outputs(case, outputs)
        if problem:
            return f"call {check.calls + 1}: {problem}"
        check(outputs)
        return ""
    return take


def run_loaded(case: Case, backend: Backend, result: CaseResult, options: RunOptions | None = None) -> CaseResult:
    """Call the backend on a loaded case and fill in ``result``."""
    options = options or RunOptions()
    result.op, result.suite, result.name, result.dtype = case.op, case.suite, case.name, case.dtype
    result.descriptor = describe(case.op, case.suite, case.name, case.seed, case.note)
    try:
        supported = backend.supports(case.op, case.dtype)
    except Exception as exc:  # noqa: BLE001 - a broken supports() is the backend's error
        result.status, result.message = ERROR, f"backend supports() raised {type(exc).__name__}: {exc}"
        return result
    if not supported:
        result.status, result.message = SKIPPED, f"backend {backend.name} does not support {case.op} {case.dtype}"
        return result
    no_golden = [n for n, t in case.outputs.items() if t.data is None] if case.expect == "ok" else []
    if no_golden:
        result.status, result.message = ERROR, f"the case carries no golden for {no_golden}: nothing to judge against"
        return result
    request = request_for(case)
    before = _fingerprints(case)
    try:
        produced, result.seconds, _ = call(backend, request)
    except NotSupported as exc:
        return _declined(result, backend, exc)
    except InvalidArgument as exc:
        if case.expect == "rejected":
            result.status, result.message = PASSED, f"rejected as expected: {exc}"
        else:
            result.status, result.message = WRONGLY_REJECTED, f"valid call rejected: {exc}"
        return result
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - whatever the backend raises is reported
        result.status, result.message = ERROR, _raised(exc, "the call")
        return result
    if case.expect == "rejected":
        result.status = WRONGLY_ACCEPTED
        result.message = f"accepted a call that breaks check '{case.expect_check}': {case.expect_message}"
        return result
    problem = validate_outputs(case, produced) or _wrote_inputs(case, before)
    if problem:
        result.status, result.message = ERROR, problem
        return result
    judge(case, produced, result)
    if options.error_maps and result.status == FAILED:
        result.error_maps = {name: error_map(produced[name], t.data, t.layout, t.dtype)
                             for name, t in case.outputs.items() if output_fails(result, name)}
    check = RepeatCheck(case, produced, result, measure, lambda: CaseResult(path=result.path)) \
        if options.bitwise else None
    del produced   # a bitwise check holds the judged outputs; nothing else needs them
    if options.timing.repeat:
        result.timing, problem = _time_calls(backend, request, options.timing,
                                             _validated(case, check) if check else None)
        if problem:
            result.status, result.message = ERROR, problem
            return result
        result.seconds = result.timing["median_us"] * 1e-6
        problem = _wrote_inputs(case, before)
        if problem:
            result.status, result.message = ERROR, problem
            return result
    if check is not None:
        _record_determinism(check, result)
    if options.profile is not None:
        result.efficiency = efficiency(case, result.seconds, options.profile)
    return result


def _declined(result: CaseResult, backend: Backend, exc: NotSupported) -> CaseResult:
    """A call the backend declined (NotSupported): the case is skipped, as for supports() False."""
    result.status = SKIPPED
    result.message = f"backend {backend.name} declined {result.op} {result.dtype}" + (f": {exc}" if str(exc) else "")
    return result


def _record_determinism(check: RepeatCheck, result: CaseResult) -> None:
    """The check's outcome on the result: a disagreement makes a passing case nondeterministic,
    and is added to a failing one's message (it fails either way)."""
    result.determinism = {"mode": check.mode, "calls": check.calls, "agree": not check.problem, **check.details}
    if not check.problem:
        return
    if result.status in (PASSED, MISTRUSTED):
        result.status, result.message = NONDETERMINISTIC, check.problem
    else:
        result.message += f"\nalso not deterministic: {check.problem}"


def _wrote_inputs(case: Case, before: dict) -> str:
    changed = _changed_inputs(case, before)
    return f"backend wrote into its input(s) {changed}, which it was only to read" if changed else ""


def new_result(path, backend_spec: str, options: RunOptions | None = None) -> CaseResult:
    options = options or RunOptions()
    return CaseResult(path=str(path), repro=repro_command(path, backend_spec, options.repro_options))


def run_case(path: Path, backend: Backend, backend_spec: str, options: RunOptions | None = None) -> CaseResult:
    started = time.monotonic()
    result = new_result(path, backend_spec, options)
    try:
        case = load(path)
    except CaseFileError as exc:
        result.status, result.message = ERROR, str(exc)
        result.name = Path(path).name
    else:
        run_loaded(case, backend, result, options)
    result.wall_seconds = time.monotonic() - started
    return result
