"""A job in a process of its own: the runner's side (`run_worker`) and what both sides agree on.

The runner writes the job (JSON) to a file and starts `python -m rnnbench.measure.worker COMMAND
--job FILE --result FILE` in its own session (process group), with the thread environment of
the job (`threads.thread_env`).  The worker writes its record (JSON) to the result file after
every phase (`write_json`: atomically, so the runner never reads half a record), so a crash, a
hang (timeout) or a process tree that grows past the memory limit is killed with everything it
started (torch.compile's workers included) and recorded as a failure with its reason and the
phase it was in.  The study runs every measurement this way (`rnnbench.study.runner`, and
`rnnbench.study.cluster.node` on each node); asv its first-call benchmark (`benchmarks/rnn.py`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .threads import DEFAULT_THREADS, thread_env

PROJECT_ROOT = Path(__file__).resolve().parents[2]
WORKER = "rnnbench.measure.worker"  # the module the job runs in: `python -m rnnbench.measure.worker`
FINAL_STATUSES = ("ok", "failed", "skipped")  # a record in any other status did not finish


def write_json(path: str | os.PathLike, data: dict) -> None:
    """Write atomically, so the runner never reads half a record."""
    tmp = Path(f"{path}.tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def _tree_rss(proc) -> int:
    """Resident memory of a process and all its descendants (bytes)."""
    import psutil

    try:
        root = psutil.Process(proc.pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    total = 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total


def _kill_group(proc) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _exit_description(rc: int) -> str:
    if rc < 0:
        name = signal.Signals(-rc).name if -rc in signal.Signals._value2member_map_ else str(-rc)
        hint = " (likely the kernel's out-of-memory killer)" if -rc == signal.SIGKILL else ""
        return f"killed by {name}{hint}"
    return f"exit code {rc}"


def _last_lines(path: Path, n: int = 3, limit: int = 600) -> str:
    try:
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return " | ".join(lines[-n:])[-limit:]


def preload(command: str, job: dict) -> tuple[str, ...]:
    """What a fork server may import before forking a CPU job's process: the framework the job
    imports first.  A JAX rung's peak memory is taken before its torch baseline is imported, so
    its server holds jax alone (what a process holds counts in its RSS); the roof needs both."""
    if job.get("device", "cpu") != "cpu":
        return ()  # a CUDA job starts in a fresh interpreter
    if command == "roof":
        return ("numpy", "torch", "jax", "jax.numpy")
    if str(job.get("impl", "")).startswith("jax."):
        return ("numpy", "jax", "jax.numpy")
    return ("numpy", "torch")


def run_worker(command: str, job: dict, *, timeout: float, max_rss_bytes: int | None = None,
               poll_s: float = 0.1, env: dict | None = None, preexec_fn=None, servers=None) -> dict:
    """Run `python -m rnnbench.measure.worker COMMAND` on `job`; always return a record.

    The record's "status" is the worker's ("ok", "skipped", "failed") or "failed" with a
    "reason" when the process timed out, outgrew `max_rss_bytes`, or died without
    finishing; what the worker had saved before that (its phases) is kept.  `preexec_fn` runs
    in the child before the worker starts (the cluster runner pins a slot's cores with it).
    `servers` (a `forkserver.ForkServers`): fork the process from a server that has imported
    `preload(command, job)`, instead of starting an interpreter (CPU jobs, no `preexec_fn`);
    the record's "start" says which ("forkserver" or "spawn").
    """
    with tempfile.TemporaryDirectory(prefix="rnnbench-") as tmp:
        tmp = Path(tmp)
        job_path, result_path = tmp / "job.json", tmp / "result.json"
        job_path.write_text(json.dumps(job))
        env = {**os.environ, **(env or {})}
        env.update(thread_env(int(job.get("threads", DEFAULT_THREADS))))
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(PROJECT_ROOT), env.get("PYTHONPATH")) if p)
        with open(tmp / "stdout", "wb") as out, open(tmp / "stderr", "wb") as err:
            argv = [command, "--job", str(job_path), "--result", str(result_path)]
            modules = preload(command, job) if servers is not None and preexec_fn is None else ()
            t0 = time.monotonic()
            proc = modules and servers.spawn(modules, WORKER, argv, env=env, stdout=tmp / "stdout",
                                             stderr=tmp / "stderr", cwd=PROJECT_ROOT)
            start = "forkserver" if proc else "spawn"
            if not proc:
                proc = subprocess.Popen([sys.executable, "-m", WORKER, *argv], cwd=PROJECT_ROOT, env=env, stdout=out,
                                        stderr=err, stdin=subprocess.DEVNULL, start_new_session=True,
                                        preexec_fn=preexec_fn)
            killed_for = None
            peak_tree = 0
            try:
                while proc.poll() is None:
                    elapsed = time.monotonic() - t0
                    if elapsed > timeout:
                        killed_for = f"timeout: still running after {timeout:g} s"
                        break
                    if max_rss_bytes:
                        rss = _tree_rss(proc)
                        peak_tree = max(peak_tree, rss)
                        if rss > max_rss_bytes:
                            killed_for = (f"out of memory: the process tree reached {rss / 2**30:.2f} GiB, "
                                          f"over the limit of {max_rss_bytes / 2**30:.2f} GiB")
                            break
                    time.sleep(poll_s)
            finally:
                _kill_group(proc)  # also reaps leftovers of a finished worker (compile pools)
                proc.wait()
            wall = time.monotonic() - t0
        rec: dict = {}
        if result_path.exists():
            try:
                rec = json.loads(result_path.read_text())
            except json.JSONDecodeError:
                rec = {}
        phase = rec.get("phase", "startup")
        if killed_for:
            rec.update(status="failed", reason=f"{killed_for} (in phase {phase})")
        elif rec.get("status") not in FINAL_STATUSES:
            tail = _last_lines(tmp / "stderr")
            rec.update(status="failed",
                       reason=f"crashed: {_exit_description(proc.returncode)} in phase {phase}"
                              + (f": {tail}" if tail else ""))
        elif rec["status"] == "failed" and proc.returncode not in (0, None):
            rec["reason"] = f"{rec.get('reason')} ({_exit_description(proc.returncode)})"
        rec["wall_s"] = wall
        rec["start"] = start
        if rec.get("status") == "failed" and "stderr_tail" not in rec:
            rec["stderr_tail"] = _last_lines(tmp / "stderr", n=15, limit=3000)
        return rec
