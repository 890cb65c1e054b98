"""`opcase baseline`: the baseline files `opcase run --compare` gates against."""
from __future__ import annotations

import json
from pathlib import Path

import click

from gen.core.casefile import atomic_write
from harness.cli.common import InputError, check_writable
from harness.judge.gate import BaselineError, BaselineRefused, load_baseline, load_results, updated_baseline


@click.group()
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
    missing = [p for p in results_paths if not Path(p).is_file()]
    if missing:
        raise InputError(f"no such results file: {', '.join(missing)}")
    check_writable("-o", out_path)
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
