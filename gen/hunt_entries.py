"""Writing the cases `opcase power --hunt` found into a spec's `suites.hunt`, as data.

The spec stays the hand-written file it is: only the `hunt:` block under `suites:` is written
(replaced when it is there, added at the end of `suites:` when not), every other line kept byte
for byte.  The result is loaded as a spec before it replaces the file (atomically): a spec the
hunt would break is never written.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import hashlib

from gen.core.casefile import atomic_write
from gen.core.spec import load_spec

_TOP_KEY = re.compile(r"[^\s#]")
_HEADER = "# found by `opcase power --hunt`: each case kills the bugs it names (README: Measuring a suite's power)"


def merged(existing: list[dict], found: list[tuple[str, list[str]]]) -> list[dict]:
    """The entries already in the spec, then each found case not among them; a case found again
    adds the bugs it kills now to those its entry names."""
    entries = [{"case": e["case"], "kills": list(e["kills"])} for e in existing]
    by_case = {e["case"]: e for e in entries}
    for case, kills in found:
        entry = by_case.get(case)
        if entry is None:
            entry = by_case[case] = {"case": case, "kills": []}
            entries.append(entry)
        entry["kills"] += [k for k in kills if k not in entry["kills"]]
    return entries


def hunt_block(entries: list[dict], indent: str) -> list[str]:
    """The `hunt:` block's lines at the indent of `suites:`'s keys (double-quoted: a descriptor
    holds ':' and ',')."""
    lines = [f"{indent}hunt:   {_HEADER}\n"]
    for entry in entries:
        lines.append(f"{indent}  - case: {json.dumps(entry['case'])}\n")
        lines.append(f"{indent}    kills: [{', '.join(json.dumps(k) for k in entry['kills'])}]\n")
    return lines


def _block_end(lines: list[str], start: int, indent: int) -> int:
    """The line after the block that starts at ``start`` and holds the lines indented past ``indent``
    (blank and comment lines inside it included; trailing ones left out)."""
    end = last = start + 1
    while end < len(lines):
        text = lines[end]
        stripped = text.strip()
        if stripped and not stripped.startswith("#"):
            if len(text) - len(text.lstrip()) <= indent:
                break
            last = end + 1
        end += 1
    return last


def with_hunt(text: str, entries: list[dict]) -> str:
    """``text`` (a spec) with its suites.hunt block holding ``entries``."""
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    suites = next((i for i, line in enumerate(lines) if re.match(r"suites:\s*(#.*)?$", line)), None)
    if suites is None:
        raise ValueError("the spec has no top-level 'suites:' to hold the hunt suite")
    end = _block_end(lines, suites, 0)
    children = [line for line in lines[suites + 1:end] if line.strip() and not line.strip().startswith("#")]
    indent = children[0][:len(children[0]) - len(children[0].lstrip())] if children else "  "
    hunt = next((i for i in range(suites + 1, end) if re.match(re.escape(indent) + r"hunt:", lines[i])), None)
    block = hunt_block(entries, indent)
    if hunt is None:
        lines[end:end] = block
    else:
        lines[hunt:_block_end(lines, hunt, len(indent))] = block
    return "".join(lines)


def spec_digest(spec_path) -> str:
    """The sha256 of a spec's bytes, as a hunt starts: write_hunt writes only into that very text."""
    return hashlib.sha256(Path(spec_path).read_bytes()).hexdigest()


def write_hunt(spec_path: Path, found: list[tuple[str, list[str]]], expected_digest: str | None = None) -> int:
    """Add the found (descriptor, bugs it kills) to the spec's suites.hunt; how many cases are new.
    A symlinked spec is written through its link (the link stays); ``expected_digest``: the spec's
    spec_digest() when the hunt started: a spec edited since is left as it is (ValueError)."""
    spec_path = Path(spec_path).resolve()
    if expected_digest is not None and spec_digest(spec_path) != expected_digest:
        raise ValueError("the spec was edited while the hunt ran: nothing written; run the hunt again")
    spec = load_spec(spec_path)
    existing = spec.suites.get("hunt") or []
    entries = merged(existing, found)
    if entries == [{"case": e["case"], "kills": list(e["kills"])} for e in existing]:
        return 0
    text = with_hunt(Path(spec_path).read_text(encoding="utf-8"), entries)
    staged = Path(spec_path).with_name(f".{Path(spec_path).name}.hunt")
    try:
        staged.write_text(text, encoding="utf-8")
        load_spec(staged)                      # refused with its file and line before the spec is touched
    finally:
        staged.unlink(missing_ok=True)
    atomic_write(spec_path, text)
    return len(entries) - len(existing)
