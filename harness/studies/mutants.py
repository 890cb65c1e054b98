"""Planted bugs that know no kernel, and legitimate variants that must pass (`opcase power`).

A *mutant* is a backend made from a base backend (the reference, or any other) by one
transformation that reads only what a call carries: its tensors, their dtypes, its params, and
the spec's axis roles (which axis is the batch, height, width, channel or item: NHWC's letters, or
the tensor's `axes`), checks, optional inputs and int params.  A *control* is made the same way from a variant that a right kernel may be: another
rounding, another sign of zero, other arithmetic the docs accept.  The suite must fail every
mutant in some case and pass every control in all of them.

Each transformation is ``apply(call) -> outputs``: ``call.request`` is the call, ``call.base()``
the base's outputs for it (computed once per case and shared: never write into them),
``call.run_base(request)`` the base's arithmetic on a transformed call.  An input-side bug is
in the arithmetic, not in the checks: a kernel checks the call it was given, then computes
another, so with the reference as base the transformed call is computed without the spec's
checks (those were made on the real call); any other base makes its own checks on it.  A
transformation that cannot be made on a call raises NotApplicable; one that changes nothing on
a case is the identity there.
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Callable

import numpy as np

from gen.core.backend import Backend, InvalidArgument, NotSupported, Request, TensorInfo
from gen.core.checks import failures
from gen.core.registry import planted_bugs, planted_controls, spec_for
from gen.core.rounding import round_to
from harness.studies.count_mutants import count_mutants
from harness.studies.tie_mutants import tie_mutants
from harness.studies.power_identity import identity_mutants
from harness.backends import mmcv_backend
from harness.backends.builtin import check_request, request_tensors, run_in_dtype

GENERIC, CHECKS, PLANTED, CONTROL = "generic", "checks", "planted", "control"
# A mutant that leaves out one parameter check is named this and the check's id.
NO_CHECK = "no_check_"
# Vector widths (in elements) whose last, partial block a kernel may drop or fill wrongly.
BLOCK_WIDTHS = (16, 64)


class NotApplicable(Exception):
    """The transformation cannot be made on this call (why is the message)."""


@dataclass(frozen=True)
class Mutant:
    name: str
    kind: str                                    # GENERIC, CHECKS, PLANTED or CONTROL
    what: str                                    # the transformation, in words
    needs: str                                   # what a case needs for it to change anything
    apply: Callable[["Call"], dict]
    applies_to: Callable[[object], str] = lambda case: ""   # why it does not apply to a case, or ''
    backend: str = ""       # the built-in backend a control is, which may have set a case's thresholds
    # A mutant that keeps state between calls: a factory of fresh ``apply`` functions, each with its
    # own state (harness.studies.power keeps one per kernel over the whole suite, as a process would);
    # ``apply`` is then one fresh instance, whose first call is the base's.
    stateful: Callable[[], Callable[["Call"], dict]] | None = None


class Call:
    """One call of a mutant: the request, and the base's outputs for it, computed at most once."""

    def __init__(self, request: Request, base: Backend, base_outcome=None):
        self.request, self._base, self._outcome = request, base, base_outcome
        self.base_name = base.name

    def base(self) -> dict:
        if self._outcome is None:
            self._outcome = outcome(lambda: self._base.run(self.request))
        kind, value = self._outcome
        if kind != "outputs":
            raise value
        return value

    def run_base(self, request: Request) -> dict:
        """The base on a transformed call, after the real call's checks; a call it cannot make makes
        the transformation inapplicable."""
        spec = check_request(self.request)
        try:
            if self.base_name == "reference":
                produced = run_in_dtype(request, np.float64, skip_checks={c.id for c in spec.checks})
            else:
                produced = self._base.run(request)
        except Exception as exc:  # noqa: BLE001 - whatever stops the base stops the transformation
            raise NotApplicable(f"the base cannot make the transformed call ({type(exc).__name__}: {exc})"[:200]) from None
        if isinstance(produced, tuple):   # a backend that measures its own time
            produced = produced[0]
        return produced


def outcome(run: Callable[[], dict]) -> tuple[str, object]:
    """('outputs', dict) or ('raised', the exception): what a call did."""
    try:
        produced = run()
    except NotApplicable:
        raise
    except Exception as exc:  # noqa: BLE001 - the exception is part of the outcome
        return "raised", exc
    return "outputs", produced[0] if isinstance(produced, tuple) else produced


def same_outcome(a, b) -> bool:
    """Whether two outcomes judge alike for sure: both refused the same way, or the same outputs bit for bit."""
    if a[0] == "raised" or b[0] == "raised":
        return (a[0] == b[0] == "raised" and any(isinstance(a[1], refused) and isinstance(b[1], refused)
                                                 for refused in (InvalidArgument, NotSupported)))
    if not isinstance(a[1], dict) or not isinstance(b[1], dict) or a[1].keys() != b[1].keys():
        return False
    return all(_same_bits(a[1][n], b[1][n]) for n in a[1])


def _same_bits(x, y) -> bool:
    x, y = np.asarray(x), np.asarray(y)
    if x.shape != y.shape or x.dtype != y.dtype:
        return False
    return np.array_equal(np.ascontiguousarray(x).view(np.uint8), np.ascontiguousarray(y).view(np.uint8))


# --------------------------------------------------------------------------- layouts

def axis_of(request: Request, name: str, shape, role: str) -> int | None:
    """The axis of tensor ``name`` of the call that has ``role`` (the spec's axis roles: 'height' is 1
    in NHWC), or None (no such axis, several, or a rank other than the spec's)."""
    spec = spec_for(request.op)
    tensor = spec.inputs.get(name) or spec.outputs.get(name)
    axes = tensor.axes if tensor is not None else ()
    if len(axes) != len(shape) or axes.count(role) != 1:
        return None
    return axes.index(role)


def _copy(outputs: dict) -> dict:
    return {name: np.array(a, copy=True) for name, a in outputs.items()}


def _float(array: np.ndarray) -> bool:
    return array.dtype.kind == "f"


# --------------------------------------------------------------------------- output side

def _round_toward_zero(call: Call) -> dict:
    """The reference's float64 result truncated (another base's result is already rounded)."""
    if call.base_name != "reference":
        raise NotApplicable("needs the reference as base (its unrounded float64 result)")
    return run_in_dtype(call.request, np.float64, rounding="toward_zero")


def flush_subnormal_values(array: np.ndarray) -> np.ndarray:
    """Subnormals of a float16/float32 array flushed to zero of their sign."""
    if array.dtype not in (np.float16, np.float32):
        return array
    tiny = np.finfo(array.dtype).tiny
    subnormal = (array != 0) & (np.abs(array) < tiny)
    return np.where(subnormal, array * 0, array) if subnormal.any() else array


def _flush_subnormals(call: Call) -> dict:
    request = call.request
    flushed = {name: flush_subnormal_values(a) for name, a in request.inputs.items()}
    if all(flushed[n] is a for n, a in request.inputs.items()):
        produced = call.base()
    else:
        produced = call.run_base(dataclasses.replace(request, inputs=flushed))
    return {name: flush_subnormal_values(np.asarray(a)) for name, a in produced.items()}


def _last_block(width: int, copy: bool):
    """Drop (zero) or copy from the block before the last, partial block of ``width`` elements of
    each output's innermost axis."""
    def apply(call: Call) -> dict:
        outputs = _copy(call.base())
        for a in outputs.values():
            if a.ndim == 0:
                continue
            size = a.shape[-1]
            tail = size % width
            if not tail:
                continue
            start = size - tail
            if not copy:
                a[..., start:] = 0
            elif start >= width:
                a[..., start:] = a[..., start - width:start - width + tail]
        return outputs
    return apply


def _index_block_zeroed(call: Call) -> dict:
    """The last 1/32 of each integer output's elements (in memory order) left at 0: a block of indices
    a kernel never wrote, under the few percent a float-style threshold lets through."""
    outputs = _copy(call.base())
    touched = False
    for a in outputs.values():
        if a.dtype.kind in "iu" and a.size >= 2:
            flat = a.reshape(-1)
            flat[flat.size - max(1, flat.size // 32):] = 0
            touched = True
    if not touched:
        raise NotApplicable("no integer output of two elements or more")
    return outputs


def _repeat_last(role: str):
    """The last index along each output's ``role`` axis copied from the one before."""
    def apply(call: Call) -> dict:
        outputs = _copy(call.base())
        for name, a in outputs.items():
            axis = axis_of(call.request, name, a.shape, role)
            if axis is not None and a.shape[axis] >= 2:
                index = [slice(None)] * a.ndim
                source = list(index)
                index[axis], source[axis] = -1, -2
                a[tuple(index)] = a[tuple(source)]
        return outputs
    return apply


def _batch_as_zero(call: Call) -> dict:
    outputs = _copy(call.base())
    for name, a in outputs.items():
        axis = axis_of(call.request, name, a.shape, "batch")
        if axis is not None and a.shape[axis] > 1:
            first = np.take(a, [0], axis=axis)
            a[...] = np.broadcast_to(first, a.shape)
    return outputs


def _threshold_baselines(case) -> set:
    return {t.baseline for thresholds in case.criteria.values() for t in thresholds if t.baseline}


def _mmcv(call: Call) -> dict:
    if not mmcv_backend.supports(call.request.op, _dtype_of(call.request)):
        raise NotApplicable("the mmcv backend has no kernel for this op or dtype")
    return mmcv_backend.run(call.request)


def _dtype_of(request: Request) -> str:
    floats = [o.dtype for o in request.outputs.values() if np.dtype(o.dtype).kind == "f"]
    return np.dtype(floats[0]).name if floats else ""


def _stricter_baseline(case) -> str:
    """The mmcv mutant applies where thresholds come from a baseline stricter than mmcv."""
    baselines = _threshold_baselines(case)
    if not baselines:
        return "static thresholds: no baseline policy to hold mmcv's arithmetic to"
    if "mmcv" in baselines:
        return "thresholds from mmcv itself: the docs' rule accepts its arithmetic (a control here)"
    return ""


def _mmcv_baseline(case) -> str:
    return "" if "mmcv" in _threshold_baselines(case) else "thresholds not from mmcv: there mmcv is a mutant"


# --------------------------------------------------------------------------- input side

def _swap_hw(call: Call) -> dict:
    """The kernel reads every H x W tensor as W x H (its shape arguments swapped), then writes
    its outputs the same way."""
    request = call.request
    swapped = {}

    def swap(name, shape):
        h, w = axis_of(request, name, shape, "height"), axis_of(request, name, shape, "width")
        if h is None or w is None or shape[h] == shape[w] or not _sized_by_dims(request, name, (h, w)):
            return None
        shape = list(shape)
        shape[h], shape[w] = shape[w], shape[h]
        return tuple(shape)
    inputs = dict(request.inputs)
    for name, a in request.inputs.items():
        shape = swap(name, a.shape)
        if shape is not None:
            inputs[name] = a.reshape(shape)
            swapped[name] = True
    if not swapped:
        raise NotApplicable("no input has H != W")
    outputs = {}
    for name, o in request.outputs.items():
        shape = swap(name, o.shape)
        outputs[name] = TensorInfo(shape, o.dtype, o.layout) if shape is not None else o
    produced = call.run_base(dataclasses.replace(request, inputs=inputs, outputs=outputs))
    return _requested_shapes(produced, request)


def _sized_by_dims(request: Request, name: str, axes) -> bool:
    """Whether the spec sizes those axes of tensor ``name`` by the call's dims (the map's H and W), not by
    params alone (deform_roi_pool's pooled_height x pooled_width: the swapped call's params say otherwise)."""
    spec = spec_for(request.op)
    tensor = spec.inputs.get(name) or spec.outputs.get(name)
    names = [set(re.findall(r"[A-Za-z_]\w*", str(tensor.shape[axis]))) for axis in axes]
    return all(n - set(spec.params) for n in names)


def _requested_shapes(produced: dict, request: Request) -> dict:
    """Outputs reinterpreted in the requested shapes (as a kernel writes its buffers), or NotApplicable."""
    result = {}
    for name, o in request.outputs.items():
        a = np.asarray(produced.get(name))
        if a.size != int(np.prod(o.shape)):
            raise NotApplicable(f"output '{name}' would have {a.size} elements, not {int(np.prod(o.shape))}")
        result[name] = a.reshape(o.shape)
    return result


def _ignore_input(name: str):
    def apply(call: Call) -> dict:
        request = call.request
        if name not in request.inputs:
            raise NotApplicable(f"the case leaves '{name}' out")
        inputs = {n: a for n, a in request.inputs.items() if n != name}
        layouts = {n: v for n, v in request.layouts.items() if n != name}
        produced = call.run_base(dataclasses.replace(request, inputs=inputs, layouts=layouts))
        return _requested_shapes(produced, request)
    return apply


def _perturb(param: str, delta: int):
    def apply(call: Call) -> dict:
        request = call.request
        if param not in request.params:
            raise NotApplicable(f"the call has no param '{param}'")
        params = {**request.params, param: int(request.params[param]) + delta}
        produced = call.run_base(dataclasses.replace(request, params=params))
        return _requested_shapes(produced, request)
    return apply


# --------------------------------------------------------------------------- state between calls

# How many buffers or results a stateful mutant keeps (the oldest go first): a run's decoy call comes
# right before its judged call, so a few suffice, and power's memory stays bounded over a suite.
_KEPT = 8


def _bounded(store: dict) -> None:
    while len(store) > _KEPT:
        store.pop(next(iter(store)))


def _pooled_outputs(combine):
    """A factory of kernels whose output buffers are pooled by (op, output, shape, dtype) and kept
    between calls: each call's result is ``combine(this call's outputs, the buffer)``."""
    def fresh():
        pool: dict = {}

        def apply(call: Call) -> dict:
            result = {}
            for name, a in call.base().items():
                a = np.asarray(a)
                key = (call.request.op, name, a.shape, a.dtype.str)
                previous = pool.get(key)
                pool[key] = np.array(a if previous is None else combine(a, previous), dtype=a.dtype, copy=True)
                _bounded(pool)
                result[name] = pool[key].copy()
            return result
        return apply
    return fresh


def _accumulated(current: np.ndarray, buffer: np.ndarray) -> np.ndarray:
    """Atomic adds into a buffer zeroed only when it was allocated (float outputs; an index is stored)."""
    return buffer + current if _float(current) else current


def _zeros_not_written(current: np.ndarray, buffer: np.ndarray) -> np.ndarray:
    """Only the elements the kernel computes as nonzero written; the zero fill is stale."""
    return np.where(current != 0, current, buffer)


def _cached(key_of):
    """A factory of kernels that cache their results by ``key_of(request)``."""
    def fresh():
        cache: dict = {}

        def apply(call: Call) -> dict:
            key = key_of(call.request)
            if key not in cache:
                cache[key] = _copy(call.base())
                _bounded(cache)
            return _copy(cache[key])
        return apply
    return fresh


def _shape_key(request: Request) -> tuple:
    return (request.op, repr(sorted(request.params.items())),
            tuple((n, a.shape, a.dtype.str) for n, a in sorted(request.inputs.items())))


def _address_key(request: Request) -> tuple:
    return _shape_key(request) + tuple(a.__array_interface__["data"][0] for _, a in sorted(request.inputs.items()))


STATEFUL = (
    ("output_buffer_uncleared", "outputs added into a buffer pooled by shape and zeroed only when allocated "
     "(accumulating atomics whose zero fill ran once)", _pooled_outputs(_accumulated)),
    ("stale_zero_fill", "outputs written into a buffer pooled by shape, elements whose result is 0 left as "
     "the previous call's (a zero fill made once)", _pooled_outputs(_zeros_not_written)),
    ("cache_by_shape", "results cached by op, params and input shapes and dtypes", _cached(_shape_key)),
    ("cache_by_address", "results cached by op, params, shapes and input addresses", _cached(_address_key)),
)


# --------------------------------------------------------------------------- checks and planted bugs

def _without_check(check_id: str):
    def apply(call: Call) -> dict:
        spec = spec_for(call.request.op)
        if check_id not in {c.id for c in failures(spec, request_tensors(spec, call.request), call.request.params)}:
            return call.base()   # a call the check lets through: leaving it out changes nothing
        return run_in_dtype(call.request, np.float64, skip_checks={check_id})
    return apply


def _planted(compute):
    def apply(call: Call) -> dict:
        check_request(call.request)
        produced = compute(call.request)
        return {n: round_to(produced[n], o.dtype) for n, o in call.request.outputs.items()}
    return apply


# --------------------------------------------------------------------------- controls

def _rounded_twice(call: Call) -> dict:
    return run_in_dtype(call.request, np.float64, rounding="via_float32")


def _lowp(call: Call) -> dict:
    return run_in_dtype(call.request, np.float32)


def _negative_zero(call: Call) -> dict:
    outputs = _copy(call.base())
    for a in outputs.values():
        if _float(a):
            a[a == 0] = -0.0
    return outputs


# --------------------------------------------------------------------------- the catalogue

def mutants(spec, base_name: str) -> list[Mutant]:
    """The generic mutants of a kernel (from its spec: layouts, optional inputs, int params,
    checks) and its planted bugs (its planted part), in report order."""
    found = [Mutant("round_toward_zero", GENERIC, "round toward zero instead of to nearest",
                    "outputs where an ulp is over the thresholds: subnormal ones (there an ulp is a large "
                    "relative error), or a golden of one sign and diff4 among the criteria (the direction "
                    "of the errors; diff1 and diff2's floors are above an ulp of a normal value)"
                    if base_name == "reference" else "the unrounded float64 result, which only the reference gives",
                    _round_toward_zero)]
    found.append(Mutant("flush_subnormals", GENERIC, "float16/float32 subnormal inputs and outputs flushed to zero",
                        "outputs mostly subnormal (values near the dtype's smallest normal)", _flush_subnormals))
    for width in BLOCK_WIDTHS:
        found.append(Mutant(f"drop_last_block_{width}", GENERIC,
                            f"the last partial {width}-element block of each output's innermost axis zeroed",
                            f"an output whose innermost axis is not a multiple of {width}",
                            _last_block(width, copy=False)))
        found.append(Mutant(f"copy_last_block_{width}", GENERIC,
                            f"the last partial {width}-element block of each output's innermost axis copied "
                            f"from the block before", f"an output whose innermost axis is longer than {width} "
                            f"and not a multiple of it", _last_block(width, copy=True)))
    found.append(Mutant("index_block_zeroed", GENERIC, "the last 1/32 of each integer output's elements left at 0",
                        "an integer output (index, argmax) judged exactly", _index_block_zeroed))
    found.append(Mutant("last_row_repeated", GENERIC, "each output's last row (height axis) copied from the row before",
                        "an output with a height axis of 2 or more", _repeat_last("height")))
    found.append(Mutant("last_col_repeated", GENERIC, "each output's last column (width axis) copied from the "
                        "column before", "an output with a width axis of 2 or more", _repeat_last("width")))
    found.append(Mutant("last_item_repeated", GENERIC, "each output's last item (roi, box, point, position) copied "
                        "from the one before", "an output with an item axis of 2 or more", _repeat_last("item")))
    found.extend(count_mutants(lambda name, what, needs, apply: Mutant(name, GENERIC, what, needs, apply),
                                 NotApplicable))
    found.extend(tie_mutants(lambda name, what, needs, apply: Mutant(name, GENERIC, what, needs, apply), NotApplicable))
    found.append(Mutant("batch_as_0", GENERIC, "outputs of every batch n > 0 computed as batch 0",
                        "an output with a batch axis of 2 or more", _batch_as_zero))
    found.append(Mutant("accumulate_in_tensor_dtype", GENERIC,
                        "accumulation in the tensor dtype (the mmcv backend's arithmetic)",
                        "thresholds from a baseline stricter than mmcv, on a kernel mmcv has, and sums long "
                        "enough for half accumulation to exceed them",
                        _mmcv, _stricter_baseline))
    for name, what, factory in STATEFUL:
        found.append(Mutant(name, GENERIC, what, "two calls of one shape whose outputs differ where it "
                            "shows (the decoy call before each judged call, harness.worker.decoy)",
                            lambda call, factory=factory: factory()(call), stateful=factory))
    found.append(Mutant("swap_H_W", GENERIC, "every height x width tensor read and written as width x height",
                        "an input whose height and width axes differ", _swap_hw))
    for name, tensor in spec.inputs.items():
        if tensor.optional:
            found.append(Mutant(f"ignore_{name}", GENERIC, f"optional input '{name}' ignored (treated as absent)",
                                f"a case that gives '{name}'", _ignore_input(name)))
    for name, param in spec.params.items():
        if param.type == "int":
            for delta, sign in ((1, "+"), (-1, "-")):
                found.append(Mutant(f"{name}{sign}1", GENERIC, f"param '{name}' used as {name} {sign} 1",
                                    f"a call that still fits its tensors with {name} {sign} 1",
                                    _perturb(name, delta)))
    for check in spec.checks:
        if check.violate is None:
            continue
        found.append(Mutant(f"{NO_CHECK}{check.id}", CHECKS, f"parameter check '{check.id}' left out",
                            f"an invalid case that breaks '{check.id}'", _without_check(check.id)))
    found.extend(identity_mutants(spec, lambda name, kind, what, needs, apply: Mutant(name, kind, what, needs, apply)))
    for name, compute in planted_bugs(spec.op).items():
        found.append(Mutant(name, PLANTED, f"planted bug: {name.replace('_', ' ')} (planted)",
                            "a case on which this bug's error is over the thresholds", _planted(compute)))
    return found


def controls(spec) -> list[Mutant]:
    """The legitimate variants of a kernel that every case must pass."""
    found = [
        Mutant("float32_arithmetic", CONTROL, "the reference computed in float32 arithmetic (the lowp backend)",
               "a float output", _lowp, backend="lowp"),
        Mutant("double_rounding", CONTROL, "float64 rounded to float32, then to float16",
               "a float16 output not exact in float32", _rounded_twice),
        Mutant("negative_zero", CONTROL, "-0.0 for every 0.0 output", "a zero in a float output", _negative_zero),
        Mutant("mmcv_arithmetic", CONTROL, "mmcv's own arithmetic (its FMA, loop and reduction orders)",
               "thresholds from mmcv, on a kernel mmcv has", _mmcv, _mmcv_baseline, backend="mmcv"),
    ]
    for name, compute in planted_controls(spec.op).items():
        found.append(Mutant(name, CONTROL, f"{name.replace('_', ' ')} (planted)", "a float output",
                            _planted(compute)))
    return found
