#!/usr/bin/env bash
# One pass on a machine with a CUDA GPU: the GPU-marked tests, nccl-tests-style CuPy sweeps and the
# executor-vs-ceiling/NCCL benchmark, all written under $OUT (default results/gpu).
#   OUT=results/gpu bash benchmarks/gpu_check.sh
# Needs CuPy (with NCCL), numba-cuda and the project's Python dependencies importable.
set -o pipefail
OUT=${OUT:-results/gpu}
mkdir -p "$OUT"
# TAR_TO=FILE: also pack $OUT into FILE after each stage (for a machine that returns few files)
snap() { if [ -n "$TAR_TO" ]; then tar czf "$TAR_TO" -C "$OUT" .; fi; }
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
# logs name the repository, the Python environment and the temporary folder by placeholders, not this machine's paths
scrub() { python3 benchmarks/shown_paths.py || cat; }   # a filter that cannot start: the log as it came
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  python3 -c "import cupy, numba, numpy; from cupy.cuda import nccl; print('cupy', cupy.__version__, 'nccl', nccl.get_version(), 'numba', numba.__version__, 'numpy', numpy.__version__)"
} 2>&1 | scrub | tee "$OUT/machine.txt"
echo "== GPU-marked tests"
timeout 240 python3 -m pytest -q -m gpu -rs -p no:cacheprovider -o addopts= tests 2>&1 | scrub \
  | tee "$OUT/gpu_tests.txt"
snap
echo "== executor vs copy ceiling and NCCL"
timeout 100 python3 benchmarks/bench_cupy_gpu.py --out "$OUT" 2>&1 | scrub | tail -30
snap
echo "== CuPy sweeps"
for coll in all_reduce all_gather reduce_scatter alltoall; do
  algos=plan,direct; [ $coll = all_reduce ] && algos=plan,ring,direct
  timeout 90 python3 -m kernels.sweep.cli $coll --backend cupy -g 4 -b 8 -e 128M -f 4 -n 10 -w 3 -c 1 \
      --compare $algos --plot "$OUT/cupy_${coll}_g4.png" 2>&1 | scrub | tee "$OUT/cupy_${coll}_g4.txt" | tail -4
  snap
done
