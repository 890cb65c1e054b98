"""Peak memory of `opcase gen` and `opcase run` on the largest carafe network cases.

    python tests/bench/bench_memory.py [--op carafe_forward] [--op carafe_backward]
                                       [--case fpn_h512_c2048-float32] [--dir DIR]

For each op (default: both), generates the case (unless DIR already holds it) and runs the
lowp backend on it, each in a child process, and prints each child's peak resident set size
next to the bytes of the case's tensors.  The run's figure includes the backend's own arrays
(its outputs) and the input pages it reads; the harness's share is what is left after those.
Generation has no backend: its whole peak counts.  Inputs over 256 MiB are drawn straight to
their sidecar files (carafe_backward's grad_output is 8.6 GB), goldens are streamed.
Target (issue 'network scale'): under 3 GB besides the backend's own arrays.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gen.core.casefile import load

GB = 1e9


def peak_rss_of(command: list[str]) -> tuple[float, float]:
    """(seconds, peak RSS in GB) of a child process."""
    start = time.perf_counter()
    # A fresh interpreter per measurement: RUSAGE_CHILDREN reports the largest child so far.
    wrapper = [sys.executable, "-c",
               "import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True); "
               "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"] + command
    out = subprocess.run(wrapper, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
    return time.perf_counter() - start, int(out) * 1024 / GB


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--op", action="append", choices=["carafe_forward", "carafe_backward"])
    parser.add_argument("--case", default="fpn_h512_c2048-float32")
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()
    for op in args.op or ["carafe_forward", "carafe_backward"]:
        measure(op, args.case, args.dir)


def measure(op: str, case_name: str, directory: str | None) -> None:
    with tempfile.TemporaryDirectory(dir=Path.home()) as scratch:
        out = Path(directory or scratch)
        path = out / op / "network" / f"{case_name}.opcase"
        if not path.exists():
            seconds, rss = peak_rss_of(["opcase", "gen", f"specs/{op}.yaml", "--suite", "network",
                                        "--select", f"^{case_name}$", "-o", str(out)])
            print(f"{op} opcase gen  {case_name}: {seconds:7.1f} s, peak RSS {rss:5.2f} GB")
        case = load(path, verify=False)
        inputs = sum(t.data.nbytes for t in case.inputs.values())
        outputs = sum(t.data.nbytes for t in case.outputs.values())
        print(f"{op} case tensors: inputs {inputs / GB:.2f} GB, golden {outputs / GB:.2f} GB")
        seconds, rss = peak_rss_of(["opcase", "run", str(path), "--backend", "lowp"])
        print(f"{op} opcase run  --backend lowp: {seconds:7.1f} s, peak RSS {rss:5.2f} GB; "
              f"less the backend's output ({outputs / GB:.2f} GB) and the inputs it reads ({inputs / GB:.2f} GB): "
              f"{rss - outputs / GB - inputs / GB:5.2f} GB")


if __name__ == "__main__":
    main()
