"""XLA compiler options for the JAX functions rnnbench compiles, and `rnnbench.jax.jit`.

On the CPU, XLA can let YNNPACK fuse a matmul with the elementwise work around it
(`xla_cpu_experimental_ynn_fusion_type = LIBRARY_FUSION_TYPE_DOT`: the recurrent GEMM
`h @ W_hh^T` with the add of `x_proj[t]`) instead of handing it each matmul on its own
(XLA's default).  Since the LSTM's gate math is one tanh pass
(`rnnbench.jax.cells.lstm_gate_scales`), XLA's default was measured as fast or faster on
every workload (see the JAX page of the docs).

So rnnbench compiles with XLA's defaults, and keeps the fused setting one switch away
to measure it again on another machine or jax version: `RNNBENCH_XLA=fused` (or
`tools/bench_jax.py --xla both`).  `rnnbench.jax.jit(f)` is `jax.jit(f)` with
`compiler_options()`; the adapter (study, asv, parity), the trainers and
`tools/bench_jax.py` compile through it, and the study report states the mode.  The
options are per compilation (`jax.jit(..., compiler_options=...)`), so they change
nothing else in a user's process.
"""

from __future__ import annotations

import os

import jax

CPU_OPTIONS = {"xla_cpu_experimental_ynn_fusion_type": "LIBRARY_FUSION_TYPE_DOT"}
MODES = ("default", "fused")


def mode() -> str:
    """`RNNBENCH_XLA`: "default" (XLA's own options) or "fused" (`CPU_OPTIONS` on the CPU)."""
    value = os.environ.get("RNNBENCH_XLA", "default")
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
