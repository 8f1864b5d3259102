"""Is the baseline itself stable between processes?  `nn.LSTM` / `nn.GRU` alone, fresh processes.

    python -m tools.experiments.baseline_modes --rounds 6                      # S2, LSTM and GRU, 2 threads and 1
    python -m tools.experiments.baseline_modes --workload S1 --out FILE.json

Every ratio of the study divides by float32 `nn.LSTM` / `nn.GRU` of the same workload.  When a
ratio moves between runs while the rung's own time holds, the baseline moved.  This script
times the study's own baseline workload (`torch.native`'s `make_workload`, the code the study
pairs every rung with) alone, in fresh processes, rounds interleaving the cells and the thread
counts, and records each process's median forward and forward+backward time, then per cell and
thread count the largest over the smallest process median.  Within each process the
forward+backward calls are also kept in blocks (`--block` calls each, median per block), each
block followed by one 512x512x512 `torch.mm` as a control: a state that comes and goes within a
process shows in the blocks, and whether it touches a large GEMM too shows in the control.  Run
it alone on the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def child(cell: str, threads: int, workload: str, calls: int, block: int) -> dict:
    from rnnbench.measure.threads import pin_threads

    pin_threads(threads)  # before torch is imported, as the study's worker does
    from rnnbench.core import registry
    from rnnbench.measure.timing import time_calls
    from rnnbench.measure.workloads import resolve
    from rnnbench.torch.adapter import set_threads

    set_threads(threads)  # the env pinned the pools before import; this sizes the rest (the worker's order)
    w = resolve(workload)[0]
    adapter = registry.get("torch.native").adapter()
    wl = adapter.make_workload(w.spec(cell), seq_len=w.seq_len, batch=w.batch, dtype="float32", seed=0)
    for _ in range(3):
        wl.forward()
        wl.train_step()
    # a fixed count of calls (no time budget): every process gets the same number of samples
    out = {"forward_s": statistics.median(time_calls(wl.forward, calls, budget_s=float("inf")))}
    import torch

    a, b = torch.randn(512, 512), torch.randn(512, 512)
    train, blocks, gemm = [], [], []
    while len(train) < calls:
        times = time_calls(wl.train_step, min(block, calls - len(train)), budget_s=float("inf"))
        train += times
        blocks.append(statistics.median(times))
        gemm.append(statistics.median(time_calls(lambda: torch.mm(a, b), 3, budget_s=float("inf"))))
    return dict(cell=cell, threads=threads, workload=workload, pid=os.getpid(), train_s=statistics.median(train),
                train_blocks_ms=[round(t * 1e3, 3) for t in blocks], gemm_blocks_ms=[round(t * 1e3, 3) for t in gemm],
                **out)


def summarize(samples: list[dict]) -> list[dict]:
    rows = []
    for key in sorted({(s["cell"], s["threads"]) for s in samples}):
        mine = [s for s in samples if (s["cell"], s["threads"]) == key]
        row = dict(cell=key[0], threads=key[1], processes=len(mine))
        for phase in ("forward", "train"):
            values = [s[f"{phase}_s"] for s in mine]
            row[f"{phase}_ms"] = [round(v * 1e3, 3) for v in values]
            row[f"{phase}_max_over_min"] = max(values) / min(values)
        # the largest move between two blocks of one process: a state that changes within a process
        for what in ("train", "gemm"):
            spans = [max(s[f"{what}_blocks_ms"]) / min(s[f"{what}_blocks_ms"]) for s in mine if s.get(f"{what}_blocks_ms")]
            if spans:
                row[f"{what}_within_max_over_min"] = max(spans)
        # the control between the same processes: does a large GEMM move with the baseline?
        gemm = [statistics.median(s["gemm_blocks_ms"]) for s in mine if s.get("gemm_blocks_ms")]
        if gemm:
            row["gemm_ms"] = [round(g, 3) for g in gemm]
            row["gemm_max_over_min"] = max(gemm) / min(gemm)
        rows.append(row)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=6, help="fresh processes per cell and thread count")
    ap.add_argument("--workload", default="S2")
    ap.add_argument("--threads", default="2,1", help="thread counts, comma-separated")
    ap.add_argument("--cells", default="lstm,gru")
    ap.add_argument("--calls", type=int, default=40, help="timed calls per phase in each process")
    ap.add_argument("--block", type=int, default=10, help="forward+backward calls per block within a process")
    ap.add_argument("--out", type=Path, default=None, help="write the record (JSON) here")
    ap.add_argument("--child", nargs=2, metavar=("CELL", "THREADS"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child[0], int(args.child[1]), args.workload, args.calls, args.block)))
        return 0
    from rnnbench.study.machine import machine_info

    threads = [int(t) for t in args.threads.split(",")]
    cells = [c.strip() for c in args.cells.split(",") if c.strip()]
    samples = []
    for _ in range(args.rounds):
        for cell in cells:
            for n in threads:
                out = subprocess.run([sys.executable, __file__, "--child", cell, str(n), "--workload", args.workload,
                                      "--calls", str(args.calls), "--block", str(args.block)],
                                     capture_output=True, text=True, check=True)
                samples.append(json.loads(out.stdout.strip().splitlines()[-1]))
                print(f"{cell} threads={n}: train {samples[-1]['train_s'] * 1e3:.2f} ms, "
                      f"forward {samples[-1]['forward_s'] * 1e3:.2f} ms", flush=True)
    info = machine_info("cpu", max(threads))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    record = dict(command="python -m tools.experiments.baseline_modes " + " ".join(argv if argv is not None else sys.argv[1:]),
                  date=datetime.now(timezone.utc).isoformat(timespec="seconds"), commit=commit,
                  cpu=info.get("cpu"), cores=info.get("logical_cpus"), workload=args.workload, calls=args.calls,
                  block=args.block,
                  rows=summarize(samples), samples=samples)
    for row in record["rows"]:
        print(f"{row['cell']} threads={row['threads']}: train max/min {row['train_max_over_min']:.2f} "
              f"{row['train_ms']}; within one process up to {row.get('train_within_max_over_min', 1):.2f} "
              f"(512^3 mm {row.get('gemm_within_max_over_min', 1):.2f}); forward max/min {row['forward_max_over_min']:.2f}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
