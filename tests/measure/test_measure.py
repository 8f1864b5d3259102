"""The measurement core (`rnnbench.measure`): one capability ask per measurement, and the earlier
places of its modules gone (quick; no framework: tests/study_fake_adapter.py stands in for a rung).
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from rnnbench.measure import measurement, workloads

from tests.support import ROOT, TESTS  # noqa: E402  (TESTS: where study_fake_adapter.py lives)
FAKE = "study_fake_adapter:get_adapter"


def _job(key: str = "native", **extra) -> dict:
    w = workloads.resolve("quick")[0]
    return dict(impl=f"fake.{key}", adapter_key=key, adapter_path=FAKE, cell="lstm", workload=w.to_dict(),
                workload_name=w.name, device="cpu", dtype="float32", threads=1, repeats=3, budget_s=0.0, warmup=0,
                parity=False, seed=0, **extra)


@pytest.fixture
def counted(monkeypatch):
    """The fake adapter, counting its capability asks and the builds' `checked`."""
    monkeypatch.syspath_prepend(str(TESTS))
    fake = importlib.import_module("study_fake_adapter")
    asks, builds = [], []
    unavailable, unsupported, make = (fake.FakeAdapter.unavailable_reason, fake.FakeAdapter.unsupported_reason,
                                      fake.FakeAdapter.make_workload)

    def unavailable_reason(self, device="cpu"):
        asks.append("unavailable")
        return unavailable(self, device)

    def unsupported_reason(self, spec, **kw):
        asks.append("unsupported")
        return "refused for the test" if self.key == "refuse" else unsupported(self, spec, **kw)

    def make_workload(self, spec, **kw):
        builds.append(kw.get("checked", False))
        return make(self, spec, **kw)

    monkeypatch.setattr(fake.FakeAdapter, "unavailable_reason", unavailable_reason)
    monkeypatch.setattr(fake.FakeAdapter, "unsupported_reason", unsupported_reason)
    monkeypatch.setattr(fake.FakeAdapter, "make_workload", make_workload)
    return asks, builds


def test_a_measurement_asks_once_and_builds_without_asking_again(counted, tmp_path):
    asks, builds = counted
    rec = measurement.measure(_job(), str(tmp_path / "rec.json"))
    assert rec["status"] == "ok", rec.get("reason")
    assert asks == ["unavailable", "unsupported"] and builds == [True]


def test_a_refused_measurement_is_recorded_skipped_with_the_reason_and_builds_nothing(counted, tmp_path):
    asks, builds = counted
    rec = measurement.measure(_job("refuse"), str(tmp_path / "rec.json"))
    assert {k: v for k, v in rec.items() if k != "pid"} == {"status": "skipped", "phase": "check",
                                                           "reason": "refused for the test"}
    assert json.loads((tmp_path / "rec.json").read_text()) == rec
    assert builds == []


def test_the_baseline_of_a_pair_asks_for_itself_when_it_is_built(counted, tmp_path):
    asks, builds = counted
    base = dict(impl="torch.native", cell="lstm", dtype="float32", adapter_key="native", adapter_path=FAKE)
    rec = measurement.measure(_job("slow", baseline=base), str(tmp_path / "rec.json"))
    assert rec["status"] == "ok", rec.get("reason")
    assert builds == [True, False]  # the rung asked in the worker; the baseline's build is its own ask


@pytest.mark.parametrize("module", ["rnnbench.study.worker", "rnnbench.study.workloads", "rnnbench.study.threads"])
def test_the_measurement_cores_earlier_places_are_gone(module):
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(module)


def test_the_worker_runs_as_a_module(tmp_path):
    module = "rnnbench.measure.worker"
    job, result = tmp_path / "job.json", tmp_path / "result.json"
    job.write_text(json.dumps({"device": "cpu", "impls": [], "threads": 1}))
    proc = subprocess.run([sys.executable, "-m", module, "probe", "--job", str(job), "--result", str(result)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(result.read_text()) == {"status": "ok", "reasons": {}, "unsupported": {}}
