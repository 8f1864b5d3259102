"""How the study's wall time would scale on N single-slot nodes: a simulation, not a measurement.

    python -m tools.experiments.cluster_simulate docs/records/reproducibility/intel-xeon/run-0/results.jsonl --nodes 1,2,4 \
        [--overhead-s 0] [--json docs/records/cluster_simulation.json]

Replays a recorded local run through the cluster driver's own scheduler (`rnnbench.study.cluster.Driver`)
with a stand-in for Ray on a virtual clock: each measurement process takes the wall time its
record says (plus `--overhead-s` per task for Ray's dispatch, 0 by default), each GEMM roof pass
the time the record's timestamps give the end pass, and the answers are the recorded ones, so the
scheduler makes the decisions it would make (which rungs stop after a failed first process, which
measurements get more processes).  Nodes are identical and never slower for sharing a cluster.
Prints the wall time for each N and the speed-up over one node; `--json` writes them as a record
(docs/cluster.md renders its figures from one).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import defaultdict
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

from rnnbench.study.cluster import SLOT, Driver
from rnnbench.study.merge import machine_groups
from rnnbench.study.planning import StudyConfig
from rnnbench.study.records import base_key, process_key, read_records


class _Ref:
    def __init__(self, value, start: float, end: float):
        self.value, self.start, self.end = value, start, end


class _Task:
    def __init__(self, ray, fn):
        self.ray, self.fn, self.node = ray, fn, None

    def options(self, scheduling_strategy=None, **_):
        self.node = scheduling_strategy.node_id
        return self

    def remote(self, *args):
        return self.ray.start(self.fn.__name__, self.node, args)


class VirtualRay:
    """The part of Ray's API the driver uses, on a virtual clock; tasks take their recorded time."""

    def __init__(self, nodes: int, run: "Recorded", overhead_s: float):
        import ray

        self.exceptions = ray.exceptions
        self.n, self.recorded, self.overhead_s = nodes, run, overhead_s
        self.now, self.first, self.last = 0.0, None, 0.0
        self.processes: dict[str, int] = defaultdict(int)  # measurement key -> processes started
        self.roof_passes: dict[int, int] = defaultdict(int)  # threads -> roof passes started

    def nodes(self):
        return [{"NodeID": f"{i:08x}".ljust(56, "0"), "Alive": True, "Resources": {SLOT: 1.0},
                 "NodeManagerHostname": f"sim{i}"}
                for i in range(1, self.n + 1)]

    def remote(self, fn):
        return _Task(self, fn)

    def start(self, name: str, node: str, args) -> _Ref:
        if name == "describe_node":
            return _Ref(dict(self.recorded.machine, node_id=node, host=node[-4:], cpu_list=[0, 1]), self.now, self.now)
        command, job = args[0], args[1]
        if command == "measure":  # the driver starts process k of a measurement after process k-1
            key = process_key(job["key"], self.processes[job["key"]])
            self.processes[job["key"]] += 1
            rec = self.recorded.processes[key]
            duration = rec.get("wall_s") or 0.0
            value = dict(rec)
        else:
            when = ("start", "end")[min(self.roof_passes[job["threads"]], 1)]
            self.roof_passes[job["threads"]] += 1
            duration = self.recorded.roof_s
            value = {"status": "ok", "rows": [{k: v for k, v in r.items() if not k.startswith("_")}
                                              for r in self.recorded.roofs[when] if r["_threads"] == job["threads"]
                                              and any(i["cell"] == r["cell"] and i["workload"]["name"] == r["workload"]
                                                      for i in job["items"])]}
        end = self.now + duration + self.overhead_s
        self.first = self.now if self.first is None else self.first
        self.last = max(self.last, end)
        return _Ref(dict(value, started=self.now, ended=end, node_id=node), self.now, end)

    def wait(self, refs, num_returns=1, timeout=None):
        order = sorted(refs, key=lambda r: r.end)
        ready = order[:num_returns]
        if ready:
            self.now = max(self.now, ready[-1].end)
        return ready, order[num_returns:]

    def get(self, ref):
        return ref.value


class Recorded:
    """What the simulation needs of a recorded local run of one machine."""

    def __init__(self, path: Path):
        groups = machine_groups(read_records(path))
        if len(groups) != 1:
            raise SystemExit(f"{path}: records of {len(groups)} machines; simulate one machine's run")
        records = next(iter(groups.values())).records
        self.meta = next(r for r in records if r.get("kind") == "meta")
        self.machine = dict(self.meta.get("machine") or {})
        measurements = [r for r in records if r.get("kind") == "measurement"]
        self.processes = {r["key"]: r for r in measurements}  # the last record of a key wins, as in the report
        self.jobs, self.unsupported = [], {}
        for r in measurements:
            if r.get("process", 0) == 0 and not any(j["key"] == r["key"] for j in self.jobs):
                if r.get("status") == "skipped" and not r.get("wall_s"):
                    self.unsupported[(r["impl"], r["cell"], r["dtype"])] = r.get("reason")
                baseline = {"impl": r["baseline"]} if r.get("baseline") else None  # as the plan has it
                self.jobs.append(dict(r, key=base_key(r["key"]), baseline=baseline))
        record_fields = ("kind", "run_id", "time", "device", "threads", "status", "roof_pass", "key", "versions")
        roofs = [dict({k: v for k, v in r.items() if k not in record_fields}, _pass=r.get("roof_pass"),
                      _threads=r.get("threads"), _time=r.get("time")) for r in records if r.get("kind") == "roof"]
        self.roofs = {when: [r for r in roofs if r["_pass"] == when] for when in ("start", "end")}
        # the end pass starts when the last measurement ends and is recorded when it ends (whole seconds)
        times = [datetime.fromisoformat(r["time"]).timestamp() for r in measurements if r.get("time")]
        ends = [datetime.fromisoformat(r["_time"]).timestamp() for r in self.roofs["end"] if r.get("_time")]
        self.roof_s = max(0.0, min(ends) - max(times)) if ends and times else 0.0

    def config(self, out: Path) -> StudyConfig:
        m = self.meta
        return StudyConfig(out=out, device=m.get("device", "cpu"), threads=m.get("threads", 2),
                           processes=m.get("processes") or 1, max_processes=m.get("max_processes") or 1,
                           target_half_width=m.get("target_half_width", 0.03), timeout=m.get("timeout", 240),
                           roof=bool(self.roofs["start"]), cluster="simulated")


class Replay(Driver):
    """The driver with the recorded run's plan instead of a probe."""

    def __init__(self, recorded: Recorded, *args, **kwargs):
        self.recorded = recorded
        super().__init__(*args, **kwargs)

    def probe_and_plan(self) -> None:
        cls = next(iter(self.classes))
        self.plans[cls] = [dict(j) for j in self.recorded.jobs]
        self.unsupported[cls] = dict(self.recorded.unsupported)
        self._enqueue_plan(cls)


def simulate(path: Path, nodes: int, overhead_s: float = 0.0) -> dict:
    run = Recorded(path)
    ray = VirtualRay(nodes, run, overhead_s)
    with tempfile.TemporaryDirectory() as tmp:
        config = run.config(Path(tmp))
        results = Replay(run, config, Path(tmp) / "results.jsonl", [], sorted({j["impl"] for j in run.jobs}),
                         lambda *a: None, False, ray=ray).run()
        tasks = sum(1 for r in read_records(results) if r.get("kind") == "measurement" and r.get("node_id"))
    return {"wall_s": ray.last - (ray.first or 0.0), "tasks": tasks}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", type=Path, help="a recorded local run's results.jsonl")
    ap.add_argument("--nodes", default="1,2,4", help="node counts to simulate (default 1,2,4)")
    ap.add_argument("--overhead-s", type=float, default=0.0, help="seconds Ray adds to each task (default 0)")
    ap.add_argument("--json", type=Path, default=None, help="write the record here")
    args = ap.parse_args(argv)
    counts = [int(n) for n in args.nodes.split(",")]
    runs = {n: simulate(args.results, n, args.overhead_s) for n in sorted(set(counts) | {1})}
    one = runs[1]["wall_s"]
    recorded = Recorded(args.results)
    out = {"simulated": True,
           "what": "the recorded run's task durations replayed through the cluster driver's scheduler "
                   "(rnnbench/study/cluster/scheduler.py) on N identical single-slot nodes, on a virtual clock; "
                   "not a measurement of a cluster",
           "source": str(args.results), "source_commit": recorded.machine.get("git_commit"),
           "machine": recorded.machine.get("cpu"), "overhead_s_per_task": args.overhead_s,
           "roof_pass_s": round(recorded.roof_s, 1), "tasks": runs[1]["tasks"],
           "nodes": {str(n): {"wall_s": round(r["wall_s"], 1), "speedup": round(one / r["wall_s"], 3),
                              "efficiency": round(one / r["wall_s"] / n, 3)} for n, r in runs.items()}}
    for n, r in out["nodes"].items():
        print(f"{n} node(s): {r['wall_s']:.0f} s simulated, {r['speedup']:.2f}x one node's "
              f"({r['efficiency']:.0%} of {n}x)")
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")
        print(f"record: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
