"""asv on several machines: the results of two machines merged into one published history.

Only one real machine is here, so the two machines are test fixtures: this machine measured
twice, under the names `fixture-machine-a` and `fixture-machine-b`, into two results folders as
two machines would, then merged (`tools/asv_merge.py`), published by one `asv publish` and made
to work offline (`tools/asv_offline.py`).  Nothing of it is kept: the history published in the
test is the test's.  One benchmark, one implementation, the quick profile, float32.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import ROOT  # noqa: E402
MACHINES = ("fixture-machine-a", "fixture-machine-b")


from tools import asv_browser, asv_merge, asv_offline  # noqa: E402
pytestmark = [pytest.mark.skipif(not (ROOT / ".git").exists(), reason="asv needs the git repository to name the commit"),
              pytest.mark.skipif(importlib.util.find_spec("rnnbench.torch.adapter") is None, reason="no torch adapter")]


def _asv(args, tmp_path, timeout=300):
    env = dict(os.environ, HOME=str(tmp_path), RNNBENCH_PROFILE="quick", RNNBENCH_DTYPES="float32",
               RNNBENCH_THREADS="1")
    proc = subprocess.run([sys.executable, "-m", "asv", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0 and "failed" not in proc.stdout, proc.stdout + proc.stderr
    return proc.stdout


def _conf(tmp_path, name, results: Path) -> Path:
    conf = {"version": 1, "project": "rnnbench", "repo": str(ROOT), "dvcs": "git", "branches": ["HEAD"],
            "environment_type": "virtualenv", "benchmark_dir": str(ROOT / "benchmarks"),
            "env_dir": str(tmp_path / "env"), "results_dir": str(results), "html_dir": str(tmp_path / "html")}
    path = tmp_path / f"asv-{name}.conf.json"
    path.write_text(json.dumps(conf))
    return path


def test_two_machines_results_merge_into_one_published_history(tmp_path):
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.strip()
    bench = re.escape("RNN.time_forward('torch.native', 'lstm', 'quick', 'float32')")
    sources = []
    for name in MACHINES:  # what each machine's `make bench MACHINE=name` does, into its own folder
        results = tmp_path / name / "results"
        conf = ["--config", str(_conf(tmp_path, name, results))]
        _asv(["machine", "--yes", "--machine", name, *conf], tmp_path)
        _asv(["run", *conf, "--python=same", "--quick", "--set-commit-hash", head, "--machine", name, "-b", bench],
             tmp_path)
        sources.append(results)
    merged = tmp_path / "merged" / "results"
    assert asv_merge.merge(merged, sources) == list(MACHINES)
    assert asv_merge.merge(merged, sources) == list(MACHINES)  # merging the same results again changes nothing
    _asv(["publish", "--config", str(_conf(tmp_path, "publish", merged))], tmp_path)
    html = tmp_path / "html"
    asv_offline.make_offline(html)
    index = json.loads((html / "index.json").read_text())
    assert set(index["params"]["machine"]) == set(MACHINES), index["params"]["machine"]
    for name in MACHINES:  # one series per machine for the benchmark
        graphs = list(html.glob(f"graphs/**/machine-{name}/**/rnn.RNN.time_forward.json"))
        assert graphs, f"no graph of {name}"
        points = json.loads(graphs[0].read_text())
        assert any(v is not None for _, values in points for v in (values if isinstance(values, list) else [values]))
    why = asv_browser.missing()
    if why:
        pytest.skip(f"the two machines' history is published, but it cannot be opened here: {why}")
    # the page selects at most eight values of a parameter by default: ask for the measured series
    got = asv_browser.check_site(html, "rnn.RNN.time_forward?p-impl='torch.native'", min_commits=1, min_drawn=2)
    assert got["drawn"] == 2, got  # a point of each machine, in the offline page


def test_merging_refuses_two_machines_under_one_name_and_two_different_results(tmp_path):
    def machine(results, name, cpu, files=None):
        folder = results / name
        folder.mkdir(parents=True)
        (folder / "machine.json").write_text(json.dumps({"machine": name, "cpu": cpu, "version": 1}))
        for file, text in (files or {}).items():
            (folder / file).write_text(text)
        (results / "benchmarks.json").write_text(json.dumps({"version": 2}))
        return results

    a = machine(tmp_path / "a", "box", "CPU one", {"abc-env.json": "{}"})
    b = machine(tmp_path / "b", "box", "CPU two")
    with pytest.raises(asv_merge.MergeError, match="'box'.*two different machines under one name"):
        asv_merge.merge(tmp_path / "dest", [a, b])
    assert not (tmp_path / "dest").exists()  # checked before anything is copied
    c = machine(tmp_path / "c", "box", "CPU one", {"abc-env.json": '{"other": 1}'})
    with pytest.raises(asv_merge.MergeError, match="abc-env.json differs"):
        asv_merge.merge(tmp_path / "dest", [a, c])
    with pytest.raises(asv_merge.MergeError, match="not an asv results folder"):
        asv_merge.merge(tmp_path / "dest", [tmp_path])
    assert asv_merge.main([str(tmp_path / "dest"), str(a)]) == 0 and (tmp_path / "dest" / "box" / "abc-env.json").exists()
