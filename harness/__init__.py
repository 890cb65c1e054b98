"""opcase harness: run an implementation on cases and judge its outputs.

Public API::

    from harness import Request, InvalidArgument, compare
"""
from harness.backend import Backend, InvalidArgument, OutputSpec, Request, load_backend


def compare(actual, golden, dtype) -> dict:
    """diff1, diff2, diff3, diff3_2, diff4 of ``actual`` against ``golden`` (ACCURACY.md)."""
    from gen.core.metrics import compare as _compare
    return _compare(actual, golden, dtype)


__all__ = ["Backend", "InvalidArgument", "OutputSpec", "Request", "compare", "load_backend"]
