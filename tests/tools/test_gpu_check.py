"""tools/gpu_check.py's plumbing, proven without a GPU: its CPU dry run (small parity, a quick
study with a reduced precision, the gpu-marked tests collected and skipped) writes the summary."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import ROOT  # noqa: E402
from tools import gpu_check  # noqa: E402


def test_version_notes_tolerate_the_gpu_machine_and_flag_the_rest():
    assert gpu_check.version_notes({"torch": "2.11.0+cu130", "jax": "0.11.2"}) == []
    assert gpu_check.version_notes({"torch": "2.13.0+cpu", "jax": "0.10.2"}) == []
    notes = gpu_check.version_notes({"torch": "2.9.0", "jax": "unavailable: ImportError: x"})
    assert "torch 2.9.0 is untested" in notes[0] and notes[1].startswith("jax: unavailable")


def test_the_cuda_plan_covers_tests_parity_and_study(tmp_path):
    steps = {name: cmd for name, cmd, _ in gpu_check.plan("cuda", tmp_path, quick=False)}
    assert set(steps) == {"tests_gpu", "parity", "study", "compile_modes"}
    assert "torch.scan[mode=reduce-overhead]" in " ".join(steps["compile_modes"])
    assert "-m" in steps["tests_gpu"] and "gpu" in steps["tests_gpu"]
    assert "cuda" in steps["parity"] and "float32,amp_bfloat16" in " ".join(steps["parity"])
    assert all(impl in " ".join(steps["study"]) for impl in ("jax.cudnn", "torch.native", "torch.triton", "jax.pallas"))
    assert "tests/frameworks/torch/test_torch_triton.py" in steps["tests_gpu"]
    assert "tests/frameworks/jax/test_jax_pallas.py" in steps["tests_gpu"]
    assert sum(t for _, _, t in gpu_check.plan("cuda", tmp_path, quick=False)) <= 8 * 60  # one device command


def test_without_cuda_the_cuda_run_says_so_and_runs_nothing(tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    proc = subprocess.run([sys.executable, "tools/gpu_check.py", "--out", str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = json.loads((tmp_path / "gpu_check.json").read_text())
    assert "no usable CUDA device" in summary["verdict"] and summary["steps"] == []


def test_cpu_dry_run(tmp_path):
    pytest.importorskip("torch")
    proc = subprocess.run(["bash", "tools/gpu_check.sh", "--device", "cpu", "--out", str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=400)
    summary = json.loads((tmp_path / "gpu_check.json").read_text())
    assert proc.returncode == 0, proc.stdout + proc.stderr + json.dumps(summary["steps"], indent=1)
    assert [s["name"] for s in summary["steps"]] == ["tests_gpu", "parity", "study", "compile_modes"]
    skipped = summary["steps"][-1]
    assert skipped["status"] == "skipped" and "need a CUDA device" in skipped["reason"]
    assert summary["versions"]["torch"] and summary["verdict"] == "all steps ok"
    assert (tmp_path / "parity" / "parity.json").exists()
    report = (tmp_path / "study" / "report.md").read_text()
    assert all(f"| {impl} " in report for impl in ("torch.eager", "jax.scan")), report
