"""What the report says about the machine: CPU model, ISA, cores, memory, GPU, library versions.

Read from /proc, nvidia-smi and package metadata, never by importing torch or jax.
`machine_class` names a kind of machine: records of one class may be pooled and divided
by one another, records of two classes never (the cross-machine report keeps them apart).
"""

from __future__ import annotations

import hashlib
import json
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
            if line.startswith(("flags", "Features")):  # x86; ARM
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


# The ISA extensions that decide which GEMM and RNN kernels the frameworks can use (float32 FMA
# widths, bfloat16/float16 arithmetic, AMX tiles; NEON/SVE on ARM): two machines that differ
# here are different machines for a framework-choice study.
ISA_FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_fp16", "avx_vnni", "amx_tile",
             "amx_bf16", "amx_int8", "amx_fp16", "asimd", "sve", "sve2", "bf16", "i8mm")


def isa_flags(flags: set[str] | None = None) -> list[str]:
    """The `ISA_FLAGS` this CPU has, in that order."""
    flags = cpu_flags() if flags is None else flags
    return [f for f in ISA_FLAGS if f in flags]


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
    gpus = gpu_list()
    return gpus[0]["name"] if gpus else None


def gpu_list() -> list[dict]:
    """Every GPU nvidia-smi sees: {"name", "driver"} (empty without one, or without nvidia-smi)."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return []
    if out.returncode != 0:
        return []
    gpus = []
    for line in out.stdout.strip().splitlines():
        name, _, driver = (p.strip() for p in line.rpartition(","))
        if name:
            gpus.append({"name": name, "driver": driver})
    return gpus


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
        "isa": isa_flags(flags),
        "memory_gib": memory_gib(),
        "os": platform.platform(),
        "python": sys.version.split()[0],
        "versions": library_versions(),
        "git_commit": git_commit(),
        "device": device,
        "threads": threads,
        "load_average": load_average(),
        # how the JAX rows were compiled: rnnbench.jax.jit's XLA options (rnnbench/jax/xla_options.py)
        "xla_options": os.environ.get("RNNBENCH_XLA", "default"),
    }
    if device == "cuda":
        gpus = gpu_list()
        info.update(gpu=gpus[0]["name"] if gpus else None, gpu_driver=gpus[0]["driver"] if gpus else None,
                    gpus=len(gpus))
    return info


# What makes two machines the same kind: the hardware the kernels see, the thread count and
# device of the study, and the library versions (not the host name, memory, load or commit).
CLASS_FIELDS = ("cpu", "isa", "logical_cpus", "gpu", "gpu_driver", "gpus", "device", "threads")


def machine_class(info: dict) -> str:
    """A short, stable id of the kind of machine `info` (a `machine_info`) describes."""
    fingerprint = {k: info.get(k) for k in CLASS_FIELDS}
    fingerprint["versions"] = {k: v for k, v in sorted((info.get("versions") or {}).items()) if k in LIBRARIES}
    return hashlib.sha1(json.dumps(fingerprint, sort_keys=True, default=str).encode()).hexdigest()[:8]


def machine_label(info: dict) -> str:
    """A person's name for the machine: CPU (ISA), CPUs, GPUs, threads."""
    isa = info.get("isa")
    if isa is None:  # records made before the ISA list
        isa = [f for f, on in (("avx512f", info.get("avx512")), ("amx_tile", info.get("amx"))) if on]
    cpu = f"{info.get('cpu') or 'an unknown CPU'}" + (f" ({', '.join(isa)})" if isa else "")
    parts = [cpu, f"{info.get('logical_cpus')} CPUs"]
    if info.get("gpu"):
        parts.append(f"{info.get('gpus') or 1}x {info['gpu']}" + (f" (driver {info['gpu_driver']})"
                                                                   if info.get("gpu_driver") else ""))
    if info.get("threads"):
        parts.append(f"{info['threads']} threads")
    return ", ".join(parts)


# What every record of a cluster run carries about the machine it ran on.
RECORD_FIELDS = ("cpu", "isa", "logical_cpus", "gpu", "gpu_driver", "gpus", "threads", "versions", "git_commit",
                 "node_id", "host")


def record_machine(info: dict) -> dict:
    return {k: info[k] for k in RECORD_FIELDS if info.get(k) is not None}
