"""The report across machines, on records of two machine classes made here (test fixtures, not
measurements): times are divided only within a machine, one section per machine, and the
summary flips an answer only where each machine's winner beats the other's beyond noise."""

from __future__ import annotations

import csv
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from rnnbench.measure import workloads
from rnnbench.study.machine import machine_class
from rnnbench.study.merge import cross_machine, machine_groups
from rnnbench.study.report import write_report
from rnnbench.study.table import collect

from tests.support import ROOT  # noqa: E402
S1, S2 = workloads.resolve("S1;S2")
MACHINE_A = dict(cpu="Fixture CPU A", isa=["avx2", "avx512f", "avx512_bf16"], logical_cpus=2, threads=2, device="cpu",
                 versions={"torch": "2.13.0", "jax": "0.10.2"}, usable_cpus=2)
MACHINE_B = dict(MACHINE_A, cpu="Fixture CPU B", isa=["avx2", "amx_tile", "amx_bf16"], logical_cpus=8)
FW = {"torch.native": "torch", "torch.bptt": "torch", "jax.bptt": "jax"}
# (workload, impl) -> train ratio to native on each machine: on S1 jax.bptt wins on A and torch.bptt
# on B, each clearly; on S2 jax.bptt wins on both (on A only as a tie with torch.native): no flip there
RATIOS = {"A": {("S1", "jax.bptt"): 0.80, ("S1", "torch.bptt"): 1.20, ("S2", "jax.bptt"): 0.99, ("S2", "torch.bptt"): 1.5},
          "B": {("S1", "jax.bptt"): 1.30, ("S1", "torch.bptt"): 0.85, ("S2", "jax.bptt"): 0.70, ("S2", "torch.bptt"): 1.4}}


def study_records(machine: dict, ratios: dict, run_id: str, native_s: float, noise: float = 0.004) -> list[dict]:
    """A two-process study of one machine: nn.LSTM's time `native_s` (each machine its own) and each
    rung's pairs around its ratio; S2's tie on A comes from a wide spread of its pairs."""
    rng = random.Random(run_id)
    records = [dict(kind="meta", run_id=run_id, started="t", argv=None, device="cpu", dtype="float32", threads=2,
                    repeats=3, budget_s=1.0, min_time_s=0.1, timeout=60, resumed=False, processes=2, max_processes=2,
                    target_half_width=0.03, machine=machine)]
    for w in (S1, S2):
        for impl in ("torch.native", "torch.bptt", "jax.bptt"):
            for process in (0, 1):
                ratio = ratios.get((w.name, impl), 1.0)
                spread = 0.08 if (run_id, w.name, impl) == ("a", "S2", "jax.bptt") else noise
                rec = dict(kind="measurement", run_id=run_id, key=f"{impl}|lstm|{w.name}|cpu|float32"
                           + (f"#p{process}" if process else ""), process=process, group="main", impl=impl,
                           framework=FW[impl], rung=3, cell="lstm", workload_name=w.name, workload=w.to_dict(),
                           device="cpu", dtype="float32", status="ok", threads=2,
                           forward_s=native_s * ratio / 3, train_s=native_s * ratio, forward_iqr_s=0.0, train_iqr_s=0.0)
                if impl != "torch.native":
                    for phase, base in (("forward", native_s / 3), ("train", native_s)):
                        rec[f"{phase}_pairs"] = [(base * ratio * (1 + rng.uniform(-spread, spread)), base)
                                                 for _ in range(9)]
                records.append(rec)
    return records + [dict(kind="end", run_id=run_id, load_average=[0.1, 0.1, 0.1])]


@pytest.fixture
def two_runs(tmp_path):
    paths = []
    for name, machine, native_s in (("a", MACHINE_A, 0.40), ("b", MACHINE_B, 0.10)):
        run = tmp_path / f"run-{name}"
        run.mkdir()
        recs = study_records(machine, RATIOS[name.upper()], name, native_s)
        (run / "results.jsonl").write_text("\n".join(json.dumps(r) for r in recs) + "\n")
        paths.append(run)
    return paths


def test_records_split_by_machine_and_ratios_stay_within_one(two_runs):
    records = [json.loads(line) for p in two_runs for line in (p / "results.jsonl").read_text().splitlines()]
    groups = machine_groups(records)
    assert list(groups) == [machine_class(MACHINE_A), machine_class(MACHINE_B)]
    for cls, machine, ratios in ((machine_class(MACHINE_A), MACHINE_A, RATIOS["A"]),
                                 (machine_class(MACHINE_B), MACHINE_B, RATIOS["B"])):
        res = collect(groups[cls].records)
        assert res.metas[0]["machine"] == machine and len(res.measurements) == 6
        for m in res.measurements:
            if m["impl"] != "torch.native":  # each machine's own pairs, never the other's times
                assert m["train_ratio"] == pytest.approx(ratios[(m["workload_name"], m["impl"])], rel=0.03)


def test_the_summary_flips_only_where_both_winners_are_clear(two_runs):
    records = [json.loads(line) for p in two_runs for line in (p / "results.jsonl").read_text().splitlines()]
    groups = machine_groups(records)
    a, b = groups
    rows = {(r["workload"], r["mode"]): r for r in cross_machine({c: collect(g.records) for c, g in groups.items()})}
    s1 = rows["S1", "training"]
    assert s1["answers"][a]["best"] == "jax.bptt" and s1["answers"][b]["best"] == "torch.bptt"
    assert (a, b, "jax.bptt", "torch.bptt") in s1["flips"] and (a, b, "JAX", "torch") in s1["flips"]
    s2 = rows["S2", "training"]
    assert {s2["answers"][a]["best"], *s2["answers"][a]["tied"]} == {"jax.bptt", "torch.native"}  # a tie on A
    assert s2["answers"][b]["best"] == "jax.bptt" and not s2["answers"][b]["tied"]
    assert s2["flips"] == []  # whichever A lists first, a tie is no flip


def test_runs_of_two_machines_merge_into_one_report(two_runs, tmp_path):
    out = tmp_path / "merged"
    text = write_report([p / "results.jsonl" for p in two_runs], out).read_text()
    a, b = machine_class(MACHINE_A), machine_class(MACHINE_B)
    assert text.startswith("# rnnbench study across machines")
    summary = text[text.index("## Across machines"):text.index("## M1:")]
    assert f"**M1** (`{a}`): Fixture CPU A (avx2, avx512f, avx512_bf16), 2 CPUs, 2 threads" in summary
    assert f"**M2** (`{b}`): Fixture CPU B (avx2, amx_tile, amx_bf16), 8 CPUs" in summary
    assert "- lstm S1 training: jax.bptt on M1, torch.bptt on M2" in summary
    assert "- lstm S1 training: JAX on M1, torch on M2" in summary
    assert "lstm S2 training:" not in summary
    # one section per machine, each its own study: its machine, its times, its ratios
    m1, m2 = text[text.index("## M1:"):text.index("## M2:")], text[text.index("## M2:"):]
    assert "### Machine" in m1 and "- CPU: Fixture CPU A" in m1 and "Fixture CPU B" not in m1
    assert "- CPU: Fixture CPU B" in m2 and "| jax.bptt | lstm | S1 |" in m2
    assert "![time relative to torch.native](machines/M1-" in m1
    for name, cls in (("M1", a), ("M2", b)):
        own = out / "machines" / f"{name}-{cls}"
        assert (own / "report.md").read_text().startswith(f"# {name}: ") and (own / "ratio_to_native.png").is_file()
        assert (own / "results.csv").is_file()
    with open(out / "results.csv") as f:
        rows = list(csv.DictReader(f))
    assert {r["machine"] for r in rows} == {"M1", "M2"} and len(rows) == 12
    s1 = {(r["machine"], r["impl"]): float(r["train_x_native"]) for r in rows if r["workload"] == "S1"}
    assert s1["M1", "jax.bptt"] == pytest.approx(0.80, rel=0.03) and s1["M2", "jax.bptt"] == pytest.approx(1.30, rel=0.03)


def test_one_cluster_file_of_two_machines_splits_like_two_runs(two_runs, tmp_path):
    """A cluster run's records carry their machine class; its meta is the driver's, its machine
    records say what each class is."""
    a, b = machine_class(MACHINE_A), machine_class(MACHINE_B)
    meta = dict(json.loads((two_runs[0] / "results.jsonl").read_text().splitlines()[0]), run_id="c")
    del meta["machine"]
    meta["cluster"] = dict(address="fixture:6379", nodes=[dict(node_id="n1", host="h1", slots=1, machine_class=a),
                                                          dict(node_id="n2", host="h2", slots=1, machine_class=b)])
    records = [meta, dict(kind="machine", run_id="c", machine_class=a, machine=MACHINE_A, nodes=["n1"]),
               dict(kind="machine", run_id="c", machine_class=b, machine=MACHINE_B, nodes=["n2"])]
    for cls, machine, name, native_s in ((a, MACHINE_A, "a", 0.4), (b, MACHINE_B, "b", 0.1)):
        records += [dict(r, run_id="c", machine_class=cls, node_id=f"n{name}", node_load_average=[1.0, 1.0, 1.0],
                     machine=dict(machine, git_commit="abc1234" if cls == a or r["impl"] != "jax.bptt" else "def5678"))
                for r in study_records(machine, RATIOS[name.upper()], name, native_s)
                if r["kind"] == "measurement"]
    records.append(dict(kind="end", run_id="c"))
    groups = machine_groups(records)
    assert list(groups) == [a, b] and groups[a].nodes == ["n1"]
    for cls in (a, b):
        res = collect(groups[cls].records)
        assert len(res.measurements) == 6 and res.metas[0]["cluster"]["nodes"][0]["machine_class"] == cls
        assert res.ends[0]["load_average"] == [1.0, 1.0, 1.0]  # the node's, not the driver's
    path = tmp_path / "cluster" / "results.jsonl"
    path.parent.mkdir()
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    text = write_report(path).read_text()
    assert "- lstm S1 training: jax.bptt on M1, torch.bptt on M2" in text
    assert "Ray cluster `fixture:6379`: 1 node(s) of this machine (h1 `n1`" in text
    m1, m2 = text[text.index("## M1:"):text.index("## M2:")], text[text.index("## M2:"):]
    assert "the measurements ran at 2 commits (abc1234, def5678)" in m2 and "commits (" not in m1


def test_one_machine_gives_the_one_machine_report(two_runs, tmp_path):
    text = write_report(two_runs[0] / "results.jsonl", tmp_path).read_text()
    assert text.startswith("# rnnbench study\n") and "Across machines" not in text and "## Machine" in text


def test_the_report_command_merges_run_directories(two_runs, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "rnnbench.cli", "report", *map(str, two_runs), "--out",
                           str(tmp_path / "m")], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "Across machines" in proc.stdout and (tmp_path / "m" / "report.md").is_file()
    proc = subprocess.run([sys.executable, "-m", "rnnbench.cli", "report", str(tmp_path / "nothing-here")], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "no results.jsonl" in proc.stderr
