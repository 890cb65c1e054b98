"""`opcase power`'s identity tier (gen/REACH.md): mutants of a backward reference that the goldens cannot
tell from it, judged by the adjoint identity instead.

A backward reference whose arithmetic lost its float64 (computed in float32: a ``compute_dtype`` not
passed on) differs from the right one by float32 rounding, which every threshold accepts, as it must
accept a float32 kernel (the lowp control): its goldens would be off by that much and no case could
show it.  The identity ``<dy, J dx> = <J^T dy, dx>`` between the forward reference and this backward, in
float64 on the forward's random calls (gen/adjoint_reference.py), is off by 1e-8 or so, where right references
hold it to 4e-15 (tests/test_adjoint.py): power lists such a mutant as caught by the identity.

Pairs are found by convention (``<family>_forward`` / ``<family>_backward``), never by name.
"""
from __future__ import annotations

import numpy as np

from gen.core.registry import known_ops
from harness.backends.builtin import run_in_dtype

IDENTITY = "identity"
# Right float64 references hold the identity to 3.5e-15 at worst (gen/REACH.md): a mutant over this
# is no float64 adjoint of its forward.
IDENTITY_TOLERANCE = 1e-12
# Name -> (what, the compute dtype the mutant's backward reference runs in).
IDENTITY_MUTANTS = {
    "backward_reference_in_float32": (
        "the backward reference's arithmetic in float32 (its compute_dtype not passed on): goldens off by "
        "float32 rounding, which every threshold accepts", np.float32),
}


def _is_pair_backward(op: str) -> bool:
    """Whether ``op`` is the backward of a pair: ``<family>_backward`` with a ``<family>_forward`` (gen/adjoint.py)."""
    return op.endswith("_backward") and op.removesuffix("_backward") + "_forward" in known_ops()


def identity_mutants(spec, make) -> list:
    """The identity tier's mutants of ``spec``'s reference, made by ``make(name, kind, what, needs, apply)``:
    none unless ``spec`` is the backward of a pair."""
    if not _is_pair_backward(spec.op):
        return []
    return [make(name, IDENTITY, what, "nothing the goldens can show: the adjoint identity judges it",
                 lambda call, dtype=dtype: run_in_dtype(call.request, dtype))
            for name, (what, dtype) in IDENTITY_MUTANTS.items()]


def identity_entries(tallies, killed: str, identity_error) -> list[dict]:
    """The report's entries of the identity tier: each mutant's verdict on the cases (``tally.doc()``) and by
    the identity; ``killed``: the verdict of a mutant some case fails; ``identity_error(backward op, compute
    dtype) -> (error, samples)``: gen.adjoint_reference's, which the CLI hands in (the harness reaches gen
    only through gen.core); none, and the tier is left out of the report."""
    if identity_error is None:
        return []
    entries = []
    for tally in tallies:
        entry = tally.doc()
        error, samples = identity_error(tally.kernel, IDENTITY_MUTANTS[tally.mutant.name][1])
        entry.update(identity_error=error, identity_samples=samples, identity_tolerance=IDENTITY_TOLERANCE,
                     cases_verdict=entry["verdict"],
                     by_identity=error is not None and not error <= IDENTITY_TOLERANCE)
        entry["verdict"] = killed if entry["cases_verdict"] == killed or entry["by_identity"] else "survived"
        entries.append(entry)
    return entries


def identity_lines(entries: list[dict]) -> list[str]:
    """One terminal line per identity mutant: what the cases and what the identity said."""
    lines = []
    for m in entries:
        cases = (f"{m['failing']} case(s) fail it" if m["failing"] else
                 f"the goldens pass it (all {m['judged']} case(s) whose outputs it changed)" if m["judged"] else
                 "it changes no case's outputs")
        if m["identity_error"] is None:
            said = "the identity had no sample to judge it on"
        else:
            said = (f"the adjoint identity with the forward reference {'catches' if m['by_identity'] else 'holds for'} "
                    f"it: error {m['identity_error']:.1e} {'>' if m['by_identity'] else '<='} "
                    f"{m['identity_tolerance']:g} ({m['identity_samples']} float64 sample(s))")
        label = "IDENTITY" if m["verdict"] != "survived" else "SURVIVED (identity)"
        lines.append(f"{label}  {m['kernel']}  {m['name']}: {m['what']}; {cases}; {said}")
    return lines
