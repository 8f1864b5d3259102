"""LSTM and GRU in JAX / Flax with PyTorch's parameters and semantics.

Functional core (pure, `jit`-able, differentiable in `x`, `hx` and `params`)::

    output, (h_n, c_n) = jax_impl.lstm(params, x, (h0, c0), lengths=None, num_layers=1,
                                       bidirectional=False, batch_first=False, proj_size=0,
                                       impl="scan", unroll=1)
    output, h_n = jax_impl.gru(params, x, h0, ...)

`params` is the canonical dict (PyTorch `state_dict` names and shapes, NumPy or JAX
arrays).  Shapes are PyTorch's: x (T, B, I) or (B, T, I) with `batch_first`, or an
unbatched (T, I); h0 (L*D, B, H_out), c0 (L*D, B, H).  `lengths` (B,) gives PyTorch's
packed-sequence semantics on a padded x.  The computation runs in x's dtype; params and
states are cast to it.  Static arguments for `jax.jit`: `num_layers`, `bidirectional`,
`batch_first`, `proj_size`, `impl` and the impl options.

Impls (`IMPLS`, the ladder): `naive`, `scan`, `bptt` (scan forward, hand-written backward),
`flax_linen`, `flax_nnx`, `cudnn`;
`available_impls()` lists the ones that run here.  Flax NNX modules: `LSTM`, `GRU`.

Other cells of the catalogue (`shared.cells`: `ln_lstm`, `peephole_lstm`,
`gru_reset_before`, or a user's own once its JAX step is registered with
`jax_impl.register_cell(name, step)`, see `jax_impl.cells`) run on the `scan` impl::

    output, (h_n, c_n) = jax_impl.rnn(params, x, (h0, c0), cell="ln_lstm", ...)   # lstm family
    output, h_n = jax_impl.rnn(params, x, h0, cell="gru_reset_before", ...)       # gru family

`jax_impl.jit(f)` is `jax.jit(f)` with the XLA options rnnbench measures with
(`jax_impl.xla_options`: XLA's defaults, or `RNNBENCH_XLA=fused` for YNNPACK's dot fusion).

NNX modules: `LayerNormLSTM`, `PeepholeLSTM`, `ResetBeforeGRU`, or `RNN(cell, ...)` for
any cell (parameters named as the catalogue: `layernorm_ih_weight_l0`, `peephole_l0`, ...).
"""

from __future__ import annotations

from .cells import register_cell
from .xla_options import jit
from .driver import (IMPLS, ImplUnavailableError, UnknownImplError, UnsupportedConfigError, available_impls,
                     run, unavailable_reason)

__all__ = ["lstm", "gru", "rnn", "register_cell", "jit", "IMPLS", "available_impls", "unavailable_reason", "LSTM", "GRU",
           "RNN", "LayerNormLSTM", "PeepholeLSTM", "ResetBeforeGRU", "UnknownImplError", "ImplUnavailableError", "UnsupportedConfigError"]


def lstm(params, x, hx=None, *, lengths=None, num_layers: int = 1, bidirectional: bool = False,
         batch_first: bool = False, proj_size: int = 0, impl: str = "scan", dropout: float = 0.0,
         dropout_key=None, **impl_options):
    """Multi-layer LSTM with `torch.nn.LSTM`'s parameters and semantics.

    Returns `(output, (h_n, c_n))`: output (T, B, D*H_out) (batch-first if asked), zero
    past each length; h_n (L*D, B, H_out) and c_n (L*D, B, H) at each sequence's last
    valid step, layer-major then direction.  `hx` is `(h0, c0)` or None (zeros).
    `dropout` with a `dropout_key` applies inverted dropout to every layer's output but
    the last (PyTorch's training-mode dropout); without a key nothing is dropped.
    `impl_options` go to the impl (e.g. `unroll`, `remat` for `scan`).
    """
    output, h_n, c_n = run("lstm", params, x, hx, lengths=lengths, num_layers=num_layers,
                           bidirectional=bidirectional, batch_first=batch_first, proj_size=proj_size, impl=impl,
                           dropout=dropout, dropout_key=dropout_key, **impl_options)
    return output, (h_n, c_n)


def gru(params, x, hx=None, *, lengths=None, num_layers: int = 1, bidirectional: bool = False,
        batch_first: bool = False, impl: str = "scan", dropout: float = 0.0, dropout_key=None, **impl_options):
    """Multi-layer GRU with `torch.nn.GRU`'s parameters and semantics; returns `(output, h_n)`.

    Same arguments as `lstm` (no `proj_size`); `hx` is `h0` or None.
    """
    output, h_n, _ = run("gru", params, x, hx, lengths=lengths, num_layers=num_layers, bidirectional=bidirectional,
                         batch_first=batch_first, impl=impl, dropout=dropout, dropout_key=dropout_key,
                         **impl_options)
    return output, h_n


def rnn(params, x, hx=None, *, cell: str, lengths=None, num_layers: int = 1, bidirectional: bool = False,
        batch_first: bool = False, proj_size: int = 0, impl: str = "scan", dropout: float = 0.0, dropout_key=None,
        **impl_options):
    """Any catalogue cell (`shared.cells`) with the layer/direction/lengths machinery of `lstm`.

    `params` holds the canonical names plus the cell's extras (`<prefix>_l{k}[_reverse]`,
    `RNNSpec(cell, ...).param_shapes()`).  An lstm-family cell (state h, c) takes
    `hx = (h0, c0)` and returns `(output, (h_n, c_n))`; a gru-family cell takes `hx = h0`
    and returns `(output, h_n)`.  Catalogue cells other than lstm/gru run on `impl="scan"`.
    """
    from shared.cells import get_cell

    family = get_cell(cell).family
    output, h_n, c_n = run(cell, params, x, hx, lengths=lengths, num_layers=num_layers, bidirectional=bidirectional,
                           batch_first=batch_first, proj_size=proj_size, impl=impl, dropout=dropout,
                           dropout_key=dropout_key, **impl_options)
    return (output, (h_n, c_n)) if family == "lstm" else (output, h_n)


def __getattr__(name):  # the NNX modules import flax.nnx only when asked for
    if name in ("LSTM", "GRU", "RNN", "LayerNormLSTM", "PeepholeLSTM", "ResetBeforeGRU"):
        from . import modules
        return getattr(modules, name)
    raise AttributeError(f"module 'jax_impl' has no attribute {name!r}")
