"""Helpers several JAX backends share: option checks, Flax carry conversion, zeroing outputs past a length."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .. import cells

LSTM_CELL_TYPES = ("OptimizedLSTMCell", "LSTMCell")  # the Flax LSTM cells the flax backends can run


def check_unroll(unroll) -> None:
    if isinstance(unroll, bool) or not isinstance(unroll, int) or unroll < 1:
        raise ValueError(f"unroll must be an integer >= 1, got {unroll!r}")


def check_cell_type(cell: cells.JaxCell, cell_type: str) -> None:
    """A Flax LSTM cell type for an LSTM (a GRU is always Flax's GRUCell)."""
    if cell.has_cell_state and cell_type not in LSTM_CELL_TYPES:
        raise ValueError(f"cell_type must be one of {LSTM_CELL_TYPES} for an LSTM, got {cell_type!r}")


def zero_past_lengths(output: jax.Array, lengths: jax.Array | None) -> jax.Array:
    """output (T, B, N) with zeros past each length (for kernels that leave it unspecified there)."""
    if lengths is None:
        return output
    return jnp.where(cells.valid_steps(lengths, output.shape[0]), output, jnp.zeros((), output.dtype))


def to_carry(cell: cells.JaxCell, state: tuple):
    """PyTorch's state (h, c) or (h,) -> Flax's carry (c, h) or h."""
    return (state[1], state[0]) if cell.has_cell_state else state[0]


def from_carry(cell: cells.JaxCell, carry) -> tuple:
    """Flax's carry (c, h) or h -> PyTorch's state (h, c) or (h,)."""
    return (carry[1], carry[0]) if cell.has_cell_state else (carry,)


def biases_or_zeros(p) -> tuple[jax.Array, jax.Array]:
    """(b_ih, b_hh) of a LayerParams, zeros when the spec has no biases (Flax cells always have them)."""
    zeros = jnp.zeros((p.w_ih.shape[0],), p.w_ih.dtype)
    return (zeros if p.b_ih is None else p.b_ih), (zeros if p.b_hh is None else p.b_hh)
