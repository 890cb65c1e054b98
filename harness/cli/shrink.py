"""`opcase shrink`: from a failing case to the smallest case that fails the same way.

The failing case's plan (from its descriptor: dims, params, dtype, value distributions, seed) is
shrunk one dim or param at a time toward the spec's lower limits, hypothesis-style: each
candidate is a plan with one value made smaller or simpler; it is kept when its case fails the
same way (same status, same failing metrics, NaN/Inf mismatches in the same outputs), and
passes over every dim and param repeat until none shrinks or the budget (tries, seconds) is
spent.  A dim or param the spec's random suite derives from others (C = G * Cg) follows them.
A candidate that breaks a spec check is never generated, let alone run (an invalid case's
candidates break exactly its check), so every case the backend sees is one the spec allows; nor
is one run that `opcase run` would mistrust (a one-element golden, say: a fixed kernel could not
show it is fixed on it).

Candidates are written as ordinary case files and run as `opcase run` runs them
(harness.judge.workers.run_cases); the original case is run once, as it is, to learn how it fails.
"""
from __future__ import annotations

import math
import re
import shutil
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from gen.core.casefile import load
from gen.core.checks import failures
from gen.core.descriptor import describe
from gen.core.expr import ExprError, evaluate, names_in
from gen.core.registry import spec_for
from gen.core.spec import Spec, SpecError
from gen.core.verdict import ERROR, FAILED, FAILING, CaseResult, mistrust
from gen.descriptor import explicit_of, plan_of, values_ref, write_described
from gen.generate import GenerationError, case_path, interface_params, layout_of, tensor_infos, total_bytes
from gen.jobs import generator_of
from harness.judge.cold_pass import WARM_PASS
from harness.judge.kept_workers import KeptWorkers
from harness.judge.runner import RunOptions
from harness.judge.workers import load_apart, run_cases, runs_isolated

DEFAULT_MAX_TRIES = 200
DEFAULT_SECONDS = 600.0
# Without --timeout, a candidate may take this many times the original case's run (worker start
# included), and never less than CANDIDATE_LEAST_S; no run gets less than _LEAST_RUN_S.
CANDIDATE_FACTOR = 10.0
CANDIDATE_LEAST_S = 10.0
_LEAST_RUN_S = 1.0


class ShrinkError(Exception):
    """Nothing to shrink: the case does not fail, or has no descriptor to start from."""


@dataclass
class Shrunk:
    """What a shrink found: the smallest failing case and how it got there."""
    original: str                 # descriptor of the case it started from
    descriptor: str               # descriptor of the smallest case that fails the same way
    path: Path                    # that case, written under the output directory
    failure: Failure              # how the original fails (the smallest fails so too, and maybe more)
    bytes_before: int             # tensor bytes of the original case
    bytes_after: int
    tries: int = 0
    seconds: float = 0.0
    tried: list = field(default_factory=list)   # descriptors of every candidate run
    exhausted: str = ""           # "tries" or "time" when the budget ran out before the passes ended


@dataclass(frozen=True)
class Failure:
    """How a case fails: its status; for a numeric failure the failing OUTPUT.METRIC names and
    the kinds of NaN/Inf mismatch ('OUTPUT golden->actual', each nan, inf, -inf or finite); for
    an error, the exception the backend raised."""
    status: str
    metrics: frozenset = frozenset()
    nan_inf: frozenset = frozenset()
    raised: str = ""

    def alike(self, other: "Failure") -> bool:
        """Whether ``other`` fails this way: the same status, and every metric and NaN/Inf kind
        that fails here fails there too (a smaller case may fail more metrics: the same wrong
        elements weigh more in it)."""
        return (self.status == other.status and self.raised == other.raised
                and self.metrics <= other.metrics and self.nan_inf <= other.nan_inf)

    def text(self) -> str:
        return " ".join([self.status, *sorted(self.metrics), *sorted(self.nan_inf),
                         *([f"(raised {self.raised})"] if self.raised else [])])


def _kind(value) -> str:
    return value if isinstance(value, str) else "finite"


def failure_of(result: CaseResult) -> Failure:
    if result.status == ERROR:
        raised = re.search(r"raised (\w+)", result.message)
        return Failure(ERROR, raised=raised.group(1) if raised else "")
    if result.status != FAILED:
        return Failure(result.status)
    metrics = frozenset(f"{out}.{v['metric']}" for out, vs in result.thresholds.items() for v in vs
                        if not v["passed"])
    nan_inf = frozenset(f"{out}: {_kind(w['golden'])}->{_kind(w['actual'])}" for out, worst in result.worst.items()
                        for w in worst.get("worst_nan_inf") or [])
    return Failure(FAILED, metrics, nan_inf)


def candidates(value, lowest, choices=()) -> list:
    """Smaller or simpler values for one dim or param, most aggressive first.

    Integers: the lower limit, one above it, halfway (and one past halfway: a bug that needs
    an odd size or a partial block still shrinks by halves), three quarters of the way, and one
    less.  ``choices``: the values the spec's random suite picks from, those below ``value``.
    Floats: the limit, 0, 1 and ``value`` rounded to fewer digits.  Booleans: False."""
    if isinstance(value, bool):
        return [False] if value else []
    if isinstance(value, int):
        lo = min(int(lowest), value)
        picks = [lo, lo + 1, (lo + value) // 2, (lo + value) // 2 + 1, value - (value - lo) // 4, value - 1]
        picks += [c for c in choices if isinstance(c, int) and not isinstance(c, bool)]
        return sorted({p for p in picks if lo <= p < value})
    if isinstance(value, float) and math.isfinite(value):
        picks = [float(lowest), 0.0, 1.0, *(float(round(value, d)) for d in (0, 1, 2))]
        picks += [float(c) for c in choices if isinstance(c, (int, float)) and not isinstance(c, bool)]
        return sorted({p for p in picks if _simpler(p, value)}, key=lambda p: (abs(p), p))
    return []


def _simpler(candidate: float, value: float) -> bool:
    """Closer to 0, or as close with fewer digits."""
    return abs(candidate) < abs(value) or (abs(candidate) == abs(value) and len(repr(candidate)) < len(repr(value)))


def limits(spec: Spec, section: str, name: str, value) -> tuple:
    """(lowest value, values to pick from) the spec's random suite gives dim or param ``name``;
    with nothing there, 1 for an integer (a size of 0 empties the case) and 0 for a float."""
    sampler = ((spec.suites.get("random") or {}).get(section) or {}).get(name)
    if isinstance(sampler, dict) and isinstance(sampler.get("min"), (int, float)):
        return sampler["min"], ()
    if isinstance(sampler, list):
        numbers = [c for c in sampler if isinstance(c, (int, float)) and not isinstance(c, bool)]
        return (min(numbers) if numbers else (0.0 if isinstance(value, float) else 1)), tuple(numbers)
    return (0.0 if isinstance(value, float) else 1), ()


def relations(spec: Spec, plan) -> dict:
    """{(section, name): expression} for the dims and params of ``plan`` that the spec's random suite
    derives from others (C: "G * Cg"), where the plan has those others and agrees with the expression:
    such a value follows the ones it is made of instead of shrinking on its own."""
    env = {**plan.dims, **plan.params}
    found = {}
    for section in ("dims", "params"):
        for name, sampler in ((spec.suites.get("random") or {}).get(section) or {}).items():
            if not isinstance(sampler, str) or name not in getattr(plan, section):
                continue
            if names_in(sampler) <= set(env) - {name} and _evaluates_to(sampler, env, env[name]):
                found[(section, name)] = sampler
    return found


def _evaluates_to(expression: str, env: dict, value) -> bool:
    try:
        return evaluate(expression, env) == value
    except ExprError:
        return False


def with_value(plan, section: str, name: str, value, derived: dict):
    """``plan`` with one dim or param changed, and the values derived from it made again."""
    values = {"dims": dict(plan.dims), "params": dict(plan.params)}
    values[section][name] = value
    for (dsection, dname), expression in derived.items():
        try:
            values[dsection][dname] = evaluate(expression, {**values["dims"], **values["params"]})
        except ExprError:
            pass   # left as it was: the spec's checks judge the result
    return replace(plan, **values)


def allowed(spec: Spec, plan) -> bool:
    """Whether a plan stays inside every spec check (an invalid plan: breaks exactly its check)."""
    try:
        lay = layout_of(spec, replace(plan, params=interface_params(spec, plan.params)))
    except SpecError:
        return False
    if any(d < 0 for shape in lay.shapes.values() for d in shape):
        return False
    broken = [c.id for c in failures(spec, tensor_infos(spec, lay.shapes, lay.dtypes, lay.layouts, plan.omit),
                                     plan.params)]
    return broken == ([plan.violation.id] if plan.violation is not None else [])


@contextmanager
def candidate_case(spec: Spec, generator, descriptor: str, work_dir: Path):
    """The case file of ``descriptor``, written under ``work_dir`` and removed after; None for a
    case that is no candidate: one the generator refuses (an all-zero golden, say), or one that a
    kernel filling in a constant would pass (one element, say), which proves nothing once the bug
    is fixed."""
    plan = plan_of(spec, descriptor)
    try:
        path = generator.write(plan, case_path(work_dir, plan, spec.op))
    except (GenerationError, SpecError, ValueError, ArithmeticError):
        yield None
        return
    try:
        case = load(path)
        yield None if case.expect == "ok" and mistrust(case) else path
    finally:
        for piece in path.parent.glob(path.name + "*"):
            piece.unlink()


class Shrinker:
    """Shrinks one failing case on one backend (loaded once, run as `opcase run` runs it)."""

    def __init__(self, spec: Spec, generator, backend, backend_spec: str, work_dir: Path,
                 max_tries: int = DEFAULT_MAX_TRIES, seconds: float = DEFAULT_SECONDS,
                 timeout: float | None = None, on_step: Callable[[str], None] = lambda line: None):
        self.spec, self.generator = spec, generator
        self.backend, self.backend_spec = backend, backend_spec
        self.work_dir, self.timeout, self.on_step = Path(work_dir), timeout, on_step
        self.max_tries, self.seconds = max_tries, seconds
        self.started = time.monotonic()
        self.tried: list[str] = []
        # A foreign backend's warm-pass worker serves candidate after candidate; each candidate's cold
        # pass gets a fresh worker, its first call, as `opcase run CANDIDATE` gives it.  close() ends it.
        self.kept = KeptWorkers(passes=(WARM_PASS,)) if runs_isolated(backend_spec) else None

    def run_file(self, path: Path) -> CaseResult:
        """Run one case as `opcase run` does.  A foreign backend (it runs in a worker) gets at most
        its per-candidate timeout and never more than the search's time left, so that a candidate
        that hangs ends the search at --time, not later."""
        limit = None
        if runs_isolated(self.backend_spec):
            left = max(self.seconds - (time.monotonic() - self.started), _LEAST_RUN_S)
            limit = min(self.timeout, left) if self.timeout is not None else left
        results, _ = run_cases([path], self.backend, self.backend_spec, RunOptions(), lambda result: None,
                               timeout=limit, kept=self.kept)
        return results[0]

    def close(self) -> None:
        if self.kept is not None:
            self.kept.close()

    def run_original(self, path: Path) -> CaseResult:
        """Run the original case; without a --timeout, each candidate then gets CANDIDATE_FACTOR
        times the time it took (at least CANDIDATE_LEAST_S): a candidate is no larger."""
        began = time.monotonic()
        result = self.run_file(path)
        if self.timeout is None:
            self.timeout = max(CANDIDATE_LEAST_S, CANDIDATE_FACTOR * (time.monotonic() - began))
        return result

    def budget_left(self) -> str:
        """'' while tries and time remain, else which one ran out."""
        if len(self.tried) >= self.max_tries:
            return "tries"
        if time.monotonic() - self.started >= self.seconds:
            return "time"
        return ""

    def fails_alike(self, descriptor: str, wanted: Failure) -> bool:
        """Generate the case of ``descriptor`` and run it: does it fail as ``wanted``?"""
        self.tried.append(descriptor)
        with candidate_case(self.spec, self.generator, descriptor, self.work_dir) as path:
            return path is not None and wanted.alike(failure_of(self.run_file(path)))

    def shrink(self, start, wanted: Failure):
        """The smallest plan reached from ``start`` whose case fails as ``wanted``; and why it stopped."""
        best, ref, derived = start, values_ref(start), relations(self.spec, start)
        progress = True
        while progress:
            progress = False
            for section in ("dims", "params"):
                for name in [n for n in getattr(best, section) if (section, n) not in derived]:
                    while True:
                        if self.budget_left():
                            return best, self.budget_left()
                        smaller = self._first_failing(best, section, name, wanted, ref, derived)
                        if smaller is None:
                            break
                        best, progress = smaller, True
        return best, ""

    def _first_failing(self, best, section: str, name: str, wanted: Failure, ref: str, derived: dict):
        value = getattr(best, section)[name]
        lowest, choices = limits(self.spec, section, name, value)
        for candidate in candidates(value, lowest, choices):
            plan = with_value(best, section, name, candidate, derived)
            if not allowed(self.spec, plan):
                continue
            if self.budget_left():
                return None
            descriptor = explicit_of(self.spec, plan, ref).text()
            self.on_step(f"try {len(self.tried) + 1} of at most {self.max_tries}: {section} {name}={candidate}  "
                         f"(best {total_bytes(self.spec, best) / 1e6:.3g} MB)")
            if self.fails_alike(descriptor, wanted):
                return plan_of(self.spec, descriptor)
        return None


def shrink_case(case_file: Path, backend, backend_spec: str, out_dir: Path, baseline: str | None = None,
                max_tries: int = DEFAULT_MAX_TRIES, seconds: float = DEFAULT_SECONDS,
                timeout: float | None = None, on_step: Callable[[str], None] = lambda line: None) -> Shrunk:
    """Shrink the failing case ``case_file`` on ``backend``; write the smallest one under ``out_dir``."""
    started = time.monotonic()
    case = load(case_file)
    original = describe(case.op, case.suite, case.name, case.seed, case.note)
    if not original:
        raise ShrinkError(f"{case_file}: no descriptor regenerates this case (made with `opcase gen --seed` "
                          f"other than 0, or not by opcase gen), so there is no plan to shrink")
    spec = spec_for(case.op)
    if spec.sha256 != case.spec_sha256:
        raise ShrinkError(f"{case_file}: made from another version of {spec.path.name} than the one installed "
                          f"({case.spec_sha256[:12]} vs {spec.sha256[:12]}); regenerate it first")
    start = plan_of(spec, original)
    del case
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".opcase-shrink-", dir=out_dir))
    shrinker = None
    try:
        shrinker = Shrinker(spec, generator_of(spec, baseline, load_apart), backend, backend_spec, work, max_tries, seconds,
                            timeout, on_step)
        on_step("running the original case")
        first = shrinker.run_original(Path(case_file))
        if first.status not in FAILING:
            raise ShrinkError(f"{case_file}: {first.status} on backend {backend_spec}: nothing to shrink")
        wanted = failure_of(first)
        best, exhausted = shrinker.shrink(start, wanted)
    finally:
        if shrinker is not None:
            shrinker.close()
        shutil.rmtree(work, ignore_errors=True)
    descriptor = explicit_of(spec, best, values_ref(start)).text()
    path = write_described(descriptor, out_dir, load_apart, baseline, (spec.path,))
    return Shrunk(original=original, descriptor=descriptor, path=path, failure=wanted,
                  bytes_before=total_bytes(spec, start), bytes_after=total_bytes(spec, best),
                  tries=len(shrinker.tried), seconds=time.monotonic() - started, tried=shrinker.tried,
                  exhausted=exhausted)
