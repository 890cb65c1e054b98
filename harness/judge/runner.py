"""Judging what a backend's call of a case did: the judge's side of harness.worker.calling.

The judge reads the case whole (goldens included), receives what the calling side reports
(harness.worker.calling.Called, then Timed), and decides the case's status here: the outputs' form,
every metric, threshold and status, --bitwise's comparisons.  For a foreign backend the calling
side is a worker process (harness.judge.workers) and the outputs arrive as files this process maps
read-only; for opcase's own backends (reference, lowp, exec:) it is a call in this process.

How a case ends: gen.core.verdict.
"""
from __future__ import annotations

import os
import shlex
import time
from dataclasses import dataclass
from pathlib import Path

from gen.core.backend import Backend
from gen.core import case_keys
from gen.core.casefile import Case, CaseFileError, CaseRewritten, load
from gen.core.descriptor import describe
from gen.core.timing import TimingPlan
from gen.core.verdict import (ERROR, FAILED, MISTRUSTED, NONDETERMINISTIC, PASSED, SKIPPED, WRONGLY_ACCEPTED,
                              WRONGLY_REJECTED, CaseResult, judge, measure, output_fails, validate_outputs)
from harness.backends import import_path_for
from harness.worker.calling import DECLINED, OUTPUTS, REJECTED, SKIPPED as NOT_THE_BACKENDS, Called, Timed, call_case
from harness.judge.determinism import RepeatCheck
from harness.judge.efficiency import efficiency
from harness.reports.error_map import error_map


@dataclass(frozen=True)
class RunOptions:
    """How each case is run, beyond the backend: timing, efficiency, and what REPRO repeats."""
    timing: TimingPlan = TimingPlan()
    profile: object = None                 # harness.judge.efficiency.DeviceProfile
    repro_options: tuple = ()              # extra `opcase run` arguments that change a case's verdict
    bitwise: bool = False                  # compare every further call's outputs with the judged call's
    error_maps: bool = False               # summarize where each failing output's error sits (--html)
    exec_timeout: float | None = None      # an exec: backend's per-call limit (--timeout), which it enforces itself
    decoy: bool = True                     # a decoy call before each valid case's judged call (False: the
                                           # cold pass, harness.judge.cold_pass)


def repro_command(path, backend_spec: str, options=()) -> str:
    """The command that reruns one case, in a fresh shell from any directory: the case's absolute
    path, and the PYTHONPATH the backend's module needs when it is not an installed one."""
    env = import_path_for(backend_spec)
    return " ".join([*([env] if env else []), "opcase", "run", shlex.quote(os.path.abspath(path)),
                     "--backend", shlex.quote(backend_spec),
                     *map(shlex.quote, map(str, options))])


class Judgement:
    """One case being judged: ``first`` with the judged call, ``repeat`` with each further call's
    outputs (--bitwise), ``end`` with the timed calls; ``result`` holds the verdict."""

    def __init__(self, case: Case, result: CaseResult, options: RunOptions):
        self.case, self.result, self.options = case, result, options
        self.check: RepeatCheck | None = None
        self.judged = False   # the outputs were compared with the goldens
        result.op, result.suite, result.name, result.dtype = case.op, case.suite, case.name, case.dtype
        result.keyed = case.key_state
        result.descriptor = describe(case.op, case.suite, case.name, case.seed, case.note)
        no_golden = [n for n, t in case.outputs.items() if t.data is None] if case.expect == "ok" else []
        # Set before any call: a case that cannot be judged is not given to the backend.
        self.refusal = f"the case carries no golden for {no_golden}: nothing to judge against" if no_golden else ""
        if self.refusal:
            result.status, result.message = ERROR, self.refusal

    def first(self, called: Called, copy_outputs: bool = True) -> None:
        """The judged call.  ``copy_outputs``: keep a copy for --bitwise (outputs in this process's
        memory, which a backend may reuse); the judge's own read-only files need none."""
        case, result = self.case, self.result
        result.seconds = called.seconds
        if called.outcome == REJECTED and case.expect == "not_supported":
            # mlu-ops' statuses differ: the doc's check says NOT_SUPPORTED, the backend said BAD_PARAM.
            result.status = ERROR
            result.message = (f"rejected as a bad parameter (BAD_PARAM), but check '{case.expect_check}' expects "
                              f"not supported (NOT_SUPPORTED): {called.message}")
        elif called.outcome == REJECTED:
            result.status, result.message = ((PASSED, f"rejected as expected: {called.message}")
                                             if case.expect == "rejected" else
                                             (WRONGLY_REJECTED, f"valid call rejected: {called.message}"))
        elif called.outcome == DECLINED and case.expect == "not_supported":
            result.status, result.message = PASSED, f"declined as not supported, as expected: {called.message}"
        elif called.outcome in (DECLINED, NOT_THE_BACKENDS):
            # A kernel or dtype the backend does not implement at all (supports() False) is skipped,
            # whatever its cases expect: declining what it never claimed proves nothing.
            result.status, result.message = SKIPPED, called.message
        elif called.outcome != OUTPUTS:
            result.status, result.message = ERROR, called.message
        elif case.expect != "ok":
            result.status = WRONGLY_ACCEPTED
            result.message = f"accepted a call that breaks check '{case.expect_check}': {case.expect_message}"
        else:
            produced = called.outputs
            problem = validate_outputs(case, produced)
            if problem:
                result.status, result.message = ERROR, problem
                return
            judge(case, produced, result)
            self.judged = True
            if self.options.error_maps and result.status == FAILED:
                result.error_maps = {name: error_map(produced[name], t.data, t.layout, t.dtype)
                                     for name, t in case.outputs.items() if output_fails(result, name)}
            if self.options.bitwise:
                self.check = RepeatCheck(case, produced, result, measure, lambda: CaseResult(path=result.path),
                                         copy=copy_outputs)

    def goes_on(self) -> bool:
        """Whether the calling side makes timed calls after the judged one."""
        return self.result.status not in (ERROR, SKIPPED, WRONGLY_ACCEPTED, WRONGLY_REJECTED) \
            and self.case.expect == "ok" and bool(self.options.timing.repeat)

    def repeat(self, number: int, outputs: dict) -> str:
        """A further call's outputs (--bitwise): why they are unusable ('' when they can be compared)."""
        problem = validate_outputs(self.case, outputs)
        if problem:
            return f"call {number}: {problem}"
        if self.check is not None:
            self.check(outputs)
        return ""

    def end(self, timed: Timed | None) -> CaseResult:
        """The timed calls (None: there were none); the finished result."""
        result = self.result
        if timed is not None and self.goes_on():
            if timed.problem:
                result.status, result.message = ERROR, timed.problem
                return result
            result.timing = timed.timing
            result.seconds = timed.timing["median_us"] * 1e-6
        if self.check is not None and result.status != ERROR:
            _record_determinism(self.check, result)
        if self.options.profile is not None and self.judged:
            result.efficiency = efficiency(self.case, result.seconds, self.options.profile)
        return result


def run_loaded(case: Case, backend: Backend, result: CaseResult, options: RunOptions | None = None) -> CaseResult:
    """Call an in-process backend (opcase's own) on a loaded case and judge it into ``result``."""
    judgement = Judgement(case, result, options or RunOptions())
    if judgement.refusal:
        return result
    timed = call_case(backend, case, judgement.options.timing, judgement.first,
                      judgement.repeat if judgement.options.bitwise else None, decoy=judgement.options.decoy)
    return judgement.end(timed)


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


def new_result(path, backend_spec: str, options: RunOptions | None = None) -> CaseResult:
    options = options or RunOptions()
    return CaseResult(path=str(path), repro=repro_command(path, backend_spec, options.repro_options))


def run_case(path: Path, backend: Backend, backend_spec: str, options: RunOptions | None = None) -> CaseResult:
    result = new_result(path, backend_spec, options)
    started = time.monotonic()
    try:
        case = load(path, keyed=True)
    except CaseFileError as exc:
        result.status, result.message = ERROR, str(exc)
        result.name = Path(path).name
        if isinstance(exc, CaseRewritten):
            result.keyed, result.op, result.suite = case_keys.REFUSED, exc.op, exc.suite
            result.name = exc.name or result.name
    else:
        run_loaded(case, backend, result, options)
    result.wall_seconds = time.monotonic() - started
    return result
