"""Network-scale machinery on small cases: streamed goldens equal in-memory ones, chunked value
draws equal one-shot draws, and blocks reassemble into the reference's outputs."""
from __future__ import annotations

import hashlib
from dataclasses import replace

import numpy as np
import pytest

import gen.generate as generate
import gen.values as values
from gen.generate import Generator, plan_suite
from gen.core.casefile import load
from gen.core.registry import known_ops, spec_for
from harness.backends import load_backend


def _cases(op: str, suite: str, count: int = 3):
    return plan_suite(spec_for(op), suite, count, seed=3)


# The kernels whose reference can yield its outputs in pieces (``<fn>_blocks``).
STREAMED = [op for op in known_ops() if spec_for(op).reference_blocks_fn is not None]


def test_some_kernel_streams():
    assert STREAMED


@pytest.mark.parametrize("op", STREAMED)
@pytest.mark.parametrize("baseline", ["lowp", pytest.param("torch", marks=pytest.mark.needs("torch"))])
def test_streamed_case_equals_in_memory_case(tmp_path, monkeypatch, op, baseline):
    spec = spec_for(op)
    plans = [p for p in _cases(op, "random") + _cases(op, "boundary") if "zero" not in p.name][:6]
    generator = Generator(spec, load_backend(baseline))
    in_memory = [load(generator.write(p, tmp_path / "memory" / f"{p.name}.opcase")) for p in plans]
    monkeypatch.setattr(generate, "STREAM_OUTPUT_BYTES", 0)
    monkeypatch.setattr(generate, "SPILL_INPUT_BYTES", 0)     # every plain-drawn input goes to its file
    streamed = [load(generator.write(p, tmp_path / "stream" / f"{p.name}.opcase")) for p in plans]
    spilled = 0
    for a, b in zip(in_memory, streamed):
        for name, t in a.inputs.items():
            assert np.asarray(b.inputs[name].data).tobytes() == np.asarray(t.data).tobytes(), (a.name, name)
            spilled += isinstance(b.inputs[name].data, np.memmap)
        for name, t in a.outputs.items():
            assert np.asarray(b.outputs[name].data).tobytes() == np.asarray(t.data).tobytes(), (a.name, name)
            for x, y in zip(a.criteria[name], b.criteria[name]):
                assert (x.metric, x.baseline, x.rate) == (y.metric, y.baseline, y.rate)
                assert y.value == pytest.approx(x.value, rel=1e-12), (a.name, name, x.metric)
    assert spilled >= len(plans), "plain-drawn inputs (input, grad_output) went straight to their files"
    assert not list((tmp_path / "stream").glob(".*.tmp")), "temporary sidecars left behind"


def test_streamed_all_zero_golden_is_refused_and_leaves_nothing(tmp_path, monkeypatch):
    spec = spec_for("carafe_forward")
    plan = _cases("carafe_forward", "boundary")[0]
    plan = replace(plan, values={"input": {"dist": "const", "value": 0}})
    monkeypatch.setattr(generate, "STREAM_OUTPUT_BYTES", 0)
    monkeypatch.setattr(generate, "SPILL_INPUT_BYTES", 0)
    with pytest.raises(generate.GenerationError, match="all zeros"):
        Generator(spec, load_backend("lowp")).write(plan, tmp_path / "z.opcase")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("dist", [{"dist": "uniform", "low": -1, "high": 2}, {"dist": "normal", "mean": 0, "std": 3},
                                  {"dist": "randint", "low": -4, "high": 9}])
def test_value_draws_do_not_depend_on_chunk_size(monkeypatch, dist):
    whole = values._plain(np.random.default_rng(9), dist, np.empty((37, 41), np.float32))
    monkeypatch.setattr(values, "DRAW_CHUNK", 100)
    chunked = values._plain(np.random.default_rng(9), dist, np.empty((37, 41), np.float32))
    assert whole.tobytes() == chunked.tobytes()


def test_spill_file_holds_the_draw_and_its_digest(tmp_path, monkeypatch):
    from gen.core.casefile import SpillFile
    dist = {"dist": "normal", "mean": 0, "std": 2}
    in_memory = values._plain(np.random.default_rng(4), dist, np.empty((300, 7), np.float16))
    spill = SpillFile(tmp_path / "c.opcase", (300, 7), np.float16)
    monkeypatch.setattr(values, "DRAW_CHUNK", 64)          # several chunks, each written and let go
    values._plain(np.random.default_rng(4), dist, spill.array)
    readonly, (path, record) = spill.seal()
    raw = open(path, "rb").read()
    assert raw == in_memory.tobytes() and readonly.tobytes() == raw
    assert record.length == len(raw) and record.sha256 == hashlib.sha256(raw).digest()
    assert not readonly.flags.writeable
    spill.discard()
    assert list(tmp_path.iterdir()) == []


def test_flat_start():
    assert generate.flat_start((1, slice(2, 5)), (3, 8, 4, 2)) == (1 * 8 + 2) * 8
    assert generate.flat_start((0,), (0, 5)) == 0


def test_full_disk_while_drawing_a_spilled_input_is_a_clean_error(tmp_path, monkeypatch):
    """No space for an input's file: `opcase gen` says so and leaves no temporary file."""
    import errno
    import os

    from click.testing import CliRunner

    from harness.cli import main

    def no_space(fd, offset, length):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(generate, "STREAM_OUTPUT_BYTES", 0)
    monkeypatch.setattr(generate, "SPILL_INPUT_BYTES", 0)
    monkeypatch.setattr(os, "posix_fallocate", no_space)
    result = CliRunner().invoke(main, ["gen", "specs/carafe_forward.yaml", "--suite", "boundary",
                                       "--select", "^kernel_1", "-o", str(tmp_path / "out")])
    assert result.exit_code != 0
    assert "No space left on device" in result.output and "Traceback" not in result.output
    assert not [p for p in (tmp_path / "out").rglob("*") if p.is_file()]
