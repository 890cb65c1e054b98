"""The backends opcase runs, and loading one from a --backend value: a built-in name (reference,
lowp: harness.backends.builtin; mmcv; torch[@DEVICE]), exec:COMMAND, a plugin's name or module:attr."""
from __future__ import annotations

import importlib

from gen.core.backend import BUILTIN_NAMES, Backend, BackendLoadError, Request
from harness.backends import builtin, mmcv_backend
from harness.backends.builtin import check_request


def wrap_backend(name: str, origin: str, obj) -> Backend:
    if isinstance(obj, Backend):
        return obj
    if isinstance(obj, type):   # a class of backend objects: one instance, made now
        try:
            obj = obj()
        except Exception as exc:  # noqa: BLE001 - the backend's constructor failed; report it
            raise BackendLoadError(f"backend {name!r}: {origin}() raised {type(exc).__name__}: {exc}") from None
    run = getattr(obj, "run", None)
    if run is None:
        if not callable(obj):
            raise BackendLoadError(f"backend {name!r}: {origin} is neither a function nor an object with run()")
        run = obj
    supports = getattr(obj, "supports", None) or (lambda op, dtype: True)
    return Backend(name=getattr(obj, "name", name), origin=origin, run=run, supports=supports,
                   measures_time=bool(getattr(obj, "measures_time", False)))


def _builtin(name: str) -> Backend | None:
    if name in ("reference", "lowp"):
        return builtin.reference() if name == "reference" else builtin.lowp()
    if name == "mmcv":
        return mmcv_backend.backend()
    if name == "torch" or name.startswith("torch@"):
        # torch@DEVICE (what --device makes of 'torch'): the device travels inside the name,
        # so worker processes and REPRO lines load the same backend.
        device = name.partition("@")[2] or "cpu"
        try:
            from harness.backends import torch_backend   # PyTorch is optional and slow to import: only when named
        except ImportError as exc:
            raise BackendLoadError(f"backend 'torch' needs PyTorch: pip install 'opcase[torch]' ({exc})") from None
        try:
            kernels = torch_backend.make(device)
        except (RuntimeError, ValueError) as exc:
            raise BackendLoadError(f"backend {name!r}: device {device!r} is not usable: {exc}") from None
        return checked(wrap_backend(name, f"built-in: spec checks + PyTorch kernels on {device} "
                                   f"(harness.backends.torch_backend)", kernels))
    return None


def with_device(spec: str, device: str | None) -> str:
    """The backend spec that runs ``spec`` on ``device`` (only the torch backend has devices)."""
    if device is None or device == "cpu" and spec == "torch":
        return spec
    if spec == "torch" or spec.startswith("torch@"):
        return f"torch@{device}"
    raise BackendLoadError(f"--device applies to the torch backend, not {spec!r}")


def checked(backend: Backend) -> Backend:
    """The same backend, making the spec's parameter checks (the doc's order) before it computes."""

    def run(request: Request):
        check_request(request)
        return backend.run(request)
    return Backend(name=backend.name, origin=backend.origin, run=run, supports=backend.supports,
                   measures_time=backend.measures_time)



def load_backend(spec: str) -> Backend:
    """Resolve ``--backend``: a built-in name, ``exec:COMMAND``, a plugin's name (entry-point
    group ``opcase.backends``, see harness.plugins) or ``module:attr``."""
    builtin = _builtin(spec)
    if builtin is not None:
        return builtin
    if spec.startswith("exec:"):
        from harness.backends import exec_backend   # it imports harness.workers, which imports this package
        command = exec_backend.from_spec(spec)
        return wrap_backend(spec, command.origin, command)
    from harness import plugins   # it imports wrap_backend from this package
    entry_point = plugins.find(spec)
    if entry_point is not None:
        return plugins.load(entry_point)
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise BackendLoadError(f"unknown backend {spec!r}: use one of {', '.join(BUILTIN_NAMES)}, "
                               f"exec:'COMMAND ...', an installed plugin's name (opcase backends lists them) "
                               f"or module:attr")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - any import-time failure is the backend's, report it
        raise BackendLoadError(f"backend {spec!r}: cannot import {module_name}: "
                               f"{type(exc).__name__}: {exc}") from None
    try:
        obj = getattr(module, attr)
    except AttributeError:
        raise BackendLoadError(f"backend {spec!r}: module {module_name} has no attribute {attr}") from None
    return wrap_backend(spec, f"{module_name}:{attr}", obj)
