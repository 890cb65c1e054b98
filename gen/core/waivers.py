"""Audit waivers: a difference between a spec and its sources that a person reviewed and accepted,
recorded next to what it concerns (a check, a tensor, a param, or the spec itself) as

    waivers:
      - {finding: "contradicts bound kernel_size <= 137", reason: "why the spec is right"}

`opcase audit` (gen/audit) reports a waived finding with its reason and does not fail on it.
Waivers change nothing that is generated; they are part of the spec's bytes (and so its hash)."""
from __future__ import annotations

PLACES = ("checks", "inputs", "outputs", "params")


def entries(node) -> list:
    """The waiver mappings directly under one spec node (a check, a tensor, the spec)."""
    return node.get("waivers", []) if isinstance(node, dict) else []


def problems(raw: dict) -> list:
    """(node, message) for each malformed waiver list in a parsed spec."""
    out = []
    for node in _nodes(raw):
        items = node.get("waivers")
        if items is None:
            continue
        if not isinstance(items, list) or not items:
            out.append((node, "waivers must be a non-empty list of {finding, reason}"))
            continue
        for item in items:
            if not isinstance(item, dict) or set(item) != {"finding", "reason"} or \
                    not all(isinstance(item[k], str) and item[k].strip() for k in ("finding", "reason")):
                out.append((node, "a waiver is {finding: <the finding's id>, reason: <why>}, both non-empty text"))
    return out


def collect(raw: dict) -> dict:
    """finding id -> reason, over the whole spec."""
    return {w["finding"]: w["reason"] for node in _nodes(raw) for w in entries(node)
            if isinstance(w, dict) and "finding" in w and "reason" in w}


def _nodes(raw: dict):
    yield raw
    for place in PLACES:
        value = raw.get(place)
        if isinstance(value, list):
            yield from (n for n in value if isinstance(n, dict))
        elif isinstance(value, dict):
            yield from (n for n in value.values() if isinstance(n, dict))
