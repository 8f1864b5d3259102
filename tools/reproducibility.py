"""Does the study give the same answer twice?  Run it N times in fresh processes and compare.

    python -m tools.reproducibility --runs 3 --out reports/repro      # each run: S1 and S2, LSTM and GRU
    python -m tools.reproducibility --from reports/repro              # re-read runs already made
    python -m tools.reproducibility --from reports/repro --processes 3  # as if each had stopped at 3
    python -m tools.reproducibility --runs 3 -- --workloads S2 --max-processes 8   # more processes at S2

Each run is `rnnbench compare --profile answer` with every rung (S1 and S2, LSTM and GRU, every CPU rung, forward
and forward+backward, each ratio with its 95% interval) into OUT/run-K.  Then, per ratio, it prints
the max/min over the runs, how many runs' values lie inside every other run's interval, and how
many pairs of runs have overlapping intervals (the study's own test for a tie: two runs agree
when their intervals overlap), marks (†) a ratio that some run's report marked for a baseline
that moved between its processes, and writes OUT/reproducibility.json.  Goal on a quiet 2-core
machine: every ratio within 1.10x max/min over 3 runs, and at least 90% of the values inside
the other runs' intervals.  Even exact 95% intervals hold another run's value only about five
times in six (both values carry noise), so the second goal asks for intervals wider than a 95%
interval of one run; the overlap share is the one that a calibrated interval brings near 95%.
Run it alone: anything else on the machine is part of what it measures.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from rnnbench.core import registry
from rnnbench.study.records import read_records
from rnnbench.study.table import UNSTABLE_BASELINE, collect, table_rows

MAX_OVER_MIN = 1.10
INSIDE_SHARE = 0.90


def run_study(out: Path, extra: list[str]) -> None:
    # every CPU rung, the ladder's steps too (the answer profile alone leaves those out)
    impls = [] if "--impls" in extra else ["--impls", ",".join(registry.default_study_names("full"))]
    cmd = [sys.executable, "-m", "rnnbench.cli", "compare", "--profile", "answer", "--out", str(out),
           "--no-progress", *impls, *extra]
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, cwd=ROOT, check=True)


def ratios(run_dir: Path, processes: int | None = None) -> dict[str, dict]:
    """(impl cell workload phase) -> {ratio, lo, hi} of one run's float32 main rows; with `processes`,
    as if each measurement had stopped after its first that many processes."""
    records = [r for r in read_records(run_dir / "results.jsonl")
               if processes is None or r.get("kind") != "measurement" or r.get("process", 0) < processes]
    out = {}
    for r in table_rows(collect(records)):
        if r["group"] != "main" or r["dtype"] != "float32" or r["status"] != "ok" or r["impl"] == "torch.native":
            continue
        for phase in ("forward", "train"):
            if r.get(f"{phase}_x_native") is not None:
                out[f"{r['impl']} {r['cell']} {r['workload']} {phase}"] = dict(
                    ratio=r[f"{phase}_x_native"], lo=r.get(f"{phase}_ratio_lo"), hi=r.get(f"{phase}_ratio_hi"),
                    marked=(r.get(f"{phase}_baseline_spread") or 0) > UNSTABLE_BASELINE)
    return out


def run_info(run_dir: Path) -> dict:
    """What a reader needs to trust a run: its machine, commit, start and length, and load."""
    records = read_records(run_dir / "results.jsonl")
    meta = next((r for r in records if r.get("kind") == "meta"), {})
    end = next((r for r in reversed(records) if r.get("kind") == "end"), {})
    machine = meta.get("machine", {})
    minutes = None
    if meta.get("started") and end.get("finished"):
        minutes = (datetime.fromisoformat(end["finished"]) - datetime.fromisoformat(meta["started"])).total_seconds() / 60
    return dict(run=run_dir.name, started=meta.get("started"), minutes=minutes, argv=meta.get("argv"),
                cpu=machine.get("cpu"), amx=machine.get("amx"), cores=machine.get("usable_cpus"),
                commit=machine.get("git_commit"), versions=machine.get("versions"),
                load_average_end=end.get("load_average"),
                measurements=sum(r.get("kind") == "measurement" for r in records))


def select(runs: list[dict[str, dict]], impls: list[str] | None) -> list[dict[str, dict]]:
    """Only the ratios of `impls` (None: all), keyed "impl cell workload phase"."""
    if impls is None:
        return runs
    return [{k: v for k, v in r.items() if k.split()[0] in impls} for r in runs]


def summarize(runs: list[dict[str, dict]]) -> dict:
    keys = sorted(set.intersection(*(set(r) for r in runs))) if runs else []
    rows, inside, checked, overlap, run_pairs = [], 0, 0, 0, 0
    for key in keys:
        values = [r[key] for r in runs]
        xs = [v["ratio"] for v in values]
        spread = max(xs) / min(xs)
        ins = 0
        for i, v in enumerate(values):  # v inside every other run's interval
            others = [w for j, w in enumerate(values) if j != i and w["lo"] is not None]
            ok = all(w["lo"] <= v["ratio"] <= w["hi"] for w in others)
            ins += ok
        inside += ins
        checked += len(values)
        both = [(v, w) for i, v in enumerate(values) for w in values[i + 1:] if v["lo"] is not None and w["lo"] is not None]
        agree = sum(not (v["hi"] < w["lo"] or w["hi"] < v["lo"]) for v, w in both)
        overlap += agree
        run_pairs += len(both)
        rows.append(dict(key=key, ratios=xs, max_over_min=spread, inside_others=ins, runs=len(values),
                         overlapping_pairs=agree, pairs=len(both),
                         marked=sum(bool(v.get("marked")) for v in values)))
    worst = max(rows, key=lambda r: r["max_over_min"], default=None)
    beyond = sorted((r for r in rows if r["max_over_min"] > MAX_OVER_MIN), key=lambda r: -r["max_over_min"])
    # the ratios no run's report marked (†: its baseline moved between that run's processes)
    clean = [r for r in rows if not r["marked"]]
    return dict(runs=len(runs), ratios=len(rows), worst_max_over_min=worst and worst["max_over_min"],
                unmarked=len(clean), unmarked_within_goal=sum(r["max_over_min"] <= MAX_OVER_MIN for r in clean),
                unmarked_worst=max((r["max_over_min"] for r in clean), default=None),
                worst_key=worst and worst["key"], beyond_goal=[f"{r['key']} {r['max_over_min']:.2f}" for r in beyond],
                within_goal=sum(r["max_over_min"] <= MAX_OVER_MIN for r in rows),
                inside_share=inside / checked if checked else None,
                overlap_share=overlap / run_pairs if run_pairs else None, rows=rows,
                goal=dict(max_over_min=MAX_OVER_MIN, inside_share=INSIDE_SHARE))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--out", type=Path, default=ROOT / "reports" / "reproducibility")
    p.add_argument("--from", dest="from_", type=Path, default=None, help="read OUT/run-* made earlier")
    p.add_argument("--json", type=Path, default=None,
                   help="where to write the summary (default OUT/reproducibility.json; the committed records are "
                        "docs/records/reproducibility/MACHINE/: the runs and summary.json)")
    p.add_argument("--only", default=None, metavar="IMPLS",
                   help="summarize only these implementations' ratios (comma-separated), e.g. to compare runs "
                        "of different rung sets on the rungs they share")
    p.add_argument("--processes", type=int, default=None, metavar="K",
                   help="with --from: use only each measurement's first K processes (what a run that stopped "
                        "there would have said), to see what more processes buy")
    p.add_argument("extra", nargs="*", help="more `rnnbench compare` options after --, e.g. -- --impls ...")
    args = p.parse_args(argv)
    out = args.from_ or args.out
    if args.from_ is None:
        for k in range(args.runs):
            run_study(out / f"run-{k}", args.extra)
    dirs = sorted(d for d in out.glob("run-*") if (d / "results.jsonl").exists())
    only = sorted({name.strip() for name in args.only.split(",") if name.strip()}) if args.only else None
    result = summarize(select([ratios(d, args.processes) for d in dirs], only))
    result["only"] = only
    result["first_processes"] = args.processes
    result["run_info"] = [run_info(d) for d in dirs]
    for r in result["rows"]:
        mark = ("" if r["max_over_min"] <= MAX_OVER_MIN else "  > goal") + ("  †" * bool(r["marked"]))
        print(f"{r['key']:45s} " + " ".join(f"{x:6.2f}" for x in r["ratios"])
              + f"   max/min {r['max_over_min']:.3f}  inside others {r['inside_others']}/{r['runs']}{mark}")
    share, agree = result["inside_share"], result["overlap_share"]
    print(f"\n{result['runs']} runs, {result['ratios']} ratios: {result['within_goal']} within {MAX_OVER_MIN}x "
          f"max/min (worst {result['worst_max_over_min'] or float('nan'):.3f}); "
          f"{'n/a' if share is None else f'{share:.0%}'} of values inside every other run's interval; "
          f"{'n/a' if agree is None else f'{agree:.0%}'} of run pairs with overlapping intervals")
    print(f"{result['unmarked']} ratios that no run marked † (a baseline that moved between its processes): "
          f"{result['unmarked_within_goal']} within {MAX_OVER_MIN}x")
    path = args.json or out / "reproducibility.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
