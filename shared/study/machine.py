"""What the report says about the machine: CPU model, cores, memory, library versions.

Read from /proc and package metadata, never by importing torch or jax.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path

LIBRARIES = ("torch", "jax", "jaxlib", "flax", "numpy")


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_flags() -> set[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return None


def library_versions() -> dict[str, str]:
    out = {}
    for name in LIBRARIES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def git_commit(root: Path | None = None) -> str | None:
    root = root or Path(__file__).resolve().parents[2]
    try:
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=10)
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return out.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def gpu_name() -> str | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None


def load_average() -> list[float] | None:
    """The 1, 5 and 15 minute load averages (None where the OS has none)."""
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def cpu_account() -> dict | None:
    """CPU seconds so far: the whole machine's busy time, the hypervisor's steal, and what
    this process and the children it has waited for used.  Two of them, at the start and the
    end of a study, give other processes' CPU time during it (None without psutil)."""
    import resource
    import time

    try:
        import psutil
    except ImportError:
        return None
    t = psutil.cpu_times()
    own = sum(getattr(resource.getrusage(who), f) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
              for f in ("ru_utime", "ru_stime"))
    return {"wall": time.time(), "busy": sum(getattr(t, f, 0.0) for f in ("user", "nice", "system", "irq", "softirq")),
            "steal": getattr(t, "steal", 0.0), "own": own}


def others_cpu(start: dict | None, end: dict | None) -> dict | None:
    """Other processes' CPU seconds between two `cpu_account`s, the wall seconds, and the
    hypervisor's steal: {"others_s", "wall_s", "steal_s"}."""
    if not start or not end:
        return None
    return {"others_s": max(0.0, (end["busy"] - start["busy"]) - (end["own"] - start["own"])),
            "wall_s": end["wall"] - start["wall"], "steal_s": end["steal"] - start["steal"]}


def machine_info(device: str = "cpu", threads: int | None = None) -> dict:
    flags = cpu_flags()
    info = {
        "cpu": cpu_model(),
        "logical_cpus": os.cpu_count(),
        "usable_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "avx512": "avx512f" in flags,
        "amx": "amx_tile" in flags,
        "memory_gib": memory_gib(),
        "os": platform.platform(),
        "python": sys.version.split()[0],
        "versions": library_versions(),
        "git_commit": git_commit(),
        "device": device,
        "threads": threads,
        "load_average": load_average(),
        # how the JAX rows were compiled: jax_impl.jit's XLA options (jax_impl/xla_options.py)
        "xla_options": os.environ.get("RNNBENCH_XLA", "default"),
    }
    if device == "cuda":
        info["gpu"] = gpu_name()
    return info
