"""What carafe's two directions share, literally (OPS.md, CARAFE; doc 000)."""
from __future__ import annotations


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
