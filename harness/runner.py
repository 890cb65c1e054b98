"""Running a backend on cases and judging what comes back.

Calling convention (see gen.core.backend): ``backend.run(request)`` returns a dict of numpy
arrays, one per requested output, in the requested shapes and dtypes; it raises
``InvalidArgument`` to reject a call.  A backend whose ``measures_time`` is True returns
``(outputs, seconds)`` instead, ``seconds`` being its own kernel (device) time for that call;
otherwise the harness times ``run`` itself.

The request's input arrays are read-only.  A backend that writes into them (or returns outputs
it was not asked for) wrote outside what it was asked for: the case is an error.

How a case ends (``status``):
  passed            every output within its thresholds (or a broken call rejected as expected)
  failed            an output over a threshold, or NaN/Inf where the golden has none (or vice versa)
  wrongly-accepted  an invalid case that the backend ran instead of rejecting
  wrongly-rejected  a valid case that the backend rejected
  error             the backend raised, crashed, timed out, returned the wrong form, or wrote
                    into its inputs; or the case file itself is unreadable
  skipped           the backend declares the kernel or dtype unsupported
  mistrusted        passed, but the case proves nothing: its golden is constant or empty, or an
                    all-zero output would pass too (flagged, not failed)
  nondeterministic  with --bitwise: a further call returned other bits than the judged one (or,
                    for a kernel whose spec declares nondeterministic_sums, another verdict)
"""
from __future__ import annotations

import shlex
import traceback
import zlib
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import numpy as np

from gen.descriptor import describe
from gen.core.backend import Backend, InvalidArgument, Request, TensorInfo
from gen.core.casefile import Case, CaseFileError, drop_pages, load
from harness.determinism import RepeatCheck
from gen.core.metrics import compare, passes, small_golden_eps
from gen.core.timing import BackendProtocolError, TimingPlan, call, summarize

# Every status a case can end in.  FAILING ones make `opcase run` exit 1.
PASSED, FAILED, WRONGLY_ACCEPTED, WRONGLY_REJECTED, ERROR, SKIPPED, MISTRUSTED, NONDETERMINISTIC = (
    "passed", "failed", "wrongly-accepted", "wrongly-rejected", "error", "skipped", "mistrusted", "nondeterministic")
STATUSES = (PASSED, FAILED, WRONGLY_ACCEPTED, WRONGLY_REJECTED, ERROR, SKIPPED, MISTRUSTED, NONDETERMINISTIC)
FAILING = frozenset({FAILED, WRONGLY_ACCEPTED, WRONGLY_REJECTED, ERROR, NONDETERMINISTIC})

# Golden scans (constant? largest magnitude?) read this many elements at a time, so that a
# memory-mapped golden of many GB is never materialised as a temporary.
_SCAN_ELEMS = 1 << 20
# The offset ACCURACY.md adds to denominators; used to bound an all-zero output's metrics.
_DENOM_OFFSET = 1e-9


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
    thresholds: dict = field(default_factory=dict)   # output -> [{metric, value, provenance, ..., actual, passed}]
    worst: dict = field(default_factory=dict)        # output -> {worst_abs, worst_rel, worst_nan_inf}
    layouts: dict = field(default_factory=dict)      # output -> layout, to name worst elements' coordinates
    seconds: float = 0.0                             # the judged call, or the median of the timed ones
    timing: dict | None = None                       # with --repeat: gen.core.timing.summarize()
    efficiency: dict | None = None                   # with --device-profile: harness.efficiency.efficiency()
    gate: str = ""                                   # with --compare: harness.gate verdict
    gate_message: str = ""
    repro: str = ""
    determinism: dict | None = None                  # with --bitwise: mode, calls compared, first disagreement
    error_maps: dict = field(default_factory=dict)   # failing output -> harness.error_map.error_map() (--html)
    descriptor: str = ""                             # the case's one-line descriptor (gen.descriptor), if any

    @property
    def key(self) -> str:
        """The case's identity across runs and directories: OP/SUITE/NAME."""
        return f"{self.op}/{self.suite}/{self.name}" if self.op else self.path

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, doc: dict) -> "CaseResult":
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in doc.items() if k in known})


@dataclass(frozen=True)
class RunOptions:
    """How each case is run, beyond the backend: timing, efficiency, and what REPRO repeats."""
    timing: TimingPlan = TimingPlan()
    profile: object = None                 # harness.efficiency.DeviceProfile
    repro_options: tuple = ()              # extra `opcase run` arguments that change a case's verdict
    bitwise: bool = False                  # compare every further call's outputs with the judged call's
    error_maps: bool = False               # summarize where each failing output's error sits (--html)


def _read_only(array: np.ndarray) -> np.ndarray:
    view = array.view()
    view.flags.writeable = False
    return view


def request_for(case: Case) -> Request:
    """The call a case describes; its input arrays are read-only views of the case's data."""
    return Request(op=case.op, params=dict(case.params),
                   inputs={n: _read_only(t.data) for n, t in case.inputs.items() if not t.absent},
                   outputs={n: TensorInfo(tuple(t.shape), np.dtype(t.dtype), t.layout) for n, t in case.outputs.items()},
                   layouts={n: t.layout for n, t in case.inputs.items()})


def repro_command(path, backend_spec: str, options=()) -> str:
    return " ".join(["opcase", "run", shlex.quote(str(path)), "--backend", shlex.quote(backend_spec),
                     *map(shlex.quote, map(str, options))])


def _tail(text: str, lines: int = 6) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


def validate_outputs(case: Case, produced) -> str:
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


# --------------------------------------------------------------------------- judging

def _scan(array: np.ndarray) -> tuple[float, float, bool]:
    """(min, max, every element finite) of a non-empty array, a block at a time."""
    flat = array.reshape(-1)
    lo, hi, finite = np.inf, -np.inf, True
    for start in range(0, flat.size, _SCAN_ELEMS):
        block = flat[start:start + _SCAN_ELEMS]
        if block.dtype.kind == "f" and not np.isfinite(block).all():
            finite = False
            block = block[np.isfinite(block)]
            if not block.size:
                continue
        lo, hi = min(lo, float(block.min())), max(hi, float(block.max()))
        drop_pages(array, start + _SCAN_ELEMS, start)
    return lo, hi, finite


def fails_only_by_its_own_error_over_the_cap(result: CaseResult, baseline: str) -> bool:
    """Whether ``result`` fails only thresholds that ``baseline`` set and that its own error is
    over the docs' cap on (gen.generate records both): the docs' rule fails its own reference
    interface on such a case, a fact about the rule, not a defect of the backend or the threshold."""
    failing = [v for verdicts in result.thresholds.values() for v in verdicts if not v.get("passed", True)]
    return result.status == FAILED and bool(failing) and all(
        v.get("baseline") == baseline and v.get("cap", 0.0) > 0 and v.get("baseline_value", 0.0) > v["cap"]
        for v in failing)


def _zeros_pass(golden: np.ndarray, dtype, thresholds, largest: float) -> bool:
    """Whether an output of all zeros would meet every threshold (a zeroing bug would pass).

    An all-zero output has diff3_2 = max|b|, diff1 >= m/(m+1e-9), diff2 >= sqrt(m^2/(m^2+1e-9))
    and diff3 >= the largest element's relative error, with m = max|b|.  One bound over its
    threshold settles it without a second pass over the golden; only when none is does this
    compare the golden against zeros for real.
    """
    m = largest
    eps = small_golden_eps(dtype)
    lower = {"diff3_2": m, "diff1": m / (m + _DENOM_OFFSET), "diff2": (m * m / (m * m + _DENOM_OFFSET)) ** 0.5,
             "diff3": m if m < eps else m / (m + _DENOM_OFFSET)}
    # A margin above rounding: a bound this close to its threshold is decided by the real comparison.
    if any(th.metric in lower and lower[th.metric] > th.value * (1 + 1e-6) for th in thresholds):
        return False
    zeros = np.broadcast_to(np.zeros((), golden.dtype), golden.shape)
    stats = compare(zeros, golden, dtype, worst_k=0)
    return not stats["nan_inf_mismatch"] and all(passes(th.metric, stats.get(th.metric), th.value, stats)
                                                 for th in thresholds)


def mistrust(case: Case) -> str:
    """Why a passing case proves nothing, or '' when it can tell a right kernel from a wrong one."""
    if case.zero_golden_ok:
        return ""
    for name, t in case.outputs.items():
        if t.data.size == 0:
            return f"golden '{name}' is empty: no value of it can be wrong"
        lo, hi, finite = _scan(t.data)
        if finite and lo == hi:
            return f"golden '{name}' is constant ({lo:g}): a kernel that only fills it would pass"
        if finite and _zeros_pass(t.data, t.dtype, case.criteria.get(name, []), max(abs(lo), abs(hi))):
            return f"an all-zero '{name}' would pass this case's thresholds: it cannot catch a zeroing bug"
    return ""


def judge(case: Case, produced: dict, result: CaseResult) -> None:
    """Compare each output with its golden, apply the case's thresholds, and set the verdict."""
    failures = measure(case, produced, result)
    if failures:
        result.status, result.message = FAILED, "; ".join(failures)
        return
    doubt = mistrust(case)
    if doubt:
        result.status, result.message = MISTRUSTED, doubt
    else:
        result.status = PASSED


def measure(case: Case, produced: dict, result: CaseResult) -> list[str]:
    """Fill ``result``'s metrics, thresholds and worst elements; return why the outputs fail ([] if not)."""
    failures = []
    for name, t in case.outputs.items():
        stats = compare(produced[name], t.data, t.dtype)
        result.metrics[name] = {k: v for k, v in stats.items() if not k.startswith("worst")}
        result.worst[name] = {k: v for k, v in stats.items() if k.startswith("worst")}
        result.layouts[name] = t.layout
        verdicts = []
        for th in case.criteria.get(name, []):
            value = stats.get(th.metric)
            ok = passes(th.metric, value, th.value, stats)
            verdicts.append({**asdict(th), "actual": value, "passed": ok})
            if not ok:
                failures.append(f"{name}.{th.metric}={value:.3g} > {th.value:.3g}"
                                if isinstance(value, float) else f"{name}.{th.metric} failed")
        result.thresholds[name] = verdicts
        if stats["nan_inf_mismatch"]:
            failures.append(f"{name}: {stats['nan_inf_mismatch']} NaN/Inf positions differ")
        if not case.criteria.get(name):
            failures.append(f"{name}: the case states no threshold")
    return failures


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
        from harness.error_map import error_map
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
        from harness.efficiency import efficiency
        result.efficiency = efficiency(case, result.seconds, options.profile)
    return result


def output_fails(result: CaseResult, output: str) -> bool:
    """Whether one judged output fails: a threshold not met, none stated, or NaN/Inf mismatches."""
    verdicts = result.thresholds.get(output, [])
    return (not verdicts or not all(v["passed"] for v in verdicts)
            or bool(result.metrics.get(output, {}).get("nan_inf_mismatch")))


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
    result = new_result(path, backend_spec, options)
    try:
        case = load(path)
    except CaseFileError as exc:
        result.status, result.message = ERROR, str(exc)
        result.name = Path(path).name
        return result
    return run_loaded(case, backend, result, options)
