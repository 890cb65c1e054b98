"""opcase harness: run an implementation on cases and judge its outputs.

Public API::

    from harness import Request, InvalidArgument, NotSupported, compare
"""
from gen.core.backend import Backend, InvalidArgument, NotSupported, Request, TensorInfo
from gen.core.metrics import compare
from harness.backends import load_backend


__all__ = ["Backend", "InvalidArgument", "NotSupported", "TensorInfo", "Request", "compare", "load_backend"]
