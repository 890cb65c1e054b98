"""`opcase gen`'s stages overlapped on threads (gen.core.overlap) write the very bytes of the same
stages run one after the other, and a failure anywhere leaves nothing behind."""
from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest

import gen.core.overlap as overlap
import gen.generate as generate
import gen.jobs as jobs
import gen.values as values
from gen.core.overlap import Background, Prefetched
from gen.core.registry import known_ops, spec_for
from gen.generate import case_path, plan_suite
from harness.backends import load_backend

STREAMED = [op for op in known_ops() if spec_for(op).reference_blocks_fn is not None]


def _tasks(out: Path, ops, suites=("boundary", "random"), per_suite=2) -> list:
    tasks = []
    for op in ops:
        spec = spec_for(op)
        for suite in suites:
            plans = plan_suite(spec, suite, 4, seed=5)
            for index, plan in list(enumerate(plans))[:per_suite]:
                tasks.append(jobs.Task(str(spec.path), op, suite, plan.name, index, 4, 5, None,
                                       str(case_path(out, plan, op)), load_backend))
    return tasks


def _files(root: Path) -> dict:
    return {p.relative_to(root): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _generate(out: Path, ops, enabled: bool, monkeypatch, **kwargs) -> dict:
    monkeypatch.setattr(overlap, "ENABLED", enabled)
    jobs.write_all(_tasks(out, ops, **kwargs), 1)
    return _files(out)


@pytest.mark.parametrize("streamed", [False, True])
def test_overlapped_generation_writes_the_serial_bytes(tmp_path, monkeypatch, streamed):
    """Every kernel's cases, made with every stage overlapped (the next case drawn ahead, sidecars
    written and hashed on threads, golden pieces computed ahead, value chunks drawn ahead) and
    made one stage after the other: the same files, byte for byte.  Every tensor over 64 bytes
    goes to a sidecar, and value draws come in many chunks, so that each thread has work."""
    monkeypatch.setattr(generate, "SIDECAR_BYTES", 64)
    monkeypatch.setattr(values, "DRAW_CHUNK", 256)
    ops = known_ops()
    if streamed:
        ops = STREAMED
        monkeypatch.setattr(generate, "STREAM_OUTPUT_BYTES", 0)
        monkeypatch.setattr(generate, "SPILL_INPUT_BYTES", 0)
    serial = _generate(tmp_path / "serial", ops, False, monkeypatch)
    overlapped = _generate(tmp_path / "overlapped", ops, True, monkeypatch)
    assert sorted(overlapped) == sorted(serial)
    assert sum(".opcase." in p.name for p in serial) > len(serial) // 2, "sidecars were written"
    differing = [str(p) for p in serial if serial[p] != overlapped[p]]
    assert not differing, differing[:5]


def test_draws_ahead_and_a_later_failure_is_raised_at_its_own_case(tmp_path, monkeypatch):
    """The next case is drawn while one is made; a case whose draw fails is reported after the
    cases before it are written, and no file of it, nor of the case drawn ahead, stays."""
    tasks = _tasks(tmp_path, ["carafe_forward"], suites=("boundary",), per_suite=3)
    drawn_on = {}
    real_draw = generate.Generator.draw

    def draw(self, plan, path):
        drawn_on[plan.name] = threading.current_thread() is threading.main_thread()
        if plan.name == tasks[1].name:
            raise generate.GenerationError("drawing failed")
        return real_draw(self, plan, path)
    monkeypatch.setattr(generate.Generator, "draw", draw)
    done = []
    with pytest.raises(generate.GenerationError, match="drawing failed"):
        jobs.write_all(tasks, 1, lambda task, size: done.append(task.name))
    assert done == [tasks[0].name]
    assert drawn_on == {tasks[0].name: True, tasks[1].name: False}, "the second case drawn on a thread of its own"
    left = sorted(p.name for p in tmp_path.rglob("*") if p.is_file())
    assert left and all(name.startswith(tasks[0].name) for name in left), left


def test_failed_in_memory_case_leaves_no_sidecar(tmp_path, monkeypatch):
    """A case refused after its inputs' sidecars were started (an all-zero golden) leaves no file."""
    monkeypatch.setattr(generate, "SIDECAR_BYTES", 64)
    spec = spec_for("carafe_forward")
    plan = plan_suite(spec, "boundary")[0]
    plan = generate.replace(plan, values={"input": {"dist": "const", "value": 0}})
    with pytest.raises(generate.GenerationError, match="all zeros"):
        generate.Generator(spec, load_backend("lowp")).write(plan, tmp_path / "z.opcase")
    assert list(tmp_path.iterdir()) == []


def test_prefetched_keeps_order_and_raises_at_the_failing_item():
    def items():
        yield from range(5)
        raise ValueError("sixth")
    got = []
    with pytest.raises(ValueError, match="sixth"), Prefetched(items(), 2) as ahead:
        for item in ahead:
            got.append(item)
    assert got == list(range(5))


def test_prefetched_stops_its_producer_when_the_consumer_leaves():
    made = []

    def items():
        for i in range(1000):
            made.append(i)
            yield np.full(10, i)
    with pytest.raises(RuntimeError):
        with Prefetched(items(), 2) as ahead:
            for block in ahead:
                if block[0] == 3:
                    raise RuntimeError("consumer failed")
    count = len(made)
    time.sleep(0.1)
    assert len(made) == count <= 3 + 2 + 2, "the producer stopped a few items ahead"


def test_background_runs_beside_the_caller_and_raises_in_result():
    started = threading.Event()
    job = Background(lambda: started.wait(5) or "late")
    started.set()
    assert job.result() is True
    failing = Background(lambda: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        failing.result()


def test_sampled_units_on_two_threads_are_the_units_values():
    """gen.sampled computes a chunk of units in two halves on two threads: the same bits, in order."""
    import gen.sampled as sampled
    from gen.generate import Generator, baseline_units_fn
    ops = [op for op in known_ops() if spec_for(op).criteria.mode == "dynamic"
           and baseline_units_fn("mmcv", spec_for(op)) is not None]
    assert ops
    for op in ops:
        spec = spec_for(op)
        case = Generator(spec)._with_inputs(plan_suite(spec, "random", 8, 0)[0])
        present = {n: t.data for n, t in case.inputs.items() if not t.absent}
        shapes = {n: tuple(t.shape) for n, t in case.outputs.items()}
        units = baseline_units_fn("mmcv", spec)(present, dict(case.params), out_shapes=shapes)
        chunk = np.random.default_rng(1).permutation(units.count)[:max(3, units.count // 3)]
        halves, whole = sampled._values_on_two_threads(units, chunk), units.values(chunk)
        assert list(halves) == list(whole)
        for name in whole:
            assert halves[name].dtype == whole[name].dtype
            assert halves[name].tobytes() == whole[name].tobytes(), (op, name)


def test_ordered_map_keeps_order_and_stops_early():
    from gen.core.overlap import ordered_map
    assert list(ordered_map(lambda x: x * x, range(20))) == [x * x for x in range(20)]
    started = []

    def work(x):
        started.append(x)
        if x == 2:
            raise KeyError(x)
        return x
    with pytest.raises(KeyError):
        list(ordered_map(work, range(100), workers=2, ahead=3))
    assert len(started) <= 2 + 3, "what had not started when it failed was cancelled"


def test_ordered_map_computes_a_single_item_in_the_callers_thread():
    """One item (a small case's one chunk) has nothing to overlap with: no pool is started for it."""
    import threading
    from gen.core.overlap import ordered_map
    threads = []

    def work(x):
        threads.append(threading.current_thread())
        return -x
    assert list(ordered_map(work, [7])) == [-7]
    assert threads == [threading.current_thread()]
    assert list(ordered_map(work, [])) == []
    assert list(ordered_map(work, iter([1, 2, 3]))) == [-1, -2, -3]
    assert any(thread is not threading.current_thread() for thread in threads[1:]), "two items go to the pool"


@pytest.mark.parametrize("op", ["deform_roi_pool_forward", "deform_roi_pool_backward"])
def test_mmcv_chunks_on_threads_give_the_serial_bits(monkeypatch, op):
    """The mmcv emulations whose chunks run on two threads (gen.core.overlap.ordered_map), with small
    chunks so that there are many: the same bits as the chunks one after the other.  numpy's code (the compiled
    loops, which answer first where they are built, have no chunks)."""
    from harness.backends import mmcv_backend
    monkeypatch.setenv("OPCASE_NO_CC", "1")
    import gen.kernels.deform_roi_pool.mmcv_emulation as forward_module
    import gen.kernels.deform_roi_pool.mmcv_emulation_backward as backward_module
    monkeypatch.setattr(forward_module, "_CHUNK_ELEMENTS", 64)
    monkeypatch.setattr(backward_module, "_CHUNK_ELEMENTS", 2048)
    spec = spec_for(op)
    generator = generate.Generator(spec)
    compared = 0
    for plan in plan_suite(spec, "boundary")[:12] + plan_suite(spec, "random", 4, seed=3):
        case = generator._with_inputs(plan)
        if case.expect != "ok" or case.dtype not in ("float16", "float32"):
            continue
        present = {n: t.data for n, t in case.inputs.items() if not t.absent}
        shapes = {n: tuple(t.shape) for n, t in case.outputs.items()}
        runs = []
        for enabled in (False, True):
            monkeypatch.setattr(overlap, "ENABLED", enabled)
            runs.append(mmcv_backend.kernel(op)(present, dict(case.params), out_shapes=shapes))
        for name in shapes:
            assert runs[0][name].tobytes() == runs[1][name].tobytes(), (plan.name, name)
        compared += 1
    assert compared >= 8


def test_portable_exp_in_two_halves_gives_the_same_bits(monkeypatch):
    monkeypatch.setattr(values, "EXP_HALVES_ABOVE", 10)
    x = np.random.default_rng(2).normal(0, 30, size=(7, 13))
    x.reshape(-1)[:6] = [np.nan, np.inf, -np.inf, 800.0, -800.0, 0.0]
    assert values.portable_exp(x).tobytes() == values._portable_exp(x).tobytes()
    assert values.portable_exp(x).shape == x.shape
