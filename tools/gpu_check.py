"""The GPU proof in one command: versions, the `gpu`-marked tests, parity of every CUDA rung on
the shared vectors, and a short same-run study on the GPU workloads.

    PYTHONPATH=. python3 -m tools.gpu_check --out "$OUT"            # on a CUDA machine
    PYTHONPATH=. python3 -m tools.gpu_check --device cpu --out DIR  # the dry run CI does

Runs with whatever Python it is started by (no venv, no network): versions are printed and
recorded, not asserted against the CPU pins (torch 2.11 / jax 0.11 on the lent GPU machine,
2.13 / 0.10 here).  Every step is a subprocess with its own timeout, so nothing hangs; a
missing piece (no GPU, a CPU-only torch, no jax) is a clear line in the summary and the
remaining steps still run.  Everything lands under --out: one log per step, the parity
report, the study report and plots, and `gpu_check.json` (the summary).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VERSIONS = """
import json, platform, sys
out = {"python": platform.python_version()}
try:
    import torch
    out["torch"] = torch.__version__
    out["torch_cuda"] = torch.version.cuda
    out["cuda_available"] = torch.cuda.is_available()
    if torch.cuda.is_available():
        out["gpu"] = torch.cuda.get_device_name()
        out["cudnn"] = torch.backends.cudnn.version()
    out["cpu_capability"] = torch.backends.cpu.get_cpu_capability()
except Exception as e:
    out["torch"] = f"unavailable: {type(e).__name__}: {e}"
try:
    import jax
    out["jax"] = jax.__version__
    out["jax_devices"] = [str(d) for d in jax.devices()]
except Exception as e:
    out["jax"] = f"unavailable: {type(e).__name__}: {e}"
for name in ("flax", "optax", "numpy"):
    try:
        out[name] = __import__(name).__version__
    except Exception as e:
        out[name] = f"unavailable: {type(e).__name__}"
print(json.dumps(out))
"""
# Versions the project is known to run on; others are run anyway and flagged in the summary.
TOLERATED = {"torch": ("2.11", "2.12", "2.13"), "jax": ("0.10", "0.11")}


def version_notes(versions: dict) -> list[str]:
    """One line per library whose version is outside `TOLERATED` (a note, not a failure)."""
    notes = []
    for name, prefixes in TOLERATED.items():
        v = str(versions.get(name, ""))
        if v.startswith("unavailable"):
            notes.append(f"{name}: {v}")
        elif not v.startswith(prefixes):
            notes.append(f"{name} {v} is untested here (known: {', '.join(prefixes)})")
    return notes


def run_step(name: str, cmd: list[str], out: Path, timeout: float, env: dict) -> dict:
    """Run one step, its output to out/<name>.log; never raises, never outlives `timeout`."""
    log = out / f"{name}.log"
    t0 = time.perf_counter()
    print(f"== {name}: {' '.join(cmd)} (timeout {timeout:.0f} s)", flush=True)
    try:
        with open(log, "w") as f:
            proc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT, timeout=timeout)
        rc, status = proc.returncode, "ok" if proc.returncode == 0 else "failed"
    except subprocess.TimeoutExpired:
        rc, status = None, "timed out"
    seconds = time.perf_counter() - t0
    tail = log.read_text(errors="replace").splitlines()[-3:] if log.exists() else []
    print(f"   {status} in {seconds:.0f} s: {' | '.join(tail)[-300:]}", flush=True)
    return {"name": name, "cmd": cmd, "rc": rc, "status": status, "seconds": round(seconds, 1),
            "log": log.name, "tail": tail}


def plan(device: str, out: Path, quick: bool) -> list[tuple[str, list[str], float]]:
    """(name, command, timeout) of every step; `quick` is the CPU dry run's small version."""
    py = sys.executable
    gpu_tests = ["tests/frameworks/torch/test_torch_backends.py", "tests/frameworks/torch/test_torch_bptt.py",
                 "tests/frameworks/torch/test_torch_triton.py", "tests/frameworks/jax/test_jax_impls.py",
                 "tests/frameworks/jax/test_jax_pallas.py"]
    steps = [("tests_gpu", [py, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider", *gpu_tests],
              60 if quick else 150)]
    parity = [py, "-m", "rnnbench.cli", "parity", "--device", device, "--out", str(out / "parity")]
    if quick:
        parity += ["--impls", "torch.native,jax.scan", "--cases", "lstm_default", "--dtypes", "float32"]
    else:
        # Every XLA and Inductor cell compiles; all six dtypes took longer than the device lease
        # allows, so the GPU proof covers full float32 and the mixed precision users train in.
        parity += ["--quick", "--dtypes", "float32,amp_bfloat16"]
    steps.append(("parity", parity, 60 if quick else 110))
    study = [py, "-m", "rnnbench.cli", "compare", "--device", device, "--out", str(out / "study"), "--no-progress",
             "--sweeps", "none", "--timeout", "120"]
    if quick:
        # The dry run checks the plumbing: float32 only (a CPU without bfloat16 arithmetic took
        # longer than the step's limit over amp_bfloat16), one process per measurement.
        study += ["--workloads", "quick", "--impls", "torch.native,torch.eager,jax.scan", "--cells", "lstm",
                  "--repeats", "3", "--precisions", "none", "--budget", "0.2", "--min-time", "0.05",
                  "--processes", "1"]
    else:
        # Sized to the lease (15 device minutes, start included): one GPU-sized workload, the
        # rungs a user chooses between, two processes per ratio.
        study += ["--workloads", "DB-H512-B64-T150", "--cells", "lstm", "--repeats", "10", "--budget", "0.5",
                  "--impls", "torch.native,torch.eager,torch.compile,torch.bptt,torch.triton,jax.scan,jax.bptt,"
                             "jax.pallas,jax.cudnn",
                  "--precisions", "none", "--processes", "2", "--max-processes", "2"]
    steps.append(("study", study, 120 if quick else 160))  # partial results survive a timeout
    if not quick:
        # The CUDA-only compile mode: CUDA graphs (mode="reduce-overhead") of the two torch.compile
        # rungs, against the rungs with the default mode, one process each.
        steps.append(("compile_modes", [py, "-m", "rnnbench.cli", "compare", "--device", device, "--out",
                                        str(out / "compile_modes"), "--no-progress", "--sweeps", "none",
                                        "--timeout", "80", "--workloads", "DB-H512-B16-T25", "--cells", "lstm",
                                        "--impls", ",".join(REDUCE_OVERHEAD_IMPLS), "--precisions", "none",
                                        "--repeats", "10", "--budget", "0.3", "--processes", "1", "--no-parity"],
                      60))
    return steps


REDUCE_OVERHEAD_IMPLS = ("torch.native", "torch.compile", "torch.compile[mode=reduce-overhead]", "torch.scan",
                         "torch.scan[mode=reduce-overhead]")
# Steps of the CUDA plan the CPU dry run cannot take, with the reason it records.
CUDA_ONLY = {"compile_modes": "mode='reduce-overhead' is CUDA graphs, which need a CUDA device: skipped on the CPU"}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or "reports/gpu-check"))
    parser.add_argument("--quick", action="store_true", help="the small dry run (default with --device cpu)")
    args = parser.parse_args(argv)
    quick = args.quick or args.device == "cpu"
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    # torch and JAX share the GPU in the test step: JAX takes memory as it needs it, not 75% up front.
    env = dict(os.environ, XLA_PYTHON_CLIENT_PREALLOCATE=os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE", "false"),
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    summary = {"device": args.device, "quick": quick, "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "steps": []}
    try:
        proc = subprocess.run([sys.executable, "-c", VERSIONS], cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=120)
        summary["versions"] = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else \
            {"error": proc.stderr[-500:]}
    except (subprocess.TimeoutExpired, json.JSONDecodeError, IndexError) as e:
        summary["versions"] = {"error": f"{type(e).__name__}: {e}"}
    versions = summary["versions"]
    print("versions:", json.dumps(versions), flush=True)
    summary["version_notes"] = version_notes(versions)
    if args.device == "cuda" and not versions.get("cuda_available"):
        summary["verdict"] = "no usable CUDA device here (torch.cuda.is_available() is False); nothing was run"
        print(f"gpu_check: {summary['verdict']}")
    else:
        for name, cmd, timeout in plan(args.device, out, quick):
            summary["steps"].append(run_step(name, cmd, out, timeout, env))
        if args.device != "cuda":
            for name, reason in CUDA_ONLY.items():
                print(f"== {name}: {reason}", flush=True)
                summary["steps"].append({"name": name, "status": "skipped", "reason": reason})
        bad = [s["name"] for s in summary["steps"] if s["status"] not in ("ok", "skipped")]
        summary["verdict"] = "all steps ok" if not bad else f"not ok: {', '.join(bad)}"
    (out / "gpu_check.json").write_text(json.dumps(summary, indent=2))
    print(f"gpu_check: {summary['verdict']}; summary: {out / 'gpu_check.json'}")
    return 0 if summary["verdict"].startswith(("all steps ok", "no usable")) else 1


if __name__ == "__main__":
    sys.exit(main())
