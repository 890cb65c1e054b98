"""`opcase audit`'s work: which docs and code a spec is audited against, the findings, the lint.

Where a spec's doc comes from, without --doc: its `doc:` field read as a path below the docs root
(--docs-root, else $OPCASE_DOCS, else ../shared/design-docs beside the clone), and the root's
mlu-ops/<op>.md where that exists (mlu-ops' own doc of the kernel).  A `doc:` that is a sentence,
not a file, names nothing; the mlu-ops/<op>.md rule may still find one.  A path from a spec never
leaves the docs root."""
from __future__ import annotations

import os
import re
from pathlib import Path

from gen.audit import coderead, docread
from gen.audit.compare import Sources, audit
from gen.audit.doctext import DocError
from gen.core import waivers

REPO = Path(__file__).resolve().parents[2]


def default_docs_root() -> Path:
    env = os.environ.get("OPCASE_DOCS")
    return Path(env) if env else REPO.parent / "shared" / "design-docs"


def docs_for(spec, root: Path) -> list:
    """The doc files a spec names (inside root), then root/mlu-ops/<op>.md; missing ones left out."""
    out = []
    root = root.resolve()
    name = spec.doc.strip()
    if re.fullmatch(r"[A-Za-z0-9_./-]{1,200}\.(?:md|txt)", name) and ".." not in name.split("/"):
        p = (root / name).resolve()
        if p.is_file() and root in p.parents:
            out.append(p)
    own = root / "mlu-ops" / f"{spec.op}.md"
    if own.is_file() and own.resolve() not in out:
        out.append(own.resolve())
    return out


def read_code_files(paths) -> list:
    facts = []
    for p in paths:
        facts.extend(coderead.read_code(p))
    return facts


def audit_spec(spec, doc_paths, code_facts) -> list:
    docs = [(str(p), docread.read(p)) for p in doc_paths]
    sources = Sources(docs=docs, code=coderead.for_op(code_facts, spec.op))
    own = next((d for d, _ in docs if Path(d).name == f"{spec.op}.md"), "")
    return audit(spec, sources, waivers.collect(spec.raw), own_doc=own if len(docs) > 1 else "")


def lint(path) -> list:
    """A doc's own defects: (where, message)."""
    facts = docread.read(path)
    out = []
    tensors = {f.key.split(" ")[1] for f in facts if f.kind == "tensor"}
    params = {f.key.split(" ")[1] for f in facts if f.kind == "param"}
    ranks = {}
    for f in facts:
        if f.kind == "shape":
            ranks.setdefault(f.key.split(" ")[1], len(f.value))
    dims = {d.lower() for f in facts if f.kind == "shape" for d in f.value}
    known = tensors | params | {"dimNb", "dimnb"}
    for f in facts:
        if f.kind not in ("check", "limit"):
            continue
        where = f"{path}:{f.line}"
        for name in re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)`", f.text):
            base = name[:-5] if name.endswith("_desc") or name.endswith("_ptr") else name
            base = base[:-4] if base.endswith("_ptr") else base
            if tensors and base not in known and base.lower() not in dims and base not in ("handle", "workspace",
                                                                                            "workspace_size"):
                out.append((where, f"'{name}' is not in the interface (1.3's tensors and params)"))
        for name, axis in re.findall(r"([A-Za-z_][A-Za-z0-9_]*)[ .]{0,2}(?:dim|dims)[ ]?[\[(]?(\d)", f.text):
            if name in ranks and int(axis) >= ranks[name]:
                out.append((where, f"axis {axis} of '{name}', which has {ranks[name]} axes"))
    bounds = {}
    for f in facts:
        for name, op, number in f.bounds if f.kind in ("check", "limit") else ():
            if op in ("<=", "<"):
                bounds.setdefault(name, []).append((number, f))
    for name, seen in bounds.items():
        values = sorted({n for n, _ in seen})
        if len(values) > 1:
            places = ", ".join(f"{f.key.split(' ', 1)[1]} (line {f.line}): {n}" for n, f in seen)
            out.append((f"{path}:{seen[0][1].line}", f"'{name}' has different upper limits: {places}"))
    return out


__all__ = ["DocError", "audit_spec", "default_docs_root", "docs_for", "lint", "read_code_files"]
