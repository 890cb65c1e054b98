"""Precision and recall of the doc reader against hand-written ground truth (tests/data/audit_truth).

    python -m gen.audit.measure DOCS_DIR [TRUTH_DIR]

DOCS_DIR holds the docs the truth files name (mlu-ops' docs/design_docs/<op>/<op>.md, flat).  Each
truth file lists facts in the reader's key vocabulary, in three groups: interface (tensor, dtype,
layout, shape, param), checks (limit, check) and accuracy (metric, mode, threshold)."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import yaml

from gen.audit import docread
from gen.audit.doctext import DocError

TRUTH = Path(__file__).resolve().parents[2] / "tests" / "data" / "audit_truth"
# a truth file's `doc:` names a file in DOCS_DIR, nothing else
_DOC_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,200}\.(?:md|txt)")


def _accuracy_keys(facts) -> set:
    out = set()
    for f in facts:
        if f.kind != "accuracy":
            continue
        r = f.value
        out.update(f"metric {m}" for m in r["metrics"])
        out.add(f"mode {r['mode']}")
        out.update(f"threshold {m} {v:g}" for m, v in r["thresholds"].items())
    return out


def reader_keys(facts) -> dict:
    return {"interface": {f.key for f in facts if f.kind in docread.INTERFACE_KINDS},
            "checks": {f.key for f in facts if f.kind in docread.CHECK_KINDS},
            "accuracy": _accuracy_keys(facts),
            "template": {f.key.split(" ", 1)[1] for f in facts if f.kind == "template" and "(" not in f.key}}


def _truth_keys(truth: dict) -> dict:
    acc = set()
    for k in truth.get("accuracy", []):
        parts = k.split(" ")
        acc.add(f"threshold {parts[1]} {float(parts[2]):g}" if parts[0] == "threshold" else k)
    return {"interface": set(truth.get("interface", [])), "checks": set(truth.get("checks", [])),
            "accuracy": acc, "template": {str(t) for t in truth.get("template", [])}}


def measure(docs_dir: Path, truth_dir: Path = TRUTH) -> dict:
    totals = {g: [0, 0, 0] for g in ("interface", "checks", "accuracy")}   # true positives, emitted, truth
    misses = []
    for tf in sorted(truth_dir.glob("*.yaml")):
        truth = yaml.safe_load(tf.read_text(encoding="utf-8"))
        name = str(truth.get("doc", ""))
        if not _DOC_NAME.fullmatch(name):
            raise DocError(f"{tf.name}: doc {name[:80]!r} is not a file name in DOCS_DIR")
        got = reader_keys(docread.read(docs_dir / name))
        want = _truth_keys(truth)
        for group, t in totals.items():
            hit = got[group] & want[group]
            t[0] += len(hit)
            t[1] += len(got[group])
            t[2] += len(want[group])
            misses += [f"{truth['doc']}: extra {k}" for k in sorted(got[group] - want[group])]
            misses += [f"{truth['doc']}: missed {k}" for k in sorted(want[group] - got[group])]
        if got["template"] != want["template"]:
            misses.append(f"{truth['doc']}: template sections {sorted(got['template'])}, truth {sorted(want['template'])}")
    return {"groups": {g: {"precision": t[0] / t[1] if t[1] else 1.0, "recall": t[0] / t[2] if t[2] else 1.0,
                           "true": t[0], "emitted": t[1], "truth": t[2]} for g, t in totals.items()},
            "differences": misses}


def main(argv) -> int:
    if not argv or len(argv) > 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    try:
        result = measure(Path(argv[0]), Path(argv[1]) if len(argv) > 1 else TRUTH)
    except DocError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for group, r in result["groups"].items():
        print(f"{group:9} precision {r['precision']:.1%} ({r['true']}/{r['emitted']})  "
              f"recall {r['recall']:.1%} ({r['true']}/{r['truth']})")
    for line in result["differences"]:
        print("  " + line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
