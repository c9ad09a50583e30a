#!/usr/bin/env bash
# The topocoll torch backend's GPU check (about 2-3 min on one H100/H200, each step time-limited):
#  1. the interpreter kernel's system-scope builds the tests use (5 dtypes x sum/prod/max/min), compiled
#     in parallel into CuPy's kernel cache (else each process waits for NVRTC inside the tests);
#  2. the gpu-marked tests of tests/kernels/pytorch (2 processes sharing the card: every collective
#     natively and staged through the host against gloo, a side stream, mismatched devices, NCCL plans);
#  3. the GPU rows of benchmarks/bench_pytorch.py (all_reduce 1 KiB..64 MiB: topocoll native vs the
#     native executor alone vs gloo on CUDA tensors, where a native call's time goes, phase by phase, and a
#     one-rank job against a one-rank NCCL group);
#  4. (MPS=1, the default, where nvidia-cuda-mps-control exists) step 3 again under CUDA MPS, whose
#     clients' kernels may run at once: without MPS the two processes' kernels are time-sliced, so a
#     kernel waiting for its peer's flags waits for a GPU context switch.  Informational: not in rc.
# Logs and results go to $OUT; rc 1 when a test or the step-3 benchmark fails.
#   OUT=results/pytorch/gpu bash benchmarks/gpu_pytorch_check.sh
# Optional: DDP_S=40 also trains examples/pytorch/train_ddp.py on the card (topocoll, gloo).
set -o pipefail
OUT=${OUT:-results/pytorch/gpu}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:$PWD/tests${PYTHONPATH:+:$PYTHONPATH}
# logs name the repository, the Python environment and the temporary folder by placeholders, not this machine's paths
scrub() { $PY benchmarks/shown_paths.py || cat; }   # a filter that cannot start: the log as it came
rc=0
{ nvidia-smi --query-gpu=name,memory.total,driver_version,compute_mode --format=csv,noheader
  timeout 30 $PY -c "import torch, numpy, cupy; print('torch', torch.__version__, 'cuda', torch.version.cuda, \
'nccl', torch.cuda.nccl.version() if torch.cuda.is_available() else None, 'cupy', cupy.__version__, \
'numpy', numpy.__version__, 'gpus', torch.cuda.device_count())"
} 2>&1 | scrub | tee "$OUT/pytorch_machine.txt"
echo "== kernel builds the tests use (system scope), in parallel"
timeout ${WARM_S:-90} $PY - <<'PYEOF' 2>&1 | tail -2 | scrub | tee "$OUT/pytorch_warm.txt"
import multiprocessing as mp, sys, time
sys.path.insert(0, "benchmarks")
from native_warm_cache import build
specs = [(d, o, True) for d in ("float32", "bfloat16", "float16", "int64", "uint8") for o in ("sum", "prod", "max", "min")]
t = time.perf_counter()
with mp.get_context("spawn").Pool(min(16, len(specs))) as pool:
    done = pool.map(build, specs, chunksize=1)
print(f"{len(done)} builds in {time.perf_counter() - t:.1f} s; slowest {max(done, key=lambda d: d[1])}")
PYEOF
echo "== gpu-marked tests of tests/kernels/pytorch"
timeout ${TESTS_S:-150} $PY -m pytest -v -m gpu -rs -p no:cacheprovider -o addopts= tests/kernels/pytorch 2>&1 \
  | scrub | tee "$OUT/pytorch_gpu_tests.txt" | tail -30
r=$?; echo "tests rc=$r" | tee -a "$OUT/pytorch_gpu_tests.txt"; [ $r -ne 0 ] && rc=1
echo "== all_reduce on CUDA tensors, 2 processes on one card"
timeout ${BENCH_S:-60} $PY benchmarks/bench_pytorch.py --gpu --quick --out "$OUT" --note "CUDA MPS: off" 2>&1 \
  | scrub | tee "$OUT/pytorch_gpu_bench_log.txt" | tail -24
r=$?; echo "bench rc=$r" | tee -a "$OUT/pytorch_gpu_bench_log.txt"; [ $r -ne 0 ] && rc=1
if [ "${MPS:-1}" != 0 ] && command -v nvidia-cuda-mps-control >/dev/null; then
  echo "== the same under CUDA MPS (informational)"
  export CUDA_MPS_PIPE_DIRECTORY=$(mktemp -d) CUDA_MPS_LOG_DIRECTORY=$(mktemp -d)
  if nvidia-cuda-mps-control -d; then
    trap 'echo quit | nvidia-cuda-mps-control' EXIT
    timeout ${BENCH_S:-40} $PY benchmarks/bench_pytorch.py --gpu --quick --out "$OUT/mps" \
      --note "CUDA MPS: on (nvidia-cuda-mps-control -d)" 2>&1 | scrub \
      | tee "$OUT/pytorch_gpu_bench_mps_log.txt" | tail -12
    echo "mps bench rc=$?" | tee -a "$OUT/pytorch_gpu_bench_mps_log.txt"
    echo quit | nvidia-cuda-mps-control; trap - EXIT
  else
    echo "CUDA MPS did not start here: no MPS rows" | tee "$OUT/pytorch_gpu_bench_mps_log.txt"
  fi
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
fi
if [ "${DDP_S:-0}" -gt 0 ]; then   # optional: DDP_S=40 trains the example on the card
  echo "== DDP example, 2 ranks on one card: topocoll then gloo"
  for b in topocoll gloo; do
    timeout $DDP_S $PY -m torch.distributed.run --nproc-per-node 2 examples/pytorch/train_ddp.py --backend $b \
      --device cuda --steps 20 2>&1 | scrub | tee "$OUT/pytorch_gpu_ddp_$b.txt" | tail -3
    r=$?; echo "ddp $b rc=$r" | tee -a "$OUT/pytorch_gpu_ddp_$b.txt"; [ $r -ne 0 ] && rc=1
  done
fi
exit $rc
