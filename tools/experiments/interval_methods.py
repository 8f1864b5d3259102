"""Which interval holds up between runs?  Two estimators on the same committed records.

    python -m tools.experiments.interval_methods docs/records/reproducibility/amd-epyc     # one machine's committed runs
    python -m tools.experiments.interval_methods --runs DIR DIR ... --json FILE            # any study runs of the same plan

For every float32 ratio that all runs measured, each run's per-process pairs give an interval by
(a) Student's t over the processes' log medians (what the study uses, rnnbench/measure/stats.py) and
(b) the two-level percentile bootstrap (processes with replacement, then each one's pairs) that
the study used before.  Neither run knows the others, so how often one run's ratio falls inside
another run's interval, and how often two runs' intervals overlap, says how honest each interval
is.  Writes FOLDER/interval_methods.json beside the runs (or --json).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

from rnnbench.study.records import read_records
from rnnbench.measure.stats import pair_ratios, percentile_interval, pooled_ratio


def two_level_bootstrap(processes, n_boot: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """The former estimator's interval: processes with replacement, then pairs with replacement."""
    ratios = [r for r in (pair_ratios(p) for p in processes) if r]
    est = math.exp(statistics.fmean(math.log(statistics.median(r)) for r in ratios))
    rng = random.Random(seed)
    boot = []
    for _ in range(n_boot):
        chosen = [ratios[rng.randrange(len(ratios))] for _ in ratios]
        boot.append(math.exp(statistics.fmean(math.log(statistics.median(rng.choices(r, k=len(r)))) for r in chosen)))
    lo, hi = percentile_interval(sorted(boot))
    return est, min(lo, est), max(hi, est)


def t_method(processes) -> tuple[float, float, float]:
    s = pooled_ratio(processes)
    return s["ratio"], s["lo"], s["hi"]


METHODS = {"t": t_method, "two_level_bootstrap": two_level_bootstrap}


def pairs_by_key(run_dir: Path) -> dict[tuple, list]:
    """(impl, cell, workload, phase) -> one list of pairs per process, float32 rungs other than native."""
    out = defaultdict(list)
    for r in read_records(run_dir / "results.jsonl"):
        if r.get("kind") != "measurement" or r.get("status") != "ok" or r.get("dtype") != "float32":
            continue
        if r.get("impl") == "torch.native" or r.get("group", "main") != "main":
            continue
        for phase in ("forward", "train"):
            if r.get(f"{phase}_pairs"):
                out[(r["impl"], r["cell"], r["workload_name"], phase)].append(r[f"{phase}_pairs"])
    return out


def evaluate(runs: list[dict], method) -> dict:
    keys = sorted(set.intersection(*(set(r) for r in runs)))
    inside = pairs = overlap = run_pairs = 0
    widths = []
    processes = defaultdict(int)
    for key in keys:
        est = [method(r[key]) for r in runs]
        for i, (x, lo, hi) in enumerate(est):
            widths.append((hi - lo) / 2 / x)
            processes[len(runs[i][key])] += 1
            for j, (y, lo2, hi2) in enumerate(est):
                if i == j:
                    continue
                pairs += 1
                inside += lo2 <= x <= hi2
                if j > i:
                    run_pairs += 1
                    overlap += not (hi < lo2 or lo > hi2)
    return dict(ratios=len(keys), inside_share=inside / pairs, overlap_share=overlap / run_pairs,
                median_half_width=statistics.median(widths), max_half_width=max(widths),
                processes_per_interval={str(k): v for k, v in sorted(processes.items())})


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("folder", nargs="?", type=Path, help="a folder of runs, run-0, run-1, ...")
    p.add_argument("--runs", nargs="+", type=Path, help="the runs' folders (instead of FOLDER)")
    p.add_argument("--json", type=Path, default=None, help="default FOLDER/interval_methods.json")
    args = p.parse_args(argv)
    if not args.runs:
        if args.folder is None:
            p.error("give FOLDER or --runs")
        args.runs = sorted(args.folder.glob("run-*"))
    if args.json is None:
        if args.folder is None:
            p.error("give --json with --runs")
        args.json = args.folder / "interval_methods.json"
    runs = [pairs_by_key(d) for d in args.runs]
    result = dict(runs=[str(d.relative_to(ROOT)) if d.is_relative_to(ROOT) else str(d) for d in args.runs],
                  methods={name: evaluate(runs, m) for name, m in METHODS.items()})
    for name, r in result["methods"].items():
        print(f"{name:22s} {r['ratios']} ratios: a run's value inside another run's interval {r['inside_share']:.0%}, "
              f"two runs' intervals overlap {r['overlap_share']:.0%}, median half-width {r['median_half_width']:.1%}")
    args.json.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
