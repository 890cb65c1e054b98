"""`opcase shrink`: a failing case shrunk to the smallest that fails the same way (harness.cli.shrink)."""
from __future__ import annotations

from pathlib import Path

import click

from gen.core.backend import BackendLoadError
from gen.core.casefile import CaseFileError
from gen.core.descriptor import DescriptorError
from gen.core.spec import SpecError
from harness.backends import load_backend
from harness.cli.common import InputError, check_writable, finite_seconds, size_text
from harness.cli.shrink import ShrinkError, shrink_case
from harness.judge.workers import runs_isolated
from harness.reports.progress import steps


@click.command()
@click.argument("case_file", type=click.Path(exists=True, dir_okay=False))
@click.option("--backend", "backend_spec", required=True,
              help="The backend the case fails on (as `opcase run` takes it).")
@click.option("-o", "--out", "out_dir", default="shrunk", show_default=True, type=click.Path(file_okay=False),
              help="Where the smallest case is written (as `opcase gen` lays cases out).")
@click.option("--max-tries", type=click.IntRange(min=1), default=200, show_default=True,
              help="Candidate cases to generate and run at most.")
@click.option("--time", "seconds", type=click.FloatRange(min=0, min_open=True), default=600, show_default=True,
              help="Seconds to spend at most (the case being run when they run out finishes).")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=None, callback=finite_seconds,
              help="Seconds each run of the backend may take (as `opcase run --timeout`); default for a "
                   "backend other than opcase's own: 10 times the original case's run, at least 10 s.  --time "
                   "bounds the whole search all the same.")
def shrink(case_file, backend_spec, out_dir, max_tries, seconds, timeout):
    """Find the smallest case that fails like CASE_FILE on --backend: same status, same failing
    metrics or NaN/Inf mismatches.  Prints its one-line descriptor and the sizes before and after."""

    check_writable("-o", out_dir, directory=True)
    try:
        # As `opcase run`: a foreign backend runs only in workers, loaded there.
        backend = None if runs_isolated(backend_spec) else load_backend(backend_spec, timeout)
    except BackendLoadError as exc:
        raise InputError(str(exc)) from None
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    with steps("shrink") as show:
        try:
            found = shrink_case(Path(case_file), backend, backend_spec, Path(out_dir), max_tries=max_tries,
                                seconds=seconds, timeout=timeout, on_step=show)
        except (ShrinkError, CaseFileError, DescriptorError, SpecError, BackendLoadError) as exc:
            raise InputError(str(exc)) from None
        except OSError as exc:
            raise click.ClickException(f"cannot write cases to {out_dir}: {exc}") from None
    click.echo(f"original: {found.original}  ({size_text(found.bytes_before)} of tensors)")
    click.echo(f"fails as: {found.failure.text()}")
    click.echo(f"smallest: {found.descriptor}  ({size_text(found.bytes_after)} of tensors, "
               f"{found.bytes_before / max(found.bytes_after, 1):,.0f}x smaller)")
    click.echo(f"wrote {found.path}")
    click.echo(f"{found.tries} candidate(s) in {found.seconds:.1f} s"
               + (f"; stopped: out of {found.exhausted} (--max-tries / --time)" if found.exhausted else ""))
