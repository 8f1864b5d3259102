"""The fork server (rnnbench.measure.forkserver): a forked measurement process behaves like a fresh one.

A child runs `python -m MODULE ARGV` in a session of its own with the job's environment; its exit
code, a signal that killed it and a hang reach the runner as subprocess.Popen's would; the server
serves on after any of them; and a measurement forked from it records the same kind of record,
memory included, as one in a fresh interpreter (the child touches the library pages the server's
imports made resident, so its RSS starts where a fresh interpreter's would).
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from rnnbench.measure import forkserver
from rnnbench.measure.isolated import run_worker
from rnnbench.measure.workloads import resolve
from tests.support import ROOT
from rnnbench.study.planning import StudyConfig, plan

pytestmark = pytest.mark.skipif(not hasattr(os, "fork") or not Path("/proc/self/pagemap").exists(),
                                reason="the fork server needs fork and /proc (Linux)")

PROBE = '''
import json, os, sys, time
what, out = sys.argv[1], sys.argv[2]
if what == "env":
    with open(out, "w") as f:
        json.dump({"value": os.environ.get("FORKSERVER_TEST"), "pid": os.getpid(), "sid": os.getsid(0),
                   "argv": sys.argv[1:], "cwd": os.getcwd(), "torch": "torch" in sys.modules}, f)
    print("to stdout")
elif what == "exit":
    sys.exit(3)
elif what == "raise":
    raise ValueError("planted")
elif what == "kill":
    os.kill(os.getpid(), 9)
elif what == "hang":
    time.sleep(600)
'''


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    home = tmp_path_factory.mktemp("fs")
    (home / "fs_probe.py").write_text(PROBE)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(home), str(ROOT)]),
               FORKSERVER_TEST="from the job")
    with forkserver.ForkServers() as servers:
        def spawn(*argv):
            return servers.spawn(("numpy", "torch"), "fs_probe", list(argv), env=env, stdout=home / "out",
                                 stderr=home / "err", cwd=home)
        yield spawn, home, servers


def test_a_child_runs_the_module_in_its_own_session_with_the_jobs_environment(server):
    spawn, home, _ = server
    child = spawn("env", str(home / "env.json"))
    assert child.wait(timeout=60) == 0
    got = json.loads((home / "env.json").read_text())
    assert got["value"] == "from the job" and got["pid"] == child.pid == got["sid"], got
    assert got["argv"] == ["env", str(home / "env.json")] and got["cwd"] == str(home)
    assert got["torch"] is True  # imported by the server, before the fork
    assert (home / "out").read_text() == "to stdout\n"


@pytest.mark.parametrize("what, code, stderr", [("exit", 3, ""), ("raise", 1, "ValueError: planted"),
                                                ("kill", -signal.SIGKILL, "")])
def test_exit_codes_exceptions_and_signals_reach_the_runner_like_popens(server, what, code, stderr):
    spawn, home, _ = server
    child = spawn(what, "-")
    assert child.wait(timeout=60) == code
    assert stderr in (home / "err").read_text()


def test_a_hung_child_is_killed_with_its_group_and_the_server_serves_on(server):
    spawn, home, _ = server
    child = spawn("hang", "-")
    assert child.poll() is None
    with pytest.raises(Exception, match="forked pid"):
        child.wait(timeout=0.2)
    os.killpg(child.pid, signal.SIGKILL)
    assert child.wait(timeout=60) == -signal.SIGKILL
    assert spawn("exit", "-").wait(timeout=60) == 3


def test_a_forked_measurement_records_what_a_fresh_interpreter_records(tmp_path):
    config = StudyConfig(out=tmp_path, cells=["lstm"], workloads=resolve("quick"), threads=1, repeats=3,
                         budget_s=0.2, min_time_s=0.0, parity=False)
    job = next(j for j in plan(config, ["torch.eager"]) if j["impl"] == "torch.eager")
    spawned = run_worker("measure", job, timeout=120)
    with forkserver.ForkServers() as servers:
        forked = run_worker("measure", job, timeout=120, servers=servers)
    assert (spawned["start"], forked["start"]) == ("spawn", "forkserver")
    assert spawned["status"] == forked["status"] == "ok", (spawned, forked)
    assert set(spawned) == set(forked)
    # the library pages the imports made resident count in the forked child too: without the
    # touch its RSS starts about a quarter lower (and its net memory counts them again)
    assert forked["baseline_rss_bytes"] > 0.9 * spawned["baseline_rss_bytes"], (forked, spawned)


def test_a_server_that_cannot_start_leaves_the_job_to_a_fresh_interpreter(tmp_path, monkeypatch):
    monkeypatch.setattr(forkserver, "SERVER", "no_such_module_here")  # `python -m` exits at once
    with forkserver.ForkServers() as servers:
        assert servers.spawn(("torch",), "fs_probe", [], env=dict(os.environ), stdout=tmp_path / "o",
                             stderr=tmp_path / "e", cwd=tmp_path) is None
