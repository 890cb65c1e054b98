"""The TODOs `opcase draft` leaves in a spec: `TODO(<where>): <what to decide>` values, which
`opcase gen` refuses, one line each.  Light on purpose: `opcase gen` imports it."""
from __future__ import annotations

from pathlib import Path

TODO = "TODO("
_MAX_TODO_SCAN = 4 * 1024 * 1024


def todos_in(path) -> list:
    """'file:line: TODO(...)' for every TODO value left in a spec file."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            text = f.read(_MAX_TODO_SCAN).decode("utf-8", errors="replace")
    except OSError:
        return []   # the spec loader says why it cannot be read
    out = []
    for i, line in enumerate(text.splitlines(), 1):
        body = line.split(" #", 1)[0] if not line.lstrip().startswith("#") else ""
        j = body.find(TODO)
        if j >= 0:
            out.append(f"{path}:{i}: {body[j:].strip().rstrip(chr(34)).rstrip(chr(39))[:160]}")
    return out
