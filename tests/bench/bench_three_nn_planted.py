"""three_nn's planted copy, its block search against its first form (each query's whole row of
distances sorted, tests/kernels/three_nn.py, put in the block search's place), on the spec's network
shapes, in one process.

    python tests/bench/bench_three_nn_planted.py [--repeat R]

Per shape and knob (the plain copy, the ties bug, the half-distances bug): the best CPU seconds of R
calls of each side, old and new alternating, their ratio old / new and whether the bits are the same.
The load average is printed before and after: only the same-run ratios mean much on a shared machine.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
from gen.kernels.three_nn import planted  # noqa: E402
from kernels.three_nn import sorted_three_nn  # noqa: E402

# specs/three_nn_forward.yaml's pointnet2_fp network shapes (B, N, M), known a subset of unknown as the spec's scene mode.
SHAPES = [(2, 256, 64), (2, 1024, 256), (2, 4096, 1024), (2, 16384, 4096), (3, 16384, 4096)]
KNOBS = {"correct": {}, "ties_keep_last": {"tie": "last"}, "distances_in_half": {"distance_dtype": np.float16}}


def best_seconds(fn, repeat):
    best, out = float("inf"), None
    for _ in range(repeat):
        start = time.process_time()
        out = fn()
        best = min(best, time.process_time() - start)
    return best, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()}")
    rng = np.random.default_rng(0)
    print(f"{'B, N, M':<18} {'knob':<18} {'old s':>8} {'new s':>8} {'old/new':>8}  same bits")
    for B, N, M in SHAPES:
        unknown = rng.uniform(-50.0, 50.0, (B, N, 3))
        known = np.stack([unknown[b, np.sort(rng.choice(N, M, replace=False))] for b in range(B)])
        for name, knobs in KNOBS.items():
            old, old_out = best_seconds(lambda: sorted_three_nn(unknown, known, **knobs), args.repeat)
            new, new_out = best_seconds(lambda: planted.three_nn(unknown, known, **knobs), args.repeat)
            same = all(a.tobytes() == b.tobytes() for a, b in zip(old_out, new_out))
            print(f"{str((B, N, M)):<18} {name:<18} {old:8.3f} {new:8.3f} {old / new:8.2f}  {same}")
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
