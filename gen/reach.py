"""Stress cases that reach narrow counts and ties across splits (gen/REACH.md).

Both are derived from what a spec says of its tensors, never from a kernel's name:

- count reach: every dim that sizes an axis whose role is ``item`` (queries, points, rois,
  boxes, mask positions) is set past 2^15 and 2^16, with every other dim of the stress base at
  the smallest a valid call allows, so that a kernel keeping the count in 16 bits (signed or
  not) computes a fraction of the items while the case stays small;
- ties across splits: for every kernel with a selection output (an output judged by the exact
  rule with recorded near-ties), the float inputs drawn as small integers, so exact ties abound,
  with one item copied to the first and last positions and either side of each common split
  size, so that a search in segments whose merge breaks a tie by the later segment is caught.

A spec waives a count it cannot take (a check of its own forbids it) with a reason in
``suites.stress.not_applicable.count_<dim>``, as for the other stress dimensions.
"""
from __future__ import annotations

from gen.core.spec import SpecError, line_of

# Past a signed and an unsigned 16-bit count at once: a count kept in 16 bits, signed or not,
# keeps count mod 2^16 (1 and 3) of these items.  Two counts, so that such a bug fails cases of two
# shapes (opcase power names a kill by one shape FRAGILE); a count between 2^15 and 2^16 would tell
# nothing more (an int16 of 2^16 + 1 is 1 as well) and cost as much again.
COUNTS = (2**16 + 1, 2**16 + 3)
# The split sizes a search over items is commonly tiled by: a tie is placed either side of each.
SPLITS = (64, 128, 256, 1024, 4096)
# The items a tie case has along its raised axis: one past the largest split and a tail after it,
# and a second shape past 1024 (ties either side of 64 .. 1024 again, in a case of another shape).
TIE_ITEMS = (max(SPLITS) + 7, 1024 + 5)
# Small integers: every distance, sum and product of a few of them is exact in every float dtype
# and every order of computation (squared distances of three of them stay below 2^11, exact in
# float16), so the ties are exact ties, not near-ties; 17 values a coordinate are enough that a
# few thousand points do not all coincide (a golden of all-zero distances says nothing).
TIE_LOW, TIE_HIGH = -8, 8
COUNT_PREFIX = "count_"
# The planted bugs the tie cases exist to kill: a family with a selection output names its bug of a tie
# between splits (segments of a search, blocks of candidates) so (tests/test_tie_bugs.py finds it by this).
TIE_BUG_PREFIX = "ties_across_"


# A count case of an item dim other than a kernel's smallest is kept beyond a suite's byte limit only up to
# this size: the largest that the kernels' own smallest count cases reach (border_align's boxes, 2.1 MB),
# so that the committed suite meets every item dim whose cases are that small and stays git-friendly.
COUNT_CASE_CAP = 2_200_000


def count_dim(name: str) -> str | None:
    """The item dim a count case's name raises (``count_L65537-float32``: L), or None for another case."""
    if not name.startswith(COUNT_PREFIX):
        return None
    stem = name[len(COUNT_PREFIX):].split("-")[0]
    return next((stem[:-len(str(c))] for c in COUNTS if stem.endswith(str(c)) and len(stem) > len(str(c))), None)


def smallest_count_cases(plans, size, n: int) -> set[str]:
    """The names of the count cases a suite with a byte limit per case keeps beyond the limit (``opcase gen
    --smallest-counts``, cases/README.md): the ``n`` smallest among ``plans`` (by ``size(plan)``, then name)
    whatever their size, and the ``n`` smallest of each item dim where they are within COUNT_CASE_CAP, so
    that a count bug meets two case shapes in it on every item dim whose cases are that small."""
    counts = sorted((size(p), p.name) for p in plans if count_dim(p.name) is not None)
    kept = {name for _, name in counts[:n]}
    for dim in {count_dim(name) for _, name in counts}:
        smallest = [(bytes_, name) for bytes_, name in counts if count_dim(name) == dim][:n]
        kept.update(name for bytes_, name in smallest if bytes_ <= COUNT_CASE_CAP)
    return kept


def tie_positions(items: int) -> list[int]:
    """The positions along an item axis of ``items`` that hold a copy of position 0: the last, and
    either side of every split size the axis is longer than."""
    places = {items - 1}
    for split in SPLITS:
        if split < items:
            places.update((split - 1, split))
    places.discard(0)
    return sorted(places)


def item_dims(spec, base_dims: dict) -> list[str]:
    """The base's dims that size some axis whose role is ``item`` (a plain dim name as the axis's
    shape entry), in the order the spec's tensors name them."""
    found = []
    for tensor in (*spec.inputs.values(), *spec.outputs.values()):
        for entry, role in zip(tensor.shape, tensor.axes):
            if role == "item" and isinstance(entry, str) and entry in base_dims and entry not in found:
                found.append(entry)
    return found


def selection_outputs(spec) -> list[str]:
    """Outputs judged by the exact rule with recorded near-ties: a selection (an index, an argmax)."""
    return [name for name, crit in (spec.output_criteria or {}).items()
            if getattr(crit, "undetermined", None)]


# The smallest a dim other than the raised count is lowered to: 1, except for a dim that sizes a
# height, width or depth axis, which stays at 2: on a map of one pixel a bilinear sample's gradient and
# many a selection are all 0 or all alike, a golden with nothing to judge.  A param that is a whole
# shape entry (a pooled grid's height) is lowered to 1: one bin still samples the map at its own place.
# So a count case is the smallest call past 2^16 items the spec allows (gen/REACH.md).
SMALLEST, SMALLEST_SPATIAL = 1, 2
SPATIAL = ("height", "width", "depth")


def floors(spec, params: dict) -> dict[str, int]:
    """Each plain name that is a whole shape entry of some tensor, with the floor it is lowered to."""
    found: dict[str, int] = {}
    for tensor in (*spec.inputs.values(), *spec.outputs.values()):
        for entry, role in zip(tensor.shape, tensor.axes):
            if isinstance(entry, str) and entry.isidentifier():
                spatial = role in SPATIAL and entry not in params
                found[entry] = max(found.get(entry, SMALLEST), SMALLEST_SPATIAL if spatial else SMALLEST)
    return found


def smallest_call(spec, dims: dict, params: dict, keep, valid) -> tuple[dict, dict]:
    """(dims, params) with every dim not in ``keep``, then every int param that is a whole shape entry,
    lowered one at a time in name order to its floor where the call stays valid (``valid(dims, params)``),
    else left as it was."""
    lowest = floors(spec, params)
    lowered = {"dims": dict(dims), "params": dict(params)}
    for kind in ("dims", "params"):
        for name in sorted(lowered[kind]):
            value, floor = lowered[kind][name], lowest.get(name, SMALLEST if kind == "dims" else None)
            if name in keep or floor is None or isinstance(value, bool) or not isinstance(value, int) \
                    or value <= floor:
                continue
            trial = {**lowered, kind: {**lowered[kind], name: floor}}
            if valid(trial["dims"], trial["params"]):
                lowered = trial
    return lowered["dims"], lowered["params"]


def count_entries(spec, base: dict, waived: dict, valid, with_dims: dict | None = None) -> list[dict]:
    """The count-reach cases: for each item dim not waived, one per count of COUNTS, the other dims and
    the params that size axes at their smallest.  ``valid(dims, params)`` says whether that call passes
    every check.  A count that no valid call takes is an error unless the spec waives it.  ``with_dims``
    (suites.stress.count_with): {item dim: {dim: a number, or the name of a dim}}, set with that count."""
    entries = []
    base_dims, base_params = dict(base.get("dims") or {}), dict(base.get("params") or {})
    items = item_dims(spec, base_dims)
    with_dims = with_dims or {}
    stray = sorted(set(with_dims) - set(items))
    if stray:
        raise ValueError(f"count_with.{stray[0]}: {stray[0]} sizes no item axis, so it has no count cases")
    for dim in items:
        if f"{COUNT_PREFIX}{dim}" in waived:
            continue
        for count in COUNTS:
            # The other item dims keep the base's counts: they are what the raised one is selected
            # or matched against (three nearest of two known points would leave a slot empty); the
            # spec's count_with sets them otherwise (a key per level, one query where any will do).
            raised = {**base_dims, dim: count}
            raised.update({name: raised[value] if isinstance(value, str) else value
                           for name, value in (with_dims.get(dim) or {}).items()})
            dims, params = smallest_call(spec, raised, base_params, set(items) | set(with_dims.get(dim) or {}),
                                         valid)
            if not valid(dims, params):
                raise ValueError(f"count {dim} = {count}: no call with it passes the spec's checks; say why in "
                                 f"suites.stress.not_applicable.{COUNT_PREFIX}{dim}")
            entries.append({"name": f"count_{dim}{count}",
                            "note": f"stress: {dim} = {count}, past 2^16 items (a 16-bit count keeps "
                                    f"{count % 2**16})",
                            "dims": dims, "params": params})
    return entries


def tie_inputs(spec, base: dict) -> list[str]:
    """The float inputs a tie case draws as small integers: those whose distribution is a plain one
    (a custom generator keeps what it builds: valid boxes, spatial shapes)."""
    base_values = base.get("values") or {}
    names = []
    for name, tensor in spec.inputs.items():
        if not (tensor.dtype == "T" or str(tensor.dtype).startswith("float")):
            continue
        dist = base_values.get(name) or tensor.values or {}
        if dist.get("dist") != "custom":
            names.append(name)
    return names


def tie_entries(spec, base: dict, valid) -> list[dict]:
    """The tie cases of a kernel with a selection output: for each item dim of an input drawn as
    integers, that dim raised to each of TIE_ITEMS (others at the base) with position 0's item copied along
    it to tie_positions; and the base itself in integers (ties between first and last)."""
    if not selection_outputs(spec):
        return []
    names = tie_inputs(spec, base)
    if not names:
        return []
    base_dims = dict(base.get("dims") or {})
    values = {name: {"dist": "custom", "fn": "gen.kernels.shared.tied_items:tied_items", "tensor": name,
                     "item_axes": [axis for axis, role in enumerate(spec.inputs[name].axes) if role == "item"]}
              for name in names}
    entries = [{"name": "ties_base", "note": "stress: small integer values, the first item copied to the last",
                "values": values}]
    axis_dims = {entry for name in names for entry, role in zip(spec.inputs[name].shape, spec.inputs[name].axes)
                 if role == "item" and isinstance(entry, str) and entry in base_dims}
    for dim, items in ((dim, items) for dim in sorted(axis_dims) for items in TIE_ITEMS):
        dims = {**base_dims, dim: max(items, base_dims[dim])}
        if valid(dims, base.get("params") or {}):
            entries.append({"name": f"ties_{dim}{dims[dim]}", "dims": dims, "values": values,
                            "note": f"stress: exact ties between item 0 of {dim} and items either side of "
                                    f"{', '.join(map(str, SPLITS))} and the last"})
    return entries


def reach_entries(spec, base: dict, conf: dict, valid) -> dict[str, list[dict]]:
    """The stress suite's count and tie entries, by the suites.stress key their lines are reported at."""
    waived = conf.get("not_applicable") or {}
    try:
        counts = count_entries(spec, base, waived, valid, conf.get("count_with"))
    except ValueError as exc:
        raise SpecError(spec.path, line_of(conf, "base"), f"suites.stress: {exc}") from None
    return {"base": counts + tie_entries(spec, base, valid)}
