"""The tools make and CI run, and the finished experiments, on small fake inputs: what each writes
and summarises (their statistics are tests/measure/test_stats.py's)."""

from __future__ import annotations


import pytest

def test_reproducibility_summary_counts_spread_and_values_inside_the_other_runs_intervals():
    from tools import reproducibility as mod

    runs = [{"a": dict(ratio=1.00, lo=0.97, hi=1.03), "b": dict(ratio=1.5, lo=1.45, hi=1.55)},
            {"a": dict(ratio=1.02, lo=0.99, hi=1.05), "b": dict(ratio=2.0, lo=1.9, hi=2.1)},
            {"a": dict(ratio=1.01, lo=0.98, hi=1.04)}]
    s = mod.summarize(runs)
    assert s["ratios"] == 1 and s["rows"][0]["key"] == "a"  # only ratios every run has
    assert s["rows"][0]["max_over_min"] == pytest.approx(1.02) and s["within_goal"] == 1
    assert s["inside_share"] == 1.0 and s["overlap_share"] == 1.0
    s = mod.summarize(runs[:2])
    b = next(r for r in s["rows"] if r["key"] == "b")
    assert b["max_over_min"] == pytest.approx(2.0 / 1.5) and b["inside_others"] == 0
    assert s["within_goal"] == 1 and s["inside_share"] == pytest.approx(0.5)
    assert s["worst_key"] == "b" and s["beyond_goal"] == ["b 1.33"]
    assert b["overlapping_pairs"] == 0 and b["pairs"] == 1 and s["overlap_share"] == pytest.approx(0.5)
    # a ratio that one run's report marked (its baseline moved between that run's processes)
    runs[1]["b"]["marked"] = True
    s = mod.summarize(runs[:2])
    assert next(r for r in s["rows"] if r["key"] == "b")["marked"] == 1
    assert s["unmarked"] == 1 and s["unmarked_within_goal"] == 1 and s["unmarked_worst"] == pytest.approx(1.02)
    named = [{"torch.bptt lstm S1 train": 1, "jax.scan lstm S1 train": 2}]
    assert mod.select(named, ["jax.scan"]) == [{"jax.scan lstm S1 train": 2}] and mod.select(named, None) == named


def _script(name: str):
    import importlib

    try:
        return importlib.import_module(f"tools.{name}")
    except ModuleNotFoundError:
        return importlib.import_module(f"tools.experiments.{name}")


def test_mutation_summary_counts_outcomes_and_lists_each_survivor():
    mutation = _script("mutation")

    source = "import x\n\n\ndef f(a, b):\n    c = 1\n    return a + b\n\n\nclass K:\n    def m(self):\n        return 2\n"
    diff = "--- m.py\n+++ m.py\n@@ -1,3 +1,3 @@\n def f(a, b):\n     c = 1\n-    return a + b\n+    return a - b\n"
    codes = {"m.x_f__mutmut_1": 1, "m.x_f__mutmut_2": 3, "m.x_f__mutmut_10": 0, "m.xǁKǁm__mutmut_1": 33,
             "m.x_f__mutmut_3": 1, "m.x_f__mutmut_4": 36, "m.x_f__mutmut_5": -9, "m.x_f__mutmut_6": None,
             "m.x_f__mutmut_7": 34}
    got = mutation.summarize(codes, {"m.x_f__mutmut_10": diff, "m.xǁKǁm__mutmut_1": ""}, source)
    assert (got["mutants"], got["killed"], got["survived"], got["no_tests"], got["timeouts"], got["excluded"]) == \
        (9, 3, 2, 1, 3, 1)
    assert got["score"] == 0.6  # timeouts count neither way; a function no test calls survives
    assert got["survivors"] == [
        dict(mutant="m.x_f__mutmut_10", function="x_f", line=6, no_tests=False, diff=diff),
        dict(mutant="m.xǁKǁm__mutmut_1", function="xǁKǁm", line=None, no_tests=True, diff="")]
    assert mutation.function_lines(source) == {"x_f": 4, "xǁKǁm": 10}
    assert mutation.summarize({})["score"] is None
    assert set(mutation.MODULES) >= {"rnnbench/measure/stats.py", "rnnbench/reference/steps.py", "rnnbench/reference/stack.py"}
    for module, tests in mutation.MODULES.items():  # every module and its tests exist
        root = mutation.ROOT
        assert (root / module).is_file() and all((root / t).is_file() for t in tests), module
    assert "[tool.mutmut]" in mutation.config("m.py", ["t.py"], "not x", 15.0)
    # a survivor that an EQUIVALENT entry covers is marked, and still counts as survived
    axis = "@@ -1,2 +1,2 @@\n def x_f(a):\n-    return a.mean(axis=-1)\n+    return a.mean(axis=+1)\n"
    got = mutation.summarize({"s.x_f__mutmut_1": 0, "s.x_f__mutmut_2": 1}, {"s.x_f__mutmut_1": axis},
                             module="rnnbench/reference/steps.py")
    assert (got["survived"], got["equivalent"], got["unexplained"], got["score"]) == (1, 1, 0, 0.5)
    assert "rank-3" in got["survivors"][0]["equivalent"]
    assert mutation.equivalent_reason("rnnbench/torch/cells.py", "x_f", axis) is None  # per module


def test_mutation_rejudge_kills_survivors_the_new_tests_fail_and_keeps_the_rest():
    mutation = _script("mutation")
    sv = lambda n: dict(mutant=f"m.x_f__mutmut_{n}", function="x_f", line=3, no_tests=False, diff="")  # noqa: E731
    entry = dict(module="m.py", commit="a" * 40, mutants=10, killed=6, survived=4, no_tests=0, equivalent=0,
                 unexplained=4, score=0.6, survivors=[sv(1), sv(2), sv(3), sv(4)])
    # 1: now killed; 2: still survives; 3: no test calls it any more; 4: timed out (not judged again)
    codes = {"m.x_f__mutmut_1": 1, "m.x_f__mutmut_2": 0, "m.x_f__mutmut_3": 33, "m.x_f__mutmut_4": -24}
    got = mutation.rejudge(entry, codes, "b" * 40, 12.0)
    assert (got["killed"], got["survived"], got["no_tests"], got["unexplained"]) == (7, 3, 1, 3)
    assert got["score"] == 0.7 and got["commit"] == "a" * 40
    assert [s["mutant"][-1] for s in got["survivors"]] == ["2", "3", "4"]
    assert got["rejudged"] == dict(commit="b" * 40, survivors=4, killed=1, not_judged=1, seconds=12.0)


def test_gate_power_record_is_written_with_partial_trials():
    import time
    import types

    gp = _script("gate_power")
    args = types.SimpleNamespace(impl="torch.eager", slowdown=0.1)
    empty = gp.make_record([], args, [], "abc", time.time(), complete=False)
    assert empty["power"]["rate"] is None and empty["false_alarm"]["trials"] == 0 and not empty["complete"]
    trials = [dict(kind="same_commit", false_alarm=False, seconds=10.0), dict(kind="power", detected=True, seconds=8.0),
              dict(kind="same_commit", false_alarm=True, seconds=12.0), dict(kind="power", detected=False, seconds=6.0)]
    rec = gp.make_record(trials, args, [], "abc", time.time(), complete=True)
    assert rec["power"] == dict(trials=2, detected=1, rate=0.5, seconds_per_trial=7.0, max_seconds=8.0)
    assert rec["false_alarm"] == dict(trials=2, alarms=1, rate=0.5, seconds_per_trial=11.0, max_seconds=12.0)


def test_reproducibility_records_each_runs_machine_and_length(tmp_path):
    import json

    repro = _script("reproducibility")
    run = tmp_path / "run-0"
    run.mkdir()
    records = [{"kind": "meta", "run_id": "r", "started": "2026-01-01T00:00:00+00:00", "argv": ["compare"],
                "machine": {"cpu": "Some CPU", "amx": True, "usable_cpus": 2, "git_commit": "abc", "versions": {}}},
               {"kind": "measurement", "run_id": "r"},
               {"kind": "end", "run_id": "r", "finished": "2026-01-01T00:15:00+00:00", "load_average": [1.0, 1.0, 1.0]}]
    (run / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    info = repro.run_info(run)
    assert (info["cpu"], info["amx"], info["cores"], info["commit"]) == ("Some CPU", True, 2, "abc")
    assert info["minutes"] == 15.0 and info["measurements"] == 1


def test_parity_matrix_time_records_each_implementation_and_never_runs_the_whole_file(tmp_path, monkeypatch):
    import json

    pmt = _script("parity_matrix_time")
    assert pmt.counts("= 3 passed, 1 failed, 2 skipped, 1 error in 4.10s =") == dict(passed=3, failed=1, skipped=2,
                                                                                     error=1)
    assert pmt.counts("= 4 passed in 1.00s =") == dict(passed=4, failed=0, skipped=0)
    # which cells failed is kept, not only how many
    stdout = ("..F.E\n=== short test summary info ===\n"
              "FAILED tests/cross/test_parity_matrix.py::test_matches_reference[torch.scan-gru_default-bfloat16] - "
              "AssertionError: x\nERROR tests/x.py::test_y[a b] - RuntimeError\n1 failed, 3 passed, 1 error in 2.00s\n")
    assert pmt.failures(stdout) == ["tests/cross/test_parity_matrix.py::test_matches_reference[torch.scan-gru_default-"
                                    "bfloat16]", "tests/x.py::test_y[a b]"]
    assert pmt.failures("4 passed in 1.00s\n") == []
    # an implementation with no cells here must not hand pytest an empty list (it would run every test)
    monkeypatch.setattr(pmt, "node_ids", lambda impl, env: [])
    monkeypatch.setattr(pmt.subprocess, "run", lambda *a, **k: (_ for _ in ()).throw(AssertionError("ran pytest")))
    assert pmt.time_impl("jax.cudnn", [])["tests"] == 0
    monkeypatch.undo()
    fake = {"torch.eager": dict(impl="torch.eager", tests=4, seconds=10.0, rc=0, summary="4 passed", passed=4),
            "jax.scan": dict(impl="jax.scan", tests=2, seconds=5.5, rc=1, summary="1 passed, 1 failed", passed=1,
                             failed=1)}
    monkeypatch.setattr(pmt, "time_impl", lambda impl, args: fake[impl])
    out = tmp_path / "pm.json"
    assert pmt.main(["--impls", "torch.eager", "--out", str(out)]) == 0
    assert pmt.main(["--impls", "jax.scan", "--out", str(out), "--merge"]) == 1  # a failing cell fails the run
    rec = json.loads(out.read_text())
    assert [r["impl"] for r in rec["rows"]] == ["torch.eager", "jax.scan"]
    assert rec["total_seconds"] == 15.5 and rec["failed"] == 1 and rec["complete"] is False


def test_baseline_modes_summarizes_each_cell_and_thread_count_apart():
    bm = _script("baseline_modes")
    samples = [dict(cell="gru", threads=2, forward_s=0.004, train_s=0.020, train_blocks_ms=[20.0, 38.0, 21.0],
                    gemm_blocks_ms=[1.4, 1.5, 1.4]),
               dict(cell="gru", threads=2, forward_s=0.004, train_s=0.037, train_blocks_ms=[37.0, 37.0],
                    gemm_blocks_ms=[1.5, 1.5]),
               dict(cell="gru", threads=1, forward_s=0.005, train_s=0.018),
               dict(cell="lstm", threads=2, forward_s=0.002, train_s=0.005)]
    rows = {(r["cell"], r["threads"]): r for r in bm.summarize(samples)}
    assert set(rows) == {("gru", 1), ("gru", 2), ("lstm", 2)}
    assert rows[("gru", 2)]["processes"] == 2 and rows[("gru", 2)]["train_ms"] == [20.0, 37.0]
    assert rows[("gru", 2)]["train_max_over_min"] == pytest.approx(1.85)
    assert rows[("gru", 2)]["forward_max_over_min"] == 1.0 and rows[("gru", 1)]["train_max_over_min"] == 1.0
    # within a process: the largest block over the smallest, of the process that moved most
    assert rows[("gru", 2)]["train_within_max_over_min"] == pytest.approx(1.9)
    assert rows[("gru", 2)]["gemm_within_max_over_min"] == pytest.approx(1.5 / 1.4)
    assert rows[("gru", 2)]["gemm_ms"] == [1.4, 1.5] and rows[("gru", 2)]["gemm_max_over_min"] == pytest.approx(1.5 / 1.4)
    assert "train_within_max_over_min" not in rows[("gru", 1)]  # records without blocks say nothing


def test_reproducibility_can_rederive_a_run_from_its_first_processes_only(tmp_path):
    """`--processes K`: what the run would have said had each measurement stopped after K processes."""
    import json

    from rnnbench.measure import workloads

    repro = _script("reproducibility")
    run = tmp_path / "run-0"
    run.mkdir()
    common = dict(kind="measurement", run_id="r", group="main", device="cpu", dtype="float32", status="ok",
                  workload=workloads.resolve("quick")[0].to_dict(), workload_name="S2", cell="gru",
                  forward_iqr_s=0.0, train_iqr_s=0.0, forward_s=0.01, train_s=0.02)
    records = [dict(kind="meta", run_id="r", machine={}),
               dict(common, key="native", impl="torch.native", framework="torch")]
    for p, ratio in enumerate((1.0, 1.0, 1.0, 2.0, 2.0)):  # the last two processes ran in another state
        records.append(dict(common, key="bptt" + ("" if p == 0 else f"#p{p}"), process=p, impl="torch.bptt",
                            framework="torch", train_pairs=[(0.01 * ratio, 0.01)] * 3))
    (run / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    first3 = repro.ratios(run, processes=3)["torch.bptt gru S2 train"]
    every = repro.ratios(run)["torch.bptt gru S2 train"]
    assert first3["ratio"] == pytest.approx(1.0) and every["ratio"] == pytest.approx(2 ** 0.4)


@pytest.mark.parametrize("argv", [
    ["tools.profile_torch", "time", "--backends", "fused", "--rounds", "1", "--threads", "1"],
    ["tools.profile_jax", "--impls", "scan", "--workload", "S2", "--mode", "forward", "--calls", "1", "--threads", "1"],
])
def test_the_profilers_run_and_print_their_table(argv):
    """make profile-torch and make profile-jax (which times through tools.bench_jax), small."""
    import subprocess
    import sys

    from tests.support import ROOT

    proc = subprocess.run([sys.executable, "-m", *argv], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "|" in proc.stdout and ("native" in proc.stdout or "scan" in proc.stdout), proc.stdout
