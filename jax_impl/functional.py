"""The functional API: `lstm`, `gru` and `rnn` (any catalogue cell), pure and `jit`-able.

    output, (h_n, c_n) = lstm(params, x, (h0, c0), lengths=None, num_layers=1, bidirectional=False,
                              batch_first=False, proj_size=0, backend="scan", unroll=1)
    output, h_n = gru(params, x, h0, ...)

`params` is the canonical dict (PyTorch `state_dict` names and shapes, NumPy or JAX
arrays); differentiable in `x`, `hx` and `params`.  `backend=` picks the rung
(`jax_impl.BACKENDS`); `impl=` is its older name, still accepted (not both).
"""

from __future__ import annotations

from shared.cells import get_cell

from .backends import resolve_backend
from .driver import run

__all__ = ["gru", "lstm", "rnn"]


def lstm(params, x, hx=None, *, lengths=None, num_layers: int = 1, bidirectional: bool = False,
         batch_first: bool = False, proj_size: int = 0, backend: str | None = None, impl: str | None = None,
         dropout: float = 0.0, dropout_key=None, dtype=None, **backend_options):
    """Multi-layer LSTM with `torch.nn.LSTM`'s parameters and semantics.

    Returns `(output, (h_n, c_n))`: output (T, B, D*H_out) (batch-first if asked), zero
    past each length; h_n (L*D, B, H_out) and c_n (L*D, B, H) at each sequence's last
    valid step, layer-major then direction.  `hx` is `(h0, c0)` or None (zeros).
    `dropout` with a `dropout_key` applies inverted dropout to every layer's output but
    the last (PyTorch's training-mode dropout); without a key nothing is dropped.
    `backend` (default "scan"; alias `impl`) picks the rung; `backend_options` go to it
    (e.g. `unroll`, `remat` for `scan`).  `dtype` is the dtype of the computation, as Flax's
    `dtype=`: params, x and the state are cast to it inside (differentiably, so gradients
    come back in the arrays' own dtype: float32 parameters with `dtype=jnp.bfloat16` is mixed
    precision); None computes in x's dtype.
    """
    output, h_n, c_n = run("lstm", params, x, hx, lengths=lengths, num_layers=num_layers,
                           bidirectional=bidirectional, batch_first=batch_first, proj_size=proj_size,
                           backend=resolve_backend(backend, impl), dropout=dropout, dropout_key=dropout_key,
                           dtype=dtype, **backend_options)
    return output, (h_n, c_n)


def gru(params, x, hx=None, *, lengths=None, num_layers: int = 1, bidirectional: bool = False,
        batch_first: bool = False, backend: str | None = None, impl: str | None = None, dropout: float = 0.0,
        dropout_key=None, dtype=None, **backend_options):
    """Multi-layer GRU with `torch.nn.GRU`'s parameters and semantics; returns `(output, h_n)`.

    Same arguments as `lstm` (no `proj_size`); `hx` is `h0` or None.
    """
    output, h_n, _ = run("gru", params, x, hx, lengths=lengths, num_layers=num_layers, bidirectional=bidirectional,
                         batch_first=batch_first, backend=resolve_backend(backend, impl), dropout=dropout,
                         dropout_key=dropout_key, dtype=dtype, **backend_options)
    return output, h_n


def rnn(params, x, hx=None, *, cell: str, lengths=None, num_layers: int = 1, bidirectional: bool = False,
        batch_first: bool = False, proj_size: int = 0, backend: str | None = None, impl: str | None = None,
        dropout: float = 0.0, dropout_key=None, dtype=None, **backend_options):
    """Any catalogue cell (`shared.cells`) with the layer/direction/lengths machinery of `lstm`.

    `params` holds the canonical names plus the cell's extras (`<prefix>_l{k}[_reverse]`,
    `RNNSpec(cell, ...).param_shapes()`).  An lstm-family cell (state h, c) takes
    `hx = (h0, c0)` and returns `(output, (h_n, c_n))`; a gru-family cell takes `hx = h0`
    and returns `(output, h_n)`.  The `scan` backend runs every cell with a JAX step; the
    others, the cells their `CAPABILITIES` name.
    """
    has_cell_state = get_cell(cell).has_cell_state  # an unknown cell raises naming the catalogue
    output, h_n, c_n = run(cell, params, x, hx, lengths=lengths, num_layers=num_layers, bidirectional=bidirectional,
                           batch_first=batch_first, proj_size=proj_size, backend=resolve_backend(backend, impl),
                           dropout=dropout, dropout_key=dropout_key, dtype=dtype, **backend_options)
    return (output, (h_n, c_n)) if has_cell_state else (output, h_n)
