"""`opcase run`: a backend run on cases and judged, with its reports, gate and exit status."""
from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import click

from gen.core.backend import BackendLoadError
from gen.core import case_keys
from gen.core.casefile import CaseFileError, atomic_write, find, mixed_versions, recorded_versions
from gen.core.registry import UnknownOp, known_ops, spec_for
from gen.core.spec import MAX_RANDOM_COUNT, SpecError
from gen.core.timing import TimingPlan
from gen.core.verdict import FAILED, MISTRUSTED, SKIPPED
from gen.generate import GenerationError
from harness.backends import load_backend, with_device
from harness.worker import confine
from harness.cli import ray_executor
from harness.cli.adjoint import adjoint_lines
from harness.cli.common import (BACKEND_ENV, EXIT_FAILED, EXIT_NOTHING_JUDGED, EXIT_RESULTS_UNWRITTEN, InputError,
                                check_distinct, check_writable, executor_options, exits_on_signals, finite_seconds,
                                implementation_of, planned_work, ray_resources, run_files, supported_lines)
from harness.cli.fresh import draw_seed, is_fresh, write_fresh
from harness.judge.fresh_kept import keep_dir_of, keep_fresh_failure, kept_lines
from harness.cli.ray_executor import ExecutorError
from harness.judge.efficiency import ProfileError, load_profile
from harness.judge.gate import BaselineError, GATE_FAILING, gate_summary, judge_against, load_baseline
from harness.reports.html_report import html_report, incomplete_html
from harness.reports.junit import incomplete_junit_xml, junit_xml
from harness.mluops.pr_report import incomplete_pr_report, pr_report
from harness.reports.report import Progress, attention_lines, fails, incomplete_json, judged, summary_text, to_json
from harness.judge.runner import RunOptions
from harness.judge.selection import case_key, in_shard
from harness.judge.workers import Stopped, load_apart, run_cases, runs_isolated


@click.command()
@click.argument("paths", nargs=-1, type=click.Path())
@click.option("--backend", "backend_spec", envvar=BACKEND_ENV, show_envvar=True, default=None,
              help="Required: the implementation to judge: module:attr (a run(request) function or an object "
                   "with run; found on the PYTHONPATH or in the current directory), exec:'COMMAND ...' (a "
                   "program in any language), an installed plugin's name (`opcase backends` lists them), "
                   "torch, or reference/lowp (opcase's own, to check the cases themselves).")
@click.option("--json", "json_path", default=None, type=click.Path(dir_okay=False), help="Write per-case results as JSON.")
@click.option("--junit", "junit_path", default=None, type=click.Path(dir_okay=False),
              help="Write JUnit XML for CI: a testcase per case, classname OP.SUITE.")
@click.option("--compare", "baseline_path", default=None, type=click.Path(dir_okay=False),
              help="Also fail on cases that passed in this baseline and do not now, or got slower "
                   "(see `opcase baseline update`).")
@click.option("--repeat", type=click.IntRange(min=1), default=None,
              help="Time N further calls of each valid case (after --warmup ones); record median and spread.")
@click.option("--warmup", type=click.IntRange(min=0), default=1, show_default=True,
              help="Untimed calls before the --repeat ones.")
@click.option("--bitwise", is_flag=True,
              help="With --repeat: every further call must return the judged call's outputs bit for bit "
                   "(only the same verdict, for kernels whose spec declares nondeterministic_sums); "
                   "otherwise the case is nondeterministic.")
@click.option("--html", "html_path", default=None, type=click.Path(dir_okay=False),
              help="Write a self-contained HTML report: counts, headroom, where each failing case's error sits.")
@click.option("--device-profile", "profile_path", default=None, type=click.Path(dir_okay=False),
              help="YAML with memory_bandwidth and peak_ops per dtype: report io and compute efficiency.")
@click.option("--jobs", "-j", type=click.IntRange(min=1), default=None,
              help="Run cases in N worker processes (a crash or hang then costs only its case).")
@click.option("--device", default=None, help="Device for the torch backend: cpu, cuda, cuda:1, ...")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=None, callback=finite_seconds,
              help="Seconds a case (all its calls) may take; over it, its worker is killed and the case "
                   "is an error.  Implies worker processes.  With an exec: backend, the seconds each run of "
                   "the command may take (it is killed; no workers needed).")
@click.option("--shard", "shard_text", default=None, help="I/N: run only shard I of N (1-based), stable by case name.")
@click.option("--filter", "filter_text", default=None, help="Only cases whose OP/SUITE/NAME matches this regular expression.")
@click.option("--exclude", "exclude_text", default=None,
              help="Leave out cases whose OP/SUITE/NAME matches this regular expression (after --filter).")
@click.option("--rerun-failed", "rerun_failed", multiple=True, type=click.Path(dir_okay=False),
              help="Only the cases that failed in this results file (of --json); repeat for several (e.g. one "
                   "per shard): the failures of all of them.  PATHS optional.")
@click.option("-x", "--exitfirst", "exitfirst", is_flag=True, help="Stop at the first failing case (--maxfail 1).")
@click.option("--maxfail", type=click.IntRange(min=1), default=None,
              help="Stop after N failing cases; the results then cover the cases run so far.")
@click.option("--allow-empty", is_flag=True,
              help="Exit 0, not 5, when no case is judged (none selected, e.g. an empty --shard, or every "
                   "one skipped or mistrusted).")
@click.option("--fresh", "fresh_count", type=click.IntRange(min=1), default=None,
              help="Also draw N new cases per kernel present under PATHS, as the random suite draws them from the "
                   "installed spec, with goldens computed now: cases no backend can have seen (judged like the "
                   "rest, filed as OP/fresh/NAME, removed after the run).")
@click.option("--fresh-seed", "fresh_seed", type=click.IntRange(min=0, max=2**63 - 1), default=None,
              help="The base seed of the --fresh cases (default: a new random one, printed, so that a run can be "
                   "repeated).")
@click.option("--keep-fresh", "keep_fresh", default=None, type=click.Path(file_okay=False),
              help="Where --fresh keeps its failing cases (OP/fresh/NAME; default: the directory of --json, "
                   "--junit or --html, else the current one), so that their REPRO lines rerun them.")
@click.option("-v", "--verbose", is_flag=True, help="Show details for passing cases too.")
@click.option("-q", "--quiet", is_flag=True,
              help="Print the summary alone (the results files still hold every case).")
@click.option("--explain", "explain_failures", is_flag=True,
              help="For each failed case, run the backend on it once more and say which known variant its "
                   "outputs match (as `opcase explain`): an EXPLAIN line in its report, the HTML and --json.")
@click.option("--report", "pr_report", nargs=2, default=None, type=(click.Choice(["mluops-pr"]), click.Path(dir_okay=False)),
              help="--report mluops-pr FILE: write the run as the \"3. Test Report\" of an mlu-ops pull request "
                   "(Markdown, in the template's sections; harness/mluops/PR_REPORT.md).")
@click.option("--adjoint", "adjoint", is_flag=True,
              help="Also check the backend's own forward and backward of each kernel pair in the run against each "
                   "other on fresh inputs, no golden (gen/REACH.md): an ADJOINT line per pair; a broken identity "
                   "exits 1.")
@executor_options
@exits_on_signals
def run(**arguments):
    """Run a backend on every case under PATHS and judge its outputs.

    \b
    Statuses: passed, failed, wrongly-accepted, wrongly-rejected, error, skipped, mistrusted,
    nondeterministic (--bitwise).
    Exit status: 0 at least one case judged and none fails; 1 any case fails or errors, or the
    --compare gate fails; 2 usage or input error; 3 a results file could not be written (full disk;
    they all say the run did not finish); 5 no case judged (none selected, or every one skipped or
    mistrusted; --allow-empty makes that 0); 130 interrupted (Ctrl-C); 128+N stopped by signal N
    (SIGTERM, SIGHUP).  Interrupted or stopped, it prints the partial summary and leaves --json and
    --junit saying that the run did not finish.
    Python backends other than opcase's own run only in worker processes, which call them;
    this process judges what they return, and never runs their code.
    """
    run_command(RunArguments(**arguments))


@dataclass
class RunArguments:
    """`opcase run`'s options, as click parsed them: the one record the command's steps read."""
    paths: tuple
    backend_spec: str | None
    json_path: str | None
    junit_path: str | None
    baseline_path: str | None
    repeat: int | None
    warmup: int
    bitwise: bool
    html_path: str | None
    profile_path: str | None
    jobs: int | None
    device: str | None
    timeout: float | None
    shard_text: str | None
    filter_text: str | None
    exclude_text: str | None
    rerun_failed: tuple
    exitfirst: bool
    maxfail: int | None
    allow_empty: bool
    verbose: bool
    quiet: bool
    explain_failures: bool
    executor: str
    address: str | None
    resources_text: str | None
    fresh_count: int | None = None
    fresh_seed: int | None = None
    keep_fresh: str | None = None
    pr_report: tuple | None = None   # ("mluops-pr", FILE) of --report
    adjoint: bool = False            # --adjoint (harness/cli/adjoint.py)
    # When the command started: JUnit's total time is the run's wall time.
    started: float = field(default_factory=time.monotonic, init=False)
    # Derived by _check_arguments: the shard as (I, N), the Ray task options (None: local).
    shard: tuple | None = field(default=None, init=False)
    resources: dict | None = field(default=None, init=False)

    @property
    def results_files(self) -> list[tuple[str, str | None]]:
        return [("--json", self.json_path), ("--junit", self.junit_path), ("--html", self.html_path),
                (PR_REPORT_OPTION, self.pr_report_path)]

    @property
    def pr_report_path(self) -> str | None:
        return self.pr_report[1] if self.pr_report else None


@dataclass
class _Outcome:
    """What running the cases gave: the results in case order, the backend's origin, whether --maxfail
    stopped the run."""
    results: list
    origin: str
    stopped_early: bool = False


def run_command(args: RunArguments) -> None:
    _check_arguments(args)
    selected = run_files(args.paths, args.rerun_failed, args.filter_text, args.exclude_text)
    _refuse_results_over_cases(args.results_files, find(args.paths) if args.paths else selected)
    files = [f for f in selected if in_shard(f, *args.shard)] if args.shard else selected
    _warn_mixed_versions(files)
    pool_timeout, exec_timeout = _split_timeout(args)
    try:
        profile = load_profile(args.profile_path) if args.profile_path else None
    except ProfileError as exc:
        raise InputError(f"--device-profile: {exc}") from None
    try:
        baseline = load_baseline(args.baseline_path) if args.baseline_path else None
    except BaselineError as exc:
        raise InputError(f"--compare: {exc}") from None
    # Every input is read: from here on the run either finishes or leaves its results files
    # saying that it did not.
    _start_results_files(args.json_path, args.junit_path, args.backend_spec, args.html_path, args.pr_report_path)
    fresh = _fresh_cases(files, args.fresh_count, args.fresh_seed, args.executor) if args.fresh_count else None
    if fresh is not None:
        files = files + fresh.files
    try:
        args.backend_spec = with_device(args.backend_spec, args.device)
        # Any other backend's code runs only in workers: this process, the judge, never imports it.
        backend = None if runs_isolated(args.backend_spec) else load_backend(args.backend_spec, exec_timeout)
    except BackendLoadError as exc:
        raise InputError(str(exc)) from None
    if backend is not None:
        _warn_declarations(backend, files)
    options = RunOptions(timing=TimingPlan(args.repeat or 0, args.warmup if args.repeat else 0), profile=profile,
                         repro_options=_repro_options(args), bitwise=args.bitwise,
                         error_maps=args.html_path is not None, exec_timeout=exec_timeout)
    outcome = _run_and_show(args, files, backend, options, pool_timeout, baseline, fresh)
    _report(args, files, len(selected), outcome, backend, pool_timeout, baseline, fresh)


def _check_arguments(args: RunArguments) -> None:
    """Usage errors, before any work; sets args.shard, args.resources and -x's maxfail."""
    if not args.backend_spec:
        raise InputError(f"give --backend (or set {BACKEND_ENV}): the implementation to judge, e.g. "
                         f"--backend mymodule:run; --backend reference checks the cases themselves")
    args.shard = _shard(args.shard_text)
    args.resources = ray_resources(args.executor, args.address, args.resources_text, args.jobs)
    if not args.paths and not args.rerun_failed:
        raise InputError("give case files or directories (PATHS), or --rerun-failed RESULTS.json")
    if args.bitwise and args.repeat is None:
        raise InputError("--bitwise compares repeated calls: give --repeat N too")
    if args.keep_fresh is not None and args.fresh_count is None:
        raise InputError("--keep-fresh keeps --fresh cases: give --fresh N too")
    if args.fresh_seed is not None and args.fresh_count is None:
        raise InputError("--fresh-seed is the seed of --fresh cases: give --fresh N too")
    if args.verbose and args.quiet:
        raise InputError("-v and -q contradict each other: give one")
    if args.exitfirst:
        if args.maxfail not in (None, 1):
            raise InputError("-x is --maxfail 1: give one of them")
        args.maxfail = 1
    for option, path in args.results_files:
        if path is not None:
            check_writable(option, path)
    check_distinct([("--compare", args.baseline_path), ("--device-profile", args.profile_path), *args.results_files,
                    *(("--rerun-failed", path) for path in args.rerun_failed or ())])


def _split_timeout(args: RunArguments) -> tuple[float | None, float | None]:
    """(the timeout the worker pool enforces, the one an exec: backend enforces itself): --timeout goes
    to the exec backend when there is one, since it kills just the command and quotes its output, so
    it needs no worker process (those of --jobs get it in their run options)."""
    if args.timeout is None or not args.backend_spec.startswith("exec:"):
        return args.timeout, None
    return None, args.timeout


def _repro_options(args: RunArguments) -> tuple[str, ...]:
    """The options that change a case's verdict, so that its REPRO line gives the same one."""
    repro = []
    if args.timeout is not None:
        repro += ["--timeout", f"{args.timeout:g}"]
    elif args.jobs is not None or args.resources is not None:
        repro += ["--jobs", "1"]   # keep a crash isolated when rerun
    if args.repeat is not None:
        repro += ["--repeat", str(args.repeat), "--warmup", str(args.warmup)] + (["--bitwise"] if args.bitwise else [])
    return tuple(repro)


def _run_and_show(args: RunArguments, files, backend, options, pool_timeout, baseline, fresh) -> _Outcome:
    """Run every case, showing each result as it comes; on an interruption, the partial summary."""
    progress = Progress(len(files), sys.stdout.isatty(), args.verbose, args.quiet,
                        per_kernel=Counter(case_key(f).split("/")[0] for f in files), weights=planned_work(files))
    order = {str(f): number for number, f in enumerate(files)}
    seen: list = []   # the results so far, for --maxfail and an interrupted run's summary
    keep_dir = keep_dir_of(args.keep_fresh, args.json_path, args.junit_path, args.html_path)

    def on_result(result):
        if is_fresh(result.path, fresh):
            result.repro = _fresh_repro(result, args.paths, fresh)
            keep_fresh_failure(result, fresh, keep_dir, args.backend_spec, options)
        if args.explain_failures and result.status == FAILED:
            result.explanation = _explanation(result, args.backend_spec, args.timeout)
        if baseline is not None:
            judge_against(result, baseline.get(result.key))
            if result.gate in GATE_FAILING and args.baseline_path not in result.repro:
                result.repro += f" --compare {shlex.quote(str(args.baseline_path))}"
        seen.append(result)   # before it is shown: an interruption after the line keeps the case
        progress.case(result)
        if args.maxfail is not None and sum(map(fails, seen)) >= args.maxfail:
            raise _EnoughFailures()

    in_order = lambda results: sorted(results, key=lambda r: order.get(r.path, len(order)))   # noqa: E731
    try:
        if args.resources is None:
            results, origin = run_cases(files, backend, args.backend_spec, options, on_result, jobs=args.jobs,
                                        timeout=pool_timeout)
        else:
            results = _run_on_ray(files, args.backend_spec, options, on_result, args.address, args.resources,
                                  pool_timeout)
            origin = backend.origin if backend is not None else f"{args.backend_spec}, loaded in Ray tasks"
        return _Outcome(results, origin)
    except BackendLoadError as exc:
        raise InputError(str(exc)) from None
    except _EnoughFailures:
        # The workers are stopped (run_cases unwound); the results are those of the cases run.
        origin = backend.origin if backend is not None else f"{args.backend_spec}, loaded in worker processes"
        return _Outcome(in_order(seen), origin, stopped_early=True)
    except (KeyboardInterrupt, Stopped):
        progress.close()
        # What was judged before the interruption; the results files keep saying that the run
        # did not finish (written at its start).
        _echo_attention(seen, args.quiet, args.verbose)
        click.echo(summary_text(in_order(seen)) + f" (of {len(files)}: interrupted)")
        raise
    finally:
        progress.close()


def _report(args: RunArguments, files, n_selected: int, outcome: _Outcome, backend, pool_timeout, baseline,
            fresh) -> None:
    """The closing lines, the results files and the exit status."""
    results = outcome.results
    gate = gate_summary(results, args.baseline_path, baseline) if baseline is not None else None
    runs_here = backend is not None and args.jobs is None and pool_timeout is None   # else in workers (run_cases)
    confined = confine.run_summary(args.backend_spec, runs_here)
    click.echo(confined)
    keyed_line, keyed = keyed_summary(results, "" if runs_here else _key_dir_exposed(args.backend_spec))
    click.echo(keyed_line)
    _echo_attention(results, args.quiet, args.verbose)   # as pytest's short summary: before the totals, which stay the last line
    if outcome.stopped_early:
        click.echo(f"stopped after {args.maxfail} failing case(s) (--maxfail/-x): {len(files) - len(results)} of "
                   f"{len(files)} case(s) not run")
    click.echo(summary_text(results, gate))
    if fresh is not None:
        click.echo(_fresh_summary(results, fresh))
        for line in kept_lines(results, fresh.kept,
                               keep_dir_of(args.keep_fresh, args.json_path, args.junit_path, args.html_path)):
            click.echo(line)
    adjoint_broken = _echo_adjoint(files, args.backend_spec, args.timeout) if args.adjoint else False
    run_info = {"backend_origin": outcome.origin, "workers_confined": confined, "cases_keyed": keyed,
                "in_process": runs_here,
                "jobs": args.jobs, "timeout": args.timeout,
                "repeat": args.repeat, "warmup": args.warmup if args.repeat else None, "bitwise": args.bitwise,
                "shard": args.shard_text, "filter": args.filter_text, "exclude": args.exclude_text,
                "device_profile": args.profile_path, "compare": args.baseline_path, "maxfail": args.maxfail,
                "not_run": len(files) - len(results)}
    if args.resources is not None:
        run_info["executor"] = {"name": "ray", "address": args.address, "resources": args.resources}
    if fresh is not None:
        run_info["fresh"] = {"count": fresh.count, "seed": fresh.seed, "kernels": fresh.kernels}
    spec = args.backend_spec
    _write_results_files([("--junit", args.junit_path, lambda: junit_xml(results, spec, time.monotonic() - args.started)),
                          ("--html", args.html_path, lambda: html_report(results, spec, gate, run_info)),
                          ("--json", args.json_path, lambda: to_json(results, spec, gate, run_info)),
                          (PR_REPORT_OPTION, args.pr_report_path, lambda: pr_report(results, spec, run_info))], spec)
    if any(fails(r) for r in results) or (gate is not None and not gate["ok"]) or adjoint_broken:
        sys.exit(EXIT_FAILED)
    if not judged(results):
        for line in _why_nothing_judged(results, backend, spec, args.shard_text, n_selected, args.rerun_failed):
            click.echo(line, err=True)
        if not args.allow_empty:
            click.echo(f"exit status {EXIT_NOTHING_JUDGED}: a run that judges nothing is not a pass "
                       f"(--allow-empty accepts it)", err=True)
            sys.exit(EXIT_NOTHING_JUDGED)
    sys.exit(0)


def keyed_summary(results, exposed: str = "") -> tuple[str, dict]:
    """The run's "cases keyed: ..." line and its results-file record (gen.core.case_keys); ``exposed``:
    the directory the workers may read that holds the key, if one does."""
    counts = Counter(r.keyed for r in results)
    reason = case_keys.unavailable_reason()
    record = {"keyed": counts[case_keys.KEYED], "refused": counts[case_keys.REFUSED], "of": len(results),
              "ledger": None if reason else str(case_keys.key_dir()), "unavailable": reason or None}
    line = f"cases keyed: {record['keyed']} of {len(results)}; {record['refused']} refused"
    if record["refused"]:
        line += " (rewritten after opcase wrote them: errors)"
    if reason:
        line += f" (no key ledger: {reason})"
    elif record["keyed"] + record["refused"] < len(results):
        line += " (the others were not written at their path by this user's opcase: committed, copied or moved)"
    if exposed and not reason:
        record["key_readable_by_workers"] = exposed
        line += (f"; warning: the key directory lies within {exposed}, which the workers may read "
                 f"(set ${case_keys.KEY_DIR_VARIABLE} elsewhere)")
    return line, record


def _key_dir_exposed(backend_spec: str) -> str:
    try:
        return confine.readable_within(str(case_keys.key_dir()), backend_spec)
    except case_keys.KeysUnavailable:
        return ""


def _incomplete(option: str, backend_spec: str) -> str:
    """What results file ``option`` says until the run has finished."""
    return {"--json": incomplete_json, "--junit": incomplete_junit_xml, "--html": incomplete_html,
            PR_REPORT_OPTION: incomplete_pr_report}[option](backend_spec)


PR_REPORT_OPTION = "--report mluops-pr"


def _start_results_files(json_path, junit_path, backend_spec: str, html_path=None, pr_report_path=None) -> None:
    """Replace the results files with ones saying that the run did not finish, so that a run cut
    short (killed, crashed, stopped by a signal) can never leave an older, complete-looking report."""

    for option, path in (("--json", json_path), ("--junit", junit_path), ("--html", html_path),
                         (PR_REPORT_OPTION, pr_report_path)):
        if path:
            try:
                atomic_write(path, _incomplete(option, backend_spec))
            except OSError as exc:
                raise InputError(f"{option}: cannot write {path}: {exc.strerror or exc}") from None


def _write_results_files(writes, backend_spec: str) -> None:
    """Write each (option, path, render) whole; if one cannot be written (a full disk), those
    already written go back to saying that the run did not finish, and the run exits
    EXIT_RESULTS_UNWRITTEN with one line: no set of results files is ever half complete."""

    written = []
    for option, path, render in writes:
        if not path:
            continue
        try:
            atomic_write(path, render())
        except OSError as exc:
            for done_option, done_path in written:
                with contextlib.suppress(OSError):   # the incomplete marker is small; if even it fails, say so below
                    atomic_write(done_path, _incomplete(done_option, backend_spec))
            click.echo(f"Error: {option}: cannot write {path}: {exc.strerror or exc}; the results files say "
                       f"that the run did not finish", err=True)
            sys.exit(EXIT_RESULTS_UNWRITTEN)
        written.append((option, path))


def _shard(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
    if not m or not 1 <= int(m.group(1)) <= int(m.group(2)):
        raise click.BadParameter(f"{text!r} is not I/N with 1 <= I <= N (shards are numbered from 1)")
    return int(m.group(1)), int(m.group(2))


def _refuse_results_over_cases(results_files, case_files) -> None:
    """A results file must not be a case file (or a case's sidecar) of the run: writing it
    would destroy what the run judges."""
    cases = {os.path.realpath(f) for f in case_files}
    for option, path in results_files:
        if path is None:
            continue
        real = os.path.realpath(path)
        case = next((c for c in cases if real == c or real.startswith(c + ".")), None)
        if case is not None:
            raise InputError(f"{option} {path} is {'a case file' if real == case else 'a sidecar of the case file'} "
                             f"{case} that the run reads; give another file")


def _warn_mixed_versions(files) -> None:
    versions = recorded_versions(files)
    for op, count in mixed_versions(versions).items():
        click.echo(f"warning: the {op} cases come from {count} versions of its spec or generator "
                   f"(an -o reused across versions?); their verdicts are not comparable", err=True)
    for op, found in sorted(versions.items()):
        try:
            spec = spec_for(op)
        except (UnknownOp, SpecError):
            continue   # each of its cases is an error that says why
        others = sorted({sha[:12] for sha, _ in found if sha != spec.sha256})
        if others:
            click.echo(f"warning: {op} cases record spec sha256 {', '.join(others)}, not that of the spec this run "
                       f"loads ({spec.path}, {spec.sha256[:12]}): their checks and thresholds are another "
                       f"version's", err=True)


def _echo_adjoint(files, backend_spec: str, timeout) -> bool:
    """--adjoint: the ADJOINT lines (harness/cli/adjoint.py); whether a pair's identity is broken."""
    lines, broken = adjoint_lines(set(recorded_versions(files)), load_apart(backend_spec, timeout), draw_seed())
    for line in lines or ["ADJOINT  no forward/backward pair among the run's kernels"]:
        click.echo(line)
    return broken


def _fresh_cases(files, count: int, seed: int | None, executor: str | None):
    """--fresh: write the fresh cases of the kernels among ``files`` into a temporary directory,
    removed when the command ends however it ends (on Ray: under the working directory, which
    every node sees)."""

    if count > MAX_RANDOM_COUNT:
        raise InputError(f"--fresh {count}: at most {MAX_RANDOM_COUNT} cases per kernel, as a random suite")
    kernels = sorted(recorded_versions(files))
    seed = draw_seed() if seed is None else seed
    where = tempfile.mkdtemp(prefix="opcase-fresh-", dir=os.getcwd() if executor == "ray" else None)
    written: list = []
    def remove():   # the directory and the ledger's entries for its files (gen.core.case_keys)
        keys = case_keys.ledger_or_none()
        for path in written if keys is not None else ():
            keys.forget(path)
        shutil.rmtree(where, ignore_errors=True)
    click.get_current_context().call_on_close(remove)
    click.echo(f"fresh: drawing {count} new case(s) per kernel ({', '.join(kernels) or 'none found'}) with "
               f"--fresh-seed {seed}")
    try:
        fresh = write_fresh(kernels, count, seed, Path(where), written)
    except (SpecError, UnknownOp, GenerationError, BackendLoadError) as exc:
        raise InputError(f"--fresh: {exc}") from None
    if fresh.without:
        click.echo(f"warning: --fresh: no random suite to draw from in the spec of {', '.join(fresh.without)}",
                   err=True)
    return fresh


def _fresh_repro(result, paths, fresh) -> str:
    """A fresh case's REPRO line: its file goes with the run, so the line draws it again (the same
    seed over the same PATHS gives the same cases), narrowed to its kernel."""
    start = f"opcase run {shlex.quote(str(result.path))} "
    rest = result.repro[len(start):] if result.repro.startswith(start) else ""
    return (f"opcase run {' '.join(map(shlex.quote, map(str, paths)))} {rest} --fresh {fresh.count} "
            f"--fresh-seed {fresh.seed} --filter {shlex.quote('^' + re.escape(result.op) + '/')}").replace("  ", " ")


def _fresh_summary(results, fresh) -> str:
    drawn = [r for r in results if is_fresh(r.path, fresh)]
    counts = ", ".join(f"{n} {status}" for status, n in Counter(r.status for r in drawn).most_common())
    return (f"fresh: {len(drawn)} case(s) drawn at run time with --fresh-seed {fresh.seed} "
            f"({', '.join(fresh.kernels) or 'no kernel'}): {counts or 'none'}")


class _EnoughFailures(Exception):
    """--maxfail failing cases reached: unwind the run (its workers stopped) and report what ran."""


def _echo_attention(results, quiet: bool = False, verbose: bool = False) -> None:
    """pytest's "short test summary": every case that needs attention, with its REPRO line (none
    with -q: the summary alone)."""
    lines = [] if quiet else attention_lines(results, verbose)
    if lines:
        click.echo("cases that need attention:")
        for line in lines:
            click.echo(line)


def _explanation(result, backend_spec: str, timeout) -> str:
    """`opcase explain`'s headline for a failed case (its backend run again, the way explain runs it)."""
    from harness.studies.explain import explain_case   # the explain command's module, loaded only when asked for

    try:
        return explain_case(Path(result.path), backend_spec, timeout)["headline"]
    except (BackendLoadError, CaseFileError) as exc:
        return f"not explained: {exc}"


def _run_on_ray(files, backend_spec, options, on_result, address, resources, timeout):

    try:
        return ray_executor.run_on_cluster(files, backend_spec, options, on_result, address, resources, timeout,
                         notify=lambda line: click.echo(line, err=True))
    except ExecutorError as exc:
        raise InputError(str(exc)) from None


def _warn_declarations(backend, files) -> None:
    """Before the run, once: what the backend declares that names no kernel or dtype it could be
    given (exec: lines of `COMMAND --list-supported`), on stderr."""

    warnings_of = getattr(implementation_of(backend), "declaration_warnings", None)
    if warnings_of is None:
        return
    known = set(known_ops()) | {case_key(f).split("/")[0] for f in files}
    for line in warnings_of(known):
        click.echo(line, err=True)


def _why_nothing_judged(results, backend, backend_spec: str, shard_text, n_selected: int, rerun_failed) -> list[str]:
    """Why a run judged no case: what was (not) selected, or what the backend declared."""

    if not results:
        if shard_text:
            return [f"no case judged: shard {shard_text} holds none of the {n_selected} case(s) selected"]
        return [f"no case judged: no case to rerun: none of them failed in {', '.join(rerun_failed)}"]
    skipped = [r for r in results if r.status == SKIPPED]
    n_mistrusted = sum(r.status == MISTRUSTED for r in results)
    counts = ", ".join(f"{n} {status}" for status, n in ((SKIPPED, len(skipped)), (MISTRUSTED, n_mistrusted)) if n)
    lines = [f"no case judged: {len(results)} case(s), {counts}"]
    if skipped:
        of_kernel: dict[str, set[str]] = {}
        for r in skipped:
            of_kernel.setdefault(r.op or r.path, set()).add(r.dtype)
        lines.append("  skipped as unsupported: " + "; ".join(f"{op} {' '.join(sorted(d for d in dtypes if d))}".rstrip()
                                                          for op, dtypes in sorted(of_kernel.items())))
        if backend is None:   # it ran only in workers: this process never loaded it
            lines.append(f"  `opcase backends {shlex.quote(backend_spec)}` lists what backend {backend_spec} declares")
        else:
            note = getattr(implementation_of(backend), "probe_note", "")
            lines.append(f"  backend {backend_spec} declares" + (f" ({note})" if note else "") + ":")
            lines += [f"    {line}" for line in supported_lines(backend)]
    if n_mistrusted:
        lines.append("  mistrusted: passed, but on cases that cannot tell a right kernel from a wrong one "
                     "(their WARN lines say why)")
    return lines
