"""Where the time goes in each rnnbench.jax impl: XLA's per-op times from a `jax.profiler` trace.

    python -m tools.profile_jax                                  # scan and bptt, S1 forward+backward
    python -m tools.profile_jax --impls scan --workload S3 --mode forward --top 8

Per impl, in its own process (same thread pinning as `tools/bench_jax.py`): the
compiled function is warmed up, run `--calls` times under `jax.profiler`, and each HLO
instruction's time per call is listed with how often it ran per call (the trip count
for an op inside a `lax.scan` body) and whether it is a GEMM; then the GEMM / other
totals.  `rnnbench.jax.profiling` does the parsing; the torch side is
`tools/profile_torch.py profile`.
"""

from __future__ import annotations

import argparse
import os
import subprocess
from pathlib import Path
import sys



def profile_one(args) -> None:
    os.sched_setaffinity(0, set(sorted(os.sched_getaffinity(0))[:args.threads]))
    from tools.bench_jax import jax_function

    from rnnbench.jax.profiling import op_times, summarize

    fn, call_args = jax_function(args.impls, args.cell, args.workload, args.mode, unroll=args.unroll,
                                 remat=args.remat)
    profile = op_times(fn, *call_args, calls=args.calls)
    print(f"### jax.{args.impls} {args.cell} {args.workload} {args.mode}"
          f"{' remat' if args.remat else ''} ({args.threads} threads, {args.calls} traced calls)\n")
    print(summarize(profile, top=args.top), flush=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--impls", default="scan,bptt", help="comma-separated rnnbench.jax impls")
    parser.add_argument("--cell", default="lstm")
    parser.add_argument("--workload", default="S1", choices=("S1", "S2", "S3"))
    parser.add_argument("--mode", default="train", choices=("train", "forward"))
    parser.add_argument("--unroll", type=int, default=1)
    parser.add_argument("--remat", action="store_true", help="scan with remat")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--calls", type=int, default=3)
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # worker: one impl, this process
    args = parser.parse_args(argv)
    if args.one:
        profile_one(args)
        return 0
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads))
    rc = 0
    for impl in [s for s in args.impls.split(",") if s]:
        cmd = [sys.executable, "-m", "tools.profile_jax", "--one", "--impls", impl, "--cell", args.cell,
               "--workload", args.workload, "--mode", args.mode, "--unroll", str(args.unroll),
               "--threads", str(args.threads), "--calls", str(args.calls), "--top", str(args.top)]
        cmd += ["--remat"] if args.remat else []
        rc |= subprocess.run(cmd, env=env, check=False, cwd=Path(__file__).resolve().parents[1]).returncode
        print()
    return rc


if __name__ == "__main__":
    sys.exit(main())
