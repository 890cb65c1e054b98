"""Writing text mlu-ops cases: opcase's printer (harness/mluops/text_print.py) against protobuf's
text_format.MessageToString, and the reader's possessive run search against the same pattern
without the possessive repeat, on the same messages in the same process (the machine is shared).

    python tests/bench/bench_mluops_text_print.py [EVERY]

Builds the mlu-ops message of every EVERY-th committed case (default 5; no file is written, every
tensor kept in the message), prints it both ways and searches both texts for runs, checking that
each pair agrees, and prints the totals and ratios.
"""
from __future__ import annotations

import re
import sys
import time
from pathlib import Path

from google.protobuf import text_format

from gen.core.casefile import find, load
from harness.mluops import text_runs
from harness.mluops.schema import kernel_format
from harness.mluops.text_print import message_to_text
from harness.mluops.writer import _node

REPO = Path(__file__).resolve().parents[2]
NOT_POSSESSIVE = re.compile(text_runs._RUN.pattern.replace("}+)", "})"), re.MULTILINE)


def main(every: int) -> None:
    assert NOT_POSSESSIVE.pattern != text_runs._RUN.pattern
    nodes = []
    for path in find([REPO / "cases"])[::every]:
        case = load(path, verify=False)
        kernel = kernel_format(case.op)
        if kernel is not None and case.expect == "ok":
            # A threshold no tensor reaches: nothing is written beside any path.
            nodes.append(_node(case, kernel, Path("/nonexistent") / f"{path.stem}.prototxt", 1 << 40))
    spent = {"text_format": 0.0, "text_print": 0.0, "runs_plain": 0.0, "runs_possessive": 0.0}
    chars = 0
    for node in nodes:
        start = time.perf_counter()
        old = text_format.MessageToString(node)
        middle = time.perf_counter()
        new = message_to_text(node)
        spent["text_format"] += middle - start
        spent["text_print"] += time.perf_counter() - middle
        assert old == new
        chars += len(new)
        start = time.perf_counter()
        plain = [(m.start(), m.end(), m.lastgroup) for m in NOT_POSSESSIVE.finditer(new)]
        middle = time.perf_counter()
        possessive = [(m.start(), m.end(), m.lastgroup) for m in text_runs._RUN.finditer(new)]
        spent["runs_plain"] += middle - start
        spent["runs_possessive"] += time.perf_counter() - middle
        assert plain == possessive
    print(f"{len(nodes)} cases, {chars / 1e6:.1f} MB of text: "
          + ", ".join(f"{name} {seconds:.2f} s" for name, seconds in spent.items())
          + f"; printing {spent['text_format'] / spent['text_print']:.1f}x, "
            f"run search {spent['runs_plain'] / spent['runs_possessive']:.1f}x")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
