"""Executors of lowered programs: host (NumPy, Numba n-way reduces), CuPy (peer or host-staged), reference."""
