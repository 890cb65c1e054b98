"""Fuzzing case files: small committed cases, decoded, their fields mutated (shapes, dtypes,
data, params, criteria, expected outcome, names; sidecars: path, length, digest and file), then
re-serialized with a fresh checksum so that the mutant gets past the envelope to the code
behind it (now and then the envelope itself is damaged instead).  Each mutant goes through
`opcase run FILE --backend reference` and `opcase show FILE`.  See fuzzing.py for what must hold."""
from __future__ import annotations

import hashlib
import math

from hypothesis import given
from hypothesis import strategies as st

from fuzzing import ESCAPE_DIR, REPO, examples, fuzz_settings, fuzzing, opcase
from gen.core.casefile import FORMAT_VERSION, SUFFIX
from gen.core.proto import opcase_pb2 as pb

CI_EXAMPLES = 300
SMALL_CASE_BYTES = 6000
CASES = {str(p.relative_to(REPO / "cases")): p.read_bytes()
         for p in sorted((REPO / "cases").rglob(f"*{SUFFIX}")) if p.stat().st_size <= SMALL_CASE_BYTES}
CASE_NAME = f"case{SUFFIX}"

STRINGS = ["", " ", "x", "carafe_forward", "psamask_forward", "masked_im2col_forward", "random", "invalid",
           "../../escaped", f"{ESCAPE_DIR}/escaped", "a/b", "..", ".", "\x00", "é", "x" * 300, "NHWC", "NCHW",
           "float32", "diff1", "diff4", "ok"]
DTYPE_NAMES = ["", "float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool",
               "float128", "complex64", "object", "<f4", "f4", "U8", "V8", "float32 ", "str"]
DIMS = [0, 1, 2, 3, 7, -1, -2**63, 2**31, 2**32, 2**62, 2**63 - 1]
INTS = [0, 1, -1, 2, 3, 45, 2**31, -2**31, 2**63 - 1, -2**63]
FLOATS = [0.0, -0.0, 1.0, -1.0, 0.5, 1e-300, 1e308, math.nan, math.inf, -math.inf]
SIDECAR_PATHS = ["", ".", "..", "nonexistent", "../../escaped", f"{ESCAPE_DIR}/escaped", "a/b", "/etc/passwd",
                 CASE_NAME, "../sentinel"]


def _tensors(case: pb.Case) -> list:
    return [*case.inputs, *case.outputs]


@st.composite
def mutate_tensor(draw, case: pb.Case, work_files: dict):
    tensors = _tensors(case)
    if not tensors:
        return
    t = draw(st.sampled_from(tensors))
    how = draw(st.sampled_from(["dim", "add_dim", "drop_dim", "dtype", "layout", "truncate", "extend", "bytes",
                                "clear", "absent", "name", "sidecar", "sidecar_path", "sidecar_length",
                                "sidecar_sha", "sidecar_file"]))
    if how == "dim" and t.shape:
        t.shape[draw(st.integers(0, len(t.shape) - 1))] = draw(st.sampled_from(DIMS))
    elif how == "add_dim":
        t.shape.append(draw(st.sampled_from(DIMS)))
    elif how == "drop_dim" and t.shape:
        del t.shape[draw(st.integers(0, len(t.shape) - 1))]
    elif how == "dtype":
        t.dtype = draw(st.sampled_from(DTYPE_NAMES))
    elif how == "layout":
        t.layout = draw(st.sampled_from(STRINGS))
    elif how == "truncate" and t.HasField("data"):
        t.data = t.data[:draw(st.integers(0, len(t.data)))]
    elif how == "extend":
        t.data = t.data + draw(st.binary(min_size=1, max_size=16))
    elif how == "bytes":
        t.data = draw(st.binary(max_size=64))
    elif how == "clear":
        t.ClearField("data")
        t.ClearField("sidecar")
    elif how == "absent":
        t.absent = not t.absent
    elif how == "name":
        t.name = draw(st.sampled_from([*STRINGS, *(o.name for o in tensors)]))
    else:
        _to_sidecar(case, t, work_files)
        if how == "sidecar_path":
            t.sidecar.path = draw(st.sampled_from(SIDECAR_PATHS))
        elif how == "sidecar_length":
            t.sidecar.length = draw(st.sampled_from([0, 1, min(t.sidecar.length + 1, 2**64 - 1), max(t.sidecar.length - 1, 0),
                                                     2**40, 2**64 - 1]))   # a uint64: a length mutated before may be its max
        elif how == "sidecar_sha":
            t.sidecar.sha256 = draw(st.binary(max_size=32))
        elif how == "sidecar_file" and t.sidecar.path in work_files:
            raw = work_files[t.sidecar.path]
            work_files[t.sidecar.path] = draw(st.sampled_from([raw[:-1], raw + b"\0", b"", raw[::-1]]))


def _to_sidecar(case: pb.Case, t: pb.Tensor, work_files: dict) -> None:
    """Move a tensor's inline data into a sidecar file beside the case, as save() does for big ones."""
    if t.HasField("sidecar"):
        return
    # named by position, not by its (maybe mutated) tensor name: the file must be writable here
    name = f"{CASE_NAME}.{len(work_files)}"
    raw = t.data
    t.sidecar.CopyFrom(pb.Sidecar(path=name, length=len(raw), sha256=hashlib.sha256(raw).digest()))
    work_files[name] = raw


@st.composite
def mutate_case(draw, case: pb.Case, work_files: dict):
    how = draw(st.sampled_from(["tensor", "tensor", "tensor", "param", "criteria", "header", "expect",
                                "drop_tensor", "copy_tensor"]))
    if how == "tensor":
        draw(mutate_tensor(case, work_files))
    elif how == "param":
        keys = sorted(case.params)
        key = draw(st.sampled_from([*keys, "x", ""]))
        what = draw(st.sampled_from(["delete", "i", "f", "s", "b", "none"]))
        if what == "delete":
            case.params.pop(key, None)
        elif what == "none":
            case.params[key].Clear()
        elif what == "i":
            case.params[key].i = draw(st.sampled_from(INTS))
        elif what == "f":
            case.params[key].f = draw(st.sampled_from(FLOATS))
        elif what == "s":
            case.params[key].s = draw(st.sampled_from(STRINGS))
        else:
            case.params[key].b = draw(st.booleans())
    elif how == "criteria":
        what = draw(st.sampled_from(["clear", "output", "metric", "value", "add", "drop"]))
        if what == "clear":
            case.ClearField("criteria")
        elif what == "add" or not case.criteria:
            crit = case.criteria.add(output=draw(st.sampled_from([*STRINGS, *(t.name for t in case.outputs)])))
            crit.thresholds.add(metric=draw(st.sampled_from(["diff1", "diff4", "x", ""])),
                                value=draw(st.sampled_from(FLOATS)))
        else:
            crit = draw(st.sampled_from(list(case.criteria)))
            if what == "output":
                crit.output = draw(st.sampled_from(STRINGS))
            elif what == "drop" or not crit.thresholds:
                crit.ClearField("thresholds")
            else:
                th = draw(st.sampled_from(list(crit.thresholds)))
                if what == "metric":
                    th.metric = draw(st.sampled_from(["diff1", "diff2", "diff3", "diff3_2", "diff4", "x", ""]))
                else:
                    th.value = draw(st.sampled_from(FLOATS))
    elif how == "header":
        field = draw(st.sampled_from(["op", "suite", "name", "expect_check", "expect_message", "spec_path",
                                      "dtype", "note", "generator_version"]))
        setattr(case, field, draw(st.sampled_from(STRINGS)))
    elif how == "expect":
        case.expect = draw(st.sampled_from([0, 1, 2, 3, 99]))
    elif how == "drop_tensor":
        group = draw(st.sampled_from([case.inputs, case.outputs]))
        if len(group):
            del group[draw(st.integers(0, len(group) - 1))]
    elif how == "copy_tensor":
        group = draw(st.sampled_from([case.inputs, case.outputs]))
        if len(group):
            group.add().CopyFrom(group[draw(st.integers(0, len(group) - 1))])


@st.composite
def case_files(draw):
    """{file name: bytes}: the mutated case and its sidecars."""
    source = draw(st.sampled_from(sorted(CASES)))
    envelope = pb.CaseFile.FromString(CASES[source])
    case = pb.Case.FromString(envelope.case_bytes)
    files: dict = {}
    for _ in range(draw(st.integers(1, 4))):
        draw(mutate_case(case, files))
    envelope.case_bytes = case.SerializeToString()
    envelope.case_sha256 = hashlib.sha256(envelope.case_bytes).digest()
    damage = draw(st.sampled_from(["none"] * 12 + ["stale_checksum", "version", "truncate", "flip"]))
    if damage == "stale_checksum":
        envelope.case_sha256 = draw(st.binary(max_size=32))
    elif damage == "version":
        envelope.format_version = draw(st.sampled_from([0, FORMAT_VERSION + 1, 2**32 - 1]))
    raw = envelope.SerializeToString()
    if damage == "truncate":
        raw = raw[:draw(st.integers(0, len(raw)))]
    elif damage == "flip" and raw:
        at = draw(st.integers(0, len(raw) - 1))
        raw = raw[:at] + bytes([raw[at] ^ (1 << draw(st.integers(0, 7)))]) + raw[at + 1:]
    files[CASE_NAME] = raw
    return files


def _mutant(source: str, mutate) -> dict:
    """{CASE_NAME: bytes}: the committed case `source` after mutate(case), re-checksummed."""
    envelope = pb.CaseFile.FromString(CASES[source])
    case = pb.Case.FromString(envelope.case_bytes)
    mutate(case)
    envelope.case_bytes = case.SerializeToString()
    envelope.case_sha256 = hashlib.sha256(envelope.case_bytes).digest()
    return {CASE_NAME: envelope.SerializeToString()}


def _set_shape(tensor, shape) -> None:
    tensor.ClearField("shape")
    tensor.shape.extend(shape)
    tensor.data = b""


PSAMASK = "psamask_forward/boundary/map_1x1-psa_type0-float32.opcase"
# Inputs the fuzzer found that once ended in a traceback (each its own fix).
REGRESSIONS = [
    _mutant(PSAMASK, lambda case: case.inputs[0].ClearField("data")),
    _mutant(PSAMASK, lambda case: case.outputs[0].ClearField("data")),
    _mutant(PSAMASK, lambda case: _set_shape(case.inputs[0], [0, 2**62, 2**62])),
    _mutant(PSAMASK, lambda case: setattr(case.criteria[0].thresholds[0], "metric", "")),
    # A hang (issue 19's long run): pool_size 1e308 kept the reference sampling borders for ever.
    _mutant("border_align_forward/boundary/pool_size_32-float16.opcase",
            lambda case: case.params["pool_size"].CopyFrom(pb.Value(f=1e308))),
]


def test_the_committed_cases_pass_unmutated():
    """The harness of this test: unmutated, each small case passes (exit 0) and shows (exit 0)."""
    assert len(CASES) > 100
    with fuzzing("case files (unmutated)") as (sandbox, figures):
        for source in list(CASES)[::10]:
            work = sandbox.reset()
            (work / CASE_NAME).write_bytes(CASES[source])
            assert opcase(sandbox, figures, "run", CASE_NAME, "--backend", "reference") == 0, source
            assert opcase(sandbox, figures, "show", CASE_NAME) == 0, source


def test_mutated_case_files():
    with fuzzing("case files") as (sandbox, figures):
        @given(case_files())
        @fuzz_settings(CI_EXAMPLES)
        @examples(REGRESSIONS)
        def one_case(files):
            work = sandbox.reset()
            for name, raw in files.items():
                (work / name).write_bytes(raw)
            figures.inputs += 1
            opcase(sandbox, figures, "run", CASE_NAME, "--backend", "reference")
            opcase(sandbox, figures, "show", CASE_NAME)
        one_case()
