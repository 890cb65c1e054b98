"""A suite's power: how many planted bugs its cases catch, and whether the legitimate variants pass.

Every case is loaded once and judged as `opcase run` judges it (harness.judge.runner.run_loaded):
first with the base backend, then with each mutant and control of its kernel (harness.studies.mutants)
whose outputs differ from the base's on that case.  A mutant is *killed* when some case fails it
(failed, wrongly-accepted, wrongly-rejected, error); it *survives* when it changed the outputs of
some case and every such case passed; it is *not applicable* when it changed no case (the suite
has no case it can act on: no partial block, no N > 1), with the reason.  A control *fails* when
any case fails it: a defect of the suite, whose thresholds reject a right kernel.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from glob import escape as glob_escape
from pathlib import Path
from typing import Callable

import numpy as np


# How many failing cases a killed mutant or a failing control lists.
from gen.core.backend import Backend
from gen.core.casefile import CaseFileError, load
from gen.core.metrics import THRESHOLD_METRICS
from gen.core.registry import spec_for
from gen.core.verdict import FAILING, SKIPPED, fails_only_by_its_own_error_over_the_cap, request_for
from harness.studies.mutants import (CHECKS, CONTROL, GENERIC, PLANTED, Call, Mutant, NotApplicable, controls, mutants,
                             outcome, same_outcome)
from harness.judge.runner import new_result, run_loaded
from harness.studies.power_identity import IDENTITY, identity_entries, identity_lines
_SHOWN = 3
KILLED, SURVIVED, NOT_APPLICABLE, PASSED, FAILED = "killed", "survived", "n/a", "passed", "failed"


@dataclass
class Tally:
    """One mutant (or control) of one kernel over the suite."""
    kernel: str
    mutant: Mutant
    judged: int = 0                                   # cases whose outputs it changed, judged
    failing: list = field(default_factory=list)       # (case key, status) of the cases that fail it
    failing_shapes: set = field(default_factory=set)  # the tensor shapes of those cases (case_shape)
    unchanged: int = 0                                # cases where it is the identity
    reasons: Counter = field(default_factory=Counter)  # why it could not be made, per case
    over_cap: list = field(default_factory=list)      # a control's cases over the docs' cap (harness.judge.runner)
    closest: dict | None = None                       # the passing case where its error came nearest a threshold
    state: object = None                              # a stateful mutant's kernel, kept over the suite

    def note_margin(self, judged) -> None:
        """Keep the threshold a passing case's error came nearest to (what a survivor's reason quotes)."""
        for output, verdicts in judged.thresholds.items():
            for v in verdicts:
                actual = v.get("actual")
                # diff4 is no distance to a bound (it fails only one-sided over 100 pairs; gen/core/README.md, Accuracy).
                if v["metric"] not in THRESHOLD_METRICS or not isinstance(actual, float) or not v["value"] > 0:
                    continue
                fraction = actual / v["value"]
                if self.closest is None or fraction > self.closest["fraction"]:
                    self.closest = {"case": judged.key, "output": output, "metric": v["metric"],
                                    "actual": actual, "threshold": v["value"], "fraction": fraction}

    @property
    def verdict(self) -> str:
        if self.mutant.kind == CONTROL:
            return FAILED if self.failing else PASSED if self.judged else NOT_APPLICABLE
        return KILLED if self.failing else SURVIVED if self.judged else NOT_APPLICABLE

    def doc(self) -> dict:
        m = self.mutant
        entry = {"kernel": self.kernel, "name": m.name, "kind": m.kind, "what": m.what, "verdict": self.verdict,
                 "judged": self.judged, "failing": len(self.failing), "failing_shapes": len(self.failing_shapes),
                 "failing_cases": [{"case": k, "status": s} for k, s in self.failing[:_SHOWN]]}
        if self.over_cap:
            entry["over_cap"] = self.over_cap[:_SHOWN]
        if self.verdict == NOT_APPLICABLE:
            entry["reason"] = self.reason()
        if self.verdict == SURVIVED:
            entry["needs"] = self.mutant.needs
            entry["closest"] = self.closest
        return entry

    def reason(self) -> str:
        why = f"no case has {self.mutant.needs}"
        if self.reasons:
            text, n = self.reasons.most_common(1)[0]
            why += f" ({n} case(s): {text})"
        return why


def case_shape(case) -> tuple:
    """What makes two cases *different shapes*: every tensor's extent (an absent optional input as
    absent), dtype and values aside, so a case made in float16 and float32 is one shape."""
    return tuple((name, None if t.absent else tuple(t.shape))
                 for name, t in sorted({**case.inputs, **case.outputs}.items()))


def _capturing(base: Backend, captured: dict) -> Backend:
    """The base, keeping what its calls did (outputs or exception) for the mutants to start from:
    ``outcome`` the last call's (the judged one), ``calls`` every call's in order (a decoy's first)."""
    def run(request):
        captured["outcome"] = result = outcome(lambda: base.run(request))
        captured.setdefault("calls", []).append(result)
        if result[0] == "raised":
            raise result[1]
        return result[1]
    return Backend(name=base.name, origin=base.origin, run=run, supports=base.supports)


def _replay(name: str, result) -> Backend:
    """A backend that returns what a mutant computed (so each is computed once per case)."""
    def run(request):
        if result[0] == "raised":
            raise result[1]
        return result[1]
    return Backend(name=name, origin="opcase power", run=run)


# How many case shapes failing a mutant are enough to call it killed: past them (and past
# --min-kills, so that a fragile kill is still seen) it is judged on no further case (README:
# Measuring a suite's power).  None: every case.
ENOUGH_KILLS = 2


def case_bytes(path: Path) -> int:
    """What a case file holds on disk: its envelope and its sidecars (OP/SUITE/NAME.opcase.*)."""
    return path.stat().st_size + sum(s.stat().st_size for s in path.parent.glob(f"{glob_escape(path.name)}.*"))


def measure(files: list[Path], base: Backend, base_spec: str,
            on_case: Callable[[str], None] = lambda key: None, min_kills: int = 2,
            enough_kills: int | None = ENOUGH_KILLS, identity_error=None) -> dict:
    """Run the base, every mutant and every control of each case's kernel on ``files``; the report.

    Cases go smallest first, and a mutant already failed by cases of ``enough_kills`` shapes (and
    ``min_kills``) is judged on no further case: what a mutant costs is a reference call per case,
    and on the default suites' 2^24-element and network cases that is seconds each, for dozens of
    mutants.  Controls, survivors and mutants not yet killed are judged on every case."""

    tallies: dict[str, list[Tally]] = {}
    cases: Counter = Counter()
    base_problems = []
    enough = max(enough_kills, min_kills) if enough_kills else None
    for path in sorted(files, key=case_bytes):
        try:
            case = load(path)
        except CaseFileError as exc:
            base_problems.append({"case": str(path), "status": "error", "message": str(exc)})
            continue
        if case.op not in tallies:
            spec = spec_for(case.op)
            tallies[case.op] = [Tally(case.op, m) for m in mutants(spec, base.name) + controls(spec)]
        pending = [t for t in tallies[case.op]
                   if t.mutant.kind == CONTROL or enough is None or len(t.failing_shapes) < enough]
        base_result, judged = measure_case(case, path, base, base_spec, pending)
        on_case(base_result.key)
        if judged:
            cases[case.op] += 1
        elif base_result.status != SKIPPED:
            base_problems.append({"case": base_result.key, "status": base_result.status,
                                  "message": base_result.message.splitlines()[0] if base_result.message else ""})
    return report(tallies, cases, base_spec, base_problems, min_kills, enough_kills, identity_error)


def measure_case(case, path: Path, base: Backend, base_spec: str, tallies: list[Tally]):
    """Judge one loaded case with the base, then with each mutant and control of ``tallies`` whose
    outputs differ from the base's; (the base's result, whether anything was measured): nothing
    can be measured against a base that does not pass the case."""
    captured: dict = {}
    base_result = run_loaded(case, _capturing(base, captured), new_result(path, base_spec))
    if base_result.status in FAILING or base_result.status == SKIPPED or "outcome" not in captured:
        return base_result, False
    # A mutant that leaves out a parameter check computes on what the check would refuse (a zero
    # pooled size, say): numpy's warnings about that arithmetic are the mutant's, not the user's.
    with np.errstate(all="ignore"):
        for tally in tallies:
            _judge(tally, case, path, base, captured["outcome"], base_spec, captured["calls"])
    return base_result, True


def _with_state(tally: Tally, base: Backend, base_calls: list, last: dict) -> Backend:
    """The stateful mutant as a backend for one case's calls: its state kept from the cases before,
    each call starting from the base's recorded outcome of that call (in order), ``last`` the
    outcome of the latest call (the judged one, once the case has run)."""
    if tally.state is None:
        tally.state = tally.mutant.stateful()
    recorded = iter(base_calls)

    def run(request):
        last["outcome"] = result = outcome(lambda: tally.state(Call(request, base, next(recorded, None))))
        if result[0] == "raised":
            raise result[1]
        return result[1]
    return Backend(name=tally.mutant.name, origin="opcase power", run=run)


def _judge(tally: Tally, case, path: Path, base: Backend, base_outcome, base_spec: str, base_calls=()) -> None:
    why = tally.mutant.applies_to(case)
    if why:
        tally.reasons[why] += 1
        return
    if tally.mutant.stateful is not None:
        # State shows only over a sequence of calls: the case runs as `opcase run` runs it (its
        # decoy call, then the judged one) with the mutant's state kept from the cases before.
        last: dict = {}
        judged = run_loaded(case, _with_state(tally, base, list(base_calls), last),
                            new_result(path, f"{base_spec} ({tally.mutant.name})"))
        if "outcome" not in last or same_outcome(last["outcome"], base_outcome):
            tally.unchanged += 1
        else:
            _record(tally, judged, case)
        return
    try:
        result = outcome(lambda: tally.mutant.apply(Call(request_for(case), base, base_outcome)))
    except NotApplicable as exc:
        tally.reasons[str(exc)] += 1
        return
    if same_outcome(result, base_outcome):
        tally.unchanged += 1
        return
    _record(tally, run_loaded(case, _replay(tally.mutant.name, result),
                              new_result(path, f"{base_spec} ({tally.mutant.name})")), case)


def _record(tally: Tally, judged, case) -> None:
    """A case whose outputs the mutant changed, judged: killed by it, over the cap, or its margin."""
    tally.judged += 1
    if tally.mutant.backend and fails_only_by_its_own_error_over_the_cap(judged, tally.mutant.backend):
        # The control is the baseline that set this case's thresholds, and its own error is over
        # the docs' cap here: the docs' rule fails its reference interface, not the suite its control.
        tally.over_cap.append(judged.key)
    elif judged.status in FAILING:
        tally.failing.append((judged.key, judged.status))
        tally.failing_shapes.add(case_shape(case))
    else:
        tally.note_margin(judged)


def report(tallies: dict[str, list[Tally]], cases: Counter, base_spec: str, base_problems: list,
           min_kills: int = 2, enough_kills: int | None = None, identity_error=None) -> dict:
    """The power report (README: Measuring a suite's power); ``identity_error``: how the identity tier's mutants
    are judged (harness.studies.power_identity), none to leave the tier out."""
    doc = {"base": base_spec, "min_kills": min_kills, "enough_kills": enough_kills, "kernels": [], "mutants": [],
           "controls": [], "identity": [],
           "base_problems": base_problems}
    for kernel in sorted(tallies):
        rows = tallies[kernel]
        generic = [t for t in rows if t.mutant.kind in (GENERIC, CHECKS)]
        planted = [t for t in rows if t.mutant.kind == PLANTED]
        ctrl = [t for t in rows if t.mutant.kind == CONTROL]
        verdicts = Counter(t.verdict for t in generic)
        applicable = verdicts[KILLED] + verdicts[SURVIVED]
        planted_verdicts = Counter(t.verdict for t in planted)
        doc["kernels"].append({
            "kernel": kernel, "cases": cases[kernel], "mutants": len(generic), "killed": verdicts[KILLED],
            "survived": verdicts[SURVIVED], "not_applicable": verdicts[NOT_APPLICABLE],
            "kill_rate": verdicts[KILLED] / applicable if applicable else None,
            "planted": len(planted), "planted_killed": planted_verdicts[KILLED],
            "planted_survived": planted_verdicts[SURVIVED],
            "controls": len(ctrl), "controls_failed": sum(t.verdict == FAILED for t in ctrl)})
        entries = [t.doc() for t in generic + planted]
        for m in entries:
            # A kill that rests on fewer case shapes than asked is one edit of the suite from a survivor.
            # A check's mutant is not: its check has one invalid case by design (the violation the
            # spec writes against suites.invalid.base, breaking that check and no other).
            m["fragile"] = m["verdict"] == KILLED and m["kind"] != CHECKS and m["failing_shapes"] < min_kills
        doc["kernels"][-1]["fragile"] = sum(m["fragile"] for m in entries)
        doc["mutants"] += entries
        doc["controls"] += [t.doc() for t in ctrl]
        doc["identity"] += identity_entries([t for t in rows if t.mutant.kind == IDENTITY], KILLED,
                                            identity_error)
    survivors = [m for m in doc["mutants"] if m["verdict"] == SURVIVED and m["kind"] != PLANTED]
    failed_controls = [c for c in doc["controls"] if c["verdict"] == FAILED]
    judged = sum(cases.values())
    doc["summary"] = {
        "cases": judged, "mutants": sum(k["mutants"] for k in doc["kernels"]),
        "killed": sum(k["killed"] for k in doc["kernels"]), "survived": len(survivors),
        "not_applicable": sum(k["not_applicable"] for k in doc["kernels"]),
        "planted_survived": sum(k["planted_survived"] for k in doc["kernels"]),
        "controls_failed": len(failed_controls), "base_problems": len(base_problems),
        "fragile": sum(m["fragile"] for m in doc["mutants"]),
        "nothing_judged": judged == 0,
        # Mutants of a backward reference that only the adjoint identity tells from it, and those it cannot.
        "identity_only": sum(m["by_identity"] and m["cases_verdict"] != KILLED for m in doc["identity"]),
        "identity_survived": sum(m["verdict"] == SURVIVED for m in doc["identity"]),
        "ok": judged > 0 and not survivors and not failed_controls and not base_problems
        and not any(m["verdict"] == SURVIVED for m in doc["identity"])}
    return doc


# --------------------------------------------------------------------------- terminal

def _rate(value) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def _closest_text(closest: dict | None) -> str:
    """Why the survivor passed, measured: how near its error came to the thresholds the cases set."""
    if not closest:
        return ""
    return (f"; its error came nearest a threshold on {closest['case']}: {closest['output']}.{closest['metric']} "
            f"{closest['actual']:.3g}, {100 * closest['fraction']:.0f}% of {closest['threshold']:.3g}, so the "
            f"thresholds the docs' rule sets accept it there")


def _named(m: dict) -> str:
    return f"{m['name']} (planted)" if m["kind"] == PLANTED else m["name"]


def table_lines(doc: dict, kills: bool = False) -> list[str]:
    """The kill-rate table per kernel, then every survivor, fragile kill, failing control and
    inapplicable mutant (and with ``kills`` every killed one with its count of cases and shapes)."""
    header = ["kernel", "cases", "mutants", "killed", "survived", "n/a", "kill rate", "planted killed", "fragile",
              "controls"]
    rows = [[k["kernel"], str(k["cases"]), str(k["mutants"]), str(k["killed"]), str(k["survived"]),
             str(k["not_applicable"]), _rate(k["kill_rate"]),
             f"{k['planted_killed']}/{k['planted']}" if k["planted"] else "-", str(k["fragile"]),
             f"{k['controls'] - k['controls_failed']}/{k['controls']} pass"] for k in doc["kernels"]]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(text.ljust(w) for text, w in zip(r, widths)).rstrip() for r in [header, *rows]]
    for m in doc["mutants"]:
        if m["verdict"] == SURVIVED:
            label = "SURVIVED (planted)" if m["kind"] == PLANTED else "SURVIVED"
            lines.append(f"{label}  {m['kernel']}  {m['name']}: {m['what']}; passed all {m['judged']} case(s) it "
                         f"changed{_closest_text(m.get('closest'))}; to kill it a suite needs {m['needs']}")
    for m in doc["mutants"]:
        if kills and m["verdict"] == KILLED:
            lines.append(f"killed  {m['kernel']}  {_named(m)}: {m['failing']} case(s) of {m['failing_shapes']} shape(s)")
    for m in doc["mutants"]:
        if m["fragile"]:
            shown = ", ".join(f["case"] for f in m["failing_cases"])
            lines.append(f"FRAGILE  {m['kernel']}  {_named(m)}: killed by "
                         f"{m['failing']} case(s) of {m['failing_shapes']} shape(s), fewer shapes than "
                         f"{doc['min_kills']}: {shown}")
    for c in doc["controls"]:
        if c["verdict"] == FAILED:
            shown = ", ".join(f"{f['case']} ({f['status']})" for f in c["failing_cases"])
            lines.append(f"CONTROL FAILS  {c['kernel']}  {c['name']}: {c['what']}; {c['failing']} case(s) reject "
                         f"it, a defect of the suite: {shown}")
        if c.get("over_cap"):
            lines.append(f"over the docs' cap  {c['kernel']}  {c['name']}: fails {', '.join(c['over_cap'])}, where "
                         f"it set the thresholds itself and its own error is over the docs' cap (not a defect)")
    lines += identity_lines(doc.get("identity", []))
    for p in doc["base_problems"]:
        lines.append(f"BASE FAILS  {p['case']} ({p['status']}): {p['message']}")
    for m in doc["mutants"] + doc["controls"]:
        if m["verdict"] == NOT_APPLICABLE:
            lines.append(f"n/a  {m['kernel']}  {m['name']}: {m['reason']}")
    s = doc["summary"]
    lines.append(f"{s['killed']} of {s['killed'] + s['survived']} applicable generic mutant(s) killed "
                 f"({s['not_applicable']} n/a), {s['planted_survived']} planted bug(s) surviving, "
                 f"{s['fragile']} kill(s) by fewer than {doc['min_kills']} case shapes, "
                 f"{s['controls_failed']} control(s) failing, over {s['cases']} case(s) against base {doc['base']}"
                 + (f"; {s['identity_only']} backward mutant(s) only the adjoint identity catches"
                    if doc.get("identity") else ""))
    return lines
