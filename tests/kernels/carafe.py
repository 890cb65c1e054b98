"""What carafe's two directions share, literally (OPS.md, CARAFE; doc 000), and mmcv's test data."""
from __future__ import annotations

from kernels import mmcv_array

# mmcv's CARAFE test: kernel 5, group 4, scale 2 on a 2 x 64 x 3 x 3 input; float32 on the GPU.
MMCV_PARAMS = {"kernel_size": 5, "group_size": 4, "scale_factor": 2}
MMCV_TOLERANCE = 1e-5


def mmcv_inputs() -> dict:
    return {"input": mmcv_array("for_carafe", "carafe_feat.bin", (2, 64, 3, 3)),
            "mask": mmcv_array("for_carafe", "carafe_mask.bin", (2, 100, 6, 6))}


def taps(x_shape, params):
    """Every (n, output row, output column, channel, input row, input column, mask channel) of a
    tap inside the map: output (ho, wo) reads the k x k window around (ho // s, wo // s) of its
    channel, weighted by its own kernel of the channel's group."""
    N, H, W, C = x_shape
    k, G, s = params["kernel_size"], params["group_size"], params["scale_factor"]
    r, Cg = (k - 1) // 2, C // G
    for n in range(N):
        for ho in range(s * H):
            for wo in range(s * W):
                for c in range(C):
                    g = c // Cg
                    for kh in range(k):
                        for kw in range(k):
                            iy, ix = ho // s - r + kh, wo // s - r + kw
                            if 0 <= iy < H and 0 <= ix < W:
                                yield n, ho, wo, c, iy, ix, (g * k + kh) * k + kw
