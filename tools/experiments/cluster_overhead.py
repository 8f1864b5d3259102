"""The cluster runner's cost: one study on a one-node Ray cluster against the same study run locally.

    python -m tools.experiments.cluster_overhead --pairs 3          (alone: about a quarter of an hour on 2 cores)

Runs the same small study (`rnnbench compare` with OPTIONS) alternately with the local runner and
with `--cluster` on a one-node Ray cluster started on this machine (`local_cluster(1, cores)`:
the node has every core, the head none), PAIRS times each, each run into a directory of its own,
and records every run's wall time and their ratio (cluster over local, per pair and the median)
in docs/records/cluster_overhead.json.  The cluster's wall time includes what Ray costs while
the study runs (its GCS, raylet and task dispatch), not the cluster's start, which a team pays
once.  Target (issue 25): at most 1.1x.  Run it alone.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

from rnnbench.study.cluster import local_cluster
from rnnbench.study.machine import machine_info

OPTIONS = ["--workloads", "quick", "--cells", "lstm,gru", "--custom-cells", "none", "--precisions", "none",
           "--impls", "torch.native,torch.eager,torch.bptt,jax.scan", "--processes", "2", "--max-processes", "2",
           "--no-parity", "--no-progress"]


def study(out: Path, cluster: str | None) -> float:
    cmd = [sys.executable, "-m", "rnnbench.cli", "compare", *OPTIONS, "--out", str(out)]
    if cluster:
        cmd += ["--cluster", cluster]
    t0 = time.monotonic()
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    return time.monotonic() - t0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pairs", type=int, default=3)
    p.add_argument("--json", type=Path, default=ROOT / "docs" / "records" / "cluster_overhead.json")
    args = p.parse_args(argv)
    cores = len(os.sched_getaffinity(0))
    pairs = []
    started = datetime.now(timezone.utc)
    with tempfile.TemporaryDirectory() as tmp, local_cluster(1, cores) as (cluster, _):
        for i in range(args.pairs):
            order = ("local", "cluster") if i % 2 == 0 else ("cluster", "local")
            walls = {}
            for side in order:
                walls[side] = study(Path(tmp) / f"{side}-{i}", cluster.address if side == "cluster" else None)
                print(f"pair {i}: {side} {walls[side]:.1f} s", flush=True)
            pairs.append(dict(local_s=walls["local"], cluster_s=walls["cluster"], ratio=walls["cluster"] / walls["local"],
                              first=order[0]))
    ratios = [p_["ratio"] for p_ in pairs]
    record = dict(script="tools/experiments/cluster_overhead.py", started=started.isoformat(timespec="seconds"),
                  machine={k: v for k, v in machine_info("cpu").items() if k in ("cpu", "usable_cpus", "git_commit")},
                  options=OPTIONS, cores=cores, pairs=pairs, median_ratio=statistics.median(ratios),
                  max_ratio=max(ratios), target=1.1)
    args.json.write_text(json.dumps(record, indent=1) + "\n")
    print(f"cluster / local wall time: median {record['median_ratio']:.3f}, worst {record['max_ratio']:.3f} "
          f"(target <= 1.1); wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
