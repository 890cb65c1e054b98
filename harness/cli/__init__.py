"""The `opcase` command line.

Each command imports what it needs when it runs (the imports marked "lazily: fast --help"): the
module itself loads only click and the standard library, so that `opcase --help` (and an option
Click refuses) comes back in about the time of `import click` (tests/bench/bench_startup.py
measures it, tests/test_startup.py keeps numpy and the commands' modules out).
"""
from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import re
import shlex
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import click


SIZE_UNITS = {"": 1, "B": 1, "K": 10**3, "KB": 10**3, "KIB": 1024, "M": 10**6, "MB": 10**6, "MIB": 1024**2,
              "G": 10**9, "GB": 10**9, "GIB": 1024**3, "T": 10**12, "TB": 10**12, "TIB": 1024**4}


class InputError(click.ClickException):
    """A usage or input problem: exit status 2, one clear line, no traceback."""
    exit_code = 2


# `opcase run`'s other exit statuses (README: Checking your implementation).  5, as pytest's
# "no tests ran": a run that judged nothing is neither a pass nor a failure of the backend.
EXIT_FAILED = 1
# The run finished but could not write a results file (a full disk): they all say it did not finish.
EXIT_RESULTS_UNWRITTEN = 3
# What `opcase run` judges when --backend is not given: no default, so that the reference is never
# judged by accident (a green run that checked nothing).
BACKEND_ENV = "OPCASE_BACKEND"
EXIT_NOTHING_JUDGED = 5
EXIT_INTERRUPTED = 130


def _check_writable(option: str, path, directory: bool = False) -> None:
    """Refuse, before any work, an output that cannot be written where ``option`` says.

    A file target must not be a directory or a special file; a directory target must not be a
    file.  What does not exist yet is fine when the nearest directory above it that exists is
    writable (the writer creates the rest).
    """
    target = Path(os.path.abspath(path))
    what = "directory" if directory else "file"
    try:
        if target.exists():
            if directory and not target.is_dir():
                raise InputError(f"{option} {path}: exists and is not a directory")
            if not directory and not target.is_file():
                raise InputError(f"{option} {path}: exists and is not a regular file")
        above = target if directory and target.is_dir() else target.parent
        while not above.exists() and not above.is_symlink() and above != above.parent:
            above = above.parent
        if not above.is_dir():
            raise InputError(f"{option} {path}: cannot create the {what}: {above} is not a directory")
        if not os.access(above, os.W_OK | os.X_OK):
            raise InputError(f"{option} {path}: cannot write the {what}: no write permission in {above}")
    except OSError as exc:
        raise InputError(f"{option} {path}: cannot write the {what}: {exc.strerror or exc}") from None


def _check_distinct(named: list[tuple[str, str | None]]) -> None:
    """Refuse two options that name one file: the later write would destroy the other."""
    seen: dict[str, str] = {}
    for option, path in named:
        if path is None:
            continue
        real = os.path.realpath(path)
        if real in seen:
            raise InputError(f"{seen[real]} and {option} name the same file {path}")
        seen[real] = option


def parse_size(text: str) -> int:
    """Bytes of a size like 64MB, 1.5GiB or 1000000, exactly (no float overflow for long numbers)."""
    from decimal import Decimal
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([A-Za-z]*)\s*", text or "")
    if not m or m.group(2).upper() not in SIZE_UNITS:
        raise click.BadParameter(f"{text!r} is not a size like 64MB, 1.5GiB or 1000000")
    return int(Decimal(m.group(1)) * SIZE_UNITS[m.group(2).upper()])


def _size_option(ctx, param, value):
    """Click callback: a size option's bytes, or a usage error naming the option."""
    return None if value is None else parse_size(value)


def _finite_seconds(ctx, param, value):
    """Click callback: inf or nan seconds would never time anything out, and the OS's timers
    hold no wait past MAX_TIMEOUT_S."""
    from gen.core.timing import MAX_TIMEOUT_S  # lazily: fast --help
    if value is not None and not math.isfinite(value):
        raise click.BadParameter(f"{value} is not a finite number of seconds")
    if value is not None and value > MAX_TIMEOUT_S:
        raise click.BadParameter(f"{value:g} s is over the longest timeout, {MAX_TIMEOUT_S:g} s (10 days)")
    return value


def _suites(text: str) -> list[str]:
    from gen.core.spec import SUITES  # lazily: fast --help
    names = list(SUITES) if text.strip() == "all" else [s.strip() for s in text.split(",") if s.strip()]
    unknown = [s for s in names if s not in SUITES]
    if unknown or not names:
        raise click.BadParameter(f"unknown suite(s) {unknown}; use a comma list of {', '.join(SUITES)} or all")
    return names


def _exits_on_signals(command):
    """``command`` with SIGTERM and SIGHUP unwinding it as Ctrl-C does (workers and commands killed,
    temporary files removed), then exiting 128 + the signal's number; Ctrl-C exits 130 (128 +
    SIGINT, as shells and pytest's "interrupted" do), not Click's "Aborted!" and 1."""
    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        from harness.workers import Stopped, stop_on_signals  # lazily: fast --help
        try:
            with stop_on_signals():
                return command(*args, **kwargs)
        except Stopped as exc:
            click.echo(f"opcase {command.__name__}: stopped by {exc.name} before it finished", err=True)
            sys.exit(128 + exc.signum)
        except KeyboardInterrupt:
            click.echo(f"opcase {command.__name__}: interrupted (Ctrl-C) before it finished", err=True)
            sys.exit(EXIT_INTERRUPTED)
    return wrapper


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="opcase")
def main():
    """Test cases with golden outputs for accelerator kernels, and a harness that judges any
    implementation against them.

    \b
    Typical use:
      opcase gen specs/*.yaml --suite all --max-size 64MB -o out   # cases from the specs
      opcase run out --backend reference                           # the reference passes them
      opcase run out --backend mypkg.kernels:run --junit junit.xml # judge your implementation
      opcase run out/carafe_forward --backend exec:'./my_runner'   # ... in any language
      opcase show out/psamask_forward/boundary/map_1x1-psa_type0-float32.opcase
    """


def _executor_options(command):
    """--executor, --address, --resources (README: More than one machine)."""
    command = click.option("--resources", "resources_text", default=None,
                           help="With --executor ray: what each case's task needs, as JSON: "
                                "'{\"num_gpus\": 1}' for a CUDA backend (keys num_cpus, num_gpus, memory, "
                                "resources); default one CPU.")(command)
    command = click.option("--address", default=None,
                           help="With --executor ray: the cluster's address (default: RAY_ADDRESS, or "
                                "the cluster `ray start` started on this machine).")(command)
    return click.option("--executor", type=click.Choice(["local", "ray"]), default="local", show_default=True,
                        help="Where cases run: here, or one Ray task per case on a Ray cluster "
                             "(`pip install 'opcase[ray]'`; case files on storage every node sees).")(command)


def _ray_resources(executor: str, address, resources_text, jobs) -> dict | None:
    """The Ray task options of --executor ray (None for local), or a usage error."""
    from harness.cli.ray_executor import ExecutorError, import_ray, parse_resources  # lazily: fast --help

    if executor != "ray":
        for option, value in (("--address", address), ("--resources", resources_text)):
            if value is not None:
                raise InputError(f"{option} is for --executor ray")
        return None
    if jobs is not None:
        raise InputError("--jobs is for the local executor: on Ray, the cluster's resources decide how many "
                         "cases run at once")
    try:
        resources = parse_resources(resources_text)
        import_ray()
        return resources
    except ExecutorError as exc:
        raise InputError(str(exc)) from None


@main.command()
@click.argument("specs", nargs=-1, type=click.Path(dir_okay=False))
@click.option("--suite", "suite_text", default="all", show_default=True,
              help="Comma list of network, random, boundary, invalid, stress, fast_path, hunt; or all.")
@click.option("--count", type=click.IntRange(min=0), default=None,
              help="Random cases per spec (default: the spec's; at most 100000, as in a spec).")
@click.option("--seed", type=int, default=0, show_default=True, help="Base seed; every case is fixed by (spec, suite, seed).")
@click.option("--select", default=None, help="Only cases whose name matches this regular expression.")
@click.option("--max-size", "max_size", default=None, callback=_size_option,
              help="Skip cases whose tensors exceed this many bytes (e.g. 64MB); they are listed.")
@click.option("--baseline", default=None, help="Backend for dynamic thresholds (default: the spec's, mmcv as the docs say; lowp is stricter).")
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=None,
              help="Generate cases in N worker processes (default: one per usable CPU when the cases "
                   "to write take 64 MB or more, as memory allows; else 1).")
@click.option("--device", default=None, help="Device for a torch --baseline: cpu, cuda, ...")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=None, callback=_finite_seconds,
              help="Seconds each call of a --baseline backend other than opcase's own may take (it runs in a "
                   "worker process, as `opcase run` runs it); over it, generation stops with an error.")
@click.option("--case", "descriptor", default=None,
              help="Write just the case of this one-line descriptor (as REPRO's CASE line and `opcase shrink` "
                   "print it), byte for byte; SPECS optional (default: the installed spec of its op).")
@click.option("-o", "--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Output directory.")
@click.option("-v", "--verbose", is_flag=True,
              help="List each case skipped over --max-size (else one line per kernel).")
@_executor_options
@_exits_on_signals
def gen(specs, suite_text, count, seed, select, max_size, baseline, jobs, device, timeout, out_dir, descriptor,
        executor, address, resources_text, verbose=False):
    """Generate suites of cases from operator SPECS (YAML) into OUT.

    A case already in OUT whole (its checksum holds) from the same spec version, suite, seed and
    baseline is kept, not written again: an interrupted gen, run again, resumes.  Without a
    terminal it prints a line per kernel done and at least every 30 s, with an ETA.

    Exit status: 0 cases written (or kept); 2 usage, spec or input error; 5 no case written."""
    from gen.core.backend import BackendLoadError  # lazily: fast --help
    from gen.core.registry import UnknownOp  # lazily: fast --help
    from gen.core.spec import MAX_RANDOM_COUNT, SpecError, load_spec  # lazily: fast --help
    from gen.generate import (GenerationError, builds_in_memory, case_path, foreign_case,  # lazily: fast --help
                              input_bytes_in_memory, plan_suite, total_bytes, written_whole)
    from gen.core.casefile import physical_memory  # lazily: fast --help
    from gen.jobs import Task, default_jobs, largest_first, write_all  # lazily: fast --help
    from harness.report import Heartbeat  # lazily: fast --help
    from harness.workers import check_loads, load_apart  # lazily: fast --help
    if descriptor is not None:
        source = click.get_current_context().get_parameter_source
        given = [option for option, name in (("--suite", "suite_text"), ("--count", "count"), ("--seed", "seed"),
                                             ("--select", "select"), ("--max-size", "max_size"), ("--jobs", "jobs"))
                 if source(name) != click.core.ParameterSource.DEFAULT]
        if given:
            raise InputError(f"--case makes the one case its descriptor names: it takes no {', '.join(given)}")
        _gen_described(descriptor, specs, baseline, device, out_dir, timeout)
        return
    if not specs:
        raise InputError("give operator SPECS (YAML), or --case DESCRIPTOR")
    if count is not None and count > MAX_RANDOM_COUNT:   # before any work: planning alone would never end
        raise InputError(f"--count {count}: at most {MAX_RANDOM_COUNT} random cases per spec, as in a spec")
    from concurrent.futures.process import BrokenProcessPool


    suites = _suites(suite_text)
    resources = _ray_resources(executor, address, resources_text, jobs)
    _check_writable("-o", out_dir, directory=True)
    try:
        pattern = re.compile(select) if select else None
    except re.error as exc:
        raise InputError(f"--select: bad regular expression: {exc}") from None
    tasks, skipped, counts, needed, kept = [], [], {}, 0, 0
    sizes, largest_in_memory = {}, 0
    # A baseline other than opcase's own runs in a worker process: gen never runs its code.
    loader = functools.partial(load_apart, timeout=timeout)
    try:
        baseline = _baseline_on_device(baseline, device)
        for spec in [load_spec(p) for p in specs]:
            _refuse_foreign_cases(foreign_case(Path(out_dir), spec, seed), out_dir, spec)
            if spec.criteria.mode == "dynamic":
                check_loads(baseline or spec.criteria.baseline, timeout)   # fail early on a bad --baseline
            for suite in suites:
                counts.setdefault(spec.op, {})[suite] = 0
                for index, plan in enumerate(plan_suite(spec, suite, count, seed)):
                    if pattern and not pattern.search(plan.name):
                        continue
                    size = total_bytes(spec, plan)
                    if max_size is not None and size > max_size:
                        skipped.append((spec.op, f"{spec.op}/{suite}/{plan.name}", size))
                        continue
                    path = case_path(Path(out_dir), plan, spec.op)
                    if written_whole(path, spec, plan, baseline):
                        counts[spec.op][suite] += 1
                        kept += 1
                        continue
                    needed += size
                    if builds_in_memory(spec, plan):
                        _refuse_over_memory(size, f"{spec.op}/{suite}/{plan.name}")
                        largest_in_memory = max(largest_in_memory, size)
                    else:
                        largest_in_memory = max(largest_in_memory, input_bytes_in_memory(spec, plan))
                    tasks.append(Task(str(spec.path), spec.op, suite, plan.name, index, count, seed, baseline,
                                      str(path), loader))
                    sizes[tasks[-1]] = size
    except (SpecError, GenerationError, BackendLoadError) as exc:
        raise InputError(str(exc)) from None
    _refuse_over_free_space(needed, out_dir)
    written = [0]
    heartbeat = None if sys.stdout.isatty() else Heartbeat("generated", Counter(task.op for task in tasks),
                                                           total_weight=sum(sizes.values()))
    with _progress(len(tasks), "generating") as advance:
        def done(task, size):
            counts[task.op][task.suite] += 1
            written[0] += size
            advance(f"{task.op}/{task.suite}/{task.name}")
            if heartbeat is not None:
                heartbeat.tick(task.op, f"{written[0] / 1e6:.1f} MB written", sizes[task])
        try:
            if resources is None:
                if jobs is None:
                    jobs = default_jobs(len(tasks), needed, largest_in_memory, physical_memory())
                write_all(largest_first(tasks, sizes) if jobs > 1 else tasks, jobs, done)
            else:
                _write_on_ray(tasks, done, address, resources)
        except (SpecError, GenerationError, BackendLoadError, UnknownOp) as exc:   # UnknownOp: op no baseline knows
            raise InputError(str(exc)) from None
        except OSError as exc:
            raise click.ClickException(f"cannot write cases to {out_dir}: {exc}") from None
        except BrokenProcessPool:
            raise click.ClickException("a generator worker process died (out of memory?); "
                                       "rerun with fewer --jobs") from None
    for op, by_suite in counts.items():
        click.echo(f"{op}: " + ", ".join(f"{n} {s}" for s, n in by_suite.items()))
    for line in _skipped_lines(skipped, verbose):
        click.echo(line)
    n_written = sum(sum(c.values()) for c in counts.values()) - kept
    click.echo(f"wrote {n_written} cases ({written[0] / 1e6:.1f} MB) to {out_dir}"
               + (f"; kept {kept} already there whole (same spec, suite and seed)" if kept else ""))
    if n_written + kept == 0:   # as `opcase run`: a step that made nothing is not a success
        why = "every case is over --max-size" if skipped else \
            f"--select {select!r} matches no case" if select else "the suites chosen hold no case"
        click.echo(f"exit status {EXIT_NOTHING_JUDGED}: no case written: {why}", err=True)
        sys.exit(EXIT_NOTHING_JUDGED)


def _skipped_lines(skipped, verbose: bool) -> list[str]:
    """gen's cases over --max-size: each with -v, else one counted line per kernel."""
    if verbose:
        return [f"skipped (over --max-size): {key} ({size / 1e6:.1f} MB)" for _, key, size in skipped]
    by_op: dict[str, list[int]] = {}
    for op, _, size in skipped:
        by_op.setdefault(op, []).append(size)
    return [f"skipped (over --max-size): {len(sizes)} {op} case(s), {_size_text(min(sizes))} to "
            f"{_size_text(max(sizes))} (-v lists them)" for op, sizes in by_op.items()]


def _refuse_foreign_cases(found, out_dir, spec) -> None:
    if found is not None:
        path, origin = found
        raise InputError(f"{Path(out_dir) / spec.op} holds cases of another spec version, generator or --seed ({path}: "
                         f"{origin}); remove that directory or give another -o")


def _refuse_over_memory(size: int, what: str) -> None:
    """A case built whole in memory that cannot fit in it is refused, not run into the OOM killer."""
    from gen.core.casefile import physical_memory  # lazily: fast --help
    memory = physical_memory()
    if memory is not None and size > memory:
        raise InputError(f"{what}: its tensors take {size / 1e6:.1f} MB, it is built in memory and this machine "
                         f"has {memory / 1e6:.1f} MB; give a --max-size below that to skip such cases")


def _refuse_over_free_space(needed: int, out_dir) -> None:
    """Tensors that cannot fit on the disk are refused before the first case is written."""
    import shutil
    existing = next(p for p in (Path(out_dir).absolute(), *Path(out_dir).absolute().parents) if p.exists())
    free = shutil.disk_usage(existing).free
    if needed > free:
        raise InputError(f"the cases' tensors take {needed / 1e6:.1f} MB, {existing} has {free / 1e6:.1f} MB free; "
                         f"give --max-size to skip the largest cases")


def _baseline_on_device(baseline: str | None, device: str | None) -> str | None:
    """gen's --baseline as it runs on --device (BackendLoadError for a backend without devices)."""
    from harness.backends import with_device  # lazily: fast --help

    if device is None:
        return baseline
    if baseline is None:
        raise InputError("--device needs --baseline torch")
    return with_device(baseline, device)


def _gen_described(descriptor: str, specs, baseline, device, out_dir, timeout=None) -> None:
    """`opcase gen --case`: write the one case of ``descriptor``."""
    from gen.core.backend import BackendLoadError  # lazily: fast --help
    from gen.core.descriptor import DescriptorError  # lazily: fast --help
    from gen.core.spec import SpecError  # lazily: fast --help
    from gen.descriptor import write_described  # lazily: fast --help
    from gen.generate import GenerationError  # lazily: fast --help
    from harness.workers import load_apart  # lazily: fast --help

    _check_writable("-o", out_dir, directory=True)
    try:
        baseline = _baseline_on_device(baseline, device)
        path = write_described(descriptor, Path(out_dir), functools.partial(load_apart, timeout=timeout), baseline,
                               specs)
    except (DescriptorError, SpecError, GenerationError, BackendLoadError) as exc:
        raise InputError(str(exc)) from None
    except OSError as exc:
        raise click.ClickException(f"cannot write the case to {out_dir}: {exc}") from None
    click.echo(f"wrote {path}")


def _write_on_ray(tasks, done, address, resources) -> None:

    from harness.cli import ray_executor  # lazily: fast --help
    from harness.cli.ray_executor import ExecutorError, TaskLost  # lazily: fast --help
    try:
        ray_executor.write_all(tasks, done, address, resources)
    except ExecutorError as exc:
        raise InputError(str(exc)) from None
    except TaskLost as exc:
        raise click.ClickException(str(exc)) from None


@contextlib.contextmanager
def _progress(total: int, label: str):
    """advance(item) per finished item: a bar on a terminal, nothing otherwise."""
    if not sys.stdout.isatty() or total == 0:
        yield lambda item: None
        return
    with click.progressbar(length=total, label=label, item_show_func=lambda item: item or "",
                           show_pos=True) as bar:
        yield lambda item: bar.update(1, item)


def _incomplete(option: str, backend_spec: str) -> str:
    """What results file ``option`` says until the run has finished."""
    from harness.html_report import incomplete_html  # lazily: fast --help
    from harness.junit import incomplete_junit_xml  # lazily: fast --help
    from harness.report import incomplete_json  # lazily: fast --help
    return {"--json": incomplete_json, "--junit": incomplete_junit_xml, "--html": incomplete_html}[option](backend_spec)


def _start_results_files(json_path, junit_path, backend_spec: str, html_path=None) -> None:
    """Replace the results files with ones saying that the run did not finish, so that a run cut
    short (killed, crashed, stopped by a signal) can never leave an older, complete-looking report."""
    from gen.core.casefile import atomic_write  # lazily: fast --help

    for option, path in (("--json", json_path), ("--junit", junit_path), ("--html", html_path)):
        if path:
            try:
                atomic_write(path, _incomplete(option, backend_spec))
            except OSError as exc:
                raise InputError(f"{option}: cannot write {path}: {exc.strerror or exc}") from None


def _write_results_files(writes, backend_spec: str) -> None:
    """Write each (option, path, render) whole; if one cannot be written (a full disk), those
    already written go back to saying that the run did not finish, and the run exits
    EXIT_RESULTS_UNWRITTEN with one line: no set of results files is ever half complete."""
    from gen.core.casefile import atomic_write  # lazily: fast --help

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


def _run_files(paths, rerun_failed, filter_text, exclude_text=None) -> list[Path]:
    """The case files a run covers: PATHS (or the failures of every --rerun-failed file), then
    --filter, then --exclude."""
    from gen.core.casefile import find  # lazily: fast --help
    from harness.selection import case_key  # lazily: fast --help

    missing = [p for p in paths if not Path(p).exists()]
    if missing:
        raise InputError(f"no such file or directory: {', '.join(missing)}")
    special = [p for p in paths if not (Path(p).is_dir() or Path(p).is_file())]
    if special:   # a device, a FIFO, a socket: reading one would never end, or block
        raise InputError(f"not a case file or a directory (a case file is a regular file): {', '.join(special)}")
    files = find(paths)
    if paths and not files:
        raise InputError(f"no .opcase files under {', '.join(paths)}")
    if rerun_failed:
        failed_paths, failed_keys = _failed_in_all(rerun_failed)
        if paths:
            files = [f for f in files if str(f.resolve()) in failed_paths or case_key(f) in failed_keys]
        else:
            files = [Path(p) for p in sorted(failed_paths)]
            gone = [str(f) for f in files if not f.exists()]
            if gone:
                raise InputError(f"--rerun-failed: {len(gone)} failing case file(s) are gone, e.g. {gone[0]}; "
                                 f"give the directory they were moved to as PATHS")
    if filter_text:
        try:
            pattern = re.compile(filter_text)
        except re.error as exc:
            raise InputError(f"--filter: bad regular expression: {exc}") from None
        files = [f for f in files if pattern.search(case_key(f))]
        if not files:
            raise InputError(f"no case matches --filter {filter_text!r} (it is matched against OP/SUITE/NAME)")
    if exclude_text:
        try:
            pattern = re.compile(exclude_text)
        except re.error as exc:
            raise InputError(f"--exclude: bad regular expression: {exc}") from None
        files = [f for f in files if not pattern.search(case_key(f))]
    return files


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


def _failed_in_all(results_paths) -> tuple[set[str], set[str]]:
    """The union of the failures of every --rerun-failed file (e.g. one per shard); an unreadable
    or unfinished one is refused, as a single one is."""
    from harness.gate import BaselineError, load_results  # lazily: fast --help
    from harness.selection import failed_in  # lazily: fast --help
    paths, keys = set(), set()
    for results_path in results_paths:
        try:
            failed_paths, failed_keys = failed_in(load_results(results_path))
        except BaselineError as exc:
            raise InputError(f"--rerun-failed: {exc}") from None
        paths |= failed_paths
        keys |= failed_keys
    return paths, keys


def _warn_mixed_versions(files) -> None:
    from gen.core.casefile import mixed_versions, recorded_versions  # lazily: fast --help
    from gen.core.registry import UnknownOp, spec_for  # lazily: fast --help
    from gen.core.spec import SpecError  # lazily: fast --help
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


@main.command()
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
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=None, callback=_finite_seconds,
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
@click.option("-v", "--verbose", is_flag=True, help="Show details for passing cases too.")
@click.option("-q", "--quiet", is_flag=True,
              help="Leave out passing cases (skipped ones stay counted; failures, the summary and the list of "
                   "cases that need attention stay).")
@click.option("--explain", "explain_failures", is_flag=True,
              help="For each failed case, run the backend on it once more and say which known variant its "
                   "outputs match (as `opcase explain`): an EXPLAIN line in its report, the HTML and --json.")
@_executor_options
@_exits_on_signals
def run(paths, backend_spec, json_path, junit_path, baseline_path, repeat, warmup, bitwise, html_path, profile_path, jobs,
        device, timeout, shard_text, filter_text, exclude_text, rerun_failed, exitfirst, maxfail, allow_empty,
        verbose, quiet, explain_failures, executor, address, resources_text, fresh_count=None,
        fresh_seed=None):
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
    from gen.core.backend import BackendLoadError  # lazily: fast --help
    from gen.core.casefile import find  # lazily: fast --help
    from harness.cli.fresh import is_fresh  # lazily: fast --help
    from gen.core.timing import TimingPlan  # lazily: fast --help
    from harness.backends import load_backend, with_device  # lazily: fast --help
    from harness.backends.exec_backend import TIMEOUT_ENV  # lazily: fast --help
    from harness.efficiency import ProfileError, load_profile  # lazily: fast --help
    from harness.gate import (BaselineError, GATE_FAILING, gate_summary, judge_against,  # lazily: fast --help
                              load_baseline)
    from harness.html_report import html_report  # lazily: fast --help
    from harness.junit import junit_xml  # lazily: fast --help
    from harness.report import Progress, fails, judged, summary_text, to_json  # lazily: fast --help
    from harness.runner import RunOptions  # lazily: fast --help
    from harness.selection import case_key, in_shard  # lazily: fast --help
    from harness.workers import Stopped, run_cases, runs_isolated  # lazily: fast --help
    from gen.core.verdict import FAILED  # lazily: fast --help

    if not backend_spec:
        raise InputError(f"give --backend (or set {BACKEND_ENV}): the implementation to judge, e.g. "
                         f"--backend mymodule:run; --backend reference checks the cases themselves")
    shard = _shard(shard_text)
    resources = _ray_resources(executor, address, resources_text, jobs)
    if not paths and not rerun_failed:
        raise InputError("give case files or directories (PATHS), or --rerun-failed RESULTS.json")
    if bitwise and repeat is None:
        raise InputError("--bitwise compares repeated calls: give --repeat N too")
    if fresh_seed is not None and fresh_count is None:
        raise InputError("--fresh-seed is the seed of --fresh cases: give --fresh N too")
    if verbose and quiet:
        raise InputError("-v and -q contradict each other: give one")
    if exitfirst:
        if maxfail not in (None, 1):
            raise InputError("-x is --maxfail 1: give one of them")
        maxfail = 1
    for option, path in (("--json", json_path), ("--junit", junit_path), ("--html", html_path)):
        if path is not None:
            _check_writable(option, path)
    results_files = [("--json", json_path), ("--junit", junit_path), ("--html", html_path)]
    _check_distinct([("--compare", baseline_path), ("--device-profile", profile_path), *results_files,
                     *(("--rerun-failed", path) for path in rerun_failed or ())])
    selected = _run_files(paths, rerun_failed, filter_text, exclude_text)
    _refuse_results_over_cases(results_files, find(paths) if paths else selected)
    files = [f for f in selected if in_shard(f, *shard)] if shard else selected
    _warn_mixed_versions(files)
    pool_timeout = timeout
    if timeout is not None and backend_spec.startswith("exec:"):
        # The exec backend enforces --timeout itself, on each call: it kills just the command and
        # quotes its output, so it needs no worker process (those of --jobs read the same variable).
        import os
        previous = os.environ.get(TIMEOUT_ENV)
        os.environ[TIMEOUT_ENV] = repr(timeout)
        # Only for this run: an in-process caller (a test, a script) gets its environment back.
        click.get_current_context().call_on_close(
            lambda: os.environ.pop(TIMEOUT_ENV, None) if previous is None else os.environ.update({TIMEOUT_ENV: previous}))
        pool_timeout = None
    try:
        profile = load_profile(profile_path) if profile_path else None
    except ProfileError as exc:
        raise InputError(f"--device-profile: {exc}") from None
    try:
        baseline = load_baseline(baseline_path) if baseline_path else None
    except BaselineError as exc:
        raise InputError(f"--compare: {exc}") from None
    # Every input is read: from here on the run either finishes or leaves its results files
    # saying that it did not.
    _start_results_files(json_path, junit_path, backend_spec, html_path)
    fresh = _fresh_cases(files, fresh_count, fresh_seed, executor) if fresh_count else None
    if fresh is not None:
        files = files + fresh.files
    try:
        backend_spec = with_device(backend_spec, device)
        # Any other backend's code runs only in workers: this process, the judge, never imports it.
        backend = None if runs_isolated(backend_spec) else load_backend(backend_spec)
    except BackendLoadError as exc:
        raise InputError(str(exc)) from None
    runs_here = backend is not None and jobs is None and pool_timeout is None   # else in workers (run_cases)
    if backend is not None:
        _warn_declarations(backend, files)

    # The options that change a case's verdict, so that its REPRO line gives the same one.
    repro = []
    if timeout is not None:
        repro += ["--timeout", f"{timeout:g}"]
    elif jobs is not None or resources is not None:
        repro += ["--jobs", "1"]   # keep a crash isolated when rerun
    if repeat is not None:
        repro += ["--repeat", str(repeat), "--warmup", str(warmup)] + (["--bitwise"] if bitwise else [])
    options = RunOptions(timing=TimingPlan(repeat or 0, warmup if repeat else 0), profile=profile,
                         repro_options=tuple(repro), bitwise=bitwise, error_maps=html_path is not None)

    progress = Progress(len(files), sys.stdout.isatty(), verbose, quiet,
                        per_kernel=Counter(case_key(f).split("/")[0] for f in files))
    order = {str(f): number for number, f in enumerate(files)}
    seen: list = []   # the results so far, for --maxfail and an interrupted run's summary

    def on_result(result):
        if is_fresh(result.path, fresh):
            result.repro = _fresh_repro(result, paths, fresh)
        if explain_failures and result.status == FAILED:
            result.explanation = _explanation(result, backend_spec, timeout)
        if baseline is not None:
            judge_against(result, baseline.get(result.key))
            if result.gate in GATE_FAILING and baseline_path not in result.repro:
                result.repro += f" --compare {shlex.quote(str(baseline_path))}"
        seen.append(result)   # before it is shown: an interruption after the line keeps the case
        progress.case(result)
        if maxfail is not None and sum(map(fails, seen)) >= maxfail:
            raise _EnoughFailures()

    stopped_early = False
    try:
        if resources is None:
            results, origin = run_cases(files, backend, backend_spec, options, on_result, jobs=jobs,
                                        timeout=pool_timeout)
        else:
            results = _run_on_ray(files, backend_spec, options, on_result, address, resources, pool_timeout)
            origin = backend.origin if backend is not None else f"{backend_spec}, loaded in Ray tasks"
    except BackendLoadError as exc:
        raise InputError(str(exc)) from None
    except _EnoughFailures:
        # The workers are stopped (run_cases unwound); the results are those of the cases run.
        results = sorted(seen, key=lambda r: order.get(r.path, len(order)))
        origin = backend.origin if backend is not None else f"{backend_spec}, loaded in worker processes"
        stopped_early = True
    except (KeyboardInterrupt, Stopped):
        progress.close()
        # What was judged before the interruption; the results files keep saying that the run
        # did not finish (written at its start).
        _echo_attention(seen)
        click.echo(summary_text(sorted(seen, key=lambda r: order.get(r.path, len(order))))
                   + f" (of {len(files)}: interrupted)")
        raise
    finally:
        progress.close()
    gate = gate_summary(results, baseline_path, baseline) if baseline is not None else None
    _echo_attention(results)   # as pytest's short summary: before the totals, which stay the last line
    if stopped_early:
        click.echo(f"stopped after {maxfail} failing case(s) (--maxfail/-x): {len(files) - len(results)} of "
                   f"{len(files)} case(s) not run")
    click.echo(summary_text(results, gate))
    if fresh is not None:
        click.echo(_fresh_summary(results, fresh))
    run_info = {"backend_origin": origin, "in_process": runs_here, "jobs": jobs, "timeout": timeout, "repeat": repeat,
                "warmup": warmup if repeat else None, "bitwise": bitwise, "shard": shard_text, "filter": filter_text,
                "exclude": exclude_text, "device_profile": profile_path, "compare": baseline_path,
                "maxfail": maxfail, "not_run": len(files) - len(results)}
    if resources is not None:
        run_info["executor"] = {"name": "ray", "address": address, "resources": resources}
    if fresh is not None:
        run_info["fresh"] = {"count": fresh.count, "seed": fresh.seed, "kernels": fresh.kernels}
    _write_results_files([("--junit", junit_path, lambda: junit_xml(results, backend_spec)),
                          ("--html", html_path, lambda: html_report(results, backend_spec, gate, run_info)),
                          ("--json", json_path, lambda: to_json(results, backend_spec, gate, run_info))],
                         backend_spec)
    if any(fails(r) for r in results) or (gate is not None and not gate["ok"]):
        sys.exit(EXIT_FAILED)
    if not judged(results):
        for line in _why_nothing_judged(results, backend, backend_spec, shard_text, len(selected), rerun_failed):
            click.echo(line, err=True)
        if not allow_empty:
            click.echo(f"exit status {EXIT_NOTHING_JUDGED}: a run that judges nothing is not a pass "
                       f"(--allow-empty accepts it)", err=True)
            sys.exit(EXIT_NOTHING_JUDGED)
    sys.exit(0)


def _fresh_cases(files, count: int, seed: int | None, executor: str | None):
    """--fresh: write the fresh cases of the kernels among ``files`` into a temporary directory,
    removed when the command ends however it ends (on Ray: under the working directory, which
    every node sees)."""
    from gen.core.backend import BackendLoadError  # lazily: fast --help
    from gen.core.casefile import recorded_versions  # lazily: fast --help
    from gen.core.registry import UnknownOp  # lazily: fast --help
    from gen.core.spec import MAX_RANDOM_COUNT, SpecError  # lazily: fast --help
    from gen.generate import GenerationError  # lazily: fast --help
    from harness.cli.fresh import draw_seed, write_fresh  # lazily: fast --help

    if count > MAX_RANDOM_COUNT:
        raise InputError(f"--fresh {count}: at most {MAX_RANDOM_COUNT} cases per kernel, as a random suite")
    kernels = sorted(recorded_versions(files))
    seed = draw_seed() if seed is None else seed
    where = tempfile.mkdtemp(prefix="opcase-fresh-", dir=os.getcwd() if executor == "ray" else None)
    click.get_current_context().call_on_close(lambda: shutil.rmtree(where, ignore_errors=True))
    click.echo(f"fresh: drawing {count} new case(s) per kernel ({', '.join(kernels) or 'none found'}) with "
               f"--fresh-seed {seed}")
    try:
        fresh = write_fresh(kernels, count, seed, Path(where))
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
    from harness.cli.fresh import is_fresh  # lazily: fast --help
    drawn = [r for r in results if is_fresh(r.path, fresh)]
    counts = ", ".join(f"{n} {status}" for status, n in Counter(r.status for r in drawn).most_common())
    return (f"fresh: {len(drawn)} case(s) drawn at run time with --fresh-seed {fresh.seed} "
            f"({', '.join(fresh.kernels) or 'no kernel'}): {counts or 'none'}")


class _EnoughFailures(Exception):
    """--maxfail failing cases reached: unwind the run (its workers stopped) and report what ran."""


def _echo_attention(results) -> None:
    """pytest's "short test summary": every case that needs attention, with its REPRO line."""
    from harness.report import attention_lines  # lazily: fast --help
    lines = attention_lines(results)
    if lines:
        click.echo("cases that need attention:")
        for line in lines:
            click.echo(line)


def _explanation(result, backend_spec: str, timeout) -> str:
    """`opcase explain`'s headline for a failed case (its backend run again, the way explain runs it)."""
    from gen.core.backend import BackendLoadError  # lazily: fast --help
    from gen.core.casefile import CaseFileError  # lazily: fast --help
    from harness.explain import explain_case   # the explain command's module, loaded only when asked for

    try:
        return explain_case(Path(result.path), backend_spec, timeout)["headline"]
    except (BackendLoadError, CaseFileError) as exc:
        return f"not explained: {exc}"


def _run_on_ray(files, backend_spec, options, on_result, address, resources, timeout):

    from harness.cli import ray_executor  # lazily: fast --help
    from harness.cli.ray_executor import ExecutorError  # lazily: fast --help
    try:
        return ray_executor.run_on_cluster(files, backend_spec, options, on_result, address, resources, timeout,
                         notify=lambda line: click.echo(line, err=True))
    except ExecutorError as exc:
        raise InputError(str(exc)) from None


def _implementation(backend):
    """The object behind a loaded backend's run (an exec: command, a plugin's instance), or None."""
    return getattr(backend.run, "__self__", None)


def _warn_declarations(backend, files) -> None:
    """Before the run, once: what the backend declares that names no kernel or dtype it could be
    given (exec: lines of `COMMAND --list-supported`), on stderr."""
    from gen.core.registry import known_ops  # lazily: fast --help
    from harness.selection import case_key  # lazily: fast --help

    warnings_of = getattr(_implementation(backend), "declaration_warnings", None)
    if warnings_of is None:
        return
    known = set(known_ops()) | {case_key(f).split("/")[0] for f in files}
    for line in warnings_of(known):
        click.echo(line, err=True)


def _why_nothing_judged(results, backend, backend_spec: str, shard_text, n_selected: int, rerun_failed) -> list[str]:
    """Why a run judged no case: what was (not) selected, or what the backend declared."""
    from gen.core.verdict import MISTRUSTED, SKIPPED  # lazily: fast --help

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
            note = getattr(_implementation(backend), "probe_note", "")
            lines.append(f"  backend {backend_spec} declares" + (f" ({note})" if note else "") + ":")
            lines += [f"    {line}" for line in _supported_lines(backend)]
    if n_mistrusted:
        lines.append("  mistrusted: passed, but on cases that cannot tell a right kernel from a wrong one "
                     "(their WARN lines say why)")
    return lines


@main.command("backends")
@click.argument("names", nargs=-1)
def backends_(names):
    """List the backends --backend accepts, where each comes from, and the kernels and dtypes it
    supports: built-ins, exec:COMMAND, and plugins (entry-point group opcase.backends).

    Give NAMES (any --backend value, e.g. exec:'./my_kernels') to describe just those.
    Cases of a kernel or dtype a backend does not support are skipped by `opcase run`, not failed.
    """
    from gen.core.backend import BUILTIN_NAMES, BackendLoadError  # lazily: fast --help
    from harness import plugins  # lazily: fast --help
    from harness.backends import load_backend  # lazily: fast --help

    # (name, loader): what to describe and how to load it; exec:COMMAND alone has no loader
    if names:
        entries = [(n, lambda n=n: load_backend(n)) for n in names]
    else:
        entries = [(n, lambda n=n: load_backend(n)) for n in BUILTIN_NAMES]
        entries.append(("exec:COMMAND", None))
        entries += [(ep.name, lambda ep=ep: plugins.load(ep)) for ep in plugins.entry_points()]
    failed = False
    for name, loader in entries:
        if loader is None:
            click.echo(f"{name}\n    built-in: runs `COMMAND ... REQUEST RESPONSE` per case, any language "
                       f"(README: External implementations)\n    kernels: those `COMMAND --list-supported` "
                       f"prints; `opcase backends exec:'COMMAND'` shows them")
            continue
        try:
            backend = loader()
        except BackendLoadError as exc:
            failed = True
            click.echo(f"{name}\n    unavailable: {exc}")
            continue
        click.echo(f"{name}\n    {backend.origin}")
        for line in _supported_lines(backend):
            click.echo(f"    {line}")
        # exec: how its kernels were learnt (`COMMAND --list-supported`, or not at all)
        note = getattr(_implementation(backend), "probe_note", "")
        if note:
            click.echo(f"    ({note})")
    if names and failed:
        sys.exit(2)


@main.command("kernels")
@click.option("--cases", "cases_dir", default=None, type=click.Path(file_okay=False),
              help="Also count each kernel's cases in this committed suite (default: ./cases if it exists).")
@click.option("--markdown", is_flag=True, help="Print a GitHub markdown table.")
def kernels_(cases_dir, markdown):
    """List the kernels opcase knows, found from the specs and each kernel's own modules: their
    thresholds, how many cases the main command makes of each (`gen --suite all --max-size 64MB`) and
    their size, how many a committed suite holds, and which optional parts each has (mmcv emulation,
    torch kernel, planted bugs, mlu-ops mapping; README: Adding a kernel)."""
    from harness.cli import kernel_table  # lazily: fast --help

    if cases_dir is None:
        cases_dir = "cases" if Path("cases").is_dir() else None
    elif not Path(cases_dir).is_dir():
        raise InputError(f"--cases {cases_dir}: no such directory")
    rows = kernel_table.kernel_rows(Path(cases_dir) if cases_dir else None)
    click.echo(kernel_table.markdown(rows) if markdown else kernel_table.columns(rows))


def _supported_lines(backend) -> list[str]:
    """'OP  DTYPE ...' for each known kernel, from the backend's supports(op, dtype)."""
    from gen.core.registry import known_ops, spec_for  # lazily: fast --help

    ops = known_ops()
    width = max(map(len, ops), default=0)
    lines = []
    for op in ops:
        try:
            dtypes = [d for d in spec_for(op).dtypes if backend.supports(op, d)]
            text = " ".join(dtypes) if dtypes else "not supported"
        except Exception as exc:  # noqa: BLE001 - a broken supports() is the backend's; show it
            text = f"supports() raised {type(exc).__name__}: {exc}"
        lines.append(f"{op:{width}}  {text}")
    return lines


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("--backend", "backend_specs", multiple=True, required=True,
              help="A backend you trust (repeat for several): any --backend value of `opcase run`; "
                   "torch@cuda runs the torch backend on a GPU.")
@click.option("--json", "json_path", default=None, type=click.Path(dir_okay=False),
              help="Write the calibration (headroom per kernel/dtype/suite/backend, findings) as JSON.")
@click.option("--jobs", "-j", type=click.IntRange(min=1), default=None,
              help="Run each backend's cases in N worker processes.")
@click.option("--filter", "filter_text", default=None, help="Only cases whose OP/SUITE/NAME matches this regular expression.")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=None, callback=_finite_seconds,
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
    from gen.core.backend import BackendLoadError  # lazily: fast --help
    from gen.core.casefile import atomic_write  # lazily: fast --help
    from harness.backends import load_backend  # lazily: fast --help
    from harness.calibrate import BackendRun, calibration, table_lines as calibration_table  # lazily: fast --help
    from harness.runner import RunOptions  # lazily: fast --help
    from harness.workers import run_cases, runs_isolated  # lazily: fast --help

    if json_path is not None:
        _check_writable("--json", json_path)
    files = _run_files(paths, None, filter_text)
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
        with _progress(len(files), f"calibrating {spec}") as advance:
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


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("--backend", "backend_spec", default="reference", show_default=True,
              help="The base the mutants are made from (any --backend value of `opcase run`); it must pass "
                   "the suite.")
@click.option("--json", "json_path", default=None, type=click.Path(dir_okay=False),
              help="Write the report (per kernel; every mutant and control with its verdict) as JSON.")
@click.option("--max-size", "max_size", default="64MB", show_default=True, callback=_size_option,
              help="With SPECs: the network cases generated are those up to this many bytes of tensors.")
@click.option("--filter", "filter_text", default=None, help="Only cases whose OP/SUITE/NAME matches this regular expression.")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=None, callback=_finite_seconds,
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
    from gen.core.backend import BackendLoadError  # lazily: fast --help
    from gen.core.casefile import atomic_write  # lazily: fast --help
    from harness.power import table_lines as power_table  # lazily: fast --help
    from harness.workers import load_apart  # lazily: fast --help
    import signal


    if json_path is not None:
        _check_writable("--json", json_path)
    budget = _hunt_budget(budget_text) if hunt else None
    specs = [p for p in paths if Path(p).suffix in (".yaml", ".yml")]
    try:
        # A base other than opcase's own runs in a worker: whatever it does (os._exit(0) included)
        # is a failure of its call, judged here, never the end of this process.
        base = load_apart(backend_spec, timeout)
    except BackendLoadError as exc:
        raise InputError(str(exc)) from None
    # A SIGTERM unwinds like an exception, so the generated suites (up to GBs) are removed.
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    try:
        doc, n_files, seconds = _measure_power(paths, specs, base, backend_spec, max_size, filter_text, min_kills,
                                               enough_kills or None)
    finally:
        signal.signal(signal.SIGTERM, previous)
    for line in power_table(doc, show_kills):
        click.echo(line)
    click.echo(f"{n_files} case file(s) in {seconds:.1f} s")
    if hunt:
        doc["hunt"] = _hunt(doc, specs, base, backend_spec, seed, budget, not no_write)
    if json_path:
        atomic_write(json_path, json.dumps(doc, indent=1, allow_nan=False) + "\n")
    if doc["summary"]["nothing_judged"] and not doc["base_problems"]:   # a failure outranks an empty run
        click.echo(f"exit status {EXIT_NOTHING_JUDGED}: the base {backend_spec} judged no case: nothing was measured",
                   err=True)
        sys.exit(EXIT_NOTHING_JUDGED)
    sys.exit(0 if doc["summary"]["ok"] else EXIT_FAILED)


def _hunt_budget(text: str):
    from harness.cli.hunt import Budget, BudgetError  # lazily: fast --help
    try:
        return Budget.parse(text)
    except BudgetError as exc:
        raise click.BadParameter(str(exc), param_hint="--budget") from None


def _hunt(doc: dict, specs, base, backend_spec: str, seed: int, budget, write: bool) -> dict:
    """`opcase power --hunt`: each kernel's bugs left alive hunted, what is found written into its
    spec's suites.hunt (unless not ``write``); the hunt's report, the power summary updated."""
    from gen.core.registry import spec_for  # lazily: fast --help
    from gen.core.spec import SpecError, load_spec  # lazily: fast --help
    from gen.hunt_entries import write_hunt  # lazily: fast --help
    from harness.cli.hunt import KILLED, alive, alive_bugs, hunt_kernel, lines, report  # lazily: fast --help

    given = {}
    for path in specs:
        given.setdefault(load_spec(path).op, Path(path))
    hunts = []
    with _status_line() as show:
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
            added = write_hunt(path, h.found)
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
    from harness.power import measure as measure_power  # lazily: fast --help


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
        files = _run_files(case_paths, None, filter_text)
        started = time.monotonic()
        with _progress(len(files), "measuring") as advance:
            doc = measure_power(files, base, backend_spec, advance, min_kills, enough_kills)
    return doc, len(files), time.monotonic() - started


@main.group()
def baseline():
    """Baselines for `opcase run --compare`: the last good run, changed only by `baseline update`."""


@baseline.command("update")
@click.argument("results_paths", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("-o", "--out", "out_path", required=True, type=click.Path(dir_okay=False),
              help="The baseline to create or update (cases not in RESULTS keep their entries).")
@click.option("--allow-failing", is_flag=True, help="Record failing cases too (as failing: they gate nothing).")
def baseline_update(results_paths, out_path, allow_failing):
    """Record the cases of RESULTS (files of `opcase run --json`, e.g. one per shard) in a baseline.

    Refuses (exit 1) when any of them failed, unless --allow-failing.
    """
    from gen.core.casefile import atomic_write  # lazily: fast --help
    from harness.gate import (BaselineError, BaselineRefused, load_baseline, load_results,  # lazily: fast --help
                              updated_baseline)
    missing = [p for p in results_paths if not Path(p).is_file()]
    if missing:
        raise InputError(f"no such results file: {', '.join(missing)}")
    _check_writable("-o", out_path)
    try:
        docs = [load_results(p) for p in results_paths]
        existing = load_baseline(out_path) if Path(out_path).exists() else None
    except BaselineError as exc:
        raise InputError(str(exc)) from None
    try:
        doc, counts = updated_baseline(docs, existing, allow_failing)
    except BaselineRefused as exc:
        raise click.ClickException(str(exc)) from None
    atomic_write(out_path, json.dumps(doc, indent=1) + "\n")
    click.echo(f"baseline {out_path}: {len(doc['cases'])} cases ({counts['added']} added, "
               f"{counts['changed']} changed, {counts['unchanged']} unchanged)")


@main.command()
@click.argument("case_path", type=click.Path(exists=True, dir_okay=False))
@click.option("--values", "n_values", default=6, show_default=True, help="How many leading values to show per tensor.")
def show(case_path, n_values):
    """Print a case readably, with a command that reruns just it."""
    from gen.core.casefile import CaseFileError, load  # lazily: fast --help
    from harness.runner import repro_command  # lazily: fast --help
    import numpy as np  # lazily: fast --help

    try:
        case = load(case_path)
    except CaseFileError as exc:
        raise InputError(str(exc)) from None
    click.echo(f"{case.op} / {case.suite} / {case.name}")
    if case.note:
        click.echo(f"  why: {case.note}")
    click.echo(f"  expect: {case.expect}" + (f" (check {case.expect_check}: {case.expect_message})"
                                            if case.expect != "ok" else ""))
    click.echo("  params: " + ", ".join(f"{k}={v}" for k, v in case.params.items()))
    for kind, tensors in (("input", case.inputs), ("output", case.outputs)):
        for t in tensors.values():
            head = f"  {kind:6} {t.name}: {t.dtype.name}{list(t.shape)} {t.layout}"
            if t.absent:
                click.echo(head + "  (absent)")
            elif t.data is None:
                click.echo(head + "  (shape only)")
            else:
                flat = np.asarray(t.data).reshape(-1)[:n_values]
                more = " ..." if t.data.size > n_values else ""
                click.echo(head + f"  [{', '.join(f'{v:.6g}' if t.dtype.kind == 'f' else str(v) for v in flat)}{more}]")
    for output, thresholds in case.criteria.items():
        for th in thresholds:
            click.echo(f"  criterion {output}.{th.metric} <= {th.value:.4g}  ({th.provenance})")
    click.echo(f"  seed {case.seed}, {case.generator_version}, spec {case.spec_path} sha256 {case.spec_sha256[:12]}")
    click.echo(f"  rerun: {repro_command(case_path, 'reference')}")



@main.command()
@click.argument("case_file", type=click.Path(exists=True, dir_okay=False))
@click.option("--backend", "backend_spec", required=True,
              help="The backend the case fails on (as `opcase run` takes it).")
@click.option("-o", "--out", "out_dir", default="shrunk", show_default=True, type=click.Path(file_okay=False),
              help="Where the smallest case is written (as `opcase gen` lays cases out).")
@click.option("--max-tries", type=click.IntRange(min=1), default=200, show_default=True,
              help="Candidate cases to generate and run at most.")
@click.option("--time", "seconds", type=click.FloatRange(min=0, min_open=True), default=600, show_default=True,
              help="Seconds to spend at most (the case being run when they run out finishes).")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=None, callback=_finite_seconds,
              help="Seconds each run of the backend may take (as `opcase run --timeout`); default for a "
                   "backend other than opcase's own: 10 times the original case's run, at least 10 s.  --time "
                   "bounds the whole search all the same.")
def shrink(case_file, backend_spec, out_dir, max_tries, seconds, timeout):
    """Find the smallest case that fails like CASE_FILE on --backend: same status, same failing
    metrics or NaN/Inf mismatches.  Prints its one-line descriptor and the sizes before and after."""
    from gen.core.backend import BackendLoadError  # lazily: fast --help
    from gen.core.casefile import CaseFileError  # lazily: fast --help
    from gen.core.descriptor import DescriptorError  # lazily: fast --help
    from gen.core.spec import SpecError  # lazily: fast --help
    from harness.backends import load_backend  # lazily: fast --help
    from harness.cli.shrink import ShrinkError, shrink_case  # lazily: fast --help
    from harness.workers import runs_isolated  # lazily: fast --help

    _check_writable("-o", out_dir, directory=True)
    try:
        # As `opcase run`: a foreign backend runs only in workers, loaded there.
        backend = None if runs_isolated(backend_spec) else load_backend(backend_spec)
    except BackendLoadError as exc:
        raise InputError(str(exc)) from None
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    with _status_line() as show:
        try:
            found = shrink_case(Path(case_file), backend, backend_spec, Path(out_dir), max_tries=max_tries,
                                seconds=seconds, timeout=timeout, on_step=show)
        except (ShrinkError, CaseFileError, DescriptorError, SpecError, BackendLoadError) as exc:
            raise InputError(str(exc)) from None
        except OSError as exc:
            raise click.ClickException(f"cannot write cases to {out_dir}: {exc}") from None
    click.echo(f"original: {found.original}  ({_size_text(found.bytes_before)} of tensors)")
    click.echo(f"fails as: {found.failure.text()}")
    click.echo(f"smallest: {found.descriptor}  ({_size_text(found.bytes_after)} of tensors, "
               f"{found.bytes_before / max(found.bytes_after, 1):,.0f}x smaller)")
    click.echo(f"wrote {found.path}")
    click.echo(f"{found.tries} candidate(s) in {found.seconds:.1f} s"
               + (f"; stopped: out of {found.exhausted} (--max-tries / --time)" if found.exhausted else ""))


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("--backend", "backend_spec", required=True,
              help="The backend whose outputs are explained (as `opcase run` takes it).")
@click.option("--json", "json_path", default=None, type=click.Path(dir_okay=False),
              help="Write every case's ranking (per output: each variant's identical fraction, diff1, diff3, "
                   "ulps) and explanation as JSON.")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=None, callback=_finite_seconds,
              help="Seconds the backend may take on a case (as `opcase run --timeout`).")
@click.option("--filter", "filter_text", default=None, help="Only cases whose OP/SUITE/NAME matches this regular expression.")
@_exits_on_signals
def explain(paths, backend_spec, json_path, timeout, filter_text):
    """Name the arithmetic or the bug a backend's outputs match, element by element.

    \b
    Runs the backend on each case under PATHS as `opcase run` does (Python backends other than
    reference and lowp in a worker process) and compares its outputs with known variants of the
    kernel computed on the same inputs: the reference in other arithmetic (float32, float16, the
    final cast toward zero, ties away from zero or through float32, subnormals flushed), the mmcv
    emulation, the kernel's own variants, the generic mutants of `opcase power` and the kernel's
    planted bugs.  Per output, variants are ranked by the fraction of elements bit-identical, then
    diff1 and diff3; the line says which variant matches bit for bit, or which explains which
    elements.  Variants are computed one at a time on the whole case and dropped once scored
    (network cases too): memory is about the outputs three times over plus two bits per element
    per variant; a case needing over half the machine's memory is refused.
    Exit status: 0 every case explained; 1 the backend failed on a case (raised, crashed, timed out)
    or a case file is unreadable; 2 usage or input error; 5 nothing explained (every case
    unsupported or refused).
    """
    from gen.core.backend import BackendLoadError  # lazily: fast --help
    from gen.core.casefile import CaseFileError, atomic_write  # lazily: fast --help
    from harness.explain import case_lines, explain_case, json_doc   # a command's own module, loaded when used

    if json_path is not None:
        _check_writable("--json", json_path)
    files = _run_files(paths, None, filter_text)
    docs = []
    for path in files:
        try:
            doc = explain_case(path, backend_spec, timeout)
        except BackendLoadError as exc:
            raise InputError(str(exc)) from None
        except CaseFileError as exc:
            doc = {"case": str(path), "path": str(path), "backend": backend_spec, "status": "error",
                   "headline": f"unreadable case file: {exc}", "outputs": [], "seconds": 0.0}
        for line in case_lines(doc):
            click.echo(line)
        docs.append(json_doc(doc))
    if json_path:
        atomic_write(json_path, json.dumps({"backend": backend_spec, "cases": docs}, indent=1, allow_nan=False) + "\n")
    explained = [d for d in docs if d["status"] in ("outputs", "rejected")]
    click.echo(f"{len(explained)} of {len(docs)} case(s) explained in {sum(d['seconds'] for d in docs):.1f} s")
    if any(d["status"] in ("raised", "error") for d in docs):
        sys.exit(EXIT_FAILED)
    if not explained:
        click.echo(f"exit status {EXIT_NOTHING_JUDGED}: no case was explained", err=True)
        sys.exit(EXIT_NOTHING_JUDGED)
    sys.exit(0)


def _size_text(n: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n} B"


@contextlib.contextmanager
def _status_line():
    """show(text) rewrites one status line on a terminal; nothing otherwise."""
    if not sys.stdout.isatty():
        yield lambda text: None
        return
    width = max(shutil.get_terminal_size().columns - 1, 20)
    try:
        yield lambda text: click.echo("\r\x1b[K" + text[:width], nl=False)
    finally:
        click.echo("\r\x1b[K", nl=False)


@main.command("import")
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True))
@click.option("-o", "--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Output directory.")
@click.option("--baseline", default=None, help="Backend for dynamic thresholds (default: the spec's).")
@click.option("--max-size", "max_size", default=None, callback=_size_option,
              help="Skip cases whose tensors exceed this many bytes (e.g. 64MB); they are listed.")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=None, callback=_finite_seconds,
              help="Seconds each call of a --baseline other than opcase's own may take (it runs in a worker "
                   "process); over it, that file's import is an error.")
@click.option("--thresholds", "rule", type=click.Choice(["file", "docs"]), default="file", show_default=True,
              help="Judge by each file's own thresholds and threshold_use (as mluop_gtest does), or by the "
                   "docs' rule; the other is kept in the case and reported beside them.")
def import_(paths, out_dir, baseline, max_size, timeout, rule):
    """Import mlu-ops case files (.pb/.prototxt), adding goldens and thresholds.

    A case is named after its file; files of one kernel that share a name (case_0.prototxt in
    several directories) are named after their path under PATH instead.  A case is judged by its
    file's own thresholds unless --thresholds docs asks for the docs' rule."""
    from gen.core.spec import SpecError  # lazily: fast --help
    from harness.cli.interop import import_all  # lazily: fast --help

    _check_writable("-o", out_dir, directory=True)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    try:
        outcomes = import_all(paths, out, baseline, max_size, timeout, rule)
    except SpecError as exc:
        raise InputError(str(exc)) from None
    _report_outcomes(outcomes)


@main.command("export")
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True))
@click.option("--format", "fmt", type=click.Choice(["mluops"]), default="mluops", show_default=True)
@click.option("--text", is_flag=True, help="Write .prototxt instead of binary .pb.")
@click.option("-o", "--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Output directory.")
def export(paths, fmt, text, out_dir):
    """Export opcase cases in the operator library's own format (mlu-ops)."""
    from gen.core.spec import SpecError  # lazily: fast --help
    from harness.cli.interop import export_all  # lazily: fast --help

    _check_writable("-o", out_dir, directory=True)
    try:
        outcomes = export_all(paths, Path(out_dir), text)
    except SpecError as exc:
        raise InputError(str(exc)) from None
    _report_outcomes(outcomes)


def _report_outcomes(outcomes) -> None:
    if not outcomes:
        raise InputError("no case files found")
    for o in outcomes:
        click.echo(f"{o.status:8} {o.source}" + (f" -> {o.target}" if o.target else "") + f"  {o.message}")
    counts = {s: sum(o.status == s for o in outcomes) for s in ("written", "skipped", "error")}
    click.echo(", ".join(f"{n} {s}" for s, n in counts.items()))
    sys.exit(1 if counts["error"] else 0)
