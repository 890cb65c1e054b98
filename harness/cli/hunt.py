"""Hunting (`opcase power --hunt`): cases that kill the bugs a suite leaves alive.

For each kernel, the mutants and planted bugs that a power run did not kill (survivors, and the
not applicable) are hunted over the spec's space: shapes and params drawn as the random suite
draws them and taken from the boundary, stress and network suites (within every limit and check
of the spec, and a size a search can afford), crossed with the value regimes the spec's suites
name (its own distributions, the random suite's, each stress and boundary case's), both dtypes,
optional inputs given or left out, the stress suite's channel tails, and for a parameter check
left out the cases that break it.  Each candidate is an explicit descriptor (gen.core.descriptor),
generated as `opcase gen --case` makes it, and judged as `opcase power` judges a case
(harness.studies.power.measure_case): a candidate *kills* a bug when the base passes it, every control
passes it, and the bug's outputs fail it.  A candidate some control fails is unfit: its
thresholds would reject a right kernel.

Each bug killed is then shrunk (harness.cli.shrink's passes) to the smallest case that still kills
it, with a fresh state for a stateful bug: the case kills it on its own.  What stays alive is
reported with why: the nearest its error came to a threshold over the search (and the case), no
case showing any difference (outputs bit-identical to the base's on every case tried), or no case
on which it could be made at all.

The search is deterministic for a seed: candidates are drawn in one order from numpy generators
seeded by it; a budget in cases stops it at the same candidate on any machine, one in seconds
wherever the clock says.
"""
from __future__ import annotations

import re
import shutil
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from gen.core.casefile import load
from gen.core.descriptor import NOTE_PREFIX, Explicit
from gen.core.spec import Spec, SpecError
from gen.descriptor import explicit_of, plan_of, values_ref
from gen.generate import channel_tail_entries, channel_tails, plan_random, plan_suite, total_bytes
from gen.jobs import generator_of
from harness.cli.shrink import Shrinker, allowed, candidate_case
from harness.studies.mutants import CONTROL, NO_CHECK, controls, mutants
from harness.studies.power import KILLED, NOT_APPLICABLE, SURVIVED, Tally, measure_case
from harness.judge.workers import load_apart

# The largest case (tensor bytes) the search tries: one it can afford hundreds of.
HUNT_CASE_BYTES = 4 << 20
# Candidates a shrink of one found case may generate, at most.
SHRINK_TRIES = 60
# Random shapes drawn at a time (suites.random's sampler, with the hunt's seed).
_DRAWS = 64
NO_DIFFERENCE = "no-difference"


class BudgetError(ValueError):
    """A --budget that is not N, Ns or Ncases."""


@dataclass(frozen=True)
class Budget:
    """How long each kernel's search may go: seconds, or candidate cases (deterministic)."""
    seconds: float | None = None
    cases: int | None = None

    @classmethod
    def parse(cls, text: str) -> "Budget":
        found = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(s|cases)?\s*", text or "")
        if not found or float(found.group(1)) <= 0 or (found.group(2) == "cases" and "." in found.group(1)):
            raise BudgetError(f"--budget {text!r}: give seconds (60, 60s) or cases (200cases), more than 0")
        if found.group(2) == "cases":
            return cls(cases=int(found.group(1)))
        return cls(seconds=float(found.group(1)))

    def spent(self, started: float, tried: int) -> bool:
        if self.cases is not None:
            return tried >= self.cases
        return time.monotonic() - started >= self.seconds

    def text(self) -> str:
        return f"{self.cases} cases" if self.cases is not None else f"{self.seconds:g} s"


@dataclass
class Hunted:
    """One bug hunted over one kernel's search."""
    kernel: str
    name: str
    before: str                                  # its power verdict: survived or n/a
    tried: int = 0                               # candidates it was judged on
    judged: int = 0                              # candidates whose outputs it changed
    unchanged: int = 0                           # candidates where it was the identity
    reasons: Counter = field(default_factory=Counter)
    closest: dict | None = None
    found: str = ""                              # the first candidate that killed it
    case: str = ""                               # that case shrunk
    bytes_found: int = 0
    bytes_shrunk: int = 0

    def add(self, tally: Tally, case: str) -> None:
        """One candidate's tally of this bug."""
        self.tried += 1
        self.judged += tally.judged
        self.unchanged += tally.unchanged
        self.reasons.update(tally.reasons)
        if tally.closest and (self.closest is None or tally.closest["fraction"] > self.closest["fraction"]):
            self.closest = {**tally.closest, "case": case}

    @property
    def verdict(self) -> str:
        if self.case:
            return KILLED
        return SURVIVED if self.judged else NO_DIFFERENCE if self.unchanged else NOT_APPLICABLE

    def why(self) -> str:
        """Why it stays alive, measured over the search."""
        if self.verdict == SURVIVED:
            if not self.closest:
                return (f"changed the outputs of {self.judged} of {self.tried} case(s) tried; each passed, and no "
                        f"threshold it is judged by measures a distance (diff4, exact outputs)")
            c = self.closest
            return (f"changed the outputs of {self.judged} of {self.tried} case(s) tried, each passed; nearest "
                    f"approach: {c['output']}.{c['metric']} {c['actual']:.3g} = {100 * c['fraction']:.0f}% of "
                    f"its threshold {c['threshold']:.3g}, on {c['case']}")
        if self.verdict == NO_DIFFERENCE:
            return (f"no case shows any difference: its outputs were bit-identical to the base's on all "
                    f"{self.unchanged} case(s) it could be made on"
                    + (f" (not made on {self.tried - self.unchanged})" if self.tried > self.unchanged else ""))
        if self.verdict == NOT_APPLICABLE:
            if not self.tried:
                return ("no case tried could show it" + (": none broke its check" if self.name.startswith(NO_CHECK)
                                                         else ""))
            text, n = self.reasons.most_common(1)[0]
            return f"could be made on none of the {self.tried} case(s) tried (most often, {n} of them: {text})"
        return ""

    def doc(self) -> dict:
        entry = {"kernel": self.kernel, "name": self.name, "before": self.before, "verdict": self.verdict,
                 "tried": self.tried, "judged": self.judged, "unchanged": self.unchanged}
        if self.case:
            entry.update(found=self.found, case=self.case, bytes_found=self.bytes_found,
                         bytes_shrunk=self.bytes_shrunk)
        else:
            entry["why"] = self.why()
            entry["closest"] = self.closest
        return entry


def alive(power_doc: dict) -> dict[str, dict[str, str]]:
    """{kernel: {bug: its verdict}} for every mutant and planted bug the power run did not kill."""
    found: dict[str, dict[str, str]] = {}
    for m in power_doc["mutants"]:
        if m["kind"] != CONTROL and m["verdict"] in (SURVIVED, NOT_APPLICABLE):
            found.setdefault(m["kernel"], {})[m["name"]] = m["verdict"]
    return found


# --------------------------------------------------------------------------- the candidates

def _complete(spec: Spec, plan) -> bool:
    return plan.violation is None and set(plan.params) == set(spec.params)


def _shape_sources(spec: Spec, max_bytes: int) -> list:
    """The structured shapes: every valid case of the boundary, stress and network suites that
    gives every param, within ``max_bytes``."""
    return [p for suite in ("boundary", "stress", "network") for p in plan_suite(spec, suite)
            if _complete(spec, p) and total_bytes(spec, p) <= max_bytes]


def _value_sources(spec: Spec) -> list[str]:
    """How candidates' inputs are drawn (as values= names them): the spec's distributions, the
    random suite's, and each stress and boundary case's own (one per distinct set)."""
    refs, seen = [""], [{}]
    if (spec.suites.get("random") or {}).get("values"):
        refs.append("random")
    for suite in ("stress", "boundary"):
        for plan in plan_suite(spec, suite):
            if plan.values and plan.values not in seen:
                seen.append(plan.values)
                refs.append(f"{suite}/{plan.name}")
    return refs


def candidates(spec: Spec, seed: int, violations: list[str], max_bytes: int = HUNT_CASE_BYTES) -> Iterator:
    """Explicit plans over the spec's space, in one order for a seed, each distinct, allowed by every
    check (an invalid one: breaking exactly its own) and within ``max_bytes``."""
    rng = np.random.default_rng([seed, 0x68756E74])
    structured = _shape_sources(spec, max_bytes)
    value_refs = _value_sources(spec)
    optional = [n for n, t in spec.inputs.items() if t.optional]
    checks = {c.id: c for c in spec.checks}
    invalid_bases = {p.violation.id: p for p in plan_suite(spec, "invalid") if p.violation is not None}
    # suites.stress.channel_tail is one mapping or a list of them, each sizing a dim or an int param.
    tails = [("dim" if "dim" in entry else "param", entry.get("dim", entry.get("param")),
              channel_tails(entry["widths"])) for entry in channel_tail_entries(spec.suites.get("stress") or {})]
    seen: set[str] = set()
    draws: list = []
    for index in range(1 << 62):
        if not draws:
            draws = [p for p in plan_random(spec, _DRAWS, seed * 1000003 + index) if _complete(spec, p)]
            if not draws and not structured:
                return
        shape = draws.pop(0) if rng.random() < 0.5 or not structured else structured[rng.integers(len(structured))]
        dims, params = dict(shape.dims), dict(shape.params)
        for key, sized, widths in tails:
            target = dims if key == "dim" else params
            if rng.random() < 0.25 and sized in target:
                target[sized] = int(widths[rng.integers(len(widths))])
        omit = tuple(n for n in optional if rng.random() < 0.5)
        violate = ""
        if violations and rng.random() < 0.3:
            violate = violations[rng.integers(len(violations))]
            v = checks[violate].violate
            dims, params = {**dims, **(v.get("dims") or {})}, {**params, **(v.get("params") or {})}
        d = Explicit(op=spec.op, dtype=str(rng.choice(spec.dtypes)), dims=dims, params=params,
                     seed=int(rng.integers(2**62)), omit=omit, values=value_refs[rng.integers(len(value_refs))],
                     violate=violate)
        plan = _plan(spec, d)
        if plan is None and violate in invalid_bases:
            # The check's own invalid case, with this candidate's seed and values.
            base = invalid_bases[violate]
            plan = _plan(spec, replace(d, dims=dict(base.dims), params=dict(base.params), omit=tuple(base.omit)))
        if plan is None or plan.note in seen or total_bytes(spec, plan) > max_bytes:
            continue
        seen.add(plan.note)
        yield plan


def _plan(spec: Spec, d: Explicit):
    """The plan of an explicit descriptor, or None when it is no allowed call of the spec."""
    try:
        plan = plan_of(spec, d.text())
    except (ValueError, SpecError):
        return None
    return plan if allowed(spec, plan) else None


# --------------------------------------------------------------------------- judging and shrinking

class Judge:
    """Judges candidate cases of one kernel as `opcase power` does, with the base and the controls."""

    def __init__(self, spec: Spec, base, base_spec: str, work_dir: Path):
        self.spec, self.base, self.base_spec, self.work_dir = spec, base, base_spec, work_dir
        self.generator = generator_of(spec, None, load_apart)
        self.controls = controls(spec)
        self.unfit: list = []           # (descriptor, controls failing) of the candidates some control failed
        self.base_failed = 0            # candidates the base did not pass
        self.refused = 0                # candidates the generator refused, or that opcase run would mistrust

    def tallies(self, path: Path, bugs: list, descriptor: str = "") -> list[Tally] | None:
        """Each bug's tally on the case at ``path`` (fresh: a stateful bug starts anew), or None when
        the case cannot tell: the base does not pass it, or a control fails it."""
        case = load(path)
        checked = [Tally(self.spec.op, m) for m in self.controls]
        tallies = [Tally(self.spec.op, m) for m in bugs]
        _, judged = measure_case(case, path, self.base, self.base_spec, checked + tallies)
        if not judged:
            self.base_failed += 1
            return None
        failing = [t.mutant.name for t in checked if t.failing]
        if failing:
            self.unfit.append((descriptor, failing))
            return None
        return tallies

    def kills(self, descriptor: str, bugs: list) -> list | None:
        """The tallies of ``bugs`` on the case of ``descriptor``; None when it is no candidate."""
        # A value regime on a shape its suite never pairs it with may overflow a baseline's half
        # arithmetic: the generator refuses that case (no candidate), numpy's warnings say nothing more.
        with np.errstate(all="ignore"), candidate_case(self.spec, self.generator, descriptor, self.work_dir) as path:
            if path is None:
                self.refused += 1
                return None
            return self.tallies(path, bugs, descriptor)


class KillShrinker(Shrinker):
    """A shrink whose candidates are kept when they still kill one bug (the base and every
    control passing them)."""

    def __init__(self, judge: Judge, bug, max_tries: int, seconds: float, on_step):
        super().__init__(judge.spec, judge.generator, None, judge.base_spec, judge.work_dir, max_tries, seconds,
                         None, on_step)
        self.judge, self.bug = judge, bug

    def fails_alike(self, descriptor: str, wanted) -> bool:
        self.tried.append(descriptor)
        tallies = self.judge.kills(descriptor, [self.bug])
        return bool(tallies and tallies[0].failing)


# --------------------------------------------------------------------------- one kernel's hunt

@dataclass
class KernelHunt:
    kernel: str
    hunted: list[Hunted]
    tried: int = 0
    unfit: list = field(default_factory=list)    # (descriptor, controls failing): a defect of the thresholds
    base_failed: int = 0
    refused: int = 0
    seconds: float = 0.0
    found: list = field(default_factory=list)    # (shrunk descriptor, [bugs it kills])

    def doc(self) -> dict:
        return {"kernel": self.kernel, "alive_before": len(self.hunted),
                "killed": sum(h.verdict == KILLED for h in self.hunted),
                "alive_after": sum(h.verdict != KILLED for h in self.hunted),
                "candidates": self.tried, "unfit": len(self.unfit), "base_failed": self.base_failed,
                "refused": self.refused,
                "unfit_cases": [{"case": c, "controls_failing": f} for c, f in self.unfit],
                "seconds": round(self.seconds, 1),
                "cases": [{"case": c, "kills": k} for c, k in self.found]}


def alive_bugs(spec: Spec, base_name: str, names: dict[str, str]) -> list:
    """The mutants and planted bugs of ``names`` (alive(): {bug: its power verdict}) of one kernel."""
    return [m for m in mutants(spec, base_name) if m.name in names]


def hunt_kernel(spec: Spec, base, base_spec: str, bugs: list, before: dict[str, str], seed: int, budget: Budget,
                max_bytes: int = HUNT_CASE_BYTES, on_step: Callable[[str], None] = lambda line: None) -> KernelHunt:
    """Hunt ``bugs`` (harness.studies.mutants.Mutant; ``before``: each one's power verdict) over one
    kernel's spec; shrink each case found."""
    started = time.monotonic()
    bugs = {m.name: m for m in bugs}
    hunted = {name: Hunted(spec.op, name, before.get(name, "")) for name in bugs}
    result = KernelHunt(spec.op, list(hunted.values()))
    work = Path(tempfile.mkdtemp(prefix=".opcase-hunt-"))
    try:
        judge = Judge(spec, base, base_spec, work)
        violations = [name.removeprefix(NO_CHECK) for name in bugs if name.startswith(NO_CHECK)]
        killing: dict[str, object] = {}
        for plan in candidates(spec, seed, violations, max_bytes):
            left = [bugs[n] for n in bugs if n not in killing]
            if not left or budget.spent(started, result.tried):
                break
            result.tried += 1
            descriptor = plan.note.removeprefix(NOTE_PREFIX)
            on_step(f"{spec.op}: candidate {result.tried}, {len(left)} bug(s) alive")
            # An invalid case can show only the bug that leaves its check out (every other refuses it
            # as the base does); a valid one every bug but those.
            aimed = [m for m in left if m.name.startswith(NO_CHECK) == (plan.violation is not None)
                     and (plan.violation is None or m.name == NO_CHECK + plan.violation.id)]
            if not aimed:
                continue
            for tally in judge.kills(descriptor, aimed) or []:
                hunted[tally.mutant.name].add(tally, descriptor)
                if tally.failing:
                    killing[tally.mutant.name] = plan
        result.unfit, result.base_failed, result.refused = list(judge.unfit), judge.base_failed, judge.refused
        for name, plan in killing.items():
            _shrink_found(judge, bugs[name], hunted[name], plan, budget, on_step)
        result.found = _kills_of_found(judge, [bugs[n] for n in killing], hunted)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result.seconds = time.monotonic() - started
    return result


def _shrink_found(judge: Judge, bug, hunted: Hunted, plan, budget: Budget, on_step) -> None:
    seconds = budget.seconds if budget.seconds is not None else 600.0
    shrinker = KillShrinker(judge, bug, SHRINK_TRIES, seconds, on_step)
    best, _ = shrinker.shrink(plan, None)
    hunted.found = explicit_of(judge.spec, plan, values_ref(plan)).text()
    hunted.case = explicit_of(judge.spec, best, values_ref(plan)).text()
    hunted.bytes_found, hunted.bytes_shrunk = total_bytes(judge.spec, plan), total_bytes(judge.spec, best)


def _kills_of_found(judge: Judge, killed: list, hunted: dict[str, Hunted]) -> list:
    """Each distinct shrunk case with every killed bug it kills (its own at least)."""
    found = []
    for case in dict.fromkeys(hunted[m.name].case for m in killed):
        tallies = judge.kills(case, killed) or []
        kills = [t.mutant.name for t in tallies if t.failing]
        own = [m.name for m in killed if hunted[m.name].case == case]
        found.append((case, kills + [n for n in own if n not in kills]))
    return found


# --------------------------------------------------------------------------- report

def report(hunts: list[KernelHunt], seed: int, budget: Budget) -> dict:
    return {"seed": seed, "budget": budget.text(), "kernels": [h.doc() for h in hunts],
            "bugs": [b.doc() for h in hunts for b in h.hunted],
            "summary": {"alive_before": sum(len(h.hunted) for h in hunts),
                        "killed": sum(b.verdict == KILLED for h in hunts for b in h.hunted),
                        "cases": sum(len(h.found) for h in hunts),
                        "seconds": round(sum(h.seconds for h in hunts), 1)}}


def lines(doc: dict) -> list[str]:
    out = []
    for k in doc["kernels"]:
        out.append(f"hunt  {k['kernel']}: {k['alive_before']} alive before, {k['killed']} killed, "
                   f"{k['alive_after']} alive after; {k['candidates']} case(s) tried"
                   + (f" ({k['unfit']} unfit: a control fails them)" if k["unfit"] else "")
                   + (f" ({k['refused']} refused: a golden opcase run would mistrust)" if k["refused"] else "")
                   + f" in {k['seconds']:.0f} s")
        for unfit in k["unfit_cases"]:
            out.append(f"  UNFIT   {k['kernel']}  {unfit['case']}: {', '.join(unfit['controls_failing'])} fail(s) it, "
                       f"a right kernel's variant: its thresholds would reject a right kernel (a finding for "
                       f"`opcase calibrate`)")
    for b in doc["bugs"]:
        if b["verdict"] == KILLED:
            out.append(f"  KILLED  {b['kernel']}  {b['name']} ({b['before']} before): {b['case']}  "
                       f"(shrunk from {b['bytes_found']} to {b['bytes_shrunk']} bytes of tensors)")
        else:
            out.append(f"  alive   {b['kernel']}  {b['name']} ({b['before']} before): {b['why']}")
    s = doc["summary"]
    out.append(f"hunt: {s['killed']} of {s['alive_before']} bug(s) alive before killed by {s['cases']} case(s) "
               f"(seed {doc['seed']}, budget {doc['budget']} per kernel) in {s['seconds']:.0f} s")
    return out
