"""Precision and recall of `opcase audit` on held-out docs, against differences planted by hand.

    python -m gen.audit.measure_audit DOCS_DIR [FIXTURES_DIR]

FIXTURES_DIR (tests/data/audit_heldout) holds, per held-out doc, a spec a person made of it (its
`doc:` names the doc in DOCS_DIR) and `plants.yaml`: differences written down before the audit ran
on them, each a text edit of one spec (`replace` -> `with`: a limit changed, a check removed or
added, a metric dropped, a threshold changed) and the ids of the findings that would name it
(`expect`, any of them).  The measure audits each correct spec, then its copy with all of its
plants applied (they concern different things, so they do not mask each other):

- every finding on a correct spec is false (the spec says what the doc says);
- a finding on a planted copy is real when its id is one a plant expects, else false;
- precision = real findings / findings, over both runs; recall = plants found / plants.

The fixtures name no implemented reference (they are audited, never generated); the spec loader
insists that a reference import, so the copy audited names a stand-in, which the audit never reads.
Only the doc is a source here: no mlu-ops code."""
from __future__ import annotations

import re
import sys
import tempfile
from pathlib import Path

import yaml

from gen.audit.auditing import audit_spec
from gen.core.spec import SpecError, load_spec

FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "data" / "audit_heldout"
# Any function the loader accepts: the audit compares interface, checks and accuracy, never this.
STAND_IN_REFERENCE = "gen.kernels.shared.reference:assemble"
_REFERENCE_LINE = re.compile(r"^reference:.*$", re.MULTILINE)
# a fixture's `doc:` names a file in DOCS_DIR, nothing else
_DOC_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,200}\.(?:md|txt)")


class FixtureError(Exception):
    """A fixture that cannot be measured: a plant whose text is not in its spec once, a missing doc."""


def _audited(text: str, doc: Path, where: Path, name: str) -> list:
    """The findings of `opcase audit` on a spec's text against one doc, without mlu-ops' code."""
    path = where / name
    path.write_text(_REFERENCE_LINE.sub(f"reference: {STAND_IN_REFERENCE}", text, count=1), encoding="utf-8")
    return [f for f in audit_spec(load_spec(path), [doc], []) if not f.waived]


def fact_class(finding_id: str) -> str:
    """The fact class a finding (or a plant, by its first expected id) is about: interface (dtype,
    layout, rank, a tensor or param), accuracy, or checks and limits (everything else)."""
    if finding_id == "contradicts accuracy":
        return "accuracy"
    if re.match(r"contradicts (?:dtype|layout|rank) |lacks (?:tensor|param) ", finding_id):
        return "interface"
    return "checks"


def _planted(text: str, plants: list, spec_name: str) -> str:
    for p in plants:
        if text.count(p["replace"]) != 1:
            raise FixtureError(f"{spec_name}: plant {p['id']!r}: its text is in the spec "
                               f"{text.count(p['replace'])} times, not once")
        text = text.replace(p["replace"], p["with"])
    return text


def measure(docs_dir: Path, fixtures: Path = FIXTURES) -> dict:
    plants_of: dict = {}
    for p in yaml.safe_load((fixtures / "plants.yaml").read_text(encoding="utf-8"))["plants"]:
        plants_of.setdefault(p["spec"], []).append(p)
    real = total = found = planted = 0
    lines = []
    per = {c: {"real": 0, "findings": 0, "found": 0, "planted": 0} for c in ("interface", "checks", "accuracy")}
    with tempfile.TemporaryDirectory(prefix="opcase-audit-measure-") as tmp:
        for spec_file in sorted(fixtures.glob("*.yaml")):
            if spec_file.name == "plants.yaml":
                continue
            text = spec_file.read_text(encoding="utf-8")
            name = str(yaml.safe_load(text).get("doc", ""))
            if not _DOC_NAME.fullmatch(name):
                raise FixtureError(f"{spec_file.name}: doc {name[:80]!r} is not a file name in DOCS_DIR")
            doc = docs_dir / name
            if not doc.is_file():
                raise FixtureError(f"{spec_file.name}: its doc {doc} is absent")
            clean = _audited(text, doc, Path(tmp), spec_file.name)
            total += len(clean)
            for f in clean:
                per[fact_class(f.id)]["findings"] += 1
            lines += [f"{spec_file.name} (correct): false finding [{f.id}] {f.message}" for f in clean]
            plants = plants_of.pop(spec_file.name, [])
            if not plants:
                continue
            got = _audited(_planted(text, plants, spec_file.name), doc, Path(tmp), spec_file.name)
            expected = {e for p in plants for e in p["expect"]}
            total += len(got)
            real += sum(f.id in expected for f in got)
            for f in got:
                per[fact_class(f.id)]["findings"] += 1
                per[fact_class(f.id)]["real"] += f.id in expected
            lines += [f"{spec_file.name} (planted): false finding [{f.id}] {f.message}"
                      for f in got if f.id not in expected]
            ids = {f.id for f in got}
            for p in plants:
                planted += 1
                hit = any(e in ids for e in p["expect"])
                found += hit
                cls = fact_class(p["expect"][0]) if p["expect"] else "checks"
                per[cls]["planted"] += 1
                per[cls]["found"] += hit
                if not hit:
                    lines.append(f"{spec_file.name}: missed plant {p['id']} ({p['what']})")
    if plants_of:
        raise FixtureError(f"plants for specs that are not there: {', '.join(sorted(plants_of))}")
    return {"precision": real / total if total else 1.0, "recall": found / planted if planted else 1.0,
            "real": real, "findings": total, "found": found, "planted": planted, "differences": lines,
            "classes": per}


def main(argv) -> int:
    if not argv or len(argv) > 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    try:
        r = measure(Path(argv[0]), Path(argv[1]) if len(argv) > 1 else FIXTURES)
    except (FixtureError, SpecError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"audit     precision {r['precision']:.1%} ({r['real']}/{r['findings']})  "
          f"recall {r['recall']:.1%} ({r['found']}/{r['planted']})")
    for cls, c in r["classes"].items():
        print(f"  {cls:<9} precision {c['real']}/{c['findings']}  recall {c['found']}/{c['planted']}")
    for line in r["differences"]:
        print("  " + line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
