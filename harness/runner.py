"""Running a backend on cases and judging what comes back."""
from __future__ import annotations

import shlex
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from harness.backend import Backend, InvalidArgument, OutputSpec, Request
from harness.casefile import Case, CaseFileError, load
from harness.metrics import compare, passes

# Every status a case can end in.  FAILING ones make `opcase run` exit 1.
PASSED, FAILED, WRONGLY_ACCEPTED, WRONGLY_REJECTED, ERROR, SKIPPED, MISTRUSTED = (
    "passed", "failed", "wrongly-accepted", "wrongly-rejected", "error", "skipped", "mistrusted")
STATUSES = (PASSED, FAILED, WRONGLY_ACCEPTED, WRONGLY_REJECTED, ERROR, SKIPPED, MISTRUSTED)
FAILING = frozenset({FAILED, WRONGLY_ACCEPTED, WRONGLY_REJECTED, ERROR})


@dataclass
class CaseResult:
    path: str
    op: str = ""
    suite: str = ""
    name: str = ""
    dtype: str = ""
    status: str = ERROR
    message: str = ""
    metrics: dict = field(default_factory=dict)      # output -> metric -> value (+ counts)
    thresholds: dict = field(default_factory=dict)   # output -> [{metric, value, provenance, ...}]
    worst: dict = field(default_factory=dict)        # output -> {worst_abs, worst_rel, worst_nan_inf}
    seconds: float = 0.0
    repro: str = ""

    def to_json(self) -> dict:
        return asdict(self)


def request_for(case: Case) -> Request:
    return Request(op=case.op, params=dict(case.params),
                   inputs={n: t.data for n, t in case.inputs.items() if not t.absent},
                   outputs={n: OutputSpec(tuple(t.shape), np.dtype(t.dtype), t.layout) for n, t in case.outputs.items()},
                   layouts={n: t.layout for n, t in case.inputs.items()})


def repro_command(path, backend_spec: str) -> str:
    return f"opcase run {shlex.quote(str(path))} --backend {shlex.quote(backend_spec)}"


def _tail(text: str, lines: int = 6) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


def _validate_outputs(case: Case, produced) -> str:
    """Why the backend's return value is unusable, or '' when it has the promised form."""
    if not isinstance(produced, dict):
        return f"backend returned {type(produced).__name__}, expected a dict of numpy arrays"
    extra = sorted(set(produced) - set(case.outputs))
    if extra:
        return f"backend returned outputs it was not asked for: {extra}"
    for name, t in case.outputs.items():
        if name not in produced:
            return f"backend did not return output '{name}'"
        array = produced[name]
        if not isinstance(array, np.ndarray):
            return f"output '{name}' is a {type(array).__name__}, expected numpy.ndarray"
        if tuple(array.shape) != tuple(t.shape):
            return f"output '{name}' has shape {list(array.shape)}, expected {list(t.shape)}"
        if array.dtype != np.dtype(t.dtype):
            return f"output '{name}' has dtype {array.dtype}, expected {np.dtype(t.dtype)}"
    return ""


def _constant(array: np.ndarray) -> bool:
    flat = array.reshape(-1)
    return flat.size > 0 and bool(np.all(flat == flat[0]))


def judge(case: Case, produced: dict, result: CaseResult) -> None:
    """Compare each output with its golden and apply the case's thresholds."""
    failures = []
    for name, t in case.outputs.items():
        stats = compare(produced[name], t.data, t.dtype)
        result.metrics[name] = {k: v for k, v in stats.items() if not k.startswith("worst")}
        result.worst[name] = {k: v for k, v in stats.items() if k.startswith("worst")}
        verdicts = []
        for th in case.criteria.get(name, []):
            ok = passes(th.metric, stats.get(th.metric), th.value, stats)
            verdicts.append({**asdict(th), "actual": stats.get(th.metric), "passed": ok})
            if not ok:
                failures.append(f"{name}.{th.metric}={stats.get(th.metric):.3g} > {th.value:.3g}"
                                if isinstance(stats.get(th.metric), float) else f"{name}.{th.metric} failed")
        result.thresholds[name] = verdicts
        if stats["nan_inf_mismatch"]:
            failures.append(f"{name}: {stats['nan_inf_mismatch']} NaN/Inf positions differ")
        if not case.criteria.get(name):
            failures.append(f"{name}: the case states no threshold")
    if failures:
        result.status, result.message = FAILED, "; ".join(failures)
    elif not case.zero_golden_ok and any(_constant(t.data) for t in case.outputs.values()):
        result.status = MISTRUSTED
        result.message = "golden is constant: this case cannot tell a correct kernel from a filling one"
    else:
        result.status = PASSED


def run_loaded(case: Case, backend: Backend, result: CaseResult) -> CaseResult:
    """Call the backend on a loaded case and fill in ``result``."""
    result.op, result.suite, result.name, result.dtype = case.op, case.suite, case.name, case.dtype
    try:
        supported = backend.supports(case.op, case.dtype)
    except Exception as exc:  # noqa: BLE001 - a broken supports() is the backend's error
        result.status, result.message = ERROR, f"backend supports() raised {type(exc).__name__}: {exc}"
        return result
    if not supported:
        result.status, result.message = SKIPPED, f"backend {backend.name} does not support {case.op} {case.dtype}"
        return result
    start = time.perf_counter()
    try:
        produced = backend.run(request_for(case))
    except InvalidArgument as exc:
        result.seconds = time.perf_counter() - start
        if case.expect == "rejected":
            result.status, result.message = PASSED, f"rejected as expected: {exc}"
        else:
            result.status, result.message = WRONGLY_REJECTED, f"valid call rejected: {exc}"
        return result
    except Exception as exc:  # noqa: BLE001 - whatever the backend raises is reported, not propagated
        result.seconds = time.perf_counter() - start
        result.status = ERROR
        result.message = f"backend raised {type(exc).__name__}: {exc}\n{_tail(traceback.format_exc())}"
        return result
    result.seconds = time.perf_counter() - start
    if case.expect == "rejected":
        result.status = WRONGLY_ACCEPTED
        result.message = f"accepted a call that breaks check '{case.expect_check}': {case.expect_message}"
        return result
    problem = _validate_outputs(case, produced)
    if problem:
        result.status, result.message = ERROR, problem
        return result
    judge(case, produced, result)
    return result


def run_case(path: Path, backend: Backend, backend_spec: str) -> CaseResult:
    result = CaseResult(path=str(path), repro=repro_command(path, backend_spec))
    try:
        case = load(path)
    except CaseFileError as exc:
        result.status, result.message = ERROR, str(exc)
        result.name = Path(path).name
        return result
    return run_loaded(case, backend, result)
