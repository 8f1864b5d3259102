"""One thread count for both frameworks, set before either is imported.

PyTorch (intra-op pool: OpenMP / MKL / oneDNN) and XLA:CPU (Eigen pool) each size their
thread pools from the environment and the CPU affinity when they start.  Setting all of
them the same, and pinning the process to that many cores where the machine has more,
makes "2 threads" mean the same thing for torch and jax.
"""

from __future__ import annotations

import os

DEFAULT_THREADS = 2

_COUNT_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS")


def thread_env(threads: int) -> dict[str, str]:
    """Environment variables that give both frameworks `threads` intra-op threads."""
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be an integer >= 1, got {threads!r}")
    env = {var: str(threads) for var in _COUNT_VARS}
    xla = os.environ.get("XLA_FLAGS", "")
    # Keep any XLA flags the user set, drop ours from a previous call.
    kept = [f for f in xla.split() if not f.startswith(("--xla_cpu_multi_thread_eigen", "intra_op_parallelism_threads"))]
    env["XLA_FLAGS"] = " ".join(kept + ["--xla_cpu_multi_thread_eigen=true", f"intra_op_parallelism_threads={threads}"])
    # Each measurement process holds one framework, but never let JAX grab most of a GPU.
    env["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
    return env


def pin_threads(threads: int) -> list[int] | None:
    """Set the thread environment in this process and pin it to `threads` cores if it has more.

    Call before importing torch or jax.  Returns the cores pinned to (None if unchanged).
    """
    os.environ.update(thread_env(threads))
    if not hasattr(os, "sched_getaffinity"):
        return None
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) <= threads:
        return None
    chosen = cores[:threads]
    os.sched_setaffinity(0, chosen)
    return chosen
