"""Reading text mlu-ops cases: opcase's reader (harness/mluops/text_runs.py) against protobuf's
text_format.Parse on the same files, alternating, in the same run.

    python tests/bench/bench_mluops_text.py [CASES_DIR]

Exports CASES_DIR (default: the committed cases/) as mlu-ops `.prototxt` into a temporary
directory, then parses every file with each reader three times and prints the best totals,
the bytes per second and the ratio.
"""
from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

from click.testing import CliRunner
from google.protobuf import text_format

from harness.cli import main as opcase
from harness.mluops import mluops_case_pb2 as pb
from harness.mluops import text_runs

REPO = Path(__file__).resolve().parents[2]


def best_total(parse, texts: list[str]) -> float:
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for text in texts:
            parse(text, pb.Node())
        best = min(best, time.perf_counter() - start)
    return best


def main(cases: Path) -> None:
    with tempfile.TemporaryDirectory(dir=Path.home()) as tmp:
        done = CliRunner().invoke(opcase, ["export", str(cases), "--format", "mluops", "--text", "-o", tmp])
        if done.exit_code:
            sys.exit(done.output)
        texts = [p.read_text() for p in sorted(Path(tmp).rglob("*.prototxt"))]
    size = sum(map(len, texts)) / 1e6
    fast, slow = best_total(text_runs.parse, texts), best_total(text_format.Parse, texts)
    print(f"{len(texts)} files, {size:.1f} MB, load average {os.getloadavg()[0]:.1f}")
    print(f"opcase's reader: {fast:.2f} s ({size / fast:.1f} MB/s)")
    print(f"text_format.Parse: {slow:.2f} s ({size / slow:.1f} MB/s)")
    print(f"ratio: {slow / fast:.1f}x")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / "cases")
