"""The kernels, one folder per family (a forward and its backward share one); README.md beside this
file is the contract a family folder keeps, and gen.core.registry finds each part by it."""
