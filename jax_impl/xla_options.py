"""The XLA compiler options rnnbench compiles its JAX functions with, and `jax_impl.jit`.

On the CPU, jax 0.10.2's XLA hands each matmul to YNNPACK on its own
(`LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT`, the default) and runs the recurrence's gate math
in its own loop fusions.  With

    xla_cpu_experimental_ynn_fusion_type = LIBRARY_FUSION_TYPE_DOT

XLA lets YNNPACK fuse a matmul with the elementwise work around it (here the recurrent
GEMM `h @ W_hh^T` with the add of the hoisted input projection `x_proj[t]`).  Measured
on this CPU (2 threads, `python scripts/bench_jax.py --xla both`, same process and
inputs, interleaved): S3 forward (T=1000, B=16, H=128, where the per-step work is
small and the loop body's cost dominates) about 2x faster (110 -> 55 ms); S1/S2
forward and every train step within noise (+-3%).  The option is per compilation
(`jax.jit(..., compiler_options=...)`), so it changes nothing else in a user's process.

`jax_impl.jit(f)` is `jax.jit(f)` with these options on the CPU backend (none on GPU).
The adapter (study, asv, parity) compiles through it; `RNNBENCH_XLA=default` compiles
with XLA's defaults instead, so both can be measured.  In your own code:

    step = jax_impl.jit(train_step)                     # or
    step = jax.jit(train_step, compiler_options=jax_impl.xla_options.compiler_options())
"""

from __future__ import annotations

import os

import jax

CPU_OPTIONS = {"xla_cpu_experimental_ynn_fusion_type": "LIBRARY_FUSION_TYPE_DOT"}
MODES = ("tuned", "default")


def mode() -> str:
    """`RNNBENCH_XLA`: "tuned" (default: `CPU_OPTIONS` on the CPU) or "default" (XLA's own)."""
    value = os.environ.get("RNNBENCH_XLA", "tuned")
    if value not in MODES:
        raise ValueError(f"RNNBENCH_XLA must be one of {MODES}, got {value!r}")
    return value


def compiler_options(backend: str | None = None) -> dict[str, str]:
    """The options for `jax.jit(..., compiler_options=...)` on `backend` (default: JAX's default backend)."""
    if mode() == "default":
        return {}
    backend = backend or jax.default_backend()
    return dict(CPU_OPTIONS) if backend == "cpu" else {}


def jit(fun, **kwargs):
    """`jax.jit(fun, **kwargs)` with `compiler_options()` added (explicit `compiler_options` win)."""
    options = {**compiler_options(), **(kwargs.pop("compiler_options", None) or {})}
    return jax.jit(fun, compiler_options=options or None, **kwargs)
