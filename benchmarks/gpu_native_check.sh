#!/usr/bin/env bash
# The native executor's GPU pass (about 8 minutes on one H100/H200): GPU-marked tests of the
# native executor, the side-by-side benchmark, the tile-size diagnostic, compute-sanitizer on a
# small case, and the one-process-per-GPU MPI run (Simple and LL).  Each step has its own time
# limit, so a hang costs one step.
#   OUT=results/gpu bash benchmarks/gpu_native_check.sh
set -o pipefail
OUT=${OUT:-results/gpu}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:$PWD/tests${PYTHONPATH:+:$PYTHONPATH}
# logs name the repository, the Python environment and the temporary folder by placeholders, not this machine's paths
scrub() { python3 benchmarks/shown_paths.py || cat; }   # a filter that cannot start: the log as it came
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  python3 -c "import cupy, numpy; from cupy.cuda import nccl; print('cupy', cupy.__version__, 'nccl', nccl.get_version(), 'numpy', numpy.__version__)"
} 2>&1 | scrub | tee "$OUT/native_machine.txt"
echo "== native GPU tests"
timeout ${TESTS_S:-140} python3 -m pytest -q -m gpu -rs -p no:cacheprovider -o addopts= --timeout=150 tests/kernels/native 2>&1 \
  | scrub | tee "$OUT/native_gpu_tests.txt" | tail -25
echo "== benchmark"
timeout ${BENCH_S:-180} python3 benchmarks/bench_native_gpu.py --out "$OUT" --ranks 8,4,2 --before results/gpu/native.csv \
  ${BENCH_ARGS:-} 2>&1 | scrub | tee "$OUT/native_bench_log.txt" | tail -40
echo "== tiles: contiguous pieces against tiles dealt in turn, beside plain CuPy"
timeout ${DIAG_S:-90} python3 benchmarks/native_tile_diag.py 2>&1 | scrub | tee "$OUT/native_tile_diag.txt"
echo "== compute-sanitizer"
OUT="$OUT" SAN_S=${SAN_S:-40} bash benchmarks/native_sanitizer.sh
echo "== one process per GPU: MPICommunicator natively, 2 processes (sharing the card if only one)"
TOPOCOLL_NATIVE_TIMEOUT_S=30 timeout ${MPI_S:-90} python3 -m pytest -q -x -m gpu -rs -p no:cacheprovider -o addopts= \
  tests/kernels/mpi/test_native_cuda.py 2>&1 | scrub | tee "$OUT/native_mpi_gpu_tests.txt" | tail -15
