"""A spec's checks evaluated together in one code object (gen.core.expr.first_false / falsy, issue 37: a
small call's checks were some 35 evaluate() calls) against main's way, one evaluate() per check in the
doc's order: the same first failing check, the same failures, the same SpecError on every committed
spec's generated calls and on fuzzed tensors and params; the guards of ``*``, ``**``, ``%`` and prod()
kept; constant powers folded to the value the guard gives; the checks' TensorInfos as main built them."""
from __future__ import annotations

import ast
import functools
import math
import random
from dataclasses import replace
from types import SimpleNamespace
from unittest import mock

import numpy as np
import pytest

from gen.core import checks as checks_module
from gen.core import expr
from gen.core.backend import Request, TensorInfo
from gen.core.casefile import element_count
from gen.core.checks import check_env, failures, first_failure
from gen.core.expr import ExprError
from gen.core.registry import known_ops, spec_for
from gen.core.spec import SUITES, Check, SpecError
from gen.plan import interface_params, layout_of, plan_suite, tensor_infos
from harness.backends.builtin import request_tensors


# ----------------------------------------------------------------------------- main's way, kept here

@functools.lru_cache(maxsize=None)
def _old_code(text: str):
    """compile_expr as main had it: vetted and guarded, no constant folded."""
    with mock.patch.object(expr, "_folded", lambda guard, left, right: None):
        return compile(expr._vetted(text), "<spec expression>", "eval")


def _old_evaluate(text, env):
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return text
    code = _old_code(str(text))
    try:
        return eval(code, expr._EVAL_GLOBALS, env)  # noqa: S307 - vetted
    except ExprError as exc:
        raise ExprError(f"expression {text!r}: {exc}") from None
    except NameError as exc:
        raise ExprError(f"expression {text!r}: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - as main's evaluate
        raise ExprError(f"expression {text!r}: {type(exc).__name__}: {exc}") from None


def _old_holds(check, env) -> bool:
    try:
        return bool(_old_evaluate(check.require, env))
    except ExprError:
        return False


def _old_first_failure(spec, tensors, params, spec_errors=False):
    """main's first_failure, written apart from the loop it keeps for a check that raises: the first
    check that does not hold, the error of one that raises being the spec's with ``spec_errors``."""
    env = check_env(spec, tensors, params)
    failing = next((check for check in spec.checks if not _old_holds(check, env)), None)
    if spec_errors and failing is not None:
        try:
            _old_evaluate(failing.require, env)
        except ExprError as exc:
            raise SpecError(spec.path, failing.line, f"check '{failing.id}' cannot be evaluated on a call that "
                                                     f"meets every check before it: {exc}") from None
    return failing


def _outcome(function, *args, **kwargs):
    """What a call of the checks comes to, comparable across the two ways."""
    try:
        found = function(*args, **kwargs)
    except SpecError as exc:
        return ("SpecError", str(exc))
    if isinstance(found, list):
        return [c.id for c in found]
    return found.id if found is not None else None


def _assert_same(spec, tensors, params):
    assert _outcome(first_failure, spec, tensors, params) == _outcome(_old_first_failure, spec, tensors, params)
    assert _outcome(first_failure, spec, tensors, params, spec_errors=True) == \
        _outcome(_old_first_failure, spec, tensors, params, spec_errors=True)
    env = check_env(spec, tensors, params)
    assert _outcome(failures, spec, tensors, params) == [c.id for c in spec.checks if not _old_holds(c, env)]


# ----------------------------------------------------------------------------- the calls

def _generated_calls(spec):
    """(tensors, params, valid) of every case of every suite gen makes of ``spec``, as gen checks them."""
    for suite in SUITES:
        for plan in plan_suite(spec, suite):
            plan = replace(plan, params=interface_params(spec, plan.params))
            lay = layout_of(spec, plan)
            yield tensor_infos(spec, lay.shapes, lay.dtypes, lay.layouts, plan.omit), plan.params, plan.violation is None


_ODD_DIMS = (0, 1, 2, 3, 2**31 - 1, 2**31, 2**40, 2**62)
_ODD_PARAMS = (0, 1, -1, 2, 3, 2**31, -2**31, 2**63 - 1, 10**1300, 0.5, -0.0, 1e300, math.nan, math.inf, -math.inf,
               True, False, None, "x", "%d", [1, 2], (3,))
_DTYPES = ("float16", "float32", "float64", "int32", "int64", "bool", ">f4")
_LAYOUTS = ("ARRAY", "NHWC", "NCHW", "NDHWC", "")


def _fuzzed(tensors: dict, params: dict, rng: random.Random):
    """A call near ``tensors`` and ``params``: a tensor left out, re-ranked, resized, retyped or laid out
    otherwise, a param odd or gone, or one it does not declare."""
    tensors, params = dict(tensors), dict(params)
    for _ in range(rng.randint(1, 3)):
        what = rng.random()
        if what < 0.6 and tensors:
            name = rng.choice(sorted(tensors))
            info = tensors[name]
            if info is None or rng.random() < 0.15:
                tensors[name] = None if info is not None else TensorInfo((2, 3), "float32", "ARRAY")
                continue
            shape, dtype, layout = list(info.shape), info.dtype, info.layout
            choice = rng.randrange(4)
            if choice == 0 and shape:
                shape[rng.randrange(len(shape))] = rng.choice(_ODD_DIMS)
            elif choice == 1:
                shape = shape[:-1] if shape and rng.random() < 0.5 else shape + [rng.choice(_ODD_DIMS)]
            elif choice == 2:
                dtype = np.dtype(rng.choice(_DTYPES))
            else:
                layout = rng.choice(_LAYOUTS)
            tensors[name] = TensorInfo(tuple(shape), dtype, layout)
        elif params and what < 0.9:
            params[rng.choice(sorted(params))] = rng.choice(_ODD_PARAMS)
        elif params and what < 0.95:
            params.pop(rng.choice(sorted(params)))
        else:
            params[rng.choice(("n", "extra", "min"))] = rng.choice(_ODD_PARAMS)   # "min" shadows the function
    return tensors, params


@pytest.mark.parametrize("op", known_ops())
def test_the_checks_together_judge_every_generated_and_fuzzed_call_as_one_by_one(op, monkeypatch):
    spec = spec_for(op)
    calls = list(_generated_calls(spec))
    valid = [(t, p) for t, p, ok in calls if ok]
    assert valid and len(valid) < len(calls)          # valid and invalid calls both
    for tensors, params, _ in calls:
        _assert_same(spec, tensors, params)
    rng = random.Random(f"{op}-37")
    for _ in range(400):
        _assert_same(spec, *_fuzzed(*rng.choice(valid), rng))
    # A valid call never falls back to one evaluate() per check: they are evaluated together.
    monkeypatch.setattr(checks_module, "evaluate", lambda *a: pytest.fail("a check evaluated alone"))
    for tensors, params in valid:
        assert first_failure(spec, tensors, params, spec_errors=True) is None
        assert failures(spec, tensors, params) == []


# Checks whose outcome hangs on a guard, on an error raised midway, on a name a param shadows.
_HOSTILE = ("n * n > 0", "'ab' * n == 'abab'", "[0] * n == [0, 0]", "n ** 3 > 0", "3 ** n > 0", "'%d' % n == '2'",
            "prod((n, n, n)) > 0", "prod(('ab', n)) == 'abab'", "x.shape[0] * 2 ** 4000 > 0", "2 ** 5000 > 0",
            "2 ** 31 > n", "x.shape[n] > 0", "x.ndim == 2", "min(x.shape) > 0", "n % 0 == 0", "x.size < 2**31",
            "n / 0 > 1", "isfinite(n)", "min(n, 1) < 2", "x.dtype == 'float32'", "x.layout == 'ARRAY'", "n",
            "x.shape", "-n < 2.0 ** 1000", "2.0 ** 5000 > 0", "n if n else x.shape[9]")


def test_the_guards_hold_in_the_checks_together():
    spec = spec_for(known_ops()[0])
    rng = random.Random(37)
    for _ in range(300):
        texts = rng.sample(_HOSTILE, rng.randint(1, len(_HOSTILE)))
        hostile = replace(spec, inputs={"x": spec.inputs[next(iter(spec.inputs))]}, outputs={}, checks=[
            Check(id=f"c{i}", doc="", message="", require=text, violate=None, untestable="-", line=i + 1)
            for i, text in enumerate(texts)])
        x = rng.choice((None, TensorInfo((2, 3), "float32", "ARRAY"), TensorInfo((0,), "float16", ""),
                        TensorInfo((2**40, 2**40), "float32", "NHWC")))
        params = {"n": rng.choice(_ODD_PARAMS)} if rng.random() < 0.9 else {}
        if rng.random() < 0.1:
            params["min"] = rng.choice(_ODD_PARAMS)
        _assert_same(hostile, {"x": x}, params)


def test_no_check_list_evaluates_to_every_check_holding():
    spec = spec_for(known_ops()[0])
    empty = replace(spec, checks=[])
    assert first_failure(empty, {}, {}) is None and failures(empty, {}, {}) == []
    number = replace(spec, checks=[Check(id="one", doc="", message="", require=1, violate=None, untestable="-", line=1),
                                   Check(id="zero", doc="", message="", require=0.0, violate=None, untestable="-",
                                         line=2)])
    assert first_failure(number, {}, {}).id == "zero" and [c.id for c in failures(number, {}, {})] == ["zero"]


# ----------------------------------------------------------------------------- constants folded

_CONSTANT = ("2 ** 31", "2 ** 4096", "2 ** 4097", "3 ** 2000", "2.0 ** 5000", "2.0 ** -1", "0 ** -1", "7 % 0", "7 % 3",
             "7.5 % 2", "3 * 4", "2 ** 2048 * 2 ** 2048", "2 ** 2049 * 2 ** 2048", "'a' * 3", "3 * [1]", "'%d' % 3",
             "2 ** 0.5", "(-2) ** 0.5", "4 ** -2", "2 ** 31 - 1 < 2 ** 31", "True * 3", "2 ** True", "1e308 * 10",
             "prod((2 ** 31, 2 ** 31))", "-2 ** 31", "2 ** 3 ** 2", "2 ** 3 ** 1000")


@pytest.mark.parametrize("text", _CONSTANT)
def test_a_folded_constant_is_what_the_guard_gives_at_evaluation(text):
    def outcome(evaluate):
        try:
            value = evaluate(text, {})
        except ExprError as exc:
            return "ExprError", str(exc)
        return type(value), repr(value)
    assert outcome(expr.evaluate) == outcome(_old_evaluate)


def test_powers_of_numbers_are_folded_and_the_rest_are_guarded():
    def names(text):
        return {n.id for n in ast.walk(expr._vetted(text)) if isinstance(n, ast.Name)}
    assert "_power" not in names("x.size < 2 ** 31") and "_power" in names("2 ** 5000 > 0")
    assert "_times" in names("'a' * 3") and "_times" in names("n * 2") and "_modulo" in names("7 % 0")


# ----------------------------------------------------------------------------- the tensors the checks see

class _Subclass(np.ndarray):
    """An ndarray subclass (TensorInfo.exactly takes only numpy's own arrays)."""


def _old_request_tensors(spec, request):
    """harness.backends.builtin.request_tensors as main had it."""
    tensors = {name: TensorInfo(tuple(a.shape), a.dtype.name, request.layouts.get(name, spec.inputs[name].layout))
               for name, a in request.inputs.items() if name in spec.inputs}
    tensors.update({name: TensorInfo(tuple(o.shape), np.dtype(o.dtype).name, o.layout)
                    for name, o in request.outputs.items()})
    return tensors


def _described(tensors: dict) -> dict:
    return {n: (t, repr(t), [type(d) for d in t.shape], t.dtype is np.dtype(t.dtype.name), t.ndim, t.size)
            for n, t in tensors.items()}


def test_the_checks_see_each_tensor_as_main_described_it(tmp_path):
    spec = spec_for("three_nn_forward")
    rng = np.random.default_rng(37)
    mapped = np.memmap(tmp_path / "m", dtype=">f4", mode="w+", shape=(2, 5, 3))
    for round_ in range(200):
        shapes = [tuple(int(d) for d in rng.integers(0, 4, size=rng.integers(0, 4))) for _ in range(2)]
        dtypes = rng.choice(["float16", "float32", ">f4", "<f8", "int32", "bool"], size=4)
        arrays = [np.zeros(s, dtype=d) for s, d in zip(shapes, dtypes)]
        if round_ % 5 == 1:
            arrays[0] = mapped[: round_ % 3]
        if round_ % 5 == 2:
            arrays[1] = np.zeros((2, 3), dtype=dtypes[1]).view(_Subclass)
        if round_ % 5 == 3:
            arrays[0] = np.broadcast_to(np.zeros((), dtypes[0]), (3, 2**20, 5))
        outputs = {"dist2": TensorInfo(shapes[0], dtypes[2], "ARRAY"),
                   "idx": SimpleNamespace(shape=[np.int64(2), 3.0], dtype=str(dtypes[3]), layout="NHWC")}
        layouts = {"unknown": "NHWC"} if round_ % 2 else {}
        request = Request(op=spec.op, params={}, inputs={"unknown": arrays[0], "known": arrays[1], "other": arrays[0]},
                          outputs=outputs, layouts=layouts)
        assert _described(request_tensors(spec, request)) == _described(_old_request_tensors(spec, request))


@pytest.mark.parametrize("shape", [(), (0,), (3, 0, 2), (2**40, 2**40, 2**40), (np.int64(7), 3.0, True), [5, 6]])
def test_a_tensor_infos_size_is_the_exact_element_count(shape):
    info = TensorInfo(shape, "float32", "")
    assert info.size == element_count(shape) and type(info.size) is int
    exact = TensorInfo.exactly(info.shape, info.dtype, info.layout)
    assert exact == info and repr(exact) == repr(info) and hash(exact) == hash(info)


# ----------------------------------------------------------------------------- gen's baseline call

@pytest.mark.parametrize("op", known_ops())
def test_the_call_gen_hands_its_baseline_unchecked_is_the_call_its_plan_checked(op):
    """gen.generate.of_checked_calls: the baseline's call describes to the checks exactly what
    Generator._expect_valid checked of its plan, so checking it again could only agree."""
    from gen.core.verdict import request_for
    from gen.generate import Generator
    from gen.plan import total_bytes
    spec = spec_for(op)
    generator = Generator(spec)
    compared = 0
    for suite in ("boundary", "random"):
        for plan in plan_suite(spec, suite):
            if plan.violation is not None or total_bytes(spec, plan) > 1 << 20:
                continue
            plan = replace(plan, params=interface_params(spec, plan.params))
            lay = layout_of(spec, plan)
            request = request_for(generator._with_inputs(plan))
            assert check_env(spec, request_tensors(spec, request), request.params) == \
                check_env(spec, tensor_infos(spec, lay.shapes, lay.dtypes, lay.layouts, plan.omit), plan.params)
            compared += 1
    assert compared
