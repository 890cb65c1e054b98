"""deform_roi_pool_forward: an independent copy of the kernel, one bin at a time (written from
the kernel's formulas, not from the reference), with knobs that plant one realistic bug each."""
from __future__ import annotations

import numpy as np

from gen.kernels.shared.planted_bilinear import bilinear_corners
from gen.kernels.shared.planted_fast_path import fast_path, on_inputs
from gen.kernels.shared.planted_counts import counted_in_uint16


def bin_samples(rois, offset, PH, PW, scale, ratio, gamma, *, half=0.5, rounding=np.ceil, offset_unit="roi",
                offset_xy=(0, 1)):
    """The doc's bins, one at a time: (r, batch, ph, pw, y, x, roi_w, roi_h) per bin of each roi, y and x
    its sample points [grid_h, grid_w] (empty where the adaptive grid is 0).

    The geometry's bug knobs: half 0 drops the -0.5; rounding np.floor for the adaptive grid;
    offset_unit "bin" scales the shift by the bin size; offset_xy (1, 0) reads channel 1 for x.
    """
    for r, (batch, x1, y1, x2, y2) in enumerate(rois.astype(np.float64)):
        start_w, start_h = x1 * scale - half, y1 * scale - half
        roi_w, roi_h = (x2 * scale - half) - start_w, (y2 * scale - half) - start_h
        bin_h, bin_w = roi_h / PH, roi_w / PW
        grid_h = ratio if ratio > 0 else max(int(rounding(roi_h / PH)), 0)
        grid_w = ratio if ratio > 0 else max(int(rounding(roi_w / PW)), 0)
        iy = (np.arange(grid_h) + 0.5)[:, None] * bin_h / max(grid_h, 1)
        ix = (np.arange(grid_w) + 0.5)[None, :] * bin_w / max(grid_w, 1)
        unit_w, unit_h = (roi_w, roi_h) if offset_unit == "roi" else (bin_w, bin_h)
        for ph in range(PH):
            for pw in range(PW):
                sh, sw = start_h, start_w
                if offset is not None:
                    sw += gamma * unit_w * float(offset[r, offset_xy[0], ph, pw])
                    sh += gamma * unit_h * float(offset[r, offset_xy[1], ph, pw])
                y = np.broadcast_to(sh + ph * bin_h + iy, (grid_h, grid_w))
                x = np.broadcast_to(sw + pw * bin_w + ix, (grid_h, grid_w))
                yield r, int(batch), ph, pw, y, x, roi_w, roi_h


# Sampled values gathered at once by deform_roi_pool (rois are taken in chunks of about this many).
_GATHER_ELEMENTS = 1 << 22


def deform_roi_pool(features, rois, offset, PH, PW, scale, ratio, gamma, *, align=True, grid_round="ceil",
                    zero_beyond_last=False, offset_unit="roi", offset_xy=(0, 1)):
    """deform_roi_pool_forward, bin by bin: bin_samples' geometry with each bin's samples summed on
    their own, computed for many rois at once (a count case has 65537 of them).

    Bugs: align False drops the -0.5; grid_round "floor" for sampling_ratio 0;
    zero_beyond_last (see bilinear_corners); offset_unit "bin" scales the shift by the bin
    size; offset_xy (1, 0) takes channel 1 for x and channel 0 for y.
    """
    B, H, W, C = features.shape
    R = rois.shape[0]
    out = np.zeros((R, PH, PW, C))
    if out.size == 0 or H == 0 or W == 0:
        return out
    features = features.astype(np.float64)
    half, rounding = (0.5 if align else 0.0), (np.ceil if grid_round == "ceil" else np.floor)
    rois = rois.astype(np.float64)
    start_w, start_h = rois[:, 1] * scale - half, rois[:, 2] * scale - half
    roi_w, roi_h = (rois[:, 3] * scale - half) - start_w, (rois[:, 4] * scale - half) - start_h
    bin_h, bin_w = roi_h / PH, roi_w / PW
    grids = np.stack([_grid(roi_h / PH, ratio, rounding), _grid(roi_w / PW, ratio, rounding)], axis=1)
    unit_w, unit_h = (roi_w, roi_h) if offset_unit == "roi" else (bin_w, bin_h)
    sw = np.broadcast_to(start_w[:, None, None], (R, PH, PW))
    sh = np.broadcast_to(start_h[:, None, None], (R, PH, PW))
    if offset is not None:
        shift = offset.astype(np.float64)
        sw = sw + (gamma * unit_w)[:, None, None] * shift[:, offset_xy[0]]
        sh = sh + (gamma * unit_h)[:, None, None] * shift[:, offset_xy[1]]
    sh = sh + np.arange(PH)[None, :, None] * bin_h[:, None, None]
    sw = sw + np.arange(PW)[None, None, :] * bin_w[:, None, None]
    for grid_h, grid_w in {tuple(g) for g in grids.tolist()}:
        if grid_h * grid_w == 0:
            continue   # no sample: the bin stays 0
        chosen = np.flatnonzero((grids[:, 0] == grid_h) & (grids[:, 1] == grid_w))
        step = max(1, _GATHER_ELEMENTS // (PH * PW * 4 * grid_h * grid_w * C))
        for part in np.array_split(chosen, range(step, len(chosen), step)):
            iy = (np.arange(grid_h) + 0.5)[None, :, None] * bin_h[part, None, None] / grid_h
            ix = (np.arange(grid_w) + 0.5)[None, None, :] * bin_w[part, None, None] / grid_w
            y = sh[part][..., None, None] + iy[:, None, None]          # [r, PH, PW, grid_h, grid_w]
            x = sw[part][..., None, None] + ix[:, None, None]
            rows, cols, weights = bilinear_corners(y, x, H, W, zero_beyond_last=zero_beyond_last)
            batch = rois[part, 0].astype(int)[None, :, None, None, None, None]
            values = features[batch, rows, cols] * weights[..., None]   # [4, r, PH, PW, grid_h, grid_w, C]
            # Each bin's samples summed as one [4, grid_h, grid_w, C] block, as a bin alone would be.
            values = np.ascontiguousarray(np.moveaxis(values, 0, 3))
            out[part] = values.sum(axis=(3, 4, 5)) / (grid_h * grid_w)
    return out


def _grid(size_per_bin, ratio, rounding):
    """Each roi's adaptive grid along one axis (the sampling ratio where it is over 0)."""
    if ratio > 0:
        return np.full(size_per_bin.shape, ratio, dtype=np.int64)
    return np.maximum(rounding(size_per_bin), 0).astype(np.int64)


def deform_roi_pool_compute(**bug):
    def compute(request):
        p = request.params
        i = request.inputs
        out = deform_roi_pool(i["input"], i["rois"], i.get("offset"), int(p["pooled_height"]),
                              int(p["pooled_width"]), float(p["spatial_scale"]), int(p["sampling_ratio"]),
                              float(p["gamma"]), **bug)
        return {"output": out}
    return compute


CORRECT = {"deform_roi_pool_forward": deform_roi_pool_compute()}


def _one_sample_per_roi(request) -> bool:
    p = request.params
    return int(p["pooled_height"]) == int(p["pooled_width"]) == int(p["sampling_ratio"]) == 1


def one_sample_skips_offset(general):
    """A 1x1 pool with one sample is a point read per roi: the fast path reads it at the roi's
    centre, leaving the offset out (right only where offsets or gamma are 0)."""
    return fast_path(general, on_inputs(general, lambda request: {"offset": None}), _one_sample_per_roi)

PLANTED = {
    "deform_roi_pool_forward": {
        "no_half_pixel_alignment": deform_roi_pool_compute(align=False),
        "adaptive_grid_floor": deform_roi_pool_compute(grid_round="floor"),
        "zero_beyond_H_minus_1": deform_roi_pool_compute(zero_beyond_last=True),
        "offset_times_bin_size": deform_roi_pool_compute(offset_unit="bin"),
        "offset_xy_swapped": deform_roi_pool_compute(offset_xy=(1, 0)),
        "one_sample_skips_offset": one_sample_skips_offset(deform_roi_pool_compute()),
        # R rois counted in 16 bits: only the first R mod 2^16 rois are pooled.
        "counts_in_uint16": counted_in_uint16(deform_roi_pool_compute(), {"rois": 0, "offset": 0}, {"output": 0}),
    },
}
