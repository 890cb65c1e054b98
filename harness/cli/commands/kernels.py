"""`opcase kernels`: the kernels discovery finds (harness.cli.kernel_table)."""
from __future__ import annotations

from pathlib import Path

import click

from harness.cli import kernel_table
from harness.cli.common import InputError


@click.command("kernels")
@click.option("--cases", "cases_dir", default=None, type=click.Path(file_okay=False),
              help="Also count each kernel's cases in this committed suite (default: ./cases if it exists).")
@click.option("--markdown", is_flag=True, help="Print a GitHub markdown table.")
def kernels_(cases_dir, markdown):
    """List the kernels opcase knows, found from the specs and each kernel's own modules: their
    thresholds, how many cases the main command makes of each (`gen --suite all --max-size 64MB`) and
    their size, how many a committed suite holds, and which optional parts each has (mmcv emulation,
    torch kernel, planted bugs, mlu-ops mapping; README: Adding a kernel)."""

    if cases_dir is None:
        cases_dir = "cases" if Path("cases").is_dir() else None
    elif not Path(cases_dir).is_dir():
        raise InputError(f"--cases {cases_dir}: no such directory")
    rows = kernel_table.kernel_rows(Path(cases_dir) if cases_dir else None)
    click.echo(kernel_table.markdown(rows) if markdown else kernel_table.columns(rows))
    if cases_dir is None:   # say why a column is blank
        click.echo("committed cases: blank, no ./cases here (run in the clone, or give --cases DIR)")
