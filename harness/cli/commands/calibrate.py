"""`opcase calibrate`: trusted implementations judged against a suite's thresholds."""
from __future__ import annotations

import json
import sys
import time
from collections import Counter

import click

from gen.core.backend import BackendLoadError
from gen.core.casefile import atomic_write
from harness.backends import load_backend
from harness.studies.calibrate import BackendRun, calibration, table_lines as calibration_table
from harness.cli.common import (EXIT_FAILED, EXIT_NOTHING_JUDGED, InputError, check_writable, finite_seconds,
                                progress_bar, run_files)
from harness.judge.runner import RunOptions
from harness.judge.workers import run_cases, runs_isolated


@click.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("--backend", "backend_specs", multiple=True, required=True,
              help="A backend you trust (repeat for several): any --backend value of `opcase run`; "
                   "torch@cuda runs the torch backend on a GPU.")
@click.option("--json", "json_path", default=None, type=click.Path(dir_okay=False),
              help="Write the calibration (headroom per kernel/dtype/suite/backend, findings) as JSON.")
@click.option("--jobs", "-j", type=click.IntRange(min=1), default=None,
              help="Run each backend's cases in N worker processes.")
@click.option("--filter", "filter_text", default=None, help="Only cases whose OP/SUITE/NAME matches this regular expression.")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=None, callback=finite_seconds,
              help="Seconds a case (all its calls) may take, as `opcase run --timeout`; over it, the case is an "
                   "error (a finding).")
def calibrate(paths, backend_specs, json_path, jobs, filter_text, timeout):
    """Judge backends you trust on every case under PATHS: how close each comes to the thresholds.

    \b
    Per kernel, dtype and suite, each backend's headroom: the worst and the median over the
    cases of metric/threshold (the largest over a case's outputs), and the worst case.  Any case
    a trusted backend fails, or fails to run, is a finding.
    Exit status: 0 no findings; 1 findings; 2 usage or input error; 5 a backend judged no case.
    """

    if json_path is not None:
        check_writable("--json", json_path)
    files = run_files(paths, None, filter_text)
    specs = list(dict.fromkeys(backend_specs))   # each once, in the order given
    try:
        # As `opcase run` does: a backend other than opcase's own is loaded only in workers.
        backends = [None if runs_isolated(spec) else load_backend(spec) for spec in specs]
    except BackendLoadError as exc:
        raise InputError(str(exc)) from None
    # As `opcase run` does: a case that crashed its worker reruns alone.
    options = RunOptions(repro_options=("--timeout", f"{timeout:g}") if timeout is not None else
                         ("--jobs", "1") if jobs is not None else ())
    runs = []
    for spec, backend in zip(specs, backends):
        started = time.monotonic()
        with progress_bar(files, f"calibrating {spec}") as advance:
            try:
                results, origin = run_cases(files, backend, spec, options, lambda r: advance(r.key), jobs=jobs,
                                            timeout=timeout)
            except BackendLoadError as exc:
                raise InputError(str(exc)) from None
        runs.append(BackendRun(spec, origin, results))
        counts = ", ".join(f"{n} {s}" for s, n in sorted(Counter(r.status for r in results).items()))
        click.echo(f"{spec}: {len(results)} cases in {time.monotonic() - started:.1f} s: {counts}")
    doc = calibration(runs)
    for line in calibration_table(doc):
        click.echo(line)
    if json_path:
        atomic_write(json_path, json.dumps(doc, indent=1, allow_nan=False) + "\n")
    if doc["findings"]:
        sys.exit(EXIT_FAILED)
    if doc["summary"]["nothing_judged"]:
        click.echo(f"exit status {EXIT_NOTHING_JUDGED}: {', '.join(doc['summary']['nothing_judged'])} judged no case "
                   f"(every one skipped or mistrusted): no calibration of it", err=True)
        sys.exit(EXIT_NOTHING_JUDGED)
    sys.exit(0)
