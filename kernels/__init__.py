"""kernels: executors (reference, host, CuPy), Numba kernels, Communicator, fusion, sweeps."""
