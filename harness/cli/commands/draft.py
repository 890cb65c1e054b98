"""`opcase draft` (gen/audit/README.md): a spec started from a design doc and mlu-ops' code."""
from __future__ import annotations

from pathlib import Path

import click

from gen.audit.auditing import default_docs_root
from gen.audit.doctext import DocError
from gen.audit.draft import draft as make_draft, todos_in
from gen.core.casefile import atomic_write, is_plain_name
from harness.cli.common import InputError


@click.command("draft")
@click.argument("doc", type=click.Path(dir_okay=False))
@click.option("--code", "code_paths", multiple=True, type=click.Path(dir_okay=False),
              help="mlu-ops source files with the kernel's parameter checks.")
@click.option("--op", default=None, help="The kernel's name (default: the output file's stem).")
@click.option("-o", "--out", "out_path", required=True, type=click.Path(dir_okay=False),
              help="The spec to write (specs/OP.yaml).")
def draft(doc, code_paths, op, out_path):
    """A spec from a design DOC: what the doc (and --code) fix filled in, a TODO(doc:line) wherever a
    person must decide.  `opcase gen` refuses it while a TODO is left.

    Exit status: 0 written; 2 usage or input error."""
    op = op or Path(out_path).stem
    if not is_plain_name(op):
        raise InputError(f"--op {op!r}: not a plain kernel name")
    root, here = default_docs_root().resolve(), Path(doc).resolve()
    doc_name = str(here.relative_to(root)) if root in here.parents else here.name   # as a spec's doc: names it
    try:
        text = make_draft(doc, code_paths, op, doc_name)
    except DocError as exc:
        raise InputError(str(exc)) from None
    atomic_write(Path(out_path), text)
    click.echo(f"{out_path}: drafted from {doc}; {len(todos_in(out_path))} TODO(s) left")
