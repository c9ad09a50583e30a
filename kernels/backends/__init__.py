"""Executors of lowered programs: host (NumPy), CuPy, Numba kernels and twins, reference, fake CUDA."""
