"""Speed of the carafe forward float64 golden (gen/kernels/carafe/reference.py), and of generating the whole
network case with its dynamic thresholds.

    python tests/bench/bench_carafe.py [--size H] [--channels C] [--repeat R]

Defaults: N = 1, H = W = 128, C = 256, kernel 5, group 1, scale 2 (a network shape of doc 000,
3.7): 419 M multiply-adds.  The target is >= 1 G multiply-adds/s.  Reported next to a
straightforward vectorized numpy formulation on the same inputs in the same run: the whole
unfolded tensor [N, sH, sW, k*k, C] built at output resolution and contracted with einsum
(it needs k*k times the output's memory: 3.4 GB at the default shape).  Times are the best of
R runs; other load on the machine shows as a gap between best and median.

The second part generates the network case fpn_h128_c256-float32 as `opcase gen` does
(inputs, float64 golden, the lowp float32 baseline, its diffs, thresholds, the case file) and
compares it with the straightforward route: unfolded einsum for the golden and for a float32
baseline, whole-array metrics.
"""

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

# Runs from a checkout without installing the package.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from gen.kernels.carafe import reference as carafe  # noqa: E402

KERNEL, GROUPS, SCALE = 5, 1, 2


def unfolded_einsum(image: np.ndarray, mask: np.ndarray, k: int, s: int) -> np.ndarray:
    """output = einsum over taps of the fully unfolded input (group_size 1)."""
    N, H, W, C = image.shape
    r = (k - 1) // 2
    padded = np.zeros((N, H + 2 * r, W + 2 * r, C))
    padded[:, r:r + H, r:r + W] = image
    rows, cols = np.arange(s * H) // s, np.arange(s * W) // s
    unfolded = np.empty((N, s * H, s * W, k * k, C))
    for kh in range(k):
        for kw in range(k):
            unfolded[:, :, :, kh * k + kw] = padded[:, rows[:, None] + kh, cols[None, :] + kw]
    return np.einsum("nhwtc,nhwt->nhwc", unfolded, mask.astype(np.float64))


def timings(fn, repeat: int):
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return times, result


def report(label: str, times, multiply_adds: int) -> None:
    best = min(times)
    print(f"{label:<24} best {best:8.3f} s  median {statistics.median(times):8.3f} s  "
          f"{multiply_adds / best / 1e9:6.2f} G multiply-adds/s")


def whole_case_generation(repeat: int) -> None:
    import tempfile

    from gen.generate import Generator, plan_suite
    from gen.core.registry import spec_for
    from harness.backends import load_backend

    spec = spec_for("carafe_forward")
    plan = next(p for p in plan_suite(spec, "network") if p.name == "fpn_h128_c256-float32")
    generator = Generator(spec, load_backend("lowp"))
    case = generator._with_inputs(plan)
    image, mask = case.inputs["input"].data, case.inputs["mask"].data
    with tempfile.TemporaryDirectory() as tmp:
        ours, _ = timings(lambda: generator.write(plan, Path(tmp) / "case.opcase"), repeat)

    def straightforward():
        golden = unfolded_einsum(image, mask, KERNEL, SCALE)
        baseline = unfolded_einsum(image.astype(np.float32), mask, KERNEL, SCALE).astype(np.float32)
        difference = baseline.astype(np.float64) - golden
        return (np.abs(difference).sum() / np.abs(golden).sum(),
                np.sqrt((difference ** 2).sum() / (golden ** 2).sum()))
    plain, _ = timings(straightforward, repeat)
    print(f"whole case {plan.name} (golden + lowp baseline + thresholds + write): "
          f"best {min(ours):.2f} s; straightforward (2 unfolded einsums + whole-array diffs): "
          f"best {min(plain):.2f} s; speed-up {min(plain) / min(ours):.1f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=128, help="input H = W")
    parser.add_argument("--channels", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    H = W = args.size
    C = args.channels
    rng = np.random.default_rng(0)
    image = rng.normal(size=(1, H, W, C)).astype(np.float32)
    mask = rng.random((1, SCALE * H, SCALE * W, GROUPS * KERNEL * KERNEL)).astype(np.float32)
    params = {"kernel_size": KERNEL, "group_size": GROUPS, "scale_factor": SCALE}
    multiply_adds = SCALE * H * SCALE * W * C * KERNEL * KERNEL
    print(f"N 1, H = W = {H}, C {C}, kernel {KERNEL}, group {GROUPS}, scale {SCALE}: "
          f"{multiply_adds / 1e6:.0f} M multiply-adds")
    print(f"load average before: {os.getloadavg()[0]:.2f}  cores: {os.cpu_count()}")

    golden_times, golden = timings(lambda: carafe.forward({"input": image, "mask": mask}, params)["output"],
                                   args.repeat)
    einsum_times, straightforward = timings(lambda: unfolded_einsum(image, mask, KERNEL, SCALE), args.repeat)
    report("gen.kernels.carafe.reference.forward", golden_times, multiply_adds)
    report("unfolded + einsum", einsum_times, multiply_adds)
    print(f"speed-up over unfolded + einsum: {min(einsum_times) / min(golden_times):.1f}x")
    difference = np.abs(golden - straightforward).max() / np.abs(straightforward).max()
    print(f"max difference between the two, relative to max |output|: {difference:.1e}")
    if (H, C) == (128, 256):
        whole_case_generation(args.repeat)
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
