"""XLA compiler options for the JAX functions rnnbench compiles, and `jax_impl.jit`.

On the CPU, jax 0.10.2's XLA hands each matmul to YNNPACK on its own
(`LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT`, the default) and runs the recurrence's gate math
in its own loop fusions.  With

    xla_cpu_experimental_ynn_fusion_type = LIBRARY_FUSION_TYPE_DOT

XLA lets YNNPACK fuse a matmul with the elementwise work around it (the recurrent GEMM
`h @ W_hh^T` with the add of `x_proj[t]`).  While the LSTM's gate math was four slices,
three sigmoids and a tanh, that halved the S3 forward (T=1000, B=16, H=128: 110 -> 55 ms)
and cost 10-20% at S1.  Since the gate math is one tanh pass
(`jax_impl.cells.lstm_gate_scales`), XLA's default is as fast or faster everywhere.
Measured on this CPU (2 threads, idle, each measurement in its own process, interleaved,
ratio to torch `nn.LSTM` in the same run; `python scripts/bench_jax.py --impls scan,bptt
--workloads S1,S2,S3 --modes forward,train --xla both --rounds 3`), fused -> default:

    S3 forward   scan 1.63 -> 1.33   bptt 1.62 -> 1.38
    S3 train     scan 1.92 -> 1.66   bptt 1.04 -> 1.08
    S2 forward   scan 1.01 -> 1.06   bptt 1.05 -> 1.03    (within noise)
    S1 train     scan 1.69 -> 1.40   bptt 1.31 -> 1.25    (with the old gate math)

So rnnbench compiles with XLA's defaults, and keeps the fused setting one switch away
to measure it again on another machine or jax version: `RNNBENCH_XLA=fused` (or
`scripts/bench_jax.py --xla both`).  `jax_impl.jit(f)` is `jax.jit(f)` with
`compiler_options()`; the adapter (study, asv, parity), the trainers and
`scripts/bench_jax.py` compile through it, and the study report states the mode.  The
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
