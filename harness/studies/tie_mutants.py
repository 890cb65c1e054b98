"""A generic mutant that acts on ties across splits (gen/REACH.md): a search over an item axis made in
segments, each segment's best merged into the running result so that an exact tie between two segments
goes to the later segment (``<=`` where ``<`` was meant), while within a segment the earlier item wins.

Nothing names a kernel.  A *selection output* is one the spec judges by the exact rule with recorded
near-ties (gen.reach.selection_outputs); the axis it searches is the *searched item axis*: an item axis
(the spec's axis roles) of an input whose dim no output has, as the count mutants read it.  Its indices
are taken to point into that axis.  The mutant reads the searched items with the order of their segments
reversed (each segment's own order kept), lets the base compute on that, and maps the indices it returns
back to the items they name.  So wherever the base keeps the first of equal items, the mutant keeps the
one in the latest segment; everywhere else it is the base.

A selection whose candidates are no tensor's axis (the points a kernel samples along a border) has no
searched axis.  Its family's reference part may name them instead: a table ``SELECTION_CANDIDATES =
{op: {output: candidates(inputs, params)}}``, each function giving every candidate's score as the
reference computes it, [candidates, *the output's shape].  The second mutant keeps, of the candidates
whose score is exactly the chosen one's, the last (``>=`` where ``>`` was meant, a merge in any split).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from gen.core.registry import REFERENCE, kernel_module, spec_for
from harness.studies.count_mutants import item_axes

# The smallest of the split sizes the stress suite's tie cases place ties either side of (gen.reach.SPLITS,
# which the harness does not import: tests/test_tie_bugs.py holds the two equal).  Every other is a multiple
# of it, so a tie either side of any of them falls into two segments of this size.
SEGMENT = 64


def selection_outputs(spec) -> list[str]:
    """Outputs judged by the exact rule with recorded near-ties: a selection (an index, an argmax), as
    gen.reach reads them."""
    return [name for name, crit in (spec.output_criteria or {}).items() if getattr(crit, "undetermined", None)]


def searched_dims(spec) -> list[str]:
    """The dims of input item axes that no output has: what a selection searches over (known points)."""
    on_outputs = {dim for name in spec.outputs for _, dim in item_axes(spec, name)}
    found = []
    for name in spec.inputs:
        for _, dim in item_axes(spec, name):
            if dim not in on_outputs and dim not in found:
                found.append(dim)
    return found


def later_segments_first(count: int, segment: int) -> np.ndarray:
    """The order the mutant reads ``count`` items in: segments of ``segment`` from the last to the first,
    each in its own order (position p of the reordered axis holds item order[p])."""
    starts = range(0, count, segment)
    return np.concatenate([np.arange(s, min(s + segment, count)) for s in reversed(starts)])


def _index_outputs(spec, request) -> list[str]:
    return [n for n in selection_outputs(spec)
            if n in request.outputs and np.dtype(request.outputs[n].dtype).kind in "iu"]


def ties_to_later_segment(segment: int, not_applicable: type):
    """The mutant's apply(call) (harness.studies.mutants.Call in, outputs out; ``not_applicable`` raised where
    it cannot act)."""
    def apply(call):
        request = call.request
        spec = spec_for(request.op)
        selections = _index_outputs(spec, request)
        if not selections:
            raise not_applicable("no selection output (an integer output judged exactly with recorded near-ties)")
        searched = searched_dims(spec)
        if len(searched) != 1:
            raise not_applicable(f"{len(searched)} searched item axes (an input's item axis no output has), not one: "
                                 f"the selection's candidates are no single tensor axis")
        dim = searched[0]
        along = {name: axis for name, a in request.inputs.items() if a is not None
                 for axis, d in item_axes(spec, name) if d == dim and axis < a.ndim}
        counts = {int(request.inputs[name].shape[axis]) for name, axis in along.items()}
        if len(counts) != 1:
            raise not_applicable(f"the inputs disagree on {dim}")
        count = counts.pop()
        if count <= segment:
            raise not_applicable(f"{dim} = {count}: one segment of {segment}, no split to tie across")
        order = later_segments_first(count, segment)
        inputs = {**request.inputs, **{name: np.take(request.inputs[name], order, axis=axis)
                                       for name, axis in along.items()}}
        produced = call.run_base(dataclasses.replace(request, inputs=inputs))
        base = call.base()
        outputs = {name: np.array(a, copy=True) for name, a in base.items()}
        for name, a in produced.items():
            if name not in selections and not np.array_equal(np.asarray(a), np.asarray(base[name]), equal_nan=True):
                # Then the base's arithmetic depends on the order of the items: what changes is more than a tie.
                raise not_applicable(f"reading the {dim} items in another order changes output '{name}'")
        for name in selections:
            raw = np.asarray(produced[name])
            names_an_item = (raw >= 0) & (raw < count)
            mapped = np.where(names_an_item, order[np.clip(raw, 0, count - 1)], raw)
            outputs[name] = mapped.astype(outputs[name].dtype)
        return outputs
    return apply


# The table a family's reference part names a selection's candidates in (see the module's doc).
CANDIDATES_TABLE = "SELECTION_CANDIDATES"


def candidates_of(op: str) -> dict:
    """{selection output: candidates(inputs, params)} from ``op``'s reference part, empty where it names none."""
    module = kernel_module(REFERENCE, op)
    return dict((getattr(module, CANDIDATES_TABLE, None) or {}).get(op) or {}) if module is not None else {}


def ties_to_last_candidate(not_applicable: type):
    """The mutant's apply(call): of the candidates scored exactly as the chosen one, the last one chosen."""
    def apply(call):
        request = call.request
        spec = spec_for(request.op)
        named = candidates_of(request.op)
        selections = [n for n in _index_outputs(spec, request) if n in named]
        if not selections:
            raise not_applicable(f"no selection output whose candidates its family names ({CANDIDATES_TABLE})")
        base = call.base()
        outputs = {name: np.array(a, copy=True) for name, a in base.items()}
        for name in selections:
            chosen = np.asarray(base[name]).astype(np.int64)
            scores = np.asarray(named[name](request.inputs, request.params), dtype=np.float64)
            if scores.shape[1:] != chosen.shape or chosen.size == 0:
                raise not_applicable(f"the candidates of '{name}' are not [candidates, *its shape]")
            if chosen.min() < 0 or chosen.max() >= scores.shape[0]:
                raise not_applicable(f"an index of '{name}' names no candidate")
            picked = np.take_along_axis(scores, chosen[None], axis=0)
            # NaN equals nothing: a NaN chosen stays chosen.
            tied = scores == picked
            last = scores.shape[0] - 1 - np.argmax(tied[::-1], axis=0)
            outputs[name] = np.where(tied.any(axis=0), last, chosen).astype(outputs[name].dtype)
        return outputs
    return apply


def tie_mutants(make, not_applicable: type) -> list:
    """The tie mutants, made by ``make(name, what, needs, apply)`` (harness.studies.mutants.Mutant, GENERIC)."""
    return [make("ties_to_last_candidate", "of the candidates a selection scores exactly alike, the last one chosen "
                 "(>= for >: a tie between splits of the candidates goes to the later split)",
                 f"a selection output whose candidates its family names ({CANDIDATES_TABLE}), and candidates "
                 f"exactly tied with the chosen one", ties_to_last_candidate(not_applicable)),
            make(f"ties_to_later_segment_{SEGMENT}",
                 f"the searched items read in segments of {SEGMENT}, each segment's best merged with <=: an exact "
                 f"tie between two segments goes to the later one (within a segment the earlier still wins)",
                 f"a selection output over a searched item axis, and exact ties between items that fall into "
                 f"different segments of {SEGMENT} (an item repeated across a multiple of {SEGMENT}: the stress "
                 f"suite's ties_* cases)", ties_to_later_segment(SEGMENT, not_applicable))]
