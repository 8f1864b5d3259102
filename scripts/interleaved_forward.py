"""Forward (inference) times of a few rungs, interleaved in one process: each round calls
every rung once, so machine noise moves them together.  Ratios to the first rung.

    python scripts/interleaved_forward.py [--workload S1] [--cell lstm] [--rounds 8]
                                          [--impls torch.native,torch.eager,torch.bptt]

Run it alone (2 threads, as the study).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from shared.measure.threads import DEFAULT_THREADS, pin_threads  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", default="S1")
    ap.add_argument("--cell", default="lstm")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--impls", default="torch.native,torch.eager,torch.bptt")
    ap.add_argument("--threads", type=int, default=DEFAULT_THREADS)
    args = ap.parse_args(argv)
    pin_threads(args.threads)
    from shared import registry
    from shared.measure.workloads import resolve

    w = resolve(args.workload)[0]
    spec = w.spec(args.cell)
    wls = {}
    for impl in args.impls.split(","):
        row = registry.get(impl)
        registry.framework(row.framework).set_threads(args.threads)
        wl = row.adapter().make_workload(spec, seq_len=w.seq_len, batch=w.batch, dtype="float32", device="cpu",
                                         seed=0)
        wl.forward()
        wl.forward()
        wls[impl] = wl
    times = {k: [] for k in wls}
    for _ in range(args.rounds):
        for impl, wl in wls.items():
            t0 = time.perf_counter()
            wl.forward()
            times[impl].append(time.perf_counter() - t0)
    medians = {k: statistics.median(v) for k, v in times.items()}
    first = next(iter(medians.values()))
    for impl, m in medians.items():
        print(f"{impl:16s} {1e3 * m:8.1f} ms  {m / first:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
