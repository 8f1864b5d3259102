"""Helpers several JAX backends share: option checks, the declaration's verdict, output masking."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from shared.capabilities import ANY_CELL, Capabilities

from .. import cells

LSTM_CELL_TYPES = ("OptimizedLSTMCell", "LSTMCell")  # the Flax LSTM cells the flax backends can run


def cell_refusal(label: str, caps: Capabilities, cell: str, runs_it=()) -> str | None:
    """None when `caps` runs `cell`, else why not, starting with `label` (e.g. "jax.cudnn").

    Asked by name only, before the catalogue: a cell no module knows yet is refused, not an error.
    """
    if caps.cells == ANY_CELL and not cells.has_cell(cell):
        return f"cell {cell!r} has no JAX step; add one with jax_impl.register_cell({cell!r}, step)"
    return caps.refuse_cell(label, cell, cells.has_cell, runs_it)


def declared_reason(name: str, caps: Capabilities, spec, *, lengths: bool = False, dtype: str = "float32",
                    device: str | None = None) -> str | None:
    """The declaration's verdict on a configuration (None: `jax.<name>` computes it)."""
    return (cell_refusal(f"jax.{name}", caps, spec.cell)
            or caps.unsupported_reason(f"jax.{name}", spec, lengths=lengths, dtype=dtype, device=device,
                                       has_step=cells.has_cell))


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
    return jnp.where(cells.valid_steps(output.shape[0], lengths), output, jnp.zeros((), output.dtype))


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
