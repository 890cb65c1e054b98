"""What several `opcase` commands share: the exit statuses, usage errors, option callbacks and parsers,
the case selection of a run, and progress on a terminal."""
from __future__ import annotations

import contextlib
import functools
import math
import os
import re
import sys
from decimal import Decimal
from pathlib import Path

import click

from gen.core.casefile import find
from gen.core.registry import known_ops, spec_for
from gen.core.timing import MAX_TIMEOUT_S
from harness.cli.ray_executor import ExecutorError, import_ray, parse_resources
from harness.judge.gate import BaselineError, load_results
from harness.judge.selection import case_key, failed_in
from harness.judge.workers import Stopped, stop_on_signals


SIZE_UNITS = {"": 1, "B": 1, "K": 10**3, "KB": 10**3, "KIB": 1024, "M": 10**6, "MB": 10**6, "MIB": 1024**2,
              "G": 10**9, "GB": 10**9, "GIB": 1024**3, "T": 10**12, "TB": 10**12, "TIB": 1024**4}


class InputError(click.ClickException):
    """A usage or input problem: exit status 2, one clear line, no traceback."""
    exit_code = 2


# `opcase run`'s other exit statuses (harness/EXIT_STATUSES.md).  5, as pytest's "no tests ran": a run
# that judged nothing is neither a pass nor a failure of the backend.
EXIT_FAILED = 1
# The run finished but could not write a results file (a full disk): they all say it did not finish.
EXIT_RESULTS_UNWRITTEN = 3
EXIT_NOTHING_JUDGED = 5
EXIT_INTERRUPTED = 130
# What `opcase run` judges when --backend is not given: no default, so that the reference is never
# judged by accident (a green run that checked nothing).
BACKEND_ENV = "OPCASE_BACKEND"


def check_writable(option: str, path, directory: bool = False) -> None:
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


def check_distinct(named: list[tuple[str, str | None]]) -> None:
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
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([A-Za-z]*)\s*", text or "")
    if not m or m.group(2).upper() not in SIZE_UNITS:
        raise click.BadParameter(f"{text!r} is not a size like 64MB, 1.5GiB or 1000000")
    return int(Decimal(m.group(1)) * SIZE_UNITS[m.group(2).upper()])


def size_option(ctx, param, value):
    """Click callback: a size option's bytes, or a usage error naming the option."""
    return None if value is None else parse_size(value)


def finite_seconds(ctx, param, value):
    """Click callback: inf or nan seconds would never time anything out, and the OS's timers
    hold no wait past MAX_TIMEOUT_S."""
    if value is not None and not math.isfinite(value):
        raise click.BadParameter(f"{value} is not a finite number of seconds")
    if value is not None and value > MAX_TIMEOUT_S:
        raise click.BadParameter(f"{value:g} s is over the longest timeout, {MAX_TIMEOUT_S:g} s (10 days)")
    return value


def exits_on_signals(command):
    """``command`` with SIGTERM and SIGHUP unwinding it as Ctrl-C does (workers and commands killed,
    temporary files removed), then exiting 128 + the signal's number; Ctrl-C exits 130 (128 +
    SIGINT, as shells and pytest's "interrupted" do), not Click's "Aborted!" and 1."""
    @functools.wraps(command)
    def wrapper(*args, **kwargs):
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


def executor_options(command):
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


def ray_resources(executor: str, address, resources_text, jobs) -> dict | None:
    """The Ray task options of --executor ray (None for local), or a usage error."""

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


def planned_work(files) -> dict:
    """{str(path): planned work} of case ``files``: harness.reports.progress's weight of each file's bytes."""
    from harness.reports.progress import weight_of   # the progress module, only when a command shows progress
    weights = {}
    for f in files:
        with contextlib.suppress(OSError):   # a file gone meanwhile is the run's error to report, not the bar's
            weights[str(f)] = weight_of(Path(f).stat().st_size)
    return weights


def progress_bar(files, label: str):
    """advance(key) per finished case of ``files`` (by OP/SUITE/NAME): harness.reports.progress's bar on a
    terminal, its heartbeat elsewhere (a line per kernel done and at least every HEARTBEAT_S seconds),
    weighted by each case file's bytes."""
    from harness.reports.progress import progress   # the bar's module, only when a command shows one
    weights = {case_key(path): weight for path, weight in planned_work(files).items()}
    return progress(label, weights, kernel_of=lambda key: key.split("/")[0])


def run_files(paths, rerun_failed, filter_text, exclude_text=None) -> list[Path]:
    """The case files a run covers: PATHS (or the failures of every --rerun-failed file), then
    --filter, then --exclude."""

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
        failed_paths, failed_keys = failed_in_all(rerun_failed)
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


def failed_in_all(results_paths) -> tuple[set[str], set[str]]:
    """The union of the failures of every --rerun-failed file (e.g. one per shard); an unreadable
    or unfinished one is refused, as a single one is."""
    paths, keys = set(), set()
    for results_path in results_paths:
        try:
            failed_paths, failed_keys = failed_in(load_results(results_path))
        except BaselineError as exc:
            raise InputError(f"--rerun-failed: {exc}") from None
        paths |= failed_paths
        keys |= failed_keys
    return paths, keys


def implementation_of(backend):
    """The object behind a loaded backend's run (an exec: command, a plugin's instance), or None."""
    return getattr(backend.run, "__self__", None)


def supported_lines(backend) -> list[str]:
    """'OP  DTYPE ...' for each known kernel, from the backend's supports(op, dtype)."""

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


def size_text(n: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n} B"


def report_outcomes(outcomes) -> None:
    if not outcomes:
        raise InputError("no case files found")
    for o in outcomes:
        click.echo(f"{o.status:8} {o.source}" + (f" -> {o.target}" if o.target else "") + f"  {o.message}")
    counts = {s: sum(o.status == s for o in outcomes) for s in ("written", "skipped", "error")}
    click.echo(", ".join(f"{n} {s}" for s, n in counts.items()))
    sys.exit(1 if counts["error"] else 0)
