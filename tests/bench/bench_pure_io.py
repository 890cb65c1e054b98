"""Pure-IO goldens against a plain copy of their output, measured in the same run.

    python tests/bench/bench_pure_io.py

Prints, per kernel and network shape, the golden's time (float64 reference, as the generator
runs it), the time of np.copyto of an output-sized array of the output dtype, and the ratio.
Target (issue 'network scale'): each golden within 5x the copy.
"""
from __future__ import annotations

import time
from dataclasses import replace

import numpy as np

from gen.registry import spec_for
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
    copy = best_of(lambda: [np.copyto(t, o) for t, o in zip(targets, outputs)])
    size = sum(o.nbytes for o in outputs)
    print(f"{op:24} {plan.name:44} output {size / 1e6:8.1f} MB  golden {golden:7.3f} s  "
          f"copy {copy:7.3f} s  ratio {golden / copy:5.2f}x")


if __name__ == "__main__":
    bench("psamask_forward", "cityscapes_test-psa_type0")
    bench("psamask_forward", "cityscapes_test-psa_type1")
    bench("psamask_backward", "cityscapes_test-psa_type0")
    bench("psamask_backward", "cityscapes_test-psa_type1")
    bench("masked_im2col_forward", "retinanet_k3_p1-float32")
    bench("masked_im2col_forward", "retinanet_k1_p1-float32")
    # The doc's shapes are tiny (fixed costs dominate); RetinaNet's P3 level of an 800x800 image:
    bench("masked_im2col_forward", "retinanet_k3_p1-float32", H=100, W=100, M=5000)
