"""carafe forward and backward: an independent, slow-ish copy of each kernel with knobs that
plant one realistic bug each (written from the kernel's formulas, not from the reference: loops over taps, numpy
inside).  With every knob at its default a copy computes the correct result in float64."""
from __future__ import annotations

import numpy as np

from gen.core.rounding import round_toward_zero
from gen.kernels.shared.planted_fast_path import fast_path, on_inputs


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
        elif bug.get("acc") == "float32":
            acc = np.float32
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


CORRECT = {"carafe_forward": carafe_forward_compute(), "carafe_backward": carafe_backward_compute()}


def _one_tap(request) -> bool:
    return int(request.params["kernel_size"]) == 1


def _mask_of_ones(request) -> dict:
    # One tap per group: a softmax over it is 1, so the fast path leaves the multiply out.
    return {"mask": np.ones_like(request.inputs["mask"])}


def _one_tap_skips_mask(general):
    return fast_path(general, on_inputs(general, _mask_of_ones), _one_tap)

PLANTED = {
    "carafe_forward": {
        "mask_order_kw_kh": carafe_forward_compute(mask_order="wh"),
        "group_c_mod_G": carafe_forward_compute(group_of="mod"),
        "clamped_taps": carafe_forward_compute(padding="clamp"),
        "half_accumulation": carafe_forward_compute(acc="half"),
        "round_toward_zero": carafe_forward_compute(rounding="toward_zero"),
        "kernel_1_skips_mask": _one_tap_skips_mask(carafe_forward_compute()),
    },
    "carafe_backward": {
        "grad_mask_no_group_sum": carafe_backward_compute(grad_mask_group_sum=False),
        "mask_read_at_input": carafe_backward_compute(mask_at_input=True),
        # grad_mask does not read the mask: only grad_input takes the skipped multiply.
        "kernel_1_skips_mask": _one_tap_skips_mask(carafe_backward_compute()),
    },
}

# Not bugs: float32 accumulation tap after tap (the reference's own order is another), which
# every case must pass.
CONTROLS = {
    "carafe_forward": {"float32_taps_in_sequence": carafe_forward_compute(acc="float32")},
}
