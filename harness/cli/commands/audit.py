"""`opcase audit` (gen/audit/README.md): a spec beside its design doc and mlu-ops' code."""
from __future__ import annotations

import json
from pathlib import Path

import click

from gen.audit.auditing import DocError, audit_spec, default_docs_root, docs_for, lint, read_code_files
from gen.core.casefile import atomic_write
from gen.core.spec import SpecError, load_spec
from harness.cli.common import InputError

EXIT_FINDINGS = 1


def _docs_root(docs_root):
    return Path(docs_root) if docs_root else default_docs_root()


@click.command("audit")
@click.argument("specs", nargs=-1, type=click.Path(dir_okay=False))
@click.option("--doc", "doc_paths", multiple=True, type=click.Path(dir_okay=False),
              help="The design doc(s) to audit against (default: each spec's doc: below --docs-root, and "
                   "the root's mlu-ops/<op>.md).")
@click.option("--code", "code_paths", multiple=True, type=click.Path(dir_okay=False),
              help="mlu-ops source files with the kernel's parameter checks (kernels/<op>/*.cpp, mlu_op.h).")
@click.option("--docs-root", default=None, type=click.Path(file_okay=False),
              help="Where specs' doc: paths point (default: $OPCASE_DOCS, else ../shared/design-docs beside "
                   "the clone).")
@click.option("--json", "json_path", default=None, type=click.Path(dir_okay=False),
              help="Also write the findings as JSON here.")
@click.option("--lint", "lint_doc", default=None, type=click.Path(dir_okay=False),
              help="Instead: the defects of this doc itself.")
def audit(specs, doc_paths, code_paths, docs_root, json_path, lint_doc):
    """Every fact the doc or mlu-ops' code states that a SPEC lacks or contradicts, and every check of
    the spec no source states, each with both places.

    Exit status: 0 no unwaived finding; 1 unwaived findings (or, with --lint, doc defects);
    2 usage or input error."""
    try:
        if lint_doc:
            if specs:
                raise InputError("--lint DOC takes no SPECS")
            defects = lint(lint_doc)
            for where, message in defects:
                click.echo(f"{where}: {message}")
            click.echo(f"{lint_doc}: {len(defects)} defect(s)")
            raise SystemExit(EXIT_FINDINGS if defects else 0)
        if not specs:
            raise InputError("give SPECS to audit, or --lint DOC")
        code = read_code_files(code_paths)
        root = _docs_root(docs_root)
        report, failing = [], 0
        for path in specs:
            spec = load_spec(path)
            docs = [Path(d) for d in doc_paths] or docs_for(spec, root)
            if not docs and not code:
                raise InputError(f"{path}: no doc found for '{spec.op}' (doc: {spec.doc!r} below {root}); "
                                 f"give --doc or --docs-root")
            findings = audit_spec(spec, docs, code)
            open_ = [f for f in findings if not f.waived]
            failing += len(open_)
            for f in findings:
                mark = f"waived ({f.waived})" if f.waived else f.kind
                click.echo(f"{f.spec}: {mark}: [{f.id}] {f.message}" + (f"  <- {f.source}" if f.source else ""))
            click.echo(f"{path}: {len(open_)} open, {len(findings) - len(open_)} waived, against "
                       f"{', '.join(str(d) for d in docs) or 'no doc'}{' and ' + str(len(code_paths)) + ' code file(s)' if code_paths else ''}")
            report.append({"spec": str(path), "docs": [str(d) for d in docs], "code": list(code_paths),
                           "findings": [f.as_dict() for f in findings]})
        if json_path:
            atomic_write(Path(json_path), json.dumps({"specs": report}, indent=1, ensure_ascii=False) + "\n")
    except (SpecError, DocError) as exc:
        raise InputError(str(exc)) from None
    raise SystemExit(EXIT_FINDINGS if failing else 0)
