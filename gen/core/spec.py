"""Operator specs: the YAML transcription of a design doc, loaded and validated.

Every error names the spec file and the line of the offending entry.  The format is
documented in specs/README.md.
"""
from __future__ import annotations

from pathlib import Path
import hashlib

import yaml

from gen.core import waivers
from gen.core.spec_fields import (Validator, read_check, read_criteria, read_deviations, read_mluops,
                                  read_output_criteria, read_tensor, read_tied_outputs)
from gen.core.spec_model import (AXIS_ROLES, CHECK_STATUSES, Check, Criteria, DEVIATION_STATUSES, DISTRIBUTIONS,
                                 Deviation, FLOAT_DTYPES, INDEX_LIMITS, LETTER_ROLES, MAX_CASES_PER_ENTRY,
                                 MAX_DEVIATION_PATTERN, MAX_FAST_PATH_CASES, MAX_RANDOM_COUNT, MluopsMapping,
                                 OWN_CODE_PACKAGE, OutputCriterion, ParamSpec, REACHABLE_DIMENSIONS,
                                 STRESS_DIMENSIONS, SUITES, Spec, SpecError, TENSOR_DTYPES, TRUST_ENV, TensorSpec,
                                 VALUE_REGIMES, absent_tensors, dims_with_role, resolve_callable, spec_code_trusted)
from gen.core.spec_suites import read_suites
from gen.core.spec_yaml import MAX_YAML_DEPTH, line_of, parse_yaml

# Defined beside this module and re-exported, so that `from gen.core.spec import NAME` keeps working.
__all__ = ["AXIS_ROLES", "CHECK_STATUSES", "Check", "Criteria", "DEVIATION_STATUSES", "DISTRIBUTIONS",
           "Deviation", "FLOAT_DTYPES", "INDEX_LIMITS", "LETTER_ROLES", "MAX_CASES_PER_ENTRY",
           "MAX_DEVIATION_PATTERN", "MAX_FAST_PATH_CASES", "MAX_RANDOM_COUNT", "MAX_YAML_DEPTH",
           "MluopsMapping", "OWN_CODE_PACKAGE", "OutputCriterion", "ParamSpec", "REACHABLE_DIMENSIONS",
           "STRESS_DIMENSIONS", "SUITES", "Spec", "SpecError", "TENSOR_DTYPES", "TRUST_ENV", "TensorSpec",
           "VALUE_REGIMES", "Validator", "absent_tensors", "dims_with_role", "line_of", "parse_yaml",
           "read_check", "read_criteria", "read_deviations", "read_mluops", "read_output_criteria",
           "read_suites", "read_tensor", "read_tied_outputs", "resolve_callable", "spec_code_trusted"]


_TOP_KEYS = ["op", "doc", "summary", "reference", "dtypes", "params", "inputs", "outputs", "checks",
             "criteria", "output_criteria", "suites", "theory_ops", "nondeterministic_sums", "mluops",
             "deviations", "waivers"]


def load_spec(path) -> Spec:
    """Load and validate one spec file.  Raises SpecError naming the file and line.

    A file already loaded in this process with the same bytes is not parsed again (gen reads
    each spec for the plan, the generator and each case's plans): the Spec made then is given,
    shared as spec_for's are (read-only)."""
    path = Path(path)
    try:
        text = path.read_bytes()
    except OSError as exc:
        raise SpecError(path, None, f"cannot read spec ({exc.strerror})") from None
    key = (str(path), hashlib.sha256(text).hexdigest())
    if key not in _LOADED:
        _LOADED[key] = _parsed_spec(path, text)
    return _LOADED[key]


# Specs loaded in this process, by path and content hash (load_spec).
_LOADED: dict[tuple[str, str], "Spec"] = {}


def _parsed_spec(path: Path, text: bytes) -> Spec:
    try:
        raw = parse_yaml(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        problem = getattr(exc, "problem", None) or str(exc)
        raise SpecError(path, mark.line + 1 if mark else None, f"YAML error: {problem}") from None
    v = Validator(path)
    if not isinstance(raw, dict):
        raise SpecError(path, 1, "a spec is a YAML mapping")
    v.allow_keys(raw, _TOP_KEYS, "spec")
    # params may be left out: a kernel without any (a point-cloud op) has nothing to say there.
    v.require_keys(raw, ["op", "doc", "reference", "dtypes", "inputs", "outputs", "checks",
                         "criteria", "suites"], "spec")
    v.plain_name(raw, "op", raw["op"], "op")
    for node, message in waivers.problems(raw):   # audit waivers (gen/core/waivers.py)
        v.fail(node, "waivers", message)
    dtypes = raw["dtypes"]
    if not isinstance(dtypes, list) or not dtypes or any(d not in FLOAT_DTYPES for d in dtypes):
        v.fail(raw, "dtypes", f"dtypes must be a non-empty list of {', '.join(FLOAT_DTYPES)}")
    params = {}
    for name, pnode in v.optional_mapping(raw, "params", "spec").items():
        ptype = pnode.get("type") if isinstance(pnode, dict) else None
        if ptype not in ("int", "float", "bool"):
            v.fail(raw["params"], name, f"param '{name}': type must be int, float or bool")
        params[name] = ParamSpec(name=name, type=ptype, doc=str(pnode.get("doc", "")))
    inputs = {n: read_tensor(v, raw["inputs"], n, t, "input", dtypes)
              for n, t in v.mapping(raw, "inputs", "spec").items()}
    outputs = {n: read_tensor(v, raw["outputs"], n, t, "output", dtypes)
               for n, t in v.mapping(raw, "outputs", "spec").items()}
    read_tied_outputs(v, raw["outputs"], inputs, outputs)
    clash = set(inputs) & set(outputs) | (set(inputs) | set(outputs)) & set(params)
    if clash:
        v.fail(raw, "outputs", f"names used twice among inputs, outputs and params: {sorted(clash)}")
    if not isinstance(raw["checks"], list):
        v.fail(raw, "checks", "checks must be a list")
    checks = [read_check(v, c, inputs, outputs, params) for c in raw["checks"]]
    ids = [c.id for c in checks]
    dup = {i for i in ids if ids.count(i) > 1}
    if dup:
        v.fail(raw, "checks", f"check ids must be unique: {sorted(dup)}")
    criteria = read_criteria(v, raw["criteria"])
    output_criteria = read_output_criteria(v, raw, outputs, path)
    if criteria.mode == "dynamic":
        # The docs' dynamic rule scales a baseline's float error; an index output has no such error,
        # so it is judged exactly (output_criteria) beside the dynamic thresholds of the others.
        for name, tensor in outputs.items():
            if tensor.dtype != "T" and tensor.dtype not in FLOAT_DTYPES and name not in output_criteria:
                v.fail(raw["outputs"], name, f"output '{name}' is {tensor.dtype}: dynamic criteria judge floating "
                                             f"outputs only; judge it exactly (output_criteria) or the kernel "
                                             f"with static criteria")
    suites = read_suites(v, raw["suites"], inputs, outputs, str(raw["op"]), params)
    resolve_callable(raw["reference"], path, "reference", line_of(raw, "reference"))
    nondeterministic_sums = raw.get("nondeterministic_sums", False)
    if not isinstance(nondeterministic_sums, bool):
        v.fail(raw, "nondeterministic_sums", "nondeterministic_sums must be true or false")
    return Spec(op=str(raw["op"]), path=path, sha256=hashlib.sha256(text).hexdigest(), doc=str(raw["doc"]),
                summary=str(raw.get("summary", "")), reference=str(raw["reference"]), dtypes=list(dtypes),
                params=params, inputs=inputs, outputs=outputs, checks=checks, criteria=criteria,
                suites=suites, theory_ops=str(raw.get("theory_ops", "")),
                nondeterministic_sums=nondeterministic_sums, mluops=read_mluops(v, raw, inputs, outputs),
                output_criteria=output_criteria, raw=raw, deviations=read_deviations(v, raw))
