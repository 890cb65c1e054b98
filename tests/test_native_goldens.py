"""Compiled golden loops (gen/native.py) give the numpy path's bits, and their absence changes nothing.

carafe's forward and backward goldens run in C when a C compiler is there (gen/kernels/carafe/carafe_kernel.c,
gen/kernels/carafe/carafe_backward_kernel.c), reading float16/float32 inputs widened by gen/widen.c, and so do
deform_roi_pool's forward and backward (gen/kernels/deform_roi_pool/deform_roi_pool_kernel.c) and border_align's backward
(gen/kernels/border_align/border_align_backward_kernel.c); OPCASE_NO_CC=1 forces numpy.
Both must give the same bits on every input (special values, float16/32/64, any shape), and the
committed cases of these kernels must come out byte for byte with the C loops on.
"""
from __future__ import annotations

import shutil
import hashlib
import ctypes
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import needs
from conftest import REPO
from gen import native, widen
from gen.kernels.border_align import reference as border_align
from gen.kernels.carafe import reference as carafe
from gen.kernels.deform_roi_pool import reference as deform_roi_pool
from gen.kernels.deform_roi_pool import reference_backward as deform_roi_pool_backward

SPECIALS = [np.nan, np.inf, -np.inf, -0.0, 0.0, 5e-324, -2.2250738585072014e-308, 1e300, -1e-300]


def _fresh_native_cache(tmp_path_factory, monkeypatch, source: str) -> None:
    """Compiled loops built in a cache of this test session's own (skips where there is no cc)."""
    if native.compiler() is None:
        needs.skip_without("cc", f"to build {source}")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.getbasetemp() / "native-cache"))
    monkeypatch.delenv("OPCASE_NO_CC", raising=False)
    monkeypatch.setattr(native, "_loaded", {})


@pytest.fixture
def compiled(tmp_path_factory, monkeypatch):
    """The carafe forward's C loop, built in a cache of this test session's own (skips where there is no cc),
    used on this CPU whatever its vector width, so that the clone this CPU runs is checked."""
    _fresh_native_cache(tmp_path_factory, monkeypatch, "gen/kernels/carafe/carafe_kernel.c")
    monkeypatch.setenv("OPCASE_NATIVE_ANY_CPU", "1")
    function = carafe._compiled_forward()
    assert function is not None, "a C compiler is on PATH but carafe_kernel.c did not build or load"
    return function


def _draw(rng, shape, dtype, specials: int):
    exponents = rng.integers(-40, 40, shape) if dtype == np.float64 else rng.integers(-6, 6, shape)
    values = (rng.standard_normal(shape) * np.exp2(exponents)).astype(dtype)
    flat = values.reshape(-1)
    where = rng.integers(0, flat.size, specials)
    with np.errstate(over="ignore"):
        flat[where] = np.array(SPECIALS, dtype=np.float64)[rng.integers(0, len(SPECIALS), specials)].astype(dtype)
    return values


def _both_paths(monkeypatch, inputs, params):
    monkeypatch.setenv("OPCASE_NO_CC", "1")
    reference = carafe.forward(inputs, params)["output"]
    blocks = [b.copy() for _, _, b in carafe.forward_blocks(inputs, params)]
    monkeypatch.delenv("OPCASE_NO_CC")
    compiled = carafe.forward(inputs, params)["output"]
    compiled_blocks = [b for _, _, b in carafe.forward_blocks(inputs, params)]
    return reference, compiled, blocks, compiled_blocks


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a.view(np.uint64), b.view(np.uint64))


def _same_pieces(pieces: list, other: list) -> bool:
    """Whether two lists of an output's pieces hold the same bits in order (the two paths may cut them apart
    at other rows)."""
    return _same_bits(*(np.concatenate([p.reshape(-1) for p in ps]) for ps in (pieces, other)))


def _random_carafe(rng, trial: int, inputs: tuple[str, ...]):
    """A random carafe call: shapes off the vector widths, every kernel size parity allows, scale factors 1..4,
    groups; magnitudes 2^-40..2^40 so that any other order of additions shows; the three float types with NaN,
    inf, -0, subnormals sprinkled in (none, a few, many)."""
    k, s, G = int(rng.choice([1, 3, 5, 7])), int(rng.integers(1, 5)), int(rng.integers(1, 4))
    Cg = int(rng.choice([2, 3, 7, 8, 9, 15, 16, 17, 32, 33, 64, 65, 100]))
    N, H, W = int(rng.integers(1, 3)), int(rng.integers(1, 9)), int(rng.integers(1, 9))
    dtype = [np.float16, np.float32, np.float64][trial % 3]
    specials = [0, 0, 2, 50][trial % 4]
    shapes = {"input": (N, H, W, G * Cg), "mask": (N, H * s, W * s, G * k * k),
              "grad_output": (N, H * s, W * s, G * Cg)}
    return ({name: _draw(rng, shapes[name], dtype, specials) for name in inputs},
            {"kernel_size": k, "group_size": G, "scale_factor": s})


@pytest.mark.slow   # builds its C loop in a fresh cache first
@pytest.mark.parametrize("seed", range(4))
def test_carafe_forward_compiled_is_numpy_bit_for_bit(compiled, monkeypatch, seed):
    """Random calls (_random_carafe): the output whole and every piece."""
    rng = np.random.default_rng(seed)
    for trial in range(40):
        inputs, params = _random_carafe(rng, trial, ("input", "mask"))
        reference, fast, blocks, fast_blocks = _both_paths(monkeypatch, inputs, params)
        assert _same_bits(reference, fast), (params, {n: (a.shape, a.dtype) for n, a in inputs.items()})
        assert _same_pieces(blocks, fast_blocks), params


@pytest.mark.slow   # builds its C loop in a fresh cache first
@pytest.mark.parametrize("seed", range(3))
def test_carafe_backward_compiled_is_numpy_bit_for_bit(compiled, monkeypatch, seed):
    """grad_mask (numpy's two-lane sums over the channels, blocks of 8 taken pairs 3..0) and grad_input
    (entries v, b, u, a), both outputs whole and in pieces, on random calls as the forward's test draws them."""
    rng = np.random.default_rng(100 + seed)
    for trial in range(30):
        inputs, params = _random_carafe(rng, trial, ("input", "mask", "grad_output"))
        monkeypatch.setenv("OPCASE_NO_CC", "1")
        reference = carafe.backward(inputs, params)
        blocks = [(name, b.copy()) for name, _, b in carafe.backward_blocks(inputs, params)]
        monkeypatch.delenv("OPCASE_NO_CC")
        fast = carafe.backward(inputs, params)
        fast_blocks = list((name, b) for name, _, b in carafe.backward_blocks(inputs, params))
        for name in reference:
            assert _same_bits(reference[name], fast[name]), (name, params, {n: a.shape for n, a in inputs.items()})
        for name in reference:
            assert _same_pieces([b for n, b in blocks if n == name], [b for n, b in fast_blocks if n == name])


def test_carafe_backward_runs_compiled_where_it_fits(compiled, monkeypatch):
    """With a compiler, a float64 backward with 2+ channels per group and no NaN never touches numpy's einsum
    (the channel blocks of 32 and the odd ones both); one channel per group and float32 do."""
    rng = np.random.default_rng(7)
    params = {"kernel_size": 5, "group_size": 2, "scale_factor": 2}
    einsum = np.einsum
    calls = []
    monkeypatch.setattr(np, "einsum", lambda *a, **kw: calls.append(1) or einsum(*a, **kw))

    def run(C, **kw):
        carafe.backward({"input": rng.standard_normal((1, 6, 7, C)), "mask": rng.random((1, 12, 14, 50)),
                         "grad_output": rng.standard_normal((1, 12, 14, C))}, params, **kw)
    run(2 * 64)
    run(2 * 9)
    assert not calls
    run(2)
    assert calls
    calls.clear()
    run(18, compute_dtype=np.float32)
    assert calls


def test_carafe_runs_numpy_where_it_is_faster(compiled, monkeypatch):
    """carafe's C loops run only on the CPUs where they were measured faster than numpy's einsum
    (carafe.FASTER_THAN_NUMPY_WITH: AVX2); elsewhere numpy runs, with the same bits."""
    rng = np.random.default_rng(12)
    inputs = {"input": rng.standard_normal((1, 6, 7, 18)), "mask": rng.random((1, 12, 14, 50)),
              "grad_output": rng.standard_normal((1, 12, 14, 18))}
    params = {"kernel_size": 5, "group_size": 2, "scale_factor": 2}
    einsum = np.einsum
    calls = []
    monkeypatch.setattr(np, "einsum", lambda *a, **kw: calls.append(1) or einsum(*a, **kw))
    monkeypatch.delenv("OPCASE_NATIVE_ANY_CPU")
    outputs = []
    for flags, numpy_runs in (({"sse2"}, ("forward", "backward")), ({"sse2", "avx2"}, ()),
                              ({"sse2", "avx2", "avx512f"}, ())):
        monkeypatch.setattr(native, "cpu_flags", lambda _flags=frozenset(flags): _flags)
        outputs.append({})
        for direction in ("forward", "backward"):
            outputs[-1].update(getattr(carafe, direction)(inputs, params))
            assert bool(calls) == (direction in numpy_runs), (sorted(flags), direction)
            calls.clear()
    for other in outputs[1:]:
        assert all(_same_bits(outputs[0][name], other[name]) for name in outputs[0])


def test_carafe_narrow_loops_are_numpy_bit_for_bit(compiled, monkeypatch):
    """The loops for CPUs without AVX-512, forced on whatever this CPU is, against numpy on random calls: the
    forward's and grad_input's (vectors of 4 channels) and, where the CPU has AVX2, grad_mask's (each tap's
    four phases in two 4-double vectors, its taps 5 at a time)."""
    for source, name in ((carafe._KERNEL_SOURCE, "carafe_narrow_only"),
                         (carafe._BACKWARD_SOURCE, "carafe_backward_narrow_only")):
        monkeypatch.setattr(ctypes.c_int.in_dll(native.load(source), name), "value", 1)
    rng = np.random.default_rng(20)
    for trial in range(40):
        inputs, params = _random_carafe(rng, trial, ("input", "mask", "grad_output"))
        monkeypatch.setenv("OPCASE_NO_CC", "1")
        reference = {**carafe.forward(inputs, params), **carafe.backward(inputs, params)}
        monkeypatch.delenv("OPCASE_NO_CC")
        fast = {**carafe.forward(inputs, params), **carafe.backward(inputs, params)}
        for name in reference:
            assert _same_bits(reference[name], fast[name]), (name, params, {n: a.shape for n, a in inputs.items()})


def test_carafe_numpy_grad_input_takes_a_chunk_a_part_at_a_time(monkeypatch):
    """numpy's grad_input runs a chunk of the C loop's (64 MB) a few rows at a time, which bounds its row stack:
    the same bits as the chunk whole, and as the C loop where there is one."""
    rng = np.random.default_rng(7)
    H, W, C, k, G, s = 40, 64, 256, 5, 1, 2
    per_row = s * s * W * (C + G * k * k)
    assert carafe._NUMPY_HALO_CHUNK_ELEMENTS // per_row < H <= carafe._COMPILED_HALO_CHUNK_ELEMENTS // per_row
    inputs = {"input": rng.standard_normal((1, H, W, C)), "grad_output": rng.standard_normal((1, s * H, s * W, C)),
              "mask": rng.random((1, s * H, s * W, G * k * k))}
    params = {"kernel_size": k, "group_size": G, "scale_factor": s}
    compiled_or_numpy = carafe.backward(inputs, params)["grad_input"]
    monkeypatch.setenv("OPCASE_NO_CC", "1")
    in_parts = carafe.backward(inputs, params)["grad_input"]
    monkeypatch.setattr(carafe, "_NUMPY_HALO_CHUNK_ELEMENTS", carafe._COMPILED_HALO_CHUNK_ELEMENTS)
    whole = carafe.backward(inputs, params)["grad_input"]
    assert _same_bits(in_parts, whole) and _same_bits(in_parts, compiled_or_numpy)


def test_native_reads_the_cpu_flags():
    """Where Linux lists the flags, an x86-64 CPU has at least SSE2 (the C loops' default clone)."""
    flags = native.cpu_flags()
    if not Path("/proc/cpuinfo").exists() or not flags:
        pytest.skip("no flags line in /proc/cpuinfo on this machine")
    assert "sse2" in flags or not {"fpu", "sse"} & flags


def test_carafe_backward_nan_rows_come_from_numpy(compiled, monkeypatch):
    """As for the forward: which NaN a sum keeps depends on operand order, so pieces with a NaN are numpy's."""
    rng = np.random.default_rng(8)
    inputs = {"input": rng.standard_normal((1, 5, 5, 16)), "mask": rng.random((1, 10, 10, 9)),
              "grad_output": rng.standard_normal((1, 10, 10, 16))}
    inputs["input"][0, 2, 2, 3] = np.inf
    inputs["grad_output"][0, 4, 4, 3] = 0.0            # inf * 0 in grad_mask
    inputs["grad_output"][0, 6, 6, 5] = -np.nan
    inputs["mask"][0, 3, 3, 4] = np.inf
    params = {"kernel_size": 3, "group_size": 1, "scale_factor": 2}
    monkeypatch.setenv("OPCASE_NO_CC", "1")
    reference = carafe.backward(inputs, params)
    monkeypatch.delenv("OPCASE_NO_CC")
    fast = carafe.backward(inputs, params)
    for name in reference:
        assert np.isnan(fast[name]).any() and _same_bits(reference[name], fast[name]), name


def test_widen_gives_numpys_bits(compiled):
    """Every float16 bit pattern (signalling NaNs included: F16C would quiet them, numpy keeps them) and
    float32 ones with subnormals, NaNs and infinities: gen/widen.c's float64 are numpy's, plain and blocked."""
    halves = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    rng = np.random.default_rng(9)
    floats = rng.integers(0, 1 << 32, 1 << 16, dtype=np.uint64).astype(np.uint32)
    floats[:512] = np.arange(512, dtype=np.uint32) | np.uint32(0x7f800000)
    floats[512:1024] = np.arange(512, dtype=np.uint32)
    for source in (halves, floats.view(np.float32)):
        with np.errstate(invalid="ignore"):
            expected = source.astype(np.float64)
        assert _same_bits(widen.to_float64(source, np.empty(source.shape)), expected), source.dtype
        blocked, _ = widen.to_float64_blocked(source.reshape(8, 128, 64), 32)
        assert _same_bits(np.ascontiguousarray(blocked.transpose(1, 2, 0, 3)).reshape(-1), expected)


def test_carafe_forward_runs_compiled_where_it_fits(compiled, monkeypatch):
    """With a compiler, a float64 golden with 2+ channels per group and no NaN never touches numpy's einsum;
    one channel per group (numpy adds the taps in another grouping there) and float32 do."""
    rng = np.random.default_rng(5)
    params = {"kernel_size": 5, "group_size": 2, "scale_factor": 2}
    einsum = np.einsum
    calls = []
    monkeypatch.setattr(np, "einsum", lambda *a, **kw: calls.append(1) or einsum(*a, **kw))
    carafe.forward({"input": rng.standard_normal((1, 6, 7, 2 * 9)), "mask": rng.random((1, 12, 14, 50))}, params)
    assert not calls
    carafe.forward({"input": rng.standard_normal((1, 6, 7, 2)), "mask": rng.random((1, 12, 14, 50))}, params)
    assert calls
    calls.clear()
    carafe.forward({"input": rng.standard_normal((1, 6, 7, 18)), "mask": rng.random((1, 12, 14, 50))}, params,
                   compute_dtype=np.float32)
    assert calls


def test_carafe_forward_nan_rows_come_from_numpy(compiled, monkeypatch):
    """inf * 0 makes x86's default NaN (sign bit set), an input NaN keeps its own: which one a sum keeps
    depends on operand order, which the C compiler may swap, so rows with a NaN are numpy's."""
    rng = np.random.default_rng(6)
    image = rng.standard_normal((1, 5, 5, 16))
    mask = rng.random((1, 10, 10, 9))
    image[0, 2, 2, 3] = np.inf
    mask[0, 4, 4, 4] = 0.0                      # the centre tap of output (4, 4) meets the inf: inf * 0
    image[0, 2, 3, 5] = -np.nan
    params = {"kernel_size": 3, "group_size": 1, "scale_factor": 2}
    reference, fast, _, _ = _both_paths(monkeypatch, {"input": image, "mask": mask}, params)
    assert np.isnan(fast).any() and _same_bits(reference, fast)


# slow: generates those committed suites twice (13-18 s in the quick loop at c438e2b)
@pytest.mark.slow
@pytest.mark.parametrize("specs_glob", ["carafe_*.yaml", "deform_roi_pool_*.yaml", "border_align_*.yaml"])
def test_committed_suites_come_out_byte_for_byte_with_or_without_the_compiled_loop(compiled, tmp_path, specs_glob):
    """cases/'s command for the kernels with a compiled loop, run with the C loop and with OPCASE_NO_CC=1:
    the same files, byte for byte (tests/test_committed_cases.py compares the whole suite with cases/,
    whichever path this machine takes)."""
    line = next(l for l in (REPO / "cases" / "README.md").read_text().splitlines()
                if l.strip().startswith("opcase gen"))
    specs = sorted(str(p.relative_to(REPO)) for p in (REPO / "specs").glob(specs_glob))
    trees = {}
    for name, no_cc in (("compiled", {}), ("numpy", {"OPCASE_NO_CC": "1"})):
        args = [a for a in shlex.split(line)[2:] if a != "specs/*.yaml"]
        args[args.index("-o") + 1] = str(tmp_path / name)
        env = {**{k: v for k, v in os.environ.items() if k != "OPCASE_NO_CC"}, **no_cc}
        done = subprocess.run([sys.executable, "-m", "harness.cli", "gen", *specs, *args], cwd=REPO, env=env,
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr
        trees[name] = {p.relative_to(tmp_path / name): p.read_bytes() for p in (tmp_path / name).rglob("*.opcase")}
    assert len(trees["compiled"]) > 50 and sorted(trees["compiled"]) == sorted(trees["numpy"])
    differing = [str(k) for k in trees["numpy"] if trees["compiled"][k] != trees["numpy"][k]]
    assert not differing, differing[:5]


# ----------------------------------------------------------------------------- deform_roi_pool

@pytest.fixture
def deform_compiled(tmp_path_factory, monkeypatch):
    _fresh_native_cache(tmp_path_factory, monkeypatch, "gen/kernels/deform_roi_pool/deform_roi_pool_kernel.c")
    assert native.load(deform_roi_pool._KERNEL_SOURCE) is not None, "cc is on PATH, the C file did not build"


def _deform_case(rng, trial: int):
    """Random inputs for both deform_roi_pool kernels: rois anywhere from far outside the map to
    inverted, zero-size and larger than it; special values (NaN, inf, -0, subnormals) sprinkled into
    the input, offsets, grad_output and now and then the rois; all -0 inputs; float16/32/64."""
    N, H, W = int(rng.integers(1, 3)), int(rng.integers(1, 10)), int(rng.integers(1, 10))
    C = int(rng.choice([1, 3, 8, 9, 17, 130, 260]))        # off the vector widths; > 128: the pairwise halving
    R, PH, PW = int(rng.integers(1, 6)), int(rng.integers(1, 4)), int(rng.integers(1, 4))
    dtype = [np.float16, np.float32, np.float64][trial % 3]
    specials = [0, 0, 3, 40][trial % 4]
    scale = float(rng.choice([1.0, 0.5, 0.25]))
    corners = np.column_stack([rng.uniform(-4, W + 3, R), rng.uniform(-4, H + 3, R)])
    sizes = rng.uniform(-2, 2.5, (R, 2)) * np.array([W, H])
    sizes[rng.random((R, 2)) < 0.15] = 0.0
    rois = np.column_stack([rng.integers(0, N, R), corners / scale, (corners + sizes) / scale]).astype(dtype)
    sampling_ratio = int(rng.integers(0, 4))
    if specials and trial % 8 == 3:
        # A fixed grid of NaN points (all outside), or an adaptive grid of none; inf would be refused
        # as unbounded samples.
        rois[rng.integers(0, R), rng.integers(1, 5)] = np.nan
    inputs = {"input": _draw(rng, (N, H, W, C), dtype, specials * 4),
              "rois": rois,
              "offset": _draw(rng, (R, 2, PH, PW), dtype, specials) * 0.3,
              "grad_output": _draw(rng, (R, PH, PW, C), dtype, specials)}
    if trial % 5 == 4:
        inputs["input"][:] = -0.0
    params = {"pooled_height": PH, "pooled_width": PW, "spatial_scale": scale,
              "sampling_ratio": sampling_ratio, "gamma": float(rng.choice([0.1, 1.0]))}
    return inputs, params


def _deform_goldens(inputs, params):
    forward_inputs = {k: v for k, v in inputs.items() if k != "grad_output"}
    return {**deform_roi_pool.forward(forward_inputs, params), **deform_roi_pool_backward.backward(inputs, params)}


@pytest.mark.slow   # builds its C loop in a fresh cache first
@pytest.mark.parametrize("seed", range(3))
def test_deform_roi_pool_compiled_is_numpy_bit_for_bit(deform_compiled, monkeypatch, seed):
    """Forward and backward goldens, with and without an offset, with the C loops and with numpy, on random
    shapes and values (_deform_case), with the samples cut into chunks of the default size and of a few
    samples (runs that continue a bin from an earlier chunk, in the forward's sums and the offset's)."""
    rng = np.random.default_rng(seed)
    for trial in range(48):
        inputs, params = _deform_case(rng, trial)
        if trial % 2:
            samples = int(rng.integers(1, 12))                 # per chunk: _CHUNK_ELEMENTS // (4 C)
            monkeypatch.setattr(deform_roi_pool, "_CHUNK_ELEMENTS", 4 * inputs["input"].shape[-1] * samples)
        for present in (inputs, {k: v for k, v in inputs.items() if k != "offset"}):
            # NaN and inf inputs and rois: numpy's path says so (the C loop's too, which hands an output
            # with a NaN back to numpy).
            with np.errstate(invalid="ignore"):
                monkeypatch.setenv("OPCASE_NO_CC", "1")
                reference = _deform_goldens(present, params)
                monkeypatch.delenv("OPCASE_NO_CC")
                fast = _deform_goldens(present, params)
            for name in reference:
                assert _same_bits(reference[name], fast[name]), (name, trial, params, sorted(present))
        monkeypatch.undo()


def test_deform_roi_pool_compiled_widens_every_finite_float16_exactly(deform_compiled, monkeypatch):
    """The C loop converts float16 bits itself (no F16C): every finite half, subnormals and -0 included, comes
    out as numpy widens it, sampled once with weight 1 both as the channels of one pixel (the 8-channel
    vector loop) and as the pixels of a one-channel row, one roi each (the channel-by-channel tail)."""
    halves = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    halves = halves[np.isfinite(halves)]
    params = {"pooled_height": 1, "pooled_width": 1, "spatial_scale": 1.0, "sampling_ratio": 1, "gamma": 0.1}
    # A roi of size 0 at pixel centre (x, 0) + 0.5 samples exactly that pixel: weights 1, 0, 0, 0.
    as_channels = {"input": halves.reshape(1, 1, 1, -1), "rois": np.array([[0, 0.5, 0.5, 0.5, 0.5]])}
    x = np.arange(halves.size) + 0.5
    as_pixels = {"input": halves.reshape(1, 1, -1, 1), "rois": np.column_stack([0 * x, x, 0.5 + 0 * x, x, 0.5 + 0 * x])}
    numpy_path = deform_roi_pool._bin_sums
    for inputs in (as_channels, as_pixels):
        monkeypatch.setattr(deform_roi_pool, "_bin_sums", lambda *a: pytest.fail("numpy's path ran"))
        fast = deform_roi_pool.forward(inputs, params)["output"].reshape(-1)
        assert np.array_equal(fast, halves.astype(np.float64))
        monkeypatch.setattr(deform_roi_pool, "_bin_sums", numpy_path)
        monkeypatch.setenv("OPCASE_NO_CC", "1")
        assert _same_bits(fast, deform_roi_pool.forward(inputs, params)["output"].reshape(-1))
        monkeypatch.delenv("OPCASE_NO_CC")


def test_deform_roi_pool_runs_compiled_where_it_fits(deform_compiled, monkeypatch):
    """With a compiler, float64 goldens of finite inputs (float16 included) never run numpy's loops, nor do
    those of a NaN roi with an adaptive grid (no samples either way); a NaN output and a float32 golden do."""
    rng = np.random.default_rng(7)
    calls = []
    for module, name in ((deform_roi_pool, "_bin_sums"), (deform_roi_pool_backward, "_numpy_sums")):
        numpy_path = getattr(module, name)
        monkeypatch.setattr(module, name, lambda *a, _f=numpy_path, **kw: calls.append(1) or _f(*a, **kw))
    inputs, params = _deform_case(rng, 0)
    params["sampling_ratio"] = 0
    _, H, W, _ = inputs["input"].shape
    inputs["rois"][:, 1:] = np.array([0, 0, W - 1, H - 1]) / params["spatial_scale"]     # every roi on the map
    for dtype in (np.float16, np.float32, np.float64):
        _deform_goldens({k: v.astype(dtype) for k, v in inputs.items()}, params)
    assert not calls
    for change in ("nan input", "nan roi"):
        changed = {k: v.copy() for k, v in inputs.items()}
        if change == "nan input":
            changed["input"][:] = np.nan
        else:
            changed["rois"][0, 3] = np.nan
        _deform_goldens(changed, params)
        assert len(calls) == (2 if change == "nan input" else 0), change
        calls.clear()
    deform_roi_pool.forward({k: v for k, v in inputs.items() if k != "grad_output"}, params, compute_dtype=np.float32)
    assert calls


# ----------------------------------------------------------------------------- border_align backward

@pytest.fixture
def border_compiled(tmp_path_factory, monkeypatch):
    _fresh_native_cache(tmp_path_factory, monkeypatch, "gen/kernels/border_align/border_align_backward_kernel.c")
    assert border_align._backward_loop() is not None, "cc is on PATH, the C file did not build"


def _border_case(rng, trial: int):
    """A random border_align backward call: maps from 1 x 1 up, channels off the vector widths and both sides
    of pool_size (the loop tables the points only where pool_size < C), boxes inside, on the edges' bands,
    past them, zero-size, inverted and now and then NaN or inf; argmax_idx in range, at the ends, or out of
    it (negative, past pool_size: every element then its own point); special values (NaN, inf, -0,
    subnormals) sprinkled into grad_output; float16/32/64."""
    N, H, W = int(rng.integers(1, 4)), int(rng.integers(1, 9)), int(rng.integers(1, 9))
    K = int(rng.choice([1, 3, H * W, 2 * H * W + 1]))
    C = int(rng.choice([1, 2, 3, 9, 17, 40]))
    pool_size = int(rng.choice([1, 2, 5, 12, 33]))
    dtype = [np.float16, np.float32, np.float64][trial % 3]
    specials = [0, 0, 1, 12][trial % 4]
    corner = rng.uniform(-3, [W + 2, H + 2], (N, K, 2))
    boxes = np.concatenate([corner, corner + rng.uniform(-1, 0.6, (N, K, 2)) * [W, H]], axis=-1)
    boxes[rng.random((N, K, 4)) < 0.1] = rng.choice([-1.0, 0.0, -0.0, 0.5, H - 1.0, float(H), W - 1.0, float(W)])
    if trial % 8 == 5:
        boxes.reshape(-1)[rng.integers(0, boxes.size, 2)] = rng.choice([np.nan, np.inf, -np.inf], 2)
    argmax = rng.integers(0, pool_size, (N, K, 4, C), endpoint=True)
    if trial % 5 == 3:
        argmax = np.where(rng.random(argmax.shape) < 0.5, 0, pool_size)
    if trial % 7 == 6:
        argmax.reshape(-1)[rng.integers(0, argmax.size, 3)] = rng.choice([-2, -1, pool_size + 1, 1000], 3)
    inputs = {"grad_output": _draw(rng, (N, K, 4, C), dtype, specials), "boxes": boxes.astype(dtype),
              "argmax_idx": argmax.astype(np.int32)}
    return inputs, {"pool_size": pool_size}, {"grad_input": (N, H, W, 4 * C)}


@pytest.mark.parametrize("seed", range(3))
def test_border_align_backward_compiled_is_numpy_bit_for_bit(border_compiled, monkeypatch, seed):
    """Random calls (_border_case) with the C loop and with numpy: the same bits; most of them really ran in C
    (an output with a NaN is recomputed by numpy, so the count of C runs is checked too)."""
    rng = np.random.default_rng(300 + seed)
    ran_compiled = 0
    for trial in range(60):
        inputs, params, shapes = _border_case(rng, trial)
        with np.errstate(invalid="ignore"):           # NaN and inf boxes: numpy's path says so
            monkeypatch.setenv("OPCASE_NO_CC", "1")
            reference = border_align.backward(inputs, params, out_shapes=shapes)["grad_input"]
            monkeypatch.delenv("OPCASE_NO_CC")
            grad_input = np.zeros(shapes["grad_input"])
            ran_compiled += border_align._compiled_backward(*inputs.values(), params["pool_size"], grad_input)
            fast = border_align.backward(inputs, params, out_shapes=shapes)["grad_input"]
        assert _same_bits(reference, fast), (trial, params, {n: (a.shape, a.dtype) for n, a in inputs.items()})
    assert ran_compiled >= 30


def test_border_align_backward_runs_compiled_where_it_fits(border_compiled, monkeypatch):
    """With a compiler, a float64 golden (float16 inputs included) never runs numpy's scatter, whichever way
    its points are found (tabled, or per element: pool_size >= C, an index out of range); a NaN output, a
    float32 golden and inputs whose shapes the loop does not take do, and keep numpy's bits and errors."""
    calls = []
    numpy_path = border_align._scatter_backward
    monkeypatch.setattr(border_align, "_scatter_backward", lambda *a: calls.append(1) or numpy_path(*a))
    rng = np.random.default_rng(11)
    shapes = {"grad_input": (2, 4, 5, 4 * 6)}
    inputs = {"grad_output": rng.standard_normal((2, 20, 4, 6)), "boxes": np.tile([0.5, 0.25, 3.5, 2.75], (2, 20, 1)),
              "argmax_idx": rng.integers(0, 4, (2, 20, 4, 6)).astype(np.int32)}
    for dtype in (np.float16, np.float32, np.float64):
        for pool_size in (3, 8):
            floats = {k: v.astype(dtype) if k != "argmax_idx" else v for k, v in inputs.items()}
            border_align.backward(floats, {"pool_size": pool_size}, out_shapes=shapes)
    outside = {**inputs, "argmax_idx": inputs["argmax_idx"].copy()}
    outside["argmax_idx"][0, 0, 0, 0] = -5
    border_align.backward(outside, {"pool_size": 3}, out_shapes=shapes)
    assert not calls
    with_nan = {**inputs, "grad_output": inputs["grad_output"].copy()}
    with_nan["grad_output"][1, 2, 3, 4] = np.nan
    border_align.backward(with_nan, {"pool_size": 3}, out_shapes=shapes)
    border_align.backward(inputs, {"pool_size": 3}, compute_dtype=np.float32, out_shapes=shapes)
    assert len(calls) == 2
    mismatched = {**inputs, "argmax_idx": inputs["argmax_idx"][:, :10]}
    monkeypatch.setenv("OPCASE_NO_CC", "1")
    with pytest.raises(Exception) as numpy_error:
        border_align.backward(mismatched, {"pool_size": 3}, out_shapes=shapes)
    monkeypatch.delenv("OPCASE_NO_CC")
    with pytest.raises(type(numpy_error.value)):
        border_align.backward(mismatched, {"pool_size": 3}, out_shapes=shapes)
    assert len(calls) == 4


# ----------------------------------------------------------------------------- gen/native.py itself

def _source(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "probe.c"
    path.write_text(text)
    return path


def test_native_builds_once_into_a_cache_named_by_the_source(compiled, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    source = _source(tmp_path, "int probe(int x) { return x + 1; }\n")
    library = native.load(source)
    assert library is not None and library.probe(41) == 42
    built = list((tmp_path / "cache" / "opcase" / "native").iterdir())
    name = native.library_path(source).name
    assert sorted(p.name for p in built) == [name, name + ".sha256"]      # no temporary file left behind
    source.write_text("int probe(int x) { return x + 2; }\n")                 # an edited source: a new library
    monkeypatch.setattr(native, "_loaded", {})
    assert native.load(source).probe(41) == 43
    assert len(list((tmp_path / "cache" / "opcase" / "native").iterdir())) == 4


def test_an_edited_header_rebuilds_the_library_that_includes_it(compiled, tmp_path, monkeypatch):
    """A library is named by its source and every header it includes (gen.native.local_headers), so an
    edited header, however deep, is rebuilt, never the stale library loaded."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "step.h").write_text("#define STEP 1\n")
    (tmp_path / "shared" / "outer.h").write_text('#include "step.h"\n')
    source = _source(tmp_path, '#include "shared/outer.h"\nint probe(int x) { return x + STEP; }\n')
    assert native.local_headers(source) == [(tmp_path / "shared" / name).resolve() for name in ("outer.h", "step.h")]
    assert native.load(source).probe(41) == 42
    first = native.library_path(source)
    (tmp_path / "shared" / "step.h").write_text("#define STEP 2\n")       # the source itself unchanged
    monkeypatch.setattr(native, "_loaded", {})
    assert native.library_path(source) != first
    assert native.load(source).probe(41) == 43
    # The project's own: the mmcv emulations that round to half name the shared header.
    header = (REPO / "gen" / "kernels" / "shared" / "mmcv_half.h").resolve()
    for loop in ("three_nn/three_nn_mmcv_kernel.c", "deform_roi_pool/deform_roi_pool_mmcv_kernel.c",
                 "border_align/border_align_backward_mmcv_kernel.c", "carafe/carafe_mmcv_kernel.c"):
        assert native.local_headers(REPO / "gen" / "kernels" / loop) == [header], loop


def test_a_library_planted_in_the_cache_is_rebuilt_not_loaded(compiled, tmp_path, monkeypatch):
    """A backend (or anyone) that replaced a cached library, with or without its record, gets a
    fresh build loaded instead: the planted bytes never run."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    source = _source(tmp_path, "int probe(int x) { return x + 1; }\n")
    assert native.load(source).probe(41) == 42
    target = native.library_path(source)
    (tmp_path / "evil").mkdir()
    planted = _source(tmp_path / "evil", "int probe(int x) { return 0; }\n")
    evil = tmp_path / "evil.so"
    subprocess.run([native.compiler(), *native.FLAGS, "-o", str(evil), str(planted)], check=True)
    for also_record in (False, True):
        shutil.copy(evil, target.with_name("planting"))   # a new file: the loaded library's pages stay intact
        os.replace(target.with_name("planting"), target)
        if also_record:   # a record of its own beside it, writable by others: refused as well
            (target.parent / (target.name + ".sha256")).write_text(hashlib.sha256(evil.read_bytes()).hexdigest())
            os.chmod(target, 0o777)
        monkeypatch.setattr(native, "_loaded", {})
        assert native.load(source).probe(41) == 42
        assert target.read_bytes() != evil.read_bytes()


def test_native_falls_back_silently_and_says_why_on_request(compiled, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    broken = _source(tmp_path, "this is not C\n")
    assert native.load(broken) is None
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(native, "_loaded", {})
    monkeypatch.setenv("OPCASE_NATIVE_DEBUG", "1")
    assert native.load(broken) is None
    assert "probe.c not compiled" in capsys.readouterr().err
    assert not list((tmp_path / "cache" / "opcase" / "native").glob("*.tmp"))

    fine = _source(tmp_path, "int probe(void) { return 1; }\n")
    monkeypatch.setattr(native, "_loaded", {})
    monkeypatch.setattr(native.shutil, "which", lambda name: None)           # no compiler on PATH
    assert native.load(fine) is None
    assert "no C compiler" in capsys.readouterr().err
    monkeypatch.undo()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(native, "_loaded", {})
    monkeypatch.setenv("OPCASE_NO_CC", "1")
    assert native.load(fine) is None and carafe._compiled_forward() is None
    assert carafe._compiled_backward("carafe_grad_mask_rows", (4, 4, 8), 1, np.float64) is None


def test_address_is_the_arrays_own_data_pointer():
    """native.address gives what array.ctypes.data gives, by either of its ways: writable, read-only,
    a view at an offset, non-contiguous, empty."""
    base = np.arange(24, dtype=np.float64).reshape(4, 6)
    frozen = base.copy()
    frozen.flags.writeable = False
    arrays = [base, frozen, base[1:], base[:, 1:], base[:, ::2], np.empty(0), np.frombuffer(bytes(16), np.float32)]
    for array in arrays:
        assert native.address(array) == array.ctypes.data
