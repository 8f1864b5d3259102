"""What runs on a node of the cluster, as Ray tasks the driver sends: `describe_node` (what
machine this is), `probe_on_node` (which implementations run here), `measure_on_node` (one
worker process in the task's measurement slot).

Ray pickles these functions by reference (this module and their name), and each node imports
them from its own checkout (every node has this repository at the driver's commit,
docs/cluster.md): so they stay module-level functions here, with nothing of the driver in them.
"""

from __future__ import annotations

import os
import socket
import tempfile
import time
from pathlib import Path


def describe_node(device: str, threads: int) -> dict:
    """What machine this node is (`machine.machine_info`), its node id and usable cores."""
    import ray

    from ..machine import machine_info

    info = machine_info(device, threads)
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    info.update(node_id=ray.get_runtime_context().get_node_id(), host=socket.gethostname(), cpu_list=cores)
    return info


def probe_on_node(by_framework: dict, device: str, timeout: float, cells: list, dtypes: list):
    """`runner.run_probe` on this node: which implementations run here, and on which cells."""
    from ..runner import run_probe

    return run_probe(by_framework, device, timeout, cells, dtypes)


def _die_with_parent():
    """A preexec function: the child gets SIGKILL when the task's process dies (Linux), so a
    measurement does not outlive its lost Ray worker and run beside the retry."""
    import ctypes
    import signal

    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return lambda: None
    return lambda: prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def measure_on_node(command: str, job: dict, options: dict) -> dict:
    """One worker process ("measure" or "roof") in this task's slot: pinned to the slot's cores,
    under the node's share of memory, with a compile cache of this node and study."""
    import ray

    from rnnbench.measure.isolated import run_worker

    cpus = options.get("cpus")
    tie = _die_with_parent()

    def preexec():
        if cpus and hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(0, cpus)
        tie()

    node_id = ray.get_runtime_context().get_node_id()
    env = dict(options.get("env") or {}, RNNBENCH_NODE_ID=node_id)  # the worker may name its node
    env["TORCHINDUCTOR_CACHE_DIR"] = str(Path(tempfile.gettempdir()) / "rnnbench-compile-cache" / options["study"])
    if options.get("max_memory_gb"):
        max_rss = int(options["max_memory_gb"] * 2**30)
    else:  # 80% of the node's memory, shared by its slots
        import psutil
        max_rss = int(0.8 * psutil.virtual_memory().total / max(1, options.get("slots", 1)))
    started = time.time()
    rec = run_worker(command, job, timeout=options["timeout"], max_rss_bytes=max_rss, env=env, preexec_fn=preexec)
    rec.update(started=started, ended=time.time(), node_id=node_id,
               node_load_average=[round(v, 2) for v in os.getloadavg()] if hasattr(os, "getloadavg") else None)
    return rec
