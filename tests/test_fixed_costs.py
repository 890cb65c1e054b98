"""What a small case's golden no longer pays per call (issue 37), and that each saving keeps its checks:
scratch buffers kept between calls within a bound and never read before written, the specs listed
again when their folder changes, kernel parts found absent not looked for again."""
from __future__ import annotations

import numpy as np
import pytest

from gen import native
from gen.core import registry
from gen.kernels.carafe import reference as carafe
from gen.kernels.shared import scratch_pool


@pytest.fixture
def clean_pool():
    scratch_pool.release_all()
    yield
    scratch_pool.release_all()


def test_a_buffer_given_back_is_taken_again_and_what_is_kept_is_bounded(clean_pool, monkeypatch):
    first = scratch_pool.take("rows", 1000)
    assert first.dtype == np.float64 and first.size >= 1000
    scratch_pool.give("rows", first)
    assert scratch_pool.take("rows", 500) is first            # large enough: the kept one
    scratch_pool.give("rows", first)
    assert scratch_pool.take("rows", 2000) is not first       # too small: a new one
    monkeypatch.setattr(scratch_pool, "KEEP_BYTES", 3 * 8 * 1000)
    for _ in range(5):
        scratch_pool.give("rows", np.empty(1000))
    assert scratch_pool._kept_bytes() <= 3 * 8 * 1000


@pytest.mark.skipif(native.load(carafe._BACKWARD_SOURCE) is None, reason="no C compiler: carafe runs numpy")
def test_carafe_reads_nothing_a_kept_buffer_held_before(clean_pool, monkeypatch):
    """Every kept buffer filled with NaN first: the compiled loops still give numpy's bits."""
    rng = np.random.default_rng(7)
    inputs = {"input": rng.normal(size=(1, 5, 6, 16)).astype(np.float16),
              "mask": rng.normal(size=(1, 10, 12, 18)).astype(np.float16),
              "grad_output": rng.normal(size=(1, 10, 12, 16)).astype(np.float16)}
    params = {"kernel_size": 3, "group_size": 2, "scale_factor": 2}
    monkeypatch.setenv("OPCASE_NO_CC", "1")
    expected = carafe.backward(inputs, params)
    monkeypatch.delenv("OPCASE_NO_CC")
    carafe.backward(inputs, params)                            # its buffers are now kept
    kept = [(name, buffer) for name, buffers in scratch_pool._free.items() for buffer in buffers]
    assert kept
    for name, buffer in kept:
        buffer.fill(np.nan)
    got = carafe.backward(inputs, params)
    for name in expected:
        assert np.array_equal(expected[name].view(np.uint64), got[name].view(np.uint64)), name


def test_the_specs_are_listed_again_when_their_folder_changes(tmp_path, monkeypatch):
    monkeypatch.setenv("OPCASE_SPECS", str(tmp_path))
    (tmp_path / "first_op.yaml").write_text("op: first_op\n")
    assert registry.known_ops() == ["first_op"]
    (tmp_path / "second_op.yaml").write_text("op: second_op\n")
    assert registry.known_ops() == ["first_op", "second_op"]
    (tmp_path / "first_op.yaml").unlink()
    assert registry.known_ops() == ["second_op"]


def test_a_part_found_absent_is_not_imported_again_and_an_unknown_op_finds_none(monkeypatch):
    assert registry.kernel_module(registry.MMCV_EMULATION, "carafe_forward") is not None
    absent = registry.part_module_names(registry.MMCV_EMULATION, "carafe_forward")[0]
    assert absent in registry._ABSENT                          # no mmcv_emulation_forward in carafe's folder
    imported = []
    real = registry.importlib.import_module
    monkeypatch.setattr(registry.importlib, "import_module", lambda name: imported.append(name) or real(name))
    registry.kernel_module(registry.MMCV_EMULATION, "carafe_forward")
    assert absent not in imported
    assert registry.kernel_module(registry.MMCV_EMULATION, "os") is None
