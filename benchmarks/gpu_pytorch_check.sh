#!/usr/bin/env bash
# The topocoll torch backend's GPU check (at most 90 s on one H100/H200): the gpu-marked tests of
# tests/kernels/pytorch (2 processes sharing the card: every collective natively and staged through
# the host against gloo, a side stream, mismatched devices), then the GPU rows of
# benchmarks/bench_pytorch.py (all_reduce 1 KiB..64 MiB: topocoll native vs the native executor alone
# vs gloo on CUDA tensors).  Logs and results go to $OUT; each step has its own time limit.
#   OUT=results/pytorch/gpu bash benchmarks/gpu_pytorch_check.sh
# Optional, beyond the 90 s: DDP_S=40 also trains examples/pytorch/train_ddp.py on the card (topocoll, gloo).
set -o pipefail
OUT=${OUT:-results/pytorch/gpu}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:$PWD/tests${PYTHONPATH:+:$PYTHONPATH}
rc=0
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  timeout 30 $PY -c "import torch, numpy, cupy; print('torch', torch.__version__, 'cuda', torch.version.cuda, \
'nccl', torch.cuda.nccl.version() if torch.cuda.is_available() else None, 'cupy', cupy.__version__, \
'numpy', numpy.__version__, 'gpus', torch.cuda.device_count())"
} 2>&1 | tee "$OUT/pytorch_machine.txt"
echo "== gpu-marked tests of tests/kernels/pytorch"
timeout ${TESTS_S:-65} $PY -m pytest -v -m gpu -rs -p no:cacheprovider -o addopts= tests/kernels/pytorch 2>&1 \
  | tee "$OUT/pytorch_gpu_tests.txt" | tail -30
r=$?; echo "tests rc=$r" | tee -a "$OUT/pytorch_gpu_tests.txt"; [ $r -ne 0 ] && rc=1
echo "== all_reduce on CUDA tensors, 2 processes on one card"
timeout ${BENCH_S:-20} $PY benchmarks/bench_pytorch.py --gpu --quick --out "$OUT" 2>&1 \
  | tee "$OUT/pytorch_gpu_bench_log.txt" | tail -15
r=$?; echo "bench rc=$r" | tee -a "$OUT/pytorch_gpu_bench_log.txt"; [ $r -ne 0 ] && rc=1
if [ "${DDP_S:-0}" -gt 0 ]; then   # optional (outside the 90 s): DDP_S=40 trains the example on the card
  echo "== DDP example, 2 ranks on one card: topocoll then gloo"
  for b in topocoll gloo; do
    timeout $DDP_S $PY -m torch.distributed.run --nproc-per-node 2 examples/pytorch/train_ddp.py --backend $b \
      --device cuda --steps 20 2>&1 | tee "$OUT/pytorch_gpu_ddp_$b.txt" | tail -3
    r=$?; echo "ddp $b rc=$r" | tee -a "$OUT/pytorch_gpu_ddp_$b.txt"; [ $r -ne 0 ] && rc=1
  done
fi
exit $rc
