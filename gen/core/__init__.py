"""The core layer that gen (the generator) and harness (the judge) both stand on.

It holds what both need and nothing else: specs and the expression language (spec, expr),
the kernels' registry by convention (registry), the model of one kernel call and the backend
interface (backend, checks), the case-file codec (casefile, proto), rounding, the metrics and the
verdict on a backend's outputs (metrics, verdict), timing a call (timing) and case descriptors.
Core imports nothing from gen outside gen.core nor from harness (tests/test_layering.py). It lives
under gen/ only because the project's top level is fixed (specs/, gen/, harness/, cases/, tests/).
"""
