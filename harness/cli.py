"""The `opcase` command line."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import click
import numpy as np

SIZE_UNITS = {"": 1, "B": 1, "K": 1e3, "KB": 1e3, "KIB": 1024, "M": 1e6, "MB": 1e6, "MIB": 1024**2,
              "G": 1e9, "GB": 1e9, "GIB": 1024**3, "T": 1e12, "TB": 1e12, "TIB": 1024**4}


class InputError(click.ClickException):
    """A usage or input problem: exit status 2, one clear line, no traceback."""
    exit_code = 2


def parse_size(text: str) -> int:
    m = re.fullmatch(r"\s*([0-9.]+)\s*([A-Za-z]*)\s*", text or "")
    if not m or m.group(2).upper() not in SIZE_UNITS:
        raise click.BadParameter(f"{text!r} is not a size like 64MB, 1.5GiB or 1000000")
    return int(float(m.group(1)) * SIZE_UNITS[m.group(2).upper()])


def _suites(text: str) -> list[str]:
    from gen.spec import SUITES
    names = list(SUITES) if text.strip() == "all" else [s.strip() for s in text.split(",") if s.strip()]
    unknown = [s for s in names if s not in SUITES]
    if unknown or not names:
        raise click.BadParameter(f"unknown suite(s) {unknown}; use a comma list of {', '.join(SUITES)} or all")
    return names


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="opcase")
def main():
    """Test cases with golden outputs for accelerator kernels, and a harness that judges any
    implementation against them.

    \b
    Typical use:
      opcase gen specs/psamask_forward.yaml --suite all -o cases-out
      opcase run cases-out --backend reference
      opcase run cases-out --backend mypkg.kernels:run --json results.json
    """


@main.command()
@click.argument("specs", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--suite", "suite_text", default="all", show_default=True,
              help="Comma list of network, random, boundary, invalid; or all.")
@click.option("--count", type=click.IntRange(min=0), default=None, help="Random cases per spec (default: the spec's).")
@click.option("--seed", type=int, default=0, show_default=True, help="Base seed; every case is fixed by (spec, suite, seed).")
@click.option("--select", default=None, help="Only cases whose name matches this regular expression.")
@click.option("--max-size", "max_size", default=None, help="Skip cases whose tensors exceed this many bytes (e.g. 64MB).")
@click.option("--baseline", default=None, help="Backend for dynamic thresholds (default: the spec's, usually lowp).")
@click.option("-o", "--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Output directory.")
def gen(specs, suite_text, count, seed, select, max_size, baseline, out_dir):
    """Generate suites of cases from operator SPECS (YAML) into OUT."""
    from gen.generate import GenerationError, Generator, case_path, plan_suite, total_bytes
    from gen.spec import SpecError, load_spec
    from harness.backend import BackendLoadError, load_backend
    from harness.casefile import save

    suites = _suites(suite_text)
    limit = parse_size(max_size) if max_size else None
    try:
        pattern = re.compile(select) if select else None
    except re.error as exc:
        raise InputError(f"--select: bad regular expression: {exc}") from None
    try:
        loaded = [load_spec(p) for p in specs]
    except SpecError as exc:
        raise InputError(str(exc)) from None
    total_cases, total_bytes_written, skipped = 0, 0, []
    for spec in loaded:
        try:
            baseline_backend = None
            if spec.criteria.mode == "dynamic":
                baseline_backend = load_backend(baseline or spec.criteria.baseline)
            generator = Generator(spec, baseline_backend)
            counts = {}
            for suite in suites:
                plans = plan_suite(spec, suite, count, seed)
                made = 0
                for plan in plans:
                    if pattern and not pattern.search(plan.name):
                        continue
                    size = total_bytes(spec, plan)
                    if limit is not None and size > limit:
                        skipped.append(f"{spec.op}/{suite}/{plan.name} ({size / 1e6:.1f} MB)")
                        continue
                    path = save(generator.build(plan), case_path(Path(out_dir), plan, spec.op))
                    total_bytes_written += sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))
                    made += 1
                counts[suite] = made
                total_cases += made
        except (SpecError, GenerationError, BackendLoadError) as exc:
            raise InputError(str(exc)) from None
        click.echo(f"{spec.op}: " + ", ".join(f"{n} {s}" for s, n in counts.items()))
    for line in skipped:
        click.echo(f"skipped (over --max-size): {line}")
    click.echo(f"wrote {total_cases} cases ({total_bytes_written / 1e6:.1f} MB) to {out_dir}")


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("--backend", "backend_spec", default="reference", show_default=True,
              help="reference, lowp, torch, or module:attr (a run(request) function or an object with run).")
@click.option("--json", "json_path", default=None, type=click.Path(dir_okay=False), help="Write per-case results as JSON.")
@click.option("-v", "--verbose", is_flag=True, help="Show details for passing cases too.")
def run(paths, backend_spec, json_path, verbose):
    """Run a backend on every case under PATHS and judge its outputs.

    Exit status: 0 all cases pass, 1 any case fails or errors, 2 usage or input error.
    """
    from harness.backend import BackendLoadError, load_backend
    from harness.casefile import find
    from harness.report import case_line, failure_details, summary_text, to_json, write_atomic
    from harness.runner import FAILING, run_case

    missing = [p for p in paths if not Path(p).exists()]
    if missing:
        raise InputError(f"no such file or directory: {', '.join(missing)}")
    files = find(paths)
    if not files:
        raise InputError(f"no .opcase files under {', '.join(paths)}")
    try:
        backend = load_backend(backend_spec)
    except BackendLoadError as exc:
        raise InputError(str(exc)) from None
    results = []
    for path in files:
        result = run_case(path, backend, backend_spec)
        results.append(result)
        click.echo(case_line(result))
        if result.status in FAILING or (verbose and result.status != "passed"):
            click.echo(failure_details(result))
    click.echo(summary_text(results))
    if json_path:
        write_atomic(json_path, to_json(results, backend_spec))
    sys.exit(1 if any(r.status in FAILING for r in results) else 0)


@main.command()
@click.argument("case_path", type=click.Path(exists=True, dir_okay=False))
@click.option("--values", "n_values", default=6, show_default=True, help="How many leading values to show per tensor.")
def show(case_path, n_values):
    """Print a case readably, with a command that reruns just it."""
    from harness.casefile import CaseFileError, load
    from harness.runner import repro_command

    try:
        case = load(case_path)
    except CaseFileError as exc:
        raise InputError(str(exc)) from None
    click.echo(f"{case.op} / {case.suite} / {case.name}")
    if case.note:
        click.echo(f"  why: {case.note}")
    click.echo(f"  expect: {case.expect}" + (f" (check {case.expect_check}: {case.expect_message})"
                                            if case.expect == "rejected" else ""))
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


if __name__ == "__main__":
    main()
