"""The verdict on a backend's outputs for one case: the statuses a case can end in, the call a case
describes, whether the outputs have the promised form, and judging them against the goldens and
thresholds (what `opcase run` does after the call, and what gen does to its baseline).

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

from dataclasses import asdict, dataclass, field, fields

import numpy as np

from gen.core.backend import Request, TensorInfo
from gen.core.casefile import Case, drop_pages
from gen.core.metrics import DENOM_OFFSET, compare, exact_mismatches, judgement, passes, small_golden_eps
from gen.core.thresholds import only_over_the_cap

# Every status a case can end in.  FAILING ones make `opcase run` exit 1.
PASSED, FAILED, WRONGLY_ACCEPTED, WRONGLY_REJECTED, ERROR, SKIPPED, MISTRUSTED, NONDETERMINISTIC = (
    "passed", "failed", "wrongly-accepted", "wrongly-rejected", "error", "skipped", "mistrusted", "nondeterministic")
STATUSES = (PASSED, FAILED, WRONGLY_ACCEPTED, WRONGLY_REJECTED, ERROR, SKIPPED, MISTRUSTED, NONDETERMINISTIC)
FAILING = frozenset({FAILED, WRONGLY_ACCEPTED, WRONGLY_REJECTED, ERROR, NONDETERMINISTIC})

# Golden scans (constant? largest magnitude?) read this many elements at a time, so that a
# memory-mapped golden of many GB is never materialised as a temporary.
_SCAN_ELEMS = 1 << 20


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
    wall_seconds: float = 0.0                        # the whole case: loading, calls, judging (JUnit's time)
    timing: dict | None = None                       # with --repeat: gen.core.timing.summarize()
    efficiency: dict | None = None                   # with --device-profile: harness.judge.efficiency.efficiency()
    gate: str = ""                                   # with --compare: harness.judge.gate verdict
    gate_message: str = ""
    repro: str = ""
    determinism: dict | None = None                  # with --bitwise: mode, calls compared, first disagreement
    error_maps: dict = field(default_factory=dict)   # failing output -> harness.reports.error_map.error_map() (--html)
    descriptor: str = ""                             # the case's one-line descriptor (gen.descriptor), if any
    informative: dict = field(default_factory=dict)  # output -> verdicts of thresholds reported, not judged
    not_compared: list = field(default_factory=list)  # outputs the case does not judge (mlu-ops threshold_use 0)
    explanation: str = ""                            # with `run --explain`: the variant(s) a failing case's outputs match
    keyed: str = ""                                  # gen.core.case_keys: keyed, unkeyed or refused ("": not looked up)

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
    return result.status == FAILED and only_over_the_cap(failing, baseline)


def _zeros_pass(golden: np.ndarray, dtype, thresholds, largest: float) -> bool:
    """Whether an output of all zeros would meet every threshold (a zeroing bug would pass).

    An all-zero output has diff3_2 = max|b|, diff1 >= m/(m+1e-9), diff2 >= sqrt(m^2/(m^2+1e-9))
    and diff3 >= the largest element's relative error, with m = max|b|.  One bound over its
    threshold settles it without a second pass over the golden; only when none is does this
    compare the golden against zeros for real.
    """
    if any(th.metric == "exact" for th in thresholds):
        return largest == 0   # zeros pass an exact output only where its golden is all zero
    m = largest
    eps = small_golden_eps(dtype)
    lower = {"diff3_2": m, "diff1": m / (m + DENOM_OFFSET), "diff2": (m * m / (m * m + DENOM_OFFSET)) ** 0.5,
             "diff3": m if m < eps else m / (m + DENOM_OFFSET)}
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
        if name in case.not_compared:
            continue
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
    result.not_compared = [name for name in case.outputs if name in case.not_compared]
    for name, t in case.outputs.items():
        stats = compare(produced[name], t.data, t.dtype)
        if any(th.metric == "exact" for th in case.criteria.get(name, [])):
            stats["exact"] = exact_mismatches(produced[name], t.data, case.undetermined.get(name))
        result.metrics[name] = {k: v for k, v in stats.items() if not k.startswith("worst")}
        result.worst[name] = {k: v for k, v in stats.items() if k.startswith("worst")}
        result.layouts[name] = t.layout
        result.thresholds[name] = [_verdict(th, stats) for th in case.criteria.get(name, [])]
        if case.informative.get(name):
            result.informative[name] = [_verdict(th, stats) for th in case.informative[name]]
        if name in case.not_compared:
            continue
        for v in result.thresholds[name]:
            if not v["passed"]:
                failures.append(f"{name}.{v['metric']}: {v['note']}" if v["note"] else
                                f"{name}.{v['metric']}={v['actual']:.3g} > {v['value']:.3g}"
                                if isinstance(v["actual"], (int, float)) else f"{name}.{v['metric']} failed")
        if stats["nan_inf_mismatch"]:
            failures.append(f"{name}: {stats['nan_inf_mismatch']} NaN/Inf positions differ")
        if not case.criteria.get(name):
            failures.append(f"{name}: the case states no threshold")
    return failures


def _verdict(th, stats: dict) -> dict:
    """A threshold's verdict: the threshold, the metric's value, whether it passed, and how it was
    judged where not by value <= threshold (diff4: metrics.judgement)."""
    value = stats.get(th.metric)
    ok, note = judgement(th.metric, value, th.value, stats)
    return {**asdict(th), "actual": value, "passed": ok, "note": note}


def output_fails(result: CaseResult, output: str) -> bool:
    """Whether one judged output fails: a threshold not met, none stated, or NaN/Inf mismatches."""
    if output in result.not_compared:
        return False
    verdicts = result.thresholds.get(output, [])
    return (not verdicts or not all(v["passed"] for v in verdicts)
            or bool(result.metrics.get(output, {}).get("nan_inf_mismatch")))
