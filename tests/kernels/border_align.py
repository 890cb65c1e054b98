"""What border_align's two directions share, literally (mmcv's kernels, OPS.md border_align)."""
from __future__ import annotations


def border_start_and_stride(box, border: int, pool_size: int) -> tuple[float, float, float, float]:
    """(x, y, dx, dy): where border ``border`` (0 top, 1 left, 2 bottom, 3 right) of ``box``
    (x1, y1, x2, y2) starts, and the step to each of its pool_size further points."""
    x1, y1, x2, y2 = (float(v) for v in box)
    width, height = x2 - x1, y2 - y1
    return {0: (x1, y1, width / pool_size, 0.0), 1: (x1, y1, 0.0, height / pool_size),
            2: (x2, y2, -(width / pool_size), 0.0), 3: (x2, y2, 0.0, -(height / pool_size))}[border]
