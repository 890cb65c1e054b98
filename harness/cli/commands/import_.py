"""`opcase import`: mlu-ops case files as opcase cases, goldens and thresholds added (harness.cli.interop)."""
from __future__ import annotations

from pathlib import Path

import click

from gen.core.spec import SpecError
from harness.cli.common import InputError, check_writable, finite_seconds, report_outcomes, size_option
from harness.cli.interop import import_all


@click.command("import")
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True))
@click.option("-o", "--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Output directory.")
@click.option("--baseline", default=None, help="Backend for dynamic thresholds (default: the spec's).")
@click.option("--max-size", "max_size", default=None, callback=size_option,
              help="Skip cases whose tensors exceed this many bytes (e.g. 64MB); they are listed.")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=None, callback=finite_seconds,
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

    check_writable("-o", out_dir, directory=True)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    try:
        outcomes = import_all(paths, out, baseline, max_size, timeout, rule)
    except SpecError as exc:
        raise InputError(str(exc)) from None
    report_outcomes(outcomes)
