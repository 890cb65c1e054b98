"""Read an mlu-ops case file (text ``.prototxt`` or binary ``.pb``) into an ``MluCase``.

Input values are the ones mluop_gtest would hand the kernel: explicit values decoded as its
parser decodes them, ``path`` data files read raw, and ``random_data`` recipes drawn bit for bit
(see random_data.py).  Facts mirrored from mluop_gtest's parser.cpp are cited where used.
"""
from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from google.protobuf import text_format, unknown_fields
from google.protobuf.message import DecodeError

from gen.core.registry import spec_for
from gen.core.casefile import NotARegularFile, SpillFile, element_count, regular_file_bytes
from harness.mluops import mluops_case_pb2 as pb
from harness.mluops import random_data, text_runs
from harness.mluops.schema import (DTYPES, METRICS, KernelFormat, MluopsFormatError,
                                   UnsupportedKernel, kernel_format, layout_name,
                                   nominal_shape_of_absent)

# Random inputs bigger than this are drawn chunk by chunk into a raw file in ``out_dir`` (when
# given) and returned memory-mapped; data files bigger than this are memory-mapped in place.
LARGE_TENSOR_BYTES = 256 << 20

TEXT_SUFFIXES = {".prototxt", ".pbtxt"}
BINARY_SUFFIXES = {".pb"}

# How a tensor's values are given, in mluop_gtest's order of precedence (Parser::getValueType).
VALUE_SOURCES = ("value_h", "value_f", "value_i", "value_l", "value_ui", "value_ul")
PATH = "path"
RANDOM = "random_data"
NO_DATA = "none"
ABSENT = "absent"                    # an optional input the case leaves out

DEFAULT_DEVICE = "CPU"               # mluop_gtest's default baseline device


@dataclass
class MluTensor:
    name: str                        # opcase tensor name
    mlu_id: str                      # the tensor's id in the file
    shape: tuple[int, ...]
    dtype: np.dtype
    layout: str                      # opcase layout name: NHWC, NCHW, ARRAY, ...
    source: str                      # one of VALUE_SOURCES, PATH, RANDOM, NO_DATA, ABSENT
    random: random_data.RandomRecipe | None = None
    data: np.ndarray | None = None   # inputs: the values; outputs: golden values the file carries
    compare: bool = True             # outputs: threshold_use != 0

    @property
    def absent(self) -> bool:
        return self.source == ABSENT


@dataclass
class MluCase:
    path: Path
    op: str                          # opcase kernel name
    params: dict
    input_tensors: dict[str, MluTensor]
    outputs: dict[str, MluTensor]
    # Per output, the (metric, threshold) pairs mluop_gtest would apply; [] when not compared.
    thresholds: dict[str, list[tuple[str, float]]] = field(default_factory=dict)
    threshold_source: str = "none"   # test_param, evaluation_threshold, per_output or none
    baseline_device: str = DEFAULT_DEVICE  # CPU: mluop_gtest computes goldens; else outputs carry them

    @property
    def inputs(self) -> dict[str, np.ndarray]:
        """Input values by opcase name (absent inputs, and all inputs when loaded without data, left out)."""
        return {n: t.data for n, t in self.input_tensors.items() if t.data is not None}

    @property
    def goldens(self) -> dict[str, np.ndarray]:
        return {n: t.data for n, t in self.outputs.items() if t.data is not None}


# The most bytes an mlu-ops case file may have, checked before reading: protobuf parses no
# message over 2 GiB (tensors of network cases past that come as `path:` data files).
MAX_FILE_BYTES = (2 << 30) - 1

# --------------------------------------------------------------------------- parsing

def read_node(path: str | os.PathLike) -> pb.Node:
    """Parse a case file into a complete ``Node``; raise MluopsFormatError naming what is wrong.

    ``.pb`` is binary and ``.prototxt`` text, as mluop_gtest decides by suffix; any other
    suffix is tried as binary, then as text.
    """
    path = Path(path)
    try:
        raw = regular_file_bytes(path, MAX_FILE_BYTES)
    except NotARegularFile as exc:
        raise MluopsFormatError(f"{exc} (an mlu-ops case file is a regular file)") from None
    except OSError as exc:
        raise MluopsFormatError(f"{path}: cannot read ({exc.strerror})") from None
    suffix = path.suffix.lower()
    if suffix in BINARY_SUFFIXES:
        node = _parse_binary(path, raw)
    elif suffix in TEXT_SUFFIXES:
        node = _parse_text(path, raw)
    else:
        node = _parse_unknown_suffix(path, raw)
    _check_complete(path, node)
    return node


def _parse_binary(path: Path, raw: bytes) -> pb.Node:
    node = pb.Node()
    try:
        node.ParseFromString(raw)
    except DecodeError:
        raise MluopsFormatError(f"{path}: not a binary mlu-ops case (corrupt or truncated protobuf)") from None
    return node


def _parse_text(path: Path, raw: bytes) -> pb.Node:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MluopsFormatError(f"{path}: not a text mlu-ops case (not UTF-8 at byte {exc.start})") from None
    node = pb.Node()
    try:
        text_runs.parse(text, node)
    except text_format.ParseError as exc:
        _raise_if_other_kernel(path, text)
        raise MluopsFormatError(f"{path}:{exc}") from None
    return node


def _raise_if_other_kernel(path: Path, text: str) -> None:
    """A case of a kernel outside opcase's schema fails to parse on its param message only:
    report the kernel rather than the field opcase's schema lacks."""
    lenient = pb.Node()
    try:
        text_format.Parse(text, lenient, allow_unknown_field=True)
    except text_format.ParseError:
        return
    if lenient.op_name and kernel_format(lenient.op_name) is None:
        raise UnsupportedKernel(path, lenient.op_name)


def _parse_unknown_suffix(path: Path, raw: bytes) -> pb.Node:
    try:
        node = _parse_binary(path, raw)
        if node.IsInitialized():
            return node
    except MluopsFormatError:
        pass
    try:
        return _parse_text(path, raw)
    except MluopsFormatError as exc:
        raise MluopsFormatError(f"{exc} (and not a binary case either; name it .pb or .prototxt)") from None


def _check_complete(path: Path, node: pb.Node) -> None:
    out_of_schema = list(_values_outside_schema(node, "node"))
    if out_of_schema:
        raise MluopsFormatError(f"{path}: enum value(s) opcase's schema does not know: "
                                f"{', '.join(out_of_schema)}")
    missing = node.FindInitializationErrors()
    if missing:
        raise MluopsFormatError(f"{path}: missing required field(s): {', '.join(missing)}")


# Node.op_type is informational (mluop_gtest dispatches on op_name) and opcase's enum lists
# only its own kernels, so another kernel's op_type is no error.
_INFORMATIONAL_FIELDS = {("Node", "op_type")}


def _values_outside_schema(message, where: str):
    """A binary enum value that opcase's closed enums lack parses as an unknown field with a
    declared number (and leaves the field unset); name each one."""
    declared = {f.number: f.name for f in message.DESCRIPTOR.fields}
    for unknown in unknown_fields.UnknownFieldSet(message):
        name = declared.get(unknown.field_number)
        if name and (message.DESCRIPTOR.name, name) not in _INFORMATIONAL_FIELDS:
            yield f"{where}.{name} = {unknown.data}"
    for fd, value in message.ListFields():
        if fd.message_type is None:
            continue
        items = value if fd.is_repeated else [value]
        for i, item in enumerate(items):
            yield from _values_outside_schema(item, f"{where}.{fd.name}" + (f"[{i}]" if fd.is_repeated else ""))


# --------------------------------------------------------------------------- the case

def load_mluops(path: str | os.PathLike, out_dir: str | os.PathLike | None = None, *,
                with_data: bool = True, large_tensor_bytes: int = LARGE_TENSOR_BYTES,
                logf: str = random_data.LOGF_GLIBC) -> MluCase:
    """Read an mlu-ops case for one of opcase's kernels.

    Random inputs are drawn chunk by chunk.  With ``out_dir``, those larger than
    ``large_tensor_bytes`` go to a raw file there and come back as a read-only memmap, so that
    peak memory stays near one chunk (without it they are drawn into memory).  ``with_data=False`` parses and checks everything but leaves every
    ``data`` None (each random input keeps its ``random`` recipe for a partial draw).
    ``logf`` picks the C library whose logf GAUSSIAN draws reproduce (see random_data).
    Raises UnsupportedKernel for another kernel's case and MluopsFormatError for anything
    malformed or not reproducible.
    """
    path = Path(path)
    node = read_node(path)
    kernel = kernel_format(node.op_name)
    if kernel is None:
        raise UnsupportedKernel(path, node.op_name)
    params = _params(path, node, kernel)
    inputs = _input_tensors(path, node, kernel, params)
    outputs = _output_tensors(path, node, kernel)
    source, thresholds = _thresholds(path, node, kernel)
    case = MluCase(path=path, op=kernel.op, params=params, input_tensors=inputs, outputs=outputs,
                   thresholds=thresholds, threshold_source=source, baseline_device=_baseline_device(node))
    if with_data:
        _load_data(case, node, out_dir, large_tensor_bytes, logf)
    return case


def _params(path: Path, node: pb.Node, kernel: KernelFormat) -> dict:
    if kernel.param_field is None:
        return {}
    if not node.HasField(kernel.param_field):
        raise MluopsFormatError(f"{path}: {kernel.op} case has no {kernel.param_field}")
    message = getattr(node, kernel.param_field)
    params = {}
    for name in kernel.params:
        fd = message.DESCRIPTOR.fields_by_name[name]
        # mluop_gtest reads a param whether set or not; an unset one without a declared
        # default would silently be 0, which no author means.
        if not message.HasField(name) and not fd.has_default_value:
            raise MluopsFormatError(f"{path}: {kernel.param_field} has no {name}")
        params[name] = getattr(message, name)
    return params


def _input_tensors(path: Path, node: pb.Node, kernel: KernelFormat, params: dict) -> dict[str, MluTensor]:
    required = len(kernel.inputs) - len(kernel.optional_inputs)
    if not required <= len(node.input) <= len(kernel.inputs):
        expected = f"{required} to {len(kernel.inputs)}" if kernel.optional_inputs else str(required)
        raise MluopsFormatError(f"{path}: {kernel.op} takes {expected} inputs "
                                f"({', '.join(kernel.inputs)}), the case has {len(node.input)}")
    tensors = {}
    for index, name in enumerate(kernel.inputs):
        where = f"{path}: input {index} ({name})"
        message = node.input[index] if index < len(node.input) else None
        if message is not None and "NULL" not in message.id:
            tensors[name] = _tensor_meta(where, name, message)
        elif name in kernel.optional_inputs:
            tensors[name] = _absent_tensor(kernel, name, params, tensors)
        else:
            raise MluopsFormatError(f"{where}: a null tensor, but {name} is not optional")
    return tensors


def _absent_tensor(kernel: KernelFormat, name: str, params: dict, present: dict[str, MluTensor]) -> MluTensor:
    shapes = {n: t.shape for n, t in present.items()}
    first = next(iter(present.values()))
    layout = spec_for(kernel.op).inputs[name].layout
    return MluTensor(name=name, mlu_id="", shape=nominal_shape_of_absent(kernel, name, params, shapes),
                     dtype=first.dtype, layout=layout, source=ABSENT)


def _output_tensors(path: Path, node: pb.Node, kernel: KernelFormat) -> dict[str, MluTensor]:
    # The outputs that go with optional inputs (the spec's with_input) come last and may be left out.
    required = len(kernel.outputs) - len(kernel.optional_outputs)
    if not required <= len(node.output) <= len(kernel.outputs):
        expected = f"{required} to {len(kernel.outputs)}" if kernel.optional_outputs else str(required)
        raise MluopsFormatError(f"{path}: {kernel.op} has {expected} output(s) "
                                f"({', '.join(kernel.outputs)}), the case has {len(node.output)}")
    tensors = {}
    for index, (name, message) in enumerate(zip(kernel.outputs, node.output)):
        tensor = _tensor_meta(f"{path}: output {index} ({name})", name, message)
        tensor.compare = not message.HasField("threshold_use") or message.threshold_use != 0
        tensors[name] = tensor
    return tensors


def _tensor_meta(where: str, name: str, message: pb.Tensor) -> MluTensor:
    shape = tuple(int(d) for d in message.shape.dims)
    if any(d < 0 for d in shape):
        raise MluopsFormatError(f"{where}: negative dimension in shape {list(shape)}")
    if message.shape.dim_stride and list(message.shape.dim_stride) != _contiguous_strides(shape):
        raise MluopsFormatError(f"{where}: strided tensors (dim_stride {list(message.shape.dim_stride)}) "
                                f"are not supported")
    dtype_name = pb.DataType.Name(message.dtype)
    if dtype_name not in DTYPES:
        raise MluopsFormatError(f"{where}: dtype {dtype_name} has no opcase equivalent")
    source = next((s for s in VALUE_SOURCES if len(getattr(message, s))), None)
    if source is None:
        source = PATH if message.HasField("path") else RANDOM if message.HasField("random_data") else NO_DATA
    if source == PATH and "\0" in message.path:
        raise MluopsFormatError(f"{where}: path {message.path!r} holds a NUL byte; no file is named so")
    recipe = _recipe(where, message.random_data) if source == RANDOM and element_count(shape) else None
    return MluTensor(name=name, mlu_id=message.id, shape=shape, dtype=DTYPES[dtype_name],
                     layout=layout_name(message.layout), source=source, random=recipe)


def _contiguous_strides(shape: tuple[int, ...]) -> list[int]:
    strides, step = [], 1
    for dim in reversed(shape):
        strides.append(step)
        step *= dim
    return strides[::-1]


def _recipe(where: str, message: pb.RandomData) -> random_data.RandomRecipe:
    """Parser::checkRandomParam's checks, then generateRandomData's reading of the fields:
    a double bound (or moment) overrides both float ones, cast to float."""
    if not message.HasField("distribution"):
        raise MluopsFormatError(f"{where}: random_data has no distribution")
    seed = message.seed if message.HasField("seed") else random_data.DEFAULT_SEED
    if message.distribution == pb.UNIFORM:
        for bound in ("lower", "upper"):
            if not (message.HasField(f"{bound}_bound") or message.HasField(f"{bound}_bound_double")):
                raise MluopsFormatError(f"{where}: UNIFORM random_data has no {bound}_bound")
        if message.HasField("lower_bound_double"):
            lower, upper = _to_float32(message.lower_bound_double), _to_float32(message.upper_bound_double)
        else:
            lower, upper = message.lower_bound, message.upper_bound
        return random_data.RandomRecipe(random_data.UNIFORM, seed, lower=lower, upper=upper,
                                        convert_dtype=message.convert_dtype)
    if message.distribution == pb.GAUSSIAN:
        for moment in ("mu", "sigma"):
            if not (message.HasField(moment) or message.HasField(f"{moment}_double")):
                raise MluopsFormatError(f"{where}: GAUSSIAN random_data has no {moment}")
        if message.HasField("mu_double"):
            mu, sigma = _to_float32(message.mu_double), _to_float32(message.sigma_double)
        else:
            mu, sigma = message.mu, message.sigma
        return random_data.RandomRecipe(random_data.GAUSSIAN, seed, mu=mu, sigma=sigma,
                                        convert_dtype=message.convert_dtype)
    raise MluopsFormatError(f"{where}: random_data distribution "
                            f"{pb.RandomDistribution.Name(message.distribution)}: mluop_gtest draws only "
                            f"UNIFORM and GAUSSIAN")


def _to_float32(value: float) -> float:
    """generateRandomData's ``(T)`` cast of a double field, T = float."""
    return float(np.float32(value))


def _thresholds(path: Path, node: pb.Node, kernel: KernelFormat) -> tuple[str, dict[str, list[tuple[str, float]]]]:
    """Thresholds as mluop_gtest picks them (Parser::common_threshold / criterions): test_param
    when the node has one, else Node.evaluation_threshold when set, else each output's own
    thresholds matched by position to Node.evaluation_criterion.  threshold_use 0 skips an output."""
    if node.HasField("test_param"):
        param = node.test_param
        if not param.error_func or len(param.error_func) != len(param.error_threshold):
            raise MluopsFormatError(f"{path}: test_param has {len(param.error_func)} error_func and "
                                    f"{len(param.error_threshold)} error_threshold (need as many, at least one)")
        source, common = "test_param", _pairs(path, param.error_func, param.error_threshold)
    elif node.evaluation_threshold:
        if len(node.evaluation_criterion) != len(node.evaluation_threshold):
            raise MluopsFormatError(f"{path}: {len(node.evaluation_criterion)} evaluation_criterion but "
                                    f"{len(node.evaluation_threshold)} evaluation_threshold")
        source, common = "evaluation_threshold", _pairs(path, node.evaluation_criterion, node.evaluation_threshold)
    else:
        source, common = "per_output", None
    thresholds = {}
    for index, (name, output) in enumerate(zip(kernel.outputs, node.output)):
        if output.HasField("threshold_use") and output.threshold_use == 0:
            thresholds[name] = []
        elif common is not None:
            thresholds[name] = list(common)
        else:
            own = output.thresholds.evaluation_threshold
            if len(own) != len(node.evaluation_criterion):
                raise MluopsFormatError(f"{path}: output {index} ({name}) has {len(own)} thresholds for "
                                        f"{len(node.evaluation_criterion)} evaluation_criterion")
            thresholds[name] = _pairs(path, node.evaluation_criterion, own)
    if source == "per_output" and not any(thresholds.values()):
        source = "none"
    return source, thresholds


def _pairs(path: Path, criteria, values) -> list[tuple[str, float]]:
    pairs = []
    for criterion, value in zip(criteria, values):
        name = pb.EvaluationCriterion.Name(criterion)
        if name not in METRICS:
            raise MluopsFormatError(f"{path}: evaluation criterion {name} is not evaluated by mluop_gtest")
        pairs.append((METRICS[name], float(value)))
    return pairs


def _baseline_device(node: pb.Node) -> str:
    """Parser::parse: Node.device, else test_param.baseline_device, else CPU."""
    if node.HasField("device"):
        return pb.Device.Name(node.device)
    if node.HasField("test_param") and node.test_param.HasField("baseline_device"):
        return pb.Device.Name(node.test_param.baseline_device)
    return DEFAULT_DEVICE


# --------------------------------------------------------------------------- tensor data

def _load_data(case: MluCase, node: pb.Node, out_dir, large_tensor_bytes: int, logf: str) -> None:
    for index, tensor in enumerate(case.input_tensors.values()):
        if tensor.absent:
            continue
        where = f"{case.path}: input {index} ({tensor.name})"
        if tensor.source == NO_DATA and element_count(tensor.shape):
            raise MluopsFormatError(f"{where}: no values, path or random_data")
        tensor.data = _tensor_data(case.path, where, tensor, node.input[index], out_dir, large_tensor_bytes, logf)
    for index, tensor in enumerate(case.outputs.values()):
        # An output's random_data only initialises mluop_gtest's output buffer; values or a
        # data file on an output are the baseline (golden) it compares against.
        if tensor.source in VALUE_SOURCES or tensor.source == PATH:
            tensor.data = _tensor_data(case.path, f"{case.path}: output {index} ({tensor.name})", tensor,
                                       node.output[index], out_dir, large_tensor_bytes, logf)


def _tensor_data(case_path: Path, where: str, tensor: MluTensor, message: pb.Tensor, out_dir,
                 large_tensor_bytes: int, logf: str) -> np.ndarray:
    count = element_count(tensor.shape)
    if count == 0:                   # mluop_gtest skips empty tensors' data entirely
        return np.zeros(tensor.shape, tensor.dtype)
    if tensor.source in VALUE_SOURCES:
        return _decode_values(where, message, tensor.source, tensor.dtype, count).reshape(tensor.shape)
    if tensor.source == PATH:
        return _read_data_file(case_path, where, message.path, tensor.dtype, tensor.shape, large_tensor_bytes)
    return _draw(case_path, where, tensor, out_dir, large_tensor_bytes, logf)


def _decode_values(where: str, message: pb.Tensor, source: str, dtype: np.dtype, count: int) -> np.ndarray:
    values = getattr(message, source)
    if len(values) != count:
        raise MluopsFormatError(f"{where}: {source} holds {len(values)} values, the shape has {count} elements")
    decoders = _DECODERS[source]
    if dtype not in decoders:
        raise MluopsFormatError(f"{where}: mluop_gtest does not read {source} into dtype {dtype.name}")
    return decoders[dtype](where, values)


def _hex_bits(width_bits: int, dtype):
    """value_h: hex bit patterns, parsed like mluop_gtest's str2fp16/32/64, which decode only
    lower-case digits correctly (an upper-case digit corrupts the value there)."""
    pattern = re.compile(rf"[0-9a-f]{{1,{width_bits // 4}}}")
    uint = np.dtype(f"uint{width_bits}")

    def decode(where, values):
        bad = next((v for v in values if not pattern.fullmatch(v)), None)
        if bad is not None:
            raise MluopsFormatError(f"{where}: value_h {bad!r} is not 1 to {width_bits // 4} lower-case "
                                    f"hex digits")
        return np.array([int(v, 16) for v in values], dtype=np.uint64).astype(uint).view(dtype)
    return decode


def _truncated(dtype, read_as=np.int64):
    """C assignment of an integer to a narrower integer: the low bits (numpy's astype wraps alike)."""
    def decode(where, values):
        return np.array(values, dtype=read_as).astype(dtype)
    return decode


def _bits_in_int32(where, values):
    """FLOAT from value_i: the int32 reinterpreted as float (Parser::getTensorValueI)."""
    return np.array(values, dtype=np.int64).astype(np.int32).view(np.float32)


def _bits_in_int16(where, values):
    """HALF from value_i: the low 16 bits are the half's bit pattern."""
    return np.array(values, dtype=np.int64).astype(np.int16).view(np.float16)


def _bits_in_int64(where, values):
    return np.array(values, dtype=np.int64).view(np.float64)


def _nonzero_byte(where, values):
    """BOOL: mluop_gtest stores the low byte as is; opcase's bool keeps whether it is nonzero."""
    return np.array(values, dtype=np.int64).astype(np.int8) != 0


def _floats(dtype):
    def decode(where, values):
        return np.array(values, dtype=np.float32).astype(dtype)
    return decode


def _floats_to_half(where, values):
    return mluops_float_to_half(np.array(values, dtype=np.float32))


def mluops_float_to_half(values: np.ndarray) -> np.ndarray:
    """mluop_gtest's cvtFloatToHalf (tools.cpp), used for value_f of HALF tensors.

    Normal halves round to nearest even; values of magnitude >= 65536 saturate to 65504 while
    [65520, 65536) still rounds up to inf; subnormal halves round half up without a sticky bit;
    any nonzero value below 2^-24 becomes the smallest subnormal; NaN becomes 0x7e00 (signed).
    """
    bits = np.asarray(values, np.float32).view(np.uint32).astype(np.int64)
    sign = (bits >> 31) & 1
    exponent = ((bits >> 23) & 0xFF) - 127
    mantissa = bits & 0x7FFFFF
    result = np.zeros(bits.shape, np.int64)
    nan = (exponent == 128) & (mantissa != 0)
    inf = (exponent == 128) & (mantissa == 0)
    saturated = (exponent >= 16) & (exponent < 128)
    normal = (exponent >= -14) & (exponent < 16)
    subnormal = (exponent >= -24) & (exponent < -14)
    tiny = exponent < -24
    result[nan] = (31 << 10) | 0x200
    result[inf] = 31 << 10
    result[saturated] = (30 << 10) | 0x3FF
    b = bits[normal]
    round_up = ((b >> 12) & 1) & (((b & 0xFFF) != 0) | ((b >> 13) & 1))
    result[normal] = ((exponent[normal] + 15) << 10) + ((b >> 13) & 0x3FF) + round_up
    shift = -exponent[subnormal]
    significand = mantissa[subnormal] | 0x800000
    result[subnormal] = ((significand >> (shift - 1)) & 0x3FF) + ((significand >> (shift - 2)) & 1)
    result[tiny] = (bits[tiny] & 0x7FFFFFFF) != 0
    return ((result + (sign << 15)) & 0xFFFF).astype(np.uint16).view(np.float16)


_F16, _F32, _F64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)
_I8, _I16, _I32, _I64 = (np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64))
_U8, _BOOL = np.dtype(np.uint8), np.dtype(np.bool_)

# Per value field, the dtypes mluop_gtest's parser reads it into, and how (parser.cpp's
# getTensorValueH / F / I / L / UI / UL).
_DECODERS = {
    "value_h": {_F16: _hex_bits(16, _F16), _F32: _hex_bits(32, _F32), _F64: _hex_bits(64, _F64)},
    "value_f": {_F32: _floats(_F32), _F64: _floats(_F64), _F16: _floats_to_half},
    "value_i": {_I8: _truncated(_I8), _U8: _truncated(_U8), _I16: _truncated(_I16), _I32: _truncated(_I32),
                _I64: _truncated(_I64), _BOOL: _nonzero_byte, _F16: _bits_in_int16, _F32: _bits_in_int32},
    "value_l": {_I64: _truncated(_I64), _I8: _truncated(_I8), _BOOL: _nonzero_byte, _I16: _truncated(_I16),
                _I32: _truncated(_I32), _F64: _bits_in_int64},
    "value_ui": {_U8: _truncated(_U8, np.uint64)},
    "value_ul": {_U8: _truncated(_U8, np.uint64)},
}


def _read_data_file(case_path: Path, where: str, relative: str, dtype: np.dtype, shape: tuple[int, ...],
                    large_tensor_bytes: int) -> np.ndarray:
    """``path``: raw little-endian elements of the tensor's dtype, relative to the case file and
    inside its directory (symlinks resolved): a case file cannot make opcase read other files."""
    if not relative or os.path.isabs(relative):
        raise MluopsFormatError(f"{where}: path {relative!r} must be relative to the case file")
    data_path = case_path.parent / relative
    if not data_path.resolve().is_relative_to(case_path.parent.resolve()):
        raise MluopsFormatError(f"{where}: path {relative!r} leads out of the case file's directory")
    if relative.endswith(".zst") or (not data_path.exists() and Path(f"{data_path}.zst").exists()):
        raise MluopsFormatError(f"{where}: zstd-compressed data files are not supported ({relative})")
    try:
        info = data_path.stat()
    except OSError as exc:
        raise MluopsFormatError(f"{where}: data file {relative} cannot be read ({exc.strerror})") from None
    if not stat.S_ISREG(info.st_mode):   # a FIFO or a device: np.fromfile would block, or never end
        raise MluopsFormatError(f"{where}: data file {relative} is not a regular file")
    size = info.st_size
    storage = np.dtype(np.uint8) if dtype == _BOOL else dtype.newbyteorder("<")
    expected = element_count(shape) * storage.itemsize
    if size != expected:
        raise MluopsFormatError(f"{where}: data file {relative} has {size} bytes, "
                                f"shape {list(shape)} of {dtype.name} needs {expected}")
    if size > large_tensor_bytes and dtype != _BOOL:
        return np.memmap(data_path, dtype=storage, mode="r", shape=shape)
    data = np.fromfile(data_path, dtype=storage).reshape(shape)
    return data != 0 if dtype == _BOOL else data.astype(dtype, copy=False)


def _draw(case_path: Path, where: str, tensor: MluTensor, out_dir, large_tensor_bytes: int,
          logf: str) -> np.ndarray:
    nbytes = element_count(tensor.shape) * tensor.dtype.itemsize
    try:
        random_data.check_dtype(tensor.dtype, tensor.random.convert_dtype)
        if nbytes > large_tensor_bytes and out_dir is not None:
            return _draw_to_file(Path(out_dir) / f"{case_path.stem}.{tensor.name}.{tensor.dtype.name}.raw",
                                 tensor, logf)
        data = np.empty(tensor.shape, tensor.dtype)
        random_data.fill(tensor.random, data, logf=logf)
        return data
    except random_data.RandomDataError as exc:
        raise MluopsFormatError(f"{where}: {exc}") from None


def _draw_to_file(raw_path: Path, tensor: MluTensor, logf: str) -> np.memmap:
    """Draw into a temporary file beside ``raw_path``, its blocks reserved first (a full disk is
    an OSError here, not a SIGBUS mid-draw), rename it into place, map it read-only."""
    spill = SpillFile(raw_path, tensor.shape, tensor.dtype)
    try:
        random_data.fill(tensor.random, spill.array, logf=logf)
        spill.array.flush()
        spill.array = None
        os.replace(spill.path, raw_path)
    except BaseException:
        spill.discard()
        raise
    return np.memmap(raw_path, dtype=tensor.dtype, mode="r", shape=tensor.shape)
