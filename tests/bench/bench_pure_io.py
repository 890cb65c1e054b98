"""Pure-IO goldens against a plain copy of their output, measured in the same run.

    python tests/bench/bench_pure_io.py

Prints, per kernel and network shape, the golden's time (float64 reference, as the generator
runs it) and two plain copies of an output-sized array of the output dtype, with the ratios:
  copy    np.copy(out): a new array, as the golden makes one (its pages are faulted in too);
  copyto  np.copyto(dst, out) into an array already in memory: the bare memory bandwidth.
Target (issue 'network scale'): each golden within 5x the plain copy.  psamask's DISTRIBUTE
is a transpose of an (H*W) x (H*W) matrix, which no copy loop streams like a memcpy: for
scale, the script also times torch's transpose of the same matrix, when torch is installed.
"""
from __future__ import annotations

import time
from dataclasses import replace

import numpy as np

from gen.core.registry import spec_for
from gen.generate import Generator, plan_suite


def best_of(fn, repeat=3) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def bench(op: str, name_part: str, **changes) -> None:
    spec = spec_for(op)
    plan = next(p for p in plan_suite(spec, "network") if name_part in p.name)
    if changes:
        plan = replace(plan, dims={**plan.dims, **changes}, name=f"{plan.name}+{changes}")
    case = Generator(spec)._with_inputs(plan)
    inputs = {n: t.data for n, t in case.inputs.items() if not t.absent}
    out_shapes = {n: tuple(t.shape) for n, t in case.outputs.items()}
    golden = best_of(lambda: spec.reference_fn(inputs, dict(case.params), out_shapes=out_shapes))
    outputs = [np.ones(t.shape, t.dtype) for t in case.outputs.values()]
    targets = [np.empty_like(o) for o in outputs]
    copy = best_of(lambda: [o.copy() for o in outputs])
    copyto = best_of(lambda: [np.copyto(t, o) for t, o in zip(targets, outputs)])
    size = sum(o.nbytes for o in outputs)
    print(f"{op:22} {plan.name:38} {size / 1e6:7.1f} MB  golden {golden * 1e3:8.2f} ms  "
          f"copy {copy * 1e3:7.2f} ms {golden / copy:5.1f}x  copyto {copyto * 1e3:7.2f} ms {golden / copyto:5.1f}x")


def bench_torch_transpose(side: int) -> None:
    try:
        import torch
    except ImportError:
        return
    matrix = torch.ones(side, side)
    target = torch.empty(side, side)
    transpose = best_of(lambda: target.copy_(matrix.T))
    copyto = best_of(lambda: target.copy_(matrix))
    print(f"{'torch transpose':22} {f'{side}x{side} float32':38} {matrix.numel() * 4 / 1e6:7.1f} MB  "
          f"transpose {transpose * 1e3:6.2f} ms  copy_ {copyto * 1e3:7.2f} ms {transpose / copyto:5.1f}x")


if __name__ == "__main__":
    bench("psamask_forward", "cityscapes_test-psa_type0")
    bench("psamask_forward", "cityscapes_test-psa_type1")
    bench("psamask_backward", "cityscapes_test-psa_type0")
    bench("psamask_backward", "cityscapes_test-psa_type1")
    bench("masked_im2col_forward", "retinanet_k3_p1-float32")
    bench("masked_im2col_forward", "retinanet_k1_p1-float32")
    # The doc's shapes are tiny (fixed costs dominate); RetinaNet's P3 level of an 800x800 image:
    bench("masked_im2col_forward", "retinanet_k3_p1-float32", H=100, W=100, M=5000)
    bench_torch_transpose(64 * 128)
