"""The measurement core (`shared.measure`): one capability ask per measurement, and the earlier
places of its modules (`shared.study.workloads`, `.threads`, `.worker`, ...) still working, with a
DeprecationWarning (quick; no framework: tests/study_fake_adapter.py stands in for a rung).
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from shared.measure import measurement, workloads

TESTS = Path(__file__).resolve().parents[1]  # where study_fake_adapter.py lives
ROOT = TESTS.parent
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


def _warned(fn):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value = fn()
    return value, [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)]


@pytest.mark.parametrize("old, new", [("workloads", "workloads"), ("threads", "threads")])
def test_a_moved_module_is_the_new_one_and_warns(old, new):
    code = ("import warnings, sys\n"
            "warnings.simplefilter('always')\n"
            "with warnings.catch_warnings(record=True) as caught:\n"
            f"    from shared.study import {old} as a\n"
            f"import shared.measure.{new} as b\n"
            "assert a is b, (a, b)\n"
            "assert [str(w.message) for w in caught if w.category is DeprecationWarning] == [\n"
            f"    'shared.study.{old} is deprecated: use shared.measure.{new} (it is removed in rnnbench 0.2.0)'], \\\n"
            "    [str(w.message) for w in caught]\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("module, name, new", [
    ("shared.study.worker", "time_calls", "shared.measure.timing.time_calls"),
    ("shared.study.worker", "best_call_seconds", "shared.measure.timing.best_call_seconds"),
    ("shared.study.worker", "roof", "shared.measure.roof.measure_roof"),
    ("shared.study.worker", "measure", "shared.measure.measurement.measure"),
    ("shared.study.runner", "ONE_THREAD_IMPLS", "shared.study.planning.ONE_THREAD_IMPLS"),
    ("shared.study.runner", "thread_env", "shared.measure.threads.thread_env"),
    ("shared.study.table", "derive_roof", "shared.measure.roof.derive_roof"),
])
def test_a_moved_name_reads_from_its_new_module_and_warns_naming_it(module, name, new):
    value, messages = _warned(lambda: getattr(importlib.import_module(module), name))
    where, _, new_name = new.rpartition(".")
    assert value is getattr(importlib.import_module(where), new_name)
    assert messages == [f"{module}.{name} is deprecated: use {new} (it is removed in rnnbench 0.2.0)"]
    with pytest.raises(AttributeError):
        getattr(importlib.import_module(module), "no_such_name")


def test_names_a_module_still_uses_read_without_a_warning():
    from shared.measure.isolated import run_worker
    from shared.study import planning, records, runner, table
    from shared.study.table.results import collect

    assert _warned(lambda: (runner.run_worker, runner.StudyConfig, runner.read_records, table.collect)) == (
        (run_worker, planning.StudyConfig, records.read_records, collect), [])


@pytest.mark.parametrize("module", ["shared.measure.worker", "shared.study.worker"])
def test_the_worker_runs_from_its_place_and_its_earlier_one(module, tmp_path):
    """`python -m shared.study.worker` is the earlier entry point: it runs the same worker."""
    job, result = tmp_path / "job.json", tmp_path / "result.json"
    job.write_text(json.dumps({"device": "cpu", "impls": [], "threads": 1}))
    proc = subprocess.run([sys.executable, "-m", module, "probe", "--job", str(job), "--result", str(result)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(result.read_text()) == {"status": "ok", "reasons": {}, "unsupported": {}}
