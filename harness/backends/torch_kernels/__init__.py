"""The torch backend's kernels, one module per kernel or kernel family (see common.py)."""
