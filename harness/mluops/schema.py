"""What opcase's reader and writer share about mlu-ops' case files: which kernels they
describe and how their tensors, params, dtypes, layouts and metrics map to opcase's.

mluop_gtest identifies tensors by position (``tensor_desc_[i]`` in each kernel's executor),
not by id, so each kernel's spec lists its tensor names in mlu-ops' positional order (its
`mluops:` block); this module names no kernel.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gen.core.expr import ExprError, evaluate
from gen.core.registry import known_ops, spec_for
from gen.core.spec import Spec, SpecError, line_of
from harness.mluops import mluops_case_pb2 as pb


class MluopsError(Exception):
    """An mlu-ops case file that opcase cannot use."""


class MluopsFormatError(MluopsError):
    """A malformed case file, or one whose data opcase cannot reproduce; names the file."""


class UnsupportedKernel(MluopsError):
    """A well-formed case for a kernel that opcase has no spec (with an `mluops:` block) for."""

    def __init__(self, path, op_name: str):
        super().__init__(f"{path}: op_name {op_name!r} is not one of opcase's kernels; "
                         f"supported: {', '.join(sorted(kernels()))}")
        self.op_name = op_name


@dataclass(frozen=True)
class KernelFormat:
    op: str                          # opcase's kernel name, also mlu-ops' op_name
    op_type: int | None              # mlu-ops' OpType value (None: the spec names none; it is informational)
    inputs: tuple[str, ...]          # opcase names in mlu-ops' positional order
    outputs: tuple[str, ...]
    param_field: str | None          # the Node field carrying the params
    params: tuple[str, ...]          # param names, the same in opcase and mlu-ops
    optional_inputs: tuple[str, ...] = ()  # trailing inputs a case may leave out
    optional_outputs: tuple[str, ...] = ()  # trailing outputs that go with them (the spec's with_input)
    fixed: tuple[tuple[str, int], ...] = ()  # constant param-message fields (carafe's dimnb)


def kernel_format(op_name: str) -> KernelFormat | None:
    """How mlu-ops describes kernel ``op_name``: read from its spec's `mluops:` block (specs/README.md);
    None for a name with no spec or a spec without the block.  A block that names what the proto
    lacks is the spec's error (SpecError, with its file and line)."""
    if op_name not in known_ops():     # only the specs' names: a case's op_name never picks a file itself
        return None
    return _format_of(spec_for(op_name))


def kernels() -> dict[str, KernelFormat]:
    """Every kernel whose cases opcase reads and writes in mlu-ops' format."""
    formats = {op: kernel_format(op) for op in known_ops()}
    return {op: kernel for op, kernel in formats.items() if kernel is not None}


def _format_of(spec: Spec) -> KernelFormat | None:
    mapping = spec.mluops
    if mapping is None:
        return None
    line = line_of(spec.raw, "mluops")
    if mapping.op_type is not None and mapping.op_type not in pb.OpType.keys():
        raise SpecError(spec.path, line, f"mluops.op_type {mapping.op_type!r} is no OpType of mluops_case.proto")
    message_fields = pb.Node.DESCRIPTOR.fields_by_name
    if mapping.param_field is not None:
        if mapping.param_field not in message_fields or message_fields[mapping.param_field].message_type is None:
            raise SpecError(spec.path, line, f"mluops.param_field {mapping.param_field!r} is no message field "
                                             f"of mluops_case.proto's Node")
        fields = message_fields[mapping.param_field].message_type.fields_by_name
        unknown = [name for name in (*spec.params, *dict(mapping.fixed)) if name not in fields]
        if unknown:
            raise SpecError(spec.path, line, f"mluops.param_field {mapping.param_field}: the proto's message has "
                                             f"no field(s) {', '.join(unknown)}")
    elif spec.params:
        raise SpecError(spec.path, line, "mluops.param_field: the kernel has params, so mlu-ops needs the field")
    op_type = None if mapping.op_type is None else pb.OpType.Value(mapping.op_type)
    return KernelFormat(op=spec.op, op_type=op_type, inputs=mapping.inputs,
                        outputs=mapping.outputs, param_field=mapping.param_field, params=tuple(spec.params),
                        optional_inputs=tuple(n for n in mapping.inputs if spec.inputs[n].optional),
                        optional_outputs=tuple(n for n in mapping.outputs if spec.outputs[n].with_input),
                        fixed=mapping.fixed)


def nominal_shape_of_absent(kernel: KernelFormat, name: str, params: dict,
                            shapes: dict[str, tuple[int, ...]]) -> tuple[int, ...]:
    """The shape an optional input would have had (opcase records absent inputs with one): its spec
    shape, with the dims the present tensors' shapes fix (a dim is fixed by an axis whose spec entry
    is that dim's bare name)."""
    spec = spec_for(kernel.op)
    dims = {}
    for tensor, shape in shapes.items():
        for entry, size in zip(spec.inputs[tensor].shape, shape):
            if isinstance(entry, str) and entry.isidentifier() and entry not in spec.params:
                dims.setdefault(entry, int(size))
    try:
        return tuple(int(evaluate(entry, {**dims, **params})) for entry in spec.inputs[name].shape)
    except (ExprError, TypeError, ValueError) as exc:
        raise KeyError(f"{kernel.op}: the shape of absent input {name!r} does not follow from the case ({exc})") \
            from None


# mlu-ops DataType name <-> numpy dtype, for the dtypes opcase has.
DTYPES = {
    "DTYPE_HALF": np.dtype(np.float16),
    "DTYPE_FLOAT": np.dtype(np.float32),
    "DTYPE_DOUBLE": np.dtype(np.float64),
    "DTYPE_INT8": np.dtype(np.int8),
    "DTYPE_INT16": np.dtype(np.int16),
    "DTYPE_INT32": np.dtype(np.int32),
    "DTYPE_INT64": np.dtype(np.int64),
    "DTYPE_UINT8": np.dtype(np.uint8),
    "DTYPE_BOOL": np.dtype(np.bool_),
}
DTYPE_ENUM_OF = {dtype: name for name, dtype in DTYPES.items()}

LAYOUT_PREFIX = "LAYOUT_"            # mlu-ops' LAYOUT_NHWC is opcase's "NHWC"

# EvaluationCriterion -> opcase metric, as mluop_gtest's cvtProtoEvaluationCriterion maps them
# (MAPE is evaluated as DIFF1 and MAXAPE as DIFF3; SMAPE, SMAXAPE and NRMSE are rejected).
METRICS = {"DIFF1": "diff1", "MAPE": "diff1", "DIFF2": "diff2", "DIFF3": "diff3", "MAXAPE": "diff3",
           "DIFF3_2": "diff3_2", "DIFF4": "diff4", "DIFF_KL": "diff_kl"}
CRITERION_OF = {"diff1": "DIFF1", "diff2": "DIFF2", "diff3": "DIFF3", "diff3_2": "DIFF3_2",
                "diff4": "DIFF4", "diff_kl": "DIFF_KL"}


def layout_name(enum_value: int) -> str:
    return pb.TensorLayout.Name(enum_value)[len(LAYOUT_PREFIX):]


def layout_enum(name: str) -> int:
    try:
        return pb.TensorLayout.Value(LAYOUT_PREFIX + name)
    except ValueError:
        raise ValueError(f"layout {name!r} has no mlu-ops TensorLayout") from None
