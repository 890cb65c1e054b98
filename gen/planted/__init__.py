"""Kernel-specific planted bugs, as data per kernel (or kernel family): each module holds PLANTED
({op: {bug name: compute}}), CORRECT ({op: compute}, the same copy with no bug) and optionally
CONTROLS ({op: {name: compute}}: legitimate variants, such as another summation order, that
every case must pass).

A ``compute(request) -> {output: array}`` returns float64 results (or results already in the
output dtype, for the bugs that round on their own); `opcase power` and the tests make it a
backend with the spec's parameter checks before it and rounding to the output dtypes after.
The harness names no kernel: a kernel's bugs are found by convention
(gen.core.registry.kernel_module: ``gen.planted.<op>``, else ``gen.planted.<family>``).
"""
