"""What psamask's two directions share, literally (doc 001, 3.1.1 / 3.1.2 pseudo-code)."""
from __future__ import annotations


def moves(N: int, H: int, W: int, h_mask: int, w_mask: int):
    """Every (n, h, w, mask entry, map row, map column) the pseudo-code moves: the mask entry of
    position (h, w) that lands on map position (row, column)."""
    half_h, half_w = (h_mask - 1) // 2, (w_mask - 1) // 2
    for n in range(N):
        for h in range(H):
            for w in range(W):
                for hidx in range(max(0, half_h - h), min(h_mask, H + half_h - h)):
                    for widx in range(max(0, half_w - w), min(w_mask, W + half_w - w)):
                        yield n, h, w, hidx * w_mask + widx, h + hidx - half_h, w + widx - half_w
