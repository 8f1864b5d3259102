"""How much the gate's benchmark moves between processes of one commit: what its rounds and factor rest on.

    python scripts/gate_noise.py [--processes N] [--impls A,B] [--workloads quick,M50] [--cell lstm]
                                 [--out docs/records/gate_noise.json]

Runs `PairedRatio.track_train_ratio` (benchmarks/rnn.py) as asv does, in N fresh processes
per implementation and workload (one commit, the working tree), and reports per benchmark:
the median of each process's paired-ratio samples, the largest over smallest of those
process medians, and the spread that matters to the gate: the median of the first half of
the processes' pooled samples over that of the second half (what a same-commit gate run
with N/2 rounds per side would see, without asv's install steps between rounds).

Run it alone on the machine (its timings are the result); it takes about N x (2-6 s) per
benchmark.  With --out it writes the per-process samples and the summary as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ONE_PROCESS = """
import json, sys
import benchmarks.rnn as b
impl, cell, workload = sys.argv[1:4]
r = b.PairedRatio()
try:
    r.setup(impl, cell, workload, "float32")
except NotImplementedError as e:
    print(json.dumps({"skipped": str(e)})); sys.exit(0)
print(json.dumps(r.track_train_ratio(impl, cell, workload, "float32")))
"""
DEFAULT_IMPLS = "torch.eager,torch.jit,torch.bptt,jax.scan,jax.bptt"


def one_process(impl: str, cell: str, workload: str) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT), RNNBENCH_DTYPES="float32")
    proc = subprocess.run([sys.executable, "-c", ONE_PROCESS, impl, cell, workload], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"{impl} {cell} {workload}: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def summarize(per_process: list[list[float]]) -> dict:
    medians = [statistics.median(s) for s in per_process]
    half = len(per_process) // 2
    first = [x for s in per_process[:half] for x in s]
    second = [x for s in per_process[half:2 * half] for x in s]
    out = {"process_medians": medians, "samples_per_process": [len(s) for s in per_process],
           "max_over_min": max(medians) / min(medians)}
    if half:
        out["halves_ratio"] = statistics.median(second) / statistics.median(first)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--processes", type=int, default=6)
    ap.add_argument("--impls", default=DEFAULT_IMPLS)
    ap.add_argument("--workloads", default="quick,M50")
    ap.add_argument("--cell", default="lstm")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    started = time.time()
    runs: dict[str, list[list[float]]] = {}
    for k in range(args.processes):  # round-robin over benchmarks, as asv's rounds are
        for workload in args.workloads.split(","):
            for impl in args.impls.split(","):
                key = f"{impl} {args.cell} {workload}"
                rec = one_process(impl, args.cell, workload)
                if "skipped" in rec:
                    print(f"{key}: skipped ({rec['skipped']})", file=sys.stderr)
                    continue
                runs.setdefault(key, []).append(rec["samples"])
        print(f"process {k + 1}/{args.processes} of each benchmark done", file=sys.stderr)
    summary = {key: summarize(v) for key, v in runs.items()}
    print(f"{'benchmark':32s} {'process medians':>48s} {'max/min':>8s} {'halves':>7s}")
    for key, s in summary.items():
        meds = " ".join(f"{m:.3g}" for m in s["process_medians"])
        print(f"{key:32s} {meds:>48s} {s['max_over_min']:8.3f} {s.get('halves_ratio', float('nan')):7.3f}")
    if args.out:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
        record = {"script": "scripts/gate_noise.py", "argv": sys.argv[1:], "commit": commit,
                  "machine": {"cpu": cpu_model(), "cores": os.cpu_count(), "platform": platform.platform()},
                  "seconds": round(time.time() - started, 1), "benchmarks": summary,
                  "samples": runs}
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(record, indent=1) + "\n")
    return 0


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


if __name__ == "__main__":
    sys.exit(main())
