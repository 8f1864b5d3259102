"""asv: the configuration and suites are valid, and a quick smoke run succeeds.

Runs asv against the current environment (`--python=same`), the quick profile, one
implementation and one benchmark, so it stays well under a minute.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import ROOT  # noqa: E402
ASV = [sys.executable, "-m", "asv"]


def _env(tmp_path, **extra):
    env = dict(os.environ, HOME=str(tmp_path), RNNBENCH_PROFILE="quick", **extra)  # keep ~/.asv-machine.json out of $HOME
    return env


def _run(args, env, timeout=240):
    proc = subprocess.run(ASV + args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    return proc.returncode, proc.stdout + proc.stderr


def _smoke_impl() -> str | None:
    for impl, module in (("torch.native", "rnnbench.torch.adapter"), ("jax.scan", "rnnbench.jax.adapter")):
        if importlib.util.find_spec(module) is not None:
            return impl
    return None


def test_conf_installs_pinned_cpu_requirements():
    # asv.conf.json is JSON with // comments
    text = "\n".join(line for line in (ROOT / "asv.conf.json").read_text().splitlines()
                     if not line.lstrip().startswith("//"))
    conf = json.loads(text)
    assert conf["repo"] == "." and conf["environment_type"] == "virtualenv"
    assert conf["results_dir"] == ".asv/results" and conf["html_dir"] == ".asv/html"
    install = " ".join(conf["install_command"])
    assert "-r {build_dir}/requirements.txt -c {build_dir}/constraints.txt" in install
    assert "torch==2.13.0" in (ROOT / "requirements.txt").read_text()


def test_asv_check_passes(tmp_path):
    rc, out = _run(["check", "--python=same"], _env(tmp_path))
    assert rc == 0, out
    assert "No problems found" in out, out


def _python(code: str, tmp_path, timeout: float) -> subprocess.CompletedProcess:
    """Run `code` in a fresh interpreter with the benchmarks' environment; it must succeed."""
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=_env(tmp_path), capture_output=True,
                          text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr
    return proc


def test_unsupported_implementation_skips_through_asv(tmp_path):
    code = ("import benchmarks.rnn as b\n"
            "assert set(b.PARAMS[0]) >= {'torch.native', 'jax.scan'}, b.PARAMS\n"
            "assert b.PARAMS[1] == ['lstm', 'gru', 'ln_lstm', 'peephole_lstm', 'gru_reset_before'], b.PARAMS\n"
            "assert b.PARAMS[3] == ['float32', 'amp_bfloat16'], b.PARAMS\n"
            "for impl, cell in (('jax.cudnn', 'gru'), ('torch.native', 'ln_lstm')):\n"
            "    try:\n        b.RNN().setup(impl, cell, 'quick', 'float32')\n"
            "    except NotImplementedError as e:\n        print('skipped:', e)\n")
    proc = _python(code, tmp_path, timeout=120)
    assert "skipped: jax.cudnn implements only lstm" in proc.stdout
    assert "skipped: torch.native implements only lstm, gru" in proc.stdout  # a custom cell nn.LSTM lacks


def test_rungs_with_options_join_the_implementations_with_rnnbench_options(tmp_path, monkeypatch):
    monkeypatch.setenv("RNNBENCH_OPTIONS", "torch.scan[freezing],torch.compile[mode=max-autotune-no-cudagraphs]")
    code = ("import benchmarks.rnn as b\n"
            "assert 'torch.scan' in b.PARAMS[0], b.PARAMS\n"
            "assert b.PARAMS[0][-2:] == ['torch.scan[freezing]', 'torch.compile[mode=max-autotune-no-cudagraphs]']\n")
    _python(code, tmp_path, timeout=120)


@pytest.mark.skipif(not (ROOT / ".git").exists(), reason="asv needs the git repository to name the commit")
def test_quick_smoke_run_against_this_environment(tmp_path):
    impl = _smoke_impl()
    if impl is None:
        pytest.skip("no implementation adapter has landed yet")
    env = _env(tmp_path)
    rc, out = _run(["machine", "--yes"], env)
    assert rc == 0, out
    bench = re.escape(f"RNN.time_forward('{impl}', 'lstm', 'quick', 'amp_bfloat16')")
    rc, out = _run(["run", "--python=same", "--quick", "--dry-run", "--show-stderr", "--bench", bench], env)
    if "Unknown commit" in out or "not a git repository" in out:
        pytest.skip(f"asv cannot see the commit here: {out[-300:]}")
    assert rc == 0, out
    assert "failed" not in out, out
    # asv prints the timed result, e.g. "[100.00%] ··· rnn.RNN.time_forward   ok" then the value table
    assert re.search(r"rnn\.RNN\.time_forward\s+ok", out), out


def test_roof_fraction_benchmark_measures_its_own_frameworks_roof_in_process(tmp_path):
    code = ("import benchmarks.rnn as b\n"
            "assert b.RoofFraction.params[1:] == [['lstm', 'gru'], ['quick'], ['float32']], b.RoofFraction.params\n"
            "r = b.RoofFraction()\n"
            "r.setup('torch.bptt', 'lstm', 'quick', 'float32')\n"
            "print('fraction', r.track_train_roof_fraction('torch.bptt', 'lstm', 'quick', 'float32'))\n")
    proc = _python(code, tmp_path, timeout=300)
    fraction = float(proc.stdout.split("fraction")[-1])
    assert 0 < fraction < 10, fraction


@pytest.mark.skipif(not (ROOT / ".git").exists(), reason="asv needs the git repository to name the commit")
def test_paired_ratio_samples_become_asv_samples_appended_over_rounds(tmp_path):
    """The gate's benchmark returns {"samples": [...], "number": 1}; asv 0.6's runner reads that
    as a timing result: it appends the samples of every round (a process each), takes their
    median, and keeps the statistics its compare uses (tools/bench_compare.sh relies on it)."""
    conf = {"version": 1, "project": "rnnbench", "repo": str(ROOT), "dvcs": "git", "branches": ["HEAD"],
            "environment_type": "virtualenv", "benchmark_dir": str(ROOT / "benchmarks"),
            "env_dir": str(tmp_path / "env"), "results_dir": str(tmp_path / "results"),
            "html_dir": str(tmp_path / "html")}
    (tmp_path / "asv.conf.json").write_text(json.dumps(conf))
    env = _env(tmp_path, RNNBENCH_DTYPES="float32", RNNBENCH_THREADS="1")
    cfg = ["--config", str(tmp_path / "asv.conf.json")]
    rc, out = _run(["machine", "--yes", *cfg], env)
    assert rc == 0, out
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.strip()
    bench = r"PairedRatio\.track_train_ratio\('torch\.jit', 'lstm', 'quick'"
    rc, out = _run(["run", *cfg, "--python=same", "--set-commit-hash", head, "--record-samples", "-a", "rounds=2",
                    "--show-stderr", "-b", bench], env, timeout=300)
    assert rc == 0 and "failed" not in out, out
    (path,) = (tmp_path / "results").glob(f"*/{head[:8]}-*.json")
    data = json.loads(path.read_text())
    entry = dict(zip(data["result_columns"], data["results"]["rnn.PairedRatio.track_train_ratio"]))
    combos = list(itertools.product(*entry["params"]))
    i = combos.index(("'torch.jit'", "'lstm'", "'quick'", "'float32'"))
    samples = entry["samples"][i]
    assert len(samples) >= 2 * 10, samples  # two rounds of at least min_samples each
    assert entry["result"][i] == pytest.approx(statistics.median(samples), rel=1e-6)  # asv: the samples' median
    assert entry["stats_repeat"][i] == len(samples)
    assert entry["stats_ci_99_a"][i] <= entry["result"][i] <= entry["stats_ci_99_b"][i]
    assert 0 < entry["result"][i] < 100


def _asv_history():
    from tools import asv_history

    return asv_history


def test_history_reads_every_verdict_of_asv_compare():
    h = _asv_history()
    name = "rnn.PairedRatio.track_train_ratio('torch.eager', 'lstm', 'quick', 'float32')"
    row = h.compare_row
    assert row(f"| +        | 2.10±0.1   | 2.60±0.2  | 1.24    | {name} |")["verdict"] == "slower"
    assert row(f"| -        | 2.60±0.1   | 2.10±0.2  | 0.81    | {name} |")["verdict"] == "faster"
    assert row(f"|          | 2.10±0.1   | 2.60±0.9  | ~1.24   | {name} |") == dict(
        benchmark=name, before="2.10±0.1", after="2.60±0.9", ratio="1.24", verdict="beyond the factor, not significant")
    assert row(f"|          | 2.10±0.1   | 2.12±0.1  | 1.01    | {name} |")["verdict"] == "unchanged"
    assert row(f"| !        | 2.10±0.1   | failed    | n/a     | {name} |")["verdict"] == "failed at the later commit"
    assert row(f"| *        | failed     | 2.10±0.1  | n/a     | {name} |")["verdict"] == "failed at the earlier commit"
    assert row(f"|          | n/a        | n/a       | n/a     | {name} |") is None  # not measured at either
    assert row("| Change   | Before [e5a78837]   | After [ddd1dd59]   | Ratio   | Benchmark (Parameter) |") is None
    s = h.summarize([dict(base="a", head="b", rows=[row(f"| +  | 2.1 | 2.6 | 1.24 | {name} |"),
                                                      row(f"|    | 2.1 | 2.1 | 1.00 | {name} |")])])
    assert s["compared"] == 2 and s["counts"] == {"slower": 1, "unchanged": 1}
    assert [r["verdict"] for r in s["significant"]] == ["slower"]


def test_history_samples_commits_evenly_from_the_first_the_suite_can_import():
    h = _asv_history()
    if not (ROOT / ".git").exists():
        pytest.skip("needs this repository's git history")
    line = h.git("rev-list", "--first-parent", "--reverse", f"{h.FIRST}~1..HEAD").split()
    picked = h.sample_commits(5)
    assert picked[0] == line[0] and picked[-1] == line[-1] and len(picked) == min(5, len(line))
    positions = [line.index(c) for c in picked]
    gaps = [b - a for a, b in zip(positions, positions[1:])]
    assert max(gaps) - min(gaps) <= 1  # evenly spaced
    assert re.fullmatch(r"[A-Za-z0-9-]+-\d+cpu", h.machine_name())


def test_the_committed_history_has_twenty_measured_commits_and_its_verdicts():
    """docs/records/asv/results (what `make bench-publish` publishes): the machine of the last
    history run has a measured gate benchmark (a ratio) at twenty or more of the commits it sampled,
    the others are listed as failed (the commit's own code raised), and the record's verdicts
    cover each consecutive pair."""
    h = _asv_history()
    record = json.loads(h.RECORD.read_text())
    assert record["sampled"] == len(record["commits"])
    assert h.measured(record["machine"], record["commits"]) == {"measured": record["measured"],
                                                                 "failed": record["failed"]}
    assert len(record["measured"]) >= 20
    assert [(p["base"], p["head"]) for p in record["pairs"]] == [
        (a[:8], b[:8]) for a, b in zip(record["commits"], record["commits"][1:])]
    assert record["compared"] == sum(len(p["rows"]) for p in record["pairs"]) > 0


def test_parameter_lists_pinned_across_commits_skip_what_a_commit_lacks():
    """asv picks a combination by index into the lists the suite computes at the measured commit;
    `python benchmarks/rnn.py --params` gives the working tree's lists, and with them pinned
    (RNNBENCH_ASV_PARAMS) a rung, cell or workload the commit lacks is skipped, never another
    measured in its place."""
    env = dict(os.environ, RNNBENCH_PROFILE="quick", RNNBENCH_DTYPES="float32", PYTHONPATH=str(ROOT))
    env.pop("RNNBENCH_ASV_PARAMS", None)
    out = subprocess.run([sys.executable, "benchmarks/rnn.py", "--params"], cwd=ROOT, env=env, check=True,
                         capture_output=True, text=True).stdout
    lists = json.loads(out)
    assert set(lists) == {"RNN", "RatioToNative", "PairedRatio", "RoofFraction", "Memory", "FirstCall"}
    from rnnbench.core import registry
    assert lists["PairedRatio"][0] == registry.names()
    assert lists["PairedRatio"][2] == ["quick", "M50"]
    pinned = {k: [list(v[0]), *v[1:]] for k, v in lists.items()}
    for suite in pinned.values():  # a newer tree's rung, cell and workload
        suite[0].insert(0, "torch.from_the_future")
        suite[1].insert(0, "cell_from_the_future")
        suite[2].insert(0, "W_from_the_future")
    code = """
import sys; sys.path.insert(0, "benchmarks")
import rnn
assert rnn.PairedRatio.params[0][0] == "torch.from_the_future", rnn.PairedRatio.params
for args in [("torch.from_the_future", "lstm", "quick"), ("torch.eager", "cell_from_the_future", "quick"),
             ("torch.eager", "lstm", "W_from_the_future")]:
    try:
        rnn._check(*args, "float32")
    except NotImplementedError as e:
        print("skipped:", e)
    else:
        raise SystemExit(f"{args} was not skipped")
"""
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=dict(env, RNNBENCH_ASV_PARAMS=json.dumps(pinned)),
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("skipped:") == 3
