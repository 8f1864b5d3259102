"""How much the gate's benchmarks move between runs of the same commit: the basis of its factor.

    python scripts/gate_noise.py [runs] [impls]      (docs/asv.md quotes it; run it alone)

Each run is a fresh process (as asv's are) on the quick profile: per implementation the
train-step median (`RNN.time_train_step`'s measure) and `RatioToNative.track_train_ratio`.
Prints, per benchmark, the largest over smallest value across runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ONE_RUN = """
import json, statistics, sys, time
import benchmarks.rnn as b
out = {}
for impl in sys.argv[1].split(","):
    wl = b._build(impl, "lstm", "quick", "float32")
    samples = []
    for _ in range(10):
        t = time.perf_counter(); wl.train_step(); samples.append(time.perf_counter() - t)
    r = b.RatioToNative(); r.setup(impl, "lstm", "quick", "float32")
    out[impl] = {"time_train_step": statistics.median(samples),
                 "track_train_ratio": r.track_train_ratio(impl, "lstm", "quick", "float32")}
print(json.dumps(out))
"""


def main(argv: list[str]) -> int:
    runs = int(argv[0]) if argv else 3
    impls = argv[1] if len(argv) > 1 else "torch.eager,torch.jit,torch.bptt,torch.cell_loop,jax.scan,jax.bptt"
    env = dict(os.environ, RNNBENCH_PROFILE="quick", PYTHONPATH=str(ROOT))
    results = []
    for k in range(runs):
        proc = subprocess.run([sys.executable, "-c", ONE_RUN, impls], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=600, check=True)
        results.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        print(f"run {k + 1}: done", file=sys.stderr)
    print(f"{'implementation':18s} {'benchmark':18s} " + " ".join(f"run {k + 1:<6d}" for k in range(runs)) + " max/min")
    for impl in results[0]:
        for bench in ("time_train_step", "track_train_ratio"):
            values = [r[impl][bench] for r in results]
            shown = " ".join(f"{v * 1e3 if bench.startswith('time') else v:10.3g}" for v in values)
            print(f"{impl:18s} {bench:18s} {shown} {max(values) / min(values):7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
