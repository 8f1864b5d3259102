"""The study harness: runner, failures, resume, table, report, plots, CLI (quick).

Fake implementations (tests/study_fake_adapter.py) stand in for real ones so that the
runner's handling of crashes, hangs and memory hogs is tested without a framework; one
tiny real end-to-end run uses torch.native when its adapter is importable.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rnnbench.core import precision, registry
from rnnbench.core.capabilities import Capabilities
from rnnbench.core.catalogue import STANDARD_CELLS
from rnnbench.core.registry import Implementation
from rnnbench.core.spec import RNNSpec
from rnnbench.measure import threads, workloads
from rnnbench.measure.timing import summarize, time_calls
from rnnbench.study import planning
from rnnbench.study.report import write_report
from rnnbench.study import run_study
from rnnbench.study.planning import StudyConfig
from rnnbench.study.records import read_records
from rnnbench.study.table import collect, ladder, table_rows

from tests.support import ROOT, TESTS  # noqa: E402  (TESTS: where study_fake_adapter.py lives)
FAKE = "study_fake_adapter:get_adapter"


def fake_rows(*keys: str) -> list[Implementation]:
    """A fake torch.native plus fake.<key> rows, all served by tests/study_fake_adapter.py."""
    rows = [Implementation("torch.native", "fake native", 6, adapter_path=FAKE)]
    rows += [Implementation(f"fake.{k}", f"fake {k}", i, adapter_path=FAKE) for i, k in enumerate(keys)]
    return rows


@pytest.fixture
def fake_registry(monkeypatch):
    def install(*keys):
        rows = fake_rows(*keys)
        monkeypatch.setattr(registry, "_ROWS", rows)
        monkeypatch.setattr(registry, "REGISTRY", {r.name: r for r in rows})
        return [r.name for r in rows]

    # the worker subprocesses import the fake adapter module from tests/
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")])))
    return install


def by_impl(records):
    """The first process's record of each implementation's measurement."""
    return {r["impl"]: r for r in records if r.get("kind") == "measurement" and not r.get("process")}


@pytest.fixture(scope="module")
def failing_study(tmp_path_factory):
    """One study over fakes that crash, raise, hang and hog memory, plus healthy ones."""
    mp = pytest.MonkeyPatch()
    rows = fake_rows("crash", "raise", "hang", "hog", "slow", "wrong", "absent")
    mp.setattr(registry, "_ROWS", rows)
    mp.setattr(registry, "REGISTRY", {r.name: r for r in rows})
    mp.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")])))
    out = tmp_path_factory.mktemp("study")
    config = StudyConfig(out=out, cells=["lstm"], workloads=workloads.resolve("quick"), timeout=15,
                         max_memory_gb=0.6, repeats=3, min_time_s=0.0, roof=False, processes=1, max_processes=1)
    try:
        results = run_study(config, progress=False, log=lambda *a: None)
        yield out, read_records(results)
    finally:
        mp.undo()


def test_records_are_json_lines_with_measurements(failing_study):
    out, records = failing_study
    lines = (out / "results.jsonl").read_text().splitlines()
    assert len(lines) == len(records)  # every line parses as JSON
    assert records[0]["kind"] == "meta" and records[0]["threads"] == 2
    native = by_impl(records)["torch.native"]
    assert native["status"] == "ok", native
    for key in ("forward_s", "train_s", "first_forward_s", "first_train_s", "gflops_forward", "gflops_train"):
        assert native[key] > 0, key
    assert native["forward_n"] == 3 and native["train_n"] == 3
    assert native["peak_rss_bytes"] > 10 * 2**20
    # the fake's train step sleeps 3x its forward
    assert 2.0 < native["train_s"] / native["forward_s"] < 4.5


def test_failures_are_recorded_and_the_study_goes_on(failing_study):
    _, records = failing_study
    m = by_impl(records)
    assert m["fake.crash"]["status"] == "failed"
    assert "crashed" in m["fake.crash"]["reason"] and "SIGABRT" in m["fake.crash"]["reason"]
    assert m["fake.raise"]["status"] == "failed"
    assert "RuntimeError in first_forward" in m["fake.raise"]["reason"]
    assert m["fake.hang"]["status"] == "failed" and "timeout" in m["fake.hang"]["reason"]
    assert m["fake.hang"]["wall_s"] < 30  # killed, not waited for
    assert m["fake.hog"]["status"] == "failed" and "out of memory" in m["fake.hog"]["reason"]
    # measured after the failures: the study went on
    assert m["fake.slow"]["status"] == "ok" and m["fake.wrong"]["status"] == "ok"
    unavailable = {r["impl"]: r["reason"] for r in records if r.get("kind") == "unavailable"}
    assert "never available" in unavailable["fake.absent"]
    assert "fake.absent" not in m


def test_parity_column_catches_a_wrong_implementation(failing_study):
    _, records = failing_study
    m = by_impl(records)
    assert m["fake.slow"]["parity_max_error"] < 1e-6 and m["fake.slow"]["parity_ok"] is True
    assert m["fake.wrong"]["parity_max_error"] == pytest.approx(1e-3, rel=1e-6)
    assert m["fake.wrong"]["parity_ok"] is False


def test_table_ratios_to_native_from_the_same_run(failing_study):
    _, records = failing_study
    rows = {r["impl"]: r for r in table_rows(collect(records))}
    native, slow = by_impl(records)["torch.native"], by_impl(records)["fake.slow"]
    # timed in pairs with the baseline in its own process: the median of the pairwise ratios
    assert "train_pairs" not in native and len(slow["train_pairs"]) >= 3
    assert rows["fake.slow"]["train_x_native"] == pytest.approx(slow["train_ratio"])
    assert 2.0 < rows["fake.slow"]["train_x_native"] < 4.5  # sleeps 3x as long
    assert rows["fake.slow"]["train_ratio_lo"] <= rows["fake.slow"]["train_x_native"] <= rows["fake.slow"]["train_ratio_hi"]
    assert rows["fake.slow"]["train_processes"] == 1
    assert rows["torch.native"]["forward_x_native"] == 1.0
    assert rows["fake.crash"]["train_x_native"] is None


def test_ratios_pair_rows_of_the_same_cell_and_workload():
    def m(impl, cell, wl, fwd, train):
        return dict(kind="measurement", key=f"{impl}|{cell}|{wl}|cpu|float32", impl=impl, cell=cell,
                    workload_name=wl, device="cpu", dtype="float32", status="ok", forward_s=fwd, train_s=train,
                    framework=impl.split(".")[0], rung=0, group="main")

    records = [m("torch.native", "lstm", "S1", 1.0, 2.0), m("torch.native", "gru", "S1", 10.0, 20.0),
               m("torch.native", "lstm", "S2", 0.1, 0.2), m("x.y", "lstm", "S1", 3.0, 5.0),
               m("x.y", "gru", "S1", 5.0, 5.0), m("x.y", "lstm", "S2", 0.3, 0.1)]
    rows = {(r["impl"], r["cell"], r["workload"]): r for r in table_rows(collect(records))}
    assert rows[("x.y", "lstm", "S1")]["forward_x_native"] == 3.0
    assert rows[("x.y", "lstm", "S1")]["train_x_native"] == 2.5
    assert rows[("x.y", "gru", "S1")]["forward_x_native"] == 0.5
    assert rows[("x.y", "lstm", "S2")]["train_x_native"] == 0.5
    # a later record of the same key (a retried measurement) replaces the earlier one
    records.append(m("torch.native", "lstm", "S1", 2.0, 4.0))
    rows = {(r["impl"], r["cell"], r["workload"]): r for r in table_rows(collect(records))}
    assert rows[("x.y", "lstm", "S1")]["forward_x_native"] == 1.5


def test_ladder_orders_rungs_and_computes_what_each_buys():
    def m(impl, rung, train):
        return dict(kind="measurement", key=f"{impl}|lstm|S1|cpu|float32", impl=impl, cell="lstm",
                    workload_name="S1", workload=workloads.resolve("S1")[0].to_dict(), device="cpu",
                    dtype="float32", status="ok", forward_s=train / 3, train_s=train,
                    framework=impl.split(".")[0], rung=rung, group="main")

    failed = dict(m("torch.compile", 4, 1.0), status="failed", reason="timeout", forward_s=None, train_s=None)
    records = [m("torch.native", 6, 1.0), m("torch.naive", 0, 9.0), m("torch.eager", 3, 1.8), failed,
               m("jax.scan", 3, 1.4), m("jax.naive", 0, 7.0)]
    workload, rows = ladder(collect(records), "lstm")
    assert workload == "S1"
    assert [r["impl"] for r in rows] == ["torch.naive", "torch.eager", "torch.compile", "torch.native",
                                         "jax.naive", "jax.scan"]
    assert rows[0]["speedup_train"] is None and rows[4]["speedup_train"] is None  # each framework's first rung
    assert rows[1]["speedup_train"] == pytest.approx(5.0)
    assert rows[2]["train_ms"] is None and rows[2]["reason"] == "timeout"  # a failed rung stays listed
    assert rows[3]["speedup_train"] == pytest.approx(1.8)  # over the last rung that has a time
    assert rows[5]["speedup_train"] == pytest.approx(5.0)
    assert rows[5]["train_x_native"] == pytest.approx(1.4)


def test_resume_skips_what_is_done(failing_study, fake_registry, tmp_path):
    out, records = failing_study
    fake_registry("crash", "raise", "hang", "hog", "slow", "wrong", "absent", "extra")
    before = [r for r in records if r.get("kind") == "measurement"]
    config = StudyConfig(out=tmp_path, cells=["lstm"], workloads=workloads.resolve("quick"), timeout=15,
                         repeats=3, min_time_s=0.0, roof=False, resume=True, processes=1, max_processes=1)
    (tmp_path / "results.jsonl").write_text((out / "results.jsonl").read_text())
    after = read_records(run_study(config, progress=False, log=lambda *a: None))
    measured = [r for r in after if r.get("kind") == "measurement"]
    new = measured[len(before):]
    assert [r["impl"] for r in new] == ["fake.extra"] and new[0]["status"] == "ok"
    assert sum(r.get("kind") == "meta" for r in after) == 2
    # without --resume an existing results file is not overwritten
    with pytest.raises(FileExistsError, match="--resume"):
        run_study(StudyConfig(out=tmp_path, cells=["lstm"], workloads=workloads.resolve("quick")),
                  progress=False, log=lambda *a: None)


def _synthetic_sweep_records():
    records = [dict(kind="meta", run_id="r", threads=2, device="cpu", dtype="float32",
                    machine={"cpu": "test cpu", "versions": {"torch": "x"}})]
    for group, kind in (("sweep-seq_len", "seq_len"), ("sweep-batch", "batch")):
        for w in workloads.sweep(kind, "small"):
            for impl, factor in (("torch.native", 1.0), ("jax.scan", 1.5)):
                size = w.seq_len * w.batch
                records.append(dict(kind="measurement", key=f"{impl}|lstm|{w.name}|cpu|float32", impl=impl,
                                    framework=impl.split(".")[0], rung=3, cell="lstm", workload_name=w.name,
                                    workload=w.to_dict(), device="cpu", dtype="float32", status="ok",
                                    group=group, forward_s=1e-6 * size * factor, train_s=3e-6 * size * factor))
    return records


def test_report_and_plots_are_written(failing_study, tmp_path):
    out, records = failing_study
    extra = _synthetic_sweep_records()[1:]
    roof = dict(kind="roof", key="roof|lstm|quick|cpu|start", cell="lstm", workload="quick", device="cpu",
                step_shape=[4, 32, 128], input_shape=[32, 16, 128], seq_len=8, flops_forward=1_000_000,
                step_mm_gflops=1.0, step_onednn_gflops=2.0, step_chain_torch_gflops=1.5,
                input_mm_gflops=1.0, input_onednn_gflops=2.0, status="ok")
    path = tmp_path / "results.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in records + extra + [roof]) + "\n{cut short")
    report = write_report(path)
    for name in ("report.md", "results.csv", "ratio_to_native.png", "ladder_lstm.png", "time_vs_seq_len.png",
                 "time_vs_batch.png"):
        assert (tmp_path / name).stat().st_size > 0, name
    text = report.read_text()
    assert "| fake.slow | lstm | quick |" in text
    assert "fake.hang lstm quick: timeout" in text  # failures listed with their reason
    assert "fake.absent: the fake 'absent' implementation is never available" in text
    assert "![time against T](time_vs_seq_len.png)" in text
    assert "| roof | torch roof | XLA roof | roof from |" in text  # the roofs and where they come from
    native = by_impl(records)["torch.native"]
    rows = {r["impl"]: r for r in table_rows(collect(read_records(path))) if r["group"] == "main"}
    assert rows["torch.native"]["roof_gflops"] == 2.0  # oneDNN's, the best rate of any shape
    assert rows["torch.native"]["roof_fraction_forward"] == pytest.approx(native["gflops_forward"] / 2.0)
    csv_lines = (tmp_path / "results.csv").read_text().splitlines()
    assert csv_lines[0].startswith("impl,framework,rung")
    assert len(csv_lines) == 1 + sum(r.get("kind") == "measurement" for r in records + extra)


# ---- custom cells ------------------------------------------------------------------------

CUSTOM = ("lstm", "gru", "ln_lstm", "gru_reset_before")


@pytest.fixture(scope="module")
def custom_study(tmp_path_factory):
    """Plain cells on the quick workload, and two custom cells that only fake.custom runs (2x slower)."""
    mp = pytest.MonkeyPatch()
    rows = [Implementation("torch.native", "fake native", 6, adapter_path=FAKE,
                           capabilities=Capabilities(cells=STANDARD_CELLS)),
            Implementation("fake.custom", "fake with custom cells", 3, adapter_path=FAKE,
                           capabilities=Capabilities(cells=CUSTOM))]
    mp.setattr(registry, "_ROWS", rows)
    mp.setattr(registry, "REGISTRY", {r.name: r for r in rows})
    mp.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")])))
    out = tmp_path_factory.mktemp("custom")
    config = StudyConfig(out=out, cells=["lstm", "gru"], custom_cells=["ln_lstm", "gru_reset_before"],
                         workloads=workloads.resolve("quick"), timeout=30, repeats=3, min_time_s=0.0, roof=False,
                         processes=2, max_processes=2)
    try:
        results = run_study(config, progress=False, log=lambda *a: None)
        yield out, read_records(results)
    finally:
        mp.undo()


def test_default_cells_add_the_custom_cells_unless_cells_are_chosen():
    from rnnbench.study.command import select_cells

    assert select_cells(None, None) == (["lstm", "gru"], ["ln_lstm", "peephole_lstm", "gru_reset_before"])
    assert select_cells(["lstm"], None) == (["lstm"], [])  # --cells measures exactly those
    assert select_cells(["lstm", "ln_lstm"], ["ln_lstm", "gru_reset_before"]) == (["lstm", "ln_lstm"],
                                                                                  ["gru_reset_before"])
    assert select_cells(None, []) == (["lstm", "gru"], [])  # --custom-cells none
    with pytest.raises(SystemExit, match="unknown cell.*'mgu'.*--cell-modules"):
        select_cells(["lstm", "mgu"], None)


def test_custom_cells_are_planned_forward_backward_on_the_first_workload(tmp_path):
    config = StudyConfig(out=tmp_path, cells=["lstm", "gru"], custom_cells=["ln_lstm", "gru_reset_before"],
                         workloads=workloads.resolve("S1,S2"))
    impls = ["torch.native", "fake.slow"]  # rows of the registry as the module's studies left it
    jobs = planning.plan(config, impls)
    custom = [j for j in jobs if j["group"] == "custom"]
    assert {(j["cell"], j["workload_name"], j["impl"]) for j in custom} == {
        (c, "S1", i) for c in ("ln_lstm", "gru_reset_before") for i in impls}
    assert all(j["phases"] == ["train"] for j in custom)
    assert all(j["phases"] == ["forward", "train"] for j in jobs if j["group"] == "main")
    # each custom cell right after its plain cell's measurements, so the two are measured close in time
    assert [(j["group"], j["cell"]) for j in jobs] == (
        [("main", "lstm")] * 4 + [("custom", "ln_lstm")] * 2 + [("main", "gru")] * 4 + [("custom", "gru_reset_before")] * 2)
    config.custom_workloads = workloads.resolve("S2")
    assert {j["workload_name"] for j in planning.plan(config, impls) if j["group"] == "custom"} == {"S2"}


def test_custom_cells_are_timed_forward_backward_only(custom_study):
    _, records = custom_study
    m = {(r["impl"], r["cell"]): r for r in records if r.get("kind") == "measurement" and not r.get("process")}
    ln = m["fake.custom", "ln_lstm"]
    assert ln["status"] == "ok" and ln["group"] == "custom" and ln["train_s"] > 0
    assert "forward_s" not in ln and "first_forward_s" not in ln
    assert ln["parity_ok"] is True  # the parity column covers custom cells too
    assert m["fake.custom", "lstm"]["forward_s"] > 0  # plain cells: both phases
    skipped = m["torch.native", "gru_reset_before"]
    assert skipped["status"] == "skipped" and "torch.native implements only lstm, gru" in skipped["reason"]


def test_custom_cell_table_compares_with_plain_native_and_the_same_impls_plain_cell(custom_study):
    from rnnbench.study.table import custom_cell_rows, custom_cell_skips

    _, records = custom_study
    res = collect(records)
    rows = {(r["impl"], r["cell"]): r for r in custom_cell_rows(res)}
    assert set(rows) == {("fake.custom", "ln_lstm"), ("fake.custom", "gru_reset_before")}
    m = {(r["impl"], r["cell"]): r for r in res.measurements}  # pooled over the two processes
    for cell, family in (("ln_lstm", "lstm"), ("gru_reset_before", "gru")):
        row = rows["fake.custom", cell]
        assert row["family"] == family
        # paired with plain nn.LSTM / nn.GRU in each of its two processes
        assert row["train_x_native"] == pytest.approx(m["fake.custom", cell]["train_ratio"])
        assert row["train_processes"] == 2 and row["train_ratio_lo"] <= row["train_x_native"] <= row["train_ratio_hi"]
        assert 1.4 < row["train_x_native"] < 3.0
        assert row["cost_x_plain"] == pytest.approx(m["fake.custom", cell]["train_s"] / m["fake.custom", family]["train_s"])
        assert 1.4 < row["cost_x_plain"] < 3.0  # the fake's custom cells sleep 2x
    assert custom_cell_skips(res) == {"torch.native": ["ln_lstm", "gru_reset_before"]}


def test_report_has_a_custom_cells_table(custom_study, tmp_path):
    out, _ = custom_study
    text = write_report(out / "results.jsonl", tmp_path).read_text()
    section = text[text.index("## Custom cells"):]
    assert "| ln_lstm | fake.custom | quick |" in section and "x nn.LSTM |" in section and "x nn.GRU |" in section
    assert "Plain native on quick (fwd+bwd): nn.LSTM" in section
    assert "torch.native (ln_lstm, gru_reset_before)" in section
    results = text[text.index("## Results"):text.index("## Custom cells")]
    assert "ln_lstm" not in results  # the main table holds the plain cells
    assert "- torch.native (ln_lstm quick): torch.native implements only lstm, gru, not 'ln_lstm'" in text


def test_ladder_command_reads_results(failing_study, tmp_path):
    out, _ = failing_study
    proc = subprocess.run([sys.executable, "-m", "rnnbench.cli", "ladder", "--cell", "lstm", "--workload", "quick",
                           "--from", str(out / "results.jsonl"), "--out", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "torch.native" in proc.stdout and "fake.slow" in proc.stdout
    assert (tmp_path / "ladder_lstm.png").stat().st_size > 0
    assert "| 6 | torch.native |" in (tmp_path / "ladder_lstm.md").read_text()


def test_time_calls_stops_at_budget_but_times_at_least_three():
    calls = []
    samples = time_calls(lambda: calls.append(1), repeats=1000, budget_s=0.0)
    assert len(samples) == 3 == len(calls)
    assert len(time_calls(lambda: None, repeats=5, budget_s=60)) == 5
    # fast calls are timed on past `repeats` until min_time_s, capped at max_samples
    assert len(time_calls(lambda: None, repeats=5, budget_s=60, min_time_s=60, max_samples=40)) == 40
    assert len(time_calls(lambda: time.sleep(0.002), repeats=2, budget_s=60, min_time_s=0.05)) >= 10
    s = summarize([1.0, 2.0, 3.0, 4.0, 100.0])
    assert s["median"] == 3.0 and s["iqr"] == 2.0 and s["n"] == 5


def test_workloads_are_the_design_ones():
    s1, s2, s3, r1 = workloads.resolve("cpu")
    assert (s1.seq_len, s1.batch, s1.input_size, s1.hidden_size) == (100, 64, 256, 512)
    assert (s2.seq_len, s2.batch, s2.input_size, s2.hidden_size) == (100, 1, 256, 256)
    assert (s3.seq_len, s3.batch, s3.input_size, s3.hidden_size) == (1000, 16, 128, 128)
    assert (r1.num_layers, r1.bidirectional, r1.packed) == (2, True, True)
    assert s1.flops("lstm") == 2 * 100 * 64 * 4 * 512 * (256 + 512)
    assert s1.step_gemm("gru") == (64, 512, 3 * 512)
    assert [w.seq_len for w in workloads.sweep("seq_len", "full")][::5] == [25, 1000]
    gpu = workloads.PROFILES["gpu"]
    assert min(w.hidden_size for w in gpu) == 512 and max(w.hidden_size for w in gpu) == 2048
    with pytest.raises(ValueError, match="unknown workload 'S9'"):
        workloads.resolve("S1,S9")


def test_cli_rejects_an_unknown_implementation():
    proc = subprocess.run([sys.executable, "-m", "rnnbench.cli", "compare", "--impls", "torch.nope"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "unknown implementation 'torch.nope'" in proc.stderr and "torch.native" in proc.stderr


def test_threads_and_subprocess_isolation_settings():
    env = threads.thread_env(3)
    assert env["OMP_NUM_THREADS"] == env["MKL_NUM_THREADS"] == "3"
    assert "intra_op_parallelism_threads=3" in env["XLA_FLAGS"]
    with pytest.raises(ValueError, match="threads"):
        threads.thread_env(0)


@pytest.mark.skipif(importlib.util.find_spec("rnnbench.torch.adapter") is None,
                    reason="rnnbench.torch.adapter has not landed yet")
def test_real_end_to_end_quick_run(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "rnnbench.cli", "compare", "--workloads", "quick", "--impls", "torch.native",
         "--cells", "lstm", "--sweeps", "none", "--precisions", "amp_bfloat16,float16", "--repeats", "3",
         "--processes", "2", "--max-processes", "2", "--out", str(tmp_path), "--no-progress"],
        cwd=ROOT, capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    records = read_records(tmp_path / "results.jsonl")
    by_dtype = {r["dtype"]: r for r in records if r.get("kind") == "measurement" and not r.get("process")}
    amp = by_dtype["amp_bfloat16"]
    refused = registry.get("torch.native").unsupported_reason(RNNSpec("lstm", 4, 4), dtype="amp_bfloat16", device="cpu")
    if refused:  # a CPU without oneDNN's bfloat16 RNN primitive (tests/cross/test_machine_capabilities.py)
        assert amp["status"] == "skipped" and "no bfloat16 RNN primitive" in amp["reason"], amp
    else:
        assert amp["status"] == "ok" and amp["group"] == "precision" and amp["parity_ok"] is True, amp
        assert amp["baseline"] == "torch.native" and len(amp["train_pairs"]) >= 3  # paired with float32 nn.LSTM
        assert [r["process"] for r in records
                if r.get("kind") == "measurement" and r["dtype"] == "amp_bfloat16"] == [0, 1]
        assert amp["kernel_isa"]
    assert [r["compile_cache"] for r in records if r.get("kind") == "measurement" and r["dtype"] == "float32"] == \
        ["cold", "warm"]
    report = (tmp_path / "report.md").read_text()
    assert report.index("## The answer") < report.index("## Machine")
    if precision.device_reason("float16", "cpu"):
        assert by_dtype["float16"]["status"] == "skipped" and "float16 on cpu" in by_dtype["float16"]["reason"]
    assert "## Precision" in (tmp_path / "report.md").read_text()
    native = by_dtype["float32"]
    assert native["status"] == "ok", native.get("reason")
    assert native["forward_s"] > 0 and native["train_s"] > 0
    assert native["parity_ok"] is True, native
    roofs = [r for r in records if r.get("kind") == "roof"]
    assert [r["roof_pass"] for r in roofs] == ["start", "end"]  # measured again at the end of the run
    assert roofs[0]["step_mm_gflops"] > 0 and roofs[0]["step_chain_torch_gflops"] > 0
    roof = collect(records).roofs[("lstm", "quick", "cpu")]
    assert roof["roof_passes"] == 2 and roof["roof_torch_gflops"] > 0
    if importlib.util.find_spec("jax") is not None:  # each framework's own GEMM library
        assert roofs[0]["step_xla_gflops"] > 0 and roofs[0]["step_chain_xla_gflops"] > 0
        assert roof["roof_machine_gflops"] == max(roof["roof_torch_gflops"], roof["roof_xla_gflops"])
        assert "| roof | torch roof | XLA roof |" in (tmp_path / "report.md").read_text()
    assert (tmp_path / "report.md").stat().st_size > 0
    assert "torch.native" in proc.stdout


def test_study_modules_import_no_framework():
    code = ("import sys\n"
            "import rnnbench.study.command, rnnbench.study.runner, rnnbench.study.report, rnnbench.study.cluster, "
            "rnnbench.study.planning, rnnbench.study.records, rnnbench.study.plots, rnnbench.study.table, "
            "rnnbench.study.machine, rnnbench.measure.worker, rnnbench.measure.workloads, rnnbench.measure.roof, "
            "rnnbench.measure.isolated\n"
            "heavy = [m for m in ('torch', 'jax', 'flax', 'matplotlib') if m in sys.modules]\n"
            "assert not heavy, heavy\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_the_worker_saves_the_median_and_iqr_of_its_timed_calls(monkeypatch, tmp_path):
    """What `measure` saves is the median (not the min, not the mean) of the samples, and their IQR."""
    from rnnbench.measure import measurement
    monkeypatch.syspath_prepend(str(TESTS))
    samples = {"forward": [0.5, 0.1, 0.2], "train": [1.0, 3.0, 2.0, 10.0]}
    calls = []

    def fake_time_calls(fn, *args, **kwargs):
        calls.append(fn.__name__)
        return list(samples["forward" if fn.__name__ == "forward" else "train"])

    monkeypatch.setattr(measurement, "time_calls", fake_time_calls)
    w = workloads.resolve("quick")[0]
    job = dict(impl="fake.native", adapter_key="native", adapter_path=FAKE, cell="lstm", workload=w.to_dict(),
               workload_name=w.name, device="cpu", dtype="float32", threads=1, repeats=3, budget_s=1.0, warmup=0,
               parity=False, seed=0, phases=["forward", "train"])
    rec = measurement.measure(job, str(tmp_path / "rec.json"))
    assert rec["status"] == "ok", rec.get("reason")
    assert calls == ["forward", "train_step"]
    assert rec["forward_s"] == 0.2 and rec["forward_n"] == 3
    assert rec["train_s"] == 2.5 and rec["train_n"] == 4
    assert rec["train_iqr_s"] == pytest.approx(summarize(samples["train"])["iqr"]) and rec["train_iqr_s"] > 0


def test_sanity_flags_name_impossible_and_noisy_rows():
    from rnnbench.study.table import sanity_flags
    ok = dict(roof_fraction_forward=0.8, roof_fraction_train=0.9, forward_ms=100.0, train_ms=300.0,
              forward_iqr_ms=10.0, train_iqr_ms=20.0)
    assert sanity_flags(ok) == []
    bad = dict(ok, roof_fraction_forward=240.59, forward_ms=2808.0, train_ms=372.0, train_iqr_ms=200.0)
    flags = sanity_flags(bad)
    assert flags[0].startswith("roof forward 24059.0% > 100%")
    assert "forward slower than forward+backward" in flags
    assert "train IQR 54% of the median" in flags


def test_report_marks_flagged_rows_and_a_busy_machine(tmp_path):
    meta = dict(kind="meta", run_id="r1", started="t", argv=None, device="cpu", dtype="float32", threads=2,
                repeats=3, budget_s=1.0, min_time_s=0.1, timeout=60, resumed=False,
                machine=dict(cpu="test cpu", usable_cpus=2, logical_cpus=2, load_average=[7.5, 6.0, 5.0]))
    common = dict(kind="measurement", run_id="r1", group="main", cell="lstm", workload_name="quick",
                  workload=workloads.resolve("quick")[0].to_dict(), device="cpu",
                  dtype="float32", status="ok", framework="torch", rung=6)
    rows = [dict(common, key="a", impl="torch.native", forward_s=0.1, train_s=0.3, forward_iqr_s=0.001,
                 train_iqr_s=0.002),
            dict(common, key="b", impl="torch.naive", rung=0, forward_s=2.8, train_s=0.37, forward_iqr_s=0.01,
                 train_iqr_s=0.2)]
    path = tmp_path / "results.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in [meta, *rows, dict(kind="end", run_id="r1",
                                                                        load_average=[8.0, 7.0, 6.0])]) + "\n")
    text = write_report(path, tmp_path).read_text()
    assert "the machine was not quiet" in text and "[7.5, 6.0, 5.0] at the start, [8.0, 7.0, 6.0] at the end" in text
    sanity = text[text.index("## Sanity"):]
    assert "- torch.naive lstm quick float32: forward slower than forward+backward; train IQR 54% of the median" \
        in sanity
    assert "| torch.naive ⚠ |" in text and "| torch.native |" in text


def test_what_to_use_is_computed_from_the_rows_and_names_what_flips_it():
    from rnnbench.study.table import what_to_use
    wl = workloads.resolve("quick")[0].to_dict()
    common = dict(kind="measurement", run_id="r1", group="main", cell="lstm", device="cpu", dtype="float32",
                  status="ok", workload=wl, forward_iqr_s=0.0, train_iqr_s=0.0)
    recs = [dict(kind="meta", run_id="r1", machine={})]
    times = {("S1", "torch.native", "torch"): (0.10, 0.40), ("S1", "jax.bptt", "jax"): (0.15, 0.45),
             ("S2", "torch.native", "torch"): (0.05, 0.30), ("S2", "jax.bptt", "jax"): (0.04, 0.20),
             ("S2", "torch.naive", "torch"): (0.50, 0.10)}  # forward slower than fwd+bwd: does not compete
    for (w, impl, fw), (f, t) in times.items():
        recs.append(dict(common, key=f"{w}{impl}", workload_name=w, impl=impl, framework=fw, forward_s=f, train_s=t,
                         first_train_s=1.0, first_forward_s=0.5))
    rows, flips = what_to_use(collect(recs))
    best = {(r["workload"], r["mode"]): r for r in rows}
    assert best["S1", "training"]["best"] == "torch.native" and best["S1", "training"]["jax_over_torch"] == \
        pytest.approx(0.45 / 0.40)
    assert best["S2", "training"]["best"] == "jax.bptt"  # not torch.naive's suspect 0.10
    assert best["S2", "inference"]["best_torch"] == "torch.native"
    assert flips == ["lstm training: torch.native on S1, jax.bptt on S2",
                     "lstm inference: torch.native on S1, jax.bptt on S2"]


def test_what_to_use_calls_a_tie_when_intervals_overlap_and_flips_only_on_clear_winners():
    from rnnbench.study.table import what_to_use, what_to_use_markdown

    wl = workloads.resolve("quick")[0].to_dict()
    common = dict(kind="measurement", run_id="r1", group="main", cell="lstm", device="cpu", dtype="float32",
                  status="ok", workload=wl, forward_iqr_s=0.0, train_iqr_s=0.0, first_train_s=1.0,
                  first_forward_s=0.5)
    recs = [dict(kind="meta", run_id="r1", machine={})]

    def add(w, impl, fw, ratio, lo, hi):
        rec = dict(common, key=f"{w}{impl}", workload_name=w, impl=impl, framework=fw, forward_s=ratio,
                   train_s=2 * ratio)
        if impl != "torch.native":
            rec.update(forward_ratio=ratio, forward_ratio_lo=lo, forward_ratio_hi=hi, train_ratio=ratio,
                       train_ratio_lo=lo, train_ratio_hi=hi)
        recs.append(rec)

    add("S1", "torch.native", "torch", 1.0, None, None)
    add("S1", "jax.bptt", "jax", 0.97, 0.94, 1.02)  # overlaps 1: a tie
    add("S1", "torch.bptt", "torch", 1.20, 1.15, 1.25)
    add("S2", "torch.native", "torch", 1.0, None, None)
    add("S2", "jax.bptt", "jax", 0.60, 0.55, 0.66)  # a clear winner
    rows, flips = what_to_use(collect(recs))
    best = {(r["workload"], r["mode"]): r for r in rows}
    assert best["S1", "training"]["best"] == "jax.bptt" and best["S1", "training"]["tied"] == ["torch.native"]
    assert best["S2", "training"]["best"] == "jax.bptt" and best["S2", "training"]["tied"] == []
    assert best["S1", "training"]["jax_vs_torch"] == "=" and best["S2", "training"]["jax_vs_torch"] == "<"
    assert flips == []  # S1 is a tie, so nothing flips between S1 and S2
    table = what_to_use_markdown(rows)
    assert "tie within noise: jax.bptt ≈ torch.native" in table and "0.60x [0.55, 0.66]" in table


def test_the_answer_names_the_machine_and_its_thread_count():
    from rnnbench.study.report.context import answer_section

    for threads, text in ((1, "On AMD EPYC, 1 thread, cpu."), (2, "On AMD EPYC, 2 threads, cpu.")):
        res = collect([dict(kind="meta", run_id="r", threads=threads, device="cpu", machine={"cpu": "AMD EPYC"})])
        assert text in answer_section(res), answer_section(res)


def test_a_baseline_that_moved_between_the_runs_processes_marks_the_answer_and_says_how_far():
    from rnnbench.study.report.sections import what_to_use_section
    from rnnbench.study.table import CSV_FIELDS, UNSTABLE_BASELINE, what_to_use

    wl = workloads.resolve("quick")[0].to_dict()
    common = dict(kind="measurement", run_id="r1", group="main", device="cpu", dtype="float32", status="ok",
                  workload=wl, forward_iqr_s=0.0, train_iqr_s=0.0, first_train_s=1.0, first_forward_s=0.5,
                  forward_s=0.01, train_s=0.02)
    recs = [dict(kind="meta", run_id="r1", machine={})]
    # every rung's processes time the baseline beside it: GRU's fwd+bwd lands at 22 or 37 ms, a
    # load spike hits one LSTM process only (the quartiles ignore it)
    gru_train = [0.022, 0.022, 0.037, 0.037, 0.022, 0.037, 0.022, 0.037]
    lstm_train = [0.006, 0.006, 0.006, 0.006, 0.006, 0.006, 0.006, 0.030]
    for cell, trains in (("gru", gru_train), ("lstm", lstm_train)):
        recs.append(dict(common, key=f"{cell}native", cell=cell, workload_name="S2", impl="torch.native",
                         framework="torch"))
        for p, base in enumerate(trains):
            impl = ("torch.bptt", "jax.bptt")[p % 2]
            recs.append(dict(common, key=f"{cell}{impl}#p{p // 2}", process=p // 2, cell=cell, workload_name="S2",
                             impl=impl, framework=impl.split(".")[0], train_base_s=base, forward_base_s=0.004,
                             train_pairs=[(0.5 * base, base)] * 3, forward_pairs=[(0.002, 0.004)] * 3))
    res = collect(recs)
    gru = res.baselines["gru", "S2", "cpu", "train"]
    assert gru["processes"] == 8 and gru["q25_s"] == pytest.approx(0.022) and gru["q75_s"] == pytest.approx(0.037)
    assert gru["spread"] > UNSTABLE_BASELINE >= res.baselines["lstm", "S2", "cpu", "train"]["spread"] == 1.0
    assert res.baselines["gru", "S2", "cpu", "forward"]["spread"] == 1.0
    rows, _ = what_to_use(res)
    marked = {(r["cell"], r["mode"]) for r in rows if r["baseline_spread"] and r["baseline_spread"] > UNSTABLE_BASELINE}
    assert marked == {("gru", "training")}
    text = "\n".join(what_to_use_section(res))
    assert text.count(" †") == 1 and "† The baseline moved between this run's processes: nn.GRU S2 fwd+bwd 22 ms at the lower" \
        in text and "37 ms at the upper (1.68x)" in text and "nn.LSTM" not in text.split("†")[2]
    assert {"forward_baseline_spread", "train_baseline_spread"} <= set(CSV_FIELDS)
    assert all(r["train_baseline_spread"] == pytest.approx(37 / 22) for r in table_rows(res) if r["cell"] == "gru")


def test_the_realistic_workload_is_a_packed_two_layer_bidirectional_batch():
    r1 = workloads.resolve("R1")[0]
    assert r1 in workloads.resolve("cpu") and r1.packed and r1.num_layers == 2 and r1.bidirectional
    spec = r1.spec("lstm")
    assert spec.num_layers == 2 and spec.bidirectional and not r1.has_roof
    lengths = r1.lengths(0)
    assert lengths.max() == r1.seq_len and lengths.min() >= r1.seq_len // 4 and len(lengths) == r1.batch
    assert (lengths == r1.lengths(0)).all() and workloads.Workload.from_dict(r1.to_dict()) == r1
    assert "packed" in r1.describe()



def test_a_users_own_model_is_measured_and_reported_like_a_built_in_workload(fake_registry, tmp_path):
    names = fake_registry("slow")
    spec = "T=6,B=3,I=4,H=8,layers=2,bidirectional,lengths=T/2..T,name=ours"
    config = StudyConfig(out=tmp_path, impls=names, cells=["lstm"], workloads=workloads.resolve(f"quick;{spec}"),
                         timeout=30, repeats=3, min_time_s=0.0, roof=False, processes=1, max_processes=1)
    records = read_records(run_study(config, progress=False, log=lambda *a: None))
    ours = [r for r in records if r.get("kind") == "measurement" and r["workload_name"] == "ours"]
    assert {r["impl"] for r in ours} == set(names) and all(r["status"] == "ok" for r in ours)
    assert workloads.Workload.from_dict(ours[0]["workload"]) == workloads.parse_spec(spec)
    rows = {(r["impl"], r["workload"]): r for r in table_rows(collect(records))}
    assert 2.0 < rows["fake.slow", "ours"]["train_x_native"] < 4.5  # paired with native on the same sizes
    text = write_report(tmp_path / "results.jsonl").read_text()
    assert "| ours | 6 | 3 | 4 | 8 | 2 | 2 | 3..6 (packed) |" in text and "| fake.slow | lstm | ours |" in text


# ---- the roof ----------------------------------------------------------------------------

def test_the_roof_is_the_best_rate_of_any_shape_and_keeps_the_better_of_two_passes():
    from rnnbench.measure.roof import derive_roof, merge_roof
    start = dict(cell="lstm", workload="w", step_shape=[2, 8, 32], input_shape=[20, 4, 32], seq_len=10,
                 flops_forward=20_000, step_mm_gflops=1.0, step_onednn_gflops=0.5, step_chain_torch_gflops=2.0,
                 input_mm_gflops=8.0, input_onednn_gflops=4.0, step_xla_gflops=1.0, step_chain_xla_gflops=12.0,
                 input_xla_gflops=4.0)
    end = dict(start, step_chain_torch_gflops=1.0, input_mm_gflops=10.0)
    merged = merge_roof(merge_roof(None, start), end)
    assert merged["roof_passes"] == 2 and merged["step_chain_torch_gflops"] == 2.0
    assert merged["input_mm_gflops"] == 10.0 and merged["roof_drift"] == pytest.approx(1.0)  # 2.0 -> 1.0
    roof = derive_roof(merged)
    assert (roof["roof_torch_gflops"], roof["roof_torch_from"]) == (10.0, "input mm")
    assert (roof["roof_xla_gflops"], roof["roof_xla_from"]) == (12.0, "step chain_xla")
    assert (roof["roof_machine_gflops"], roof["roof_machine_from"]) == (12.0, "step chain_xla")


def test_one_thread_rows_are_planned_forward_only_with_their_own_name(fake_registry, monkeypatch, tmp_path):
    names = fake_registry("slow", "crash")
    monkeypatch.setattr(planning, "ONE_THREAD_IMPLS", ("torch.native", "fake.slow"))
    s2 = workloads.resolve("S2")[0]
    config = StudyConfig(out=tmp_path, workloads=[s2], one_thread_workloads=[s2], threads=2)
    jobs = [j for j in planning.plan(config, names) if j["group"] == "threads"]
    assert {j["impl"] for j in jobs} == {"torch.native", "fake.slow"}
    assert {j["workload_name"] for j in jobs} == {"S2@1t"} and {j["cell"] for j in jobs} == {"lstm"}
    assert {j["threads"] for j in jobs} == {1} and all(j["phases"] == ["forward"] for j in jobs)


def test_first_call_rows_are_planned_for_the_compiled_rungs_and_reported_cold_and_warm(fake_registry, monkeypatch,
                                                                                       tmp_path):
    names = fake_registry("slow", "crash")
    monkeypatch.setattr(planning, "FIRST_CALL_IMPLS", ("fake.slow",))
    t100, t1000 = workloads.resolve("T100,T1000")
    assert (t100.batch, t100.input_size, t100.hidden_size) == (t1000.batch, t1000.input_size, t1000.hidden_size)
    config = StudyConfig(out=tmp_path, workloads=workloads.resolve("S2"), first_call_workloads=[t100, t1000])
    jobs = [j for j in planning.plan(config, names) if j["group"] == "first-call"]
    assert [(j["impl"], j["workload_name"]) for j in jobs] == [("fake.slow", "T100"), ("fake.slow", "T1000")]
    assert all(j["phases"] == ["forward", "train"] and j["cell"] == "lstm" for j in jobs)

    meta = dict(kind="meta", run_id="r1", started="t", argv=None, device="cpu", dtype="float32", threads=2,
                repeats=3, budget_s=1.0, min_time_s=0.1, timeout=60, resumed=False, machine={})
    recs = [meta]
    for w, cold, warm in ((t100, 9.0, 2.0), (t1000, 9.9, 2.2)):
        for process, first in enumerate((cold, warm, warm)):
            recs.append(dict(kind="measurement", run_id="r1", key=f"torch.scan|lstm|{w.name}" + (
                f"#p{process}" if process else ""), process=process, group="first-call", impl="torch.scan",
                framework="torch", cell="lstm", workload_name=w.name, workload=w.to_dict(), device="cpu",
                dtype="float32", status="ok", threads=2, forward_s=0.01, train_s=0.03, first_forward_s=first / 3,
                first_train_s=first))
    path = tmp_path / "results.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    text = write_report(path, tmp_path).read_text()
    section = text[text.index("## First call: compile time against T"):]
    assert "| torch.scan | 9.00 | 2.00 | 9.90 | 2.20 | 1.10x |" in section  # fwd+bwd: cold, warm per T


def test_report_has_the_jax_targets_and_the_threads_sections(tmp_path):
    s1, s2 = workloads.resolve("S1,S2")
    meta = dict(kind="meta", run_id="r1", started="t", argv=None, device="cpu", dtype="float32", threads=2,
                repeats=3, budget_s=1.0, min_time_s=0.1, timeout=60, resumed=False, machine={})
    recs = [meta]

    def m(impl, fw, w, forward_s, train_s=None, group="main", threads=2, name=None):
        flops = w.flops("lstm")
        recs.append(dict(kind="measurement", run_id="r1", key=f"{impl}{name or w.name}", group=group, impl=impl,
                         framework=fw, cell="lstm", workload_name=name or w.name, workload=w.to_dict(), device="cpu",
                         dtype="float32", status="ok", threads=threads, forward_s=forward_s, train_s=train_s,
                         gflops_forward=flops / forward_s / 1e9,
                         gflops_train=train_s and 3 * flops / train_s / 1e9))

    m("torch.native", "torch", s1, 0.10, 0.40)
    m("jax.scan", "jax", s1, 0.15, 0.60)
    m("jax.bptt", "jax", s1, 0.12, 0.42)
    m("torch.native", "torch", s2, 0.002, 0.01)
    m("torch.native", "torch", s2, 0.0025, group="threads", threads=1, name="S2@1t")
    for w, name, threads, rate in ((s1, "S1", 2, 150.0), (s2, "S2", 2, 20.0), (s2, "S2@1t", 1, 18.0)):
        recs.append(dict(kind="roof", key=f"roof|lstm|{name}|cpu|start", cell="lstm", workload=name, device="cpu",
                         threads=threads, step_shape=list(w.step_gemm("lstm")), input_shape=list(w.input_gemm("lstm")),
                         seq_len=w.seq_len, flops_forward=w.flops("lstm"), step_mm_gflops=rate,
                         step_chain_torch_gflops=rate, input_mm_gflops=rate, step_xla_gflops=rate,
                         step_chain_xla_gflops=rate, input_xla_gflops=rate, status="ok"))
    path = tmp_path / "results.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    text = write_report(path, tmp_path).read_text()
    targets = text[text.index("## The JAX targets (S1, forward+backward)"):]
    assert "| lstm | jax.bptt (best JAX) | 1.05x | met (<= 1.1x) |" in targets
    assert "| lstm | jax.scan (jax.scan) | 1.50x | missed (<= 1.1x) |" in targets
    threads = text[text.index("## Threads: forward on 1 and 2 threads"):]
    assert "| torch.native | 2.5 | 2 | 1.25x |" in threads
    assert "torch 18.0 GFLOP/s on 1 thread, 20.0 on 2 (1.11x" in threads
    assert "| torch.native | lstm | S2@1t |" not in text  # not in the main table


def test_the_report_counts_other_processes_cpu_time_not_the_studys_own_load(tmp_path):
    from rnnbench.study.machine import cpu_account, others_cpu
    a = cpu_account()
    sum(i * i for i in range(300_000))  # this process's own work is not "others"
    b = cpu_account()
    assert b["own"] > a["own"] and others_cpu(a, b)["others_s"] >= 0
    meta = dict(kind="meta", run_id="r1", started="t", argv=None, device="cpu", dtype="float32", threads=2,
                repeats=3, budget_s=1.0, min_time_s=0.1, timeout=60, resumed=False,
                machine=dict(cpu="test cpu", usable_cpus=2, load_average=[2.1, 2.0, 1.9]),
                cpu=dict(wall=0.0, busy=0.0, steal=0.0, own=0.0))
    for others, quiet in ((5.0, True), (60.0, False)):  # over a 100 s run that used 190 CPU-s itself
        end = dict(kind="end", run_id="r1", load_average=[2.2, 2.0, 1.9],
                   cpu=dict(wall=100.0, busy=190.0 + others, steal=1.0, own=190.0))
        path = tmp_path / f"results{others}.jsonl"
        path.write_text("\n".join(json.dumps(r) for r in (meta, end)) + "\n")
        text = write_report(path, tmp_path / str(others)).read_text()
        assert f"- Other processes: {others:.0f} CPU-s during the run's 100 s ({others / 100:.0%} of one CPU" in text
        assert ("the machine was not quiet" in text) is not quiet


def test_protocol_line_says_how_many_processes_each_measurement_ran_in():
    from rnnbench.study.report.context import protocol

    fixed = protocol(dict(processes=3, max_processes=3, budget_s=1.0, timeout=240.0, target_half_width=0.03))
    assert "in 3 fresh processes per measurement;" in fixed and "±" not in fixed
    adaptive = protocol(dict(processes=3, max_processes=5, budget_s=1.0, timeout=240.0, target_half_width=0.05))
    assert "in 3 to 5 fresh processes per measurement (more while the interval is wider than ±5%)" in adaptive
    forked = protocol(dict(processes=3, max_processes=3, budget_s=1.0, timeout=240.0, start_method="forkserver"))
    assert "in 3 fresh processes per measurement (each forked from a server" in forked



def test_an_answer_where_no_row_competes_says_why_and_what_to_do():
    from rnnbench.study.report.context import answer_section
    from rnnbench.study.table import flagged_keys

    wl = workloads.resolve("quick")[0].to_dict()
    meta = dict(kind="meta", run_id="r", threads=2, device="cpu", machine={"cpu": "AMD EPYC"})
    common = dict(kind="measurement", run_id="r", group="main", cell="lstm", device="cpu", dtype="float32",
                  status="ok", workload=wl, workload_name="quick", first_train_s=1.0, first_forward_s=0.5)
    recs = [meta, dict(common, key="torch.native|lstm|quick|cpu|float32", impl="torch.native", framework="torch",
                       forward_s=0.1, train_s=0.3, forward_iqr_s=0.09, train_iqr_s=0.0),
            dict(common, key="torch.bptt|lstm|quick|cpu|float32", impl="torch.bptt", framework="torch",
                 forward_s=0.5, train_s=0.3, forward_iqr_s=0.0, train_iqr_s=0.0)]
    text = "\n".join(answer_section(collect(recs)))
    assert "No row competes: every measured row is flagged under Sanity" in text and "--retry-flagged" in text
    assert flagged_keys(recs) == {"torch.native|lstm|quick|cpu|float32", "torch.bptt|lstm|quick|cpu|float32"}
    nothing = "\n".join(answer_section(collect([meta])))
    assert "No measurement of this run completed" in nothing


def test_retry_flagged_measures_again_only_the_flagged_rows(tmp_path):
    from rnnbench.study.records import is_done
    from rnnbench.study.table import flagged_keys

    wl = workloads.resolve("quick")[0].to_dict()
    common = dict(kind="measurement", run_id="r", group="main", cell="lstm", device="cpu", dtype="float32",
                  status="ok", workload=wl, workload_name="quick", forward_iqr_s=0.0, train_iqr_s=0.0)
    recs = [dict(kind="meta", run_id="r", machine={}),
            dict(common, key="torch.native|lstm|quick|cpu|float32", impl="torch.native", forward_s=0.1, train_s=0.3),
            dict(common, key="torch.bptt|lstm|quick|cpu|float32#p1", impl="torch.bptt", forward_s=0.5, train_s=0.3)]
    flagged = flagged_keys(recs)
    assert flagged == {"torch.bptt|lstm|quick|cpu|float32"}  # its forward is slower than its forward+backward
    retry = StudyConfig(out=tmp_path, resume=True, retry_flagged=True)
    keep = StudyConfig(out=tmp_path, resume=True)
    assert [is_done(r, retry, flagged) for r in recs[1:]] == [True, False]
    assert [is_done(r, keep, flagged) for r in recs[1:]] == [True, True]


def test_help_states_the_defaults_each_profile_resolves_to():
    """Every profile-dependent default in `rnnbench compare --help` is what that profile runs."""
    from rnnbench.cli import build_parser
    from rnnbench.study.command import PROFILES, profile_default, resolve_profile

    parser = build_parser()
    compare = next(a for a in parser._subparsers._group_actions).choices["compare"]
    text = " ".join(compare.format_help().split())
    for name in ("precisions", "custom_cells", "one_thread", "budget", "max_processes", "sweeps", "first_call",
                 "workloads"):
        assert " ".join(profile_default(name).split()) in text, name
    for profile, values in PROFILES.items():
        args = parser.parse_args(["compare", "--profile", profile])
        cells, custom, workloads = resolve_profile(args)
        assert ",".join(args.precisions) == ("" if values["precisions"] == "none" else values["precisions"])
        assert (args.budget, args.max_processes, args.sweeps) == (values["budget"], values["max_processes"],
                                                                  values["sweeps"])
        assert ",".join(w.name for w in workloads) == values["workloads"] and cells == list(STANDARD_CELLS)
        assert (custom == []) == (values["custom_cells"] == "none")
        assert (args.one_thread == []) == (values["one_thread"] == "none")
        assert ",".join(w.name for w in args.first_call) == ("" if values["first_call"] == "none"
                                                             else values["first_call"])
