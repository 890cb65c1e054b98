"""The backends opcase runs, and loading one from a --backend value: a built-in name (reference,
lowp: harness.backends.builtin; mmcv; torch[@DEVICE]), exec:COMMAND, a plugin's name or module:attr."""
from __future__ import annotations

import functools
import importlib
import importlib.util
import os
import re
import shlex
import site
import sys
import sysconfig
from importlib.machinery import PathFinder
from pathlib import Path

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
                   measures_time=backend.measures_time, run_checked=backend.run)



def load_backend(spec: str, exec_timeout: float | None = None) -> Backend:
    """Resolve ``--backend``: a built-in name, ``exec:COMMAND``, a plugin's name (entry-point
    group ``opcase.backends``, see harness.backends.plugins) or ``module:attr``.  ``exec_timeout``
    is an exec: command's limit per call (``opcase run --timeout``); the others ignore it."""
    builtin = _builtin(spec)
    if builtin is not None:
        return builtin
    if spec.startswith("exec:"):
        from harness.backends import exec_backend   # it imports harness.judge.workers, which imports this package
        command = exec_backend.from_spec(spec, exec_timeout)
        return wrap_backend(spec, command.origin, command)
    from harness.backends import plugins   # it imports wrap_backend from this package
    entry_point = plugins.find(spec)
    if entry_point is not None:
        return plugins.load(entry_point)
    module_name, sep, attr = module_and_attr(spec)
    if not sep or not module_name or not attr:
        raise BackendLoadError(f"unknown backend {spec!r}: use one of {', '.join(BUILTIN_NAMES)}, "
                               f"exec:'COMMAND ...', an installed plugin's name (opcase backends lists them) "
                               f"or module:attr (a module found on the Python path or here alone means module:run)")
    _with_current_directory(module_name)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and module_name.startswith(exc.name):
            raise BackendLoadError(f"backend {spec!r}: cannot import {module_name}: no module {exc.name} on the "
                                   f"Python path nor in the current directory {os.getcwd()}; run opcase where it "
                                   f"is, give its directory as PYTHONPATH=DIR, or pip install its package") from None
        raise BackendLoadError(f"backend {spec!r}: cannot import {module_name}: "
                               f"{type(exc).__name__}: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - any import-time failure is the backend's, report it
        raise BackendLoadError(f"backend {spec!r}: cannot import {module_name}: "
                               f"{type(exc).__name__}: {exc}") from None
    try:
        obj = getattr(module, attr)
    except AttributeError:
        raise BackendLoadError(f"backend {spec!r}: module {module_name} has no attribute {attr}") from None
    return wrap_backend(spec, f"{module_name}:{attr}", obj)


# The attribute a bare module name (--backend mykernels) stands for.
DEFAULT_ATTR = "run"


def module_and_attr(spec: str) -> tuple[str, str, str]:
    """``spec`` as (module, ':', attr): module:attr as given, or a bare dotted name of a module
    found on the Python path or in the current directory as that module's ``run`` (the README's
    ``--backend mykernels`` beside ``mykernels.py``); ('', '', '') for anything else."""
    module_name, sep, attr = spec.partition(":")
    if sep:
        return module_name, sep, attr
    if not re.fullmatch(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*", spec) or _builtin_name(spec):
        return "", "", ""
    if _module_root(spec, None) is None and _module_root(spec, [os.getcwd()]) is None:
        return "", "", ""
    return spec, ":", DEFAULT_ATTR


def _module_root(module_name: str, path=None) -> Path | None:
    """The directory on ``path`` (default sys.path) that the top-level package of ``module_name``
    is found in, without importing anything (its code would run here)."""
    top = module_name.split(".")[0]
    found = PathFinder.find_spec(top, path)
    if found is None:
        return None
    if found.origin and found.origin not in ("namespace", "built-in", "frozen"):
        place = Path(found.origin).parent
        return place.parent if found.submodule_search_locations else place
    locations = list(found.submodule_search_locations or ())
    return Path(locations[0]).parent if locations else None


def _with_current_directory(module_name: str) -> None:
    """Put the current directory on sys.path (last) when it holds the module and the path does
    not: `opcase --backend mymod:run` then finds ./mymod.py as `python -m` would."""
    try:   # any finder (an editable install's too); a top-level name imports nothing to be found
        importable = importlib.util.find_spec(module_name.split(".")[0]) is not None
    except (ImportError, ValueError):
        importable = False
    if not importable and _module_root(module_name, [os.getcwd()]) is not None:
        sys.path.append(os.getcwd())


def _installed_places() -> list[Path]:
    """Where a fresh `opcase` finds modules without PYTHONPATH: site-packages and the stdlib."""
    places = [*site.getsitepackages(), site.getusersitepackages(), sysconfig.get_path("stdlib"),
              sysconfig.get_path("platstdlib")]
    return [Path(p).resolve() for p in places if p]


def import_path_for(backend_spec: str) -> str:
    """``PYTHONPATH=DIR`` when a module:attr backend's module was found outside the installed
    packages (the current directory, PYTHONPATH, a path a test added), so that a REPRO line
    reruns in a fresh shell; '' otherwise (a built-in, exec:, a plugin, an installed module)."""
    return _import_path(backend_spec, os.getcwd(), tuple(sys.path))


@functools.lru_cache(maxsize=64)
def _import_path(backend_spec: str, cwd: str, path: tuple) -> str:
    """import_path_for, once per backend, directory and sys.path (it is asked once per case)."""
    if _builtin_name(backend_spec) or backend_spec.startswith("exec:"):
        return ""
    module_name, sep, attr = module_and_attr(backend_spec)
    if not sep or not module_name or not attr or module_name == "exec":
        return ""
    root = _module_root(module_name, list(path)) or _module_root(module_name, [cwd])
    if root is None:
        return ""
    root = root.resolve()
    if any(root == place or place in root.parents for place in _installed_places()):
        return ""
    return f"PYTHONPATH={shlex.quote(str(root))}"


def _builtin_name(spec: str) -> bool:
    return spec in BUILTIN_NAMES or spec.startswith("torch@")
