"""Run `rnnbench compare` on a Ray cluster of several nodes on this one machine, each on cores of its own.

    python -m tools.cluster_local --nodes 2 --cores-per-node 2 -- --out reports/two-nodes [compare's options]

For measuring the cluster runner where no second machine is at hand: the overhead of a one-node
cluster against the local runner (`taskset -c 0,1 rnnbench compare ...` beside `--nodes 1
--cores-per-node 2`), and the wall time with two nodes.  The nodes share this machine's memory
bandwidth and caches, so their times are not those of separate machines; run it alone on the
machine.  Starts the cluster on 127.0.0.1 (`rnnbench.study.cluster.local_cluster`), runs the study
with `--cluster` on it, prints the study's wall time and stops the cluster.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from rnnbench.study.cluster import ClusterError, local_cluster


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=2, help="nodes of one measurement slot each (default 2)")
    ap.add_argument("--cores-per-node", type=int, default=2, help="cores of each node, its own (default 2)")
    ap.add_argument("compare", nargs=argparse.REMAINDER, help="options of rnnbench compare, after --")
    args = ap.parse_args(argv)
    options = [a for a in args.compare if a != "--"]
    try:
        with local_cluster(args.nodes, args.cores_per_node) as (cluster, _):
            t0 = time.monotonic()
            rc = subprocess.run([sys.executable, "-m", "rnnbench.cli", "compare", "--cluster", cluster.address, *options],
                                cwd=ROOT).returncode
            print(f"cluster_local: {args.nodes} node(s) of {args.cores_per_node} cores: the study took "
                  f"{time.monotonic() - t0:.0f} s (exit {rc})")
            return rc
    except ClusterError as e:
        print(f"cluster_local: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
