"""`opcase run --fresh`: a failing fresh case kept after the run, with a REPRO line that reruns it.

The fresh cases live in a temporary directory the run removes; one that fails would be lost,
and a REPRO line that draws it again needs the whole run's PATHS and seed.  So each failing one is
copied out (harness.cli.fresh.keep) and its result names the kept file: REPRO reruns it, `opcase
shrink` and `opcase explain` take it, and its CASE line is its explicit descriptor, which `opcase
gen --case` makes again.
"""
from __future__ import annotations

import os
from pathlib import Path

import click

from harness.reports.report import fails
from harness.judge.runner import repro_command


def keep_dir_of(keep_fresh, *results_paths) -> Path:
    """--keep-fresh DIR, else the directory of the first results file given, else the current one."""
    if keep_fresh:
        return Path(keep_fresh).absolute()
    for path in results_paths:
        if path:
            return Path(os.path.abspath(path)).parent
    return Path.cwd()


def keep_fresh_failure(result, fresh, keep_dir: Path, backend_spec: str, options) -> Path | None:
    """Give a fresh case's result its descriptor; a failing one's file is kept under ``keep_dir``
    and its REPRO names the kept file.  The kept path, or None (passing, or not kept: then its
    REPRO still draws it again, and a warning says why it was not kept)."""
    from harness.cli.fresh import keep   # the fresh module imports the generator: only with --fresh
    result.descriptor = fresh.descriptors.get(Path(result.path), result.descriptor)
    if not fails(result):
        return None
    try:
        kept = keep(result.path, fresh, keep_dir)
    except OSError as exc:
        click.echo(f"warning: --fresh: cannot keep {result.key} under {keep_dir}: {exc.strerror or exc}", err=True)
        return None
    result.path = str(kept)
    fresh.files.append(kept)   # still one of the run's fresh cases
    fresh.kept.append(kept)
    result.repro = repro_command(kept, backend_spec, options.repro_options)
    return kept


def kept_lines(results, kept: list, keep_dir: Path) -> list[str]:
    """Where the failing fresh cases were kept, and each one's descriptor (`opcase gen --case`)."""
    paths = {str(path) for path in kept if path is not None}
    if not paths:
        return []
    lines = [f"fresh: kept {len(paths)} failing case(s) under {keep_dir}"]
    for r in results:
        if r.path in paths:
            lines += [f"  {r.path}", f"    CASE:  {r.descriptor}"]
    return lines
