"""`opcase explain`: which known variant a backend's outputs match (harness.studies.explain)."""
from __future__ import annotations

import json
import sys

import click

from gen.core.backend import BackendLoadError
from gen.core.casefile import CaseFileError, atomic_write
from harness.cli.common import (EXIT_FAILED, EXIT_NOTHING_JUDGED, InputError, check_writable, exits_on_signals,
                                finite_seconds, run_files)


@click.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("--backend", "backend_spec", required=True,
              help="The backend whose outputs are explained (as `opcase run` takes it).")
@click.option("--json", "json_path", default=None, type=click.Path(dir_okay=False),
              help="Write every case's ranking (per output: each variant's identical fraction, diff1, diff3, "
                   "ulps) and explanation as JSON.")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=None, callback=finite_seconds,
              help="Seconds the backend may take on a case (as `opcase run --timeout`).")
@click.option("--filter", "filter_text", default=None, help="Only cases whose OP/SUITE/NAME matches this regular expression.")
@exits_on_signals
def explain(paths, backend_spec, json_path, timeout, filter_text):
    """Name the arithmetic or the bug a backend's outputs match, element by element.

    \b
    Runs the backend on each case under PATHS as `opcase run` does (Python backends other than
    reference and lowp in a worker process) and compares its outputs with known variants of the
    kernel computed on the same inputs: the reference in other arithmetic (float32, float16, the
    final cast toward zero, ties away from zero or through float32, subnormals flushed), the mmcv
    emulation, the kernel's own variants, the generic mutants of `opcase power` and the kernel's
    planted bugs.  Per output, variants are ranked by the fraction of elements bit-identical, then
    diff1 and diff3; the line says which variant matches bit for bit, or which explains which
    elements.  Variants are computed one at a time on the whole case and dropped once scored
    (network cases too): memory is about the outputs three times over plus two bits per element
    per variant; a case needing over half the machine's memory is refused.
    Exit status: 0 every case explained; 1 the backend failed on a case (raised, crashed, timed out)
    or a case file is unreadable; 2 usage or input error; 5 nothing explained (every case
    unsupported or refused).
    """
    from harness.studies.explain import case_lines, explain_case, json_doc   # a command's own module, loaded when used

    if json_path is not None:
        check_writable("--json", json_path)
    files = run_files(paths, None, filter_text)
    docs = []
    for path in files:
        try:
            doc = explain_case(path, backend_spec, timeout)
        except BackendLoadError as exc:
            raise InputError(str(exc)) from None
        except CaseFileError as exc:
            doc = {"case": str(path), "path": str(path), "backend": backend_spec, "status": "error",
                   "headline": f"unreadable case file: {exc}", "outputs": [], "seconds": 0.0}
        for line in case_lines(doc):
            click.echo(line)
        docs.append(json_doc(doc))
    if json_path:
        atomic_write(json_path, json.dumps({"backend": backend_spec, "cases": docs}, indent=1, allow_nan=False) + "\n")
    explained = [d for d in docs if d["status"] in ("outputs", "rejected")]
    click.echo(f"{len(explained)} of {len(docs)} case(s) explained in {sum(d['seconds'] for d in docs):.1f} s")
    if any(d["status"] in ("raised", "error") for d in docs):
        sys.exit(EXIT_FAILED)
    if not explained:
        click.echo(f"exit status {EXIT_NOTHING_JUDGED}: no case was explained", err=True)
        sys.exit(EXIT_NOTHING_JUDGED)
    sys.exit(0)
