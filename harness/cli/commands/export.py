"""`opcase export`: opcase cases as mlu-ops case files (harness.cli.interop)."""
from __future__ import annotations

from pathlib import Path

import click

from gen.core.spec import SpecError
from harness.cli.common import InputError, check_writable, report_outcomes
from harness.cli.interop import export_all


@click.command("export")
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True))
@click.option("--format", "fmt", type=click.Choice(["mluops"]), default="mluops", show_default=True)
@click.option("--text", is_flag=True, help="Write .prototxt instead of binary .pb.")
@click.option("-o", "--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Output directory.")
def export(paths, fmt, text, out_dir):
    """Export opcase cases in the operator library's own format (mlu-ops)."""

    check_writable("-o", out_dir, directory=True)
    try:
        outcomes = export_all(paths, Path(out_dir), text)
    except SpecError as exc:
        raise InputError(str(exc)) from None
    report_outcomes(outcomes)
