"""The study on a Ray cluster (`rnnbench compare --cluster`), on a cluster of this one machine.

`ray.cluster_utils.Cluster` starts a head (no slot) and two nodes with one measurement slot
each, all on 127.0.0.1.  The fake implementations of tests/study_fake_adapter.py stand in for
the real rungs (they sleep, so times are predictable and cheap), as in test_study.py.  Checked:
every measurement runs exactly once and no two overlap on one node (from the records' start
and end times and node ids); the records equal a local run's in everything but times and
placement; a node removed under a running measurement loses nothing (measured again on the
other node); a driver killed mid-study loses nothing and `resume` completes the run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from rnnbench.core import registry  # noqa: E402
from rnnbench.core.registry import Implementation  # noqa: E402
from rnnbench.measure import workloads  # noqa: E402
from rnnbench.study import run_study  # noqa: E402
from rnnbench.study.planning import StudyConfig  # noqa: E402
from rnnbench.study.records import read_records  # noqa: E402

from tests.support import ROOT, TESTS  # noqa: E402
FAKE = "study_fake_adapter:get_adapter"
FAKES = ("slow", "crash", "linger", "absent")
STUDY = dict(cells=["lstm"], timeout=60, repeats=3, budget_s=0.05, min_time_s=0.0, roof=False, processes=2,
             max_processes=2)
# what differs between two runs of the same study besides the results: times, sizes that depend on
# them (calls timed within a budget, memory), and where and when a measurement ran
TIMING = ("_s", "_pairs", "_n", "_ratio", "gflops_forward", "gflops_train", "_bytes")
PLACEMENT = ("run_id", "time", "pid", "machine_class", "machine", "node_id", "host", "slot", "cpus", "started", "ended",
             "attempt", "retried_after", "node_load_average", "compile_cache",
             "start")  # a node's process is spawned (pinned to its slot's cores), a local one forked


def fake_rows():
    rows = [Implementation("torch.native", "fake native", 6, adapter_path=FAKE)]
    return rows + [Implementation(f"fake.{k}", f"fake {k}", i, adapter_path=FAKE) for i, k in enumerate(FAKES)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A head without slots and two single-slot nodes, on the loopback address only, each node on
    a core of its own where the machine has two."""
    from rnnbench.study.cluster import local_cluster

    mp = pytest.MonkeyPatch()
    rows = fake_rows()
    mp.setattr(registry, "_ROWS", rows)
    mp.setattr(registry, "REGISTRY", {r.name: r for r in rows})
    # the nodes (started from here) and their measurement processes import the fake adapter from tests/
    mp.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(TESTS), str(ROOT), os.environ.get("PYTHONPATH")])))
    mp.setenv("RNNBENCH_TEST_LINGER", str(tmp_path_factory.mktemp("linger") / "first"))
    cores = 1 if len(os.sched_getaffinity(0)) >= 2 else None
    try:
        with local_cluster(2, cores_per_node=cores) as (c, nodes):
            yield c, nodes
            if ray.is_initialized():
                ray.shutdown()
    finally:
        mp.undo()


def measurements(records):
    return [r for r in records if r.get("kind") == "measurement"]


def assert_no_overlap(records):
    """No two measurements ran at the same time on one node."""
    by_node: dict[str, list] = {}
    for r in measurements(records):
        if r.get("node_id"):
            by_node.setdefault(r["node_id"], []).append((r["started"], r["ended"], r["key"]))
    for node, spans in by_node.items():
        spans.sort()
        for (s0, e0, k0), (s1, e1, k1) in zip(spans, spans[1:]):
            assert e0 <= s1, f"{k0} and {k1} overlapped on node {node[:8]}"
    return by_node


def comparable(record):
    return {k: v for k, v in record.items() if not k.endswith(TIMING) and k not in PLACEMENT}


def test_each_measurement_runs_once_in_one_slot_and_matches_a_local_run(cluster, tmp_path):
    c, nodes = cluster
    impls = ["torch.native", "fake.slow", "fake.crash", "fake.absent"]
    config = dict(STUDY, workloads=workloads.resolve("quick"), impls=impls)
    cl = read_records(run_study(StudyConfig(out=tmp_path / "cluster", cluster=c.address, **config), progress=False,
                                log=lambda *a: None))
    local = read_records(run_study(StudyConfig(out=tmp_path / "local", **config), progress=False, log=lambda *a: None))
    keys = [r["key"] for r in measurements(cl)]
    assert len(keys) == len(set(keys)), "a measurement was recorded twice"
    # every process of every measurement, the crashed rung once (its first process failed)
    assert sorted(keys) == sorted(r["key"] for r in measurements(local))
    assert len(keys) == 2 * 2 + 1
    by_node = assert_no_overlap(cl)
    assert set(by_node) == {n.node_id for n in nodes}, "both nodes took measurements"
    machine = {r["machine_class"] for r in measurements(cl)}
    assert len(machine) == 1  # one machine, two nodes of it
    for r in measurements(cl):
        assert r["machine"]["cpu"] and r["machine"]["versions"] and r["machine"]["threads"] == 2
        assert r["node_id"] in by_node and r["slot"] == 0 and r["ended"] > r["started"]
    local_by_key = {r["key"]: r for r in measurements(local)}
    for r in measurements(cl):
        assert comparable(r) == comparable(local_by_key[r["key"]]), r["key"]
        if r.get("train_ratio"):  # the fake slow rung sleeps 3x as long, on a node as here
            assert 2.0 < r["train_ratio"] < 4.5 and 2.0 < local_by_key[r["key"]]["train_ratio"] < 4.5
    crash = next(r for r in measurements(cl) if r["impl"] == "fake.crash")
    assert crash["status"] == "failed" and "SIGABRT" in crash["reason"] and not crash.get("node_lost")
    unavailable = [r for r in cl if r.get("kind") == "unavailable"]
    assert [r["impl"] for r in unavailable] == ["fake.absent"] and unavailable[0]["machine_class"] in machine
    meta = cl[0]
    assert meta["kind"] == "meta" and len(meta["cluster"]["nodes"]) == 2
    if len(os.sched_getaffinity(0)) >= 2:  # each node on its own core
        a, b = (set(n["cores"]) for n in meta["cluster"]["nodes"])
        assert len(a) == len(b) == 1 and not a & b, meta["cluster"]["nodes"]
    assert [r["kind"] for r in cl].count("machine") == 1 and cl[-1]["kind"] == "end"


DRIVER = """
import sys
sys.path[:0] = [{tests!r}, {root!r}]
from rnnbench.core import registry
from rnnbench.core.registry import Implementation
from rnnbench.measure import workloads
from rnnbench.study import run_study  # noqa: E402
from rnnbench.study.planning import StudyConfig
rows = [Implementation("torch.native", "fake native", 6, adapter_path={fake!r})]
rows += [Implementation(f"fake.{{k}}", f"fake {{k}}", i, adapter_path={fake!r}) for i, k in enumerate({fakes!r})]
registry._ROWS, registry.REGISTRY = rows, {{r.name: r for r in rows}}
run_study(StudyConfig(out={out!r}, cluster={address!r}, workloads=workloads.resolve("quick"), impls={impls!r},
                      **{study!r}), progress=False)
"""


def test_a_killed_driver_loses_nothing_and_resume_completes_the_run(cluster, tmp_path):
    c, _ = cluster
    out = tmp_path / "study"
    impls = ["torch.native", "fake.slow"]
    workloads_ = "quick"
    script = DRIVER.format(tests=str(TESTS), root=str(ROOT), fake=FAKE, fakes=FAKES, out=str(out), address=c.address,
                           impls=impls, study=dict(STUDY, cells=["lstm", "gru"]))
    driver = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while len(measurements(read_records(out / "results.jsonl"))) < 2 and time.monotonic() < deadline:
        assert driver.poll() is None, "the driver ended before it could be killed"
        time.sleep(0.2)
    driver.send_signal(signal.SIGKILL)  # as a crash: nothing said, nothing flushed on the way out
    driver.wait()
    before = measurements(read_records(out / "results.jsonl"))
    assert 2 <= len(before) < 8
    config = StudyConfig(out=out, cluster=c.address, resume=True, workloads=workloads.resolve(workloads_),
                         impls=impls, **dict(STUDY, cells=["lstm", "gru"]))
    records = read_records(run_study(config, progress=False, log=lambda *a: None))
    keys = [r["key"] for r in measurements(records)]
    assert len(keys) == len(set(keys)) == 2 * 2 * 2, keys  # 2 cells x 2 rungs x 2 processes, each once
    assert [r["key"] for r in measurements(records)][:len(before)] == [r["key"] for r in before]
    assert all(r["status"] == "ok" for r in measurements(records))
    assert_no_overlap(records)
    assert sum(r.get("kind") == "meta" for r in records) == 2 and records[-1]["kind"] == "end"


def test_a_node_removed_under_a_measurement_loses_nothing(cluster, tmp_path):
    import psutil

    c, nodes = cluster
    marker = Path(os.environ["RNNBENCH_TEST_LINGER"])
    out = tmp_path / "study"
    config = StudyConfig(out=out, cluster=c.address, workloads=workloads.resolve("quick"),
                         impls=["torch.native", "fake.linger"], **dict(STUDY, processes=1, max_processes=1))
    result: dict = {}

    def drive():
        try:
            result["path"] = run_study(config, progress=False, log=lambda *a: None)
        except BaseException as e:  # noqa: BLE001 -- reported by the test below
            result["error"] = e

    import threading
    thread = threading.Thread(target=drive, daemon=True)
    thread.start()
    deadline = time.monotonic() + 120
    while not (marker.exists() and marker.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.2)
    node_id, pid = marker.read_text().split()
    victim = next(n for n in nodes if n.node_id == node_id)
    c.remove_node(victim, allow_graceful=False)
    thread.join(timeout=180)
    assert not thread.is_alive() and "error" not in result, result
    records = read_records(result["path"])
    by_key = {}
    for r in measurements(records):
        by_key.setdefault(r["key"], []).append(r)
    assert all(len(v) == 1 for v in by_key.values()), "a measurement was recorded twice"
    linger = next(r for r in measurements(records) if r["impl"] == "fake.linger")
    assert linger["status"] == "ok" and linger["attempt"] == 1, linger
    assert linger["node_id"] != node_id and "lost on node" in linger["retried_after"][0]
    assert {r["status"] for r in measurements(records)} == {"ok"}
    assert_no_overlap(records)
    time.sleep(1)
    # the lost measurement's process died with its node's worker instead of running beside the retry
    assert not psutil.pid_exists(int(pid)) or psutil.Process(int(pid)).status() == psutil.STATUS_ZOMBIE
    assert json.dumps(records)  # every record is plain JSON


def test_an_unreachable_cluster_is_refused_at_once_with_what_to_do(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "rnnbench.cli", "compare", "--cluster", "127.0.0.1:9", "--workloads",
                           "quick", "--out", str(tmp_path / "out"), "--no-progress"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 1 and "cannot reach a Ray cluster at '127.0.0.1:9'" in proc.stderr, proc.stderr
    assert "rnnbench_slot" in proc.stderr and not (tmp_path / "out" / "results.jsonl").exists()


def test_the_local_cluster_script_refuses_more_cores_than_there_are():
    proc = subprocess.run([sys.executable, "-m", "tools.cluster_local", "--nodes", "2",
                           "--cores-per-node", "4096", "--", "--workloads", "quick"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 1 and "2 nodes of 4096 cores need 8192" in proc.stderr, proc.stderr
