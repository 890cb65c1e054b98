"""What the deform_roi_pool records' slow oracles share: the bins of one roi as mmcv's kernels lay
them out, one at a time, in plain float64 arithmetic."""
from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Bin:
    ph: int
    pw: int
    y0: float          # the bin's start, moved by gamma * roi size * offset where there is one
    x0: float
    bin_h: float
    bin_w: float
    grid_h: int        # samples along each axis: sampling_ratio, or ceil(bin size) when it is 0
    grid_w: int
    roi_h: float
    roi_w: float

    def samples(self):
        """(iy, ix, y, x) of each sample point of the bin, row by row."""
        for iy in range(self.grid_h):
            y = self.y0 + (iy + 0.5) * self.bin_h / self.grid_h
            for ix in range(self.grid_w):
                yield iy, ix, y, self.x0 + (ix + 0.5) * self.bin_w / self.grid_w


def roi_bins(roi, offset_of_roi, params):
    """Every bin of one roi (batch, x1, y1, x2, y2); ``offset_of_roi`` is offset[r] or None."""
    PH, PW = int(params["pooled_height"]), int(params["pooled_width"])
    scale, ratio, gamma = float(params["spatial_scale"]), int(params["sampling_ratio"]), float(params["gamma"])
    _, x1, y1, x2, y2 = (float(v) for v in roi)
    start_w, start_h = x1 * scale - 0.5, y1 * scale - 0.5
    roi_w, roi_h = (x2 * scale - 0.5) - start_w, (y2 * scale - 0.5) - start_h
    bin_h, bin_w = roi_h / PH, roi_w / PW
    grid_h = ratio if ratio > 0 else math.ceil(roi_h / PH)
    grid_w = ratio if ratio > 0 else math.ceil(roi_w / PW)
    for ph in range(PH):
        for pw in range(PW):
            sh, sw = start_h, start_w
            if offset_of_roi is not None:
                sw += gamma * roi_w * float(offset_of_roi[0, ph, pw])
                sh += gamma * roi_h * float(offset_of_roi[1, ph, pw])
            yield Bin(ph, pw, sh + ph * bin_h, sw + pw * bin_w, bin_h, bin_w, grid_h, grid_w, roi_h, roi_w)
