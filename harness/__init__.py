"""opcase harness: run an implementation on cases and judge its outputs.

Public API::

    from harness import Request, InvalidArgument, NotSupported, compare

The names load when first used (PEP 562), so that importing a part of the package (the command
line, whose `opcase --help` must be quick) does not load numpy and the backends.
"""
from __future__ import annotations

import importlib

# Public name -> the module that defines it.
_PUBLIC = {"Backend": "gen.core.backend", "InvalidArgument": "gen.core.backend", "NotSupported": "gen.core.backend",
           "Request": "gen.core.backend", "TensorInfo": "gen.core.backend", "compare": "gen.core.metrics",
           "load_backend": "harness.backends"}

__all__ = ["Backend", "InvalidArgument", "NotSupported", "TensorInfo", "Request", "compare", "load_backend"]


def __getattr__(name: str):
    if name not in _PUBLIC:
        raise AttributeError(f"module 'harness' has no attribute {name!r}")
    return getattr(importlib.import_module(_PUBLIC[name]), name)


def __dir__():
    return sorted(set(globals()) | set(__all__))
