"""`opcase show`: a case printed readably."""
from __future__ import annotations


import click
import numpy as np

from gen.core.casefile import CaseFileError, load
from harness.cli.common import InputError
from harness.judge.runner import repro_command


@click.command()
@click.argument("case_path", type=click.Path(exists=True, dir_okay=False))
@click.option("--values", "n_values", default=6, show_default=True, help="How many leading values to show per tensor.")
def show(case_path, n_values):
    """Print a case readably, with a command that reruns just it."""

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
