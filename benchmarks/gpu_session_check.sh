#!/usr/bin/env bash
# One GPU pass over the native executor and the torch backend (about 8 minutes on one H100/H200):
# the kernel cache warmed in parallel, the LL benchmark (LL beside Simple, plain CuPy and NCCL), the
# GPU-marked tests of the native executor (Simple and LL), the torch backend's GPU check, the MPI
# share path's GPU tests, and compute-sanitizer on the small case under both protocols.  Each
# step has its own time limit; everything lands under $OUT.
#   OUT=results/gpu bash benchmarks/gpu_session_check.sh
set -o pipefail
OUT=${OUT:-results/gpu}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:$PWD/tests${PYTHONPATH:+:$PYTHONPATH}
# logs name the repository, the Python environment and the temporary folder by placeholders, not this machine's paths
scrub() { python3 benchmarks/shown_paths.py || cat; }   # a filter that cannot start: the log as it came
# FINAL (optional): a folder that gets $OUT packed as gpu_pass.tgz after every step (a cut-off run keeps its steps)
step() { [ -n "${FINAL:-}" ] && tar czf "$FINAL/gpu_pass.tgz" -C "$OUT" . 2>/dev/null; echo "== $1 ($(date +%T))"; }
step machine
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  python3 -c "import cupy, numpy, torch; from cupy.cuda import nccl; print('cupy', cupy.__version__, 'nccl', nccl.get_version(), 'numpy', numpy.__version__, 'torch', torch.__version__)"
} 2>&1 | scrub | tee "$OUT/pass_machine.txt"
step "kernel cache"
timeout ${WARM_S:-60} python3 benchmarks/native_warm_cache.py 2>&1 | tail -3 | scrub | tee "$OUT/pass_warm.txt"
step "LL benchmark"
timeout ${LL_S:-90} python3 benchmarks/bench_native_ll.py --out "$OUT" --ranks ${LL_RANKS:-8,4,2} 2>&1 \
  | scrub | tee "$OUT/native_ll_log.txt" | tail -8
if [ -n "${LL_VARIANTS:-}" ]; then   # LL_VARIANTS=1: the LL benchmark of 8 ranks under other builds and pieces
  step "LL variants"
  for v in "-DTC_LL_INLINE=1|4096|inline" "|32768|piece32k"; do
    IFS='|' read -r defs piece name <<< "$v"
    TOPOCOLL_NATIVE_DEFINES="$defs" TOPOCOLL_LL_PIECE_BYTES=$piece timeout ${LLV_S:-40} python3 \
      benchmarks/bench_native_ll.py --out "$OUT" --ranks 8 --name native_ll_$name 2>&1 | tail -1 | scrub
  done
fi
step "native GPU tests"
timeout ${TESTS_S:-130} python3 -m pytest -q -m gpu -rs -p no:cacheprovider -o addopts= --timeout=120 -n ${TESTS_N:-3} \
  tests/kernels/native tests/kernels/comm tests/kernels/backends tests/kernels/mpi 2>&1 | scrub | tee "$OUT/native_gpu_tests.txt" | tail -15
step compute-sanitizer
OUT="$OUT" SAN_S=${SAN_S:-35} bash benchmarks/native_sanitizer.sh
step "torch backend"
OUT="$OUT/pytorch" MPS=0 TESTS_S=${TORCH_S:-100} timeout $(( ${TORCH_S:-100} + 70 )) bash benchmarks/gpu_pytorch_check.sh 2>&1 \
  | scrub | tee "$OUT/pytorch_pass.txt" | tail -12
step done
