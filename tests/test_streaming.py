"""Network-scale machinery on small cases: streamed goldens equal in-memory ones, chunked value
draws equal one-shot draws, and blocks reassemble into the reference's outputs."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import gen.generate as generate
import gen.values as values
from gen.generate import Generator, plan_suite
from gen.registry import spec_for
from harness.backend import load_backend
from harness.casefile import load


def _cases(op: str, suite: str, count: int = 3):
    return plan_suite(spec_for(op), suite, count, seed=3)


@pytest.mark.parametrize("op", ["carafe_forward", "carafe_backward"])
@pytest.mark.parametrize("baseline", ["lowp", "torch"])
def test_streamed_case_equals_in_memory_case(tmp_path, monkeypatch, op, baseline):
    if baseline == "torch":
        pytest.importorskip("torch")
    spec = spec_for(op)
    plans = [p for p in _cases(op, "random") + _cases(op, "boundary") if "zero" not in p.name][:6]
    generator = Generator(spec, load_backend(baseline))
    in_memory = [load(generator.write(p, tmp_path / "memory" / f"{p.name}.opcase")) for p in plans]
    monkeypatch.setattr(generate, "STREAM_OUTPUT_BYTES", 0)
    streamed = [load(generator.write(p, tmp_path / "stream" / f"{p.name}.opcase")) for p in plans]
    for a, b in zip(in_memory, streamed):
        for name, t in a.outputs.items():
            assert np.asarray(b.outputs[name].data).tobytes() == np.asarray(t.data).tobytes(), (a.name, name)
            for x, y in zip(a.criteria[name], b.criteria[name]):
                assert (x.metric, x.baseline, x.rate) == (y.metric, y.baseline, y.rate)
                assert y.value == pytest.approx(x.value, rel=1e-12), (a.name, name, x.metric)
    assert not list((tmp_path / "stream").glob(".*.tmp")), "temporary sidecars left behind"


def test_streamed_all_zero_golden_is_refused_and_leaves_nothing(tmp_path, monkeypatch):
    spec = spec_for("carafe_forward")
    plan = _cases("carafe_forward", "boundary")[0]
    plan = replace(plan, values={"input": {"dist": "const", "value": 0}})
    monkeypatch.setattr(generate, "STREAM_OUTPUT_BYTES", 0)
    with pytest.raises(generate.GenerationError, match="all zeros"):
        Generator(spec, load_backend("lowp")).write(plan, tmp_path / "z.opcase")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("dist", [{"dist": "uniform", "low": -1, "high": 2}, {"dist": "normal", "mean": 0, "std": 3},
                                  {"dist": "randint", "low": -4, "high": 9}])
def test_value_draws_do_not_depend_on_chunk_size(monkeypatch, dist):
    whole = values._plain(np.random.default_rng(9), dist, (37, 41), np.dtype(np.float32))
    monkeypatch.setattr(values, "DRAW_CHUNK", 100)
    chunked = values._plain(np.random.default_rng(9), dist, (37, 41), np.dtype(np.float32))
    assert whole.tobytes() == chunked.tobytes()


def test_flat_start():
    assert generate.flat_start((1, slice(2, 5)), (3, 8, 4, 2)) == (1 * 8 + 2) * 8
    assert generate.flat_start((0,), (0, 5)) == 0
