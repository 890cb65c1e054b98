"""How fast numpy can run carafe's contraction in a fixed order of additions, against one core's peak.

    python tests/bench/bench_carafe_ceiling.py [--channels C] [--repeat R]

carafe's goldens add each output's k*k products one by one in a fixed order (gen/kernels/carafe/reference.py),
so they may not use BLAS.  This measures, in CPU seconds of this process (a shared machine's
waits for a core do not count), each as a fraction of one core's float64 multiply-add rate
(single-threaded dgemm, as tests/bench/bench_goldens.py measures it):

- einsum, one pixel hot in cache: np.einsum("at,tc->ac") on a pixel's 4 phases x 25 taps x C, data
  hot in cache: the fused `out += w * x` loop np.einsum runs (SIMD at numpy's
  build baseline, 128-bit on x86-64), the best case of the golden's kernel;
- einsum, a row: the golden's own call on one input row of a network shape (row stack view,
  strided output), warm;
- ufunc multiply + add: the same products with two element-wise passes per tap (runtime-
  dispatched AVX-512 where the CPU has it, but each pass goes through memory).
"""

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
from numpy.lib.stride_tricks import as_strided

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.bench_goldens import multiply_add_peak  # noqa: E402

K, S, R = 5, 2, 2


def cpu_best(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.process_time()
        fn()
        best = min(best, time.process_time() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--channels", type=int, nargs="+", default=[256, 2048])
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    peak = multiply_add_peak()
    print(f"one core: {peak / 1e9:.1f} G float64 multiply-adds/s (dgemm, CPU time)   load {os.getloadavg()}")
    for C in args.channels:
        taps = rng.standard_normal((K * K, C))
        weights = rng.random((S * S, K * K))
        out = np.empty((S * S, C))
        calls = 50
        pixel = calls * S * S * K * K * C / cpu_best(
            lambda: [np.einsum("at,tc->ac", weights, taps, out=out) for _ in range(calls)], args.repeat)
        W = 64
        stack = rng.standard_normal((1, W + 2 * R, K, C))
        windows = as_strided(stack, shape=(1, W, 1, K, K, C), strides=(stack.strides[0], K * C * 8, C * 8,
                                                                       K * C * 8, C * 8, 8))
        row_weights = rng.random((1, W, 1, S, S, K, K))
        block = np.empty((S, W * S, C))
        out_pixels = block.reshape(1, S, W, S, 1, C).transpose(0, 2, 4, 1, 3, 5)
        row = W * S * S * K * K * C / cpu_best(
            lambda: np.einsum("pwgabhv,pwgvhc->pwgabc", row_weights, windows, out=out_pixels), args.repeat)
        product, total = np.empty((W * S * S, C)), np.zeros((W * S * S, C))
        flat_taps = rng.standard_normal((W * S * S, K * K, C))
        flat_weights = rng.random((W * S * S, K * K))

        def two_passes():
            for t in range(K * K):
                np.multiply(flat_weights[:, t, None], flat_taps[:, t], out=product)
                np.add(total, product, out=total)
        ufunc = W * S * S * K * K * C / cpu_best(two_passes, args.repeat)
        print(f"C={C:<5} einsum, one pixel hot in cache {pixel / peak:6.1%}   einsum, a row {row / peak:6.1%}   "
              f"ufunc multiply + add {ufunc / peak:6.1%}   load {os.getloadavg()[0]:.1f}", flush=True)


if __name__ == "__main__":
    main()
