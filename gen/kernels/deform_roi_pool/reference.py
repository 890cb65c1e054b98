"""deform_roi_pool forward (design doc 002; README.md beside this file).

Per roi (batch, x1, y1, x2, y2) and bin (ph, pw):
    start = corner * spatial_scale - 0.5,  roi = end - start,  bin = roi / pooled
    grid  = sampling_ratio if > 0 else ceil(roi / pooled)         (may be 0: no samples)
    start += gamma * roi * offset[r, 0 (x) / 1 (y), ph, pw]       (with an offset)
    y = start_h + ph*bin_h + (iy + 0.5)*bin_h / grid_h            (x likewise)
    output = sum of bilinear samples / max(grid_h*grid_w, 1)
The number of samples varies per roi, so all samples of all bins are laid out in one
flat sequence (bin by bin), cut into chunks of _CHUNK_ELEMENTS // (4 C) samples.  A bin's
sum is, chunk by chunk, the sum of its run of samples in that chunk as np.add.reduceat adds
them (the first sample plus numpy's pairwise sum of the rest), added to the bin's total:
the goldens' order of additions, which a faster route must keep.  The runs are evaluated
grouped by length, many runs of one length at once in cache-sized batches, with
_first_plus_pairwise doing numpy's pairwise sum in the same order over whole arrays.

Where a C compiler is at hand (gen.native), the float64 golden runs as a compiled loop instead
(deform_roi_pool_kernel.c, shared with the backward): the same operations in the same order,
the same bits, several times faster; numpy's path runs where there is none and recomputes an
output the loop made NaN (which NaN comes out is numpy's choice).
"""
from __future__ import annotations

import ctypes
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gen import native
from gen.kernels.shared.reference import check_sample_points
from gen.kernels.shared.bilinear import bilinear_corners
from gen.values import portable_exp

# The chunks the samples are summed in (see the module doc): _CHUNK_ELEMENTS // (4 C) samples each.
_CHUNK_ELEMENTS = 1 << 21
# Elements of one batch of sample values [samples, C] evaluated at once: small enough to stay in cache.
_BATCH_ELEMENTS = 1 << 16
# numpy's pairwise summation (numpy/_core/src/umath/loops_utils.h.src): blocks of up to 128
# elements are added with 8 interleaved accumulators; longer runs are halved at a multiple of 8.
_PAIRWISE_BLOCK = 128


@dataclass
class Bins:
    """The sampling grid of every bin, flattened in (roi, ph, pw) order."""
    batch: np.ndarray     # image of each bin's roi
    y0: np.ndarray        # start_h + ph*bin_h (offset included)
    x0: np.ndarray
    bin_h: np.ndarray
    bin_w: np.ndarray
    grid_h: np.ndarray    # samples per axis, int64 >= 0
    grid_w: np.ndarray

    samples: np.ndarray = None   # grid_h * grid_w
    ends: np.ndarray = None      # cumulative samples: bin b's samples are ends[b] - samples[b] .. ends[b] - 1

    def __post_init__(self):
        self.samples = self.grid_h * self.grid_w
        self.ends = np.cumsum(self.samples)


def bin_geometry(rois, offset, params, dtype) -> Bins:
    PH, PW = int(params["pooled_height"]), int(params["pooled_width"])
    sampling_ratio = int(params["sampling_ratio"])
    scale, gamma, half = dtype(params["spatial_scale"]), dtype(params["gamma"]), dtype(0.5)
    rois = np.asarray(rois).astype(dtype)
    R = rois.shape[0]
    start_w, start_h = rois[:, 1] * scale - half, rois[:, 2] * scale - half
    roi_w = (rois[:, 3] * scale - half) - start_w
    roi_h = (rois[:, 4] * scale - half) - start_h
    bin_h, bin_w = roi_h / dtype(PH), roi_w / dtype(PW)
    if sampling_ratio > 0:
        check_sample_points("deform_roi_pool", float(R) * PH * PW * float(sampling_ratio) ** 2)
        grid_h = np.full(R, sampling_ratio, dtype=np.int64)
        grid_w = grid_h.copy()
    else:
        # ceil(roi/pooled) is negative for an inverted roi: no samples, like an empty loop.  A NaN
        # roi's grid is 0 too (fmax drops the NaN), as CUDA's float-to-int conversion makes NaN 0;
        # left to numpy's cast it would be INT64_MIN, a negative sample count.
        grid_h = np.fmax(np.ceil(roi_h / dtype(PH)), 0)
        grid_w = np.fmax(np.ceil(roi_w / dtype(PW)), 0)
        # Counted in float64 before the int64 cast (a roi of 1e30 pixels would wrap).
        check_sample_points("deform_roi_pool", float(np.nansum(grid_h.astype(np.float64) * grid_w)) * PH * PW)
        grid_h, grid_w = grid_h.astype(np.int64), grid_w.astype(np.int64)
    start_h = np.broadcast_to(start_h[:, None, None], (R, PH, PW))
    start_w = np.broadcast_to(start_w[:, None, None], (R, PH, PW))
    if offset is not None:
        offset = np.asarray(offset).astype(dtype)
        start_w = start_w + (gamma * roi_w)[:, None, None] * offset[:, 0]
        start_h = start_h + (gamma * roi_h)[:, None, None] * offset[:, 1]
    ph = np.arange(PH, dtype=dtype)[None, :, None]
    pw = np.arange(PW, dtype=dtype)[None, None, :]

    def per_bin(per_roi):
        return np.broadcast_to(per_roi[:, None, None], (R, PH, PW)).reshape(-1)

    return Bins(batch=per_bin(rois[:, 0].astype(np.int64)),
                 y0=(start_h + ph * bin_h[:, None, None]).reshape(-1),
                 x0=(start_w + pw * bin_w[:, None, None]).reshape(-1),
                 bin_h=per_bin(bin_h), bin_w=per_bin(bin_w),
                 grid_h=per_bin(grid_h), grid_w=per_bin(grid_w))


def samples_per_chunk(channels: int) -> int:
    return max(1, _CHUNK_ELEMENTS // (4 * max(channels, 1)))


def sample_points(bins: Bins, sample: np.ndarray, dtype):
    """(bin_of, y, x) of the samples numbered ``sample`` in the flat sequence (bin by bin), unclamped."""
    counts = bins.samples
    ends = bins.ends
    bin_of = np.searchsorted(ends, sample, side="right")
    iy, ix = np.divmod(sample - (ends[bin_of] - counts[bin_of]), bins.grid_w[bin_of])
    y = bins.y0[bin_of] + ((iy.astype(dtype) + dtype(0.5)) * bins.bin_h[bin_of]) / bins.grid_h[bin_of].astype(dtype)
    x = bins.x0[bin_of] + ((ix.astype(dtype) + dtype(0.5)) * bins.bin_w[bin_of]) / bins.grid_w[bin_of].astype(dtype)
    return bin_of, y, x


def sample_batches(bins: Bins, step: int):
    """Consecutive ranges (first, last + 1) of the flat sample sequence, ``step`` samples each."""
    total = int(bins.ends[-1]) if bins.ends.size else 0
    for first in range(0, total, step):
        yield first, min(total, first + step)


@dataclass
class Runs:
    """Each bin's samples within one chunk: bin, first sample, length, and which of its bin's runs it is."""
    bin: np.ndarray
    start: np.ndarray
    length: np.ndarray
    rank: np.ndarray


def chunk_runs(bins: Bins, channels: int) -> Runs:
    counts, ends = bins.samples, bins.ends
    total = int(ends[-1]) if ends.size else 0
    bin_starts = (ends - counts)[counts > 0]
    chunk_starts = np.arange(0, total, samples_per_chunk(channels))
    start = np.union1d(bin_starts, chunk_starts)
    length = np.diff(np.append(start, total))
    bin_of = np.searchsorted(ends, start, side="right")
    first_of_bin = np.searchsorted(start, (ends - counts)[bin_of])
    return Runs(bin=bin_of, start=start, length=length, rank=np.arange(start.size) - first_of_bin)


def _sample_values(pixels: np.ndarray, bins: Bins, sample: np.ndarray, H: int, W: int, dtype) -> np.ndarray:
    """[samples, C]: the bilinear sample of each sample point, its four weighted corners added in order."""
    bin_of, y, x = sample_points(bins, sample, dtype)
    rows, cols, weights, _ = bilinear_corners(y, x, H, W)
    index = (bins.batch[bin_of] * H + rows) * W + cols                                  # [4, S]
    # Gather in the input's dtype, convert, then weigh: faster than a mixed-dtype multiply, the same bits.
    value = np.empty((sample.size, pixels.shape[1]), dtype=dtype)
    term = np.empty_like(value)
    for corner in range(4):
        target = value if corner == 0 else term
        np.copyto(target, pixels.take(index[corner], axis=0), casting="unsafe")
        target *= weights[corner][:, None]
        if corner:
            value += term
    return value


def _first_plus_pairwise(values: np.ndarray) -> np.ndarray:
    """[p, C] from [p, m, C]: np.add.reduceat's sum of each run of m rows, values[:, 0] + the pairwise sum of the rest."""
    if values.shape[1] == 1:
        return values[:, 0].copy()
    return values[:, 0] + _pairwise_sum(values[:, 1:])


def _pairwise_sum(values: np.ndarray) -> np.ndarray:
    """[p, C] from [p, n, C]: numpy's pairwise sum along axis 1, operation for operation."""
    n = values.shape[1]
    if n > _PAIRWISE_BLOCK:
        half = n // 2
        half -= half % 8
        return _pairwise_sum(values[:, :half]) + _pairwise_sum(values[:, half:])
    if n < 8:
        # numpy starts from -0.0, and -0.0 + v is v bit for bit.
        total = values[:, 0].copy()
        for i in range(1, n):
            total += values[:, i]
        return total
    partial = values[:, :8].copy()
    whole = n - n % 8
    for i in range(8, whole, 8):
        partial += values[:, i:i + 8]
    r = [partial[:, j] for j in range(8)]
    total = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
    for i in range(whole, n):
        total += values[:, i]
    return total


def _bin_sums(features: np.ndarray, bins: Bins, dtype) -> np.ndarray:
    """[bins, C]: the sum of each bin's bilinear samples."""
    _, H, W, C = features.shape
    pixels = features.reshape(-1, C)
    sums = np.zeros((bins.samples.size, C), dtype=dtype)
    runs = chunk_runs(bins, C)
    later = []                     # runs that continue a bin from an earlier chunk: added after its first run
    for length in np.unique(runs.length):
        of_length = np.flatnonzero(runs.length == length)
        per_batch = max(1, _BATCH_ELEMENTS // (int(length) * C))
        for first in range(0, of_length.size, per_batch):
            batch = of_length[first:first + per_batch]
            sample = (runs.start[batch][:, None] + np.arange(length)).reshape(-1)
            run_sums = _first_plus_pairwise(_sample_values(pixels, bins, sample, H, W, dtype).reshape(batch.size, length, C))
            leading = runs.rank[batch] == 0
            sums[runs.bin[batch[leading]]] += run_sums[leading]
            later += [(runs.rank[r], runs.bin[r], run_sums[i]) for i, r in enumerate(batch) if not leading[i]]
    for _, bin_index, run_sum in sorted(later, key=lambda item: item[0]):
        sums[bin_index] += run_sum
    return sums


# ----------------------------------------------------------------------------- the compiled loops

_KERNEL_SOURCE = Path(__file__).with_name("deform_roi_pool_kernel.c")
# Doubles of the C forward's scratch beyond its run rows: the run's sum, 8 accumulator rows and one
# row per level of halving in the pairwise sum (a run of at most 2**21 samples halves < 20 times).
_SCRATCH_ROWS = 1 + 8 + 64


def compiled_loop(name: str, features: np.ndarray, bins: Bins, dtype):
    """(the C function deform_roi_pool_<name> for this input dtype, the input's pixel rows it reads,
    the per-bin arguments) or None where the numpy path must run: no compiler, a golden not in float64,
    an input dtype it has no loop for, or bins numpy's path handles its own way (a negative grid, an
    image index outside the batch)."""
    if dtype is not np.float64 or features.dtype not in (np.float16, np.float32, np.float64):
        return None
    counts = bins.samples
    sampled = counts > 0
    if (bins.grid_h < 0).any() or (bins.grid_w < 0).any() or (counts < 0).any():
        return None
    if ((bins.batch[sampled] < 0) | (bins.batch[sampled] >= features.shape[0])).any():
        return None
    library = native.load(_KERNEL_SOURCE)
    if library is None:
        return None
    function = getattr(library, f"deform_roi_pool_{name}_f{features.dtype.itemsize * 8}")
    function.restype = ctypes.c_int
    pixels = np.ascontiguousarray(features).reshape(-1, features.shape[-1])
    integers = (bins.batch, bins.grid_h, bins.grid_w, bins.ends - counts)     # - counts: each bin's first sample
    per_bin = [np.ascontiguousarray(a, dtype=np.int64) for a in integers]
    per_bin += [np.ascontiguousarray(a, dtype=np.float64) for a in (bins.y0, bins.x0, bins.bin_h, bins.bin_w)]
    return function, pixels, per_bin


def pointer(array: np.ndarray) -> ctypes.c_void_p:
    """The array's address as a pointer argument (these loops are called without argtypes: a bare int would
    pass as a 32-bit int)."""
    return ctypes.c_void_p(native.address(array))


def _compiled_bin_sums(features: np.ndarray, bins: Bins, dtype) -> np.ndarray | None:
    """_bin_sums by the C loop, or None where numpy's path must run (see compiled_loop; a NaN sum)."""
    loop = compiled_loop("sums", features, bins, dtype)
    if loop is None:
        return None
    function, pixels, per_bin = loop
    _, H, W, C = features.shape
    step = samples_per_chunk(C)
    max_run = min(step, int(bins.samples.max()))
    sums = np.zeros((bins.samples.size, C), dtype=np.float64)
    work = np.empty((max_run + _SCRATCH_ROWS) * C, dtype=np.float64)
    function(pointer(pixels), ctypes.c_long(H), ctypes.c_long(W), ctypes.c_long(C), ctypes.c_long(bins.samples.size),
             *map(pointer, per_bin), ctypes.c_long(step), pointer(sums), pointer(work), ctypes.c_long(max_run))
    return None if has_nan(sums) else sums


def has_nan(array: np.ndarray) -> bool:
    # min propagates a NaN: one pass, no temporary as large as the array.
    return array.size > 0 and bool(np.isnan(array.min()))


def forward(inputs, params, compute_dtype=np.float64, out_shapes=None):
    features, rois, offset = inputs["input"], inputs["rois"], inputs.get("offset")
    PH, PW = int(params["pooled_height"]), int(params["pooled_width"])
    dtype = np.dtype(compute_dtype).type
    _, H, W, C = features.shape
    output = np.zeros((rois.shape[0], PH, PW, C), dtype=dtype)
    # An empty map has nothing to sample (doc 3.8: zero H or W still succeeds).
    if output.size == 0 or H == 0 or W == 0:
        return {"output": output}
    bins = bin_geometry(rois, offset, params, dtype)
    sums = _compiled_bin_sums(features, bins, dtype)
    if sums is None:
        sums = _bin_sums(features, bins, dtype)
    sums /= np.maximum(bins.samples, 1).astype(dtype)[:, None]
    return {"output": sums.reshape(output.shape)}


# ----------------------------------------------------------------------------- value generators

def _fpn_side_range(spatial_scale: float) -> tuple[float, float]:
    """Roi sides (sqrt of the area, image pixels) that mmdet's map_roi_levels sends to the
    FPN level of this spatial_scale: level l = log2(1/scale) - 2 takes [56*2^l, 56*2^(l+1)),
    level 0 everything below 112 and level 3 everything above 448."""
    level = int(np.clip(round(np.log2(1.0 / spatial_scale)) - 2, 0, 3))
    low = 16.0 if level == 0 else 56.0 * 2 ** level
    high = 56.0 * 2 ** (level + 1) if level < 3 else np.inf
    return low, high


def _log_uniform(rng, low, high, size):
    # math.log of two scalars and portable_exp: the same bits on every machine.
    return portable_exp(rng.uniform(math.log(low), math.log(high), size=size))


# Each roi mode draws R boxes (x1, y1, x2, y2) in feature cells, measured like
# start = corner*scale - 0.5: the image spans [-0.5, size - 0.5] cells.

def _proposal_cells(rng, R, H, W, scale):
    low, high = _fpn_side_range(scale)
    high = min(high, max(H, W) / scale)
    low = min(low, high / 2)
    side = _log_uniform(rng, low, high, R) * scale
    ratio = _log_uniform(rng, 1 / 3, 3, R)
    w, h = side * np.sqrt(ratio), side / np.sqrt(ratio)
    cx, cy = rng.uniform(0, W, R), rng.uniform(0, H, R)
    box = np.column_stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2])
    return np.clip(box, -0.5, np.array([W, H, W, H]) - 0.5)          # proposals are clipped to the image


def _large_cells(rng, R, H, W, scale):
    w, h = rng.uniform(0.5, 1.5, R) * W, rng.uniform(0.5, 1.5, R) * H
    cx, cy = rng.uniform(0.3, 0.7, R) * W, rng.uniform(0.3, 0.7, R) * H
    return np.column_stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2])


def _edge_cells(rng, R, H, W, scale):
    box = np.column_stack([rng.uniform(0, W / 2, R), rng.uniform(0, H / 2, R),
                           rng.uniform(W / 2, W, R), rng.uniform(H / 2, H, R)]) - 0.5
    on_edge = rng.random((R, 4)) < 0.5           # each coordinate exactly on its image edge half of the time
    return np.where(on_edge, np.array([-0.5, -0.5, W - 0.5, H - 0.5]), box)


def _degenerate_cells(rng, R, H, W, scale):
    x1, y1 = rng.uniform(-0.5, W - 0.5, R), rng.uniform(-0.5, H - 0.5, R)
    w, h = rng.uniform(1, max(2.0, W / 2), R), rng.uniform(1, max(2.0, H / 2), R)
    kind = rng.integers(0, 4, R)                 # 0: zero width, 1: zero height, 2: both, 3: inverted
    w = np.where((kind == 0) | (kind == 2), 0.0, np.where(kind == 3, -w, w))
    h = np.where((kind == 1) | (kind == 2), 0.0, np.where(kind == 3, -h, h))
    return np.column_stack([x1, y1, x1 + w, y1 + h])


def _edge_relative_cells(rng, R, H, W, outside: bool):
    """Boxes of up to half the map placed against one edge along x or y: beyond it by more
    than one cell (outside) or straddling it (across)."""
    w, h = rng.uniform(1, max(2.0, W / 2), R), rng.uniform(1, max(2.0, H / 2), R)
    box = np.column_stack([rng.uniform(-0.5, W - 0.5, R), rng.uniform(-0.5, H - 0.5, R), w, h])
    box[:, 2:] += box[:, :2]
    axis = rng.integers(0, 2, R)                 # 0: x, 1: y
    far_side = rng.random(R) < 0.5
    size, length = np.where(axis == 0, W, H), np.where(axis == 0, w, h)
    if outside:
        gap = rng.uniform(2, 4, R)
        low = np.where(far_side, size + gap, -gap - length)
    else:
        edge = np.where(far_side, size - 0.5, -0.5)
        low = edge - length * rng.uniform(0.25, 0.75, R)
    rows = np.arange(R)
    box[rows, axis] = low
    box[rows, axis + 2] = low + length
    return box


_ROI_CELLS = {
    "proposals": _proposal_cells,
    "large": _large_cells,
    "edge": _edge_cells,
    "degenerate": _degenerate_cells,
    "outside": lambda rng, R, H, W, scale: _edge_relative_cells(rng, R, H, W, outside=True),
    "across": lambda rng, R, H, W, scale: _edge_relative_cells(rng, R, H, W, outside=False),
    "same_place": lambda rng, R, H, W, scale: np.repeat(_proposal_cells(rng, 1, H, W, scale), R, axis=0),
}


def proposals(rng: np.random.Generator, ctx, mode: str = "proposals"):
    """rois [R, 5] = (batch, x1, y1, x2, y2) in image coordinates (feature size / spatial_scale).

    Batch indices are sorted, as mmdet's bbox2roi concatenates the images' rois.  Modes:
    - proposals:  detection proposals clipped to the image, sides in the band that FPN
                  level assignment sends to this spatial_scale (bounded by the image),
                  aspect ratios in [1/3, 3];
    - outside:    every roi more than two cells beyond one edge of the map (all samples 0);
    - across:     rois straddling an edge of the map;
    - edge:       roi corners exactly on the image edges (x1 = 0, x2 = image width, ...),
                  so samples land in the [-1, 0) and (size-1, size] bands;
    - degenerate: zero-width and/or zero-height rois, and inverted ones (x2 < x1);
    - large:      rois from half to 1.5 times the image: big adaptive sampling grids;
    - same_place: one proposal, R times, in one image: every roi reads the same pixels.
    """
    if mode not in _ROI_CELLS:
        raise ValueError(f"proposals: mode must be one of {sorted(_ROI_CELLS)}, got {mode!r}")
    R = int(ctx.shapes["rois"][0])
    B, H, W, _ = ctx.shapes["input"]
    scale = float(ctx.params["spatial_scale"])
    batch = np.sort(rng.integers(0, max(int(B), 1), size=R))
    if mode == "same_place":
        batch[:] = batch[-1]
    cells = _ROI_CELLS[mode](rng, R, float(H), float(W), scale)
    return np.column_stack([batch, (cells + 0.5) / scale])


def offsets(rng: np.random.Generator, ctx, mode: str = "learned", std: float = 0.1):
    """offset [R, 2, PH, PW] (channel 0 shifts x, channel 1 shifts y, in units of gamma * roi size).

    - learned: N(0, std), small like the output of the trained offset fc layer;
    - off_map: as learned, but about half the bins get the shift that moves all their
      samples more than one cell past an edge of the map along x or y (needs the rois).
    """
    shape = tuple(ctx.shapes["offset"])
    learned = rng.normal(0.0, float(std), size=shape)
    if mode == "learned" or learned.size == 0:
        return learned
    if mode != "off_map":
        raise ValueError(f"offsets: mode must be learned or off_map, got {mode!r}")
    rois = np.asarray(ctx.inputs["rois"], dtype=np.float64)
    _, H, W, _ = ctx.shapes["input"]
    scale, gamma = float(ctx.params["spatial_scale"]), float(ctx.params["gamma"])
    R, _, PH, PW = shape
    roi_size = np.stack([rois[:, 3] - rois[:, 1], rois[:, 4] - rois[:, 2]], axis=1) * scale   # [R, 2] cells
    axis = rng.integers(0, 2, size=(R, PH, PW))
    direction = np.where(rng.random((R, PH, PW)) < 0.5, -1.0, 1.0)
    length = np.where(axis == 0, roi_size[:, 0, None, None], roi_size[:, 1, None, None])
    map_size = np.where(axis == 0, W, H)
    # Samples of a roi inside the image lie in [-0.5, size-0.5]; this shift takes them past [-1, size].
    shift = direction * (map_size + 2 + np.abs(length))
    with np.errstate(divide="ignore", invalid="ignore"):
        push = shift / (gamma * length)
    pushed = (rng.random((R, PH, PW)) < 0.5) & np.isfinite(push) & (np.abs(push) <= 1000)
    result = learned.copy()
    r, ph, pw = np.nonzero(pushed)
    result[r, axis[pushed], ph, pw] = push[pushed]
    return result
