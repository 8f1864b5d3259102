"""LSTM and GRU in JAX / Flax with PyTorch's parameters and semantics.

Functional core (`rnnbench.jax.functional`; pure, `jit`-able, differentiable in `x`, `hx`
and `params`)::

    output, (h_n, c_n) = rnnbench.jax.lstm(params, x, (h0, c0), lengths=None, num_layers=1,
                                       bidirectional=False, batch_first=False, proj_size=0,
                                       backend="scan", unroll=1)
    output, h_n = rnnbench.jax.gru(params, x, h0, ...)
    output, (h_n, c_n) = rnnbench.jax.rnn(params, x, (h0, c0), cell="ln_lstm", ...)   # any catalogue cell

`params` is the canonical dict (PyTorch `state_dict` names and shapes, NumPy or JAX
arrays).  Shapes are PyTorch's: x (T, B, I) or (B, T, I) with `batch_first`, or an
unbatched (T, I); h0 (L*D, B, H_out), c0 (L*D, B, H).  `lengths` (B,) gives PyTorch's
packed-sequence semantics on a padded x.  The computation runs in x's dtype; params and
states are cast to it.  Static arguments for `jax.jit`: `num_layers`, `bidirectional`,
`batch_first`, `proj_size`, `backend` and the backend's options.

Backends (`BACKENDS`, in ladder order): `naive`, `flax_nnx`, `flax_linen`, `scan`, `bptt`
(scan forward, hand-written backward), `cudnn`; `available_backends()` lists the ones that
run here.  Errors: `UnknownBackendError`,
`BackendUnavailableError`, `UnsupportedConfigError` (`rnnbench.core.capabilities`, the classes
rnnbench.torch raises too).

Flax NNX modules (`rnnbench.jax.modules`): `LSTM`, `GRU`, and for the other cells
`LayerNormLSTM`, `PeepholeLSTM`, `ResetBeforeGRU` or `RNN(cell, ...)` (parameters named as
the catalogue: `layernorm_ih_weight_l0`, `peephole_l0`, ...).  A user's own cell runs once
its JAX step is registered: `rnnbench.jax.register_cell(name, step)` (see `rnnbench.jax.cells`).

`rnnbench.jax.jit(f)` is `jax.jit(f)` with the XLA options rnnbench measures with
(`rnnbench.jax.xla_options`: XLA's defaults, or `RNNBENCH_XLA=fused` for YNNPACK's dot fusion).
"""

from __future__ import annotations

from rnnbench.core.capabilities import BackendUnavailableError, UnknownBackendError, UnsupportedConfigError

from .backends import BACKENDS, available_backends, unavailable_reason
from .cells import register_cell
from .functional import gru, lstm, rnn
from .xla_options import jit

__all__ = ["gru", "lstm", "rnn", "register_cell", "jit", "BACKENDS", "available_backends", "unavailable_reason",
           "LSTM", "GRU", "RNN", "LayerNormLSTM", "PeepholeLSTM", "ResetBeforeGRU", "UnsupportedConfigError",
           "UnknownBackendError", "BackendUnavailableError"]

def __getattr__(name):
    if name in ("LSTM", "GRU", "RNN", "LayerNormLSTM", "PeepholeLSTM", "ResetBeforeGRU"):
        from . import modules  # the NNX modules import flax.nnx only when asked for
        return getattr(modules, name)
    raise AttributeError(f"module 'rnnbench.jax' has no attribute {name!r}")
