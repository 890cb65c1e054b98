"""Which cases a run covers: --filter, --shard and --rerun-failed, decided from paths alone.

A case is named by the last three parts of its path, OP/SUITE/NAME (the layout `opcase gen`
writes), so that selections do not depend on where a suite lives and need no case to be read.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

from gen.core.casefile import SUFFIX
from gen.core.verdict import FAILING
from harness.judge.gate import GATE_FAILING, result_key


def case_key(path) -> str:
    """OP/SUITE/NAME of a case file: its last three path parts, without the .opcase suffix."""
    parts = list(Path(path).parts[-3:])
    if parts and parts[-1].endswith(SUFFIX):
        parts[-1] = parts[-1][: -len(SUFFIX)]
    return "/".join(parts)


def in_shard(path, index: int, count: int) -> bool:
    """Whether the case belongs to shard ``index`` (1-based) of ``count``.

    By a hash of its name: every case is in exactly one shard, the same one on every machine and
    in every run, and shards stay about equal in size as cases come and go.
    """
    digest = hashlib.sha256(case_key(path).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % count == index - 1


def failed_in(results: dict) -> tuple[set[str], set[str]]:
    """(resolved paths, OP/SUITE/NAME keys) of the cases that failed in a results document."""

    failed = [c for c in results["cases"] if c["status"] in FAILING or c.get("gate") in GATE_FAILING]
    return {str(Path(c["path"]).resolve()) for c in failed if c.get("path")}, {result_key(c) for c in failed}
