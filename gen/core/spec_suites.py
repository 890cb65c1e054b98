"""Validating a spec's suites: entries, random samplers, fast_path, hunt, invalid dtypes and the
stress dimensions."""
from __future__ import annotations

import math

from gen.core.descriptor import DescriptorError, Explicit, parse
from gen.core.spec_fields import Validator, read_values
from gen.core.spec_model import (FLOAT_DTYPES, INDEX_LIMITS, MAX_CASES_PER_ENTRY, MAX_FAST_PATH_CASES,
                                 MAX_RANDOM_COUNT, REACHABLE_DIMENSIONS, STRESS_DIMENSIONS, SUITES, VALUE_REGIMES)


_ENTRY_KEYS = ["name", "note", "dims", "params", "each", "values", "omit", "zero_golden_ok", "dtype"]


def _entry(v: Validator, node, where, spec_inputs, need_name=True, keys=_ENTRY_KEYS):
    if not isinstance(node, dict):
        v.fail(node, None, f"{where}: each case must be a mapping")
    v.allow_keys(node, keys, where)
    if need_name:
        v.require_keys(node, ["name"], where)
        v.plain_name(node, "name", node["name"], f"{where} name")
    for section in ("dims", "params", "each", "values"):
        if section in node and not isinstance(node[section], dict):
            v.fail(node, section, f"{where}: {section} must be a mapping")
    for tname, dist in (node.get("values") or {}).items():
        if tname not in spec_inputs:
            v.fail(node["values"], tname, f"{where}: values names unknown input '{tname}'")
        read_values(v, node["values"], tname, dist, f"{where} values.{tname}")
    for tname in v.optional_list(node, "omit", where):
        if not isinstance(tname, str) or tname not in spec_inputs or not spec_inputs[tname].optional:
            v.fail(node, "omit", f"{where}: only optional inputs can be omitted, not '{tname}'")
    # each's lists first: the dtypes below may come from one.
    cases = 1
    for key, choices in (node.get("each") or {}).items():
        if not isinstance(choices, list) or not choices:
            v.fail(node["each"], key, f"{where}: each.{key} must be a non-empty list")
        cases *= len(choices)
        if cases > MAX_CASES_PER_ENTRY:
            v.fail(node, "each", f"{where}: its each lists make over {MAX_CASES_PER_ENTRY} cases")
    for dtype in [node["dtype"]] if "dtype" in node else (node.get("each") or {}).get("dtype") or []:
        if dtype not in FLOAT_DTYPES:
            v.fail(node, "dtype" if "dtype" in node else "each", f"{where}: dtype {dtype!r} is not one of "
                                                                 f"{', '.join(FLOAT_DTYPES)}")


def _sampler_range(v: Validator, sampler, where):
    low, high = sampler["min"], sampler["max"]
    for bound in (low, high):
        if isinstance(bound, bool) or not isinstance(bound, (int, float)) or not math.isfinite(bound):
            v.fail(sampler, None, f"{where}: min and max must be finite numbers")
    if low > high:
        v.fail(sampler, None, f"{where}: min {low} is above max {high}")
    if isinstance(low, int) and isinstance(high, int) and not -2**63 <= low <= high < 2**63:
        v.fail(sampler, None, f"{where}: min and max must fit in 64 bits")
    if sampler.get("log") and not low > 0:
        v.fail(sampler, None, f"{where}: a log sampler needs min > 0")


def read_suites(v: Validator, node, spec_inputs, spec_outputs=(), op: str = "", spec_params=()):
    if not isinstance(node, dict):
        v.fail(node, None, "suites must be a mapping")
    v.allow_keys(node, list(SUITES), "suites")
    random = node.get("random")
    if random is not None:
        if not isinstance(random, dict):
            v.fail(node, "random", "suites.random must be a mapping")
        v.allow_keys(random, ["count", "dims", "params", "where", "max_elements", "values"], "suites.random")
        for key, most in (("count", MAX_RANDOM_COUNT), ("max_elements", None)):
            number = random.get(key, 0)
            if isinstance(number, bool) or not isinstance(number, int) or number < 0 or most and number > most:
                v.fail(random, key, f"suites.random.{key} must be a whole number >= 0"
                                    + (f" and <= {most}" if most else ""))
        for section in ("dims", "params"):
            for name, sampler in v.optional_mapping(random, section, "suites.random").items():
                if isinstance(sampler, dict):
                    v.allow_keys(sampler, ["min", "max", "log"], f"suites.random.{section}.{name}")
                    v.require_keys(sampler, ["min", "max"], f"suites.random.{section}.{name}")
                    _sampler_range(v, sampler, f"suites.random.{section}.{name}")
                elif isinstance(sampler, str):
                    v.expr(random[section], name, sampler, f"suites.random.{section}.{name}")
                elif isinstance(sampler, list) and not sampler:
                    # A list is a choice among its values: an empty one has nothing to draw.
                    v.fail(random[section], name, f"suites.random.{section}.{name}: a list of choices must not be empty")
        for i, cond in enumerate(v.optional_list(random, "where", "suites.random")):
            v.expr(random["where"], None, cond, f"suites.random.where[{i}]")
        for tname, dist in v.optional_mapping(random, "values", "suites.random").items():
            if tname not in spec_inputs:
                v.fail(random["values"], tname, f"suites.random: values names unknown input '{tname}'")
            read_values(v, random["values"], tname, dist, f"suites.random values.{tname}")
    network = node.get("network")
    if network is not None:
        v.mapping(node, "network", "suites")
        v.allow_keys(network, ["derivation", "cases"], "suites.network")
        v.require_keys(network, ["cases"], "suites.network")
        for case in v.optional_list(network, "cases", "suites.network"):
            _entry(v, case, "suites.network case", spec_inputs)
    boundary = node.get("boundary")
    if boundary is not None:
        if not isinstance(boundary, list):
            v.fail(node, "boundary", "suites.boundary must be a list of cases")
        for case in boundary:
            _entry(v, case, "suites.boundary case", spec_inputs)
    invalid = node.get("invalid")
    if invalid is not None:
        v.mapping(node, "invalid", "suites")
        v.allow_keys(invalid, ["base", "dtypes"], "suites.invalid")
        v.require_keys(invalid, ["base"], "suites.invalid")
        _entry(v, invalid["base"], "suites.invalid.base", spec_inputs, need_name=False)
        _invalid_dtypes(v, invalid)
    stress = node.get("stress")
    if stress is not None:
        _stress(v, node, stress, spec_inputs, spec_outputs)
    fast_path = node.get("fast_path")
    if fast_path is not None:
        _fast_path(v, node, fast_path, spec_inputs, spec_params)
    if node.get("hunt") is not None:
        _hunt(v, node, node["hunt"], op)
    return node


def _fast_path(v: Validator, suites, node, spec_inputs, spec_params) -> None:
    """suites.fast_path: the parameter values an implementation typically special-cases, each
    with why, made at two or more shapes from a base whose values make the skipped work matter."""
    if not isinstance(node, dict):
        v.fail(suites, "fast_path", "suites.fast_path must be a mapping")
    v.allow_keys(node, ["base", "shapes", "paths"], "suites.fast_path")
    v.require_keys(node, ["base", "shapes", "paths"], "suites.fast_path")
    _entry(v, node["base"], "suites.fast_path.base", spec_inputs, need_name=False)
    if "each" in node["base"]:
        v.fail(node["base"], "each", "suites.fast_path.base: one case, no 'each'")
    _fast_path_shapes(v, node, "suites.fast_path")
    paths = node["paths"]
    if not isinstance(paths, list) or not paths:
        v.fail(node, "paths", "suites.fast_path.paths must be a non-empty list of fast paths")
    names, planned = set(), 0
    for path in paths:
        where = "suites.fast_path path"
        _entry(v, path, where, spec_inputs, keys=["name", "why", "params", "dims", "values", "omit", "each", "shapes"])
        v.require_keys(path, ["why"], where)
        if path["name"] in names:
            v.fail(path, "name", f"{where}: name '{path['name']}' is given twice")
        names.add(path["name"])
        if not isinstance(path["why"], str) or not path["why"].strip():
            v.fail(path, "why", f"{where} {path['name']}: why must say what an implementation skips there")
        if not path.get("params") and not path.get("omit") and not path.get("dims"):
            v.fail(path, None, f"{where} {path['name']}: params, dims or omit must set what is special-cased")
        for name in path.get("params") or {}:
            if name not in spec_params:
                v.fail(path["params"], name, f"{where} {path['name']}: unknown param '{name}' "
                                             f"(known: {', '.join(spec_params)})")
        if "shapes" in path:
            _fast_path_shapes(v, path, f"{where} {path['name']}")
        planned += math.prod(len(c) for c in (path.get("each") or {}).values()) * len(path.get("shapes", node["shapes"]))
        if planned > MAX_FAST_PATH_CASES:
            v.fail(path, None, f"{where} {path['name']}: suites.fast_path plans over {MAX_FAST_PATH_CASES} cases "
                               f"(its paths' each lists times their shapes)")


def _fast_path_shapes(v: Validator, node, where) -> None:
    """A fast path is met at two shapes or more, so that no kill of its bug rests on one case shape."""
    shapes = node["shapes"]
    if not isinstance(shapes, list) or len(shapes) < 2 or any(
            not isinstance(s, dict) or not s or any(isinstance(n, bool) or not isinstance(n, int) or n < 0
                                                     for n in s.values()) for s in shapes):
        v.fail(node, "shapes", f"{where}: shapes must be a list of two or more mappings of dims to whole numbers")
    if len({tuple(sorted(s.items())) for s in shapes}) < len(shapes):
        v.fail(node, "shapes", f"{where}: shapes must differ from each other")


def _hunt(v: Validator, suites, node, op: str) -> None:
    """suites.hunt: the cases `opcase power --hunt` found, each an explicit descriptor of this kernel
    and the bugs it kills (README: Measuring a suite's power)."""

    if not isinstance(node, list):
        v.fail(suites, "hunt", "suites.hunt must be a list of {case: DESCRIPTOR, kills: [NAME, ...]}")
    seen = set()
    for entry in node:
        if not isinstance(entry, dict):
            v.fail(entry, None, "suites.hunt: each entry is {case: DESCRIPTOR, kills: [NAME, ...]}")
        v.allow_keys(entry, ["case", "kills"], "suites.hunt entry")
        v.require_keys(entry, ["case", "kills"], "suites.hunt entry")
        text = entry["case"]
        try:
            parsed = parse(text) if isinstance(text, str) else None
        except DescriptorError as exc:
            v.fail(entry, "case", f"suites.hunt: {exc}")
        if not isinstance(parsed, Explicit):
            v.fail(entry, "case", "suites.hunt: case must be an explicit descriptor "
                                  "(OP:DTYPE:DIMS:PARAMS:seed=S[:...], README: Descriptors and shrinking)")
        if parsed.op != op:
            v.fail(entry, "case", f"suites.hunt: case {text!r} is for {parsed.op}, not {op}")
        if text in seen:
            v.fail(entry, "case", f"suites.hunt: case {text!r} is listed twice")
        seen.add(text)
        kills = entry["kills"]
        if not isinstance(kills, list) or not kills or not all(isinstance(k, str) and k for k in kills):
            v.fail(entry, "kills", "suites.hunt: kills must be a non-empty list of mutant names")


def _invalid_dtypes(v: Validator, invalid) -> None:
    """suites.invalid.dtypes: the dtypes each check's invalid case is made in (default: the base's `dtype`,
    else the spec's last dtype), so a check a backend makes in one dtype only is caught."""
    dtypes = invalid.get("dtypes")
    if dtypes is None:
        return
    if "dtype" in invalid["base"]:
        v.fail(invalid, "dtypes", "suites.invalid: give either dtypes or base.dtype, not both")
    if not isinstance(dtypes, list) or not dtypes or len(set(dtypes)) != len(dtypes) or any(
            d not in FLOAT_DTYPES for d in dtypes):
        v.fail(invalid, "dtypes", f"suites.invalid.dtypes must be a list of distinct dtypes of "
                                  f"{', '.join(FLOAT_DTYPES)}")


def _stress(v: Validator, suites, node, spec_inputs, spec_outputs):
    """suites.stress: a small valid base case and the stress dimensions derived from it."""
    if not isinstance(node, dict):
        v.fail(suites, "stress", "suites.stress must be a mapping")
    v.allow_keys(node, ["base", *STRESS_DIMENSIONS, "not_applicable", "count_with"], "suites.stress")
    v.require_keys(node, ["base"], "suites.stress")
    _entry(v, node["base"], "suites.stress.base", spec_inputs, need_name=False)
    if "each" in node["base"]:
        v.fail(node["base"], "each", "suites.stress.base: one case, no 'each'")
    regimes = node.get("values")
    if regimes is not None:
        if not isinstance(regimes, dict) or not regimes:
            v.fail(node, "values", "suites.stress.values maps regimes to the inputs they apply to")
        for regime, names in regimes.items():
            if regime not in VALUE_REGIMES:
                v.fail(regimes, regime, f"suites.stress.values: unknown regime '{regime}' "
                                        f"(known: {', '.join(VALUE_REGIMES)})")
            if not isinstance(names, list) or not names or any(not isinstance(n, str) or n not in spec_inputs
                                                                   for n in names):
                v.fail(regimes, regime, f"suites.stress.values.{regime} must be a non-empty list of inputs "
                                        f"(known: {', '.join(spec_inputs)})")
    tail = node.get("channel_tail")
    if tail is not None:
        for entry in tail if isinstance(tail, list) and tail else [tail]:
            _channel_tail(v, node, entry)
    contention = node.get("contention")
    if contention is not None:
        if not isinstance(contention, list) or not contention:
            v.fail(node, "contention", "suites.stress.contention must be a non-empty list of cases")
        for case in contention:
            _entry(v, case, "suites.stress.contention case", spec_inputs)
    batch = node.get("batch")
    if batch is not None:
        if not isinstance(batch, dict) or not batch or any(
                isinstance(n, bool) or not isinstance(n, int) or n < 0 for n in batch.values()):
            v.fail(node, "batch", "suites.stress.batch maps dims to whole numbers >= 0")
        for name in batch:
            if not isinstance(name, str) or name not in (node["base"].get("dims") or {}):
                v.fail(batch, name, f"suites.stress.batch: '{name}' is not one of suites.stress.base's dims")
        _batch_sets_a_batch(v, node, batch, spec_inputs, spec_outputs)
    _count_with(v, node)
    waived = node.get("not_applicable")
    if waived is not None:
        if not isinstance(waived, dict) or not waived:
            v.fail(node, "not_applicable", "suites.stress.not_applicable maps dimensions to why they do not apply")
        for name, why in waived.items():
            if name not in REACHABLE_DIMENSIONS and not str(name).startswith("count_"):
                v.fail(waived, name, f"suites.stress.not_applicable: unknown dimension '{name}' "
                                     f"(known: {', '.join(REACHABLE_DIMENSIONS)})")
            if not isinstance(why, str) or not why.strip():
                v.fail(waived, name, f"suites.stress.not_applicable.{name}: say why, in words")
    index_width = node.get("index_width")
    if index_width is not None:
        if not isinstance(index_width, dict):
            v.fail(node, "index_width", "suites.stress.index_width must be a mapping")
        v.allow_keys(index_width, ["tensor", *INDEX_LIMITS], "suites.stress.index_width")
        v.require_keys(index_width, ["tensor"], "suites.stress.index_width")
        if not isinstance(index_width["tensor"], str) or index_width["tensor"] not in (*spec_inputs, *spec_outputs):
            v.fail(index_width, "tensor", f"suites.stress.index_width.tensor: unknown tensor "
                                          f"{index_width['tensor']!r}")
        for limit in INDEX_LIMITS:
            if limit in index_width:
                _entry(v, index_width[limit], f"suites.stress.index_width.{limit}", spec_inputs, need_name=False)


def _channel_tail(v: Validator, stress, tail) -> None:
    """One suites.stress.channel_tail entry: the base's `dim` or int `param` that sizes a channel
    axis, and the vector widths whose partial blocks it must leave."""
    if not isinstance(tail, dict):
        v.fail(stress, "channel_tail", "suites.stress.channel_tail must be a mapping or a non-empty list of them")
    v.allow_keys(tail, ["dim", "param", "widths"], "suites.stress.channel_tail")
    if ("dim" in tail) == ("param" in tail):
        v.fail(tail, None, "suites.stress.channel_tail: give exactly one of 'dim' and 'param'")
    v.require_keys(tail, ["widths"], "suites.stress.channel_tail")
    key = "dim" if "dim" in tail else "param"
    known = stress["base"].get(f"{key}s") or {}
    if not isinstance(tail[key], str) or tail[key] not in known:
        v.fail(tail, key, f"suites.stress.channel_tail.{key} must name one of suites.stress.base's {key}s "
                          f"({', '.join(map(str, known))})")
    widths = tail["widths"]
    if not isinstance(widths, list) or not widths or any(
            isinstance(w, bool) or not isinstance(w, int) or not 2 <= w <= 4096 for w in widths):
        v.fail(tail, "widths", "suites.stress.channel_tail.widths must be a list of whole numbers in [2, 4096]")


def _batch_sets_a_batch(v: Validator, stress, batch: dict, spec_inputs, spec_outputs) -> None:
    """suites.stress.batch makes a batch of several: it sets a dim of an axis whose role is batch to 2 or more."""
    tensors = [*spec_inputs.values(), *dict(spec_outputs).values()]
    dims = sorted({str(entry) for t in tensors for entry, role in zip(t.shape, t.axes) if role == "batch"})
    if not any(batch.get(name, 0) >= 2 for name in dims):
        v.fail(stress, "batch", f"suites.stress.batch must set a dim of a batch axis ({', '.join(dims) or 'none'}) "
                                f"to 2 or more")


def _count_with(v: Validator, node) -> None:
    """suites.stress.count_with: {item dim: {dim: whole number, or the name of a base dim}}, the dims a count
    case of that item dim sets besides the count (gen/REACH.md): a data limit no check states (a level needs
    a key of its own), or another item dim the raised count does not need at the base's size."""
    with_dims = node.get("count_with")
    if with_dims is None:
        return
    base_dims = node["base"].get("dims") or {}
    if not isinstance(with_dims, dict) or not with_dims:
        v.fail(node, "count_with", "suites.stress.count_with maps item dims to the dims their count cases set")
    for dim, dims in with_dims.items():
        if dim not in base_dims or not isinstance(dims, dict) or not dims:
            v.fail(with_dims, dim, f"suites.stress.count_with.{dim}: one of suites.stress.base's dims, mapped to "
                                   f"dims and their values")
        for name, value in dims.items():
            if name == dim or name not in base_dims or not (
                    (isinstance(value, int) and not isinstance(value, bool) and value >= 0) or (isinstance(value, str) and value in base_dims)):
                v.fail(dims, name, f"suites.stress.count_with.{dim}.{name}: another of suites.stress.base's dims, "
                                   f"set to a whole number >= 0 or to one of those dims")
