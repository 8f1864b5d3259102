#!/usr/bin/env bash
# The GPU proof (tools/gpu_check.py): versions, `pytest -m gpu`, parity of every CUDA rung,
# a short same-run GPU study; everything under --out (default $OUT or reports/gpu-check).
# Runs with the Python it finds (the venv's, else python3): the lent GPU machine has no venv.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
[ -x "$PY" ] || PY=python3
PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" exec "$PY" tools/gpu_check.py "$@"
