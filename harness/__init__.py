"""opcase harness: run an implementation on cases and judge its outputs.

Public API::

    from harness import Request, InvalidArgument, compare
"""
from gen.core.backend import Backend, InvalidArgument, Request, TensorInfo
from gen.core.metrics import compare
from harness.backends import load_backend


__all__ = ["Backend", "InvalidArgument", "TensorInfo", "Request", "compare", "load_backend"]
