"""Independent, slow-ish copies of the four accumulating kernels, each with knobs that plant
one realistic bug (tests/test_planted_bugs_accumulating.py).

Written from OPS.md, not from gen/ops: loops over taps, bins and borders, numpy inside.
With every knob at its default a copy computes the correct result in float64; the
`compute(request)` functions return {output: array} for conftest.checked_backend, either
in float64 (rounded to the output dtype there) or already in the output dtype (the
rounding bugs, which must do their own rounding).
"""
from __future__ import annotations

import numpy as np


# ----------------------------------------------------------------------------- rounding

def round_toward_zero(a64: np.ndarray, dtype) -> np.ndarray:
    """a64 rounded to `dtype` by truncation (toward zero) instead of to nearest."""
    a64 = np.asarray(a64, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        nearest = a64.astype(dtype)                                   # past the largest value: inf
        away = np.abs(nearest.astype(np.float64)) > np.abs(a64)      # false for NaN and for exact inf
    return np.where(away, np.nextafter(nearest, np.zeros_like(nearest)), nearest).astype(dtype)


def _out_dtype(request, name):
    return np.dtype(request.outputs[name].dtype)


# ----------------------------------------------------------------------------- carafe

def _carafe_params(p):
    return int(p["kernel_size"]), int(p["group_size"]), int(p["scale_factor"])


def _tap_rows(size_out: int, s: int, r: int, t: int, size_in: int):
    """Source rows (or columns) of tap t for every output row, clipped, and whether each is inside."""
    src = np.arange(size_out) // s - r + t
    return np.clip(src, 0, max(size_in - 1, 0)), (src >= 0) & (src < size_in)


def carafe_forward(x, mask, k, G, s, *, mask_order="hw", group_of="div", padding="zero", acc=np.float64):
    """output[n,ho,wo,c] = sum_{kh,kw} x[n, ho//s-r+kh, wo//s-r+kw, c] * mask[n,ho,wo,(g*k+kh)*k+kw].

    Bugs: mask_order "wh" reads channel (g*k+kw)*k+kh; group_of "mod" takes g = c % G;
    padding "clamp" reads the nearest edge pixel for taps outside the map; acc float16
    multiplies and accumulates in half.
    """
    N, H, W, C = x.shape
    sH, sW = s * H, s * W
    out = np.zeros((N, sH, sW, C), dtype=acc)
    if out.size == 0 or mask.size == 0:
        return out
    r, Cg = (k - 1) // 2, C // G
    g = np.arange(C) // Cg if group_of == "div" else np.arange(C) % G
    m = mask.reshape(N, sH, sW, G, k, k)
    if mask_order == "wh":
        m = m.swapaxes(-1, -2)
    x, m = x.astype(acc), m.astype(acc)
    with np.errstate(invalid="ignore", over="ignore"):
        for kh in range(k):
            rows, row_in = _tap_rows(sH, s, r, kh, H)
            for kw in range(k):
                cols, col_in = _tap_rows(sW, s, r, kw, W)
                inside = row_in[:, None] & col_in[None, :]                  # [sH, sW]
                if padding == "zero" and not inside.any():
                    continue
                term = x[:, rows][:, :, cols] * m[:, :, :, g, kh, kw]       # [N, sH, sW, C]
                if padding == "zero":
                    term = np.where(inside[None, :, :, None], term, acc(0))
                out += term
    return out


def carafe_backward(x, mask, grad_out, k, G, s, *, grad_mask_group_sum=True, mask_at_input=False):
    """grad_input[n,iy,ix,c] += mask[n,ho,wo,mc] * grad_out[n,ho,wo,c];
    grad_mask[n,ho,wo,mc] = sum_{c in group g} x[n,iy,ix,c] * grad_out[n,ho,wo,c]  (0 outside).

    Bugs: grad_mask_group_sum False keeps the last channel of the group only (= instead of +=);
    mask_at_input reads the mask at the input pixel's own output position
    (iy*s + ho%s, ix*s + wo%s) instead of at (ho, wo).
    """
    N, H, W, C = x.shape
    sH, sW = s * H, s * W
    grad_input = np.zeros((N, H, W, C))
    grad_mask = np.zeros((N, sH, sW, G, k, k))
    if grad_input.size == 0 or grad_mask.size == 0:
        return grad_input, grad_mask.reshape(mask.shape)
    r, Cg = (k - 1) // 2, C // G
    g = np.arange(C) // Cg
    x, grad_out = x.astype(np.float64), grad_out.astype(np.float64)
    m = mask.astype(np.float64).reshape(N, sH, sW, G, k, k)
    with np.errstate(invalid="ignore", over="ignore"):
        for kh in range(k):
            rows, row_in = _tap_rows(sH, s, r, kh, H)
            for kw in range(k):
                cols, col_in = _tap_rows(sW, s, r, kw, W)
                inside = (row_in[:, None] & col_in[None, :])[None, :, :, None]   # [1, sH, sW, 1]
                if not inside.any():
                    continue
                products = (x[:, rows][:, :, cols] * grad_out).reshape(N, sH, sW, G, Cg)
                per_group = products.sum(-1) if grad_mask_group_sum else products[..., -1]
                grad_mask[..., kh, kw] = np.where(inside, per_group, 0.0)
                if mask_at_input:
                    mrows = rows * s + np.arange(sH) % s
                    mcols = cols * s + np.arange(sW) % s
                    weight = m[:, mrows][:, :, mcols][:, :, :, g, kh, kw]
                else:
                    weight = m[:, :, :, g, kh, kw]
                contribution = np.where(inside, weight * grad_out, 0.0)
                np.add.at(grad_input, (slice(None), rows[:, None], cols[None, :]), contribution)
    return grad_input, grad_mask.reshape(mask.shape)


def carafe_forward_compute(**bug):
    rounding = bug.pop("rounding", "nearest")

    def compute(request):
        k, G, s = _carafe_params(request.params)
        x, mask = request.inputs["input"], request.inputs["mask"]
        acc = np.float64
        if bug.get("acc") == "half" and x.dtype == np.float16:
            acc = np.float16
        out = carafe_forward(x, mask, k, G, s, **{**bug, "acc": acc})
        if rounding == "toward_zero":
            out = round_toward_zero(out, _out_dtype(request, "output"))
        return {"output": out}
    return compute


def carafe_backward_compute(**bug):
    def compute(request):
        k, G, s = _carafe_params(request.params)
        i = request.inputs
        grad_input, grad_mask = carafe_backward(i["input"], i["mask"], i["grad_output"], k, G, s, **bug)
        return {"grad_input": grad_input, "grad_mask": grad_mask}
    return compute


# ----------------------------------------------------------------------------- bilinear sampling

def bilinear_corners(y, x, H, W, *, zero_beyond_last=False):
    """OPS.md bilinear rule for arrays of points: (rows, cols, weights) each [4, *shape].

    Points with y < -1 or y > H (x likewise) get weight 0.  Bug zero_beyond_last: the
    zero region starts at y > H-1 (x > W-1), so the band (size-1, size] reads 0 instead
    of the edge value.
    """
    y, x = np.asarray(y, dtype=np.float64), np.asarray(x, dtype=np.float64)
    y_max, x_max = (H - 1, W - 1) if zero_beyond_last else (H, W)
    inside = (y >= -1) & (y <= y_max) & (x >= -1) & (x <= x_max)

    def axis(c, size):
        c = np.maximum(np.where(inside, c, 0.0), 0.0)
        low = np.floor(c)
        last = low >= size - 1
        low = np.where(last, size - 1, low)
        high = np.where(last, size - 1, low + 1)
        c = np.where(last, low, c)
        return low.astype(np.int64), high.astype(np.int64), c - low

    y_low, y_high, ly = axis(y, H)
    x_low, x_high, lx = axis(x, W)
    hy, hx = 1 - ly, 1 - lx
    weights = np.stack([hy * hx, hy * lx, ly * hx, ly * lx]) * inside
    rows = np.stack([y_low, y_low, y_high, y_high])
    cols = np.stack([x_low, x_high, x_low, x_high])
    return rows, cols, weights


# ----------------------------------------------------------------------------- deform_roi_pool

def deform_roi_pool(features, rois, offset, PH, PW, scale, ratio, gamma, *, align=True, grid_round="ceil",
                    zero_beyond_last=False, offset_unit="roi", offset_xy=(0, 1)):
    """OPS.md deform_roi_pool_forward, one bin at a time.

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
    rounding = np.ceil if grid_round == "ceil" else np.floor
    half = 0.5 if align else 0.0
    for r, (batch, x1, y1, x2, y2) in enumerate(rois.astype(np.float64)):
        image = features[int(batch)]
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
                rows, cols, weights = bilinear_corners(y, x, H, W, zero_beyond_last=zero_beyond_last)
                total = (image[rows, cols] * weights[..., None]).sum(axis=(0, 1, 2))
                out[r, ph, pw] = total / max(grid_h * grid_w, 1)
    return out


def deform_roi_pool_compute(**bug):
    def compute(request):
        p = request.params
        i = request.inputs
        out = deform_roi_pool(i["input"], i["rois"], i.get("offset"), int(p["pooled_height"]),
                              int(p["pooled_width"]), float(p["spatial_scale"]), int(p["sampling_ratio"]),
                              float(p["gamma"]), **bug)
        return {"output": out}
    return compute


# ----------------------------------------------------------------------------- border_align_backward

def border_align_backward(grad_output, boxes, argmax_idx, P, H, W, *, stride_divisor="P",
                          channel="border_major", far_start="x2y2"):
    """OPS.md border_align_backward: point = start + stride * argmax, its bilinear weights times
    grad_output scatter-added into grad_input[n, y, x, e*C + c].

    Bugs: stride_divisor "P+1" divides the sides by pool_size + 1; channel "channel_major"
    writes channel c*4 + e; far_start "x1y1" starts bottom and right at (x1, y1).
    """
    N, K, _, C = grad_output.shape
    grad_input = np.zeros((N, H, W, 4 * C))
    if grad_input.size == 0 or grad_output.size == 0:
        return grad_input
    divisor = P if stride_divisor == "P" else P + 1
    e, c = np.arange(4)[:, None], np.arange(C)[None, :]
    chan = np.broadcast_to(e * C + c if channel == "border_major" else c * 4 + e, (K, 4, C))
    for n in range(N):
        x1, y1, x2, y2 = (boxes[n, :, i].astype(np.float64) for i in range(4))
        sx, sy = (x2 - x1) / divisor, (y2 - y1) / divisor
        zero = np.zeros_like(sx)
        far_x, far_y = (x2, y2) if far_start == "x2y2" else (x1, y1)
        start_x = np.stack([x1, x1, far_x, far_x], axis=1)[..., None]        # [K, 4, 1]
        start_y = np.stack([y1, y1, far_y, far_y], axis=1)[..., None]
        step_x = np.stack([sx, zero, -sx, zero], axis=1)[..., None]
        step_y = np.stack([zero, sy, zero, -sy], axis=1)[..., None]
        index = argmax_idx[n].astype(np.float64)                               # [K, 4, C]
        rows, cols, weights = bilinear_corners(start_y + step_y * index, start_x + step_x * index, H, W)
        values = weights * grad_output[n].astype(np.float64)
        np.add.at(grad_input[n], (rows, cols, np.broadcast_to(chan, rows.shape)), values)
    return grad_input


def border_align_backward_compute(**bug):
    rounding = bug.pop("rounding", "nearest")

    def compute(request):
        i = request.inputs
        N, H, W, _ = request.outputs["grad_input"].shape
        grad_input = border_align_backward(i["grad_output"], i["boxes"], i["argmax_idx"],
                                           int(request.params["pool_size"]), H, W, **bug)
        if rounding == "toward_zero":
            grad_input = round_toward_zero(grad_input, _out_dtype(request, "grad_input"))
        return {"grad_input": grad_input}
    return compute
