"""What several kernel families share: sampling rules, ordered scatter-adds, mmcv's scalar arithmetic,
the planted copies' common pieces and the torch kernels' argument handling."""
