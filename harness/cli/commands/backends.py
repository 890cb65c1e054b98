"""`opcase backends`: the backends opcase can load, and what each declares."""
from __future__ import annotations

import sys

import click

from gen.core.backend import BUILTIN_NAMES, BackendLoadError
from harness.backends import plugins
from harness.backends import load_backend
from harness.cli.common import implementation_of, supported_lines


@click.command("backends")
@click.argument("names", nargs=-1)
def backends_(names):
    """List the backends --backend accepts, where each comes from, and the kernels and dtypes it
    supports: built-ins, exec:COMMAND, and plugins (entry-point group opcase.backends).

    Give NAMES (any --backend value, e.g. exec:'./my_kernels') to describe just those.
    Cases of a kernel or dtype a backend does not support are skipped by `opcase run`, not failed.
    """

    # (name, loader): what to describe and how to load it; exec:COMMAND alone has no loader
    if names:
        entries = [(n, lambda n=n: load_backend(n)) for n in names]
    else:
        entries = [(n, lambda n=n: load_backend(n)) for n in BUILTIN_NAMES]
        entries.append(("exec:COMMAND", None))
        entries += [(ep.name, lambda ep=ep: plugins.load(ep)) for ep in plugins.entry_points()]
    failed = False
    for name, loader in entries:
        if loader is None:
            click.echo(f"{name}\n    built-in: runs `COMMAND ... REQUEST RESPONSE` per case, any language "
                       f"(README: External implementations)\n    kernels: those `COMMAND --list-supported` "
                       f"prints; `opcase backends exec:'COMMAND'` shows them")
            continue
        try:
            backend = loader()
        except BackendLoadError as exc:
            failed = True
            click.echo(f"{name}\n    unavailable: {exc}")
            continue
        click.echo(f"{name}\n    {backend.origin}")
        for line in supported_lines(backend):
            click.echo(f"    {line}")
        # exec: how its kernels were learnt (`COMMAND --list-supported`, or not at all)
        note = getattr(implementation_of(backend), "probe_note", "")
        if note:
            click.echo(f"    ({note})")
    if names and failed:
        sys.exit(2)
