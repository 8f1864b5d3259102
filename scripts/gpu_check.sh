#!/usr/bin/env bash
# GPU checks for torch_impl: the CUDA tests (pytest -m gpu) and a short S1 benchmark
# of every backend on CUDA.  Exits 0 with a message when there is no usable GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
[ -x "$PY" ] || PY=python3

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi >/dev/null 2>&1; then
    echo "gpu_check: no GPU here (nvidia-smi missing or failing); nothing to check."
    exit 0
fi
if ! "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)'; then
    echo "gpu_check: nvidia-smi works but this torch build cannot use CUDA:"
    "$PY" -c 'import torch; print("  torch", torch.__version__, "cuda build:", torch.version.cuda)'
    echo "gpu_check: install a CUDA build of torch to run the GPU checks."
    exit 0
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader

echo "== pytest -m gpu"
"$PY" -m pytest -m gpu -q -p no:cacheprovider tests/

echo "== short CUDA benchmark: S1 (T=100, B=64, I=256, H=512) float32, forward+backward"
"$PY" - <<'PYEOF'
import statistics, time, torch
import torch_impl
from shared.spec import RNNSpec
from torch_impl.adapter import get_adapter

for cell in ("lstm", "gru"):
    spec = RNNSpec(cell, 256, 512)
    times = {}
    for backend in torch_impl.available_backends("cuda"):
        work = get_adapter(backend).make_workload(spec, seq_len=100, batch=64, dtype="float32", device="cuda")
        t0 = time.perf_counter(); work.train_step(); first = time.perf_counter() - t0
        for _ in range(3):
            work.train_step()
        steps = []
        for _ in range(10):
            t0 = time.perf_counter(); work.train_step(); steps.append(time.perf_counter() - t0)
        times[backend] = (statistics.median(steps), first)
    native = times["native"][0]
    print(f"{cell}: backend, fwd+bwd ms (median of 10), ratio to native, first call s")
    for backend, (t, first) in times.items():
        print(f"  {backend:10s} {t * 1e3:9.2f} {t / native:7.2f} {first:8.1f}")
PYEOF
