"""Numpy emulations of mmcv 2.2.0's CUDA kernels, bit for bit: one module per op family
(gen.mmcv.<family>, a function per op named after it), on the scalar arithmetic of gen.mmcv.half."""
