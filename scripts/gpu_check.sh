#!/usr/bin/env bash
# kiln on a real NVIDIA GPU, as one bounded run: the CUDA device and renderer tests, the op conformance suite on
# CUDA (CUDA C through NVRTC and PTX), the tensor test suite with DEV=CUDA, and the GPU bench (issue 42's rows:
# bf16/f16 tensor-core matmul, copy and elementwise bandwidth, cached op, JIT replay and CUDA graph, BEAM).
#
#   bash scripts/gpu_check.sh [LOG_DIR] [TENSOR_SECONDS] [BENCH_SECONDS]
#   STEPS=machine,runtime,tensor bash scripts/gpu_check.sh ...
#
# Steps (each bounded by `timeout`; worst case in parentheses): machine (~20 s), runtime (120 s), ptx (60 s),
# cpu (90 s), tensor (TENSOR_SECONDS, 200), bench (BENCH_SECONDS + 30, default 390: benchmarks/gpu_bench.py),
# backend (60 s: benchmarks/backend_bench.py --quick). The default, machine,runtime,ptx,bench, stays under 10
# minutes; STEPS=machine,bench (~7 min) gives the bench figures alone, STEPS=machine,runtime,ptx,tensor (~7 min)
# the correctness checks alone.
#
# Runs from the repository root with any Python >= 3.11 that has numpy, llvmlite, pytest, pytest-xdist and
# hypothesis (it puts packages/*/src on PYTHONPATH, so nothing is installed); NVRTC comes from the
# nvidia-cuda-nvrtc wheel or the CUDA toolkit. Each step is bounded by `timeout`; logs land in LOG_DIR (default
# /tmp/kiln-gpu). Not part of CI: CI has no GPU.
set -u
cd "$(dirname "$0")/.."
LOG=${1:-/tmp/kiln-gpu}
TENSOR_SECONDS=${2:-200}
BENCH_SECONDS=${3:-360}
mkdir -p "$LOG"
PY=${PYTHON:-python3}
export PYTHONPATH=$(printf '%s:' "$PWD"/packages/*/src)
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
WORKERS=$(( $(nproc) > 12 ? 12 : $(nproc) ))
# a per-test limit where pytest-timeout is installed
TO=(); $PY -c "import pytest_timeout" 2>/dev/null && TO=(--timeout 120)
STEPS=${STEPS:-machine,runtime,ptx,bench}
want() { [[ ",$STEPS," == *",$1,"* ]]; }
step() { echo; echo "== $1"; }
summary() { grep -E "^(FAILED|ERROR)|passed|failed|crashed" | cut -c1-300; }

if want machine; then
  step "machine"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv 2>&1 | head -5
  $PY --version
  $PY - <<'PYTHON' 2>&1 | tee "$LOG/open.txt"
import time
t = time.perf_counter()
from kiln.runtime import Device
d = Device["CUDA"]
print(d, "opened in", round(time.perf_counter() - t, 3), "s; renderers:", d.renderers)
from kiln.renderers.nvrtc import load_nvrtc
n = load_nvrtc()
print("nvrtc", n.path, n.version)
import llvmlite, llvmlite.binding as llvm
print("llvmlite", llvmlite.__version__, "LLVM", llvm.llvm_version_info, "host cpu", llvm.get_host_cpu_name())
flags = llvm.get_host_cpu_features()
print("features:", " ".join(sorted(f for f, on in flags.items() if on and ("avx512" in f or "amx" in f))))
PYTHON
fi

if want runtime; then
  step "runtime + renderer tests (CUDA)"
  timeout 120 $PY -m pytest -p no:cacheprovider -n "$WORKERS" -q -rfE "${TO[@]}" \
    packages/runtime-hcq/tests/test_cuda_device.py packages/runtime-hcq/tests/test_conformance.py \
    packages/runtime-hcq/tests/test_builtin_devices.py packages/runtime-hcq/tests/test_cuda_graph.py \
    packages/renderers/tests/test_cuda.py packages/renderers/tests/test_ptx.py \
    packages/renderers/tests/test_nvidia_tensor_cores.py 2>&1 | tee "$LOG/runtime.txt" | summary
fi

if want ptx; then
  step "conformance with CUDA_RENDERER=ptx"
  CUDA_RENDERER=ptx timeout 60 $PY -m pytest -p no:cacheprovider -n "$WORKERS" -q -rfE "${TO[@]}" \
    packages/runtime-hcq/tests/test_conformance.py -k CUDA 2>&1 | tee "$LOG/conformance_ptx.txt" | summary
fi

if want cpu; then
  step "CPU-LLVM small-float conformance in one process (faulthandler)"
  timeout 90 $PY -X faulthandler -m pytest -p no:cacheprovider -p no:xdist -o addopts="" -q -x \
    packages/runtime-hcq/tests/test_conformance.py -k "CPU-LLVM and (bfloat16 or fp8e5m2) and alu" 2>&1 \
    | tee "$LOG/cpu_llvm.txt" | tail -40
fi

if want tensor; then
  step "tensor suite, DEV=CUDA (bounded to ${TENSOR_SECONDS}s)"
  DEV=CUDA timeout "$TENSOR_SECONDS" $PY -m pytest -p no:cacheprovider -n "$WORKERS" -o addopts="" -v -rfE \
    "${TO[@]}" packages/tensor/tests > "$LOG/tensor.txt" 2>&1
  echo "exit $?"
  grep -cE " PASSED " "$LOG/tensor.txt" | sed 's/^/passed: /'
  grep -cE " SKIPPED " "$LOG/tensor.txt" | sed 's/^/skipped: /'
  grep -cE " (FAILED|ERROR) " "$LOG/tensor.txt" | sed 's/^/failed: /'
  grep -E " (FAILED|ERROR) |crashed" "$LOG/tensor.txt" | cut -c1-220 | head -60
fi

if want bench; then
  step "GPU bench: kiln vs torch (cuBLAS) in one run (bounded to ${BENCH_SECONDS}s + 30s)"
  # BEAM's candidate builds in parallel worker processes; BEAM gets what is left of the budget (a child process)
  BEAM_WORKERS=${BEAM_WORKERS:-8} timeout $((BENCH_SECONDS + 30)) $PY benchmarks/gpu_bench.py \
    --budget "$BENCH_SECONDS" 2>&1 | tee "$LOG/gpu_bench.txt" | tail -40
  echo "exit ${PIPESTATUS[0]}"
fi

if want backend; then
  step "backend bench on CUDA (quick)"
  timeout 60 $PY benchmarks/backend_bench.py --quick --devices CUDA 2>&1 | tee "$LOG/bench.txt" | tail -30
fi
