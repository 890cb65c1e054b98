"""Backends from installed packages: the entry-point group ``opcase.backends``.

A distribution registers a backend under a name in its pyproject.toml::

    [project.entry-points."opcase.backends"]
    mykernels = "mykernels.opcase_backend:backend"

after which ``opcase run CASES --backend mykernels`` loads it and ``opcase backends`` lists it.
The attribute is anything ``--backend module:attr`` accepts: a ``harness.Backend``; an object
with ``run(request)`` and optionally ``supports(op, dtype)``, ``name`` and ``measures_time``; a
class of such objects (instantiated with no arguments, when the backend is loaded); or a plain
function ``run(request)``.  Cases of kernels or dtypes for which ``supports`` answers False are
skipped, not failed.

Built-in names (reference, lowp, torch) and ``exec:...`` win over a plugin of the same name; of
two plugins with one name, the one from the distribution whose name sorts first is used.
"""
from __future__ import annotations

from importlib import metadata

from gen.core.backend import BackendLoadError

GROUP = "opcase.backends"


def entry_points() -> list[metadata.EntryPoint]:
    """Every registered backend, sorted by name and then by distribution."""
    found = metadata.entry_points(group=GROUP)
    return sorted(found, key=lambda ep: (ep.name, _dist_name(ep)))


def find(name: str) -> metadata.EntryPoint | None:
    return next((ep for ep in entry_points() if ep.name == name), None)


def _dist_name(ep: metadata.EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    return dist.metadata["Name"] if dist is not None else ""


def origin(ep: metadata.EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    where = f"{dist.metadata['Name']} {dist.version}" if dist is not None else "an unknown distribution"
    return f"plugin: {where} ({GROUP}: {ep.name} = {ep.value})"


def load(ep: metadata.EntryPoint):
    """The backend an entry point names (a harness.Backend), or BackendLoadError."""
    from harness.backends import wrap_backend   # harness.backends imports this module
    try:
        obj = ep.load()
    except Exception as exc:  # noqa: BLE001 - any import-time failure is the plugin's, report it
        raise BackendLoadError(f"backend {ep.name!r} ({origin(ep)}): cannot load {ep.value}: "
                               f"{type(exc).__name__}: {exc}") from None
    return wrap_backend(ep.name, origin(ep), obj)
