"""The document `opcase power --json` writes when it starts, before anything is measured.

A power run takes minutes to hours; one killed, crashed or out of memory half way used to leave
the previous run's file, "ok": true included, as if it were this run's.  The file now says, from
the start, that the run did not finish: "complete": false and "ok": false, replaced by the whole
document ("complete": true) only when the run ends.
"""
from __future__ import annotations

import json

INCOMPLETE_REASON = "the power run started but did not finish (killed, crashed, or still under way)"


def power_incomplete_json(backend: str) -> str:
    return json.dumps({"complete": False, "reason": INCOMPLETE_REASON, "base": backend,
                       "summary": {"ok": False}}, indent=1)
