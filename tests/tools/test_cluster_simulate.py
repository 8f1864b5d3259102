"""The cluster driver's scheduler on a virtual clock (tools/experiments/cluster_simulate.py): the rules it
keeps (process k of a measurement after process k-1, one task per slot) and the wall time it
gives a known set of task durations.  No Ray processes: a stand-in for Ray's API."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

pytest.importorskip("ray")

from rnnbench.measure import workloads  # noqa: E402

from tests.support import ROOT  # noqa: E402
from tools.experiments import cluster_simulate  # noqa: E402
QUICK = workloads.resolve("quick")[0]


def recorded_run(tmp_path, durations: dict[str, tuple[float, ...]]) -> Path:
    """A local run's records: each implementation's processes with the given wall times."""
    records = [dict(kind="meta", run_id="r", device="cpu", threads=2, processes=2, max_processes=2, timeout=60,
                    target_half_width=0.03, machine=dict(cpu="fixture", threads=2, device="cpu"))]
    for index in range(2):
        for impl, walls in durations.items():
            key = f"{impl}|lstm|quick|cpu|float32"
            records.append(dict(kind="measurement", run_id="r", key=key + (f"#p{index}" if index else ""),
                                process=index, impl=impl, framework="fake", rung=0, group="main", cell="lstm",
                                workload=QUICK.to_dict(), workload_name="quick", device="cpu", dtype="float32",
                                threads=2, parity=False, status="ok", wall_s=walls[index], baseline=None))
    path = tmp_path / "results.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    return path


def test_the_schedule_keeps_the_order_of_processes_and_one_task_per_slot(tmp_path):
    # A's first process is long: its second may not start before it ends, while B, C, D go on
    path = recorded_run(tmp_path, {"a": (4, 4), "b": (1, 1), "c": (1, 1), "d": (1, 1)})
    assert cluster_simulate.simulate(path, 1)["wall_s"] == 14  # one node: every task after another
    # two nodes: a0 0-4 | b0 0-1, c0 1-2, d0 2-3, b1 3-4 (a1 waits for a0), then a1 4-8 | c1 4-5, d1 5-6
    assert cluster_simulate.simulate(path, 2) == {"wall_s": 8, "tasks": 8}
    assert cluster_simulate.simulate(path, 8)["wall_s"] == 8  # a's two processes in a row bound it


def test_the_record_says_it_is_a_simulation(tmp_path, capsys):
    path = recorded_run(tmp_path, {"a": (2, 2), "b": (2, 2)})
    out = tmp_path / "sim.json"
    assert cluster_simulate.main([str(path), "--nodes", "2", "--json", str(out)]) == 0
    record = json.loads(out.read_text())
    assert record["simulated"] is True and "not a measurement" in record["what"]
    assert record["nodes"]["2"] == {"wall_s": 4, "speedup": 2.0, "efficiency": 1.0}
    assert "2 node(s): 4 s simulated, 2.00x" in capsys.readouterr().out


class FlakyRay(cluster_simulate.VirtualRay):
    """Measurement tasks of the named implementations are lost (their Ray worker crashed) on their
    first `losses[impl]` attempts."""

    def __init__(self, *args, losses: dict[str, int]):
        super().__init__(*args)
        self.losses = dict(losses)

    def start(self, name, node, args):
        ref = super().start(name, node, args)
        impl = args[1].get("impl") if name == "measure_on_node" else None
        if self.losses.get(impl):
            self.losses[impl] -= 1
            self.processes[args[1]["key"]] -= 1  # the lost one is measured again: the same process
            ref.value = self.exceptions.WorkerCrashedError()
        return ref

    def get(self, ref):
        if isinstance(ref.value, Exception):
            raise ref.value
        return ref.value


def replay(tmp_path, ray, previous=()):
    run = cluster_simulate.Recorded(tmp_path / "results.jsonl")
    out = tmp_path / "cluster"
    out.mkdir(exist_ok=True)
    config = run.config(out)
    config.resume = bool(previous)
    driver = cluster_simulate.Replay(run, config, out / "results.jsonl", list(previous), ["a", "b"],
                                     lambda *a: None, False, ray=ray)
    from rnnbench.study.records import read_records
    return read_records(driver.run())


def test_a_lost_task_is_measured_again_once_on_another_node_then_recorded_failed_and_resumed(tmp_path):
    from rnnbench.study.records import read_records

    recorded_run(tmp_path, {"a": (1, 1), "b": (1, 1)})
    run = cluster_simulate.Recorded(tmp_path / "results.jsonl")
    records = replay(tmp_path, FlakyRay(2, run, 0.0, losses={"a": 1, "b": 2}))
    m = {r["key"]: r for r in records if r.get("kind") == "measurement"}
    a0 = m["a|lstm|quick|cpu|float32"]
    assert a0["status"] == "ok" and a0["attempt"] == 1 and "WorkerCrashedError" in a0["retried_after"][0]
    lost = a0["retried_after"][0].split("lost on node ")[1].split(":")[0]
    assert lost != a0["host"] + f" ({a0['node_id'][:8]})"  # on the other node
    b0 = m["b|lstm|quick|cpu|float32"]
    assert b0["status"] == "failed" and b0["node_lost"] and "lost both times" in b0["reason"]
    assert "b|lstm|quick|cpu|float32#p1" not in m  # its first process failed: no second
    # --resume measures the lost one again (it says nothing about the rung), and nothing else
    again = replay(tmp_path, cluster_simulate.VirtualRay(2, run, 0.0), previous=read_records(tmp_path / "cluster" /
                                                                                           "results.jsonl"))
    new = [r for r in again if r.get("kind") == "measurement"][len(m):]
    assert [r["key"] for r in new] == ["b|lstm|quick|cpu|float32", "b|lstm|quick|cpu|float32#p1"]
    assert all(r["status"] == "ok" for r in new)


def test_a_cluster_without_slots_is_refused_with_what_to_do(tmp_path):
    from rnnbench.study.cluster import ClusterError

    recorded_run(tmp_path, {"a": (1, 1)})
    run = cluster_simulate.Recorded(tmp_path / "results.jsonl")
    with pytest.raises(ClusterError, match="rnnbench_slot.*ray start"):
        replay(tmp_path, cluster_simulate.VirtualRay(0, run, 0.0))


class GrowingRay(cluster_simulate.VirtualRay):
    """One node at first; a second joins once the virtual clock passes one second."""

    def nodes(self):
        every = super().nodes()
        return every if self.now >= 1 else every[:1]


def test_a_node_that_joins_takes_work_of_its_machine(tmp_path, monkeypatch):
    from rnnbench.study.cluster import scheduler as driver

    monkeypatch.setattr(driver, "REFRESH_S", 0.0)  # look for nodes at every turn of the loop
    recorded_run(tmp_path, {"a": (1, 1), "b": (1, 1), "c": (1, 1)})
    run = cluster_simulate.Recorded(tmp_path / "results.jsonl")
    records = replay(tmp_path, GrowingRay(2, run, 0.0))
    nodes = [r["node_id"] for r in records if r.get("kind") == "measurement"]
    assert len(nodes) == 6 and len(set(nodes)) == 2, nodes  # the second node measured too
    assert nodes[0] == nodes[1]  # a and b one after the other on the first node, before the second joined
