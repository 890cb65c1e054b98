"""Float64 reference implementations, one small module per operator.

Each reference is ``fn(inputs, params, compute_dtype=np.float64) -> {output: array}``:
vectorized numpy, arithmetic in ``compute_dtype`` (float64 for goldens; the ``lowp``
backend passes float32 to model typical hardware), layouts as the design docs state.
"""
