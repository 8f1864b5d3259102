"""The XLA compiler options rnnbench compiles its JAX functions with, and `jax_impl.jit`.

On the CPU, jax 0.10.2's XLA hands each matmul to YNNPACK on its own
(`LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT`, the default) and runs the recurrence's gate math
in its own loop fusions.  With

    xla_cpu_experimental_ynn_fusion_type = LIBRARY_FUSION_TYPE_DOT

XLA lets YNNPACK fuse a matmul with the elementwise work around it (here the recurrent
GEMM `h @ W_hh^T` with the add of the hoisted input projection `x_proj[t]`).  That pays
when the per-step work is small and the loop body's cost dominates, and costs when the
step GEMMs are large (YNNPACK's fused dot is slower than its plain one there).  Measured
on this CPU (2 threads, `python scripts/bench_jax.py --xla both`, each measurement in
its own process, interleaved, ratios to torch nn.LSTM in the same run):

    S3 (B=16,  H=128) forward   scan 3.64 -> 1.95x,  bptt 2.21 -> 1.95x   (fused: 2x faster)
    S2 (B=1,   H=256) forward   scan 1.00 -> 1.02x,  bptt 0.85 -> 0.83x   (no difference)
    S1 (B=64,  H=512) train     scan 1.40 -> 1.69x,  bptt 1.25 -> 1.31x   (fused: slower)

So the tuned choice depends on the step's size: the fusion is on when `batch * hidden
<= SMALL_STEP` (or when the size is not given), XLA's default otherwise.  The option is
per compilation (`jax.jit(..., compiler_options=...)`), so it changes nothing else in a
user's process.

`jax_impl.jit(f, batch=B, hidden=H)` is `jax.jit(f)` with these options on the CPU
backend (none on GPU).  The adapter (study, asv, parity), the trainers and
`scripts/bench_jax.py` compile through it with their sizes; `RNNBENCH_XLA=default`
compiles with XLA's defaults instead, so both can be measured.  In your own code:

    step = jax_impl.jit(train_step, batch=64, hidden=512)        # or
    step = jax.jit(train_step, compiler_options=jax_impl.xla_options.compiler_options(batch=64, hidden=512))
"""

from __future__ import annotations

import os

import jax

CPU_OPTIONS = {"xla_cpu_experimental_ynn_fusion_type": "LIBRARY_FUSION_TYPE_DOT"}
# batch * hidden up to which the fused dot is used: S3 (2048) gains 2x, S1 (32768) loses 10-20%
SMALL_STEP = 8192
MODES = ("tuned", "default")


def mode() -> str:
    """`RNNBENCH_XLA`: "tuned" (default: `CPU_OPTIONS` on the CPU) or "default" (XLA's own)."""
    value = os.environ.get("RNNBENCH_XLA", "tuned")
    if value not in MODES:
        raise ValueError(f"RNNBENCH_XLA must be one of {MODES}, got {value!r}")
    return value


def compiler_options(backend: str | None = None, *, batch: int | None = None,
                     hidden: int | None = None) -> dict[str, str]:
    """The options for `jax.jit(..., compiler_options=...)` on `backend` (default: JAX's default
    backend) for an RNN step of `batch` rows and `hidden` units (either unknown: treated as small)."""
    if mode() == "default":
        return {}
    backend = backend or jax.default_backend()
    if backend != "cpu":
        return {}
    if batch is not None and hidden is not None and batch * hidden > SMALL_STEP:
        return {}
    return dict(CPU_OPTIONS)


def jit(fun, *, batch: int | None = None, hidden: int | None = None, **kwargs):
    """`jax.jit(fun, **kwargs)` with `compiler_options(batch=, hidden=)` added (explicit
    `compiler_options` win)."""
    options = {**compiler_options(batch=batch, hidden=hidden), **(kwargs.pop("compiler_options", None) or {})}
    return jax.jit(fun, compiler_options=options or None, **kwargs)
