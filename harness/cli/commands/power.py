"""`opcase power`: a suite's power against planted bugs, and `--hunt` for cases that kill survivors."""
from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import click

from gen.core.backend import BackendLoadError
from gen.core.casefile import atomic_write
from harness.studies.power_started import power_incomplete_json
from gen.core.registry import spec_for
from gen.core.spec import SpecError, load_spec
from gen.adjoint_reference import reference_identity_error
from gen.hunt_entries import spec_digest, write_hunt
from harness.cli.commands.gen import gen
from harness.cli.common import (EXIT_FAILED, EXIT_NOTHING_JUDGED, InputError, check_writable, exits_on_signals,
                                finite_seconds, progress_bar, run_files, size_option)
from harness.cli.hunt import Budget, BudgetError, KILLED, alive, alive_bugs, hunt_kernel, lines, report
from harness.studies.power import measure as measure_power, table_lines as power_table
from harness.reports.progress import steps
from harness.judge.workers import load_apart


@click.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("--backend", "backend_spec", default="reference", show_default=True,
              help="The base the mutants are made from (any --backend value of `opcase run`); it must pass "
                   "the suite.")
@click.option("--json", "json_path", default=None, type=click.Path(dir_okay=False),
              help="Write the report (per kernel; every mutant and control with its verdict) as JSON.")
@click.option("--max-size", "max_size", default="64MB", show_default=True, callback=size_option,
              help="With SPECs: the network cases generated are those up to this many bytes of tensors.")
@click.option("--filter", "filter_text", default=None, help="Only cases whose OP/SUITE/NAME matches this regular expression.")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=None, callback=finite_seconds,
              help="Seconds each call of a base other than opcase's own may take (it runs in a worker process, "
                   "as `opcase run` runs it); over it, that call is an error of the base.")
@click.option("--min-kills", "min_kills", type=click.IntRange(min=1), default=2, show_default=True,
              help="A killed bug whose failing cases have fewer distinct shapes than this is named FRAGILE.")
@click.option("--kills", "show_kills", is_flag=True,
              help="List every killed bug with how many cases kill it and of how many distinct shapes.")
@click.option("--hunt", is_flag=True,
              help="Then hunt: search each kernel's spec for cases that kill the bugs left alive, shrink each "
                   "case found, add it to the spec's hunt suite (suites.hunt), and say why the rest stay alive.")
@click.option("--budget", "budget_text", default="60s", show_default=True,
              help="With --hunt: each kernel's search, in seconds (60, 60s) or candidate cases (200cases: the "
                   "same search on any machine).")
@click.option("--seed", type=click.IntRange(min=0, max=2**31 - 1), default=0, show_default=True,
              help="With --hunt: the search's seed (the same seed and a budget in cases: the same cases).")
@click.option("--no-write", "no_write", is_flag=True,
              help="With --hunt: report what it finds, leaving the specs as they are.")
@click.option("--enough-kills", "enough_kills", type=click.IntRange(min=0), default=2, show_default=True,
              help="Judge a mutant on no further case once cases of this many shapes (and --min-kills), smallest "
                   "first, have failed it; 0: on every case.")
@exits_on_signals
def power(paths, backend_spec, json_path, max_size, filter_text, timeout, hunt, budget_text, seed, no_write, min_kills,
          show_kills, enough_kills):
    """Measure a suite's power: the planted bugs it catches, and the right variants it passes.

    \b
    PATHS are case files or directories, or operator SPECs (YAML): their default suites
    (network up to --max-size, random, boundary, invalid, stress, fast_path) are generated into a temporary
    directory first.  Each kernel's cases are judged, as `opcase run` judges them, against
    mutants of the base (generic planted bugs: rounding toward zero, flushed subnormals, a
    dropped or copied last partial block, a repeated last row or column, batch n computed as
    batch 0, accumulation in the tensor dtype, H and W swapped, an optional input ignored, an
    int param off by one, each parameter check left out; and the kernel's own planted bugs)
    and controls (legitimate variants that must pass).  A kill by cases of fewer than
    --min-kills distinct shapes is named FRAGILE (a warning: the exit status is unchanged).
    With --hunt, each kernel's spec is then searched for cases that kill the bugs left alive
    (within every limit and check; value regimes, dtypes, stress dims); each case found is shrunk
    and added to the spec's hunt suite (suites.hunt, which `opcase gen --suite hunt` makes), and
    why the rest stay alive is said: the nearest approach to a threshold, or no difference at all.
    Exit status: 0 every applicable generic mutant killed and every control passes; 1 a
    survivor, a failing control or a case the base fails; 2 usage or input error; 5 no case judged.
    With --hunt a survivor that a case found kills counts as killed (the hunt suite holds it).
    """

    if json_path is not None:
        check_writable("--json", json_path)
        # As `opcase run` does: a started, incomplete document first, so that a crash or a kill leaves
        # no earlier run's "ok": true behind.
        atomic_write(json_path, power_incomplete_json(backend_spec) + "\n")
    budget = _hunt_budget(budget_text) if hunt else None
    specs = [p for p in paths if Path(p).suffix in (".yaml", ".yml")]
    try:
        # A base other than opcase's own runs in a worker: whatever it does (os._exit(0) included)
        # is a failure of its call, judged here, never the end of this process.
        base = load_apart(backend_spec, timeout)
    except BackendLoadError as exc:
        raise InputError(str(exc)) from None
    # SIGTERM and SIGHUP unwind as Ctrl-C does (exits_on_signals: a Stopped no backend's except clause
    # swallows), so the generated suites (up to GBs) are removed and the base's worker is killed.
    doc, n_files, seconds = _measure_power(paths, specs, base, backend_spec, max_size, filter_text, min_kills,
                                           enough_kills or None)
    for line in power_table(doc, show_kills):
        click.echo(line)
    click.echo(f"{n_files} case file(s) in {seconds:.1f} s")
    if hunt:
        doc["hunt"] = _hunt(doc, specs, base, backend_spec, seed, budget, not no_write)
    if json_path:
        atomic_write(json_path, json.dumps({"complete": True, **doc}, indent=1, allow_nan=False) + "\n")
    if doc["summary"]["nothing_judged"] and not doc["base_problems"]:   # a failure outranks an empty run
        click.echo(f"exit status {EXIT_NOTHING_JUDGED}: the base {backend_spec} judged no case: nothing was measured",
                   err=True)
        sys.exit(EXIT_NOTHING_JUDGED)
    sys.exit(0 if doc["summary"]["ok"] else EXIT_FAILED)


def _hunt_budget(text: str):
    try:
        return Budget.parse(text)
    except BudgetError as exc:
        raise click.BadParameter(str(exc), param_hint="--budget") from None


def _hunt(doc: dict, specs, base, backend_spec: str, seed: int, budget, write: bool) -> dict:
    """`opcase power --hunt`: each kernel's bugs left alive hunted, what is found written into its
    spec's suites.hunt (unless not ``write``); the hunt's report, the power summary updated."""

    given = {}
    for path in specs:
        given.setdefault(load_spec(path).op, Path(path))
    # Each spec as the hunt starts: what it finds is written only into that very text.
    digests = {k: spec_digest(given.get(k) or spec_for(k).path) for k in alive(doc)}
    hunts = []
    with steps("hunted") as show:
        for kernel, names in sorted(alive(doc).items()):
            spec = load_spec(given[kernel]) if kernel in given else spec_for(kernel)
            hunts.append(hunt_kernel(spec, base, backend_spec, alive_bugs(spec, base.name, names), names, seed,
                                     budget, on_step=show))
    hunted = report(hunts, seed, budget)
    for line in lines(hunted):
        click.echo(line)
    for h in hunts:
        if not (write and h.found):
            continue
        path = given.get(h.kernel) or spec_for(h.kernel).path
        try:
            added = write_hunt(path, h.found, digests.get(h.kernel))
        except (SpecError, OSError, ValueError) as exc:
            raise click.ClickException(f"cannot add the hunt's cases to {path}: {exc}") from None
        click.echo(f"wrote {added} new hunt case(s) into {path} (suites.hunt; `opcase gen {path} --suite hunt` "
                   f"makes them)")
    # A bug counts as killed when the suite now holds a case that kills it: one written into its spec.
    killed = {(b["kernel"], b["name"]) for b in hunted["bugs"] if b["verdict"] == KILLED and write}
    left = [m for m in doc["mutants"] if m["verdict"] == "survived" and m["kind"] != "planted"
            and (m["kernel"], m["name"]) not in killed]
    summary = doc["summary"]
    summary["survived_after_hunt"] = len(left)
    summary["ok"] = (not summary["nothing_judged"] and not left and not summary["controls_failed"]
                     and not summary["base_problems"])
    return hunted


def _measure_power(paths, specs, base, backend_spec, max_size, filter_text, min_kills, enough_kills):
    """(report, case files, seconds) of `opcase power`: SPECs' default suites generated into a
    temporary directory (removed after), then every case measured."""

    with tempfile.TemporaryDirectory(prefix="opcase-power-") as generated:
        case_paths = [p for p in paths if p not in specs]
        if specs:
            missing = [p for p in specs if not Path(p).is_file()]
            if missing:
                raise InputError(f"no such spec: {', '.join(missing)}")
            click.get_current_context().invoke(gen, specs=tuple(specs), suite_text="all", count=None, seed=0,
                                               select=None, max_size=max_size, baseline=None, jobs=1, device=None,
                                               timeout=None, out_dir=generated, descriptor=None)
            case_paths.append(generated)
        files = run_files(case_paths, None, filter_text)
        started = time.monotonic()
        with progress_bar(files, "measuring") as advance:
            doc = measure_power(files, base, backend_spec, advance, min_kills, enough_kills,
                                reference_identity_error)
    return doc, len(files), time.monotonic() - started
