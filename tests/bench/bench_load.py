"""Loading a 1 GB case (sidecar verified with sha256, memory-mapped), against reading the same
bytes with a plain np.fromfile, measured in the same run.

    python tests/bench/bench_load.py [GB]

Target (issue 'network scale'): >= 1 GB/s.
"""
from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from gen.core.casefile import Case, Tensor, load, save


def main(gigabytes: float) -> None:
    elements = int(gigabytes * 1e9) // 4
    data = np.random.default_rng(0).random(elements, dtype=np.float32)
    with tempfile.TemporaryDirectory(dir=Path.home()) as tmp:
        path = save(Case(op="bench", suite="bench", name="big", params={},
                         inputs={"x": Tensor("x", data.shape, data.dtype, "ARRAY", data)},
                         outputs={"y": Tensor("y", (1,), np.dtype(np.float32), "ARRAY", np.ones(1, np.float32))}),
                    Path(tmp) / "big.opcase")
        side = Path(tmp) / "big.opcase.in.x"
        del data
        timings = {"load (sha256 verified)": [], "np.fromfile": []}
        for _ in range(3):
            start = time.perf_counter()
            case = load(path)
            timings["load (sha256 verified)"].append(time.perf_counter() - start)
            del case
            start = time.perf_counter()
            np.fromfile(side, dtype=np.float32)
            timings["np.fromfile"].append(time.perf_counter() - start)
        size = elements * 4 / 1e9
        load_s, read_s = min(timings["load (sha256 verified)"]), min(timings["np.fromfile"])
        print(f"case of {size:.2f} GB: load {load_s:.3f} s = {size / load_s:.2f} GB/s; "
              f"np.fromfile {read_s:.3f} s = {size / read_s:.2f} GB/s; ratio {load_s / read_s:.2f}x")


if __name__ == "__main__":
    main(float(sys.argv[1]) if len(sys.argv) > 1 else 1.0)
