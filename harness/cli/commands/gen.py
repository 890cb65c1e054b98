"""`opcase gen`: cases with goldens from specs, or one case from its descriptor (--case)."""
from __future__ import annotations

import functools
import re
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from concurrent.futures.process import BrokenProcessPool

import click

from gen.core.backend import BackendLoadError
from gen.core import case_keys
from gen.core.casefile import physical_memory
from gen.core.descriptor import DescriptorError
from gen.core.registry import UnknownOp
from gen.core.spec import MAX_RANDOM_COUNT, SUITES, SpecError, load_spec
from gen.cost import case_cost
from gen.descriptor import write_described
from gen.generate import (GenerationError, builds_in_memory, case_path, foreign_case, input_bytes_in_memory,
                          plan_suite, total_bytes, written_whole)
from gen.out_lock import OutDirBusy, hold_out_dir
from gen.reach import smallest_count_cases
from gen.jobs import Task, default_jobs, largest_first, write_all
from harness.backends import with_device
from harness.cli import ray_executor
from harness.cli.common import (EXIT_NOTHING_JUDGED, InputError, check_writable, executor_options, exits_on_signals,
                                finite_seconds, ray_resources, size_option, size_text)
from harness.cli.ray_executor import ExecutorError, TaskLost
from gen.audit.todos import todos_in
from harness.reports.progress import progress, weight_of
from harness.judge.workers import check_loads, load_apart


def _suites(text: str) -> list[str]:
    names = list(SUITES) if text.strip() == "all" else [s.strip() for s in text.split(",") if s.strip()]
    unknown = [s for s in names if s not in SUITES]
    if unknown or not names:
        raise click.BadParameter(f"unknown suite(s) {unknown}; use a comma list of {', '.join(SUITES)} or all")
    return names


@click.command()
@click.argument("specs", nargs=-1, type=click.Path(dir_okay=False))
@click.option("--suite", "suite_text", default="all", show_default=True,
              help="Comma list of network, random, boundary, invalid, stress, fast_path, hunt; or all.")
@click.option("--count", type=click.IntRange(min=0), default=None,
              help="Random cases per spec (default: the spec's; at most 100000, as in a spec).")
@click.option("--seed", type=int, default=0, show_default=True, help="Base seed; every case is fixed by (spec, suite, seed).")
@click.option("--select", default=None, help="Only cases whose name matches this regular expression.")
@click.option("--max-size", "max_size", default=None, callback=size_option,
              help="Skip cases whose tensors exceed this many bytes (e.g. 64MB); they are listed.")
@click.option("--smallest-counts", "smallest_counts", type=click.IntRange(min=0), default=0,
              help="Write each kernel's N smallest count-reach cases (gen/REACH.md) whatever --max-size says, "
                   "and each item dim's N smallest within 2.2 MB.")
@click.option("--baseline", default=None, help="Backend for dynamic thresholds (default: the spec's, mmcv as the docs say; lowp is stricter).")
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=None,
              help="Generate cases in N worker processes (default: one per usable CPU when the cases "
                   "to write take 64 MB or more, as memory allows; else 1).")
@click.option("--device", default=None, help="Device for a torch --baseline: cpu, cuda, ...")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=None, callback=finite_seconds,
              help="Seconds each call of a --baseline backend other than opcase's own may take (it runs in a "
                   "worker process, as `opcase run` runs it); over it, generation stops with an error.")
@click.option("--case", "descriptor", default=None,
              help="Write just the case of this one-line descriptor (as REPRO's CASE line and `opcase shrink` "
                   "print it), byte for byte; SPECS optional (default: the installed spec of its op).")
@click.option("-o", "--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Output directory.")
@click.option("-v", "--verbose", is_flag=True,
              help="List each case skipped over --max-size (else one line per kernel).")
@executor_options
@exits_on_signals
def gen(specs, suite_text, count, seed, select, max_size, smallest_counts, baseline, jobs, device, timeout, out_dir, descriptor,
        executor, address, resources_text, verbose=False):
    """Generate suites of cases from operator SPECS (YAML) into OUT.

    A case already in OUT whole (its checksum holds) from the same spec version, suite, seed and
    baseline is kept, not written again: an interrupted gen, run again, resumes.  Without a
    terminal it prints a line per kernel done and at least every 30 s, with an ETA.

    Exit status: 0 cases written (or kept); 2 usage, spec or input error; 5 no case written."""
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
    todos = [line for path in specs for line in todos_in(path)]   # a drafted spec (opcase draft)
    if todos:
        click.echo("\n".join(todos), err=True)
        raise InputError(f"{len(todos)} TODO(s) left in the spec(s): decide them before generating")
    if count is not None and count > MAX_RANDOM_COUNT:   # before any work: planning alone would never end
        raise InputError(f"--count {count}: at most {MAX_RANDOM_COUNT} random cases per spec, as in a spec")

    suites = _suites(suite_text)
    resources = ray_resources(executor, address, resources_text, jobs)
    check_writable("-o", out_dir, directory=True)
    try:
        pattern = re.compile(select) if select else None
    except re.error as exc:
        raise InputError(f"--select: bad regular expression: {exc}") from None
    # A baseline other than opcase's own runs in a worker process: gen never runs its code.
    loader = functools.partial(load_apart, timeout=timeout)
    try:
        baseline = _baseline_on_device(baseline, device)
        planned = _plan(specs, suites, count, seed, pattern, (max_size, smallest_counts), baseline, timeout, out_dir,
                        loader)
    except (SpecError, GenerationError, BackendLoadError) as exc:
        raise InputError(str(exc)) from None
    # Held once the plan stands, so that a spec or size refused above leaves no -o behind.
    _hold(out_dir)
    _refuse_over_free_space(planned.needed, out_dir)
    written = _write(planned, jobs, resources, address, out_dir)
    _summarise(planned, written, verbose, select, out_dir)


@dataclass
class _Planned:
    """What gen will write: its tasks with their bytes, and what it leaves (over --max-size, kept)."""
    tasks: list = field(default_factory=list)
    sizes: dict = field(default_factory=dict)          # task: bytes of its tensors
    costs: dict = field(default_factory=dict)          # task: units of work (gen.cost), what the ETA weighs
    skipped: list = field(default_factory=list)        # (op, OP/SUITE/NAME, bytes) over --max-size
    counts: dict = field(default_factory=dict)         # op: {suite: cases written or kept}
    needed: int = 0                                    # bytes to write
    kept: int = 0                                      # cases already in OUT whole
    largest_in_memory: int = 0                         # bytes the largest task holds in memory at once


def _plan(specs, suites, count, seed, pattern, sizes, baseline, timeout, out_dir, loader) -> _Planned:
    """``sizes``: (--max-size, --smallest-counts)."""
    (max_size, smallest), planned = sizes, _Planned()
    for spec in [load_spec(p) for p in specs]:
        _refuse_foreign_cases(foreign_case(Path(out_dir), spec, seed), out_dir, spec)
        if spec.criteria.mode == "dynamic":
            check_loads(baseline or spec.criteria.baseline, timeout)   # fail early on a bad --baseline
        for suite in suites:
            planned.counts.setdefault(spec.op, {})[suite] = 0
            plans = plan_suite(spec, suite, count, seed)
            held = smallest_count_cases(plans, functools.partial(total_bytes, spec), smallest)
            for index, plan in enumerate(plans):
                if pattern and not pattern.search(plan.name):
                    continue
                size = total_bytes(spec, plan)
                if max_size is not None and size > max_size and plan.name not in held:
                    planned.skipped.append((spec.op, f"{spec.op}/{suite}/{plan.name}", size))
                    continue
                path = case_path(Path(out_dir), plan, spec.op)
                if written_whole(path, spec, plan, baseline):
                    planned.counts[spec.op][suite] += 1
                    planned.kept += 1
                    continue
                planned.needed += size
                if builds_in_memory(spec, plan):
                    _refuse_over_memory(size, f"{spec.op}/{suite}/{plan.name}")
                    in_memory = size
                else:
                    in_memory = input_bytes_in_memory(spec, plan)
                planned.largest_in_memory = max(planned.largest_in_memory, in_memory)
                task = Task(str(spec.path), spec.op, suite, plan.name, index, count, seed, baseline, str(path), loader)
                planned.tasks.append(task)
                planned.sizes[task] = size
                planned.costs[task] = case_cost(spec, plan, baseline)
    return planned


def _write(planned: _Planned, jobs, resources, address, out_dir) -> int:
    """Write the planned cases (in worker processes, or on Ray); the bytes written."""
    tasks, sizes, written = planned.tasks, planned.sizes, [0]
    weights = {task: weight_of(sizes[task]) for task in tasks}   # by planned work, not by count
    timing = _Timing()
    with progress("generated", weights, kernel_of=lambda task: task.op, bar_label="generating",
                  counts=lambda: f"{written[0] / 1e6:.1f} MB written",
                  show=lambda task: f"{task.op}/{task.suite}/{task.name}",
                  sizes=sizes, group_of=lambda task: (task.op, task.suite), costs=planned.costs,
                  running=timing.running) as advance:
        def done(task, size):
            planned.counts[task.op][task.suite] += 1
            written[0] += size
            advance(task, timing.seconds_of(task))
        try:
            if resources is None:
                if jobs is None:
                    jobs = default_jobs(len(tasks), planned.needed, planned.largest_in_memory, physical_memory())
                order = largest_first(tasks, sizes) if jobs > 1 else tasks
                timing.start(order, jobs)
                write_all(order, jobs, done)
            else:
                _write_on_ray(tasks, done, address, resources)
        except (SpecError, GenerationError, BackendLoadError, UnknownOp) as exc:   # UnknownOp: op no baseline knows
            raise InputError(str(exc)) from None
        except OSError as exc:
            raise click.ClickException(f"cannot write cases to {out_dir}: {exc}") from None
        except BrokenProcessPool:
            raise click.ClickException("a generator worker process died (out of memory?); "
                                       "rerun with fewer --jobs") from None
    return written[0]


class _Timing:
    """The seconds each task took, as the progress's pace needs them.  The workers take the tasks
    in the order handed out, each as soon as it is free: the first ``jobs`` start at once, and
    the k-th to finish frees its worker for the (jobs + k)-th."""

    def __init__(self):
        self.position, self.jobs, self.began, self.finished, self.done = {}, 0, 0.0, [], set()

    def start(self, order, jobs: int) -> None:
        self.position = {task: number for number, task in enumerate(order)}
        self.jobs, self.began = jobs, time.monotonic()

    def seconds_of(self, task) -> float | None:
        """What ``task``, just finished, took (None off the local executor)."""
        if task not in self.position:
            return None
        now = time.monotonic()
        number = self.position[task]
        freed_by = number - self.jobs   # the finish that freed a worker for it (none for the first jobs)
        started = self.finished[freed_by] if 0 <= freed_by < len(self.finished) else self.began
        self.finished.append(now)
        self.done.add(task)
        return now - started

    def running(self) -> dict:
        """{task: seconds it has run} of the tasks a worker holds now (the next ones in turn,
        one per worker freed so far)."""
        now, started = time.monotonic(), self.jobs + len(self.finished)
        return {task: now - (self.finished[number - self.jobs] if number >= self.jobs else self.began)
                for task, number in self.position.items() if number < started and task not in self.done}


def _summarise(planned: _Planned, written: int, verbose: bool, select, out_dir) -> None:
    """gen's closing lines, and exit 5 when it made nothing."""
    for op, by_suite in planned.counts.items():
        click.echo(f"{op}: " + ", ".join(f"{n} {s}" for s, n in by_suite.items()))
    for line in _skipped_lines(planned.skipped, verbose):
        click.echo(line)
    kept = planned.kept
    n_written = sum(sum(c.values()) for c in planned.counts.values()) - kept
    click.echo(f"wrote {n_written} cases ({written / 1e6:.1f} MB) to {out_dir}"
               + (f"; kept {kept} already there whole (same spec, suite and seed)" if kept else ""))
    unkeyed = case_keys.unavailable_reason()
    if unkeyed and n_written:
        click.echo(f"note: the cases are not keyed (a rewritten file will not be told from opcase's): {unkeyed}", err=True)
    if n_written + kept == 0:   # as `opcase run`: a step that made nothing is not a success
        why = "every case is over --max-size" if planned.skipped else \
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
    return [f"skipped (over --max-size): {len(sizes)} {op} case(s), {size_text(min(sizes))} to "
            f"{size_text(max(sizes))} (-v lists them)" for op, sizes in by_op.items()]


def _refuse_foreign_cases(found, out_dir, spec) -> None:
    if found is not None:
        path, origin = found
        raise InputError(f"{Path(out_dir) / spec.op} holds cases of another spec version, generator or --seed ({path}: "
                         f"{origin}); remove that directory or give another -o")


def _refuse_over_memory(size: int, what: str) -> None:
    """A case built whole in memory that cannot fit in it is refused, not run into the OOM killer."""
    memory = physical_memory()
    if memory is not None and size > memory:
        raise InputError(f"{what}: its tensors take {size / 1e6:.1f} MB, it is built in memory and this machine "
                         f"has {memory / 1e6:.1f} MB; give a --max-size below that to skip such cases")


def _refuse_over_free_space(needed: int, out_dir) -> None:
    """Tensors that cannot fit on the disk are refused before the first case is written."""
    existing = next(p for p in (Path(out_dir).absolute(), *Path(out_dir).absolute().parents) if p.exists())
    free = shutil.disk_usage(existing).free
    if needed > free:
        raise InputError(f"the cases' tensors take {needed / 1e6:.1f} MB, {existing} has {free / 1e6:.1f} MB free; "
                         f"give --max-size to skip the largest cases")


def _baseline_on_device(baseline: str | None, device: str | None) -> str | None:
    """gen's --baseline as it runs on --device (BackendLoadError for a backend without devices)."""

    if device is None:
        return baseline
    if baseline is None:
        raise InputError("--device needs --baseline torch")
    return with_device(baseline, device)


def _hold(out_dir) -> None:
    """Lock -o for this gen until the command ends, stale temporaries removed (gen.out_lock)."""
    try:
        lock = hold_out_dir(out_dir)
    except OutDirBusy as exc:
        raise InputError(str(exc)) from None
    except OSError as exc:
        raise InputError(f"-o {out_dir}: cannot lock it for this gen ({exc.strerror or exc})") from None
    click.get_current_context().call_on_close(lock.release)


def _gen_described(descriptor: str, specs, baseline, device, out_dir, timeout=None) -> None:
    """`opcase gen --case`: write the one case of ``descriptor``."""

    check_writable("-o", out_dir, directory=True)
    _hold(out_dir)
    try:
        baseline = _baseline_on_device(baseline, device)
        path = write_described(descriptor, Path(out_dir), functools.partial(load_apart, timeout=timeout), baseline,
                               specs)
    except (DescriptorError, SpecError, GenerationError, BackendLoadError) as exc:
        raise InputError(str(exc)) from None
    except MemoryError:
        raise InputError(f"descriptor {descriptor!r}: the case does not fit in this machine's memory") from None
    except OSError as exc:
        raise click.ClickException(f"cannot write the case to {out_dir}: {exc}") from None
    click.echo(f"wrote {path}")


def _write_on_ray(tasks, done, address, resources) -> None:

    try:
        ray_executor.write_all(tasks, done, address, resources)
    except ExecutorError as exc:
        raise InputError(str(exc)) from None
    except TaskLost as exc:
        raise click.ClickException(str(exc)) from None
